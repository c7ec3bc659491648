#include "lib/run/run_loop.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "lib/core/probes.hpp"
#include "lib/host/cores.hpp"
#include "lib/run/console.hpp"
#include "lib/run/metrics.hpp"
#include "lib/run/run_lanes.hpp"
#include "lib/run/run_window.hpp"
#include "lib/run/stats_line.hpp"

namespace ibvcap {

namespace {

// The longest one step may wait for frames: bounds how late the loop sees
// the stop flag, the duration and the 1 Hz tick when nothing arrives.
constexpr std::chrono::milliseconds kMaxStepWait{20};

}  // namespace

RunOutcome run_source(Source& source, const RunSettings& settings, const std::atomic<bool>& stop) {
    RunOutcome outcome;
    outcome.info.command = settings.command;
    outcome.info.source = source.kind();
    outcome.info.input = source.input();

    const std::size_t lane_count = source.lanes();
    if (settings.blocks != nullptr && lane_count > 1) {
        throw std::runtime_error(
            "--gpu takes one -i interface (one poll thread feeds the block rings)");
    }
    if (settings.dada != nullptr && lane_count > 1) {
        throw std::runtime_error(
            "--dada takes one -i interface and one queue (one poll thread writes the rings)");
    }
    // Held until every file of the run is closed (it outlives the lanes).
    OutputDirLock output_lock;
    if (!settings.outputs.formats.empty()) {
        prepare_output_dir(settings.outputs.output_dir);
        output_lock = OutputDirLock(settings.outputs.output_dir);
        // Every name this run may write is checked here, under the lock:
        // the per-antenna files that appear with their first frame too, so
        // the disk threads never find an earlier run's file in their way.
        claim_outputs(settings.outputs, source.input_file(), settings.writer.direct_io);
    }
    if (settings.blocks != nullptr) {
        // Every source: block memory, copy thread, foreseen and spare rings
        // made before arm() (the pcap source joins there; its traffic would
        // wait in the kernel ring while rings are zeroed). Pcap foresees no
        // streams nor payload size (the spares are sized for its staging).
        const auto plan = source.block_plan();
        settings.blocks->prepare(plan.expected, plan.max_payload_bytes);
    }
    source.arm();
    Faults local_faults;
    Writer::Options writer_options = settings.writer;
    outcome.info.run_id = new_run_id();
    writer_options.run_id = outcome.info.run_id;
    if (settings.dada != nullptr) {
        settings.dada->set_run_id(outcome.info.run_id);
        if (!source.live()) {
            settings.dada->wait_while_full(&stop);  // the file will still be there
        }
    }
    // Never more than the host can give: capped, saying so. One core for the
    // poll thread and the writers' threads: said too (lib/host/cores.hpp).
    const WriterMemoryCap memory_cap = cap_writer_memory(writer_options.memory_bytes);
    writer_options.memory_bytes = memory_cap.bytes;
    const std::string core_note = source.live() && !settings.outputs.formats.empty()
                                      ? shared_core_note(settings.poll_cpus, writer_options.cpus)
                                      : "";
    for (const std::string& note : {memory_cap.note, core_note}) {
        if (!note.empty() && settings.notices != nullptr) {
            settings.notices->write_within(fmt::format("ibvcap: {}\n", note),
                                           std::chrono::seconds(1));
        }
    }
    // --writer-memory bounds all the run's writers together: one per lane.
    writer_options.memory_bytes /= std::max<std::size_t>(lane_count, 1);
    if (!source.lends_frames()) {
        writer_options.max_pieces = 1;  // every record copied: no held frames to list
    }
    writer_options.device_payload = source.lends_device_memory();
    writer_options.faults =
        writer_options.faults != nullptr ? writer_options.faults : &local_faults;
    wait_for_readers(writer_options.reader_wait, stop, settings.notices, settings.command);
    Faults& faults = *writer_options.faults;

    RunLanes lanes;
    // Writers and the block sink's copy thread may hold receive slots (the
    // zero-copy hand-off): whatever way this function is left, they finish
    // with them while the source and its memory still exist. (On the normal
    // path both are no-ops by then.)
    struct HoldersFinish {
        RunLanes& lanes;
        BlockSink* blocks;
        ~HoldersFinish() {
            if (blocks != nullptr) {
                blocks->stop_copying();
            }
            for (auto& l : lanes) {
                if (l->writer) {
                    l->writer->finish();
                }
            }
        }
    } holders_finish{lanes, settings.blocks};

    std::string planning_note;
    const auto planned = lane_count == 1
                             ? planned_streams(settings, writer_options.max_outputs, planning_note)
                             : std::vector<std::pair<Endpoint, std::uint32_t>>{};
    std::vector<SourceLane> targets;
    for (std::size_t i = 0; i < lane_count; ++i) {
        auto lane = std::make_unique<RunLane>();
        OutputOptions outputs = settings.outputs;
        outputs.prefix += source.lane_prefix(i);
        outputs.interface_name = lane_interface(source, i);
        outputs.interface_description =
            fmt::format("ibvcap {}, {} source", settings.command, source.kind());
        lane->writer = make_run_writer(outputs, writer_options, source.live());
        lane->files = std::make_unique<FileSinks>(outputs, lane->writer.get());
        lane->files->plan_streams(planned);
        lane->demux = std::make_unique<Demux>(settings.demux, lane->ledger);
        lane->demux->add_sinks(lane->files->entries());
        if (settings.observer) {
            lane->demux->add_observer(settings.observer);
        }
        if (settings.blocks != nullptr) {
            lane->demux->add_sink(*settings.blocks);
        }
        if (settings.dada != nullptr) {
            lane->demux->add_sink(*settings.dada);
        }
        targets.push_back({lane->demux.get(), &lane->ledger, &lane->live});
        lanes.push_back(std::move(lane));
    }
    source.connect(targets);
    // The planned outputs' buffers, and the stock, made before the first frame.
    for (auto& l : lanes) {
        if (l->writer) {
            l->writer->prepare();
        }
    }
    IBVCAP_PROBE2(run_start, settings.command.c_str(), outcome.info.source.c_str());
    const std::int64_t join_ns = expect_clock_ns();  // the expected streams' join
    source.start();
    const std::uint64_t start_wall_ns = outcome.info.started_ns = wall_clock_ns();
    if (settings.after_start) {
        // The source's threads run: nothing may leave by an exception.
        try {
            settings.after_start(outcome.info);
        } catch (const std::exception& e) {
            faults.report("setup", e.what());
        }
    }

    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    // 0, negative or NaN: no limit; capped at ~30 years so the cast cannot overflow.
    double limit_s = settings.duration_s > 0 ? std::min(settings.duration_s, 1e9) : 0.0;
    // A frame window: said at the start; a live run ends at its stop and grace.
    bool window_ends_run = false;
    if (settings.demux.window) {
        const double until_stop_s =
            announce_window(*settings.demux.window, settings, source.live(), outcome.info);
        if (source.live() && settings.demux.window->has_stop()) {
            limit_s = std::clamp(until_stop_s + settings.window_grace_s, 0.0, 1e9);
            window_ends_run = true;
        }
    }
    const auto deadline =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit_s));
    // The live stats line: built in the 1 Hz tick below, on this thread (the capture thread for
    // the libpcap source, never a verbs poll thread). The writers' drops are known only when
    // they finish (the summary has them), so they are not in the line.
    StatsTicker ticker(settings.stats);
    const auto snapshot = [&lanes](const SourceFigures& f) {
        StatsSnapshot s;
        stamp_now(s);
        s.packets = f.packets;
        s.bytes = f.bytes;
        s.drops = f.drops;
        s.slots_held = f.slots_held;
        s.writer_backlog_bytes = sum_writers(lanes, &Writer::backlog_bytes);
        return s;
    };
    if (ticker.enabled()) {
        ticker.tick(snapshot(source.figures()));  // the baseline
    }
    auto last_tick = start;
    Timeline& timeline = outcome.info.timeline;
    // A second's sample: the witnesses read at the tick, the lanes' counts and the writers'
    // backlog. A poll thread copies its lane's counts when asked (within 1024 polls), so the
    // loop asks at the tick and samples once every copy has come, or after 200 ms (half a tick
    // at most): the counts then lag the witnesses by milliseconds, not by a window.
    const auto copy_wait = std::min(std::chrono::milliseconds(200), settings.tick / 2);
    std::vector<LiveView> views(lanes.size());
    std::vector<SourceCounter> witnesses;  // the last sample's (the metrics read them)
    const auto seconds_since_start = [&](Clock::time_point t) {
        return std::chrono::duration<double>(t - start).count();
    };
    struct Pending {
        bool open = false;
        Clock::time_point at;
        std::vector<SourceCounter> witnesses;
        std::vector<std::uint64_t> copies;  // each lane's copies when asked
    } pending;
    const auto sample = [&](Clock::time_point at, std::vector<SourceCounter> w) {
        witnesses = std::move(w);
        timeline.sample(seconds_since_start(at), views, witnesses,
                        sum_writers(lanes, &Writer::backlog_bytes).value_or(0));
    };
    // Returns whether a sample was taken now.
    const auto ask_timeline = [&](Clock::time_point now) {
        auto w = all_witnesses(source, settings, lanes);
        if (source.demux_on_loop_thread()) {
            for (std::size_t i = 0; i < lanes.size(); ++i) {
                views[i].copy_from(lanes[i]->ledger);
            }
            sample(now, std::move(w));
            return true;
        }
        const bool sampled = pending.open;
        if (pending.open) {  // the last copies never came: sample what there is
            sample(pending.at, std::move(pending.witnesses));
        }
        pending.open = true;
        pending.at = now;
        pending.witnesses = std::move(w);
        pending.copies.assign(lanes.size(), 0);
        for (std::size_t i = 0; i < lanes.size(); ++i) {
            pending.copies[i] = views[i].copies;
            lanes[i]->live.request();
        }
        return sampled;
    };
    // Returns whether the pending sample was taken now.
    const auto collect_timeline = [&](Clock::time_point now) {
        if (!pending.open) {
            return false;
        }
        bool all = true;
        for (std::size_t i = 0; i < lanes.size(); ++i) {
            if (views[i].copies == pending.copies[i]) {
                LiveView v = lanes[i]->live.read();
                if (v.copies != pending.copies[i]) {
                    views[i] = std::move(v);
                } else {
                    all = false;
                }
            }
        }
        if (!all && now - pending.at < copy_wait) {
            return false;
        }
        sample(pending.at, std::move(pending.witnesses));
        pending.open = false;
        return true;
    };
    // The metrics file, from what the timeline sampled (docs/observability.md,
    // "Metrics"), on this thread.
    const double wall_start =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::optional<MetricsFile> metrics;
    if (!settings.metrics_path.empty()) {
        metrics.emplace(settings.metrics_path, settings.metrics_interval_s, settings.command,
                        settings.notices);
    }
    const auto metrics_input = [&](Clock::time_point now) {
        MetricsInput in;
        in.command = outcome.info.command;
        in.source = outcome.info.source;
        in.input = outcome.info.input;
        in.run = run_label(settings.metrics_path);
        for (const auto& v : views) {
            in.packets += v.packets;
            in.bytes += v.bytes;
            for (std::size_t r = 0; r < kReasonCount; ++r) {
                in.reasons[r] += v.reasons[r];
            }
            in.streams.insert(in.streams.end(), v.streams.begin(), v.streams.end());
        }
        in.witnesses = witnesses;
        in.lost_by_cause = timeline.lost_by_cause();
        // The writers' drops reach the timeline at the end; until then their
        // witness has them.
        for (const LossCause c : {LossCause::writer, LossCause::consumer}) {
            auto& lost = in.lost_by_cause[static_cast<std::size_t>(c)];
            for (const auto& w : witnesses) {
                if (w.cause == c) {
                    lost = std::max(lost, w.value);
                }
            }
        }
        in.writer_backlog_bytes = sum_writers(lanes, &Writer::backlog_bytes);
        in.writer_bound_bytes = sum_writers(lanes, &Writer::memory_bound);
        in.slots_held = source.figures().slots_held;
        in.zero_loss = !loss_so_far(in);
        in.start_time_s = wall_start;
        in.update_time_s =
            std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                .count();
        in.duration_s = seconds_since_start(now);
        in.write_failures = metrics->failures();
        return in;
    };
    const auto after_sample = [&](Clock::time_point now) {
        if (metrics && metrics->due(now)) {
            metrics->write(format_metrics(metrics_input(now)), now);
        }
    };
    for (;;) {
        if (settings.counts_request != nullptr &&
            settings.counts_request->exchange(false, std::memory_order_relaxed)) {
            print_counts(settings, source, lanes, seconds_since_start(Clock::now()));
        }
        if (stop.load(std::memory_order_relaxed)) {
            const int sig = settings.stop_signal != nullptr
                                ? settings.stop_signal->load(std::memory_order_relaxed)
                                : 0;
            outcome.info.interrupted = true;
            outcome.info.stopped_by = signal_name(sig);
            acknowledge_stop(settings.notices, settings.command, sig, lanes);
            break;
        }
        if (faults.raised()) {
            outcome.info.stopped_by = "error";
            break;  // a worker thread failed: stop as after a device fault
        }
        const auto now = Clock::now();
        if ((limit_s > 0 || window_ends_run) && now >= deadline) {
            outcome.info.stopped_by = window_ends_run ? "window_end" : "duration";
            break;
        }
        if (now - last_tick >= settings.tick) {
            last_tick = now;
            // While the source's threads run, nothing may leave this loop by
            // an exception (a running std::thread would terminate the process).
            try {
                source.tick(outcome.info);
                if (ask_timeline(now)) {
                    after_sample(now);
                }
                if (ticker.enabled()) {
                    ticker.tick(snapshot(source.figures()));
                }
                if (lanes_write_pcapng(lanes)) {
                    publish_interface_counts(lanes, views, source,
                                             all_witnesses(source, settings, lanes), start_wall_ns,
                                             false);
                }
            } catch (const std::exception& e) {
                faults.report("counters and stats", e.what());
            }
        }
        if (pending.open) {
            try {
                if (collect_timeline(now)) {
                    after_sample(now);
                }
            } catch (const std::exception& e) {
                faults.report("timeline and metrics", e.what());
            }
        }
        const std::uint64_t frames = source.frames();
        if (settings.count > 0 && frames >= settings.count) {
            outcome.info.stopped_by = "count";
            break;
        }
        auto wait = kMaxStepWait;
        if (limit_s > 0 || window_ends_run) {
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
            wait = std::clamp(left, std::chrono::milliseconds(0), kMaxStepWait);
        }
        if (!source.step(settings.count > 0 ? settings.count - frames : 0, wait, stop)) {
            // The source ended: its input did, its count was reached, or a
            // stop signal or an error ended its wait.
            if (settings.count > 0 && source.frames() >= settings.count) {
                outcome.info.stopped_by = "count";
            } else if (stop.load(std::memory_order_relaxed)) {
                continue;  // (the loop's top says by what)
            } else {
                outcome.info.stopped_by = "end_of_input";
            }
            break;
        }
    }
    const std::int64_t end_ns = expect_clock_ns();  // the expected streams' end
    std::optional<std::uint64_t> remaining;
    if (settings.count > 0) {
        remaining = settings.count - std::min(settings.count, source.frames());
    }
    source.stop(remaining);
    if (settings.demux.window) {
        // The frames have stopped: each stream's span becomes the window.
        const bool saw_end =
            outcome.info.stopped_by == "window_end" || outcome.info.stopped_by == "end_of_input";
        outcome.info.window->saw_end = saw_end;
        for (auto& l : lanes) {
            l->demux->close_window(saw_end);
        }
    }
    if (settings.blocks != nullptr) {
        settings.blocks->flush();  // the producers have stopped: hand out the open blocks
    }
    if (settings.dada != nullptr) {
        // The producers have stopped: the windows written, every transfer
        // ended (end of data), the rings unlocked.
        settings.dada->finish();
        settings.dada->report_to(lanes.front()->ledger);
    }
    // The pcapng files' last statistics blocks: the counters read once more
    // (the poll threads have ended, so no watchdog speaks), as they stand now.
    if (lanes_write_pcapng(lanes)) {
        try {
            source.tick(outcome.info);
        } catch (const std::exception& e) {
            faults.report("counters and stats", e.what());
        }
        publish_interface_counts(lanes, views, source, all_witnesses(source, settings, lanes),
                                 start_wall_ns, true);
    }
    for (auto& l : lanes) {
        if (l->writer) {
            l->files->finish();  // (the ordered files' windows, then the writer)
            l->ledger.set_outputs(l->files->stats());
            const Writer::Memory m = l->writer->memory();
            if (!outcome.info.writer_memory) {
                WriterMemory first;
                first.bound_bytes = memory_cap.bytes;
                first.requested_bytes = memory_cap.note.empty() ? 0 : settings.writer.memory_bytes;
                first.buffer_bytes = m.buffer_bytes;
                outcome.info.writer_memory = first;
            }
            add_writer_memory(*outcome.info.writer_memory, m);
        }
    }
    std::vector<SourceLane> reports;
    for (auto& l : lanes) {
        reports.push_back({l->demux.get(), &l->ledger});
    }
    source.report(reports, outcome.info);
    // The last second, from the final counts: the timeline's seconds add up
    // to the report's totals.
    {
        if (pending.open) {
            sample(pending.at, std::move(pending.witnesses));
            pending.open = false;
        }
        std::uint64_t write_drops = 0;
        std::uint64_t consumer_drops = 0;
        for (std::size_t i = 0; i < lanes.size(); ++i) {
            views[i].copy_from(lanes[i]->ledger);
            const Totals t = lanes[i]->ledger.totals();
            write_drops += t.write_drops;
            consumer_drops += t.consumer_drops;
        }
        sample(Clock::now(), all_witnesses(source, settings, lanes));
        timeline.set_write_drops(write_drops);
        timeline.set_consumer_drops(consumer_drops);
    }
    if (lanes.size() == 1) {
        outcome.ledger = std::move(lanes.front()->ledger);
    } else {
        for (auto& l : lanes) {
            outcome.ledger.merge(l->ledger);
        }
    }
    outcome.ledger.set_output_formats(settings.outputs.formats);  // (streams in no file)
    for (const std::string& note : window_notes(outcome.info)) {
        outcome.ledger.add_note(note);
    }
    if (outcome.info.writer_memory) {
        WriterMemory& m = *outcome.info.writer_memory;
        if (m.bound_bytes > 0) {
            m.backlog_peak_share =
                static_cast<double>(m.backlog_peak_bytes) / static_cast<double>(m.bound_bytes);
        }
        for (const std::string& note : {memory_cap.note, planning_note, core_note}) {
            if (!note.empty()) {
                outcome.ledger.add_note(note);
            }
        }
        if (const std::string why = writer_drops_cause(m); !why.empty()) {
            outcome.ledger.explain_write_drops(why);
        }
    }
    if (settings.expect) {
        ExpectTimes times;
        times.host_clock = source.live();
        times.join_ns = join_ns;
        times.end_ns = end_ns;
        outcome.ledger.set_expectations(
            evaluate_expectations(*settings.expect, settings.expect_options,
                                  outcome.ledger.streams(), settings.demux.groups, times));
    }
    outcome.info.duration_s = std::chrono::duration<double>(Clock::now() - start).count();
    outcome.info.stats_lines_dropped = ticker.dropped();
    outcome.exit_code = exit_code_for(outcome.ledger, outcome.info);
    apply_faults(faults, outcome);
    if (!outcome.info.error.empty() && !outcome.info.interrupted) {
        outcome.info.stopped_by = "error";  // the input cut short, a device or a thread failed
    }
    if (metrics) {
        // The final values, with the verdict.
        const auto now = Clock::now();
        MetricsInput in = metrics_input(now);
        in.up = false;
        in.zero_loss = outcome.exit_code == kExitZeroLoss;
        metrics->write(format_metrics(in), now);
        outcome.info.metrics_path = metrics->path();
        outcome.info.metrics_writes = metrics->writes();
        outcome.info.metrics_write_failures = metrics->failures();
    }
    IBVCAP_PROBE2(run_stop, settings.command.c_str(), outcome.exit_code);
    return outcome;
}

}  // namespace ibvcap
