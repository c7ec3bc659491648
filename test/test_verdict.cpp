// The verdict, tested as hard as it is claimed (issue 12). Three things:
//   1. every ledger reason is judged as data: its class (loss or not) is
//      written out here, one occurrence goes in through the demux, and the
//      verdict is asserted;
//   2. every count that feeds the verdict is summed over every part that
//      carries it (streams, reasons, outputs, source counters, added counts,
//      devices), each time with the count in a part that is not the last;
//   3. the report equals the ledger: every key of totals, streams and outputs
//      against the ledger's own figure, with every totals counter distinct.
// Each test here was seen to fail against a one-line fault planted in the
// code it guards (docs/architecture.md, "Testing").
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "frames.hpp"
#include "lib/demux/demux.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/ledger/report.hpp"

namespace ibvcap {
namespace {

using test::kAntenna1;
using test::kAntenna2;
using test::kGroup1;
using test::kGroup2;
using test::make_frame;
using test::make_header;

constexpr std::uint16_t kPort = 36001;
constexpr std::uint32_t kAntenna3 = (10u << 24) | 13u;

using FrameBytes = std::vector<std::uint8_t>;

Frame whole(const FrameBytes& bytes) {
    Frame f;
    f.head = bytes;
    f.wire_bytes = static_cast<std::uint32_t>(bytes.size());
    f.timestamp_ns = 1;
    return f;
}

FrameBytes codif_frame(std::uint32_t antenna, std::uint32_t seconds, std::uint32_t frame,
                       std::uint16_t thread = 0, bool invalid = false) {
    auto h = make_header(seconds, frame, thread);
    h.invalid = invalid;
    return make_frame(antenna, kGroup1, kPort, h);
}

FrameBytes good(std::uint32_t frame) {
    return codif_frame(kAntenna1, 1, frame);
}

FrameBytes with_byte(FrameBytes b, std::size_t at, std::uint8_t v) {
    b[at] = v;
    return b;
}

// A UDP datagram of `udp_payload` bytes whose CODIF header is `h` (the
// payload after the header is whatever length the datagram gives it).
FrameBytes datagram(const CodifHeader& h, std::uint32_t udp_payload) {
    UdpHeaderSpec spec;
    spec.src_ip = kAntenna1;
    spec.dst_ip = kGroup1;
    spec.src_port = 5000;
    spec.dst_port = kPort;
    FrameBytes b(kPlainUdpPayloadOffset + udp_payload, 0x5a);
    const std::size_t off = build_udp_headers(spec, udp_payload, b);
    encode_codif(h, MutableBytes(b).subspan(off, kCodifHeaderBytes));
    return b;
}

// ---------------------------------------------------------------------------
// 1. Every reason judged as data.

struct ReasonRow {
    Reason reason;
    bool loss;  // the class, written out: malformed (loss) or non_codif (not loss)
    const char* name;
    // The frame that is counted under `reason`; `storage` outlives the call.
    Frame (*make)(FrameBytes& storage);
    // The row's group is read as VDIF (GROUP:PORT/vdif, 1000 frames per
    // second given), and the good frames around it are VDIF frames.
    bool vdif = false;
    // The run has a frame window (--start-at/--stop-at) holding the good
    // frames 1 and 2 around the row's frame: [00:00:01.001, 00:00:01.003).
    bool windowed = false;
};

FrameBytes vdif_frame(const VdifHeader& h, std::size_t datagram = 0) {
    return test::make_vdif_frame(kAntenna1, kGroup1, kPort, h, -1, datagram);
}
FrameBytes good_vdif(std::uint32_t frame) {
    return vdif_frame(test::make_vdif_header(1, frame));
}

// One row per reason, in the enum's order. The options of the demux the rows
// go through: groups {kGroup1:kPort}, antennas {kAntenna1}, at most one
// stream; a good frame of stream (kAntenna1, thread 0) comes before the row's
// frame and another after it.
const ReasonRow kReasonRows[] = {
    {Reason::not_ipv4, false, "not_ipv4",
     [](FrameBytes& b) {
         b = with_byte(good(5), 13, 0x06);  // EtherType 0x0806: ARP
         return whole(b);
     }},
    {Reason::not_udp, false, "not_udp",
     [](FrameBytes& b) {
         b = with_byte(good(5), 23, 2);  // IGMP
         return whole(b);
     }},
    {Reason::other_destination, false, "other_destination",
     [](FrameBytes& b) {
         b = make_frame(kAntenna1, kGroup2, kPort, make_header(1, 5));
         return whole(b);
     }},
    {Reason::unlisted_source, false, "unlisted_source",
     [](FrameBytes& b) {
         b = codif_frame(kAntenna2, 1, 5);
         return whole(b);
     }},
    {Reason::not_codif, false, "not_codif",
     [](FrameBytes& b) {
         b = with_byte(good(5), kPlainUdpPayloadOffset + 40, 0x00);  // no sync word
         return whole(b);
     }},
    {Reason::not_vdif, false, "not_vdif",
     [](FrameBytes& b) {
         b = vdif_frame(test::make_vdif_header(1, 5), 12);  // too short for any VDIF header
         return whole(b);
     },
     true},
    {Reason::before_window, false, "before_window",
     [](FrameBytes& b) {
         b = good(0);  // 1 ms before the window's start
         return whole(b);
     },
     false, true},
    {Reason::after_window, false, "after_window",
     [](FrameBytes& b) {
         b = good(3);  // the window's stop: the first frame not in it
         return whole(b);
     },
     false, true},
    {Reason::truncated_capture, true, "truncated_capture",
     [](FrameBytes& b) {
         b = good(5);
         Frame f = whole(b);
         f.head = Bytes(b).first(30);  // snaplen 30: the cut falls in the IPv4 header
         return f;
     }},
    {Reason::truncated_ethernet, true, "truncated_ethernet",
     [](FrameBytes& b) {
         b = good(5);
         b.resize(10);  // 10 bytes on the wire and captured
         return whole(b);
     }},
    {Reason::too_many_vlans, true, "too_many_vlans",
     [](FrameBytes& b) {
         b = make_frame(kAntenna1, kGroup1, kPort, make_header(1, 5), 7);
         const std::uint8_t tag[] = {0x81, 0x00, 0x00, 0x08};
         b.insert(b.begin() + 12, std::begin(tag), std::end(tag));
         b.insert(b.begin() + 12, std::begin(tag), std::end(tag));
         return whole(b);
     }},
    {Reason::truncated_ipv4, true, "truncated_ipv4",
     [](FrameBytes& b) {
         b = good(5);
         b.resize(kEthernetHeaderBytes + 10);  // whole, not cut by a snaplen
         return whole(b);
     }},
    {Reason::bad_ip_version, true, "bad_ip_version",
     [](FrameBytes& b) {
         b = with_byte(good(5), 14, 0x65);
         return whole(b);
     }},
    {Reason::bad_ip_header_length, true, "bad_ip_header_length",
     [](FrameBytes& b) {
         b = with_byte(good(5), 14, 0x44);
         return whole(b);
     }},
    {Reason::bad_ip_total_length, true, "bad_ip_total_length",
     [](FrameBytes& b) {
         b = with_byte(with_byte(good(5), 16, 0xff), 17, 0xff);
         return whole(b);
     }},
    {Reason::ip_fragment, true, "ip_fragment",
     [](FrameBytes& b) {
         b = with_byte(good(5), 20, 0x20);  // MF
         return whole(b);
     }},
    {Reason::truncated_udp, true, "truncated_udp",
     [](FrameBytes& b) {
         b = with_byte(with_byte(good(5), 16, 0), 17, 24);  // IP payload of 4 bytes
         return whole(b);
     }},
    {Reason::bad_udp_length, true, "bad_udp_length",
     [](FrameBytes& b) {
         b = with_byte(with_byte(good(5), 38, 0), 39, 4);
         return whole(b);
     }},
    {Reason::headers_split, true, "headers_split",
     [](FrameBytes& b) {
         b = good(5);
         Frame f = whole(b);
         f.head = Bytes(b).first(40);
         f.tail = Bytes(b).subspan(40);
         return f;
     }},
    {Reason::codif_zero_field, true, "codif_zero_field",
     [](FrameBytes& b) {
         auto h = make_header(1, 5);
         h.nbits = 0;
         b = make_frame(kAntenna1, kGroup1, kPort, h);
         return whole(b);
     }},
    {Reason::codif_bad_length, true, "codif_bad_length",
     [](FrameBytes& b) {
         // The header of the stream, unchanged; the datagram half as long.
         b = datagram(make_header(1, 5), kCodifHeaderBytes + 4096);
         return whole(b);
     }},
    {Reason::codif_bad_samples, true, "codif_bad_samples",
     [](FrameBytes& b) {
         auto h = make_header(1, 5);
         h.nchan = 3;
         b = make_frame(kAntenna1, kGroup1, kPort, h);
         return whole(b);
     }},
    {Reason::codif_frame_beyond_period, true, "codif_frame_beyond_period",
     [](FrameBytes& b) {
         b = good(1000);  // 1000 frames per period: 0..999
         return whole(b);
     }},
    {Reason::codif_no_frames_per_period, true, "codif_no_frames_per_period",
     [](FrameBytes& b) {
         auto h = make_header(1, 5);
         h.totalsamples = 1000 * 256 + 1;
         b = make_frame(kAntenna1, kGroup1, kPort, h);
         return whole(b);
     }},
    {Reason::vdif_zero_length, true, "vdif_zero_length",
     [](FrameBytes& b) {
         auto h = test::make_vdif_header(1, 5);
         const std::size_t datagram = h.frame_bytes();
         h.framelength8 = 0;
         b = vdif_frame(h, datagram);
         return whole(b);
     },
     true},
    {Reason::vdif_bad_length, true, "vdif_bad_length",
     [](FrameBytes& b) {
         // The stream's header, unchanged; the datagram 800 bytes short.
         auto h = test::make_vdif_header(1, 5);
         b = vdif_frame(h, h.frame_bytes() - 800);
         return whole(b);
     },
     true},
    {Reason::vdif_frame_beyond_rate, true, "vdif_frame_beyond_rate",
     [](FrameBytes& b) {
         b = good_vdif(1000);  // 1000 frames per second given: 0..999
         return whole(b);
     },
     true},
    {Reason::layout_changed, true, "layout_changed",
     [](FrameBytes& b) {
         // The stream's station and thread in a legacy header of the same length.
         auto h = test::make_vdif_header(1, 5, 0, 0x4142, true);
         h.framelength8 = test::make_vdif_header(1, 5).framelength8;
         b = vdif_frame(h);
         return whole(b);
     },
     true},
    {Reason::frame_length_changed, true, "frame_length_changed",
     [](FrameBytes& b) {
         auto h = test::make_vdif_header(1, 5);
         h.framelength8 -= 100;  // a valid frame, 800 bytes shorter than the stream's
         b = vdif_frame(h);
         return whole(b);
     },
     true},
    {Reason::epoch_changed, true, "epoch_changed",
     [](FrameBytes& b) {
         auto h = test::make_vdif_header(1, 5);
         h.epoch = 53;
         b = vdif_frame(h);
         return whole(b);
     },
     true},
    {Reason::stream_params_changed, true, "stream_params_changed",
     [](FrameBytes& b) {
         auto h = make_header(1, 5);
         h.totalsamples = 500 * 256;  // the stream's frames per period: 1000 -> 500
         b = make_frame(kAntenna1, kGroup1, kPort, h);
         return whole(b);
     }},
    {Reason::too_many_streams, true, "too_many_streams",
     [](FrameBytes& b) {
         b = codif_frame(kAntenna1, 1, 5, 1);  // a second stream; the limit is one
         return whole(b);
     }},
};
// A reason added to the enum without its row here does not build.
static_assert(sizeof(kReasonRows) / sizeof(kReasonRows[0]) == kReasonCount,
              "every Reason needs its row in kReasonRows, with its class written out");

TEST(ReasonTable, OneRowPerReasonInTheEnumsOrder) {
    std::set<std::string> names;
    for (std::size_t i = 0; i < kReasonCount; ++i) {
        EXPECT_EQ(kReasonRows[i].reason, static_cast<Reason>(i)) << kReasonRows[i].name;
        EXPECT_EQ(to_string(kReasonRows[i].reason), kReasonRows[i].name);
        names.insert(kReasonRows[i].name);
    }
    EXPECT_EQ(names.size(), kReasonCount);
}

class ReasonVerdict : public ::testing::TestWithParam<std::size_t> {};

TEST_P(ReasonVerdict, OneOccurrenceGivesTheVerdictOfItsClass) {
    const ReasonRow& row = kReasonRows[GetParam()];
    DemuxOptions options;
    options.groups = {Endpoint{kGroup1, kPort}};
    options.antennas = {kAntenna1};
    options.max_streams = 1;
    if (row.vdif) {
        options.group_formats = {StreamFormat::vdif};
        options.vdif_frames_per_second = 1000;
    }
    if (row.windowed) {
        options.window = FrameWindow{*parse_utc_instant("2026-01-01T00:00:01.001Z"),
                                     *parse_utc_instant("2026-01-01T00:00:01.003Z")};
    }
    Ledger ledger;
    Demux demux(options, ledger);
    const auto before = row.vdif ? good_vdif(1) : good(1);
    demux.on_frame(whole(before));
    FrameBytes storage;
    demux.on_frame(row.make(storage));
    const auto after = row.vdif ? good_vdif(2) : good(2);
    demux.on_frame(whole(after));

    const Totals t = ledger.totals();
    EXPECT_EQ(t.packets, 3u);
    EXPECT_EQ(t.codif, 2u);
    for (std::size_t i = 0; i < kReasonCount; ++i) {
        const auto r = static_cast<Reason>(i);
        EXPECT_EQ(ledger.reason_count(r), r == row.reason ? 1u : 0u) << to_string(r);
    }
    EXPECT_EQ(t.malformed, row.loss ? 1u : 0u);
    EXPECT_EQ(t.non_codif, row.loss ? 0u : 1u);
    EXPECT_TRUE(ledger.reconciles());
    EXPECT_EQ(ledger.zero_loss(), !row.loss);
    EXPECT_EQ(is_malformed(row.reason), row.loss);

    auto j = report_json(ledger, RunInfo{});
    EXPECT_EQ(j["verdict"], row.loss ? "loss" : "zero-loss");
    EXPECT_EQ(j["reasons"][row.loss ? "malformed" : "non_codif"][row.name], 1u);
    EXPECT_FALSE(j["reasons"][row.loss ? "non_codif" : "malformed"].contains(row.name));
    if (row.loss) {
        EXPECT_EQ(ledger.loss_reasons(), std::vector<std::string>{"1 malformed frames"});
    }
}

INSTANTIATE_TEST_SUITE_P(EveryReason, ReasonVerdict, ::testing::Range<std::size_t>(0, kReasonCount),
                         [](const auto& row) { return std::string(kReasonRows[row.param].name); });

// The expected streams' problems (lib/ledger/expected.hpp) are judged the
// same way: each one's class written out, one occurrence, the verdict.
struct ExpectProblemRow {
    ExpectProblem problem;
    bool loss;
    const char* name;
};
const ExpectProblemRow kExpectProblemRows[] = {
    {ExpectProblem::group_never_seen, true, "group_never_seen"},
    {ExpectProblem::antenna_missing, true, "antenna_missing"},
    {ExpectProblem::thread_missing, true, "thread_missing"},
    {ExpectProblem::late_start, true, "late_start"},
    {ExpectProblem::stopped_early, true, "stopped_early"},
    {ExpectProblem::wrong_rate, true, "wrong_rate"},
    {ExpectProblem::unexpected, false, "unexpected"},
};
// A problem added to the enum without its row here does not build.
static_assert(
    sizeof(kExpectProblemRows) / sizeof(kExpectProblemRows[0]) == kExpectProblemCount,
    "every ExpectProblem needs its row in kExpectProblemRows, with its class written out");

class ExpectProblemVerdict : public ::testing::TestWithParam<std::size_t> {};

TEST_P(ExpectProblemVerdict, OneOccurrenceGivesTheVerdictOfItsClass) {
    const ExpectProblemRow& row = kExpectProblemRows[GetParam()];
    EXPECT_EQ(row.problem, static_cast<ExpectProblem>(GetParam()));
    EXPECT_EQ(to_string(row.problem), row.name);
    EXPECT_EQ(is_loss(row.problem), row.loss);
    Ledger ledger;
    Demux demux({}, ledger);
    const auto frame = good(1);
    demux.on_frame(whole(frame));
    ExpectResults results;
    results.active = true;
    results.streams.resize(3);  // one with the problem, between two without
    results.streams[1].problems = {row.problem};
    ledger.set_expectations(results);
    EXPECT_EQ(ledger.zero_loss(), !row.loss);
    const auto j = report_json(ledger, RunInfo{});
    EXPECT_EQ(j["verdict"], row.loss ? "loss" : "zero-loss");
    EXPECT_EQ(j["expected"]["problems"][row.name], 1u);
    if (row.loss) {
        EXPECT_EQ(ledger.loss_reasons(),
                  std::vector<std::string>{std::string("1 expected stream: ") + row.name});
    }
}

INSTANTIATE_TEST_SUITE_P(EveryExpectProblem, ExpectProblemVerdict,
                         ::testing::Range<std::size_t>(0, kExpectProblemCount),
                         [](const auto& row) {
                             return std::string(kExpectProblemRows[row.param].name);
                         });

// ---------------------------------------------------------------------------
// 2. Every count that feeds the verdict is summed.

// A demux over a ledger (no writer): frames in, counts out.
struct Feed {
    explicit Feed(Ledger& l, DemuxOptions options = {}) : ledger(l), demux(options, l) {}
    void frame(const FrameBytes& b) { demux.on_frame(whole(b)); }
    // Frames 0..n-1 of second 1 of (antenna, thread): no loss.
    void clean(std::uint32_t antenna, std::uint32_t n, std::uint16_t thread = 0) {
        for (std::uint32_t f = 0; f < n; ++f) {
            frame(codif_frame(antenna, 1, f, thread));
        }
    }
    Ledger& ledger;
    Demux demux;
};

// A plausible jump of 64 periods (64000 frames): frames 39000 behind are too
// late, not implausible (docs/formats.md, "How a stream's frames are counted").
DemuxOptions wide() {
    DemuxOptions o;
    o.plausible_periods = 64;
    return o;
}

OutputStats output(std::string path, std::string antenna, std::uint64_t packets,
                   std::uint64_t dropped) {
    OutputStats o;
    o.path = std::move(path);
    o.format = antenna.empty() ? "pcap" : "codif";
    o.group = antenna.empty() ? "" : Endpoint{kGroup1, kPort}.to_string();
    o.antenna = std::move(antenna);
    o.packets = packets;
    o.dropped = dropped;
    return o;
}

// An ordered output (--ordered) holds the frames routed to it, less those its
// reorder windows left out, plus its fill frames; a per-stream output (-F
// vdif) its own stream's.
TEST(VerdictReconciles, AnOrderedOutputHoldsItsFramesLessThoseLeftOutPlusItsFills) {
    Ledger ledger;
    Feed feed(ledger, wide());
    feed.clean(kAntenna1, 5, 0);
    feed.clean(kAntenna1, 7, 3);
    auto ordered = output("a.codif", format_ipv4(kAntenna1), 12 - 2 + 4, 0);
    ordered.ordered = {16, 4, 1, 1, 0, 0};  // window, fills, duplicates, too late
    auto thread3 = output("a_3.vdif", format_ipv4(kAntenna1), 7, 0);
    thread3.format = "vdif";
    thread3.station = static_cast<std::int32_t>(ledger.streams()[1].station);
    thread3.thread = 3;
    ledger.set_outputs({ordered, thread3});
    EXPECT_TRUE(ledger.reconciles()) << ledger.disagreement();
    // The frame too late is loss; the duplicate written once is not.
    const auto why = ledger.loss_reasons();
    ASSERT_EQ(why.size(), 1u);
    EXPECT_NE(why[0].find("1 frames left out of the ordered files"), std::string::npos) << why[0];
    // A fill counted as a record of another stream, and a per-stream output
    // given its neighbour's frames, do not reconcile.
    ordered.packets += 1;
    ledger.set_outputs({ordered, thread3});
    EXPECT_EQ(ledger.disagreement(),
              fmt::format("a.codif holds 15 records (4 of them fills, 2 frames left out) and 0 "
                          "were not written, but 12 frames of {} from antenna {} were captured "
                          "(records of another stream, or counted twice)",
                          Endpoint{kGroup1, kPort}.to_string(), format_ipv4(kAntenna1)));
    ordered.packets -= 1;
    thread3.thread = 0;
    ledger.set_outputs({ordered, thread3});
    EXPECT_FALSE(ledger.reconciles());
    thread3.packets = 5;
    ledger.set_outputs({ordered, thread3});
    EXPECT_TRUE(ledger.reconciles()) << ledger.disagreement();
}

TEST(VerdictSums, MissingAndTooLateOfEveryStream) {
    // Stream A (first) has a gap and a frame too late; stream B (last) has neither.
    Ledger ledger;
    Feed feed(ledger, wide());
    feed.frame(codif_frame(kAntenna1, 1, 0));
    feed.frame(codif_frame(kAntenna1, 1, 3));  // 1 and 2 missing
    feed.frame(codif_frame(kAntenna2, 40, 0, 1));
    feed.frame(codif_frame(kAntenna2, 1, 0, 1));  // 39000 frames behind: too late
    feed.clean(kAntenna3, 4);
    ASSERT_EQ(ledger.streams().size(), 3u);
    const Totals t = ledger.totals();
    EXPECT_EQ(t.missing, 2u);
    EXPECT_EQ(t.too_late, 1u);
    EXPECT_EQ(t.out_of_order, 1u);
    EXPECT_EQ(t.codif, 8u);
    EXPECT_TRUE(ledger.reconciles());
    EXPECT_EQ(ledger.loss_reasons(),
              (std::vector<std::string>{"2 frames missing from the stream sequences",
                                        "1 frames arrived too late to classify"}));
}

TEST(VerdictSums, CodifDuplicatesAndInvalidOfEveryStream) {
    // codif feeds the verdict through the partition packets = codif +
    // malformed + non_codif: a codif that is one stream's count does not reconcile.
    Ledger ledger;
    Feed feed(ledger);
    feed.clean(kAntenna1, 3);
    feed.frame(codif_frame(kAntenna1, 1, 2));  // a duplicate
    feed.frame(codif_frame(kAntenna2, 1, 0, 0, true));
    feed.frame(codif_frame(kAntenna2, 1, 1));
    const Totals t = ledger.totals();
    EXPECT_EQ(t.codif, 6u);
    EXPECT_EQ(t.duplicates, 1u);
    EXPECT_EQ(t.invalid, 1u);
    EXPECT_TRUE(ledger.reconciles());
    EXPECT_TRUE(ledger.zero_loss());
}

TEST(VerdictSums, MalformedOfEveryReason) {
    Ledger ledger;
    Feed feed(ledger);
    feed.clean(kAntenna1, 2);
    feed.frame(with_byte(good(9), 20, 0x20));  // ip_fragment, early in the enum
    feed.frame(with_byte(good(9), 14, 0x65));  // bad_ip_version
    feed.frame(with_byte(good(9), 13, 0x06));  // not_ipv4 (non_codif)
    const Totals t = ledger.totals();
    EXPECT_EQ(t.malformed, 2u);
    EXPECT_EQ(t.non_codif, 1u);
    EXPECT_TRUE(ledger.reconciles());
    EXPECT_EQ(ledger.loss_reasons(), std::vector<std::string>{"2 malformed frames"});
}

TEST(VerdictSums, WriteDropsAndWrittenOfEveryOutput) {
    // The first output lost records, the last one none: each reconciles on its
    // own, so only the sum says the records are missing from disk.
    Ledger ledger;
    Feed feed(ledger);
    feed.clean(kAntenna1, 5);
    ledger.set_outputs(
        {output("a.pcap", "", 3, 2), output("a.codif", format_ipv4(kAntenna1), 5, 0)});
    ASSERT_TRUE(ledger.reconciles());
    const Totals t = ledger.totals();
    EXPECT_EQ(t.write_drops, 2u);
    EXPECT_EQ(t.written, 8u);
    EXPECT_EQ(ledger.loss_reasons(), std::vector<std::string>{"2 records not written"});
}

TEST(VerdictSums, ErrorOfEveryOutput) {
    Ledger ledger;
    Feed feed(ledger);
    feed.clean(kAntenna1, 5);
    auto failed = output("a.pcap", "", 5, 0);
    failed.error = "disk full";
    ledger.set_outputs({failed, output("a.codif", format_ipv4(kAntenna1), 5, 0)});
    EXPECT_EQ(ledger.loss_reasons(), std::vector<std::string>{"a.pcap: disk full"});
}

TEST(VerdictSums, NicDropsOfEverySourceCounter) {
    Ledger ledger;
    Feed feed(ledger);
    feed.clean(kAntenna1, 5);
    ledger.add_source_counter({"mlx5_0/hw_counters/out_of_buffer", 3, true});
    ledger.add_source_counter({"mlx5_0/net/rx_dropped", 100, false});  // not a drop
    ledger.add_source_counter({"mlx5_0/net/rx_missed_errors", 0, true});
    EXPECT_EQ(ledger.totals().nic_drops, 3u);
    EXPECT_EQ(ledger.loss_reasons(),
              std::vector<std::string>{"3 frames dropped before capture (NIC/kernel)"});
}

// Only an XID on the capture's own GPU is loss; one on another GPU is listed
// in the report and changes nothing.
TEST(VerdictSums, OnlyTheCaptureGpusXidsAreLoss) {
    Ledger ledger;
    Feed feed(ledger);
    feed.clean(kAntenna1, 5);
    ledger.add_gpu_xid({0, "0000:af:00.0", 79, "fallen off the bus", false});
    EXPECT_TRUE(ledger.zero_loss());
    ledger.add_gpu_xid({1'000'000, "0000:3b:00.0", 48, "double bit ECC error", true});
    EXPECT_EQ(ledger.loss_reasons(),
              std::vector<std::string>{"GPU 0000:3b:00.0 reported Xid 48: double bit ECC error at "
                                       "1970-01-01T00:00:00.001000Z"});
}

TEST(VerdictSums, AddedCountsAccumulate) {
    Ledger ledger;
    Feed feed(ledger);
    feed.clean(kAntenna1, 5);
    ledger.add_wc_errors(3);
    ledger.add_wc_errors(0);
    ledger.add_payload_mismatches(4);
    ledger.add_payload_mismatches(0);
    ledger.add_block_misses(5);
    ledger.add_block_misses(0);
    const Totals t = ledger.totals();
    EXPECT_EQ(t.wc_errors, 3u);
    EXPECT_EQ(t.payload_mismatches, 4u);
    EXPECT_EQ(t.block_misses, 5u);
    EXPECT_FALSE(ledger.zero_loss());
}

// Damaged lengths on the wire (Demux::on_frame) of every device are in the
// merged totals, and are not loss: the frames themselves were kept.
TEST(VerdictSums, DamagedLengthsOfEveryDeviceAreCountedNotLoss) {
    Ledger d0;
    Ledger d1;
    Feed f0(d0);
    Feed f1(d1);
    f0.clean(kAntenna1, 5);
    const FrameBytes b = codif_frame(kAntenna2, 1, 0);
    Frame damaged = whole(b);
    damaged.wire_bytes = 0xFFFFFFFFu;
    f1.demux.on_frame(damaged);
    Ledger merged;
    merged.merge(d0);
    merged.merge(d1);
    const Totals t = merged.totals();
    EXPECT_EQ(t.bad_wire_length, 1u);
    EXPECT_EQ(t.bytes, 6u * b.size());
    EXPECT_TRUE(merged.zero_loss());
}

// When outputs and streams disagree the verdict says where (issue 25 item
// 3): the output, what it holds, and the stream's frames it should hold. (A
// route key that kept 16 bits of the group wrote 239.2.0.1's frames into
// 239.1.0.1's files, and the verdict said only "the counts do not
// reconcile".)
TEST(VerdictSums, ADisagreementNamesTheOutputAndTheStream) {
    Ledger ledger;
    Feed feed(ledger);
    feed.clean(kAntenna1, 5);
    feed.clean(kAntenna2, 3);
    const std::string group = Endpoint{kGroup1, kPort}.to_string();
    auto a = output("a.codif", format_ipv4(kAntenna1), 8, 0);  // 3 of them another's
    a.group = group;
    auto b = output("b.codif", format_ipv4(kAntenna2), 3, 0);
    b.group = group;
    ledger.set_outputs({output("run.pcap", "", 8, 0), b, a});
    ASSERT_FALSE(ledger.reconciles());
    const std::string expected = fmt::format(
        "the counts do not reconcile: a.codif holds 8 records and 0 were not written, but 5 "
        "frames of {} from antenna {} were captured (records of another stream, or counted "
        "twice)",
        group, format_ipv4(kAntenna1));
    EXPECT_EQ(ledger.loss_reasons(), std::vector<std::string>{expected});
    // In a merged ledger (several -i), the part's own words.
    Ledger merged;
    merged.merge(ledger);
    EXPECT_EQ(merged.loss_reasons(), std::vector<std::string>{expected});
    // The report carries the same line.
    RunInfo run;
    const auto j = report_json(merged, run);
    EXPECT_EQ(j["reconciled"], false);
    EXPECT_EQ(j["loss_reasons"].get<std::vector<std::string>>(),
              std::vector<std::string>{expected});
}

// The same count in the first of two devices' ledgers, merged as the capture
// runner merges them (lib/run/verbs_capture.cpp).
struct DeviceCase {
    const char* name;
    std::function<void(Feed&)> inject;                 // into device 0 only
    std::function<std::uint64_t(const Ledger&)> read;  // from the merged ledger
    std::uint64_t expected;
    const char* reason;  // the one loss reason it gives
};

class DeviceSums : public ::testing::TestWithParam<DeviceCase> {};

TEST_P(DeviceSums, ACountOfTheFirstDeviceIsInTheMergedVerdict) {
    for (const bool inject : {false, true}) {
        Ledger d0;
        Ledger d1;
        Feed f0(d0, wide());
        Feed f1(d1, wide());
        f0.clean(kAntenna1, 5);
        f1.clean(kAntenna2, 5);
        if (inject) {
            GetParam().inject(f0);
        }
        Ledger merged;
        merged.merge(d0);
        merged.merge(d1);
        if (!inject) {
            // The control: without the count, the devices are zero-loss.
            EXPECT_TRUE(merged.zero_loss());
            EXPECT_EQ(merged.totals().codif, 10u);
            continue;
        }
        EXPECT_EQ(GetParam().read(merged), GetParam().expected);
        EXPECT_FALSE(merged.zero_loss());
        EXPECT_EQ(merged.loss_reasons(), std::vector<std::string>{GetParam().reason});
    }
}

INSTANTIATE_TEST_SUITE_P(
    EveryCount, DeviceSums,
    ::testing::Values(
        DeviceCase{"missing", [](Feed& f) { f.frame(codif_frame(kAntenna1, 1, 7)); },
                   [](const Ledger& l) { return l.totals().missing; }, 2,
                   "2 frames missing from the stream sequences"},
        DeviceCase{"too_late",
                   [](Feed& f) {
                       f.frame(codif_frame(kAntenna1, 40, 0, 1));
                       f.frame(codif_frame(kAntenna1, 1, 0, 1));
                   },
                   [](const Ledger& l) { return l.totals().too_late; }, 1,
                   "1 frames arrived too late to classify"},
        DeviceCase{"implausible", [](Feed& f) { f.frame(codif_frame(kAntenna1, 1000000000, 0)); },
                   [](const Ledger& l) { return l.totals().implausible; }, 1,
                   "1 frames with implausible headers (too far from their stream to place)"},
        DeviceCase{"restarts",
                   [](Feed& f) {
                       for (std::uint32_t n = 0; n < SequenceTracker::kRestartRun; ++n) {
                           f.frame(codif_frame(kAntenna1, 100001, n));
                       }
                   },
                   // From (1, 4) to (100001, 0): 100001000 - 1004 frames.
                   [](const Ledger& l) { return l.totals().restarts; }, 1,
                   "1 stream restart: the position jumped by 99999996 frames"},
        DeviceCase{"malformed", [](Feed& f) { f.frame(with_byte(good(9), 20, 0x20)); },
                   [](const Ledger& l) { return l.totals().malformed; }, 1, "1 malformed frames"},
        DeviceCase{"nic_drops",
                   [](Feed& f) {
                       f.ledger.add_source_counter({"mlx5_0/hw_counters/out_of_buffer", 3, true});
                   },
                   [](const Ledger& l) { return l.totals().nic_drops; }, 3,
                   "3 frames dropped before capture (NIC/kernel)"},
        DeviceCase{"wc_errors", [](Feed& f) { f.ledger.add_wc_errors(3); },
                   [](const Ledger& l) { return l.totals().wc_errors; }, 3,
                   "3 work-completion errors"},
        DeviceCase{"payload_mismatches", [](Feed& f) { f.ledger.add_payload_mismatches(3); },
                   [](const Ledger& l) { return l.totals().payload_mismatches; }, 3,
                   "3 payload bytes differ from the generator's pattern"},
        DeviceCase{"block_misses", [](Feed& f) { f.ledger.add_block_misses(3); },
                   [](const Ledger& l) { return l.totals().block_misses; }, 3,
                   "3 frames are in no block of the block rings"},
        DeviceCase{
            "write_drops", [](Feed& f) { f.ledger.set_outputs({output("d0.pcap", "", 2, 3)}); },
            [](const Ledger& l) { return l.totals().write_drops; }, 3, "3 records not written"},
        DeviceCase{"output_error",
                   [](Feed& f) {
                       auto o = output("d0.pcap", "", 5, 0);
                       o.error = "disk full";
                       f.ledger.set_outputs({o});
                   },
                   [](const Ledger& l) { return std::uint64_t{l.outputs().size()}; }, 1,
                   "d0.pcap: disk full"},
        DeviceCase{"gpu_xid",
                   [](Feed& f) {
                       f.ledger.add_gpu_xid({0, "0000:3b:00.0", 79, "fallen off the bus", true});
                   },
                   [](const Ledger& l) { return std::uint64_t{l.gpu_xids().size()}; }, 1,
                   "GPU 0000:3b:00.0 reported Xid 79: fallen off the bus at "
                   "1970-01-01T00:00:00.000000Z"},
        DeviceCase{"gpu_xids_lost", [](Feed& f) { f.ledger.add_gpu_xids_lost(3); },
                   [](const Ledger& l) { return l.gpu_xids_lost(); }, 3,
                   "3 GPU XID events were lost by the trace buffer (any could be the capture "
                   "GPU's)"},
        DeviceCase{"incomplete", [](Feed& f) { f.ledger.set_incomplete("mlx5_0: fatal"); },
                   [](const Ledger& l) { return l.totals().packets; }, 10,
                   "the run ended early: mlx5_0: fatal"},
        DeviceCase{"unreconciled_output",
                   // 4 + 0 records where 5 were routed: one went nowhere.
                   [](Feed& f) { f.ledger.set_outputs({output("d0.pcap", "", 4, 0)}); },
                   [](const Ledger& l) { return std::uint64_t{l.reconciles()}; }, 0,
                   "the counts do not reconcile: d0.pcap holds 4 records and 0 were not "
                   "written, but 5 frames were captured (records neither written nor counted)"}),
    [](const auto& row) { return std::string(row.param.name); });

// Merged into a ledger that has outputs of its own (not the runner's empty
// one): those outputs are judged against its own frames, before the other
// ledger's frames arrive, and one record short still makes the verdict loss.
TEST(Merge, TheReceivingLedgersOwnOutputsAreJudgedBeforeTheMerge) {
    for (const std::uint64_t written : {5u, 4u}) {
        Ledger d0;
        Ledger d1;
        Feed f0(d0, wide());
        Feed f1(d1, wide());
        f0.clean(kAntenna1, 5);
        f1.clean(kAntenna2, 5);
        d0.set_outputs({output("d0.pcap", "", written, 0)});
        d1.set_outputs({output("d1.pcap", "", 5, 0)});
        d0.merge(d1);
        EXPECT_EQ(d0.totals().codif, 10u);
        EXPECT_EQ(d0.reconciles(), written == 5) << written << " of 5 records written";
        EXPECT_EQ(d0.zero_loss(), written == 5) << written << " of 5 records written";
    }
}

// ---------------------------------------------------------------------------
// 3. The report equals the ledger.

// Every totals counter with the key the report gives it (docs/formats.md, "The report").
const std::vector<std::pair<const char*, std::uint64_t Totals::*>> kTotalsKeys = {
    {"packets", &Totals::packets},
    {"bytes", &Totals::bytes},
    {"codif", &Totals::codif},
    {"missing", &Totals::missing},
    {"duplicates", &Totals::duplicates},
    {"out_of_order", &Totals::out_of_order},
    {"too_late", &Totals::too_late},
    {"implausible", &Totals::implausible},
    {"restarts", &Totals::restarts},
    {"invalid", &Totals::invalid},
    {"payload_absent", &Totals::payload_absent},
    {"malformed", &Totals::malformed},
    {"non_codif", &Totals::non_codif},
    {"nic_drops", &Totals::nic_drops},
    {"wc_errors", &Totals::wc_errors},
    {"written", &Totals::written},
    {"write_drops", &Totals::write_drops},
    {"fills", &Totals::fills},
    {"ordered_too_late", &Totals::ordered_too_late},
    {"payload_mismatches", &Totals::payload_mismatches},
    {"block_misses", &Totals::block_misses},
    {"consumer_drops", &Totals::consumer_drops},
    {"ring_unwritten", &Totals::ring_unwritten},
    {"bad_wire_length", &Totals::bad_wire_length},
    {"outside_window", &Totals::outside_window},
};
// A counter added to Totals without its key above does not build.
static_assert(sizeof(Totals) == 25 * sizeof(std::uint64_t),
              "a new Totals counter needs its row in kTotalsKeys (and in docs/formats.md)");

std::set<std::string> keys_of(const nlohmann::json& object) {
    std::set<std::string> keys;
    for (const auto& [key, value] : object.items()) {
        keys.insert(key);
    }
    return keys;
}

// Two streams, reasons of both classes, counters, added counts and outputs,
// chosen so that every totals counter has its own non-zero value.
void build_distinct_ledger(Ledger& ledger) {
    Feed feed(ledger, wide());
    // Stream A (kAntenna1, thread 0): indices 0 1 2 10, then 4 5 6 late, then
    // 10 and 1 again: 9 received, 4 missing (3 7 8 9), 2 duplicates, 3 out of
    // order, 6 of them invalid.
    std::uint32_t n = 0;
    for (const std::uint32_t f : {0u, 1u, 2u, 10u, 4u, 5u, 6u, 10u, 1u}) {
        feed.frame(codif_frame(kAntenna1, 1, f, 0, n++ < 6));
    }
    // Stream B (kAntenna2, thread 3): (40, 0), then (1, 0) too late, then
    // (39, 999) before the lowest: 3 received, 1 too late, 2 out of order.
    feed.frame(codif_frame(kAntenna2, 40, 0, 3));
    feed.frame(codif_frame(kAntenna2, 1, 0, 3));
    feed.frame(codif_frame(kAntenna2, 39, 999, 3));
    // Stream C (kAntenna2, thread 4): (10, 0), then 16 frames at each of
    // seconds 100000, 200000 and 300000 (3 restarts), then 15 at 400000 that
    // never make a restart (15 implausible): 64 received.
    feed.frame(codif_frame(kAntenna2, 10, 0, 4));
    for (const std::uint32_t seconds : {100000u, 200000u, 300000u, 400000u}) {
        const std::uint32_t run = seconds == 400000u ? 15 : 16;
        for (std::uint32_t f = 0; f < run; ++f) {
            const FrameBytes b = codif_frame(kAntenna2, seconds, f, 4);
            Frame cut = whole(b);
            if (seconds == 100000u && f < 12) {
                // 12 of them captured only up to the end of the CODIF header.
                cut.head = Bytes(b).first(kPlainUdpPayloadOffset + kCodifHeaderBytes);
            }
            if (seconds == 200000u) {
                cut.wire_bytes = 0xFFFFFFFFu;  // 16 damaged record lengths
            }
            feed.demux.on_frame(cut);
        }
    }
    // 7 malformed, 8 non_codif.
    for (int i = 0; i < 3; ++i) {
        feed.frame(with_byte(good(9), 20, 0x20));  // ip_fragment
    }
    for (int i = 0; i < 4; ++i) {
        auto h = make_header(1, 9);
        h.nchan = 0;
        feed.frame(make_frame(kAntenna1, kGroup1, kPort, h));  // codif_zero_field
    }
    for (int i = 0; i < 5; ++i) {
        feed.frame(with_byte(good(9), 13, 0x06));  // not_ipv4
    }
    for (int i = 0; i < 3; ++i) {
        feed.frame(with_byte(good(9), 23, 2));  // not_udp
    }
    ledger.add_source_counter({"mlx5_0/hw_counters/out_of_buffer", 5, true});
    ledger.add_source_counter({"mlx5_0/net/rx_dropped", 100, false});
    ledger.add_source_counter({"mlx5_0/net/rx_missed_errors", 8, true});
    ledger.add_wc_errors(9);
    ledger.add_payload_mismatches(10);
    ledger.add_block_misses(11);
    // 91 frames in all, 76 of them CODIF (9 of A, 3 of B, 64 of C); a
    // frame window kept 22 of them out of the pcap.
    for (int i = 0; i < 22; ++i) {
        ledger.count_outside_window();
    }
    auto pcap = output("run.pcap", "", 62, 7);
    pcap.bytes = 4096;
    pcap.files = 2;
    pcap.on_disk = {{"run.000001.pcap", 13, 3000}};
    pcap.overwritten = 6;
    auto a = output("a.codif", format_ipv4(kAntenna1), 2, 7);
    a.bytes = 16512;
    a.error = "disk full";
    // B's 3 and C's 64 frames, less C's 12 without payload (no codif record),
    // ordered: less 18 too late, plus 17 fills.
    auto b = output("b.codif", format_ipv4(kAntenna2), 54, 0);
    b.bytes = 24768;
    b.ordered.window = 64;
    b.ordered.fills = 17;
    b.ordered.too_late = 18;
    ledger.set_outputs({pcap, a, b});
    // A PSRDADA ring: 19 frames it had no room for, 20 a failure kept out
    // and 1 too late for its window.
    RingStats ring;
    ring.key = "dada";
    ring.consumer = 19;
    ring.unwritten = 20;
    ring.ordered.too_late = 1;
    ledger.add_ring(ring);
    ledger.add_note("a note");
}

TEST(ReportEqualsLedger, EveryTotalsKeyIsTheLedgersOwnDistinctFigure) {
    Ledger ledger;
    build_distinct_ledger(ledger);
    ASSERT_TRUE(ledger.reconciles()) << ledger.disagreement();
    const Totals t = ledger.totals();
    // The ledger this test needs: every counter non-zero and no two alike,
    // so a key carrying another counter's figure cannot pass.
    std::set<std::uint64_t> values;
    for (const auto& [key, field] : kTotalsKeys) {
        EXPECT_GT(t.*field, 0u) << key;
        values.insert(t.*field);
    }
    ASSERT_EQ(values.size(), kTotalsKeys.size()) << "two totals counters have the same value";
    EXPECT_EQ(t.packets, 91u);
    EXPECT_EQ(t.codif, 76u);
    EXPECT_EQ(t.missing, 4u);
    EXPECT_EQ(t.duplicates, 2u);
    EXPECT_EQ(t.out_of_order, 5u);
    EXPECT_EQ(t.too_late, 1u);
    EXPECT_EQ(t.implausible, 15u);
    EXPECT_EQ(t.restarts, 3u);
    EXPECT_EQ(t.invalid, 6u);
    EXPECT_EQ(t.malformed, 7u);
    EXPECT_EQ(t.non_codif, 8u);
    EXPECT_EQ(t.nic_drops, 13u);
    EXPECT_EQ(t.written, 118u);
    EXPECT_EQ(t.fills, 17u);
    EXPECT_EQ(t.ordered_too_late, 18u);
    EXPECT_EQ(t.payload_absent, 12u);
    EXPECT_EQ(t.write_drops, 14u);
    EXPECT_EQ(t.bad_wire_length, 16u);
    EXPECT_EQ(t.consumer_drops, 19u);
    EXPECT_EQ(t.ring_unwritten, 21u);
    EXPECT_EQ(t.outside_window, 22u);

    RunInfo run;
    run.command = "capture";
    run.source = "verbs";
    auto j = report_json(ledger, run);
    std::set<std::string> expected_keys;
    for (const auto& [key, field] : kTotalsKeys) {
        expected_keys.insert(key);
        ASSERT_TRUE(j["totals"].contains(key)) << key;
        EXPECT_EQ(j["totals"][key].get<std::uint64_t>(), t.*field) << key;
    }
    EXPECT_EQ(keys_of(j["totals"]), expected_keys);

    EXPECT_EQ(j["verdict"], "loss");
    EXPECT_EQ(j["reconciled"], true);
    EXPECT_EQ(j["loss_reasons"].get<std::vector<std::string>>(), ledger.loss_reasons());
    EXPECT_EQ(j["notes"].get<std::vector<std::string>>(), ledger.notes());

    // Reasons: each non-zero one under its class with its count, no other.
    std::size_t listed = 0;
    for (std::size_t i = 0; i < kReasonCount; ++i) {
        const auto r = static_cast<Reason>(i);
        const std::string name(to_string(r));
        auto& cls = j["reasons"][kReasonRows[i].loss ? "malformed" : "non_codif"];
        if (ledger.reason_count(r) == 0) {
            EXPECT_FALSE(j["reasons"]["malformed"].contains(name)) << name;
            EXPECT_FALSE(j["reasons"]["non_codif"].contains(name)) << name;
            continue;
        }
        ++listed;
        ASSERT_TRUE(cls.contains(name)) << name;
        EXPECT_EQ(cls[name].get<std::uint64_t>(), ledger.reason_count(r)) << name;
    }
    EXPECT_EQ(listed, 4u);
    EXPECT_EQ(j["reasons"]["malformed"].size() + j["reasons"]["non_codif"].size(), listed);

    ASSERT_EQ(j["source_counters"].size(), ledger.source_counters().size());
    for (std::size_t i = 0; i < ledger.source_counters().size(); ++i) {
        const auto& c = ledger.source_counters()[i];
        auto& e = j["source_counters"][i];
        EXPECT_EQ(keys_of(e), (std::set<std::string>{"name", "value", "drop"}));
        EXPECT_EQ(e["name"], c.name);
        EXPECT_EQ(e["value"].get<std::uint64_t>(), c.value);
        EXPECT_EQ(e["drop"], c.is_drop);
    }
}

// "reconciled" is the ledger's own check, not a constant: an output one
// record short makes it false (and the verdict loss).
TEST(ReportEqualsLedger, ReconciledIsFalseWhenTheCountsDoNotAddUp) {
    for (const std::uint64_t written : {5u, 4u}) {
        Ledger ledger;
        Feed feed(ledger);
        feed.clean(kAntenna1, 5);
        ledger.set_outputs({output("a.pcap", "", written, 0)});
        const auto j = report_json(ledger, RunInfo{});
        EXPECT_EQ(j["reconciled"], written == 5) << written << " of 5 records written";
        EXPECT_EQ(j["verdict"], written == 5 ? "zero-loss" : "loss");
    }
}

TEST(ReportEqualsLedger, EveryStreamKeyIsTheLedgersOwnFigure) {
    Ledger ledger;
    build_distinct_ledger(ledger);
    auto j = report_json(ledger, RunInfo{});
    ASSERT_EQ(j["streams"].size(), ledger.streams().size());
    ASSERT_EQ(ledger.streams().size(), 3u);
    std::set<std::string> keys = {
        "group",   "antenna",     "thread",       "station",           "layout",           "format",
        "epoch",   "rate",        "period",       "frames_per_period", "packets",          "bytes",
        "missing", "duplicates",  "out_of_order", "too_late",          "invalid",          "first",
        "last",    "implausible", "restarts",     "payload_absent",    "last_restart_jump"};
    keys.insert("unwritten");
    for (std::size_t i = 0; i < ledger.streams().size(); ++i) {
        const StreamStats& s = ledger.streams()[i];
        auto& e = j["streams"][i];
        EXPECT_EQ(keys_of(e), keys);
        EXPECT_EQ(e["group"], s.group.to_string());
        EXPECT_EQ(e["antenna"], format_ipv4(s.antenna));
        EXPECT_EQ(e["thread"].get<std::uint64_t>(), s.thread);
        EXPECT_EQ(e["station"].get<std::uint64_t>(), s.station);
        EXPECT_EQ(e["layout"], std::string(layout_name(s.format, s.layout)));
        EXPECT_EQ(e["format"], std::string(to_string(s.format)));
        EXPECT_EQ(e["epoch"].get<std::uint64_t>(), s.epoch);
        EXPECT_EQ(e["period"].get<std::uint64_t>(), s.timing.period);
        EXPECT_EQ(e["frames_per_period"].get<std::uint64_t>(), s.timing.frames_per_period);
        EXPECT_EQ(e["packets"].get<std::uint64_t>(), s.packets());
        EXPECT_EQ(e["bytes"].get<std::uint64_t>(), s.bytes);
        EXPECT_EQ(e["missing"].get<std::uint64_t>(), s.sequence.missing());
        EXPECT_EQ(e["duplicates"].get<std::uint64_t>(), s.sequence.duplicates());
        EXPECT_EQ(e["out_of_order"].get<std::uint64_t>(), s.sequence.out_of_order());
        EXPECT_EQ(e["too_late"].get<std::uint64_t>(), s.sequence.too_late());
        EXPECT_EQ(e["implausible"].get<std::uint64_t>(), s.sequence.implausible());
        EXPECT_EQ(e["restarts"].get<std::uint64_t>(), s.sequence.restarts());
        EXPECT_EQ(e["last_restart_jump"].get<std::int64_t>(), s.sequence.last_restart_jump());
        EXPECT_EQ(e["invalid"].get<std::uint64_t>(), s.invalid);
        EXPECT_EQ(e["payload_absent"].get<std::uint64_t>(), s.payload_absent);
        EXPECT_EQ(e["unwritten"].get<std::uint64_t>(), ledger.unwritten(s));
        EXPECT_EQ(e["first"]["seconds"].get<std::uint64_t>(), s.first.seconds);
        EXPECT_EQ(e["first"]["frame"].get<std::uint64_t>(), s.first.frame);
        EXPECT_EQ(e["last"]["seconds"].get<std::uint64_t>(), s.last.seconds);
        EXPECT_EQ(e["last"]["frame"].get<std::uint64_t>(), s.last.frame);
    }
    // Stream A's sequence counts are distinct, so no key can carry another's.
    const StreamStats& a = ledger.streams()[0];
    const std::set<std::uint64_t> a_values = {a.packets(), a.sequence.missing(),
                                              a.sequence.duplicates(), a.sequence.out_of_order(),
                                              a.invalid};
    EXPECT_EQ(a_values.size(), 5u);
    EXPECT_EQ(j["streams"][1]["thread"], 3);
    EXPECT_EQ(j["streams"][1]["too_late"], 1);
    EXPECT_EQ(j["streams"][1]["first"]["seconds"], 39);
    EXPECT_EQ(j["streams"][1]["first"]["frame"], 999);
    // Stream C: the last restart went from (200000, 15) to (300000, 0); its
    // current segment is (300000, 0) .. (300000, 15).
    EXPECT_EQ(j["streams"][2]["restarts"], 3);
    EXPECT_EQ(j["streams"][2]["implausible"], 15);
    EXPECT_EQ(j["streams"][2]["last_restart_jump"], 100000000 - 15);
    EXPECT_EQ(j["streams"][2]["first"]["seconds"], 300000);
    EXPECT_EQ(j["streams"][2]["last"]["frame"], 15);
}

TEST(ReportEqualsLedger, EveryOutputKeyIsTheLedgersOwnFigure) {
    Ledger ledger;
    build_distinct_ledger(ledger);
    auto j = report_json(ledger, RunInfo{});
    ASSERT_EQ(j["outputs"].size(), ledger.outputs().size());
    for (std::size_t i = 0; i < ledger.outputs().size(); ++i) {
        const OutputStats& o = ledger.outputs()[i];
        auto& e = j["outputs"][i];
        std::set<std::string> keys = {"path",    "format",      "group",   "antenna",
                                      "packets", "bytes",       "dropped", "files",
                                      "on_disk", "overwritten", "ordered"};
        if (o.ordered.window == 0) {
            EXPECT_TRUE(e["ordered"].is_null()) << o.path;
        } else {
            const auto& q = e["ordered"];
            EXPECT_EQ(keys_of(q), (std::set<std::string>{"window", "fills", "duplicates",
                                                         "too_late", "unheld", "restarts"}));
            EXPECT_EQ(q["window"].get<std::uint32_t>(), o.ordered.window);
            EXPECT_EQ(q["fills"].get<std::uint64_t>(), o.ordered.fills);
            EXPECT_EQ(q["too_late"].get<std::uint64_t>(), o.ordered.too_late);
        }
        if (!o.error.empty()) {
            keys.insert("error");
            EXPECT_EQ(e["error"], o.error);
        }
        EXPECT_EQ(keys_of(e), keys) << o.path;
        EXPECT_EQ(e["path"], o.path);
        EXPECT_EQ(e["format"], o.format);
        EXPECT_EQ(e["group"], o.group);
        EXPECT_EQ(e["antenna"], o.antenna);
        EXPECT_EQ(e["packets"].get<std::uint64_t>(), o.packets) << o.path;
        EXPECT_EQ(e["bytes"].get<std::uint64_t>(), o.bytes) << o.path;
        EXPECT_EQ(e["dropped"].get<std::uint64_t>(), o.dropped) << o.path;
        EXPECT_EQ(e["files"].get<std::uint64_t>(), o.files) << o.path;
        EXPECT_EQ(e["overwritten"].get<std::uint64_t>(), o.overwritten) << o.path;
        ASSERT_EQ(e["on_disk"].size(), o.on_disk.size()) << o.path;
        for (std::size_t k = 0; k < o.on_disk.size(); ++k) {
            EXPECT_EQ(e["on_disk"][k]["path"], o.on_disk[k].path);
            EXPECT_EQ(e["on_disk"][k]["packets"].get<std::uint64_t>(), o.on_disk[k].packets);
            EXPECT_EQ(e["on_disk"][k]["bytes"].get<std::uint64_t>(), o.on_disk[k].bytes);
        }
    }
    EXPECT_EQ(j["outputs"][1]["error"], "disk full");
    EXPECT_EQ(j["outputs"][2]["ordered"]["window"], 64);
}

}  // namespace
}  // namespace ibvcap
