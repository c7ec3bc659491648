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
#include "lib/core/netaddr.hpp"
#include "lib/host/cores.hpp"
#include "lib/host/doctor_common.hpp"

namespace ibvcap::doctor {

namespace fs = std::filesystem;
using namespace detail;

namespace {

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
    c.allowed_cpus = [] { return allowed_cpus(); };
    c.open_phc = [](const std::string& netdev, std::string& why) {
        return open_netdev_phc(netdev, why);
    };
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
    const auto vlans = read_vlan_table(o.procfs_root / "net/vlan/config");
    const auto port_of_netdev = [&](Target& t) {
        // The netdev, or the real device beneath a VLAN no GID lists yet.
        for (const std::string& netdev : {t.netdev, vlan_chain(vlans, t.netdev).real}) {
            for (const auto& p : ports) {
                if (std::find(p.netdevs.begin(), p.netdevs.end(), netdev) != p.netdevs.end()) {
                    t.rdma_device = p.device;
                    t.port = p.port;
                    return;
                }
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
        "{} for {} -i × one receive queue (every group's rules share it): --ring-depth {} × "
        "{}-byte slots (--max-frame {}); each more queue (--queues) adds {}",
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
    if (calls.allowed_cpus) {
        add(check_cores(o, calls.allowed_cpus()));
    }
    for (const auto& t : checked) {
        if (t.netdev.empty()) {
            continue;
        }
        add(check_rp_filter(o, t));
        add(check_igmp(o, t));
        if (auto vlan = check_vlan(o, t)) {
            add(std::move(*vlan));
        }
        if (auto clock = check_phc(o, calls, t)) {
            add(std::move(*clock));
        }
        if (!t.rdma_device.empty()) {
            add(check_loopback(o, t));
        }
    }
    for (const auto& path : o.ptp_devices) {
        add(check_ptp_device(path));
    }
    add(check_pcap_buffer(o, calls));
    add(check_disk_space(o, calls));
    add(check_direct_io(o, calls));
    return out;
}

}  // namespace ibvcap::doctor
