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

// Reads payload slots in GPU memory for the writers (their disk threads):
// each batch becomes a few strided copies (plan_strided_copies) and one wait,
// on a stream of the calling thread's own (created at its first batch), so
// disk threads never wait for each other. Before a batch the caller flushes
// the NIC's writes (flush_nic_writes): cudaDeviceFlushGPUDirectRDMAWrites
// when the GPU's write ordering is below "owner" (gpu_logic.hpp,
// needs_rdma_write_flush); nothing where the GPU orders them itself.
// Copies in cuda_copies.cpp; the flush in cuda_ordering.cpp.
class SlotReader final : public DeviceMemory {
  public:
    explicit SlotReader(int gpu);
    void flush_nic_writes() const override;
    void copy_to_host(std::span<const Copy> copies) const override;
    bool pin_host_buffer(void* buffer, std::size_t bytes) const override;
    void unpin_host_buffer(void* buffer) const override;

  private:
    // The cudaMalloc allocation holding a device address.
    AddressRange allocation_of(const void* p) const;
    cudaStream_t thread_stream() const;

    int gpu_;
    bool flush_ = true;
    std::size_t max_pitch_ = 0;
    PFN_cuMemGetAddressRange_v3020 address_range_ = nullptr;
    StickyDeviceError sticky_;
    mutable std::mutex mu_;  // guards streams_ (a lookup per batch)
    mutable std::vector<std::pair<std::thread::id, StreamPtr>> streams_;
};

}  // namespace ibvcap::gpu::detail
