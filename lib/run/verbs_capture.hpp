// `ibvcap capture` through the verbs source (lib/sources/verbs/source.hpp):
// one poll thread per device, driven by the run loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "lib/demux/demux.hpp"
#include "lib/run/common.hpp"
#include "lib/run/run_loop.hpp"
#include "lib/sinks/block_sink.hpp"
#include "lib/sinks/file_sinks.hpp"
#include "lib/sinks/writer.hpp"
#include "lib/sources/verbs/engine.hpp"
#include "lib/sources/verbs/seam.hpp"
#include "lib/sources/verbs/source.hpp"

namespace ibvcap {

// What every run takes (RunSettings; -c stops after at least N frames;
// `blocks` takes one target), and what the verbs source takes (the devices,
// engine options, counters, CPUs, payload memory).
struct CaptureRequest : RunSettings, VerbsSourceOptions {};

// Runs until `stop`, the duration, the count, or a device fatal error. Throws
// std::runtime_error / std::system_error (one line, with the fix) when the
// capture cannot start; nothing is written then.
RunOutcome run_verbs_capture(const CaptureRequest& request, verbs::Provider& provider,
                             const TargetMembershipFactory& memberships,
                             const std::atomic<bool>& stop);

}  // namespace ibvcap
