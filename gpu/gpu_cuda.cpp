// The GPU payload path with CUDA: probe, block ring memory, payload memory
// for the verbs engine (dma-buf, then nvidia-peermem, then staging) and the
// host side of the example kernels.
//
// The driver API (cuMemGetHandleForAddressRange, device attributes the
// runtime does not expose) is reached through cudaGetDriverEntryPointByVersion
// rather than by linking libcuda: the CUDA runtime loads the driver itself,
// so ibvcap and its tests still start on hosts without the NVIDIA driver (CI)
// and say "no usable GPU" instead of failing to load libcuda.so.1.
#include <cuda.h>  // driver API types and enums only (nothing is linked from libcuda)
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <span>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "gpu/gpu.hpp"
#include "gpu/gpu_logic.hpp"
#include "gpu/kernels.hpp"

namespace ibvcap::gpu {

namespace fs = std::filesystem;

namespace {

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

// Page-locked host memory the device can read through a device pointer of
// its own (cudaHostAllocMapped; cudaHostGetDevicePointer gives the device's
// address for it, the same one under unified addressing).
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

// The staging payload slots (page-locked, mapped): a ring's gather may read
// a held slot in place through its device address. Written when a staging
// region is made or freed (setup, teardown), read per copy on the copy
// thread; a handful of entries.
class MappedRanges {
  public:
    void add(const std::uint8_t* host, std::size_t bytes, const std::uint8_t* device) {
        const std::lock_guard lock(mu_);
        ranges_.push_back({host, bytes, device});
    }
    void remove(const void* host) {
        const std::lock_guard lock(mu_);
        std::erase_if(ranges_, [&](const Range& r) { return r.host == host; });
    }
    // The device address of [p, p + bytes), or nullptr when it is not mapped.
    const std::uint8_t* device_address(const std::uint8_t* p, std::size_t bytes) const {
        const std::lock_guard lock(mu_);
        for (const Range& r : ranges_) {
            if (p >= r.host && bytes <= r.bytes &&
                p - r.host <= static_cast<std::ptrdiff_t>(r.bytes - bytes)) {
                return r.device + (p - r.host);
            }
        }
        return nullptr;
    }

  private:
    struct Range {
        const std::uint8_t* host;
        std::size_t bytes;
        const std::uint8_t* device;
    };
    mutable std::mutex mu_;
    std::vector<Range> ranges_;
};

MappedRanges& mapped_ranges() {
    static MappedRanges ranges;
    return ranges;
}

StreamPtr make_stream() {
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return StreamPtr(s);
}

EventPtr make_event() {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return EventPtr(e);
}

std::uint8_t* bytes_of(const PinnedPtr& p) {
    return static_cast<std::uint8_t*>(p.get());
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

const char* errno_name(int err) {
    switch (err) {
        case EOPNOTSUPP:
            return "EOPNOTSUPP";
        case EINVAL:
            return "EINVAL";
        case EFAULT:
            return "EFAULT";
        case ENOMEM:
            return "ENOMEM";
        case ENOSPC:
            return "ENOSPC";
        case EPERM:
            return "EPERM";
        case EACCES:
            return "EACCES";
        case ENOSYS:
            return "ENOSYS";
        case ENODEV:
            return "ENODEV";
        case EPROTONOSUPPORT:
            return "EPROTONOSUPPORT";
        default:
            return nullptr;
    }
}

// The errno of a system_error (the verbs layer's errors), 0 for anything else.
int errno_of(const std::exception& e) {
    if (const auto* se = dynamic_cast<const std::system_error*>(&e);
        se != nullptr && (se->code().category() == std::generic_category() ||
                          se->code().category() == std::system_category())) {
        return se->code().value();
    }
    return 0;
}

// "EOPNOTSUPP: <what>" for a system_error, what() for anything else.
std::string reason_of(const std::exception& e) {
    if (const auto* se = dynamic_cast<const std::system_error*>(&e)) {
        if (const char* name = errno_name(se->code().value());
            name != nullptr && se->code().category() == std::generic_category()) {
            return fmt::format("{}: {}", name, e.what());
        }
    }
    return e.what();
}

// ---- block ring memory --------------------------------------------------------

class DeviceBlockMemory final : public BlockMemory {
  public:
    explicit DeviceBlockMemory(int gpu) : gpu_(gpu) {
        select_gpu(gpu);
        stream_ = make_stream();
        for (auto& chunk : chunks_) {
            chunk.host = pinned_alloc(kChunkBytes, "block ring staging");
            chunk.done = make_event();
        }
        gather_host_ = mapped_alloc(kGatherCopies * sizeof(detail::GatherCopy),
                                    "block ring gather list", gather_device_);
        gather_.reserve(kGatherCopies);
    }
    ~DeviceBlockMemory() override {
        cudaSetDevice(gpu_);
        cudaStreamSynchronize(stream_.get());  // copies in flight still read the chunks
    }
    DeviceBlockMemory(const DeviceBlockMemory&) = delete;
    DeviceBlockMemory& operator=(const DeviceBlockMemory&) = delete;

    std::uint8_t* allocate(std::size_t bytes) override {
        check(cudaSetDevice(gpu_), "cudaSetDevice");
        DevicePtr p = device_alloc(gpu_, bytes, "ring block");
        // Zeroed on the copy stream and waited for: a plain cudaMemset (legacy
        // stream) would not be ordered before copies on this non-blocking
        // stream, and a consumer may touch the block on a stream of its own.
        check(cudaMemsetAsync(p.get(), 0, bytes, stream_.get()), "cudaMemsetAsync of a ring block");
        check(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize (ring block zeroing)");
        blocks_.push_back(std::move(p));
        block_ranges_.add(blocks_.back().get(), bytes);
        return static_cast<std::uint8_t*>(blocks_.back().get());
    }

    void copy_in(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) override {
        while (bytes > 0) {
            Chunk* chunk = &chunks_[current_];
            if (chunk->used == kChunkBytes) {
                chunk = &next_chunk();
            }
            const std::size_t n = std::min(bytes, kChunkBytes - chunk->used);
            std::uint8_t* stage = bytes_of(chunk->host) + chunk->used;
            std::memcpy(stage, src, n);
            // Adjacent in both, in the same block: one copy. Never across
            // blocks: two cudaMalloc blocks may be adjacent, and one copy over
            // both fails (gpu_logic.hpp, AddressRange).
            if (!pending_.extend(dst, stage, n)) {
                issue();
                pending_ = PendingCopy{dst, stage, n, block_ranges_.range_of(dst)};
            }
            chunk->used += n;
            if (pending_.bytes >= kIssueBytes) {
                issue();  // start the DMA while the rest of the block fills
            }
            dst += n;
            src += n;
            bytes -= n;
        }
    }

    // A held slot of the staging payload memory (page-locked and mapped) is
    // read in place by the batch's gather; any other host memory is staged.
    void copy_in_held(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) override {
        if (const std::uint8_t* mapped = mapped_ranges().device_address(src, bytes)) {
            queue_gather(dst, mapped, bytes);
        } else {
            copy_in(dst, src, bytes);
        }
    }

    // Device to device (payload slots in GPU memory): queued for the
    // batch's one gather kernel.
    void copy_in_device(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes,
                        const DeviceMemory& from) override {
        if (std::find(sources_.begin(), sources_.end(), &from) == sources_.end()) {
            sources_.push_back(&from);
        }
        queue_gather(dst, src, bytes);
    }

    void synchronize() override {
        issue();
        issue_gather();
        if (issued_) {
            check(cudaStreamSynchronize(stream_.get()),
                  "cudaStreamSynchronize (ring block copies)");
            issued_ = false;
        }
        for (auto& chunk : chunks_) {
            chunk.used = 0;
            chunk.in_flight = false;
        }
    }

    bool host_visible() const override { return false; }
    std::string describe() const override {
        return fmt::format(
            "GPU {} device memory (one gather kernel per batch; {} x {} MiB pinned staging for "
            "the rest)",
            gpu_, kChunks, kChunkBytes >> 20);
    }

  private:
    static constexpr std::size_t kChunks = 4;
    static constexpr std::size_t kChunkBytes = std::size_t{4} << 20;
    static constexpr std::size_t kIssueBytes = std::size_t{1} << 20;  // larger runs go at once
    // Copies one gather takes; more in one batch issue a gather and wait for
    // it before the list is refilled.
    static constexpr std::size_t kGatherCopies = 4096;
    static_assert(kGatherCopies <= detail::kMaxGatherCopies);

    struct Chunk {
        PinnedPtr host;
        EventPtr done;  // recorded after the last copy that reads this chunk
        std::size_t used = 0;
        bool in_flight = false;
    };
    void issue() {
        if (pending_.bytes == 0) {
            return;
        }
        check(cudaSetDevice(gpu_), "cudaSetDevice");
        check(cudaMemcpyAsync(pending_.dst, pending_.src, pending_.bytes, cudaMemcpyHostToDevice,
                              stream_.get()),
              "cudaMemcpyAsync (host to ring block)");
        pending_ = PendingCopy{};
        issued_ = true;
    }

    void queue_gather(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) {
        if (gather_.size() == kGatherCopies) {
            issue_gather();
            check(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize (gather list)");
        }
        gather_.push_back(detail::GatherCopy{dst, src, bytes});
    }

    // The queued copies as one kernel: the list goes to the mapped pinned
    // buffer the kernel reads (free: the last gather was waited for).
    void issue_gather() {
        if (gather_.empty()) {
            return;
        }
        // GPUDirect RDMA: the payload slots' completions were seen before
        // they were queued; make the NIC's writes visible to the kernel.
        for (const DeviceMemory* from : sources_) {
            from->flush_nic_writes();
        }
        sources_.clear();
        check(cudaSetDevice(gpu_), "cudaSetDevice");
        std::memcpy(gather_host_.get(), gather_.data(), gather_.size() * sizeof(gather_[0]));
        check(detail::launch_gather(reinterpret_cast<const detail::GatherCopy*>(gather_device_),
                                    static_cast<std::uint32_t>(gather_.size()), stream_.get()),
              "gather kernel (payload slots to ring blocks)");
        gather_.clear();
        issued_ = true;
    }

    // Hands the current chunk to the stream and moves to the next one, waiting
    // until the copies that still read it have finished.
    Chunk& next_chunk() {
        issue();
        Chunk& done = chunks_[current_];
        check(cudaEventRecord(done.done.get(), stream_.get()), "cudaEventRecord");
        done.in_flight = true;
        current_ = (current_ + 1) % kChunks;
        Chunk& next = chunks_[current_];
        if (next.in_flight) {
            check(cudaEventSynchronize(next.done.get()), "cudaEventSynchronize (staging)");
            next.in_flight = false;
        }
        next.used = 0;
        return next;
    }

    int gpu_;
    StreamPtr stream_;  // destroyed last
    std::array<Chunk, kChunks> chunks_;
    std::size_t current_ = 0;
    PendingCopy pending_;
    PinnedPtr gather_host_;
    std::uint8_t* gather_device_ = nullptr;
    std::vector<detail::GatherCopy> gather_;
    std::vector<const DeviceMemory*> sources_;  // device memories the queued gather reads
    bool issued_ = false;                       // copies issued since the last wait
    std::vector<DevicePtr> blocks_;
    AllocationMap block_ranges_;  // blocks_' address ranges
};

// Reads payload slots in GPU memory for the writers (their disk threads):
// each batch becomes a few strided copies (plan_strided_copies) and one wait,
// on a stream of the calling thread's own (created at its first batch), so
// disk threads never wait for each other. Before a batch the caller flushes
// the NIC's writes (flush_nic_writes): cudaDeviceFlushGPUDirectRDMAWrites
// when the GPU's write ordering is below "owner" (gpu_logic.hpp,
// needs_rdma_write_flush); nothing where the GPU orders them itself.
class SlotReader final : public DeviceMemory {
  public:
    explicit SlotReader(int gpu) : gpu_(gpu) {
        select_gpu(gpu);
        // As the start-up line says (describe_rdma_write_ordering): flushed
        // when the ordering is below owner and the GPU can flush; a GPU that
        // cannot is only warned about (a flush would fail every batch).
        flush_ =
            needs_rdma_write_flush(
                runtime_attribute_value(gpu, cudaDevAttrGPUDirectRDMAWritesOrdering).value_or(0)) &&
            can_flush_rdma_writes(
                runtime_attribute_value(gpu, cudaDevAttrGPUDirectRDMAFlushWritesOptions)
                    .value_or(0));
        max_pitch_ =
            static_cast<std::size_t>(runtime_attribute_value(gpu, cudaDevAttrMaxPitch).value_or(0));
        address_range_ = driver_entry<PFN_cuMemGetAddressRange_v3020>("cuMemGetAddressRange", 3020);
    }
    void flush_nic_writes() const override {
        if (!flush_) {
            return;
        }
        sticky_.run([&] {
            check(cudaSetDevice(gpu_), "cudaSetDevice");
            check(
                cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice,
                                                   cudaFlushGPUDirectRDMAWritesToOwner),
                "cudaDeviceFlushGPUDirectRDMAWrites");
        });
    }
    void copy_to_host(std::span<const Copy> copies) const override {
        sticky_.run([&] {
            check(cudaSetDevice(gpu_), "cudaSetDevice");
            cudaStream_t stream = thread_stream();
            // Each strided copy inside one allocation of payload slots: two
            // regions' cudaMalloc allocations may be adjacent (AddressRange).
            const RangeOf slots = [this](const void* p) { return allocation_of(p); };
            for (const StridedCopy& r : plan_strided_copies(copies, max_pitch_, slots)) {
                check(cudaMemcpy2DAsync(r.dst, r.dst_pitch, r.src, r.src_pitch, r.width, r.rows,
                                        cudaMemcpyDeviceToHost, stream),
                      "cudaMemcpy2DAsync (payload slots to the writer)");
            }
            check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (payload slots)");
        });
    }
    bool pin_host_buffer(void* buffer, std::size_t bytes) const override {
        if (sticky_.failed()) {
            return false;
        }
        // Not fatal: a buffer that cannot be page-locked (RLIMIT_MEMLOCK, an
        // old driver) is still copied into, through the driver's staging.
        if (cudaHostRegister(buffer, bytes, cudaHostRegisterPortable) == cudaSuccess) {
            return true;
        }
        cudaGetLastError();  // (clears the error: it is not sticky)
        return false;
    }
    void unpin_host_buffer(void* buffer) const override {
        if (cudaHostUnregister(buffer) != cudaSuccess) {
            cudaGetLastError();  // it was never registered (pin_host_buffer failed)
        }
    }

  private:
    // The cudaMalloc allocation holding a device address: cuMemGetAddressRange
    // gives the base and size of the allocation that contains a device pointer
    // (CUDA Driver API reference, Memory Management). When the driver cannot
    // say, the bound [p, p]: then every copy is its own, as merging needs a
    // known bound.
    AddressRange allocation_of(const void* p) const {
        CUdeviceptr base = 0;
        std::size_t size = 0;
        if (address_range_ == nullptr ||
            address_range_(&base, &size,
                           static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p))) !=
                CUDA_SUCCESS) {
            const auto a = reinterpret_cast<std::uintptr_t>(p);
            return AddressRange{a, a};  // holds nothing more: no merging
        }
        return AddressRange{static_cast<std::uintptr_t>(base),
                            static_cast<std::uintptr_t>(base) + size};
    }

    cudaStream_t thread_stream() const {
        const auto self = std::this_thread::get_id();
        const std::lock_guard lock(mu_);
        for (const auto& [id, stream] : streams_) {
            if (id == self) {
                return stream.get();
            }
        }
        streams_.emplace_back(self, make_stream());
        return streams_.back().second.get();
    }

    int gpu_;
    bool flush_ = true;
    std::size_t max_pitch_ = 0;
    PFN_cuMemGetAddressRange_v3020 address_range_ = nullptr;
    StickyDeviceError sticky_;
    mutable std::mutex mu_;  // guards streams_ (a lookup per batch)
    mutable std::vector<std::pair<std::thread::id, StreamPtr>> streams_;
};

// ---- payload memory for the verbs engine --------------------------------------

// A memory region that keeps its memory alive until it is deregistered: the
// engine's Region destroys `owner` before `mr`, and GPU memory must not be
// freed while the NIC still has it registered.
class OwningRegion final : public verbs::MemoryRegion {
  public:
    OwningRegion(std::shared_ptr<void> memory, std::unique_ptr<verbs::MemoryRegion> mr)
        : memory_(std::move(memory)), mr_(std::move(mr)) {}
    std::uint32_t lkey() const override { return mr_->lkey(); }

  private:
    std::shared_ptr<void> memory_;  // declared first: released after mr_
    std::unique_ptr<verbs::MemoryRegion> mr_;
};

class FdCloser {
  public:
    explicit FdCloser(int fd) : fd_(fd) {}
    ~FdCloser() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    FdCloser(const FdCloser&) = delete;
    FdCloser& operator=(const FdCloser&) = delete;

  private:
    int fd_;
};

class GpuPayloadMemory final : public PayloadMemory {
  public:
    GpuPayloadMemory(int gpu, Mode preferred, fs::path sysfs_root)
        : gpu_(gpu), next_(preferred), sysfs_root_(std::move(sysfs_root)) {
        select_gpu(gpu);
        rdma_ = runtime_attribute(gpu, cudaDevAttrGPUDirectRDMASupported);
        dmabuf_ = driver_attribute(gpu, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED);
        get_handle_ = driver_entry<PFN_cuMemGetHandleForAddressRange_v11070>(
            "cuMemGetHandleForAddressRange", 11070);
        set_attribute_ =
            driver_entry<PFN_cuPointerSetAttribute_v6000>("cuPointerSetAttribute", 6000);
        bar1_bytes_ = bar_size(sysfs_root_, pci_bus_id(gpu), 1).value_or(0);
        summary_ = fmt::format("GPU {} payload memory: nothing allocated yet (preferred: {})", gpu,
                               to_string(preferred));
    }

    Region allocate(verbs::Device& device, std::size_t bytes) override {
        if (bytes == 0) {
            throw std::invalid_argument("GPU payload memory: a region of 0 bytes");
        }
        const auto size = round_up(bytes, kGpuPageBytes);
        if (!size) {
            throw std::length_error("GPU payload memory: region size overflows");
        }
        check(cudaSetDevice(gpu_), "cudaSetDevice");
        Region region;
        GpuPages pages;
        const auto attempt = [&](Mode mode) -> std::optional<std::string> {
            switch (mode) {
                case Mode::dmabuf:
                    return try_dmabuf(device, *size, pages, region);
                case Mode::peermem:
                    return try_peermem(device, *size, pages, region);
                case Mode::staging:
                    stage(device, *size, region);
                    return std::nullopt;
            }
            return std::string("unknown mode");
        };
        ModeChoice choice = choose_mode(next_, attempt);
        if (allocations_ > 0) {
            // The modes skipped now were refused at the first allocation (and said so).
            choice.refused.erase(choice.refused.begin(),
                                 choice.refused.begin() + static_cast<int>(next_));
        }
        for (auto& why : choice.refused) {
            if (std::find(refused_.begin(), refused_.end(), why) == refused_.end()) {
                refused_.push_back(std::move(why));
            }
        }
        next_ = choice.mode;
        ++allocations_;
        // For the report's resource accounting (PayloadMemory::Region::kind).
        region.kind = next_ == Mode::dmabuf    ? "dma-buf"
                      : next_ == Mode::peermem ? "peermem"
                                               : "staging";
        region.registered_bytes = *size;
        if (next_ != Mode::staging) {
            gpu_registered_ += *size;
            if (pages.sync_memops_failed && sync_memops_note_.empty()) {
                sync_memops_note_ = *pages.sync_memops_failed;
            }
        }
        summary_ = fmt::format("GPU {} payload memory: {}", gpu_,
                               describe_choice(ModeChoice{next_, refused_}));
        if (!sync_memops_note_.empty()) {
            summary_ += "; " + sync_memops_note_;
        }
        return region;
    }

    std::string describe() const override { return summary_; }

  private:
    // GPU memory for one region, allocated at the first mode that needs it.
    struct GpuPages {
        std::shared_ptr<void> owner;                    // the cudaMalloc allocation
        std::uint8_t* base = nullptr;                   // 64 KiB aligned, `size` bytes
        std::optional<std::string> sync_memops_failed;  // why SYNC_MEMOPS is not set
    };

    // CU_POINTER_ATTRIBUTE_SYNC_MEMOPS on memory the NIC writes, as NVIDIA's
    // gdrcopy and Holoscan's advanced_network do: synchronous CUDA memory
    // operations on it always synchronize. Not needed by ibvcap's own data
    // flow (its one CUDA write, the zeroing, is waited for), so a failure is
    // only noted.
    std::optional<std::string> set_sync_memops(std::uint8_t* base) const {
        if (set_attribute_ == nullptr) {
            return "CU_POINTER_ATTRIBUTE_SYNC_MEMOPS not set (the driver has no "
                   "cuPointerSetAttribute)";
        }
        const unsigned int one = 1;
        const CUresult result =
            set_attribute_(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                           static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(base)));
        if (result != CUDA_SUCCESS) {
            return fmt::format(
                "CU_POINTER_ATTRIBUTE_SYNC_MEMOPS not set (cuPointerSetAttribute: {})",
                driver_error(result));
        }
        return std::nullopt;
    }

    // Why registering `size` more bytes of GPU memory failed, when the
    // error and BAR1's size point at BAR1 (bar1_shortfall); otherwise the
    // exception's own reason.
    std::string registration_failure(const std::exception& e, std::size_t size) const {
        const int err = errno_of(e);
        if (const auto bar1 = bar1_shortfall(err, bar1_bytes_, gpu_registered_ + size)) {
            return fmt::format("{}: {}", errno_name(err) != nullptr ? errno_name(err) : "error",
                               *bar1);
        }
        return reason_of(e);
    }

    std::uint8_t* gpu_pages(GpuPages& pages, std::size_t size) const {
        if (pages.owner) {
            return pages.base;
        }
        DevicePtr p = device_alloc(gpu_, size, "payload slots");
        auto offset =
            aligned_offset(reinterpret_cast<std::uintptr_t>(p.get()), size, size, kGpuPageBytes);
        if (!offset) {  // not on a 64 KiB boundary: over-allocate by a page and align
            p.reset();
            p = device_alloc(gpu_, size + kGpuPageBytes, "payload slots, aligned");
            offset = aligned_offset(reinterpret_cast<std::uintptr_t>(p.get()), size + kGpuPageBytes,
                                    size, kGpuPageBytes);
        }
        std::uint8_t* base = static_cast<std::uint8_t*>(p.get()) + offset.value_or(0);
        pages.sync_memops_failed = set_sync_memops(base);
        check(cudaMemset(base, 0, size), "cudaMemset of payload slots");
        check(cudaDeviceSynchronize(),
              "cudaDeviceSynchronize");  // zeros land before the NIC writes
        pages.owner = std::shared_ptr<void>(p.release(), DeviceFree{gpu_});
        pages.base = base;
        return base;
    }

    void adopt(Region& region, std::shared_ptr<void> owner, std::unique_ptr<verbs::MemoryRegion> mr,
               std::uint8_t* address, std::uint8_t* host_view) const {
        region.nic_address = reinterpret_cast<std::uintptr_t>(address);
        region.host_view = host_view;
        if (host_view == nullptr) {
            region.device_view = address;  // the CUDA device pointer
            region.device = &reader_;
        }
        region.mr = std::make_unique<OwningRegion>(owner, std::move(mr));
        region.owner = std::move(owner);
    }

    std::optional<std::string> try_dmabuf(verbs::Device& device, std::size_t size, GpuPages& pages,
                                          Region& region) const {
        if (!rdma_) {
            return "dma-buf: the GPU does not support GPUDirect RDMA "
                   "(cudaDevAttrGPUDirectRDMASupported = 0)";
        }
        if (get_handle_ == nullptr) {
            return "dma-buf: the driver has no cuMemGetHandleForAddressRange (update the NVIDIA "
                   "driver)";
        }
        if (dmabuf_.value_or(0) == 0) {
            return "dma-buf: not supported by the GPU driver "
                   "(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED "
                   "= 0; it needs the open GPU kernel modules)";
        }
        std::uint8_t* base = gpu_pages(pages, size);
        int fd = -1;
        const CUresult result =
            get_handle_(&fd, static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(base)), size,
                        CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
        if (result != CUDA_SUCCESS) {
            return fmt::format("dma-buf: export refused (cuMemGetHandleForAddressRange: {})",
                               driver_error(result));
        }
        // The MR holds its own reference to the dma-buf: our descriptor can go
        // once registration is done, whichever way it went.
        const FdCloser closer(fd);
        std::unique_ptr<verbs::MemoryRegion> mr;
        try {
            // offset 0 of the exported range; iova = the device address, so
            // the SGEs carry device pointers (same page offset: 0).
            mr = device.register_dmabuf(fd, 0, size, reinterpret_cast<std::uintptr_t>(base));
        } catch (const std::exception& e) {
            return fmt::format("dma-buf refused ({})", registration_failure(e, size));
        }
        adopt(region, pages.owner, std::move(mr), base, nullptr);
        return std::nullopt;
    }

    std::optional<std::string> try_peermem(verbs::Device& device, std::size_t size, GpuPages& pages,
                                           Region& region) const {
        if (!rdma_) {
            return "nvidia-peermem: the GPU does not support GPUDirect RDMA "
                   "(cudaDevAttrGPUDirectRDMASupported = 0)";
        }
        if (!peermem_loaded(sysfs_root_)) {
            return "nvidia-peermem not loaded (modprobe nvidia-peermem)";
        }
        std::uint8_t* base = gpu_pages(pages, size);
        std::unique_ptr<verbs::MemoryRegion> mr;
        try {
            mr = device.register_memory(base, size);
        } catch (const std::exception& e) {
            return fmt::format("nvidia-peermem loaded but ibv_reg_mr of GPU memory failed ({})",
                               registration_failure(e, size));
        }
        adopt(region, pages.owner, std::move(mr), base, nullptr);
        return std::nullopt;
    }

    // Page-locked and mapped: the block rings' gather reads held slots in
    // place (DeviceBlockMemory::copy_in_held), no staging memcpy.
    void stage(verbs::Device& device, std::size_t size, Region& region) const {
        std::uint8_t* device_view = nullptr;
        PinnedPtr pinned = mapped_alloc(size, "staging payload slots", device_view);
        std::memset(pinned.get(), 0, size);  // touch the pages before the NIC writes them
        auto mr = device.register_memory(pinned.get(), size);
        std::uint8_t* base = bytes_of(pinned);
        mapped_ranges().add(base, size, device_view);
        adopt(region, std::shared_ptr<void>(pinned.release(), UnmapAndFree{}), std::move(mr), base,
              base);
    }
    struct UnmapAndFree {
        void operator()(void* p) const noexcept {
            mapped_ranges().remove(p);
            cudaFreeHost(p);
        }
    };

    int gpu_;
    Mode next_;
    fs::path sysfs_root_;
    bool rdma_ = false;
    std::optional<int> dmabuf_;
    PFN_cuMemGetHandleForAddressRange_v11070 get_handle_ = nullptr;
    PFN_cuPointerSetAttribute_v6000 set_attribute_ = nullptr;
    std::uint64_t bar1_bytes_ = 0;      // 0: unknown
    std::uint64_t gpu_registered_ = 0;  // bytes of GPU memory registered so far
    std::string sync_memops_note_;      // the first SYNC_MEMOPS failure, for describe()
    std::vector<std::string> refused_;
    std::size_t allocations_ = 0;
    std::string summary_;
    SlotReader reader_{gpu_};
};

}  // namespace

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
    info.bar1_bytes = bar_size(sysfs_root, info.pci_bus_id, 1).value_or(0);
    info.iommu = iommu_mode(sysfs_root, info.pci_bus_id);
    info.max_pitch = static_cast<std::size_t>(
        std::max(0, runtime_attribute_value(id, cudaDevAttrMaxPitch).value_or(0)));
    cudaDriverGetVersion(&info.driver_version);
    cudaRuntimeGetVersion(&info.runtime_version);
    return info;
}

std::unique_ptr<BlockMemory> make_device_block_memory(int gpu) {
    return std::make_unique<DeviceBlockMemory>(gpu);
}

std::unique_ptr<PayloadMemory> make_gpu_payload_memory(int gpu, Mode preferred,
                                                       const fs::path& sysfs_root) {
    return std::make_unique<GpuPayloadMemory>(gpu, preferred, sysfs_root);
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

// ---- example consumer -----------------------------------------------------------

struct KernelScratch::Impl {
    int gpu = 0;
    detail::BlockShape shape;
    std::size_t words = 0;  // of the presence bitmap
    DevicePtr present;      // words × u64
    DevicePtr sums;         // threads × u64 power sums, then one u64 mismatch count
    DevicePtr power;        // threads × float
    PinnedPtr host_present;
    PinnedPtr host_result;  // one u64 count, then threads × float
    EventPtr staged;        // the bitmap copy has left host_present
    bool staged_pending = false;

    void check_shape(const Block& block, const BlockRingOptions& options) const {
        if (options.frames_per_block != shape.frames || options.threads != shape.threads ||
            options.payload_bytes != shape.payload_bytes || block.present.size() != words ||
            block.data == nullptr) {
            throw std::invalid_argument(
                "GPU kernels: the block, its ring options and the scratch buffers differ in shape");
        }
    }

    // Copies the block's presence bitmap to the device, in stream order.
    void stage_bitmap(const Block& block, cudaStream_t stream) {
        check(cudaSetDevice(gpu), "cudaSetDevice");
        if (staged_pending) {
            check(cudaEventSynchronize(staged.get()), "cudaEventSynchronize (bitmap staging)");
            staged_pending = false;
        }
        std::memcpy(host_present.get(), block.present.data(), words * sizeof(std::uint64_t));
        check(cudaMemcpyAsync(present.get(), host_present.get(), words * sizeof(std::uint64_t),
                              cudaMemcpyHostToDevice, stream),
              "cudaMemcpyAsync (presence bitmap)");
        check(cudaEventRecord(staged.get(), stream), "cudaEventRecord");
        staged_pending = true;
    }

    unsigned long long* sums_at(std::size_t i) const {
        return static_cast<unsigned long long*>(sums.get()) + i;
    }
};

KernelScratch::KernelScratch(int gpu, const BlockRingOptions& options)
    : impl_(std::make_unique<Impl>()) {
    const std::uint64_t slots = std::uint64_t{options.frames_per_block} * options.threads;
    if (slots == 0 || slots > 0x7fffffffu || options.payload_bytes == 0) {
        throw std::invalid_argument(
            "GPU kernels: frames per block × threads must be 1 to 2^31-1 and payload bytes at "
            "least 1");
    }
    select_gpu(gpu);
    Impl& s = *impl_;
    s.gpu = gpu;
    s.shape = detail::BlockShape{options.frames_per_block, options.threads, options.payload_bytes};
    s.words = static_cast<std::size_t>((slots + 63) / 64);
    s.present = device_alloc(gpu, s.words * sizeof(std::uint64_t), "presence bitmap");
    s.sums = device_alloc(gpu, (std::size_t{options.threads} + 1) * sizeof(std::uint64_t),
                          "kernel sums");
    s.power = device_alloc(gpu, std::size_t{options.threads} * sizeof(float), "power");
    s.host_present = pinned_alloc(s.words * sizeof(std::uint64_t), "presence bitmap");
    s.host_result = pinned_alloc(
        sizeof(std::uint64_t) + std::size_t{options.threads} * sizeof(float), "kernel results");
    s.staged = make_event();
}

KernelScratch::~KernelScratch() {
    if (impl_) {
        cudaSetDevice(impl_->gpu);
        if (impl_->staged_pending) {
            cudaEventSynchronize(impl_->staged.get());
        }
    }
}

float* KernelScratch::device_power() {
    return static_cast<float*>(impl_->power.get());
}

std::vector<float> KernelScratch::power_to_host(Stream stream) {
    Impl& s = *impl_;
    check(cudaSetDevice(s.gpu), "cudaSetDevice");
    auto* out = reinterpret_cast<float*>(bytes_of(s.host_result) + sizeof(std::uint64_t));
    check(cudaMemcpyAsync(out, s.power.get(), std::size_t{s.shape.threads} * sizeof(float),
                          cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync (power)");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (power)");
    return std::vector<float>(out, out + s.shape.threads);
}

void zero_missing_and_power(const Block& block, const BlockRingOptions& options,
                            KernelScratch& scratch, float* device_power_out, Stream stream) {
    KernelScratch::Impl& s = scratch.impl();
    s.check_shape(block, options);
    s.stage_bitmap(block, stream);
    check(detail::launch_zero_missing_and_power(
              block.data, static_cast<const std::uint64_t*>(s.present.get()), s.shape, s.sums_at(0),
              device_power_out != nullptr ? device_power_out : scratch.device_power(), stream),
          "zero_missing_and_power kernel launch");
}

std::uint64_t verify_pattern(const Block& block, const BlockRingOptions& options,
                             std::uint32_t antenna, KernelScratch& scratch, Stream stream) {
    KernelScratch::Impl& s = scratch.impl();
    s.check_shape(block, options);
    s.stage_bitmap(block, stream);
    unsigned long long* bad = s.sums_at(s.shape.threads);
    check(detail::launch_verify_pattern(block.data,
                                        static_cast<const std::uint64_t*>(s.present.get()), s.shape,
                                        block.first_index, antenna, bad, stream),
          "verify_pattern kernel launch");
    auto* host = static_cast<unsigned long long*>(s.host_result.get());
    check(cudaMemcpyAsync(host, bad, sizeof(*host), cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync (mismatch count)");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (verify_pattern)");
    return *host;
}

}  // namespace ibvcap::gpu
