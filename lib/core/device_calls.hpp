// What the GPU stand-ins (StandinDevicePayloadMemory, host block memory with
// a log) record of the device calls the GPU build would issue in their place:
// one entry per call the CUDA code in gpu/gpu_cuda.cpp makes for the same
// operation (a stream and staging at setup, cudaMalloc per block, one gather
// or cudaMemcpy2DAsync batch per copy call, cudaStreamSynchronize,
// cudaDeviceFlushGPUDirectRDMAWrites, cudaHostRegister), with the thread that
// made it. Tests read it to hold the data path to its promises: no device
// call on the poll thread, a bounded number of calls per batch, and every
// read of payload slots preceded by a flush of the NIC's writes on the
// reading thread (lib/core/frame.hpp, DeviceMemory::flush_nic_writes).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace ibvcap {

class DeviceCallLog {
  public:
    enum class Call : std::uint8_t {
        setup,        // streams, events, pinned staging (a BlockMemory's construction)
        allocate,     // cudaMalloc of a ring block
        flush,        // cudaDeviceFlushGPUDirectRDMAWrites
        copy,         // one batch of copies: a gather kernel or a few 2-D copies
        synchronize,  // cudaStreamSynchronize
        pin,          // cudaHostRegister / cudaHostUnregister
        count_
    };

    void record(Call call, std::size_t copies = 0, std::uint64_t bytes = 0) {
        calls_[static_cast<std::size_t>(call)].fetch_add(1, std::memory_order_relaxed);
        copies_.fetch_add(copies, std::memory_order_relaxed);
        bytes_.fetch_add(bytes, std::memory_order_relaxed);
        if (watching_.load(std::memory_order_acquire) &&
            std::this_thread::get_id() == watched_id()) {
            on_watched_.fetch_add(1, std::memory_order_relaxed);
        }
    }
    // The calling thread flushed the NIC's writes.
    void flushed() { state(true); }
    // The calling thread reads payload slots the NIC wrote: a read with no
    // flush on this thread since its previous read is counted.
    void read() {
        if (!state(false)) {
            unflushed_reads_.fetch_add(1, std::memory_order_relaxed);
        }
    }
    // From now on, calls made on `thread` are counted in on_watched() (a
    // test names its poll thread).
    void watch(std::thread::id thread) {
        const std::lock_guard lock(mu_);
        watched_ = thread;
        watching_.store(true, std::memory_order_release);
    }

    std::uint64_t calls(Call call) const {
        return calls_[static_cast<std::size_t>(call)].load(std::memory_order_relaxed);
    }
    std::uint64_t total() const {
        std::uint64_t n = 0;
        for (const auto& c : calls_) {
            n += c.load(std::memory_order_relaxed);
        }
        return n;
    }
    std::uint64_t copies() const { return copies_.load(std::memory_order_relaxed); }
    std::uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
    std::uint64_t on_watched() const { return on_watched_.load(std::memory_order_relaxed); }
    std::uint64_t unflushed_reads() const {
        return unflushed_reads_.load(std::memory_order_relaxed);
    }

  private:
    std::thread::id watched_id() const {
        const std::lock_guard lock(mu_);
        return watched_;
    }
    // Sets this thread's "flushed since its last read" to `flushed`; returns
    // what it was.
    bool state(bool flushed) {
        const std::lock_guard lock(mu_);
        const auto self = std::this_thread::get_id();
        for (auto& [id, f] : threads_) {
            if (id == self) {
                return std::exchange(f, flushed);
            }
        }
        threads_.emplace_back(self, flushed);
        return false;
    }

    std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(Call::count_)> calls_{};
    std::atomic<std::uint64_t> copies_{0};
    std::atomic<std::uint64_t> bytes_{0};
    std::atomic<std::uint64_t> on_watched_{0};
    std::atomic<std::uint64_t> unflushed_reads_{0};
    std::atomic<bool> watching_{false};
    mutable std::mutex mu_;
    std::thread::id watched_;
    std::vector<std::pair<std::thread::id, bool>> threads_;
};

}  // namespace ibvcap
