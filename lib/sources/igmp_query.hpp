// The multicast path as a live capture sees it (docs/operations.md, "The
// multicast path"): when each group was joined, and whether an IGMP querier
// was heard on the capture interface during the run.
//
// A switch with IGMP snooping forwards a group to a port only after it heard
// a membership report there, and it keeps its snooping table alive only while
// some querier (a multicast router, or the switch's own snooping querier)
// sends membership queries (RFC 4541, IGMP snooping switches; RFC 3376 §6). A group that
// never arrives on a VLAN without a querier is the classic switch
// configuration problem; with a querier heard, the fault is elsewhere (the
// sender, the route).
//
// The kernel records little of this: /proc/net/igmp's "Querier" column
// (net/ipv4/igmp.c, igmp_mc_seq_show) prints "V1" or "V2" while an IGMPv1 or
// v2 query was heard within the Older Version Querier Present Timeout
// (mr_v1_seen / mr_v2_seen, set in igmp_heard_query), and "V3" otherwise:
// "V3" is printed both when an IGMPv3 querier is present and when there is no
// querier at all, so it cannot tell them apart. Hence a packet socket of our
// own that hears the queries themselves.
#pragma once

#include <linux/filter.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "lib/core/netaddr.hpp"
#include "lib/ledger/mcast_path.hpp"
#include "lib/sources/igmp.hpp"

namespace ibvcap {

// One IGMP membership query (type 0x11), as RFC 2236 §2 and RFC 3376 §4.1
// lay it out after the IPv4 header:
//   0 type 0x11 | 1 Max Resp Time (v2) / Max Resp Code (v3) | 2-3 checksum |
//   4-7 Group Address (0.0.0.0: a general query, sent to 224.0.0.1; else a
//   group-specific query, sent to the group) | v3 only: 8 Resv/S/QRV |
//   9 QQIC | 10-11 Number of Sources N | 12.. N source addresses.
// The version follows from the length and the code (RFC 3376 §7.1, and the
// kernel's igmp_heard_query): 8 octets with code 0: IGMPv1; 8 octets with a
// code: IGMPv2; 12 octets or more: IGMPv3; 9 to 11 octets: not a valid
// query (the kernel ignores it).
struct IgmpQuery {
    int version = 0;                 // 1, 2 or 3
    std::uint32_t source = 0;        // IPv4 source: the querier (host order)
    std::uint32_t destination = 0;   // IPv4 destination (host order)
    std::uint32_t group = 0;         // 0: a general query
    std::uint8_t max_resp_code = 0;  // units of 1/10 s (v3: RFC 3376 §4.1.1 encoding)
    std::uint16_t sources = 0;       // v3: the number of sources
};

enum class IgmpParse {
    query,      // a valid membership query: `out` is filled
    not_query,  // IPv4 but not an IGMP query (a report, a leave, UDP, ...)
    malformed,  // an IGMP query that is cut short, has a bad length or checksum
};

// One IPv4 packet, from its IPv4 header on (what an AF_PACKET SOCK_DGRAM
// socket hands over: net/packet/af_packet.c, packet_rcv, leaves the data at
// the network header for SOCK_DGRAM). `packet` is all that was received;
// nothing in it is trusted: every length is checked against it.
IgmpParse parse_igmp_query(std::span<const std::uint8_t> packet, IgmpQuery& out);

// The classic BPF program the packet socket filters with: it accepts IPv4
// packets of protocol 2 (IGMP), not fragments, whose IGMP type is 0x11
// (membership query), and nothing else. Compiled by libpcap from
// kIgmpQueryFilter for raw IPv4 (DLT_RAW: offsets from the IPv4 header, as
// the SOCK_DGRAM socket sees the packet); libpcap's struct bpf_insn and the
// kernel's struct sock_filter have the same layout. Throws std::runtime_error
// if libpcap refuses it.
inline constexpr const char* kIgmpQueryFilter = "igmp and igmp[0] = 0x11";
std::vector<sock_filter> igmp_query_filter();

// Listens for membership queries on one interface for the run, on a thread
// of its own (never a poll thread): a packet socket (AF_PACKET, SOCK_DGRAM,
// ETH_P_IP) bound to the interface with igmp_query_filter() attached before
// the bind, so nothing else is ever queued on it. Opening needs CAP_NET_RAW;
// without it (or on any other failure) the watch's state is "unknown" with
// the reason, and the run goes on.
class QuerierListener {
  public:
    explicit QuerierListener(std::string interface);
    ~QuerierListener();
    QuerierListener(const QuerierListener&) = delete;
    QuerierListener& operator=(const QuerierListener&) = delete;

    // Starts the thread (a no-op when the socket could not be opened).
    void start();
    // Stops the thread, closes the socket and returns what was heard.
    QuerierWatch finish();
    const std::string& interface() const { return watch_.interface; }

    // One packet as received at `now_ns` (the thread's per-packet step; tests).
    void on_packet(std::span<const std::uint8_t> packet, std::int64_t now_ns);

  private:
    void run();

    QuerierWatch watch_;
    int fd_ = -1;
    std::vector<std::uint8_t> buffer_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
    std::int64_t started_ns_ = 0;
};

// Records each join of the run with the time it succeeded (and each rejoin),
// around the memberships the capture engines make. Any thread.
class JoinLog {
  public:
    // `inner`'s membership for `group` on `interface`, recorded when made.
    std::unique_ptr<GroupMembership> record(std::unique_ptr<GroupMembership> inner,
                                            const Endpoint& group, const std::string& interface);
    // A factory that joins through `inner` and records on `interface`.
    MembershipFactory wrap(MembershipFactory inner, std::string interface);
    std::vector<GroupJoin> joins() const;
    // A recorded membership was rejoined (its port came back up).
    void rejoined(const Endpoint& group, const std::string& interface);

  private:
    mutable std::mutex mu_;
    std::vector<GroupJoin> joins_;
};

// CLOCK_REALTIME now, in ns.
std::int64_t realtime_ns();

}  // namespace ibvcap
