// Where the verbs engine's payload slots live (SGE1 of each receive WR, or
// the only SGE without the split): the PayloadMemory interface, host memory
// (the default), and the host stand-in for GPU memory that --gpu-standin and
// the tests use. The GPU build's device memory (gpu/) implements the same
// interface.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "lib/core/device_calls.hpp"
#include "lib/core/frame.hpp"
#include "lib/sources/verbs/seam.hpp"

namespace ibvcap {

// Where payload slots live. The default is host memory; the GPU path plugs in
// device memory registered for GPUDirect RDMA (issue: GPU payload path).
class PayloadMemory {
  public:
    virtual ~PayloadMemory() = default;
    // Memory for `bytes` bytes the NIC can write, registered on `device`.
    // `host_view` is where the CPU can read it (nullptr for GPU memory).
    struct Region {
        std::uint64_t nic_address = 0;  // address the SGEs carry
        std::uint8_t* host_view = nullptr;
        // For memory the CPU cannot read (host_view null): the region's start
        // as the device sees it, and how to copy out of it. Frames then carry
        // their payload as device memory (Frame::tail_device).
        std::uint8_t* device_view = nullptr;
        const DeviceMemory* device = nullptr;
        // How the NIC reaches it, for the report's resource accounting
        // (docs/observability.md §5): "host" (ibv_reg_mr of host memory),
        // "dma-buf" (ibv_reg_dmabuf_mr of GPU memory), "peermem" (ibv_reg_mr
        // of GPU memory through nvidia-peermem), "staging" (ibv_reg_mr of
        // pinned host memory standing between the NIC and the GPU); and the
        // bytes registered (0: the bytes asked for).
        std::string kind = "host";
        std::uint64_t registered_bytes = 0;
        // Declared before `mr`, so destroyed after it: the registration
        // goes (ibv_dereg_mr) before the memory it covers is freed.
        std::shared_ptr<void> owner;  // keeps the allocation alive
        std::unique_ptr<verbs::MemoryRegion> mr;
    };
    virtual Region allocate(verbs::Device& device, std::size_t bytes) = 0;
    virtual std::string describe() const = 0;
};
std::unique_ptr<PayloadMemory> make_host_payload_memory();

// The stand-in for GPU payload memory (tests, --gpu-standin): host memory
// that the engine and everything after it reach only as device memory (no
// host view), so the path that GPUDirect RDMA takes — frames held, payload
// copied out in batches on the consumers' threads — runs without a GPU. It
// behaves as a GPU whose write ordering is below "owner", so every read needs
// a flush: cudaGPUDirectRDMAWritesOrderingNone in the CUDA headers'
// driver_types.h, which GPUs below compute capability 9.0 report (NCCL
// src/graph/paths.cc flushes for them; docs/gpu.md). That is the case that
// needs the most of the code. It logs each call the
// GPU build would make (lib/core/device_calls.hpp); the block memory that
// --gpu-standin pairs with it (make_host_block_memory(&log())) logs into the
// same log.
class StandinDevicePayloadMemory final : public PayloadMemory, public DeviceMemory {
  public:
    Region allocate(verbs::Device& device, std::size_t bytes) override;
    std::string describe() const override;
    void flush_nic_writes() const override;
    void copy_to_host(std::span<const Copy> copies) const override;
    void copy_gathered(std::span<const Copy> copies) const override;
    bool pin_host_buffer(void* buffer, std::size_t bytes) const override;
    void unpin_host_buffer(void* buffer) const override;
    // Calls of copy_to_host, and the copies in them (any thread).
    std::uint64_t batches() const { return batches_.load(); }
    std::uint64_t copies() const { return copies_.load(); }
    DeviceCallLog& log() const { return log_; }
    // Tests: the batch after `batches` successful ones fails as a device
    // error would (a sticky CUDA error). Calls that reached the "device"
    // after that are device_calls_after_fault() (0 when the error sticks).
    void fail_after(std::uint64_t batches) { fail_after_ = batches; }
    std::uint64_t device_calls_after_fault() const { return after_fault_.load(); }
    // Tests: pin_host_buffer fails (RLIMIT_MEMLOCK), so copies take the
    // strided path, counted as the worst case: one call per copy.
    void refuse_pins() { refuse_pins_ = true; }
    // Buffers pinned now (pin_host_buffer without its unpin).
    std::size_t pinned_buffers() const;

  private:
    // Reads the copies as `calls` copy calls and one synchronize.
    void read(std::span<const Copy> copies, std::size_t calls) const;
    // Whether every copy lands in one pinned (mapped) buffer: then the GPU
    // build gathers (lib/core/device_reads.hpp).
    bool lands_in_pinned(std::span<const Copy> copies) const;

    bool refuse_pins_ = false;
    mutable std::mutex pins_mu_;
    mutable std::vector<std::pair<const std::uint8_t*, std::size_t>> pinned_;
    mutable std::atomic<std::uint64_t> batches_{0};
    mutable std::atomic<std::uint64_t> copies_{0};
    std::uint64_t fail_after_ = ~std::uint64_t{0};
    mutable std::atomic<std::uint64_t> after_fault_{0};
    StickyDeviceError sticky_;
    mutable DeviceCallLog log_;
};

}  // namespace ibvcap
