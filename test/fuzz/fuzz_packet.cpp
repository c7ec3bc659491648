// Fuzz target: the Ethernet / 802.1Q / IPv4 / UDP parser (formats/packet.hpp).
//
// Input: [0] mode; [1, 3) LE16 head length; [3, 5) LE16 captured value; the
// rest is the frame. The head (the first piece of the frame, SGE0 with the
// verbs header/payload split) is the first min(head length, frame size) bytes,
// copied to a buffer of exactly that size so that AddressSanitizer catches a
// read past it. `captured_bytes` by mode & 3:
//   0: the frame size (a frame split into head + the rest)
//   1: the captured value as is (may be below the head size: stale slot bytes)
//   2: head size + the captured value (bytes captured beyond the head)
//   3: 0xFFFFFFFF'00000000 + the captured value (absurdly large)
//
// Checks on success: payload_offset >= 42, payload_offset + payload_bytes <=
// captured_bytes, the UDP header inside the head, the offsets consistent with
// the VLAN count and the IP header length, and the same result from the frame
// laid out contiguously or with the head cut to captured_bytes, and the same
// result (error, and fields on success) from the inline fast path and the
// general parser (parse_udp_frame_general). On failure:
// headers_split only when the head holds fewer bytes than were captured.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "formats/packet.hpp"
#include "fuzz_common.hpp"
#include "fuzz_entries.hpp"

namespace {

using ibvcap::Bytes;
using ibvcap::PacketError;
using ibvcap::UdpPacket;

bool same(const UdpPacket& a, const UdpPacket& b) {
    return a.vlan_count == b.vlan_count && a.vlan_ids[0] == b.vlan_ids[0] &&
           a.vlan_ids[1] == b.vlan_ids[1] && a.ip_options == b.ip_options && a.src_ip == b.src_ip &&
           a.dst_ip == b.dst_ip && a.src_port == b.src_port && a.dst_port == b.dst_port &&
           a.ip_offset == b.ip_offset && a.payload_offset == b.payload_offset &&
           a.payload_bytes == b.payload_bytes;
}

void check_classification(PacketError err) {
    FUZZ_CHECK(!ibvcap::to_string(err).empty());
    const bool not_for_us =
        err == PacketError::none || err == PacketError::not_ipv4 || err == PacketError::not_udp;
    FUZZ_CHECK(ibvcap::is_malformed(err) == !not_for_us);
}

void check_packet(const UdpPacket& pkt, std::uint64_t head_size, std::uint64_t captured) {
    const std::uint64_t head_bytes = std::min(head_size, captured);
    FUZZ_CHECK(pkt.payload_offset >= ibvcap::kPlainUdpPayloadOffset);
    FUZZ_CHECK(std::uint64_t{pkt.payload_offset} + pkt.payload_bytes <= captured);
    // The Ethernet, IP and UDP headers were all read from the head.
    FUZZ_CHECK(pkt.payload_offset <= head_bytes);
    FUZZ_CHECK(pkt.vlan_count <= ibvcap::kMaxVlanTags);
    FUZZ_CHECK(pkt.ip_offset ==
               ibvcap::kEthernetHeaderBytes + ibvcap::kVlanTagBytes * pkt.vlan_count);
    for (std::size_t i = 0; i < ibvcap::kMaxVlanTags; ++i) {
        FUZZ_CHECK(pkt.vlan_ids[i] <= 0x0FFF);
        FUZZ_CHECK(i < pkt.vlan_count || pkt.vlan_ids[i] == 0);
    }
    const std::uint32_t headers = pkt.payload_offset - pkt.ip_offset;  // IP + UDP headers
    FUZZ_CHECK(headers >= ibvcap::kIpv4MinHeaderBytes + ibvcap::kUdpHeaderBytes);
    FUZZ_CHECK(headers <= ibvcap::kIpv4MaxHeaderBytes + ibvcap::kUdpHeaderBytes);
    FUZZ_CHECK(headers % 4 == 0);
    FUZZ_CHECK(pkt.ip_options == (headers > ibvcap::kIpv4MinHeaderBytes + ibvcap::kUdpHeaderBytes));
}

}  // namespace

int ibvcap_fuzz_packet(const std::uint8_t* data, std::size_t size) {
    ibvcap::fuzz::Reader in(data, size);
    const std::uint8_t mode = in.u8();
    const std::uint16_t head_field = in.u16();
    const std::uint16_t captured_field = in.u16();
    const Bytes frame = in.rest();

    const std::size_t head_size = std::min<std::size_t>(head_field, frame.size());
    const std::vector<std::uint8_t> head(frame.begin(),
                                         frame.begin() + static_cast<std::ptrdiff_t>(head_size));
    std::uint64_t captured = 0;
    switch (mode & 3u) {
        case 0:
            captured = frame.size();
            break;
        case 1:
            captured = captured_field;
            break;
        case 2:
            captured = head_size + captured_field;
            break;
        default:
            captured = 0xFFFFFFFF'00000000u + captured_field;
            break;
    }

    UdpPacket pkt;
    const PacketError err = ibvcap::parse_udp_frame(Bytes(head.data(), head.size()), captured, pkt);
    check_classification(err);
    // The inline fast path and the general parser give the same answer.
    UdpPacket general;
    FUZZ_CHECK(
        ibvcap::parse_udp_frame_general(Bytes(head.data(), head.size()), captured, general) == err);
    FUZZ_CHECK(err != PacketError::none || same(general, pkt));
    // Where the frame was going, as the demux asks for a refused frame: read
    // within the head only, and for a well-formed frame the parser's answer.
    const ibvcap::Ipv4Destination dest =
        ibvcap::peek_ipv4_destination(Bytes(head.data(), head.size()), captured);
    FUZZ_CHECK(dest.has_ip || !dest.has_port);
    if (err == PacketError::none) {
        FUZZ_CHECK(dest.has_ip && dest.ip == pkt.dst_ip);
        FUZZ_CHECK(dest.has_port && dest.port == pkt.dst_port);
    }
    if (err == PacketError::headers_split) {
        FUZZ_CHECK(head_size < captured);
    }
    if (err != PacketError::none) {
        return 0;
    }
    check_packet(pkt, head_size, captured);

    // Bytes of the head past captured_bytes are stale: cutting them off changes nothing.
    if (head_size > captured) {
        UdpPacket cut;
        FUZZ_CHECK(ibvcap::parse_udp_frame(Bytes(head.data(), static_cast<std::size_t>(captured)),
                                           captured, cut) == PacketError::none);
        FUZZ_CHECK(same(cut, pkt));
    }
    // The parser read nothing past the head: the frame laid out contiguously,
    // whatever the bytes after the head, parses the same.
    if (captured <= (std::uint64_t{1} << 17)) {
        std::vector<std::uint8_t> whole(static_cast<std::size_t>(captured), 0xA5);
        std::copy_n(head.begin(), std::min<std::size_t>(head.size(), whole.size()), whole.begin());
        UdpPacket contiguous;
        FUZZ_CHECK(ibvcap::parse_udp_frame(Bytes(whole.data(), whole.size()), captured,
                                           contiguous) == PacketError::none);
        FUZZ_CHECK(same(contiguous, pkt));
    }
    return 0;
}

IBVCAP_FUZZ_TARGET(ibvcap_fuzz_packet)
