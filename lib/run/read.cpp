#include "lib/run/read.hpp"

#include "lib/run/run_loop.hpp"
#include "lib/sources/pcap_file.hpp"

namespace ibvcap {

RunOutcome run_read(const ReadRequest& request, const std::atomic<bool>& stop) {
    PcapFileSource source(request.file);
    RunSettings settings = request;
    settings.command = "read";
    settings.outputs.pcap_link_type = source.pcap_link_type();
    RunOutcome outcome = run_source(source, settings, stop);
    outcome.info.mcast.named_groups = request.demux.groups;  // listed even if never seen
    outcome.info.mcast.sources = request.demux.sources;
    return outcome;
}

}  // namespace ibvcap
