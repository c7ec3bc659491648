// Ordered files (--ordered; docs/formats.md, "Ordered files and fill
// frames") end to end: generator → pcap with injected loss, duplicates and
// reordering → ibvcap read → the codif file of each antenna, walked frame by
// frame: each thread strictly in sequence, a fill frame (invalid bit, fill
// pattern) exactly where the generator skipped a frame, every other frame the
// generator's bytes, and the ledger, report and index saying so.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "formats/codif.hpp"
#include "formats/fill_frame.hpp"
#include "formats/vdif.hpp"
#include "frames.hpp"
#include "lib/review/verify.hpp"
#include "lib/run/common.hpp"
#include "lib/run/gen.hpp"
#include "lib/run/read.hpp"
#include "lib/sinks/file_index.hpp"
#include "lib/traffic/generator.hpp"

namespace ibvcap {
namespace {

GeneratorConfig faulty_traffic() {
    GeneratorConfig c;
    c.antennas = {test::kAntenna1, test::kAntenna2};
    c.groups = {Endpoint{test::kGroup1, 36001}};
    c.threads = 3;
    c.frames = 600;
    c.frames_per_period = 250;  // two period wraps per stream
    c.period = 2;
    c.start_seconds = 1000;
    c.payload_bytes = 1024;
    c.loss = 0.04;
    c.duplicate = 0.03;
    c.reorder = 0.04;
    c.invalid = 0.02;
    c.seed = 28;
    return c;
}

// One frame record of a codif or vdif file: what the walk needs of its header.
struct Record {
    std::uint32_t seconds = 0;
    std::uint32_t frame = 0;
    std::uint16_t station = 0;
    std::uint16_t thread = 0;
    bool invalid = false;
    std::size_t header_bytes = 0;
    std::size_t frame_bytes = 0;
};

// (nullopt: not a header of the format.) A VTP stream's records are VDIF.
std::optional<Record> read_record(StreamFormat format, Bytes rest) {
    Record r;
    if (format == StreamFormat::codif) {
        CodifHeader h;
        if (decode_codif(rest, h) != CodifError::none) {
            return std::nullopt;
        }
        r = {h.seconds, h.frame,           h.stationid,    h.threadid,
             h.invalid, kCodifHeaderBytes, h.frame_bytes()};
    } else {
        VdifHeader h;
        if (decode_vdif(rest, h) != VdifError::none || h.frame_bytes() == 0) {
            return std::nullopt;
        }
        r = {h.seconds, h.frame, h.station, h.thread, h.invalid, h.header_bytes(), h.frame_bytes()};
    }
    if (r.frame_bytes > rest.size()) {
        return std::nullopt;
    }
    return r;
}

// Whether two headers of `format` agree in every field but the time and the
// invalid bit.
bool same_but_time(StreamFormat format, Bytes a, Bytes b) {
    if (format == StreamFormat::codif) {
        CodifHeader x;
        CodifHeader y;
        decode_codif(a, x);
        decode_codif(b, y);
        y.seconds = x.seconds;
        y.frame = x.frame;
        y.invalid = x.invalid;
        return x == y;
    }
    VdifHeader x;
    VdifHeader y;
    decode_vdif(a, x);
    decode_vdif(b, y);
    y.seconds = x.seconds;
    y.frame = x.frame;
    y.invalid = x.invalid;
    return x == y;
}

// What a stream should read as in an ordered file: every index from its
// lowest sent to its highest, each the frame the generator sent (its record:
// the datagram less any VTP prefix) or, where it sent none, a fill.
struct StreamPlan {
    std::map<std::uint64_t, std::vector<std::uint8_t>> sent;  // index -> record
    std::uint64_t duplicates = 0;
};
using Key = std::tuple<std::uint32_t, std::uint16_t, std::uint16_t>;  // antenna, station, thread

std::map<Key, StreamPlan> plan_of(const GeneratorConfig& config) {
    std::map<Key, StreamPlan> plans;
    Generator gen(config);
    GeneratedFrame f;
    const StreamTiming timing = config.timing();
    const std::size_t prefix = config.format == StreamFormat::vtp ? kVtpPsnBytes : 0;
    while (gen.next(f)) {
        const Bytes record = f.bytes.subspan(42 + prefix);  // untagged Ethernet, IPv4, UDP
        const auto r = read_record(config.format, record);
        EXPECT_TRUE(r.has_value());
        const auto& t = gen.truth()[f.stream];
        EXPECT_EQ(r->thread, t.thread);
        StreamPlan& p = plans[{t.antenna, r->station, t.thread}];
        const auto [it, fresh] =
            p.sent.try_emplace(timing.index(r->seconds, r->frame), record.begin(), record.end());
        if (!fresh) {
            EXPECT_TRUE(std::equal(record.begin(), record.end(), it->second.begin()));
            ++p.duplicates;
        }
    }
    return plans;
}

// Whether every stream's first second ends, as it arrives, at its last
// frame, so that a demux that learns the rate from it learns the generator's
// (lib/demux/rate.hpp: a first second whose last frame was lost or swapped
// into the next learns too low a rate, which that test is not about).
bool learnable(const GeneratorConfig& config) {
    Generator gen(config);
    GeneratedFrame f;
    const std::size_t prefix = config.format == StreamFormat::vtp ? kVtpPsnBytes : 0;
    std::map<std::size_t, std::uint32_t> highest;  // stream -> in its first second, so far
    std::set<std::size_t> done;
    while (gen.next(f)) {
        const auto r = read_record(config.format, f.bytes.subspan(42 + prefix));
        if (done.count(f.stream) != 0) {
            continue;
        }
        if (r->seconds == config.start_seconds) {
            highest[f.stream] = std::max(highest[f.stream], r->frame);
        } else {
            if (highest[f.stream] + 1 != config.vdif.frames_per_second) {
                return false;
            }
            done.insert(f.stream);
        }
    }
    return true;
}

struct Walked {
    std::vector<std::uint64_t> indices;  // in file order
    std::set<std::uint64_t> fills;       // the indices of the fill frames
};

// The indices of a stream's span the generator never sent.
std::set<std::uint64_t> skipped_of(const StreamPlan& plan) {
    std::set<std::uint64_t> skipped;
    for (std::uint64_t i = plan.sent.begin()->first; i <= plan.sent.rbegin()->first; ++i) {
        if (plan.sent.count(i) == 0) {
            skipped.insert(i);
        }
    }
    return skipped;
}

// Walks a codif or vdif file, checking each stream's records against its
// plan: in sequence, each a frame sent or a fill.
std::map<std::pair<std::uint16_t, std::uint16_t>, Walked> walk_ordered(
    const std::vector<std::uint8_t>& bytes, StreamFormat format, std::uint32_t antenna,
    const std::map<Key, StreamPlan>& plans, const StreamTiming& timing) {
    std::map<std::pair<std::uint16_t, std::uint16_t>, Walked> streams;
    std::size_t at = 0;
    while (at < bytes.size()) {
        const Bytes rest = Bytes(bytes).subspan(at);
        const auto h = read_record(format, rest);
        if (!h) {
            ADD_FAILURE() << "record at byte " << at << " is not a frame header";
            break;
        }
        const Bytes record = rest.first(h->frame_bytes);
        const std::uint64_t index = timing.index(h->seconds, h->frame);
        Walked& w = streams[{h->station, h->thread}];
        if (!w.indices.empty()) {
            EXPECT_EQ(index, w.indices.back() + 1)
                << "thread " << h->thread << " out of sequence at byte " << at;
        }
        w.indices.push_back(index);
        const auto plan = plans.find({antenna, h->station, h->thread});
        if (plan == plans.end()) {
            ADD_FAILURE() << "a stream never sent, at byte " << at;
            break;
        }
        if (is_fill_payload(record.subspan(h->header_bytes))) {
            w.fills.insert(index);
            EXPECT_TRUE(h->invalid) << "a fill frame has its invalid bit set, index " << index;
            // The rest of its header is the stream's.
            EXPECT_TRUE(same_but_time(format, record, plan->second.sent.begin()->second)) << index;
        } else if (const auto it = plan->second.sent.find(index); it != plan->second.sent.end()) {
            EXPECT_TRUE(std::equal(record.begin(), record.end(), it->second.begin()))
                << "thread " << h->thread << " index " << index << ": not the frame sent";
        } else {
            ADD_FAILURE() << "thread " << h->thread << " index " << index
                          << ": a frame that was never sent";
        }
        at += record.size();
    }
    return streams;
}

struct OrderedRun {
    test::TempDir dir;
    ReadRequest request;
    std::atomic<bool> stop{false};
    RunOutcome outcome;
};

// gen → pcap → read with ordered files of the generator's format.
void run_ordered(OrderedRun& run, const GeneratorConfig& config, std::uint32_t window,
                 std::uint64_t vdif_rate = 0) {
    Generator gen(config);
    run.request.file = run.dir / "in.pcap";
    write_generated_pcap(gen, run.request.file);
    run.request.demux.any_group_format = config.format;
    run.request.demux.vdif_frames_per_second = vdif_rate;
    run.request.outputs.output_dir = run.dir / "out";
    run.request.outputs.any_group_format = config.format;
    run.request.outputs.formats = {OutputFormat::codif, OutputFormat::codifhdr, OutputFormat::vdif};
    run.request.outputs.ordered_window = window;
    run.outcome = run_read(run.request, run.stop);
}

struct Case {
    const char* name;
    StreamFormat format;
    CodifLayout layout;
    bool legacy;
    std::uint8_t edv;
    bool learn_rate;  // VDIF: the demux learns the rate (else it is given)
};

class OrderedFiles : public ::testing::TestWithParam<Case> {};

TEST_P(OrderedFiles, FramesInSequenceWithFillsExactlyWhereFramesWereLost) {
    const Case c = GetParam();
    GeneratorConfig config = faulty_traffic();
    config.format = c.format;
    config.layout = c.layout;
    config.vdif.legacy = c.legacy;
    config.vdif.edv = c.edv;
    if (config.is_vdif()) {
        config.period = 1;  // (CODIF's: VDIF frame numbers count within a second)
        config.frames_per_period = 1000;
        config.vdif.frames_per_second = 250;
        while (c.learn_rate && !learnable(config)) {
            ++config.seed;
        }
    }
    const auto plans = plan_of(config);
    OrderedRun run;
    const bool vdif = config.is_vdif();
    run_ordered(run, config, 16, vdif && !c.learn_rate ? 250 : 0);
    const Ledger& ledger = run.outcome.ledger;
    EXPECT_TRUE(ledger.reconciles()) << ledger.disagreement();
    ASSERT_EQ(ledger.streams().size(), plans.size());
    for (const StreamStats& s : ledger.streams()) {
        ASSERT_EQ(s.timing.frames_per_period, vdif ? 250u : config.frames_per_period)
            << "the rate " << (c.learn_rate ? "learned" : "given");
    }
    const StreamTiming timing = config.timing();
    std::uint64_t skipped = 0;
    std::uint64_t duplicates = 0;
    std::size_t ordered_files = 0;
    std::set<Key> walked;
    for (const OutputStats& o : ledger.outputs()) {
        EXPECT_EQ(o.format, vdif ? "vdif" : o.format) << "a VDIF stream has no CODIF file";
        if (o.format == "codifhdr") {
            EXPECT_EQ(o.ordered.window, 0u) << "codifhdr stays in arrival order";
            continue;
        }
        ++ordered_files;
        const std::uint32_t antenna = *parse_ipv4(o.antenna);
        std::uint64_t fills = 0;
        const auto streams =
            walk_ordered(test::read_file(o.path), config.format, antenna, plans, timing);
        ASSERT_EQ(streams.size(), vdif ? 1u : config.threads) << o.path;
        for (const auto& [id, w] : streams) {
            const Key key{antenna, id.first, id.second};
            walked.insert(key);
            if (vdif) {
                EXPECT_EQ(o.station, id.first) << o.path;
                EXPECT_EQ(o.thread, id.second) << o.path;
            }
            const StreamPlan& plan = plans.at(key);
            ASSERT_FALSE(w.indices.empty());
            EXPECT_EQ(w.indices.front(), plan.sent.begin()->first) << "from the lowest sent";
            EXPECT_EQ(w.indices.back(), plan.sent.rbegin()->first) << "to the highest";
            EXPECT_EQ(w.fills, skipped_of(plan)) << o.path << " thread " << id.second;
            fills += w.fills.size();
            skipped += skipped_of(plan).size();
            duplicates += plan.duplicates;
        }
        EXPECT_EQ(o.ordered.window, 16u);
        EXPECT_EQ(o.ordered.fills, fills) << o.path;
        EXPECT_EQ(o.ordered.too_late, 0u);
        EXPECT_EQ(o.ordered.restarts, 0u);
        EXPECT_EQ(o.dropped, 0u);
        // Its index says it is ordered, with its window.
        std::string error;
        const auto idx = read_file_index(o.path, error);
        ASSERT_TRUE(idx) << error;
        EXPECT_EQ(idx->ordered_window, 16u);
        EXPECT_EQ(idx->frames, o.packets);
    }
    EXPECT_EQ(walked.size(), plans.size()) << "every stream in a file";
    EXPECT_EQ(ordered_files, vdif ? plans.size() : config.antennas.size());
    ASSERT_GT(skipped, 0u);
    ASSERT_GT(duplicates, 0u);
    const Totals t = ledger.totals();
    EXPECT_EQ(t.fills, skipped) << "a fill for every frame the generator skipped";
    EXPECT_EQ(t.missing, skipped);
    EXPECT_EQ(t.ordered_too_late, 0u);
    // The report says it per output and in the totals.
    const auto j = report_json(ledger, run.outcome.info);
    EXPECT_EQ(j["totals"]["fills"].get<std::uint64_t>(), skipped);
    for (const auto& o : j["outputs"]) {
        EXPECT_EQ(o["ordered"].is_null(), o["format"] == "codifhdr") << o.dump();
    }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, OrderedFiles,
    ::testing::Values(
        Case{"codif_v2", StreamFormat::codif, CodifLayout::v2, false, 0, false},
        Case{"codif_draft", StreamFormat::codif, CodifLayout::draft, false, 0, false},
        Case{"vdif_edv3_given_rate", StreamFormat::vdif, CodifLayout::v2, false, 3, false},
        Case{"vdif_legacy_learned_rate", StreamFormat::vdif, CodifLayout::v2, true, 0, true},
        Case{"vtp_edv4_learned_rate", StreamFormat::vtp, CodifLayout::v2, false, 4, true}),
    [](const auto& param) { return std::string(param.param.name); });

// A window of one frame waits for nothing: a frame swapped with its
// successor has a fill written in its place and comes too late, which is
// counted (loss), and the file still holds every position once.
TEST(OrderedWindow, AFrameLaterThanTheWindowIsCountedAndAFillTakesItsPlace) {
    GeneratorConfig config = faulty_traffic();
    config.loss = 0;
    config.duplicate = 0;
    config.invalid = 0;
    const auto plans = plan_of(config);
    OrderedRun run;
    run_ordered(run, config, 1);
    const Ledger& ledger = run.outcome.ledger;
    EXPECT_TRUE(ledger.reconciles()) << ledger.disagreement();
    std::uint64_t reordered = 0;
    for (const auto& s : ledger.streams()) {
        reordered += s.sequence.out_of_order();
    }
    ASSERT_GT(reordered, 0u);
    const Totals t = ledger.totals();
    EXPECT_EQ(t.missing, 0u);
    EXPECT_EQ(t.ordered_too_late, reordered);
    EXPECT_EQ(t.fills, reordered);
    EXPECT_EQ(run.outcome.exit_code, kExitLoss);
    bool said = false;
    for (const auto& why : ledger.loss_reasons()) {
        said = said || why.find("left out of the ordered files") != std::string::npos;
    }
    EXPECT_TRUE(said);
    // Every position once, in order; a fill in place of each late frame.
    const StreamTiming timing{config.period, config.frames_per_period};
    std::uint64_t fills = 0;
    for (const OutputStats& o : ledger.outputs()) {
        if (o.format == "codif") {
            const std::uint32_t antenna = *parse_ipv4(o.antenna);
            for (const auto& [id, w] : walk_ordered(test::read_file(o.path), StreamFormat::codif,
                                                    antenna, plans, timing)) {
                const StreamPlan& plan = plans.at({antenna, id.first, id.second});
                EXPECT_EQ(w.indices.size(), plan.sent.size()) << "every position, once";
                for (const std::uint64_t i : w.fills) {
                    EXPECT_EQ(plan.sent.count(i), 1u) << "a fill where a late frame was sent";
                }
                fills += w.fills.size();
            }
        }
    }
    EXPECT_EQ(fills, reordered);
}

// ibvcap verify reads ordered vdif files back (as VDIF, at their stream's
// rate) and finds what they promise; two frames swapped are out of sequence.
TEST(OrderedFiles, VerifyChecksAnOrderedVdifFileIsInSequence) {
    GeneratorConfig config = faulty_traffic();
    config.format = StreamFormat::vtp;
    config.period = 1;
    config.frames_per_period = 1000;
    config.vdif.frames_per_second = 250;
    OrderedRun run;
    run_ordered(run, config, 16, 250);
    const std::string report = run.dir / "report.json";
    std::ofstream(report) << report_json(run.outcome.ledger, run.outcome.info).dump(2);
    const VerifyOutcome ok = run_verify({{}, report});
    EXPECT_TRUE(ok.ok());
    for (const auto& f : ok.files) {
        EXPECT_TRUE(f.ok()) << f.path << ": " << (f.differences.empty() ? "" : f.differences[0]);
        EXPECT_EQ(f.format, "vdif");
    }
    EXPECT_EQ(ok.streams_checked, run.outcome.ledger.streams().size());
    // Swap the first two records of one file.
    const std::string path = run.outcome.ledger.outputs().front().path;
    std::vector<std::uint8_t> bytes = test::read_file(path);
    const std::size_t n = read_record(StreamFormat::vdif, bytes)->frame_bytes;
    std::swap_ranges(bytes.begin(), bytes.begin() + static_cast<long>(n),
                     bytes.begin() + static_cast<long>(n));
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<long>(bytes.size()));
    const VerifyOutcome bad = run_verify({{}, report});
    EXPECT_FALSE(bad.ok());
    bool said = false;
    for (const auto& f : bad.files) {
        for (const auto& d : f.differences) {
            said = said || d.find("not in sequence in an ordered file") != std::string::npos;
        }
    }
    EXPECT_TRUE(said);
}

// -F vdif names a file per stream: {prefix}_{group}_{port}_{antenna}_{station}_{thread}.vdif,
// and a run finds (and with --overwrite removes) an earlier run's of its
// groups, rotated and with a lane prefix too.
TEST(VdifFiles, NamedByStationAndThreadAndFoundAsTheRunsOwn) {
    test::TempDir dir;
    const std::string out = dir / "out";
    std::filesystem::create_directory(out);
    OutputOptions o;
    o.output_dir = out;
    o.formats = {OutputFormat::vdif};
    o.groups = {Endpoint{test::kGroup1, 36001}};
    EXPECT_EQ(stream_output_path(o, o.groups[0], test::kAntenna1, 0x4566, 3),
              out + "/ibvcap_239.17.0.1_36001_10.0.0.11_17766_3.vdif");
    for (const std::string name : {"ibvcap_239.17.0.1_36001_10.0.0.11_17766_3.vdif",
                                   "ibvcap_239.17.0.1_36001_10.0.0.11_0_1023.000004.vdif",
                                   "ibvcap_mlx5_0p1_239.17.0.1_36001_10.0.0.11_1_2.vdif",
                                   "ibvcap_239.17.0.1_36001_10.0.0.11_17766_3.vdif.idx.json"}) {
        EXPECT_TRUE(is_run_output_name(o, name)) << name;
    }
    for (const std::string name :
         {"ibvcap_239.17.0.1_36001_10.0.0.11.vdif", "ibvcap_239.17.0.1_36001_10.0.0.11_1.vdif",
          "ibvcap_239.17.0.1_36001_10.0.0.11_17766_3.codif",
          "ibvcap_239.17.0.1_36001_10.0.0.11_x_3.vdif"}) {
        EXPECT_FALSE(is_output_name(o, name)) << name;
    }
    // Another group's file in the same directory is not this run's.
    EXPECT_TRUE(is_output_name(o, "ibvcap_239.17.0.9_36001_10.0.0.11_1_2.vdif"));
    EXPECT_FALSE(is_run_output_name(o, "ibvcap_239.17.0.9_36001_10.0.0.11_1_2.vdif"));
    std::ofstream(out + "/ibvcap_239.17.0.1_36001_10.0.0.11_1_2.000001.vdif") << "x";
    std::ofstream(out + "/ibvcap_239.17.0.9_36001_10.0.0.11_1_2.vdif") << "x";
    EXPECT_EQ(existing_outputs(o),
              std::vector<std::string>{out + "/ibvcap_239.17.0.1_36001_10.0.0.11_1_2.000001.vdif"});
    EXPECT_THROW(claim_outputs(o, ""), std::runtime_error);
    o.overwrite = true;
    claim_outputs(o, "");
    EXPECT_FALSE(
        std::filesystem::exists(out + "/ibvcap_239.17.0.1_36001_10.0.0.11_1_2.000001.vdif"));
    EXPECT_TRUE(std::filesystem::exists(out + "/ibvcap_239.17.0.9_36001_10.0.0.11_1_2.vdif"));
}

// `config` in `format`; a VDIF one at 250 frames a second.
void set_format(GeneratorConfig& config, StreamFormat format) {
    config.format = format;
    if (config.is_vdif()) {
        config.period = 1;
        config.frames_per_period = 1000;
        config.vdif.frames_per_second = 250;
    }
}

// -F codif and codifhdr hold CODIF streams only, -F vdif VDIF streams only:
// a VDIF capture asked for all three writes vdif files alone, a CODIF one
// codif and codifhdr files alone.
TEST(VdifFiles, EachFormatsFilesHoldOnlyItsStreams) {
    for (const StreamFormat format : {StreamFormat::codif, StreamFormat::vtp}) {
        GeneratorConfig config = faulty_traffic();
        set_format(config, format);
        OrderedRun run;
        run_ordered(run, config, 0, 250);
        std::set<std::string> formats;
        for (const OutputStats& o : run.outcome.ledger.outputs()) {
            formats.insert(o.format);
            EXPECT_EQ(o.ordered.window, 0u);
        }
        const std::set<std::string> expected_formats =
            format == StreamFormat::codif ? std::set<std::string>{"codif", "codifhdr"}
                                          : std::set<std::string>{"vdif"};
        EXPECT_EQ(formats, expected_formats);
        EXPECT_TRUE(run.outcome.ledger.reconciles()) << run.outcome.ledger.disagreement();
        if (format == StreamFormat::codif) {
            continue;
        }
        // Unordered, a vdif file is its stream's VDIF frames as they
        // arrived, each without its VTP sequence number.
        std::map<std::string, std::vector<std::uint8_t>> expected;
        Generator gen(config);
        GeneratedFrame f;
        while (gen.next(f)) {
            const Bytes frame = f.bytes.subspan(42 + kVtpPsnBytes);
            const auto r = read_record(StreamFormat::vdif, frame);
            const auto& t = gen.truth()[f.stream];
            auto& bytes = expected[stream_output_path(run.request.outputs, t.group, t.antenna,
                                                      r->station, r->thread)];
            bytes.insert(bytes.end(), frame.begin(), frame.end());
        }
        ASSERT_EQ(expected.size(), run.outcome.ledger.outputs().size());
        for (const auto& [path, bytes] : expected) {
            EXPECT_EQ(test::read_file(path), bytes) << path;
        }
    }
}

// A stream that no format asked for takes (-F codif for VDIF, -F vdif for
// CODIF: the CLI refuses them before the run, output_format_problem; a
// library caller is not stopped) is counted: its frames are `unwritten`,
// a note says so, the verdict is loss and names the option.
TEST(VdifFiles, AStreamNoFormatTakesIsCountedUnwrittenAndTheVerdictIsLoss) {
    for (const StreamFormat format : {StreamFormat::codif, StreamFormat::vdif}) {
        GeneratorConfig config = faulty_traffic();
        config.loss = config.duplicate = config.reorder = config.invalid = 0;
        set_format(config, format);
        OrderedRun run;
        Generator gen(config);
        run.request.file = run.dir / "in.pcap";
        write_generated_pcap(gen, run.request.file);
        run.request.demux.any_group_format = format;
        run.request.outputs.output_dir = run.dir / "out";
        run.request.outputs.any_group_format = format;
        const OutputFormat other =
            format == StreamFormat::codif ? OutputFormat::vdif : OutputFormat::codif;
        run.request.outputs.formats = {other};
        const std::string option = format == StreamFormat::codif ? "-F vdif" : "-F codif";
        ASSERT_NE(output_format_problem(run.request.outputs).find(std::string(option)),
                  std::string::npos);
        run.outcome = run_read(run.request, run.stop);
        const Ledger& ledger = run.outcome.ledger;
        EXPECT_TRUE(ledger.outputs().empty());
        const Totals t = ledger.totals();
        ASSERT_GT(t.codif, 0u);
        EXPECT_EQ(t.missing, 0u);
        for (const StreamStats& s : ledger.streams()) {
            EXPECT_EQ(ledger.unwritten(s), s.packets()) << option;
        }
        EXPECT_FALSE(ledger.zero_loss()) << option;
        EXPECT_EQ(run.outcome.exit_code, kExitLoss) << option;
        bool said = false;
        for (const std::string& why : ledger.loss_reasons()) {
            said = said || (why.find("are in no file: " + option + " takes none of them") !=
                            std::string::npos);
        }
        EXPECT_TRUE(said) << option;
        const auto& notes = ledger.notes();
        EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
            return n.find("captured but written to no file") != std::string::npos;
        }));
        const nlohmann::json report = report_json(ledger, RunInfo{});
        EXPECT_EQ(report["streams"][0]["unwritten"], ledger.streams()[0].packets());
        EXPECT_EQ(report["verdict"], "loss");

        // With a format that takes them (and one that does not), nothing is unwritten.
        OrderedRun both;
        both.request = run.request;
        both.request.outputs.output_dir = both.dir / "out";
        both.request.outputs.formats = {other, OutputFormat::raw};
        both.outcome = run_read(both.request, both.stop);
        for (const StreamStats& s : both.outcome.ledger.streams()) {
            EXPECT_EQ(both.outcome.ledger.unwritten(s), 0u);
        }
        EXPECT_TRUE(both.outcome.ledger.zero_loss()) << both.outcome.ledger.loss_reasons().front();
    }
}

}  // namespace
}  // namespace ibvcap
