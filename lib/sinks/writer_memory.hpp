// The writer's memory (lib/sinks/writer.hpp, "Memory bound"): the count of
// the bytes it has, the plan that sizes its buffers for the outputs a run
// has, and the stock, a thread that makes buffers ahead of the producer up to
// the bound. Include only from lib/sinks/writer*.cpp.
//
// Why a thread of its own: the bound is a ceiling, not a size allocated up
// front, so memory is taken as a stall needs it. The producer (the capture
// thread) must not allocate, and the disk threads are the ones stalled when
// more is needed, so neither can make the buffers. The stock keeps a few
// buffers made, their pages touched (so the producer's first copy into them
// takes no page fault), and makes more as they are taken, while the bound has
// room.
#pragma once

#include <readerwriterqueue/readerwriterqueue.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "lib/sinks/writer_detail.hpp"

namespace ibvcap::writer_detail {

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

// A buffer of `bytes`, its pages touched. Throws std::bad_alloc.
std::unique_ptr<Writer::Buffer> make_buffer(std::size_t bytes, const Writer::Options& o);

// Owns every buffer of a writer; with a bound, also makes them ahead.
class BufferStock {
  public:
    // `capacity`: the most buffers there can ever be (sizes the queue).
    BufferStock(const Writer::Options& o, MemoryCount& count, std::size_t capacity);
    ~BufferStock() { stop(); }
    BufferStock(const BufferStock&) = delete;
    BufferStock& operator=(const BufferStock&) = delete;

    // Starts making buffers of `target` bytes, keeping about `want_bytes` of
    // them ready, and more while a backlog grows (`backlog`: the bytes
    // waiting for the disk), never past the bound. Without it the stock only
    // owns.
    void start(std::size_t target, std::size_t want_bytes,
               const std::atomic<std::uint64_t>* backlog);
    // Stops making buffers (those made stay owned here). Idempotent.
    void stop();
    // Producer: keep about this many bytes of buffers ready from now on.
    // (Woken only for more: less needs no wake, so that an output's first
    // record, which lowers it, makes no system call.)
    void want(std::size_t bytes) {
        if (want_bytes_.exchange(bytes, std::memory_order_relaxed) < bytes) {
            poke();
        }
    }
    // Waits until the stock holds what it wants, the bound is reached or the
    // system is out of memory, at most `patience`. Whether it holds it.
    bool wait_stocked(std::chrono::milliseconds patience);
    // Producer: buffers are made at this size from now on.
    void set_target(std::size_t bytes) { target_.store(bytes, std::memory_order_relaxed); }
    // Producer: a ready buffer, or nullptr. Never allocates; wakes the maker
    // when the stock runs low (a futex wake at most, no allocation).
    Writer::Buffer* take();
    // Producer: wake the maker now.
    void poke();
    // A buffer made elsewhere (up front, or without a bound), owned here.
    Writer::Buffer* adopt(std::unique_ptr<Writer::Buffer> buffer);
    std::size_t made() const { return made_.load(std::memory_order_relaxed); }
    // The maker found the system out of memory below the bound.
    bool starved() const { return starved_.load(std::memory_order_relaxed); }

  private:
    void run();
    std::size_t wanted() const;

    const Writer::Options& options_;
    MemoryCount& count_;
    moodycamel::ReaderWriterQueue<Writer::Buffer*> ready_;  // maker → producer
    std::atomic<std::size_t> ready_count_{0};
    std::atomic<std::size_t> target_{0};
    std::atomic<std::size_t> want_bytes_{0};
    const std::atomic<std::uint64_t>* backlog_ = nullptr;
    std::atomic<std::size_t> made_{0};
    std::atomic<bool> starved_{false};
    std::mutex mu_;
    std::condition_variable cv_;
    bool quit_ = false;
    std::atomic<bool> poked_{false};
    std::vector<std::unique_ptr<Writer::Buffer>> owned_;  // under mu_
    std::thread thread_;
};

}  // namespace ibvcap::writer_detail
