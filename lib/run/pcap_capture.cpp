#include "lib/run/pcap_capture.hpp"

#include "lib/run/run_loop.hpp"

namespace ibvcap {

RunOutcome run_pcap_capture(const PcapCaptureRequest& request, const MembershipFactory& memberships,
                            const std::atomic<bool>& stop) {
    PcapLiveOptions options;
    options.interface = request.interface;
    options.groups = request.demux.groups;
    options.antennas = request.demux.antennas;
    options.buffer_bytes = request.buffer_bytes;
    options.sysfs_root = request.sysfs_root;
    options.nic_counters = request.nic_counters;
    PcapLiveSource source(std::move(options), memberships);
    return run_source(source, request, stop);
}

}  // namespace ibvcap
