// The live stats line of `ibvcap capture` (issue 6): once a second, on stderr,
// what the last second looked like:
//
//   ibvcap stats: 12:00:03  98,311 pkt/s  6.53 Gb/s  drops 0  slots held 512  ...
//       ...  writer backlog 12.0 MiB
// (one line, cut in two here; docs/operations.md, "The live stats line" has each field).
//
// Every field is always there, in this order; a figure the source cannot know
// live is "-" ("- Gb/s", "slots held -", "writer backlog -"). Whole lines
// ending in '\n', also on a terminal: other threads (the writer's error
// lines, the watchdog) print to stderr too, and a line overwritten in place
// with '\r' would mix with them.
//
// The line is written only when the stream takes it at once (lib/run/console.hpp): a
// stderr that is blocked (a pager, Ctrl-S, a pipe nobody reads) never stalls
// the capture thread; the lines it could not take are counted (dropped()),
// and the report has the count ("lines_not_printed").
//
// The sources (lib/run/verbs_capture.cpp, lib/sources/pcap_live.cpp) take a snapshot in the
// once-a-second tick they already have, never on a poll thread's per-packet
// path; StatsTicker keeps the previous snapshot and prints the rates between
// the two.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

namespace ibvcap {

// Running totals at one moment. Counters count from the start of the run.
struct StatsSnapshot {
    std::chrono::steady_clock::time_point time{};       // for the rates
    std::chrono::system_clock::time_point wall{};       // for the line's clock (local time)
    std::uint64_t packets = 0;                          // frames delivered
    std::optional<std::uint64_t> bytes;                 // their bytes on the wire (unknown: "-")
    std::uint64_t drops = 0;                            // drops the source knows of while it runs
    std::optional<std::uint64_t> slots_held;            // receive slots a writer holds (verbs only)
    std::optional<std::uint64_t> writer_backlog_bytes;  // queued for the disk (no writer: "-")
};

// Sets time and wall to now.
void stamp_now(StatsSnapshot& s);

// The line for the interval from `prev` to `now`, without the '\n'. Rates
// are the growth over the elapsed time: a counter that went backwards, or an
// interval of zero or less, gives a rate of 0, never a negative one.
std::string format_stats_line(const StatsSnapshot& prev, const StatsSnapshot& now);

// 1234567 → "1,234,567".
std::string group_thousands(std::uint64_t value);

// Keeps the previous snapshot; prints one line per tick after the first.
// Not synchronised: one thread (the source's 1 Hz tick) calls it.
class Console;
class StatsTicker {
  public:
    // `out` null: quiet (-q), nothing is printed. stdout and stderr are
    // written through stdout_console() and stderr_console(); another stream
    // (a test's file) through a Console of its own.
    explicit StatsTicker(std::FILE* out);
    ~StatsTicker();

    // Whether a tick prints anything; when not, the caller need not build
    // snapshots at all.
    bool enabled() const { return console_ != nullptr; }

    // The first tick is the baseline (the start of the run) and prints
    // nothing; each later one prints the line from the previous tick to this
    // one, if the stream takes it at once. Returns whether a line was
    // printed; a line the stream did not take is counted in dropped().
    bool tick(const StatsSnapshot& now);

    // Lines not printed because the stream could not take them at once.
    std::uint64_t dropped() const { return dropped_; }

  private:
    std::unique_ptr<Console> own_;
    Console* console_ = nullptr;
    std::optional<StatsSnapshot> prev_;
    std::uint64_t dropped_ = 0;
};

}  // namespace ibvcap
