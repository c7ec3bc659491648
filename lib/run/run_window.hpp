// A run's frame window (--start-at, --stop-at; lib/demux/window.hpp) as the
// run loop tells it: the line at the start, and the ledger's notes at the end.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lib/demux/window.hpp"
#include "lib/ledger/report.hpp"
#include "lib/run/run_loop.hpp"

namespace ibvcap {

// At the source's start: info.window set, and on settings.notices the line
// that says when writing starts and stops, or that the start is past (a
// live run starts writing at once then). Returns the seconds from now to
// the window's stop (0 when it has none).
double announce_window(const FrameWindow& window, const RunSettings& settings, bool live,
                       RunInfo& info);

// The ledger's notes once the run has stopped: a capture that started after
// the window's start, a run that ended before its stop.
std::vector<std::string> window_notes(const RunInfo& info);

}  // namespace ibvcap
