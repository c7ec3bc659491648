// The e2e test's IGMP querier (test/e2e/mcast.sh): sends COUNT general
// membership queries, one every INTERVAL_MS, out of IFNAME from SOURCE, the
// way a multicast router or a switch's snooping querier does: to 224.0.0.1,
// TTL 1, with the Router Alert option (RFC 2236 §2 for v2, RFC 3376 §4.1 for
// v3; the packets are built by test/igmp_packets.hpp).
//
// Why not the kernel bridge's own querier (ip link add ... type bridge
// mcast_snooping 1 mcast_querier 1): it would put a bridge into the
// testbed's topology and send its first queries on its own timers (startup
// queries, net/bridge/br_multicast.c); this sends exactly COUNT queries when
// the test asks, so the test knows what the capture must have heard.
//
//   igmp_querier IFNAME SOURCE VERSION(2|3) COUNT INTERVAL_MS
// Needs CAP_NET_RAW (a raw socket). Exit 0 when every query was sent.
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "igmp_packets.hpp"

int main(int argc, char** argv) {
    using namespace ibvcap::igmp_packets;
    if (argc != 6) {
        std::fprintf(stderr, "usage: %s IFNAME SOURCE VERSION(2|3) COUNT INTERVAL_MS\n", argv[0]);
        return 2;
    }
    const std::string ifname = argv[1];
    in_addr source{};
    const int version = std::atoi(argv[3]);
    const int count = std::atoi(argv[4]);
    const int interval_ms = std::atoi(argv[5]);
    if (inet_pton(AF_INET, argv[2], &source) != 1 || (version != 2 && version != 3) || count < 1 ||
        interval_ms < 0) {
        std::fprintf(stderr, "igmp_querier: bad arguments\n");
        return 2;
    }
    const int fd = ::socket(AF_INET, SOCK_RAW, IPPROTO_RAW);  // IP_HDRINCL implied (raw(7))
    if (fd < 0) {
        std::fprintf(stderr, "igmp_querier: raw socket: %s\n", std::strerror(errno));
        return 1;
    }
    if (::setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, ifname.c_str(),
                     static_cast<socklen_t>(ifname.size())) != 0) {
        std::fprintf(stderr, "igmp_querier: bind to %s: %s\n", ifname.c_str(),
                     std::strerror(errno));
        return 1;
    }
    const auto packet =
        ipv4(ntohl(source.s_addr), kAllHosts, version == 2 ? query_v2(0) : query_v3(0));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(kAllHosts);
    for (int i = 0; i < count; ++i) {
        if (i > 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
        }
        if (::sendto(fd, packet.data(), packet.size(), 0, reinterpret_cast<const sockaddr*>(&to),
                     sizeof to) != static_cast<ssize_t>(packet.size())) {
            std::fprintf(stderr, "igmp_querier: send: %s\n", std::strerror(errno));
            return 1;
        }
    }
    std::printf("igmp_querier: %d IGMPv%d general queries sent on %s from %s\n", count, version,
                ifname.c_str(), argv[2]);
    ::close(fd);
    return 0;
}
