#include "lib/host/doctor.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <pcap/pcap.h>
#include <sys/capability.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <system_error>

#include "formats/codif.hpp"
#include "formats/packet.hpp"
#include "lib/netaddr.hpp"

namespace ibvcap::doctor {

namespace fs = std::filesystem;

namespace {

// The buffer the pcap source asks libpcap for: PcapLiveOptions::buffer_bytes
// (lib/sources/pcap_live.hpp; host/ may not include sources/, so the figure
// is repeated here and test_doctor checks that the two agree).
constexpr std::uint64_t kPcapBufferBytes = std::uint64_t{256} << 20;
// The engine's slot alignment (lib/sources/verbs/engine_internal.hpp, kSlotAlign).
constexpr std::uint64_t kSlotAlign = 64;
// Below this much free space on -o a capture is refused a PASS; below the
// second it is a WARN. At 1 GB/s (8 Gb/s of CODIF) 64 GiB is about a minute.
constexpr std::uint64_t kDiskFailBytes = std::uint64_t{1} << 30;
constexpr std::uint64_t kDiskWarnBytes = std::uint64_t{64} << 30;

Check make(Status status, std::string name, std::string subject, std::string found,
           std::string fix = {}) {
    return Check{status, std::move(name), std::move(subject), std::move(found),
                 status == Status::pass ? std::string() : std::move(fix)};
}

std::string mib(std::uint64_t bytes) {
    return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

std::string gib(std::uint64_t bytes) {
    return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1 << 30));
}

std::optional<long> parse_long(std::string_view text) {
    long value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) {
        return std::nullopt;
    }
    return value;
}

std::optional<long> read_long(const fs::path& path) {
    const auto text = read_sysfs_file(path);
    return text ? parse_long(*text) : std::nullopt;
}

bool path_exists(const fs::path& path) {
    std::error_code ec;
    return fs::exists(path, ec);
}

// The names in a directory, sorted; empty when it is missing.
std::vector<std::string> entries(const fs::path& dir) {
    std::vector<std::string> names;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        names.push_back(it->path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep = ", ") {
    std::string out;
    for (const auto& p : parts) {
        if (!out.empty()) {
            out += sep;
        }
        out += p;
    }
    return out;
}

std::string label(const Target& t) {
    if (!t.netdev.empty()) {
        return t.netdev;
    }
    if (!t.rdma_device.empty()) {
        return fmt::format("{}:{}", t.rdma_device, t.port);
    }
    return t.given;
}

// The sysfs directory of the PCI function behind a target (a link).
fs::path device_dir(const Options& o, const Target& t) {
    if (!t.rdma_device.empty()) {
        return o.sysfs_root / "class/infiniband" / t.rdma_device / "device";
    }
    return o.sysfs_root / "class/net" / t.netdev / "device";
}

// ---- capabilities (libcap) --------------------------------------------------

struct CapFlags {
    bool effective = false;
    bool permitted = false;
};

// The flags of `cap` in a capability text (cap_from_text); nullopt when the
// text does not parse.
std::optional<CapFlags> cap_flags(const std::string& text, cap_value_t cap) {
    if (text.empty()) {
        return CapFlags{};
    }
    std::unique_ptr<std::remove_pointer_t<cap_t>, int (*)(void*)> caps(cap_from_text(text.c_str()),
                                                                       cap_free);
    if (!caps) {
        return std::nullopt;
    }
    cap_flag_value_t e = CAP_CLEAR;
    cap_flag_value_t p = CAP_CLEAR;
    if (cap_get_flag(caps.get(), cap, CAP_EFFECTIVE, &e) != 0 ||
        cap_get_flag(caps.get(), cap, CAP_PERMITTED, &p) != 0) {
        return std::nullopt;
    }
    return CapFlags{e == CAP_SET, p == CAP_SET};
}

CapsText caps_text(cap_t caps, const char* what) {
    CapsText out;
    if (caps == nullptr) {
        out.error = fmt::format("{}: {}", what, std::strerror(errno));
        return out;
    }
    ssize_t length = 0;
    char* text = cap_to_text(caps, &length);
    cap_free(caps);
    if (text == nullptr) {
        out.error = fmt::format("cap_to_text: {}", std::strerror(errno));
        return out;
    }
    out.known = true;
    out.text.assign(text, static_cast<std::size_t>(length));
    cap_free(text);
    return out;
}

}  // namespace

const char* to_string(Status status) {
    switch (status) {
        case Status::pass:
            return "PASS";
        case Status::warn:
            return "WARN";
        case Status::fail:
            return "FAIL";
    }
    return "FAIL";
}

std::string format_line(const Check& c) {
    std::string line = fmt::format("{}  {}{}{}: {}", to_string(c.status), c.name,
                                   c.subject.empty() ? "" : " ", c.subject, c.found);
    if (c.status != Status::pass && !c.fix.empty()) {
        line += "; ";
        line += c.fix;
    }
    return line;
}

nlohmann::json to_json(const std::vector<Check>& checks) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& c : checks) {
        out.push_back(
            {{"check", c.name},
             {"subject", c.subject},
             {"status", to_string(c.status)},
             {"found", c.found},
             {"fix", c.status == Status::pass ? nlohmann::json(nullptr) : nlohmann::json(c.fix)}});
    }
    return out;
}

int exit_code(const std::vector<Check>& checks) {
    return std::any_of(checks.begin(), checks.end(),
                       [](const Check& c) { return c.status == Status::fail; })
               ? 1
               : 0;
}

HostCalls real_host_calls() {
    HostCalls c;
    c.file_caps = [](const fs::path& binary) {
        cap_t caps = cap_get_file(binary.c_str());
        if (caps == nullptr && errno == ENODATA) {
            return CapsText{true, "", ""};  // no security.capability xattr
        }
        return caps_text(caps, "cap_get_file");
    };
    c.process_caps = [] { return caps_text(cap_get_proc(), "cap_get_proc"); };
    c.memlock_limit = []() -> std::optional<std::uint64_t> {
        rlimit r{};
        if (::getrlimit(RLIMIT_MEMLOCK, &r) != 0 || r.rlim_cur == RLIM_INFINITY) {
            return std::nullopt;
        }
        return static_cast<std::uint64_t>(r.rlim_cur);
    };
    c.disk_space = [](const fs::path& dir, std::string& error) -> std::optional<HostCalls::Space> {
        struct statvfs s {};
        if (::statvfs(dir.c_str(), &s) != 0) {
            error = std::strerror(errno);
            return std::nullopt;
        }
        return HostCalls::Space{static_cast<std::uint64_t>(s.f_bavail) * s.f_frsize,
                                static_cast<std::uint64_t>(s.f_blocks) * s.f_frsize,
                                (s.f_flag & ST_RDONLY) != 0};
    };
    c.dir_probe = [](const fs::path& dir) {
        HostCalls::DirProbe probe;
        std::string name = (dir / ".ibvcap-doctor-XXXXXX").string();
        const int fd = ::mkstemp(name.data());
        if (fd < 0) {
            probe.write_error = fmt::format("creating a file: {}", std::strerror(errno));
            return probe;
        }
        ::close(fd);
        const int dfd = ::open(name.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
        if (dfd < 0) {
            probe.direct_error = fmt::format("open with O_DIRECT: {}", std::strerror(errno));
        } else {
            constexpr std::size_t kBlock = 4096;
            void* block = std::aligned_alloc(kBlock, kBlock);
            if (block == nullptr) {
                probe.direct_error = "no memory for a 4 KiB block";
            } else {
                std::memset(block, 0, kBlock);
                const ssize_t n = ::write(dfd, block, kBlock);
                if (n != static_cast<ssize_t>(kBlock)) {
                    probe.direct_error =
                        n < 0 ? fmt::format("a 4 KiB O_DIRECT write: {}", std::strerror(errno))
                              : fmt::format("a 4 KiB O_DIRECT write wrote {} bytes", n);
                }
                std::free(block);
            }
            ::close(dfd);
        }
        ::unlink(name.c_str());
        return probe;
    };
    c.interface_addresses = [] { return read_interface_addresses(); };
    c.pcap_version = [] { return std::string(pcap_lib_version()); };
    return c;
}

std::uint64_t queue_pair_bytes(std::uint32_t ring_depth, std::uint32_t max_frame) {
    const auto round = [](std::uint64_t n) {
        return (n + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
    };
    const std::uint64_t header = kPlainUdpPayloadOffset + kCodifHeaderBytes;
    const std::uint64_t payload = max_frame > header ? max_frame - header : kSlotAlign;
    return std::uint64_t{ring_depth} * (round(header) + round(payload));
}

std::optional<std::vector<int>> parse_cpu_list(std::string_view text) {
    std::vector<int> cpus;
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
        text.remove_suffix(1);
    }
    if (text.empty() || text == "(null)") {
        return cpus;  // an empty list (nohz_full says "(null)" when off)
    }
    std::size_t start = 0;
    while (start <= text.size()) {
        const std::size_t comma = std::min(text.find(',', start), text.size());
        const std::string_view part = text.substr(start, comma - start);
        const std::size_t dash = part.find('-');
        const auto first = parse_long(part.substr(0, dash));
        const auto last =
            dash == std::string_view::npos ? first : parse_long(part.substr(dash + 1));
        if (!first || !last || *first < 0 || *last < *first || *last >= 65536) {
            return std::nullopt;
        }
        for (long c = *first; c <= *last; ++c) {
            cpus.push_back(static_cast<int>(c));
        }
        start = comma + 1;
    }
    std::sort(cpus.begin(), cpus.end());
    cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
    return cpus;
}

std::string format_cpu_list(std::vector<int> cpus) {
    std::sort(cpus.begin(), cpus.end());
    cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
    std::string out;
    for (std::size_t i = 0; i < cpus.size();) {
        std::size_t j = i;
        while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) {
            ++j;
        }
        out += fmt::format("{}{}", out.empty() ? "" : ",", cpus[i]);
        if (j > i) {
            out += fmt::format("-{}", cpus[j]);
        }
        i = j + 1;
    }
    return out;
}

std::vector<std::string> list_nvidia_gpus(const fs::path& sysfs_root) {
    std::vector<std::string> gpus;
    const fs::path devices = sysfs_root / "bus/pci/devices";
    for (const auto& name : entries(devices)) {
        const auto vendor = read_sysfs_file(devices / name / "vendor");
        const auto cls = read_sysfs_file(devices / name / "class");
        // NVIDIA's PCI vendor ID; class 0x03xxxx is a display controller
        // (VGA 0x0300, 3D 0x0302): the GPUs, not their audio or USB functions.
        if (vendor && *vendor == "0x10de" && cls && cls->starts_with("0x03")) {
            gpus.push_back(name);
        }
    }
    return gpus;
}

std::vector<Target> resolve_targets(const Options& o, const HostCalls& calls) {
    const auto ports = list_rdma_ports(o.sysfs_root);
    std::vector<Target> targets;
    const auto port_of_netdev = [&](Target& t) {
        for (const auto& p : ports) {
            if (std::find(p.netdevs.begin(), p.netdevs.end(), t.netdev) != p.netdevs.end()) {
                t.rdma_device = p.device;
                t.port = p.port;
                return;
            }
        }
    };
    for (const auto& given : o.interfaces) {
        Target t;
        t.given = given;
        const auto colon = given.find(':');
        const std::string device = given.substr(0, colon);
        if (!device.empty() && path_exists(o.sysfs_root / "class/infiniband" / device)) {
            long port = 1;
            if (colon != std::string::npos) {
                const auto n = parse_long(std::string_view(given).substr(colon + 1));
                port = n.value_or(-1);
            }
            std::vector<std::string> known;
            for (const auto& p : ports) {
                if (p.device == device) {
                    known.push_back(std::to_string(p.port));
                    if (p.port == port) {
                        t.rdma_device = device;
                        t.port = p.port;
                        t.netdev = p.netdevs.empty() ? "" : p.netdevs.front();
                    }
                }
            }
            if (t.rdma_device.empty()) {
                t.error = fmt::format("{} has no port {} (ports: {})", device,
                                      given.substr(colon + 1), join(known));
            }
        } else if (!given.empty() && given.find('/') == std::string::npos &&
                   path_exists(o.sysfs_root / "class/net" / given)) {
            t.netdev = given;
            port_of_netdev(t);
        } else if (const auto ip = parse_ipv4(given)) {
            std::vector<InterfaceAddress> addresses;
            try {
                addresses = calls.interface_addresses ? calls.interface_addresses()
                                                      : std::vector<InterfaceAddress>{};
            } catch (const std::exception&) {
            }
            for (const auto& a : addresses) {
                if (a.ipv4 && *a.ipv4 == *ip) {
                    t.netdev = a.name;
                    break;
                }
            }
            if (t.netdev.empty()) {
                t.error = fmt::format("no interface has the address {}", given);
            } else {
                port_of_netdev(t);
            }
        } else {
            t.error =
                fmt::format("no netdev, RDMA device or IPv4 address '{}' on this host", given);
        }
        targets.push_back(std::move(t));
    }
    return targets;
}

// ---- capabilities and memlock -----------------------------------------------
//
// Why these two: creating a raw packet QP needs CAP_NET_RAW (the kernel's
// drivers/infiniband/core/uverbs_cmd.c, create_qp: IB_QPT_RAW_PACKET without
// rdma_net_capable(..., CAP_NET_RAW) is -EPERM), and so does the AF_PACKET
// socket under libpcap (net/packet/af_packet.c, packet_create). Registering
// memory pins it against RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK
// (drivers/infiniband/core/umem.c, ib_umem_get: new_pinned > lock_limit &&
// !capable(CAP_IPC_LOCK) is -ENOMEM).

std::vector<Check> check_capabilities(const Options& o, const HostCalls& calls) {
    std::vector<Check> out;
    const std::string setcap =
        fmt::format("sudo setcap cap_net_raw,cap_ipc_lock+ep {}", o.binary.string());
    const CapsText proc = calls.process_caps();
    const auto raw_flags = proc.known ? cap_flags(proc.text, CAP_NET_RAW) : std::nullopt;
    const auto lock_flags = proc.known ? cap_flags(proc.text, CAP_IPC_LOCK) : std::nullopt;
    const bool proc_known = raw_flags.has_value() && lock_flags.has_value();
    const CapFlags raw = raw_flags.value_or(CapFlags{});
    const CapFlags lock = lock_flags.value_or(CapFlags{});
    const bool proc_has_both = proc_known && raw.effective && lock.effective;

    const CapsText file = calls.file_caps(o.binary);
    const auto file_raw = file.known ? cap_flags(file.text, CAP_NET_RAW) : std::nullopt;
    const auto file_lock = file.known ? cap_flags(file.text, CAP_IPC_LOCK) : std::nullopt;
    if (!file.known || !file_raw || !file_lock) {
        out.push_back(
            make(Status::warn, "binary capabilities", o.binary.string(),
                 fmt::format("cannot read its file capabilities ({})",
                             file.known ? "'" + file.text + "' does not parse" : file.error),
                 "check the path, or " + setcap));
    } else if (file_raw->effective && file_raw->permitted && file_lock->effective &&
               file_lock->permitted) {
        out.push_back(make(
            Status::pass, "binary capabilities", o.binary.string(),
            fmt::format("cap_net_raw and cap_ipc_lock permitted and effective ({})", file.text)));
    } else if ((file_raw->permitted || file_lock->permitted) &&
               !(file_raw->effective && file_lock->effective)) {
        out.push_back(make(Status::warn, "binary capabilities", o.binary.string(),
                           fmt::format("'{}': permitted without the effective flag (ibvcap does "
                                       "not raise its own capabilities)",
                                       file.text),
                           setcap));
    } else if (proc_has_both) {
        out.push_back(make(Status::pass, "binary capabilities", o.binary.string(),
                           fmt::format("none{}; not needed by this process, which has both "
                                       "(root; other users need them on the binary)",
                                       file.text.empty() ? "" : " of use ('" + file.text + "')")));
    } else {
        out.push_back(make(Status::warn, "binary capabilities", o.binary.string(),
                           fmt::format("no cap_net_raw and cap_ipc_lock on the binary{}: only "
                                       "root can capture with it",
                                       file.text.empty() ? "" : " ('" + file.text + "')"),
                           setcap + " (or run as root)"));
    }

    if (!proc_known) {
        out.push_back(
            make(Status::warn, "process capabilities", "",
                 fmt::format("cannot read them ({})",
                             proc.known ? "'" + proc.text + "' does not parse" : proc.error),
                 "run as root, or " + setcap));
    } else if (proc_has_both) {
        out.push_back(make(Status::pass, "process capabilities", "",
                           "cap_net_raw and cap_ipc_lock effective"));
    } else if (!raw.effective) {
        out.push_back(make(
            Status::fail, "process capabilities", "",
            fmt::format("cap_net_raw is not effective{} (capabilities '{}'): raw packet QPs and "
                        "libpcap need it",
                        raw.permitted ? " (permitted only)" : "", proc.text),
            "run as root, or " + setcap));
    } else {
        out.push_back(make(Status::warn, "process capabilities", "",
                           fmt::format("cap_ipc_lock is not effective (capabilities '{}'): "
                                       "registered memory counts against the memlock limit",
                                       proc.text),
                           setcap + ", or raise the memlock limit (see memlock)"));
    }
    return out;
}

Check check_memlock(const Options& o, const HostCalls& calls, std::size_t targets) {
    const std::size_t n = std::max<std::size_t>(targets, 1);
    const std::uint64_t per_qp = queue_pair_bytes(o.ring_depth, o.max_frame);
    const std::uint64_t need = per_qp * n;
    const std::string how = fmt::format(
        "{} for {} -i × one GROUP:PORT: --ring-depth {} × {}-byte slots (--max-frame {}); each "
        "more group or antenna QP adds {}",
        mib(need), n, o.ring_depth, per_qp / std::max<std::uint32_t>(o.ring_depth, 1), o.max_frame,
        mib(per_qp));
    const auto limit = calls.memlock_limit();
    if (!limit) {
        return make(Status::pass, "memlock", "", "unlimited (a verbs capture locks " + how + ")");
    }
    if (*limit >= need) {
        return make(Status::pass, "memlock", "", fmt::format("limit {} ≥ {}", mib(*limit), how));
    }
    const CapsText proc = calls.process_caps();
    const auto lock = proc.known ? cap_flags(proc.text, CAP_IPC_LOCK) : std::nullopt;
    if (lock && lock->effective) {
        return make(Status::pass, "memlock", "",
                    fmt::format("limit {}, lifted by cap_ipc_lock (a verbs capture locks {})",
                                mib(*limit), how));
    }
    return make(Status::fail, "memlock", "",
                fmt::format("limit {} < {} (--source pcap locks none)", mib(*limit), how),
                fmt::format("ulimit -l unlimited (/etc/security/limits.conf: '* - memlock "
                            "unlimited'; systemd: LimitMEMLOCK=infinity), or sudo setcap "
                            "cap_net_raw,cap_ipc_lock+ep {}",
                            o.binary.string()));
}

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
    if (o.gpu_pci.empty()) {
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
    // says "Open Kernel Module"), a kernel with RDMA dma-buf memory regions
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

// ---- the capture interface --------------------------------------------------

Check check_rp_filter(const Options& o, const Target& t) {
    // Documentation/networking/ip-sysctl.rst, rp_filter: "The max value from
    // conf/{all,interface}/rp_filter is used when doing source validation on the
    // {interface}." Multicast is validated too (net/ipv4/route.c,
    // ip_mc_validate_source → fib_validate_source), IGMP queries included: a
    // router's query dropped here means no reports, and the switch stops sending.
    const fs::path conf = o.procfs_root / "sys/net/ipv4/conf";
    const auto all = read_long(conf / "all/rp_filter");
    const auto dev = read_long(conf / t.netdev / "rp_filter");
    if (!all || !dev) {
        return make(
            Status::warn, "rp_filter", t.netdev,
            fmt::format("unreadable ({})",
                        (!all ? conf / "all/rp_filter" : conf / t.netdev / "rp_filter").string()),
            "check sysctl net.ipv4.conf.all.rp_filter");
    }
    const long value = std::max(*all, *dev);
    const std::string what =
        fmt::format("{} (the larger of all={} and {}={})", value, *all, t.netdev, *dev);
    if (value == 0) {
        return make(Status::pass, "rp_filter", t.netdev, what + ": no reverse-path filtering");
    }
    return make(
        Status::warn, "rp_filter", t.netdev,
        what + (value == 1 ? ": strict: multicast (IGMP queries included) from a source not "
                             "routed back through " +
                                 t.netdev + " is dropped by the kernel"
                           : ": loose: multicast from a source with no route at all is "
                             "dropped by the kernel"),
        fmt::format("sysctl -w net.ipv4.conf.all.rp_filter=0 "
                    "net.ipv4.conf.{}.rp_filter=0, or route the senders' subnet via {}",
                    t.netdev, t.netdev));
}

Check check_igmp(const Options& o, const Target& t) {
    // Documentation/networking/ip-sysctl.rst, force_igmp_version: 0 and 3 answer
    // the querier's version, 2 answers v2 and v3 queries with v2 reports, 1
    // answers everything with v1 reports. The kernel honours all/ and the
    // interface's value (net/ipv4/igmp.c, IGMP_V1_SEEN / IGMP_V2_SEEN).
    const fs::path conf = o.procfs_root / "sys/net/ipv4/conf";
    const auto all = read_long(conf / "all/force_igmp_version");
    const auto dev = read_long(conf / t.netdev / "force_igmp_version");
    if (!all || !dev) {
        return make(Status::warn, "igmp", t.netdev, "force_igmp_version unreadable",
                    "check sysctl net.ipv4.conf." + t.netdev + ".force_igmp_version");
    }
    const std::string what = fmt::format("force_igmp_version all={} {}={}", *all, t.netdev, *dev);
    if (*all == 1 || *dev == 1) {
        return make(Status::warn, "igmp", t.netdev,
                    what +
                        ": IGMPv1 reports (no leave messages; queriers of v2 and v3 treat the "
                        "host as v1)",
                    fmt::format("sysctl -w net.ipv4.conf.all.force_igmp_version=0 "
                                "net.ipv4.conf.{}.force_igmp_version=0",
                                t.netdev));
    }
    if (*all == 2 || *dev == 2) {
        return make(Status::pass, "igmp", t.netdev,
                    what +
                        ": IGMPv2 reports (ibvcap's any-source joins work with v2 and v3 "
                        "queriers)");
    }
    return make(Status::pass, "igmp", t.netdev, what + ": the querier's version");
}

Check check_loopback(const Options& o, const Target& t) {
    // MLNX_OFED's mlx5 (mlnx-ofa_kernel: drivers/net/ethernet/mellanox/mlx5/core/en_sysfs.c)
    // adds class/net/<IF>/settings/force_local_lb_disable when the device has the
    // disable_local_lb_mc/uc capability; it reads "Force local loopback disable
    // is ON|OFF". The inbox mlx5 has no such file: it turns local loopback on
    // and off itself (mlx5_nic_vport_update_local_lb), so it is unknown here.
    const fs::path file = o.sysfs_root / "class/net" / t.netdev / "settings/force_local_lb_disable";
    const auto text = read_sysfs_file(file);
    if (!text) {
        return make(Status::warn, "multicast loopback", t.netdev,
                    fmt::format("unknown: no {} (MLNX_OFED's mlx5 adds it; the inbox driver "
                                "decides loopback itself): multicast sent from this host may not "
                                "reach a capture on the same port",
                                file.string()),
                    "if a sender runs on this host, test it: ibvcap gen --send -i " + t.netdev +
                        " while capturing on it");
    }
    if (text->ends_with("OFF")) {
        return make(Status::pass, "multicast loopback", t.netdev,
                    "allowed (force_local_lb_disable OFF)");
    }
    if (text->ends_with("ON")) {
        return make(
            Status::warn, "multicast loopback", t.netdev,
            "disabled (force_local_lb_disable ON): multicast sent from this host through " +
                t.netdev + " does not reach a capture on the same port",
            fmt::format("echo 0 > {} (if a sender on this host must be captured)", file.string()));
    }
    return make(Status::warn, "multicast loopback", t.netdev,
                fmt::format("unknown: {} reads '{}'", file.string(), *text),
                "cat the file: it should say ON or OFF");
}

// ---- --source pcap ------------------------------------------------------------

Check check_pcap_buffer(const Options& o, const HostCalls& calls) {
    const std::string version = calls.pcap_version ? calls.pcap_version() : "";
    const auto rmem = read_long(o.procfs_root / "sys/net/core/rmem_max");
    const std::string rmem_text = rmem ? mib(static_cast<std::uint64_t>(*rmem)) : "unreadable";
    // libpcap's Linux capture is memory-mapped (pcap-linux.c: setup_mmapped →
    // create_ring): the buffer size sizes the PACKET_RX_RING, and SO_RCVBUF is
    // not set, so net.core.rmem_max does not cap it. A libpcap without
    // TPACKET falls back to SO_RCVBUF, which rmem_max caps.
    if (version.find("TPACKET") != std::string::npos) {
        return make(Status::pass, "pcap buffer", "",
                    fmt::format("rmem_max {} does not limit it: {} sizes its memory-mapped ring "
                                "with the {} the pcap source asks for, not SO_RCVBUF",
                                rmem_text, version, mib(kPcapBufferBytes)));
    }
    const std::string fix = fmt::format("sysctl -w net.core.rmem_max={}", kPcapBufferBytes);
    if (!rmem) {
        return make(Status::warn, "pcap buffer", "",
                    fmt::format("{}; rmem_max unreadable", version.empty() ? "libpcap" : version),
                    fix);
    }
    if (static_cast<std::uint64_t>(*rmem) >= kPcapBufferBytes) {
        return make(Status::pass, "pcap buffer", "",
                    fmt::format("rmem_max {} ≥ the {} the pcap source asks for", rmem_text,
                                mib(kPcapBufferBytes)));
    }
    return make(
        Status::warn, "pcap buffer", "",
        fmt::format("rmem_max {} < the {} the pcap source asks for, and {} uses "
                    "SO_RCVBUF: the kernel caps the buffer",
                    rmem_text, mib(kPcapBufferBytes), version.empty() ? "libpcap" : version),
        fix);
}

// ---- -o ---------------------------------------------------------------------

namespace {

// -o, or its nearest existing ancestor when the capture would create it.
struct OutputDir {
    fs::path dir;
    std::string note;   // " (DIR does not exist: checked ANCESTOR)"
    std::string error;  // a component that is not a directory
};

OutputDir output_dir(const Options& o) {
    OutputDir out;
    std::error_code ec;
    fs::path p = fs::absolute(o.output_dir, ec);
    if (ec) {
        p = o.output_dir;
    }
    fs::path probe = p;
    while (!fs::exists(probe, ec) && probe.has_parent_path() && probe != probe.parent_path()) {
        probe = probe.parent_path();
    }
    if (!fs::is_directory(probe, ec)) {
        out.error = fmt::format("{} is not a directory", probe.string());
        return out;
    }
    out.dir = probe;
    if (probe != p) {
        out.note = fmt::format(" ({} does not exist yet: a capture creates it; checked {})",
                               p.string(), probe.string());
    }
    return out;
}

}  // namespace

Check check_disk_space(const Options& o, const HostCalls& calls) {
    const std::string subject = o.output_dir.string();
    const OutputDir d = output_dir(o);
    if (!d.error.empty()) {
        return make(Status::fail, "disk space", subject, d.error, "give -o a directory");
    }
    std::string error;
    const auto space = calls.disk_space(d.dir, error);
    if (!space) {
        return make(Status::fail, "disk space", subject,
                    fmt::format("statvfs {}: {}", d.dir.string(), error),
                    "give -o a directory on a mounted filesystem");
    }
    if (space->read_only) {
        return make(Status::fail, "disk space", subject,
                    fmt::format("{} is on a read-only filesystem{}", d.dir.string(), d.note),
                    "give -o a writable directory");
    }
    const HostCalls::DirProbe probe = calls.dir_probe(d.dir);
    if (!probe.write_error.empty()) {
        return make(
            Status::fail, "disk space", subject,
            fmt::format("cannot write in {}: {}{}", d.dir.string(), probe.write_error, d.note),
            "give -o a directory this user can write (or fix its permissions)");
    }
    // At 1 GB/s: 8 Gb/s of CODIF, a busy single-port capture.
    const std::string what =
        fmt::format("{} free of {} (about {} minutes at 1 GB/s){}", gib(space->free_bytes),
                    gib(space->total_bytes), space->free_bytes / 1'000'000'000 / 60, d.note);
    if (space->free_bytes < kDiskFailBytes) {
        return make(Status::fail, "disk space", subject, what,
                    "free space on that filesystem or give -o another one");
    }
    if (space->free_bytes < kDiskWarnBytes) {
        return make(Status::warn, "disk space", subject, what,
                    "free space or give -o a larger filesystem (-W with -G or -C keeps a ring "
                    "of files)");
    }
    return make(Status::pass, "disk space", subject, what);
}

Check check_direct_io(const Options& o, const HostCalls& calls) {
    const std::string subject = o.output_dir.string();
    const OutputDir d = output_dir(o);
    if (!d.error.empty()) {
        return make(Status::warn, "o_direct", subject, "not tried: " + d.error,
                    "give -o a directory");
    }
    const HostCalls::DirProbe probe = calls.dir_probe(d.dir);
    if (!probe.write_error.empty()) {
        return make(
            Status::warn, "o_direct", subject,
            fmt::format("not tried: cannot write in {}: {}", d.dir.string(), probe.write_error),
            "see disk space");
    }
    if (probe.direct_error.empty()) {
        return make(Status::pass, "o_direct", subject,
                    fmt::format("a 4 KiB O_DIRECT write works in {}{}", d.dir.string(), d.note));
    }
    return make(Status::warn, "o_direct", subject,
                fmt::format("{} in {}: --direct-io would fail there{}", probe.direct_error,
                            d.dir.string(), d.note),
                "leave --direct-io off for this directory, or give -o a filesystem that supports "
                "O_DIRECT (ext4, XFS)");
}

// ---- all of them ------------------------------------------------------------

std::vector<Check> run_checks(const Options& o, const HostCalls& calls) {
    std::vector<Check> out;
    const auto add = [&](auto&& more) {
        if constexpr (std::is_same_v<std::decay_t<decltype(more)>, Check>) {
            out.push_back(std::move(more));
        } else {
            for (auto& c : more) {
                out.push_back(std::move(c));
            }
        }
    };
    std::vector<Target> targets = resolve_targets(o, calls);
    add(check_capabilities(o, calls));
    add(check_memlock(o, calls, targets.size()));
    add(check_rdma(o, targets));
    // Without -i the interface checks run on every RDMA port's netdev.
    std::vector<Target> checked;
    if (o.interfaces.empty()) {
        for (const auto& p : list_rdma_ports(o.sysfs_root)) {
            checked.push_back(Target{fmt::format("{}:{}", p.device, p.port),
                                     p.netdevs.empty() ? "" : p.netdevs.front(), p.device, p.port,
                                     ""});
        }
        if (checked.empty()) {
            add(make(Status::warn, "interfaces", "",
                     "no -i and no RDMA port: MTU, NUMA, rp_filter, IGMP and loopback not checked",
                     "give the capture interface: ibvcap doctor -i IF"));
        }
    } else {
        for (const auto& t : targets) {
            if (t.error.empty()) {
                checked.push_back(t);
            }
        }
    }
    for (const auto& t : checked) {
        add(check_mtu(o, t));
    }
    add(check_gpudirect(o));
    add(check_iommu(o, checked));
    for (const auto& t : checked) {
        add(check_locality(o, calls, t));
    }
    add(check_hugepages(o));
    add(check_governor(o));
    if (!o.cpus.empty()) {
        add(check_isolation(o));
    }
    for (const auto& t : checked) {
        if (t.netdev.empty()) {
            continue;
        }
        add(check_rp_filter(o, t));
        add(check_igmp(o, t));
        if (!t.rdma_device.empty()) {
            add(check_loopback(o, t));
        }
    }
    add(check_pcap_buffer(o, calls));
    add(check_disk_space(o, calls));
    add(check_direct_io(o, calls));
    return out;
}

}  // namespace ibvcap::doctor
