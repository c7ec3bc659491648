// Unit tests for the threaded writer (lib/sinks/writer.hpp) and the output framing
// (formats/output.hpp).
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "formats/output.hpp"
#include "frames.hpp"
#include "held_frames.hpp"
#include "lib/sinks/file_index.hpp"
#include "lib/sinks/writer.hpp"

namespace ibvcap {
namespace {

namespace fs = std::filesystem;
using test::FileSizeLimit;
using ByteVec = std::vector<std::uint8_t>;
using test::CountingDevice;
using test::RecordingOwner;
using test::SlotFrame;

// ---------------------------------------------------------------------------
// formats/output.hpp

TEST(OutputFormat, PcapFileHeaderBytes) {
    const auto h = pcap_file_header();
    const std::array<std::uint8_t, 24> expected = {
        0x4d, 0x3c, 0xb2, 0xa1,  // magic 0xa1b23c4d (nanosecond), little-endian
        0x02, 0x00, 0x04, 0x00,  // version 2.4
        0x00, 0x00, 0x00, 0x00,  // thiszone
        0x00, 0x00, 0x00, 0x00,  // sigfigs
        0x00, 0x00, 0x04, 0x00,  // snaplen 262144
        0x01, 0x00, 0x00, 0x00,  // linktype 1 (Ethernet)
    };
    EXPECT_EQ(h, expected);
    EXPECT_EQ(kPcapFileHeaderBytes, 24u);
    EXPECT_EQ(kPcapSnaplen, 262144u);

    const auto small = pcap_file_header(9000);
    EXPECT_EQ(small[16], 0x28);
    EXPECT_EQ(small[17], 0x23);
    EXPECT_EQ(small[18], 0x00);
    EXPECT_EQ(small[19], 0x00);
    for (std::size_t i = 0; i < 16; ++i) {
        EXPECT_EQ(small[i], expected[i]) << i;
    }
    for (std::size_t i = 20; i < 24; ++i) {
        EXPECT_EQ(small[i], expected[i]) << i;
    }
}

TEST(OutputFormat, PcapRecordHeaderWithNanoseconds) {
    // 2026-01-01T00:00:00.123456789Z, 8298 bytes captured of 9000.
    const std::uint64_t ts = 1767225600ull * 1'000'000'000ull + 123456789ull;
    const auto h = pcap_record_header(ts, 8298, 9000);
    const std::array<std::uint8_t, 16> expected = {
        0x00, 0xb9, 0x55, 0x69,  // seconds 1767225600
        0x15, 0xcd, 0x5b, 0x07,  // nanoseconds 123456789
        0x6a, 0x20, 0x00, 0x00,  // captured 8298
        0x28, 0x23, 0x00, 0x00,  // on the wire 9000
    };
    EXPECT_EQ(h, expected);
    EXPECT_EQ(kPcapRecordHeaderBytes, 16u);

    const auto zero = pcap_record_header(999'999'999, 0, 60);
    const std::array<std::uint8_t, 16> expected_zero = {0x00, 0x00, 0x00, 0x00, 0xff, 0xc9,
                                                        0x9a, 0x3b, 0x00, 0x00, 0x00, 0x00,
                                                        0x3c, 0x00, 0x00, 0x00};
    EXPECT_EQ(zero, expected_zero);
}

TEST(OutputFormat, NamesRoundTrip) {
    const std::array<std::string_view, 6> names = {"raw",  "codif", "codifhdr",
                                                   "vdif", "pcap",  "pcapng"};
    ASSERT_EQ(kAllOutputFormats.size(), names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
        const OutputFormat f = kAllOutputFormats[i];
        EXPECT_EQ(to_string(f), names[i]);
        EXPECT_EQ(file_extension(f), names[i]);
        const auto parsed = parse_output_format(names[i]);
        ASSERT_TRUE(parsed.has_value()) << names[i];
        EXPECT_EQ(*parsed, f);
    }
    EXPECT_EQ(output_format_choices(), "raw, codif, codifhdr, vdif, pcap, pcapng");
}

TEST(OutputFormat, UnknownNamesAreRejected) {
    const std::array<std::string_view, 11> names = {"",
                                                    "PCAP",
                                                    "Raw",
                                                    "pcapngx",
                                                    "codif ",
                                                    " codif",
                                                    "codifhd",
                                                    "codifhdrx",
                                                    "hdr",
                                                    "r",
                                                    std::string_view("raw\0", 4)};
    for (const std::string_view name : names) {
        EXPECT_FALSE(parse_output_format(name).has_value()) << '"' << name << '"';
    }
}

// ---------------------------------------------------------------------------
// Writer helpers

class TempDir {
  public:
    TempDir() {
        std::string pattern = (fs::temp_directory_path() / "ibvcap-writer-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) {
            throw std::runtime_error("mkdtemp failed");
        }
        path_ = pattern;
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string file(const std::string& name) const { return (path_ / name).string(); }

  private:
    fs::path path_;
};

ByteVec read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in.good()) << "cannot open " << path;
    return ByteVec(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

ByteVec random_bytes(std::mt19937_64& rng, std::size_t n) {
    ByteVec v(n);
    for (auto& b : v) {
        b = static_cast<std::uint8_t>(rng());
    }
    return v;
}

// One record as its pieces; `write` passes them as spans.
struct Record {
    std::vector<ByteVec> pieces;
    void write(Writer& w, Writer::OutputId out) const {
        std::array<Bytes, 4> spans{};
        for (std::size_t i = 0; i < pieces.size(); ++i) {
            spans[i] = Bytes(pieces[i]);
        }
        w.write(out, std::span<const Bytes>(spans.data(), pieces.size()));
    }
    void append_to(ByteVec& file) const {
        for (const auto& p : pieces) {
            file.insert(file.end(), p.begin(), p.end());
        }
    }
    std::size_t size() const {
        std::size_t n = 0;
        for (const auto& p : pieces) {
            n += p.size();
        }
        return n;
    }
};

// A record of 1-4 pieces, each of 0..max_piece bytes, at least one byte in all.
Record random_record(std::mt19937_64& rng, std::size_t max_piece) {
    Record r;
    const std::size_t n = 1 + rng() % 4;
    for (std::size_t i = 0; i < n; ++i) {
        r.pieces.push_back(random_bytes(rng, rng() % (max_piece + 1)));
    }
    if (r.size() == 0) {
        r.pieces[0].push_back(0x5a);
    }
    return r;
}

Record fixed_record(std::size_t bytes, std::uint8_t fill) {
    return Record{{ByteVec(bytes, fill)}};
}

ByteVec preamble_bytes() {
    const auto h = pcap_file_header();
    return ByteVec(h.begin(), h.end());
}

Writer::Options small_options(std::size_t buffers = 2) {
    Writer::Options o;
    o.buffer_bytes = 128 * 1024;
    o.buffers = buffers;
    o.max_outputs = 256;
    return o;
}

// ---------------------------------------------------------------------------
// Writer

TEST(Writer, RejectsTooFewOrTooSmallBuffers) {
    Writer::Options o = small_options();
    o.buffers = 1;
    EXPECT_THROW(Writer{o}, std::invalid_argument);
    o.buffers = 0;  // chosen by the writer: 256 MiB worth, at least two
    EXPECT_NO_THROW(Writer{o});
    o = small_options();
    o.buffer_bytes = 65536 + kPcapRecordHeaderBytes - 1;
    EXPECT_THROW(Writer{o}, std::invalid_argument);
    o.buffer_bytes = 64 * 1024 + 4096;
    EXPECT_NO_THROW(Writer{o});
}

// The smallest buffer the constructor accepts (64 KiB + one pcap record header,
// 65552 bytes) must be usable. Buffers come from aligned_alloc(4096, size),
// whose size must be a multiple of the alignment (C11 7.22.3.1, which C++17
// follows): AddressSanitizer aborts on it. Run in a child process so that an
// abort fails this test only.
TEST(WriterDeathTest, SmallestAcceptedBufferSizeIsUsable) {
    GTEST_FLAG_SET(death_test_style, "fast");  // the child shares `dir` with the parent
    TempDir dir;
    const std::string path = dir.file("min.raw");
    EXPECT_EXIT(
        {
            Writer::Options o;
            o.buffers = 2;
            o.buffer_bytes = 65536 + kPcapRecordHeaderBytes;
            Writer w(o);
            const auto out = w.add_output(OutputFormat::raw, path, "", "");
            for (int i = 0; i < 3; ++i) {
                fixed_record(o.buffer_bytes, 0x12).write(w, out);
            }
            w.finish();
            const auto s = w.stats().at(0);
            std::_Exit(s.packets == 3 && s.bytes == 3 * o.buffer_bytes ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "");
    std::error_code ec;
    EXPECT_EQ(fs::file_size(path, ec), 3 * (65536 + kPcapRecordHeaderBytes)) << ec.message();
}

// ---------------------------------------------------------------------------
// The memory bound (Options::memory_bytes, --writer-memory)

// The record `j` of output `i`: 2-5 KB of one byte value.
Record bounded_record(std::size_t i, std::size_t j) {
    return fixed_record(2000 + (i * 7 + j * 13) % 3000, static_cast<std::uint8_t>(i * 31 + j));
}

// 2,400 outputs appear one by one, as streams do, while records go to all
// the outputs already there in turn: the writer's memory never passes the
// bound, the buffers shrink as the outputs grow, and every record lands.
void expect_bound_holds(bool offline) {
    TempDir dir;
    constexpr std::size_t kOutputs = 2400;
    constexpr std::size_t kRecords = 40;  // per output: ~140 KB, two buffers' worth at the end
    Writer::Options o;
    o.max_outputs = kOutputs;
    o.block_when_full = offline;
    o.memory_bytes = std::size_t{320} << 20;
    ASSERT_LE(Writer::min_memory_bytes(o), o.memory_bytes);
    Writer w(o);
    w.prepare();  // (as the run does before its source starts)
    const std::size_t first_size = w.memory().buffer_bytes;
    EXPECT_EQ(first_size, std::size_t{512} << 10);  // few outputs: the unbounded size
    std::vector<Writer::OutputId> outs;
    std::vector<std::size_t> written(kOutputs, 0);
    for (std::size_t round = 0; round < kRecords + kOutputs / 60; ++round) {
        for (std::size_t k = 0; k < 60 && outs.size() < kOutputs; ++k) {
            const std::size_t i = outs.size();
            outs.push_back(
                w.add_output(OutputFormat::raw, dir.file(fmt::format("o{}.raw", i)), "", ""));
        }
        if (!offline) {
            // Live, the new outputs are planned before their first records,
            // as the run plans those its options name: the buffer stock
            // makes theirs ahead, on a thread of its own and at its own
            // rate, which on a loaded CI machine can fall behind an
            // unplanned burst (docs/performance.md, "A stalled disk").
            w.prepare();
        }
        for (std::size_t i = 0; i < outs.size(); ++i) {
            if (written[i] < kRecords) {
                bounded_record(i, written[i]++).write(w, outs[i]);
            }
        }
        ASSERT_LE(w.memory().peak, o.memory_bytes) << "round " << round;
        // Live, at the pace of the disk (as a real source's rate is bounded:
        // this test's producer would outrun any disk).
        while (!offline && w.backlog_bytes() > 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    w.finish();
    const Writer::Memory m = w.memory();
    EXPECT_LE(m.peak, o.memory_bytes);
    EXPECT_LT(m.buffer_bytes, first_size / 4);
    EXPECT_GE(m.buffer_bytes, Writer::kMinBufferBytes);
    EXPECT_EQ(m.buffer_bytes % 4096, 0u);
    const auto stats = w.stats();
    ASSERT_EQ(stats.size(), kOutputs);
    std::uint64_t dropped = 0;
    for (std::size_t i = 0; i < kOutputs; ++i) {
        ByteVec expected;
        for (std::size_t j = 0; j < kRecords; ++j) {
            bounded_record(i, j).append_to(expected);
        }
        const ByteVec got = read_file(dir.file(fmt::format("o{}.raw", i)));
        ASSERT_EQ(stats[i].packets + stats[i].dropped, kRecords) << i;
        ASSERT_EQ(stats[i].bytes, got.size()) << i;
        if (offline) {
            ASSERT_EQ(stats[i].dropped, 0u) << i;
            ASSERT_EQ(got, expected) << i;
        }
        dropped += stats[i].dropped;
    }
    // A live source past the bound owes new outputs their buffers for a
    // while: a record that finds none is dropped and counted, never written
    // in part.
    if (!offline) {
        EXPECT_LT(dropped, kOutputs * kRecords / 100)
            << "at the bound " << m.drops_at_bound << ", below it " << m.drops_below_bound
            << ", peak " << m.peak << ", buffers " << m.buffers << ", size " << m.buffer_bytes;
    }
}

TEST(WriterMemory, OfflineStaysUnderTheBoundWith2400Outputs) {
    expect_bound_holds(true);
}

TEST(WriterMemory, LiveStaysUnderTheBoundWith2400Outputs) {
    expect_bound_holds(false);
}

TEST(WriterMemory, WithoutABoundItGrowsWithTheOutputs) {
    TempDir dir;
    Writer::Options o;
    o.max_outputs = 2400;
    Writer w(o);
    for (std::size_t i = 0; i < 2400; ++i) {
        w.add_output(OutputFormat::raw, dir.file(fmt::format("o{}.raw", i)), "", "");
    }
    EXPECT_GT(w.memory().now, std::size_t{2400} * (512 << 10));
    w.finish();
}

TEST(WriterMemory, ABoundTooSmallForTheOutputsIsRefusedNamingWhatIsNeeded) {
    Writer::Options o;
    o.memory_bytes = std::size_t{64} << 20;
    const std::size_t least = Writer::min_memory_bytes(o);
    EXPECT_GT(least, o.memory_bytes);  // 4096 outputs of 68 KiB do not fit in 64 MiB
    try {
        Writer w(o);
        ADD_FAILURE() << "a 64 MiB bound for 4096 outputs was accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find(
                      fmt::format("give {} MiB or more", (least + (1 << 20) - 1) >> 20)),
                  std::string::npos)
            << e.what();
    }
    o.memory_bytes = least;
    EXPECT_NO_THROW(Writer{o});
    o.memory_bytes = least - (std::size_t{1} << 20);
    EXPECT_THROW(Writer{o}, std::invalid_argument);
    o.max_outputs = 100;  // fewer outputs need less
    EXPECT_LT(Writer::min_memory_bytes(o), least / 10);
    EXPECT_NO_THROW(Writer{o});
}

TEST(Writer, TooManyOutputsThrowsLengthError) {
    TempDir dir;
    Writer::Options o = small_options();
    o.max_outputs = 3;
    Writer w(o);
    for (int i = 0; i < 3; ++i) {
        w.add_output(OutputFormat::raw, dir.file("o" + std::to_string(i)), "", "");
    }
    EXPECT_THROW(w.add_output(OutputFormat::raw, dir.file("o3"), "", ""), std::length_error);
    w.finish();
    const auto stats = w.stats();
    ASSERT_EQ(stats.size(), 3u);
    for (int i = 0; i < 3; ++i) {
        EXPECT_TRUE(fs::exists(dir.file("o" + std::to_string(i))));
    }
    EXPECT_FALSE(fs::exists(dir.file("o3")));
}

TEST(Writer, RecordsOfSeveralPiecesLandInOrderAcrossManyBufferFills) {
    TempDir dir;
    std::mt19937_64 rng(42);
    const ByteVec preamble = preamble_bytes();
    ByteVec expected = preamble;
    const std::size_t kRecords = 3000;  // ~13 MB through 128 KiB buffers: ~100 fills
    {
        Writer w(small_options());
        const auto out = w.add_output(OutputFormat::pcap, dir.file("a.pcap"), "239.17.0.1:36001",
                                      "10.0.0.11", preamble);
        for (std::size_t i = 0; i < kRecords; ++i) {
            const Record r = random_record(rng, 2200);
            r.write(w, out);
            r.append_to(expected);
        }
        w.finish();
        const auto stats = w.stats();
        ASSERT_EQ(stats.size(), 1u);
        const OutputStats& s = stats[0];
        EXPECT_EQ(s.path, dir.file("a.pcap"));
        EXPECT_EQ(s.format, "pcap");
        EXPECT_EQ(s.group, "239.17.0.1:36001");
        EXPECT_EQ(s.antenna, "10.0.0.11");
        EXPECT_EQ(s.packets, kRecords);
        EXPECT_EQ(s.bytes, expected.size());
        EXPECT_EQ(s.dropped, 0u);
        EXPECT_EQ(s.error, "");
        EXPECT_FALSE(w.any_failed());
    }
    ASSERT_GT(expected.size(), 50u * 128 * 1024);
    const ByteVec got = read_file(dir.file("a.pcap"));
    ASSERT_EQ(got.size(), expected.size());
    EXPECT_TRUE(got == expected);
    EXPECT_TRUE(std::equal(preamble.begin(), preamble.end(), got.begin()));
}

TEST(Writer, EveryPieceCountIsWrittenExactly) {
    TempDir dir;
    Writer w(small_options());
    const ByteVec a = {1, 2, 3}, b = {4}, c = {}, d = {5, 6, 7, 8, 9};
    const auto out = w.add_output(OutputFormat::raw, dir.file("r.raw"), "", "");
    const std::array<Bytes, 4> pieces = {Bytes(a), Bytes(b), Bytes(c), Bytes(d)};
    for (std::size_t n = 1; n <= 4; ++n) {
        w.write(out, std::span<const Bytes>(pieces.data(), n));
    }
    w.finish();
    const ByteVec expected = {1, 2, 3, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    EXPECT_EQ(read_file(dir.file("r.raw")), expected);
    const auto s = w.stats().at(0);
    EXPECT_EQ(s.packets, 4u);
    EXPECT_EQ(s.bytes, expected.size());
    EXPECT_EQ(s.dropped, 0u);
    EXPECT_EQ(s.format, "raw");
}

TEST(Writer, OutputWithoutRecordsHoldsItsPreamble) {
    TempDir dir;
    const ByteVec preamble = preamble_bytes();
    Writer w(small_options());
    w.add_output(OutputFormat::pcap, dir.file("empty.pcap"), "g", "a", preamble);
    w.add_output(OutputFormat::codif, dir.file("empty.codif"), "g", "a");
    // An existing file is truncated, not appended to.
    {
        std::ofstream old(dir.file("old.raw"), std::ios::binary);
        old << "stale contents that must go";
    }
    w.add_output(OutputFormat::raw, dir.file("old.raw"), "g", "a");
    w.finish();
    EXPECT_EQ(read_file(dir.file("empty.pcap")), preamble);
    ASSERT_TRUE(fs::exists(dir.file("empty.codif")));
    EXPECT_EQ(fs::file_size(dir.file("empty.codif")), 0u);
    EXPECT_EQ(fs::file_size(dir.file("old.raw")), 0u);
    const auto stats = w.stats();
    ASSERT_EQ(stats.size(), 3u);
    EXPECT_EQ(stats[0].packets, 0u);
    EXPECT_EQ(stats[0].bytes, preamble.size());
    EXPECT_EQ(stats[1].bytes, 0u);
    EXPECT_EQ(stats[1].format, "codif");
    for (const auto& s : stats) {
        EXPECT_EQ(s.dropped, 0u);
        EXPECT_EQ(s.error, "");
    }
    EXPECT_FALSE(w.any_failed());
}

TEST(Writer, ManyOutputsFewBuffersInterleavedFinishWithoutDeadlock) {
    TempDir dir;
    std::mt19937_64 rng(7);
    constexpr std::size_t kOutputs = 100;
    constexpr std::size_t kRecords = 30000;  // ~300 per output, ~2.6 fills each
    const ByteVec preamble = preamble_bytes();
    std::vector<ByteVec> expected(kOutputs);
    std::vector<std::uint64_t> counts(kOutputs, 0);
    Writer w(small_options(2));
    std::vector<Writer::OutputId> outs;
    for (std::size_t i = 0; i < kOutputs; ++i) {
        // Every other output has a preamble; a few never get a record.
        const bool with_preamble = i % 2 == 0;
        outs.push_back(w.add_output(i % 2 == 0 ? OutputFormat::pcap : OutputFormat::codif,
                                    dir.file("out" + std::to_string(i)), "grp", std::to_string(i),
                                    with_preamble ? Bytes(preamble) : Bytes{}));
        if (with_preamble) {
            expected[i] = preamble;
        }
    }
    for (std::size_t n = 0; n < kRecords; ++n) {
        const std::size_t i = rng() % (kOutputs - 3);  // the last three stay empty
        const Record r = random_record(rng, 600);
        r.write(w, outs[i]);
        r.append_to(expected[i]);
        ++counts[i];
    }
    w.finish();
    const auto stats = w.stats();
    ASSERT_EQ(stats.size(), kOutputs);
    for (std::size_t i = 0; i < kOutputs; ++i) {
        SCOPED_TRACE(i);
        EXPECT_EQ(stats[i].path, dir.file("out" + std::to_string(i)));
        EXPECT_EQ(stats[i].antenna, std::to_string(i));
        EXPECT_EQ(stats[i].packets, counts[i]);
        EXPECT_EQ(stats[i].bytes, expected[i].size());
        EXPECT_EQ(stats[i].dropped, 0u);
        EXPECT_EQ(stats[i].error, "");
        const ByteVec got = read_file(stats[i].path);
        ASSERT_EQ(got.size(), expected[i].size());
        EXPECT_TRUE(got == expected[i]);
    }
    EXPECT_FALSE(w.any_failed());
}

TEST(Writer, RecordOfExactlyOneBufferFitsAndALargerOneIsDropped) {
    TempDir dir;
    const Writer::Options o = small_options();
    for (const bool block : {true, false}) {
        SCOPED_TRACE(block);
        Writer::Options opt = o;
        opt.block_when_full = block;
        Writer w(opt);
        const std::string path = dir.file(block ? "big-block" : "big-drop");
        const auto out = w.add_output(OutputFormat::raw, path, "", "");
        ByteVec expected;
        const Record small = fixed_record(100, 0x11);
        const Record whole = fixed_record(o.buffer_bytes, 0x22);
        const Record too_big = fixed_record(o.buffer_bytes + 1, 0x33);
        small.write(w, out);
        small.append_to(expected);
        whole.write(w, out);
        whole.append_to(expected);
        too_big.write(w, out);
        small.write(w, out);
        small.append_to(expected);
        w.finish();
        const auto s = w.stats().at(0);
        EXPECT_EQ(s.packets, 3u);
        EXPECT_EQ(s.dropped, 1u);
        EXPECT_EQ(w.dropped_so_far(), 1u);
        EXPECT_EQ(s.bytes, expected.size());
        EXPECT_TRUE(w.any_failed());
        EXPECT_TRUE(read_file(path) == expected);
    }
}

TEST(Writer, FileInMissingDirectoryFailsAndCountsEveryRecord) {
    TempDir dir;
    Writer w(small_options());
    const auto bad = w.add_output(OutputFormat::pcap, dir.file("no/such/dir/x.pcap"), "g", "a",
                                  Bytes(preamble_bytes()));
    const auto good = w.add_output(OutputFormat::raw, dir.file("good.raw"), "g", "a");
    const Record r = fixed_record(1000, 0x44);
    constexpr std::uint64_t kRecords = 500;  // several buffers' worth
    ByteVec expected;
    for (std::uint64_t i = 0; i < kRecords; ++i) {
        r.write(w, bad);
        r.write(w, good);
        r.append_to(expected);
    }
    w.finish();
    const auto stats = w.stats();
    ASSERT_EQ(stats.size(), 2u);
    EXPECT_EQ(stats[0].error.rfind("cannot create file", 0), 0u) << stats[0].error;
    EXPECT_NE(stats[0].error.find("No such file or directory"), std::string::npos)
        << stats[0].error;
    EXPECT_EQ(stats[0].packets, 0u);
    EXPECT_EQ(stats[0].bytes, 0u);
    EXPECT_EQ(stats[0].dropped, kRecords);
    EXPECT_TRUE(w.any_failed());
    // The other output is not affected.
    EXPECT_EQ(stats[1].error, "");
    EXPECT_EQ(stats[1].packets, kRecords);
    EXPECT_EQ(stats[1].dropped, 0u);
    EXPECT_TRUE(read_file(dir.file("good.raw")) == expected);
}

TEST(Writer, MissingDirectoryWithoutRecordsStillReportsTheError) {
    TempDir dir;
    Writer w(small_options());
    w.add_output(OutputFormat::raw, dir.file("missing/x.raw"), "", "");
    w.finish();
    const auto s = w.stats().at(0);
    EXPECT_EQ(s.error.rfind("cannot create file", 0), 0u) << s.error;
    EXPECT_EQ(s.dropped, 0u);
    EXPECT_EQ(s.packets, 0u);
    EXPECT_TRUE(w.any_failed());
}

// /dev/full is reached through a symbolic link in a temporary directory, so
// that a writer which removes a failed output can only remove the link.
TEST(Writer, DiskFullFailsTheOutputAndCountsEveryRecordDropped) {
    if (::access("/dev/full", W_OK) != 0) {
        IBVCAP_SKIP_UNLESS_CI("/dev/full is not writable here");
    }
    TempDir dir;
    for (const bool with_preamble : {true, false}) {
        SCOPED_TRACE(with_preamble);
        const std::string link = dir.file(with_preamble ? "full-pcap" : "full-raw");
        ASSERT_EQ(::symlink("/dev/full", link.c_str()), 0);
        Writer w(small_options());
        const ByteVec preamble = preamble_bytes();
        const auto out = w.add_output(OutputFormat::pcap, link, "g", "a",
                                      with_preamble ? Bytes(preamble) : Bytes{});
        constexpr std::uint64_t kRecords = 400;  // three buffers and a partial one
        const Record r = fixed_record(1000, 0x55);
        for (std::uint64_t i = 0; i < kRecords; ++i) {
            r.write(w, out);
        }
        w.finish();
        const auto s = w.stats().at(0);
        EXPECT_NE(s.error.find("write failed"), std::string::npos) << s.error;
        EXPECT_NE(s.error.find("No space left"), std::string::npos) << s.error;
        EXPECT_NE(s.error.find("free space on that filesystem, or write to another"),
                  std::string::npos)
            << s.error;
        EXPECT_EQ(s.packets, 0u);
        EXPECT_EQ(s.bytes, 0u);
        EXPECT_EQ(s.dropped, kRecords);
        EXPECT_TRUE(w.any_failed());
    }
}

// When the pcap file header cannot be written, the output may be removed if it
// is a file the writer made; a FIFO (someone's `tshark -i FIFO`) or a device
// node that was there before must never be unlinked. Here the output is
// /dev/full (by a link to it), where every write fails with ENOSPC. (A FIFO
// is written into in order, and a FIFO whose reader went away fails with
// EPIPE: test_cli_ends.cpp, CliEnds.AFifoOutputIsWrittenInto.)
TEST(Writer, FailedPreambleNeverRemovesANonRegularFile) {
    TempDir dir;
    const std::string device = dir.file("to-full");
    fs::create_symlink("/dev/full", device);
    std::vector<OutputStats> stats;
    {
        Writer w(small_options());
        const auto out = w.add_output(OutputFormat::pcap, device, "", "", Bytes(preamble_bytes()));
        fixed_record(100, 0x77).write(w, out);
        w.finish();
        stats = w.stats();
    }
    ASSERT_EQ(stats.size(), 1u);
    EXPECT_NE(stats[0].error.find("No space left"), std::string::npos) << stats[0].error;
    EXPECT_EQ(stats[0].packets, 0u);
    EXPECT_EQ(stats[0].dropped, 1u);
    EXPECT_TRUE(fs::is_symlink(device)) << "the writer removed a device it did not create";
    EXPECT_TRUE(fs::is_character_file("/dev/full"));
}

TEST(Writer, WriteErrorMidFileCutsBackToTheLastWholeRecord) {
    TempDir dir;
    const Writer::Options o = small_options();
    const ByteVec preamble = preamble_bytes();
    constexpr std::size_t kRecordBytes = 1000;
    const std::size_t per_buffer = o.buffer_bytes / kRecordBytes;  // 131
    const std::size_t good_bytes = preamble.size() + per_buffer * kRecordBytes;
    constexpr std::uint64_t kRecords = 1000;
    std::vector<OutputStats> stats;
    {
        // The second buffer is written partly (5000 bytes), then EFBIG.
        FileSizeLimit limit(good_bytes + 5000);
        ASSERT_TRUE(limit.ok());
        Writer w(o);
        const auto out =
            w.add_output(OutputFormat::pcap, dir.file("cut.pcap"), "", "", Bytes(preamble));
        for (std::uint64_t i = 0; i < kRecords; ++i) {
            fixed_record(kRecordBytes, static_cast<std::uint8_t>(i)).write(w, out);
        }
        w.finish();
        stats = w.stats();
        EXPECT_TRUE(w.any_failed());
    }
    ASSERT_EQ(stats.size(), 1u);
    EXPECT_NE(stats[0].error.find("write failed"), std::string::npos) << stats[0].error;
    EXPECT_NE(stats[0].error.find("File too large"), std::string::npos) << stats[0].error;
    EXPECT_EQ(stats[0].packets, per_buffer);
    EXPECT_EQ(stats[0].dropped, kRecords - per_buffer);
    EXPECT_EQ(stats[0].bytes, good_bytes);
    const ByteVec got = read_file(dir.file("cut.pcap"));
    ASSERT_EQ(got.size(), good_bytes);
    ByteVec expected = preamble;
    for (std::size_t i = 0; i < per_buffer; ++i) {
        fixed_record(kRecordBytes, static_cast<std::uint8_t>(i)).append_to(expected);
    }
    EXPECT_TRUE(got == expected);
}

// Drop mode, made deterministic: output A is a FIFO, so the writer thread
// blocks in open() on A's first buffer until a reader appears. Until then no
// buffer comes back, so output B gets exactly the two free buffers of the pool
// and every later record for it is dropped by the producer. (Then a reader
// takes A's records: a FIFO is written into.)
TEST(Writer, DropModeCountsRecordsThatFindNoBuffer) {
    TempDir dir;
    const std::string fifo = dir.file("a.fifo");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    Writer::Options o = small_options(2);
    o.block_when_full = false;
    constexpr std::size_t kRecordBytes = 1000;
    const std::size_t per_buffer = o.buffer_bytes / kRecordBytes;  // 131
    Writer w(o);  // pool: 2 + 1 per output = 4 buffers
    const auto a = w.add_output(OutputFormat::raw, fifo, "", "");
    const auto b = w.add_output(OutputFormat::raw, dir.file("b.raw"), "", "");
    // Fill A's first buffer and start its second: the first goes to the writer
    // thread, which blocks opening the FIFO. A holds one buffer, two are free.
    const std::uint64_t a_records = per_buffer + 1;
    for (std::uint64_t i = 0; i < a_records; ++i) {
        fixed_record(kRecordBytes, 0xaa).write(w, a);
    }
    constexpr std::uint64_t kBRecords = 1000;
    ByteVec expected_b;
    for (std::uint64_t i = 0; i < kBRecords; ++i) {
        const Record r = fixed_record(kRecordBytes, static_cast<std::uint8_t>(i));
        r.write(w, b);
        if (i < 2 * per_buffer) {
            r.append_to(expected_b);
        }
    }
    // Let the writer thread go on.
    test::FifoReader reader(fifo);
    reader.start();
    w.finish();
    EXPECT_EQ(reader.join(), a_records * kRecordBytes);
    const auto stats = w.stats();
    ASSERT_EQ(stats.size(), 2u);
    EXPECT_TRUE(w.any_failed());  // B's records that found no buffer
    // B: the records that found a buffer are in the file, the rest dropped.
    EXPECT_EQ(stats[1].error, "");
    EXPECT_EQ(stats[1].packets, 2 * per_buffer);
    EXPECT_EQ(stats[1].dropped, kBRecords - 2 * per_buffer);
    EXPECT_EQ(stats[1].packets + stats[1].dropped, kBRecords);
    EXPECT_EQ(stats[1].bytes, expected_b.size());
    EXPECT_TRUE(read_file(dir.file("b.raw")) == expected_b);
    // A: every record written into the FIFO.
    EXPECT_EQ(stats[0].error, "");
    EXPECT_EQ(stats[0].packets, a_records);
    EXPECT_EQ(stats[0].dropped, 0u);
    // The timeline's live witness counts both kinds, neither twice.
    EXPECT_EQ(w.dropped_so_far(), stats[0].dropped + stats[1].dropped);
}

TEST(Writer, DropModeAccountingHoldsInATightLoop) {
    TempDir dir;
    Writer::Options o = small_options(2);
    o.block_when_full = false;
    constexpr std::uint64_t kRecords = 1000;
    std::uint64_t sent = 0;
    std::vector<OutputStats> stats;
    {
        Writer w(o);
        const auto out = w.add_output(OutputFormat::raw, dir.file("loop.raw"), "", "");
        for (std::uint64_t i = 0; i < kRecords; ++i) {
            fixed_record(60000, static_cast<std::uint8_t>(i)).write(w, out);
            ++sent;
        }
        w.finish();
        stats = w.stats();
        EXPECT_EQ(w.any_failed(), stats[0].dropped > 0);
    }
    ASSERT_EQ(stats.size(), 1u);
    EXPECT_EQ(stats[0].packets + stats[0].dropped, sent);
    EXPECT_EQ(stats[0].bytes, stats[0].packets * 60000);
    EXPECT_EQ(fs::file_size(dir.file("loop.raw")), stats[0].bytes);
    EXPECT_EQ(stats[0].error, "");
}

// Every record is either in the file (packets) or dropped: a record whose
// pieces are all empty is no exception.
TEST(Writer, EmptyRecordsAreAccountedFor) {
    TempDir dir;
    Writer w(small_options());
    const auto out = w.add_output(OutputFormat::raw, dir.file("e.raw"), "", "");
    const ByteVec none;
    const std::array<Bytes, 2> pieces = {Bytes(none), Bytes(none)};
    for (int i = 0; i < 3; ++i) {
        w.write(out, pieces);
    }
    w.finish();
    const auto s = w.stats().at(0);
    EXPECT_EQ(s.packets + s.dropped, 3u);
    EXPECT_EQ(s.bytes, 0u);
    EXPECT_EQ(fs::file_size(dir.file("e.raw")), 0u);
}

// A record the output's format cannot hold: refused, counted in the output's
// split and the live witness alike, and the output fails naming why.
TEST(Writer, RefusedRecordsAreCountedAndNamed) {
    TempDir dir;
    Writer w(small_options());
    const auto out = w.add_output(OutputFormat::raw, dir.file("r.raw"), "", "");
    fixed_record(100, 0x11).write(w, out);
    w.refuse(out, "too long for the format");
    w.refuse(out, "a second reason is not kept");
    EXPECT_EQ(w.dropped_so_far(), 2u);
    w.finish();
    const auto s = w.stats().at(0);
    EXPECT_EQ(s.packets, 1u);
    EXPECT_EQ(s.dropped, 2u);
    EXPECT_EQ(s.error, "2 records not written: too long for the format");
    EXPECT_TRUE(w.any_failed());
    EXPECT_EQ(w.dropped_so_far(), 2u);
}

TEST(Writer, FinishIsIdempotent) {
    TempDir dir;
    Writer w(small_options());
    const auto out = w.add_output(OutputFormat::raw, dir.file("f.raw"), "", "");
    const Record r = fixed_record(300, 0x66);
    for (int i = 0; i < 10; ++i) {
        r.write(w, out);
    }
    w.finish();
    const auto first = w.stats().at(0);
    w.finish();
    w.finish();
    const auto again = w.stats().at(0);
    EXPECT_EQ(first.packets, 10u);
    EXPECT_EQ(again.packets, 10u);
    EXPECT_EQ(again.bytes, 3000u);
    EXPECT_EQ(again.dropped, 0u);
    EXPECT_EQ(fs::file_size(dir.file("f.raw")), 3000u);
}

TEST(Writer, DestructorWithoutFinishWritesTheFiles) {
    TempDir dir;
    std::mt19937_64 rng(99);
    const ByteVec preamble = preamble_bytes();
    ByteVec expected_a = preamble;
    ByteVec expected_b;
    {
        Writer w(small_options());
        const auto a =
            w.add_output(OutputFormat::pcap, dir.file("a.pcap"), "", "", Bytes(preamble));
        const auto b = w.add_output(OutputFormat::codif, dir.file("b.codif"), "", "");
        w.add_output(OutputFormat::pcap, dir.file("c.pcap"), "", "", Bytes(preamble));
        for (int i = 0; i < 500; ++i) {
            const Record r = random_record(rng, 1500);
            r.write(w, i % 3 == 0 ? b : a);
            r.append_to(i % 3 == 0 ? expected_b : expected_a);
        }
    }
    EXPECT_TRUE(read_file(dir.file("a.pcap")) == expected_a);
    EXPECT_TRUE(read_file(dir.file("b.codif")) == expected_b);
    EXPECT_EQ(read_file(dir.file("c.pcap")), preamble);
}

TEST(Writer, DestructorWithoutOutputsOrRecords) {
    Writer w(small_options());
    EXPECT_TRUE(w.stats().empty());
    EXPECT_FALSE(w.any_failed());
}

// ---------------------------------------------------------------------------
// O_DIRECT, rotation, several disk threads

// O_DIRECT writes whole pages: records of odd sizes across many buffers still
// give a file that is byte for byte what was written, cut to its length.
TEST(Writer, DirectIoFilesAreExactAndCutToTheirLength) {
    TempDir dir;
    std::mt19937_64 rng(7);
    Writer::Options o = small_options(4);
    o.direct_io = true;
    const ByteVec preamble = preamble_bytes();
    ByteVec expected_a = preamble;
    ByteVec expected_b;
    std::vector<OutputStats> stats;
    {
        Writer w(o);
        const auto a =
            w.add_output(OutputFormat::pcap, dir.file("a.pcap"), "", "", Bytes(preamble));
        const auto b = w.add_output(OutputFormat::raw, dir.file("b.raw"), "", "");
        for (int i = 0; i < 3000; ++i) {
            const Record r = random_record(rng, 700);
            r.write(w, i % 2 ? a : b);
            r.append_to(i % 2 ? expected_a : expected_b);
        }
        w.finish();
        stats = w.stats();
        EXPECT_FALSE(w.any_failed()) << stats[0].error << stats[1].error;
    }
    EXPECT_TRUE(read_file(dir.file("a.pcap")) == expected_a);
    EXPECT_TRUE(read_file(dir.file("b.raw")) == expected_b);
    EXPECT_EQ(stats[0].bytes, expected_a.size());
    EXPECT_EQ(stats[1].bytes, expected_b.size());
}

TEST(Writer, DirectIoOutputWithoutRecordsHoldsOnlyItsPreamble) {
    TempDir dir;
    Writer::Options o = small_options();
    o.direct_io = true;
    const ByteVec preamble = preamble_bytes();
    {
        Writer w(o);
        w.add_output(OutputFormat::pcap, dir.file("empty.pcap"), "", "", Bytes(preamble));
    }
    EXPECT_EQ(read_file(dir.file("empty.pcap")), preamble);
}

TEST(Writer, DirectIoWriteErrorCutsBackToTheLastWholeRecord) {
    TempDir dir;
    Writer::Options o = small_options();
    o.direct_io = true;
    const ByteVec preamble = preamble_bytes();
    constexpr std::size_t kRecordBytes = 1000;
    const std::size_t per_buffer = o.buffer_bytes / kRecordBytes;
    const std::size_t good_bytes = preamble.size() + per_buffer * kRecordBytes;
    constexpr std::uint64_t kRecords = 1000;
    std::vector<OutputStats> stats;
    {
        FileSizeLimit limit(good_bytes + 5000);  // inside the second buffer's pages
        ASSERT_TRUE(limit.ok());
        Writer w(o);
        const auto out =
            w.add_output(OutputFormat::pcap, dir.file("cut.pcap"), "", "", Bytes(preamble));
        for (std::uint64_t i = 0; i < kRecords; ++i) {
            fixed_record(kRecordBytes, static_cast<std::uint8_t>(i)).write(w, out);
        }
        w.finish();
        stats = w.stats();
        EXPECT_TRUE(w.any_failed());
    }
    // With O_DIRECT the kernel shortens the write to the limit and then
    // refuses the unaligned count (EINVAL), or says EFBIG: either is named.
    EXPECT_TRUE(stats[0].error.find("File too large") != std::string::npos ||
                stats[0].error.find("cut short") != std::string::npos)
        << stats[0].error;
    EXPECT_EQ(stats[0].packets, per_buffer);
    EXPECT_EQ(stats[0].dropped, kRecords - per_buffer);
    ByteVec expected = preamble;
    for (std::size_t i = 0; i < per_buffer; ++i) {
        fixed_record(kRecordBytes, static_cast<std::uint8_t>(i)).append_to(expected);
    }
    EXPECT_TRUE(read_file(dir.file("cut.pcap")) == expected);
}

// -C: a new file starts before a record would take the file past the size;
// every file starts with the preamble and holds whole records.
TEST(Writer, RotationBySizeSplitsAtRecordsAndRepeatsThePreamble) {
    TempDir dir;
    Writer::Options o = small_options(4);
    o.rotation.bytes = 10'000;
    const ByteVec preamble = preamble_bytes();
    std::vector<OutputStats> stats;
    {
        Writer w(o);
        const auto out =
            w.add_output(OutputFormat::pcap, dir.file("r.pcap"), "", "", Bytes(preamble));
        for (int i = 0; i < 100; ++i) {
            fixed_record(1000, static_cast<std::uint8_t>(i)).write(w, out);
        }
        w.finish();
        stats = w.stats();
    }
    // 24 + 9 * 1000 <= 10000: nine records per file.
    ASSERT_EQ(stats[0].files, 12u);
    EXPECT_EQ(stats[0].packets, 100u);
    for (std::uint64_t f = 0; f < 12; ++f) {
        ByteVec expected = preamble;
        for (int i = static_cast<int>(f) * 9; i < std::min(100, static_cast<int>(f + 1) * 9); ++i) {
            fixed_record(1000, static_cast<std::uint8_t>(i)).append_to(expected);
        }
        EXPECT_TRUE(read_file(Writer::rotated_path(dir.file("r.pcap"), f)) == expected) << f;
    }
    EXPECT_FALSE(fs::exists(dir.file("r.pcap")));
    ASSERT_EQ(stats[0].on_disk.size(), 12u);
    EXPECT_EQ(stats[0].overwritten, 0u);
    EXPECT_EQ(stats[0].on_disk[11].packets, 1u);
    EXPECT_EQ(stats[0].on_disk[11].bytes, 24u + 1000u);
    EXPECT_EQ(stats[0].on_disk[3].path, Writer::rotated_path(dir.file("r.pcap"), 3));
    EXPECT_EQ(Writer::rotated_path("/d/x.codif", 3), "/d/x.000003.codif");
    EXPECT_EQ(Writer::rotated_path("/d.e/x", 3), "/d.e/x.000003");
}

// -G: the record's own timestamp picks the file (offline reads rotate as the
// data's time goes, not the reader's); -W keeps a ring of files.
TEST(Writer, RotationByTimeFollowsRecordTimesAndARingKeepsTheNewest) {
    TempDir dir;
    Writer::Options o = small_options(4);
    o.rotation.seconds = 10;
    o.rotation.files = 3;
    std::vector<OutputStats> stats;
    {
        Writer w(o);
        const auto out = w.add_output(OutputFormat::codif, dir.file("t.codif"), "", "");
        // 5 periods of 10 s, 4 records each.
        for (std::uint64_t i = 0; i < 20; ++i) {
            const ByteVec rec(100, static_cast<std::uint8_t>(i));
            const Bytes piece(rec);
            w.write(out, {&piece, 1}, (1000 + i / 4 * 10) * 1'000'000'000ull + i);
        }
        w.finish();
        stats = w.stats();
    }
    EXPECT_EQ(stats[0].files, 5u);
    EXPECT_EQ(stats[0].packets, 20u);
    // The report's truth about the ring: the three files that exist, oldest
    // first, their records, and the 8 records of periods 0 and 1 overwritten.
    ASSERT_EQ(stats[0].on_disk.size(), 3u);
    EXPECT_EQ(stats[0].overwritten, 8u);
    const std::uint64_t name_of_file[3] = {2, 0, 1};
    for (std::size_t k = 0; k < 3; ++k) {
        EXPECT_EQ(stats[0].on_disk[k].path,
                  Writer::rotated_path(dir.file("t.codif"), name_of_file[k]));
        EXPECT_EQ(stats[0].on_disk[k].packets, 4u);
        EXPECT_EQ(stats[0].on_disk[k].bytes, 400u);
    }
    // Files 0..4 went to names 0,1,2,0,1: name 0 holds period 3, name 1
    // period 4, name 2 period 2.
    const std::uint64_t period_of_name[3] = {3, 4, 2};
    for (std::uint64_t n = 0; n < 3; ++n) {
        ByteVec expected;
        for (std::uint64_t i = period_of_name[n] * 4; i < period_of_name[n] * 4 + 4; ++i) {
            expected.insert(expected.end(), 100, static_cast<std::uint8_t>(i));
        }
        EXPECT_TRUE(read_file(Writer::rotated_path(dir.file("t.codif"), n)) == expected) << n;
    }
    EXPECT_FALSE(fs::exists(Writer::rotated_path(dir.file("t.codif"), 3)));
}

// ---------------------------------------------------------------------------
// The sidecar index (lib/sinks/file_index.hpp), written at each file's close.

// The index of `file` says what the file holds: its size, `frames`, and the
// XXH3-64 of its bytes, computed here in one go from the file as it is.
void expect_index_matches(const std::string& file, std::uint64_t frames, const std::string& format,
                          bool complete = true) {
    SCOPED_TRACE(file);
    std::string error;
    const auto idx = read_file_index(file, error);
    ASSERT_TRUE(idx.has_value()) << error;
    const ByteVec bytes = read_file(file);
    EXPECT_EQ(idx->bytes, bytes.size());
    EXPECT_EQ(idx->checksum, XXH3_64bits(bytes.data(), bytes.size()));
    EXPECT_EQ(idx->frames, frames);
    EXPECT_EQ(idx->format, format);
    EXPECT_EQ(idx->file, fs::path(file).filename().string());
    EXPECT_FALSE(idx->version.empty());
    EXPECT_EQ(idx->stopped.empty(), complete) << idx->stopped;
}

TEST(WriterIndex, ChecksumEqualsAnIndependentComputationBufferedAndDirect) {
    for (const bool direct : {false, true}) {
        SCOPED_TRACE(direct);
        TempDir dir;
        std::mt19937_64 rng(11);
        Writer::Options o = small_options(4);
        o.direct_io = direct;
        const ByteVec preamble = preamble_bytes();
        std::uint64_t records[2] = {0, 0};
        {
            Writer w(o);
            const auto a =
                w.add_output(OutputFormat::pcap, dir.file("a.pcap"), "", "", Bytes(preamble));
            const auto b = w.add_output(OutputFormat::codif, dir.file("b.codif"), "239.1.2.3:4000",
                                        "10.0.0.1");
            for (int i = 0; i < 2000; ++i) {
                const Record r = random_record(rng, 900);
                r.write(w, i % 3 ? a : b);
                ++records[i % 3 ? 0 : 1];
            }
            w.finish();
            EXPECT_FALSE(w.any_failed()) << w.stats()[0].error << w.stats()[1].error;
        }
        expect_index_matches(dir.file("a.pcap"), records[0], "pcap");
        expect_index_matches(dir.file("b.codif"), records[1], "codif");
        std::string error;
        const auto idx = read_file_index(dir.file("b.codif"), error);
        ASSERT_TRUE(idx.has_value()) << error;
        EXPECT_EQ(idx->group, "239.1.2.3:4000");
        EXPECT_EQ(idx->antenna, "10.0.0.1");
    }
}

TEST(WriterIndex, EveryRotatedFileAndTheRingsNewestAreIndexed) {
    TempDir dir;
    Writer::Options o = small_options(4);
    o.rotation.bytes = 10'000;
    o.rotation.files = 5;  // 12 files into a ring of 5: names reused
    const ByteVec preamble = preamble_bytes();
    {
        Writer w(o);
        const auto out =
            w.add_output(OutputFormat::pcap, dir.file("r.pcap"), "", "", Bytes(preamble));
        for (int i = 0; i < 100; ++i) {
            fixed_record(1000, static_cast<std::uint8_t>(i)).write(w, out);
        }
        w.finish();
        EXPECT_FALSE(w.any_failed()) << w.stats()[0].error;
    }
    // Nine records per file; files 7..11 survive as names 2,3,4,0,1, the
    // last (file 11, name 1) with one record.
    for (std::uint64_t n = 0; n < 5; ++n) {
        expect_index_matches(Writer::rotated_path(dir.file("r.pcap"), n), n == 1 ? 1 : 9, "pcap");
    }
    EXPECT_FALSE(fs::exists(file_index_path(dir.file("r.pcap"))));
}

TEST(WriterIndex, AFileAWriteErrorStoppedIsIndexedAsItIsOnDisk) {
    for (const bool direct : {false, true}) {
        SCOPED_TRACE(direct);
        TempDir dir;
        Writer::Options o = small_options();
        o.direct_io = direct;
        const ByteVec preamble = preamble_bytes();
        constexpr std::size_t kRecordBytes = 1000;
        const std::size_t per_buffer = o.buffer_bytes / kRecordBytes;
        const std::size_t good_bytes = preamble.size() + per_buffer * kRecordBytes;
        {
            FileSizeLimit limit(good_bytes + 5000);  // the second buffer fails part way
            ASSERT_TRUE(limit.ok());
            Writer w(o);
            const auto out =
                w.add_output(OutputFormat::pcap, dir.file("cut.pcap"), "", "", Bytes(preamble));
            for (std::uint64_t i = 0; i < 1000; ++i) {
                fixed_record(kRecordBytes, static_cast<std::uint8_t>(i)).write(w, out);
            }
            w.finish();
            EXPECT_TRUE(w.any_failed());
        }
        expect_index_matches(dir.file("cut.pcap"), per_buffer, "pcap", false);
        std::string error;
        const auto idx = read_file_index(dir.file("cut.pcap"), error);
        ASSERT_TRUE(idx.has_value()) << error;
        EXPECT_EQ(idx->bytes, good_bytes);
        EXPECT_NE(idx->stopped.find("write failed"), std::string::npos) << idx->stopped;
    }
}

TEST(WriterIndex, AnAbandonedFileSaysSo) {
    TempDir dir;
    std::atomic<bool> abandon{true};
    Writer::Options o = small_options();
    o.abandon = &abandon;
    const ByteVec preamble = preamble_bytes();
    {
        Writer w(o);
        const auto out =
            w.add_output(OutputFormat::pcap, dir.file("gone.pcap"), "", "", Bytes(preamble));
        for (int i = 0; i < 10; ++i) {
            fixed_record(1000, 1).write(w, out);
        }
    }
    expect_index_matches(dir.file("gone.pcap"), 0, "pcap", false);
    std::string error;
    const auto idx = read_file_index(dir.file("gone.pcap"), error);
    ASSERT_TRUE(idx.has_value()) << error;
    EXPECT_NE(idx->stopped.find("abandoned"), std::string::npos) << idx->stopped;
}

// An index that cannot be written (its name is taken by a directory) fails
// the output with one line naming it, but no record is lost for it.
TEST(WriterIndex, AnIndexThatCannotBeWrittenFailsTheOutputAndKeepsItsRecords) {
    TempDir dir;
    fs::create_directory(file_index_path(dir.file("x.raw")));
    std::vector<OutputStats> stats;
    {
        Writer w(small_options());
        const auto out = w.add_output(OutputFormat::raw, dir.file("x.raw"), "", "");
        for (int i = 0; i < 10; ++i) {
            fixed_record(100, 1).write(w, out);
        }
        w.finish();
        stats = w.stats();
        EXPECT_TRUE(w.any_failed());
    }
    EXPECT_EQ(stats[0].packets, 10u);
    EXPECT_EQ(stats[0].dropped, 0u);
    EXPECT_NE(stats[0].error.find("cannot write the index " + file_index_path(dir.file("x.raw"))),
              std::string::npos)
        << stats[0].error;
    EXPECT_EQ(read_file(dir.file("x.raw")).size(), 1000u);
}

// Options::index off: no index (the writer's own benchmarks).
TEST(WriterIndex, IndexingCanBeTurnedOff) {
    TempDir dir;
    Writer::Options o = small_options();
    o.index = true;
    {
        Writer w(o);
        w.add_output(OutputFormat::raw, dir.file("plain.raw"), "", "");
    }
    expect_index_matches(dir.file("plain.raw"), 0, "raw");
    o.index = false;
    {
        Writer w(o);
        w.add_output(OutputFormat::raw, dir.file("none.raw"), "", "");
    }
    EXPECT_FALSE(fs::exists(file_index_path(dir.file("none.raw"))));
}

TEST(Writer, SeveralDiskThreadsKeepEveryOutputInOrder) {
    TempDir dir;
    std::mt19937_64 rng(3);
    Writer::Options o = small_options(8);
    o.threads = 3;
    std::vector<ByteVec> expected(7);
    {
        Writer w(o);
        std::vector<Writer::OutputId> outs;
        for (int i = 0; i < 7; ++i) {
            outs.push_back(
                w.add_output(OutputFormat::raw, dir.file(fmt::format("{}.raw", i)), "", ""));
        }
        for (int i = 0; i < 4000; ++i) {
            const Record r = random_record(rng, 900);
            const std::size_t k = rng() % outs.size();
            r.write(w, outs[k]);
            r.append_to(expected[k]);
        }
    }
    for (int i = 0; i < 7; ++i) {
        EXPECT_TRUE(read_file(dir.file(fmt::format("{}.raw", i))) ==
                    expected[static_cast<std::size_t>(i)])
            << i;
    }
}

TEST(Writer, OptionsThatCannotWorkAreRefused) {
    Writer::Options o = small_options(2);
    o.threads = 2;
    o.buffers = 3;  // fewer than two per disk thread
    EXPECT_THROW(Writer w(o), std::invalid_argument);
    o.buffers = 4;
    o.cpus = {1 << 20};
    try {
        Writer w(o);
        ADD_FAILURE() << "pinning to cpu 1048576 worked";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("cpu 1048576"), std::string::npos) << e.what();
    }
}

// ---------------------------------------------------------------------------
// The zero-copy hand-off

// Held frames are written from their memory and each hold is released once,
// after its bytes are on disk — also when the output has failed.
TEST(Writer, HeldFramesAreWrittenInPlaceAndEachReleasedOnce) {
    TempDir dir;
    std::mt19937_64 rng(5);
    RecordingOwner owner;
    const ByteVec preamble = preamble_bytes();
    ByteVec expected = preamble;
    std::vector<SlotFrame> slots(300);
    std::vector<std::uint32_t> holds_seen;
    {
        Writer w(small_options(4));
        const auto out =
            w.add_output(OutputFormat::pcap, dir.file("h.pcap"), "", "", Bytes(preamble));
        for (std::size_t i = 0; i < slots.size(); ++i) {
            slots[i].head = random_bytes(rng, 70);
            slots[i].tail = random_bytes(rng, 600 + rng() % 2000);
            const Frame f = slots[i].frame(&owner, i, nullptr, /*allowed=*/i % 10 != 0);
            const auto rec = pcap_record_header(f.timestamp_ns, f.wire_bytes, f.wire_bytes);
            w.write_frame(out, rec, f, 0, f.wire_bytes);
            holds_seen.push_back(slots[i].lease.holds);
            expected.insert(expected.end(), rec.begin(), rec.end());
            expected.insert(expected.end(), slots[i].head.begin(), slots[i].head.end());
            expected.insert(expected.end(), slots[i].tail.begin(), slots[i].tail.end());
        }
    }
    EXPECT_TRUE(read_file(dir.file("h.pcap")) == expected);
    // The index's checksum covers the held bytes, written in place (pwritev).
    expect_index_matches(dir.file("h.pcap"), slots.size(), "pcap");
    std::vector<std::uint64_t> released = owner.released();
    std::sort(released.begin(), released.end());
    std::vector<std::uint64_t> want;
    for (std::size_t i = 0; i < slots.size(); ++i) {
        EXPECT_EQ(holds_seen[i], i % 10 != 0 ? 1u : 0u) << i;
        if (i % 10 != 0) {
            want.push_back(i);
        }
    }
    EXPECT_EQ(released, want);
}

TEST(Writer, HeldFramesOfAFailedOutputAreReleasedToo) {
    TempDir dir;
    RecordingOwner owner;
    std::vector<SlotFrame> slots(50);
    {
        Writer w(small_options(4));
        const auto out = w.add_output(OutputFormat::raw, dir.file("no/such/dir/x.raw"), "", "");
        for (std::size_t i = 0; i < slots.size(); ++i) {
            slots[i].head = ByteVec(40, 1);
            slots[i].tail = ByteVec(4000, 2);
            const Frame f = slots[i].frame(&owner, i, nullptr, true);
            w.write_frame(out, {}, f, 0, f.wire_bytes);
        }
        w.finish();
        EXPECT_EQ(w.stats()[0].dropped, slots.size());
    }
    EXPECT_EQ(owner.released().size(), slots.size());
}

// Payload in device memory: copied out on the disk thread in one batch per
// buffer (never on the producer's thread), and a frame that cannot be held is
// dropped and counted, not read.
TEST(Writer, DevicePayloadIsCopiedInBatchesAndNeverReadWithoutAHold) {
    TempDir dir;
    RecordingOwner owner;
    CountingDevice device;
    std::vector<SlotFrame> slots(200);
    ByteVec expected;
    std::vector<OutputStats> stats;
    for (const bool direct : {false, true}) {
        device.batches = 0;
        device.copies = 0;
        expected.clear();
        Writer::Options o = small_options(4);
        o.direct_io = direct;
        {
            Writer w(o);
            const auto out = w.add_output(OutputFormat::codif, dir.file("d.codif"), "", "");
            for (std::size_t i = 0; i < slots.size(); ++i) {
                slots[i].head = ByteVec(42 + 64, static_cast<std::uint8_t>(i));
                slots[i].tail = ByteVec(2000, static_cast<std::uint8_t>(i + 1));
                const bool allowed = i != 7;
                const Frame f = slots[i].frame(&owner, i, &device, allowed);
                w.write_frame(out, {}, f, 42, 64 + 2000);  // the CODIF frame
                if (allowed) {
                    expected.insert(expected.end(), 64, static_cast<std::uint8_t>(i));
                    expected.insert(expected.end(), 2000, static_cast<std::uint8_t>(i + 1));
                }
            }
            w.finish();
            stats = w.stats();
            EXPECT_EQ(w.dropped_so_far(), 1u) << direct;
        }
        EXPECT_TRUE(read_file(dir.file("d.codif")) == expected) << direct;
        // The index's checksum covers the device bytes as they were copied out.
        expect_index_matches(dir.file("d.codif"), slots.size() - 1, "codif");
        EXPECT_EQ(device.on_forbidden_thread, 0);  // never read on the producer's thread
        EXPECT_EQ(stats[0].dropped, 1u);
        EXPECT_EQ(stats[0].packets, slots.size() - 1);
        EXPECT_EQ(device.copies, static_cast<int>(slots.size() - 1));
        // 128 KiB buffers of ~2 KB records: a few batches, not one per frame.
        EXPECT_LE(device.batches, 6) << direct;
        // GPUDirect RDMA write ordering: every batch the disk thread read
        // came after a flush of the NIC's writes on that thread.
        EXPECT_EQ(device.unflushed_batches, 0) << direct;
        EXPECT_GE(device.flushes, device.batches.load()) << direct;
        // Into the lane's page-locked staging, unpinned before it was freed.
        EXPECT_EQ(device.unpinned_copies, 0) << direct;
        EXPECT_EQ(device.pinned_now(), 0u) << direct;
    }
}

// GPU payload slots go back once their bytes are in the disk thread's
// staging, not after the disk write (gpu-cuda-2.md N3): the output is a FIFO
// nobody reads, so the first buffer's write blocks in the kernel (the pipe
// holds 64 KiB, the buffer 128 KiB), and its frames' slots must come back
// all the same. Host payload held in place is still written from its slots,
// so those go back only after the write.
TEST(Writer, DevicePayloadSlotsGoBackBeforeTheDiskWrite) {
    TempDir dir;
    const std::string fifo = dir.file("d.fifo");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    // Opened first, read only later: the writer's open() does not wait.
    const int rd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
    ASSERT_GE(rd, 0);
    RecordingOwner owner;
    CountingDevice device;
    std::vector<SlotFrame> slots(200);
    std::size_t released_while_blocked = 0;
    std::uint64_t drained = 0;
    {
        Writer w(small_options(4));
        const auto out = w.add_output(OutputFormat::codif, fifo, "", "");
        for (std::size_t i = 0; i < slots.size(); ++i) {
            slots[i].head = ByteVec(42 + 64, 1);
            slots[i].tail = ByteVec(2000, 2);
            const Frame f = slots[i].frame(&owner, i, &device, true);
            w.write_frame(out, {}, f, 42, 64 + 2000);
        }
        // The first full buffer (~63 records) is on its disk thread by now,
        // blocked writing into the full pipe.
        for (int i = 0; i < 2000 && owner.released().size() < 60; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        released_while_blocked = owner.released().size();
        std::thread reader([&] {
            std::vector<char> buf(1 << 16);
            for (;;) {
                const ssize_t n = ::read(rd, buf.data(), buf.size());
                if (n > 0) {
                    drained += static_cast<std::uint64_t>(n);
                } else if (n == 0 && drained > 0) {
                    return;  // the writer closed it
                } else {
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                }
            }
        });
        w.finish();
        reader.join();
        EXPECT_EQ(w.stats()[0].packets, slots.size());
    }
    ::close(rd);
    EXPECT_GE(released_while_blocked, 60u) << "held through the blocked write";
    EXPECT_EQ(drained, slots.size() * (64 + 2000));
    EXPECT_EQ(owner.released().size(), slots.size());  // each once, in the end
}

}  // namespace
}  // namespace ibvcap
