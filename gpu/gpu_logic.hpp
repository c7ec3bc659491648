// The parts of the GPU path that need no GPU: sizes and alignment, PCI
// topology from sysfs, peermem detection, the choice of payload memory mode
// and the messages ibvcap prints (the host's platform facts, also without a
// GPU, are in platform_facts.hpp). Compiled in every build (with or without
// CUDA) and unit-tested on hosts without a GPU (test/test_gpu.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu.hpp"
#include "gpu/platform_facts.hpp"

namespace ibvcap::gpu {

// ---- sizes -----------------------------------------------------------------
// GPUDirect RDMA maps GPU memory in 64 KiB pages (nvidia-peermem pins whole
// pages; a dma-buf export must cover page-aligned ranges), so payload regions
// are whole 64 KiB pages starting on a page boundary.
inline constexpr std::size_t kGpuPageBytes = 64 * 1024;

// `bytes` rounded up to a multiple of `to` (a power of two); nullopt when the
// result does not fit in size_t.
std::optional<std::size_t> round_up(std::size_t bytes, std::size_t to);

// cudaMalloc promises 256-byte alignment only (in practice large allocations
// start on 2 MiB boundaries). Given an allocation of `allocated` bytes at
// `base`, the offset of the first `align`-aligned address from which `needed`
// bytes fit inside it; nullopt when they do not.
std::optional<std::size_t> aligned_offset(std::uintptr_t base, std::size_t allocated,
                                          std::size_t needed, std::size_t align);

// ---- PCI topology ----------------------------------------------------------
// "00000000:3B:00.0" (cudaDeviceGetPCIBusId, nvidia-smi), "0000:3b:00.0" or
// "3b:00.0" → "0000:3b:00.0", the name under /sys/bus/pci/devices. nullopt
// when the text is not a PCI address.
std::optional<std::string> normalize_pci_address(std::string_view text);

// Where a PCI function sits: the host bridge ("pci0000:00"), the bridges
// from the root port down to it (PCIe switch ports included), and its NUMA node.
struct PciLocation {
    std::string address;               // "0000:3b:00.0"
    std::string host_bridge;           // "pci0000:00"
    std::vector<std::string> bridges;  // root port first; empty: on the root bus
    int numa_node = -1;                // -1: the kernel reports none
};

// From the canonical sysfs path of a PCI function
// (".../devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:3b:00.0"); the
// NUMA node is left at -1. nullopt when the path holds no PCI function.
std::optional<PciLocation> parse_pci_path(const std::filesystem::path& canonical);

// Finds a PCI function under `sysfs_root` from a PCI address, a path (to a
// PCI function's directory or a link to one), an RDMA device name
// (class/infiniband/<name>/device) or a netdev (class/net/<name>/device), and
// reads its NUMA node. nullopt when it cannot be found.
std::optional<PciLocation> locate_pci_function(const std::filesystem::path& sysfs_root,
                                               std::string_view what);

enum class PciRelation {
    same_switch,           // a common bridge below the root port: a PCIe switch (PIX/PXB)
    same_root_port,        // only the root port in common (PXB)
    same_host_bridge,      // the same root complex, no common bridge (PHB)
    same_numa_node,        // different root complexes on one NUMA node (NODE)
    different_numa_nodes,  // across the inter-socket link (SYS)
    unknown,               // different root complexes and no NUMA information
};
PciRelation relate(const PciLocation& gpu, const PciLocation& nic);
// The relation in words, with the nvidia-smi topo -m name and what it means
// for GPUDirect RDMA.
std::string describe_relation(const PciLocation& gpu, const PciLocation& nic);
// GpuInfo::nic_relation for GPU `gpu_address` and NIC `nic` (as for
// locate_pci_function); "" when `nic` is empty; a sentence saying what was
// not found otherwise.
std::string nic_relation(const std::filesystem::path& sysfs_root, std::string_view gpu_address,
                         std::string_view nic);

// ---- modules ---------------------------------------------------------------
// nvidia-peermem (or Mellanox's older nv_peer_mem) is loaded:
// <sysfs_root>/module/nvidia_peermem or .../nv_peer_mem exists.
bool peermem_loaded(const std::filesystem::path& sysfs_root);

// ---- payload memory modes -------------------------------------------------
// One try at a mode: nullopt when it worked, otherwise why not (one clause,
// e.g. "dma-buf refused by mlx5_0 (...)"). It may throw; choose_mode lets the
// exception through (staging failing is an error, not a fallback).
using ModeAttempt = std::function<std::optional<std::string>(Mode)>;

struct ModeChoice {
    Mode mode = Mode::staging;
    std::vector<std::string> refused;  // why each better mode did not run, best first
};

// The fallback chain from `preferred`: dmabuf → peermem → staging. Modes
// better than `preferred` are not tried (and say so). Throws
// std::runtime_error when even staging is refused.
ModeChoice choose_mode(Mode preferred, const ModeAttempt& attempt);
// Why GPU payload mode `mode` (dmabuf or peermem) must not run given the
// write ordering ("dma-buf refused: <refusal>"); nullopt when it may (and
// always for staging).
std::optional<std::string> ordering_refusal(Mode mode, const RdmaWriteOrdering& ordering);
// "dma-buf: GPU memory ..." / "staging (...): <reasons>".
std::string describe_choice(const ModeChoice& choice);

// ---- messages (one line each, naming the fix) -----------------------------
// "--gpu ID: no usable GPU (CUDA: <cuda_error>); run without --gpu ...";
// with `fix` (e.g. driver_mismatch_message): "...(CUDA: <cuda_error>): <fix>;
// or run without --gpu ...".
std::string no_gpu_message(int id, std::string_view cuda_error, std::string_view fix = {});
std::string gpu_id_message(int id, int count);
// ---- copies that stay inside one allocation ---------------------------------
// cudaMalloc may hand out adjacent allocations (NVIDIA/gdrcopy README.md,
// "Restrictions and known issues": two cudaMalloc'd memory regions may be
// contiguous), and a copy whose range spans two of them fails with
// cudaErrorInvalidValue. Seen on an H100 (driver 580.159.04, CUDA 13.0): eight 2 MiB cudaMalloc
// blocks came back back to back, and one cudaMemcpyAsync over the end of one into the next failed
// while the same copy inside one succeeded (docs/gpu.md, "What ran on a GPU"). So copies are merged
// only inside one allocation.
struct AddressRange {
    std::uintptr_t begin = 0;
    std::uintptr_t end = std::numeric_limits<std::uintptr_t>::max();  // default: no bound known
    bool holds(const void* p, std::size_t bytes) const {
        const auto a = reinterpret_cast<std::uintptr_t>(p);
        return a >= begin && a <= end && bytes <= end - a;
    }
};
// The allocation that holds an address (AddressRange{} when none is known:
// pageable host memory, which is not an allocation CUDA tracks).
using RangeOf = std::function<AddressRange(const void*)>;

// Allocations as they are made (the block rings' cudaMalloc per block).
class AllocationMap {
  public:
    void add(const void* begin, std::size_t bytes);
    // Forgets the allocation that starts at `begin` (none: nothing).
    void remove(const void* begin);
    // The allocation holding `p`, or AddressRange{} when it is in none.
    AddressRange range_of(const void* p) const;

  private:
    std::vector<AddressRange> sorted_;  // by begin, disjoint
};

// One host-to-device copy gathered from copies adjacent in both source and
// destination (the block rings' staged copy_in): a copy extends it only
// inside the allocation that holds its destination (`block`).
struct PendingCopy {
    std::uint8_t* dst = nullptr;
    const std::uint8_t* src = nullptr;
    std::size_t bytes = 0;
    AddressRange block;
    // Appends (next_dst, next_src, n) when it continues this copy in `block`.
    bool extend(std::uint8_t* next_dst, const std::uint8_t* next_src, std::size_t n) {
        if (bytes == 0 || dst + bytes != next_dst || src + bytes != next_src ||
            !block.holds(next_dst, n)) {
            return false;
        }
        bytes += n;
        return true;
    }
};

// Copies out of receive slots in batches: a run of copies of equal size whose
// sources and destinations each advance by a constant pitch (consecutive
// slots into consecutive places) becomes one strided copy (cudaMemcpy2DAsync:
// `rows` rows of `width` bytes, `src_pitch` / `dst_pitch` apart). Order is
// kept; a copy that fits no run starts a new one. No pitch of a run exceeds
// `max_pitch` (cudaDevAttrMaxPitch; 0 means no bound): a copy that would
// need a larger one starts a new run, and a copy wider than `max_pitch` is
// split into pieces of at most `max_pitch` bytes.
struct StridedCopy {
    std::uint8_t* dst = nullptr;
    const std::uint8_t* src = nullptr;
    std::size_t width = 0;
    std::size_t rows = 0;
    std::size_t dst_pitch = 0;  // >= width
    std::size_t src_pitch = 0;  // >= width
};
// `src_range` / `dst_range` (when given) bound every run: a copy joins a run
// only when it lies in the allocations that hold the run's first copy.
std::vector<StridedCopy> plan_strided_copies(
    std::span<const DeviceMemory::Copy> copies,
    std::size_t max_pitch = std::numeric_limits<std::size_t>::max(), const RangeOf& src_range = {},
    const RangeOf& dst_range = {});

inline constexpr std::string_view kBuiltWithoutCudaMessage =
    "--gpu: ibvcap was built without CUDA (rebuild with -DIBVCAP_CUDA=ON on a host with the CUDA "
    "toolkit)";

}  // namespace ibvcap::gpu
