// The producer side of the writer (lib/sinks/writer.hpp): the Writer API,
// its outputs, rotation decided per record, the hand-off of held
// receive slots, and the disk threads' loop that drains each lane and gives
// the held slots back. What a disk thread does with one buffer (files,
// pwritev, O_DIRECT, errors) is in writer_io.cpp; where the producer's
// buffers come from (the memory plan, the stock) in writer_memory.cpp; the shared private types in
// writer_buffer.hpp, writer_lane.hpp and writer_io.hpp.
#include "lib/sinks/writer.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "lib/core/probes.hpp"
#include "lib/sinks/writer_io.hpp"
#include "lib/sinks/writer_memory.hpp"

namespace ibvcap {

namespace {

// write_frame under mere slot pressure: send only the buffers holding at
// least this many frames, so that buffers stay large (with GPU payload each
// buffer costs a flush, a gather launch and a synchronize: 64 frames per
// buffer keep that under one call per 20 frames, gpu-cuda-2.md N1).
constexpr std::size_t kPressureFlushHolds = 64;

using writer_parts::buffer_cost;
using writer_parts::BufferArena;
using writer_parts::holds_for;
using writer_parts::kPage;
using writer_parts::MemoryCount;
using writer_parts::MemoryPlan;
using writer_parts::Refusal;

// The most the stock keeps faulted in ahead under a bound: a sixteenth of
// it, at most 256 MiB (at 100 GbE, 20 ms of the wire).
std::size_t most_ahead(const Writer::Options& o) {
    if (o.stock_bytes != 0) {
        return std::min(o.stock_bytes, o.memory_bytes);
    }
    return std::min(o.memory_bytes / 16, std::size_t{256} << 20);
}

}  // namespace

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
    options_.buffer_bytes = MemoryPlan::default_buffer_bytes(options_);
    count_ = std::make_unique<MemoryCount>();
    std::size_t capacity = 0;  // the most buffers there can ever be
    if (bounded()) {
        // Never more than the host has (the run caps it first, saying so:
        // cap_writer_memory in lib/run/common.hpp); this only keeps the
        // queues' size sane for a library caller.
        const long pages = ::sysconf(_SC_PHYS_PAGES);
        const long page = ::sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0) {
            options_.memory_bytes =
                std::min(options_.memory_bytes,
                         static_cast<std::size_t>(pages) * static_cast<std::size_t>(page));
        }
        if (const std::size_t least = min_memory_bytes(options_); options_.memory_bytes < least) {
            throw std::invalid_argument(fmt::format(
                "a writer memory bound of {} is too small for up to {} output files (each "
                "needs a buffer of at least {} KiB) and {} disk thread(s): give {} MiB or more",
                memory_text(options_.memory_bytes), options_.max_outputs, kMinBufferBytes >> 10,
                options_.threads, (least + (1 << 20) - 1) >> 20));
        }
        const MemoryPlan plan(options_, sizeof(Output));
        options_.buffers = plan.least_pool;
        planned_outputs_ = std::min<std::size_t>(options_.max_outputs, 16);
        target_bytes_ = plan.buffer_for(planned_outputs_, options_);
        count_->charge(plan.fixed);
        capacity = options_.memory_bytes / MemoryPlan::floor_cost(options_) + 2;
    } else {
        target_bytes_ = options_.buffer_bytes;
        if (options_.buffers == 0) {
            options_.buffers = std::max<std::size_t>(
                (std::size_t{256} << 20) / options_.buffer_bytes, 2 * options_.threads);
        }
        count_->charge(options_.threads * (options_.buffer_bytes + 2 * kPage) *
                       (options_.direct_io ? 2 : 1));
        capacity = options_.buffers + options_.max_outputs + 1;
    }
    if (options_.buffers < 2 * options_.threads ||
        options_.buffer_bytes < 65536 + kPcapRecordHeaderBytes) {
        throw std::invalid_argument("writer needs at least 2 buffers of 64 KiB per disk thread");
    }
    stock_ = std::make_unique<BufferArena>(
        options_, *count_, BufferArena::reserve_for(options_, options_.buffer_bytes, capacity));
    for (unsigned t = 0; t < options_.threads; ++t) {
        // Any buffer may go to any lane: each queue can hold them all.
        auto lane = std::make_unique<Lane>(capacity);
        lane->spare.reserve(capacity);
        lane->count = count_.get();
        lanes_.push_back(std::move(lane));
    }
    if (bounded()) {
        // Memory is taken as the run needs it: the producer carves buffers,
        // the stock faults their pages in ahead.
        stock_->start(options_.buffers * buffer_cost(target_bytes_, options_),
                      most_ahead(options_));
        want_stock();
    } else {
        const std::size_t per_lane = options_.buffers / options_.threads;
        for (std::size_t i = 0; i < per_lane * options_.threads; ++i) {
            new_buffer(*lanes_[i % lanes_.size()], target_bytes_);
        }
    }
    ahead_ = std::make_unique<writer_parts::FileAhead>(options_);
    for (unsigned t = 0; t < options_.threads; ++t) {
        Lane* lane = lanes_[t].get();
        lane->thread = std::thread([this, lane, t] {
            writer_parts::block_sigpipe_here();
            WriterIo io(options_, *lane, [this](Buffer& b) { release_holds(b); });
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
                // Written, failed or abandoned: the held frames go back now
                // (unless they went after the device copies).
                release_holds(*buffer);
                backlog_.fetch_sub(buffer->bytes, std::memory_order_relaxed);
                buffer->reset();
                // The memory bound shrank the buffers since this one was made.
                if (const std::size_t size = lane->target.load(std::memory_order_relaxed);
                    size != 0 && buffer->capacity > size) {
                    const std::size_t before = buffer->charged;
                    buffer->shrink(size, holds_for(size, options_));
                    buffer->charged = buffer->span;
                    lane->count->release(before - buffer->charged);
                }
                lane->free.enqueue(buffer);
            }
        });
        // (Named, so that top -H, a test and a profile can tell them apart.)
        ::pthread_setname_np(lane->thread.native_handle(), fmt::format("ibvcap-disk{}", t).c_str());
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
    if (bounded()) {
        // No buffer is made for it: it takes one from the stock or from
        // those written, as every output does.
        if (outputs_.size() + 1 > planned_outputs_) {
            plan_for(outputs_.size() + 1);
            want_stock();
        }
    } else {
        new_buffer(lane, target_bytes_);  // one parked per output
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
    // (A ring of -W files grows as its files are made, on the disk thread:
    // reserving all of -W 4294967295 up front ended in std::bad_alloc.)
    out.on_disk.reserve(std::clamp<std::size_t>(options_.rotation.files, 1, 64));
    ahead_->request(out);
    return &out;
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
    const std::uint64_t backlog =
        backlog_.fetch_add(buffer->bytes, std::memory_order_relaxed) + buffer->bytes;
    if (backlog > backlog_peak_.load(std::memory_order_relaxed)) {
        backlog_peak_.store(backlog, std::memory_order_relaxed);  // (the producer's alone)
    }
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
        Buffer* b =
            options_.block_when_full ? wait_for_buffer(*out.lane) : try_take_buffer(*out.lane);
        if (b != nullptr && out.prepared) {
            // Its buffer made ahead is taken: the stock need not keep it.
            out.prepared = false;
            --unserved_;
            want_stock();
        }
        if (b != nullptr) {
            b->reset();
            // (A buffer made before the plan shrank takes no more than the
            // plan's size: the disk thread makes it smaller once written.)
            b->limit = std::min(b->limit, target_bytes_);
            b->max_holds = std::min(b->max_holds, holds_for(target_bytes_, options_));
        }
        if (b == nullptr || bytes > b->limit) {
            if (b != nullptr) {
                out.lane->spare.push_back(b);  // (reserved for every buffer: never allocates)
            } else if (bounded()) {
                // Whether the memory really was at the bound, or the host
                // refused memory below it (Refusal::host: the arena's own
                // carving never waits for a thread, so nothing else can).
                if (last_refusal_ == static_cast<int>(Refusal::bound)) {
                    ++drops_at_bound_;
                } else {
                    ++drops_below_bound_;
                }
            }
            count_drop(out, probe::no_buffer);
            return false;
        }
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
        // The host part of a frame with device payload (its headers in SGE0,
        // at most ~110 bytes) is copied, so that once the device part is in
        // staging nothing reads the slot: it goes back before the disk
        // write (Buffer::holds_host, gpu-cuda-2.md N3).
        auto append = [&](Bytes piece, const DeviceMemory* device) {
            if (touches_device && device == nullptr && piece.size() < options_.min_hold_bytes) {
                b.append_copy(piece);
            } else {
                b.append_held(piece, device);
            }
        };
        append(first, first_device);
        append(second, second_device);
    } else {
        b.append_copy(first);
        b.append_copy(second);
    }
    b.append_copy(suffix);
}

// The buffer's held slots back to their owners, grouped by owner; once.
void Writer::release_holds(Buffer& buffer) {
    if (buffer.holds_released) {
        return;
    }
    buffer.holds_released = true;
    for (std::size_t i = 0; i < buffer.tokens.size();) {
        std::size_t j = i + 1;
        while (j < buffer.tokens.size() && buffer.owners[j] == buffer.owners[i]) {
            ++j;
        }
        buffer.owners[i]->release(std::span<const std::uint64_t>(buffer.tokens.data() + i, j - i));
        i = j;
    }
    held_.fetch_sub(buffer.tokens.size(), std::memory_order_relaxed);
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
        Buffer* buffer = wait_for_buffer(*out->lane);
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
    stock_->stop();
    ahead_->finish();
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
        s.stopped_waiting = out.stopped_waiting;
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
