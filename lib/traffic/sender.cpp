#include "lib/traffic/sender.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "formats/codif.hpp"
#include "formats/packet.hpp"

namespace ibvcap {

namespace {

// sendmmsg(2) sends at most UIO_MAXIOV (1024) messages per call.
constexpr std::size_t kMaxBatch = 1024;
// What the socket asks for as send buffer (the kernel doubles it, socket(7)).
constexpr int kSendBufferBytes = 16 << 20;
// How long a full transmit queue (ENOBUFS) is waited out before the run fails.
constexpr std::uint64_t kNoBufferLimitNs = 5'000'000'000;
constexpr std::uint64_t kNoBufferPauseNs = 50'000;

// A control message buffer holding one IP_PKTINFO, aligned as cmsg(3) wants.
struct PktinfoControl {
    alignas(cmsghdr) std::array<unsigned char, CMSG_SPACE(sizeof(in_pktinfo))> bytes{};
};

class Fd {
  public:
    explicit Fd(int fd) : fd_(fd) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    int get() const { return fd_; }

  private:
    int fd_;
};

std::uint64_t monotonic_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

void sleep_until_ns(std::uint64_t when_ns) {
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(when_ns / 1'000'000'000u);
    ts.tv_nsec = static_cast<long>(when_ns % 1'000'000'000u);
    // An absolute deadline survives EINTR unchanged (clock_nanosleep(2)).
    while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
}

sockaddr_in ipv4_address(std::uint32_t ip, std::uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(ip);
    return a;
}

template <typename T>
void set_option(int fd, int level, int name, const T& value, const char* what) {
    if (::setsockopt(fd, level, name, &value, sizeof value) != 0) {
        throw std::runtime_error(
            fmt::format("cannot set {} on the sending socket: {}", what, std::strerror(errno)));
    }
}

std::string not_local_message(std::uint32_t antenna, const std::string& interface) {
    const std::string a = format_ipv4(antenna);
    return fmt::format(
        "antenna source {} is not an address of this host: add it (ip addr add {}/32 dev {}) or "
        "use scripts/testbed.sh",
        a, a, interface);
}

// Whether the kernel takes `ip` as a local source address: bind(2) refuses a
// non-local one with EADDRNOTAVAIL (ip(7)), the same test the output route
// lookup makes for an IP_PKTINFO source (which fails with ENETUNREACH or
// EINVAL). With net.ipv4.ip_nonlocal_bind=1 the probe passes and the send
// itself reports it.
bool address_is_local(std::uint32_t ip) {
    const Fd probe(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (probe.get() < 0) {
        throw std::runtime_error(fmt::format("cannot open a UDP socket: {}", std::strerror(errno)));
    }
    const sockaddr_in a = ipv4_address(ip, 0);
    if (::bind(probe.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) {
        return true;
    }
    if (errno == EADDRNOTAVAIL) {
        return false;
    }
    throw std::runtime_error(fmt::format("cannot check antenna source {}: bind: {}",
                                         format_ipv4(ip), std::strerror(errno)));
}

}  // namespace

std::uint64_t due_ns(std::uint64_t start_ns, std::uint64_t sent, double rate_pps) {
    if (!(rate_pps > 0)) {
        return start_ns;
    }
    // long double (64-bit mantissa on x86-64) keeps whole nanoseconds exact for
    // runs of days at any rate.
    const long double offset =
        static_cast<long double>(sent) * 1e9L / static_cast<long double>(rate_pps);
    return start_ns + static_cast<std::uint64_t>(offset);
}

std::size_t paced_batch(std::size_t batch, double rate_pps) {
    batch = std::clamp<std::size_t>(batch, 1, kMaxBatch);
    if (!(rate_pps > 0)) {
        return batch;
    }
    const double per_ms = std::floor(rate_pps / 1000.0);
    if (per_ms >= static_cast<double>(batch)) {
        return batch;
    }
    return std::max<std::size_t>(1, static_cast<std::size_t>(per_ms));
}

SendResult send_generated(Generator& generator, const SendOptions& options,
                          const std::atomic<bool>& stop) {
    const GeneratorConfig& config = generator.config();
    if (config.vlan_id >= 0) {
        throw std::invalid_argument(
            "a UDP socket cannot send VLAN-tagged frames: leave out --vlan and send through a "
            "VLAN netdev (-i IF.ID)");
    }
    if (!std::isfinite(options.rate_pps) || options.rate_pps < 0) {
        throw std::invalid_argument(fmt::format(
            "--rate {} must be a packet rate >= 0 (0: as fast as possible)", options.rate_pps));
    }
    if (!std::isfinite(options.duration_s) || options.duration_s < 0) {
        throw std::invalid_argument(
            fmt::format("--duration {} must be >= 0 seconds", options.duration_s));
    }
    if (options.ttl < 0 || options.ttl > 255) {
        throw std::invalid_argument(fmt::format("TTL {} must be 0-255", options.ttl));
    }
    if (options.batch == 0) {
        throw std::invalid_argument("the send batch must hold at least one datagram");
    }
    const unsigned ifindex = ::if_nametoindex(options.interface.c_str());
    if (ifindex == 0) {
        throw std::runtime_error(fmt::format(
            "no network interface '{}' to send from (see ibvcap devices)", options.interface));
    }

    const Fd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (sock.get() < 0) {
        throw std::runtime_error(fmt::format("cannot open a UDP socket: {}", std::strerror(errno)));
    }
    const int fd = sock.get();
    // ip(7): the interface by index; imr_address stays 0 (any of its addresses).
    ip_mreqn mif{};
    mif.imr_ifindex = static_cast<int>(ifindex);
    set_option(fd, IPPROTO_IP, IP_MULTICAST_IF, mif, "IP_MULTICAST_IF");
    set_option(fd, IPPROTO_IP, IP_MULTICAST_TTL, options.ttl, "IP_MULTICAST_TTL");
    set_option(fd, IPPROTO_IP, IP_MULTICAST_LOOP, options.loop ? 1 : 0, "IP_MULTICAST_LOOP");
    // The socket is never read: keep other sockets' groups out of its queue.
    set_option(fd, IPPROTO_IP, IP_MULTICAST_ALL, 0, "IP_MULTICAST_ALL");
    // Without IP_RECVERR the kernel turns ENOBUFS (a full device queue) into
    // success and drops the datagram (ip(7) IP_RECVERR, udp_sendmsg): a
    // silent loss the sender could not retry.
    set_option(fd, IPPROTO_IP, IP_RECVERR, 1, "IP_RECVERR");
    // DF on every datagram, as in the generated frames; a datagram larger
    // than the interface MTU fails with EMSGSIZE instead of going out as
    // fragments (ip(7) IP_MTU_DISCOVER), which a stream's receiver cannot use.
    set_option(fd, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO, "IP_MTU_DISCOVER");
    // UDP checksum 0, as in the generated frames and CODIF senders (socket(7)
    // SO_NO_CHECK; allowed for IPv4 by RFC 768).
    set_option(fd, SOL_SOCKET, SO_NO_CHECK, 1, "SO_NO_CHECK");
    // socket(7): SO_SNDBUFFORCE (CAP_NET_ADMIN) passes net.core.wmem_max;
    // otherwise SO_SNDBUF, which the kernel caps at wmem_max.
    if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &kSendBufferBytes, sizeof kSendBufferBytes) !=
        0) {
        set_option(fd, SOL_SOCKET, SO_SNDBUF, kSendBufferBytes, "SO_SNDBUF");
    }
    // The generator's UDP source port, so captured frames carry it as the
    // generated ones do. SO_REUSEADDR lets several senders (one per interface)
    // share it; the socket is never read, so sharing costs nothing.
    set_option(fd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR");
    const sockaddr_in local = ipv4_address(INADDR_ANY, config.src_port);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0) {
        throw std::runtime_error(fmt::format("cannot bind the sending socket to UDP port {}: {}",
                                             config.src_port, std::strerror(errno)));
    }
    // Refuse a non-local antenna before anything is sent.
    for (const std::uint32_t antenna : config.antennas) {
        if (!address_is_local(antenna)) {
            throw std::runtime_error(not_local_message(antenna, options.interface));
        }
    }

    // Everything per batch is allocated here, once: the generator reuses its
    // frame buffer on every next(), so each payload is copied into a slot.
    const std::size_t offset = kPlainUdpPayloadOffset;
    const std::size_t datagram = config.frame_bytes() - offset;
    const std::size_t batch = paced_batch(options.batch, options.rate_pps);
    std::vector<std::uint8_t> payloads(batch * datagram);
    std::vector<mmsghdr> messages(batch);
    std::vector<iovec> iovs(batch);
    std::vector<sockaddr_in> destinations(batch);
    std::vector<PktinfoControl> controls(batch);
    std::vector<std::size_t> streams(batch);  // for error messages
    cmsghdr pktinfo_header{};
    pktinfo_header.cmsg_len = CMSG_LEN(sizeof(in_pktinfo));
    pktinfo_header.cmsg_level = IPPROTO_IP;
    pktinfo_header.cmsg_type = IP_PKTINFO;
    constexpr std::size_t kPktinfoData = CMSG_LEN(0);  // where CMSG_DATA points
    for (std::size_t i = 0; i < batch; ++i) {
        iovs[i].iov_base = payloads.data() + i * datagram;
        iovs[i].iov_len = datagram;
        std::memcpy(controls[i].bytes.data(), &pktinfo_header, sizeof pktinfo_header);
        msghdr& h = messages[i].msg_hdr;
        h.msg_name = &destinations[i];
        h.msg_namelen = sizeof(sockaddr_in);
        h.msg_iov = &iovs[i];
        h.msg_iovlen = 1;
        h.msg_control = controls[i].bytes.data();
        h.msg_controllen = controls[i].bytes.size();
    }

    auto fail_at = [&](std::size_t i, int error) -> std::runtime_error {
        const StreamTruth& t = generator.truth()[streams[i]];
        if (error == EMSGSIZE) {
            return std::runtime_error(fmt::format(
                "a {}-byte IPv4 datagram does not fit the MTU of {}: lower --payload or raise "
                "the MTU (ip link set {} mtu 9000)",
                datagram + kIpv4MinHeaderBytes + kUdpHeaderBytes, options.interface,
                options.interface));
        }
        if (error == ENETUNREACH || error == EADDRNOTAVAIL || error == EINVAL) {
            return std::runtime_error(fmt::format(
                "{} ({})", not_local_message(t.antenna, options.interface), std::strerror(error)));
        }
        return std::runtime_error(fmt::format("cannot send to {} from {} on {}: {}",
                                              t.group.to_string(), format_ipv4(t.antenna),
                                              options.interface, std::strerror(error)));
    };
    // Send messages [0, n): a partial sendmmsg is continued from the first
    // message not sent; nothing is ever skipped.
    auto send_all = [&](std::size_t n) {
        std::size_t done = 0;
        std::uint64_t no_buffer_since = 0;
        while (done < n) {
            const int sent =
                ::sendmmsg(fd, messages.data() + done, static_cast<unsigned>(n - done), 0);
            if (sent > 0) {
                done += static_cast<std::size_t>(sent);
                no_buffer_since = 0;
                continue;
            }
            const int error = sent < 0 ? errno : EAGAIN;
            if (error == EINTR) {
                continue;
            }
            if (error == EAGAIN || error == EWOULDBLOCK) {
                pollfd p{fd, POLLOUT, 0};
                (void)::poll(&p, 1, 100);
                continue;
            }
            if (error == ENOBUFS) {
                // The device queue is full (the datagram was not queued):
                // wait briefly and send the same datagram again.
                const std::uint64_t now = monotonic_ns();
                if (no_buffer_since == 0) {
                    no_buffer_since = now;
                } else if (now - no_buffer_since > kNoBufferLimitNs) {
                    throw std::runtime_error(
                        fmt::format("the transmit queue of {} stayed full for {} s (ENOBUFS)",
                                    options.interface, kNoBufferLimitNs / 1'000'000'000u));
                }
                sleep_until_ns(now + kNoBufferPauseNs);
                continue;
            }
            throw fail_at(done, error);
        }
    };

    SendResult result;
    const std::uint64_t start = monotonic_ns();
    // 0: no deadline (also for durations past a century, which would overflow).
    const std::uint64_t deadline =
        options.duration_s > 0 && options.duration_s < 3e9
            ? start + static_cast<std::uint64_t>(std::llround(options.duration_s * 1e9))
            : 0;
    GeneratedFrame frame;
    bool finished = false;
    while (!finished) {
        const bool want_stop =
            stop.load(std::memory_order_relaxed) || (deadline != 0 && monotonic_ns() >= deadline);
        std::size_t n = 0;
        while (n < batch) {
            if (want_stop && generator.at_slot_boundary()) {
                generator.end_early();  // no-op once ended
            }
            if (!generator.next(frame)) {
                finished = true;
                break;
            }
            if (frame.bytes.size() != datagram + offset) {
                throw std::logic_error("send_generated: the generator's frame size changed");
            }
            const StreamTruth& t = generator.truth()[frame.stream];
            std::memcpy(payloads.data() + n * datagram, frame.bytes.data() + offset, datagram);
            destinations[n] = ipv4_address(t.group.ip, t.group.port);
            in_pktinfo info{};
            // ip(7) IP_PKTINFO: with ipi_ifindex 0, ipi_spec_dst is the source
            // address; the device is the socket's IP_MULTICAST_IF.
            info.ipi_spec_dst.s_addr = htonl(t.antenna);
            std::memcpy(controls[n].bytes.data() + kPktinfoData, &info, sizeof info);
            streams[n] = frame.stream;
            ++n;
        }
        if (n > 0) {
            send_all(n);
            result.packets += n;
        }
        if (!finished && options.rate_pps > 0) {
            const std::uint64_t due = due_ns(start, result.packets, options.rate_pps);
            if (due > monotonic_ns()) {
                sleep_until_ns(due);
            }
        }
    }
    result.seconds = static_cast<double>(monotonic_ns() - start) * 1e-9;
    result.complete = !generator.ended_early();
    return result;
}

}  // namespace ibvcap
