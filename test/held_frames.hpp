// Frames held in their receive slots, for writer tests: an owner that
// records what comes back, device memory that counts its reads (as a GPU
// below "owner" write ordering must be read), and a frame in a slot.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "lib/core/frame.hpp"

namespace ibvcap::test {

using ByteVec = std::vector<std::uint8_t>;

class RecordingOwner final : public SlotOwner {
  public:
    void release(std::span<const std::uint64_t> tokens) override {
        const std::lock_guard lock(mu_);
        released_.insert(released_.end(), tokens.begin(), tokens.end());
    }
    std::vector<std::uint64_t> released() const {
        const std::lock_guard lock(mu_);
        return released_;
    }

  private:
    mutable std::mutex mu_;
    std::vector<std::uint64_t> released_;
};

// Device memory as a GPU below "owner" write ordering would be read: every
// batch must follow a flush on the reading thread; copies should land in
// page-locked (pinned) buffers.
class CountingDevice final : public DeviceMemory {
  public:
    void flush_nic_writes() const override {
        if (std::this_thread::get_id() == forbidden) {
            ++on_forbidden_thread;
        }
        const std::lock_guard lock(mu_);
        ++flushes;
        flushed_[std::this_thread::get_id()] = true;
    }
    void copy_to_host(std::span<const Copy> batch) const override {
        if (std::this_thread::get_id() == forbidden) {
            ++on_forbidden_thread;
        }
        const std::lock_guard lock(mu_);
        if (!std::exchange(flushed_[std::this_thread::get_id()], false)) {
            ++unflushed_batches;
        }
        ++batches;
        for (const auto& c : batch) {
            const auto* d = static_cast<const std::uint8_t*>(c.dst);
            const bool pinned = std::any_of(pins_.begin(), pins_.end(), [&](const auto& p) {
                return d >= p.first && d + c.bytes <= p.first + p.second;
            });
            if (!pinned) {
                ++unpinned_copies;
            }
            std::memcpy(c.dst, c.src, c.bytes);
            ++copies;
        }
    }
    bool pin_host_buffer(void* buffer, std::size_t bytes) const override {
        const std::lock_guard lock(mu_);
        pins_.emplace_back(static_cast<const std::uint8_t*>(buffer), bytes);
        return true;
    }
    void unpin_host_buffer(void* buffer) const override {
        const std::lock_guard lock(mu_);
        const auto before = pins_.size();
        std::erase_if(pins_, [&](const auto& p) { return p.first == buffer; });
        unpins += static_cast<int>(before - pins_.size());
    }
    std::size_t pinned_now() const {
        const std::lock_guard lock(mu_);
        return pins_.size();
    }
    mutable std::atomic<int> batches{0};
    mutable std::atomic<int> copies{0};
    mutable std::atomic<int> flushes{0};
    mutable std::atomic<int> unflushed_batches{0};
    mutable std::atomic<int> unpinned_copies{0};
    mutable std::atomic<int> unpins{0};
    mutable std::atomic<int> on_forbidden_thread{0};
    std::thread::id forbidden = std::this_thread::get_id();  // the producer's

  private:
    mutable std::mutex mu_;
    mutable std::map<std::thread::id, bool> flushed_;
    mutable std::vector<std::pair<const std::uint8_t*, std::size_t>> pins_;
};

struct SlotFrame {
    ByteVec head;
    ByteVec tail;
    FrameLease lease;
    Frame frame(SlotOwner* owner, std::uint64_t token, const DeviceMemory* device, bool allowed) {
        lease = FrameLease{.owner = owner, .token = token, .allowed = allowed};
        Frame f;
        f.head = Bytes(head);
        f.tail = Bytes(tail);
        f.wire_bytes = static_cast<std::uint32_t>(head.size() + tail.size());
        f.timestamp_ns = 1'767'225'600'000'000'000ull + token;
        f.lease = &lease;
        f.tail_device = device;
        return f;
    }
};

}  // namespace ibvcap::test
