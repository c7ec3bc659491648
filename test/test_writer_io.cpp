// Unit tests for the writer's work ahead and behind of the disk threads
// (lib/sinks/writer_ahead.hpp): files created when their output is added,
// indexes written by the helper thread, and the buffered writes' write-behind
// (start_writeback).
// The rest of the writer is test_writer.cpp's.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/kernel-page-flags.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "formats/output.hpp"
#include "frames.hpp"
#include "lib/sinks/file_index.hpp"
#include "lib/sinks/writer.hpp"
#include "lib/sinks/writer_ahead.hpp"

namespace ibvcap {
namespace {

namespace fs = std::filesystem;
using ByteVec = std::vector<std::uint8_t>;
using test::FileSizeLimit;
using test::read_file;
using test::TempDir;
using namespace std::chrono_literals;

void write_record(Writer& w, Writer::OutputId out, const ByteVec& bytes) {
    const std::array<Bytes, 1> pieces{Bytes(bytes)};
    w.write(out, pieces);
}

Writer::Options small_options(std::size_t buffers = 4) {
    Writer::Options o;
    o.buffer_bytes = 128 * 1024;
    o.buffers = buffers;
    o.max_outputs = 512;
    return o;
}

// Waits up to `limit` for `done`.
template <class Done>
bool eventually(Done done, std::chrono::milliseconds limit = 5000ms) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!done()) {
        if (std::chrono::steady_clock::now() > end) {
            return false;
        }
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

void expect_index_matches(const std::string& path, std::uint64_t frames) {
    std::string error;
    const auto idx = read_file_index(path, error);
    ASSERT_TRUE(idx.has_value()) << path << ": " << error;
    const ByteVec bytes = read_file(path);
    EXPECT_EQ(idx->bytes, bytes.size()) << path;
    EXPECT_EQ(idx->frames, frames) << path;
    EXPECT_EQ(idx->checksum, XXH3_64bits(bytes.data(), bytes.size())) << path;
    EXPECT_EQ(idx->stopped, "") << path;
}

// ---------------------------------------------------------------------------
// Files made ahead

// Every output's file exists, with nothing in it, before any record of it
// arrives: the disk threads never create a file on a buffer's path when the
// helper got there first.
TEST(WriterAhead, FilesExistBeforeTheirFirstRecord) {
    TempDir dir;
    constexpr int kOutputs = 200;
    Writer w(small_options());
    std::vector<Writer::OutputId> outs;
    for (int i = 0; i < kOutputs; ++i) {
        outs.push_back(
            w.add_output(OutputFormat::raw, dir.file("f" + std::to_string(i) + ".raw"), "", ""));
    }
    EXPECT_TRUE(eventually([&] {
        for (int i = 0; i < kOutputs; ++i) {
            if (!fs::exists(dir.file("f" + std::to_string(i) + ".raw"))) {
                return false;
            }
        }
        return true;
    })) << "the outputs' files were not created ahead of their records";
    const ByteVec record(1000, 0x5a);
    for (int r = 0; r < 300; ++r) {
        for (int i = 0; i < kOutputs; i += 7) {
            write_record(w, outs[static_cast<std::size_t>(i)], record);
        }
    }
    w.finish();
    EXPECT_FALSE(w.any_failed());
    for (int i = 0; i < kOutputs; ++i) {
        const std::string path = dir.file("f" + std::to_string(i) + ".raw");
        const std::uint64_t frames = i % 7 == 0 ? 300 : 0;
        EXPECT_EQ(fs::file_size(path), frames * record.size()) << path;
        expect_index_matches(path, frames);
    }
}

// A FIFO is left to its disk thread (its open waits for a reader): the
// helper goes on with the files after it.
TEST(WriterAhead, AFifoDoesNotHoldUpTheFilesAfterIt) {
    TempDir dir;
    const std::string fifo = dir.file("a.fifo");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    Writer w(small_options());
    w.add_output(OutputFormat::raw, fifo, "", "");
    const auto b = w.add_output(OutputFormat::raw, dir.file("b.raw"), "", "");
    EXPECT_TRUE(eventually([&] { return fs::exists(dir.file("b.raw")); }))
        << "a FIFO first in line held up the next output's file";
    EXPECT_TRUE(fs::is_fifo(fifo));
    write_record(w, b, ByteVec(100, 1));
    // The disk thread opens the FIFO at the end: give it a reader.
    std::thread reader([&] {
        const int fd = ::open(fifo.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ::close(fd);
        }
    });
    w.finish();
    reader.join();
    EXPECT_EQ(fs::file_size(dir.file("b.raw")), 100u);
    EXPECT_TRUE(fs::is_fifo(fifo));
}

// Rotation: the first file is made ahead under its rotated name; the later
// ones only when their first record comes (a -W ring's oldest file is not
// overwritten early), and every file is indexed.
TEST(WriterAhead, ARotatingOutputHasOnlyItsFirstFileMadeAhead) {
    TempDir dir;
    Writer::Options o = small_options();
    o.rotation.bytes = 10000;
    o.rotation.files = 3;
    Writer w(o);
    const auto out = w.add_output(OutputFormat::raw, dir.file("r.raw"), "", "");
    EXPECT_TRUE(eventually([&] { return fs::exists(dir.file("r.000000.raw")); }));
    EXPECT_FALSE(fs::exists(dir.file("r.raw")));
    EXPECT_FALSE(fs::exists(dir.file("r.000001.raw")));
    for (int i = 0; i < 25; ++i) {  // 1000 bytes each: files of 10 records, 5 in the last
        write_record(w, out, ByteVec(1000, static_cast<std::uint8_t>(i)));
    }
    w.finish();
    EXPECT_FALSE(w.any_failed()) << w.stats()[0].error;
    expect_index_matches(dir.file("r.000000.raw"), 10);
    expect_index_matches(dir.file("r.000001.raw"), 10);
    expect_index_matches(dir.file("r.000002.raw"), 5);
}

// The helper's indexes are all on disk, and right, when finish() returns,
// also for outputs that never had a record.
TEST(WriterAhead, IndexesWrittenBehindAreAllThereAtFinish) {
    TempDir dir;
    constexpr int kOutputs = 300;
    std::vector<std::uint64_t> frames(kOutputs, 0);
    {
        Writer w(small_options());
        std::vector<Writer::OutputId> outs;
        for (int i = 0; i < kOutputs; ++i) {
            outs.push_back(w.add_output(OutputFormat::codif,
                                        dir.file("c" + std::to_string(i) + ".codif"),
                                        "239.1.1.1:4000", "10.0.0.1"));
        }
        for (int r = 0; r < 2000; ++r) {
            const auto i = static_cast<std::size_t>((r * 7919) % (kOutputs - 1));
            write_record(w, outs[i], ByteVec(100 + i, static_cast<std::uint8_t>(r)));
            ++frames[i];
        }
        w.finish();
        EXPECT_FALSE(w.any_failed());
    }
    for (int i = 0; i < kOutputs; ++i) {
        expect_index_matches(dir.file("c" + std::to_string(i) + ".codif"),
                             frames[static_cast<std::size_t>(i)]);
    }
}

// ---------------------------------------------------------------------------
// Write-behind

bool on_tmpfs(const fs::path& p) {
    struct statfs st {};
    return ::statfs(p.c_str(), &st) == 0 && st.f_type == 0x01021994;  // TMPFS_MAGIC
}

// Where write-behind can be seen: a disk filesystem (tmpfs has no
// writeback). /tmp, else /var/tmp; when neither is one, the test fails
// saying so (gtest reports the exception).
std::string disk_base() {
    for (const char* base : {"/tmp", "/var/tmp"}) {
        if (!on_tmpfs(base)) {
            return base;
        }
    }
    throw std::runtime_error(
        "/tmp and /var/tmp are tmpfs, which has no writeback: run the tests where one of them "
        "is a disk filesystem");
}

// The page cache's dirty and writeback pages of [0, bytes) of `path`.
struct PageStates {
    std::uint64_t dirty = 0;
    std::uint64_t writeback = 0;
};

// cachestat(2), Linux 6.5 (include/uapi/linux/mman.h: struct cachestat).
bool by_cachestat(const std::string& path, std::uint64_t bytes, PageStates& out) {
#ifdef SYS_cachestat
    const long nr = SYS_cachestat;
#else
    const long nr = 451;  // x86_64, arm64 and the generic table
#endif
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return false;
    }
    struct {
        std::uint64_t off, len;
    } range{0, bytes};
    struct {
        std::uint64_t cache, dirty, writeback, evicted, recently_evicted;
    } cs{};
    const long rc = ::syscall(nr, fd, &range, &cs, 0);
    ::close(fd);
    out = {cs.dirty, cs.writeback};
    return rc == 0;
}

// Older kernels, as root (CI runs as root): each page of a shared read-only
// mapping of the file, its frame from /proc/self/pagemap and that frame's
// flags from /proc/kpageflags, KPF_DIRTY and KPF_WRITEBACK
// (Documentation/admin-guide/mm/pagemap.rst; reading a page leaves its dirty
// bit as it is).
bool by_kpageflags(const std::string& path, std::uint64_t bytes, PageStates& out) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    const int pagemap = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    const int kflags = ::open("/proc/kpageflags", O_RDONLY | O_CLOEXEC);
    void* map = fd >= 0 ? ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    bool ok = map != MAP_FAILED && pagemap >= 0 && kflags >= 0;
    out = {};
    for (std::uint64_t off = 0; ok && off < bytes; off += 4096) {
        const volatile std::uint8_t* p = static_cast<const std::uint8_t*>(map) + off;
        (void)*p;  // mapped in
        const auto vpage = reinterpret_cast<std::uintptr_t>(p) / 4096;
        std::uint64_t entry = 0;
        std::uint64_t flags = 0;
        ok = ::pread(pagemap, &entry, 8, static_cast<off_t>(vpage * 8)) == 8;
        const std::uint64_t pfn = entry & ((std::uint64_t{1} << 55) - 1);
        ok = ok && (entry >> 63) != 0 && pfn != 0 &&  // (0: frames hidden, not root)
             ::pread(kflags, &flags, 8, static_cast<off_t>(pfn * 8)) == 8;
        out.dirty += (flags >> KPF_DIRTY) & 1;
        out.writeback += (flags >> KPF_WRITEBACK) & 1;
    }
    if (map != MAP_FAILED) {
        ::munmap(map, bytes);
    }
    for (const int f : {fd, pagemap, kflags}) {
        if (f >= 0) {
            ::close(f);
        }
    }
    return ok;
}

// Fails the test, saying why, where neither way works here.
void page_states(const std::string& path, std::uint64_t bytes, PageStates& out) {
    if (!by_cachestat(path, bytes, out) && !by_kpageflags(path, bytes, out)) {
        FAIL() << "cannot read the page cache's dirty pages of " << path
               << ": this kernel has no cachestat(2) (Linux 6.5) and /proc/kpageflags needs "
                  "root; run the tests as root (CI does)";
    }
}

// A buffered writer starts the writeback of what it wrote as it goes: when
// it finishes, its file's pages are under writeback or written, not dirty
// (without write-behind they would all wait, dirty, for the kernel's
// thresholds or a sync).
TEST(WriteBehind, WrittenBytesAreOnTheirWayToTheDiskWhenTheWriterFinishes) {
    TempDir dir(disk_base());
    constexpr std::size_t kRecord = 64 * 1024;
    constexpr std::size_t kRecords = 512;  // 32 MiB
    const std::string path = dir.file("w.raw");
    {
        Writer w(small_options());
        const auto out = w.add_output(OutputFormat::raw, path, "", "");
        ByteVec record(kRecord);
        for (std::size_t i = 0; i < kRecords; ++i) {
            record[0] = static_cast<std::uint8_t>(i);
            write_record(w, out, record);
        }
        w.finish();
        EXPECT_FALSE(w.any_failed()) << w.stats()[0].error;
    }
    PageStates cs;
    ASSERT_NO_FATAL_FAILURE(page_states(path, kRecords * kRecord, cs));
    const std::uint64_t pages = kRecords * kRecord / 4096;
    EXPECT_LT(cs.dirty, pages / 10) << "of " << pages << " pages, " << cs.dirty
                                    << " still dirty: their writeback was not started";
    ASSERT_EQ(fs::file_size(path), kRecords * kRecord);
    expect_index_matches(path, kRecords);
}

// A live writer (drop, not wait, when full) leaves its pages to the kernel
// as before: the page cache stays a buffer in front of a slow disk.
TEST(WriteBehind, ALiveWriterLeavesItsPagesDirty) {
    TempDir dir(disk_base());
    constexpr std::size_t kRecord = 64 * 1024;
    constexpr std::size_t kRecords = 256;  // 16 MiB
    const std::string path = dir.file("live.raw");
    {
        Writer::Options o = small_options(64);
        o.block_when_full = false;
        Writer w(o);
        const auto out = w.add_output(OutputFormat::raw, path, "", "");
        const ByteVec record(kRecord, 3);
        for (std::size_t i = 0; i < kRecords; ++i) {
            write_record(w, out, record);
        }
        w.finish();
    }
    PageStates cs;
    ASSERT_NO_FATAL_FAILURE(page_states(path, fs::file_size(path), cs));
    const std::uint64_t pages = fs::file_size(path) / 4096;
    ASSERT_GT(pages, 0u);
    EXPECT_GT(cs.dirty, pages / 2) << "of " << pages << " pages only " << cs.dirty
                                   << " dirty: a live writer started their writeback";
}

// start_writeback on its own: whole pages only, each once, and only once
// kWriteBehindBytes of them wait (small buffers are gathered into one call).
TEST(WriteBehind, OnlyWholePagesAreStartedEachOnceAndGathered) {
    TempDir dir;
    const std::string path = dir.file("p");
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    constexpr std::uint64_t kGather = writer_parts::kWriteBehindBytes;
    std::uint64_t kicked = 0;
    writer_parts::start_writeback(fd, kicked, 100);
    EXPECT_EQ(kicked, 0u);  // not a whole page yet
    writer_parts::start_writeback(fd, kicked, 3 * 4096 + 5);
    EXPECT_EQ(kicked, 0u);  // whole pages, but fewer than kGather bytes of them
    writer_parts::start_writeback(fd, kicked, kGather + 4096 + 5);
    EXPECT_EQ(kicked, kGather + 4096);
    writer_parts::start_writeback(fd, kicked, 2 * kGather);
    EXPECT_EQ(kicked, kGather + 4096);  // a page short of kGather more
    writer_parts::start_writeback(fd, kicked, 2 * kGather + 4096 + 4000);
    EXPECT_EQ(kicked, 2 * kGather + 4096);
    ::close(fd);
}

// Files smaller than what start_writeback gathers (many outputs, small
// buffers) are started at their close, the last partial page too: none of
// their pages is left dirty for a sync to write.
TEST(WriteBehind, SmallFilesAreOnTheirWayToTheDiskWhenClosed) {
    TempDir dir(disk_base());
    constexpr std::size_t kFiles = 24;
    constexpr std::size_t kRecord = 9000;
    constexpr std::size_t kRecords = 30;  // 270,000 bytes a file: under kWriteBehindBytes
    static_assert(kRecord * kRecords < writer_parts::kWriteBehindBytes);
    std::vector<std::string> paths;
    {
        Writer w(small_options());
        std::vector<Writer::OutputId> outs;
        for (std::size_t f = 0; f < kFiles; ++f) {
            paths.push_back(dir.file("s" + std::to_string(f) + ".raw"));
            outs.push_back(w.add_output(OutputFormat::raw, paths.back(), "", ""));
        }
        ByteVec record(kRecord, 7);
        for (std::size_t i = 0; i < kRecords; ++i) {
            for (const auto out : outs) {
                write_record(w, out, record);
            }
        }
        w.finish();
        EXPECT_FALSE(w.any_failed()) << w.stats()[0].error;
    }
    std::uint64_t dirty = 0;
    std::uint64_t pages = 0;
    for (const auto& path : paths) {
        ASSERT_EQ(fs::file_size(path), kRecord * kRecords);
        PageStates cs;
        ASSERT_NO_FATAL_FAILURE(page_states(path, kRecord * kRecords, cs));
        dirty += cs.dirty;
        pages += (kRecord * kRecords + 4095) / 4096;
    }
    EXPECT_LT(dirty, pages / 10) << "of " << pages << " pages of " << kFiles << " small files, "
                                 << dirty << " still dirty: their writeback was not started";
}

// A write error after much was written behind: the file is still cut back
// to its last whole record, the rest counted as dropped, and the index holds
// what is on disk.
TEST(WriteBehind, AWriteErrorAfterWriteBehindStillCutsBackAndCounts) {
    TempDir dir;
    constexpr std::size_t kRecord = 1000;
    const std::size_t per_buffer = 128 * 1024 / kRecord;  // 131
    const std::size_t buffers_ok = 300;                   // about 37 MiB
    const std::size_t good_bytes = buffers_ok * per_buffer * kRecord;
    constexpr std::size_t kRecords = 45000;
    const std::string path = dir.file("cut.raw");
    std::vector<OutputStats> stats;
    {
        FileSizeLimit limit(good_bytes + 5000);
        ASSERT_TRUE(limit.ok());
        Writer w(small_options());
        const auto out = w.add_output(OutputFormat::raw, path, "", "");
        for (std::size_t i = 0; i < kRecords; ++i) {
            write_record(w, out, ByteVec(kRecord, static_cast<std::uint8_t>(i / per_buffer)));
        }
        w.finish();
        stats = w.stats();
        EXPECT_TRUE(w.any_failed());
    }
    ASSERT_EQ(stats.size(), 1u);
    EXPECT_NE(stats[0].error.find("File too large"), std::string::npos) << stats[0].error;
    EXPECT_EQ(stats[0].packets, buffers_ok * per_buffer);
    EXPECT_EQ(stats[0].dropped, kRecords - buffers_ok * per_buffer);
    EXPECT_EQ(stats[0].bytes, good_bytes);
    const ByteVec got = read_file(path);
    ASSERT_EQ(got.size(), good_bytes);
    for (std::size_t b = 0; b < buffers_ok; b += 97) {
        EXPECT_EQ(got[b * per_buffer * kRecord], static_cast<std::uint8_t>(b)) << b;
    }
    std::string error;
    const auto idx = read_file_index(path, error);
    ASSERT_TRUE(idx.has_value()) << error;
    EXPECT_EQ(idx->bytes, good_bytes);
    EXPECT_EQ(idx->checksum, XXH3_64bits(got.data(), got.size()));
    EXPECT_NE(idx->stopped, "");
}

}  // namespace
}  // namespace ibvcap
