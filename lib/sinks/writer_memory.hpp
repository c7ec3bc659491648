// The writer's memory (lib/sinks/writer.hpp, "Memory bound"): the count of
// the bytes it has, the plan that sizes its buffers for the outputs a run
// has, and the arena the buffers are carved from, with its stock, a thread
// that faults pages in ahead of the carving. Include only from
// lib/sinks/writer*.cpp.
//
// Who may allocate, fault or wait (docs/architecture.md, "The writer's
// memory"): the producer (the capture thread) carves a buffer from the
// arena itself when none is free, in O(1), never waiting for another thread;
// it takes page faults only for pages the stock did not reach. The stock
// waits for nothing the producer needs: when it gets no CPU, buffers still
// come, a little slower. The bound is a ceiling, not a size allocated up
// front: memory is taken as a stall needs it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "lib/sinks/writer_buffer.hpp"

namespace ibvcap::writer_parts {

// The bytes the writer has (buffers, their piece lists, staging) and their
// peak; changed by every thread that makes, remakes or trims a buffer.
struct MemoryCount {
    std::atomic<std::size_t> allocated{0};
    std::atomic<std::size_t> peak{0};
    void charge(std::size_t bytes) {
        const std::size_t now = allocated.fetch_add(bytes, std::memory_order_relaxed) + bytes;
        std::size_t p = peak.load(std::memory_order_relaxed);
        while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
        }
    }
    void release(std::size_t bytes) { allocated.fetch_sub(bytes, std::memory_order_relaxed); }
    std::size_t now() const { return allocated.load(std::memory_order_relaxed); }
};

// The bound's arithmetic. `steady` (5/6 of the bound) is what the outputs'
// own records, the staging buffers and the least pool must fit in: the last
// sixth is left for buffers made at a larger size before the outputs grew,
// until the disk threads remake them smaller. Of what is left after the
// staging and the outputs' records, the outputs' parked buffers (one partly
// filled buffer each) take at most two thirds, and never more than a sixth
// of the bound (at 2,400 outputs the two thirds made 188 KiB buffers, 450 MB
// made for outputs that each held one record: the least size, 68 KiB, took
// a sixth less time for 1 GB): the rest, and whatever the parked ones do not
// use, absorbs the backlog of a stalled disk.
struct MemoryPlan {
    std::size_t largest = 0;     // buffer bytes before any shrinking
    std::size_t steady = 0;      // 5/6 of the bound
    std::size_t fixed = 0;       // the disk threads' staging buffers
    std::size_t per_output = 0;  // an output's own record, besides its buffer
    std::size_t least_pool = 0;  // buffers in flight that must fit besides the parked ones

    MemoryPlan(const Writer::Options& o, std::size_t output_bytes);
    static std::size_t default_buffer_bytes(const Writer::Options& o);
    static std::size_t floor_cost(const Writer::Options& o) {
        return buffer_cost(Writer::kMinBufferBytes, o);
    }
    // The buffer size for `outputs` outputs (page-aligned, from
    // kMinBufferBytes to `largest`).
    std::size_t buffer_for(std::size_t outputs, const Writer::Options& o) const;
    // The least bound for max_outputs outputs at the smallest size.
    std::size_t least_bound(const Writer::Options& o) const;
};

// Why the arena made no buffer (BufferArena::carve).
enum class Refusal {
    none,
    bound,    // the writer's memory would pass its bound: a drop "at the bound"
    host,     // the host refused the memory (strict overcommit, out of memory)
    address,  // the reserved address space is used up (never, by its size: a bug)
};

// The writer's buffers, all in one range of address space reserved at the
// start (no memory committed), carved by the producer itself: the buffer the
// producer needs never waits for another thread, so a helper short of CPU
// can never make it drop while the bound has room. The stock, a thread of
// the arena's, only faults pages in ahead of the carving (MADV_POPULATE_WRITE)
// so that the producer's copies into a new buffer take no page fault; a
// buffer it did not reach costs the producer the faults, never a drop.
//
// Carving is a bump pointer (the producer's alone): a buffer, once made,
// stays with the run, going round the lanes' queues. A buffer made smaller
// once written (Writer::Buffer::shrink) gives the pages past its new size
// back to the system but not their addresses. Since buffer sizes only
// shrink and the live chunks' spans never pass the bound, the addresses used
// are at most bound × (1 + ln(largest / smallest)) (reserve_for), which the
// reservation covers: 3 × the bound for 512 KiB buffers, 5.2 × for 4 MiB.
// Address space reserved PROT_NONE costs nothing (no page tables, no commit
// charge); each range is made writable (mprotect) as the carving reaches it,
// so that with vm.overcommit_memory=2 the kernel charges only what is used,
// and refuses it (Refusal::host) rather than killing the process later.
class BufferArena {
  public:
    // The address space to reserve: `largest` is the largest buffer size
    // (bounded) or every buffer's size (unbounded, for `most` buffers).
    static std::size_t reserve_for(const Writer::Options& o, std::size_t largest, std::size_t most);
    // Reserves `reserve` bytes of address space (less when the kernel refuses
    // that much: RLIMIT_AS; reserved() says how much). Throws
    // std::runtime_error when it cannot reserve even the bound.
    BufferArena(const Writer::Options& o, MemoryCount& count, std::size_t reserve);
    ~BufferArena();
    BufferArena(const BufferArena&) = delete;
    BufferArena& operator=(const BufferArena&) = delete;

    // Starts the stock: pages kept faulted in ahead of the carving, at least
    // `least_ahead` bytes, more while buffers are carved fast (40 ms of the
    // last 20 ms's rate), never more than `most_ahead` nor past the bound.
    void start(std::size_t least_ahead, std::size_t most_ahead);
    // Stops the stock. Idempotent.
    void stop();
    // Producer: keep at least this many bytes ahead from now on (woken only
    // for more: an output's first record, which lowers it, makes no call).
    void want(std::size_t bytes) {
        if (least_ahead_.exchange(bytes, std::memory_order_relaxed) < bytes) {
            poke();
        }
    }
    // Waits until the stock holds what it is asked for, the bound is reached
    // or the host refuses memory, at most `patience`. Whether it holds it.
    bool wait_stocked(std::chrono::milliseconds patience);
    // Producer only: a new buffer of `bytes`, taking `holds` frames, charged
    // to the count; nullptr and `why` when it cannot be made. Never waits for
    // another thread; faults in the pages the stock did not reach (one
    // madvise). O(1).
    Writer::Buffer* carve(std::size_t bytes, std::size_t holds, Refusal& why);
    // Producer: wake the stock now.
    void poke();

    std::size_t made() const { return made_.load(std::memory_order_relaxed); }
    // The host refused memory below the bound (Refusal::host).
    bool starved() const { return starved_.load(std::memory_order_relaxed); }
    std::size_t reserved() const { return reserved_; }
    // The most bytes the stock held faulted in ahead of the carving at once,
    // and the rule that set it ("least": buffers for the stock's least and
    // the outputs planned; "rate": the carving's pace; "most": the ceiling).
    std::size_t ahead_peak() const { return ahead_peak_.load(std::memory_order_relaxed); }
    const char* ahead_rule() const { return kRules[ahead_rule_.load(std::memory_order_relaxed)]; }
    // Buffers whose pages the producer faulted in itself (the stock had not
    // reached them).
    std::size_t producer_faulted() const {
        return producer_faulted_.load(std::memory_order_relaxed);
    }

  private:
    static constexpr const char* kRules[] = {"least", "rate", "most"};
    void run();
    std::size_t ahead_goal(std::size_t next, int& rule);
    std::size_t held_ahead() const;
    bool commit(std::size_t to);                      // [0, to) writable; false: refused
    bool populate(std::size_t from, std::size_t to);  // faulted in; false: refused

    const Writer::Options& options_;
    MemoryCount& count_;
    std::uint8_t* base_ = nullptr;
    std::size_t reserved_ = 0;
    std::atomic<std::size_t> next_{0};       // the bump pointer (the producer's)
    std::atomic<std::size_t> committed_{0};  // [0, committed_) writable
    std::atomic<std::size_t> populated_{0};  // [0, populated_) faulted in (but given-back tails)
    std::atomic<std::size_t> least_ahead_{0};
    std::size_t most_ahead_ = 0;
    std::atomic<std::size_t> made_{0};
    std::atomic<std::size_t> producer_faulted_{0};
    std::atomic<std::size_t> ahead_peak_{0};
    std::atomic<int> ahead_rule_{0};
    std::atomic<bool> starved_{false};
    // The stock's samples of the bump pointer, for the carving's pace.
    struct Sample {
        std::chrono::steady_clock::time_point at;
        std::size_t next = 0;
    };
    std::vector<Sample> samples_;
    std::size_t sample_at_ = 0;
    std::mutex mu_;
    std::condition_variable cv_;
    bool quit_ = false;
    std::atomic<bool> poked_{false};
    std::thread thread_;
};

}  // namespace ibvcap::writer_parts
