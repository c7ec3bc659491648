// The producer side of the writer (lib/sinks/writer.hpp): the Writer API,
// its outputs and buffers, rotation decided per record, the hand-off of held
// receive slots, and the disk threads' loop that drains each lane and gives
// the held slots back. What a disk thread does with one buffer (files,
// pwritev, O_DIRECT, errors) is in writer_io.cpp; the shared private types in
// writer_detail.hpp.
#include "lib/sinks/writer.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "lib/probes.hpp"
#include "lib/sinks/writer_detail.hpp"

namespace ibvcap {

namespace {

// write_frame under mere slot pressure: send only the buffers holding at
// least this many frames, so that buffers stay large.
constexpr std::size_t kPressureFlushHolds = 32;

using writer_detail::buffer_cost;
using writer_detail::holds_for;
using writer_detail::kPage;

std::size_t default_buffer_bytes(const Writer::Options& o) {
    if (o.buffer_bytes != 0) {
        return o.buffer_bytes;
    }
    return o.direct_io ? std::size_t{4} << 20 : std::size_t{512} << 10;
}

// The memory bound's arithmetic (writer.hpp, "Memory bound").
struct MemoryPlan {
    std::size_t largest = 0;     // buffer bytes before any shrinking
    std::size_t steady = 0;      // 5/6 of the bound: what the plan fits in
    std::size_t fixed = 0;       // the disk threads' staging buffers
    std::size_t per_output = 0;  // an output's own record, besides its buffer
    std::size_t pool = 0;        // buffers in flight, on top of one per output

    MemoryPlan(const Writer::Options& o, std::size_t output_bytes) {
        const std::size_t threads = std::max(1u, o.threads);
        largest = std::max(default_buffer_bytes(o), Writer::kMinBufferBytes);
        steady = o.memory_bytes / 6 * 5;
        // (Two with O_DIRECT: one is written behind while the next buffer is
        // gathered into the other.)
        fixed = threads * (largest + 2 * kPage) * (o.direct_io ? 2 : 1);
        per_output = output_bytes + 1024 + (o.direct_io ? kPage : 0);
        if (o.buffers != 0) {
            pool = o.buffers;
            return;
        }
        // A quarter of the plan, but never so much that max_outputs would no
        // longer fit at the smallest size.
        const std::size_t quarter = steady / 4 / buffer_cost(largest, o);
        const std::size_t at_floor = o.max_outputs * (per_output + floor_cost(o));
        const std::size_t left = steady > fixed + at_floor ? steady - fixed - at_floor : 0;
        pool = std::max<std::size_t>(2 * threads, std::min(quarter, left / floor_cost(o)));
    }
    static std::size_t floor_cost(const Writer::Options& o) {
        return buffer_cost(Writer::kMinBufferBytes, o);
    }
    // The buffer size that fits `outputs` outputs and the pool in the plan
    // (page-aligned, at most `largest`); 0 when even the smallest does not.
    std::size_t buffer_for(std::size_t outputs, const Writer::Options& o) const {
        const std::size_t own = fixed + outputs * per_output;
        if (steady <= own) {
            return 0;
        }
        const std::size_t each = (steady - own) / (outputs + pool);
        std::size_t lo = Writer::kMinBufferBytes / kPage;  // in pages
        std::size_t hi = largest / kPage;
        if (buffer_cost(lo * kPage, o) > each) {
            return 0;
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
};

}  // namespace

std::size_t Writer::min_memory_bytes(const Options& options) {
    if (options.memory_bytes == 0) {
        return 0;
    }
    Options o = options;
    if (o.max_pieces == 0) {
        o.max_pieces = 1;
    }
    const std::size_t threads = std::max(1u, o.threads);
    const MemoryPlan plan(o, sizeof(Output));
    const std::size_t pool = o.buffers != 0 ? o.buffers : 2 * threads;
    const std::size_t steady = plan.fixed + o.max_outputs * plan.per_output +
                               (o.max_outputs + pool) * MemoryPlan::floor_cost(o);
    // steady is 5/6 of the bound (rounded down to 6 bytes): round up.
    return (steady / 5 + 1) * 6;
}

Writer::Memory Writer::memory() const {
    Memory m;
    m.bound = options_.memory_bytes;
    m.now = allocated_.load(std::memory_order_relaxed);
    m.peak = peak_.load(std::memory_order_relaxed);
    m.buffer_bytes = target_bytes_;
    m.buffers = buffer_count_;
    return m;
}

void Writer::charge(std::size_t bytes) {
    const std::size_t now = allocated_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    std::size_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
}

Writer::Buffer* Writer::new_buffer(std::size_t bytes) {
    const std::size_t holds = holds_for(bytes, options_);
    auto buffer = std::make_unique<Buffer>(bytes, holds);
    buffer->charged = buffer_cost(bytes, options_);
    charge(buffer->charged);
    ++buffer_count_;
    Buffer* b = buffer.get();
    Lane& lane = *lanes_[(buffer_count_ - 1) % lanes_.size()];
    lane.pool.push_back(std::move(buffer));
    lane.spare.push_back(b);
    return b;
}

// The outputs passed the plan: plan for a quarter more, at a smaller buffer
// size. Free buffers are remade now; parked ones are handed over, and the
// disk threads remake every buffer larger than the new size once written.
void Writer::plan_for(std::size_t outputs) {
    planned_outputs_ = std::min(
        options_.max_outputs,
        std::max(outputs, planned_outputs_ + std::max<std::size_t>(4, planned_outputs_ / 4)));
    const MemoryPlan plan(options_, sizeof(Output));
    const std::size_t size = plan.buffer_for(planned_outputs_, options_);
    if (size == 0 || size >= target_bytes_) {
        return;  // (size 0 cannot happen: the constructor checked max_outputs)
    }
    target_bytes_ = size;
    for (auto& lane : lanes_) {
        lane->target.store(size, std::memory_order_relaxed);
        Buffer* b = nullptr;
        while (lane->free.try_dequeue(b)) {
            lane->spare.push_back(b);
        }
        for (Buffer* spare : lane->spare) {
            if (spare->capacity > size) {
                const std::size_t before = spare->charged;
                spare->remake(size, holds_for(size, options_));
                spare->charged = buffer_cost(size, options_);
                allocated_.fetch_sub(before - spare->charged, std::memory_order_relaxed);
            }
        }
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
            } else if (b.charged > buffer_cost(size, options_)) {
                const std::size_t before = b.charged;
                b.trim(size, holds_for(size, options_), buffer_cost(size, options_));
                allocated_.fetch_sub(before - b.charged, std::memory_order_relaxed);
            }
        }
    }
}

std::string Writer::rotated_path(const std::string& path, std::uint64_t index) {
    const auto slash = path.find_last_of('/');
    const auto dot = path.find_last_of('.');
    if (dot == std::string::npos || (slash != std::string::npos && dot < slash) ||
        dot == (slash == std::string::npos ? 0 : slash + 1)) {
        return fmt::format("{}.{:06}", path, index);
    }
    return fmt::format("{}.{:06}{}", path.substr(0, dot), index, path.substr(dot));
}

Writer::Writer(const Options& options) : options_(options) {
    if (options_.threads == 0) {
        options_.threads = 1;
    }
    if (options_.max_pieces == 0) {
        options_.max_pieces = 1;
    }
    options_.buffer_bytes = default_buffer_bytes(options_);
    if (bounded()) {
        if (const std::size_t least = min_memory_bytes(options_); options_.memory_bytes < least) {
            throw std::invalid_argument(fmt::format(
                "a writer memory bound of {} MiB is too small for up to {} output files (each "
                "needs a buffer of at least {} KiB) and {} disk thread(s): give {} MiB or more",
                options_.memory_bytes >> 20, options_.max_outputs, kMinBufferBytes >> 10,
                options_.threads, (least + (1 << 20) - 1) >> 20));
        }
        const MemoryPlan plan(options_, sizeof(Output));
        options_.buffers = plan.pool;
        planned_outputs_ = std::min<std::size_t>(options_.max_outputs, 16);
        target_bytes_ = plan.buffer_for(planned_outputs_, options_);
        charge(plan.fixed);
    } else {
        target_bytes_ = options_.buffer_bytes;
        if (options_.buffers == 0) {
            options_.buffers = std::max<std::size_t>(
                (std::size_t{256} << 20) / options_.buffer_bytes, 2 * options_.threads);
        }
        charge(options_.threads * (options_.buffer_bytes + 2 * kPage) *
               (options_.direct_io ? 2 : 1));
    }
    if (options_.buffers < 2 * options_.threads ||
        options_.buffer_bytes < 65536 + kPcapRecordHeaderBytes) {
        throw std::invalid_argument("writer needs at least 2 buffers of 64 KiB per disk thread");
    }
    const std::size_t per_lane = options_.buffers / options_.threads;
    for (unsigned t = 0; t < options_.threads; ++t) {
        auto lane = std::make_unique<Lane>(per_lane + options_.max_outputs + 1);
        lane->pool.reserve(per_lane + options_.max_outputs + 1);
        lane->spare.reserve(per_lane + options_.max_outputs + 1);
        lane->allocated = &allocated_;
        lanes_.push_back(std::move(lane));
    }
    for (std::size_t i = 0; i < per_lane * options_.threads; ++i) {
        new_buffer(target_bytes_);
    }
    for (unsigned t = 0; t < options_.threads; ++t) {
        Lane* lane = lanes_[t].get();
        lane->thread = std::thread([this, lane, t] {
            WriterIo io(options_, *lane);
            for (;;) {
                Buffer* buffer = nullptr;
                if (!lane->full.try_dequeue(buffer)) {
                    // Nothing to gather meanwhile: finish the write behind.
                    const std::uint64_t before = io.drops();
                    io.complete_pending();
                    if (const std::uint64_t n = io.drops() - before) {
                        dropped_.fetch_add(n, std::memory_order_relaxed);
                    }
                    lane->full.wait_dequeue(buffer);
                }
                if (buffer == nullptr) {
                    io.complete_pending();
                    return;
                }
                const std::uint64_t dropped_before = io.drops();
                try {
                    io.write_buffer(*buffer, *buffer->output);
                } catch (const std::exception& e) {
                    // Nothing of this buffer reached the file (device copies
                    // come before the write): the file keeps whole records.
                    io.fail_on_exception(*buffer, *buffer->output, e.what());
                    if (options_.faults != nullptr) {
                        options_.faults->report(fmt::format("disk thread {}", t), e.what());
                    }
                }
                if (const std::uint64_t n = io.drops() - dropped_before) {
                    dropped_.fetch_add(n, std::memory_order_relaxed);
                }
                // Written, failed or abandoned: the held frames go back now.
                for (std::size_t i = 0; i < buffer->tokens.size();) {
                    std::size_t j = i + 1;
                    while (j < buffer->tokens.size() && buffer->owners[j] == buffer->owners[i]) {
                        ++j;
                    }
                    buffer->owners[i]->release(
                        std::span<const std::uint64_t>(buffer->tokens.data() + i, j - i));
                    i = j;
                }
                held_.fetch_sub(buffer->tokens.size(), std::memory_order_relaxed);
                backlog_.fetch_sub(buffer->bytes, std::memory_order_relaxed);
                buffer->reset();
                // The memory bound shrank the buffers since this one was made.
                if (const std::size_t size = lane->target.load(std::memory_order_relaxed);
                    size != 0 && buffer->capacity > size) {
                    const std::size_t before = buffer->charged;
                    try {
                        buffer->remake(size, holds_for(size, options_));
                        buffer->charged = buffer_cost(size, options_);
                        lane->allocated->fetch_sub(before - buffer->charged,
                                                   std::memory_order_relaxed);
                    } catch (const std::bad_alloc&) {
                        // Kept as it was (the old bytes are freed only after
                        // the new ones were had): counted whole again.
                        buffer->charged = buffer_cost(buffer->capacity, options_);
                        lane->allocated->fetch_add(buffer->charged - before,
                                                   std::memory_order_relaxed);
                    }
                }
                lane->free.enqueue(buffer);
            }
        });
    }
    if (!options_.cpus.empty()) {
        for (unsigned t = 0; t < options_.threads; ++t) {
            const int cpu = options_.cpus[t % options_.cpus.size()];
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(static_cast<unsigned>(cpu), &set);
            if (const int err =
                    pthread_setaffinity_np(lanes_[t]->thread.native_handle(), sizeof(set), &set)) {
                finish();
                // EINVAL: no CPU of the set is one this process may run on
                // (pthread_setaffinity_np(3)).
                throw std::runtime_error(fmt::format(
                    "cannot pin a disk thread to cpu {}: {}; give --disk-cpu a CPU this process "
                    "may run on (lscpu -e lists the online ones)",
                    cpu,
                    err == EINVAL ? "it is offline, absent or outside this process's cpuset"
                                  : std::strerror(err)));
            }
        }
    }
}

Writer::~Writer() {
    if (!finished_) {
        finish();
    }
}

Writer::OutputId Writer::add_output(OutputFormat format, std::string path, std::string group,
                                    std::string antenna, Bytes preamble, Trailer trailer) {
    if (outputs_.size() >= options_.max_outputs) {
        throw std::length_error("too many output files (raise the writer's max_outputs)");
    }
    Lane& lane = *lanes_[outputs_.size() % lanes_.size()];
    const MemoryPlan plan(options_, sizeof(Output));
    if (bounded()) {
        if (outputs_.size() + 1 > planned_outputs_) {
            plan_for(outputs_.size() + 1);
        }
        // Offline: never past the bound; wait for the buffers still larger
        // than the new size to come back (remade smaller) first. (A live
        // source cannot wait: the last sixth of the bound covers them.)
        const std::size_t need = buffer_cost(target_bytes_, options_);
        const auto start = std::chrono::steady_clock::now();
        while (options_.block_when_full &&
               allocated_.load(std::memory_order_relaxed) + need > options_.memory_bytes &&
               (backlog_.load(std::memory_order_relaxed) > 0 ||
                std::chrono::steady_clock::now() - start < std::chrono::seconds(1))) {
            for (auto& l : lanes_) {
                Buffer* b = nullptr;
                if (l->free.wait_dequeue_timed(b, std::chrono::milliseconds(1))) {
                    l->spare.push_back(b);
                }
            }
        }
    }
    // The new buffer goes to this output's lane. A live source past the
    // bound (buffers larger than the new size still on their way) owes it,
    // and adds it with a later output once they came back smaller.
    const std::size_t cost = buffer_cost(target_bytes_, options_);
    ++owed_;
    for (std::size_t i = 0; owed_ > 0; ++i) {
        // (Offline it never owes: the producer could wait for a buffer
        // that every output holds parked.)
        if (bounded() && !options_.block_when_full &&
            allocated_.load(std::memory_order_relaxed) + cost > options_.memory_bytes) {
            break;
        }
        Lane& to = i == 0 ? lane : *lanes_[(outputs_.size() + i) % lanes_.size()];
        to.pool.push_back(
            std::make_unique<Buffer>(target_bytes_, holds_for(target_bytes_, options_)));
        to.pool.back()->charged = cost;
        to.spare.push_back(to.pool.back().get());
        charge(cost);
        ++buffer_count_;
        --owed_;
    }
    holding_.reserve(options_.max_outputs);
    Output& out = outputs_.emplace_back();
    out.format = format;
    out.path = std::move(path);
    out.group = std::move(group);
    out.antenna = std::move(antenna);
    out.preamble.assign(preamble.begin(), preamble.end());
    out.trailer = std::move(trailer);
    out.lane = &lane;
    out.file_bytes = out.preamble.size();
    out.on_disk.reserve(std::max<std::size_t>(options_.rotation.files, 1));
    return &out;
}

Writer::Buffer* Writer::take_free_buffer(Lane& lane) {
    Buffer* buffer = nullptr;
    if (!lane.spare.empty()) {
        buffer = lane.spare.back();
        lane.spare.pop_back();
        return buffer;
    }
    if (lane.free.try_dequeue(buffer)) {
        return buffer;
    }
    if (!options_.block_when_full) {
        return nullptr;
    }
    lane.free.wait_dequeue(buffer);
    return buffer;
}

void Writer::submit(Output& out) {
    Buffer* buffer = out.current;
    out.current = nullptr;
    if (out.in_holding) {
        // Rare (a buffer filled while holding frames): keep the list exact.
        out.in_holding = false;
        holding_.erase(std::find(holding_.begin(), holding_.end(), &out));
    }
    buffer->output = &out;
    backlog_.fetch_add(buffer->bytes, std::memory_order_relaxed);
    out.lane->full.enqueue(buffer);  // capacity covers the whole pool: never allocates
}

// One record the producer does not write: counted in the output's split and
// the live witness together, so that the two cannot drift apart.
void Writer::count_drop(Output& out, std::uint8_t why) {
    ++out.dropped_by_producer;
    dropped_.fetch_add(1, std::memory_order_relaxed);
    IBVCAP_PROBE3(write_drop, to_string(out.format).data(), std::uint64_t{1}, why);
}

bool Writer::begin_record(Output& out, std::size_t bytes, std::size_t pieces,
                          std::uint64_t timestamp_ns) {
    const Rotation& r = options_.rotation;
    if (r.seconds > 0 || r.bytes > 0) {
        const std::uint64_t period =
            r.seconds > 0 ? timestamp_ns / (r.seconds * 1'000'000'000ull) : 0;
        if (out.file_records > 0 && ((r.seconds > 0 && period != out.file_period) ||
                                     (r.bytes > 0 && out.file_bytes + bytes > r.bytes))) {
            out.rotate_pending = true;
            if (out.current != nullptr) {
                submit(out);
            }
            out.file_bytes = out.preamble.size();
            out.file_records = 0;
        }
        if (out.file_records == 0) {
            out.file_period = period;
        }
    }
    if (out.current != nullptr && !out.current->room(bytes, pieces)) {
        submit(out);
    }
    if (out.current == nullptr) {
        Buffer* b = take_free_buffer(*out.lane);
        if (b == nullptr || bytes > b->capacity) {
            if (b != nullptr) {
                out.lane->spare.push_back(b);  // (reserved for every buffer: never allocates)
            }
            count_drop(out, probe::no_buffer);
            return false;
        }
        b->reset();
        b->rotate_before = out.rotate_pending;
        out.rotate_pending = false;
        out.current = b;
    }
    out.file_bytes += bytes;
    ++out.file_records;
    ++out.current->records;
    return true;
}

void Writer::write(OutputId output, std::span<const Bytes> pieces, std::uint64_t timestamp_ns) {
    std::size_t bytes = 0;
    for (const auto& p : pieces) {
        bytes += p.size();
    }
    if (!begin_record(*output, bytes, 1, timestamp_ns)) {
        return;
    }
    Buffer& b = *output->current;
    for (const auto& p : pieces) {
        b.append_copy(p);
    }
}

void Writer::refuse(OutputId output, const char* why) {
    count_drop(*output, probe::refused);
    if (output->refused++ == 0) {
        output->refused_why = why;
    }
}

void Writer::write_frame(OutputId output, Bytes prefix, const Frame& frame, std::size_t offset,
                         std::size_t len, Bytes suffix) {
    Output& out = *output;
    Bytes first;
    Bytes second;
    frame.slice(offset, len, first, second);
    const DeviceMemory* first_device = offset >= frame.head.size() ? frame.tail_device : nullptr;
    const DeviceMemory* second_device = frame.tail_device;
    const bool touches_device = (first_device != nullptr && !first.empty()) ||
                                (second_device != nullptr && !second.empty());
    if (touches_device && frame.lease != nullptr && !holding_.empty() &&
        (!frame.lease->allowed || frame.lease->pressure)) {
        // GPU payload must be held, and the source is short of posted slots:
        // send the partly filled buffers that hold frames, so they are
        // written and released (under mere pressure only those holding a
        // fair number, so that buffers stay large). Host payload needs no
        // such haste: when it cannot be held it is copied.
        flush_held(frame.lease->allowed ? kPressureFlushHolds : 1);
    }
    const bool can_hold = frame.lease != nullptr && frame.lease->allowed;
    if (touches_device && !can_hold) {
        // GPU memory is never read on the poll thread: without a hold the
        // record cannot be written. Counted, like a full queue.
        count_drop(out, probe::device_unheld);
        return;
    }
    const bool hold = can_hold && (touches_device || len >= options_.min_hold_bytes);
    if (!begin_record(out, prefix.size() + len + suffix.size(), 4, frame.timestamp_ns)) {
        return;
    }
    Buffer& b = *out.current;
    b.append_copy(prefix);
    if (hold && frame.hold()) {
        b.owners.push_back(frame.lease->owner);
        b.tokens.push_back(frame.lease->token);
        held_.fetch_add(1, std::memory_order_relaxed);
        if (!out.in_holding) {
            out.in_holding = true;
            holding_.push_back(&out);
        }
        b.append_held(first, first_device);
        b.append_held(second, second_device);
    } else {
        b.append_copy(first);
        b.append_copy(second);
    }
    b.append_copy(suffix);
}

void Writer::flush_held(std::size_t min_holds) {
    for (std::size_t i = 0; i < holding_.size();) {
        Output& out = *holding_[i];
        if (out.current == nullptr || out.current->tokens.size() >= min_holds) {
            holding_[i] = holding_.back();
            holding_.pop_back();
            out.in_holding = false;
            if (out.current != nullptr) {
                submit(out);
            }
        } else {
            ++i;
        }
    }
}

void Writer::finish() {
    if (finished_) {
        return;
    }
    finished_ = true;
    // Every output gets a last buffer marked close_after, even an empty one,
    // so that its file exists (with its preamble) and is closed in order.
    // First hand over the partial buffers, so that every buffer is free or on
    // its way back before the outputs without one wait for a free one.
    std::vector<Output*> need_buffer;
    for (auto& out : outputs_) {
        if (out.current != nullptr) {
            out.current->close_after = true;
            submit(out);
        } else {
            need_buffer.push_back(&out);
        }
    }
    for (Output* out : need_buffer) {
        Buffer* buffer = nullptr;
        if (!out->lane->spare.empty()) {
            buffer = out->lane->spare.back();
            out->lane->spare.pop_back();
        } else {
            out->lane->free.wait_dequeue(buffer);
        }
        buffer->reset();
        buffer->close_after = true;
        out->current = buffer;
        submit(*out);
    }
    for (auto& lane : lanes_) {
        lane->full.enqueue(nullptr);
    }
    for (auto& lane : lanes_) {
        if (lane->thread.joinable()) {
            lane->thread.join();
        }
    }
}

std::vector<OutputStats> Writer::stats() const {
    std::vector<OutputStats> result;
    result.reserve(outputs_.size());
    for (const auto& out : outputs_) {
        OutputStats s;
        s.path = out.path;
        s.format = std::string(to_string(out.format));
        s.group = out.group;
        s.antenna = out.antenna;
        s.packets = out.written_records;
        s.bytes = out.closed_bytes + out.offset;
        s.files = out.files;
        s.on_disk = out.on_disk;
        s.overwritten = out.overwritten;
        s.dropped = out.dropped_by_producer + out.dropped_by_writer;
        s.error = out.error;
        if (out.index_failures > 0) {
            s.error += fmt::format("{}{}{}", s.error.empty() ? "" : "; ", out.index_error,
                                   out.index_failures > 1
                                       ? fmt::format(" (and {} more)", out.index_failures - 1)
                                       : std::string());
        }
        if (out.refused > 0) {
            s.error += fmt::format("{}{} records not written: {}", s.error.empty() ? "" : "; ",
                                   out.refused, out.refused_why);
        }
        result.push_back(std::move(s));
    }
    return result;
}

bool Writer::any_failed() const {
    for (const auto& out : outputs_) {
        if (out.failed || out.dropped_by_producer > 0 || out.index_failures > 0) {
            return true;
        }
    }
    return false;
}

}  // namespace ibvcap
