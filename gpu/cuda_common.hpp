// Private to gpu/'s CUDA build: the helpers its parts share (errors, RAII
// owners of CUDA objects, device selection, the driver API entry points) and
// the writers' slot reader, which the payload memory owns (cuda_memory.cpp),
// the copies use (cuda_copies.cpp) and the flush code orders
// (cuda_ordering.cpp).
//
// The driver API (cuMemGetHandleForAddressRange, device attributes the
// runtime does not expose) is reached through cudaGetDriverEntryPointByVersion
// rather than by linking libcuda: the CUDA runtime loads the driver itself,
// so ibvcap and its tests still start on hosts without the NVIDIA driver (CI)
// and say "no usable GPU" instead of failing to load libcuda.so.1.
#pragma once

#include <cuda.h>  // driver API types and enums only (nothing is linked from libcuda)
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "gpu/gpu.hpp"
#include "gpu/gpu_logic.hpp"
#include "gpu/kernels.hpp"
#include "lib/core/device_reads.hpp"

namespace ibvcap::gpu::detail {

// ---- error handling and RAII --------------------------------------------------

std::string cuda_error(cudaError_t err);
// Throws std::runtime_error "<what>: <CUDA error>" unless err is cudaSuccess
// (clearing a non-sticky error first, so that later calls start clean).
void check(cudaError_t err, std::string_view what);

struct DeviceFree {
    int gpu = 0;
    void operator()(void* p) const noexcept {
        cudaSetDevice(gpu);
        cudaFree(p);
    }
};
struct PinnedFree {
    void operator()(void* p) const noexcept { cudaFreeHost(p); }
};
struct StreamDestroy {
    void operator()(CUstream_st* s) const noexcept { cudaStreamDestroy(s); }
};
struct EventDestroy {
    void operator()(CUevent_st* e) const noexcept { cudaEventDestroy(e); }
};
using DevicePtr = std::unique_ptr<void, DeviceFree>;
using PinnedPtr = std::unique_ptr<void, PinnedFree>;
using StreamPtr = std::unique_ptr<CUstream_st, StreamDestroy>;
using EventPtr = std::unique_ptr<CUevent_st, EventDestroy>;

DevicePtr device_alloc(int gpu, std::size_t bytes, std::string_view what);
PinnedPtr pinned_alloc(std::size_t bytes, std::string_view what);
// Page-locked host memory the device can read through a device pointer of
// its own (cudaHostAllocMapped; cudaHostGetDevicePointer gives the device's
// address for it, the same one under unified addressing).
PinnedPtr mapped_alloc(std::size_t bytes, std::string_view what, std::uint8_t*& device_view);
StreamPtr make_stream();  // non-blocking
// Non-blocking, at the device's greatest priority (cudaDeviceGetStreamPriorityRange):
// its work goes first among what is queued, though it does not preempt
// kernels already running (cuda_runtime_api.h, cudaStreamCreateWithPriority).
StreamPtr make_priority_stream();
EventPtr make_event();  // without timing

inline std::uint8_t* bytes_of(const PinnedPtr& p) {
    return static_cast<std::uint8_t*>(p.get());
}

// The staging payload slots (page-locked, mapped): a ring's gather may read
// a held slot in place through its device address. Written when a staging
// region is made or freed (setup, teardown), read per copy on the copy
// thread; a handful of entries.
class MappedRanges {
  public:
    void add(const std::uint8_t* host, std::size_t bytes, const std::uint8_t* device);
    void remove(const void* host);
    // The device address of [p, p + bytes), or nullptr when it is not mapped.
    const std::uint8_t* device_address(const std::uint8_t* p, std::size_t bytes) const;

  private:
    struct Range {
        const std::uint8_t* host;
        std::size_t bytes;
        const std::uint8_t* device;
    };
    mutable std::mutex mu_;
    std::vector<Range> ranges_;
};
MappedRanges& mapped_ranges();

// ---- devices ------------------------------------------------------------------

// Validates `id` as probe_gpu does and makes it the calling thread's device.
void select_gpu(int id);

// A driver API function, or nullptr when the driver does not have it.
template <class Fn>
Fn driver_entry(const char* symbol, unsigned version) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion(symbol, &fn, version, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess || fn == nullptr) {
        cudaGetLastError();
        return nullptr;
    }
    Fn typed = nullptr;
    static_assert(sizeof(typed) == sizeof(fn));
    std::memcpy(&typed, &fn, sizeof(typed));  // object → function pointer, without a cast
    return typed;
}

std::string driver_error(CUresult result);
std::optional<int> driver_attribute(int gpu, CUdevice_attribute attribute);
std::optional<int> runtime_attribute_value(int gpu, cudaDeviceAttr attribute);
bool runtime_attribute(int gpu, cudaDeviceAttr attribute);
std::string pci_bus_id(int gpu);

// ---- the writers' reads of payload slots (DeviceMemory) ---------------------------

// The allocations of payload slots a GPU payload memory made (the whole
// cudaMalloc of each region), shared by its SlotReader, which bounds strided
// copies with them, and by the allocations' deleters, which take them out.
class SlotAllocations {
  public:
    void add(const void* begin, std::size_t bytes);
    void remove(const void* begin);
    // The allocation holding `p`; [p, p] (no merging) when it is in none.
    AddressRange range_of(const void* p) const;

  private:
    mutable std::mutex mu_;
    AllocationMap map_;
};

// Frees payload slots (cudaFree on their GPU) and forgets their allocation.
struct SlotPagesFree {
    int gpu = 0;
    std::shared_ptr<SlotAllocations> allocations;
    void operator()(void* p) const noexcept {
        allocations->remove(p);
        DeviceFree{gpu}(p);
    }
};

// How the NIC's writes are made visible before a read (cuda_ordering.cpp).
struct FlushPath {
    RdmaFlush flush = RdmaFlush::none;
    PFN_cuStreamBatchMemOp_v11070 batch_mem_op = nullptr;  // for RdmaFlush::memops
};

// The GPU reaches the CPU over NVLink-C2C (is_c2c_platform: an aarch64 build
// and cudaDevAttrHostNativeAtomicSupported).
bool c2c_gpu(int gpu);
// plan_rdma_write_flush from the GPU's attributes; the MemOps flush is
// refused too when the driver has no cuStreamBatchMemOp.
RdmaWriteOrdering gpu_write_ordering(int gpu);
FlushPath flush_path(int gpu);

// Reads payload slots in GPU memory for the writers (their disk threads), on
// a stream of the calling thread's own (created at its first batch), so disk
// threads never wait for each other.
// - Into a buffer pin_host_buffer registered and mapped (the writers' staging
//   buffer): one gather kernel per kSlotReadGatherCopies copies
//   (lib/core/device_reads.hpp), whatever the layout of the slots, then one wait.
// - Anywhere else (the pin failed): a few strided copies
//   (plan_strided_copies) bounded by the regions' own allocations, then one
//   wait.
// Before a batch the caller flushes the NIC's writes (flush_nic_writes), as
// plan_rdma_write_flush (gpu_logic.hpp) decides: cudaDeviceFlushGPUDirectRDMAWrites,
// or CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES on the reading stream, or nothing
// where the GPU orders the writes itself. Copies in cuda_copies.cpp; the
// flush in cuda_ordering.cpp.
class SlotReader final : public DeviceMemory {
  public:
    explicit SlotReader(int gpu);
    void flush_nic_writes() const override;
    void copy_to_host(std::span<const Copy> copies) const override;
    bool pin_host_buffer(void* buffer, std::size_t bytes) const override;
    void unpin_host_buffer(void* buffer) const override;

    // The flush for work on `stream` (the block rings' gather, on their own
    // stream): the MemOps flush goes on that stream.
    void flush_nic_writes_on(cudaStream_t stream) const;
    const std::shared_ptr<SlotAllocations>& allocations() const { return allocations_; }
    // Copy calls made by copy_to_host: gather launches plus strided copies.
    std::uint64_t copy_calls() const { return copy_calls_.load(std::memory_order_relaxed); }

  private:
    // A buffer pin_host_buffer registered: `device` is its address for the
    // GPU (cudaHostGetDevicePointer), nullptr when it could not be mapped.
    struct Pinned {
        const std::uint8_t* host = nullptr;
        std::size_t bytes = 0;
        std::uint8_t* device = nullptr;
    };
    // What each thread that reads has of its own.
    struct ThreadState {
        std::thread::id id;
        StreamPtr stream;
        PinnedPtr list;                     // kSlotReadGatherCopies GatherCopy, mapped
        GatherCopy* list_device = nullptr;  // the list's device address
    };
    ThreadState& thread_state() const;
    // The pinned, mapped buffer that holds every copy's destination, if any.
    std::optional<Pinned> mapped_destination(std::span<const Copy> copies) const;
    void gather(ThreadState& t, const Pinned& into, std::span<const Copy> copies) const;
    void strided(ThreadState& t, std::span<const Copy> copies) const;
    void flush(cudaStream_t stream) const;

    int gpu_;
    FlushPath flush_;
    std::size_t max_pitch_ = 0;
    std::shared_ptr<SlotAllocations> allocations_ = std::make_shared<SlotAllocations>();
    StickyDeviceError sticky_;
    mutable std::atomic<std::uint64_t> copy_calls_{0};
    mutable std::mutex mu_;  // guards threads_ and pinned_ (a lookup per batch)
    mutable std::vector<std::unique_ptr<ThreadState>> threads_;
    mutable std::vector<Pinned> pinned_;
};

}  // namespace ibvcap::gpu::detail
