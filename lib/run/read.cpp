#include "lib/run/read.hpp"

#include "lib/run/run_loop.hpp"
#include "lib/sources/pcap_file.hpp"

namespace ibvcap {

RunOutcome run_read(const ReadRequest& request, const std::atomic<bool>& stop) {
    PcapFileSource source(request.file);
    RunSettings settings;
    settings.command = "read";
    settings.demux = request.demux;
    settings.outputs = request.outputs;
    settings.outputs.pcap_link_type = source.pcap_link_type();
    settings.writer = request.writer;
    settings.count = request.count;
    settings.observer = request.observer;
    settings.notices = request.notices;
    return run_source(source, settings, stop);
}

}  // namespace ibvcap
