// The writer's memory plan and its stock of buffers (writer_memory.hpp).
#include "lib/sinks/writer_memory.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

namespace ibvcap::writer_detail {

std::size_t MemoryPlan::default_buffer_bytes(const Writer::Options& o) {
    if (o.buffer_bytes != 0) {
        return o.buffer_bytes;
    }
    return o.direct_io || o.device_payload ? std::size_t{4} << 20 : std::size_t{512} << 10;
}

MemoryPlan::MemoryPlan(const Writer::Options& o, std::size_t output_bytes) {
    const std::size_t threads = std::max(1u, o.threads);
    largest = std::max(default_buffer_bytes(o), Writer::kMinBufferBytes);
    steady = o.memory_bytes / 6 * 5;
    // (Two with O_DIRECT: one is written behind while the next buffer is
    // gathered into the other.)
    fixed = threads * (largest + 2 * kPage) * (o.direct_io ? 2 : 1);
    per_output = output_bytes + 1024 + (o.direct_io ? kPage : 0);
    least_pool = o.buffers != 0 ? o.buffers : 2 * threads;
}

std::size_t MemoryPlan::least_bound(const Writer::Options& o) const {
    const std::size_t need =
        fixed + o.max_outputs * per_output + (o.max_outputs + least_pool) * floor_cost(o);
    // need is 5/6 of the bound (rounded down to 6 bytes): round up.
    return (need / 5 + 1) * 6;
}

std::size_t MemoryPlan::buffer_for(std::size_t outputs, const Writer::Options& o) const {
    outputs = std::max<std::size_t>(outputs, 1);
    const std::size_t own = fixed + outputs * per_output;
    if (steady <= own) {
        return Writer::kMinBufferBytes;
    }
    // The parked buffers take at most two thirds of what is left, and at
    // most a sixth of the bound.
    const std::size_t each = std::min((steady - own) / 3 * 2, o.memory_bytes / 6) / outputs;
    std::size_t lo = Writer::kMinBufferBytes / kPage;  // in pages
    std::size_t hi = largest / kPage;
    if (buffer_cost(lo * kPage, o) > each) {
        return Writer::kMinBufferBytes;  // least_bound() made sure the pool still fits
    }
    while (lo < hi) {
        const std::size_t mid = (lo + hi + 1) / 2;
        if (buffer_cost(mid * kPage, o) <= each) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return std::min(lo * kPage, largest);
}

namespace {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // linux/mman.h, Linux 5.14
#endif

void populate(std::uint8_t* p, std::size_t bytes) {
    const auto page = reinterpret_cast<std::uintptr_t>(p) / kPage * kPage;
    const std::size_t span = reinterpret_cast<std::uintptr_t>(p) + bytes - page;
    // (Only whole pages of our own; a piece list may share its first and
    // last page with other allocations, which POPULATE_WRITE leaves as they are.)
    if (::madvise(reinterpret_cast<void*>(page), span, MADV_POPULATE_WRITE) == 0) {
        return;
    }
    volatile std::uint8_t* v = p;
    for (std::size_t i = 0; i < bytes; i += kPage) {
        v[i] = 0;
    }
}

}  // namespace

std::unique_ptr<Writer::Buffer> make_buffer(std::size_t bytes, const Writer::Options& o) {
    auto b = std::make_unique<Writer::Buffer>(bytes, holds_for(bytes, o));
    // Fault every page in now, so that the producer's copies into a new
    // buffer take no page faults. MADV_POPULATE_WRITE (Linux 5.14,
    // madvise(2)) has the kernel do it in one call, zeroing each page once;
    // elsewhere one byte a page is written. The piece list is touched too.
    populate(b->data.get(), (bytes + kPage - 1) / kPage * kPage);
    populate(reinterpret_cast<std::uint8_t*>(b->pieces.data()),
             b->pieces.capacity() * sizeof(Piece));
    b->charged = buffer_cost(bytes, o);
    return b;
}

BufferStock::BufferStock(const Writer::Options& o, MemoryCount& count, std::size_t capacity)
    : options_(o), count_(count), ready_(capacity) {
    owned_.reserve(capacity);
}

void BufferStock::stop() {
    if (thread_.joinable()) {
        {
            const std::lock_guard lock(mu_);
            quit_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
}

void BufferStock::start(std::size_t target, std::size_t want_bytes,
                        const std::atomic<std::uint64_t>* backlog) {
    backlog_ = backlog;
    target_.store(target, std::memory_order_relaxed);
    want_bytes_.store(want_bytes, std::memory_order_relaxed);
    thread_ = std::thread([this] { run(); });
    if (!options_.cpus.empty()) {
        // With the disk threads (--disk-cpu): the core the operator gave the
        // writers. Best effort: the disk threads' pinning reports a bad CPU.
        cpu_set_t set;
        CPU_ZERO(&set);
        for (const int cpu : options_.cpus) {
            if (cpu >= 0 && cpu < CPU_SETSIZE) {
                CPU_SET(static_cast<unsigned>(cpu), &set);
            }
        }
        ::pthread_setaffinity_np(thread_.native_handle(), sizeof(set), &set);
    }
}

Writer::Buffer* BufferStock::adopt(std::unique_ptr<Writer::Buffer> buffer) {
    Writer::Buffer* b = buffer.get();
    const std::lock_guard lock(mu_);
    owned_.push_back(std::move(buffer));  // (reserved for every buffer: never allocates)
    made_.fetch_add(1, std::memory_order_relaxed);
    return b;
}

Writer::Buffer* BufferStock::take() {
    Writer::Buffer* b = nullptr;
    if (!thread_.joinable() || !ready_.try_dequeue(b)) {
        if (thread_.joinable()) {
            poke();
        }
        return nullptr;
    }
    const std::size_t left = ready_count_.fetch_sub(1, std::memory_order_relaxed) - 1;
    const std::size_t target = target_.load(std::memory_order_relaxed);
    if (left * buffer_cost(target, options_) < wanted() / 2) {
        poke();
    }
    return b;
}

// No lock on the producer: a wake that slips past the maker's wait is caught
// by its millisecond timeout. One wake until the maker has run: a live
// producer finding no buffer at the bound pokes for every record it drops,
// and must not make a system call for each.
void BufferStock::poke() {
    if (!poked_.exchange(true, std::memory_order_relaxed)) {
        cv_.notify_one();
    }
}

bool BufferStock::wait_stocked(std::chrono::milliseconds patience) {
    const auto until = std::chrono::steady_clock::now() + patience;
    for (;;) {
        const std::size_t cost = buffer_cost(target_.load(std::memory_order_relaxed), options_);
        if (ready_count_.load(std::memory_order_relaxed) * cost >=
                want_bytes_.load(std::memory_order_relaxed) ||
            count_.now() + cost > options_.memory_bytes ||
            starved_.load(std::memory_order_relaxed)) {
            return true;
        }
        if (!thread_.joinable() || std::chrono::steady_clock::now() >= until) {
            return false;
        }
        poke();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

// What the stock keeps ready: what it was asked for, and while a backlog
// grows as much again as the backlog holds (a stall that has lasted this long
// may last as long again). The backlog's own growth then never waits for the
// stock, even when the stock's thread is slowed (a busy host: other threads
// on its core, direct reclaim while a page cache full of dirty pages is
// written back).
std::size_t BufferStock::wanted() const {
    const std::size_t asked = want_bytes_.load(std::memory_order_relaxed);
    // (Not offline: a source that waits for the disk gains nothing from it.)
    const std::uint64_t backlog = backlog_ != nullptr && !options_.block_when_full
                                      ? backlog_->load(std::memory_order_relaxed)
                                      : 0;
    return std::max<std::size_t>(asked, static_cast<std::size_t>(backlog + backlog / 4));
}

void BufferStock::run() {
    for (;;) {
        for (;;) {
            const std::size_t size = target_.load(std::memory_order_relaxed);
            const std::size_t cost = buffer_cost(size, options_);
            if (ready_count_.load(std::memory_order_relaxed) * cost >= wanted() ||
                count_.now() + cost > options_.memory_bytes) {
                break;  // enough ready, or the bound is reached
            }
            std::unique_ptr<Writer::Buffer> fresh;
            try {
                fresh = make_buffer(size, options_);
            } catch (const std::bad_alloc&) {
                // Below the bound but the system has no more: the producer
                // drops (live) or waits (offline) as at the bound.
                starved_.store(true, std::memory_order_relaxed);
                break;
            }
            count_.charge(fresh->charged);
            Writer::Buffer* b = adopt(std::move(fresh));
            // Counted before it can be taken, so that the count never wraps.
            ready_count_.fetch_add(1, std::memory_order_relaxed);
            ready_.enqueue(b);  // (capacity covers every buffer: never allocates)
        }
        std::unique_lock lock(mu_);
        // Woken when the producer takes the stock low; every millisecond
        // anyway, since written buffers remade smaller free room under the bound.
        cv_.wait_for(lock, std::chrono::milliseconds(1),
                     [this] { return quit_ || poked_.load(std::memory_order_relaxed); });
        poked_.store(false, std::memory_order_relaxed);
        if (quit_) {
            return;
        }
    }
}

}  // namespace ibvcap::writer_detail
