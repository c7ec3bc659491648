#include "lib/host/ethtool_stats.hpp"

#include <linux/ethtool.h>
#include <linux/netlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace ibvcap {

namespace {

// Room beyond the count read just before a GSTRINGS or GSTATS. Kernels before
// the fix "ethtool: Avoid overflowing userspace buffer on stats query"
// (net/ethtool/ioctl.c, 2025) copy as many entries as the driver has at the
// moment of the call, whatever the caller's len/n_stats; a set that grew
// between the two calls (channels added) would otherwise be written past the
// buffer. Newer kernels copy nothing and answer 0 entries when the caller's
// count is not the driver's; both show up as a count other than the one asked.
constexpr std::size_t kSlack = 256;

constexpr std::size_t capacity_for(std::size_t n) {
    return 2 * n + kSlack;
}

// Words of 8 bytes that hold `bytes`.
constexpr std::size_t words(std::size_t bytes) {
    return (bytes + sizeof(std::uint64_t) - 1) / sizeof(std::uint64_t);
}

}  // namespace

IoctlEthtoolStats::~IoctlEthtoolStats() {
    if (fd_ >= 0) {
        ::close(fd_);
    }
}

int IoctlEthtoolStats::open_socket() {
    if (fd_ >= 0) {
        return 0;
    }
    // As ethtool(8) does: any socket of the namespace will do for
    // SIOCETHTOOL; AF_INET first, a generic netlink socket without IPv4.
    fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
        fd_ = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
    }
    return fd_ < 0 ? errno : 0;
}

int IoctlEthtoolStats::ioctl(const std::string& ifname, void* data) {
    if (const int err = open_socket()) {
        return err;
    }
    if (ifname.empty() || ifname.size() >= IFNAMSIZ) {
        return ENODEV;
    }
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, ifname.data(), ifname.size());
    ifr.ifr_data = static_cast<char*>(data);
    return ::ioctl(fd_, SIOCETHTOOL, &ifr) == 0 ? 0 : errno;
}

long IoctlEthtoolStats::count(const std::string& ifname) {
    // struct ethtool_sset_info ends in a flexible array: one __u32 per set
    // asked for, here only ETH_SS_STATS.
    std::uint64_t info_words[words(sizeof(ethtool_sset_info) + sizeof(std::uint32_t))] = {};
    auto* info = reinterpret_cast<ethtool_sset_info*>(info_words);
    info->cmd = ETHTOOL_GSSET_INFO;
    info->sset_mask = std::uint64_t{1} << ETH_SS_STATS;
    int err = ioctl(ifname, info);
    if (err == 0) {
        // A driver without the set clears its bit (ethtool_get_sset_info): lo.
        if ((info->sset_mask & (std::uint64_t{1} << ETH_SS_STATS)) == 0 || info->data[0] == 0) {
            return -EOPNOTSUPP;
        }
        return static_cast<long>(info->data[0]);
    }
    if (err != EOPNOTSUPP) {
        return -err;
    }
    // Kernels before ETHTOOL_GSSET_INFO (2.6.33): the driver info's n_stats.
    ethtool_drvinfo drvinfo{};
    drvinfo.cmd = ETHTOOL_GDRVINFO;
    err = ioctl(ifname, &drvinfo);
    if (err != 0) {
        return -err;
    }
    return drvinfo.n_stats == 0 ? -EOPNOTSUPP : static_cast<long>(drvinfo.n_stats);
}

int IoctlEthtoolStats::names(const std::string& ifname, std::vector<std::string>& out) {
    out.clear();
    // A set that changes between the count and the strings is asked again.
    for (int attempt = 0; attempt < 3; ++attempt) {
        const long n = count(ifname);
        if (n < 0) {
            return static_cast<int>(-n);
        }
        const auto want = static_cast<std::size_t>(n);
        const std::size_t capacity = capacity_for(want);
        std::vector<std::uint64_t> buffer(
            words(sizeof(ethtool_gstrings) + capacity * ETH_GSTRING_LEN), 0);
        auto* strings = reinterpret_cast<ethtool_gstrings*>(buffer.data());
        strings->cmd = ETHTOOL_GSTRINGS;
        strings->string_set = ETH_SS_STATS;
        strings->len = static_cast<std::uint32_t>(want);
        if (const int err = ioctl(ifname, strings)) {
            return err;
        }
        if (strings->len != want) {
            continue;
        }
        const auto* text = reinterpret_cast<const char*>(strings->data);
        out.reserve(want);
        for (std::size_t i = 0; i < want; ++i) {
            const char* name = text + i * ETH_GSTRING_LEN;
            out.emplace_back(name, ::strnlen(name, ETH_GSTRING_LEN));  // not 0-ended at 32
        }
        buffer_.assign(words(sizeof(ethtool_stats)) + capacity, 0);
        return 0;
    }
    return EAGAIN;
}

int IoctlEthtoolStats::values(const std::string& ifname, std::size_t expected,
                              std::vector<std::uint64_t>& out) {
    // The count first: on kernels that copy whatever the driver has, a set
    // that grew would be written past the buffer.
    const long n = count(ifname);
    if (n < 0) {
        return static_cast<int>(-n);
    }
    if (static_cast<std::size_t>(n) != expected) {
        return kSetChanged;
    }
    const std::size_t header = words(sizeof(ethtool_stats));
    if (buffer_.size() < header + capacity_for(expected)) {
        buffer_.assign(header + capacity_for(expected), 0);
    }
    auto* stats = reinterpret_cast<ethtool_stats*>(buffer_.data());
    stats->cmd = ETHTOOL_GSTATS;
    stats->n_stats = static_cast<std::uint32_t>(expected);
    if (const int err = ioctl(ifname, stats)) {
        return err;
    }
    if (stats->n_stats != expected) {
        return kSetChanged;
    }
    out.assign(buffer_.begin() + static_cast<std::ptrdiff_t>(header),
               buffer_.begin() + static_cast<std::ptrdiff_t>(header + expected));
    return 0;
}

std::string ethtool_error_text(int error) {
    if (error == EthtoolStatsReader::kSetChanged) {
        return "the set of statistics changed";
    }
    return std::error_code(error, std::generic_category()).message();
}

}  // namespace ibvcap
