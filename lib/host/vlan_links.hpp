// VLAN netdevs as the kernel's rtnetlink gives them (verbs-mlx5-3.md R2): each
// VLAN's id and the netdev beneath it, readable by any user. The other source,
// /proc/net/vlan/config, is mode 0600 (net/8021q/vlanproc.c vlan_proc_init),
// so the packaged service (User=ibvcap) cannot read it.
//
// An RTM_GETLINK dump answers one RTM_NEWLINK per netdev (net/core/
// rtnetlink.c rtnl_fill_ifinfo): an ifinfomsg (ifi_index), IFLA_IFNAME,
// IFLA_LINK (the lower netdev's index, when it is not the netdev itself), and
// IFLA_LINKINFO, whose IFLA_INFO_KIND is "vlan" for a VLAN and whose
// IFLA_INFO_DATA carries IFLA_VLAN_ID and IFLA_VLAN_PROTOCOL
// (net/8021q/vlan_netlink.c vlan_fill_info).
//
// Hand-written over the kernel's own headers: libmnl or libnl would be a new
// dependency for ~100 lines of attribute walking, and the parser is a pure
// function of the reply's bytes, tested with hostile ones. Nothing in a reply
// is trusted: every length is checked against what is left.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lib/host/devices.hpp"

namespace ibvcap {

struct LinkRecord {
    int index = 0;
    std::string name;
    int lower = 0;      // IFLA_LINK: 0 when absent
    bool vlan = false;  // IFLA_INFO_KIND "vlan"
    std::uint16_t vlan_id = 0;
    std::uint16_t vlan_protocol = 0;  // ETH_P_8021Q or ETH_P_8021AD (host order); 0 unknown
};

// The RTM_NEWLINK records in one or more netlink messages (a dump's reply
// buffers). Stops at NLMSG_DONE or NLMSG_ERROR; skips what does not parse.
std::vector<LinkRecord> parse_link_dump(std::span<const std::byte> reply);

// The VLAN table of the records: VLAN netdev → (id, the netdev beneath it).
// A VLAN whose lower netdev is not among the records is left out.
VlanTable vlan_table_of(const std::vector<LinkRecord>& links);

// The running kernel's links (this network namespace), by an RTM_GETLINK
// dump; nullopt, with `why`, when the dump fails.
std::optional<std::vector<LinkRecord>> dump_links(std::string& why);

}  // namespace ibvcap
