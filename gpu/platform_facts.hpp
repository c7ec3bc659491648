// The host's facts about GPUDirect that ibvcap prints at start and acts on,
// computed without a GPU from what CUDA and sysfs report: whether the NIC's
// RDMA writes need a flush and which flush the run can use, the IOMMU mode,
// BAR1's size, the CUDA driver and runtime versions. Compiled in every build
// and unit-tested on hosts without a GPU (test/test_gpu.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "gpu/gpu.hpp"

namespace ibvcap::gpu {

// CUDA's cudaGPUDirectRDMAWritesOrdering values (driver_types.h;
// cuda_common.cpp checks them against the header).
inline constexpr int kRdmaWritesOrderingNone = 0;
inline constexpr int kRdmaWritesOrderingOwner = 100;
inline constexpr int kRdmaWritesOrderingAllDevices = 200;
// CUDA's cudaFlushGPUDirectRDMAWritesOptions bits.
inline constexpr int kRdmaFlushOptionHost = 1;    // cudaDeviceFlushGPUDirectRDMAWrites works
inline constexpr int kRdmaFlushOptionMemOps = 2;  // CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES works

// The GPU does not itself order the NIC's GPUDirect RDMA writes before later
// GPU work (cudaDevAttrGPUDirectRDMAWritesOrdering below Owner): a copy or
// kernel may read stale payload unless a flush runs between the NIC's
// completion and the read.
bool needs_rdma_write_flush(int writes_ordering);
// cudaDeviceFlushGPUDirectRDMAWrites is supported (the Host bit of
// cudaDevAttrGPUDirectRDMAFlushWritesOptions).
bool can_flush_rdma_writes(int flush_options);

// The GPU reaches the CPU over NVLink-C2C (Grace Hopper, Grace Blackwell).
// The CUDA headers name no C2C attribute, so this is inferred: an aarch64
// host (`aarch64_host`) whose link to the GPU supports native atomics
// (cudaDevAttrHostNativeAtomicSupported, driver_types.h:2004: "Link between
// the device and the host supports native atomic operations"), which PCIe
// GPUs do not report and NVLink-C2C ones do.
bool is_c2c_platform(bool aarch64_host, int host_native_atomic_supported);

// How the NIC's GPUDirect RDMA writes are made visible to what reads them.
enum class RdmaFlush {
    none,    // the GPU orders them itself (ordering owner or all devices)
    host,    // cudaDeviceFlushGPUDirectRDMAWrites(TargetCurrentDevice, ToOwner)
    memops,  // a CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES op (cuStreamBatchMemOp) on the reading stream
};
struct RdmaWriteOrdering {
    RdmaFlush flush = RdmaFlush::none;
    // Set: payload must not go into GPU memory (dma-buf and nvidia-peermem
    // are refused, payload falls back to staging); one clause saying why.
    std::optional<std::string> refusal;
};
// The decision, from cudaDevAttrGPUDirectRDMAWritesOrdering,
// cudaDevAttrGPUDirectRDMAFlushWritesOptions and is_c2c_platform. Header
// lines relied on (CUDA 13.0):
// - driver_types.h:1893-1896: ordering None (0) "does not natively support
//   ordering ... cudaFlushGPUDirectRDMAWrites() can be leveraged if
//   supported"; Owner (100) and AllDevices (200) need no flush for the owner.
// - driver_types.h:1885-1887: the Host bit (1) says cudaDeviceFlushGPUDirectRDMAWrites
//   works; the MemOps bit (2) says CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES works
//   (cuda.h:528: "the same effect as CU_STREAM_WAIT_VALUE_FLUSH, but as a
//   standalone operation"), which orders the writes before later work on the
//   stream it is queued on.
// - cuda.h:5692-5700: where the NIC can write by more than one path (Grace's
//   NVLink-C2C beside PCIe BAR1) the driver reports ALL_DEVICES and the CUDA
//   flush is a no-op, and ordering the paths is "the user's responsibility
//   ... by using mechanisms outside the scope of CUDA".
// So: below Owner, the Host flush, else the MemOps flush, else no GPU payload
// (nothing would order the reads after the NIC's writes). On C2C, no GPU
// payload either. NCCL, the reference (src/graph/paths.cc ncclTopoNeedFlush:
// compute capability >= 9.0, NIC on the GPU's PCIe switch, CPU over C2C ⇒
// ncclTopoFlushC2c), both maps GPU memory through PCIe (GDR_PIN_FLAG_FORCE_PCIE;
// for dma-buf the equivalent is CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE,
// cuda.h:4204,12580-12583) and flushes with an RDMA read through the NIC, a
// mechanism outside CUDA. ibvcap's receive queues are raw packet QPs with no
// RDMA read to issue, so the PCIe mapping alone would leave the two paths
// unordered: it refuses (staging) instead of passing the flag.
RdmaWriteOrdering plan_rdma_write_flush(int writes_ordering, int flush_options, bool c2c);
// One line: "GPUDirect RDMA write ordering: none (payload flushed with ...)",
// "... owner (no flush needed)", or, where plan_rdma_write_flush refuses GPU
// payload, why and that payload stays in host memory.
std::string describe_rdma_write_ordering(int writes_ordering, int flush_options, bool c2c = false);

// The size of PCI BAR `bar` (0 to 5) of `pci_address` from
// <sysfs_root>/bus/pci/devices/<pci_address>/resource: line `bar` holds
// "start end flags" in hex; the size is end - start + 1. nullopt when the
// file or line is missing or malformed, or the BAR is not assigned (start 0).
std::optional<std::uint64_t> bar_size(const std::filesystem::path& sysfs_root,
                                      const std::string& pci_address, int bar);

// From <sysfs_root>/bus/pci/devices/<pci_address>/iommu_group/type
// ("identity": passthrough; "DMA", "DMA-FQ": translated); when the device is
// in no group: off if <sysfs_root>/class/iommu is missing or empty, unknown
// otherwise. /proc/cmdline is not consulted.
IommuMode iommu_mode(const std::filesystem::path& sysfs_root, const std::string& pci_address);
// "off", "passthrough (identity)", "translated (DMA)", "unknown".
const char* to_string(IommuMode mode);
// to_string, and for translated the hint that GPUDirect RDMA needs iommu=pt
// or the IOMMU off on most platforms.
std::string describe_iommu(IommuMode mode);

// "128 GiB" for a whole number of GiB, otherwise MiB rounded up ("256 MiB").
std::string size_text(std::uint64_t bytes);

// A CUDA version as CUDA encodes it (1000 * major + 10 * minor) → "13.0".
std::string cuda_version_text(int version);
// Why a GPU cannot be used when the driver supports an older CUDA than the
// runtime ibvcap was built with, and the fix (a newer driver, or a build with
// an older toolkit); "" when `driver_version` is 0 (no driver) or not older.
std::string driver_mismatch_message(int driver_version, int runtime_version);

// When registering GPU payload memory failed with `err` (ENOMEM, ENOSPC or
// EFAULT: out of BAR1 space looks like this) and BAR1's size is known
// (`bar1_bytes` > 0): "BAR1 is N MiB and the run registers M MiB: ..." with
// the fix. nullopt for other errors or an unknown BAR1.
std::optional<std::string> bar1_shortfall(int err, std::uint64_t bar1_bytes,
                                          std::uint64_t registered_bytes);

}  // namespace ibvcap::gpu
