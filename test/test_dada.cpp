// PSRDADA rings (--dada; lib/sinks/dada_*.hpp): what a reader of the ring
// gets (test/dada_rings.hpp reads it as dada_dbdisk does), a slow reader's
// losses, and how every end leaves the ring.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "dada_rings.hpp"
#include "formats/codif.hpp"
#include "formats/fill_frame.hpp"
#include "formats/vdif.hpp"
#include "frames.hpp"
#include "held_frames.hpp"
#include "lib/demux/demux.hpp"
#include "lib/run/gen.hpp"
#include "lib/run/read.hpp"
#include "lib/sinks/dada_header.hpp"
#include "lib/sinks/dada_sink.hpp"
#include "lib/traffic/generator.hpp"

namespace ibvcap {
namespace {

constexpr std::size_t kPayload = 8192;  // test::make_header's
constexpr std::uint16_t kPort = 36001;

// A key of this process's own (ctest runs tests side by side): a ring's
// pieces take keys up to ~30 increments of 0x10000 past it.
key_t test_key(unsigned n) {
    return static_cast<key_t>(0x10000000u + (static_cast<unsigned>(getpid()) % 200u) * 0x400000u +
                              n * 2u);
}

std::vector<std::uint8_t> frame_at(std::uint32_t frame) {
    return test::make_frame(test::kAntenna1, test::kGroup1, kPort, test::make_header(10, frame));
}
// The payload of frame `frame` (the frame's last kPayload bytes).
std::vector<std::uint8_t> payload_at(std::uint32_t frame) {
    const auto f = frame_at(frame);
    return {f.end() - static_cast<std::ptrdiff_t>(kPayload), f.end()};
}

// The ring's data is `records` payloads, frame i's at record i, the fill
// pattern where a frame is `missing`.
void expect_records(const std::vector<std::uint8_t>& data, std::uint32_t records,
                    const std::set<std::uint32_t>& missing) {
    ASSERT_EQ(data.size(), std::size_t{records} * kPayload);
    std::vector<std::uint8_t> fill(kPayload);
    fill_payload(fill);
    for (std::uint32_t i = 0; i < records; ++i) {
        const std::vector<std::uint8_t> at(data.data() + i * kPayload,
                                           data.data() + (i + 1) * kPayload);
        EXPECT_EQ(at, missing.count(i) ? fill : payload_at(i)) << "record " << i;
    }
}

struct Feed {
    Ledger ledger;
    Demux demux{DemuxOptions{}, ledger};
    explicit Feed(DadaSink& sink) { demux.add_sink(sink); }
    void send(std::uint32_t frame) { demux.on_frame(test::whole(frame_at(frame))); }
};

RingStats stats_of(const DadaSink& sink) {
    Ledger l;
    sink.report_to(l);
    return l.rings().at(0);
}

int write_lock(key_t key) {
    DadaBuffer b(key);
    return b.value(b.connect_set(), dada_sem::write);
}

TEST(DadaRing, TheReaderGetsEveryPayloadInTimeOrderWithFillsAHeaderAndTheEndOfData) {
    const key_t key = test_key(1);
    test::MadeRing ring(key, 4, 2 * kPayload);
    DadaOptions o;
    o.targets = {DadaTarget{key, {}, {}}};
    o.header = {{"FREQ", "1400"}, {"SOURCE", "J0437-4715"}};
    o.window = 16;
    DadaSink sink(o);
    sink.set_run_id("run-1");
    std::atomic<bool> never{false};
    sink.wait_while_full(&never);  // this test is about the bytes, not a slow reader
    test::BackgroundReader reader(key);
    ASSERT_TRUE(reader.locked());
    // Frames 0..39 of second 10, but 7 and 20..22 never came, and 31 comes
    // before 30.
    const std::set<std::uint32_t> missing = {7, 20, 21, 22};
    {
        Feed feed(sink);
        for (std::uint32_t i = 0; i < 40; ++i) {
            const std::uint32_t f = i == 30 ? 31 : i == 31 ? 30 : i;
            if (!missing.count(f)) {
                feed.send(f);
            }
        }
        sink.finish();
    }
    const test::ReadTransfer& got = reader.join();
    ASSERT_TRUE(got.ended) << "the end of data was marked";
    ASSERT_EQ(got.data.size(), 40 * kPayload);
    expect_records(got.data, 40, missing);
    // What dspsr and heimdall read: second 10 of epoch 52 (2026-01-01).
    const std::string& h = got.header;
    EXPECT_EQ(dada_header_value(h, "HDR_SIZE"), "4096");
    EXPECT_EQ(dada_header_value(h, "UTC_START"), "2026-01-01-00:00:10");
    EXPECT_EQ(dada_header_value(h, "OBS_OFFSET"), "0");
    EXPECT_EQ(dada_header_value(h, "NBIT"), "8");
    EXPECT_EQ(dada_header_value(h, "NDIM"), "2");
    EXPECT_EQ(dada_header_value(h, "NCHAN"), "16");
    EXPECT_EQ(dada_header_value(h, "NPOL"), "1");
    // 8192 bytes of 16 complex 8-bit channels: 256 samples; 1000 frames/s.
    EXPECT_EQ(dada_header_value(h, "TSAMP"), "3.90625");
    EXPECT_EQ(dada_header_value(h, "BYTES_PER_SECOND"), "8192000");
    EXPECT_EQ(dada_header_value(h, "FREQ"), "1400");
    EXPECT_EQ(dada_header_value(h, "SOURCE"), "J0437-4715");
    EXPECT_EQ(dada_header_value(h, "IBVCAP_FORMAT"), "codif");
    EXPECT_EQ(dada_header_value(h, "IBVCAP_FRAME_BYTES"), "8256");
    EXPECT_EQ(dada_header_value(h, "IBVCAP_RUN_ID"), "run-1");
    EXPECT_EQ(dada_header_value(h, "IBVCAP_STREAM"),
              "239.17.0.1:36001 10.0.0.11 station 0 thread 0");
    const RingStats s = stats_of(sink);
    EXPECT_EQ(s.frames, 36u);
    EXPECT_EQ(s.fills, 4u);
    EXPECT_EQ(s.consumer, 0u);
    EXPECT_TRUE(s.end_of_data);
    EXPECT_EQ(s.readers_attached, 1u);
    reader.unlock();
    // Both rings unlocked for the next writer.
    EXPECT_EQ(write_lock(key), 1);
    EXPECT_EQ(write_lock(key + 1), 1);
}

TEST(DadaRing, ASlowReadersLossesAreCountedConsumerAndEveryByteStaysAtItsTime) {
    const key_t key = test_key(2);
    test::MadeRing ring(key, 4, 2 * kPayload);  // 8 frames
    DadaOptions o;
    o.targets = {DadaTarget{key, {}, {}}};
    o.window = 1;      // each frame goes to the ring as it comes
    DadaSink sink(o);  // a live capture's: never waits
    test::RingReader hr(key + 1);
    test::RingReader dr(key);
    ASSERT_TRUE(hr.lock());
    ASSERT_TRUE(dr.lock());
    Feed feed(sink);
    std::vector<std::uint8_t> data;
    std::uint64_t bytes = 0;
    const auto read_blocks = [&](int n) {
        for (int i = 0; i < n; ++i) {
            const std::uint8_t* d = dr.next(bytes, 1000);
            ASSERT_NE(d, nullptr);
            data.insert(data.end(), d, d + bytes);
            dr.clear();
        }
    };
    // The reader takes nothing while frames 0..19 come: 8 fit.
    for (std::uint32_t f = 0; f < 20; ++f) {
        feed.send(f);
    }
    EXPECT_EQ(sink.consumer_so_far(), 12u);
    ASSERT_NE(hr.next(bytes, 1000), nullptr);
    hr.clear();
    read_blocks(2);  // room for 4 records: the owed fills go first
    for (std::uint32_t f = 20; f < 30; ++f) {
        feed.send(f);
    }
    read_blocks(1);
    for (std::uint32_t f = 30; f < 60; ++f) {
        feed.send(f);
    }
    sink.finish();
    for (;;) {
        const std::uint8_t* d = dr.next(bytes, 1000);
        ASSERT_NE(d, nullptr);
        data.insert(data.end(), d, d + bytes);
        if (dr.clear()) {
            break;
        }
    }
    const RingStats s = stats_of(sink);
    std::vector<std::uint8_t> fill(kPayload);
    fill_payload(fill);
    ASSERT_EQ(data.size() % kPayload, 0u);
    const std::size_t records = data.size() / kPayload;
    std::uint64_t real = 0;
    std::uint64_t fills = 0;
    for (std::uint32_t i = 0; i < records; ++i) {
        const std::vector<std::uint8_t> at(data.data() + i * kPayload,
                                           data.data() + (i + 1) * kPayload);
        if (at == fill) {
            ++fills;
        } else {
            // Every frame the reader got is at its own time.
            EXPECT_EQ(at, payload_at(i)) << "record " << i;
            ++real;
        }
    }
    EXPECT_GT(s.consumer, 12u);
    EXPECT_EQ(s.frames, real);
    // What the reader missed is exactly what was counted consumer.
    EXPECT_EQ(60 - real, s.consumer);
    EXPECT_EQ(fills, s.consumer - s.owed_at_end);
    EXPECT_EQ(records + s.owed_at_end, 60u);
    EXPECT_EQ(sink.consumer_so_far(), s.consumer);
    EXPECT_TRUE(s.end_of_data);
    // The verdict names the cause.
    Ledger l;
    sink.report_to(l);
    EXPECT_EQ(l.totals().consumer_drops, s.consumer);
    EXPECT_FALSE(l.zero_loss());
    bool named = false;
    for (const auto& why : l.loss_reasons()) {
        named = named || why.find("the pipeline did not get") != std::string::npos;
    }
    EXPECT_TRUE(named);
}

TEST(DadaRing, AKeyWithNoRingOrARingWithAWriterIsRefusedWithTheFix) {
    const key_t key = test_key(3);
    DadaOptions o;
    o.targets = {DadaTarget{key, {}, {}}};
    try {
        DadaSink sink(o);
        FAIL() << "no ring at the key";
    } catch (const DadaError& e) {
        EXPECT_NE(std::string(e.what()).find("create it with dada_db -k"), std::string::npos)
            << e.what();
    }
    test::MadeRing ring(key, 4, 2 * kPayload);
    {
        DadaSink first(o);
        try {
            DadaSink second(o);
            FAIL() << "a second writer";
        } catch (const DadaError& e) {
            EXPECT_NE(std::string(e.what()).find("already has a writer"), std::string::npos)
                << e.what();
        }
    }
    // The first one gone (no frame came: nothing written), the ring is free.
    EXPECT_EQ(write_lock(key), 1);
    EXPECT_EQ(write_lock(key + 1), 1);
    DadaSink again(o);
    again.finish();
    const RingStats s = stats_of(again);
    EXPECT_TRUE(s.stream.empty());
    EXPECT_EQ(s.bytes, 0u);
    o.targets.push_back(o.targets.front());
    EXPECT_THROW(DadaSink twice(o), DadaError);
}

TEST(DadaRing, BlocksThatHoldNoWholePayloadFailTheRingWithTheSizeToMakeAndTheRunGoesOn) {
    const key_t key = test_key(4);
    test::MadeRing ring(key, 4, 10000);
    DadaOptions o;
    o.targets = {DadaTarget{key, {}, {}}};
    DadaSink sink(o);
    Feed feed(sink);
    for (std::uint32_t f = 0; f < 5; ++f) {
        feed.send(f);
    }
    sink.finish();
    const RingStats s = stats_of(sink);
    EXPECT_NE(s.error.find("-b 16384"), std::string::npos) << s.error;
    EXPECT_EQ(s.unwritten, 5u);
    EXPECT_EQ(feed.ledger.totals().codif, 5u) << "the capture went on";
    EXPECT_EQ(write_lock(key), 1);
}

TEST(DadaRing, ARingDestroyedUnderTheRunFailsItAloneAndCountsWhatItDidNotGet) {
    const key_t key = test_key(5);
    test::MadeRing ring(key, 4, 2 * kPayload);
    DadaOptions o;
    o.targets = {DadaTarget{key, {}, {}}};
    DadaSink sink(o);
    Feed feed(sink);
    for (std::uint32_t f = 0; f < 5; ++f) {
        feed.send(f);
    }
    ring.destroy();  // dada_db -d while the capture writes
    for (std::uint32_t f = 5; f < 20; ++f) {
        feed.send(f);
    }
    sink.finish();
    const RingStats s = stats_of(sink);
    EXPECT_NE(s.error.find("removed during the run"), std::string::npos) << s.error;
    EXPECT_EQ(s.frames + s.unwritten, 20u);
    EXPECT_GT(s.unwritten, 0u);
    EXPECT_EQ(feed.ledger.totals().codif, 20u);
    Ledger l;
    sink.report_to(l);
    EXPECT_EQ(l.totals().ring_unwritten, s.unwritten);
    EXPECT_FALSE(l.zero_loss());
}

// psrdada's multiple readers (dada_db -r 2): a block is free again only when
// every reader cleared it, so the slowest reader sets the pace; a reader
// that detaches leaves the ring to fill, counted `consumer`, and the report
// says how many readers were attached at the end.
TEST(DadaRing, EveryReaderMustClearABlockAndADetachedReaderLetsTheRingFill) {
    const key_t key = test_key(10);
    test::MadeRing ring(key, 4, 2 * kPayload, 2);  // 8 frames, two readers
    DadaOptions o;
    o.targets = {DadaTarget{key, {}, {}}};
    o.window = 1;
    DadaSink sink(o);
    test::RingReader h1(key + 1);
    test::RingReader d1(key);
    auto h2 = std::make_unique<test::RingReader>(key + 1);
    auto d2 = std::make_unique<test::RingReader>(key);
    ASSERT_TRUE(h1.lock());
    ASSERT_TRUE(d1.lock());
    ASSERT_TRUE(h2->lock());
    ASSERT_TRUE(d2->lock());
    Feed feed(sink);
    std::uint64_t bytes = 0;
    for (std::uint32_t f = 0; f < 8; ++f) {
        feed.send(f);
    }
    // Reader 1 takes the three blocks marked filled; reader 2 takes none.
    ASSERT_NE(h1.next(bytes, 1000), nullptr);
    h1.clear();
    for (int i = 0; i < 3; ++i) {
        ASSERT_NE(d1.next(bytes, 1000), nullptr);
        d1.clear();
    }
    for (std::uint32_t f = 8; f < 12; ++f) {
        feed.send(f);  // no block is free until reader 2 clears one too
    }
    EXPECT_EQ(sink.consumer_so_far(), 4u) << "the slowest reader sets the pace";
    // Reader 2 detaches (its process ended): nothing frees the ring now.
    d2.reset();
    h2.reset();
    for (std::uint32_t f = 12; f < 20; ++f) {
        feed.send(f);
    }
    sink.finish();
    const RingStats s = stats_of(sink);
    EXPECT_EQ(s.frames, 8u);
    EXPECT_EQ(s.consumer, 12u);
    EXPECT_EQ(s.owed_at_end, 12u);
    EXPECT_EQ(s.readers, 2u);
    EXPECT_EQ(s.readers_attached, 1u);
    EXPECT_TRUE(s.end_of_data);
    EXPECT_EQ(write_lock(key), 1);
}

// A ring still full of an earlier observation nobody read: the capture's
// transfer starts (start of data) but no block ever comes free, so it cannot
// be ended without waiting; the report says so rather than claim end of data.
TEST(DadaRing, ATransferThatNeverGotABlockIsReportedUnended) {
    const key_t key = test_key(11);
    test::MadeRing ring(key, 4, 2 * kPayload);
    DadaOptions o;
    o.targets = {DadaTarget{key, {}, {}}};
    o.window = 1;
    {
        DadaSink first(o);
        Feed feed(first);
        for (std::uint32_t f = 0; f < 8; ++f) {
            feed.send(f);  // every block written; no reader
        }
        first.finish();
        EXPECT_TRUE(stats_of(first).end_of_data);
    }
    DadaSink second(o);
    Feed feed(second);
    for (std::uint32_t f = 100; f < 103; ++f) {
        feed.send(f);
    }
    second.finish();
    const RingStats s = stats_of(second);
    EXPECT_EQ(s.frames, 0u);
    EXPECT_EQ(s.consumer, 3u);
    EXPECT_FALSE(s.end_of_data);
    EXPECT_EQ(write_lock(key), 1) << "unlocked all the same";
    // One start of data per transfer, however many records found no block:
    // two transfers took two of the reader's eight SODACKs.
    DadaBuffer b(key);
    EXPECT_EQ(b.value(b.data_set(0), dada_sem::sodack), 6);
}

// gen → pcap → ibvcap read with an ordered file and a ring: the ring holds
// the ordered file's payloads, byte for byte, CODIF and VDIF.
void ring_equals_ordered_file(StreamFormat format, key_t key) {
    test::TempDir dir;
    GeneratorConfig c;
    c.antennas = {test::kAntenna1};
    c.groups = {Endpoint{test::kGroup1, kPort}};
    c.threads = 1;
    c.frames = 700;
    c.frames_per_period = 250;
    c.payload_bytes = 1024;
    c.loss = 0.03;
    c.reorder = 0.03;
    c.duplicate = 0.02;
    c.seed = 43;
    c.format = format;
    Generator gen(c);
    ReadRequest r;
    r.file = dir / "in.pcap";
    write_generated_pcap(gen, r.file);
    r.demux.any_group_format = format;
    r.demux.vdif_frames_per_second = format == StreamFormat::codif ? 0 : 250;
    r.outputs.output_dir = dir / "out";
    r.outputs.any_group_format = format;
    r.outputs.formats = {format == StreamFormat::codif ? OutputFormat::codif : OutputFormat::vdif};
    r.outputs.ordered_window = 64;
    test::MadeRing ring(key, 3, 4 * 1024);
    DadaOptions o;
    o.targets = {DadaTarget{key, {}, {}}};
    o.window = 64;
    DadaSink sink(o);
    r.dada = &sink;
    test::BackgroundReader reader(key);
    ASSERT_TRUE(reader.locked());
    std::atomic<bool> stop{false};
    const RunOutcome out = run_read(r, stop);
    const test::ReadTransfer& got = reader.join();
    ASSERT_TRUE(got.ended);
    ASSERT_EQ(out.ledger.rings().size(), 1u);
    const RingStats& s = out.ledger.rings().front();
    EXPECT_EQ(s.consumer, 0u) << "ibvcap read waits for the reader";
    EXPECT_GT(s.fills, 0u);
    // The ordered file's records, their headers stripped.
    std::vector<std::uint8_t> payloads;
    for (const auto& e : std::filesystem::directory_iterator(dir / "out")) {
        if (e.path().extension() != ".codif" && e.path().extension() != ".vdif") {
            continue;
        }
        const auto file = test::read_file(e.path());
        const std::size_t header = format == StreamFormat::codif ? kCodifHeaderBytes : 32;
        const std::size_t record = header + 1024;
        ASSERT_EQ(file.size() % record, 0u);
        for (std::size_t at = 0; at < file.size(); at += record) {
            payloads.insert(payloads.end(), file.data() + at + header, file.data() + at + record);
        }
    }
    ASSERT_FALSE(payloads.empty());
    EXPECT_EQ(got.data.size(), payloads.size());
    EXPECT_TRUE(got.data == payloads) << "the ring's bytes are the ordered file's payloads";
    EXPECT_EQ(dada_header_value(got.header, "IBVCAP_FORMAT"), to_string(format));
    EXPECT_EQ(dada_header_value(got.header, "BYTES_PER_SECOND"), std::to_string(250 * 1024));
}

TEST(DadaRing, ACodifStreamsRingHoldsItsOrderedFilesPayloadsByteForByte) {
    ring_equals_ordered_file(StreamFormat::codif, test_key(6));
}

TEST(DadaRing, AVdifStreamsRingHoldsItsOrderedFilesPayloadsByteForByte) {
    ring_equals_ordered_file(StreamFormat::vdif, test_key(7));
}

TEST(DadaRing, TargetsPickTheStreamByAntennaAndThread) {
    EXPECT_EQ(parse_dada_target("dada").key, 0xdada);
    const DadaTarget t = parse_dada_target("0x1234@10.0.0.11/3");
    EXPECT_EQ(t.key, 0x1234);
    EXPECT_EQ(t.antenna, test::kAntenna1);
    EXPECT_EQ(t.thread, 3u);
    for (const char* bad :
         {"", "zz", "0", "dada@", "dada@10.0.0", "dada@10.0.0.11/x", "dada@10.0.0.11/70000"}) {
        EXPECT_THROW(parse_dada_target(bad), std::invalid_argument) << bad;
    }
    EXPECT_TRUE(dada_header_key_problem("FREQ").empty());
    EXPECT_FALSE(dada_header_key_problem("UTC_START").empty());
    EXPECT_FALSE(dada_header_key_problem("freq").empty());
}

// The command as an operator types it (docs/operations.md, "Feeding a
// PSRDADA pipeline"): a file replayed into a ring a reader drains.
TEST(DadaRing, TheCommandAsTypedFeedsARingAndReportsIt) {
    test::TempDir dir;
    const key_t key = test_key(8);
    const std::string k = dada_key_name(key);
    ASSERT_EQ(test::ibvcap(dir,
                           "gen -w in.pcap --antennas 1 --threads 1 -c 300 --payload 1024 "
                           "--frames-per-period 100")
                  .code,
              0);
    // No ring yet: one line naming the fix, nothing read.
    auto r = test::ibvcap(dir, "read -r in.pcap -q --dada " + k);
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("create it with dada_db -k " + k), std::string::npos) << r.err;
    EXPECT_EQ(test::lines(r.err), 1u) << r.err;
    r = test::ibvcap(dir, "read -r in.pcap -q --dada nokey");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("bad --dada ring 'nokey'"), std::string::npos) << r.err;
    r = test::ibvcap(dir, "read -r in.pcap -q --dada " + k + " --dada-header FREQ");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("expected KEY=VALUE"), std::string::npos) << r.err;
    r = test::ibvcap(dir, "read -r in.pcap -q --dada-header FREQ=1400");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("add --dada KEY"), std::string::npos) << r.err;

    test::MadeRing ring(key, 4, 4 * 1024);
    test::BackgroundReader reader(key, 20000);
    ASSERT_TRUE(reader.locked());
    r = test::ibvcap(dir, "read -r in.pcap -q --report r.json --dada " + k +
                              " --dada-header TELESCOPE=Parkes --dada-header BW=-64");
    const test::ReadTransfer& got = reader.join();
    EXPECT_EQ(r.code, 0) << r.err << r.out;
    EXPECT_TRUE(got.ended);
    EXPECT_EQ(got.data.size(), 300u * 1024);
    EXPECT_EQ(dada_header_value(got.header, "TELESCOPE"), "Parkes");
    EXPECT_EQ(dada_header_value(got.header, "BW"), "-64");
    const auto report = nlohmann::json::parse(test::slurp(dir / "r.json"));
    const auto& ring0 = report["rings"][0];
    EXPECT_EQ(ring0["key"], k);
    EXPECT_EQ(ring0["frames"], 300);
    EXPECT_EQ(ring0["consumer"], 0);
    EXPECT_EQ(ring0["end_of_data"], true);
    EXPECT_EQ(report["totals"]["consumer_drops"], 0);
    EXPECT_NE(r.out.find(fmt::format("PSRDADA ring {}:", k)), std::string::npos) << r.out;
}

// A ring in GPU memory (dada_db -g), on the stand-in, fed GPU payload: every
// payload goes from its receive slot into the ring's blocks device to
// device, in batches on the sink's copy thread, never on the capture's
// thread; each slot is given back once its copy landed; the bytes are the
// frames', in time order, with fills.
TEST(DadaRing, GpuPayloadGoesIntoAGpuRingDeviceToDeviceInBatchesOffTheCaptureThread) {
    const key_t key = test_key(9);
    test::MadeRing ring(key, 4, 8 * kPayload, 1, 4096, true);
    DeviceCallLog log;
    DadaOptions o;
    o.targets = {DadaTarget{key, {}, {}}};
    o.window = 4;
    o.device_opener = standin_dada_opener(&log);
    DadaSink sink(o);
    std::atomic<bool> never{false};
    sink.wait_while_full(&never);  // the bytes, not a slow reader
    test::BackgroundReader reader(key);
    ASSERT_TRUE(reader.locked());
    test::CountingDevice device;
    device.forbidden = std::this_thread::get_id();
    test::RecordingOwner owner;
    Ledger ledger;
    Demux demux(DemuxOptions{}, ledger);
    demux.add_sink(sink);
    const std::set<std::uint32_t> missing = {5, 40, 41};
    std::uint64_t held = 0;
    // The slots stay put until given back (the source re-posts one only
    // then): all of them live until the end here.
    std::vector<std::unique_ptr<test::SlotFrame>> slots;
    for (std::uint32_t i = 0; i < 100; ++i) {
        if (missing.count(i)) {
            continue;
        }
        const auto bytes = frame_at(i);
        // Headers in host memory (SGE0), the payload in "GPU memory" (SGE1).
        auto& slot = *slots.emplace_back(std::make_unique<test::SlotFrame>());
        slot.head.assign(bytes.begin(), bytes.end() - static_cast<std::ptrdiff_t>(kPayload));
        slot.tail.assign(bytes.end() - static_cast<std::ptrdiff_t>(kPayload), bytes.end());
        Frame f = slot.frame(&owner, i + 1, &device, true);
        slot.lease.ring_token = 1000 + i;
        slot.lease.ring_allowed = true;
        demux.on_frame(f);
        held += slot.lease.ring_holds;
    }
    sink.finish();
    const test::ReadTransfer& got = reader.join();
    {
        const RingStats e = stats_of(sink);
        ASSERT_TRUE(e.error.empty()) << e.error;
        EXPECT_EQ(e.unwritten, 0u);
    }
    ASSERT_TRUE(got.ended);
    ASSERT_EQ(got.data.size(), 100 * kPayload);
    expect_records(got.data, 100, missing);
    EXPECT_EQ(device.on_forbidden_thread.load(), 0) << "a device call on the capture thread";
    EXPECT_EQ(device.unflushed_batches.load(), 0) << "a batch read before the NIC's writes flushed";
    EXPECT_GT(device.batches.load(), 0);
    EXPECT_EQ(held, 97u);
    auto released = owner.released();
    std::sort(released.begin(), released.end());
    EXPECT_EQ(released.size(), 97u) << "every held slot given back";
    EXPECT_EQ(std::unique(released.begin(), released.end()), released.end()) << "once";
    const RingStats s = stats_of(sink);
    EXPECT_EQ(s.frames, 97u);
    EXPECT_EQ(s.fills, 3u);
    EXPECT_TRUE(s.end_of_data);
    // Batched: a wait per batch or block, not per frame.
    EXPECT_LT(log.calls(DeviceCallLog::Call::synchronize), 60u);
    EXPECT_GT(log.calls(DeviceCallLog::Call::synchronize), 0u);
}

}  // namespace
}  // namespace ibvcap
