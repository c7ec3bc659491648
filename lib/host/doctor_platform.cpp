// ibvcap doctor: the RDMA, GPU, IOMMU, NUMA and CPU checks (lib/host/doctor.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "lib/host/cores.hpp"
#include "lib/host/doctor.hpp"
#include "lib/host/doctor_common.hpp"

namespace ibvcap::doctor {

namespace fs = std::filesystem;
using namespace detail;

// ---- RDMA devices, links, MTU -----------------------------------------------

std::vector<Check> check_rdma(const Options& o, const std::vector<Target>& targets) {
    std::vector<Check> out;
    const auto ports = list_rdma_ports(o.sysfs_root);
    std::set<std::string> devices;
    for (const auto& p : ports) {
        devices.insert(p.device);
    }
    if (ports.empty()) {
        out.push_back(make(Status::warn, "rdma devices", "",
                           fmt::format("none under {}: only --source pcap can capture here",
                                       (o.sysfs_root / "class/infiniband").string()),
                           "install rdma-core and load the NIC's RDMA driver (modprobe mlx5_ib), "
                           "or capture with --source pcap"));
    } else {
        out.push_back(make(Status::pass, "rdma devices", "",
                           fmt::format("{} ({} port{})", join({devices.begin(), devices.end()}),
                                       ports.size(), ports.size() == 1 ? "" : "s")));
    }
    const auto link = [&](const RdmaPort& p, bool chosen) {
        const std::string subject = fmt::format("{}:{}", p.device, p.port);
        const std::string netdev = p.netdevs.empty() ? "no netdev" : "netdev " + join(p.netdevs);
        if (p.state == "ACTIVE") {
            out.push_back(make(Status::pass, "rdma link", subject,
                               fmt::format("ACTIVE ({}, {})", p.link_layer, netdev)));
            return;
        }
        out.push_back(
            make(chosen ? Status::fail : Status::warn, "rdma link", subject,
                 fmt::format("{} ({}, {}){}", p.state.empty() ? "state unreadable" : p.state,
                             p.link_layer, netdev, chosen ? "" : "; not named with -i"),
                 fmt::format("bring the link up: the cable and switch port, ip link set {} up; "
                             "ibv_devinfo -d {} shows the port state",
                             p.netdevs.empty() ? "IF" : p.netdevs.front(), p.device)));
    };
    if (o.interfaces.empty()) {
        for (const auto& p : ports) {
            link(p, false);
        }
        return out;
    }
    for (const auto& t : targets) {
        if (!t.error.empty()) {
            out.push_back(make(Status::fail, "interface", t.given, t.error,
                               "ibvcap devices lists the interfaces and RDMA devices"));
            continue;
        }
        if (t.rdma_device.empty()) {
            out.push_back(make(Status::warn, "rdma link", t.netdev,
                               "no RDMA device drives this netdev: --source pcap only",
                               "for --source verbs use an mlx5 port (ibvcap devices lists them)"));
            continue;
        }
        for (const auto& p : ports) {
            if (p.device == t.rdma_device && p.port == t.port) {
                link(p, true);
            }
        }
    }
    return out;
}

Check check_mtu(const Options& o, const Target& t) {
    const std::uint32_t need = o.frame_bytes + 8 + 20;  // UDP and IPv4 headers
    if (t.netdev.empty()) {
        return make(Status::warn, "mtu", label(t), "no netdev: the MTU cannot be read",
                    "check the port's netdev (ibvcap devices)");
    }
    const auto mtu = read_long(o.sysfs_root / "class/net" / t.netdev / "mtu");
    if (!mtu) {
        return make(Status::warn, "mtu", t.netdev, "unreadable",
                    fmt::format("check ip link show {}", t.netdev));
    }
    const std::string what = fmt::format(
        "{} bytes (a {}-byte frame, --frame-bytes, needs {} with its UDP and IPv4 headers)", *mtu,
        o.frame_bytes, need);
    if (*mtu >= static_cast<long>(need)) {
        return make(Status::pass, "mtu", t.netdev, what);
    }
    return make(
        Status::fail, "mtu", t.netdev, what,
        fmt::format("ip link set {} mtu 9000 (and the switch ports on the path)", t.netdev));
}

// ---- GPUDirect and the IOMMU ------------------------------------------------

namespace {

// A loaded module, as sysfs (module/<name>) or /proc/modules shows it.
bool module_loaded(const Options& o, const std::string& name) {
    if (path_exists(o.sysfs_root / "module" / name)) {
        return true;
    }
    const auto modules = read_sysfs_file(o.procfs_root / "modules");
    if (!modules) {
        return false;
    }
    std::istringstream lines(*modules);
    for (std::string line; std::getline(lines, line);) {
        if (line.starts_with(name + " ")) {
            return true;
        }
    }
    return false;
}

// "6.1.0-18-amd64" → (6, 1).
std::optional<std::pair<long, long>> kernel_version(const Options& o) {
    const auto release = read_sysfs_file(o.procfs_root / "sys/kernel/osrelease");
    if (!release) {
        return std::nullopt;
    }
    const auto dot = release->find('.');
    if (dot == std::string::npos) {
        return std::nullopt;
    }
    const auto major = parse_long(std::string_view(*release).substr(0, dot));
    std::size_t end = dot + 1;
    while (end < release->size() && std::isdigit(static_cast<unsigned char>((*release)[end]))) {
        ++end;
    }
    const auto minor = parse_long(std::string_view(*release).substr(dot + 1, end - dot - 1));
    if (!major || !minor) {
        return std::nullopt;
    }
    return std::pair{*major, *minor};
}

std::vector<std::string> cmdline_words(const Options& o) {
    std::vector<std::string> words;
    std::istringstream in(read_sysfs_file(o.procfs_root / "cmdline").value_or(""));
    for (std::string w; in >> w;) {
        words.push_back(w);
    }
    return words;
}

bool has_word(const std::vector<std::string>& words, std::string_view word) {
    return std::find(words.begin(), words.end(), word) != words.end();
}

}  // namespace

std::vector<Check> check_gpudirect(const Options& o) {
    std::vector<Check> out;
    if (o.gpu.empty()) {
        return out;
    }
    if (o.gpu_pci.empty() || !path_exists(o.sysfs_root / "bus/pci/devices" / o.gpu_pci)) {
        out.push_back(make(Status::fail, "gpu", o.gpu,
                           fmt::format("no NVIDIA GPU {} under {}", o.gpu,
                                       (o.sysfs_root / "bus/pci/devices").string()),
                           "check nvidia-smi; --gpu takes a CUDA device number or a PCI address"));
        return out;
    }
    out.push_back(
        make(Status::pass, "gpu", o.gpu,
             fmt::format("PCI {} ({})", o.gpu_pci, o.gpu_source.empty() ? "given" : o.gpu_source)));
    if (!module_loaded(o, "nvidia")) {
        out.push_back(make(Status::fail, "gpudirect", o.gpu_pci,
                           "the NVIDIA driver is not loaded (no module nvidia): --gpu cannot run",
                           "install the NVIDIA driver and load it (modprobe nvidia; nvidia-smi "
                           "lists the GPU)"));
        return out;
    }
    if (module_loaded(o, "nvidia_peermem") || module_loaded(o, "nv_peer_mem")) {
        out.push_back(make(Status::pass, "gpudirect", o.gpu_pci,
                           "nvidia-peermem loaded: the NIC can register GPU memory"));
        return out;
    }
    // dma-buf needs the open kernel modules (their /proc/driver/nvidia/version
    // says "Open Kernel Module": nv-procfs.c nv_procfs_read_version prints the
    // build's pNVRM_ID), a kernel with RDMA dma-buf memory regions
    // (ib_umem_dmabuf, Linux 5.12), and the GPU saying yes when CUDA was asked.
    const auto version = read_sysfs_file(o.procfs_root / "driver/nvidia/version").value_or("");
    const bool open_modules = version.find("Open Kernel Module") != std::string::npos;
    const auto kernel = kernel_version(o);
    const bool new_kernel =
        kernel && (kernel->first > 5 || (kernel->first == 5 && kernel->second >= 12));
    const std::string kernel_text =
        kernel ? fmt::format("kernel {}.{}", kernel->first, kernel->second) : "kernel unknown";
    if (open_modules && new_kernel && o.gpu_dmabuf.value_or(true)) {
        out.push_back(make(Status::pass, "gpudirect", o.gpu_pci,
                           fmt::format("dma-buf: open NVIDIA kernel modules, {} (5.12 or later){}",
                                       kernel_text, o.gpu_dmabuf ? ", the GPU supports it" : "")));
        return out;
    }
    std::vector<std::string> why;
    if (!open_modules) {
        why.push_back(version.empty()
                          ? "no /proc/driver/nvidia/version"
                          : "the proprietary kernel modules (dma-buf needs the open ones)");
    }
    if (!new_kernel) {
        why.push_back(kernel_text + " (dma-buf needs 5.12 or later)");
    }
    if (o.gpu_dmabuf && !*o.gpu_dmabuf) {
        why.push_back("the GPU reports no dma-buf support");
    }
    out.push_back(make(Status::warn, "gpudirect", o.gpu_pci,
                       fmt::format("neither nvidia-peermem nor dma-buf ({}): payload goes "
                                   "through pinned host memory (staging) and is copied",
                                   join(why)),
                       "sudo modprobe nvidia-peermem, or install the open kernel modules "
                       "(nvidia-open) for dma-buf"));
    return out;
}

Check check_iommu(const Options& o, const std::vector<Target>& targets) {
    // The group type is the kernel's (Documentation/ABI/testing/sysfs-kernel-iommu_groups:
    // "identity" passes DMA through, "DMA" and "DMA-FQ" translate it).
    std::vector<std::pair<std::string, fs::path>> devices;
    for (const auto& t : targets) {
        if (t.error.empty()) {
            devices.emplace_back(label(t), device_dir(o, t));
        }
    }
    if (!o.gpu_pci.empty()) {
        devices.emplace_back("GPU " + o.gpu_pci, o.sysfs_root / "bus/pci/devices" / o.gpu_pci);
    }
    const auto iommus = entries(o.sysfs_root / "class/iommu");
    const auto words = cmdline_words(o);
    const std::string fix =
        "add iommu=pt to the kernel command line (GRUB_CMDLINE_LINUX, with intel_iommu=on or "
        "amd_iommu=on as the platform needs) and reboot";
    std::vector<std::string> translated;
    std::vector<std::string> passthrough;
    bool unknown = false;
    for (const auto& [name, dir] : devices) {
        const auto type = read_sysfs_file(dir / "iommu_group/type");
        if (!type) {
            if (path_exists(dir / "iommu_group") || !iommus.empty()) {
                unknown = true;
            }
            continue;
        }
        if (*type == "identity") {
            passthrough.push_back(name);
        } else if (*type == "DMA" || *type == "DMA-FQ") {
            translated.push_back(fmt::format("{} ({})", name, *type));
        } else {
            unknown = true;
        }
    }
    if (!translated.empty()) {
        return make(Status::warn, "iommu", "",
                    fmt::format("translating DMA for {}: GPUDirect RDMA peer-to-peer is commonly "
                                "blocked, and every DMA pays a translation",
                                join(translated)),
                    fix);
    }
    if (iommus.empty()) {
        return make(Status::pass, "iommu", "",
                    fmt::format("off (nothing under {})", (o.sysfs_root / "class/iommu").string()));
    }
    if (!passthrough.empty() && !unknown) {
        return make(Status::pass, "iommu", "",
                    fmt::format("passthrough (identity) for {}", join(passthrough)));
    }
    if (has_word(words, "iommu=pt") || has_word(words, "iommu.passthrough=1")) {
        return make(
            Status::pass, "iommu", "",
            fmt::format("{} registered; passthrough from the kernel command line (iommu=pt)",
                        join(iommus)));
    }
    if (has_word(words, "iommu=off") || has_word(words, "intel_iommu=off") ||
        has_word(words, "amd_iommu=off")) {
        return make(Status::pass, "iommu", "", "off on the kernel command line");
    }
    return make(Status::warn, "iommu", "",
                fmt::format("{} registered, no iommu=pt on the kernel command line: DMA may be "
                            "translated (GPUDirect RDMA peer-to-peer commonly fails then)",
                            join(iommus)),
                fix);
}

// ---- NUMA and PCIe locality -------------------------------------------------

namespace {

// CPU → NUMA node, from <sysfs>/devices/system/node/node<N>/cpulist.
std::map<int, int> cpu_nodes(const Options& o) {
    std::map<int, int> out;
    const fs::path nodes = o.sysfs_root / "devices/system/node";
    for (const auto& name : entries(nodes)) {
        if (!name.starts_with("node")) {
            continue;
        }
        const auto node = parse_long(std::string_view(name).substr(4));
        const auto list = read_sysfs_file(nodes / name / "cpulist");
        const auto cpus = list ? parse_cpu_list(*list) : std::nullopt;
        if (node && cpus) {
            for (const int c : *cpus) {
                out[c] = static_cast<int>(*node);
            }
        }
    }
    return out;
}

}  // namespace

std::vector<Check> check_locality(const Options& o, const HostCalls& calls, const Target& t) {
    std::vector<Check> out;
    const std::string subject = label(t);
    const auto node = read_long(device_dir(o, t) / "numa_node");
    const auto nodes = cpu_nodes(o);
    if (!node || *node < 0) {
        out.push_back(make(Status::pass, "numa", subject,
                           fmt::format("the NIC reports no NUMA node ({}): one node, or the "
                                       "firmware does not say",
                                       node ? std::to_string(*node) : "no numa_node")));
    } else {
        std::vector<int> local;
        for (const auto& [cpu, n] : nodes) {
            if (n == *node) {
                local.push_back(cpu);
            }
        }
        std::vector<int> remote;
        for (const int c : o.cpus) {
            const auto it = nodes.find(c);
            if (it != nodes.end() && it->second != *node) {
                remote.push_back(c);
            }
        }
        const std::string local_text =
            local.empty() ? "" : fmt::format(" (CPUs {})", format_cpu_list(local));
        if (o.cpus.empty()) {
            out.push_back(make(Status::pass, "numa", subject,
                               fmt::format("NIC on node {}{}; give --cpus to check the poll and "
                                           "writer CPUs against it",
                                           *node, local_text)));
        } else if (remote.empty()) {
            out.push_back(make(Status::pass, "numa", subject,
                               fmt::format("NIC on node {}{}, with CPUs {}", *node, local_text,
                                           format_cpu_list(o.cpus))));
        } else {
            out.push_back(
                make(Status::warn, "numa", subject,
                     fmt::format("NIC on node {}{}, but CPUs {} are on another node: "
                                 "every frame crosses the inter-socket link",
                                 *node, local_text, format_cpu_list(remote)),
                     fmt::format("pin --cpu and --disk-cpu to CPUs of node {}{}", *node,
                                 local.empty() ? "" : " (" + format_cpu_list(local) + ")")));
        }
    }
    if (!o.gpu_pci.empty()) {
        const std::string nic = t.rdma_device.empty() ? t.netdev : t.rdma_device;
        const auto path = calls.gpu_nic_path ? calls.gpu_nic_path(o.gpu_pci, nic) : std::nullopt;
        const std::string fix =
            "use the GPU nearest the NIC (nvidia-smi topo -m: PIX or PXB), or move a card so "
            "both sit under one PCIe switch";
        if (!path) {
            out.push_back(make(Status::warn, "pcie", subject + " GPU " + o.gpu_pci,
                               "the PCIe path between them cannot be found in sysfs", fix));
        } else {
            out.push_back(make(path->close ? Status::pass : Status::warn, "pcie",
                               subject + " GPU " + o.gpu_pci, path->words, fix));
        }
    }
    return out;
}

// ---- memory and CPUs --------------------------------------------------------

Check check_hugepages(const Options& o) {
    const auto meminfo = read_sysfs_file(o.procfs_root / "meminfo");
    if (!meminfo) {
        return make(Status::warn, "hugepages", "",
                    fmt::format("{} unreadable", (o.procfs_root / "meminfo").string()),
                    "check that procfs is mounted");
    }
    std::map<std::string, long> values;
    std::istringstream lines(*meminfo);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream words(line);
        std::string key;
        long value = 0;
        if (words >> key >> value && key.ends_with(":")) {
            key.pop_back();
            values[key] = value;
        }
    }
    if (!values.count("HugePages_Total") || !values.count("Hugepagesize") ||
        !values.count("MemTotal")) {
        return make(Status::warn, "hugepages", "",
                    "meminfo has no HugePages_Total, Hugepagesize "
                    "or MemTotal",
                    "check the kernel (CONFIG_HUGETLBFS)");
    }
    const std::uint64_t page_kb = static_cast<std::uint64_t>(values["Hugepagesize"]);
    const std::uint64_t reserved =
        static_cast<std::uint64_t>(values["HugePages_Total"]) * page_kb * 1024;
    const std::uint64_t total = static_cast<std::uint64_t>(values["MemTotal"]) * 1024;
    const std::string what = fmt::format(
        "{} pages of {} kB reserved ({}; {} free) of {}; ibvcap allocates none (its rings are "
        "ordinary pages)",
        values["HugePages_Total"], page_kb, gib(reserved),
        values.count("HugePages_Free") ? std::to_string(values["HugePages_Free"]) : "?",
        gib(total));
    if (reserved * 2 > total) {
        return make(Status::warn, "hugepages", "",
                    what +
                        ": more than half the memory is out of "
                        "ibvcap's reach",
                    "lower vm.nr_hugepages (sysctl -w vm.nr_hugepages=N) unless other software "
                    "on this host needs them");
    }
    return make(Status::pass, "hugepages", "", what);
}

Check check_governor(const Options& o) {
    std::vector<int> cpus = o.cpus;
    if (cpus.empty()) {
        const auto online = read_sysfs_file(o.sysfs_root / "devices/system/cpu/online");
        cpus = online ? parse_cpu_list(*online).value_or(std::vector<int>{}) : std::vector<int>{};
    }
    std::map<std::string, std::vector<int>> by_governor;
    for (const int c : cpus) {
        const auto g = read_sysfs_file(
            o.sysfs_root / fmt::format("devices/system/cpu/cpu{}/cpufreq/scaling_governor", c));
        by_governor[g.value_or("")].push_back(c);
    }
    std::vector<std::string> parts;
    for (const auto& [g, list] : by_governor) {
        parts.push_back(fmt::format("{} on CPUs {}", g.empty() ? "no cpufreq governor" : g,
                                    format_cpu_list(list)));
    }
    const std::string scope = o.cpus.empty() ? "" : " (--cpus)";
    const std::string fix =
        "cpupower frequency-set -g performance (or echo performance > "
        "/sys/devices/system/cpu/cpuN/cpufreq/scaling_governor); without cpufreq, check the "
        "firmware's power profile";
    if (cpus.empty()) {
        return make(Status::warn, "cpu governor", "", "no online CPUs listed in sysfs", fix);
    }
    if (by_governor.size() == 1 && by_governor.count("performance")) {
        return make(Status::pass, "cpu governor", "", join(parts) + scope);
    }
    return make(Status::warn, "cpu governor", "",
                join(parts, "; ") + scope + ": a CPU that scales down reacts late to a burst", fix);
}

Check check_isolation(const Options& o) {
    const auto online_text = read_sysfs_file(o.sysfs_root / "devices/system/cpu/online");
    const auto online = online_text ? parse_cpu_list(*online_text) : std::nullopt;
    const std::string given = format_cpu_list(o.cpus);
    if (online) {
        std::vector<int> missing;
        for (const int c : o.cpus) {
            if (!std::binary_search(online->begin(), online->end(), c)) {
                missing.push_back(c);
            }
        }
        if (!missing.empty()) {
            return make(Status::fail, "cpu isolation", given,
                        fmt::format("CPUs {} are not online (online: {})", format_cpu_list(missing),
                                    format_cpu_list(*online)),
                        "give CPUs that exist (lscpu)");
        }
    }
    const auto read_list = [&](const char* name) {
        const auto text = read_sysfs_file(o.sysfs_root / "devices/system/cpu" / name);
        return text ? parse_cpu_list(*text) : std::nullopt;
    };
    const auto isolated = read_list("isolated");
    const auto nohz = read_list("nohz_full");
    std::vector<int> not_isolated;
    std::vector<int> not_nohz;
    for (const int c : o.cpus) {
        if (!isolated || !std::binary_search(isolated->begin(), isolated->end(), c)) {
            not_isolated.push_back(c);
        }
        if (!nohz || !std::binary_search(nohz->begin(), nohz->end(), c)) {
            not_nohz.push_back(c);
        }
    }
    if (not_isolated.empty() && not_nohz.empty()) {
        return make(Status::pass, "cpu isolation", given, "isolated and nohz_full");
    }
    std::vector<std::string> why;
    if (!not_isolated.empty()) {
        why.push_back(fmt::format(
            "CPUs {} not isolated (isolated: {})", format_cpu_list(not_isolated),
            isolated ? (isolated->empty() ? "none" : format_cpu_list(*isolated)) : "unreadable"));
    }
    if (!not_nohz.empty()) {
        why.push_back(
            fmt::format("CPUs {} not nohz_full (nohz_full: {})", format_cpu_list(not_nohz),
                        nohz ? (nohz->empty() ? "none" : format_cpu_list(*nohz)) : "unreadable"));
    }
    return make(
        Status::warn, "cpu isolation", given,
        join(why, "; ") + ": the scheduler and the timer tick may interrupt the poll thread",
        fmt::format("boot with isolcpus={0} nohz_full={0} rcu_nocbs={0} (or a tuned "
                    "cpu-partitioning profile)",
                    given));
}

// The poll thread and the writers' threads on one core between them
// (lib/host/cores.hpp): a warning, since one core then does the whole
// capture's work; nothing is dropped for it below --writer-memory.
Check check_cores(const Options& o, const std::vector<int>& allowed) {
    const std::string subject =
        allowed.empty() ? std::string("affinity unknown") : "affinity " + format_cpu_list(allowed);
    if (const auto words = shared_core(o.poll_cpus, o.disk_cpus, allowed)) {
        return make(Status::warn, "cores", subject, *words, kSharedCoreFix);
    }
    return make(Status::pass, "cores", subject,
                "the poll thread and the writers' threads can run on different CPUs");
}

}  // namespace ibvcap::doctor
