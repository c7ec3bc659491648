#include "lib/sources/igmp.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "lib/core/netaddr.hpp"
#include "lib/host/devices.hpp"

namespace ibvcap {

namespace {

// The fix for a failed join, by errno.
std::string join_hint(int err, const std::string& interface, std::uint32_t address) {
    switch (err) {
        case ENODEV:
        case ENXIO:
            return fmt::format(
                "interface {0} is gone or has no IPv4 configuration (ip link show {0}; ip addr)",
                interface);
        case EADDRNOTAVAIL:
            return fmt::format("address {} is not on interface {} (ip -4 addr show {})",
                               format_ipv4(address), interface, interface);
        case ENOBUFS:
            return "the kernel's membership limit was reached (sysctl "
                   "net.ipv4.igmp_max_memberships)";
        case -ENOBUFS:  // from MCAST_JOIN_SOURCE_GROUP (source_hint)
            return "the kernel's limit on sources per socket was reached (sysctl "
                   "net.ipv4.igmp_max_msf; ibvcap joins at most that many per socket)";
        case EMFILE:
        case ENFILE:
            return "out of file descriptors (raise ulimit -n)";
        case ENOMEM:
            return "out of kernel memory";
        case EPERM:
        case EACCES:
            return "not permitted (a security policy blocks multicast joins)";
        default:
            return "unexpected error";
    }
}

[[noreturn]] void throw_join_error(int err, std::uint32_t group, const std::string& interface,
                                   std::uint32_t address) {
    throw std::system_error(err, std::generic_category(),
                            fmt::format("cannot join {} on {}: {}", format_ipv4(group), interface,
                                        join_hint(err, interface, address)));
}

ip_mreqn make_mreq(std::uint32_t group, std::uint32_t address, int ifindex) {
    ip_mreqn mreq{};
    mreq.imr_multiaddr.s_addr = htonl(group);
    mreq.imr_address.s_addr = htonl(address);
    mreq.imr_ifindex = ifindex;
    return mreq;
}

// A source-specific join (RFC 3678 §5.2, MCAST_JOIN_SOURCE_GROUP): the kernel
// sends IGMPv3 reports that INCLUDE only these sources (net/ipv4/igmp.c
// ip_mc_source), as a PIM-SSM network needs.
group_source_req make_source_req(std::uint32_t group, std::uint32_t source, int ifindex) {
    group_source_req req{};
    req.gsr_interface = static_cast<std::uint32_t>(ifindex);
    auto* g = reinterpret_cast<sockaddr_in*>(&req.gsr_group);
    g->sin_family = AF_INET;
    g->sin_addr.s_addr = htonl(group);
    auto* s = reinterpret_cast<sockaddr_in*>(&req.gsr_source);
    s->sin_family = AF_INET;
    s->sin_addr.s_addr = htonl(source);
    return req;
}

}  // namespace

MulticastMembership::MulticastMembership(std::uint32_t group, std::string interface,
                                         std::uint32_t interface_address,
                                         std::vector<std::uint32_t> sources)
    : group_(group),
      interface_(std::move(interface)),
      interface_address_(interface_address),
      sources_(std::move(sources)) {
    if (!is_multicast(group_)) {
        throw std::invalid_argument(fmt::format(
            "cannot join {}: not a multicast address (224.0.0.0/4)", format_ipv4(group_)));
    }
}

MulticastMembership::MulticastMembership(std::uint32_t group, const NetInterface& interface)
    : MulticastMembership(group, interface.name,
                          interface.ipv4.empty() ? 0 : interface.ipv4.front()) {}

MulticastMembership::~MulticastMembership() {
    leave();
}

MulticastMembership::MulticastMembership(MulticastMembership&& other) noexcept
    : group_(other.group_),
      interface_(std::move(other.interface_)),
      interface_address_(other.interface_address_),
      sources_(std::move(other.sources_)),
      ifindex_(other.ifindex_),
      fds_(std::exchange(other.fds_, {})) {}

MulticastMembership& MulticastMembership::operator=(MulticastMembership&& other) noexcept {
    if (this != &other) {
        leave();
        group_ = other.group_;
        interface_ = std::move(other.interface_);
        sources_ = std::move(other.sources_);
        interface_address_ = other.interface_address_;
        ifindex_ = other.ifindex_;
        fds_ = std::exchange(other.fds_, {});
    }
    return *this;
}

void MulticastMembership::join() {
    if (joined()) {
        return;
    }
    const unsigned index = ::if_nametoindex(interface_.c_str());
    if (index == 0) {
        throw std::system_error(
            ENODEV, std::generic_category(),
            fmt::format("cannot join {} on {}: no interface named {}; it is gone or was never "
                        "there (ip link)",
                        format_ipv4(group_), interface_, interface_));
    }
    ifindex_ = static_cast<int>(index);
    const auto open_socket = [this] {
        const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            const int err = errno;
            leave();  // the sockets opened so far
            throw_join_error(err, group_, interface_, interface_address_);
        }
        fds_.push_back(fd);
        return fd;
    };
    if (sources_.empty()) {
        const int fd = open_socket();
        const ip_mreqn mreq = make_mreq(group_, interface_address_, ifindex_);
        if (::setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mreq, sizeof mreq) != 0) {
            const int err = errno;
            leave();
            throw_join_error(err, group_, interface_, interface_address_);
        }
        return;
    }
    // At most igmp_max_msf sources per socket: read now, in the namespace
    // the capture runs in (the sysctl is per network namespace).
    const std::size_t per_socket = igmp_max_msf();
    int fd = -1;
    for (std::size_t i = 0; i < sources_.size(); ++i) {
        if (i % per_socket == 0) {
            fd = open_socket();
        }
        const group_source_req req = make_source_req(group_, sources_[i], ifindex_);
        if (::setsockopt(fd, IPPROTO_IP, MCAST_JOIN_SOURCE_GROUP, &req, sizeof req) != 0) {
            const int err = errno;
            leave();  // drops the sources joined so far
            throw std::system_error(
                err, std::generic_category(),
                fmt::format(
                    "cannot join {} from source {} on {}: {}", format_ipv4(group_),
                    format_ipv4(sources_[i]), interface_,
                    join_hint(err == ENOBUFS ? -ENOBUFS : err, interface_, interface_address_)));
        }
    }
}

void MulticastMembership::leave() noexcept {
    if (!joined()) {
        return;
    }
    // Closing the sockets would drop the membership too; the explicit drop
    // makes the kernel send the IGMP leave now. Its errors (the interface is
    // gone, so the membership went with it) change nothing. A join that
    // failed part-way leaves here too: a drop of what was never joined only
    // fails (EADDRNOTAVAIL).
    const std::size_t per_socket = sources_.empty() ? 1 : igmp_max_msf();
    for (std::size_t k = 0; k < fds_.size(); ++k) {
        if (sources_.empty()) {
            const ip_mreqn mreq = make_mreq(group_, interface_address_, ifindex_);
            (void)::setsockopt(fds_[k], IPPROTO_IP, IP_DROP_MEMBERSHIP, &mreq, sizeof mreq);
        }
        for (std::size_t i = k * per_socket; i < sources_.size() && i < (k + 1) * per_socket; ++i) {
            const group_source_req req = make_source_req(group_, sources_[i], ifindex_);
            (void)::setsockopt(fds_[k], IPPROTO_IP, MCAST_LEAVE_SOURCE_GROUP, &req, sizeof req);
        }
        ::close(fds_[k]);
    }
    fds_.clear();
}

std::size_t igmp_max_msf(const std::string& proc) {
    // The kernel's own default when the file cannot be read (net/ipv4/
    // igmp.c: sysctl_igmp_max_msf = IP_MAX_MSF, 10).
    std::size_t value = 10;
    if (FILE* f = std::fopen(proc.c_str(), "re")) {
        long v = 0;
        if (std::fscanf(f, "%ld", &v) == 1 && v >= 1) {
            value = static_cast<std::size_t>(v);
        }
        std::fclose(f);
    }
    return value;
}

void MulticastMembership::rejoin() {
    leave();
    join();
}

namespace {
class KernelMembership final : public GroupMembership {
  public:
    KernelMembership(const Endpoint& group, const std::string& interface, std::uint32_t address,
                     std::vector<std::uint32_t> sources)
        : membership_(group.ip, interface, address, std::move(sources)) {
        membership_.join();
    }
    void rejoin() override { membership_.rejoin(); }

  private:
    MulticastMembership membership_;
};
}  // namespace

std::unique_ptr<GroupMembership> kernel_membership(const Endpoint& group,
                                                   const std::string& interface,
                                                   std::uint32_t address,
                                                   const std::vector<std::uint32_t>* sources) {
    return std::make_unique<KernelMembership>(
        group, interface, address, sources != nullptr ? *sources : std::vector<std::uint32_t>{});
}

}  // namespace ibvcap
