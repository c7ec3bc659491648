// The scans a capture of several records in turn (RunSettings::scans, SIGHUP's
// re-read, `ibvcap ctl ... start`): those to come, in start order, each with
// its output directory made, locked and claimed when it is admitted, so that a
// scan that would write over an earlier capture's files is refused then, not
// when it starts. Internal to lib/run/ (run_loop.cpp).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "lib/run/common.hpp"
#include "lib/run/run_loop.hpp"

namespace ibvcap {

// A scan's run: its window, name and outputs in outputs.output_dir/NAME.
RunSettings scan_cut(const RunSettings& settings, const Scan& scan);
// Between scans (with --control): the frames counted, none written.
RunSettings idle_cut(const RunSettings& settings);

class ScanQueue {
  public:
    // `settings`: the capture's (its outputs' directory is the scans' parent).
    explicit ScanQueue(const RunSettings& settings, std::string input_file = {});

    // Admits `scans` (in start order) after those there: each one's directory
    // made, locked and its outputs claimed. Throws (std::runtime_error, one
    // line) at the first that cannot be; those admitted before it stay.
    void admit(const std::vector<Scan>& scans);
    bool empty() const { return to_come_.empty(); }
    const Scan& front() const { return to_come_.front(); }
    // The next scan, out of the queue; it is `used` from now on.
    Scan pop();
    const std::deque<Scan>& to_come() const { return to_come_; }

    // SIGHUP: the scans to come become `scans` less those that start before
    // `after_ns` (they could not follow the scan under way) and those whose
    // names were used. All are admitted or none: on a refusal (thrown) the
    // scans to come stay as they were. Returns what changed, for a note.
    std::string replace(const std::vector<Scan>& scans, std::int64_t after_ns);
    // `start NAME [STOP]`: a scan admitted ahead of the others; throws when
    // the name is taken or its directory cannot be claimed.
    void push_front(const Scan& scan);
    // Whether `name` was or is to be recorded.
    bool used(const std::string& name) const;
    // Whether the next scan's lanes are to be made now (at `now_ns`): always
    // without --control; with it the capture is idle, taking start
    // requests, until a scheduled scan is kScanSetUpS from its start.
    bool due(std::int64_t now_ns, bool control) const;
    // SIGHUP: replace() with what `read` returns (the schedule read again);
    // a refusal (thrown by either) changes nothing. Returns the line to say.
    std::string reload(const std::function<std::vector<Scan>()>& read, std::int64_t after_ns);

  private:
    void hold(const Scan& scan);
    void let_go(const std::string& name);

    RunSettings settings_;
    std::string input_file_;
    std::deque<Scan> to_come_;
    std::set<std::string> used_;                  // popped: recorded or under way
    std::map<std::string, OutputDirLock> locks_;  // the admitted scans' directories
};

// The earliest a scan may start after `under_way` (none: idle): its stop, the
// grace and the next lanes' making (kScanSetUpS); `now_ns` when it has no
// stop (the next waits for its stop request) or none is under way.
std::int64_t scan_after_ns(const Scan* under_way, std::int64_t now_ns, double grace_s);

// What a control request sees of the capture, and may ask of the loop.
struct ControlState {
    const Scan* under_way = nullptr;  // none: idle
    std::uint64_t frames = 0;         // captured so far
    double grace_s = 0;               // --window-grace
    bool stop_requested = false;      // set by `stop`, done by the loop
};
// One request line of the control socket (lib/run/control.hpp) answered:
// status, next, start NAME [STOP] (a scan pushed to the queue's head),
// stop (state.stop_requested). Never throws: a refusal is "error: ...".
std::string answer_request(std::string_view request, ControlState& state, ScanQueue& queue);

}  // namespace ibvcap
