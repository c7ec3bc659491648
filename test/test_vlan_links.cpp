// VLAN ids without root (verbs-mlx5-3.md R2; lib/host/vlan_links.hpp): the
// rtnetlink dump parsed from messages built with the kernel's own structs and
// macros, hostile ones included; the real dump of this host; and a VLAN
// netdev whose id cannot be read is refused, not captured untagged, when the
// kernel's 0600 VLAN table is read by another user.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "fake_tree.hpp"
#include "lib/host/devices.hpp"
#include "lib/host/vlan_links.hpp"

namespace ibvcap {
namespace {

// Netlink messages as the kernel writes them (NLMSG_ALIGN, RTA_ALIGN).
class Dump {
  public:
    // One RTM_NEWLINK: ifinfomsg, then the attributes of `attrs`.
    void link(int index, const std::vector<std::byte>& attrs) {
        std::vector<std::byte> body(NLMSG_ALIGN(sizeof(ifinfomsg)));
        ifinfomsg ifi{};
        ifi.ifi_index = index;
        std::memcpy(body.data(), &ifi, sizeof ifi);
        body.insert(body.end(), attrs.begin(), attrs.end());
        message(RTM_NEWLINK, body);
    }
    void done() { message(NLMSG_DONE, std::vector<std::byte>(4)); }
    void message(std::uint16_t type, const std::vector<std::byte>& body) {
        nlmsghdr h{};
        h.nlmsg_len = static_cast<std::uint32_t>(NLMSG_LENGTH(body.size()));
        h.nlmsg_type = type;
        const std::size_t at = bytes.size();
        bytes.resize(at + NLMSG_ALIGN(h.nlmsg_len));
        std::memcpy(bytes.data() + at, &h, sizeof h);
        std::memcpy(bytes.data() + at + NLMSG_HDRLEN, body.data(), body.size());
    }
    std::vector<std::byte> bytes;
};

std::vector<std::byte> attr(unsigned type, const void* data, std::size_t n) {
    std::vector<std::byte> out(RTA_SPACE(n));
    rtattr a{};
    a.rta_len = static_cast<unsigned short>(RTA_LENGTH(n));
    a.rta_type = static_cast<unsigned short>(type);
    std::memcpy(out.data(), &a, sizeof a);
    std::memcpy(out.data() + RTA_LENGTH(0), data, n);
    return out;
}
std::vector<std::byte> str(unsigned type, const std::string& s) {
    return attr(type, s.c_str(), s.size() + 1);
}
template <typename T>
std::vector<std::byte> num(unsigned type, T v) {
    return attr(type, &v, sizeof v);
}
std::vector<std::byte> nest(unsigned type, std::vector<std::vector<std::byte>> parts) {
    std::vector<std::byte> inner;
    for (const auto& p : parts) {
        inner.insert(inner.end(), p.begin(), p.end());
    }
    return attr(type | NLA_F_NESTED, inner.data(), inner.size());
}
std::vector<std::byte> cat(std::vector<std::vector<std::byte>> parts) {
    std::vector<std::byte> out;
    for (const auto& p : parts) {
        out.insert(out.end(), p.begin(), p.end());
    }
    return out;
}
// IFLA_LINKINFO of a VLAN (net/8021q/vlan_netlink.c vlan_fill_info).
std::vector<std::byte> vlan_info(std::uint16_t id, std::uint16_t proto) {
    return nest(IFLA_LINKINFO,
                {str(IFLA_INFO_KIND, "vlan"),
                 nest(IFLA_INFO_DATA, {num<std::uint16_t>(IFLA_VLAN_ID, id),
                                       num<std::uint16_t>(IFLA_VLAN_PROTOCOL, htons(proto))})});
}

TEST(VlanLinks, ADumpGivesEachVlanItsIdAndLowerNetdev) {
    Dump d;
    d.link(2, cat({str(IFLA_IFNAME, "ens1f0np0")}));
    d.link(5, cat({str(IFLA_IFNAME, "ens1f0np0.100"), num<std::int32_t>(IFLA_LINK, 2),
                   vlan_info(100, 0x8100)}));
    d.link(6, cat({str(IFLA_IFNAME, "ens1f0np0.100.7"), num<std::int32_t>(IFLA_LINK, 5),
                   vlan_info(7, 0x88a8)}));
    d.link(7, cat({str(IFLA_IFNAME, "veth0"), num<std::int32_t>(IFLA_LINK, 8),
                   nest(IFLA_LINKINFO, {str(IFLA_INFO_KIND, "veth")})}));
    d.done();
    d.link(9, cat({str(IFLA_IFNAME, "after.done"), num<std::int32_t>(IFLA_LINK, 2),
                   vlan_info(9, 0x8100)}));
    const auto links = parse_link_dump(d.bytes);
    ASSERT_EQ(links.size(), 4u);
    EXPECT_TRUE(links[1].vlan);
    EXPECT_EQ(links[1].vlan_id, 100);
    EXPECT_EQ(links[1].vlan_protocol, 0x8100);
    EXPECT_EQ(links[2].vlan_protocol, 0x88a8);
    EXPECT_FALSE(links[3].vlan);
    const VlanTable table = vlan_table_of(links);
    ASSERT_EQ(table.size(), 2u);
    EXPECT_EQ(table.at("ens1f0np0.100"), (std::pair<std::uint16_t, std::string>{100, "ens1f0np0"}));
    EXPECT_EQ(table.at("ens1f0np0.100.7"),
              (std::pair<std::uint16_t, std::string>{7, "ens1f0np0.100"}));
    // The chain reads as from /proc/net/vlan/config: outermost first.
    EXPECT_EQ(vlan_chain(table, "ens1f0np0.100.7").ids, (std::vector<std::uint16_t>{100, 7}));
}

// Nothing in a reply is trusted: lengths that run past the buffer, an
// attribute longer than its message, an id no VLAN has, a nested length that
// lies. Each is skipped or ends the walk; nothing reads out of bounds (the
// ASan build runs this) and no VLAN is made up.
TEST(VlanLinks, HostileRepliesMakeNoVlan) {
    {
        Dump d;
        d.link(5, cat({str(IFLA_IFNAME, "x.100"), num<std::int32_t>(IFLA_LINK, 2),
                       vlan_info(100, 0x8100)}));
        auto cut = d.bytes;
        cut.resize(cut.size() - 9);  // nlmsg_len now past the end
        EXPECT_TRUE(parse_link_dump(cut).empty());
        EXPECT_TRUE(parse_link_dump({}).empty());
    }
    {
        Dump d;
        d.link(2, cat({str(IFLA_IFNAME, "x")}));
        d.link(5, cat({str(IFLA_IFNAME, "x.4096"), num<std::int32_t>(IFLA_LINK, 2),
                       vlan_info(4096, 0x8100)}));
        EXPECT_TRUE(vlan_table_of(parse_link_dump(d.bytes)).empty()) << "VLAN id 4096";
    }
    {
        // IFLA_INFO_DATA whose rta_len claims more than IFLA_LINKINFO holds.
        auto info = vlan_info(100, 0x8100);
        rtattr inner{};
        const std::size_t at = RTA_LENGTH(0) + RTA_SPACE(5);  // after IFLA_INFO_KIND "vlan"
        std::memcpy(&inner, info.data() + at, sizeof inner);
        inner.rta_len = 0xfff0;
        std::memcpy(info.data() + at, &inner, sizeof inner);
        Dump d;
        d.link(2, cat({str(IFLA_IFNAME, "x")}));
        d.link(5, cat({str(IFLA_IFNAME, "x.100"), num<std::int32_t>(IFLA_LINK, 2), info}));
        const auto links = parse_link_dump(d.bytes);
        ASSERT_EQ(links.size(), 2u);
        EXPECT_EQ(links[1].vlan_id, 0) << "no id read from a lying nest";
    }
    {
        // A name with no terminator, 40 bytes: not an interface name.
        Dump d;
        d.link(3, cat({attr(IFLA_IFNAME, std::string(40, 'n').data(), 40)}));
        EXPECT_TRUE(parse_link_dump(d.bytes).empty());
    }
}

// The socket code against this host's kernel: the loopback is there, index
// 1, no VLAN.
TEST(VlanLinks, TheRunningKernelsDumpListsTheLoopback) {
    std::string why;
    const auto links = dump_links(why);
    ASSERT_TRUE(links.has_value()) << why;
    const auto lo = std::find_if(links->begin(), links->end(),
                                 [](const LinkRecord& l) { return l.name == "lo"; });
    ASSERT_NE(lo, links->end());
    EXPECT_EQ(lo->index, 1);
    EXPECT_FALSE(lo->vlan);
}

// The kernel makes /proc/net/vlan/config 0600 (net/8021q/vlanproc.c): another
// user reads no VLAN id there. A VLAN netdev (uevent DEVTYPE=vlan) whose id
// nothing else gives is then refused with one line, never taken as untagged.
// Run as nobody in a child (CI runs as root).
TEST(VlanLinks, AVlanWhoseIdCannotBeReadIsRefused) {
    ASSERT_EQ(::geteuid(), 0u) << "this test drops to nobody in a child and needs root (CI runs "
                                  "as root)";
    test::FakeTree t("test_vlan_links");
    t.write("sys/class/net/eth9/operstate", "up");
    t.write("sys/class/net/eth9.100/operstate", "up");
    t.write("sys/class/net/eth9.100/uevent", "DEVTYPE=vlan\nINTERFACE=eth9.100\nIFINDEX=12");
    t.write("proc/net/vlan/config", "eth9.100       | 100  | eth9");
    ASSERT_EQ(::chmod((t.root() / "proc/net/vlan/config").c_str(), 0600), 0);
    for (const char* d : {"", "sys", "sys/class", "sys/class/net", "proc", "proc/net"}) {
        ::chmod((t.root() / d).c_str(), 0755);
    }
    const std::vector<InterfaceAddress> addresses = {{"eth9.100", 0x41, 0x0a640001}};
    const std::filesystem::path sys = t.root() / "sys";
    // Root reads the table: the id is there.
    EXPECT_EQ(resolve_interface("eth9.100", addresses, sys).vlan_ids,
              (std::vector<std::uint16_t>{100}));
    int pipefd[2];
    ASSERT_EQ(::pipe(pipefd), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::close(pipefd[0]);
        std::string said = "no error";
        if (::setresgid(65534, 65534, 65534) == 0 && ::setresuid(65534, 65534, 65534) == 0) {
            try {
                (void)resolve_interface("eth9.100", addresses, sys);
            } catch (const std::exception& e) {
                said = e.what();
            }
        } else {
            said = "cannot become nobody";
        }
        (void)!::write(pipefd[1], said.data(), said.size());
        ::_exit(0);
    }
    ::close(pipefd[1]);
    std::string said;
    char buf[512];
    for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;) {
        said.append(buf, static_cast<std::size_t>(n));
    }
    ::close(pipefd[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    EXPECT_NE(said.find("eth9.100 is a VLAN netdev but its VLAN id could not be read"),
              std::string::npos)
        << said;
}

}  // namespace
}  // namespace ibvcap
