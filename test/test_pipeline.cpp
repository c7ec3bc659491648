// End to end, in process: generator → pcap file → read → ledger and files,
// checked against the generator's ground truth and its bytes.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "codifio_transcript.hpp"
#include "frames.hpp"
#include "lib/run/common.hpp"
#include "lib/run/gen.hpp"
#include "lib/run/read.hpp"
#include "lib/sources/pcap_file.hpp"
#include "lib/traffic/generator.hpp"

namespace ibvcap {
namespace {

GeneratorConfig config_with_faults() {
    GeneratorConfig c;
    c.antennas = {test::kAntenna1, test::kAntenna2, (10u << 24) | 13u};
    c.groups = {Endpoint{test::kGroup1, 36001}, Endpoint{test::kGroup2, 36002}};
    c.threads = 2;
    c.frames = 400;
    c.frames_per_period = 150;  // two period wraps per stream
    c.period = 2;
    c.start_seconds = 1000;
    c.payload_bytes = 2048;
    c.loss = 0.03;
    c.duplicate = 0.03;
    c.reorder = 0.03;
    c.seed = 7;
    return c;
}

// What the generator sent, as the writers should lay it out.
struct Expected {
    std::map<std::string, std::vector<std::uint8_t>> codif, codifhdr, raw;  // by file path
};

Expected expected_files(const GeneratorConfig& config, const OutputOptions& options) {
    Expected e;
    Generator gen(config);
    GeneratedFrame f;
    const std::size_t hdr = config.vlan_id >= 0 ? 46 : 42;
    while (gen.next(f)) {
        const auto& t = gen.truth()[f.stream];
        auto path = [&](OutputFormat fmt) { return output_path(options, fmt, t.group, t.antenna); };
        auto& c = e.codif[path(OutputFormat::codif)];
        c.insert(c.end(), f.bytes.begin() + static_cast<long>(hdr), f.bytes.end());
        auto& h = e.codifhdr[path(OutputFormat::codifhdr)];
        h.insert(h.end(), f.bytes.begin() + static_cast<long>(hdr),
                 f.bytes.begin() + static_cast<long>(hdr + kCodifHeaderBytes));
        auto& r = e.raw[path(OutputFormat::raw)];
        r.insert(r.end(), f.bytes.begin(), f.bytes.end());
    }
    return e;
}

void expect_ledger_matches_truth(const Ledger& ledger, const Generator& gen) {
    ASSERT_EQ(ledger.streams().size(), gen.truth().size());
    for (const auto& t : gen.truth()) {
        const StreamStats* s = nullptr;
        for (const auto& candidate : ledger.streams()) {
            if (candidate.group == t.group && candidate.antenna == t.antenna &&
                candidate.thread == t.thread) {
                s = &candidate;
            }
        }
        ASSERT_NE(s, nullptr);
        EXPECT_EQ(s->packets(), t.packets());
        EXPECT_EQ(s->sequence.missing(), t.skipped);
        EXPECT_EQ(s->sequence.duplicates(), t.duplicated);
        EXPECT_EQ(s->sequence.out_of_order(), t.reordered);
        EXPECT_EQ(s->sequence.too_late(), 0u);
    }
    const auto truth = gen.truth_json();
    const Totals totals = ledger.totals();
    EXPECT_EQ(totals.packets, truth["totals"]["packets"].get<std::uint64_t>());
    EXPECT_EQ(totals.missing, truth["totals"]["missing"].get<std::uint64_t>());
    EXPECT_EQ(totals.duplicates, truth["totals"]["duplicates"].get<std::uint64_t>());
    EXPECT_EQ(totals.out_of_order, truth["totals"]["out_of_order"].get<std::uint64_t>());
}

struct ReadRun {
    test::TempDir dir;
    ReadRequest request;
    std::atomic<bool> stop{false};
};

void prepare(ReadRun& run, const GeneratorConfig& config, std::vector<OutputFormat> formats) {
    Generator gen(config);
    run.request.file = run.dir / "in.pcap";
    write_generated_pcap(gen, run.request.file);
    run.request.outputs.output_dir = run.dir / "out";
    run.request.outputs.formats = std::move(formats);
}

TEST(Pipeline, ReadReproducesGroundTruthAndBytes) {
    const GeneratorConfig config = config_with_faults();
    ReadRun run;
    prepare(run, config,
            {OutputFormat::codif, OutputFormat::codifhdr, OutputFormat::raw, OutputFormat::pcap});
    RunOutcome out = run_read(run.request, run.stop);

    Generator gen(config);
    GeneratedFrame f;
    while (gen.next(f)) {
    }
    ASSERT_GT(gen.truth_json()["totals"]["missing"].get<std::uint64_t>(), 0u);
    ASSERT_GT(gen.truth_json()["totals"]["duplicates"].get<std::uint64_t>(), 0u);
    ASSERT_GT(gen.truth_json()["totals"]["out_of_order"].get<std::uint64_t>(), 0u);
    expect_ledger_matches_truth(out.ledger, gen);
    EXPECT_TRUE(out.ledger.reconciles());
    EXPECT_EQ(out.exit_code, kExitLoss);
    EXPECT_TRUE(out.info.error.empty());

    // Every per-antenna file is byte-identical to what the generator sent.
    const Expected e = expected_files(config, run.request.outputs);
    std::size_t files = 0;
    for (const auto* m : {&e.codif, &e.codifhdr, &e.raw}) {
        for (const auto& [path, bytes] : *m) {
            EXPECT_EQ(test::read_file(path), bytes) << path;
            ++files;
        }
    }
    EXPECT_EQ(files, 3u * 2 * 3);  // 3 formats x 2 groups x 3 antennas
    // The pcap output is the input again: same framing, timestamps and lengths.
    EXPECT_EQ(test::read_file(run_output_path(run.request.outputs, OutputFormat::pcap)),
              test::read_file(run.request.file));
    for (const auto& o : out.ledger.outputs()) {
        EXPECT_EQ(o.dropped, 0u);
        EXPECT_TRUE(o.error.empty());
        EXPECT_EQ(o.bytes, std::filesystem::file_size(o.path)) << o.path;
    }
}

// gen --burst changes the order of the frames only: read sees the same
// streams, counts the same faults, and each file holds its frames in the
// order sent.
TEST(Pipeline, BurstOrderReadsToTheSameLedger) {
    GeneratorConfig config = config_with_faults();
    config.burst = 9;
    ReadRun run;
    prepare(run, config, {OutputFormat::codif, OutputFormat::raw});
    RunOutcome out = run_read(run.request, run.stop);

    Generator gen(config);
    GeneratedFrame f;
    while (gen.next(f)) {
    }
    Generator round_robin(config_with_faults());
    while (round_robin.next(f)) {
    }
    EXPECT_EQ(gen.truth_json(), round_robin.truth_json());
    expect_ledger_matches_truth(out.ledger, round_robin);
    EXPECT_TRUE(out.ledger.reconciles());
    EXPECT_EQ(out.exit_code, kExitLoss);
    const Expected e = expected_files(config, run.request.outputs);
    std::size_t files = 0;
    for (const auto* m : {&e.codif, &e.raw}) {
        for (const auto& [path, bytes] : *m) {
            EXPECT_EQ(test::read_file(path), bytes) << path;
            ++files;
        }
    }
    EXPECT_EQ(files, 2u * 2 * 3);
}

TEST(Pipeline, CleanTrafficIsZeroLoss) {
    GeneratorConfig config = config_with_faults();
    config.loss = config.duplicate = config.reorder = 0;
    ReadRun run;
    prepare(run, config, {OutputFormat::codif});
    RunOutcome out = run_read(run.request, run.stop);
    EXPECT_TRUE(out.ledger.zero_loss()) << out.ledger.loss_reasons().front();
    EXPECT_EQ(out.exit_code, kExitZeroLoss);
    EXPECT_EQ(out.ledger.totals().codif, 2u * 3 * 2 * 400);
}

// ibvcap reads what it writes: a --pcap-snaplen headers file (records cut
// after the CODIF header, original lengths kept) comes back as the same
// CODIF frames, sequence-tracked, counted as captured without their payload,
// and not as malformed.
TEST(Pipeline, HeadersOnlyPcapReadsBackAsCodifFramesWithoutPayload) {
    for (const bool faults : {false, true}) {
        GeneratorConfig config = config_with_faults();
        if (!faults) {
            config.loss = config.duplicate = config.reorder = 0;
        }
        ReadRun first;
        prepare(first, config, {OutputFormat::pcap});
        first.request.outputs.pcap_headers_only = true;
        const RunOutcome written = run_read(first.request, first.stop);
        ASSERT_EQ(written.ledger.totals().payload_absent, 0u);

        ReadRun again;
        again.request.file = run_output_path(first.request.outputs, OutputFormat::pcap);
        again.request.outputs.output_dir = again.dir / "out";
        again.request.outputs.formats = {OutputFormat::codifhdr, OutputFormat::codif,
                                         OutputFormat::raw};
        const RunOutcome out = run_read(again.request, again.stop);

        Generator gen(config);
        GeneratedFrame f;
        while (gen.next(f)) {
        }
        expect_ledger_matches_truth(out.ledger, gen);
        const Totals t = out.ledger.totals();
        EXPECT_EQ(t.codif, t.packets);
        EXPECT_EQ(t.payload_absent, t.codif);
        EXPECT_EQ(t.malformed, 0u);
        EXPECT_EQ(t.non_codif, 0u);
        for (const auto& s : out.ledger.streams()) {
            EXPECT_EQ(s.payload_absent, s.packets());
        }
        EXPECT_TRUE(out.ledger.reconciles());
        EXPECT_EQ(out.ledger.zero_loss(), !faults);
        EXPECT_EQ(out.exit_code, faults ? kExitLoss : kExitZeroLoss);
        // The headers are all there; there is no payload to write.
        const Expected e = expected_files(config, again.request.outputs);
        for (const auto& [path, bytes] : e.codifhdr) {
            EXPECT_EQ(test::read_file(path), bytes) << path;
        }
        for (const auto& o : out.ledger.outputs()) {
            EXPECT_EQ(o.dropped, 0u) << o.path;
            if (o.format == "codif" || o.format == "raw") {
                EXPECT_EQ(o.packets, 0u) << o.path;
            }
        }
    }
}

TEST(Pipeline, DraftLayoutWithVlanTags) {
    GeneratorConfig config = config_with_faults();
    config.layout = CodifLayout::draft;
    config.vlan_id = 100;
    ReadRun run;
    prepare(run, config, {OutputFormat::codif});
    RunOutcome out = run_read(run.request, run.stop);
    Generator gen(config);
    GeneratedFrame f;
    while (gen.next(f)) {
    }
    expect_ledger_matches_truth(out.ledger, gen);
    for (const auto& s : out.ledger.streams()) {
        EXPECT_EQ(static_cast<CodifLayout>(s.layout), CodifLayout::draft);
    }
    const Expected e = expected_files(config, run.request.outputs);
    for (const auto& [path, bytes] : e.codif) {
        EXPECT_EQ(test::read_file(path), bytes) << path;
    }
}

// A DiFX reader walks ibvcap's .codif files frame by frame, as codifsum does:
// header, then getCODIFFrameBytes() of payload, then the next header
// (test/codifio_transcript.hpp). Every frame the run wrote is found in sync,
// in both layouts, and the walk ends exactly at the end of each file.
TEST(Pipeline, CodifFilesWalkInSyncInACodifioReader) {
    for (const CodifLayout layout : {CodifLayout::draft, CodifLayout::v2}) {
        SCOPED_TRACE(to_string(layout));
        GeneratorConfig config = config_with_faults();
        config.layout = layout;
        ReadRun run;
        prepare(run, config, {OutputFormat::codif});
        const RunOutcome out = run_read(run.request, run.stop);
        std::uint64_t walked = 0;
        std::size_t files = 0;
        for (const auto& o : out.ledger.outputs()) {
            ASSERT_EQ(o.format, "codif");
            const std::vector<std::uint8_t> bytes = test::read_file(o.path);
            const test::codifio::Walk w = test::codifio::walk_codif_file(bytes);
            EXPECT_TRUE(w.in_sync) << o.path << " lost sync after " << w.frames << " frames";
            EXPECT_EQ(w.end, bytes.size()) << o.path;
            EXPECT_EQ(w.frames, o.packets) << o.path;
            walked += w.frames;
            ++files;
        }
        EXPECT_EQ(files, 2u * 3);
        EXPECT_EQ(walked, out.ledger.totals().codif);
        EXPECT_GT(walked, 0u);
    }
}

TEST(Pipeline, TruncatedInputKeepsWhatWasReadAndFails) {
    GeneratorConfig config = config_with_faults();
    config.loss = config.duplicate = config.reorder = 0;
    ReadRun run;
    prepare(run, config, {OutputFormat::pcap, OutputFormat::codif});
    const auto record = 16 + config.frame_bytes();
    const std::uint64_t whole_records = 100;
    std::filesystem::resize_file(run.request.file, 24 + whole_records * record + record / 2);

    RunOutcome out = run_read(run.request, run.stop);
    EXPECT_EQ(out.exit_code, kExitError);
    EXPECT_NE(out.info.error.find("truncated"), std::string::npos) << out.info.error;
    EXPECT_EQ(out.ledger.totals().packets, whole_records);
    EXPECT_EQ(out.ledger.totals().written, 2 * whole_records);  // pcap + codif
    // What was read is whole and true, but nothing proves the rest arrived.
    EXPECT_FALSE(out.ledger.zero_loss());
    EXPECT_NE(out.ledger.loss_reasons().back().find("ended early"), std::string::npos);
    // The pcap written holds exactly the frames read, and reads back cleanly.
    Ledger again;
    Demux demux({}, again);
    std::atomic<bool> stop{false};
    PcapFileSource source(run_output_path(run.request.outputs, OutputFormat::pcap));
    const auto result = source.run(demux, 0, stop);
    EXPECT_TRUE(result.complete);
    EXPECT_TRUE(result.error.empty());
    EXPECT_EQ(result.frames, whole_records);
}

TEST(Pipeline, CountLimitStopsEarly) {
    ReadRun run;
    prepare(run, config_with_faults(), {});
    run.request.count = 10;
    RunOutcome out = run_read(run.request, run.stop);
    EXPECT_EQ(out.ledger.totals().packets, 10u);
}

TEST(Pipeline, UnwritableOutputDirectoryFailsBeforeReading) {
    ReadRun run;
    prepare(run, config_with_faults(), {OutputFormat::codif});
    // A path below a regular file can never be created, even by root.
    run.request.outputs.output_dir = run.request.file + "/out";
    try {
        run_read(run.request, run.stop);
        FAIL() << "expected an error";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("-o DIR"), std::string::npos) << e.what();
    }
}

// Issue 14, item 2: one run per output directory (the lock names the
// holder), and the names an earlier run left are found before a run starts.
TEST(Pipeline, OutputDirectoryIsLockedAndEarlierOutputsAreFound) {
    test::TempDir dir;
    const std::string out = dir / "out";
    std::filesystem::create_directory(out);
    {
        OutputDirLock first(out);
        try {
            OutputDirLock second(out);
            ADD_FAILURE() << "a second lock on the same directory was granted";
        } catch (const std::runtime_error& e) {
            EXPECT_NE(std::string(e.what()).find(fmt::format("(PID {})", ::getpid())),
                      std::string::npos)
                << e.what();
        }
    }
    EXPECT_FALSE(std::filesystem::exists(out + "/" + kOutputLockName));
    OutputDirLock again(out);  // released: granted

    OutputOptions o;
    o.output_dir = out;
    o.formats = {OutputFormat::codif, OutputFormat::pcap};
    for (const std::string name :
         {"ibvcap.pcap", "ibvcap.000012.pcap", "ibvcap_mlx5_0p1.pcap",
          "ibvcap_239.17.0.1_36001_10.0.0.11.codif",
          "ibvcap_239.17.0.1_36001_10.0.0.11.000003.codif",
          "ibvcap_mlx5_1p2_239.17.0.1_36001_10.0.0.11.codif",
          // sidecar indexes (lib/sinks/file_index.hpp)
          "ibvcap.000012.pcap.idx.json", "ibvcap_239.17.0.1_36001_10.0.0.11.codif.idx.json"}) {
        EXPECT_TRUE(is_output_name(o, name)) << name;
    }
    for (const std::string name :
         {"ibvcap.codif", "ibvcap_239.17.0.1_36001_10.0.0.11.raw", "ibvcapXpcap", "notes.pcap",
          "ibvcap_notes.codif", "other.pcap", ".ibvcap.lock", "ibvcap.pcap.bak",
          "ibvcap.pcap.idx.json.bak", "ibvcap.pcap.json", "notes.pcap.idx.json"}) {
        EXPECT_FALSE(is_output_name(o, name)) << name;
    }
    std::ofstream(out + "/ibvcap.000001.pcap") << "x";
    std::ofstream(out + "/ibvcap_239.17.0.1_36001_10.0.0.11.raw") << "x";  // not asked for
    std::ofstream(out + "/keep.txt") << "x";
    EXPECT_EQ(existing_outputs(o), std::vector<std::string>{out + "/ibvcap.000001.pcap"});
    EXPECT_THROW(claim_outputs(o, ""), std::runtime_error);
    EXPECT_TRUE(std::filesystem::exists(out + "/ibvcap.000001.pcap"));
    o.overwrite = true;
    claim_outputs(o, "");
    EXPECT_FALSE(std::filesystem::exists(out + "/ibvcap.000001.pcap"));
    EXPECT_TRUE(std::filesystem::exists(out + "/ibvcap_239.17.0.1_36001_10.0.0.11.raw"));
    EXPECT_TRUE(std::filesystem::exists(out + "/keep.txt"));
}

TEST(Pipeline, NonEthernetCaptureIsRefusedInOneLine) {
    test::TempDir dir;
    auto header = pcap_file_header();
    store_le32(header.data() + 20, 105);  // IEEE802_11 (cooked captures are read: test_link_types)
    std::ofstream(dir / "sll.pcap", std::ios::binary)
        .write(reinterpret_cast<const char*>(header.data()), header.size());
    try {
        PcapFileSource source(dir / "sll.pcap");
        FAIL() << "expected an error";
    } catch (const std::runtime_error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("link type 105 (IEEE802_11)"), std::string::npos) << what;
        EXPECT_EQ(what.find('\n'), std::string::npos);
    }
}

TEST(Pipeline, MissingAndGarbageInputsFailInOneLine) {
    test::TempDir dir;
    for (const bool exists : {false, true}) {
        const std::string path = dir / "input.pcap";
        if (exists) {
            std::ofstream(path) << "this is not a capture file at all";
        }
        try {
            PcapFileSource source(path);
            FAIL() << "expected an error";
        } catch (const std::runtime_error& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find(path), std::string::npos) << what;
            EXPECT_EQ(what.find('\n'), std::string::npos);
        }
    }
}

// The mapped reader (classic pcap from the page cache) against libpcap itself,
// on intact and damaged files of both byte orders and timestamp units: the
// same frames (compared through a pcap writer: bytes, lengths, times), the
// same end, the same error message.
namespace {

std::vector<std::uint8_t> swap_pcap(const std::vector<std::uint8_t>& le) {
    // Rewrite a little-endian pcap file as big-endian, field by field.
    std::vector<std::uint8_t> be = le;
    auto swap32 = [&](std::size_t at) {
        std::reverse(be.begin() + static_cast<long>(at), be.begin() + static_cast<long>(at + 4));
    };
    auto swap16 = [&](std::size_t at) { std::swap(be[at], be[at + 1]); };
    swap32(0);
    swap16(4);
    swap16(6);
    for (std::size_t at : {8u, 12u, 16u, 20u}) {
        swap32(at);
    }
    for (std::size_t at = 24; at + 16 <= le.size();) {
        const std::uint32_t caplen = load_le32(le.data() + at + 8);
        for (std::size_t f = 0; f < 4; ++f) {
            swap32(at + 4 * f);
        }
        at += 16 + caplen;
    }
    return be;
}

struct ReadOutcome {
    PcapFileSource::Result result;
    std::vector<std::uint8_t> frames;  // the frames as a pcap writer wrote them
    bool mapped = false;
};

ReadOutcome read_with(const std::string& file, bool mapped, const test::TempDir& dir) {
    ReadOutcome o;
    PcapFileSource source(file, mapped);
    o.mapped = source.is_mapped();
    DemuxOptions options;
    OutputOptions d;
    d.formats = {OutputFormat::pcap};
    d.output_dir = (dir.path() / (mapped ? "mapped" : "libpcap")).string();
    std::filesystem::create_directories(d.output_dir);
    Ledger ledger;
    {
        Writer::Options wo;
        wo.buffer_bytes = 128 * 1024;
        wo.buffers = 2;
        Writer w(wo);
        Demux demux(options, ledger);
        FileSinks files(d, &w);
        demux.add_sinks(files.entries());
        const std::atomic<bool> stop{false};
        o.result = source.run(demux, 0, stop);
        w.finish();
    }
    o.frames = test::read_file(run_output_path(d, OutputFormat::pcap));
    return o;
}

// One stream (kAntenna1, thread 0, on kGroup1:36001) of `frames` CODIF
// frames as a nanosecond pcap file `name` in `dir`; its path.
std::string one_stream_pcap(const test::TempDir& dir, const std::string& name, std::uint64_t frames,
                            std::uint32_t payload_bytes = GeneratorConfig{}.payload_bytes) {
    GeneratorConfig c;
    c.antennas = {test::kAntenna1};
    c.groups = {Endpoint{test::kGroup1, 36001}};
    c.threads = 1;
    c.frames = frames;
    c.payload_bytes = payload_bytes;
    Generator gen(c);
    const std::string path = dir / name;
    write_generated_pcap(gen, path);
    return path;
}

}  // namespace

// An input file shrunk by another program while it is read (issue 25:
// `truncate -s 30000000 m.pcap` beside `read -r m.pcap` killed the run with
// SIGBUS). The mapped reader ends with an error naming the change; the
// frames before it are delivered, and the pcap written is whole records.
TEST(PcapFile, AFileThatShrinksWhileReadEndsTheRunWithAnError) {
    test::TempDir dir;
    const std::string input = one_stream_pcap(dir, "shrinks.pcap", 400);  // about 3.3 MB
    const std::uintmax_t whole = std::filesystem::file_size(input);
    constexpr std::uintmax_t kCut = 300000;  // inside frame 36
    PcapFileSource source(input);
    ASSERT_TRUE(source.is_mapped());
    OutputOptions d;
    d.formats = {OutputFormat::pcap};
    d.output_dir = (dir.path() / "out").string();
    std::filesystem::create_directories(d.output_dir);
    Ledger ledger;
    PcapFileSource::Result result;
    {
        Writer::Options wo;
        // One buffer holds every frame read (830 KB), so the disk thread
        // reads the held frames only at finish(), after the file shrank.
        wo.buffer_bytes = std::size_t{4} << 20;
        wo.buffers = 2;
        Writer w(wo);
        Demux demux(DemuxOptions{}, ledger);
        FileSinks files(d, &w);
        demux.add_sinks(files.entries());
        std::uint64_t seen = 0;
        demux.add_observer(
            [&](const Frame&, const UdpPacket&, const StreamHeader&, const StreamStats&) {
                if (++seen == 100) {  // frames 36 to 99 are read, their pages then gone
                    std::filesystem::resize_file(input, kCut);
                }
            });
        const std::atomic<bool> stop{false};
        result = source.run(demux, 0, stop);
        w.finish();
        // The held frames' pages went before the disk thread read them: the
        // output fails, saying why, and is cut back to its last whole record.
        EXPECT_TRUE(w.any_failed());
        EXPECT_NE(w.stats()[0].error.find("its input file shrank"), std::string::npos)
            << w.stats()[0].error;
    }
    EXPECT_NE(result.error.find("shrank while it was read: 300000 bytes now, " +
                                std::to_string(whole) + " when the run opened it"),
              std::string::npos)
        << result.error;
    EXPECT_EQ(result.frames, 100u);  // frame 101's last byte lies past the new end
    // The pcap written is whole records, every one a frame as generated (no
    // zeros): libpcap reads it to its end, and the demux finds each CODIF.
    PcapFileSource written(run_output_path(d, OutputFormat::pcap), false);
    Ledger again;
    Demux check(DemuxOptions{}, again);
    const std::atomic<bool> stop{false};
    const auto back = written.run(check, 0, stop);
    EXPECT_TRUE(back.complete) << back.error;
    EXPECT_LE(back.frames, result.frames);
    std::uint64_t codif = 0;
    for (const auto& st : again.streams()) {
        codif += st.packets();
    }
    EXPECT_EQ(codif, back.frames) << "records of zeros were written";
}

TEST(PcapFile, MappedReaderMatchesLibpcapOnIntactAndDamagedFiles) {
    test::TempDir dir;
    const std::string base = one_stream_pcap(dir, "base.pcap", 12, 512);
    const std::vector<std::uint8_t> ns_le = test::read_file(base);
    std::vector<std::uint8_t> us_le = ns_le;  // the microsecond magic, times in µs
    us_le[0] = 0xd4;
    us_le[1] = 0xc3;
    us_le[2] = 0xb2;
    us_le[3] = 0xa1;
    for (std::size_t at = 24; at + 16 <= us_le.size();
         at += 16 + load_le32(us_le.data() + at + 8)) {
        const std::uint32_t ns = load_le32(us_le.data() + at + 4);
        const std::uint32_t us = ns / 1000;
        std::memcpy(us_le.data() + at + 4, &us, 4);
    }
    std::vector<std::pair<std::string, std::vector<std::uint8_t>>> files;
    for (const auto& [name, bytes] :
         {std::pair{"ns", ns_le}, std::pair{"us", us_le}, std::pair{"ns-be", swap_pcap(ns_le)},
          std::pair{"us-be", swap_pcap(us_le)}}) {
        files.emplace_back(name, bytes);
        // Cut at every byte of the last two records and the first header.
        const std::size_t last2 = bytes.size() - 2 * (16 + 42 + 64 + 512);
        for (std::size_t cut = last2; cut < bytes.size(); cut += 23) {
            files.emplace_back(
                fmt::format("{}-cut{}", name, cut),
                std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + static_cast<long>(cut)));
        }
        for (std::size_t cut = 24; cut < 24 + 16; ++cut) {
            files.emplace_back(
                fmt::format("{}-cut{}", name, cut),
                std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + static_cast<long>(cut)));
        }
    }
    {
        // A record longer than libpcap's limit, and one longer than the file's
        // snapshot length (200): cut to 200 by both.
        auto huge = ns_le;
        const std::uint32_t big = 300000;
        std::memcpy(huge.data() + 24 + 3 * (16 + 42 + 64 + 512) + 8, &big, 4);
        files.emplace_back("caplen-huge", huge);
        auto snap = ns_le;
        const std::uint32_t snaplen = 200;
        std::memcpy(snap.data() + 16, &snaplen, 4);
        files.emplace_back("snaplen-200", snap);
    }
    for (const auto& [name, bytes] : files) {
        const std::string path = (dir.path() / (name + ".pcap")).string();
        std::ofstream(path, std::ios::binary)
            .write(reinterpret_cast<const char*>(bytes.data()), static_cast<long>(bytes.size()));
        std::unique_ptr<PcapFileSource> probe;
        try {
            probe = std::make_unique<PcapFileSource>(path, false);
        } catch (const std::runtime_error&) {
            EXPECT_THROW(PcapFileSource(path, true), std::runtime_error) << name;
            continue;  // libpcap refuses it (e.g. cut inside the file header)
        }
        probe.reset();
        const ReadOutcome lib = read_with(path, false, dir);
        const ReadOutcome map = read_with(path, true, dir);
        EXPECT_FALSE(lib.mapped);
        EXPECT_TRUE(map.mapped) << name;
        EXPECT_EQ(map.result.frames, lib.result.frames) << name;
        EXPECT_EQ(map.result.complete, lib.result.complete) << name;
        EXPECT_EQ(map.result.error, lib.result.error) << name;
        EXPECT_TRUE(map.frames == lib.frames) << name;
    }
}

}  // namespace
}  // namespace ibvcap
