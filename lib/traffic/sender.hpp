// Live multicast sending of generated CODIF, VDIF or VTP traffic: the network twin of
// write_generated_pcap (lib/run/common.hpp).
//
// One UDP socket sends for every antenna: each datagram carries its antenna's
// IPv4 as source address in an IP_PKTINFO control message, so sendmmsg(2)
// batches across antennas and streams. The kernel makes the IPv4 and UDP
// headers, so a frame captured from the wire differs from the same frame of
// `gen -w` in the Ethernet source MAC (the sending NIC's), the IPv4
// identification (0: the kernel does not number DF datagrams of unconnected
// sockets) and hence the IPv4 header checksum, and the TTL if `ttl` is not 1.
// DF is set (IP_PMTUDISC_DO) and the UDP checksum is 0 (SO_NO_CHECK), as in
// the generated frames; the UDP source port is the generator's src_port. The
// UDP payload (the VTP sequence number, the CODIF or VDIF header, the
// payload) is byte-identical.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "lib/traffic/generator.hpp"

namespace ibvcap {

struct SendOptions {
    std::string interface;   // netdev the multicast leaves by (IP_MULTICAST_IF by index)
    double rate_pps = 0;     // 0 = as fast as possible
    double duration_s = 0;   // 0 = until the generator's count is done
    int ttl = 1;             // IP_MULTICAST_TTL, 0-255
    bool loop = false;       // IP_MULTICAST_LOOP
    std::size_t batch = 64;  // datagrams per sendmmsg (fewer at low rates, see paced_batch)
};

struct SendResult {
    std::uint64_t packets = 0;  // datagrams the kernel accepted: every frame the generator returned
    double seconds = 0;         // from the first send to the last
    bool complete = false;      // the generator ran to its end (not stopped early)
};

// Send every frame of `generator` to its stream's group:port from its
// antenna's address. Stops when the generator ends, or — at the next slot
// boundary, through Generator::end_early(), so that generator.truth() then
// describes exactly what was sent — when `stop` is set or `duration_s` has
// passed. Every frame the generator returns is sent, or the call throws:
// std::invalid_argument for bad options or a VLAN-tagged generator (a UDP
// socket cannot tag frames), std::runtime_error with a one-line message when
// the socket cannot be set up, an antenna address is not local, or a send
// fails (ENOBUFS from a full device queue is waited out and retried, never
// dropped: the socket has IP_RECVERR so the kernel reports it).
SendResult send_generated(Generator& generator, const SendOptions& options,
                          const std::atomic<bool>& stop);

// Pacing. The datagram with index `sent` (0-based) is due `sent / rate_pps`
// seconds after `start_ns` (rounded down to whole nanoseconds); the sender
// sends a batch, then sleeps until the next datagram is due.
std::uint64_t due_ns(std::uint64_t start_ns, std::uint64_t sent, double rate_pps);
// Datagrams per sendmmsg: `batch`, but at most one millisecond's worth at
// `rate_pps` (at least 1) so paced traffic comes in small, even bursts.
std::size_t paced_batch(std::size_t batch, double rate_pps);

}  // namespace ibvcap
