// The run report: the ledger as JSON (docs/formats.md, "The report", lists every
// key) and as the human summary printed at the end of a run.
#pragma once

#include <cstdint>
#include <cstdio>
#include <limits>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lib/core/fifo.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/ledger/mcast_path.hpp"
#include "lib/ledger/timeline.hpp"

namespace ibvcap {

// One poll thread's figures (the prototype's: busy waits, polls per packet,
// packets per poll).
struct PollFigures {
    std::string device;
    std::uint64_t polls = 0;
    std::uint64_t busy_waits = 0;  // polls that found nothing
    std::uint64_t frames = 0;
    int cpu = -1;  // the core the thread was pinned to, -1 when not pinned
};

// How one device's frame times were made (docs/operations.md, "Time"; the
// report's "clocks", docs/formats.md): filled by the verbs engine's clock
// (lib/sources/verbs/nic_clock.hpp).
struct ClockFigures {
    std::string device;              // "mlx5_0:1"
    std::string format;              // the CQ's timestamp format (device_ticks, wallclock_ns, none)
    std::string frame_times;         // "utc" (measured and converted), "nic" (the NIC's own clock),
                                     // "host" (CLOCK_REALTIME when each batch was polled)
    std::string converted_by;        // "phc", "clock_pairs", "" (not converted)
    std::uint64_t measurements = 0;  // conversion updates (once a second)
    std::uint64_t steps = 0;         // updates that stepped (the NIC clock jumped > 128 ms)
    // Steps of the host's CLOCK_REALTIME (an NTP step, a leap second) seen
    // by the conversion: a forward one is followed at once, a backward one
    // slewed, so frame times never go back (verbs-mlx5-3.md R7).
    std::uint64_t host_steps = 0;
    std::int64_t host_step_max_ns = 0;  // the largest |step|
    bool real_time_format = false;      // stamps were seconds << 32 | ns, decoded
    // Converted frame times are within this of CLOCK_REALTIME (nullopt: not
    // converted, or fewer than two measurements): the worst of the closed
    // intervals, each the larger of |residual| + bracket/2 at its two ends.
    std::optional<std::int64_t> error_bound_ns;
    std::int64_t residual_max_ns = 0;  // the largest |prediction − measurement| at an update
    std::int64_t bracket_max_ns = 0;   // the widest bracket a measurement used
    std::optional<double> rate_ppm;    // the NIC clock's rate against CLOCK_REALTIME, − 1
    // The netdev's PTP hardware clock.
    int phc_index = -1;       // -1: none
    std::string phc_missing;  // why there is none
    std::uint64_t phc_reads = 0;
    std::uint64_t phc_read_failures = 0;
    std::string phc_error;                         // the last failure
    std::optional<std::int64_t> offset_ns;         // PHC − CLOCK_REALTIME, the last measurement
    std::optional<std::int64_t> offset_spread_ns;  // max − min over the run
    std::optional<bool> tai;                       // the offset is TAI − UTC (± 100 ms)
    int tai_utc_s = 37;
    std::optional<bool> disciplined;  // a PTP daemon runs, or the PHC's frequency is adjusted
    std::vector<std::string> daemons;
    std::optional<double> frequency_ppb;
};

// Control-path accounting (docs/observability.md §5): the verbs resources a
// run created on one device, recorded as the engine creates them.
struct CqRecord {
    std::uint32_t depth_requested = 0;
    std::uint32_t depth = 0;  // what the device made (at least the depth asked for)
    std::string timestamps;   // the CQ's timestamp format
};
struct QpRecord {
    std::uint32_t qp_num = 0;
    std::string stream;  // "GROUP:PORT" or "GROUP:PORT/ANTENNA"
    std::uint32_t recv_depth_requested = 0;
    std::uint32_t recv_depth = 0;  // receive WRs the QP takes, as the device reports it
    std::uint32_t sge_requested = 0;
    std::uint32_t sge = 0;  // SGEs per receive WR, as the device reports it
};
struct MrRecord {
    std::string use;           // "headers" (SGE0, every QP) or "payload" (one QP's ring)
    std::string kind;          // "host", "dma-buf", "peermem", "staging"
    std::uint64_t bytes = 0;   // registered
    std::uint32_t qp_num = 0;  // payload: the QP whose ring it holds; 0 for headers
};
struct FlowRecord {
    std::string group;       // the IPv4 destination matched
    std::uint16_t port = 0;  // the UDP destination port matched
    std::string source;      // the IPv4 source matched ("" = any)
    std::uint32_t qp_num = 0;
    bool counter = false;  // the rule carries a count action
    // Its flow tag action (a QP several groups share, issue 44); 0: none.
    std::uint32_t tag = 0;
};
struct DeviceResources {
    std::string device;  // "mlx5_0"
    std::uint8_t port = 0;
    std::uint32_t protection_domains = 0;
    // The limits the device reported (ibv_query_device_ex), in a fixed order.
    std::vector<std::pair<std::string, std::uint64_t>> limits;
    std::vector<CqRecord> cqs;
    std::vector<QpRecord> qps;
    std::vector<MrRecord> mrs;
    std::vector<FlowRecord> flows;
};
struct ResourceAccount {
    std::vector<DeviceResources> devices;
    std::uint64_t registered_bytes = 0;  // every memory region
    // Registered host memory (kinds host and staging): what the kernel pins
    // and charges against RLIMIT_MEMLOCK.
    std::uint64_t memory_locked_bytes = 0;
    std::optional<std::uint64_t> memlock_limit_bytes;  // nullopt: unlimited
    bool cap_ipc_lock = false;                         // the process may exceed the limit
};

// A live capture's privileges after its setup (lib/host/privileges.hpp): the
// report's "privileges".
struct PrivilegeState {
    bool dropped = false;           // no capability left on any thread
    bool no_new_privs = false;      // set on every thread
    std::vector<std::string> kept;  // capabilities kept (none: every one is dropped)
    std::string user;               // who the process is now
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
    std::uint32_t threads = 0;  // threads read back
    // The sets read back from /proc/self/task/*/status, OR-ed over the threads.
    std::vector<std::pair<std::string, std::string>> after;
};

// The writers' memory (lib/sinks/writer.hpp, "Memory bound"), over all of
// the run's writers (one per lane): the report's "writer_memory".
struct WriterMemory {
    std::uint64_t bound_bytes = 0;      // --writer-memory as used (0: none)
    std::uint64_t requested_bytes = 0;  // as given, when the host's memory capped it (else 0)
    std::uint64_t peak_bytes = 0;       // the highest count, summed over the writers
    std::uint64_t buffer_bytes = 0;     // the per-output buffer size at the end (smallest writer)
    std::uint64_t buffers = 0;          // buffers made
    // The most bytes waiting for the disk at once (summed over the writers),
    // and that as a share of the bound: how much of it absorbed a stall.
    std::uint64_t backlog_peak_bytes = 0;
    double backlog_peak_share = 0;
    // Records dropped for want of a buffer with the memory at its bound, and
    // with room left (the host refused memory: should be 0).
    std::uint64_t drops_at_bound = 0;
    std::uint64_t drops_below_bound = 0;
    // The host had no more memory to give below the bound. Not in the JSON:
    // said in the verdict.
    bool starved = false;
    // The most buffer pages the stock held faulted in ahead of the producer
    // at once (summed over the writers) and the rule that set the largest
    // ("least", "rate", "most": lib/sinks/writer_memory.hpp); the buffers
    // the producer faulted in itself because the stock had not reached them.
    std::uint64_t made_ahead_peak_bytes = 0;
    std::string made_ahead_rule = "least";
    std::uint64_t producer_faulted_buffers = 0;
};

// A run with a frame window (--start-at, --stop-at: lib/demux/window.hpp):
// the report's "window" (docs/formats.md, "The report").
struct WindowInfo {
    std::string scan;           // --scan: its name (empty: none)
    std::int64_t start_ns = 0;  // UTC ns since 1970
    std::int64_t stop_ns = std::numeric_limits<std::int64_t>::max();  // max: no stop
    double grace_s = 0;  // how long frames of the window were waited for after its stop
    // The capture started after the window's start, by this much (0: before it).
    double started_late_s = 0;
    // The run saw the window's end (it lasted to the stop and its grace, or
    // its input ended): the frames after each stream's last are missing.
    bool saw_end = false;
    // (FrameWindow's kNoStart and kOpen: lib/demux/window.hpp, a layer up.)
    bool has_start() const { return start_ns != std::numeric_limits<std::int64_t>::min(); }
    bool has_stop() const { return stop_ns != std::numeric_limits<std::int64_t>::max(); }
};

struct RunInfo {
    std::string command;  // "read", "capture"
    std::string source;   // "verbs", "pcap", "file"
    std::string input;    // file or interface
    // This run's identity, also in every sidecar index it writes (16 hex
    // digits from getrandom(2)): `verify --report` knows a report of
    // another run by it. Empty: not known (a library caller).
    std::string run_id;
    // CLOCK_REALTIME ns when the source started delivering (the report's
    // started_at); 0: not known (a library caller).
    std::uint64_t started_ns = 0;
    double duration_s = 0;
    bool interrupted = false;
    // What ended the run (docs/formats.md, "stopped_by"): "end_of_input",
    // "count", "duration", "error", or the signal ("sigint", "sigterm",
    // "sighup", "sigpipe", ...). Empty: not known (a library caller).
    std::string stopped_by;
    std::string error;                 // the run ended early on this error
    std::vector<PollFigures> polling;  // live verbs captures
    std::vector<ClockFigures> clocks;  // live verbs captures: how frame times were made
    std::uint64_t watchdog_alarms = 0;
    // Lines a blocked or closed stdout/stderr could not take at once, dropped
    // so the capture never waits for a terminal or a pipe (lib/run/console.hpp).
    std::uint64_t stats_lines_dropped = 0;  // the live stats line (stderr)
    std::uint64_t frame_lines_dropped = 0;  // -v lines (stdout)
    // Per second: counts and witnesses; each gap with its cause
    // (docs/observability.md, "The timeline and a cause for every gap").
    Timeline timeline;
    // The verbs source's resources; absent for every other source.
    std::optional<ResourceAccount> resources;
    // --metrics-file (docs/observability.md, "Metrics"): the path (empty:
    // none), the writes made and those that failed.
    std::string metrics_path;
    std::uint64_t metrics_writes = 0;
    std::uint64_t metrics_write_failures = 0;
    // Live captures: the capabilities dropped after setup; absent for the rest.
    std::optional<PrivilegeState> privileges;
    // Runs that write files: the writers' memory against --writer-memory.
    std::optional<WriterMemory> writer_memory;
    // The groups' joins and first frames, and the IGMP queriers heard
    // (lib/ledger/mcast_path.hpp): the report's "groups" and "igmp".
    MulticastPath mcast;
    std::optional<WindowInfo> window;
};

nlohmann::json report_json(const Ledger& ledger, const RunInfo& run);
// The report's version, host (gethostname), cwd (the working directory, which
// the outputs' relative paths are relative to), started_at (run.started_ns)
// and first_frame_at / last_frame_at (the earliest and latest frame
// timestamps of the ledger's streams): lib/ledger/provenance.cpp.
void add_provenance(nlohmann::json& report, const Ledger& ledger, const RunInfo& run);
// The report's "expected" (docs/formats.md, "Expected streams"):
// lib/ledger/expect.cpp.
nlohmann::json expected_json(const ExpectResults& e);
// The report's "clocks" (lib/ledger/clock_report.cpp), and one summary line of
// a device's clock.
nlohmann::json clocks_json(const std::vector<ClockFigures>& clocks);
std::string clock_summary(const ClockFigures& clock);
// Writes the JSON: `-` to stdout; into a device, FIFO or socket in place
// (write_into: a FIFO's reader is waited for as `wait` says); over a regular
// file (or a new one) atomically: a uniquely named temporary file in the same
// directory, fsync, rename. Throws std::system_error naming the path on
// failure (ReaderWaitGivenUp: the wait for a reader was given up).
void write_report(const std::string& path, const nlohmann::json& report,
                  const ReaderWait& wait = {});
// Replaces the regular file `path` (or makes it) with `text` in one step: a
// uniquely named temporary file in the same directory (".NAME.XXXXXX"),
// fsync'ed when `durable`, renamed over the target (a symbolic link's target,
// not the link). An existing file keeps its mode. Returns 0 or an errno value;
// EEXIST when `path` is there and is not a regular file (never replaced).
// write_report uses it; so does the metrics file (lib/run/metrics.hpp).
int replace_file(const std::string& path, std::string_view text, bool durable);
// What stopped_by says, in words: "Ctrl-C (SIGINT)", "-c (--count)".
std::string stopped_by_text(const std::string& stopped_by);

// `streams_table`: print one line per stream (off with -q).
void print_summary(std::FILE* out, const Ledger& ledger, const RunInfo& run, bool streams_table);

}  // namespace ibvcap
