#include "lib/host/devices.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <system_error>

#include "lib/core/netaddr.hpp"
#include "lib/host/vlan_links.hpp"

namespace ibvcap {

namespace fs = std::filesystem;

namespace {

std::string_view trim(std::string_view s) {
    constexpr std::string_view kSpace = " \t\r\n";
    const auto first = s.find_first_not_of(kSpace);
    if (first == std::string_view::npos) {
        return {};
    }
    const auto last = s.find_last_not_of(kSpace);
    return s.substr(first, last - first + 1);
}

std::optional<unsigned> parse_unsigned(std::string_view text) {
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size() || text.empty()) {
        return std::nullopt;
    }
    return value;
}

// Names of the entries of a directory, sorted; empty when it cannot be read.
std::vector<std::string> list_dir(const fs::path& dir) {
    std::vector<std::string> names;
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec) {
        return names;
    }
    for (const fs::directory_iterator end; it != end; it.increment(ec)) {
        if (ec) {
            break;
        }
        names.push_back(it->path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
}

// Ports are compared numerically ("10" after "9").
std::vector<std::uint8_t> list_ports(const fs::path& ports_dir) {
    std::vector<std::uint8_t> ports;
    for (const auto& name : list_dir(ports_dir)) {
        const auto n = parse_unsigned(name);
        if (n && *n >= 1 && *n <= 255) {
            ports.push_back(static_cast<std::uint8_t>(*n));
        }
    }
    std::sort(ports.begin(), ports.end());
    return ports;
}

// "4: ACTIVE" → "ACTIVE"; text without a "N: " prefix is returned as it is.
std::string strip_enum_prefix(std::string_view text) {
    const auto colon = text.find(':');
    if (colon != std::string_view::npos && parse_unsigned(trim(text.substr(0, colon)))) {
        return std::string(trim(text.substr(colon + 1)));
    }
    return std::string(text);
}

void add_unique(std::vector<std::string>& list, const std::string& value) {
    if (std::find(list.begin(), list.end(), value) == list.end()) {
        list.push_back(value);
    }
}

}  // namespace

std::optional<std::string> read_sysfs_file(const fs::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return std::nullopt;
    }
    std::string text;
    std::array<char, 4096> buffer{};
    for (;;) {
        const ssize_t n = ::read(fd, buffer.data(), buffer.size());
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            ::close(fd);
            return std::nullopt;
        }
        if (n == 0) {
            break;
        }
        text.append(buffer.data(), static_cast<std::size_t>(n));
        if (text.size() > 65536) {  // attribute files are one page at most
            break;
        }
    }
    ::close(fd);
    return std::string(trim(text));
}

std::vector<InterfaceAddress> read_interface_addresses() {
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) {
        throw std::system_error(errno, std::generic_category(),
                                "cannot list network interfaces (getifaddrs)");
    }
    std::vector<InterfaceAddress> result;
    for (const ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
        if (ifa->ifa_name == nullptr) {
            continue;
        }
        InterfaceAddress entry;
        entry.name = ifa->ifa_name;
        entry.flags = ifa->ifa_flags;
        if (ifa->ifa_addr != nullptr && ifa->ifa_addr->sa_family == AF_INET) {
            sockaddr_in sin{};
            std::memcpy(&sin, ifa->ifa_addr, sizeof sin);
            entry.ipv4 = ntohl(sin.sin_addr.s_addr);
        }
        result.push_back(std::move(entry));
    }
    ::freeifaddrs(list);
    return result;
}

// The kernel's VLAN table: name → (VLAN id, real device). Hand-read: no Debian
// library reads /proc/net/vlan/config, and libnl's IFLA_VLAN_ID would need a
// netlink socket that a fake tree cannot stand in for. Lines that do not
// parse (the two header lines) are skipped.
VlanTable read_vlan_table(const fs::path& config) {
    VlanTable table;
    std::ifstream in(config);
    for (std::string line; std::getline(in, line);) {
        const auto bar1 = line.find('|');
        const auto bar2 = bar1 == std::string::npos ? bar1 : line.find('|', bar1 + 1);
        if (bar2 == std::string::npos) {
            continue;
        }
        const std::string name(trim(std::string_view(line).substr(0, bar1)));
        const auto vid =
            parse_unsigned(trim(std::string_view(line).substr(bar1 + 1, bar2 - bar1 - 1)));
        const std::string real(trim(std::string_view(line).substr(bar2 + 1)));
        if (name.empty() || real.empty() || !vid || *vid > 4095) {
            continue;
        }
        table[name] = {static_cast<std::uint16_t>(*vid), real};
    }
    return table;
}

std::string format_vlan_ids(const std::vector<std::uint16_t>& ids) {
    std::string text;
    for (const auto id : ids) {
        text += fmt::format("{}{}", text.empty() ? "" : ".", id);
    }
    return text;
}

VlanChain vlan_chain(const VlanTable& table, const std::string& netdev) {
    VlanChain chain;
    chain.real = netdev;
    for (int depth = 0; depth < 8; ++depth) {
        const auto v = table.find(chain.real);
        if (v == table.end()) {
            break;
        }
        chain.ids.push_back(v->second.first);  // innermost first here
        chain.real = v->second.second;
    }
    std::reverse(chain.ids.begin(), chain.ids.end());
    return chain;
}

std::vector<RdmaPort> list_rdma_ports(const fs::path& sysfs_root) {
    std::vector<RdmaPort> result;
    const fs::path class_dir = sysfs_root / "class" / "infiniband";
    for (const auto& device : list_dir(class_dir)) {
        const fs::path dev_dir = class_dir / device;
        // The PCI function's netdevs, with the port each belongs to (dev_port
        // is 0-based; mlx4 puts two ports on one function this way).
        std::vector<std::pair<std::string, std::uint8_t>> function_netdevs;
        for (const auto& netdev : list_dir(dev_dir / "device" / "net")) {
            std::uint8_t port = 1;
            if (const auto dev_port =
                    read_sysfs_file(dev_dir / "device" / "net" / netdev / "dev_port")) {
                if (const auto n = parse_unsigned(*dev_port); n && *n < 255) {
                    port = static_cast<std::uint8_t>(*n + 1);
                }
            }
            function_netdevs.emplace_back(netdev, port);
        }
        for (const auto port : list_ports(dev_dir / "ports")) {
            const fs::path port_dir = dev_dir / "ports" / std::to_string(port);
            RdmaPort entry;
            entry.device = device;
            entry.port = port;
            if (const auto state = read_sysfs_file(port_dir / "state")) {
                entry.state = strip_enum_prefix(*state);
            }
            if (const auto link_layer = read_sysfs_file(port_dir / "link_layer")) {
                entry.link_layer = *link_layer;
            }
            // ndevs/0 is the netdev of the default GID, the later entries those
            // of the other GIDs: VLAN netdevs appear only there (verbs-mlx5-2.md
            // N1). Reading an unused GID entry fails with EINVAL; none readable
            // lands in the fallback.
            std::vector<std::pair<unsigned, std::string>> gids;
            for (const auto& name : list_dir(port_dir / "gid_attrs" / "ndevs")) {
                if (const auto index = parse_unsigned(name)) {
                    if (const auto ndev = read_sysfs_file(port_dir / "gid_attrs" / "ndevs" / name);
                        ndev && !ndev->empty()) {
                        gids.emplace_back(*index, *ndev);
                    }
                }
            }
            std::sort(gids.begin(), gids.end());
            for (const auto& [index, ndev] : gids) {
                add_unique(entry.netdevs, ndev);
            }
            if (entry.netdevs.empty()) {
                for (const auto& [netdev, netdev_port] : function_netdevs) {
                    if (netdev_port == port) {
                        add_unique(entry.netdevs, netdev);
                    }
                }
            }
            result.push_back(std::move(entry));
        }
    }
    return result;
}

std::vector<NetInterface> list_interfaces(const std::vector<InterfaceAddress>& addresses,
                                          const fs::path& sysfs_root) {
    struct Seen {
        std::vector<std::uint32_t> ipv4;
        unsigned flags = 0;
        bool have_flags = false;
    };
    std::map<std::string, Seen> seen;
    for (const auto& entry : addresses) {
        auto& s = seen[entry.name];
        s.flags |= entry.flags;
        s.have_flags = true;
        if (entry.ipv4 && std::find(s.ipv4.begin(), s.ipv4.end(), *entry.ipv4) == s.ipv4.end()) {
            s.ipv4.push_back(*entry.ipv4);
        }
    }
    const fs::path net_dir = sysfs_root / "class" / "net";
    for (const auto& name : list_dir(net_dir)) {
        if (name != "bonding_masters") {  // a file, not an interface
            seen.try_emplace(name);
        }
    }
    const auto ports = list_rdma_ports(sysfs_root);
    auto vlans = read_vlan_table(sysfs_root.parent_path() / "proc" / "net" / "vlan" / "config");
    if (sysfs_root == kSysfsRoot) {
        // The running host: rtnetlink, which needs no privilege (the table
        // above is root's only, verbs-mlx5-3.md R2). Its answer wins.
        std::string why;
        if (const auto links = dump_links(why)) {
            for (auto& [name, vlan] : vlan_table_of(*links)) {
                vlans[name] = std::move(vlan);
            }
        }
    }

    std::vector<NetInterface> result;
    for (const auto& [name, s] : seen) {
        NetInterface nif;
        nif.name = name;
        nif.ipv4 = s.ipv4;
        const bool flags_up =
            s.have_flags && (s.flags & IFF_UP) != 0 && (s.flags & IFF_RUNNING) != 0;
        nif.up = flags_up || read_sysfs_file(net_dir / name / "operstate").value_or("") == "up";
        if (const auto mtu = read_sysfs_file(net_dir / name / "mtu")) {
            nif.mtu = parse_unsigned(*mtu).value_or(0);
        }
        const VlanChain chain = vlan_chain(vlans, name);
        const std::string& real = chain.real;
        nif.vlan_ids = chain.ids;
        if (!nif.vlan_ids.empty()) {
            nif.vlan_real_device = real;
        } else {
            // net/8021q/vlan_dev.c vlan_type: DEVTYPE=vlan in the uevent.
            const auto uevent = read_sysfs_file(net_dir / name / "uevent");
            nif.vlan_id_unknown = uevent && uevent->find("DEVTYPE=vlan") != std::string::npos;
        }
        const auto drives = [](const RdmaPort& port, const std::string& netdev) {
            return std::find(port.netdevs.begin(), port.netdevs.end(), netdev) !=
                   port.netdevs.end();
        };
        for (const auto& port : ports) {
            if (drives(port, name) || (!nif.vlan_ids.empty() && drives(port, real))) {
                nif.rdma_device = port.device;
                nif.rdma_port = port.port;
                break;
            }
        }
        result.push_back(std::move(nif));
    }
    return result;
}

NetInterface resolve_interface(std::string_view text,
                               const std::vector<InterfaceAddress>& addresses,
                               const fs::path& sysfs_root) {
    if (text.empty()) {
        throw std::runtime_error(
            "no interface given: -i takes a netdev name or IPv4 address (see ip -4 addr)");
    }
    auto interfaces = list_interfaces(addresses, sysfs_root);
    auto it = interfaces.end();
    if (const auto ip = parse_ipv4(text)) {
        it = std::find_if(interfaces.begin(), interfaces.end(), [&](const NetInterface& nif) {
            return std::find(nif.ipv4.begin(), nif.ipv4.end(), *ip) != nif.ipv4.end();
        });
        if (it == interfaces.end()) {
            throw std::runtime_error(
                fmt::format("no interface has address {} (see ip -4 addr)", format_ipv4(*ip)));
        }
    } else {
        it = std::find_if(interfaces.begin(), interfaces.end(),
                          [&](const NetInterface& nif) { return nif.name == text; });
        if (it == interfaces.end()) {
            throw std::runtime_error(fmt::format("no interface named {} (see ip link)", text));
        }
    }
    if (!it->up) {
        throw std::runtime_error(
            fmt::format("interface {0} is down (ip link set {0} up)", it->name));
    }
    if (it->vlan_id_unknown) {
        throw std::runtime_error(fmt::format(
            "interface {0} is a VLAN netdev but its VLAN id could not be read (rtnetlink gave "
            "none and /proc/net/vlan/config is not readable): without it the rules cannot match "
            "the VLAN; check `ip -d link show {0}`, or run the capture as root",
            it->name));
    }
    if (it->ipv4.empty()) {
        throw std::runtime_error(
            fmt::format("interface {0} has no IPv4 address; multicast joins need one (ip addr add "
                        "ADDRESS/PREFIX dev {0})",
                        it->name));
    }
    return std::move(*it);
}

NetInterface resolve_interface(std::string_view text) {
    return resolve_interface(text, read_interface_addresses(), kSysfsRoot);
}

HostDescription describe_host(const std::vector<InterfaceAddress>& addresses,
                              const fs::path& sysfs_root) {
    HostDescription host;
    host.ports = list_rdma_ports(sysfs_root);
    host.interfaces = list_interfaces(addresses, sysfs_root);
    return host;
}

HostDescription describe_host() {
    return describe_host(read_interface_addresses(), kSysfsRoot);
}

namespace {

std::string describe_netdev(const NetInterface& nif) {
    std::string ips;
    for (const auto ip : nif.ipv4) {
        ips += ips.empty() ? "" : ", ";
        ips += format_ipv4(ip);
    }
    const std::string vlan =
        nif.vlan_ids.empty()
            ? std::string()
            : fmt::format("  VLAN {} on {}", format_vlan_ids(nif.vlan_ids), nif.vlan_real_device);
    return fmt::format("{}  {}  MTU {}  IPv4 {}{}", nif.name, nif.up ? "up" : "down",
                       nif.mtu == 0 ? std::string("?") : std::to_string(nif.mtu),
                       ips.empty() ? std::string("none") : ips, vlan);
}

}  // namespace

std::string format_devices(const HostDescription& host, const DeviceLinesHook& extra_lines) {
    std::string out;
    const auto find_interface = [&](const std::string& name) -> const NetInterface* {
        for (const auto& nif : host.interfaces) {
            if (nif.name == name) {
                return &nif;
            }
        }
        return nullptr;
    };
    std::set<std::string> driven;  // netdevs some RDMA port drives
    for (std::size_t i = 0; i < host.ports.size();) {
        const std::string& device = host.ports[i].device;
        out += device + "\n";
        for (; i < host.ports.size() && host.ports[i].device == device; ++i) {
            const RdmaPort& port = host.ports[i];
            out += fmt::format(
                "  port {}  {}  {}\n", port.port,
                port.state.empty() ? std::string("state ?") : port.state,
                port.link_layer.empty() ? std::string("link layer ?") : port.link_layer);
            if (port.netdevs.empty()) {
                out += "    no netdev\n";
            }
            for (const auto& netdev : port.netdevs) {
                driven.insert(netdev);
                if (const NetInterface* nif = find_interface(netdev)) {
                    out += "    netdev " + describe_netdev(*nif) + "\n";
                } else {
                    out += fmt::format("    netdev {} (not in this network namespace)\n", netdev);
                }
            }
            // VLAN netdevs on the port that no GID lists (no IP address yet).
            for (const auto& nif : host.interfaces) {
                if (!nif.vlan_ids.empty() && nif.rdma_device == port.device &&
                    nif.rdma_port == port.port && driven.insert(nif.name).second) {
                    out += "    netdev " + describe_netdev(nif) + "\n";
                }
            }
        }
        if (extra_lines) {
            for (const auto& line : extra_lines(device)) {
                out += "  " + line + "\n";
            }
        }
    }
    if (host.ports.empty()) {
        out +=
            "no RDMA devices (nothing under /sys/class/infiniband); capture with --source pcap\n";
    }
    bool header = false;
    for (const auto& nif : host.interfaces) {
        if (driven.count(nif.name) != 0 || !nif.rdma_device.empty()) {
            continue;
        }
        if (!header) {
            out += "interfaces without RDMA (--source pcap)\n";
            header = true;
        }
        out += "  " + describe_netdev(nif) + "\n";
    }
    return out;
}

}  // namespace ibvcap
