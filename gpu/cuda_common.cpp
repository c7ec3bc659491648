// The GPU path's shared CUDA helpers (cuda_common.hpp) and the device-level
// entry points: GPU probe, plain copies.
#include "gpu/cuda_common.hpp"

#include <fmt/format.h>

#include <array>
#include <stdexcept>

namespace ibvcap::gpu {

namespace fs = std::filesystem;

namespace detail {

// ---- error handling and RAII ------------------------------------------------

std::string cuda_error(cudaError_t err) {
    return fmt::format("{} ({})", cudaGetErrorString(err), cudaGetErrorName(err));
}

void check(cudaError_t err, std::string_view what) {
    if (err != cudaSuccess) {
        cudaGetLastError();  // clear a non-sticky error so later calls start clean
        throw std::runtime_error(fmt::format("{}: {}", what, cuda_error(err)));
    }
}

DevicePtr device_alloc(int gpu, std::size_t bytes, std::string_view what) {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes),
          fmt::format("cudaMalloc of {} bytes ({}) on GPU {}", bytes, what, gpu));
    return DevicePtr(p, DeviceFree{gpu});
}

PinnedPtr pinned_alloc(std::size_t bytes, std::string_view what) {
    void* p = nullptr;
    check(cudaHostAlloc(&p, bytes, cudaHostAllocDefault),
          fmt::format("cudaHostAlloc of {} bytes ({})", bytes, what));
    return PinnedPtr(p);
}

PinnedPtr mapped_alloc(std::size_t bytes, std::string_view what, std::uint8_t*& device_view) {
    void* p = nullptr;
    check(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable),
          fmt::format("cudaHostAlloc of {} bytes ({})", bytes, what));
    PinnedPtr owned(p);
    void* d = nullptr;
    check(cudaHostGetDevicePointer(&d, p, 0), fmt::format("cudaHostGetDevicePointer ({})", what));
    device_view = static_cast<std::uint8_t*>(d);
    return owned;
}

void MappedRanges::add(const std::uint8_t* host, std::size_t bytes, const std::uint8_t* device) {
    const std::lock_guard lock(mu_);
    ranges_.push_back({host, bytes, device});
}

void MappedRanges::remove(const void* host) {
    const std::lock_guard lock(mu_);
    std::erase_if(ranges_, [&](const Range& r) { return r.host == host; });
}

const std::uint8_t* MappedRanges::device_address(const std::uint8_t* p, std::size_t bytes) const {
    const std::lock_guard lock(mu_);
    for (const Range& r : ranges_) {
        if (p >= r.host && bytes <= r.bytes &&
            p - r.host <= static_cast<std::ptrdiff_t>(r.bytes - bytes)) {
            return r.device + (p - r.host);
        }
    }
    return nullptr;
}

MappedRanges& mapped_ranges() {
    static MappedRanges ranges;
    return ranges;
}

StreamPtr make_stream() {
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return StreamPtr(s);
}

StreamPtr make_priority_stream() {
    int least = 0;
    int greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest),
          "cudaStreamCreateWithPriority");
    return StreamPtr(s);
}

EventPtr make_event() {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return EventPtr(e);
}

// ---- devices ----------------------------------------------------------------

// gpu_logic.hpp spells CUDA's enum values without the CUDA headers.
static_assert(kRdmaWritesOrderingNone == cudaGPUDirectRDMAWritesOrderingNone);
static_assert(kRdmaWritesOrderingOwner == cudaGPUDirectRDMAWritesOrderingOwner);
static_assert(kRdmaWritesOrderingAllDevices == cudaGPUDirectRDMAWritesOrderingAllDevices);
static_assert(kRdmaFlushOptionHost == cudaFlushGPUDirectRDMAWritesOptionHost);
static_assert(kRdmaFlushOptionMemOps == cudaFlushGPUDirectRDMAWritesOptionMemOps);

// Validates `id` as probe_gpu does and makes it the calling thread's device.
void select_gpu(int id) {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        cudaGetLastError();
        int driver = 0;
        int runtime = 0;
        cudaDriverGetVersion(&driver);
        cudaRuntimeGetVersion(&runtime);
        throw std::runtime_error(
            no_gpu_message(id, cudaGetErrorString(err), driver_mismatch_message(driver, runtime)));
    }
    if (count <= 0 || id < 0 || id >= count) {
        throw std::runtime_error(gpu_id_message(id, count));
    }
    if (const cudaError_t set = cudaSetDevice(id); set != cudaSuccess) {
        cudaGetLastError();
        throw std::runtime_error(no_gpu_message(id, cudaGetErrorString(set)));
    }
}

std::string driver_error(CUresult result) {
    const char* name = nullptr;
    if (const auto get_name = driver_entry<PFN_cuGetErrorName_v6000>("cuGetErrorName", 6000);
        get_name != nullptr && get_name(result, &name) == CUDA_SUCCESS && name != nullptr) {
        return name;
    }
    return fmt::format("CUresult {}", static_cast<int>(result));
}

std::optional<int> driver_attribute(int gpu, CUdevice_attribute attribute) {
    const auto get_device = driver_entry<PFN_cuDeviceGet_v2000>("cuDeviceGet", 2000);
    const auto get_attribute =
        driver_entry<PFN_cuDeviceGetAttribute_v2000>("cuDeviceGetAttribute", 2000);
    CUdevice device{};
    int value = 0;
    if (get_device == nullptr || get_attribute == nullptr ||
        get_device(&device, gpu) != CUDA_SUCCESS ||
        get_attribute(&value, attribute, device) != CUDA_SUCCESS) {
        return std::nullopt;
    }
    return value;
}

std::optional<int> runtime_attribute_value(int gpu, cudaDeviceAttr attribute) {
    int value = 0;
    if (cudaDeviceGetAttribute(&value, attribute, gpu) != cudaSuccess) {
        cudaGetLastError();
        return std::nullopt;
    }
    return value;
}

bool runtime_attribute(int gpu, cudaDeviceAttr attribute) {
    return runtime_attribute_value(gpu, attribute).value_or(0) != 0;
}

std::string pci_bus_id(int gpu) {
    std::array<char, 64> text{};
    if (cudaDeviceGetPCIBusId(text.data(), static_cast<int>(text.size()), gpu) == cudaSuccess) {
        if (const auto address = normalize_pci_address(text.data())) {
            return *address;
        }
    }
    cudaGetLastError();
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, gpu), "cudaGetDeviceProperties");
    return fmt::format("{:04x}:{:02x}:{:02x}.0", static_cast<unsigned>(prop.pciDomainID),
                       static_cast<unsigned>(prop.pciBusID),
                       static_cast<unsigned>(prop.pciDeviceID));
}

}  // namespace detail

using namespace detail;

// ---- public -------------------------------------------------------------------

bool gpu_available() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return count > 0;
}

GpuInfo probe_gpu(int id, const std::string& nic, const fs::path& sysfs_root) {
    select_gpu(id);
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, id), fmt::format("--gpu {}: cudaGetDeviceProperties", id));
    GpuInfo info;
    info.id = id;
    info.name = prop.name;
    info.pci_bus_id = pci_bus_id(id);
    info.gpudirect_rdma = runtime_attribute(id, cudaDevAttrGPUDirectRDMASupported);
    info.dmabuf = driver_attribute(id, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED).value_or(0) != 0;
    info.peermem_loaded = peermem_loaded(sysfs_root);
    if (const auto loc = locate_pci_function(sysfs_root, info.pci_bus_id)) {
        info.numa_node = loc->numa_node;
    }
    info.nic_relation = nic_relation(sysfs_root, info.pci_bus_id, nic);
    info.rdma_writes_ordering =
        runtime_attribute_value(id, cudaDevAttrGPUDirectRDMAWritesOrdering).value_or(0);
    info.rdma_flush_options =
        runtime_attribute_value(id, cudaDevAttrGPUDirectRDMAFlushWritesOptions).value_or(0);
    info.c2c = c2c_gpu(id);
    info.bar1_bytes = bar_size(sysfs_root, info.pci_bus_id, 1).value_or(0);
    info.iommu = iommu_mode(sysfs_root, info.pci_bus_id);
    info.max_pitch = static_cast<std::size_t>(
        std::max(0, runtime_attribute_value(id, cudaDevAttrMaxPitch).value_or(0)));
    cudaDriverGetVersion(&info.driver_version);
    cudaRuntimeGetVersion(&info.runtime_version);
    return info;
}

void copy_to_host(void* host_dst, const void* device_src, std::size_t bytes) {
    check(cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost),
          "cudaMemcpy (device to host)");
}

void copy_to_device(void* device_dst, const void* host_src, std::size_t bytes) {
    check(cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice),
          "cudaMemcpy (host to device)");
    // From pageable memory cudaMemcpy may return before the DMA has landed:
    // wait, so that work on any stream sees the bytes.
    check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize (host to device)");
}

}  // namespace ibvcap::gpu
