// `ibvcap doctor`'s checks (lib/host/doctor.hpp), each against a fake sysfs
// and procfs root built in a temporary directory and a faked HostCalls seam:
// a PASS case and a WARN or FAIL case per check. The fake files hold what
// the kernel writes there (each is cited where the check reads it).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <tuple>

#include "fake_tree.hpp"
#include "lib/host/doctor.hpp"
#include "lib/sources/pcap_live.hpp"

namespace ibvcap::doctor {
namespace {

namespace fs = std::filesystem;

class FakeRoot : public test::FakeTree {
  public:
    FakeRoot() : FakeTree("test_doctor") {
        fs::create_directories(sys());
        fs::create_directories(proc());
    }

    fs::path sys() const { return root() / "sys"; }
    fs::path proc() const { return root() / "proc"; }

    void link(const fs::path& relative, const fs::path& target) const {
        fs::create_directories((root() / relative).parent_path());
        fs::create_directory_symlink(target, root() / relative);
    }

    // An mlx5 port: class/infiniband/<dev>/ports/<port>/{state,link_layer},
    // its RoCE netdev (gid_attrs/ndevs/0) and class/net/<netdev>/mtu, both
    // devices' `device` links to one PCI function on NUMA node `node`.
    void rdma_port(const std::string& dev, const std::string& netdev, const std::string& state,
                   int node = 0, int mtu = 9000) const {
        const std::string pci = "sys/devices/pci0000:00/0000:00:01.0/0000:3b:00.0";
        write(pci + "/numa_node", std::to_string(node));
        write("sys/class/infiniband/" + dev + "/ports/1/state",
              state == "ACTIVE" ? "4: ACTIVE" : "1: DOWN");
        write("sys/class/infiniband/" + dev + "/ports/1/link_layer", "Ethernet");
        write("sys/class/infiniband/" + dev + "/ports/1/gid_attrs/ndevs/0", netdev);
        link("sys/class/infiniband/" + dev + "/device", root() / pci);
        write("sys/class/net/" + netdev + "/mtu", std::to_string(mtu));
        link("sys/class/net/" + netdev + "/device", root() / pci);
    }

    Options options() const {
        Options o;
        o.sysfs_root = sys();
        o.procfs_root = proc();
        o.binary = "/usr/local/bin/ibvcap";
        o.output_dir = root();
        return o;
    }
};

// A host where everything is fine; tests change one thing.
HostCalls good_calls() {
    HostCalls c;
    c.file_caps = [](const fs::path&) { return CapsText{true, "cap_net_raw,cap_ipc_lock=ep", ""}; };
    c.process_caps = [] { return CapsText{true, "cap_net_raw,cap_ipc_lock=ep", ""}; };
    c.memlock_limit = []() -> std::optional<std::uint64_t> { return std::nullopt; };
    c.disk_space = [](const fs::path&, std::string&) -> std::optional<HostCalls::Space> {
        return HostCalls::Space{std::uint64_t{500} << 30, std::uint64_t{1000} << 30, false};
    };
    c.dir_probe = [](const fs::path&) { return HostCalls::DirProbe{}; };
    c.interface_addresses = [] { return std::vector<InterfaceAddress>{}; };
    c.pcap_version = [] { return std::string("libpcap version 1.10.3 (with TPACKET_V3)"); };
    c.gpu_nic_path = [](const std::string&, const std::string&) {
        return std::optional<HostCalls::PciPath>(HostCalls::PciPath{true, "share a PCIe switch"});
    };
    return c;
}

const Check& find(const std::vector<Check>& checks, const std::string& name) {
    for (const auto& c : checks) {
        if (c.name == name) {
            return c;
        }
    }
    throw std::runtime_error("no check named " + name);
}

TEST(DoctorFormat, LineJsonAndExitCode) {
    const Check pass{Status::pass, "mtu", "eth0", "9000 bytes", "ignored"};
    const Check warn{Status::warn, "cpu governor", "", "powersave", "set performance"};
    EXPECT_EQ(format_line(pass), "PASS  mtu eth0: 9000 bytes");
    EXPECT_EQ(format_line(warn), "WARN  cpu governor: powersave; set performance");
    const auto j = to_json({pass, warn});
    ASSERT_EQ(j.size(), 2u);
    EXPECT_EQ(j[0]["status"], "PASS");
    EXPECT_TRUE(j[0]["fix"].is_null());
    EXPECT_EQ(j[1]["fix"], "set performance");
    EXPECT_EQ(j[1]["check"], "cpu governor");
    EXPECT_EQ(exit_code({pass, warn}), 0);  // WARN does not fail
    EXPECT_EQ(exit_code({pass, warn, Check{Status::fail, "x", "", "y", "z"}}), 1);
}

TEST(DoctorCpuList, ParsesAndFormatsSysfsLists) {
    EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
    EXPECT_EQ(parse_cpu_list("(null)"), std::vector<int>{});  // nohz_full when off
    EXPECT_EQ(parse_cpu_list(""), std::vector<int>{});
    EXPECT_FALSE(parse_cpu_list("3-1"));
    EXPECT_FALSE(parse_cpu_list("a"));
    EXPECT_EQ(format_cpu_list({11, 0, 1, 2, 3, 8, 10}), "0-3,8,10-11");
}

// good_calls() but with these capabilities, in libcap's text form
// (cap_to_text), for this process and on the binary.
HostCalls calls_with_caps(std::string process, std::string file) {
    HostCalls c = good_calls();
    c.process_caps = [process] { return CapsText{true, process, ""}; };
    c.file_caps = [file](const fs::path&) { return CapsText{true, file, ""}; };
    return c;
}

TEST(DoctorCapabilities, BothEffectivePass) {
    FakeRoot r;
    const auto checks = check_capabilities(r.options(), good_calls());
    EXPECT_EQ(find(checks, "binary capabilities").status, Status::pass);
    EXPECT_EQ(find(checks, "process capabilities").status, Status::pass);
}

TEST(DoctorCapabilities, MissingNetRawFailsAndNamesSetcap) {
    FakeRoot r;
    const auto checks = check_capabilities(r.options(), calls_with_caps("cap_net_raw+p", ""));
    const Check& p = find(checks, "process capabilities");
    EXPECT_EQ(p.status, Status::fail) << format_line(p);
    EXPECT_NE(p.found.find("permitted only"), std::string::npos) << p.found;
    EXPECT_NE(p.fix.find("setcap cap_net_raw,cap_ipc_lock+ep /usr/local/bin/ibvcap"),
              std::string::npos);
    EXPECT_EQ(find(checks, "binary capabilities").status, Status::warn);
}

TEST(DoctorCapabilities, IpcLockMissingWarnsAndPermittedOnlyFileWarns) {
    FakeRoot r;
    const auto checks = check_capabilities(
        r.options(), calls_with_caps("cap_net_raw=ep", "cap_net_raw,cap_ipc_lock=p"));
    EXPECT_EQ(find(checks, "process capabilities").status, Status::warn);
    const Check& b = find(checks, "binary capabilities");
    EXPECT_EQ(b.status, Status::warn);
    EXPECT_NE(b.found.find("without the effective flag"), std::string::npos) << b.found;
}

TEST(DoctorCapabilities, RealLibcapReadsAFileWithoutCapabilities) {
    FakeRoot r;
    r.write("plain", "x");
    const HostCalls c = real_host_calls();
    const CapsText file = c.file_caps(r.root() / "plain");
    EXPECT_TRUE(file.known) << file.error;
    EXPECT_EQ(file.text, "");
    EXPECT_TRUE(c.process_caps().known);
    EXPECT_FALSE(c.file_caps(r.root() / "missing").known);
}

TEST(DoctorMemlock, QueuePairBytesFollowTheEngine) {
    // 42 bytes of Ethernet/IPv4/UDP + the 64-byte CODIF header → a 128-byte
    // header slot; 9022 - 106 = 8916 → an 8960-byte payload slot.
    EXPECT_EQ(queue_pair_bytes(4096, 9022), std::uint64_t{4096} * (128 + 8960));
}

TEST(DoctorMemlock, EnoughOrUnlimitedPassesShortFails) {
    FakeRoot r;
    HostCalls c = good_calls();
    EXPECT_EQ(check_memlock(r.options(), c, 1).status, Status::pass);  // unlimited
    c.memlock_limit = []() -> std::optional<std::uint64_t> { return std::uint64_t{64} << 20; };
    EXPECT_EQ(check_memlock(r.options(), c, 1).status, Status::pass);
    EXPECT_EQ(check_memlock(r.options(), c, 2).status, Status::pass);  // cap_ipc_lock lifts it
    c.process_caps = [] { return CapsText{true, "cap_net_raw=ep", ""}; };
    const Check two = check_memlock(r.options(), c, 2);  // 71 MiB > 64 MiB
    EXPECT_EQ(two.status, Status::fail) << format_line(two);
    EXPECT_NE(two.fix.find("ulimit -l unlimited"), std::string::npos);
    c.memlock_limit = []() -> std::optional<std::uint64_t> { return std::uint64_t{8} << 20; };
    EXPECT_EQ(check_memlock(r.options(), c, 1).status, Status::fail);
}

TEST(DoctorRdma, NoDeviceWarns) {
    FakeRoot r;
    const auto checks = check_rdma(r.options(), {});
    EXPECT_EQ(find(checks, "rdma devices").status, Status::warn);
}

TEST(DoctorRdma, ActivePortPassesDownPortFailsWhenNamed) {
    FakeRoot r;
    r.rdma_port("mlx5_0", "ens1f0", "ACTIVE");
    r.rdma_port("mlx5_1", "ens1f1", "DOWN");
    Options o = r.options();
    o.interfaces = {"ens1f0", "mlx5_1:1"};
    const auto targets = resolve_targets(o, good_calls());
    ASSERT_EQ(targets.size(), 2u);
    EXPECT_EQ(targets[0].rdma_device, "mlx5_0");
    EXPECT_EQ(targets[1].netdev, "ens1f1");
    const auto checks = check_rdma(o, targets);
    ASSERT_EQ(checks.size(), 3u);
    EXPECT_EQ(checks[0].status, Status::pass);  // rdma devices
    EXPECT_EQ(checks[1].status, Status::pass) << format_line(checks[1]);
    EXPECT_EQ(checks[2].status, Status::fail) << format_line(checks[2]);
    EXPECT_EQ(checks[2].subject, "mlx5_1:1");
    // Not named with -i: a down port is only a warning.
    o.interfaces.clear();
    const auto all = check_rdma(o, {});
    EXPECT_EQ(all.back().status, Status::warn);
}

// verbs-mlx5-2.md N1: `doctor -i` a VLAN netdev no GID lists yet finds its
// port through the kernel's VLAN table and says what a capture there does.
TEST(DoctorRdma, AVlanNetdevIsFoundUnderItsPort) {
    FakeRoot r;
    r.rdma_port("mlx5_0", "ens1f0np0", "ACTIVE");
    r.write("sys/class/net/ens1f0np0.100/mtu", "9000");
    r.write("sys/class/net/ens1f0np0.100.7/mtu", "9000");
    r.write("proc/net/vlan/config",
            "VLAN Dev name\t | VLAN ID\nName-Type: VLAN_NAME_TYPE_RAW_PLUS_VID_NO_PAD\n"
            "ens1f0np0.100  | 100  | ens1f0np0\nens1f0np0.100.7| 7  | ens1f0np0.100");
    Options o = r.options();
    o.interfaces = {"ens1f0np0.100", "ens1f0np0.100.7", "ens1f0np0"};
    const auto targets = resolve_targets(o, good_calls());
    ASSERT_EQ(targets.size(), 3u);
    EXPECT_EQ(targets[0].rdma_device, "mlx5_0");
    EXPECT_EQ(targets[0].port, 1);
    EXPECT_EQ(targets[1].rdma_device, "mlx5_0");
    const auto vlan = check_vlan(o, targets[0]);
    ASSERT_TRUE(vlan.has_value());
    EXPECT_EQ(vlan->status, Status::pass);
    EXPECT_EQ(vlan->found,
              "VLAN 100 on ens1f0np0, mlx5_0 port 1: joins go out tagged on ens1f0np0.100; the "
              "rules match VLAN 100 and the header slot takes its tag");
    const auto qinq = check_vlan(o, targets[1]);
    ASSERT_TRUE(qinq.has_value());
    EXPECT_NE(qinq->found.find("VLAN 100.7 on ens1f0np0"), std::string::npos) << qinq->found;
    EXPECT_FALSE(check_vlan(o, targets[2]).has_value());  // untagged: nothing to say
}

TEST(DoctorRdma, UnknownInterfaceFailsNetdevWithoutRdmaWarns) {
    FakeRoot r;
    r.write("sys/class/net/eth0/mtu", "1500");
    Options o = r.options();
    o.interfaces = {"eth0", "nosuch", "10.0.0.5"};
    HostCalls c = good_calls();
    c.interface_addresses = [] { return std::vector<InterfaceAddress>{{"eth0", 0, 0x0a000005}}; };
    const auto targets = resolve_targets(o, c);
    EXPECT_EQ(targets[2].netdev, "eth0");  // by its address
    const auto checks = check_rdma(o, targets);
    EXPECT_EQ(checks[1].status, Status::warn);
    EXPECT_EQ(checks[1].name, "rdma link");
    EXPECT_EQ(checks[2].status, Status::fail);
    EXPECT_EQ(checks[2].name, "interface");
}

TEST(DoctorMtu, JumboPassesStandardFails) {
    FakeRoot r;
    r.write("sys/class/net/eth0/mtu", "9000");
    r.write("sys/class/net/eth1/mtu", "1500");
    const Options o = r.options();
    EXPECT_EQ(check_mtu(o, Target{"eth0", "eth0", "", 0, ""}).status, Status::pass);
    const Check small = check_mtu(o, Target{"eth1", "eth1", "", 0, ""});
    EXPECT_EQ(small.status, Status::fail);
    EXPECT_NE(small.found.find("8284"), std::string::npos) << small.found;
    EXPECT_NE(small.fix.find("ip link set eth1 mtu 9000"), std::string::npos);
}

TEST(DoctorGpuDirect, PeermemFromSysfsOrProcModulesPasses) {
    FakeRoot r;
    Options o = r.options();
    o.gpu = "0";
    o.gpu_pci = "0000:3b:00.0";
    r.mkdir("sys/bus/pci/devices/0000:3b:00.0");
    r.mkdir("sys/module/nvidia");
    r.mkdir("sys/module/nvidia_peermem");
    EXPECT_EQ(find(check_gpudirect(o), "gpudirect").status, Status::pass);
    fs::remove_all(r.sys() / "module/nvidia_peermem");
    r.write("proc/modules", "nvidia_peermem 16384 0 - Live 0x0000000000000000\nnvidia 1 2");
    EXPECT_EQ(find(check_gpudirect(o), "gpudirect").status, Status::pass);
}

TEST(DoctorGpuDirect, DmabufNeedsOpenModulesAndANewKernel) {
    FakeRoot r;
    Options o = r.options();
    o.gpu = "0";
    o.gpu_pci = "0000:3b:00.0";
    r.mkdir("sys/bus/pci/devices/0000:3b:00.0");
    r.mkdir("sys/module/nvidia");
    r.write("proc/sys/kernel/osrelease", "6.1.0-18-amd64");
    // open-gpu-kernel-modules, kernel-open/nvidia/nv-procfs.c
    // nv_procfs_read_version: "NVRM version: %s\n" with the build's pNVRM_ID,
    // "NVIDIA UNIX Open Kernel Module for x86_64  <version>  Release Build ..."
    // for the open modules, "NVIDIA UNIX x86_64 Kernel Module  <version> ..."
    // for the proprietary ones.
    r.write("proc/driver/nvidia/version",
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06");
    EXPECT_EQ(find(check_gpudirect(o), "gpudirect").status, Status::pass);
    o.gpu_dmabuf = false;  // CUDA said no
    EXPECT_EQ(find(check_gpudirect(o), "gpudirect").status, Status::warn);
    o.gpu_dmabuf.reset();
    r.write("proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535");
    const Check c = find(check_gpudirect(o), "gpudirect");
    EXPECT_EQ(c.status, Status::warn);
    EXPECT_NE(c.fix.find("modprobe nvidia-peermem"), std::string::npos);
}

TEST(DoctorGpuDirect, NoDriverOrNoGpuFails) {
    FakeRoot r;
    Options o = r.options();
    EXPECT_TRUE(check_gpudirect(o).empty());  // no --gpu: not checked
    o.gpu = "0";
    EXPECT_EQ(find(check_gpudirect(o), "gpu").status, Status::fail);  // not found
    o.gpu_pci = "0000:3b:00.0";  // a PCI address that is not there
    EXPECT_EQ(find(check_gpudirect(o), "gpu").status, Status::fail);
    r.mkdir("sys/bus/pci/devices/0000:3b:00.0");
    EXPECT_EQ(find(check_gpudirect(o), "gpu").status, Status::pass);
    EXPECT_EQ(find(check_gpudirect(o), "gpudirect").status, Status::fail);  // no module nvidia
}

TEST(DoctorGpuDirect, ListsNvidiaDisplayFunctionsInBusOrder) {
    FakeRoot r;
    for (const auto& [bdf, vendor, cls] :
         {std::tuple{"0000:af:00.0", "0x10de", "0x030200"},
          std::tuple{"0000:3b:00.0", "0x10de", "0x030200"},
          std::tuple{"0000:3b:00.1", "0x10de", "0x040300"},  // its audio function
          std::tuple{"0000:3c:00.0", "0x15b3", "0x020000"}}) {
        r.write(fs::path("sys/bus/pci/devices") / bdf / "vendor", vendor);
        r.write(fs::path("sys/bus/pci/devices") / bdf / "class", cls);
    }
    EXPECT_EQ(list_nvidia_gpus(r.sys()),
              (std::vector<std::string>{"0000:3b:00.0", "0000:af:00.0"}));
}

TEST(DoctorIommu, OffOrPassthroughPassesTranslatedWarns) {
    FakeRoot r;
    r.rdma_port("mlx5_0", "ens1f0", "ACTIVE");
    const Options o = r.options();
    const std::vector<Target> t{Target{"ens1f0", "ens1f0", "mlx5_0", 1, ""}};
    EXPECT_EQ(check_iommu(o, t).status, Status::pass);  // no class/iommu
    r.mkdir("sys/class/iommu/dmar0");
    const std::string group = "sys/devices/pci0000:00/0000:00:01.0/0000:3b:00.0/iommu_group/type";
    r.write(group, "DMA-FQ");
    const Check translated = check_iommu(o, t);
    EXPECT_EQ(translated.status, Status::warn) << format_line(translated);
    EXPECT_NE(translated.found.find("ens1f0 (DMA-FQ)"), std::string::npos) << translated.found;
    EXPECT_NE(translated.fix.find("iommu=pt"), std::string::npos);
    r.write(group, "identity");
    EXPECT_EQ(check_iommu(o, t).status, Status::pass);
    // No group to read: the kernel command line decides.
    fs::remove_all(r.sys() / "devices/pci0000:00/0000:00:01.0/0000:3b:00.0/iommu_group");
    r.write("proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet");
    EXPECT_EQ(check_iommu(o, {}).status, Status::warn);
    r.write("proc/cmdline", "BOOT_IMAGE=/vmlinuz intel_iommu=on iommu=pt");
    EXPECT_EQ(check_iommu(o, {}).status, Status::pass);
}

TEST(DoctorLocality, CpusOnTheNicNodePassOthersWarn) {
    FakeRoot r;
    r.rdma_port("mlx5_0", "ens1f0", "ACTIVE", 1);
    r.write("sys/devices/system/node/node0/cpulist", "0-3");
    r.write("sys/devices/system/node/node1/cpulist", "4-7");
    Options o = r.options();
    const Target t{"ens1f0", "ens1f0", "mlx5_0", 1, ""};
    o.cpus = {4, 5};
    EXPECT_EQ(find(check_locality(o, good_calls(), t), "numa").status, Status::pass);
    o.cpus = {2, 5};
    const Check c = find(check_locality(o, good_calls(), t), "numa");
    EXPECT_EQ(c.status, Status::warn) << format_line(c);
    EXPECT_NE(c.fix.find("node 1 (4-7)"), std::string::npos) << c.fix;
}

// One core for the poll thread, the disk threads and the buffer stock
// (issue 39): `taskset -c 1`, or --cpu and --disk-cpu naming one CPU, warns
// with the fix; two CPUs between them pass.
TEST(DoctorCores, OneCoreForPollAndWritersWarns) {
    Options o;
    Check c = check_cores(o, {1});
    EXPECT_EQ(c.status, Status::warn) << format_line(c);
    EXPECT_NE(c.found.find("share CPU 1 (the process's CPU affinity allows no other)"),
              std::string::npos)
        << c.found;
    EXPECT_NE(c.fix.find("--disk-cpu"), std::string::npos) << c.fix;
    EXPECT_EQ(check_cores(o, {0, 1}).status, Status::pass);
    o.poll_cpus = {2};
    EXPECT_EQ(check_cores(o, {0, 1, 2, 3}).status, Status::pass);  // writers anywhere
    o.disk_cpus = {2};
    c = check_cores(o, {0, 1, 2, 3});
    EXPECT_EQ(c.status, Status::warn) << format_line(c);
    EXPECT_NE(c.found.find("share CPU 2 (--cpu and --disk-cpu)"), std::string::npos) << c.found;
    o.disk_cpus = {3};
    EXPECT_EQ(check_cores(o, {0, 1, 2, 3}).status, Status::pass);
    o.poll_cpus.clear();
    o.disk_cpus = {3};
    EXPECT_EQ(check_cores(o, {3}).status, Status::warn);
    EXPECT_EQ(check_cores(o, {0, 3}).status, Status::pass);  // the poll thread may use 0
}

TEST(DoctorLocality, GpuUnderTheNicsSwitchPassesOtherwiseWarns) {
    FakeRoot r;
    r.rdma_port("mlx5_0", "ens1f0", "ACTIVE");
    Options o = r.options();
    o.gpu_pci = "0000:3c:00.0";
    const Target t{"ens1f0", "ens1f0", "mlx5_0", 1, ""};
    HostCalls c = good_calls();
    std::string asked;
    c.gpu_nic_path = [&](const std::string& gpu, const std::string& nic) {
        asked = gpu + " " + nic;
        return std::optional<HostCalls::PciPath>(HostCalls::PciPath{false, "different NUMA nodes"});
    };
    const Check far = find(check_locality(o, c, t), "pcie");
    EXPECT_EQ(asked, "0000:3c:00.0 mlx5_0");
    EXPECT_EQ(far.status, Status::warn);
    EXPECT_NE(far.fix.find("nvidia-smi topo -m"), std::string::npos);
    EXPECT_EQ(find(check_locality(o, good_calls(), t), "pcie").status, Status::pass);
    c.gpu_nic_path = [](const std::string&, const std::string&) {
        return std::optional<HostCalls::PciPath>();
    };
    EXPECT_EQ(find(check_locality(o, c, t), "pcie").status, Status::warn);
}

TEST(DoctorHugepages, FewPassMostOfMemoryWarns) {
    FakeRoot r;
    const Options o = r.options();
    r.write("proc/meminfo",
            "MemTotal:       16000000 kB\nHugePages_Total:       0\nHugePages_Free:        0\n"
            "Hugepagesize:       2048 kB");
    EXPECT_EQ(check_hugepages(o).status, Status::pass);
    r.write("proc/meminfo",
            "MemTotal:       16000000 kB\nHugePages_Total:    6000\nHugePages_Free:     6000\n"
            "Hugepagesize:       2048 kB");  // 12.3 GB of 16
    EXPECT_EQ(check_hugepages(o).status, Status::warn);
    fs::remove(r.proc() / "meminfo");
    EXPECT_EQ(check_hugepages(o).status, Status::warn);
}

TEST(DoctorGovernor, PerformancePassesOtherwiseWarns) {
    FakeRoot r;
    r.write("sys/devices/system/cpu/online", "0-1");
    r.write("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "performance");
    r.write("sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "powersave");
    Options o = r.options();
    o.cpus = {0};
    EXPECT_EQ(check_governor(o).status, Status::pass);
    o.cpus.clear();  // every online CPU
    const Check c = check_governor(o);
    EXPECT_EQ(c.status, Status::warn);
    EXPECT_NE(c.found.find("powersave on CPUs 1"), std::string::npos) << c.found;
}

TEST(DoctorIsolation, IsolatedPassesOtherwiseWarnsOfflineFails) {
    FakeRoot r;
    r.write("sys/devices/system/cpu/online", "0-7");
    r.write("sys/devices/system/cpu/isolated", "2-3");
    r.write("sys/devices/system/cpu/nohz_full", "2-3");
    Options o = r.options();
    o.cpus = {2, 3};
    EXPECT_EQ(check_isolation(o).status, Status::pass);
    o.cpus = {3, 4};
    const Check c = check_isolation(o);
    EXPECT_EQ(c.status, Status::warn) << format_line(c);
    EXPECT_NE(c.fix.find("isolcpus=3-4"), std::string::npos);
    o.cpus = {9};
    EXPECT_EQ(check_isolation(o).status, Status::fail);
}

TEST(DoctorRpFilter, OffPassesTheLargerOfAllAndTheInterfaceCounts) {
    FakeRoot r;
    const Options o = r.options();
    const Target t{"eth0", "eth0", "", 0, ""};
    r.write("proc/sys/net/ipv4/conf/all/rp_filter", "0");
    r.write("proc/sys/net/ipv4/conf/eth0/rp_filter", "0");
    EXPECT_EQ(check_rp_filter(o, t).status, Status::pass);
    r.write("proc/sys/net/ipv4/conf/all/rp_filter", "1");  // the interface says 0: all wins
    const Check c = check_rp_filter(o, t);
    EXPECT_EQ(c.status, Status::warn);
    EXPECT_TRUE(c.found.starts_with("1 ")) << c.found;
    r.write("proc/sys/net/ipv4/conf/all/rp_filter", "0");
    r.write("proc/sys/net/ipv4/conf/eth0/rp_filter", "2");
    EXPECT_EQ(check_rp_filter(o, t).status, Status::warn);
}

TEST(DoctorIgmp, DefaultAndV2PassV1Warns) {
    FakeRoot r;
    const Options o = r.options();
    const Target t{"eth0", "eth0", "", 0, ""};
    r.write("proc/sys/net/ipv4/conf/all/force_igmp_version", "0");
    r.write("proc/sys/net/ipv4/conf/eth0/force_igmp_version", "0");
    EXPECT_EQ(check_igmp(o, t).status, Status::pass);
    r.write("proc/sys/net/ipv4/conf/eth0/force_igmp_version", "2");
    EXPECT_EQ(check_igmp(o, t).status, Status::pass);
    r.write("proc/sys/net/ipv4/conf/all/force_igmp_version", "1");
    EXPECT_EQ(check_igmp(o, t).status, Status::warn);
    fs::remove(r.proc() / "sys/net/ipv4/conf/eth0/force_igmp_version");
    EXPECT_EQ(check_igmp(o, t).status, Status::warn);  // unreadable
}

TEST(DoctorLoopback, OffPassesOnOrUnknownWarns) {
    FakeRoot r;
    const Options o = r.options();
    const Target t{"ens1f0", "ens1f0", "mlx5_0", 1, ""};
    EXPECT_EQ(check_loopback(o, t).status, Status::warn);  // inbox mlx5: no file
    r.write("sys/class/net/ens1f0/settings/force_local_lb_disable",
            "Force local loopback disable is OFF");
    EXPECT_EQ(check_loopback(o, t).status, Status::pass);
    r.write("sys/class/net/ens1f0/settings/force_local_lb_disable",
            "Force local loopback disable is ON");
    const Check c = check_loopback(o, t);
    EXPECT_EQ(c.status, Status::warn);
    EXPECT_NE(c.fix.find("echo 0 >"), std::string::npos);
}

TEST(DoctorPcapBuffer, TpacketRingPassesSocketBufferAgainstRmemMax) {
    FakeRoot r;
    const Options o = r.options();
    HostCalls c = good_calls();
    r.write("proc/sys/net/core/rmem_max", "4194304");
    const Check ring = check_pcap_buffer(o, c);
    EXPECT_EQ(ring.status, Status::pass);
    // The figure is the pcap source's own buffer.
    EXPECT_EQ(PcapLiveOptions{}.buffer_bytes, std::size_t{256} << 20);
    EXPECT_NE(ring.found.find("256.0 MiB"), std::string::npos) << ring.found;
    c.pcap_version = [] { return std::string("libpcap version 1.8.1"); };
    const Check small = check_pcap_buffer(o, c);
    EXPECT_EQ(small.status, Status::warn);
    EXPECT_NE(small.fix.find("net.core.rmem_max=268435456"), std::string::npos);
    r.write("proc/sys/net/core/rmem_max", "536870912");
    EXPECT_EQ(check_pcap_buffer(o, c).status, Status::pass);
}

TEST(DoctorDisk, SpaceThresholdsAndWritability) {
    FakeRoot r;
    Options o = r.options();
    HostCalls c = good_calls();
    EXPECT_EQ(check_disk_space(o, c).status, Status::pass);
    c.disk_space = [](const fs::path&, std::string&) -> std::optional<HostCalls::Space> {
        return HostCalls::Space{std::uint64_t{10} << 30, std::uint64_t{100} << 30, false};
    };
    EXPECT_EQ(check_disk_space(o, c).status, Status::warn);
    c.disk_space = [](const fs::path&, std::string&) -> std::optional<HostCalls::Space> {
        return HostCalls::Space{std::uint64_t{500} << 20, std::uint64_t{100} << 30, false};
    };
    EXPECT_EQ(check_disk_space(o, c).status, Status::fail);
    c = good_calls();
    c.dir_probe = [](const fs::path&) {
        return HostCalls::DirProbe{"creating a file: EACCES", ""};
    };
    EXPECT_EQ(check_disk_space(o, c).status, Status::fail);
    // A missing -o is checked at the ancestor a capture would create it in.
    o.output_dir = r.root() / "new/deeper";
    fs::path probed;
    c = good_calls();
    c.dir_probe = [&](const fs::path& d) {
        probed = d;
        return HostCalls::DirProbe{};
    };
    EXPECT_EQ(check_disk_space(o, c).status, Status::pass);
    EXPECT_EQ(probed, r.root());
    r.write("file", "x");
    o.output_dir = r.root() / "file/sub";
    EXPECT_EQ(check_disk_space(o, c).status, Status::fail);
}

TEST(DoctorDirectIo, RefusalWarnsRealProbeWorksInATempDir) {
    FakeRoot r;
    const Options o = r.options();
    HostCalls c = good_calls();
    EXPECT_EQ(check_direct_io(o, c).status, Status::pass);
    c.dir_probe = [](const fs::path&) {
        return HostCalls::DirProbe{"", "open with O_DIRECT: Invalid argument"};
    };
    const Check refused = check_direct_io(o, c);
    EXPECT_EQ(refused.status, Status::warn);
    EXPECT_NE(refused.fix.find("--direct-io off"), std::string::npos);
    // The real probe leaves nothing behind.
    const HostCalls real = real_host_calls();
    const auto probe = real.dir_probe(r.root());
    EXPECT_EQ(probe.write_error, "");
    EXPECT_TRUE(fs::is_empty(r.root() / "sys") && fs::exists(r.root() / "proc"));
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(r.root())) {
        ++n;
    }
    EXPECT_EQ(n, 2u);  // sys and proc only
    EXPECT_NE(real.dir_probe(r.root() / "missing").write_error, "");
}

TEST(DoctorRun, EveryLineHasTheFormatAndAFailMakesExitOne) {
    FakeRoot r;
    r.rdma_port("mlx5_0", "ens1f0", "ACTIVE");
    r.write("sys/devices/system/cpu/online", "0-1");
    r.write("proc/sys/net/ipv4/conf/all/rp_filter", "0");
    r.write("proc/sys/net/ipv4/conf/ens1f0/rp_filter", "0");
    Options o = r.options();
    o.interfaces = {"ens1f0"};
    const auto checks = run_checks(o, good_calls());
    const std::regex line("^(PASS|WARN|FAIL)  [a-z][a-z_ ]*( \\S+)*: \\S.*$");
    std::set<std::string> names;
    for (const auto& c : checks) {
        EXPECT_TRUE(std::regex_match(format_line(c), line)) << format_line(c);
        EXPECT_EQ(c.status == Status::pass, c.fix.empty()) << format_line(c);
        names.insert(c.name);
    }
    for (const char* n :
         {"binary capabilities", "process capabilities", "memlock", "rdma devices", "rdma link",
          "mtu", "iommu", "numa", "hugepages", "cpu governor", "rp_filter", "igmp",
          "multicast loopback", "pcap buffer", "disk space", "o_direct"}) {
        EXPECT_TRUE(names.count(n)) << n;
    }
    EXPECT_EQ(exit_code(checks), 0);
    r.write("sys/class/net/ens1f0/mtu", "1500");
    EXPECT_EQ(exit_code(run_checks(o, good_calls())), 1);
}

// A PHC as lib/host/phc.hpp reads it: a fixed offset to CLOCK_REALTIME,
// bracketed reads 1 µs wide.
class FakePhc final : public PhcClock {
  public:
    FakePhc(std::int64_t offset, std::optional<double> freq) : offset_(offset), freq_(freq) {}
    std::size_t sample(std::span<PhcSample> out) override {
        for (std::size_t i = 0; i < out.size(); ++i) {
            const std::int64_t host =
                1'767'225'600'000'000'000 + static_cast<std::int64_t>(i) * 2000;
            out[i] = PhcSample{host - 500, host + offset_, host + 500};
        }
        return out.size();
    }
    PhcInfo info() override {
        PhcInfo i;
        i.index = 2;
        i.frequency_ppb = freq_;
        return i;
    }
    std::string error() const override { return {}; }

  private:
    std::int64_t offset_;
    std::optional<double> freq_;
};

TEST(DoctorPtpClock, OffsetTaiAndDisciplineOfTheNetdevsPhc) {
    FakeRoot r;
    r.rdma_port("mlx5_0", "ens1f0", "ACTIVE");
    r.write("proc/4242/comm", "ptp4l\n");
    r.write("proc/4243/comm", "bash\n");
    Options o = r.options();
    o.interfaces = {"ens1f0"};
    HostCalls c = good_calls();
    c.open_phc = [](const std::string&, std::string&) -> std::unique_ptr<PhcClock> {
        return std::make_unique<FakePhc>(37'000'000'012, 12.5);
    };
    const Check tai = *check_phc(o, c, Target{"ens1f0", "ens1f0", "mlx5_0", 1, ""});
    EXPECT_EQ(tai.status, Status::pass);
    EXPECT_NE(tai.found.find("/dev/ptp2: PHC − CLOCK_REALTIME +37.000000012 s (± 500 ns), TAI"),
              std::string::npos)
        << tai.found;
    EXPECT_NE(tai.found.find("PTP daemons running: ptp4l"), std::string::npos) << tai.found;
    EXPECT_EQ(find(run_checks(o, c), "ptp clock").subject, "ens1f0");

    // No daemon, the frequency untouched: it drifts, and says so.
    fs::remove(r.root() / "proc/4242/comm");
    c.open_phc = [](const std::string&, std::string&) -> std::unique_ptr<PhcClock> {
        return std::make_unique<FakePhc>(-1'500'000, 0.0);
    };
    const Check drift = *check_phc(o, c, Target{"ens1f0", "ens1f0", "mlx5_0", 1, ""});
    EXPECT_NE(drift.found.find("-0.001500000 s"), std::string::npos) << drift.found;
    EXPECT_EQ(drift.found.find("TAI"), std::string::npos) << drift.found;
    EXPECT_NE(drift.found.find("no PTP daemon running: it drifts"), std::string::npos);

    // None: a WARN with the fix.
    c.open_phc = [](const std::string& netdev, std::string& why) -> std::unique_ptr<PhcClock> {
        why = netdev + " has no PTP hardware clock (ETHTOOL_GET_TS_INFO)";
        return nullptr;
    };
    const Check none = *check_phc(o, c, Target{"ens1f0", "ens1f0", "mlx5_0", 1, ""});
    EXPECT_EQ(none.status, Status::warn);
    EXPECT_NE(none.fix.find("--timestamps nic"), std::string::npos);
    // Without the call, no line.
    c.open_phc = nullptr;
    EXPECT_FALSE(check_phc(o, c, Target{"ens1f0", "ens1f0", "mlx5_0", 1, ""}).has_value());
}

}  // namespace
}  // namespace ibvcap::doctor
