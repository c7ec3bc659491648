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
    RunSettings settings;
    settings.demux = request.demux;
    settings.outputs = request.outputs;
    settings.writer = request.writer;
    settings.count = request.count;
    settings.duration_s = request.duration_s;
    settings.observer = request.observer;
    settings.blocks = request.blocks;
    settings.stats = request.stats;
    settings.notices = request.notices;
    return run_source(source, settings, stop);
}

}  // namespace ibvcap
