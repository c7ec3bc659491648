// The writer with its helper threads short of CPU (issue 39): the stock
// (the thread that faults buffer pages in ahead) and the disk threads at
// SCHED_IDLE beside a busy loop on the one core the whole writer runs on,
// as when an operator pins a capture to one core. A live producer must then
// drop nothing while the writer's memory has room under its bound: every
// drop is at the bound (drops_at_bound), never below it. With the stock
// that made every buffer (before the arena, lib/sinks/writer_memory.hpp)
// the first test dropped thousands below the bound.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "formats/output.hpp"
#include "frames.hpp"
#include "lib/sinks/writer.hpp"

namespace ibvcap {
namespace {

using ByteVec = std::vector<std::uint8_t>;
using test::TempDir;

constexpr std::size_t kRecord = 8256;  // a CODIF frame

void write_record(Writer& w, Writer::OutputId out, std::uint8_t fill) {
    const ByteVec record(kRecord, fill);
    const Bytes pieces[1] = {Bytes(record.data(), record.size())};
    w.write(out, pieces);
}

// The thread ids of this process whose names start with `prefix`
// (/proc/self/task/TID/comm; the writer names its threads).
std::vector<pid_t> threads_named(const std::string& prefix) {
    std::vector<pid_t> tids;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
        std::ifstream in(e.path() / "comm");
        std::string name;
        std::getline(in, name);
        if (name.rfind(prefix, 0) == 0) {
            tids.push_back(static_cast<pid_t>(std::stoi(e.path().filename().string())));
        }
    }
    return tids;
}

// SCHED_IDLE (sched(7)): the thread runs only when nothing else on its CPU
// wants to; `idle` false: back to SCHED_OTHER.
void set_idle(const std::vector<pid_t>& tids, bool idle) {
    for (const pid_t tid : tids) {
        const sched_param p{};
        ASSERT_EQ(::sched_setscheduler(tid, idle ? SCHED_IDLE : SCHED_OTHER, &p), 0)
            << "sched_setscheduler " << tid << ": " << std::strerror(errno);
    }
}

// This thread, and every thread it starts from now on, on one CPU, with a
// busy loop beside them at normal priority: a SCHED_IDLE thread there gets
// next to no CPU while the loop or the producer runs.
class OneBusyCore {
  public:
    OneBusyCore() {
        ::sched_getaffinity(0, sizeof(before_), &before_);
        unsigned cpu = 0;
        while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &before_)) {
            ++cpu;
        }
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        ::sched_setaffinity(0, sizeof(one), &one);  // (0: this thread alone)
        busy_ = std::thread([this] {
            while (!stop_.load(std::memory_order_relaxed)) {
            }
        });
    }
    ~OneBusyCore() { release(); }
    OneBusyCore(const OneBusyCore&) = delete;
    OneBusyCore& operator=(const OneBusyCore&) = delete;
    void release() {
        if (busy_.joinable()) {
            stop_.store(true, std::memory_order_relaxed);
            busy_.join();
            ::sched_setaffinity(0, sizeof(before_), &before_);
        }
    }

  private:
    cpu_set_t before_{};
    std::atomic<bool> stop_{false};
    std::thread busy_;
};

using Latch = test::FifoLatch;

ByteVec read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return ByteVec(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Writer::Options live(std::size_t mib) {
    Writer::Options o;
    o.max_outputs = 4;
    o.block_when_full = false;
    o.memory_bytes = mib << 20;
    return o;
}

// Writes records to `out` until the first one is dropped (at most `most`):
// how many were kept.
std::uint64_t fill_until_drop(Writer& w, Writer::OutputId out, std::uint64_t most) {
    for (std::uint64_t i = 0; i < most; ++i) {
        const std::uint64_t before = w.dropped_so_far();
        write_record(w, out, static_cast<std::uint8_t>(i));
        if (w.dropped_so_far() != before) {
            return i;
        }
    }
    return most;
}

// After the first drop: it was at the bound, none below it, and the memory
// was nearly all in use and never past the bound.
void expect_first_drop_at_the_bound(const Writer::Memory& m) {
    EXPECT_EQ(m.drops_below_bound, 0u) << "dropped with " << m.now << " of " << m.bound;
    EXPECT_EQ(m.drops_at_bound, 1u);
    EXPECT_GE(m.now, m.bound / 10 * 9) << "a record was dropped well under the bound";
    EXPECT_LE(m.peak, m.bound);
}

// The stock gets no CPU and the disk thread is stalled: every buffer of the
// backlog is carved by the producer itself, and the first drop comes with
// the memory at the bound.
TEST(WriterStarved, AStockWithNoCpuDropsNothingBelowTheBound) {
    TempDir dir;
    Latch latch(dir.path());
    OneBusyCore core;
    const Writer::Options o = live(96);
    auto w = std::make_unique<Writer>(o);
    const auto a = w->add_output(OutputFormat::raw, latch.path, "", "");
    const auto b = w->add_output(OutputFormat::raw, dir / "b.raw", "", "");
    w->prepare();
    const auto stock = threads_named("ibvcap-stock");
    ASSERT_EQ(stock.size(), 1u) << "the writer names its stock thread";
    set_idle(stock, true);
    // A's first buffer goes to the disk thread, which blocks opening the FIFO.
    const std::size_t per_buffer = w->memory().buffer_bytes / kRecord;
    for (std::size_t i = 0; i <= per_buffer; ++i) {
        write_record(*w, a, 0xaa);
    }
    const std::uint64_t most = (o.memory_bytes / kRecord) * 2;
    const std::uint64_t kept = fill_until_drop(*w, b, most);
    ASSERT_LT(kept, most) << "never dropped: the bound was not reached";
    const Writer::Memory m = w->memory();
    expect_first_drop_at_the_bound(m);
    // The stock did not keep up: the producer faulted buffers in itself.
    EXPECT_GT(m.producer_faulted, 0u);
    set_idle(stock, false);
    core.release();
    latch.open();
    w->finish();
    const auto stats = w->stats();
    EXPECT_EQ(stats.at(1).packets, kept);
    const ByteVec file = read_all(dir / "b.raw");
    ASSERT_EQ(file.size(), kept * kRecord);
    for (std::uint64_t i = 0; i < kept; ++i) {
        ASSERT_EQ(file[i * kRecord], static_cast<std::uint8_t>(i)) << "record " << i;
    }
}

// The disk thread and the stock both get no CPU (nothing latched: the disk
// thread writes whenever the core is free): the backlog grows to the bound,
// and only then are records dropped, at the bound; once the core is free
// again every record kept is written.
TEST(WriterStarved, DiskThreadAndStockWithNoCpuDropOnlyAtTheBound) {
    TempDir dir;
    OneBusyCore core;
    const Writer::Options o = live(64);
    auto w = std::make_unique<Writer>(o);
    const auto out = w->add_output(OutputFormat::raw, dir / "s.raw", "", "");
    w->prepare();
    auto helpers = threads_named("ibvcap-stock");
    const auto disk = threads_named("ibvcap-disk");
    ASSERT_EQ(disk.size(), 1u) << "the writer names its disk threads";
    helpers.insert(helpers.end(), disk.begin(), disk.end());
    set_idle(helpers, true);
    const std::uint64_t most = (o.memory_bytes / kRecord) * 8;
    const std::uint64_t kept = fill_until_drop(*w, out, most);
    ASSERT_LT(kept, most) << "never dropped: the disk thread kept up on a busy core";
    expect_first_drop_at_the_bound(w->memory());
    set_idle(helpers, false);
    core.release();
    w->finish();
    EXPECT_EQ(w->stats().at(0).packets, kept);
    EXPECT_EQ(w->stats().at(0).dropped, 1u);
    EXPECT_EQ(std::filesystem::file_size(dir / "s.raw"), kept * kRecord);
}

}  // namespace
}  // namespace ibvcap
