// Ethernet / 802.1Q / IPv4 / UDP parsing and header building (see packet.hpp).
//
// Every header field is read with the explicit big-endian loads of bytes.hpp,
// only after checking that the field lies inside `head`: headers sit at
// unaligned offsets and nothing from the wire is trusted
// (docs/architecture.md, "Nothing from the wire is trusted").
//
// Order of checks, and therefore which error a frame with several defects gets:
//   1. link header and up to two VLAN tags        truncated_ethernet, too_many_vlans
//      (raw IP: none; an IPv6 version nibble is not_ipv4)
//   2. EtherType                                  not_ipv4
//   3. fixed 20-byte IPv4 header captured          truncated_ipv4
//   4. version, IHL, IHL*4 bytes captured          bad_ip_version, bad_ip_header_length,
//                                                  truncated_ipv4
//   5. IPv4 total length vs IHL*4 and the capture  bad_ip_total_length
//   6. protocol                                    not_udp
//   7. fragmentation                               ip_fragment
//   8. UDP header inside the IP datagram           truncated_udp
//   9. UDP length vs the IP payload length         bad_udp_length
// At each step where a header must be read, a header that fits in the captured
// bytes but not in `head` is reported as headers_split instead of a truncation.
//
// IPv4 header checksum and UDP checksum are deliberately NOT verified: the
// capture NICs do checksum offload and deliver the frames that the kernel would
// accept, verifying again in software costs time on the hot path, and a frame
// with a bad checksum that did reach us is still length-consistent (all lengths
// are checked independently above), so parsing it can never read out of bounds.
#include "formats/packet.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ibvcap {

std::string_view to_string(PacketError error) {
    switch (error) {
        case PacketError::none:
            return "none";
        case PacketError::not_ipv4:
            return "not_ipv4";
        case PacketError::not_udp:
            return "not_udp";
        case PacketError::truncated_ethernet:
            return "truncated_ethernet";
        case PacketError::too_many_vlans:
            return "too_many_vlans";
        case PacketError::truncated_ipv4:
            return "truncated_ipv4";
        case PacketError::bad_ip_version:
            return "bad_ip_version";
        case PacketError::bad_ip_header_length:
            return "bad_ip_header_length";
        case PacketError::bad_ip_total_length:
            return "bad_ip_total_length";
        case PacketError::ip_fragment:
            return "ip_fragment";
        case PacketError::truncated_udp:
            return "truncated_udp";
        case PacketError::bad_udp_length:
            return "bad_udp_length";
        case PacketError::headers_split:
            return "headers_split";
    }
    return "unknown";  // a value outside the enumeration (e.g. a cast from a bad integer)
}

bool is_malformed(PacketError error) {
    switch (error) {
        case PacketError::none:
        case PacketError::not_ipv4:
        case PacketError::not_udp:
            return false;
        case PacketError::truncated_ethernet:
        case PacketError::too_many_vlans:
        case PacketError::truncated_ipv4:
        case PacketError::bad_ip_version:
        case PacketError::bad_ip_header_length:
        case PacketError::bad_ip_total_length:
        case PacketError::ip_fragment:
        case PacketError::truncated_udp:
        case PacketError::bad_udp_length:
        case PacketError::headers_split:
            return true;
    }
    return true;  // not a known value: certainly not a good frame
}

namespace {

// Whether the bytes [0, end) can be read: `truncated` when they were not even
// captured, headers_split when they were captured but lie (partly) outside the
// first piece, none when they are all in `head`.
PacketError need(std::uint64_t end, std::uint64_t head_bytes, std::uint64_t captured_bytes,
                 PacketError truncated) {
    if (end > captured_bytes) {
        return truncated;
    }
    if (end > head_bytes) {
        return PacketError::headers_split;
    }
    return PacketError::none;
}

// The link layer and VLAN tags (packet.hpp, LinkType): where the IPv4
// header starts (`ip`), and the tags' ids into `pkt`. Shared by the parser
// and peek_ipv4_destination, so both read a frame's framing the same way.
PacketError walk_link(const std::uint8_t* p, std::uint64_t head_bytes, std::uint64_t captured_bytes,
                      LinkType link, UdpPacket& pkt, std::size_t& ip) {
    // `type_at` is the offset of the 2-byte protocol (EtherType) field,
    // `next` where what it announces starts: a tag (TCI, then the next type
    // field) or the IP header.
    ip = 0;
    std::size_t type_at = 12;  // Ethernet: after the two MACs
    std::size_t next = kEthernetHeaderBytes;
    if (link == LinkType::linux_sll) {
        type_at = kLinuxSllHeaderBytes - 2;
        next = kLinuxSllHeaderBytes;
    } else if (link == LinkType::linux_sll2) {
        type_at = 0;
        next = kLinuxSll2HeaderBytes;
    }
    if (link == LinkType::raw_ip) {
        // No link header: IPv6 (which LINKTYPE_RAW may carry) is not for us;
        // anything else goes through the IPv4 checks below.
        if (head_bytes >= 1 && (p[0] >> 4) == 6) {
            return PacketError::not_ipv4;
        }
    } else {
        if (const PacketError e =
                need(next, head_bytes, captured_bytes, PacketError::truncated_ethernet);
            e != PacketError::none) {
            return e;
        }
        std::uint16_t ethertype = load_be16(p + type_at);
        while (ethertype == kEtherTypeVlan || ethertype == kEtherTypeQinQ) {
            if (pkt.vlan_count == kMaxVlanTags) {
                return PacketError::too_many_vlans;
            }
            // The tag is TPID (already read) + TCI, then the next type field.
            if (const PacketError e = need(next + kVlanTagBytes, head_bytes, captured_bytes,
                                           PacketError::truncated_ethernet);
                e != PacketError::none) {
                return e;
            }
            const std::uint16_t tci = load_be16(p + next);
            pkt.vlan_ids[pkt.vlan_count] = static_cast<std::uint16_t>(tci & 0x0FFFu);
            ++pkt.vlan_count;
            type_at = next + 2;
            next += kVlanTagBytes;
            ethertype = load_be16(p + type_at);
        }
        if (ethertype != kEtherTypeIpv4) {
            return PacketError::not_ipv4;
        }
        ip = next;
    }
    return PacketError::none;
}

}  // namespace

// `captured_bytes` smaller than head.size() (a caller passing a whole receive
// slot as `head` and the completion's byte_len as `captured_bytes`) means the
// bytes of `head` past captured_bytes were not received: they are stale, so the
// smaller of the two is authoritative and the parser looks at
// min(head.size(), captured_bytes) bytes of `head` only.
PacketError parse_udp_frame_general(Bytes head, std::uint64_t captured_bytes, UdpPacket& out,
                                    LinkType link) {
    const std::uint64_t head_bytes = std::min<std::uint64_t>(head.size(), captured_bytes);
    const std::uint8_t* const p = head.data();
    UdpPacket pkt;

    std::size_t ip = 0;
    if (const PacketError e = walk_link(p, head_bytes, captured_bytes, link, pkt, ip);
        e != PacketError::none) {
        return e;
    }

    // IPv4: the fixed header first, then what IHL says.
    if (const PacketError e =
            need(ip + kIpv4MinHeaderBytes, head_bytes, captured_bytes, PacketError::truncated_ipv4);
        e != PacketError::none) {
        return e;
    }
    const std::uint8_t version_ihl = p[ip];
    if ((version_ihl >> 4) != 4) {
        return PacketError::bad_ip_version;
    }
    const std::size_t ip_header_bytes = std::size_t{version_ihl & 0x0Fu} * 4;
    if (ip_header_bytes < kIpv4MinHeaderBytes) {
        return PacketError::bad_ip_header_length;
    }
    // The options are never read, so they only need to have been captured; they
    // need to be in `head` only when the UDP header after them is (step 8).
    if (ip + ip_header_bytes > captured_bytes) {
        return PacketError::truncated_ipv4;
    }
    const std::size_t ip_total = load_be16(p + ip + 2);
    if (ip_total < ip_header_bytes || ip + ip_total > captured_bytes) {
        return PacketError::bad_ip_total_length;
    }
    // Protocol before fragmentation: a fragment of anything but UDP is simply
    // "not for us"; a fragment of a UDP datagram is an unusable datagram.
    if (p[ip + 9] != kIpProtoUdp) {
        return PacketError::not_udp;
    }
    const std::uint16_t flags_fragment = load_be16(p + ip + 6);
    if ((flags_fragment & (kIpMoreFragments | kIpFragmentOffsetMask)) != 0) {
        return PacketError::ip_fragment;
    }

    // UDP: the header must lie inside the IP datagram (not in Ethernet padding
    // after it); ip_total <= captured_bytes - ip was checked above, so inside
    // the datagram implies captured.
    const std::size_t udp = ip + ip_header_bytes;
    const std::size_t ip_payload = ip_total - ip_header_bytes;
    if (ip_payload < kUdpHeaderBytes) {
        return PacketError::truncated_udp;
    }
    if (udp + kUdpHeaderBytes > head_bytes) {
        return PacketError::headers_split;
    }
    const std::size_t udp_length = load_be16(p + udp + 4);
    if (udp_length < kUdpHeaderBytes || udp_length != ip_payload) {
        return PacketError::bad_udp_length;
    }

    pkt.ip_options = ip_header_bytes > kIpv4MinHeaderBytes;
    pkt.src_ip = load_be32(p + ip + 12);
    pkt.dst_ip = load_be32(p + ip + 16);
    pkt.src_port = load_be16(p + udp);
    pkt.dst_port = load_be16(p + udp + 2);
    pkt.ip_offset = static_cast<std::uint32_t>(ip);
    pkt.payload_offset = static_cast<std::uint32_t>(udp + kUdpHeaderBytes);
    pkt.payload_bytes = static_cast<std::uint32_t>(udp_length - kUdpHeaderBytes);
    out = pkt;
    return PacketError::none;
}

Ipv4Destination peek_ipv4_destination(Bytes head, std::uint64_t captured_bytes, LinkType link) {
    const std::uint64_t n = std::min<std::uint64_t>(head.size(), captured_bytes);
    const std::uint8_t* const p = head.data();
    Ipv4Destination out;
    // The framing as parse_udp_frame reads it; any fault in it: no answer.
    UdpPacket framing;
    std::size_t ip = 0;
    if (walk_link(p, n, n, link, framing, ip) != PacketError::none) {
        return out;
    }
    if (ip + kIpv4MinHeaderBytes > n || (p[ip] >> 4) != 4) {
        return out;
    }
    out.has_ip = true;
    out.ip = load_be32(p + ip + 16);
    const std::size_t ihl = std::size_t{p[ip] & 0x0Fu} * 4;
    const std::size_t udp = ip + ihl;
    if (p[ip + 9] == kIpProtoUdp && (load_be16(p + ip + 6) & kIpFragmentOffsetMask) == 0 &&
        ihl >= kIpv4MinHeaderBytes && udp + 4 <= n) {
        out.has_port = true;
        out.port = load_be16(p + udp + 2);
    }
    return out;
}

void multicast_mac(std::uint32_t group, std::uint8_t mac[6]) {
    mac[0] = 0x01;
    mac[1] = 0x00;
    mac[2] = 0x5e;
    mac[3] = static_cast<std::uint8_t>((group >> 16) & 0x7Fu);
    mac[4] = static_cast<std::uint8_t>((group >> 8) & 0xFFu);
    mac[5] = static_cast<std::uint8_t>(group & 0xFFu);
}

std::uint16_t internet_checksum(Bytes bytes) {
    // 64-bit accumulator: no carry is lost for any span shorter than 2^48 words.
    std::uint64_t sum = 0;
    std::size_t i = 0;
    for (; i + 1 < bytes.size(); i += 2) {
        sum += load_be16(bytes.data() + i);
    }
    if (i < bytes.size()) {
        sum += std::uint64_t{bytes[i]} << 8;  // odd trailing byte, padded with a zero
    }
    while ((sum >> 16) != 0) {
        sum = (sum & 0xFFFFu) + (sum >> 16);
    }
    return static_cast<std::uint16_t>(~sum & 0xFFFFu);
}

// Throws std::length_error when `out` is too small for the headers or when the
// payload does not fit in one IPv4 datagram (total length > 65535), and
// std::invalid_argument for a VLAN id above 4095. The destination is not
// checked to be a multicast group: multicast_mac() is applied to whatever it is.
std::size_t build_udp_headers(const UdpHeaderSpec& spec, std::uint32_t udp_payload_bytes,
                              MutableBytes out) {
    const bool tagged = spec.vlan_id >= 0;
    if (spec.vlan_id > 0x0FFF) {
        throw std::invalid_argument("build_udp_headers: VLAN id " + std::to_string(spec.vlan_id) +
                                    " does not fit in 12 bits");
    }
    const std::size_t header_bytes = kPlainUdpPayloadOffset + (tagged ? kVlanTagBytes : 0);
    if (out.size() < header_bytes) {
        throw std::length_error("build_udp_headers: " + std::to_string(out.size()) +
                                "-byte buffer, headers need " + std::to_string(header_bytes));
    }
    constexpr std::uint32_t kMaxUdpPayload =
        static_cast<std::uint32_t>(0xFFFF - kIpv4MinHeaderBytes - kUdpHeaderBytes);
    if (udp_payload_bytes > kMaxUdpPayload) {
        throw std::length_error("build_udp_headers: UDP payload of " +
                                std::to_string(udp_payload_bytes) +
                                " bytes does not fit in an IPv4 datagram");
    }

    std::uint8_t* const p = out.data();
    multicast_mac(spec.dst_ip, p);
    std::copy(std::begin(spec.src_mac), std::end(spec.src_mac), p + 6);
    std::size_t at = 12;
    if (tagged) {
        store_be16(p + at, kEtherTypeVlan);
        store_be16(p + at + 2, static_cast<std::uint16_t>(spec.vlan_id));  // PCP 0, DEI 0
        at += kVlanTagBytes;
    }
    store_be16(p + at, kEtherTypeIpv4);
    at += 2;

    std::uint8_t* const ip = p + at;
    ip[0] = 0x45;  // version 4, IHL 5
    ip[1] = 0x00;  // DSCP 0, ECN 0
    store_be16(ip + 2, static_cast<std::uint16_t>(kIpv4MinHeaderBytes + kUdpHeaderBytes +
                                                  udp_payload_bytes));
    store_be16(ip + 4, spec.ip_id);
    store_be16(ip + 6, kIpDontFragment);  // CODIF senders never fragment
    ip[8] = spec.ttl;
    ip[9] = kIpProtoUdp;
    store_be16(ip + 10, 0);
    store_be32(ip + 12, spec.src_ip);
    store_be32(ip + 16, spec.dst_ip);
    store_be16(ip + 10, internet_checksum(Bytes(ip, kIpv4MinHeaderBytes)));
    at += kIpv4MinHeaderBytes;

    std::uint8_t* const udp = p + at;
    store_be16(udp, spec.src_port);
    store_be16(udp + 2, spec.dst_port);
    store_be16(udp + 4, static_cast<std::uint16_t>(kUdpHeaderBytes + udp_payload_bytes));
    store_be16(udp + 6, 0);  // no UDP checksum (allowed for IPv4)
    at += kUdpHeaderBytes;
    return at;
}

}  // namespace ibvcap
