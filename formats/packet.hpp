// Ethernet / 802.1Q / IPv4 / UDP parsing of one received frame (or, from a
// capture file, a Linux cooked or raw-IP frame: LinkType).
//
// Nothing here trusts the wire: every length is checked against the bytes that
// were captured, and against each other (IP total length vs frame, UDP length vs
// IP payload). A frame may arrive in two pieces (the verbs header/payload split:
// SGE0 in host memory, SGE1 elsewhere); the parser only needs the first piece to
// hold the Ethernet, IP and UDP headers, and says so when it does not.
#pragma once

#include <cstdint>
#include <string_view>

#include "formats/bytes.hpp"

namespace ibvcap {

inline constexpr std::size_t kEthernetHeaderBytes = 14;
inline constexpr std::size_t kVlanTagBytes = 4;
inline constexpr std::size_t kMaxVlanTags = 2;
inline constexpr std::size_t kIpv4MinHeaderBytes = 20;
inline constexpr std::size_t kIpv4MaxHeaderBytes = 60;
inline constexpr std::size_t kUdpHeaderBytes = 8;
// Ethernet + IPv4 + UDP without VLAN tags or IP options: where a stream's
// header starts in the common case (42).
inline constexpr std::size_t kPlainUdpPayloadOffset =
    kEthernetHeaderBytes + kIpv4MinHeaderBytes + kUdpHeaderBytes;

inline constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr std::uint16_t kEtherTypeVlan = 0x8100;  // 802.1Q
inline constexpr std::uint16_t kEtherTypeQinQ = 0x88A8;  // 802.1ad outer tag
inline constexpr std::uint8_t kIpProtoUdp = 17;
// IPv4 flags and fragment offset (the 16 bits at header offset 6).
inline constexpr std::uint16_t kIpMoreFragments = 0x2000;
inline constexpr std::uint16_t kIpFragmentOffsetMask = 0x1FFF;
inline constexpr std::uint16_t kIpDontFragment = 0x4000;

// The link-layer header a frame starts with: Ethernet from the NIC and from
// most capture files; the others only from capture files (ibvcap read).
// Layouts from libpcap's pcap/sll.h and tcpdump's print-sll.c
// (https://www.tcpdump.org/linktypes/LINKTYPE_LINUX_SLL.html, ..._SLL2.html):
//   linux_sll   16 bytes: packet type, ARPHRD type, address length, 8-byte
//               address, then the protocol (EtherType, big-endian) at 14
//   linux_sll2  20 bytes: the protocol at 0, then reserved, interface index,
//               ARPHRD type, packet type, address length, 8-byte address
//   raw_ip      none: the frame starts at the IP header (LINKTYPE_RAW, which
//               may also carry IPv6, and LINKTYPE_IPV4)
// In both cooked forms an 802.1Q-tagged frame has protocol 0x8100 and the tag
// (TCI, then the inner protocol) right after the header, as in Ethernet.
enum class LinkType : std::uint8_t { ethernet, linux_sll, linux_sll2, raw_ip };
inline constexpr std::size_t kLinuxSllHeaderBytes = 16;
inline constexpr std::size_t kLinuxSll2HeaderBytes = 20;

// Why a frame was not a well-formed IPv4/UDP datagram. The first group means
// "not for us" (counted as non_codif: not a stream's frame), the second
// "damaged" (counted malformed).
enum class PacketError : std::uint8_t {
    none,
    // not IPv4/UDP: counted as non_codif (not a stream's frame)
    not_ipv4,  // EtherType is not IPv4 (ARP, IPv6, LLDP, ...)
    not_udp,   // IPv4 protocol is not UDP (IGMP, ICMP, TCP, ...)
    // damaged or unusable: counted as malformed
    truncated_ethernet,    // link-layer header (14 bytes Ethernet) or a VLAN tag cut short
    too_many_vlans,        // more than two 802.1Q/802.1ad tags
    truncated_ipv4,        // IPv4 header does not fit in the captured bytes
    bad_ip_version,        // version nibble != 4
    bad_ip_header_length,  // IHL < 5
    bad_ip_total_length,   // total length < IHL*4, or larger than the frame
    ip_fragment,           // MF set or fragment offset != 0: not reassembled
    truncated_udp,         // UDP header does not fit
    bad_udp_length,        // UDP length < 8 or disagrees with the IP payload length
    headers_split,         // headers run past the first piece of a split frame
};
std::string_view to_string(PacketError error);
// True for the errors that mean "damaged" rather than "some other protocol".
bool is_malformed(PacketError error);

struct UdpPacket {
    std::uint8_t vlan_count = 0;
    std::uint16_t vlan_ids[kMaxVlanTags] = {0, 0};  // 12-bit VLAN IDs, outermost first
    bool ip_options = false;                        // IHL > 5
    std::uint32_t src_ip = 0;                       // host byte order
    std::uint32_t dst_ip = 0;                       // host byte order
    std::uint16_t src_port = 0;
    std::uint16_t dst_port = 0;
    std::uint32_t ip_offset = 0;       // IPv4 header offset in the frame
    std::uint32_t payload_offset = 0;  // UDP payload offset in the frame
    std::uint32_t payload_bytes = 0;   // UDP payload length (from the UDP header, checked)
};

// Parse a frame. `head` holds the first bytes of the frame (all of it when the
// frame is contiguous); `captured_bytes` is the total number of bytes captured
// (head plus any second piece). Padding after the IP datagram (short frames are
// padded to 60 bytes on the wire) is allowed. `link`: the header the frame
// starts with; the offsets in `out` count from the frame's first byte whatever
// it is. On error `out` is unspecified.
//
// Inline: the common frame (untagged Ethernet, IPv4 without options, UDP) is
// parsed here, every check of the general parser made in one pass over its
// fixed offsets (the per-packet path of every source: issue 18's profile
// had the out-of-line parser at a quarter of the demux's time); any other
// frame, and any that fails a check, goes to the general parser, which gives
// the verdict and the error. test_packet's FastPathAgreesWithTheGeneralParser
// holds the two to the same answers.
PacketError parse_udp_frame_general(Bytes head, std::uint64_t captured_bytes, UdpPacket& out,
                                    LinkType link = LinkType::ethernet);
[[gnu::always_inline]] inline PacketError parse_udp_frame(Bytes head, std::uint64_t captured_bytes,
                                                          UdpPacket& out,
                                                          LinkType link = LinkType::ethernet) {
    constexpr std::size_t kIp = kEthernetHeaderBytes;
    constexpr std::size_t kUdp = kIp + kIpv4MinHeaderBytes;
    const std::uint8_t* const p = head.data();
    // The fixed headers lie in `head` and were captured (the general parser
    // reads min(head.size(), captured_bytes) bytes of head).
    if (link == LinkType::ethernet && head.size() >= kPlainUdpPayloadOffset &&
        captured_bytes >= kPlainUdpPayloadOffset && load_be16(p + 12) == kEtherTypeIpv4 &&
        p[kIp] == 0x45 /* version 4, IHL 5 */ && p[kIp + 9] == kIpProtoUdp) {
        const std::size_t ip_total = load_be16(p + kIp + 2);
        const std::size_t udp_length = load_be16(p + kUdp + 4);
        const bool fragment =
            (load_be16(p + kIp + 6) & (kIpMoreFragments | kIpFragmentOffsetMask)) != 0;
        // IP total length: the header and a UDP header at least, all captured;
        // the UDP length is exactly the IP payload.
        if (ip_total >= kIpv4MinHeaderBytes + kUdpHeaderBytes && kIp + ip_total <= captured_bytes &&
            !fragment && udp_length == ip_total - kIpv4MinHeaderBytes) {
            out.vlan_count = 0;
            out.vlan_ids[0] = 0;
            out.vlan_ids[1] = 0;
            out.ip_options = false;
            out.src_ip = load_be32(p + kIp + 12);
            out.dst_ip = load_be32(p + kIp + 16);
            out.src_port = load_be16(p + kUdp);
            out.dst_port = load_be16(p + kUdp + 2);
            out.ip_offset = static_cast<std::uint32_t>(kIp);
            out.payload_offset = static_cast<std::uint32_t>(kPlainUdpPayloadOffset);
            out.payload_bytes = static_cast<std::uint32_t>(udp_length - kUdpHeaderBytes);
            return PacketError::none;
        }
    }
    return parse_udp_frame_general(head, captured_bytes, out, link);
}

// Where a frame was addressed, as far as its first piece tells, for a frame
// parse_udp_frame refused (a fragment, a datagram cut short by the capture, a
// bad length): `has_ip` when the Ethernet header, its VLAN tags (at most two)
// and the 20-byte IPv4 header lie in `head` with EtherType IPv4 and version 4;
// `has_port` when, besides, the protocol is UDP, the datagram is not a later
// fragment (offset 0), IHL is at least 5 and the UDP destination port lies in
// `head`. Nothing else is checked: the answer only says who it was for.
struct Ipv4Destination {
    bool has_ip = false;
    bool has_port = false;
    std::uint32_t ip = 0;  // host byte order
    std::uint16_t port = 0;
};
Ipv4Destination peek_ipv4_destination(Bytes head, std::uint64_t captured_bytes,
                                      LinkType link = LinkType::ethernet);

// Build Ethernet (+ optional 802.1Q tag) + IPv4 + UDP headers for a multicast
// datagram into `out`; returns the header length (42, or 46 with a tag).
// The destination MAC is the IPv4 multicast MAC (01:00:5e + low 23 bits of the
// group), the IPv4 header checksum is filled in, the UDP checksum is 0 (allowed
// for IPv4, and what NIC-less senders of CODIF do). `vlan_id` < 0: no tag.
struct UdpHeaderSpec {
    std::uint8_t src_mac[6] = {0x02, 0, 0, 0, 0, 1};
    std::uint32_t src_ip = 0;  // host byte order
    std::uint32_t dst_ip = 0;  // host byte order
    std::uint16_t src_port = 0;
    std::uint16_t dst_port = 0;
    std::uint8_t ttl = 1;
    int vlan_id = -1;
    std::uint16_t ip_id = 0;
};
std::size_t build_udp_headers(const UdpHeaderSpec& spec, std::uint32_t udp_payload_bytes,
                              MutableBytes out);

// The Ethernet multicast MAC of an IPv4 group: 01:00:5e + low 23 bits.
void multicast_mac(std::uint32_t group, std::uint8_t mac[6]);
// RFC 1071 Internet checksum over `bytes` (used for the IPv4 header).
std::uint16_t internet_checksum(Bytes bytes);

}  // namespace ibvcap
