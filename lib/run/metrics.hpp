// The metrics file (--metrics-file PATH; docs/observability.md, "Metrics"): the
// run's counts in the Prometheus text exposition format 0.0.4, for
// node_exporter's textfile collector, rewritten in one step every
// --metrics-interval seconds and once more with the final values.
//
// The run loop builds a MetricsInput at its 1 Hz tick from what it samples
// for the timeline (the lanes' LiveView copies, every witness, the losses by
// cause) on its own thread, never on a poll thread; format_metrics turns it
// into text (a pure function); MetricsFile writes it. A failed write never
// fails or stops the run: it is counted (the report's "metrics_file") and
// said on stderr, at most once a minute.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lib/ledger/ledger.hpp"
#include "lib/ledger/live.hpp"
#include "lib/run/console.hpp"
#include "lib/sinks/file_sinks.hpp"

namespace ibvcap {

struct MetricsInput {
    std::string command;  // "capture", "read"
    std::string source;   // "pcap", "verbs", "file"
    std::string input;    // the interface(s) or the file
    // The label every series carries, run="NAME" (empty: none): the metrics
    // file's name without .prom, so that the files of runs side by side in
    // one textfile directory never give node_exporter the same series twice.
    std::string run;
    std::uint64_t packets = 0;  // frames the source delivered, all lanes
    std::uint64_t bytes = 0;
    std::array<std::uint64_t, kReasonCount> reasons{};
    std::vector<LiveStream> streams;       // every lane's, in order
    std::vector<SourceCounter> witnesses;  // growth since the start
    std::array<std::uint64_t, kLossCauseCount> lost_by_cause{};
    std::optional<std::uint64_t> writer_backlog_bytes;  // none: the run writes no file
    std::optional<std::uint64_t> writer_bound_bytes;    // none: no file, or no bound
    std::optional<std::uint64_t> slots_held;            // none: the source holds no slots
    bool zero_loss = true;     // no loss so far (the final file: the verdict)
    bool up = true;            // the run is going on (0 in the final file)
    double start_time_s = 0;   // seconds since the epoch
    double update_time_s = 0;  // seconds since the epoch
    double duration_s = 0;
    std::uint64_t write_failures = 0;  // earlier writes of the file that failed
};

// Whether the counts seen so far show loss: a stream's missing, too_late,
// implausible or restarts, a malformed frame, a drop counter (is_drop), a
// witness of a cause the verdict counts itself (completion errors, writer
// drops, a GPU XID), or a loss by cause. What only the end of the run knows
// (no stream frame at all, an output's error, block misses, reconciliation) is
// in the final file's verdict, not here.
bool loss_so_far(const MetricsInput& in);

// The text: HELP and TYPE for every family, families in a fixed order, series
// with equal labels summed (a stream seen on two lanes is one series).
std::string format_metrics(const MetricsInput& in);

// The run label for a metrics file: its name without the directory and the
// .prom ending ("/var/lib/node_exporter/ibvcap-eth1.prom" → "ibvcap-eth1").
std::string run_label(const std::string& metrics_path);

// A label value escaped per the exposition format: \ → \\, " → \", newline → \n.
std::string escape_label_value(std::string_view value);

// --metrics-file PATH, checked before the run starts, once run_path_collision
// (lib/run/run_paths.hpp) has found it none of the run's other files: throws
// std::runtime_error (exit 1) with one line naming the fix when PATH's
// directory does not exist or takes no new file, or when PATH is there and is
// not a regular file (a directory, FIFO, device or socket is never replaced).
void check_metrics_path(const std::string& path);

// The file: written when due, never waited for by the run beyond the write
// itself (no fsync: a reader sees the old file or the new one either way,
// and the next write replaces it; see docs/observability.md).
class MetricsFile {
  public:
    using Clock = std::chrono::steady_clock;
    // `notices`: where a failed write is said (null: nowhere).
    MetricsFile(std::string path, double interval_s, std::string command, Console* notices);

    const std::string& path() const { return path_; }
    // Whether the interval has passed since the last write (or none was made).
    bool due(Clock::time_point now) const;
    // Replace the file with `text`. Never throws; a failure is counted and
    // said (the first at once, then at most once a minute).
    void write(std::string_view text, Clock::time_point now);

    std::uint64_t writes() const { return writes_; }
    std::uint64_t failures() const { return failures_; }

  private:
    std::string path_;
    Clock::duration interval_;
    std::string command_;
    Console* notices_;
    std::optional<Clock::time_point> last_write_;
    std::optional<Clock::time_point> last_notice_;
    std::uint64_t writes_ = 0;
    std::uint64_t failures_ = 0;
    std::uint64_t failures_said_ = 0;
};

}  // namespace ibvcap
