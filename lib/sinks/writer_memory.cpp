// The writer's memory plan and its stock of buffers (writer_memory.hpp), and
// the Writer's side of them: its bound and figures, the plan followed as
// outputs come, and where the producer takes a buffer from.
#include "lib/sinks/writer_memory.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <type_traits>

#include "lib/sinks/writer_ahead.hpp"
#include "lib/sinks/writer_lane.hpp"

namespace ibvcap::writer_parts {

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

// The arena's ranges are made writable, and faulted in, this many bytes at a
// time at the least (one call per 4 MiB, not per buffer).
constexpr std::size_t kCommitStep = std::size_t{4} << 20;
// The stock faults pages in this many at a time, so that it sees a stop
// and the carving's progress between steps.
constexpr std::size_t kPopulateStep = std::size_t{2} << 20;
// The carving's pace is taken over this window, and the stock keeps twice
// what the window carved.
constexpr auto kRateWindow = std::chrono::milliseconds(20);

std::size_t round_up(std::size_t v, std::size_t to) {
    return (v + to - 1) / to * to;
}

}  // namespace

std::size_t BufferArena::reserve_for(const Writer::Options& o, std::size_t largest,
                                     std::size_t most) {
    const std::size_t each = buffer_cost(largest, o);
    if (o.memory_bytes == 0) {
        return round_up(most * each, kCommitStep) + kCommitStep;
    }
    // The live chunks never pass the bound; a shrunk buffer keeps its
    // address. With the chunk sizes s_0 > s_1 > ... > s_K made in turn and
    // N_k buffers made by the time s_k is (N_k s_k <= bound), the addresses
    // used are sum (N_k - N_{k-1}) s_k = N_K s_K + sum N_k (s_k - s_{k+1})
    // <= bound (1 + sum (s_k - s_{k+1}) / s_k) <= bound (1 + ln(s_0 / s_K)).
    const double ratio =
        static_cast<double>(each) / static_cast<double>(buffer_cost(Writer::kMinBufferBytes, o));
    const double factor = 2.0 + std::log(std::max(1.0, ratio));  // (one more bound of margin)
    const auto bytes = static_cast<std::size_t>(static_cast<double>(o.memory_bytes) * factor);
    return round_up(bytes, kCommitStep) + 64 * round_up(each, kPage);
}

BufferArena::BufferArena(const Writer::Options& o, MemoryCount& count, std::size_t reserve)
    : options_(o), count_(count), samples_(32) {
    // PROT_NONE and MAP_NORESERVE: address space only, no commit charge in
    // any overcommit mode (mmap(2), proc_sys_vm(5)); ranges become writable
    // as the carving reaches them (commit). No huge pages: a given-back
    // tail must stay given back (khugepaged would fill a 2 MiB range in
    // again), and the count is of 4 KiB pages.
    const std::size_t least = o.memory_bytes != 0 ? round_up(o.memory_bytes, kPage) : reserve / 2;
    for (std::size_t want = reserve;; want = std::max(least, want / 2)) {
        void* p =
            ::mmap(nullptr, want, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p != MAP_FAILED) {
            base_ = static_cast<std::uint8_t*>(p);
            reserved_ = want;
            break;
        }
        if (want == least) {
            throw std::runtime_error(fmt::format(
                "cannot reserve {} MiB of address space for the writers' buffers: {}; lower "
                "--writer-memory, or raise the process's address-space limit (ulimit -v, "
                "LimitAS=)",
                want >> 20, std::strerror(errno)));
        }
    }
    ::madvise(base_, reserved_, MADV_NOHUGEPAGE);
}

BufferArena::~BufferArena() {
    stop();
    // (Every Buffer is trivially destructible: its pages go with the range.)
    static_assert(std::is_trivially_destructible_v<Writer::Buffer>);
    ::munmap(base_, reserved_);
}

void BufferArena::stop() {
    if (thread_.joinable()) {
        {
            const std::lock_guard lock(mu_);
            quit_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
}

void BufferArena::start(std::size_t least_ahead, std::size_t most_ahead) {
    least_ahead_.store(least_ahead, std::memory_order_relaxed);
    most_ahead_ = most_ahead;
    thread_ = std::thread([this] { run(); });
    ::pthread_setname_np(thread_.native_handle(), "ibvcap-stock");
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

// Both threads may make the same range writable at once: mprotect of a
// range already writable changes nothing.
bool BufferArena::commit(std::size_t to) {
    std::size_t from = committed_.load(std::memory_order_acquire);
    if (to <= from) {
        return true;
    }
    to = std::min(reserved_, round_up(std::max(to, from + kCommitStep), kCommitStep));
    if (::mprotect(base_ + from, to - from, PROT_READ | PROT_WRITE) != 0) {
        starved_.store(true, std::memory_order_relaxed);
        return false;
    }
    while (from < to && !committed_.compare_exchange_weak(from, to, std::memory_order_acq_rel)) {
    }
    return true;
}

// Faults in [from, to) (MADV_POPULATE_WRITE: the kernel zeroes each page
// once, in one call, and leaves pages already there as they are, so the
// producer may be writing into the range meanwhile). Before Linux 5.14 each
// page is touched by an atomic add of 0, which cannot lose a byte the
// producer writes at the same time as a plain store would.
bool BufferArena::populate(std::size_t from, std::size_t to) {
    from = from / kPage * kPage;
    to = round_up(to, kPage);
    if (to <= from) {
        return true;
    }
    if (::madvise(base_ + from, to - from, MADV_POPULATE_WRITE) != 0) {
        if (errno != EINVAL) {
            starved_.store(true, std::memory_order_relaxed);
            return false;  // ENOMEM, EFAULT: the host has no more to give
        }
        for (std::size_t at = from; at < to; at += kPage) {
            __atomic_fetch_add(base_ + at, std::uint8_t{0}, __ATOMIC_RELAXED);
        }
    }
    std::size_t was = populated_.load(std::memory_order_relaxed);
    while (was < to && !populated_.compare_exchange_weak(was, to, std::memory_order_relaxed)) {
    }
    return true;
}

Writer::Buffer* BufferArena::carve(std::size_t bytes, std::size_t holds, Refusal& why) {
    const std::size_t lead = (made_.load(std::memory_order_relaxed) % kLeads) * kLeadStep;
    const std::size_t span = buffer_layout(bytes, holds, lead).span;
    const std::size_t at = next_.load(std::memory_order_relaxed);
    if (options_.memory_bytes != 0 && count_.now() + span > options_.memory_bytes) {
        why = Refusal::bound;
        return nullptr;
    }
    if (at + span > reserved_) {
        why = Refusal::address;
        return nullptr;
    }
    if (!commit(at + span)) {
        why = Refusal::host;
        return nullptr;
    }
    if (populated_.load(std::memory_order_relaxed) < at + span) {
        // The stock has not reached it (no CPU, or a burst): fault it in here.
        if (!populate(std::max(at, populated_.load(std::memory_order_relaxed)), at + span)) {
            why = Refusal::host;
            return nullptr;
        }
        producer_faulted_.fetch_add(1, std::memory_order_relaxed);
    }
    auto* b = new (base_ + at + lead) Writer::Buffer(bytes, holds, lead);
    b->charged = span;
    count_.charge(span);
    next_.store(at + span, std::memory_order_release);
    made_.fetch_add(1, std::memory_order_relaxed);
    if (populated_.load(std::memory_order_relaxed) - (at + span) <
        least_ahead_.load(std::memory_order_relaxed) / 2) {
        poke();
    }
    why = Refusal::none;
    return b;
}

// No lock on the producer: a wake that slips past the stock's wait is caught
// by its millisecond timeout. One wake until the stock has run, so that a
// producer carving often makes one system call, not one per buffer.
void BufferArena::poke() {
    if (thread_.joinable() && !poked_.exchange(true, std::memory_order_relaxed)) {
        cv_.notify_one();
    }
}

// The bytes faulted in past the bump pointer (0 while the producer has
// carved past what the stock reached).
std::size_t BufferArena::held_ahead() const {
    const std::size_t populated = populated_.load(std::memory_order_relaxed);
    return populated - std::min(populated, next_.load(std::memory_order_acquire));
}

bool BufferArena::wait_stocked(std::chrono::milliseconds patience) {
    const auto until = std::chrono::steady_clock::now() + patience;
    for (;;) {
        const std::size_t next = next_.load(std::memory_order_acquire);
        const std::size_t ahead = held_ahead();
        const std::size_t want = least_ahead_.load(std::memory_order_relaxed);
        if (ahead >= want ||
            (options_.memory_bytes != 0 && count_.now() + ahead + kPage > options_.memory_bytes) ||
            next + ahead >= reserved_ || starved()) {
            return true;
        }
        if (!thread_.joinable() || std::chrono::steady_clock::now() >= until) {
            return false;
        }
        poke();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

// What the stock keeps faulted in ahead of the bump pointer: what it was
// asked for (the least pool and the outputs planned), or, while buffers are
// carved fast, twice what the last 20 ms carved, at most most_ahead_. It
// follows the run, not the bound: a small run makes little ahead whatever
// --writer-memory says.
std::size_t BufferArena::ahead_goal(std::size_t next, int& rule) {
    const auto now = std::chrono::steady_clock::now();
    Sample& last = samples_[(sample_at_ + samples_.size() - 1) % samples_.size()];
    if (now - last.at >= std::chrono::milliseconds(1)) {
        samples_[sample_at_] = {now, next};
        sample_at_ = (sample_at_ + 1) % samples_.size();
    }
    std::size_t since = next;  // the bump pointer at the window's start
    for (const Sample& s : samples_) {
        if (now - s.at <= kRateWindow && s.next < since) {
            since = s.next;
        }
    }
    const std::size_t least = least_ahead_.load(std::memory_order_relaxed);
    const std::size_t paced = 2 * (next - since);
    rule = paced > least ? 1 : 0;
    std::size_t goal = std::max(least, paced);
    if (goal > std::max(least, most_ahead_)) {
        goal = std::max(least, most_ahead_);
        rule = 2;
    }
    return goal;
}

void BufferArena::run() {
    for (;;) {
        const std::size_t next = next_.load(std::memory_order_acquire);
        int rule = 0;
        std::size_t goal = ahead_goal(next, rule);
        if (options_.memory_bytes != 0) {
            // Made-ahead pages are memory the writer has, though no buffer
            // yet: they stay within the bound's room.
            const std::size_t now = count_.now();
            goal = std::min(goal, now < options_.memory_bytes ? options_.memory_bytes - now : 0);
        }
        const std::size_t to = std::min(reserved_, next + goal);
        for (std::size_t from = std::max(next, populated_.load(std::memory_order_relaxed));
             from < to;) {
            const std::size_t step = std::min(to, from + kPopulateStep);
            if (!commit(step) || !populate(from, step)) {
                break;  // the host refused: the producer finds out for itself
            }
            from = step;
            const std::lock_guard lock(mu_);
            if (quit_) {
                return;
            }
        }
        const std::size_t held = held_ahead();
        if (held > ahead_peak_.load(std::memory_order_relaxed)) {
            ahead_peak_.store(held, std::memory_order_relaxed);
            ahead_rule_.store(rule, std::memory_order_relaxed);
        }
        std::unique_lock lock(mu_);
        // Woken when the producer carves into the last half of what is
        // ahead; every millisecond anyway, to follow the carving's pace.
        cv_.wait_for(lock, std::chrono::milliseconds(1),
                     [this] { return quit_ || poked_.load(std::memory_order_relaxed); });
        poked_.store(false, std::memory_order_relaxed);
        if (quit_) {
            return;
        }
    }
}

}  // namespace ibvcap::writer_parts

namespace ibvcap {

using writer_parts::buffer_cost;
using writer_parts::holds_for;
using writer_parts::MemoryPlan;
using writer_parts::Refusal;

std::size_t Writer::min_memory_bytes(const Options& options) {
    if (options.memory_bytes == 0) {
        return 0;
    }
    Options o = options;
    if (o.max_pieces == 0) {
        o.max_pieces = 1;
    }
    return MemoryPlan(o, sizeof(Output)).least_bound(o);
}

std::string Writer::memory_text(std::size_t bytes) {
    static constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    std::size_t unit = 0;
    while (unit + 1 < std::size(kUnits) && bytes != 0 && bytes % 1024 == 0) {
        bytes /= 1024;
        ++unit;
    }
    return fmt::format("{} {}", bytes, kUnits[unit]);
}

Writer::Memory Writer::memory() const {
    Memory m;
    m.bound = options_.memory_bytes;
    m.now = count_->now();
    m.peak = count_->peak.load(std::memory_order_relaxed);
    m.buffer_bytes = target_bytes_;
    m.buffers = stock_->made();
    m.backlog_peak = backlog_peak_.load(std::memory_order_relaxed);
    m.drops_at_bound = drops_at_bound_;
    m.drops_below_bound = drops_below_bound_;
    m.starved = stock_->starved();
    m.ahead_peak = stock_->ahead_peak();
    m.ahead_rule = stock_->ahead_rule();
    m.producer_faulted = stock_->producer_faulted();
    return m;
}

// Without a bound: a buffer made on this thread, up front or with an output.
Writer::Buffer* Writer::new_buffer(Lane& lane, std::size_t bytes) {
    Refusal why = Refusal::none;
    Buffer* b = stock_->carve(bytes, holds_for(bytes, options_), why);
    if (b == nullptr) {
        throw std::bad_alloc();  // (the reservation covers every buffer: the host refused)
    }
    lane.spare.push_back(b);
    return b;
}

// The outputs passed the plan: plan for a quarter more, at a smaller buffer
// size. Buffers are made at the new size from now on; larger ones in use
// take no more than it and are made smaller in place by the disk thread once
// written; parked ones are capped at it (while the memory has room: giving
// their pages back cost the producer a TLB shootdown each, 8,754 calls for
// 2,400 outputs), trimmed to it (their pages past it given back), or sent.
void Writer::plan_for(std::size_t outputs) {
    planned_outputs_ = std::min(
        options_.max_outputs,
        std::max(outputs, planned_outputs_ + std::max<std::size_t>(4, planned_outputs_ / 4)));
    const MemoryPlan plan(options_, sizeof(Output));
    const std::size_t size = plan.buffer_for(planned_outputs_, options_);
    if (size >= target_bytes_) {
        return;
    }
    target_bytes_ = size;
    for (auto& lane : lanes_) {
        lane->target.store(size, std::memory_order_relaxed);
    }
    // Parked buffers larger than the new size: sent when they hold that
    // much already; otherwise trimmed to it (the pages past it go back to
    // the system), and sent once full. Sending them all at once starved the
    // outputs of buffers (live) or made thousands of small writes (offline).
    for (auto& out : outputs_) {
        if (out.current != nullptr && out.current->capacity > size) {
            Buffer& b = *out.current;
            if (b.bytes >= size || b.tokens.size() >= holds_for(size, options_)) {
                submit(out);
            } else if (count_->now() < options_.memory_bytes / 3 * 2) {
                // Memory has room: capped only, made smaller once written.
                b.cap(size, holds_for(size, options_));
            } else if (b.charged > buffer_cost(size, options_)) {
                const std::size_t before = b.charged;
                b.trim(size, holds_for(size, options_), buffer_cost(size, options_));
                count_->release(before - b.charged);
            }
        }
    }
}

// What the stock keeps made: its share of the bound, and a buffer for each
// prepared output not yet served and each output the plan foresees but has
// not seen (they come in bursts: a new group's antennas all at once).
void Writer::want_stock() {
    const std::size_t foreseen =
        planned_outputs_ > outputs_.size() ? planned_outputs_ - outputs_.size() : 0;
    stock_->want((options_.buffers + unserved_ + foreseen) * buffer_cost(target_bytes_, options_));
}

void Writer::prepare(std::chrono::milliseconds patience) {
    if (!bounded()) {
        ahead_->wait_created(patience);
        return;
    }
    for (auto& out : outputs_) {
        if (!out.prepared && out.current == nullptr) {
            out.prepared = true;
            ++unserved_;
        }
    }
    want_stock();
    stock_->wait_stocked(patience);
    ahead_->wait_created(patience);  // and their files made
}

// A free buffer, first of this lane's, then of any lane's (a buffer goes to
// whichever lane its output is on), then a new one from the stock; nullptr
// when there is none. Never allocates, never waits.
Writer::Buffer* Writer::try_take_buffer(Lane& lane, bool fresh) {
    const auto from = [](Lane& l) {
        Buffer* b = nullptr;
        if (!l.spare.empty()) {
            b = l.spare.back();
            l.spare.pop_back();
        } else if (!l.free.try_dequeue(b)) {
            b = nullptr;
        }
        return b;
    };
    if (Buffer* b = from(lane)) {
        return b;
    }
    for (auto& l : lanes_) {
        if (l.get() != &lane) {
            if (Buffer* b = from(*l)) {
                return b;
            }
        }
    }
    if (!fresh || !bounded()) {
        return nullptr;
    }
    Refusal why = Refusal::none;
    Buffer* b = stock_->carve(target_bytes_, holds_for(target_bytes_, options_), why);
    last_refusal_ = static_cast<int>(why);
    return b;
}

// Offline (and at the end): waits until a buffer comes back from a disk
// thread or is made. An offline source waits for the disk anyway: past an
// eighth of the bound in flight (128 MiB of 1 GiB: 0.1 s of a fast disk) it
// takes no new buffer, so that a read does not fill the bound with a backlog
// that buys it nothing.
Writer::Buffer* Writer::wait_for_buffer(Lane& lane) {
    for (;;) {
        const bool fresh = !bounded() || finished_ ||
                           backlog_.load(std::memory_order_relaxed) < options_.memory_bytes / 8;
        if (Buffer* b = try_take_buffer(lane, fresh)) {
            return b;
        }
        Buffer* b = nullptr;
        if (lane.free.wait_dequeue_timed(b, std::chrono::microseconds(500))) {
            return b;
        }
    }
}

}  // namespace ibvcap
