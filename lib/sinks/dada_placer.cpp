// One PSRDADA ring's placement, and the copy thread (lib/sinks/dada_placer.hpp).
#include "lib/sinks/dada_placer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "formats/fill_frame.hpp"

namespace ibvcap {

DadaPlacer::DadaPlacer(DadaRingWriter& writer, std::size_t payload_bytes,
                       std::vector<std::uint8_t*> blocks, BlockMemory* memory,
                       std::function<void()> on_consumer)
    : writer_(writer),
      payload_bytes_(payload_bytes),
      blocks_(std::move(blocks)),
      memory_(memory),
      on_consumer_(std::move(on_consumer)),
      pattern_(payload_bytes) {
    fill_payload(pattern_);
    // Every copy into a block lands before the block is marked filled.
    writer_.set_before_mark([this] { synchronize(); });
}

void DadaPlacer::fail(std::string why) {
    if (error_.empty()) {
        error_ = std::move(why);
    }
}

void DadaPlacer::synchronize() {
    if (memory_ != nullptr && error_.empty()) {
        try {
            memory_->synchronize();
        } catch (const std::exception& e) {
            fail(fmt::format("PSRDADA ring {}: a copy into its blocks failed: {}",
                             dada_key_name(writer_.key()), e.what()));
        }
    }
    // What the copies read goes back (after a failed wait too: nothing
    // more will read it), one call per owner and run of its tokens.
    for (std::size_t i = 0; i < held_.size();) {
        SlotOwner* owner = held_[i].first;
        tokens_.clear();
        for (; i < held_.size() && held_[i].first == owner; ++i) {
            tokens_.push_back(held_[i].second);
        }
        owner->release(tokens_);
    }
    held_.clear();
}

void DadaPlacer::release(DadaRecord& r) {
    if (r.owner != nullptr) {
        held_.emplace_back(r.owner, r.token);
        r.owner = nullptr;
    }
    if (r.staged) {
        staged_done_.fetch_add(1, std::memory_order_release);
        r.staged = false;
    }
}

bool DadaPlacer::begin_transfer(std::uint64_t index, const std::string& header) {
    if (in_transfer_) {
        // Fill records still owed to the transfer that ends are not in it.
        counts_.owed_at_end += owed_;
        owed_ = 0;
        writer_.end_transfer();
    }
    in_transfer_ = true;
    next_index_ = index;
    if (!checked_) {
        checked_ = true;
        const std::uint64_t block = writer_.data().block_bytes();
        if (payload_bytes_ == 0 || block % payload_bytes_ != 0 || writer_.data().blocks() < 2) {
            const std::uint64_t p = std::max<std::uint64_t>(payload_bytes_, 1);
            fail(fmt::format(
                "PSRDADA ring {}: its {} blocks of {} bytes do not hold whole payloads of {} "
                "bytes{}: make it with dada_db -k {} -b {} -n 8 (or more blocks)",
                dada_key_name(writer_.key()), writer_.data().blocks(), block, payload_bytes_,
                writer_.data().blocks() < 2 ? ", or are fewer than 2" : "",
                dada_key_name(writer_.key()), p * std::max<std::uint64_t>(1, (block + p - 1) / p)));
            return false;
        }
        if (blocks_.size() != writer_.data().blocks()) {
            fail(fmt::format("PSRDADA ring {}: its blocks could not be reached",
                             dada_key_name(writer_.key())));
            return false;
        }
    }
    try {
        writer_.write_header(header);
    } catch (const std::exception& e) {
        fail(e.what());
        return false;
    }
    return true;
}

bool DadaPlacer::place(DadaRecord& r) {
    std::uint64_t block = 0;
    std::size_t at = 0;
    DadaRingWriter::Room room = writer_.reserve(payload_bytes_, block, at);
    while (room == DadaRingWriter::Room::full && wait_stop_ != nullptr &&
           !wait_stop_->load(std::memory_order_relaxed)) {
        // An offline source waits for the reader (the file will still be there).
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        room = writer_.reserve(payload_bytes_, block, at);
    }
    switch (room) {
        case DadaRingWriter::Room::ok:
            break;
        case DadaRingWriter::Room::full:
            return false;
        case DadaRingWriter::Room::failed:
            fail(writer_.error());
            return false;
    }
    std::uint8_t* dst = blocks_[block] + at;
    const bool pattern = r.kind != DadaRecord::Kind::payload;
    if (memory_ == nullptr) {
        if (pattern) {
            std::memcpy(dst, pattern_.data(), payload_bytes_);
        } else if (r.frame != nullptr) {
            // Gathered from the frame's pieces (host memory: checked by the
            // stream's side).
            (void)r.frame->gather(r.offset, MutableBytes(dst, payload_bytes_));
        } else {
            std::memcpy(dst, r.src, payload_bytes_);
        }
        release(r);
        return true;
    }
    try {
        if (pattern) {
            memory_->copy_in(dst, pattern_.data(), payload_bytes_);
        } else if (r.device != nullptr) {
            // Device to device, in the batch's one gather.
            memory_->copy_in_device(dst, r.src, payload_bytes_, *r.device);
        } else if (r.owner != nullptr) {
            memory_->copy_in_held(dst, r.src, payload_bytes_);
        } else {
            memory_->copy_in(dst, r.src, payload_bytes_);  // staged: the slot is free again
        }
    } catch (const std::exception& e) {
        fail(fmt::format("PSRDADA ring {}: a copy into its blocks failed: {}",
                         dada_key_name(writer_.key()), e.what()));
    }
    release(r);
    return error_.empty();
}

void DadaPlacer::record(DadaRecord& r) {
    const auto lost = [&] {
        counts_.unwritten += r.kind == DadaRecord::Kind::payload ? 1 : 0;
        release(r);
    };
    std::unique_ptr<std::string> header(r.header);
    r.header = nullptr;
    if (!error_.empty()) {
        lost();
        return;
    }
    if (header != nullptr) {
        if (!begin_transfer(r.first, *header)) {
            lost();
            return;
        }
    } else if (!in_transfer_) {
        lost();  // (a transfer's first record always has its header)
        return;
    }
    if (r.index > next_index_) {
        // Records the stream's side could not queue: fill records in their
        // place (it counted them), so every byte stays at its time.
        owed_ += r.index - next_index_;
    }
    next_index_ = r.index + 1;
    DadaRecord fill;
    while (owed_ > 0 && place(fill)) {
        --owed_;
    }
    const bool placed = error_.empty() && owed_ == 0 && place(r);
    if (!error_.empty()) {
        lost();
        return;
    }
    if (!placed) {
        release(r);
        ++owed_;
        if (r.kind == DadaRecord::Kind::fill) {
            ++counts_.fills;
        } else if (on_consumer_) {
            on_consumer_();  // no room: the ring's reader is behind
        }
        return;
    }
    if (r.kind == DadaRecord::Kind::fill) {
        ++counts_.fills;
    } else if (r.kind == DadaRecord::Kind::payload) {
        ++counts_.frames;
    }
}

void DadaPlacer::close() {
    counts_.owed_at_end += owed_;
    owed_ = 0;
    synchronize();
}

// ---------------------------------------------------------------------------

DadaCopier::DadaCopier() : thread_([this] { run(); }) {}

DadaCopier::~DadaCopier() {
    stop();
}

bool DadaCopier::push(DadaPlacer& placer, const DadaRecord& r) {
    return queue_.try_enqueue(Job{&placer, r});
}

void DadaCopier::stop() {
    if (thread_.joinable()) {
        stopping_.store(true, std::memory_order_release);
        thread_.join();
    }
}

void DadaCopier::run() {
    std::vector<DadaPlacer*> touched;
    Job job;
    for (;;) {
        std::size_t n = 0;
        while (n < kBatch && queue_.wait_dequeue_timed(job, std::chrono::milliseconds(1))) {
            job.placer->record(job.record);
            if (std::find(touched.begin(), touched.end(), job.placer) == touched.end()) {
                touched.push_back(job.placer);
            }
            ++n;
        }
        // The batch: its copies issued and waited for, the slots they read
        // given back.
        for (DadaPlacer* p : touched) {
            p->synchronize();
        }
        touched.clear();
        if (n == 0 && stopping_.load(std::memory_order_acquire) && queue_.size_approx() == 0) {
            return;
        }
    }
}

}  // namespace ibvcap
