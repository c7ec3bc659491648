// Tests for formats/packet.hpp: Ethernet / VLAN / IPv4 / UDP parsing of
// untrusted frames and building of multicast UDP headers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/packet.hpp"

namespace ibvcap {
namespace {

using Frame = std::vector<std::uint8_t>;

// A multicast CODIF datagram as it appears on the wire, written out by hand:
// 10.0.0.11:5000 -> 239.17.0.1:36001, TTL 4, IP id 0x1234, DF, no VLAN, no
// options, 16 bytes of payload (a stand-in for a CODIF frame). The IPv4 header
// checksum 0x6b70 was computed by hand:
//   4500 + 002c + 1234 + 4000 + 0411 + 0000 + 0a00 + 000b + ef11 + 0001 = 0x1948e,
//   folded 0x948e + 0x1 = 0x948f, complemented 0x6b70.
const Frame kFrame = {
    // Ethernet: dst 01:00:5e:11:00:01 (multicast MAC of 239.17.0.1),
    // src 02:00:00:00:00:01, EtherType IPv4
    0x01, 0x00, 0x5e, 0x11, 0x00, 0x01,  //
    0x02, 0x00, 0x00, 0x00, 0x00, 0x01,  //
    0x08, 0x00,                          //
    // IPv4 (offset 14): version 4 IHL 5, DSCP 0, total length 44, id 0x1234,
    // flags DF, TTL 4, protocol 17, checksum 0x6b70, 10.0.0.11 -> 239.17.0.1
    0x45, 0x00, 0x00, 0x2c, 0x12, 0x34, 0x40, 0x00,  //
    0x04, 0x11, 0x6b, 0x70,                          //
    0x0a, 0x00, 0x00, 0x0b,                          //
    0xef, 0x11, 0x00, 0x01,                          //
    // UDP (offset 34): 5000 -> 36001, length 24, checksum 0
    0x13, 0x88, 0x8c, 0xa1, 0x00, 0x18, 0x00, 0x00,  //
    // payload (offset 42), 16 bytes
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,  //
    0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,  //
};
constexpr std::size_t kIp = 14;
constexpr std::size_t kUdp = 34;
constexpr std::uint32_t kSrcIp = 0x0A00000B;  // 10.0.0.11
constexpr std::uint32_t kDstIp = 0xEF110001;  // 239.17.0.1
constexpr std::uint16_t kSrcPort = 5000;
constexpr std::uint16_t kDstPort = 36001;

UdpHeaderSpec frame_spec() {
    UdpHeaderSpec spec;  // default src MAC 02:00:00:00:00:01
    spec.src_ip = kSrcIp;
    spec.dst_ip = kDstIp;
    spec.src_port = kSrcPort;
    spec.dst_port = kDstPort;
    spec.ttl = 4;
    spec.ip_id = 0x1234;
    return spec;
}

PacketError parse(const Frame& frame, UdpPacket& out) {
    return parse_udp_frame(Bytes(frame), frame.size(), out);
}
PacketError parse(const Frame& frame) {
    UdpPacket out;
    return parse(frame, out);
}

std::uint16_t get16(const Frame& f, std::size_t at) {
    return load_be16(f.data() + at);
}
void set16(Frame& f, std::size_t at, std::uint16_t v) {
    store_be16(f.data() + at, v);
}

// Recompute the IPv4 header checksum so that fixtures stay realistic (the
// parser does not verify it).
void fix_ip_checksum(Frame& f, std::size_t ip) {
    const std::size_t ihl_bytes = std::size_t{f[ip] & 0x0Fu} * 4;
    set16(f, ip + 10, 0);
    set16(f, ip + 10, internet_checksum(Bytes(f.data() + ip, ihl_bytes)));
}

// Insert a VLAN tag right after the MAC addresses (so it becomes the outermost).
Frame with_tag(Frame f, std::uint16_t tpid, std::uint16_t tci) {
    const std::uint8_t tag[4] = {
        static_cast<std::uint8_t>(tpid >> 8), static_cast<std::uint8_t>(tpid),
        static_cast<std::uint8_t>(tci >> 8), static_cast<std::uint8_t>(tci)};
    f.insert(f.begin() + 12, std::begin(tag), std::end(tag));
    return f;
}

// Give the IPv4 header at `ip` (which must have IHL 5) `ihl` 32-bit words by
// inserting NOP options, adjusting IHL and the total length.
Frame with_options(Frame f, std::size_t ip, unsigned ihl) {
    const std::size_t extra = (ihl - 5) * 4;
    f.insert(f.begin() + static_cast<std::ptrdiff_t>(ip + kIpv4MinHeaderBytes), extra,
             std::uint8_t{0x01});
    f[ip] = static_cast<std::uint8_t>(0x40 | ihl);
    set16(f, ip + 2, static_cast<std::uint16_t>(get16(f, ip + 2) + extra));
    fix_ip_checksum(f, ip);
    return f;
}

Frame modified(Frame f, const std::function<void(Frame&)>& change) {
    change(f);
    return f;
}

Frame prefix(const Frame& f, std::size_t n) {
    return Frame(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n));
}

// ---------------------------------------------------------------------------
// Checksum and MAC helpers

TEST(InternetChecksum, Rfc1071Example) {
    // RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to 0xddf2.
    const std::uint8_t data[] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
    EXPECT_EQ(internet_checksum(data), 0x220d);
}

TEST(InternetChecksum, OddLengthPadsTheLastByte) {
    // 0001 + f200 = f201 -> ~ = 0dfe
    const std::uint8_t data[] = {0x00, 0x01, 0xf2};
    EXPECT_EQ(internet_checksum(data), 0x0dfe);
}

TEST(InternetChecksum, EndAroundCarryIsFolded) {
    // ffff + ffff = 1fffe -> fold fffe + 1 = ffff -> ~ = 0000
    const std::uint8_t ones[] = {0xff, 0xff, 0xff, 0xff};
    EXPECT_EQ(internet_checksum(ones), 0x0000);
    // 8000 + 8000 = 10000 -> fold 0000 + 1 = 0001 -> ~ = fffe
    const std::uint8_t halves[] = {0x80, 0x00, 0x80, 0x00};
    EXPECT_EQ(internet_checksum(halves), 0xfffe);
    EXPECT_EQ(internet_checksum(Bytes{}), 0xffff);
}

TEST(InternetChecksum, HeaderWithItsChecksumVerifiesToZero) {
    EXPECT_EQ(internet_checksum(Bytes(kFrame.data() + kIp, kIpv4MinHeaderBytes)), 0);
    Frame zeroed = kFrame;
    set16(zeroed, kIp + 10, 0);
    EXPECT_EQ(internet_checksum(Bytes(zeroed.data() + kIp, kIpv4MinHeaderBytes)), 0x6b70);
}

TEST(MulticastMac, Low23BitsOfTheGroup) {
    std::uint8_t mac[6] = {};
    multicast_mac(kDstIp, mac);
    EXPECT_EQ(Frame(mac, mac + 6), (Frame{0x01, 0x00, 0x5e, 0x11, 0x00, 0x01}));
    multicast_mac(0xEFFFFFFF, mac);  // 239.255.255.255: the top bit of octet 2 is dropped
    EXPECT_EQ(Frame(mac, mac + 6), (Frame{0x01, 0x00, 0x5e, 0x7f, 0xff, 0xff}));
    multicast_mac(0xE0800001, mac);  // 224.128.0.1 shares its MAC with 224.0.0.1
    EXPECT_EQ(Frame(mac, mac + 6), (Frame{0x01, 0x00, 0x5e, 0x00, 0x00, 0x01}));
}

// ---------------------------------------------------------------------------
// Error names and classes

TEST(PacketErrorNames, SnakeCaseEnumeratorNames) {
    EXPECT_EQ(to_string(PacketError::none), "none");
    EXPECT_EQ(to_string(PacketError::not_ipv4), "not_ipv4");
    EXPECT_EQ(to_string(PacketError::not_udp), "not_udp");
    EXPECT_EQ(to_string(PacketError::truncated_ethernet), "truncated_ethernet");
    EXPECT_EQ(to_string(PacketError::too_many_vlans), "too_many_vlans");
    EXPECT_EQ(to_string(PacketError::truncated_ipv4), "truncated_ipv4");
    EXPECT_EQ(to_string(PacketError::bad_ip_version), "bad_ip_version");
    EXPECT_EQ(to_string(PacketError::bad_ip_header_length), "bad_ip_header_length");
    EXPECT_EQ(to_string(PacketError::bad_ip_total_length), "bad_ip_total_length");
    EXPECT_EQ(to_string(PacketError::ip_fragment), "ip_fragment");
    EXPECT_EQ(to_string(PacketError::truncated_udp), "truncated_udp");
    EXPECT_EQ(to_string(PacketError::bad_udp_length), "bad_udp_length");
    EXPECT_EQ(to_string(PacketError::headers_split), "headers_split");
}

TEST(PacketErrorNames, OnlyOtherProtocolsAreNotMalformed) {
    EXPECT_FALSE(is_malformed(PacketError::none));
    EXPECT_FALSE(is_malformed(PacketError::not_ipv4));
    EXPECT_FALSE(is_malformed(PacketError::not_udp));
    for (PacketError e :
         {PacketError::truncated_ethernet, PacketError::too_many_vlans, PacketError::truncated_ipv4,
          PacketError::bad_ip_version, PacketError::bad_ip_header_length,
          PacketError::bad_ip_total_length, PacketError::ip_fragment, PacketError::truncated_udp,
          PacketError::bad_udp_length, PacketError::headers_split}) {
        EXPECT_TRUE(is_malformed(e)) << to_string(e);
    }
}

// ---------------------------------------------------------------------------
// Well-formed frames

TEST(ParseUdpFrame, HandWrittenCodifFrame) {
    UdpPacket p;
    ASSERT_EQ(parse(kFrame, p), PacketError::none);
    EXPECT_EQ(p.vlan_count, 0);
    EXPECT_FALSE(p.ip_options);
    EXPECT_EQ(p.src_ip, kSrcIp);
    EXPECT_EQ(p.dst_ip, kDstIp);
    EXPECT_EQ(p.src_port, kSrcPort);
    EXPECT_EQ(p.dst_port, kDstPort);
    EXPECT_EQ(p.ip_offset, 14u);
    EXPECT_EQ(p.payload_offset, 42u);
    EXPECT_EQ(p.payload_offset, kPlainUdpPayloadOffset);
    EXPECT_EQ(p.payload_bytes, 16u);
    EXPECT_EQ(kFrame[p.payload_offset], 0x00);
    EXPECT_EQ(kFrame[p.payload_offset + p.payload_bytes - 1], 0x0f);
}

// parse_udp_frame parses the common frame inline and hands every other to
// parse_udp_frame_general: both must give the same error and, on success,
// the same fields. Every header byte of the plain frame set to values that
// break one check at a time (and to random ones), each laid out whole, cut
// at every length from 0 to past the headers, and split into a head of
// every size with the rest captured elsewhere.
TEST(ParseUdpFrame, FastPathAgreesWithTheGeneralParser) {
    std::uint32_t seed = 12345;
    const auto next = [&seed] {
        seed = seed * 1664525u + 1013904223u;
        return static_cast<std::uint8_t>(seed >> 24);
    };
    const auto same = [](const UdpPacket& a, const UdpPacket& b) {
        return a.vlan_count == b.vlan_count && a.vlan_ids[0] == b.vlan_ids[0] &&
               a.vlan_ids[1] == b.vlan_ids[1] && a.ip_options == b.ip_options &&
               a.src_ip == b.src_ip && a.dst_ip == b.dst_ip && a.src_port == b.src_port &&
               a.dst_port == b.dst_port && a.ip_offset == b.ip_offset &&
               a.payload_offset == b.payload_offset && a.payload_bytes == b.payload_bytes;
    };
    std::size_t fast_hits = 0;
    std::size_t compared = 0;
    const auto check = [&](const Frame& f, std::size_t head_size, std::uint64_t captured,
                           const std::string& what) {
        const Bytes head(f.data(), std::min(head_size, f.size()));
        UdpPacket a;
        UdpPacket b;
        const PacketError ea = parse_udp_frame(head, captured, a);
        const PacketError eb = parse_udp_frame_general(head, captured, b);
        ++compared;
        ASSERT_EQ(ea, eb) << what << " head " << head_size << " captured " << captured;
        if (ea == PacketError::none) {
            ++fast_hits;
            ASSERT_TRUE(same(a, b)) << what;
        }
    };
    std::vector<Frame> frames = {kFrame, with_tag(kFrame, kEtherTypeVlan, 7),
                                 with_options(kFrame, kIp, 6)};
    for (std::size_t at = 0; at < kPlainUdpPayloadOffset; ++at) {
        for (const std::uint8_t v :
             {std::uint8_t{0x00}, std::uint8_t{0xFF}, static_cast<std::uint8_t>(kFrame[at] ^ 0x01),
              static_cast<std::uint8_t>(kFrame[at] ^ 0x20),
              static_cast<std::uint8_t>(kFrame[at] ^ 0x80), next()}) {
            frames.push_back(modified(kFrame, [&](Frame& f) { f[at] = v; }));
        }
    }
    // IP total and UDP lengths that agree with each other, short and long.
    for (std::uint16_t total = 16; total <= 48; ++total) {
        frames.push_back(modified(kFrame, [&](Frame& f) {
            set16(f, kIp + 2, total);
            set16(f, kUdp + 4, static_cast<std::uint16_t>(total - 20));
        }));
    }
    for (std::size_t i = 0; i < frames.size(); ++i) {
        const Frame& f = frames[i];
        const std::string what = "frame " + std::to_string(i);
        for (std::size_t n = 0; n <= f.size() + 2; ++n) {
            check(f, f.size(), n, what + " cut");  // head past captured: stale bytes
            check(f, n, f.size(), what + " split");
        }
    }
    // Some took each path: the comparison is not vacuous.
    EXPECT_GT(fast_hits, 100u);
    EXPECT_GT(compared, fast_hits * 2);
}

TEST(ParseUdpFrame, EthernetPaddingAfterTheDatagramIsAccepted) {
    Frame padded = kFrame;
    padded.resize(60, 0);  // minimum Ethernet frame without FCS
    UdpPacket p;
    ASSERT_EQ(parse(padded, p), PacketError::none);
    EXPECT_EQ(p.payload_bytes, 16u);

    // An empty datagram (UDP length 8) padded from 42 to 60 bytes.
    Frame empty = prefix(kFrame, 42);
    set16(empty, kIp + 2, 28);
    set16(empty, kUdp + 4, 8);
    fix_ip_checksum(empty, kIp);
    empty.resize(60, 0);
    ASSERT_EQ(parse(empty, p), PacketError::none);
    EXPECT_EQ(p.payload_offset, 42u);
    EXPECT_EQ(p.payload_bytes, 0u);
}

TEST(ParseUdpFrame, OneVlanTagShiftsByFour) {
    for (std::uint16_t tpid : {kEtherTypeVlan, kEtherTypeQinQ}) {
        const Frame f = with_tag(kFrame, tpid, 100);
        UdpPacket p;
        ASSERT_EQ(parse(f, p), PacketError::none) << tpid;
        EXPECT_EQ(p.vlan_count, 1);
        EXPECT_EQ(p.vlan_ids[0], 100);
        EXPECT_EQ(p.ip_offset, 18u);
        EXPECT_EQ(p.payload_offset, 46u);
        EXPECT_EQ(p.payload_bytes, 16u);
        EXPECT_EQ(p.dst_ip, kDstIp);
        EXPECT_EQ(p.dst_port, kDstPort);
    }
}

TEST(ParseUdpFrame, TwoVlanTagsShiftByEight) {
    // 802.1ad outer tag (service VLAN 300) around an 802.1Q tag (VLAN 100).
    const Frame f = with_tag(with_tag(kFrame, kEtherTypeVlan, 100), kEtherTypeQinQ, 300);
    UdpPacket p;
    ASSERT_EQ(parse(f, p), PacketError::none);
    EXPECT_EQ(p.vlan_count, 2);
    EXPECT_EQ(p.vlan_ids[0], 300);  // outermost first
    EXPECT_EQ(p.vlan_ids[1], 100);
    EXPECT_EQ(p.ip_offset, 22u);
    EXPECT_EQ(p.payload_offset, 50u);
    EXPECT_EQ(p.payload_bytes, 16u);
    EXPECT_EQ(p.src_ip, kSrcIp);
    EXPECT_EQ(p.src_port, kSrcPort);

    // Two 802.1Q tags are accepted too.
    const Frame qq = with_tag(with_tag(kFrame, kEtherTypeVlan, 7), kEtherTypeVlan, 8);
    ASSERT_EQ(parse(qq, p), PacketError::none);
    EXPECT_EQ(p.vlan_count, 2);
    EXPECT_EQ(p.vlan_ids[0], 8);
    EXPECT_EQ(p.vlan_ids[1], 7);
}

TEST(ParseUdpFrame, VlanIdIsTheLow12BitsOfTheTci) {
    UdpPacket p;
    ASSERT_EQ(parse(with_tag(kFrame, kEtherTypeVlan, 0xE00A), p), PacketError::none);  // PCP 7
    EXPECT_EQ(p.vlan_ids[0], 10);
    ASSERT_EQ(parse(with_tag(kFrame, kEtherTypeVlan, 0x1FFF), p), PacketError::none);  // DEI
    EXPECT_EQ(p.vlan_ids[0], 0xFFF);
}

TEST(ParseUdpFrame, IpOptionsShiftThePayload) {
    for (unsigned ihl = 6; ihl <= 15; ++ihl) {
        const Frame f = with_options(kFrame, kIp, ihl);
        UdpPacket p;
        ASSERT_EQ(parse(f, p), PacketError::none) << "IHL " << ihl;
        EXPECT_TRUE(p.ip_options);
        EXPECT_EQ(p.ip_offset, 14u);
        EXPECT_EQ(p.payload_offset, 42u + (ihl - 5) * 4) << "IHL " << ihl;
        EXPECT_EQ(p.payload_bytes, 16u);
        EXPECT_EQ(p.dst_ip, kDstIp);
        EXPECT_EQ(p.src_port, kSrcPort);
        EXPECT_EQ(p.dst_port, kDstPort);
        EXPECT_EQ(f[p.payload_offset], 0x00);
        EXPECT_EQ(f[p.payload_offset + 15], 0x0f);
    }
}

TEST(ParseUdpFrame, VlanTagsAndOptionsTogether) {
    const Frame f =
        with_options(with_tag(with_tag(kFrame, kEtherTypeVlan, 1), kEtherTypeQinQ, 2), 22, 15);
    UdpPacket p;
    ASSERT_EQ(parse(f, p), PacketError::none);
    EXPECT_EQ(p.vlan_count, 2);
    EXPECT_TRUE(p.ip_options);
    EXPECT_EQ(p.ip_offset, 22u);
    EXPECT_EQ(p.payload_offset, 22u + 60u + 8u);
    EXPECT_EQ(p.payload_bytes, 16u);
}

TEST(ParseUdpFrame, MoreFragmentsClearAndDontFragmentAreNotFragments) {
    Frame f = kFrame;
    set16(f, kIp + 6, 0x0000);  // no DF either
    EXPECT_EQ(parse(f), PacketError::none);
    set16(f, kIp + 6, 0x4000);  // DF only (as in kFrame)
    EXPECT_EQ(parse(f), PacketError::none);
}

// ---------------------------------------------------------------------------
// Split frames: `head` is the first piece, captured_bytes the whole frame.

TEST(ParseUdpFrame, HeadCoveringTheHeadersIsEnough) {
    const Frame head = prefix(kFrame, 42);  // headers only, payload in the second piece
    UdpPacket p;
    ASSERT_EQ(parse_udp_frame(head, kFrame.size(), p), PacketError::none);
    EXPECT_EQ(p.payload_offset, 42u);
    EXPECT_EQ(p.payload_bytes, 16u);
}

TEST(ParseUdpFrame, HeadShorterThanTheHeadersIsHeadersSplit) {
    UdpPacket p;
    EXPECT_EQ(parse_udp_frame(prefix(kFrame, 41), kFrame.size(), p), PacketError::headers_split);
    EXPECT_EQ(parse_udp_frame(prefix(kFrame, 20), kFrame.size(), p), PacketError::headers_split);
    // A VLAN tag or IP options push the UDP header past a 42-byte first piece.
    const Frame tagged = with_tag(kFrame, kEtherTypeVlan, 100);
    EXPECT_EQ(parse_udp_frame(prefix(tagged, 42), tagged.size(), p), PacketError::headers_split);
    EXPECT_EQ(parse_udp_frame(prefix(tagged, 46), tagged.size(), p), PacketError::none);
    const Frame options = with_options(kFrame, kIp, 6);
    EXPECT_EQ(parse_udp_frame(prefix(options, 42), options.size(), p), PacketError::headers_split);
    EXPECT_EQ(parse_udp_frame(prefix(options, 46), options.size(), p), PacketError::none);
}

TEST(ParseUdpFrame, EveryHeadShorterThanTheHeadersIsHeadersSplit) {
    const Frame frames[] = {kFrame, with_options(with_tag(kFrame, kEtherTypeVlan, 5), 18, 9)};
    for (const Frame& f : frames) {
        UdpPacket whole;
        ASSERT_EQ(parse(f, whole), PacketError::none);
        const std::size_t headers = whole.payload_offset;
        for (std::size_t n = 0; n <= f.size(); ++n) {
            const Frame head = prefix(f, n);  // exactly n bytes: ASan sees any overread
            UdpPacket p;
            const PacketError e = parse_udp_frame(head, f.size(), p);
            if (n < headers) {
                EXPECT_EQ(e, PacketError::headers_split) << "head " << n;
            } else {
                ASSERT_EQ(e, PacketError::none) << "head " << n;
                EXPECT_EQ(p.payload_offset, whole.payload_offset);
                EXPECT_EQ(p.payload_bytes, whole.payload_bytes);
            }
        }
    }
}

TEST(ParseUdpFrame, HeadCoveringTheHeadersButShortCaptureIsBadTotalLength) {
    const Frame head = prefix(kFrame, 42);
    UdpPacket p;
    EXPECT_EQ(parse_udp_frame(head, kFrame.size() - 1, p), PacketError::bad_ip_total_length);
    EXPECT_EQ(parse_udp_frame(head, 42, p), PacketError::bad_ip_total_length);
}

TEST(ParseUdpFrame, CapturedBytesBelowHeadSizeIsAuthoritative) {
    // The caller passes a whole receive slot as `head`; only captured_bytes of
    // it were written by this frame.
    UdpPacket p;
    EXPECT_EQ(parse_udp_frame(kFrame, kFrame.size(), p), PacketError::none);
    EXPECT_EQ(parse_udp_frame(kFrame, kFrame.size() - 1, p), PacketError::bad_ip_total_length);
    EXPECT_EQ(parse_udp_frame(kFrame, 40, p), PacketError::bad_ip_total_length);
    EXPECT_EQ(parse_udp_frame(kFrame, 20, p), PacketError::truncated_ipv4);
    EXPECT_EQ(parse_udp_frame(kFrame, 13, p), PacketError::truncated_ethernet);
    EXPECT_EQ(parse_udp_frame(kFrame, 0, p), PacketError::truncated_ethernet);
}

TEST(ParseUdpFrame, OptionsOfANonUdpDatagramMayRunPastTheHead) {
    // Only the UDP header needs the options to be in the first piece; a non-UDP
    // datagram is classified from its fixed 20-byte header.
    Frame f = with_options(kFrame, kIp, 15);
    f[kIp + 9] = 2;  // IGMP
    fix_ip_checksum(f, kIp);
    UdpPacket p;
    EXPECT_EQ(parse_udp_frame(prefix(f, 34), f.size(), p), PacketError::not_udp);
    // ... but they must have been captured.
    EXPECT_EQ(parse_udp_frame(prefix(f, 34), 73, p), PacketError::truncated_ipv4);
}

// ---------------------------------------------------------------------------
// Every truncation of a valid frame is an error, and is never read past.

struct TruncationCase {
    Frame frame;
    std::size_t ip_offset;
};

TEST(ParseUdpFrame, EveryTruncationIsAnErrorAndStaysInBounds) {
    const TruncationCase cases[] = {
        {kFrame, 14},
        {with_tag(kFrame, kEtherTypeVlan, 100), 18},
        {with_options(with_tag(with_tag(kFrame, kEtherTypeVlan, 1), kEtherTypeQinQ, 2), 22, 15),
         22},
    };
    for (const TruncationCase& c : cases) {
        const Frame& f = c.frame;
        const std::size_t ip_header_bytes = std::size_t{f[c.ip_offset] & 0x0Fu} * 4;
        ASSERT_EQ(parse(f), PacketError::none);
        for (std::size_t n = 0; n < f.size(); ++n) {
            // A heap copy of exactly n bytes, so that ASan catches a read past it.
            const Frame cut = prefix(f, n);
            UdpPacket p;
            const PacketError e = parse_udp_frame(cut, n, p);
            PacketError expected = PacketError::bad_ip_total_length;
            if (n < c.ip_offset) {
                expected = PacketError::truncated_ethernet;
            } else if (n < c.ip_offset + ip_header_bytes) {
                expected = PacketError::truncated_ipv4;
            }
            EXPECT_EQ(e, expected)
                << "captured " << n << " of " << f.size() << ": " << to_string(e);
        }
    }
}

// ---------------------------------------------------------------------------
// Malformed and foreign frames, each with its exact error.

struct BadFrame {
    std::string name;
    Frame frame;
    PacketError expected;
};

void PrintTo(const BadFrame& b, std::ostream* os) {
    *os << b.name;
}

std::vector<BadFrame> bad_frames() {
    const Frame arp = {
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06,
        // htype 1, ptype IPv4, hlen 6, plen 4, request; who has 10.0.0.1, tell 10.0.0.11
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x0a,
        0x00, 0x00, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x01,
        // padding to 60 bytes
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00};
    Frame ipv6 = {0x33, 0x33, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00,
                  0x01, 0x86, 0xdd, 0x60, 0x00, 0x00, 0x00, 0x00, 0x08, 0x11, 0x01};
    ipv6.resize(14 + 40 + 8, 0);
    Frame three_tags = with_tag(with_tag(with_tag(kFrame, kEtherTypeVlan, 1), kEtherTypeVlan, 2),
                                kEtherTypeQinQ, 3);
    // IGMPv2 membership report as hosts send it: IHL 6 with Router Alert.
    Frame igmp = with_options(kFrame, kIp, 6);
    igmp[kIp + 24] = 0x94;
    igmp[kIp + 25] = 0x04;
    igmp[kIp + 26] = 0x00;
    igmp[kIp + 27] = 0x00;
    igmp[kIp + 8] = 1;  // TTL 1
    igmp[kIp + 9] = 2;  // IGMP
    fix_ip_checksum(igmp, kIp);

    auto ip = [](std::function<void(Frame&)> change) {
        Frame f = modified(kFrame, change);
        fix_ip_checksum(f, kIp);
        return f;
    };

    return {
        {"empty", {}, PacketError::truncated_ethernet},
        {"thirteen_bytes", prefix(kFrame, 13), PacketError::truncated_ethernet},
        {"vlan_tag_cut_after_tpid", prefix(with_tag(kFrame, kEtherTypeVlan, 100), 14),
         PacketError::truncated_ethernet},
        {"vlan_tag_cut_before_next_type", prefix(with_tag(kFrame, kEtherTypeVlan, 100), 17),
         PacketError::truncated_ethernet},
        {"second_vlan_tag_cut",
         prefix(with_tag(with_tag(kFrame, kEtherTypeVlan, 1), kEtherTypeQinQ, 2), 20),
         PacketError::truncated_ethernet},
        {"three_vlan_tags", three_tags, PacketError::too_many_vlans},
        {"arp", arp, PacketError::not_ipv4},
        {"ipv6", ipv6, PacketError::not_ipv4},
        {"lldp", modified(kFrame, [](Frame& f) { set16(f, 12, 0x88cc); }), PacketError::not_ipv4},
        {"ipv4_type_without_header", prefix(kFrame, 14), PacketError::truncated_ipv4},
        {"ipv4_header_cut", prefix(kFrame, 33), PacketError::truncated_ipv4},
        {"igmp", igmp, PacketError::not_udp},
        {"tcp", ip([](Frame& f) { f[kIp + 9] = 6; }), PacketError::not_udp},
        {"icmp_fragment", ip([](Frame& f) {
             f[kIp + 9] = 1;
             set16(f, kIp + 6, 0x2000);
         }),
         PacketError::not_udp},
        {"ip_version_6_nibble", ip([](Frame& f) { f[kIp] = 0x65; }), PacketError::bad_ip_version},
        {"ip_version_0", ip([](Frame& f) { f[kIp] = 0x05; }), PacketError::bad_ip_version},
        {"ihl_4", ip([](Frame& f) { f[kIp] = 0x44; }), PacketError::bad_ip_header_length},
        {"ihl_0", ip([](Frame& f) { f[kIp] = 0x40; }), PacketError::bad_ip_header_length},
        // IHL 15 needs 14 + 60 bytes; the frame has 58.
        {"ihl_15_too_few_bytes", modified(kFrame, [](Frame& f) { f[kIp] = 0x4f; }),
         PacketError::truncated_ipv4},
        {"total_length_below_ihl", ip([](Frame& f) { set16(f, kIp + 2, 19); }),
         PacketError::bad_ip_total_length},
        {"total_length_zero", ip([](Frame& f) { set16(f, kIp + 2, 0); }),
         PacketError::bad_ip_total_length},
        {"total_length_beyond_frame", ip([](Frame& f) { set16(f, kIp + 2, 45); }),
         PacketError::bad_ip_total_length},
        {"total_length_max", ip([](Frame& f) { set16(f, kIp + 2, 0xffff); }),
         PacketError::bad_ip_total_length},
        {"more_fragments", ip([](Frame& f) { set16(f, kIp + 6, 0x2000); }),
         PacketError::ip_fragment},
        {"fragment_offset", ip([](Frame& f) { set16(f, kIp + 6, 0x0001); }),
         PacketError::ip_fragment},
        {"fragment_offset_with_df", ip([](Frame& f) { set16(f, kIp + 6, 0x5fff); }),
         PacketError::ip_fragment},
        {"udp_length_7", modified(kFrame, [](Frame& f) { set16(f, kUdp + 4, 7); }),
         PacketError::bad_udp_length},
        {"udp_length_0", modified(kFrame, [](Frame& f) { set16(f, kUdp + 4, 0); }),
         PacketError::bad_udp_length},
        {"udp_length_short_of_ip_payload",
         modified(kFrame, [](Frame& f) { set16(f, kUdp + 4, 23); }), PacketError::bad_udp_length},
        {"udp_length_beyond_ip_payload", modified(kFrame, [](Frame& f) { set16(f, kUdp + 4, 25); }),
         PacketError::bad_udp_length},
        // IP total length 24 leaves 4 bytes for the UDP header; frame cut there.
        {"udp_header_truncated", prefix(ip([](Frame& f) { set16(f, kIp + 2, 24); }), 38),
         PacketError::truncated_udp},
        // Same datagram padded to 60: the padding is not a UDP header.
        {"udp_header_in_padding", ip([](Frame& f) {
             set16(f, kIp + 2, 24);
             f.resize(60, 0);
         }),
         PacketError::truncated_udp},
        {"udp_header_absent", prefix(ip([](Frame& f) { set16(f, kIp + 2, 20); }), 34),
         PacketError::truncated_udp},
    };
}

class MalformedFrame : public testing::TestWithParam<BadFrame> {};

TEST_P(MalformedFrame, ReportsTheExactError) {
    const BadFrame& b = GetParam();
    // Exact-size heap copy so that ASan catches any read past the frame.
    const Frame copy = b.frame;
    UdpPacket p;
    const PacketError e = parse_udp_frame(copy, copy.size(), p);
    EXPECT_EQ(e, b.expected) << b.name << ": got " << to_string(e) << ", want "
                             << to_string(b.expected);
}

INSTANTIATE_TEST_SUITE_P(ParseUdpFrame, MalformedFrame, testing::ValuesIn(bad_frames()),
                         [](const testing::TestParamInfo<BadFrame>& param_info) {
                             return param_info.param.name;
                         });

// ---------------------------------------------------------------------------
// Header building

TEST(BuildUdpHeaders, MatchesTheHandWrittenFrame) {
    Frame out(64, 0xAA);
    ASSERT_EQ(build_udp_headers(frame_spec(), 16, out), 42u);
    EXPECT_EQ(prefix(out, 42), prefix(kFrame, 42));
    for (std::size_t i = 42; i < out.size(); ++i) {
        EXPECT_EQ(out[i], 0xAA) << "byte " << i << " written past the headers";
    }
}

TEST(BuildUdpHeaders, VlanTagMatchesTheHandWrittenFrameWithATag) {
    UdpHeaderSpec spec = frame_spec();
    spec.vlan_id = 100;
    Frame out(46, 0xAA);
    ASSERT_EQ(build_udp_headers(spec, 16, out), 46u);
    EXPECT_EQ(out, prefix(with_tag(kFrame, kEtherTypeVlan, 100), 46));
    spec.vlan_id = 4095;
    ASSERT_EQ(build_udp_headers(spec, 16, out), 46u);
    EXPECT_EQ(get16(out, 14), 0x0FFF);
    spec.vlan_id = 0;
    ASSERT_EQ(build_udp_headers(spec, 16, out), 46u);
    EXPECT_EQ(get16(out, 12), kEtherTypeVlan);
    EXPECT_EQ(get16(out, 14), 0);
}

TEST(BuildUdpHeaders, RoundTripsThroughTheParser) {
    // A CODIF-sized datagram: 64-byte header + 8000 bytes of data.
    constexpr std::uint32_t kPayload = 64 + 8000;
    for (int vlan : {-1, 3000}) {
        UdpHeaderSpec spec = frame_spec();
        spec.vlan_id = vlan;
        spec.src_mac[5] = 0x42;
        Frame f(46 + kPayload, 0);
        const std::size_t headers = build_udp_headers(spec, kPayload, f);
        f.resize(headers + kPayload);
        EXPECT_EQ(internet_checksum(Bytes(f.data() + headers - 28, 20)), 0);
        UdpPacket p;
        ASSERT_EQ(parse(f, p), PacketError::none);
        EXPECT_EQ(p.vlan_count, vlan < 0 ? 0 : 1);
        if (vlan >= 0) {
            EXPECT_EQ(p.vlan_ids[0], vlan);
        }
        EXPECT_EQ(p.payload_offset, headers);
        EXPECT_EQ(p.payload_bytes, kPayload);
        EXPECT_EQ(p.src_ip, kSrcIp);
        EXPECT_EQ(p.dst_ip, kDstIp);
        EXPECT_EQ(p.src_port, kSrcPort);
        EXPECT_EQ(p.dst_port, kDstPort);
        EXPECT_EQ(f[11], 0x42);
        // DF set, TTL and id from the spec.
        EXPECT_EQ(get16(f, p.ip_offset + 6), 0x4000);
        EXPECT_EQ(f[p.ip_offset + 8], 4);
        EXPECT_EQ(get16(f, p.ip_offset + 4), 0x1234);
    }
}

TEST(BuildUdpHeaders, LargestDatagram) {
    Frame out(42);
    ASSERT_EQ(build_udp_headers(frame_spec(), 65535 - 28, out), 42u);
    EXPECT_EQ(get16(out, kIp + 2), 65535);
    EXPECT_EQ(get16(out, kUdp + 4), 65535 - 20);
    EXPECT_EQ(internet_checksum(Bytes(out.data() + kIp, 20)), 0);
    EXPECT_THROW(build_udp_headers(frame_spec(), 65535 - 27, out), std::length_error);
}

TEST(BuildUdpHeaders, ThrowsWhenTheBufferIsTooSmall) {
    Frame out(41);
    EXPECT_THROW(build_udp_headers(frame_spec(), 16, out), std::length_error);
    EXPECT_THROW(build_udp_headers(frame_spec(), 16, MutableBytes{}), std::length_error);
    UdpHeaderSpec tagged = frame_spec();
    tagged.vlan_id = 1;
    Frame out45(45);
    EXPECT_THROW(build_udp_headers(tagged, 16, out45), std::length_error);
    Frame out42(42);
    EXPECT_THROW(build_udp_headers(tagged, 16, out42), std::length_error);
    EXPECT_EQ(build_udp_headers(frame_spec(), 16, out42), 42u);
}

TEST(BuildUdpHeaders, RejectsAVlanIdAbove12Bits) {
    UdpHeaderSpec spec = frame_spec();
    spec.vlan_id = 4096;
    Frame out(46);
    EXPECT_THROW(build_udp_headers(spec, 16, out), std::invalid_argument);
}

}  // namespace
}  // namespace ibvcap
