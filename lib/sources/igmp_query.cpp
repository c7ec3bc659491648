#include "lib/sources/igmp_query.hpp"

#include <fmt/format.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pcap/pcap.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace ibvcap {

namespace {

std::uint16_t be16(std::span<const std::uint8_t> p, std::size_t at) {
    return static_cast<std::uint16_t>(p[at] << 8 | p[at + 1]);
}
std::uint32_t be32(std::span<const std::uint8_t> p, std::size_t at) {
    return std::uint32_t{p[at]} << 24 | std::uint32_t{p[at + 1]} << 16 |
           std::uint32_t{p[at + 2]} << 8 | std::uint32_t{p[at + 3]};
}

// The Internet checksum (RFC 1071) over the IGMP message: 0 when it is right.
// Hand-written: 10 lines, and no Debian library offers it on its own.
std::uint16_t internet_checksum(std::span<const std::uint8_t> p) {
    std::uint32_t sum = 0;
    std::size_t i = 0;
    for (; i + 1 < p.size(); i += 2) {
        sum += be16(p, i);
    }
    if (i < p.size()) {
        sum += std::uint32_t{p[i]} << 8;
    }
    while (sum >> 16) {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    return static_cast<std::uint16_t>(~sum & 0xffff);
}

constexpr std::uint8_t kIgmpProtocol = 2;
constexpr std::uint8_t kMembershipQuery = 0x11;

}  // namespace

IgmpParse parse_igmp_query(std::span<const std::uint8_t> packet, IgmpQuery& out) {
    // The IPv4 header (RFC 791): version, IHL, total length, fragment, protocol.
    if (packet.size() < 20 || (packet[0] >> 4) != 4) {
        return IgmpParse::not_query;
    }
    const std::size_t ihl = std::size_t{packet[0] & 0x0fu} * 4;
    if (packet[9] != kIgmpProtocol) {
        return IgmpParse::not_query;
    }
    if ((be16(packet, 6) & 0x1fff) != 0 || (be16(packet, 6) & 0x2000) != 0) {
        return IgmpParse::not_query;  // a fragment: the kernel reassembles before igmp_rcv
    }
    const std::size_t total = be16(packet, 2);
    if (ihl < 20 || total < ihl || total > packet.size() || ihl + 1 > total) {
        // The type cannot be read, or the packet is not all there: if it
        // claims to be a query, it is a malformed one.
        return ihl >= 20 && ihl < packet.size() && packet[ihl] == kMembershipQuery
                   ? IgmpParse::malformed
                   : IgmpParse::not_query;
    }
    const auto igmp = packet.subspan(ihl, total - ihl);
    if (igmp[0] != kMembershipQuery) {
        return IgmpParse::not_query;
    }
    if (internet_checksum(packet.first(ihl)) != 0) {
        return IgmpParse::malformed;  // a damaged IPv4 header: ip_rcv drops it (ip_fast_csum)
    }
    // Lengths as the kernel's igmp_heard_query takes them (net/ipv4/igmp.c):
    // 8: v1 or v2; 9 to 11: ignored; 12 and more: v3, whose source list must
    // be all there.
    if (igmp.size() < 8 || (igmp.size() > 8 && igmp.size() < 12)) {
        return IgmpParse::malformed;
    }
    std::uint16_t sources = 0;
    if (igmp.size() >= 12) {
        sources = be16(igmp, 10);
        if (12 + std::size_t{sources} * 4 > igmp.size()) {
            return IgmpParse::malformed;
        }
    }
    if (internet_checksum(igmp) != 0) {
        return IgmpParse::malformed;  // igmp_rcv drops it (skb_checksum_simple_validate)
    }
    out = IgmpQuery{};
    out.version = igmp.size() == 8 ? (igmp[1] == 0 ? 1 : 2) : 3;
    out.source = be32(packet, 12);
    out.destination = be32(packet, 16);
    out.group = be32(igmp, 4);
    out.max_resp_code = igmp[1];
    out.sources = sources;
    return IgmpParse::query;
}

std::vector<sock_filter> igmp_query_filter() {
    static_assert(sizeof(bpf_insn) == sizeof(sock_filter));
    struct Dead {
        pcap_t* p;
        ~Dead() { pcap_close(p); }
    } dead{pcap_open_dead(DLT_RAW, 65535)};
    if (dead.p == nullptr) {
        throw std::runtime_error("cannot compile the IGMP query filter: libpcap is out of memory");
    }
    bpf_program program{};
    if (pcap_compile(dead.p, &program, kIgmpQueryFilter, 1, PCAP_NETMASK_UNKNOWN) != 0) {
        throw std::runtime_error(fmt::format("cannot compile the IGMP query filter \"{}\": {}",
                                             kIgmpQueryFilter, pcap_geterr(dead.p)));
    }
    std::vector<sock_filter> out(program.bf_len);
    for (std::size_t i = 0; i < out.size(); ++i) {
        const bpf_insn& in = program.bf_insns[i];
        out[i] = sock_filter{in.code, in.jt, in.jf, in.k};
    }
    pcap_freecode(&program);
    return out;
}

std::int64_t realtime_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

QuerierListener::QuerierListener(std::string interface) {
    watch_.interface = std::move(interface);
    const std::string& ifname = watch_.interface;
    const unsigned index = ::if_nametoindex(ifname.c_str());
    if (index == 0) {
        watch_.why = fmt::format("no interface named {}", ifname);
        return;
    }
    // Protocol 0: nothing is queued until the bind below, which comes after
    // the filter is attached (packet(7)).
    const int fd = ::socket(AF_PACKET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        const int err = errno;
        watch_.why =
            err == EPERM || err == EACCES
                ? fmt::format(
                      "no CAP_NET_RAW to open a packet socket on {} (run as root "
                      "or give ibvcap cap_net_raw)",
                      ifname)
                : fmt::format("cannot open a packet socket on {}: {}", ifname, std::strerror(err));
        return;
    }
    const auto fail = [&](const char* what) {
        watch_.why = fmt::format("cannot {} on {}: {}", what, ifname, std::strerror(errno));
        ::close(fd);
    };
    std::vector<sock_filter> filter;
    try {
        filter = igmp_query_filter();
    } catch (const std::exception& e) {
        watch_.why = e.what();
        ::close(fd);
        return;
    }
    sock_fprog program{static_cast<unsigned short>(filter.size()), filter.data()};
    if (::setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &program, sizeof program) != 0) {
        fail("attach the IGMP query filter");
        return;
    }
    sockaddr_ll addr{};
    addr.sll_family = AF_PACKET;
    addr.sll_protocol = htons(ETH_P_IP);
    addr.sll_ifindex = static_cast<int>(index);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
        fail("bind a packet socket");
        return;
    }
    fd_ = fd;
    // Once, here: an IPv4 packet of any size the link carries.
    buffer_.resize(65536);
    watch_.state = QuerierWatch::State::not_heard;
}

QuerierListener::~QuerierListener() {
    (void)finish();
}

void QuerierListener::start() {
    started_ns_ = realtime_ns();
    if (fd_ >= 0 && !thread_.joinable()) {
        thread_ = std::thread([this] { run(); });
    }
}

void QuerierListener::run() {
    while (!stop_.load(std::memory_order_relaxed)) {
        pollfd pfd{fd_, POLLIN, 0};
        if (::poll(&pfd, 1, 200) <= 0) {
            continue;  // the timeout, or EINTR: look at the stop flag
        }
        // Everything queued now, then back to the flag.
        for (int i = 0; i < 64; ++i) {
            const ssize_t n = ::recv(fd_, buffer_.data(), buffer_.size(), MSG_TRUNC);
            if (n < 0) {
                break;  // EAGAIN: drained (or an error: the next poll says)
            }
            const auto got = std::min(static_cast<std::size_t>(n), buffer_.size());
            on_packet(std::span<const std::uint8_t>(buffer_.data(), got), realtime_ns());
        }
    }
}

void QuerierListener::on_packet(std::span<const std::uint8_t> packet, std::int64_t now_ns) {
    IgmpQuery q;
    switch (parse_igmp_query(packet, q)) {
        case IgmpParse::query:
            ++watch_.queries;
            ++(q.group == 0 ? watch_.general_queries : watch_.group_queries);
            watch_.last_querier = q.source;
            watch_.last_version = q.version;
            watch_.last_query_ns = now_ns;
            watch_.state = QuerierWatch::State::heard;
            break;
        case IgmpParse::malformed:
            ++watch_.malformed;
            break;
        case IgmpParse::not_query:
            break;
    }
}

QuerierWatch QuerierListener::finish() {
    stop_.store(true, std::memory_order_relaxed);
    if (thread_.joinable()) {
        thread_.join();
    }
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
        watch_.listened_s = started_ns_ > 0 ? double(realtime_ns() - started_ns_) / 1e9 : 0.0;
    }
    return watch_;
}

namespace {
class RecordedMembership final : public GroupMembership {
  public:
    RecordedMembership(std::unique_ptr<GroupMembership> inner, JoinLog& log, Endpoint group,
                       std::string interface)
        : inner_(std::move(inner)), log_(log), group_(group), interface_(std::move(interface)) {}
    void rejoin() override;

  private:
    std::unique_ptr<GroupMembership> inner_;
    JoinLog& log_;
    Endpoint group_;
    std::string interface_;
};
}  // namespace

std::unique_ptr<GroupMembership> JoinLog::record(std::unique_ptr<GroupMembership> inner,
                                                 const Endpoint& group,
                                                 const std::string& interface) {
    {
        const std::lock_guard lock(mu_);
        joins_.push_back({group, interface, realtime_ns(), 0});
    }
    if (!inner) {
        return inner;
    }
    return std::make_unique<RecordedMembership>(std::move(inner), *this, group, interface);
}

MembershipFactory JoinLog::wrap(MembershipFactory inner, std::string interface) {
    return [this, inner = std::move(inner), interface = std::move(interface)](const Endpoint& g) {
        return record(inner(g), g, interface);
    };
}

std::vector<GroupJoin> JoinLog::joins() const {
    const std::lock_guard lock(mu_);
    return joins_;
}

void JoinLog::rejoined(const Endpoint& group, const std::string& interface) {
    const std::lock_guard lock(mu_);
    for (auto& j : joins_) {
        if (j.group == group && j.interface == interface) {
            ++j.rejoins;
        }
    }
}

void RecordedMembership::rejoin() {
    inner_->rejoin();
    log_.rejoined(group_, interface_);
}

}  // namespace ibvcap
