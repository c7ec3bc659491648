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
#include "lib/run/run_loop.hpp"
#include "lib/sinks/block_sink.hpp"
#include "lib/sinks/file_sinks.hpp"
#include "lib/sinks/writer.hpp"
#include "lib/sources/igmp.hpp"
#include "lib/sources/pcap_live.hpp"

namespace ibvcap {

// What every run takes (RunSettings; -c stops after exactly N frames; the
// writer never waits, a live source), and the interface.
struct PcapCaptureRequest : RunSettings {
    std::string interface;             // netdev name (resolved by the caller)
    std::uint32_t interface_ipv4 = 0;  // its address, for the caller's IGMP joins (host order)
    std::size_t buffer_bytes = std::size_t{256} << 20;  // kernel ring (TPACKET_V3), <= INT_MAX
    std::filesystem::path sysfs_root = "/sys";
    bool nic_counters = true;  // read <sysfs_root>/class/net/<interface>/statistics
};

// Capture on request.interface until `stop`, the duration, the count, or a
// capture error (lib/run/run_loop.hpp). Throws what PcapLiveSource throws
// when the capture cannot start, and std::runtime_error for an unusable
// output directory; nothing is written then.
RunOutcome run_pcap_capture(const PcapCaptureRequest& request, const MembershipFactory& memberships,
                            const std::atomic<bool>& stop);

}  // namespace ibvcap
