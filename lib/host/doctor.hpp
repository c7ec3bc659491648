// `ibvcap doctor`: a preflight for an acquisition host (docs/observability.md,
// section 7). Each check is a pure function of files under a sysfs root and a
// procfs root (so tests point them at a fake tree) and of the few facts that
// are not files, which come through HostCalls (a seam: capabilities, the
// memlock limit, statvfs, an O_DIRECT probe, getifaddrs, the libpcap version,
// and the GPU-NIC PCIe relation, which lib/ may not compute itself: it lives
// in gpu/, and lib/ includes gpu/ only from lib/run/).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lib/host/devices.hpp"
#include "lib/host/phc.hpp"

namespace ibvcap::doctor {

enum class Status { pass, warn, fail };
const char* to_string(Status status);  // "PASS", "WARN", "FAIL"

struct Check {
    Status status = Status::pass;
    std::string name;     // "mtu", "rdma link", ...: stable, for scripts
    std::string subject;  // "ens1f0", "mlx5_0:1", ""
    std::string found;    // what was found, one clause
    std::string fix;      // the fix; empty when PASS
};

// "PASS  mtu ens1f0: 9000 ...", "WARN  cpu governor: ...; <fix>".
std::string format_line(const Check& check);
// [{"check", "subject", "status", "found", "fix"}], fix null when PASS.
nlohmann::json to_json(const std::vector<Check>& checks);
// 0 when nothing FAILs, 1 otherwise (WARN does not fail).
int exit_code(const std::vector<Check>& checks);

// Capabilities in libcap's text form (cap_to_text: "=ep", "cap_net_raw+ep",
// "cap_ipc_lock,cap_net_raw=ep"); empty text: none at all.
struct CapsText {
    bool known = false;  // false: could not be read (error says why)
    std::string text;
    std::string error;
};

// The pieces that are calls, not files. real_host_calls() makes them real;
// tests replace any of them.
struct HostCalls {
    // The file capabilities of a binary (the security.capability xattr, read
    // with libcap's cap_get_file): known with empty text when it has none.
    std::function<CapsText(const std::filesystem::path& binary)> file_caps;
    // This process's capability sets (libcap's cap_get_proc).
    std::function<CapsText()> process_caps;
    // RLIMIT_MEMLOCK's soft limit in bytes; nullopt: RLIM_INFINITY.
    std::function<std::optional<std::uint64_t>()> memlock_limit;
    struct Space {
        std::uint64_t free_bytes = 0;  // f_bavail * f_frsize: what an unprivileged writer gets
        std::uint64_t total_bytes = 0;
        bool read_only = false;  // ST_RDONLY
    };
    // statvfs(dir); the error text when it fails.
    std::function<std::optional<Space>(const std::filesystem::path& dir, std::string& error)>
        disk_space;
    // Creates a temporary file in `dir` (write_error when it cannot), writes
    // one aligned 4 KiB block to it through O_DIRECT (direct_error when that
    // fails) and removes it.
    struct DirProbe {
        std::string write_error;
        std::string direct_error;
    };
    std::function<DirProbe(const std::filesystem::path& dir)> dir_probe;
    // getifaddrs, for -i given as an IPv4 address.
    std::function<std::vector<InterfaceAddress>()> interface_addresses;
    // pcap_lib_version(): "libpcap version 1.10.3 (with TPACKET_V3)".
    std::function<std::string()> pcap_version;
    // The PCIe path between the GPU (its PCI address) and a NIC (an RDMA
    // device or netdev name): nullopt when either cannot be found.
    struct PciPath {
        bool close = false;  // they share a PCIe switch or root port
        std::string words;   // gpu::describe_relation's sentence
    };
    std::function<std::optional<PciPath>(const std::string& gpu_pci, const std::string& nic)>
        gpu_nic_path;
    // The netdev's PTP hardware clock (lib/host/phc.hpp, open_netdev_phc);
    // null with `why` when it has none. Unset: the clock check is skipped.
    std::function<std::unique_ptr<PhcClock>(const std::string& netdev, std::string& why)> open_phc;
    // The CPUs this process may run on (lib/host/cores.hpp): a capture
    // started the same way (taskset, a unit's CPUAffinity=) gets the same.
    // Unset: the cores check is skipped.
    std::function<std::vector<int>()> allowed_cpus;
};
HostCalls real_host_calls();

// What the checks are about: the command line of `ibvcap doctor`.
struct Options {
    std::filesystem::path sysfs_root = "/sys";
    std::filesystem::path procfs_root = "/proc";
    std::filesystem::path binary;            // whose file capabilities to check
    std::vector<std::string> interfaces;     // -i: IFACE, IPv4 address or DEV[:PORT]
    std::filesystem::path output_dir = ".";  // -o
    std::vector<int> cpus;                   // --cpus (and capture's --cpu, --disk-cpu)
    std::vector<int> poll_cpus;              // capture's --cpu alone
    std::vector<int> disk_cpus;              // capture's --disk-cpu alone
    std::string gpu;  // --gpu as given ("" when not); gpu_pci is what it resolved to
    std::string gpu_pci;
    std::string gpu_source;  // how gpu_pci was found, for the lines ("CUDA", "PCI bus order")
    std::optional<bool> gpu_dmabuf;  // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED when CUDA told
    // The UDP payload of one frame: its header + data.
    // The default is the generator's CODIF frame: 64 + 8192.
    std::uint32_t frame_bytes = 8256;
    // The capture's --ring-depth and --max-frame, for the memlock figure.
    std::uint32_t ring_depth = 4096;
    std::uint32_t max_frame = 9022;
    // --ptp-device: PTP clock devices to open as the user running doctor (the
    // service's PHC access, verbs-mlx5-3.md R3).
    std::vector<std::filesystem::path> ptp_devices;
};

// The bytes of host memory one queue pair of a verbs capture registers (and
// so locks) with these options: ring depth × (the payload slot + the header
// slot), each rounded up to 64 bytes, as lib/sources/verbs/engine.cpp sizes
// them. A capture has one queue pair per GROUP:PORT per -i (per group and
// antenna with --hw-demux).
std::uint64_t queue_pair_bytes(std::uint32_t ring_depth, std::uint32_t max_frame);

// A CPU list as sysfs writes it ("0-3,8,10-11"); nullopt when malformed.
std::optional<std::vector<int>> parse_cpu_list(std::string_view text);
std::string format_cpu_list(std::vector<int> cpus);

// The PCI addresses of the NVIDIA GPUs under <sysfs_root>/bus/pci/devices
// (vendor 0x10de, a display-controller class), in PCI bus order.
std::vector<std::string> list_nvidia_gpus(const std::filesystem::path& sysfs_root);

// One -i resolved: the netdev and the RDMA port behind it (either may be
// missing: a netdev without RDMA, an RDMA port without a netdev).
struct Target {
    std::string given;
    std::string netdev;
    std::string rdma_device;
    std::uint8_t port = 0;
    std::string error;  // not found: why; the other fields are empty
};
std::vector<Target> resolve_targets(const Options& options, const HostCalls& calls);
// A VLAN netdev: its tags, its real device and the port that drives it, and
// what a capture on it does (joins tagged, rules matching the VLAN id);
// nothing for an untagged netdev.
std::optional<Check> check_vlan(const Options& options, const Target& target);

// The checks, each over the roots and the seam; in the order they print.
std::vector<Check> check_capabilities(const Options& options, const HostCalls& calls);
Check check_memlock(const Options& options, const HostCalls& calls, std::size_t targets);
std::vector<Check> check_rdma(const Options& options, const std::vector<Target>& targets);
Check check_mtu(const Options& options, const Target& target);
std::vector<Check> check_gpudirect(const Options& options);
Check check_iommu(const Options& options, const std::vector<Target>& targets);
std::vector<Check> check_locality(const Options& options, const HostCalls& calls,
                                  const Target& target);
Check check_hugepages(const Options& options);
Check check_governor(const Options& options);
Check check_isolation(const Options& options);
// Whether the poll thread and the writers' threads share one core, given
// the process's CPUs (HostCalls::allowed_cpus).
Check check_cores(const Options& options, const std::vector<int>& allowed);
Check check_rp_filter(const Options& options, const Target& target);
Check check_igmp(const Options& options, const Target& target);
// The netdev's PHC: its index, one measurement of PHC − CLOCK_REALTIME (and
// the bracket), whether it runs TAI, whether a PTP daemon (a name in
// <procfs_root>/*/comm) or an adjusted frequency says it is disciplined.
// nullopt when calls.open_phc is unset.
// --ptp-device PATH: whether this user can open and read the PTP clock at
// PATH: FAIL when the open is refused (the line names the group and udev
// rule), WARN when it opens but reads nothing (not a PTP clock, a driver
// error), PASS with the offset to CLOCK_REALTIME.
Check check_ptp_device(const std::filesystem::path& path);
std::optional<Check> check_phc(const Options& options, const HostCalls& calls,
                               const Target& target);
Check check_loopback(const Options& options, const Target& target);
Check check_pcap_buffer(const Options& options, const HostCalls& calls);
Check check_disk_space(const Options& options, const HostCalls& calls);
Check check_direct_io(const Options& options, const HostCalls& calls);

// Every check that applies to `options`, in order.
std::vector<Check> run_checks(const Options& options, const HostCalls& calls);

}  // namespace ibvcap::doctor
