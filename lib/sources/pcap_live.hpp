// The libpcap live source (DESIGN §2): any NIC on any host, for hosts without
// an mlx5 port (`ibvcap capture --source pcap`). The kernel copies the frames
// that pass a BPF filter for the requested GROUP:PORTs into a memory-mapped
// TPACKET_V3 ring; the calling thread takes them out block by block and runs
// the same demux, ledger and writers as the verbs source.
//
// Drops are counted where they can happen: the kernel ring overflowing
// (pcap_stats ps_drop), the interface or driver (ps_ifdrop, and the netdev's
// sysfs drop counters read once a second), and the writers (drop mode, as for
// every live source).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "lib/demux/demux.hpp"
#include "lib/netaddr.hpp"
#include "lib/run/common.hpp"
#include "lib/sinks/block_sink.hpp"
#include "lib/sinks/writer.hpp"
#include "lib/sources/igmp.hpp"

namespace ibvcap {

struct PcapCaptureRequest {
    std::string interface;             // netdev name (resolved by the caller)
    std::uint32_t interface_ipv4 = 0;  // its address, for the caller's IGMP joins (host order)
    DemuxOptions demux;                // groups, antennas, formats, output dir, prefix
    Writer::Options writer;            // block_when_full is forced off (a live source)
    std::uint64_t count = 0;           // stop after exactly N frames (0 = no limit)
    double duration_s = 0;             // stop after this long (0 = no limit)
    FrameObserver observer;            // -v
    std::size_t buffer_bytes = std::size_t{256} << 20;  // kernel ring (TPACKET_V3), <= INT_MAX
    std::filesystem::path sysfs_root = "/sys";
    bool nic_counters = true;     // read <sysfs_root>/class/net/<interface>/statistics
    BlockSink* blocks = nullptr;  // the GPU payload path's block rings (--gpu), fed and flushed
    std::FILE* stats = nullptr;   // the live stats line once a second (stderr; null: none, -q)
};

// The BPF filter for the groups and antennas:
//   X = "udp and ((dst host G1 and dst port P1) or (dst host G2 and dst port P2) ...)
//        [and (src host A1 or src host A2 ...)]"
// and the same behind one VLAN tag: "(X) or (vlan and X)". No groups: every
// UDP destination ("udp"); no antennas: any source.
std::string pcap_filter(const std::vector<Endpoint>& groups,
                        const std::vector<std::uint32_t>& antennas);

// Capture on request.interface until `stop`, the duration, the count, or a
// capture error. The groups are joined through `memberships` (each held for
// the run; an empty factory joins nothing) once the filter is in place, so
// nothing the joins bring in is missed.
//
// Throws std::runtime_error (one line naming the fix) when the capture cannot
// start: no permission, no such interface, interface down, not Ethernet, a
// filter libpcap refuses, an unusable output directory; a failed join throws
// what the factory throws. Nothing is written then. An error after the start
// (the interface went away) ends the run with info.error and an incomplete
// ledger (exit code 1), keeping everything captured.
RunOutcome run_pcap_capture(const PcapCaptureRequest& request, const MembershipFactory& memberships,
                            const std::atomic<bool>& stop);

}  // namespace ibvcap
