// The one run loop: any source (lib/sources/source.hpp) into demux, sinks and
// ledger. It owns the order every run keeps:
//
//   output directory checked → source armed (libpcap: counters, joins) → lanes (writer, file sinks,
//   demux, the -v observer, the GPU block sink) → source connected → block rings prepared → source
//   started → loop: stop flag, worker faults, --duration, the 1 Hz tick (counters, watchdog, stats
//   line), -c, one step of the source → source stopped (groups left, drained) → block rings flushed
//   → writers finished → the source's counters into the ledgers → lanes merged → exit code.
//
// Whatever way it is left (an exception included), the writers and the block
// sink's copy thread give back every receive slot they hold while the
// source, which owns the slots, still exists.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lib/demux/demux.hpp"
#include "lib/ledger/expect.hpp"
#include "lib/run/common.hpp"
#include "lib/run/console.hpp"
#include "lib/run/control.hpp"
#include "lib/run/schedule.hpp"
#include "lib/sinks/block_sink.hpp"
#include "lib/sinks/dada_sink.hpp"
#include "lib/sinks/file_sinks.hpp"
#include "lib/sinks/writer.hpp"
#include "lib/sources/source.hpp"

namespace ibvcap {

struct RunSettings {
    std::string command = "capture";  // the report's "command"
    DemuxOptions demux;
    OutputOptions outputs;
    Writer::Options writer;
    // The poll threads' CPUs (a verbs capture's --cpu; empty: wherever the
    // process may run): with writer.cpus, whether the poll thread and the
    // writers share one core, said at the start (lib/host/cores.hpp).
    std::vector<int> poll_cpus;
    std::uint64_t count = 0;      // stop after this many frames (0: no limit)
    double duration_s = 0;        // stop after this long (0, negative, NaN: no limit)
    FrameObserver observer;       // -v
    BlockSink* blocks = nullptr;  // the GPU payload path's block rings (one lane only)
    // PSRDADA rings (--dada; one lane only): attached and locked by the
    // caller before the run, so that a missing ring stops nothing captured.
    DadaSink* dada = nullptr;
    std::FILE* stats = nullptr;  // the live stats line once a second (null: none)
    // The acknowledgement of a stop (Ctrl-C, SIGTERM...), printed when the loop
    // sees the stop flag: "stopping: writing 120.0 MiB; Ctrl-C again to
    // abandon it" (null: none). Written only if the stream takes it at once.
    Console* notices = nullptr;
    // Set by SIGUSR1 (tcpdump's "print the counts"): the loop prints the
    // run's counts so far on `notices`, clears it and goes on (null: none).
    std::atomic<bool>* counts_request = nullptr;
    // The signal that set the stop flag (0: none): the report's stopped_by
    // and the acknowledgement's words (null: "a signal").
    const std::atomic<int>* stop_signal = nullptr;
    // Witnesses outside the source (the GPU's XIDs): sampled once a second
    // with the source's own (Source::witnesses), on the run loop's thread.
    std::vector<std::function<std::vector<SourceCounter>()>> witnesses;
    // The housekeeping tick: counters, watchdog, stats line and the
    // timeline's windows. One second for every run; tests shorten it.
    std::chrono::milliseconds tick{1000};
    // --metrics-file: the Prometheus text file (lib/run/metrics.hpp), written at
    // the 1 Hz tick every metrics_interval_s and once at the end (empty: none).
    std::string metrics_path;
    double metrics_interval_s = 10;
    // Called once on the run loop's thread right after the source has
    // started (its sockets, QPs, flow rules and joins exist): the live
    // capture drops its privileges here (lib/host/privileges.hpp). An
    // exception ends the run at once as a fault (exit code 1, files kept).
    std::function<void(RunInfo&)> after_start;
    // --expect FILE or --expect-antennas/--expect-threads (none: nothing
    // expected): judged against the ledger's streams once the run has stopped
    // (lib/ledger/expect.hpp). A live source's join is when it starts, its
    // end when the loop stops; a file's are its first and last stream frames.
    std::optional<ExpectManifest> expect;
    ExpectOptions expect_options;
    // With a frame window that stops (demux.window: --stop-at, or --start-at
    // and --duration): a live source's run ends this long after the stop,
    // the window's late frames waited for (stopped_by "window_end").
    double window_grace_s = 2;
    // --scan: the window's name, in the report (empty: none).
    std::string scan_name;
    // A capture of several scans (--schedule without --scan; docs/operations.md,
    // "Observing a window"), in start order; empty: one run as set above. The
    // source is set up once. Each scan has lanes of its own (a writer, files in
    // outputs.output_dir/NAME, a demux with the scan's window, a ledger), made
    // when the scan before has passed its stop and grace, and an outcome of its
    // own, handed to scan_done once its files are closed (the last scan's too).
    // demux.window and scan_name are each scan's. A live source only.
    std::vector<Scan> scans;
    std::function<void(RunOutcome&&)> scan_done;
    // With scans: SIGHUP's request to read the schedule again (set by its
    // handler, taken by the loop) and its reader, returning the scans to come
    // checked whole (it throws one line naming the line). The scan under way
    // goes on; the scans to come are replaced, or, when the file is refused,
    // kept as they were.
    std::atomic<bool>* reload_request = nullptr;
    std::function<std::vector<Scan>()> reload_schedule;
    // --control SOCKET (lib/run/control.hpp): its requests answered by the
    // loop. With it the capture stays up between scans and after the last,
    // counting frames and writing none, until it is stopped.
    ControlSocket* control = nullptr;
};

// A lane's counts for its pcapng statistics blocks (docs/formats.md,
// "pcapng"), from the run's witnesses: isb_ifrecv the frames the source
// delivered to the lane; isb_ifdrop every drop counter (what the report sums
// as totals.nic_drops); isb_osdrop those of them that witness the host's
// side (kernel, receive queue, ring hold limit); isb_filteraccept libpcap's
// ps_recv. `device`: only counters named "device/..." are the lane's (empty:
// all). A file source (`live` false) knows no drops: those stay unset.
InterfaceCounts interface_counts(std::span<const SourceCounter> witnesses, std::uint64_t delivered,
                                 std::string_view device, bool live);

// Runs `source` until `stop`, the duration, the count, or the source ends.
// Throws (one line naming the fix) when the run cannot start; nothing is
// written then. An error after the start ends the run with info.error and an
// incomplete ledger (exit code 1), keeping everything captured. With
// settings.scans, the scans' outcomes go to scan_done and the one returned
// has their worst exit code, how the capture ended, and an empty ledger.
RunOutcome run_source(Source& source, const RunSettings& settings, const std::atomic<bool>& stop);

}  // namespace ibvcap
