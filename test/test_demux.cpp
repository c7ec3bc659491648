// The demultiplexer on hand-built frames: every frame is classified exactly
// once, under the right reason, and routed byte-exact to the writers.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "frames.hpp"
#include "lib/demux/demux.hpp"
#include "lib/sinks/file_sinks.hpp"
#include "lib/sinks/writer.hpp"

namespace ibvcap {
namespace {

using test::kAntenna1;
using test::kAntenna2;
using test::kGroup1;
using test::kGroup2;
using test::make_frame;
using test::make_header;

using test::whole;

void expect_partition(const Ledger& ledger) {
    const Totals t = ledger.totals();
    EXPECT_EQ(t.packets, t.codif + t.malformed + t.non_codif);
}

TEST(Demux, OneValidFrameMakesOneStreamAndZeroLoss) {
    Ledger ledger;
    Demux demux({}, ledger);
    const auto f = make_frame(kAntenna1, kGroup1, 36001, make_header(100, 7, 3));
    demux.on_frame(whole(f));
    ASSERT_EQ(ledger.streams().size(), 1u);
    const StreamStats& s = ledger.streams()[0];
    EXPECT_EQ(s.group, (Endpoint{kGroup1, 36001}));
    EXPECT_EQ(s.antenna, kAntenna1);
    EXPECT_EQ(s.thread, 3);
    EXPECT_EQ(s.packets(), 1u);
    EXPECT_EQ(s.timing.frames_per_period, 1000u);
    EXPECT_EQ(s.first.seconds, 100u);
    EXPECT_EQ(s.first.frame, 7u);
    EXPECT_EQ(s.bytes, f.size());
    EXPECT_TRUE(ledger.zero_loss());
    EXPECT_TRUE(ledger.reconciles());
}

TEST(Demux, NoFramesIsNotZeroLoss) {
    Ledger ledger;
    Demux demux({}, ledger);
    EXPECT_FALSE(ledger.zero_loss());
    ASSERT_EQ(ledger.loss_reasons().size(), 1u);
    EXPECT_EQ(ledger.loss_reasons()[0], "no stream frames were received");
}

TEST(Demux, StreamsAreGroupAntennaThread) {
    Ledger ledger;
    Demux demux({}, ledger);
    for (std::uint32_t frame = 0; frame < 10; ++frame) {
        for (const auto group : {kGroup1, kGroup2}) {
            for (const auto antenna : {kAntenna1, kAntenna2}) {
                for (std::uint16_t thread = 0; thread < 2; ++thread) {
                    demux.on_frame(
                        whole(make_frame(antenna, group, 36001, make_header(5, frame, thread))));
                }
            }
        }
    }
    ASSERT_EQ(ledger.streams().size(), 8u);
    for (const auto& s : ledger.streams()) {
        EXPECT_EQ(s.packets(), 10u);
        EXPECT_EQ(s.sequence.missing(), 0u);
        EXPECT_EQ(s.first.frame, 0u);
        EXPECT_EQ(s.last.frame, 9u);
    }
    EXPECT_TRUE(ledger.zero_loss());
}

// Thousands of streams (issue 18): the known-stream table is rebuilt
// several times while frames of the streams already known keep coming, and
// every stream is counted exactly, with a gap and a duplicate placed where
// they were sent; frames too short or not IPv4 are counted apart.
TEST(Demux, ThousandsOfStreamsAreCountedExactly) {
    constexpr std::uint32_t kAntennas = 500;
    constexpr std::uint16_t kThreads = 3;  // 1,500 streams, 3 frames each
    std::vector<std::vector<std::uint8_t>> bytes;
    for (std::uint32_t frame = 0; frame < 3; ++frame) {
        for (std::uint32_t a = 0; a < kAntennas; ++a) {
            for (std::uint16_t t = 0; t < kThreads; ++t) {
                if (frame == 1 && a == 7 && t == 2) {
                    continue;  // one frame never sent: 1 missing
                }
                bytes.push_back(
                    make_frame(0x0a010000u + a, kGroup1, 36001, make_header(5, frame, t)));
                if (frame == 2 && a == 400 && t == 0) {
                    bytes.push_back(bytes.back());  // one sent twice: 1 duplicate
                }
            }
        }
    }
    bytes.push_back({0x01, 0x02});                          // too short for anything
    bytes.push_back(std::vector<std::uint8_t>(120, 0xFF));  // not Ethernet/IPv4
    Ledger ledger;
    Demux demux(DemuxOptions{}, ledger);
    for (const auto& b : bytes) {
        demux.on_frame(whole(b));
    }
    ASSERT_EQ(ledger.streams().size(), std::size_t{kAntennas} * kThreads);
    const Totals t = ledger.totals();
    EXPECT_EQ(t.packets, bytes.size());
    EXPECT_EQ(t.codif, bytes.size() - 2);
    EXPECT_EQ(t.missing, 1u);
    EXPECT_EQ(t.duplicates, 1u);
    expect_partition(ledger);
    for (const StreamStats& s : ledger.streams()) {
        const bool gap = s.antenna == 0x0a010000u + 7 && s.thread == 2;
        const bool twice = s.antenna == 0x0a010000u + 400 && s.thread == 0;
        EXPECT_EQ(s.sequence.missing(), gap ? 1u : 0u);
        EXPECT_EQ(s.packets(), gap ? 2u : (twice ? 4u : 3u));
    }
}

TEST(Demux, SequenceAnomaliesAcrossAPeriodWrap) {
    Ledger ledger;
    Demux demux({}, ledger);
    // frames per period 1000: (5, 998), (5, 999), (6, 0) ... with (6, 1) lost,
    // (6, 2) duplicated and (6, 3)/(6, 4) swapped.
    const std::vector<std::pair<std::uint32_t, std::uint32_t>> order = {
        {5, 998}, {5, 999}, {6, 0}, {6, 2}, {6, 2}, {6, 4}, {6, 3}, {6, 5}};
    for (const auto& [s, f] : order) {
        demux.on_frame(whole(make_frame(kAntenna1, kGroup1, 36001, make_header(s, f))));
    }
    ASSERT_EQ(ledger.streams().size(), 1u);
    const auto& st = ledger.streams()[0];
    EXPECT_EQ(st.packets(), 8u);
    EXPECT_EQ(st.sequence.missing(), 1u);
    EXPECT_EQ(st.sequence.duplicates(), 1u);
    EXPECT_EQ(st.sequence.out_of_order(), 1u);
    EXPECT_EQ(st.first.seconds, 5u);
    EXPECT_EQ(st.first.frame, 998u);
    EXPECT_EQ(st.last.seconds, 6u);
    EXPECT_EQ(st.last.frame, 5u);
    EXPECT_TRUE(ledger.reconciles());
    EXPECT_FALSE(ledger.zero_loss());
}

// One corrupted header (seconds 10^9) is counted as implausible, not as 10^12
// frames missing, and the stream goes on where it was; the verdict says so.
TEST(Demux, OneCorruptSecondsFieldIsImplausibleNotAbsurdLoss) {
    Ledger ledger;
    Demux demux({}, ledger);
    for (std::uint32_t f = 0; f < 20; ++f) {
        const std::uint32_t seconds = f == 10 ? 1000000000u : 100u;
        demux.on_frame(whole(make_frame(kAntenna1, kGroup1, 36001, make_header(seconds, f))));
    }
    ASSERT_EQ(ledger.streams().size(), 1u);
    const StreamStats& s = ledger.streams()[0];
    EXPECT_EQ(s.packets(), 20u);
    EXPECT_EQ(s.sequence.implausible(), 1u);
    EXPECT_EQ(s.sequence.missing(), 1u);  // (100, 10): its header was the corrupt one
    EXPECT_EQ(s.sequence.restarts(), 0u);
    EXPECT_EQ(s.last.seconds, 100u);
    EXPECT_EQ(s.last.frame, 19u);
    const Totals t = ledger.totals();
    EXPECT_EQ(t.missing, 1u);
    EXPECT_EQ(t.implausible, 1u);
    EXPECT_TRUE(ledger.reconciles());
    EXPECT_FALSE(ledger.zero_loss());
    const auto why = ledger.loss_reasons();
    EXPECT_NE(std::find(why.begin(), why.end(),
                        "1 frames with implausible headers (too far from their stream to "
                        "place)"),
              why.end());
}

// A sender whose clock went back to 0 for good: after kRestartRun frames the
// stream is re-synchronised there and reported as a restart with its jump.
TEST(Demux, AStreamThatRestartsIsResynchronisedAndReported) {
    Ledger ledger;
    Demux demux({}, ledger);
    for (std::uint32_t f = 0; f < 10; ++f) {
        demux.on_frame(whole(make_frame(kAntenna1, kGroup1, 36001, make_header(5000, f))));
    }
    for (std::uint32_t f = 0; f < 100; ++f) {
        demux.on_frame(whole(make_frame(kAntenna1, kGroup1, 36001, make_header(0, f))));
    }
    ASSERT_EQ(ledger.streams().size(), 1u);
    const StreamStats& s = ledger.streams()[0];
    EXPECT_EQ(s.packets(), 110u);
    EXPECT_EQ(s.sequence.restarts(), 1u);
    EXPECT_EQ(s.sequence.last_restart_jump(), -5000009);  // index 0 - index (5000, 9)
    EXPECT_EQ(s.sequence.implausible(), 0u);
    EXPECT_EQ(s.sequence.missing(), 0u);
    EXPECT_EQ(s.first.seconds, 0u);
    EXPECT_EQ(s.first.frame, 0u);
    EXPECT_EQ(s.last.seconds, 0u);
    EXPECT_EQ(s.last.frame, 99u);
    EXPECT_TRUE(ledger.reconciles());
    EXPECT_FALSE(ledger.zero_loss());
    const auto why = ledger.loss_reasons();
    EXPECT_TRUE(std::any_of(why.begin(), why.end(), [](const std::string& w) {
        return w.starts_with("1 stream restart: the position jumped by -5000009 frames (backwards");
    }));
}

// Traffic to other destinations that the parser refuses (fragments, frames cut
// short by the capture, TCP cut short) is someone else's when the groups are
// named: other_destination, not malformed, and the verdict stays zero-loss.
// Damaged frames that may have been for a group stay malformed, and without
// named groups every damaged frame is malformed as before.
std::vector<Frame> others_traffic(std::vector<std::vector<std::uint8_t>>& keep) {
    keep.clear();
    keep.reserve(8);
    std::vector<Frame> frames;
    // A UDP fragment (MF) to another group.
    keep.push_back(make_frame(kAntenna1, kGroup2, 36001, make_header(1, 1)));
    keep.back().at(20) = 0x20;
    frames.push_back(whole(keep.back()));
    // A later fragment (offset 8, no UDP header) to another unicast host.
    keep.push_back(make_frame(kAntenna1, (10u << 24) | 5u, 36001, make_header(1, 1)));
    keep.back().at(21) = 0x01;
    frames.push_back(whole(keep.back()));
    // Another group's CODIF frame cut short by the capture (snaplen 100).
    keep.push_back(make_frame(kAntenna1, kGroup2, 36001, make_header(1, 1), 7));
    Frame cut = whole(keep.back());
    cut.head = Bytes(keep.back()).first(100);
    frames.push_back(cut);
    // A jumbo TCP segment to a unicast host, cut short by the capture.
    keep.push_back(make_frame(kAntenna1, (10u << 24) | 5u, 22, make_header(1, 1)));
    keep.back().at(23) = 6;
    Frame tcp = whole(keep.back());
    tcp.head = Bytes(keep.back()).first(200);
    frames.push_back(tcp);
    // UDP with a bad length to the group's address but another port.
    keep.push_back(make_frame(kAntenna1, kGroup1, 36002, make_header(1, 1)));
    keep.back().at(38) = 0;
    keep.back().at(39) = 4;
    frames.push_back(whole(keep.back()));
    // ARP.
    keep.push_back(make_frame(kAntenna1, kGroup1, 36001, make_header(1, 1)));
    keep.back().at(12) = 0x08;
    keep.back().at(13) = 0x06;
    frames.push_back(whole(keep.back()));
    return frames;
}

TEST(Demux, DamagedFramesToOtherDestinationsAreNotLossWhenGroupsAreNamed) {
    DemuxOptions options;
    options.groups = {Endpoint{kGroup1, 36001}};
    Ledger ledger;
    Demux demux(options, ledger);
    std::vector<std::vector<std::uint8_t>> keep;
    const auto good0 = make_frame(kAntenna1, kGroup1, 36001, make_header(1, 0));
    const auto good1 = make_frame(kAntenna1, kGroup1, 36001, make_header(1, 1));
    demux.on_frame(whole(good0));
    for (const Frame& f : others_traffic(keep)) {
        demux.on_frame(f);
    }
    demux.on_frame(whole(good1));
    EXPECT_EQ(ledger.reason_count(Reason::other_destination), 5u);
    EXPECT_EQ(ledger.reason_count(Reason::not_ipv4), 1u);
    const Totals t = ledger.totals();
    EXPECT_EQ(t.malformed, 0u);
    EXPECT_EQ(t.codif, 2u);
    EXPECT_TRUE(ledger.reconciles());
    EXPECT_TRUE(ledger.zero_loss()) << fmt::format("{}", fmt::join(ledger.loss_reasons(), "; "));

    // Intact traffic that is not UDP keeps its own reason: only damaged
    // frames are taken for another destination's.
    auto tcp = make_frame(kAntenna1, (10u << 24) | 5u, 22, make_header(1, 1));
    tcp.at(23) = 6;
    demux.on_frame(whole(tcp));
    EXPECT_EQ(ledger.reason_count(Reason::not_udp), 1u);
    EXPECT_EQ(ledger.reason_count(Reason::other_destination), 5u);

    // Damaged frames that may have been the group's stay malformed: a fragment
    // to the group (first, or later with no port to read), a frame cut before
    // its IPv4 destination.
    auto frag = make_frame(kAntenna1, kGroup1, 36001, make_header(1, 2));
    frag.at(20) = 0x20;
    auto later = make_frame(kAntenna1, kGroup1, 36001, make_header(1, 3));
    later.at(21) = 0x01;
    Frame early_cut = whole(good1);
    early_cut.head = Bytes(good1).first(30);
    demux.on_frame(whole(frag));
    demux.on_frame(whole(later));
    demux.on_frame(early_cut);
    EXPECT_EQ(ledger.reason_count(Reason::ip_fragment), 2u);
    EXPECT_EQ(ledger.reason_count(Reason::truncated_capture), 1u);
    EXPECT_EQ(ledger.totals().malformed, 3u);
    EXPECT_FALSE(ledger.zero_loss());
}

TEST(Demux, WithoutNamedGroupsDamagedFramesStayMalformed) {
    Ledger ledger;
    Demux demux({}, ledger);
    std::vector<std::vector<std::uint8_t>> keep;
    for (const Frame& f : others_traffic(keep)) {
        demux.on_frame(f);
    }
    EXPECT_EQ(ledger.reason_count(Reason::other_destination), 0u);
    EXPECT_EQ(ledger.totals().malformed, 5u);
}

// One row per way a frame can fail to be CODIF data. The class is written
// out (loss: malformed; not loss: non_codif), not computed by the code under
// test. `fast_path`: once the stream is known the frame reaches the demux's
// fast path (same stream key, same header parameters), which must reject it
// for the same reason the slow path does.
struct BadFrame {
    const char* name;
    Reason reason;
    std::function<Frame(std::vector<std::uint8_t>&)> make;
    bool loss;
    bool fast_path = false;
};

std::vector<std::uint8_t> good() {
    return make_frame(kAntenna1, kGroup1, 36001, make_header(1, 1));
}

// Whether `bad`, arriving after `known` (a good frame), reaches the fast
// path's checks: it parses, its CODIF header decodes, and its stream key and
// header parameters are those of `known` (Demux::Known::same_parameters).
bool reaches_fast_path(const std::vector<std::uint8_t>& known, const Frame& bad) {
    UdpPacket kp;
    UdpPacket bp;
    if (parse_udp_frame(known, known.size(), kp) != PacketError::none ||
        parse_udp_frame(bad.head, bad.captured_bytes(), bp) != PacketError::none ||
        bp.payload_bytes < kCodifHeaderBytes) {
        return false;
    }
    std::array<std::uint8_t, kCodifHeaderBytes> raw;
    if (!bad.gather(bp.payload_offset, raw)) {
        return false;
    }
    CodifHeader kh;
    CodifHeader bh;
    if (decode_codif(Bytes(known).subspan(kp.payload_offset, kCodifHeaderBytes), kh) !=
            CodifError::none ||
        decode_codif(raw, bh) != CodifError::none) {
        return false;
    }
    return bp.dst_ip == kp.dst_ip && bp.dst_port == kp.dst_port && bp.src_ip == kp.src_ip &&
           bh.threadid == kh.threadid && bh.framelength8 == kh.framelength8 &&
           bh.totalsamples == kh.totalsamples && bh.period == kh.period && bh.nchan == kh.nchan &&
           bh.nbits == kh.nbits && bh.complex == kh.complex && bh.layout == kh.layout;
}

// The stream's header, unchanged, in a UDP datagram of `udp_payload` bytes.
Frame with_datagram(std::vector<std::uint8_t>& b, std::uint32_t udp_payload) {
    UdpHeaderSpec spec;
    spec.src_ip = kAntenna1;
    spec.dst_ip = kGroup1;
    spec.src_port = 5000;
    spec.dst_port = 36001;
    b.assign(kPlainUdpPayloadOffset + udp_payload, 0xab);
    const std::size_t off = build_udp_headers(spec, udp_payload, b);
    encode_codif(make_header(1, 1), MutableBytes(b).subspan(off, kCodifHeaderBytes));
    return whole(b);
}

Frame set_byte(std::vector<std::uint8_t>& b, std::size_t at, std::uint8_t v) {
    b = good();
    b[at] = v;
    return whole(b);
}

Frame with_header(std::vector<std::uint8_t>& b, const CodifHeader& h) {
    b = make_frame(kAntenna1, kGroup1, 36001, h);
    return whole(b);
}

class DemuxReason : public ::testing::TestWithParam<BadFrame> {};

TEST_P(DemuxReason, CountedOnceUnderItsReason) {
    DemuxOptions options;
    options.groups = {Endpoint{kGroup1, 36001}};
    options.antennas = {kAntenna1};
    Ledger ledger;
    Demux demux(options, ledger);
    std::vector<std::uint8_t> bytes;
    demux.on_frame(GetParam().make(bytes));
    const Totals t = ledger.totals();
    EXPECT_EQ(t.packets, 1u);
    EXPECT_EQ(t.codif, 0u);
    EXPECT_EQ(ledger.reason_count(GetParam().reason), 1u) << to_string(GetParam().reason);
    EXPECT_EQ(t.malformed, GetParam().loss ? 1u : 0u);
    EXPECT_EQ(t.non_codif, GetParam().loss ? 0u : 1u);
    expect_partition(ledger);
    // A good frame next to it: non-stream frames do not make a loss, malformed ones do.
    auto g = good();
    demux.on_frame(whole(g));
    EXPECT_EQ(ledger.zero_loss(), !GetParam().loss);
    EXPECT_TRUE(ledger.reconciles());
}

// The same frame after its stream is known (the demux's fast path for known
// streams must let none of them through).
TEST_P(DemuxReason, CountedTheSameWhenTheStreamIsAlreadyKnown) {
    DemuxOptions options;
    options.groups = {Endpoint{kGroup1, 36001}};
    options.antennas = {kAntenna1};
    Ledger ledger;
    Demux demux(options, ledger);
    auto g = good();
    demux.on_frame(whole(g));
    demux.on_frame(whole(g));  // a duplicate: through the fast path
    std::vector<std::uint8_t> bytes;
    const Frame bad = GetParam().make(bytes);
    EXPECT_EQ(reaches_fast_path(g, bad), GetParam().fast_path)
        << "the row's frame " << (GetParam().fast_path ? "no longer reaches" : "now reaches")
        << " the fast path: update the row";
    demux.on_frame(bad);
    const Totals t = ledger.totals();
    EXPECT_EQ(t.packets, 3u);
    EXPECT_EQ(t.codif, 2u);
    EXPECT_EQ(ledger.reason_count(GetParam().reason), 1u) << to_string(GetParam().reason);
    ASSERT_EQ(ledger.streams().size(), 1u);
    EXPECT_EQ(ledger.streams()[0].packets(), 2u);
    EXPECT_EQ(ledger.streams()[0].sequence.duplicates(), 1u);
    expect_partition(ledger);
}

INSTANTIATE_TEST_SUITE_P(
    Table, DemuxReason,
    ::testing::Values(
        // name, reason, frame, loss, fast path
        BadFrame{"arp", Reason::not_ipv4, [](auto& b) { return set_byte(b, 13, 0x06); }, false},
        BadFrame{"igmp", Reason::not_udp,
                 [](auto& b) {
                     // protocol 2; the IPv4 header checksum is not checked by design
                     return set_byte(b, 23, 2);
                 },
                 false},
        BadFrame{"other_destination", Reason::other_destination,
                 [](auto& b) {
                     b = make_frame(kAntenna1, kGroup2, 36001, make_header(1, 1));
                     return whole(b);
                 },
                 false},
        BadFrame{"other_port", Reason::other_destination,
                 [](auto& b) {
                     b = make_frame(kAntenna1, kGroup1, 36002, make_header(1, 1));
                     return whole(b);
                 },
                 false},
        BadFrame{"unlisted_source", Reason::unlisted_source,
                 [](auto& b) {
                     b = make_frame(kAntenna2, kGroup1, 36001, make_header(1, 1));
                     return whole(b);
                 },
                 false},
        BadFrame{"no_sync", Reason::not_codif, [](auto& b) { return set_byte(b, 42 + 40, 0x00); },
                 false},
        BadFrame{"short_udp_payload", Reason::not_codif,
                 [](auto& b) {
                     UdpHeaderSpec spec;
                     spec.src_ip = kAntenna1;
                     spec.dst_ip = kGroup1;
                     spec.dst_port = 36001;
                     b.assign(42 + 32, 0xab);
                     build_udp_headers(spec, 32, b);
                     return whole(b);
                 },
                 false},
        BadFrame{"truncated_capture", Reason::truncated_capture,
                 [](auto& b) {
                     b = good();
                     Frame f = whole(b);
                     f.head = Bytes(b).first(30);  // snaplen 30: cut inside the IP header
                     return f;
                 },
                 true},
        BadFrame{"ip_fragment", Reason::ip_fragment,
                 [](auto& b) { return set_byte(b, 20, 0x20); },  // MF flag
                 true},
        BadFrame{"headers_split", Reason::headers_split,
                 [](auto& b) {
                     b = good();
                     Frame f = whole(b);
                     f.head = Bytes(b).first(40);
                     f.tail = Bytes(b).subspan(40);
                     return f;
                 },
                 true},
        BadFrame{"codif_zero_nchan", Reason::codif_zero_field,
                 [](auto& b) {
                     auto h = make_header(1, 1);
                     h.nchan = 0;
                     return with_header(b, h);
                 },
                 true},
        BadFrame{"codif_length_mismatch", Reason::codif_bad_length,
                 [](auto& b) {
                     b = good();
                     // framelength8 (W3 bits 32-63, header bytes 28..31) says 4096 bytes
                     b[42 + 28] = 0x00;
                     b[42 + 29] = 0x02;
                     return whole(b);
                 },
                 true},
        // The stream's header unchanged, in a datagram of another length: the
        // fast path must compare the length (a frame of the wrong length would
        // break the fixed-size records of the .codif file).
        BadFrame{"datagram_shorter_than_its_header", Reason::codif_bad_length,
                 [](auto& b) { return with_datagram(b, kCodifHeaderBytes + 4096); }, true, true},
        BadFrame{"datagram_longer_than_its_header", Reason::codif_bad_length,
                 [](auto& b) { return with_datagram(b, kCodifHeaderBytes + 8192 + 8); }, true,
                 true},
        BadFrame{"codif_bad_samples", Reason::codif_bad_samples,
                 [](auto& b) {
                     auto h = make_header(1, 1);
                     h.nchan = 3;  // 8192 bytes do not hold whole 3-channel samples
                     return with_header(b, h);
                 },
                 true},
        BadFrame{"codif_frame_beyond_period", Reason::codif_frame_beyond_period,
                 [](auto& b) { return with_header(b, make_header(1, 1000)); }, true, true},
        BadFrame{"codif_no_frames_per_period", Reason::codif_no_frames_per_period,
                 [](auto& b) {
                     auto h = make_header(1, 1);
                     h.totalsamples = 1000 * 256 + 1;
                     return with_header(b, h);
                 },
                 true}),
    [](const auto& row) { return std::string(row.param.name); });

TEST(Demux, StreamParametersChangingMidStreamAreMalformed) {
    Ledger ledger;
    Demux demux({}, ledger);
    demux.on_frame(whole(make_frame(kAntenna1, kGroup1, 36001, make_header(2, 0))));
    auto h = make_header(2, 1);
    h.totalsamples = 500 * 256;  // frames per period 1000 -> 500
    demux.on_frame(whole(make_frame(kAntenna1, kGroup1, 36001, h)));
    EXPECT_EQ(ledger.reason_count(Reason::stream_params_changed), 1u);
    EXPECT_EQ(ledger.streams().at(0).packets(), 1u);
    expect_partition(ledger);
}

TEST(Demux, AntennaListLimitsStreamsAndKeepsItsOrder) {
    DemuxOptions options;
    options.antennas = {kAntenna2, kAntenna1};
    Ledger ledger;
    Demux demux(options, ledger);
    demux.on_frame(whole(make_frame(kAntenna1, kGroup1, 36001, make_header(1, 1))));
    demux.on_frame(whole(make_frame((10u << 24) | 99u, kGroup1, 36001, make_header(1, 1))));
    EXPECT_EQ(ledger.streams().size(), 1u);
    EXPECT_EQ(ledger.reason_count(Reason::unlisted_source), 1u);
}

// GROUP:PORT@SOURCE (verbs-mlx5-2.md N7): another sender's frames to a
// source-specific group are not ours; the group's own source and the other
// groups (any source) are kept.
TEST(Demux, ASourceSpecificGroupTakesOnlyItsSources) {
    DemuxOptions options;
    options.groups = {Endpoint{kGroup1, 36001}, Endpoint{kGroup2, 36001}};
    options.sources = {SourceFilter{Endpoint{kGroup1, 36001}, {kAntenna1}}};
    Ledger ledger;
    Demux demux(options, ledger);
    demux.on_frame(whole(make_frame(kAntenna1, kGroup1, 36001, make_header(1, 1))));
    demux.on_frame(whole(make_frame(kAntenna2, kGroup1, 36001, make_header(1, 1))));
    demux.on_frame(whole(make_frame(kAntenna2, kGroup1, 36001, make_header(1, 2))));
    demux.on_frame(whole(make_frame(kAntenna2, kGroup2, 36001, make_header(1, 1))));
    ASSERT_EQ(ledger.streams().size(), 2u);
    EXPECT_EQ(ledger.streams()[0].antenna, kAntenna1);
    EXPECT_EQ(ledger.streams()[0].group, (Endpoint{kGroup1, 36001}));
    EXPECT_EQ(ledger.streams()[1].antenna, kAntenna2);
    EXPECT_EQ(ledger.streams()[1].group, (Endpoint{kGroup2, 36001}));
    EXPECT_EQ(ledger.reason_count(Reason::unlisted_source), 2u);
    expect_partition(ledger);
}

TEST(Demux, FrameSplitAcrossTwoPiecesParsesAsContiguous) {
    // The verbs header/payload split: SGE0 ends anywhere from right after the
    // UDP header to inside the payload, with and without a VLAN tag (which moves
    // the CODIF header 4 bytes into where SGE1 would start).
    for (const int vlan : {-1, 42}) {
        const auto bytes = make_frame(kAntenna1, kGroup1, 36001, make_header(9, 4), vlan);
        const std::size_t hdr = vlan < 0 ? 42 : 46;
        for (const std::size_t cut :
             {hdr, hdr + 1, hdr + 30, hdr + 64, std::size_t{106}, hdr + 900}) {
            test::TempDir dir;
            Writer writer({});
            DemuxOptions options;
            OutputOptions outputs;
            outputs.output_dir = dir.path().string();
            outputs.formats = {OutputFormat::codif, OutputFormat::codifhdr, OutputFormat::raw};
            Ledger ledger;
            Demux demux(options, ledger);
            FileSinks files(outputs, &writer);
            demux.add_sinks(files.entries());
            Frame f;
            f.head = Bytes(bytes).first(cut);
            f.tail = Bytes(bytes).subspan(cut);
            f.wire_bytes = static_cast<std::uint32_t>(bytes.size());
            demux.on_frame(f);
            writer.finish();
            ASSERT_EQ(ledger.totals().codif, 1u) << "cut " << cut << " vlan " << vlan;
            const Endpoint g{kGroup1, 36001};
            const auto codif =
                test::read_file(output_path(outputs, OutputFormat::codif, g, kAntenna1));
            const auto hdrs =
                test::read_file(output_path(outputs, OutputFormat::codifhdr, g, kAntenna1));
            const auto raw = test::read_file(output_path(outputs, OutputFormat::raw, g, kAntenna1));
            EXPECT_EQ(codif, std::vector<std::uint8_t>(bytes.begin() + static_cast<long>(hdr),
                                                       bytes.end()));
            EXPECT_EQ(hdrs, std::vector<std::uint8_t>(bytes.begin() + static_cast<long>(hdr),
                                                      bytes.begin() + static_cast<long>(hdr) + 64));
            EXPECT_EQ(raw, bytes);
        }
    }
}

TEST(Demux, PcapGetsEveryFrameOthersOnlyTheirAntennaAndGroup) {
    test::TempDir dir;
    Writer writer({});
    DemuxOptions options;
    OutputOptions outputs;
    outputs.output_dir = dir.path().string();
    outputs.prefix = "run";
    outputs.formats = {OutputFormat::pcap, OutputFormat::codif};
    Ledger ledger;
    Demux demux(options, ledger);
    FileSinks files(outputs, &writer);
    demux.add_sinks(files.entries());
    const auto a = make_frame(kAntenna1, kGroup1, 36001, make_header(1, 0));
    const auto b = make_frame(kAntenna2, kGroup1, 36001, make_header(1, 0));
    auto junk = a;
    junk[12] = 0x86;  // IPv6 EtherType: not CODIF, still captured in the pcap
    junk[13] = 0xdd;
    demux.on_frame(whole(a, 1'000'000'123));
    demux.on_frame(whole(junk, 2'000'000'000));
    demux.on_frame(whole(b, 3'000'000'000));
    writer.finish();
    ledger.set_outputs(writer.stats());
    EXPECT_TRUE(ledger.reconciles());

    const auto pcap = test::read_file(dir / "run.pcap");
    ASSERT_EQ(pcap.size(), 24 + 3 * (16 + a.size()));
    // first record: 1.000000123 s, full length
    EXPECT_EQ(load_le32(pcap.data() + 24), 1u);
    EXPECT_EQ(load_le32(pcap.data() + 28), 123u);
    EXPECT_EQ(load_le32(pcap.data() + 32), a.size());
    EXPECT_TRUE(std::equal(a.begin(), a.end(), pcap.begin() + 40));
    const Endpoint g{kGroup1, 36001};
    const auto ca = test::read_file(output_path(outputs, OutputFormat::codif, g, kAntenna1));
    EXPECT_EQ(ca, std::vector<std::uint8_t>(a.begin() + 42, a.end()));
    ASSERT_EQ(ledger.outputs().size(), 3u);
    for (const auto& o : ledger.outputs()) {
        EXPECT_EQ(o.packets, o.antenna.empty() ? 3u : 1u) << o.path;
        EXPECT_EQ(o.dropped, 0u);
    }
}

// A record header's length on the wire is not trusted (issue 25 item 8): a
// pcap orig_len of 0xFFFFFFFF made a 3.3 MB file's total 4.3 GB, still
// zero-loss. Past any link's length, or under what was captured, it is
// counted and taken as the captured length: in the totals, in the stream's
// bytes and in the pcap record written of it. The frame itself is data.
TEST(Demux, ADamagedLengthOnTheWireIsCountedNotBelieved) {
    test::TempDir dir;
    Writer writer({});
    OutputOptions outputs;
    outputs.output_dir = dir.path().string();
    outputs.prefix = "run";
    outputs.formats = {OutputFormat::pcap};
    Ledger ledger;
    Demux demux({}, ledger);
    FileSinks files(outputs, &writer);
    demux.add_sinks(files.entries());
    const auto a = make_frame(kAntenna1, kGroup1, 36001, make_header(1, 0));
    const auto size = static_cast<std::uint32_t>(a.size());
    Frame huge = whole(a);
    huge.wire_bytes = 0xFFFFFFFFu;
    const auto b = make_frame(kAntenna1, kGroup1, 36001, make_header(1, 1));
    Frame small = whole(b);
    small.wire_bytes = 60;  // less than captured
    const auto c = make_frame(kAntenna1, kGroup1, 36001, make_header(1, 2));
    Frame longest = whole(c);
    longest.wire_bytes = kMaxWireBytes;  // cut by a snapshot length: believed
    demux.on_frame(huge);
    demux.on_frame(small);
    demux.on_frame(longest);
    writer.finish();
    ledger.set_outputs(writer.stats());
    const Totals t = ledger.totals();
    EXPECT_EQ(t.bad_wire_length, 2u);
    EXPECT_EQ(t.bytes, 2u * size + kMaxWireBytes);
    EXPECT_EQ(t.codif, 3u);
    ASSERT_EQ(ledger.streams().size(), 1u);
    EXPECT_EQ(ledger.streams()[0].bytes, 2u * size + kMaxWireBytes);
    EXPECT_TRUE(ledger.zero_loss()) << fmt::format("{}", fmt::join(ledger.loss_reasons(), "; "));
    const auto pcap = test::read_file(dir / "run.pcap");
    ASSERT_EQ(pcap.size(), 24 + 3 * (16 + a.size()));
    for (std::size_t i = 0; i < 3; ++i) {
        const std::uint8_t* h = pcap.data() + 24 + i * (16 + a.size());
        EXPECT_EQ(load_le32(h + 8), size) << "record " << i;
        EXPECT_EQ(load_le32(h + 12), i == 2 ? kMaxWireBytes : size) << "record " << i;
    }
}

}  // namespace
}  // namespace ibvcap

namespace ibvcap {
namespace {

TEST(Demux, StrayUdpDoesNotUseUpAntennaOrGroupLimits) {
    DemuxOptions options;
    options.max_antennas = 1;
    options.max_groups = 1;
    Ledger ledger;
    Demux demux(options, ledger);
    auto junk = make_frame(kAntenna2, kGroup2, 5353, make_header(1, 1));
    junk[42 + 40] = 0;  // no sync word: a UDP datagram that is not CODIF
    demux.on_frame(whole(junk));
    demux.on_frame(whole(make_frame(kAntenna1, kGroup1, 36001, make_header(1, 1))));
    EXPECT_EQ(ledger.reason_count(Reason::not_codif), 1u);
    EXPECT_EQ(ledger.reason_count(Reason::too_many_streams), 0u);
    ASSERT_EQ(ledger.streams().size(), 1u);
    // A second CODIF antenna is over the limit and says so.
    demux.on_frame(whole(make_frame(kAntenna2, kGroup1, 36001, make_header(1, 1))));
    EXPECT_EQ(ledger.reason_count(Reason::too_many_streams), 1u);
    expect_partition(ledger);
}

TEST(Demux, FrameLengthChangingMidStreamIsMalformed) {
    Ledger ledger;
    Demux demux({}, ledger);
    demux.on_frame(whole(make_frame(kAntenna1, kGroup1, 36001, make_header(2, 0))));
    auto h = make_header(2, 1);
    h.framelength8 = 4096 / 8;  // half the payload: 2000 frames per period of 128 samples
    h.totalsamples = 2000 * 128;
    demux.on_frame(whole(make_frame(kAntenna1, kGroup1, 36001, h)));
    EXPECT_EQ(ledger.reason_count(Reason::frame_length_changed), 1u);
    // Half the payload and half the channels: 256 samples a frame, 1000
    // frames per period as before; only the frame's length tells it apart.
    auto same_rate = make_header(2, 2);
    same_rate.framelength8 = 4096 / 8;
    same_rate.nchan = 8;
    demux.on_frame(whole(make_frame(kAntenna1, kGroup1, 36001, same_rate)));
    EXPECT_EQ(ledger.reason_count(Reason::frame_length_changed), 2u);
    // The same length and rate, other channels: the stream's parameters.
    auto channels = make_header(2, 3);
    channels.nchan = 8;
    channels.totalsamples = 1000 * 512;
    demux.on_frame(whole(make_frame(kAntenna1, kGroup1, 36001, channels)));
    EXPECT_EQ(ledger.reason_count(Reason::stream_params_changed), 1u);
    EXPECT_EQ(ledger.streams().at(0).packets(), 1u);
}

}  // namespace
}  // namespace ibvcap

namespace ibvcap {
namespace {

TEST(Demux, PcapHeadersOnlyCutsRecordsAfterTheCodifHeader) {
    test::TempDir dir;
    Writer writer({});
    DemuxOptions options;
    OutputOptions outputs;
    outputs.output_dir = dir.path().string();
    outputs.formats = {OutputFormat::pcap};
    outputs.pcap_headers_only = true;
    Ledger ledger;
    Demux demux(options, ledger);
    FileSinks files(outputs, &writer);
    demux.add_sinks(files.entries());
    const auto codif = make_frame(kAntenna1, kGroup1, 36001, make_header(1, 0), 7);  // VLAN
    auto arp = make_frame(kAntenna1, kGroup1, 36001, make_header(1, 1));
    arp[12] = 0x08;
    arp[13] = 0x06;
    demux.on_frame(whole(codif, 5));
    demux.on_frame(whole(arp, 6));
    writer.finish();
    ledger.set_outputs(writer.stats());
    EXPECT_TRUE(ledger.reconciles());
    const auto pcap = test::read_file(dir / "ibvcap.pcap");
    ASSERT_EQ(pcap.size(), 24 + (16 + 46 + 64) + (16 + arp.size()));
    EXPECT_EQ(load_le32(pcap.data() + 24 + 8), 46u + 64u);      // captured: headers
    EXPECT_EQ(load_le32(pcap.data() + 24 + 12), codif.size());  // on the wire: all of it
    EXPECT_TRUE(std::equal(codif.begin(), codif.begin() + 110, pcap.begin() + 40));
    const std::size_t second = 24 + 16 + 110;
    EXPECT_EQ(load_le32(pcap.data() + second + 8), arp.size());  // not UDP: whole
}

}  // namespace
}  // namespace ibvcap

namespace ibvcap {
namespace {

// The per-frame fields of a stream's state lie in its first two cache lines
// (lib/ledger/ledger.hpp, StreamStats; issue 30, item 5): with thousands of
// streams every frame finds them out of cache, and each line more is a miss
// more per frame (bench_demux, BM_DemuxStreams/streams:2400). A field added
// ahead of them, or a tracker counter moved behind its window, fails here.
TEST(StreamStatsLayout, PerFrameFieldsShareTheFirstTwoCacheLines) {
    static_assert(alignof(StreamStats) == 64);
    std::vector<StreamStats> streams(3);
    for (const StreamStats& s : streams) {
        const auto* base = reinterpret_cast<const std::uint8_t*>(&s);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(base) % 64, 0u);
        const auto at = [base](const auto& field) {
            return static_cast<std::size_t>(reinterpret_cast<const std::uint8_t*>(&field) - base) +
                   sizeof field;
        };
        // Line 0: what Demux::accept and the probes read or write per frame.
        for (const std::size_t end : {at(s.group), at(s.antenna), at(s.thread), at(s.rate_watch),
                                      at(s.timing), at(s.bytes), at(s.last_arrival_ns)}) {
            EXPECT_LE(end, 64u);
        }
        // Line 1: the newest position and the tracker's per-frame counters
        // (sequence.hpp orders them first: five words and a flag).
        EXPECT_LE(at(s.last), 128u);
        EXPECT_LE(at(s.sequence) - sizeof s.sequence + 5 * sizeof(std::uint64_t) + 1, 128u);
    }
}

}  // namespace
}  // namespace ibvcap
