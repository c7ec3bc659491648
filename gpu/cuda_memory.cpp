// GPU payload memory for the verbs engine: regions in GPU memory exported as
// a dma-buf or registered through nvidia-peermem, or pinned mapped host
// memory (staging), with the fallback between them (gpu.hpp, Mode).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <system_error>

#include "gpu/cuda_common.hpp"

namespace ibvcap::gpu {

namespace fs = std::filesystem;

namespace {

using namespace detail;

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
        ordering_ = gpu_write_ordering(gpu);
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
        bool realigned = false;
        if (!offset) {  // not on a 64 KiB boundary: over-allocate by a page and align
            realigned = true;
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
        // The whole allocation, for the bounds of the writers' strided
        // copies (SlotReader); forgotten when it is freed.
        const std::size_t allocated = realigned ? size + kGpuPageBytes : size;
        reader_.allocations()->add(p.get(), allocated);
        pages.owner =
            std::shared_ptr<void>(p.release(), SlotPagesFree{gpu_, reader_.allocations()});
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

    // Why a GPU mode cannot run on this GPU at all, before anything is tried.
    std::optional<std::string> refusal(Mode mode) const {
        if (!rdma_) {
            return fmt::format(
                "{}: the GPU does not support GPUDirect RDMA (cudaDevAttrGPUDirectRDMASupported = "
                "0)",
                to_string(mode));
        }
        return ordering_refusal(mode, ordering_);
    }

    std::optional<std::string> try_dmabuf(verbs::Device& device, std::size_t size, GpuPages& pages,
                                          Region& region) const {
        if (auto why = refusal(Mode::dmabuf)) {
            return why;
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
        if (auto why = refusal(Mode::peermem)) {
            return why;
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
    RdmaWriteOrdering ordering_;        // refused: no payload in GPU memory
    std::uint64_t bar1_bytes_ = 0;      // 0: unknown
    std::uint64_t gpu_registered_ = 0;  // bytes of GPU memory registered so far
    std::string sync_memops_note_;      // the first SYNC_MEMOPS failure, for describe()
    std::vector<std::string> refused_;
    std::size_t allocations_ = 0;
    std::string summary_;
    SlotReader reader_{gpu_};
};

}  // namespace

std::unique_ptr<PayloadMemory> make_gpu_payload_memory(int gpu, Mode preferred,
                                                       const fs::path& sysfs_root) {
    return std::make_unique<GpuPayloadMemory>(gpu, preferred, sysfs_root);
}

}  // namespace ibvcap::gpu
