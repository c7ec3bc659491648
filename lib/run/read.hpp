// `ibvcap read`: a pcap or pcapng file through demux, ledger and sinks.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>

#include "lib/demux/demux.hpp"
#include "lib/run/common.hpp"
#include "lib/sinks/file_sinks.hpp"
#include "lib/sinks/writer.hpp"

namespace ibvcap {

struct ReadRequest {
    std::string file;
    DemuxOptions demux;
    OutputOptions outputs;
    Writer::Options writer;
    std::uint64_t count = 0;       // stop after this many frames (0 = all)
    FrameObserver observer;        // -v
    std::FILE* notices = nullptr;  // the stop acknowledgement (RunSettings::notices)
};

// Throws std::runtime_error when the run cannot start (file unreadable,
// output directory unusable); errors after the start end the run early, keep
// what was read, and give exit code 1.
RunOutcome run_read(const ReadRequest& request, const std::atomic<bool>& stop);

}  // namespace ibvcap
