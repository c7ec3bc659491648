// A netdev's driver statistics, the ones `ethtool -S` prints (names chosen by
// the driver, 64-bit values), read through the SIOCETHTOOL ioctl:
// ETHTOOL_GSSET_INFO for the count of the ETH_SS_STATS set (ETHTOOL_GDRVINFO's
// n_stats on kernels without it), ETHTOOL_GSTRINGS for the names,
// ETHTOOL_GSTATS for the values (<linux/ethtool.h>; the kernel side is
// net/ethtool/ioctl.c: ethtool_get_sset_info, ethtool_get_strings,
// ethtool_get_stats).
//
// Why by hand: no Debian library exposes the driver's own statistics. The
// ethtool netlink interface (libmnl/libnl users, `ethtool --json -S`'s newer
// half) answers ETHTOOL_MSG_STATS_GET with the standard groups only
// (net/ethtool/stats.c: "eth-phy", "eth-mac", "eth-ctrl", "rmon": IEEE 802.3
// and RFC 2819 counters filled by get_eth_*_stats/get_rmon_stats). mlx5's
// rx_discards_phy (RFC 2863 ifInDiscards, en_stats.c pport_2863_stats_desc) is
// in none of them: it exists only as a driver string statistic, which netlink
// does not carry (the ethtool program itself reads `-S` through this ioctl).
//
// Errors are returned, never thrown: the reader runs on the housekeeping
// thread once a second and a failing read must not end a capture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ibvcap {

// The seam NicCounters reads through; tests give it a fake.
class EthtoolStatsReader {
  public:
    // values() found that the driver's set of statistics is no longer the
    // one names() returned (channels added, PFC turned on, a driver reload):
    // the indices no longer hold, the names must be read again.
    static constexpr int kSetChanged = -1;

    virtual ~EthtoolStatsReader() = default;
    // The names of `ifname`'s statistics, in the order values() returns them.
    // 0, or an errno: EOPNOTSUPP (the driver has no statistics, e.g. lo),
    // ENODEV (no such interface), EPERM, ...
    virtual int names(const std::string& ifname, std::vector<std::string>& out) = 0;
    // All values, in the order of the last names(); `expected` is the number
    // of names. 0, an errno, or kSetChanged.
    virtual int values(const std::string& ifname, std::size_t expected,
                       std::vector<std::uint64_t>& out) = 0;
};

// The kernel's, through an AF_INET datagram socket opened at the first call:
// the network namespace it is opened in is the one whose interfaces it reads.
class IoctlEthtoolStats final : public EthtoolStatsReader {
  public:
    IoctlEthtoolStats() = default;
    ~IoctlEthtoolStats() override;
    IoctlEthtoolStats(const IoctlEthtoolStats&) = delete;
    IoctlEthtoolStats& operator=(const IoctlEthtoolStats&) = delete;

    int names(const std::string& ifname, std::vector<std::string>& out) override;
    int values(const std::string& ifname, std::size_t expected,
               std::vector<std::uint64_t>& out) override;

  private:
    int open_socket();
    int ioctl(const std::string& ifname, void* data);
    // The number of ETH_SS_STATS statistics now, or -errno.
    long count(const std::string& ifname);

    int fd_ = -1;
    std::vector<std::uint64_t> buffer_;  // struct ethtool_stats + its values
};

// "Operation not supported", "No such device", ... for an errno from the
// readers; "the set of statistics changed" for kSetChanged.
std::string ethtool_error_text(int error);

}  // namespace ibvcap
