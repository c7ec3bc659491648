// ibvcap doctor: a preflight for an acquisition host, one line per check
// (PASS, WARN or FAIL, and the fix), or --json. The checks are in
// lib/host/doctor.cpp; this file parses the options and supplies what lib/
// may not compute itself: the GPU's PCI address and its PCIe path to the NIC
// (gpu/).
#include <fmt/format.h>

#include <climits>

#include "capture/cli.hpp"
#include "gpu/gpu.hpp"
#include "gpu/gpu_info.hpp"
#include "gpu/gpu_logic.hpp"
#include "lib/host/doctor.hpp"

namespace ibvcap::cli {

namespace {

std::vector<int> cpus_of(const cxxopts::ParseResult& args) {
    std::vector<int> cpus;
    if (args.count("cpus")) {
        for (const auto& list : args["cpus"].as<std::vector<std::string>>()) {
            const auto parsed = doctor::parse_cpu_list(list);
            if (!parsed || parsed->empty()) {
                throw UsageError(fmt::format(
                    "bad --cpus '{}': expected CPU numbers and ranges, e.g. 2,3 or 2-5", list));
            }
            cpus.insert(cpus.end(), parsed->begin(), parsed->end());
        }
    }
    for (const char* name : {"cpu", "disk-cpu"}) {
        if (args.count(name)) {
            for (const int c : args[name].as<std::vector<int>>()) {
                if (c < 0 || c >= CPU_SETSIZE) {
                    throw UsageError(fmt::format("--{} {} is not a CPU number", name, c));
                }
                cpus.push_back(c);
            }
        }
    }
    std::sort(cpus.begin(), cpus.end());
    cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
    return cpus;
}

// --gpu ID (a CUDA device number) or a PCI address → the GPU's PCI address:
// CUDA's own answer when this build has CUDA and a driver, otherwise the
// ID-th NVIDIA GPU in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID's order).
void resolve_gpu(doctor::Options& o) {
    if (const auto pci = gpu::normalize_pci_address(o.gpu);
        pci && o.gpu.find_first_not_of("0123456789") != std::string::npos) {
        o.gpu_pci = *pci;
        o.gpu_source = "PCI address";
        return;
    }
    const auto id = std::stoi(o.gpu);
    if (gpu::built_with_cuda()) {
        try {
            const gpu::GpuInfo info = gpu::probe_gpu(id, {}, o.sysfs_root);
            o.gpu_pci = info.pci_bus_id;
            o.gpu_dmabuf = info.dmabuf;
            o.gpu_source = "CUDA";
            return;
        } catch (const std::exception&) {
            // No driver or no such GPU in CUDA's view: fall back to sysfs.
        }
    }
    const auto gpus = doctor::list_nvidia_gpus(o.sysfs_root);
    if (id >= 0 && static_cast<std::size_t>(id) < gpus.size()) {
        o.gpu_pci = gpus[static_cast<std::size_t>(id)];
        o.gpu_source = "PCI bus order";
    }
}

}  // namespace

int cmd_doctor(int argc, char** argv) {
    cxxopts::Options options(
        "ibvcap doctor",
        "Check this host for a capture: one line per check, PASS, WARN or FAIL with the fix. "
        "Exit 0 when nothing FAILs, 1 when something does.");
    // clang-format off
    options.add_options()
        ("i,interface", "the capture interface: netdev, IPv4 address or RDMA DEV[:PORT] (repeatable; default: every RDMA port)", cxxopts::value<std::vector<std::string>>(), "IF")
        ("o,output-dir", "the directory a capture writes to", cxxopts::value<std::string>()->default_value("."), "DIR")
        ("cpus", "the CPUs a capture is pinned to (poll and disk threads), e.g. 2,3 or 2-5 (repeatable)", cxxopts::value<std::vector<std::string>>(), "LIST")
        ("cpu", "capture's --cpu, added to --cpus (repeatable)", cxxopts::value<std::vector<int>>(), "CPU")
        ("disk-cpu", "capture's --disk-cpu, added to --cpus", cxxopts::value<std::vector<int>>(), "LIST")
        ("gpu", "the GPU of --gpu: a CUDA device number or a PCI address", cxxopts::value<std::string>(), "ID")
        ("frame-bytes", "UDP payload of one frame (its header + data), for the MTU", cxxopts::value<std::uint32_t>()->default_value("8256"), "BYTES")
        ("ring-depth", "capture's --ring-depth, for the memlock figure", cxxopts::value<std::uint32_t>()->default_value("4096"), "N")
        ("max-frame", "capture's --max-frame, for the memlock figure", cxxopts::value<std::uint32_t>()->default_value("9022"), "BYTES")
        ("ptp-device", "a PTP clock device to open and read as this user, e.g. /dev/ptp0 (repeatable)", cxxopts::value<std::vector<std::string>>(), "PATH")
        ("json", "a JSON array of the checks instead of lines")
        ("sysfs-root", "where sysfs is (tests)", cxxopts::value<std::string>()->default_value("/sys"), "DIR")
        ("procfs-root", "where procfs is (tests)", cxxopts::value<std::string>()->default_value("/proc"), "DIR")
        ("h,help", "this help");
    // clang-format on
    const auto args = parse(options, argc, argv);
    if (args.count("help")) {
        fmt::print("{}", options.help());
        return kExitZeroLoss;
    }
    if (!args.unmatched().empty()) {
        throw UsageError(fmt::format("unexpected argument '{}' (doctor takes options only)",
                                     args.unmatched().front()));
    }
    doctor::Options o;
    o.sysfs_root = args["sysfs-root"].as<std::string>();
    o.procfs_root = args["procfs-root"].as<std::string>();
    std::error_code ec;
    o.binary = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) {
        o.binary = argv[0];
    }
    if (args.count("interface")) {
        o.interfaces = args["interface"].as<std::vector<std::string>>();
    }
    if (args.count("ptp-device")) {
        for (const auto& p : args["ptp-device"].as<std::vector<std::string>>()) {
            o.ptp_devices.emplace_back(p);
        }
    }
    o.output_dir = args["output-dir"].as<std::string>();
    if (o.output_dir.empty()) {
        throw UsageError("-o needs a directory");
    }
    o.cpus = cpus_of(args);
    if (args.count("cpu")) {
        o.poll_cpus = args["cpu"].as<std::vector<int>>();
    }
    if (args.count("disk-cpu")) {
        o.disk_cpus = args["disk-cpu"].as<std::vector<int>>();
    }
    o.frame_bytes = args["frame-bytes"].as<std::uint32_t>();
    if (o.frame_bytes < 64 || o.frame_bytes > 65507) {
        throw UsageError(fmt::format("bad --frame-bytes {}: expected 64 to 65507 (a UDP payload)",
                                     o.frame_bytes));
    }
    o.ring_depth = args["ring-depth"].as<std::uint32_t>();
    o.max_frame = args["max-frame"].as<std::uint32_t>();
    if (o.ring_depth < 16 || o.max_frame < 128 || o.max_frame > 65535) {
        throw UsageError("--ring-depth must be at least 16, --max-frame 128-65535 bytes");
    }
    if (args.count("gpu")) {
        o.gpu = args["gpu"].as<std::string>();
        const bool number = !o.gpu.empty() && o.gpu.size() < 6 &&
                            o.gpu.find_first_not_of("0123456789") == std::string::npos;
        if (!number && !gpu::normalize_pci_address(o.gpu)) {
            throw UsageError(fmt::format(
                "bad --gpu '{}': expected a GPU number (0 or more) or a PCI address", o.gpu));
        }
        resolve_gpu(o);
    }
    doctor::HostCalls calls = doctor::real_host_calls();
    calls.gpu_nic_path = [&o](const std::string& gpu_pci,
                              const std::string& nic) -> std::optional<doctor::HostCalls::PciPath> {
        const auto g = gpu::locate_pci_function(o.sysfs_root, gpu_pci);
        const auto n = gpu::locate_pci_function(o.sysfs_root, nic);
        if (!g || !n) {
            return std::nullopt;
        }
        const auto r = gpu::relate(*g, *n);
        return doctor::HostCalls::PciPath{
            r == gpu::PciRelation::same_switch || r == gpu::PciRelation::same_root_port,
            gpu::describe_relation(*g, *n)};
    };
    const auto checks = doctor::run_checks(o, calls);
    if (args.count("json")) {
        fmt::print("{}\n", doctor::to_json(checks).dump(2));
    } else {
        for (const auto& c : checks) {
            fmt::print("{}\n", doctor::format_line(c));
        }
    }
    return doctor::exit_code(checks);
}

}  // namespace ibvcap::cli
