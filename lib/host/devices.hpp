// What RDMA devices and network interfaces this host has: RDMA ports from
// sysfs (class/infiniband), netdevs from sysfs (class/net) and getifaddrs, and
// the mapping between them. The sysfs root is a parameter so tests can point
// it at a fake tree; the getifaddrs view is a plain list for the same reason.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ibvcap {

inline const std::filesystem::path kSysfsRoot{"/sys"};

// The contents of a small sysfs attribute file with surrounding whitespace
// removed; nullopt when it cannot be opened or read (missing, a directory, an
// attribute the driver refuses with EINVAL/EOPNOTSUPP, ...).
std::optional<std::string> read_sysfs_file(const std::filesystem::path& path);

struct NetInterface {
    std::string name;
    std::vector<std::uint32_t> ipv4;  // host byte order, in getifaddrs order
    bool up = false;                  // IFF_UP && IFF_RUNNING, or operstate "up"
    unsigned mtu = 0;                 // 0 when sysfs does not say
    std::string rdma_device;          // empty: no RDMA device drives this netdev
    std::uint8_t rdma_port = 0;       // 1-based; 0 when rdma_device is empty
    // A VLAN netdev (QinQ: stacked ones): its tags on the wire, outermost
    // first, and the netdev that carries them untagged (its real device).
    std::vector<std::uint16_t> vlan_ids;
    std::string vlan_real_device;
    // A VLAN netdev (sysfs uevent DEVTYPE=vlan) whose id neither rtnetlink
    // nor the VLAN table gave: a capture on it is refused (resolve_interface),
    // never silently untagged (verbs-mlx5-3.md R2).
    bool vlan_id_unknown = false;
};

struct RdmaPort {
    std::string device;  // "mlx5_0"
    std::uint8_t port = 0;
    std::string state;       // "ACTIVE", "DOWN", ... ("" when unreadable)
    std::string link_layer;  // "Ethernet", "InfiniBand" ("" when unreadable)
    std::vector<std::string> netdevs;
};

// One getifaddrs entry, reduced to what ibvcap needs. getifaddrs reports every
// interface at least once (its AF_PACKET entry, ipv4 = nullopt), and once more
// per IPv4 address.
struct InterfaceAddress {
    std::string name;
    unsigned flags = 0;                 // IFF_* as getifaddrs reports them
    std::optional<std::uint32_t> ipv4;  // host byte order
};

// The running host's getifaddrs. Throws std::system_error when it fails.
std::vector<InterfaceAddress> read_interface_addresses();

// Every port of every RDMA device under <sysfs_root>/class/infiniband, sorted by
// device then port. Netdevs of a port come from every ports/<N>/gid_attrs/ndevs/<i>
// (mlx5 exposes them for RoCE: the GIDs of the port's netdev and of the VLAN
// netdevs on it, drivers/infiniband/core/roce_gid_mgmt.c; an unused entry reads
// EINVAL), index order, each once; when none is readable, from the PCI
// function's device/net/<netdev> entries, each placed on port dev_port + 1
// (device/net/<netdev>/dev_port), or port 1 when dev_port is unreadable.
// A missing class/infiniband is not an error: the result is empty.
std::vector<RdmaPort> list_rdma_ports(const std::filesystem::path& sysfs_root = kSysfsRoot);

// Every network interface named by `addresses` or present under
// <sysfs_root>/class/net, sorted by name, with IPv4 addresses, link state, MTU
// and the RDMA port that drives it (if any). A VLAN netdev is driven by the
// port of its real device: its tags and real device come from rtnetlink on
// the running host (lib/host/vlan_links.hpp: any user may read them), and
// from the kernel's VLAN table, <sysfs_root>/../proc/net/vlan/config
// (net/8021q/vlanproc.c vlan_seq_show: "NAME | VID | REAL_DEVICE" per VLAN,
// the real device of a stacked VLAN being the VLAN beneath it; mode 0600, so
// root's only), where rtnetlink did not say, and always for a fake tree
// (sys/ and proc/ side by side).
std::vector<NetInterface> list_interfaces(const std::vector<InterfaceAddress>& addresses,
                                          const std::filesystem::path& sysfs_root = kSysfsRoot);

// The kernel's VLAN table (<procfs>/net/vlan/config): VLAN netdev → (its
// VLAN id, its real device); empty when the file is absent (no VLANs, or no
// 802.1Q in the kernel).
using VlanTable = std::map<std::string, std::pair<std::uint16_t, std::string>>;
VlanTable read_vlan_table(const std::filesystem::path& config);
// A netdev's VLAN tags, outermost first, down to the netdev that carries them
// untagged (`real`: the netdev itself when it is no VLAN). Bounded: the table
// comes from outside.
struct VlanChain {
    std::vector<std::uint16_t> ids;
    std::string real;
};
VlanChain vlan_chain(const VlanTable& table, const std::string& netdev);
// VLAN ids as ibvcap writes them everywhere: "100", stacked "100.300".
std::string format_vlan_ids(const std::vector<std::uint16_t>& ids);

// `-i`: a netdev name or one of the host's IPv4 addresses → the interface.
// Throws std::runtime_error with a one-line message naming the fix when there
// is no such interface or address, the interface is down, it has no IPv4
// address (multicast joins need one), or it is a VLAN whose id is unknown.
NetInterface resolve_interface(std::string_view text,
                               const std::vector<InterfaceAddress>& addresses,
                               const std::filesystem::path& sysfs_root = kSysfsRoot);
// The same on the running host (getifaddrs, /sys).
NetInterface resolve_interface(std::string_view text);

struct HostDescription {
    std::vector<RdmaPort> ports;
    std::vector<NetInterface> interfaces;
};
HostDescription describe_host(const std::vector<InterfaceAddress>& addresses,
                              const std::filesystem::path& sysfs_root = kSysfsRoot);
HostDescription describe_host();  // the running host

// Extra lines for one RDMA device (capabilities from the verbs layer, or an
// error opening it); printed indented under the device's ports.
using DeviceLinesHook = std::function<std::vector<std::string>(const std::string& device)>;

// The text of `ibvcap devices`: one block per RDMA device (its ports with
// state, link layer, netdev, IPv4 and MTU, then the hook's lines), then the
// interfaces no RDMA device drives (usable with --source pcap). Ends in '\n'.
std::string format_devices(const HostDescription& host, const DeviceLinesHook& extra_lines = {});

}  // namespace ibvcap
