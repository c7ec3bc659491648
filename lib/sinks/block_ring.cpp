#include "lib/sinks/block_ring.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace ibvcap {

namespace {
// Host memory, and with a log the block memory of the GPU stand-in
// (--gpu-standin): it issues its copies the way gpu/gpu_cuda.cpp's
// DeviceBlockMemory does — copies from held slots and from device memory
// queued and issued as one batch at synchronize() — and logs each call that
// code makes (setup, one cudaMalloc per block, the batch, the wait).
class HostBlockMemory final : public BlockMemory {
  public:
    explicit HostBlockMemory(DeviceCallLog* log) : log_(log) {
        record(DeviceCallLog::Call::setup);  // a stream and pinned staging
    }
    std::uint8_t* allocate(std::size_t bytes) override {
        record(DeviceCallLog::Call::allocate);
        auto& b = buffers_.emplace_back(new std::uint8_t[bytes]());
        return b.get();
    }
    void copy_in(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) override {
        // Staged at once (the source may be reused when this returns).
        std::memcpy(dst, src, bytes);
        record(DeviceCallLog::Call::copy, 1, bytes);
        issued_ = true;
    }
    void copy_in_held(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) override {
        held_.push_back({dst, src, bytes});
    }
    void copy_in_device(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes,
                        const DeviceMemory& from) override {
        device_.push_back({{dst, src, bytes}, &from});
    }
    void synchronize() override {
        if (!held_.empty()) {
            std::uint64_t bytes = 0;
            for (const auto& c : held_) {
                std::memcpy(c.dst, c.src, c.bytes);
                bytes += c.bytes;
            }
            record(DeviceCallLog::Call::copy, held_.size(), bytes);
            held_.clear();
            issued_ = true;
        }
        // Device sources are read through their memory, one batch per
        // memory (the GPU build: one gather kernel).
        while (!device_.empty()) {
            const DeviceMemory* from = device_.front().from;
            batch_.clear();
            std::erase_if(device_, [&](const DeviceCopy& d) {
                if (d.from != from) {
                    return false;
                }
                batch_.push_back(d.copy);
                return true;
            });
            from->flush_nic_writes();
            from->copy_gathered(batch_);  // waits for its copies itself
        }
        if (issued_) {
            record(DeviceCallLog::Call::synchronize);
            issued_ = false;
        }
    }
    bool host_visible() const override { return true; }
    std::string describe() const override {
        return log_ != nullptr ? "host memory (GPU stand-in)" : "host memory";
    }

  private:
    struct DeviceCopy {
        DeviceMemory::Copy copy;
        const DeviceMemory* from = nullptr;
    };
    void record(DeviceCallLog::Call call, std::size_t copies = 0, std::uint64_t bytes = 0) {
        if (log_ != nullptr) {
            log_->record(call, copies, bytes);
        }
    }
    DeviceCallLog* log_;
    std::vector<std::unique_ptr<std::uint8_t[]>> buffers_;
    std::vector<DeviceMemory::Copy> held_;
    std::vector<DeviceCopy> device_;
    std::vector<DeviceMemory::Copy> batch_;
    bool issued_ = false;
};
}  // namespace

std::unique_ptr<BlockMemory> make_host_block_memory(DeviceCallLog* log) {
    return std::make_unique<HostBlockMemory>(log);
}

BlockRing::BlockRing(const BlockRingOptions& options, BlockMemory& memory, CodifTiming timing)
    : options_(options), memory_(memory), timing_(timing) {
    if (options_.frames_per_block == 0 || options_.threads == 0 || options_.payload_bytes == 0 ||
        options_.blocks == 0) {
        throw std::invalid_argument(
            "block ring: frames per block, threads, payload bytes and "
            "blocks must all be at least 1");
    }
    if (timing_.frames_per_period == 0) {
        throw std::invalid_argument("block ring: the stream's frames per period is unknown");
    }
    block_bytes_ =
        std::size_t{options_.frames_per_block} * options_.threads * options_.payload_bytes;
    const std::size_t bits = std::size_t{options_.frames_per_block} * options_.threads;
    for (std::uint32_t i = 0; i < options_.blocks; ++i) {
        auto b = std::make_unique<Block>();
        b->data = memory_.allocate(block_bytes_);
        b->present.assign((bits + 63) / 64, 0);
        free_.push_back(b.get());
        storage_.push_back(std::move(b));
    }
}

FramePosition BlockRing::position(std::uint64_t index) const {
    const std::uint32_t period = timing_.period == 0 ? 1u : timing_.period;
    return {static_cast<std::uint32_t>(index / timing_.frames_per_period * period),
            static_cast<std::uint32_t>(index % timing_.frames_per_period)};
}

Block* BlockRing::open_block(std::uint64_t first_index) {
    Block* b = nullptr;
    {
        const std::lock_guard lock(mu_);
        if (free_.empty()) {
            return nullptr;
        }
        b = free_.front();
        free_.pop_front();
    }
    b->first_index = first_index;
    b->first = position(first_index);
    std::fill(b->present.begin(), b->present.end(), 0);
    b->present_count = 0;
    const auto at = std::find_if(open_.begin(), open_.end(),
                                 [&](const Block* o) { return o->first_index > first_index; });
    open_.insert(at, b);
    return b;
}

void BlockRing::hand_out_front() {
    Block* b = open_.front();
    if (options_.batched) {
        // Closed for frames; handed out by the next synchronize_copies().
        open_.pop_front();
        handed_up_to_ = std::max(handed_up_to_, b->first_index + options_.frames_per_block);
        closing_.push_back(b);
        return;
    }
    // Every copy into it has landed before it leaves open_: a wait that
    // throws leaves the block open (abandon() then counts its frames).
    memory_.synchronize();
    open_.pop_front();
    handed_up_to_ = std::max(handed_up_to_, b->first_index + options_.frames_per_block);
    closing_.push_back(b);
    hand_out_closing();
}

void BlockRing::hand_out_closing() {
    if (closing_.empty()) {
        return;
    }
    {
        const std::lock_guard lock(mu_);
        for (Block* b : closing_) {
            b->sequence = next_sequence_++;
            ++stats_.blocks_out;
            ready_.push_back(b);
        }
    }
    closing_.clear();
    ready_cv_.notify_all();
}

void BlockRing::synchronize_copies() {
    // A wait that throws leaves the closing blocks where they are: abandon()
    // counts their frames.
    memory_.synchronize();
    hand_out_closing();
}

void BlockRing::place(std::uint16_t thread, std::uint64_t index, Bytes head, Bytes payload,
                      const DeviceMemory* payload_device, bool held) {
    if (thread >= options_.threads) {
        ++stats_.bad_thread;
        return;
    }
    if (head.size() + payload.size() != options_.payload_bytes) {
        ++stats_.bad_length;
        return;
    }
    const std::uint64_t n = options_.frames_per_block;
    if (!origin_set_) {
        origin_set_ = true;
        origin_ = index - index % n;
        handed_up_to_ = origin_;
    }
    if (index < handed_up_to_) {
        ++stats_.too_late;
        return;
    }
    const std::uint64_t first = origin_ + (index - origin_) / n * n;
    Block* b = nullptr;
    for (Block* o : open_) {
        if (o->first_index == first) {
            b = o;
            break;
        }
    }
    if (b == nullptr && (b = open_block(first)) == nullptr) {
        ++stats_.ring_full;
        return;
    }
    const std::uint64_t bit = (index - first) * options_.threads + thread;
    std::uint64_t& word = b->present[bit / 64];
    const std::uint64_t mask = std::uint64_t{1} << (bit % 64);
    if (word & mask) {
        ++stats_.duplicates;
        return;
    }
    // The copy first: a copy that throws leaves the slot absent.
    std::uint8_t* dst = b->data + bit * options_.payload_bytes;
    if (!head.empty()) {
        memory_.copy_in(dst, head.data(), head.size());
        dst += head.size();
    }
    if (payload.empty()) {
        // All of it was in the head: nothing more to copy.
    } else if (payload_device != nullptr) {
        memory_.copy_in_device(dst, payload.data(), payload.size(), *payload_device);
    } else if (held) {
        memory_.copy_in_held(dst, payload.data(), payload.size());
    } else {
        memory_.copy_in(dst, payload.data(), payload.size());
    }
    word |= mask;
    ++b->present_count;
    ++stats_.placed;
    // Blocks that late frames can no longer reach go to the consumer, in order.
    while (!open_.empty() && open_.front()->first_index + n + options_.lateness <= index) {
        hand_out_front();
    }
}

void BlockRing::flush() {
    while (!open_.empty()) {
        hand_out_front();
    }
    if (!closing_.empty()) {
        synchronize_copies();
    }
    {
        const std::lock_guard lock(mu_);
        flushed_ = true;
    }
    ready_cv_.notify_all();
}

void BlockRing::abandon() {
    for (const auto* list : {&open_, &closing_}) {
        for (Block* b : *list) {
            stats_.abandoned += b->present_count;
        }
    }
    {
        const std::lock_guard lock(mu_);
        for (auto* list : {&open_, &closing_}) {
            for (Block* b : *list) {
                free_.push_back(b);
            }
        }
        flushed_ = true;
    }
    open_.clear();
    closing_.clear();
    ready_cv_.notify_all();
}

const Block* BlockRing::acquire(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    ready_cv_.wait_for(lock, timeout, [&] { return !ready_.empty() || flushed_; });
    if (ready_.empty()) {
        return nullptr;
    }
    Block* b = ready_.front();
    ready_.pop_front();
    return b;
}

void BlockRing::release(const Block* block) {
    const std::lock_guard lock(mu_);
    for (auto& s : storage_) {
        if (s.get() == block) {
            free_.push_back(s.get());
            return;
        }
    }
    throw std::invalid_argument("block ring: release of a block it does not own");
}

}  // namespace ibvcap
