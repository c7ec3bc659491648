// End to end, in process: generator → pcap file → read → ledger and files,
// checked against the generator's ground truth and its bytes.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "frames.hpp"
#include "lib/pcap_file_source.hpp"
#include "lib/pipeline.hpp"

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

Expected expected_files(const GeneratorConfig& config, const DemuxOptions& options) {
    Expected e;
    Generator gen(config);
    GeneratedFrame f;
    const std::size_t hdr = config.vlan_id >= 0 ? 46 : 42;
    while (gen.next(f)) {
        const auto& t = gen.truth()[f.stream];
        auto path = [&](OutputFormat fmt) {
            return Demux::output_path(options, fmt, t.group, t.antenna);
        };
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
    run.request.demux.output_dir = run.dir / "out";
    run.request.demux.formats = std::move(formats);
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
    const Expected e = expected_files(config, run.request.demux);
    std::size_t files = 0;
    for (const auto* m : {&e.codif, &e.codifhdr, &e.raw}) {
        for (const auto& [path, bytes] : *m) {
            EXPECT_EQ(test::read_file(path), bytes) << path;
            ++files;
        }
    }
    EXPECT_EQ(files, 3u * 2 * 3);  // 3 formats x 2 groups x 3 antennas
    // The pcap output is the input again: same framing, timestamps and lengths.
    EXPECT_EQ(test::read_file(Demux::run_output_path(run.request.demux, OutputFormat::pcap)),
              test::read_file(run.request.file));
    for (const auto& o : out.ledger.outputs()) {
        EXPECT_EQ(o.dropped, 0u);
        EXPECT_TRUE(o.error.empty());
        EXPECT_EQ(o.bytes, std::filesystem::file_size(o.path)) << o.path;
    }
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
        EXPECT_EQ(s.layout, CodifLayout::draft);
    }
    const Expected e = expected_files(config, run.request.demux);
    for (const auto& [path, bytes] : e.codif) {
        EXPECT_EQ(test::read_file(path), bytes) << path;
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
    Demux demux({}, again, nullptr);
    std::atomic<bool> stop{false};
    PcapFileSource source(Demux::run_output_path(run.request.demux, OutputFormat::pcap));
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
    run.request.demux.output_dir = run.request.file + "/out";
    try {
        run_read(run.request, run.stop);
        FAIL() << "expected an error";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("-o DIR"), std::string::npos) << e.what();
    }
}

TEST(Pipeline, NonEthernetCaptureIsRefusedInOneLine) {
    test::TempDir dir;
    auto header = pcap_file_header();
    store_le32(header.data() + 20, 113);  // LINUX_SLL, what tcpdump -i any writes
    std::ofstream(dir / "sll.pcap", std::ios::binary)
        .write(reinterpret_cast<const char*>(header.data()), header.size());
    try {
        PcapFileSource source(dir / "sll.pcap");
        FAIL() << "expected an error";
    } catch (const std::runtime_error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("not Ethernet"), std::string::npos) << what;
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

}  // namespace
}  // namespace ibvcap
