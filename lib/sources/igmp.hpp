// IGMP membership of one multicast group on one interface, held for the whole
// run (docs/architecture.md, "Setup and teardown order"). The NIC never traps IGMP: a kernel UDP
// socket joins the group so that the kernel sends the reports and answers the queries, and the
// switch keeps forwarding the group to this port.
//
// The socket is never bound, so it has no port and receives nothing. With the
// verbs source the NIC's flow rule steers the group's packets to the raw QP,
// so the kernel does not see them at all; with the pcap source the kernel sees
// them, finds no socket for the port and drops them after libpcap has its copy.
//
// One socket per membership: the kernel's limit on memberships per socket
// (net.ipv4.igmp_max_memberships, 20 by default) then never applies. A
// source-specific group takes as many sockets as its sources need: the kernel
// takes at most net.ipv4.igmp_max_msf sources (10 by default) per socket and
// group (net/ipv4/igmp.c ip_mc_source: ENOBUFS once sl_count reaches it), and
// the interface's filter is the union of its sockets' INCLUDE lists
// (ip_mc_add_src counts each source per socket in sfcount[MCAST_INCLUDE]),
// so the IGMPv3 report names every source (verbs-mlx5-3.md R4).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lib/core/netaddr.hpp"

namespace ibvcap {

struct NetInterface;

class MulticastMembership {
  public:
    // Nothing is joined until join(). `interface_address` (host byte order) is
    // the interface's IPv4 address, 0 to let the kernel pick by index. Throws
    // std::invalid_argument when `group` is not a multicast address.
    // With `sources`, a source-specific join of each (MCAST_JOIN_SOURCE_GROUP,
    // IGMPv3 INCLUDE reports) instead of the any-source one.
    MulticastMembership(std::uint32_t group, std::string interface,
                        std::uint32_t interface_address = 0,
                        std::vector<std::uint32_t> sources = {});
    // The interface's name and first IPv4 address.
    MulticastMembership(std::uint32_t group, const NetInterface& interface);
    ~MulticastMembership();  // leave()

    MulticastMembership(const MulticastMembership&) = delete;
    MulticastMembership& operator=(const MulticastMembership&) = delete;
    MulticastMembership(MulticastMembership&& other) noexcept;
    MulticastMembership& operator=(MulticastMembership&& other) noexcept;

    // Join the group (IP_ADD_MEMBERSHIP on a new socket; the interface index
    // is looked up now). No-op when already joined. Throws std::system_error
    // with a one-line message naming the group, the interface and the fix.
    void join();
    // Drop the membership (IP_DROP_MEMBERSHIP) and close the socket. Idempotent;
    // never throws (an interface that is gone has dropped it already).
    void leave() noexcept;
    // leave() then join(): after a port came back up, or the interface was
    // re-created, so the switch hears a fresh report.
    void rejoin();
    bool joined() const noexcept { return !fds_.empty(); }
    // The sockets holding the membership (one, or one per igmp_max_msf
    // sources).
    std::size_t sockets() const noexcept { return fds_.size(); }

    std::uint32_t group() const noexcept { return group_; }
    const std::string& interface() const noexcept { return interface_; }

  private:
    std::uint32_t group_;
    std::string interface_;
    std::uint32_t interface_address_;
    std::vector<std::uint32_t> sources_;  // empty: any source
    int ifindex_ = 0;
    std::vector<int> fds_;
};

// The most sources one socket may join per group in this network namespace:
// /proc/sys/net/ipv4/igmp_max_msf (`proc` for tests), 10 (the kernel's
// default, net/ipv4/igmp.c) when it cannot be read, at least 1.
std::size_t igmp_max_msf(const std::string& proc = "/proc/sys/net/ipv4/igmp_max_msf");

// One IGMP membership held for a run, as the capture engines see it: joined
// when made, left when destroyed. Production: a kernel socket
// (kernel_membership); tests: a recording fake.
class GroupMembership {
  public:
    virtual ~GroupMembership() = default;
    virtual void rejoin() = 0;
};
using MembershipFactory = std::function<std::unique_ptr<GroupMembership>(const Endpoint&)>;

// A MulticastMembership on `interface` (with its IPv4 `address`, host order),
// joined now: source-specific when `sources` names some (sources_for() of the
// run's GROUP:PORT@SOURCE filters). Throws what MulticastMembership::join throws.
std::unique_ptr<GroupMembership> kernel_membership(
    const Endpoint& group, const std::string& interface, std::uint32_t address,
    const std::vector<std::uint32_t>* sources = nullptr);

}  // namespace ibvcap
