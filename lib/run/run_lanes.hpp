// A run's lanes: one per lane of its source (an -i each), with its own
// demux, ledger and outputs, and what run_source (run_loop.cpp) reads across
// them. Defined in run_lanes.cpp; internal to lib/run/.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "lib/run/run_loop.hpp"

namespace ibvcap {

class Console;

// One lane's demux, ledger and outputs. Members in construction order: the
// demux goes before the sinks it calls, the sinks before the writer.
struct RunLane {
    Ledger ledger;
    LivePublisher live;  // the lane's counts for the timeline, when its demux has its own thread
    std::unique_ptr<Writer> writer;
    std::unique_ptr<FileSinks> files;
    std::unique_ptr<Demux> demux;
};
using RunLanes = std::vector<std::unique_ptr<RunLane>>;

// A figure of the lanes' writers, summed; none when no lane writes a file.
std::optional<std::uint64_t> sum_writers(const RunLanes& lanes,
                                         std::uint64_t (Writer::*figure)() const);

// The first stop is acknowledged at once with what is still queued and what
// stopped the run (the handler cannot print). SIGHUP and SIGPIPE never
// escalate (capture/signals.cpp): only a Ctrl-C abandons their backlog.
void acknowledge_stop(Console* out, const std::string& command, int sig, const RunLanes& lanes);

// Every witness: the source's, the run's own (the GPU's XIDs) and the
// writers' drops so far.
std::vector<SourceCounter> all_witnesses(const Source& source, const RunSettings& settings,
                                         const RunLanes& lanes);

// SIGUSR1 (RunSettings::counts_request): the counts so far, on the notices
// stream if it takes them at once (as the stop's acknowledgement: the loop
// may be the capture thread).
void print_counts(const RunSettings& settings, const Source& source, const RunLanes& lanes,
                  double seconds);

std::uint64_t wall_clock_ns();

// Lane i's interface as the source names it: "mlx5_0:1(ens1f0np0)" of a verbs
// input listing one per lane, the interface, or the file read.
std::string lane_interface(const Source& source, std::size_t lane);

bool lanes_write_pcapng(const RunLanes& lanes);

// The pcapng files' counts (interface_counts, run_loop.hpp), for every lane
// that writes one: once a second from the witnesses, and once more before the
// writers close. A live run's statistics span the run's wall-clock time.
void publish_interface_counts(const RunLanes& lanes, const std::vector<LiveView>& views,
                              const Source& source, std::span<const SourceCounter> witnesses,
                              std::uint64_t start_wall_ns, bool final);

// The (group, antenna) pairs whose per-antenna files the options name
// (--antenna with the groups, an --expect manifest's antennas), to be made
// before the first frame; none without a per-antenna format. When they would
// pass the writer's `max_outputs` none are, and `note` says so: the files are
// then made as streams arrive, as without the options.
std::vector<std::pair<Endpoint, std::uint32_t>> planned_streams(const RunSettings& settings,
                                                                std::size_t max_outputs,
                                                                std::string& note);

}  // namespace ibvcap
