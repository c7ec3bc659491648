// Host-facing modules: RDMA devices and netdevs from sysfs (lib/host/devices.hpp),
// NIC drop counters (lib/host/nic_counters.hpp) and IGMP membership (lib/sources/igmp.hpp).
// sysfs is faked in a temporary tree; the membership tests join groups on the
// loopback interface, which sends nothing off the machine.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "fake_tree.hpp"
#include "frames.hpp"
#include "lib/core/netaddr.hpp"
#include "lib/host/devices.hpp"
#include "lib/host/ethtool_stats.hpp"
#include "lib/host/nic_counters.hpp"
#include "lib/sources/igmp.hpp"

namespace ibvcap {
namespace {

namespace fs = std::filesystem;

// A fake sysfs root in a fresh directory under /tmp, removed afterwards.
class FakeSysfs : public test::FakeTree {
  public:
    FakeSysfs() : FakeTree("test_host") {}

    // One RDMA port, as drivers/infiniband/core/sysfs.c writes it: state_show
    // "%d: %s\n" (ib_port_state_to_str: "4: ACTIVE"), phys_state_show
    // "%u: %s\n" ("5: LinkUp"), link_layer_show "InfiniBand" or "Ethernet".
    // (gid_attrs/ndevs/<i>: print_ndev, the netdev's name.)
    void port(const std::string& dev, int port, const std::string& state,
              const std::string& link_layer) const {
        const fs::path dir = fs::path("class/infiniband") / dev / "ports" / std::to_string(port);
        write(dir / "state", state);
        write(dir / "link_layer", link_layer);
        write(dir / "phys_state", "5: LinkUp");
    }
    // One netdev under class/net (net/core/net-sysfs.c: mtu and dev_port
    // fmt_dec, operstate one of operstates[]: "up", "down", "unknown", ...).
    void netdev(const std::string& name, unsigned mtu, const std::string& operstate) const {
        write(fs::path("class/net") / name / "mtu", std::to_string(mtu));
        write(fs::path("class/net") / name / "operstate", operstate);
    }
};

std::uint32_t ip(const char* text) {
    const auto v = parse_ipv4(text);
    if (!v) {
        throw std::invalid_argument(text);
    }
    return *v;
}

constexpr unsigned kUpRunning = IFF_UP | IFF_RUNNING | IFF_MULTICAST;

// The message of the std::runtime_error that `f` throws ("" if none).
template <typename F>
std::string runtime_error_of(F&& f) {
    try {
        f();
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "";
}

// A two-port mlx5 (ndevs present), a device with device/net only (two netdevs
// telling their port by dev_port), and a soft-RoCE-like device whose netdev has
// no dev_port.
void build_host(const FakeSysfs& fs) {
    fs.port("mlx5_0", 1, "4: ACTIVE", "Ethernet");
    fs.port("mlx5_0", 2, "1: DOWN", "Ethernet");
    fs.write("class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0", "enp1s0f0np0");
    fs.write("class/infiniband/mlx5_0/ports/2/gid_attrs/ndevs/0", "enp1s0f1np1");
    fs.mkdir("class/infiniband/mlx5_0/device/net/enp1s0f0np0");  // the PCI function's netdev

    fs.port("mlx4_0", 1, "4: ACTIVE", "InfiniBand");
    fs.port("mlx4_0", 2, "4: ACTIVE", "Ethernet");
    fs.write("class/infiniband/mlx4_0/device/net/ib0/dev_port", "0");
    fs.write("class/infiniband/mlx4_0/device/net/eth2/dev_port", "1");

    fs.port("rxe0", 1, "4: ACTIVE", "Ethernet");
    fs.mkdir("class/infiniband/rxe0/device/net/eth5");

    fs.netdev("enp1s0f0np0", 9000, "up");
    fs.netdev("enp1s0f1np1", 9000, "down");
    fs.netdev("ib0", 4092, "up");
    fs.netdev("eth2", 1500, "up");
    fs.netdev("eth5", 1500, "up");
    fs.netdev("eth9", 1500, "up");
    fs.netdev("lo", 65536, "unknown");
    fs.write("class/net/bonding_masters", "");
}

std::vector<InterfaceAddress> host_addresses() {
    return {
        {"lo", IFF_UP | IFF_RUNNING | IFF_LOOPBACK, std::nullopt},
        {"lo", IFF_UP | IFF_RUNNING | IFF_LOOPBACK, ip("127.0.0.1")},
        {"enp1s0f0np0", kUpRunning, std::nullopt},
        {"enp1s0f0np0", kUpRunning, ip("10.0.0.1")},
        {"enp1s0f0np0", kUpRunning, ip("10.0.1.1")},
        {"enp1s0f1np1", IFF_UP | IFF_MULTICAST, ip("10.0.2.1")},  // up, no carrier
        {"ib0", kUpRunning, std::nullopt},                        // no IPv4
        {"eth2", kUpRunning, ip("192.168.7.2")},
        // eth5 and eth9: only in sysfs (operstate decides "up"); eth5 has no
        // address, eth9 is not listed at all.
        {"wlan0", 0, ip("192.168.9.9")},  // down, and absent from sysfs
    };
}

// ---------------------------------------------------------------------------
// RDMA ports

TEST(RdmaPorts, Mlx5TwoPortsFromNdevs) {
    FakeSysfs fs;
    build_host(fs);
    const auto ports = list_rdma_ports(fs.root());
    ASSERT_EQ(ports.size(), 5u);

    // Sorted by device name: mlx4_0, mlx5_0, rxe0.
    const RdmaPort& p1 = ports[2];
    EXPECT_EQ(p1.device, "mlx5_0");
    EXPECT_EQ(p1.port, 1);
    EXPECT_EQ(p1.state, "ACTIVE");
    EXPECT_EQ(p1.link_layer, "Ethernet");
    EXPECT_EQ(p1.netdevs, std::vector<std::string>{"enp1s0f0np0"});

    const RdmaPort& p2 = ports[3];
    EXPECT_EQ(p2.device, "mlx5_0");
    EXPECT_EQ(p2.port, 2);
    EXPECT_EQ(p2.state, "DOWN");
    EXPECT_EQ(p2.link_layer, "Ethernet");
    // From ndevs, although device/net only names the first port's netdev.
    EXPECT_EQ(p2.netdevs, std::vector<std::string>{"enp1s0f1np1"});
}

TEST(RdmaPorts, DeviceNetFallbackUsesDevPort) {
    FakeSysfs fs;
    build_host(fs);
    const auto ports = list_rdma_ports(fs.root());
    ASSERT_EQ(ports.size(), 5u);
    EXPECT_EQ(ports[0].device, "mlx4_0");
    EXPECT_EQ(ports[0].port, 1);
    EXPECT_EQ(ports[0].link_layer, "InfiniBand");
    EXPECT_EQ(ports[0].netdevs, std::vector<std::string>{"ib0"});
    EXPECT_EQ(ports[1].device, "mlx4_0");
    EXPECT_EQ(ports[1].port, 2);
    EXPECT_EQ(ports[1].link_layer, "Ethernet");
    EXPECT_EQ(ports[1].netdevs, std::vector<std::string>{"eth2"});
    // No dev_port: port 1.
    EXPECT_EQ(ports[4].device, "rxe0");
    EXPECT_EQ(ports[4].port, 1);
    EXPECT_EQ(ports[4].state, "ACTIVE");
    EXPECT_EQ(ports[4].netdevs, std::vector<std::string>{"eth5"});
}

// A ConnectX port carrying VLANs, in the shape a real host has them: the
// RoCE GID table lists the port's netdev for its default GIDs and each VLAN
// netdev with an address for its own (drivers/infiniband/core/
// roce_gid_mgmt.c), unused entries read EINVAL (here: a directory), and the
// kernel's VLAN table names each VLAN's id and real device
// (net/8021q/vlanproc.c: two header lines, then "%-15s| %d  | %s").
void build_vlan_host(const test::FakeTree& t) {
    const std::string port = "sys/class/infiniband/mlx5_0/ports/1/";
    t.write(port + "state", "4: ACTIVE");
    t.write(port + "link_layer", "Ethernet");
    t.write(port + "gid_attrs/ndevs/0", "ens1f0np0");
    t.write(port + "gid_attrs/ndevs/1", "ens1f0np0");
    t.write(port + "gid_attrs/ndevs/2", "ens1f0np0.100");
    t.write(port + "gid_attrs/ndevs/3", "ens1f0np0.100");
    t.mkdir(port + "gid_attrs/ndevs/4");  // unused: EINVAL
    t.mkdir(port + "gid_attrs/ndevs/10");
    t.write(port + "gid_attrs/ndevs/11", "ens1f0np0.100");
    t.mkdir("sys/class/infiniband/mlx5_0/device/net/ens1f0np0");
    for (const char* name :
         {"ens1f0np0", "ens1f0np0.100", "ens1f0np0.200", "ens1f0np0.100.300", "eno1", "eno1.5"}) {
        t.write(std::string("sys/class/net/") + name + "/mtu", "9000");
        t.write(std::string("sys/class/net/") + name + "/operstate", "up");
    }
    t.write("proc/net/vlan/config",
            "VLAN Dev name\t | VLAN ID\n"
            "Name-Type: VLAN_NAME_TYPE_RAW_PLUS_VID_NO_PAD\n"
            "ens1f0np0.100  | 100  | ens1f0np0\n"
            "ens1f0np0.200  | 200  | ens1f0np0\n"
            "ens1f0np0.100.300| 300  | ens1f0np0.100\n"
            "eno1.5         | 5  | eno1\n"
            "broken         | 9999  | eno1\n"
            "garbage line");
    // As the kernel makes it (net/8021q/vlanproc.c): root's only.
    std::filesystem::permissions(
        t.root() / "proc/net/vlan/config",
        std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

std::vector<InterfaceAddress> vlan_host_addresses() {
    return {{"ens1f0np0", kUpRunning, ip("10.1.0.1")},
            {"ens1f0np0.100", kUpRunning, ip("10.100.0.1")},
            {"ens1f0np0.200", kUpRunning, ip("10.200.0.1")},  // no GID yet
            {"ens1f0np0.100.300", kUpRunning, ip("10.30.0.1")},
            {"eno1.5", kUpRunning, ip("192.168.5.1")}};
}

// verbs-mlx5-2.md N1: a VLAN netdev on an mlx5 port maps to that device and
// port (through the GID table, or its real device), with its tags.
TEST(RdmaPorts, VlanNetdevsMapToTheirPort) {
    test::FakeTree t("test_host_vlan");
    build_vlan_host(t);
    const fs::path sys = t.root() / "sys";
    const auto ports = list_rdma_ports(sys);
    ASSERT_EQ(ports.size(), 1u);
    EXPECT_EQ(ports[0].netdevs, (std::vector<std::string>{"ens1f0np0", "ens1f0np0.100"}));

    const auto addresses = vlan_host_addresses();
    const NetInterface v100 = resolve_interface("ens1f0np0.100", addresses, sys);
    EXPECT_EQ(v100.rdma_device, "mlx5_0");
    EXPECT_EQ(v100.rdma_port, 1);
    EXPECT_EQ(v100.vlan_ids, (std::vector<std::uint16_t>{100}));
    EXPECT_EQ(v100.vlan_real_device, "ens1f0np0");
    // No GID lists it (as right after `ip link add`): its real device does.
    const NetInterface v200 = resolve_interface("10.200.0.1", addresses, sys);
    EXPECT_EQ(v200.name, "ens1f0np0.200");
    EXPECT_EQ(v200.rdma_device, "mlx5_0");
    EXPECT_EQ(v200.vlan_ids, (std::vector<std::uint16_t>{200}));
    // QinQ: both tags, outermost first.
    const NetInterface qinq = resolve_interface("ens1f0np0.100.300", addresses, sys);
    EXPECT_EQ(qinq.rdma_device, "mlx5_0");
    EXPECT_EQ(qinq.vlan_ids, (std::vector<std::uint16_t>{100, 300}));
    EXPECT_EQ(qinq.vlan_real_device, "ens1f0np0");
    // The parent is untagged; a VLAN on a NIC without RDMA stays without.
    const NetInterface parent = resolve_interface("ens1f0np0", addresses, sys);
    EXPECT_TRUE(parent.vlan_ids.empty());
    EXPECT_EQ(parent.rdma_device, "mlx5_0");
    const NetInterface other = resolve_interface("eno1.5", addresses, sys);
    EXPECT_TRUE(other.rdma_device.empty());
    EXPECT_EQ(other.vlan_ids, (std::vector<std::uint16_t>{5}));

    // `ibvcap devices`: every VLAN netdev under its port, with its tags.
    const std::string text = format_devices(describe_host(addresses, sys));
    EXPECT_NE(text.find("    netdev ens1f0np0.100  up  MTU 9000  IPv4 10.100.0.1  VLAN 100 on "
                        "ens1f0np0\n"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("    netdev ens1f0np0.200  up  MTU 9000  IPv4 10.200.0.1  VLAN 200 on "
                        "ens1f0np0\n"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("    netdev ens1f0np0.100.300  up  MTU 9000  IPv4 10.30.0.1  VLAN "
                        "100.300 on ens1f0np0\n"),
              std::string::npos)
        << text;
    const auto without = text.find("interfaces without RDMA");
    ASSERT_NE(without, std::string::npos) << text;
    EXPECT_NE(text.find("eno1.5", without), std::string::npos) << text;
    EXPECT_EQ(text.find("ens1f0np0.200", without), std::string::npos) << text;
}

TEST(RdmaPorts, UnreadableNdevsFallsBackToDeviceNet) {
    FakeSysfs fs;
    fs.port("mlx5_1", 1, "4: ACTIVE", "Ethernet");
    // Reading a directory fails, as reading an unused GID entry does.
    fs.mkdir("class/infiniband/mlx5_1/ports/1/gid_attrs/ndevs/0");
    fs.mkdir("class/infiniband/mlx5_1/device/net/ens1f1");
    const auto ports = list_rdma_ports(fs.root());
    ASSERT_EQ(ports.size(), 1u);
    EXPECT_EQ(ports[0].netdevs, std::vector<std::string>{"ens1f1"});
}

TEST(RdmaPorts, PortsSortNumericallyAndOddEntriesAreIgnored) {
    FakeSysfs fs;
    for (int p : {10, 2, 1}) {
        fs.port("hca", p, "4: ACTIVE", "InfiniBand");
    }
    fs.mkdir("class/infiniband/hca/ports/0");                           // ports are 1-based
    fs.mkdir("class/infiniband/hca/ports/notes");                       // not a port
    fs.write("class/infiniband/hca/ports/3/link_layer", "InfiniBand");  // no state file
    const auto ports = list_rdma_ports(fs.root());
    ASSERT_EQ(ports.size(), 4u);
    EXPECT_EQ(ports[0].port, 1);
    EXPECT_EQ(ports[1].port, 2);
    EXPECT_EQ(ports[2].port, 3);
    EXPECT_EQ(ports[2].state, "");
    EXPECT_EQ(ports[3].port, 10);
    EXPECT_TRUE(ports[3].netdevs.empty());
}

TEST(RdmaPorts, NoInfinibandClassMeansNoPorts) {
    FakeSysfs fs;
    EXPECT_TRUE(list_rdma_ports(fs.root()).empty());
    EXPECT_TRUE(list_rdma_ports(fs.root() / "does-not-exist").empty());
}

// ---------------------------------------------------------------------------
// Interfaces

const NetInterface* find(const std::vector<NetInterface>& list, const std::string& name) {
    const auto it = std::find_if(list.begin(), list.end(),
                                 [&](const NetInterface& n) { return n.name == name; });
    return it == list.end() ? nullptr : &*it;
}

TEST(Interfaces, MergesAddressesAndSysfs) {
    FakeSysfs fs;
    build_host(fs);
    const auto list = list_interfaces(host_addresses(), fs.root());

    std::vector<std::string> names;
    for (const auto& n : list) {
        names.push_back(n.name);
    }
    EXPECT_EQ(names, (std::vector<std::string>{"enp1s0f0np0", "enp1s0f1np1", "eth2", "eth5", "eth9",
                                               "ib0", "lo", "wlan0"}));

    const NetInterface* a = find(list, "enp1s0f0np0");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->ipv4, (std::vector<std::uint32_t>{ip("10.0.0.1"), ip("10.0.1.1")}));
    EXPECT_TRUE(a->up);
    EXPECT_EQ(a->mtu, 9000u);
    EXPECT_EQ(a->rdma_device, "mlx5_0");
    EXPECT_EQ(a->rdma_port, 1);

    const NetInterface* b = find(list, "enp1s0f1np1");
    ASSERT_NE(b, nullptr);
    EXPECT_FALSE(b->up);  // IFF_UP without IFF_RUNNING, operstate down
    EXPECT_EQ(b->rdma_device, "mlx5_0");
    EXPECT_EQ(b->rdma_port, 2);

    const NetInterface* lo = find(list, "lo");
    ASSERT_NE(lo, nullptr);
    EXPECT_TRUE(lo->up);  // operstate "unknown", but IFF_UP | IFF_RUNNING
    EXPECT_EQ(lo->mtu, 65536u);
    EXPECT_EQ(lo->ipv4, std::vector<std::uint32_t>{ip("127.0.0.1")});
    EXPECT_EQ(lo->rdma_device, "");
    EXPECT_EQ(lo->rdma_port, 0);

    const NetInterface* eth5 = find(list, "eth5");
    ASSERT_NE(eth5, nullptr);
    EXPECT_TRUE(eth5->up);  // sysfs only: operstate "up"
    EXPECT_TRUE(eth5->ipv4.empty());
    EXPECT_EQ(eth5->rdma_device, "rxe0");
    EXPECT_EQ(eth5->rdma_port, 1);

    const NetInterface* ib0 = find(list, "ib0");
    ASSERT_NE(ib0, nullptr);
    EXPECT_EQ(ib0->rdma_device, "mlx4_0");
    EXPECT_EQ(ib0->rdma_port, 1);
    ASSERT_NE(find(list, "eth2"), nullptr);
    EXPECT_EQ(find(list, "eth2")->rdma_port, 2);

    const NetInterface* wlan = find(list, "wlan0");
    ASSERT_NE(wlan, nullptr);
    EXPECT_FALSE(wlan->up);
    EXPECT_EQ(wlan->mtu, 0u);  // not in sysfs
}

TEST(ResolveInterface, ByName) {
    FakeSysfs fs;
    build_host(fs);
    const NetInterface nif = resolve_interface("enp1s0f0np0", host_addresses(), fs.root());
    EXPECT_EQ(nif.name, "enp1s0f0np0");
    EXPECT_EQ(nif.ipv4.front(), ip("10.0.0.1"));
    EXPECT_EQ(nif.rdma_device, "mlx5_0");
    EXPECT_EQ(nif.rdma_port, 1);
    EXPECT_EQ(nif.mtu, 9000u);
}

TEST(ResolveInterface, ByAddress) {
    FakeSysfs fs;
    build_host(fs);
    // The second address of an interface finds it too.
    const NetInterface nif = resolve_interface("10.0.1.1", host_addresses(), fs.root());
    EXPECT_EQ(nif.name, "enp1s0f0np0");
    EXPECT_EQ(resolve_interface("192.168.7.2", host_addresses(), fs.root()).name, "eth2");
}

TEST(ResolveInterface, ErrorMessagesNameTheFix) {
    FakeSysfs fs;
    build_host(fs);
    const auto addrs = host_addresses();
    const auto err = [&](const char* text) {
        return runtime_error_of([&] { (void)resolve_interface(text, addrs, fs.root()); });
    };
    EXPECT_EQ(err("eth7"), "no interface named eth7 (see ip link)");
    EXPECT_EQ(err("10.9.9.9"), "no interface has address 10.9.9.9 (see ip -4 addr)");
    EXPECT_EQ(err("ib0"),
              "interface ib0 has no IPv4 address; multicast joins need one (ip addr add "
              "ADDRESS/PREFIX dev ib0)");
    EXPECT_EQ(err("enp1s0f1np1"), "interface enp1s0f1np1 is down (ip link set enp1s0f1np1 up)");
    // By address, the interface's own problem is reported under its name.
    EXPECT_EQ(err("10.0.2.1"), "interface enp1s0f1np1 is down (ip link set enp1s0f1np1 up)");
    EXPECT_EQ(err("wlan0"), "interface wlan0 is down (ip link set wlan0 up)");
    EXPECT_EQ(err("eth9"),
              "interface eth9 has no IPv4 address; multicast joins need one (ip addr add "
              "ADDRESS/PREFIX dev eth9)");
    EXPECT_NE(err("").find("no interface given"), std::string::npos);
    // "bonding_masters" is a file in class/net, not an interface.
    EXPECT_EQ(err("bonding_masters"), "no interface named bonding_masters (see ip link)");
    // A message is one line.
    for (const char* text : {"eth7", "10.9.9.9", "ib0", "enp1s0f1np1", ""}) {
        EXPECT_EQ(err(text).find('\n'), std::string::npos) << text;
    }
}

TEST(FormatDevices, OneBlockPerDeviceWithExtraLines) {
    FakeSysfs fs;
    build_host(fs);
    const HostDescription host = describe_host(host_addresses(), fs.root());
    EXPECT_EQ(host.ports.size(), 5u);
    const std::string text = format_devices(host, [](const std::string& device) {
        return std::vector<std::string>{"max_qp_wr " +
                                        std::string(device == "mlx5_0" ? "32768" : "16351")};
    });
    const std::string mlx5_block =
        "mlx5_0\n"
        "  port 1  ACTIVE  Ethernet\n"
        "    netdev enp1s0f0np0  up  MTU 9000  IPv4 10.0.0.1, 10.0.1.1\n"
        "  port 2  DOWN  Ethernet\n"
        "    netdev enp1s0f1np1  down  MTU 9000  IPv4 10.0.2.1\n"
        "  max_qp_wr 32768\n";
    EXPECT_NE(text.find(mlx5_block), std::string::npos) << text;
    EXPECT_NE(
        text.find(
            "mlx4_0\n  port 1  ACTIVE  InfiniBand\n    netdev ib0  up  MTU 4092  IPv4 none\n"),
        std::string::npos)
        << text;
    // Interfaces no RDMA device drives come last.
    const auto others = text.find("interfaces without RDMA (--source pcap)\n");
    ASSERT_NE(others, std::string::npos) << text;
    EXPECT_NE(text.find("  lo  up  MTU 65536  IPv4 127.0.0.1\n", others), std::string::npos);
    EXPECT_NE(text.find("  wlan0  down  MTU ?  IPv4 192.168.9.9\n", others), std::string::npos);
    EXPECT_EQ(text.find("enp1s0f0np0", others), std::string::npos);
    EXPECT_EQ(text.back(), '\n');
}

TEST(FormatDevices, NoRdmaDevices) {
    FakeSysfs fs;
    fs.netdev("eth0", 1500, "up");
    const std::string text =
        format_devices(describe_host({{"eth0", kUpRunning, ip("172.17.0.2")}}, fs.root()));
    EXPECT_EQ(text,
              "no RDMA devices (nothing under /sys/class/infiniband); capture with --source pcap\n"
              "interfaces without RDMA (--source pcap)\n"
              "  eth0  up  MTU 1500  IPv4 172.17.0.2\n");
}

TEST(RealHost, LoopbackResolvesWithRealGetifaddrs) {
    const auto addrs = read_interface_addresses();
    EXPECT_TRUE(std::any_of(addrs.begin(), addrs.end(),
                            [](const InterfaceAddress& a) { return a.name == "lo"; }));
    const NetInterface lo = resolve_interface("lo");
    EXPECT_EQ(lo.name, "lo");
    EXPECT_TRUE(lo.up);
    EXPECT_NE(std::find(lo.ipv4.begin(), lo.ipv4.end(), ip("127.0.0.1")), lo.ipv4.end());
    EXPECT_GT(lo.mtu, 0u);
    EXPECT_EQ(resolve_interface("127.0.0.1").name, "lo");
    EXPECT_EQ(runtime_error_of([] { (void)resolve_interface("ibvcap-no-such-if"); }),
              "no interface named ibvcap-no-such-if (see ip link)");
}

// ---------------------------------------------------------------------------
// NIC counters

const char* const kHw = "class/infiniband/mlx5_0/ports/1/hw_counters/";
const char* const kNet = "class/net/enp1s0f0np0/statistics/";

void write_counters(const FakeSysfs& fs) {
    fs.write(std::string(kHw) + "out_of_buffer", "5");
    fs.write(std::string(kHw) + "out_of_sequence", "0");
    fs.write(std::string(kHw) + "rx_write_requests", "7");
    fs.write(std::string(kHw) + "lifespan", "10");  // a setting, not a counter
    fs.write(std::string(kNet) + "rx_dropped", "1000");
    fs.write(std::string(kNet) + "rx_missed_errors", "1");
    fs.write(std::string(kNet) + "rx_fifo_errors", "2");
    fs.write(std::string(kNet) + "rx_over_errors", "3");
    fs.write(std::string(kNet) + "rx_crc_errors", "4");
    fs.write(std::string(kNet) + "rx_errors", "18446744073709551000");  // near 2^64
    fs.write(std::string(kNet) + "tx_errors", "9");                     // not read
}

// The counter named `name` (throws, failing the test, when it is not there).
NicCounters::Delta delta_of(const NicCounters& counters, const std::string& name) {
    for (const auto& d : counters.deltas()) {
        if (d.name == name) {
            return d;
        }
    }
    throw std::runtime_error("no counter " + name);
}

bool has_counter(const NicCounters& counters, const std::string& name) {
    const auto deltas = counters.deltas();
    return std::any_of(deltas.begin(), deltas.end(),
                       [&](const NicCounters::Delta& d) { return d.name == name; });
}

// A driver's ethtool statistics, as the test sets them. Like the kernel's
// ETHTOOL_GSTATS (net/ethtool/ioctl.c, ethtool_get_stats), values() answers
// for the set of the moment: a caller that expects another count is told the
// set changed.
class FakeEthtool final : public EthtoolStatsReader {
  public:
    std::vector<std::string> stat_names;
    std::vector<std::uint64_t> stat_values;
    int names_error = 0;
    int values_error = 0;
    int names_calls = 0;
    int values_calls = 0;

    int names(const std::string& /*ifname*/, std::vector<std::string>& out) override {
        ++names_calls;
        if (names_error != 0) {
            return names_error;
        }
        out = stat_names;
        return 0;
    }
    int values(const std::string& /*ifname*/, std::size_t expected,
               std::vector<std::uint64_t>& out) override {
        ++values_calls;
        if (values_error != 0) {
            return values_error;
        }
        if (expected != stat_names.size()) {
            return kSetChanged;
        }
        out = stat_values;
        return 0;
    }
    // Set one value by name.
    void set(const std::string& name, std::uint64_t value) {
        const auto it = std::find(stat_names.begin(), stat_names.end(), name);
        if (it == stat_names.end()) {
            throw std::runtime_error("fake has no " + name);
        }
        stat_values[static_cast<std::size_t>(it - stat_names.begin())] = value;
    }
};

// For the sysfs tests: a netdev the ethtool ioctl does not know.
std::shared_ptr<FakeEthtool> no_ethtool() {
    auto fake = std::make_shared<FakeEthtool>();
    fake->names_error = ENODEV;
    return fake;
}

TEST(NicCounters, ExactDeltasAndDropFlags) {
    FakeSysfs fs;
    write_counters(fs);
    NicCounters counters(fs.root(), "mlx5_0", 1, "enp1s0f0np0", no_ethtool());
    EXPECT_TRUE(counters.deltas().empty());  // nothing read before the start
    counters.snapshot_start();
    EXPECT_TRUE(counters.missing().empty());

    fs.write(std::string(kHw) + "out_of_buffer", "17");
    fs.write(std::string(kHw) + "rx_write_requests", "9");
    fs.write(std::string(kNet) + "rx_dropped", "1500");
    fs.write(std::string(kNet) + "rx_crc_errors", "6");
    fs.write(std::string(kNet) + "rx_errors", "18446744073709551615");
    counters.snapshot();

    const auto deltas = counters.deltas();
    std::vector<std::string> names;
    for (const auto& d : deltas) {
        names.push_back(d.name);
    }
    EXPECT_EQ(names, (std::vector<std::string>{
                         "hw_counters/out_of_buffer", "hw_counters/out_of_sequence",
                         "hw_counters/rx_write_requests", "net/rx_dropped", "net/rx_missed_errors",
                         "net/rx_fifo_errors", "net/rx_over_errors", "net/rx_crc_errors",
                         "net/rx_errors"}));

    const auto oob = delta_of(counters, "hw_counters/out_of_buffer");
    EXPECT_EQ(oob.start, 5u);
    EXPECT_EQ(oob.now, 17u);
    EXPECT_EQ(oob.delta, 12u);
    EXPECT_TRUE(oob.is_drop);

    EXPECT_EQ(delta_of(counters, "hw_counters/rx_write_requests").delta, 2u);
    EXPECT_FALSE(delta_of(counters, "hw_counters/rx_write_requests").is_drop);
    EXPECT_EQ(delta_of(counters, "hw_counters/out_of_sequence").delta, 0u);
    EXPECT_FALSE(delta_of(counters, "hw_counters/out_of_sequence").is_drop);

    const auto dropped = delta_of(counters, "net/rx_dropped");
    EXPECT_EQ(dropped.delta, 500u);
    EXPECT_FALSE(dropped.is_drop);  // not a capture drop, see nic_counters.hpp
    EXPECT_EQ(delta_of(counters, "net/rx_crc_errors").delta, 2u);
    EXPECT_TRUE(delta_of(counters, "net/rx_crc_errors").is_drop);
    EXPECT_TRUE(delta_of(counters, "net/rx_missed_errors").is_drop);
    EXPECT_TRUE(delta_of(counters, "net/rx_fifo_errors").is_drop);
    EXPECT_TRUE(delta_of(counters, "net/rx_over_errors").is_drop);
    EXPECT_EQ(delta_of(counters, "net/rx_missed_errors").delta, 0u);
    const auto errors = delta_of(counters, "net/rx_errors");
    EXPECT_FALSE(errors.is_drop);
    EXPECT_EQ(errors.delta, 615u);  // 64-bit values
    EXPECT_FALSE(has_counter(counters, "hw_counters/lifespan"));

    // Periodic snapshots accumulate.
    fs.write(std::string(kHw) + "out_of_buffer", "20");
    counters.snapshot();
    EXPECT_EQ(delta_of(counters, "hw_counters/out_of_buffer").delta, 15u);
    EXPECT_EQ(delta_of(counters, "hw_counters/out_of_buffer").start, 5u);
    EXPECT_EQ(delta_of(counters, "hw_counters/out_of_buffer").now, 20u);
}

TEST(NicCounters, DecreaseIsAReset) {
    FakeSysfs fs;
    write_counters(fs);
    fs.write(std::string(kHw) + "out_of_buffer", "100");
    NicCounters counters(fs.root(), "mlx5_0", 1, "enp1s0f0np0", no_ethtool());
    counters.snapshot_start();
    fs.write(std::string(kHw) + "out_of_buffer", "30");  // reset, then 30 more
    counters.snapshot();
    const auto d = delta_of(counters, "hw_counters/out_of_buffer");
    EXPECT_EQ(d.start, 100u);
    EXPECT_EQ(d.now, 30u);
    EXPECT_EQ(d.delta, 30u);
    fs.write(std::string(kHw) + "out_of_buffer", "45");  // counted from the reset on
    counters.snapshot();
    EXPECT_EQ(delta_of(counters, "hw_counters/out_of_buffer").delta, 45u);
}

TEST(NicCounters, ADecreaseFromTheTopOfThe32BitRangeIsAWrap) {
    FakeSysfs fs;
    write_counters(fs);
    fs.write(std::string(kHw) + "out_of_buffer", "4294967200");  // 2^32 - 96
    NicCounters counters(fs.root(), "mlx5_0", 1, "enp1s0f0np0", no_ethtool());
    counters.snapshot_start();
    fs.write(std::string(kHw) + "out_of_buffer", "4");  // 96 to the wrap, then 4
    counters.snapshot();
    EXPECT_EQ(delta_of(counters, "hw_counters/out_of_buffer").delta, 100u);
    fs.write(std::string(kHw) + "out_of_buffer", "10");
    counters.snapshot();
    EXPECT_EQ(delta_of(counters, "hw_counters/out_of_buffer").delta, 106u);
}

TEST(NicCounters, UnreadableFilesAreSkippedAndDropsListedMissing) {
    FakeSysfs fs;
    write_counters(fs);
    fs.write(std::string(kHw) + "out_of_buffer", "not a number");
    fs.remove(std::string(kNet) + "rx_fifo_errors");
    fs.remove(std::string(kNet) + "rx_crc_errors");
    fs.mkdir(std::string(kNet) + "rx_crc_errors");  // read() fails with EISDIR
    fs::create_symlink(fs.root() / "nowhere", fs.root() / kNet / "rx_over_errors.tmp");
    fs.remove(std::string(kNet) + "rx_over_errors");
    fs::rename(fs.root() / kNet / "rx_over_errors.tmp", fs.root() / kNet / "rx_over_errors");
    fs.remove(std::string(kNet) + "rx_dropped");  // not a drop: skipped, not missing
    fs.mkdir(std::string(kHw) + "odd_dir");       // not a drop: skipped, not missing

    NicCounters counters(fs.root(), "mlx5_0", 1, "enp1s0f0np0", no_ethtool());
    counters.snapshot_start();
    counters.snapshot();
    EXPECT_EQ(counters.missing(),
              (std::vector<std::string>{"hw_counters/out_of_buffer", "net/rx_crc_errors",
                                        "net/rx_fifo_errors", "net/rx_over_errors"}));
    std::vector<std::string> names;
    for (const auto& d : counters.deltas()) {
        names.push_back(d.name);
    }
    EXPECT_EQ(names, (std::vector<std::string>{"hw_counters/out_of_sequence",
                                               "hw_counters/rx_write_requests",
                                               "net/rx_missed_errors", "net/rx_errors"}));
}

TEST(NicCounters, DropCounterThatVanishesKeepsItsValueAndIsMissing) {
    FakeSysfs fs;
    write_counters(fs);
    NicCounters counters(fs.root(), "mlx5_0", 1, "enp1s0f0np0", no_ethtool());
    counters.snapshot_start();
    fs.write(std::string(kNet) + "rx_missed_errors", "4");
    counters.snapshot();
    fs.remove(std::string(kNet) + "rx_missed_errors");  // the netdev went away
    counters.snapshot();
    EXPECT_EQ(counters.missing(), std::vector<std::string>{"net/rx_missed_errors"});
    const auto d = delta_of(counters, "net/rx_missed_errors");
    EXPECT_EQ(d.now, 4u);
    EXPECT_EQ(d.delta, 3u);
    // A new start forgets it.
    fs.write(std::string(kNet) + "rx_missed_errors", "4");
    counters.snapshot_start();
    EXPECT_TRUE(counters.missing().empty());
}

TEST(NicCounters, NoHwCountersDirectoryOrNetdev) {
    FakeSysfs fs;
    fs.port("mlx5_0", 1, "4: ACTIVE", "InfiniBand");
    NicCounters counters(fs.root(), "mlx5_0", 1, "");  // no netdev: hw_counters only
    counters.snapshot();                               // starts when never started
    EXPECT_TRUE(counters.deltas().empty());
    EXPECT_EQ(counters.missing(), std::vector<std::string>{"hw_counters/out_of_buffer"});
}

TEST(NicCounters, ToSourceCounters) {
    FakeSysfs fs;
    write_counters(fs);
    NicCounters counters(fs.root(), "mlx5_0", 1, "enp1s0f0np0", no_ethtool());
    counters.snapshot_start();
    fs.write(std::string(kHw) + "out_of_buffer", "8");
    fs.write(std::string(kNet) + "rx_dropped", "1001");
    counters.snapshot();
    const auto sc = counters.to_source_counters();
    ASSERT_EQ(sc.size(), counters.deltas().size());
    ASSERT_EQ(sc.size(), 9u);
    EXPECT_EQ(sc[0].name, "hw_counters/out_of_buffer");
    EXPECT_EQ(sc[0].value, 3u);
    EXPECT_TRUE(sc[0].is_drop);
    EXPECT_EQ(sc[3].name, "net/rx_dropped");
    EXPECT_EQ(sc[3].value, 1u);
    EXPECT_FALSE(sc[3].is_drop);
    std::uint64_t drops = 0;
    for (const auto& c : sc) {
        drops += c.is_drop ? c.value : 0;
    }
    EXPECT_EQ(drops, 3u);
    const auto prefixed = counters.to_source_counters("mlx5_0/1/");
    EXPECT_EQ(prefixed[0].name, "mlx5_0/1/hw_counters/out_of_buffer");
}

// ---------------------------------------------------------------------------
// NIC counters: the driver's ethtool statistics (fake reader)

// Some of mlx5's names (en_stats.c), in driver order, with the first values.
std::shared_ptr<FakeEthtool> mlx5_ethtool() {
    auto fake = std::make_shared<FakeEthtool>();
    fake->stat_names = {"rx_packets",          "rx_out_of_buffer",     "rx_packets_phy",
                        "rx_crc_errors_phy",   "rx_discards_phy",      "tx_discards_phy",
                        "rx_prio3_discards",   "rx_prio3_buf_discard", "link_down_events_phy",
                        "rx_oversize_pkts_phy"};
    fake->stat_values = {100, 1, 200, 2, 3, 4, 5, 6, 7, 8};
    return fake;
}

// missing(), the ethtool statistics only (a /nonexistent sysfs root has none
// of the net/ files either).
std::vector<std::string> ethtool_missing(const NicCounters& counters) {
    std::vector<std::string> result;
    for (const auto& name : counters.missing()) {
        if (name.starts_with("ethtool/")) {
            result.push_back(name);
        }
    }
    return result;
}

TEST(NicCountersEthtool, NamesFoundOnceValuesReadEachSnapshot) {
    FakeSysfs fs;
    write_counters(fs);
    auto fake = mlx5_ethtool();
    NicCounters counters(fs.root(), "mlx5_0", 1, "enp1s0f0np0", fake);
    counters.snapshot_start();
    EXPECT_EQ(fake->names_calls, 1);
    EXPECT_EQ(fake->values_calls, 1);
    fake->set("rx_discards_phy", 10);
    fake->set("rx_packets", 150);
    counters.snapshot();
    fake->set("rx_discards_phy", 13);
    fake->set("rx_crc_errors_phy", 5);
    fake->set("link_down_events_phy", 8);
    counters.snapshot();
    EXPECT_EQ(fake->names_calls, 1) << "the names are read once";
    EXPECT_EQ(fake->values_calls, 3);

    EXPECT_FALSE(has_counter(counters, "ethtool/rx_packets")) << "not kept";
    EXPECT_FALSE(has_counter(counters, "ethtool/tx_discards_phy")) << "not kept";
    const auto discards = delta_of(counters, "ethtool/rx_discards_phy");
    EXPECT_EQ(discards.start, 3u);
    EXPECT_EQ(discards.now, 13u);
    EXPECT_EQ(discards.delta, 10u);
    EXPECT_TRUE(discards.is_drop);
    EXPECT_EQ(discards.cause, LossCause::port_discards);
    EXPECT_EQ(delta_of(counters, "ethtool/rx_crc_errors_phy").delta, 3u);
    EXPECT_EQ(delta_of(counters, "ethtool/link_down_events_phy").delta, 1u);
    EXPECT_EQ(delta_of(counters, "ethtool/rx_prio3_discards").delta, 0u);
    EXPECT_TRUE(counters.missing().empty());
    EXPECT_TRUE(counters.notes().empty());
    // Only rx_discards_phy counts among the drops: hw out_of_buffer has not
    // moved, the net/ files neither.
    EXPECT_EQ(nic_drops_so_far(counters), 10u);

    // The ledger gets them under their names, after the sysfs counters.
    const auto sc = counters.to_source_counters("mlx5_0/");
    ASSERT_EQ(sc.size(), 9u + 8u);
    EXPECT_EQ(sc[9].name, "mlx5_0/ethtool/rx_out_of_buffer");
    const auto it = std::find_if(sc.begin(), sc.end(), [](const SourceCounter& c) {
        return c.name == "mlx5_0/ethtool/rx_discards_phy";
    });
    ASSERT_NE(it, sc.end());
    EXPECT_EQ(it->value, 10u);
    EXPECT_TRUE(it->is_drop);
    EXPECT_EQ(it->cause, LossCause::port_discards);
}

TEST(NicCountersEthtool, SixtyFourBitValuesADecreaseIsAResetNeverAWrap) {
    auto fake = mlx5_ethtool();
    fake->set("rx_discards_phy", 0xFFFFFFF0u);  // the top half of the 32-bit range
    NicCounters counters("/nonexistent", "", 0, "eth0", fake);
    counters.snapshot_start();
    fake->set("rx_discards_phy", 3);  // a sysfs counter would read this as a wrap: 16 + 3
    counters.snapshot();
    EXPECT_EQ(delta_of(counters, "ethtool/rx_discards_phy").delta, 3u);
    fake->set("rx_discards_phy", (std::uint64_t{1} << 40) + 3);  // no 32-bit limit
    counters.snapshot();
    EXPECT_EQ(delta_of(counters, "ethtool/rx_discards_phy").delta, (std::uint64_t{1} << 40) + 3);
}

TEST(NicCountersEthtool, ACounterGoneFromTheDriversSetIsMissingTheOthersFollowTheirNames) {
    auto fake = mlx5_ethtool();
    NicCounters counters("/nonexistent", "mlx5_0", 1, "eth0", fake);
    counters.snapshot_start();
    fake->set("rx_discards_phy", 5);  // +2
    counters.snapshot();
    // A reload: rx_discards_phy is gone, two names are added in front, so
    // every index moves. (The kernel tells a changed set only by its count,
    // net/ethtool/ioctl.c ethtool_get_stats; one of the same size is not seen.)
    fake->stat_names = {"rx_new_stat",          "rx_new_stat2",        "rx_packets",
                        "rx_out_of_buffer",     "rx_packets_phy",      "rx_crc_errors_phy",
                        "tx_discards_phy",      "rx_prio3_discards",   "rx_prio3_buf_discard",
                        "link_down_events_phy", "rx_oversize_pkts_phy"};
    fake->stat_values = {0, 0, 100, 1, 200, 2, 4, 9, 6, 7, 8};  // rx_prio3_discards +4
    counters.snapshot();
    EXPECT_EQ(fake->names_calls, 2) << "the names are read again when the set changed";
    EXPECT_EQ(ethtool_missing(counters), std::vector<std::string>{"ethtool/rx_discards_phy"});
    EXPECT_EQ(delta_of(counters, "ethtool/rx_discards_phy").delta, 2u) << "keeps what it had";
    EXPECT_EQ(delta_of(counters, "ethtool/rx_prio3_discards").delta, 4u);
    EXPECT_EQ(delta_of(counters, "ethtool/rx_oversize_pkts_phy").delta, 0u);
    EXPECT_FALSE(has_counter(counters, "ethtool/rx_new_stat"));
}

TEST(NicCountersEthtool, NotAvailableIsOneNoteNeverAGuess) {
    auto fake = mlx5_ethtool();
    fake->names_error = EOPNOTSUPP;
    NicCounters counters("/nonexistent", "", 0, "eth0", fake);
    counters.snapshot_start();
    counters.snapshot();
    EXPECT_EQ(counters.notes(),
              std::vector<std::string>{"ethtool statistics of eth0: not available (Operation not "
                                       "supported)"});
    EXPECT_TRUE(counters.deltas().empty());
    EXPECT_EQ(fake->values_calls, 0);
    // A first value read that fails: the names are known, the drops missing.
    auto late = mlx5_ethtool();
    late->values_error = EPERM;
    NicCounters denied("/nonexistent", "", 0, "eth1", late);
    denied.snapshot_start();
    EXPECT_EQ(denied.notes(), std::vector<std::string>{"ethtool statistics of eth1: not "
                                                       "available (Operation not permitted)"});
    EXPECT_EQ(ethtool_missing(denied), std::vector<std::string>{"ethtool/rx_discards_phy"});
    EXPECT_TRUE(denied.deltas().empty());
}

TEST(NicCountersEthtool, AReadThatFailsLaterMarksTheDropsMissing) {
    auto fake = mlx5_ethtool();
    NicCounters counters("/nonexistent", "", 0, "eth0", fake);
    counters.snapshot_start();
    fake->set("rx_discards_phy", 4);
    counters.snapshot();
    fake->values_error = ENODEV;  // the interface went away
    fake->set("rx_discards_phy", 100);
    counters.snapshot();
    counters.snapshot();
    EXPECT_EQ(ethtool_missing(counters), std::vector<std::string>{"ethtool/rx_discards_phy"});
    EXPECT_EQ(counters.notes(), std::vector<std::string>{
                                    "ethtool statistics of eth0: a read failed (No such device)"});
    EXPECT_EQ(delta_of(counters, "ethtool/rx_discards_phy").delta, 1u);
}

TEST(NicCountersEthtool, ADriverWithoutAPortDiscardCounterIsNoted) {
    auto fake = std::make_shared<FakeEthtool>();  // veth's names (drivers/net/veth.c)
    fake->stat_names = {"peer_ifindex", "rx_queue_0_xdp_packets", "rx_queue_0_drops"};
    fake->stat_values = {7, 0, 0};
    NicCounters counters("/nonexistent", "", 0, "veth0", fake);
    counters.snapshot_start();
    EXPECT_EQ(counters.notes(),
              std::vector<std::string>{"ethtool statistics of veth0: no port discard counter "
                                       "(rx_discards_phy) among its 3; drops at the port cannot be "
                                       "told apart"});
    EXPECT_TRUE(counters.deltas().empty());
    EXPECT_TRUE(ethtool_missing(counters).empty());
}

TEST(NicCountersEthtool, CausesPerName) {
    const auto cls = [](std::string_view name, bool rdma = true) {
        return classify_ethtool_stat(name, rdma);
    };
    ASSERT_TRUE(cls("rx_discards_phy"));
    EXPECT_TRUE(cls("rx_discards_phy")->is_drop);
    EXPECT_EQ(cls("rx_discards_phy")->cause, LossCause::port_discards);
    for (const char* name : {"rx_crc_errors_phy", "rx_symbol_err_phy", "rx_pcs_symbol_err_phy",
                             "rx_in_range_len_errors_phy", "rx_out_of_range_len_phy",
                             "rx_oversize_pkts_phy", "rx_undersize_pkts_phy", "rx_fragments_phy",
                             "rx_jabbers_phy", "outbound_pci_buffer_overflow", "rx_prio0_discards",
                             "rx_prio7_buf_discard", "rx_prio12_cong_discard"}) {
        ASSERT_TRUE(cls(name)) << name;
        EXPECT_FALSE(cls(name)->is_drop) << name;
        EXPECT_EQ(cls(name)->cause, LossCause::port_discards) << name;
    }
    EXPECT_EQ(cls("link_down_events_phy")->cause, LossCause::port_down);
    EXPECT_FALSE(cls("link_down_events_phy")->is_drop);
    // The netdev's own receive queues: nothing to a raw QP, the kernel path's
    // witness for --source pcap (the drop there is net/rx_missed_errors).
    EXPECT_EQ(cls("rx_out_of_buffer", true)->cause, LossCause::none);
    EXPECT_EQ(cls("rx_out_of_buffer", false)->cause, LossCause::kernel);
    EXPECT_FALSE(cls("rx_out_of_buffer", false)->is_drop);
    for (const char* name :
         {"rx_buffer_passed_thres_phy", "rx_packets_phy", "tx_pause_ctrl_phy",
          "rx_steer_missed_packets", "dev_internal_queue_oob", "rx_if_down_packets"}) {
        ASSERT_TRUE(cls(name)) << name;
        EXPECT_FALSE(cls(name)->is_drop) << name;
        EXPECT_EQ(cls(name)->cause, LossCause::none) << name;
    }
    for (const char* name :
         {"rx_packets", "tx_discards_phy", "rx_prio_discards", "rx_prio3x_discards",
          "tx_prio3_discards", "rx_prio3_bytes", "rx_queue_0_drops", ""}) {
        EXPECT_FALSE(cls(name)) << name;
    }

    // The sysfs counters' causes.
    FakeSysfs fs;
    write_counters(fs);
    NicCounters counters(fs.root(), "mlx5_0", 1, "enp1s0f0np0", no_ethtool());
    counters.snapshot_start();
    const auto cause = [&](const std::string& name) { return delta_of(counters, name).cause; };
    EXPECT_EQ(cause("hw_counters/out_of_buffer"), LossCause::receive_queue);
    EXPECT_EQ(cause("hw_counters/out_of_sequence"), LossCause::none);
    EXPECT_EQ(cause("hw_counters/rx_write_requests"), LossCause::none);
    EXPECT_EQ(cause("net/rx_missed_errors"), LossCause::kernel);
    EXPECT_EQ(cause("net/rx_fifo_errors"), LossCause::kernel);
    EXPECT_EQ(cause("net/rx_over_errors"), LossCause::kernel);
    EXPECT_EQ(cause("net/rx_crc_errors"), LossCause::port_discards);
    EXPECT_EQ(cause("net/rx_dropped"), LossCause::none);
    EXPECT_EQ(cause("net/rx_errors"), LossCause::none);
    for (const auto& c : counters.to_source_counters()) {
        EXPECT_EQ(c.cause, cause(c.name)) << c.name;
    }
    EXPECT_EQ(counters.notes(), std::vector<std::string>{"ethtool statistics of enp1s0f0np0: "
                                                         "not available (No such device)"});
}

// ---------------------------------------------------------------------------
// The ethtool ioctl against the running kernel

// `ethtool -S IF` (ethtool(8), which reads -S through the same ioctl) as
// name/value pairs in its order; empty when it prints none.
std::vector<std::pair<std::string, std::uint64_t>> ethtool_s(const std::string& ifname) {
    std::vector<std::pair<std::string, std::uint64_t>> result;
    FILE* p = ::popen(("ethtool -S " + ifname + " 2>/dev/null").c_str(), "r");
    if (p == nullptr) {
        return result;
    }
    char line[512];
    while (std::fgets(line, sizeof line, p) != nullptr) {
        std::string text(line);
        const auto colon = text.rfind(": ");
        if (colon == std::string::npos || text.rfind("NIC statistics", 0) == 0) {
            continue;
        }
        const auto first = text.find_first_not_of(' ');
        result.emplace_back(text.substr(first, colon - first), std::stoull(text.substr(colon + 2)));
    }
    ::pclose(p);
    return result;
}

// What the reader returns for `ifname`, in ethtool_s's form; "error: ..." in
// the first name when it fails.
std::vector<std::pair<std::string, std::uint64_t>> read_ioctl(IoctlEthtoolStats& reader,
                                                              const std::string& ifname) {
    std::vector<std::string> names;
    std::vector<std::uint64_t> values;
    if (const int err = reader.names(ifname, names)) {
        return {{"error: " + ethtool_error_text(err), 0}};
    }
    if (const int err = reader.values(ifname, names.size(), values)) {
        return {{"error: " + ethtool_error_text(err), 0}};
    }
    std::vector<std::pair<std::string, std::uint64_t>> result;
    for (std::size_t i = 0; i < names.size(); ++i) {
        result.emplace_back(names[i], values[i]);
    }
    return result;
}

// Runs `body` in a forked child (alarm-bounded, so a hung ioctl cannot hang
// the suite) and returns what it returned.
std::string in_child(const std::function<std::string()>& body) {
    int fds[2];
    if (::pipe(fds) != 0) {
        return "pipe failed";
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::close(fds[0]);
        ::alarm(10);
        std::string text;
        try {
            text = body();
        } catch (const std::exception& e) {
            text = std::string("exception: ") + e.what();
        }
        for (std::size_t done = 0; done < text.size();) {
            const ssize_t n = ::write(fds[1], text.data() + done, text.size() - done);
            if (n <= 0) {
                break;
            }
            done += static_cast<std::size_t>(n);
        }
        ::_exit(0);
    }
    ::close(fds[1]);
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) {
        text.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status)) {
        text += "\nchild died: status " + std::to_string(status);
    }
    return text;
}

// A veth pair in a network namespace of its own: veth implements the driver
// statistics (drivers/net/veth.c: peer_ifindex, then rx_queue_<i>_* per
// receive queue). The reader must return what `ethtool -S` prints, name for
// name and value for value, and see the set change when the queues change.
TEST(EthtoolIoctl, VethStatisticsAreWhatEthtoolPrints) {
    const std::string text = in_child([] {
        if (::unshare(CLONE_NEWNET) != 0) {
            return std::string("skip: unshare(CLONE_NEWNET) failed (needs CAP_SYS_ADMIN)");
        }
        if (std::system("command -v ethtool >/dev/null") != 0) {
            return std::string("skip: no ethtool (scripts/install-deps.sh)");
        }
        if (std::system("ip link add ibvn0 numrxqueues 4 numtxqueues 4 type veth peer name ibvn1 "
                        "numrxqueues 4 numtxqueues 4") != 0) {
            return std::string("skip: cannot create a veth pair");
        }
        std::ostringstream out;
        IoctlEthtoolStats reader;
        const auto ours = read_ioctl(reader, "ibvn0");
        const auto theirs = ethtool_s("ibvn0");
        out << "count " << ours.size() << " same " << (ours == theirs) << "\n";
        for (const auto& [name, value] : ours) {
            if (name == "peer_ifindex") {
                out << "peer_ifindex " << (value == ::if_nametoindex("ibvn1")) << "\n";
            }
            if (name == "rx_queue_3_xdp_packets") {
                out << "has rx_queue_3_xdp_packets\n";
            }
        }
        // Two queues instead of four: the same reader, asked for the old
        // count, is told the set changed; the names read again match again.
        if (std::system("ethtool -L ibvn0 rx 2 tx 2") != 0) {
            return std::string("ethtool -L failed");
        }
        std::vector<std::uint64_t> values;
        out << "old count: " << ethtool_error_text(reader.values("ibvn0", ours.size(), values))
            << "\n";
        const auto after = read_ioctl(reader, "ibvn0");
        out << "after " << (after.size() < ours.size()) << " same " << (after == ethtool_s("ibvn0"))
            << "\n";
        // NicCounters on it: no port discard counter among veth's names.
        NicCounters counters("/sys", "", 0, "ibvn0");
        counters.snapshot_start();
        for (const auto& note : counters.notes()) {
            out << "note: " << note << "\n";
        }
        out << "missing ethtool: " << ethtool_missing(counters).size() << "\n";
        return out.str();
    });
    if (text.rfind("skip:", 0) == 0) {
        IBVCAP_SKIP_UNLESS_CI(text);
    }
    // The count veth reports varies with the kernel (rx queues × its XDP
    // statistics); ethtool -S on the same kernel is the reference.
    EXPECT_NE(text.find(" same 1\n"), std::string::npos) << text;
    EXPECT_EQ(text.find("count 0 "), std::string::npos) << text;
    EXPECT_NE(text.find("peer_ifindex 1\n"), std::string::npos) << text;
    EXPECT_NE(text.find("has rx_queue_3_xdp_packets\n"), std::string::npos) << text;
    EXPECT_NE(text.find("old count: the set of statistics changed\n"), std::string::npos) << text;
    EXPECT_NE(text.find("after 1 same 1\n"), std::string::npos) << text;
    EXPECT_NE(text.find("note: ethtool statistics of ibvn0: no port discard counter "
                        "(rx_discards_phy) among its "),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("missing ethtool: 0\n"), std::string::npos) << text;
}

// lo has no driver statistics (ethtool -S lo: "no stats available"), and an
// interface that does not exist is ENODEV: each is one clear line.
TEST(EthtoolIoctl, LoopbackHasNoStatisticsAndTheNoteSaysSo) {
    IoctlEthtoolStats reader;
    std::vector<std::string> names;
    EXPECT_EQ(reader.names("lo", names), EOPNOTSUPP);
    EXPECT_TRUE(names.empty());
    EXPECT_EQ(reader.names("ibvcap-none0", names), ENODEV);
    EXPECT_EQ(ethtool_error_text(ENODEV), "No such device");
    NicCounters counters("/sys", "", 0, "lo");
    counters.snapshot_start();
    counters.snapshot();
    EXPECT_EQ(counters.notes(), std::vector<std::string>{"ethtool statistics of lo: not "
                                                         "available (Operation not supported)"});
    EXPECT_TRUE(ethtool_missing(counters).empty());
    for (const auto& d : counters.deltas()) {
        EXPECT_EQ(d.name.rfind("ethtool/", 0), std::string::npos) << d.name;
    }
}

// ---------------------------------------------------------------------------
// IGMP membership (each test its own group: ctest may run them in parallel)

// The groups /proc/net/igmp lists for `device`, as printed there: the
// network-order address in hex on a little-endian host ("0100FFEF").
std::vector<std::string> igmp_groups(const std::string& device) {
    std::ifstream in("/proc/net/igmp");
    std::vector<std::string> groups;
    std::string line;
    std::string current;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
        if (line.empty()) {
            continue;
        }
        std::istringstream fields(line);
        if (line[0] != '\t' && line[0] != ' ') {  // "1\tlo        :     2      V3"
            std::string index;
            fields >> index >> current;
            if (!current.empty() && current.back() == ':') {
                current.pop_back();
            }
        } else if (current == device) {  // "\t\t\t\t0100FFEF     1 0:00000000\t\t0"
            std::string group;
            fields >> group;
            groups.push_back(group);
        }
    }
    return groups;
}

bool in_igmp(const std::string& device, const std::string& hex) {
    const auto groups = igmp_groups(device);
    return std::find(groups.begin(), groups.end(), hex) != groups.end();
}

// The /proc/net/igmp spelling of a group (host byte order in).
std::string igmp_hex(std::uint32_t group) {
    char text[16];
    std::snprintf(text, sizeof text, "%08X", htonl(group));
    return text;
}

TEST(Igmp, ProcParserSeesAllHostsGroup) {
    // Every IPv4 multicast-capable interface is in 224.0.0.1; lo is too.
    EXPECT_TRUE(in_igmp("lo", "010000E0"));
}

TEST(Igmp, JoinLeaveRejoinAndDestructorOnLoopback) {
    const std::uint32_t group = ip("239.255.0.1");
    ASSERT_EQ(igmp_hex(group), "0100FFEF");
    ASSERT_FALSE(in_igmp("lo", "0100FFEF")) << "another process holds 239.255.0.1 on lo";
    {
        MulticastMembership m(group, "lo", ip("127.0.0.1"));
        EXPECT_FALSE(m.joined());
        EXPECT_FALSE(in_igmp("lo", "0100FFEF"));
        m.join();
        EXPECT_TRUE(m.joined());
        EXPECT_TRUE(in_igmp("lo", "0100FFEF"));
        m.join();  // no-op
        EXPECT_TRUE(m.joined());

        m.leave();
        EXPECT_FALSE(m.joined());
        EXPECT_FALSE(in_igmp("lo", "0100FFEF"));
        m.leave();  // idempotent
        EXPECT_FALSE(m.joined());

        m.rejoin();
        EXPECT_TRUE(m.joined());
        EXPECT_TRUE(in_igmp("lo", "0100FFEF"));
        m.rejoin();  // while joined
        EXPECT_TRUE(m.joined());
        EXPECT_TRUE(in_igmp("lo", "0100FFEF"));
        EXPECT_EQ(m.group(), group);
        EXPECT_EQ(m.interface(), "lo");
    }
    EXPECT_FALSE(in_igmp("lo", "0100FFEF"));  // the destructor left
}

TEST(Igmp, JoinFromResolvedInterfaceAndMove) {
    const std::uint32_t group = ip("239.255.0.2");
    const std::string hex = igmp_hex(group);
    const NetInterface lo = resolve_interface("lo");
    MulticastMembership a(group, lo);
    a.join();
    EXPECT_TRUE(in_igmp("lo", hex));
    {
        MulticastMembership b(std::move(a));
        EXPECT_TRUE(b.joined());
        EXPECT_FALSE(a.joined());  // NOLINT(bugprone-use-after-move): moved-from is empty
        EXPECT_TRUE(in_igmp("lo", hex));
        std::vector<MulticastMembership> held;
        held.push_back(std::move(b));
        EXPECT_TRUE(in_igmp("lo", hex));
    }
    EXPECT_FALSE(in_igmp("lo", hex));
}

TEST(Igmp, TwoMembershipsOfOneGroupAreCountedByTheKernel) {
    const std::uint32_t group = ip("239.255.0.3");
    const std::string hex = igmp_hex(group);
    MulticastMembership a(group, "lo");
    MulticastMembership b(group, "lo");
    a.join();
    b.join();
    a.leave();
    EXPECT_TRUE(in_igmp("lo", hex));  // b still holds it
    b.leave();
    EXPECT_FALSE(in_igmp("lo", hex));
}

// The (group, source) pairs /proc/net/mcfilter lists for `device`
// (net/ipv4/igmp.c igmp_mcf_seq_show: "0x%08x" of ntohl(multiaddr) and of
// ntohl(sf_inaddr)), in host byte order. Matched by the interface index: the
// name there is cut to 6 characters ("%6.6s").
std::vector<std::pair<std::uint32_t, std::uint32_t>> source_filters(const std::string& device) {
    std::ifstream in("/proc/net/mcfilter");
    std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string idx, dev, mca, src;
        if (fields >> idx >> dev >> mca >> src &&
            idx == std::to_string(::if_nametoindex(device.c_str()))) {
            out.emplace_back(static_cast<std::uint32_t>(std::stoul(mca, nullptr, 16)),
                             static_cast<std::uint32_t>(std::stoul(src, nullptr, 16)));
        }
    }
    return out;
}

// verbs-mlx5-2.md N7: a group given with its sources is joined source by
// source (MCAST_JOIN_SOURCE_GROUP), so the kernel's IGMPv3 reports INCLUDE
// only them, as a PIM-SSM network needs; the leave drops each.
TEST(Igmp, ASourceSpecificJoinNamesEachSource) {
    const std::uint32_t group = ip("232.1.2.3");
    const std::uint32_t a = ip("10.0.0.11");
    const std::uint32_t b = ip("10.0.0.12");
    {
        MulticastMembership m(group, "lo", 0, {a, b});
        m.join();
        auto filters = source_filters("lo");
        std::sort(filters.begin(), filters.end());
        const std::vector<std::pair<std::uint32_t, std::uint32_t>> expected = {{group, a},
                                                                               {group, b}};
        EXPECT_EQ(filters, expected);
        EXPECT_TRUE(in_igmp("lo", igmp_hex(group)));
        m.rejoin();
        EXPECT_EQ(source_filters("lo").size(), 2u);
    }
    EXPECT_TRUE(source_filters("lo").empty());
    EXPECT_FALSE(in_igmp("lo", igmp_hex(group)));
    // Without sources: the any-source join, no source filter.
    MulticastMembership any(group, "lo");
    any.join();
    EXPECT_TRUE(in_igmp("lo", igmp_hex(group)));
    EXPECT_TRUE(source_filters("lo").empty());
}

TEST(NetAddr, GroupsWithSources) {
    const auto [g, from] = parse_group_and_sources("232.1.2.3:4001@10.0.0.11,10.0.0.12");
    EXPECT_EQ(g, (Endpoint{ip("232.1.2.3"), 4001}));
    EXPECT_EQ(from, (std::vector<std::uint32_t>{ip("10.0.0.11"), ip("10.0.0.12")}));
    EXPECT_TRUE(parse_group_and_sources("239.1.0.1:4001").second.empty());
    for (const char* bad : {"232.1.2.3:4001@", "232.1.2.3:4001@10.0.0", "232.1.2.3:4001@239.1.1.1",
                            "232.1.2.3:4001@0.0.0.0", "232.1.2.3:4001@10.0.0.1,,10.0.0.2",
                            "232.1.2.3:4001@10.0.0.1,10.0.0.1", "232.1.2.3@10.0.0.1"}) {
        EXPECT_THROW(parse_group_and_sources(bad), std::invalid_argument) << bad;
    }
    EXPECT_TRUE(is_source_specific(ip("232.0.0.1")));
    EXPECT_TRUE(is_source_specific(ip("232.255.255.255")));
    EXPECT_FALSE(is_source_specific(ip("233.0.0.1")));
    EXPECT_FALSE(is_source_specific(ip("231.255.255.255")));
    const std::vector<SourceFilter> filters = {
        {Endpoint{ip("232.1.2.3"), 4001}, {ip("10.0.0.11")}}};
    ASSERT_NE(sources_for(filters, Endpoint{ip("232.1.2.3"), 4001}), nullptr);
    EXPECT_EQ(sources_for(filters, Endpoint{ip("232.1.2.3"), 4002}), nullptr);
}

// One argument that lists groups and sources (docs/operations.md writes
// GROUP:PORT@SOURCE,SOURCE): a comma before an address continues the sources
// of a group given with '@', one before GROUP:PORT starts another group.
TEST(NetAddr, GroupListsSplitBetweenGroupsNotBetweenSources) {
    using V = std::vector<std::string_view>;
    EXPECT_EQ(split_group_list("239.1.0.1:4001"), (V{"239.1.0.1:4001"}));
    EXPECT_EQ(split_group_list("232.10.0.1:4001@10.1.0.11,10.1.0.12"),
              (V{"232.10.0.1:4001@10.1.0.11,10.1.0.12"}));
    EXPECT_EQ(split_group_list("239.1.0.1:4001,239.1.0.2:4001/vdif"),
              (V{"239.1.0.1:4001", "239.1.0.2:4001/vdif"}));
    EXPECT_EQ(split_group_list("232.1.0.1:4001@10.0.0.11,10.0.0.12/vtp,239.1.0.2:4001@10.0.0.13,"
                               "10.0.0.14,239.1.0.3:4001"),
              (V{"232.1.0.1:4001@10.0.0.11,10.0.0.12/vtp", "239.1.0.2:4001@10.0.0.13,10.0.0.14",
                 "239.1.0.3:4001"}));
    // An address after a group without '@', or after a /FORMAT, is not a
    // source: it is an item of its own (and a bad group).
    EXPECT_EQ(split_group_list("239.1.0.1:4001,10.0.0.11"), (V{"239.1.0.1:4001", "10.0.0.11"}));
    EXPECT_EQ(split_group_list("239.1.0.1:4001@10.0.0.1/vdif,10.0.0.2"),
              (V{"239.1.0.1:4001@10.0.0.1/vdif", "10.0.0.2"}));
    EXPECT_EQ(split_group_list(""), (V{""}));  // parse_group names it
    for (const char* bad :
         {",", "239.1.0.1:4001,", ",239.1.0.1:4001", "239.1.0.1:4001,,239.1.0.2:4001",
          "239.1.0.1:4001@10.0.0.1,,10.0.0.2", "239.1.0.1:4001@10.0.0.1,"}) {
        EXPECT_THROW(split_group_list(bad), std::invalid_argument) << bad;
    }
}

TEST(Igmp, NonexistentInterfaceThrowsNamingIt) {
    MulticastMembership m(ip("239.255.0.4"), "ibvcapnosuch0");
    try {
        m.join();
        FAIL() << "join on a missing interface succeeded";
    } catch (const std::system_error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("ibvcapnosuch0"), std::string::npos) << what;
        EXPECT_NE(what.find("239.255.0.4"), std::string::npos) << what;
        EXPECT_NE(what.find("ip link"), std::string::npos) << what;
        EXPECT_EQ(what.find('\n'), std::string::npos) << what;
        EXPECT_EQ(e.code().value(), ENODEV);
    }
    EXPECT_FALSE(m.joined());
    m.leave();  // harmless
}

TEST(Igmp, NonMulticastGroupIsInvalid) {
    EXPECT_THROW(MulticastMembership(ip("10.0.0.1"), "lo"), std::invalid_argument);
    EXPECT_THROW(MulticastMembership(ip("240.0.0.1"), "lo"), std::invalid_argument);
    try {
        MulticastMembership m(ip("192.168.1.1"), "lo");
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("192.168.1.1"), std::string::npos);
    }
    EXPECT_NO_THROW(MulticastMembership(ip("224.0.0.251"), "lo"));
}

}  // namespace
}  // namespace ibvcap
