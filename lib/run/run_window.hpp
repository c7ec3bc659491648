// A run's frame window (--start-at, --stop-at; lib/demux/window.hpp) as the
// run loop tells it: the line at the start, and the ledger's notes at the end.
#pragma once

#include <optional>
#include <span>
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
// `on_request`: a scan started by a control request, from now (its start is
// the request's, not late).
double announce_window(const FrameWindow& window, const RunSettings& settings, bool live,
                       RunInfo& info, bool on_request = false);

// `counters` less their values in `base` (by name, never below 0): a scan's
// share of counters that count from the capture's start.
std::vector<SourceCounter> less_counters(std::vector<SourceCounter> counters,
                                         std::span<const SourceCounter> base);

// The worse of two runs' exit codes, for a capture of several scans: an
// error (or any code but zero-loss and loss) before loss before zero loss.
int worse_exit_code(int a, int b);

// The ledger's notes once the run has stopped: a capture that started after
// the window's start, a run that ended before its stop.
std::vector<std::string> window_notes(const RunInfo& info);

}  // namespace ibvcap
