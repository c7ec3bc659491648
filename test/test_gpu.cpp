// The GPU payload path (gpu/). Two kinds of tests in one program:
//   * Sizes, Pci, Peermem, Modes, Messages, Pattern: the logic that needs no
//     GPU (64 KiB sizing, PCIe topology from fake sysfs trees, the payload
//     mode fallback chain, the messages, the device pattern formula against
//     lib/traffic/pattern.cpp). They run and pass on every host and in both builds.
//   * Device: allocation, copies, the kernels against host references, and
//     registration on the simulated NIC. Each starts with
//     `if (!gpu_available()) GTEST_SKIP()`; ctest gives them the label `gpu`
//     and reports them as skipped on hosts without a GPU (test/CMakeLists.txt).
//     On a GPU host: ctest -L gpu --output-on-failure.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <system_error>
#include <thread>

#include "dada_rings.hpp"
#include "frames.hpp"
#include "generated_frames.hpp"
#include "gpu/gpu.hpp"
#include "gpu/gpu_logic.hpp"
#include "gpu/pattern_constants.hpp"
#include "lib/core/device_reads.hpp"
#include "lib/demux/demux.hpp"
#include "lib/run/gen.hpp"
#include "lib/sinks/block_ring.hpp"
#include "lib/sinks/block_sink.hpp"
#include "lib/traffic/generator.hpp"
#include "lib/traffic/pattern.hpp"
#include "test/sim/sim_nic.hpp"

namespace ibvcap::gpu {
namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text << "\n";
}

// A fake /sys with a PCI tree:
//   pci0000:00 ─ 0000:00:01.0 (root port) ─ 0000:01:00.0 (switch up)
//                    ├─ 0000:02:08.0 ─ 0000:3b:00.0  GPU A   (node 0)
//                    └─ 0000:02:10.0 ─ 0000:3c:00.0  NIC mlx5_0 / ens1f0 (node 0)
//   pci0000:00 ─ 0000:00:02.0 (root port) ─ 0000:3d:00.0  GPU B (node 0)
//   pci0000:00 ─ 0000:00:05.0  GPU C on the root bus (node 0)
//   pci0000:80 ─ 0000:80:01.0 ─ 0000:81:00.0  GPU D (node 1)
struct FakeSysfs {
    test::TempDir dir;
    fs::path root = dir.path() / "sys";

    void add(const std::string& chain, int numa, const std::vector<std::string>& names = {}) {
        const fs::path dev = root / "devices" / chain;
        fs::create_directories(dev);
        write_file(dev / "numa_node", std::to_string(numa));
        const std::string address = dev.filename().string();
        fs::create_directories(root / "bus/pci/devices");
        fs::create_symlink(dev, root / "bus/pci/devices" / address);
        for (const auto& name : names) {
            const fs::path link = root / name / "device";
            fs::create_directories(link.parent_path());
            fs::create_symlink(dev, link);
        }
    }

    FakeSysfs() {
        add("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:3b:00.0", 0);
        add("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:3c:00.0", 0,
            {"class/infiniband/mlx5_0", "class/net/ens1f0"});
        add("pci0000:00/0000:00:02.0/0000:3d:00.0", 0);
        add("pci0000:00/0000:00:05.0", 0);
        add("pci0000:80/0000:80:01.0/0000:81:00.0", 1);
    }
};

// ---- sizes ---------------------------------------------------------------------

TEST(Sizes, RegionsAreWhole64KiBPages) {
    EXPECT_EQ(kGpuPageBytes, 65536u);
    EXPECT_EQ(round_up(0, kGpuPageBytes), 0u);
    EXPECT_EQ(round_up(1, kGpuPageBytes), 65536u);
    EXPECT_EQ(round_up(65536, kGpuPageBytes), 65536u);
    EXPECT_EQ(round_up(65537, kGpuPageBytes), 131072u);
    EXPECT_EQ(round_up(std::size_t{4096} * 8192, kGpuPageBytes), std::size_t{4096} * 8192);
    EXPECT_EQ(round_up(SIZE_MAX - 10, kGpuPageBytes), std::nullopt);  // would overflow
    EXPECT_EQ(round_up(100, 3), std::nullopt);                        // not a power of two
}

TEST(Sizes, AlignedOffsetFindsTheFirstPageThatFits) {
    // cudaMalloc's usual 2 MiB-aligned result needs no offset.
    EXPECT_EQ(aligned_offset(0x7f0000200000u, 1 << 20, 1 << 20, kGpuPageBytes), 0u);
    // 256-byte aligned: the next 64 KiB boundary, if the rest still fits.
    EXPECT_EQ(aligned_offset(0x7f0000000100u, (1 << 20) + kGpuPageBytes, 1 << 20, kGpuPageBytes),
              kGpuPageBytes - 0x100);
    EXPECT_EQ(aligned_offset(0x7f0000000100u, 1 << 20, 1 << 20, kGpuPageBytes), std::nullopt);
    EXPECT_EQ(aligned_offset(0x7f0000000100u, 0x100, 0, kGpuPageBytes), std::nullopt);
    EXPECT_EQ(aligned_offset(0x1000u, 100, 10, 48), std::nullopt);  // not a power of two
}

// ---- PCI topology --------------------------------------------------------------

TEST(Pci, AddressesAreNormalizedToTheSysfsSpelling) {
    EXPECT_EQ(normalize_pci_address("00000000:3B:00.0"), "0000:3b:00.0");  // CUDA, nvidia-smi
    EXPECT_EQ(normalize_pci_address("0000:3b:00.0"), "0000:3b:00.0");
    EXPECT_EQ(normalize_pci_address("3b:00.1"), "0000:3b:00.1");
    EXPECT_EQ(normalize_pci_address("10000:01:00.0"), "10000:01:00.0");  // a VMD domain
    for (const char* bad : {"", "3b:00", "0000:3b:00.8", "0000:3b:20.0", "0000:3bb:00.0",
                            "pci0000:00", "mlx5_0", "0000:3b:00.0x", "zz:00.0"}) {
        EXPECT_EQ(normalize_pci_address(bad), std::nullopt) << bad;
    }
}

TEST(Pci, PathsGiveHostBridgeBridgesAndDevice) {
    const auto loc = parse_pci_path(
        "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:3b:00.0");
    ASSERT_TRUE(loc);
    EXPECT_EQ(loc->host_bridge, "pci0000:00");
    EXPECT_EQ(loc->address, "0000:3b:00.0");
    EXPECT_EQ(loc->bridges,
              (std::vector<std::string>{"0000:00:01.0", "0000:01:00.0", "0000:02:08.0"}));
    // A path below the function (a netdev) stops at the function.
    const auto net = parse_pci_path("/sys/devices/pci0000:00/0000:00:05.0/net/eth0");
    ASSERT_TRUE(net);
    EXPECT_EQ(net->address, "0000:00:05.0");
    EXPECT_TRUE(net->bridges.empty());
    EXPECT_FALSE(parse_pci_path("/sys/devices/virtual/net/lo"));
    EXPECT_FALSE(parse_pci_path("/sys/devices/pci0000:00"));
}

TEST(Pci, NicsAreFoundByAddressPathRdmaDeviceOrNetdev) {
    const FakeSysfs sys;
    for (const std::string& what :
         {std::string("0000:3c:00.0"), std::string("3c:00.0"), std::string("mlx5_0"),
          std::string("ens1f0"), (sys.root / "class/infiniband/mlx5_0/device").string()}) {
        const auto loc = locate_pci_function(sys.root, what);
        ASSERT_TRUE(loc) << what;
        EXPECT_EQ(loc->address, "0000:3c:00.0") << what;
        EXPECT_EQ(loc->numa_node, 0) << what;
    }
    EXPECT_EQ(locate_pci_function(sys.root, "0000:81:00.0")->numa_node, 1);
    EXPECT_FALSE(locate_pci_function(sys.root, "mlx5_9"));
    EXPECT_FALSE(locate_pci_function(sys.root, "0000:99:00.0"));
    EXPECT_FALSE(locate_pci_function(sys.root, ""));
}

TEST(Pci, RelationFollowsTheCommonUpstreamBridge) {
    const FakeSysfs sys;
    const auto at = [&](const char* a) { return *locate_pci_function(sys.root, a); };
    const PciLocation nic = at("mlx5_0");
    EXPECT_EQ(relate(at("0000:3b:00.0"), nic), PciRelation::same_switch);
    EXPECT_EQ(relate(at("0000:3d:00.0"), nic), PciRelation::same_host_bridge);
    EXPECT_EQ(relate(at("0000:00:05.0"), nic), PciRelation::same_host_bridge);
    EXPECT_EQ(relate(at("0000:81:00.0"), nic), PciRelation::different_numa_nodes);

    PciLocation a{"0000:3b:00.0", "pci0000:00", {"0000:00:01.0", "0000:01:00.0"}, 0};
    PciLocation b{"0000:3c:00.0", "pci0000:00", {"0000:00:01.0", "0000:01:08.0"}, 0};
    EXPECT_EQ(relate(a, b), PciRelation::same_root_port);
    b.host_bridge = "pci0000:40";
    EXPECT_EQ(relate(a, b), PciRelation::same_numa_node);
    a.numa_node = b.numa_node = -1;
    EXPECT_EQ(relate(a, b), PciRelation::unknown);
}

TEST(Pci, RelationIsDescribedWithTheTopoNameAndWhatItMeans) {
    const FakeSysfs sys;
    const std::string best = nic_relation(sys.root, "0000:3b:00.0", "mlx5_0");
    EXPECT_NE(best.find("share a PCIe switch (below 0000:01:00.0)"), std::string::npos) << best;
    EXPECT_NE(best.find("PIX/PXB"), std::string::npos) << best;
    const std::string phb = nic_relation(sys.root, "0000:3d:00.0", "ens1f0");
    EXPECT_NE(phb.find("PHB"), std::string::npos) << phb;
    const std::string sys_link = nic_relation(sys.root, "0000:81:00.0", "0000:3c:00.0");
    EXPECT_NE(sys_link.find("NUMA node 1, NIC 0000:3c:00.0 on node 0"), std::string::npos)
        << sys_link;
    EXPECT_NE(sys_link.find("SYS"), std::string::npos) << sys_link;
    EXPECT_EQ(nic_relation(sys.root, "0000:3b:00.0", ""), "");
    EXPECT_NE(nic_relation(sys.root, "0000:3b:00.0", "mlx5_7").find("NIC mlx5_7 not found"),
              std::string::npos);
    EXPECT_NE(nic_relation(sys.root, "0000:99:00.0", "mlx5_0").find("GPU 0000:99:00.0 not found"),
              std::string::npos);
}

// ---- modules -------------------------------------------------------------------

TEST(Peermem, LoadedWhenEitherModuleIsInSysfs) {
    test::TempDir dir;
    EXPECT_FALSE(peermem_loaded(dir.path()));
    fs::create_directories(dir.path() / "module/nvidia");
    EXPECT_FALSE(peermem_loaded(dir.path()));
    fs::create_directories(dir.path() / "module/nv_peer_mem");
    EXPECT_TRUE(peermem_loaded(dir.path()));
    fs::remove_all(dir.path() / "module/nv_peer_mem");
    fs::create_directories(dir.path() / "module/nvidia_peermem");
    EXPECT_TRUE(peermem_loaded(dir.path()));
}

// ---- payload memory modes ------------------------------------------------------

TEST(Modes, FallBackFromDmabufToPeermemToStagingSayingWhy) {
    std::vector<Mode> tried;
    const auto refuse_gpu = [&](Mode m) -> std::optional<std::string> {
        tried.push_back(m);
        switch (m) {
            case Mode::dmabuf:
                return "dma-buf refused (EOPNOTSUPP: no dma-buf)";
            case Mode::peermem:
                return "nvidia-peermem not loaded (modprobe nvidia-peermem)";
            case Mode::staging:
                break;
        }
        return std::nullopt;
    };
    const ModeChoice choice = choose_mode(Mode::dmabuf, refuse_gpu);
    EXPECT_EQ(choice.mode, Mode::staging);
    EXPECT_EQ(tried, (std::vector<Mode>{Mode::dmabuf, Mode::peermem, Mode::staging}));
    EXPECT_EQ(describe_choice(choice),
              "staging: payload lands in pinned host memory and is copied to the GPU (no "
              "GPUDirect RDMA): dma-buf refused (EOPNOTSUPP: no dma-buf); nvidia-peermem not "
              "loaded (modprobe nvidia-peermem)");
}

TEST(Modes, TheFirstModeThatWorksRunsAndWorseOnesAreNotTried) {
    std::vector<Mode> tried;
    const auto all_work = [&](Mode m) -> std::optional<std::string> {
        tried.push_back(m);
        return std::nullopt;
    };
    EXPECT_EQ(choose_mode(Mode::dmabuf, all_work).mode, Mode::dmabuf);
    EXPECT_EQ(tried, (std::vector<Mode>{Mode::dmabuf}));
    EXPECT_EQ(describe_choice(choose_mode(Mode::dmabuf, all_work)),
              "dma-buf: the NIC writes payload into GPU memory (GPUDirect RDMA)");

    tried.clear();
    const ModeChoice peer = choose_mode(Mode::peermem, all_work);
    EXPECT_EQ(peer.mode, Mode::peermem);
    EXPECT_EQ(tried, (std::vector<Mode>{Mode::peermem}));
    EXPECT_EQ(describe_choice(peer),
              "nvidia-peermem: the NIC writes payload into GPU memory (GPUDirect RDMA): dma-buf "
              "not tried (nvidia-peermem asked for)");
}

TEST(Modes, StagingThatFailsIsAnErrorNotAFallback) {
    const auto staging_fails = [](Mode m) -> std::optional<std::string> {
        return fmt::format("{} failed", to_string(m));
    };
    try {
        choose_mode(Mode::dmabuf, staging_fails);
        FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(),
                     "GPU payload memory: no mode worked: dma-buf failed; nvidia-peermem failed; "
                     "staging failed");
    }
    // An exception from an attempt (cudaHostAlloc, ibv_reg_mr) goes through as is.
    const auto throws = [](Mode m) -> std::optional<std::string> {
        if (m == Mode::staging) {
            throw std::system_error(ENOMEM, std::generic_category(), "ibv_reg_mr");
        }
        return "no";
    };
    EXPECT_THROW(choose_mode(Mode::dmabuf, throws), std::system_error);
}

// ---- messages ------------------------------------------------------------------

TEST(Messages, OneLineNamingTheFix) {
    EXPECT_EQ(no_gpu_message(0, "CUDA driver version is insufficient for CUDA runtime version"),
              "--gpu 0: no usable GPU (CUDA: CUDA driver version is insufficient for CUDA runtime "
              "version); run without --gpu to keep payload in host memory");
    EXPECT_EQ(gpu_id_message(3, 2), "--gpu 3: this host has 2 GPUs (ids 0 to 1)");
    EXPECT_EQ(gpu_id_message(1, 1), "--gpu 1: this host has 1 GPU (ids 0 to 0)");
    EXPECT_EQ(gpu_id_message(0, 0),
              "--gpu 0: no usable GPU (CUDA: no CUDA-capable device is detected); run without "
              "--gpu to keep payload in host memory");
    EXPECT_EQ(kBuiltWithoutCudaMessage,
              "--gpu: ibvcap was built without CUDA (rebuild with -DIBVCAP_CUDA=ON on a host with "
              "the CUDA toolkit)");
}

TEST(Messages, GpuInfoIsThreeOrFourLines) {
    GpuInfo info;
    info.id = 1;
    info.name = "NVIDIA H100 80GB HBM3";
    info.pci_bus_id = "0000:3b:00.0";
    info.gpudirect_rdma = true;
    info.dmabuf = true;
    info.numa_node = 0;
    info.rdma_writes_ordering = kRdmaWritesOrderingOwner;
    info.rdma_flush_options = kRdmaFlushOptionHost | kRdmaFlushOptionMemOps;
    info.bar1_bytes = std::uint64_t{128} << 30;
    info.iommu = IommuMode::passthrough;
    info.driver_version = 13000;
    info.runtime_version = 13000;
    EXPECT_EQ(format_gpu_info(info),
              "GPU 1: NVIDIA H100 80GB HBM3 (PCI 0000:3b:00.0, NUMA node 0); GPUDirect RDMA: "
              "yes; dma-buf: yes; nvidia-peermem: not loaded\n"
              "GPU 1 platform: CUDA driver 13.0, runtime 13.0; BAR1 128 GiB; IOMMU: passthrough "
              "(identity)\n"
              "GPUDirect RDMA write ordering: owner (no flush needed)");
    info.numa_node = -1;
    info.dmabuf = false;
    info.peermem_loaded = true;
    info.nic_relation = "GPU a and NIC b share a PCIe switch";
    info.rdma_writes_ordering = kRdmaWritesOrderingNone;
    info.rdma_flush_options = kRdmaFlushOptionHost;
    info.bar1_bytes = 0;
    info.iommu = IommuMode::translated;
    info.driver_version = 13010;
    EXPECT_EQ(format_gpu_info(info),
              "GPU 1: NVIDIA H100 80GB HBM3 (PCI 0000:3b:00.0, NUMA node none); GPUDirect RDMA: "
              "yes; dma-buf: no; nvidia-peermem: loaded\n"
              "GPU 1 platform: CUDA driver 13.1, runtime 13.0; BAR1 unknown; IOMMU: translated "
              "(DMA): GPUDirect RDMA needs iommu=pt or the IOMMU off on most platforms "
              "(docs/gpu.md, Setting up GPUDirect RDMA)\n"
              "GPUDirect RDMA write ordering: none (payload flushed with "
              "cudaDeviceFlushGPUDirectRDMAWrites once per batch before it is read)\n"
              "GPU-NIC path: GPU a and NIC b share a PCIe switch");
}

TEST(Messages, DriverOlderThanTheRuntimeNamesBothVersionsAndTheFix) {
    EXPECT_EQ(cuda_version_text(13000), "13.0");
    EXPECT_EQ(cuda_version_text(12080), "12.8");
    EXPECT_EQ(cuda_version_text(12050), "12.5");
    EXPECT_EQ(cuda_version_text(11040), "11.4");
    EXPECT_EQ(driver_mismatch_message(12040, 13000),
              "the NVIDIA driver supports CUDA 12.4 but ibvcap was built with the CUDA 13.0 "
              "runtime: install an R580 or later driver (CUDA 13 needs R580+), or rebuild ibvcap "
              "with a CUDA 12 toolkit, 12.5 or later (cmake "
              "-DCMAKE_CUDA_COMPILER=/usr/local/cuda-12.x/bin/nvcc)");
    EXPECT_NE(driver_mismatch_message(12080, 13000).find("/usr/local/cuda-12.8/bin/nvcc"),
              std::string::npos);
    // Another runtime: no R580, no CUDA 12 rebuild for an older major.
    EXPECT_EQ(driver_mismatch_message(11080, 12050),
              "the NVIDIA driver supports CUDA 11.8 but ibvcap was built with the CUDA 12.5 "
              "runtime: install a driver that supports CUDA 12.5");
    EXPECT_EQ(driver_mismatch_message(0, 13000), "");  // no driver: another problem
    EXPECT_EQ(driver_mismatch_message(13000, 13000), "");
    EXPECT_EQ(driver_mismatch_message(13020, 13000), "");
    EXPECT_EQ(no_gpu_message(0, "CUDA driver version is insufficient for CUDA runtime version",
                             driver_mismatch_message(12080, 13000)),
              "--gpu 0: no usable GPU (CUDA: CUDA driver version is insufficient for CUDA "
              "runtime version): the NVIDIA driver supports CUDA 12.8 but ibvcap was built with "
              "the CUDA 13.0 runtime: install an R580 or later driver (CUDA 13 needs R580+), or "
              "rebuild ibvcap with a CUDA 12 toolkit, 12.5 or later (cmake "
              "-DCMAKE_CUDA_COMPILER=/usr/local/cuda-12.8/bin/nvcc); or run without --gpu to "
              "keep payload in host memory");
}

TEST(Messages, RegistrationOutOfBar1SaysSoWithTheSizes) {
    constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
    EXPECT_EQ(size_text(256 * kMiB), "256 MiB");
    EXPECT_EQ(size_text(std::uint64_t{128} << 30), "128 GiB");
    EXPECT_EQ(size_text(1536 * kMiB), "1536 MiB");
    EXPECT_EQ(size_text(1), "1 MiB");
    EXPECT_EQ(bar1_shortfall(ENOMEM, 256 * kMiB, 288 * kMiB),
              "BAR1 is 256 MiB and the run registers 288 MiB of GPU memory for payload: lower "
              "--ring-depth (payload memory is ring depth x slot size per queue pair), or use a "
              "GPU with a larger BAR1");
    // Under BAR1 in total: the rest of BAR1 may be in use elsewhere.
    EXPECT_EQ(bar1_shortfall(ENOSPC, 256 * kMiB, 36 * kMiB + 1),
              "BAR1 is 256 MiB and the run registers 37 MiB of GPU memory for payload: if "
              "nvidia-smi -q -d MEMORY shows BAR1 Memory Usage near its total, lower "
              "--ring-depth or stop what else maps GPU memory through BAR1");
    EXPECT_TRUE(bar1_shortfall(EFAULT, 256 * kMiB, 300 * kMiB));
    // Other errors are not about BAR1; an unknown BAR1 says nothing.
    EXPECT_EQ(bar1_shortfall(EOPNOTSUPP, 256 * kMiB, 300 * kMiB), std::nullopt);
    EXPECT_EQ(bar1_shortfall(EINVAL, 256 * kMiB, 300 * kMiB), std::nullopt);
    EXPECT_EQ(bar1_shortfall(0, 256 * kMiB, 300 * kMiB), std::nullopt);
    EXPECT_EQ(bar1_shortfall(ENOMEM, 0, 300 * kMiB), std::nullopt);
}

// ---- platform facts ------------------------------------------------------------

TEST(Platform, RdmaWritesBelowOwnerOrderingNeedAFlush) {
    EXPECT_TRUE(needs_rdma_write_flush(kRdmaWritesOrderingNone));
    EXPECT_TRUE(needs_rdma_write_flush(99));
    EXPECT_FALSE(needs_rdma_write_flush(kRdmaWritesOrderingOwner));
    EXPECT_FALSE(needs_rdma_write_flush(kRdmaWritesOrderingAllDevices));
    EXPECT_TRUE(can_flush_rdma_writes(kRdmaFlushOptionHost));
    EXPECT_TRUE(can_flush_rdma_writes(kRdmaFlushOptionHost | kRdmaFlushOptionMemOps));
    EXPECT_FALSE(can_flush_rdma_writes(kRdmaFlushOptionMemOps));
    EXPECT_FALSE(can_flush_rdma_writes(0));
    EXPECT_EQ(describe_rdma_write_ordering(kRdmaWritesOrderingAllDevices, 0),
              "GPUDirect RDMA write ordering: all devices (no flush needed)");
    EXPECT_EQ(describe_rdma_write_ordering(kRdmaWritesOrderingOwner, 0),
              "GPUDirect RDMA write ordering: owner (no flush needed)");
    EXPECT_EQ(describe_rdma_write_ordering(kRdmaWritesOrderingNone, kRdmaFlushOptionHost),
              "GPUDirect RDMA write ordering: none (payload flushed with "
              "cudaDeviceFlushGPUDirectRDMAWrites once per batch before it is read)");
    EXPECT_EQ(describe_rdma_write_ordering(kRdmaWritesOrderingNone, kRdmaFlushOptionMemOps),
              "GPUDirect RDMA write ordering: none (payload flushed with "
              "CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES on the reading stream once per batch)");
    EXPECT_EQ(describe_rdma_write_ordering(kRdmaWritesOrderingNone, 0),
              "GPUDirect RDMA write ordering: the GPU neither orders nor can flush GPUDirect RDMA "
              "writes (write ordering 0, flush options 0x0): payload stays in host memory "
              "(staging)");
    EXPECT_EQ(describe_rdma_write_ordering(kRdmaWritesOrderingAllDevices, 0, true),
              "GPUDirect RDMA write ordering: the GPU reaches the CPU over NVLink-C2C, where the "
              "NIC's PCIe writes and its completions take unordered paths that CUDA cannot flush: "
              "payload stays in host memory (staging)");
}

// gpu-cuda-2.md N5: below Owner ordering the Host flush runs where the GPU
// has it, else the MemOps flush (not a warning and no flush at all).
TEST(Platform, WithoutTheHostFlushTheMemOpsFlushRuns) {
    const auto plan = [](int ordering, int options) {
        return plan_rdma_write_flush(ordering, options, false);
    };
    EXPECT_EQ(plan(kRdmaWritesOrderingNone, kRdmaFlushOptionHost).flush, RdmaFlush::host);
    EXPECT_EQ(plan(kRdmaWritesOrderingNone, kRdmaFlushOptionHost | kRdmaFlushOptionMemOps).flush,
              RdmaFlush::host);
    const RdmaWriteOrdering memops = plan(kRdmaWritesOrderingNone, kRdmaFlushOptionMemOps);
    EXPECT_EQ(memops.flush, RdmaFlush::memops);
    EXPECT_FALSE(memops.refusal);
    EXPECT_EQ(ordering_refusal(Mode::dmabuf, memops), std::nullopt);
    // Owner and all devices: nothing to flush, whatever the options say.
    EXPECT_EQ(plan(kRdmaWritesOrderingOwner, kRdmaFlushOptionHost).flush, RdmaFlush::none);
    EXPECT_EQ(plan(kRdmaWritesOrderingAllDevices, kRdmaFlushOptionMemOps).flush, RdmaFlush::none);
    EXPECT_FALSE(plan(kRdmaWritesOrderingOwner, 0).refusal);
    EXPECT_FALSE(plan(kRdmaWritesOrderingAllDevices, 0).refusal);
}

// ... and with neither flush, payload does not go into GPU memory at all:
// the mode choice falls back to staging and says why.
TEST(Platform, WithNeitherFlushGpuPayloadFallsBackToStaging) {
    const RdmaWriteOrdering none = plan_rdma_write_flush(kRdmaWritesOrderingNone, 0, false);
    ASSERT_TRUE(none.refusal);
    EXPECT_EQ(none.flush, RdmaFlush::none);
    EXPECT_EQ(ordering_refusal(Mode::staging, none), std::nullopt);
    const auto gpu_modes_work = [&](Mode m) -> std::optional<std::string> {
        return ordering_refusal(m, none);  // what try_dmabuf / try_peermem return first
    };
    const ModeChoice choice = choose_mode(Mode::dmabuf, gpu_modes_work);
    EXPECT_EQ(choice.mode, Mode::staging);
    EXPECT_EQ(describe_choice(choice),
              "staging: payload lands in pinned host memory and is copied to the GPU (no "
              "GPUDirect RDMA): dma-buf refused: the GPU neither orders nor can flush GPUDirect "
              "RDMA writes (write ordering 0, flush options 0x0); nvidia-peermem refused: the GPU "
              "neither orders nor can flush GPUDirect RDMA writes (write ordering 0, flush "
              "options 0x0)");
}

// On NVLink-C2C (Grace) the driver reports all-devices ordering and its
// flush is a no-op (cuda.h:5692-5700); NCCL flushes there with an RDMA read
// (ncclTopoFlushC2c), which ibvcap's raw packet QPs cannot issue: GPU
// payload is refused, whatever the ordering and flush options say.
TEST(Platform, OnNvlinkC2cGpuPayloadIsRefused) {
    EXPECT_TRUE(is_c2c_platform(true, 1));
    EXPECT_FALSE(is_c2c_platform(true, 0));   // a PCIe GPU on an Arm server
    EXPECT_FALSE(is_c2c_platform(false, 1));  // x86: no C2C
    for (const int ordering :
         {kRdmaWritesOrderingNone, kRdmaWritesOrderingOwner, kRdmaWritesOrderingAllDevices}) {
        for (const int options : {0, kRdmaFlushOptionHost, kRdmaFlushOptionMemOps,
                                  kRdmaFlushOptionHost | kRdmaFlushOptionMemOps}) {
            const RdmaWriteOrdering c2c = plan_rdma_write_flush(ordering, options, true);
            EXPECT_TRUE(c2c.refusal) << ordering << " " << options;
            EXPECT_TRUE(ordering_refusal(Mode::dmabuf, c2c)) << ordering << " " << options;
            EXPECT_TRUE(ordering_refusal(Mode::peermem, c2c)) << ordering << " " << options;
        }
    }
    const auto refused = ordering_refusal(
        Mode::dmabuf, plan_rdma_write_flush(kRdmaWritesOrderingAllDevices, 0, true));
    ASSERT_TRUE(refused);
    EXPECT_EQ(*refused,
              "dma-buf refused: the GPU reaches the CPU over NVLink-C2C, where the NIC's PCIe "
              "writes and its completions take unordered paths that CUDA cannot flush");
}

TEST(Platform, Bar1SizeComesFromTheSysfsResourceFile) {
    const FakeSysfs sys;
    // As the kernel writes it: one "start end flags" line per resource.
    write_file(sys.root / "bus/pci/devices/0000:3b:00.0/resource",
               "0x00000000fa000000 0x00000000faffffff 0x0000000000040200\n"
               "0x000000b000000000 0x000000b00fffffff 0x000000000014220c\n"
               "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
               "0x00000000fb000000 0x00000000fb01ffff 0x000000000014220c\n"
               "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
               "0x0000000000003000 0x000000000000307f 0x0000000000040101");
    EXPECT_EQ(bar_size(sys.root, "0000:3b:00.0", 1), std::uint64_t{256} << 20);
    EXPECT_EQ(bar_size(sys.root, "0000:3b:00.0", 0), std::uint64_t{16} << 20);
    EXPECT_EQ(bar_size(sys.root, "0000:3b:00.0", 3), std::uint64_t{128} << 10);
    EXPECT_EQ(bar_size(sys.root, "0000:3b:00.0", 5), 128u);
    EXPECT_EQ(bar_size(sys.root, "0000:3b:00.0", 2), std::nullopt);  // unassigned
    EXPECT_EQ(bar_size(sys.root, "0000:3b:00.0", 6), std::nullopt);
    EXPECT_EQ(bar_size(sys.root, "0000:3b:00.0", -1), std::nullopt);
    EXPECT_EQ(bar_size(sys.root, "0000:3d:00.0", 1), std::nullopt);  // no resource file
    EXPECT_EQ(bar_size(sys.root, "0000:99:00.0", 1), std::nullopt);  // no such device
    // A large BAR1 (H100: 128 GiB).
    write_file(sys.root / "bus/pci/devices/0000:81:00.0/resource",
               "0x00000000d0000000 0x00000000d0ffffff 0x0000000000040200\n"
               "0x0000220000000000 0x0000221fffffffff 0x000000000014220c");
    EXPECT_EQ(bar_size(sys.root, "0000:81:00.0", 1), std::uint64_t{128} << 30);
    // Malformed: end before start, not hex, one field, too few lines.
    for (const char* bad : {"0x10 0x0 0x0\n0x20 0x10 0x0", "0x10 0x1f 0x0\nzz 0x10 0x0",
                            "0x10 0x1f 0x0\n0x20", "0x10 0x1f 0x0"}) {
        write_file(sys.root / "bus/pci/devices/0000:00:05.0/resource", bad);
        EXPECT_EQ(bar_size(sys.root, "0000:00:05.0", 1), std::nullopt) << bad;
    }
}

TEST(Platform, IommuModeComesFromTheGpusGroupType) {
    const FakeSysfs sys;
    const std::string gpu = "0000:3b:00.0";
    // No IOMMU registered and no group: off.
    EXPECT_EQ(iommu_mode(sys.root, gpu), IommuMode::off);
    fs::create_directories(sys.root / "class/iommu");
    EXPECT_EQ(iommu_mode(sys.root, gpu), IommuMode::off);  // the class exists but is empty
    // An IOMMU is registered but the GPU is in no group we can see.
    fs::create_directories(sys.root / "class/iommu/dmar0");
    EXPECT_EQ(iommu_mode(sys.root, gpu), IommuMode::unknown);
    // The GPU's group (a link into /sys/kernel/iommu_groups), with each type.
    const fs::path group = sys.root / "kernel/iommu_groups/17";
    fs::create_directories(group);
    fs::create_directory_symlink(group, sys.root / "bus/pci/devices" / gpu / "iommu_group");
    EXPECT_EQ(iommu_mode(sys.root, gpu), IommuMode::unknown);  // no type file (older kernels)
    const std::pair<const char*, IommuMode> types[] = {{"identity", IommuMode::passthrough},
                                                       {"DMA", IommuMode::translated},
                                                       {"DMA-FQ", IommuMode::translated},
                                                       {"blocked", IommuMode::unknown}};
    for (const auto& [type, mode] : types) {
        write_file(group / "type", type);
        EXPECT_EQ(iommu_mode(sys.root, gpu), mode) << type;
    }
    // Another device is in no group.
    EXPECT_EQ(iommu_mode(sys.root, "0000:3d:00.0"), IommuMode::unknown);

    EXPECT_STREQ(to_string(IommuMode::off), "off");
    EXPECT_STREQ(to_string(IommuMode::passthrough), "passthrough (identity)");
    EXPECT_STREQ(to_string(IommuMode::translated), "translated (DMA)");
    EXPECT_STREQ(to_string(IommuMode::unknown), "unknown");
    EXPECT_EQ(describe_iommu(IommuMode::passthrough), "passthrough (identity)");
    EXPECT_NE(describe_iommu(IommuMode::translated).find("needs iommu=pt or the IOMMU off"),
              std::string::npos);
}

// Whatever this host has, asking for a GPU that cannot be used fails with one
// line starting "--gpu": built without CUDA, no driver/GPU, or out of range.
TEST(Messages, UnusableGpusFailWithOneLine) {
    const auto message = [](const auto& call) -> std::string {
        try {
            call();
        } catch (const std::runtime_error& e) {
            return e.what();
        }
        return "(no exception)";
    };
    const std::string probe = message([] { probe_gpu(1000); });
    const std::string memory = message([] { make_device_block_memory(-1); });
    const std::string payload = message([] { make_gpu_payload_memory(1000); });
    for (const auto& m : {probe, memory, payload}) {
        EXPECT_EQ(m.find('\n'), std::string::npos) << m;
        if (!built_with_cuda()) {
            EXPECT_EQ(m, kBuiltWithoutCudaMessage);
        } else if (!gpu_available()) {
            EXPECT_NE(m.find("no usable GPU (CUDA: "), std::string::npos) << m;
        } else {
            EXPECT_NE(m.find("this host has"), std::string::npos) << m;
        }
    }
    EXPECT_EQ(probe.rfind("--gpu 1000: ", 0) == 0 || probe == kBuiltWithoutCudaMessage, true)
        << probe;
    EXPECT_EQ(memory.rfind("--gpu -1: ", 0) == 0 || memory == kBuiltWithoutCudaMessage, true)
        << memory;
}

// ---- the pattern in device-visible form ----------------------------------------

TEST(Pattern, DeviceFormulaMatchesLibPatternBitForBit) {
    static_assert(pattern::splitmix64(0) == 0xE220A8397B1DCDAFull);  // splitmix64's first output
    std::mt19937_64 rng(7);
    for (int i = 0; i < 1000; ++i) {
        const auto antenna = static_cast<std::uint32_t>(rng());
        const auto thread = static_cast<std::uint16_t>(rng());
        const std::uint64_t index = rng() >> (i % 64);
        ASSERT_EQ(pattern::key(antenna, thread, index), pattern_key(antenna, thread, index));
    }
    const std::uint64_t key = pattern_key(test::kAntenna1, 3, 123456);
    std::vector<std::uint8_t> payload(8192 + 5);
    fill_pattern(key, payload);
    for (std::size_t i = 0; i <= 8192 / 8; ++i) {
        const std::uint64_t w = pattern::word(key, i);
        for (std::size_t b = 0; b < 8 && i * 8 + b < payload.size(); ++b) {
            ASSERT_EQ(payload[i * 8 + b], static_cast<std::uint8_t>(w >> (8 * b))) << i;
        }
    }
    EXPECT_EQ(pattern::nonzero_bytes(0), 0u);
    EXPECT_EQ(pattern::nonzero_bytes(0xff00000000000001ull), 2u);
    EXPECT_EQ(pattern::nonzero_bytes(~0ull), 8u);
}

// ---- on a GPU ------------------------------------------------------------------

#define REQUIRE_GPU()                                                                        \
    do {                                                                                     \
        if (!gpu_available()) {                                                              \
            GTEST_SKIP() << "no GPU: " << describe() << " (run ctest -L gpu on a GPU host)"; \
        }                                                                                    \
    } while (0)

// Payload memory asked for in GPU memory came back as staging (host memory):
// skipped only where the GPU has no GPUDirect RDMA (it cannot be done there);
// on a GPU that has it, the fallback is a failure.
#define REQUIRE_GPU_PAYLOAD(memory, fell_back)                                              \
    do {                                                                                    \
        if (fell_back) {                                                                    \
            const std::string why = (memory)->describe();                                   \
            ASSERT_NE(why.find("cudaDevAttrGPUDirectRDMASupported = 0"), std::string::npos) \
                << "payload fell back to staging on a GPU with GPUDirect RDMA: " << why;    \
            GTEST_SKIP() << "this GPU has no GPUDirect RDMA: " << why;                      \
        }                                                                                   \
    } while (0)

// The writers' batches of copies out of payload slots: runs of equal-sized
// copies with constant pitches become one strided copy; anything else starts
// a new run, and the order of the copies is kept.
TEST(StagingBatches, RunsOfSlotsBecomeOneStridedCopy) {
    std::vector<std::uint8_t> src(64 * 1024);
    std::vector<std::uint8_t> dst(64 * 1024);
    auto copy = [&](std::size_t d, std::size_t s, std::size_t n) {
        return DeviceMemory::Copy{dst.data() + d, src.data() + s, n};
    };
    // Eight consecutive 1000-byte payloads in slots 1024 apart, packed
    // one after the other at the destination: one run.
    std::vector<DeviceMemory::Copy> slots;
    for (std::size_t i = 0; i < 8; ++i) {
        slots.push_back(copy(i * 1000, i * 1024, 1000));
    }
    auto runs = plan_strided_copies(slots);
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].rows, 8u);
    EXPECT_EQ(runs[0].width, 1000u);
    EXPECT_EQ(runs[0].src_pitch, 1024u);
    EXPECT_EQ(runs[0].dst_pitch, 1000u);
    EXPECT_EQ(runs[0].src, src.data());
    EXPECT_EQ(runs[0].dst, dst.data());

    // A slot skipped (a frame held by another output) changes the pitch: a
    // new run starts; so does another size; empty copies are dropped.
    std::vector<DeviceMemory::Copy> mixed = {copy(0, 0, 1000),       copy(1000, 1024, 1000),
                                             copy(2000, 3072, 1000), copy(3000, 4096, 1000),
                                             copy(4000, 5120, 600),  copy(4600, 6144, 0)};
    runs = plan_strided_copies(mixed);
    ASSERT_EQ(runs.size(), 3u);
    EXPECT_EQ(runs[0].rows, 2u);
    EXPECT_EQ(runs[1].rows, 2u);
    EXPECT_EQ(runs[1].src, src.data() + 3072);
    EXPECT_EQ(runs[1].src_pitch, 1024u);
    EXPECT_EQ(runs[2].rows, 1u);
    EXPECT_EQ(runs[2].width, 600u);

    // Backwards or overlapping pitches are never merged.
    std::vector<DeviceMemory::Copy> backwards = {copy(0, 4096, 1000), copy(1000, 0, 1000)};
    EXPECT_EQ(plan_strided_copies(backwards).size(), 2u);
    std::vector<DeviceMemory::Copy> overlap = {copy(0, 0, 1000), copy(1000, 500, 1000)};
    EXPECT_EQ(plan_strided_copies(overlap).size(), 2u);

    // Carried out as planned (row by row on the host), the bytes land as
    // the copies say.
    std::mt19937 rng(1);
    for (auto& b : src) {
        b = static_cast<std::uint8_t>(rng());
    }
    std::fill(dst.begin(), dst.end(), 0);
    for (const auto& r : plan_strided_copies(mixed)) {
        for (std::size_t row = 0; row < r.rows; ++row) {
            std::memcpy(r.dst + row * r.dst_pitch, r.src + row * r.src_pitch, r.width);
        }
    }
    for (const auto& c : mixed) {
        EXPECT_EQ(std::memcmp(c.dst, c.src, c.bytes), 0);
    }
}

// cudaMemcpy2DAsync refuses a pitch above cudaDevAttrMaxPitch (2^31-1 on
// current GPUs): slots of two regions far apart in the address space, or
// rows wider than the bound, must not become one strided copy.
TEST(StagingBatches, NoPitchExceedsTheDevicesMaximum) {
    constexpr std::size_t kMaxPitch = (std::size_t{1} << 31) - 1;
    // Addresses only: the plan never touches the bytes.
    const auto at = [](std::uintptr_t address) { return reinterpret_cast<std::uint8_t*>(address); };
    const std::uintptr_t region_a = 0x7f0000000000u;
    const std::uintptr_t region_b = region_a + (std::size_t{3} << 30);  // 3 GiB further
    std::vector<std::uint8_t> dst(4 * 8192);
    std::vector<DeviceMemory::Copy> copies = {
        {dst.data(), at(region_a), 8192},
        {dst.data() + 8192, at(region_b), 8192},  // source pitch 3 GiB
        {dst.data() + 2 * 8192, at(region_b + 8960), 8192},
        {dst.data() + 3 * 8192, at(region_b + 2 * 8960), 8192},
    };
    auto runs = plan_strided_copies(copies, kMaxPitch);
    ASSERT_EQ(runs.size(), 2u);
    EXPECT_EQ(runs[0].rows, 1u);
    EXPECT_EQ(runs[0].src, at(region_a));
    EXPECT_EQ(runs[1].rows, 3u);
    EXPECT_EQ(runs[1].src, at(region_b));
    EXPECT_EQ(runs[1].src_pitch, 8960u);
    for (const auto& r : runs) {
        EXPECT_LE(r.src_pitch, kMaxPitch);
        EXPECT_LE(r.dst_pitch, kMaxPitch);
    }
    // Unbounded (the default), the first two merge with a 3 GiB pitch.
    EXPECT_EQ(plan_strided_copies(copies).front().src_pitch, std::size_t{3} << 30);
    // 0 means no bound.
    EXPECT_EQ(plan_strided_copies(copies, 0).size(), plan_strided_copies(copies).size());

    // A small bound: 1000-byte rows 1024 apart fit a bound of 1024 but not 1023.
    std::vector<std::uint8_t> src(8 * 1024);
    std::vector<std::uint8_t> out(8 * 1000);
    std::vector<DeviceMemory::Copy> slots;
    for (std::size_t i = 0; i < 8; ++i) {
        slots.push_back({out.data() + i * 1000, src.data() + i * 1024, 1000});
    }
    EXPECT_EQ(plan_strided_copies(slots, 1024).size(), 1u);
    EXPECT_EQ(plan_strided_copies(slots, 1023).size(), 8u);

    // A copy wider than the bound goes in pieces no wider than it, and the
    // plan still moves every byte where it belongs.
    std::mt19937 rng(3);
    for (auto& b : src) {
        b = static_cast<std::uint8_t>(rng());
    }
    std::vector<std::uint8_t> wide(2500 + 300, 0);
    std::vector<DeviceMemory::Copy> two = {{wide.data(), src.data() + 7, 2500},
                                           {wide.data() + 2500, src.data() + 4000, 300}};
    runs = plan_strided_copies(two, 1000);
    ASSERT_EQ(runs.size(), 3u);
    EXPECT_EQ(runs[0].width, 1000u);
    EXPECT_EQ(runs[0].rows, 2u);  // the two whole pieces, 1000 apart
    EXPECT_EQ(runs[1].width, 500u);
    EXPECT_EQ(runs[2].width, 300u);
    for (const auto& r : runs) {
        EXPECT_LE(r.width, 1000u);
        EXPECT_LE(r.src_pitch, 1000u);
        EXPECT_LE(r.dst_pitch, 1000u);
        for (std::size_t row = 0; row < r.rows; ++row) {
            std::memcpy(r.dst + row * r.dst_pitch, r.src + row * r.src_pitch, r.width);
        }
    }
    EXPECT_EQ(std::memcmp(wide.data(), src.data() + 7, 2500), 0);
    EXPECT_EQ(std::memcmp(wide.data() + 2500, src.data() + 4000, 300), 0);
}

// Two cudaMalloc allocations may lie back to back, and one copy over both
// fails (cudaErrorInvalidValue; seen on an H100: gpu_logic.hpp, AddressRange).
// Slots at the end of one region and the start of the next, a pitch apart,
// must not become one strided copy when the regions' bounds are known. Host
// vectors stand in for the allocations, and AllocationMap::range_of for
// cuMemGetAddressRange (the base and size of the allocation that contains a
// pointer: CUDA Driver API reference; SlotReader::allocation_of).
TEST(StagingBatches, NoRunSpansTwoAllocations) {
    std::vector<std::uint8_t> src(8 * 1024);
    std::vector<std::uint8_t> dst(8 * 1024);
    // "Allocations": src halves [0, 4096) and [4096, 8192), adjacent.
    AllocationMap regions;
    regions.add(src.data(), 4096);
    regions.add(src.data() + 4096, 4096);
    std::vector<DeviceMemory::Copy> slots;
    for (std::size_t i = 0; i < 8; ++i) {  // four slots in each region, 1024 apart
        slots.push_back(DeviceMemory::Copy{dst.data() + i * 1000, src.data() + i * 1024, 1000});
    }
    ASSERT_EQ(plan_strided_copies(slots).size(), 1u);  // unbounded: one run over both
    const RangeOf src_range = [&](const void* p) { return regions.range_of(p); };
    auto runs = plan_strided_copies(slots, 0, src_range);
    ASSERT_EQ(runs.size(), 2u);
    for (const auto& r : runs) {
        EXPECT_EQ(r.rows, 4u);
        const AddressRange a = regions.range_of(r.src);
        EXPECT_TRUE(a.holds(r.src, (r.rows - 1) * r.src_pitch + r.width));
    }
    EXPECT_EQ(runs[1].src, src.data() + 4096);

    // The same bound on the destination side.
    AllocationMap buffers;
    buffers.add(dst.data(), 3000);
    buffers.add(dst.data() + 3000, 5192);
    const RangeOf dst_range = [&](const void* p) { return buffers.range_of(p); };
    runs = plan_strided_copies(slots, 0, {}, dst_range);
    ASSERT_EQ(runs.size(), 2u);
    EXPECT_EQ(runs[0].rows, 3u);
    EXPECT_EQ(runs[1].dst, dst.data() + 3000);

    // An address no allocation holds gets the bound [a, a]: nothing joins it.
    const RangeOf unknown = [](const void* p) {
        const auto a = reinterpret_cast<std::uintptr_t>(p);
        return AddressRange{a, a};
    };
    EXPECT_EQ(plan_strided_copies(slots, 0, unknown).size(), slots.size());
}

// The block rings' staged copies (DeviceBlockMemory::copy_in) join into one
// cudaMemcpyAsync only while adjacent in source and destination and inside
// the ring block of the first: two blocks may be back to back.
TEST(StagingBatches, PendingCopyNeverExtendsIntoTheNextBlock) {
    std::vector<std::uint8_t> blocks(2 * 4096);  // two adjacent "ring blocks"
    std::vector<std::uint8_t> stage(8192);
    AllocationMap rings;
    rings.add(blocks.data(), 4096);
    rings.add(blocks.data() + 4096, 4096);
    std::uint8_t* dst = blocks.data() + 2048;
    PendingCopy p{dst, stage.data(), 512, rings.range_of(dst)};
    EXPECT_TRUE(p.extend(dst + 512, stage.data() + 512, 512));
    EXPECT_FALSE(p.extend(dst + 1024, stage.data() + 1000, 24));   // not adjacent in source
    EXPECT_FALSE(p.extend(dst + 1000, stage.data() + 1024, 24));   // nor in destination
    EXPECT_TRUE(p.extend(dst + 1024, stage.data() + 1024, 1024));  // to the block's end
    EXPECT_FALSE(p.extend(dst + 2048, stage.data() + 2048, 512));  // the next block
    EXPECT_EQ(p.bytes, 2048u);
    PendingCopy none;  // nothing pending: nothing to extend
    EXPECT_FALSE(none.extend(dst, stage.data(), 8));
    // Without a known bound (AddressRange{}) adjacency alone decides.
    PendingCopy unbounded{dst, stage.data(), 1024, AddressRange{}};
    EXPECT_TRUE(unbounded.extend(dst + 1024, stage.data() + 1024, 512));
}

TEST(StagingBatches, AllocationMapFindsTheAllocationOfAnAddress) {
    const auto at = [](std::uintptr_t a) { return reinterpret_cast<const void*>(a); };
    AllocationMap m;
    m.add(at(0x3000), 0x1000);
    m.add(at(0x1000), 0x1000);
    m.add(at(0x2000), 0x1000);  // adjacent to both
    EXPECT_EQ(m.range_of(at(0x2000)).begin, 0x2000u);
    EXPECT_EQ(m.range_of(at(0x2fff)).end, 0x3000u);
    EXPECT_EQ(m.range_of(at(0x3000)).begin, 0x3000u);
    EXPECT_EQ(m.range_of(at(0x1000)).begin, 0x1000u);
    const AddressRange none;
    EXPECT_EQ(m.range_of(at(0x0fff)).begin, none.begin);
    EXPECT_EQ(m.range_of(at(0x4000)).end, none.end);
    EXPECT_TRUE(m.range_of(at(0x2000)).holds(at(0x2000), 0x1000));
    EXPECT_FALSE(m.range_of(at(0x2000)).holds(at(0x2800), 0x1000));  // runs into the next
    // A freed allocation is forgotten (its addresses may come back in another).
    m.remove(at(0x2000));
    EXPECT_EQ(m.range_of(at(0x2000)).begin, none.begin);
    EXPECT_EQ(m.range_of(at(0x3000)).begin, 0x3000u);
    m.remove(at(0x2000));  // twice: nothing
    EXPECT_EQ(m.range_of(at(0x1000)).end, 0x2000u);
}

TEST(Device, ProbeReportsTheGpu) {
    REQUIRE_GPU();
    const GpuInfo info = probe_gpu(0, "");
    EXPECT_EQ(info.id, 0);
    EXPECT_FALSE(info.name.empty());
    EXPECT_EQ(normalize_pci_address(info.pci_bus_id), info.pci_bus_id);
    EXPECT_TRUE(info.nic_relation.empty());
    EXPECT_GT(info.max_pitch, 0u);
    EXPECT_GT(info.driver_version, 0);
    EXPECT_GT(info.runtime_version, 0);
    EXPECT_TRUE(info.rdma_writes_ordering == kRdmaWritesOrderingNone ||
                info.rdma_writes_ordering == kRdmaWritesOrderingOwner ||
                info.rdma_writes_ordering == kRdmaWritesOrderingAllDevices)
        << info.rdma_writes_ordering;
    const std::string text = format_gpu_info(info);
    EXPECT_EQ(text.rfind("GPU 0: " + info.name, 0), 0u) << text;
    std::cout << text << "\n";
}

TEST(Device, BlockMemoryCopiesLandWhileTheSourceIsReused) {
    REQUIRE_GPU();
    auto memory = make_device_block_memory(0);
    EXPECT_FALSE(memory->host_visible());
    constexpr std::size_t kBlock = (std::size_t{9} << 20) + 123;  // spans chunks of staging
    std::uint8_t* a = memory->allocate(kBlock);
    std::uint8_t* b = memory->allocate(kBlock);
    std::vector<std::uint8_t> want_a(kBlock, 0);
    std::vector<std::uint8_t> want_b(kBlock, 0);
    std::mt19937 rng(1);
    std::vector<std::uint8_t> src(8192);
    // Adjacent copies (coalesced), then scattered ones into both blocks, then
    // one bigger than a staging chunk; the source buffer is overwritten right
    // after every copy_in, as a re-posted receive slot would be.
    for (int i = 0; i < 900; ++i) {
        const bool adjacent = i < 300;
        const std::size_t n = adjacent ? 8192 : 1 + rng() % 5000;
        const std::size_t offset =
            adjacent ? static_cast<std::size_t>(i) * 8192 : rng() % (kBlock - n);
        const bool to_a = adjacent || i % 2 == 0;
        for (std::size_t j = 0; j < n; ++j) {
            src[j] = static_cast<std::uint8_t>(rng());
        }
        memory->copy_in((to_a ? a : b) + offset, src.data(), n);
        std::memcpy((to_a ? want_a : want_b).data() + offset, src.data(), n);
        std::fill(src.begin(), src.end(), 0xee);
    }
    std::vector<std::uint8_t> big(std::size_t{5} << 20);
    for (auto& x : big) {
        x = static_cast<std::uint8_t>(rng());
    }
    memory->copy_in(a + 1000, big.data(), big.size());
    std::memcpy(want_a.data() + 1000, big.data(), big.size());
    memory->synchronize();
    std::vector<std::uint8_t> got(kBlock);
    copy_to_host(got.data(), a, kBlock);
    EXPECT_TRUE(got == want_a);
    copy_to_host(got.data(), b, kBlock);
    EXPECT_TRUE(got == want_b);
}

GeneratorConfig one_antenna(std::uint64_t frames, double loss) {
    GeneratorConfig c;
    c.antennas = {test::kAntenna1};
    c.groups = {Endpoint{test::kGroup1, 36001}};
    c.threads = 2;
    c.frames = frames;
    c.payload_bytes = 8192;
    c.frames_per_period = 1000;
    c.start_seconds = 100;
    c.start_frame = 13;
    c.loss = loss;
    c.seed = 5;
    return c;
}

TEST(Device, RingOnGpuMemoryPassesThePatternCheckOnTheGpu) {
    REQUIRE_GPU();
    const GeneratorConfig config = one_antenna(2000, 0.02);
    BlockRingOptions options;
    options.frames_per_block = 128;
    options.threads = config.threads;
    options.payload_bytes = config.payload_bytes;
    options.blocks = 32;
    options.lateness = 4;
    auto memory = make_device_block_memory(0);
    BlockRing ring(options, *memory, CodifTiming{config.period, config.frames_per_period});
    Generator gen(config);
    GeneratedFrame f;
    while (gen.next(f)) {
        CodifHeader h;
        ASSERT_EQ(decode_codif(f.bytes.subspan(42, 64), h), CodifError::none);
        ring.place(h.threadid,
                   CodifTiming{config.period, config.frames_per_period}.index(h.seconds, h.frame),
                   f.bytes.subspan(42 + 64));
    }
    ring.flush();
    KernelScratch scratch(0, options);
    std::vector<std::uint8_t> host(ring.block_bytes());
    std::uint64_t blocks = 0;
    std::uint64_t present = 0;
    while (const Block* block = ring.acquire(std::chrono::milliseconds(0))) {
        ++blocks;
        present += block->present_count;
        EXPECT_EQ(verify_pattern(*block, options, test::kAntenna1, scratch), 0u);
        EXPECT_GT(verify_pattern(*block, options, test::kAntenna2, scratch), 0u);
        // The host reference agrees slot by slot.
        copy_to_host(host.data(), block->data, host.size());
        for (std::uint32_t t = 0; t < options.frames_per_block; ++t) {
            for (std::uint16_t th = 0; th < options.threads; ++th) {
                if (block->has(t, th, options.threads)) {
                    const std::size_t at =
                        (std::size_t{t} * options.threads + th) * options.payload_bytes;
                    ASSERT_EQ(
                        check_pattern(pattern_key(test::kAntenna1, th, block->first_index + t),
                                      Bytes(host.data() + at, options.payload_bytes)),
                        0u);
                }
            }
        }
        // Corrupt three bytes of the first present slot: the GPU counts three.
        for (std::size_t bit = 0; bit < std::size_t{options.frames_per_block} * options.threads;
             ++bit) {
            if ((block->present[bit / 64] >> (bit % 64)) & 1u) {
                std::uint8_t* slot = block->data + bit * options.payload_bytes;
                const std::uint8_t* was = host.data() + bit * options.payload_bytes;
                const std::uint8_t junk[3] = {static_cast<std::uint8_t>(was[0] ^ 1u),
                                              static_cast<std::uint8_t>(was[1] ^ 2u),
                                              static_cast<std::uint8_t>(was[2] ^ 4u)};
                copy_to_device(slot, junk, sizeof(junk));
                EXPECT_EQ(verify_pattern(*block, options, test::kAntenna1, scratch), 3u);
                break;
            }
        }
        ring.release(block);
    }
    EXPECT_GT(blocks, 10u);
    EXPECT_EQ(present, ring.stats().placed);
    EXPECT_LT(present, std::uint64_t{2000} * 2);  // some were lost, and were absent
}

// The block sink on GPU block memory with frames that carry no lease (the
// pcap source): staged on the calling thread, placed by the copy thread in
// batches; and a payload in two pieces (a host head piece copied at once,
// the rest held): every block passes the pattern check on the GPU.
TEST(Device, BlockSinkStagesLeaselessFramesAndJoinsSplitPayloadsOnTheGpu) {
    REQUIRE_GPU();
    const GeneratorConfig config = one_antenna(400, 0.0);  // 800 frames
    BlockSinkOptions bo;
    bo.ring.frames_per_block = 64;
    bo.ring.threads = config.threads;
    bo.ring.blocks = 32;
    bo.ring.lateness = 4;
    bo.spare_rings = 1;
    bo.memory = [] { return make_device_block_memory(0); };
    BlockSink sink(bo);
    sink.prepare({}, 0);
    Ledger ledger;
    DemuxOptions d;
    d.groups = config.groups;
    Demux demux(d, ledger);
    demux.add_sink(sink);
    const auto frames = test::frames_of(config);  // fewer than the staging slots (1,024)
    for (const auto& bytes : frames) {
        Frame f;
        f.head = Bytes(bytes.data(), bytes.size());
        f.wire_bytes = static_cast<std::uint32_t>(bytes.size());
        demux.on_frame(f);
    }
    sink.flush();
    ASSERT_FALSE(sink.failed());
    EXPECT_EQ(sink.copy_dropped(), 0u);
    EXPECT_EQ(sink.rings_made_late(), 0u);
    BlockRing* ring = sink.ring(config.groups.front(), test::kAntenna1);
    ASSERT_NE(ring, nullptr);
    EXPECT_EQ(ring->stats().placed, frames.size());
    KernelScratch scratch(0, ring->options());
    std::uint64_t present = 0;
    while (const Block* b = ring->acquire(std::chrono::milliseconds(0))) {
        present += b->present_count;
        EXPECT_EQ(verify_pattern(*b, ring->options(), test::kAntenna1, scratch), 0u);
        ring->release(b);
    }
    EXPECT_EQ(present, frames.size());

    // Two pieces: the first 4 bytes copied at once, the rest held.
    BlockRingOptions options = bo.ring;
    options.payload_bytes = config.payload_bytes;
    auto memory = make_device_block_memory(0);
    BlockRing split(options, *memory, CodifTiming{config.period, config.frames_per_period});
    for (const auto& bytes : frames) {
        CodifHeader h;
        ASSERT_EQ(decode_codif(Bytes(bytes.data() + 42, 64), h), CodifError::none);
        const Bytes payload(bytes.data() + 42 + 64, config.payload_bytes);
        split.place(h.threadid,
                    CodifTiming{config.period, config.frames_per_period}.index(h.seconds, h.frame),
                    payload.subspan(0, 4), payload.subspan(4), nullptr, true);
        split.synchronize_copies();
    }
    split.flush();
    present = 0;
    while (const Block* b = split.acquire(std::chrono::milliseconds(0))) {
        present += b->present_count;
        EXPECT_EQ(verify_pattern(*b, options, test::kAntenna1, scratch), 0u);
        split.release(b);
    }
    EXPECT_EQ(present, frames.size());
}

TEST(Device, ZeroFillAndPowerMatchTheHost) {
    REQUIRE_GPU();
    for (const std::uint32_t payload : {8192u, 1000u}) {  // vector and byte paths
        BlockRingOptions options;
        options.frames_per_block = 64;
        options.threads = 3;
        options.payload_bytes = payload;
        const std::size_t slots = std::size_t{options.frames_per_block} * options.threads;
        auto memory = make_device_block_memory(0);
        Block block;
        block.data = memory->allocate(slots * payload);
        block.present.assign((slots + 63) / 64, 0);
        std::mt19937 rng(payload);
        std::vector<std::uint8_t> host(slots * payload);
        for (auto& x : host) {
            x = static_cast<std::uint8_t>(rng());
        }
        std::vector<double> want(options.threads, 0.0);
        for (std::size_t s = 0; s < slots; ++s) {
            if (rng() % 4 != 0) {
                block.present[s / 64] |= std::uint64_t{1} << (s % 64);
                ++block.present_count;
                for (std::size_t i = 0; i < payload; ++i) {
                    const int v = static_cast<std::int8_t>(host[s * payload + i]);
                    want[s % options.threads] += v * v;
                }
            }
        }
        copy_to_device(block.data, host.data(), host.size());
        KernelScratch scratch(0, options);
        zero_missing_and_power(block, options, scratch);
        const std::vector<float> power = scratch.power_to_host();
        ASSERT_EQ(power.size(), options.threads);
        for (std::uint16_t t = 0; t < options.threads; ++t) {
            EXPECT_FLOAT_EQ(power[t], static_cast<float>(want[t])) << t;
        }
        std::vector<std::uint8_t> got(host.size());
        copy_to_host(got.data(), block.data, got.size());
        for (std::size_t s = 0; s < slots; ++s) {
            const bool there = (block.present[s / 64] >> (s % 64)) & 1u;
            const auto* g = got.data() + s * payload;
            if (there) {
                ASSERT_EQ(std::memcmp(g, host.data() + s * payload, payload), 0) << s;
            } else {
                ASSERT_TRUE(std::all_of(g, g + payload, [](std::uint8_t x) { return x == 0; }))
                    << s;
            }
        }
    }
}

TEST(Device, PayloadMemoryFallsBackToStagingOnTheSimulatedNic) {
    REQUIRE_GPU();
    test::TempDir no_modules;  // a /sys without nvidia_peermem
    sim::SimProvider provider;
    provider.add(sim::SimConfig{});
    auto device = provider.open("sim_mlx5_0", 1);
    auto memory = make_gpu_payload_memory(0, Mode::dmabuf, no_modules.path());
    PayloadMemory::Region r = memory->allocate(*device, 100000);
    ASSERT_NE(r.host_view, nullptr);  // staging: pinned host memory
    EXPECT_EQ(r.nic_address, reinterpret_cast<std::uintptr_t>(r.host_view));
    EXPECT_NE(r.mr, nullptr);
    std::memset(r.host_view, 0x5a, 131072);  // the whole rounded-up region is there
    const std::string text = memory->describe();
    EXPECT_NE(text.find("staging: payload lands in pinned host memory"), std::string::npos) << text;
    // The simulated NIC refuses dma-buf with EOPNOTSUPP (or the driver has
    // none: the reason says which).
    EXPECT_NE(text.find("dma-buf"), std::string::npos) << text;
    EXPECT_NE(text.find("nvidia-peermem not loaded (modprobe nvidia-peermem)"), std::string::npos)
        << text;
    std::cout << text << "\n";
    // The next allocation stays in staging and the summary does not grow.
    PayloadMemory::Region r2 = memory->allocate(*device, 10);
    EXPECT_NE(r2.host_view, nullptr);
    EXPECT_EQ(memory->describe(), text);
}

// A host whose sysfs says nvidia-peermem is loaded, with a simulated NIC.
struct PeermemHost {
    test::TempDir sys;
    sim::SimProvider provider;
    std::unique_ptr<verbs::Device> device;
    PeermemHost() {
        fs::create_directories(sys.path() / "module/nvidia_peermem");
        provider.add(sim::SimConfig{});
        device = provider.open("sim_mlx5_0", 1);
    }
};

TEST(Device, PayloadMemoryInGpuMemoryWhenPeermemIsThere) {
    REQUIRE_GPU();
    PeermemHost host;
    auto& device = host.device;
    auto& sys = host.sys;
    // The simulated NIC registers any address, so "peermem" succeeds here
    // whenever the GPU reports GPUDirect RDMA; nothing is received into it.
    auto memory = make_gpu_payload_memory(0, Mode::peermem, sys.path());
    PayloadMemory::Region r = memory->allocate(*device, 3 * 65536 + 1);
    const std::string text = memory->describe();
    if (text.find("GPUDirect RDMA (cudaDevAttrGPUDirectRDMASupported = 0)") != std::string::npos) {
        EXPECT_NE(r.host_view, nullptr) << text;
        GTEST_SKIP() << "this GPU has no GPUDirect RDMA: " << text;
    }
    EXPECT_EQ(r.host_view, nullptr) << text;
    EXPECT_EQ(r.nic_address % kGpuPageBytes, 0u);
    EXPECT_NE(text.find("nvidia-peermem: the NIC writes payload into GPU memory"),
              std::string::npos)
        << text;
    std::vector<std::uint8_t> zeros(4 * 65536, 1);
    copy_to_host(zeros.data(), reinterpret_cast<void*>(r.nic_address), zeros.size());
    EXPECT_TRUE(std::all_of(zeros.begin(), zeros.end(), [](std::uint8_t x) { return x == 0; }));
}

// Payload slots in GPU memory read back through the region's DeviceMemory:
// the writers' path (strided copies on the reader's stream).
TEST(Device, GpuPayloadSlotsAreReadBackInBatches) {
    REQUIRE_GPU();
    PeermemHost host;
    auto& device = host.device;
    auto& sys = host.sys;
    auto memory = make_gpu_payload_memory(0, Mode::peermem, sys.path());
    PayloadMemory::Region r = memory->allocate(*device, 16 * 1024);
    REQUIRE_GPU_PAYLOAD(memory, r.host_view != nullptr);
    ASSERT_NE(r.device, nullptr);
    ASSERT_NE(r.device_view, nullptr);
    std::vector<std::uint8_t> slots(16 * 1024);
    for (std::size_t i = 0; i < slots.size(); ++i) {
        slots[i] = static_cast<std::uint8_t>(i * 7 + 3);
    }
    copy_to_device(r.device_view, slots.data(), slots.size());
    std::vector<std::uint8_t> out(8 * 900);
    std::vector<DeviceMemory::Copy> copies;
    for (std::size_t i = 0; i < 8; ++i) {
        copies.push_back({out.data() + i * 900, r.device_view + i * 2048 + 16, 900});
    }
    r.device->copy_to_host(copies);
    for (std::size_t i = 0; i < 8; ++i) {
        EXPECT_EQ(std::memcmp(out.data() + i * 900, slots.data() + i * 2048 + 16, 900), 0) << i;
    }
    // And the block sink's path: slots placed into a ring in GPU memory,
    // device to device.
    auto block_memory = make_device_block_memory(0);
    BlockRingOptions o;
    o.frames_per_block = 4;
    o.threads = 1;
    o.payload_bytes = 1024;
    o.blocks = 2;
    o.lateness = 0;
    BlockRing ring(o, *block_memory, CodifTiming{1, 1000});
    for (std::uint64_t f = 0; f < 4; ++f) {
        ring.place(0, f, Bytes(r.device_view + (3 - f) * 2048, 1024), r.device);
    }
    ring.flush();
    const Block* b = ring.acquire(std::chrono::milliseconds(1000));
    ASSERT_NE(b, nullptr);
    std::vector<std::uint8_t> block(4 * 1024);
    copy_to_host(block.data(), b->data, block.size());
    for (std::size_t f = 0; f < 4; ++f) {
        EXPECT_EQ(std::memcmp(block.data() + f * 1024, slots.data() + (3 - f) * 2048, 1024), 0)
            << f;
    }
    ring.release(b);
}

// The writers' reads (gpu-cuda-2.md N1): scattered pieces of two payload
// regions, in shuffled order, of odd lengths at odd offsets, into a buffer
// pin_host_buffer page-locked and mapped. One gather launch per
// kSlotReadGatherCopies copies; the bytes as in the slots. Unpinned, the
// same copies go as strided copies bounded by the regions' allocations.
TEST(Device, SlotReaderGathersScatteredPiecesIntoAMappedBuffer) {
    REQUIRE_GPU();
    PeermemHost host;
    auto memory = make_gpu_payload_memory(0, Mode::peermem, host.sys.path());
    constexpr std::size_t kRegion = 256 * 1024;
    PayloadMemory::Region a = memory->allocate(*host.device, kRegion);
    PayloadMemory::Region b = memory->allocate(*host.device, kRegion);
    REQUIRE_GPU_PAYLOAD(memory, a.host_view != nullptr || b.host_view != nullptr);
    ASSERT_NE(a.device, nullptr);
    ASSERT_EQ(a.device, b.device);  // one reader per payload memory
    std::vector<std::uint8_t> slots_a(kRegion);
    std::vector<std::uint8_t> slots_b(kRegion);
    for (std::size_t i = 0; i < kRegion; ++i) {
        slots_a[i] = static_cast<std::uint8_t>(i * 7 + 3);
        slots_b[i] = static_cast<std::uint8_t>(i * 13 + 101);
    }
    copy_to_device(a.device_view, slots_a.data(), kRegion);
    copy_to_device(b.device_view, slots_b.data(), kRegion);

    // Pieces: odd lengths at odd source offsets, from either region,
    // packed one after another in the host buffer (as a writer packs
    // records), then listed in shuffled order.
    struct Piece {
        bool from_b;
        std::size_t src;
        std::size_t len;
        std::size_t dst;
    };
    const auto make_pieces = [](std::size_t count, std::size_t max_len, std::size_t first_dst,
                                unsigned seed) {
        std::mt19937 rng(seed);
        std::vector<Piece> pieces;
        std::size_t dst = first_dst;
        for (std::size_t i = 0; i < count; ++i) {
            const std::size_t len = (rng() % max_len) | 1u;  // odd, 1 to max_len
            const std::size_t src = (rng() % (kRegion - len - 1)) | 1u;
            pieces.push_back(Piece{rng() % 2 == 1, src, len, dst});
            dst += len;
        }
        std::shuffle(pieces.begin(), pieces.end(), rng);
        return pieces;
    };
    constexpr std::size_t kBuffer = 4 << 20;
    std::unique_ptr<std::uint8_t, decltype(&std::free)> buffer(
        static_cast<std::uint8_t*>(std::aligned_alloc(4096, kBuffer)), &std::free);
    ASSERT_NE(buffer, nullptr);
    const auto run = [&](const std::vector<Piece>& pieces) -> std::uint64_t {
        std::memset(buffer.get(), 0xee, kBuffer);
        std::vector<DeviceMemory::Copy> copies;
        for (const Piece& p : pieces) {
            copies.push_back({buffer.get() + p.dst, (p.from_b ? b : a).device_view + p.src, p.len});
        }
        const std::uint64_t before = device_copy_calls(*a.device);
        a.device->flush_nic_writes();
        a.device->copy_to_host(copies);
        std::size_t wrong = 0;
        for (const Piece& p : pieces) {
            const auto& slots = p.from_b ? slots_b : slots_a;
            if (std::memcmp(buffer.get() + p.dst, slots.data() + p.src, p.len) != 0 &&
                wrong++ == 0) {
                ADD_FAILURE() << "piece at " << p.dst << ", " << p.len << " bytes, from offset "
                              << p.src << " of region " << (p.from_b ? "b" : "a");
            }
        }
        EXPECT_EQ(wrong, 0u) << "of " << pieces.size() << " pieces";
        return device_copy_calls(*a.device) - before;
    };

    const bool pinned = a.device->pin_host_buffer(buffer.get(), kBuffer);
    EXPECT_TRUE(pinned) << "cudaHostRegister of a 4 MiB buffer";
    const std::vector<Piece> scattered = make_pieces(500, 4001, 3, 1);
    const std::vector<Piece> many = make_pieces(kSlotReadGatherCopies + 7, 64, 1, 2);
    const std::uint64_t calls = run(scattered);
    const std::uint64_t calls_many = run(many);
    if (pinned) {
        EXPECT_EQ(calls, gather_launches(scattered.size()));  // 1
        EXPECT_EQ(calls_many, gather_launches(many.size()));  // 2
        EXPECT_EQ(calls_many, 2u);
    }
    a.device->unpin_host_buffer(buffer.get());
    // Pageable again: strided copies, at least one per piece here (odd
    // lengths, random offsets), still landing right.
    EXPECT_GE(run(scattered), 1u);
}

// A PSRDADA ring in GPU memory, as dada_db -g makes it (its blocks' CUDA IPC
// handles in the block segments), written by `ibvcap read --dada` in another
// process (CUDA opens no handle in the process that made it), read back on
// the GPU as a reader would: it holds the ordered file's payloads byte for
// byte (lib/sinks/dada_device.hpp, gpu/cuda_dada.cpp). scripts/gpu-check.sh
// runs it on a GPU host.
TEST(Device, DadaRingInGpuMemoryHoldsTheOrderedFilesPayloads) {
    REQUIRE_GPU();
    test::TempDir dir;
    GeneratorConfig c;
    c.antennas = {test::kAntenna1};
    c.groups = {Endpoint{test::kGroup1, 36001}};
    c.threads = 1;
    c.frames = 600;
    c.frames_per_period = 200;
    c.payload_bytes = 1024;
    c.loss = 0.02;
    c.seed = 7;
    Generator gen(c);
    write_generated_pcap(gen, dir / "in.pcap");
    const auto key =
        static_cast<key_t>(0x30000000u + (static_cast<unsigned>(getpid()) % 200u) * 0x400000u);
    const auto blocks = make_ipc_blocks(0, 4, 8 * 1024);
    test::MadeRing ring(
        key, 4, 8 * 1024, 1, 4096, false,
        [&](std::uint64_t b, std::uint8_t* handle) { std::memcpy(handle, blocks->handle(b), 64); });
    test::BackgroundReader reader(
        key, 20000,
        [&](std::uint64_t b, std::uint64_t offset, std::uint8_t* host, std::uint64_t bytes) {
            blocks->read(b, offset, host, bytes);
        });
    ASSERT_TRUE(reader.locked());
    int code = -1;
    std::thread capture([&] {
        const std::string line = fmt::format(
            "cd '{}' && '{}' read -r in.pcap -q -F codif --ordered -o out --dada {:x} "
            ">out.txt 2>err.txt",
            dir.path().string(), IBVCAP_BINARY, static_cast<unsigned>(key));
        code = std::system(line.c_str());
    });
    const test::ReadTransfer& got = reader.join();
    capture.join();
    EXPECT_NE(code, -1);
    ASSERT_TRUE(got.ended) << [&] {
        const auto err = test::read_file(dir / "err.txt");
        return std::string(err.begin(), err.end());
    }();
    std::vector<std::uint8_t> payloads;
    for (const auto& e : std::filesystem::directory_iterator(dir / "out")) {
        if (e.path().extension() == ".codif") {
            const auto file = test::read_file(e.path());
            for (std::size_t at = 0; at + 64 + 1024 <= file.size(); at += 64 + 1024) {
                payloads.insert(payloads.end(), file.data() + at + 64,
                                file.data() + at + 64 + 1024);
            }
        }
    }
    ASSERT_FALSE(payloads.empty());
    EXPECT_TRUE(got.data == payloads)
        << got.data.size() << " bytes in the ring, " << payloads.size() << " in the ordered file";
}

}  // namespace
}  // namespace ibvcap::gpu
