// `ibvcap read`: a pcap or pcapng file through demux, ledger and sinks.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>

#include "lib/demux/demux.hpp"
#include "lib/run/common.hpp"
#include "lib/run/run_loop.hpp"
#include "lib/sinks/file_sinks.hpp"
#include "lib/sinks/writer.hpp"

namespace ibvcap {

// What every run takes (RunSettings: demux, outputs, writer, -c, -v, the
// notices), and the file. `command` is set to "read".
struct ReadRequest : RunSettings {
    std::string file;
};

// Throws std::runtime_error when the run cannot start (file unreadable,
// output directory unusable); errors after the start end the run early, keep
// what was read, and give exit code 1.
RunOutcome run_read(const ReadRequest& request, const std::atomic<bool>& stop);

}  // namespace ibvcap
