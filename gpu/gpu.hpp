// The GPU payload path (docs/architecture.md, "The data path" and "Layout"): what lib/ reaches only
// through its interfaces (BlockMemory, PayloadMemory) implemented with CUDA, plus the GPU probe and
// an example consumer. No CUDA type appears here: a CUDA stream is passed as `Stream` (cudaStream_t
// is `CUstream_st*`, so a consumer that includes the CUDA headers passes its cudaStream_t as is).
//
// Built from cuda_*.cpp and kernels.cu when CUDA is found; otherwise from
// gpu_stub.cpp, whose functions throw std::runtime_error saying ibvcap was
// built without CUDA (gpu_available() is false there).
//
// Payload memory modes, best first (make_gpu_payload_memory):
//   dmabuf  — GPU memory exported as a dma-buf (cuMemGetHandleForAddressRange)
//             and registered with ibv_reg_dmabuf_mr: the NIC writes into the
//             GPU; needs the open GPU kernel modules and a dma-buf capable
//             kernel and NIC driver.
//   peermem — GPU memory registered with plain ibv_reg_mr, which works only
//             while the nvidia-peermem kernel module is loaded.
//   staging — pinned host memory (cudaHostAlloc) registered with ibv_reg_mr:
//             the NIC writes to the host, and the block ring copies payloads
//             to the GPU (make_device_block_memory). Always available; costs
//             one copy through host memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu_info.hpp"
#include "lib/host/devices.hpp"
#include "lib/sinks/block_ring.hpp"
#include "lib/sinks/dada_device.hpp"
#include "lib/sources/verbs/engine.hpp"

struct CUstream_st;  // the CUDA runtime's stream object (cudaStream_t = CUstream_st*)

namespace ibvcap::gpu {

using Stream = CUstream_st*;  // nullptr: the legacy default stream

// Built with CUDA, a driver is loaded and it reports at least one GPU.
bool gpu_available();

// How the IOMMU treats the GPU's DMA (iommu_mode in gpu_logic.hpp).
enum class IommuMode {
    off,          // no IOMMU registered (/sys/class/iommu empty) and the GPU in no group
    passthrough,  // the GPU's group type is "identity" (iommu=pt)
    translated,   // "DMA" or "DMA-FQ": addresses are translated
    unknown,      // an IOMMU is there but the group's type cannot be read or is another one
};

// What ibvcap knows about the GPU it was told to use (printed at start).
struct GpuInfo {
    int id = 0;
    std::string name;             // "NVIDIA H100 80GB HBM3"
    std::string pci_bus_id;       // "0000:3b:00.0": lower case, 4-digit domain (the sysfs name)
    bool gpudirect_rdma = false;  // cudaDevAttrGPUDirectRDMASupported
    bool dmabuf = false;          // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
    bool peermem_loaded = false;  // /sys/module/nvidia_peermem (or nv_peer_mem) exists
    int numa_node = -1;           // sysfs numa_node of the GPU; -1: none reported
    std::string nic_relation;     // the PCIe/NUMA path to the NIC, in words ("" when not asked)
    // cudaDevAttrGPUDirectRDMAWritesOrdering (cudaGPUDirectRDMAWritesOrdering):
    // 0 none, 100 owner, 200 all devices.
    int rdma_writes_ordering = 0;
    // cudaDevAttrGPUDirectRDMAFlushWritesOptions, a cudaFlushGPUDirectRDMAWritesOptions
    // bitmask: 1 host (cudaDeviceFlushGPUDirectRDMAWrites), 2 memops.
    int rdma_flush_options = 0;
    // The GPU reaches the CPU over NVLink-C2C (is_c2c_platform in gpu_logic.hpp):
    // GPU payload memory is refused there (plan_rdma_write_flush).
    bool c2c = false;
    std::uint64_t bar1_bytes = 0;  // size of PCI BAR1 from sysfs; 0: unknown
    IommuMode iommu = IommuMode::unknown;
    std::size_t max_pitch = 0;  // cudaDevAttrMaxPitch: the largest pitch of a 2D copy
    int driver_version = 0;     // cudaDriverGetVersion: 1000 * major + 10 * minor
    int runtime_version = 0;    // cudaRuntimeGetVersion, the same encoding
};

// Probes GPU `id`. `nic` names the NIC whose path to the GPU is described:
// a PCI address ("0000:3b:00.0"), a sysfs path of the PCI function
// ("/sys/class/infiniband/mlx5_0/device"), an RDMA device name ("mlx5_0") or
// a netdev name ("ens1f0"); empty: no NIC relation. Throws std::runtime_error
// with one line naming the fix: no driver or no GPU, an id out of range, or
// a build without CUDA.
GpuInfo probe_gpu(int id, const std::string& nic = {},
                  const std::filesystem::path& sysfs_root = kSysfsRoot);

// Three or four lines (no trailing newline): the GPU and its GPUDirect
// abilities; the CUDA versions, BAR1 and the IOMMU; the GPUDirect RDMA write
// ordering and what ibvcap does about it; the path to the NIC when known.
std::string format_gpu_info(const GpuInfo& info);

// Block ring memory on GPU `gpu` (validated as probe_gpu does): one
// cudaMalloc per block. copy_in copies the source into pinned staging memory
// (a memcpy: the caller may reuse the source, e.g. re-post its receive slot,
// as soon as copy_in returns) and queues an asynchronous host→device copy on
// the memory's own stream; copies to adjacent destinations are coalesced into
// one cudaMemcpyAsync. synchronize() issues what is queued and waits for the
// stream. A cudaMemcpyAsync straight from the caller's buffer would be no
// better: from pageable memory CUDA stages it synchronously anyway, and from
// pinned memory (the staging payload mode) the copy could still be reading
// when the NIC rewrites the re-posted slot. host_visible() is false.
// Use from one producer thread (the ring's).
std::unique_ptr<BlockMemory> make_device_block_memory(int gpu);

// Opens a GPU PSRDADA ring's blocks (dada_db -g) from the CUDA IPC handles in
// its block segments, with a make_device_block_memory on the ring's GPU for
// the copies (gpu/cuda_dada.cpp). The stub's opener throws "built without
// CUDA".
DadaDeviceOpener dada_ring_opener();

// The other side, for the tests and gpu-check (what psrdada's dada_db -g
// does for a ring's blocks): `count` blocks of `bytes` of device memory on
// GPU `gpu`, zeroed, each with its CUDA IPC handle; freed with the object.
// Another process opens them (CUDA does not open a handle in the process
// that made it).
class IpcBlocks {
  public:
    virtual ~IpcBlocks() = default;
    virtual const std::uint8_t* handle(std::size_t block) const = 0;  // 64 bytes
    // Copy `bytes` at `offset` of block `block` into host memory.
    virtual void read(std::size_t block, std::size_t offset, void* host,
                      std::size_t bytes) const = 0;
};
std::unique_ptr<IpcBlocks> make_ipc_blocks(int gpu, std::size_t count, std::size_t bytes);

enum class Mode { dmabuf, peermem, staging };
const char* to_string(Mode mode);  // "dma-buf", "nvidia-peermem", "staging"

// Payload memory for the verbs engine on GPU `gpu`, trying `preferred` and
// then each worse mode (see the top of this file). Regions are the requested
// size rounded up to 64 KiB (the GPU's page) with a 64 KiB-aligned base.
// Region::host_view is nullptr for GPU memory and the pinned buffer in
// staging mode. The mode is decided at the first allocate() and kept for
// later ones (falling further only if it fails). describe() says which mode
// ran and why each better one did not, e.g. "staging (pinned host memory ...):
// dma-buf refused (...); nvidia-peermem not loaded (modprobe nvidia-peermem)".
// A registration refused with ENOMEM, ENOSPC or EFAULT while BAR1's size is
// known is reported as "BAR1 is N MiB and the run registers M MiB ..."
// (bar1_shortfall). GPU regions get CU_POINTER_ATTRIBUTE_SYNC_MEMOPS; when
// that fails, describe() ends with "; CU_POINTER_ATTRIBUTE_SYNC_MEMOPS not set
// (...)" and the region is used all the same. Where nothing can order the
// NIC's writes before the GPU's reads (plan_rdma_write_flush in
// gpu_logic.hpp: no flush at all below Owner ordering, or NVLink-C2C), both
// GPU modes are refused with that reason and payload goes to staging.
// Regions' DeviceMemory (the writers' reads): into a buffer it pinned,
// gather_launches(copies) kernel launches per batch (lib/core/device_reads.hpp).
// `sysfs_root` is where /sys/module and the GPU's PCI resource file are
// looked up (tests point it elsewhere).
std::unique_ptr<PayloadMemory> make_gpu_payload_memory(
    int gpu, Mode preferred = Mode::dmabuf, const std::filesystem::path& sysfs_root = kSysfsRoot);

// The copy calls (gather kernel launches and cudaMemcpy2DAsync calls) that
// copy_to_host of `memory` has made so far, when it is the DeviceMemory of a
// region of make_gpu_payload_memory; 0 for any other. For tests: a batch
// into a buffer pin_host_buffer mapped takes gather_launches(copies) calls
// (lib/core/device_reads.hpp).
std::uint64_t device_copy_calls(const DeviceMemory& memory);

// Plain copies between host and device memory (synchronous), for consumers
// and tests that want to look at a block.
void copy_to_host(void* host_dst, const void* device_src, std::size_t bytes);
void copy_to_device(void* device_dst, const void* host_src, std::size_t bytes);

// ---------------------------------------------------------------------------
// The example consumer. A block (lib/sinks/block_ring.hpp) is frames_per_block frame
// times × threads threads of payload_bytes each, slot (f, t) at byte
// ((f * threads) + t) * payload_bytes of Block::data (device memory here), and
// the presence bitmap Block::present (host memory) has bit f * threads + t,
// bit b in word b / 64 at position b % 64.
//
// Sample format: CODIF with nbits = 8, real or complex: every byte of the
// payload is one sample component, a signed two's-complement int8 (complex
// samples are an (I, Q) pair of them). Power is the sum of squares of the
// components, so the same arithmetic serves real and complex data.

// Device and pinned buffers the example kernels need for blocks of one
// ring's shape, on GPU `gpu`. Use one per consumer stream: a call waits until
// the previous call's bitmap copy has left the pinned buffer, but calls on
// different streams would share the device bitmap.
class KernelScratch {
  public:
    KernelScratch(int gpu, const BlockRingOptions& options);
    ~KernelScratch();
    KernelScratch(const KernelScratch&) = delete;
    KernelScratch& operator=(const KernelScratch&) = delete;

    // `threads` floats of device memory, for zero_missing_and_power's output.
    float* device_power();
    // Copies device_power() to the host once `stream` reaches this point
    // (waits for the stream).
    std::vector<float> power_to_host(Stream stream = nullptr);

    struct Impl;
    Impl& impl() { return *impl_; }

  private:
    std::unique_ptr<Impl> impl_;
};

// Asynchronously on `stream`: copies the block's presence bitmap to the
// device, writes zeros over every absent slot of block.data, and writes to
// `device_power_out` (`threads` floats of device memory; nullptr:
// scratch.device_power()) the power of each thread over the block: the
// sum over its frame times of the sum of squares of its int8 sample
// components (absent slots count zero). Sums are exact integers on the
// device, rounded to float once at the end. Release the block to the ring only
// after `stream` has finished with it.
void zero_missing_and_power(const Block& block, const BlockRingOptions& options,
                            KernelScratch& scratch, float* device_power_out = nullptr,
                            Stream stream = nullptr);

// Checks every present slot of the block against the generator's pattern for
// `antenna` (lib/traffic/pattern.hpp: thread t, frame index block.first_index + f) on
// the GPU; returns the number of bytes that differ (0: intact). Synchronous:
// waits for `stream`.
std::uint64_t verify_pattern(const Block& block, const BlockRingOptions& options,
                             std::uint32_t antenna, KernelScratch& scratch,
                             Stream stream = nullptr);

}  // namespace ibvcap::gpu
