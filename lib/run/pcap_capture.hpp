// `ibvcap capture --source pcap`: one interface through libpcap
// (lib/sources/pcap_live.hpp), driven by the run loop.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "lib/demux/demux.hpp"
#include "lib/run/common.hpp"
#include "lib/sinks/block_sink.hpp"
#include "lib/sinks/file_sinks.hpp"
#include "lib/sinks/writer.hpp"
#include "lib/sources/igmp.hpp"
#include "lib/sources/pcap_live.hpp"

namespace ibvcap {

struct PcapCaptureRequest {
    std::string interface;             // netdev name (resolved by the caller)
    std::uint32_t interface_ipv4 = 0;  // its address, for the caller's IGMP joins (host order)
    DemuxOptions demux;                // groups, antennas, limits
    OutputOptions outputs;             // formats, output dir, prefix
    Writer::Options writer;            // block_when_full is forced off (a live source)
    std::uint64_t count = 0;           // stop after exactly N frames (0 = no limit)
    double duration_s = 0;             // stop after this long (0 = no limit)
    FrameObserver observer;            // -v
    std::size_t buffer_bytes = std::size_t{256} << 20;  // kernel ring (TPACKET_V3), <= INT_MAX
    std::filesystem::path sysfs_root = "/sys";
    bool nic_counters = true;      // read <sysfs_root>/class/net/<interface>/statistics
    BlockSink* blocks = nullptr;   // the GPU payload path's block rings (--gpu), fed and flushed
    std::FILE* stats = nullptr;    // the live stats line once a second (stderr; null: none, -q)
    std::FILE* notices = nullptr;  // the stop acknowledgement (RunSettings::notices)
};

// Capture on request.interface until `stop`, the duration, the count, or a
// capture error (lib/run/run_loop.hpp). Throws what PcapLiveSource throws
// when the capture cannot start, and std::runtime_error for an unusable
// output directory; nothing is written then.
RunOutcome run_pcap_capture(const PcapCaptureRequest& request, const MembershipFactory& memberships,
                            const std::atomic<bool>& stop);

}  // namespace ibvcap
