#include "lib/run/run_window.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "lib/run/run_lanes.hpp"

namespace ibvcap {

namespace {
constexpr double kNsPerSecond = 1e9;
}  // namespace

double announce_window(const FrameWindow& window, const RunSettings& settings, bool live,
                       RunInfo& info, bool on_request) {
    WindowInfo w;
    w.start_ns = window.start_ns;
    w.stop_ns = window.stop_ns;
    w.grace_s = settings.window_grace_s;
    w.scan = settings.scan_name;
    const auto now = static_cast<std::int64_t>(wall_clock_ns());
    std::string line;
    const std::string stop_words =
        window.has_stop() ? fmt::format(" to {}", format_utc_instant(window.stop_ns)) : "";
    if (on_request) {
        line =
            fmt::format("ibvcap {}: scan {} started on request: writing the frames of {}{}\n",
                        settings.command, settings.scan_name, format_utc_instant(window.start_ns),
                        window.has_stop() ? stop_words : " until a stop request");
    } else if (live && window.has_start() && window.start_ns < now) {
        w.started_late_s = static_cast<double>(now - window.start_ns) / kNsPerSecond;
        line = fmt::format(
            "ibvcap {}: the window's start {} is past by {:.3f} s: writing its frames from now{}; "
            "those that came before are missing\n",
            settings.command, format_utc_instant(window.start_ns), w.started_late_s, stop_words);
    } else if (live && window.has_start()) {
        line = fmt::format("ibvcap {}: set up; writing the frames of {}{} (in {:.3f} s)\n",
                           settings.command, format_utc_instant(window.start_ns), stop_words,
                           static_cast<double>(window.start_ns - now) / kNsPerSecond);
    } else if (live) {
        line = fmt::format("ibvcap {}: set up; writing the frames up{}\n", settings.command,
                           stop_words);
    }
    if (!line.empty() && settings.notices != nullptr) {
        settings.notices->write_within(line, std::chrono::seconds(1));
    }
    info.window = w;
    return window.has_stop() ? static_cast<double>(window.stop_ns - now) / kNsPerSecond : 0.0;
}

std::vector<SourceCounter> less_counters(std::vector<SourceCounter> counters,
                                         std::span<const SourceCounter> base) {
    for (SourceCounter& c : counters) {
        for (const SourceCounter& b : base) {
            if (b.name == c.name) {
                c.value -= std::min(c.value, b.value);
                break;
            }
        }
    }
    return counters;
}

int worse_exit_code(int a, int b) {
    const auto rank = [](int code) {
        return code == kExitZeroLoss ? 0 : code == kExitLoss ? 1 : 2;
    };
    return rank(b) > rank(a) ? b : a;
}

std::vector<std::string> window_notes(const RunInfo& info) {
    std::vector<std::string> notes;
    if (!info.window) {
        return notes;
    }
    const WindowInfo& window = *info.window;
    if (window.started_late_s > 0) {
        notes.push_back(fmt::format(
            "the capture started {:.3f} s after the window's start {}: the window's frames "
            "before then were missed by the capture, not by the network",
            window.started_late_s, format_utc_instant(window.start_ns)));
    }
    // A step of the host's clock moves when the run ends (timed from
    // CLOCK_REALTIME at the start), never which frames are in the window
    // (their own header times).
    std::uint64_t host_steps = 0;
    std::int64_t largest = 0;
    std::uint64_t nic_steps = 0;
    for (const ClockFigures& c : info.clocks) {
        host_steps += c.host_steps;
        nic_steps += c.steps;
        largest = std::max(largest, c.host_step_max_ns);
    }
    if (host_steps > 0 || nic_steps > 0) {
        notes.push_back(fmt::format(
            "a clock stepped during the window ({} host step{}, the largest {:.3f} s; {} NIC "
            "clock step{}): the frames in the window are judged by their own header times, "
            "which no step moves, but the run's end was timed from the host clock before it "
            "stepped, and frame arrival times (the timeline, presence) jump with it",
            host_steps, host_steps == 1 ? "" : "s", static_cast<double>(largest) / kNsPerSecond,
            nic_steps, nic_steps == 1 ? "" : "s"));
    }
    if (window.has_stop() && !window.saw_end) {
        notes.push_back(fmt::format(
            "the run ended ({}) before the window's end {}: what came after its streams' last "
            "frames is not counted",
            stopped_by_text(info.stopped_by), format_utc_instant(window.stop_ns)));
    }
    return notes;
}

}  // namespace ibvcap
