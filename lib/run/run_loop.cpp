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
    // Each scan's settings: its window, name and directory (one: the run's own).
    const bool scheduled = !settings.scans.empty();
    const std::vector<RunSettings> cuts = scan_cuts(settings);
    if (scheduled && (!source.live() || !source.can_reconnect())) {
        throw std::runtime_error(fmt::format(
            "a schedule of several scans needs a live capture ({} cannot move between scans): "
            "give --scan NAME to take one",
            source.kind()));
    }
    if (scheduled && (settings.blocks != nullptr || settings.dada != nullptr)) {
        throw std::runtime_error(
            "--gpu and --dada take one scan of a schedule: give --scan NAME (or --scan next)");
    }
    // Held until every file of the run is closed (they outlive the lanes).
    std::vector<OutputDirLock> output_locks;
    if (!settings.outputs.formats.empty()) {
        for (const RunSettings& cut : cuts) {
            prepare_output_dir(cut.outputs.output_dir);
            output_locks.emplace_back(cut.outputs.output_dir);
            // Every name this run may write is checked here, under the lock:
            // the per-antenna files that appear with their first frame too, so
            // the disk threads never find an earlier run's file in their way;
            // every scan's, so that none finds an earlier capture's.
            claim_outputs(cut.outputs, source.input_file(), settings.writer.direct_io);
        }
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
    // --writer-memory bounds all the run's writers together: one per lane,
    // and, with several scans, two lanes' worth at once (a scan's files close
    // while the next scan's writer takes frames).
    writer_options.memory_bytes /= std::max<std::size_t>(lane_count, 1) * (scheduled ? 2 : 1);
    if (!source.lends_frames()) {
        writer_options.max_pieces = 1;  // every record copied: no held frames to list
    }
    writer_options.device_payload = source.lends_device_memory();
    writer_options.faults =
        writer_options.faults != nullptr ? writer_options.faults : &local_faults;
    wait_for_readers(writer_options.reader_wait, stop, settings.notices, settings.command);
    Faults& faults = *writer_options.faults;

    RunLanes lanes;
    RunLanes retired;  // a scan's lanes while its files close (several scans)
    // Writers and the block sink's copy thread may hold receive slots (the
    // zero-copy hand-off): whatever way this function is left, they finish
    // with them while the source and its memory still exist. (On the normal
    // path both are no-ops by then.)
    struct HoldersFinish {
        RunLanes& lanes;
        RunLanes& retired;
        BlockSink* blocks;
        ~HoldersFinish() {
            if (blocks != nullptr) {
                blocks->stop_copying();
            }
            for (RunLanes* set : {&retired, &lanes}) {
                for (auto& l : *set) {
                    if (l->writer) {
                        l->writer->finish();
                    }
                }
            }
        }
    } holders_finish{lanes, retired, settings.blocks};

    std::string planning_note;
    const auto planned = lane_count == 1
                             ? planned_streams(settings, writer_options.max_outputs, planning_note)
                             : std::vector<std::pair<Endpoint, std::uint32_t>>{};
    // A scan's lanes (the run's, without a schedule), their writers prepared:
    // the planned outputs' buffers, and the stock, made before the first frame.
    const auto make_lanes = [&](const RunSettings& cut, std::vector<SourceLane>& targets) {
        RunLanes made;
        for (std::size_t i = 0; i < lane_count; ++i) {
            auto lane = std::make_unique<RunLane>();
            OutputOptions outputs = cut.outputs;
            outputs.prefix += source.lane_prefix(i);
            outputs.interface_name = lane_interface(source, i);
            outputs.interface_description =
                fmt::format("ibvcap {}, {} source", settings.command, source.kind());
            lane->writer = make_run_writer(outputs, writer_options, source.live());
            lane->files = std::make_unique<FileSinks>(outputs, lane->writer.get());
            lane->files->plan_streams(planned);
            lane->demux = std::make_unique<Demux>(cut.demux, lane->ledger);
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
            made.push_back(std::move(lane));
        }
        return made;
    };
    const auto prepare_writers = [](RunLanes& set) {
        for (auto& l : set) {
            if (l->writer) {
                l->writer->prepare();
            }
        }
    };
    {
        std::vector<SourceLane> targets;
        lanes = make_lanes(cuts.front(), targets);
        source.connect(targets);
    }
    prepare_writers(lanes);
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
    std::size_t scan = 0;     // the scan under way: cuts[scan]
    auto scan_start = start;  // its start (the timeline's seconds count from it)
    std::uint64_t scan_start_wall_ns = start_wall_ns;
    std::int64_t scan_join_ns = join_ns;
    std::vector<SourceCounter> scan_base;  // the witnesses when it began (none: the source's start)
    // 0, negative or NaN: no limit; capped at ~30 years so the cast cannot overflow.
    double limit_s = settings.duration_s > 0 ? std::min(settings.duration_s, 1e9) : 0.0;
    auto deadline =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit_s));
    // A frame window: said at its scan's start; a live run (or scan) ends at its stop and grace.
    bool window_ends_run = false;
    const auto announce = [&](const RunSettings& cut, Clock::time_point now) {
        if (!cut.demux.window) {
            return;
        }
        const double until_stop_s =
            announce_window(*cut.demux.window, cut, source.live(), outcome.info);
        if (source.live() && cut.demux.window->has_stop()) {
            deadline =
                now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                          std::clamp(until_stop_s + cut.window_grace_s, 0.0, 1e9)));
            window_ends_run = true;
        }
    };
    announce(cuts.front(), start);
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
    // Into `into`: the scan's timeline (its outcome's; the run's without scans).
    const auto sample_into = [&](Timeline& into, Clock::time_point at,
                                 std::vector<SourceCounter> w) {
        witnesses = less_counters(std::move(w), scan_base);  // the scan's share
        into.sample(std::chrono::duration<double>(at - scan_start).count(), views, witnesses,
                    sum_writers(lanes, &Writer::backlog_bytes).value_or(0));
    };
    const auto sample = [&](Clock::time_point at, std::vector<SourceCounter> w) {
        sample_into(timeline, at, std::move(w));
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
    // A scan's (or the run's) end, its frames stopped: windows closed, files
    // closed, the source's counters (its share of them: scan_base), the last
    // second, the verdict. `last`: the source has stopped (its report()).
    const auto finish_lanes = [&](RunLanes& set, RunOutcome& out, const RunSettings& cut,
                                  bool saw_end, std::int64_t end_ns, bool last) {
        if (cut.demux.window) {
            // The frames have stopped: each stream's span becomes the window.
            out.info.window->saw_end = saw_end;
            for (auto& l : set) {
                l->demux->close_window(saw_end);
            }
        }
        auto final_witnesses = less_counters(all_witnesses(source, settings, set), scan_base);
        if (lanes_write_pcapng(set)) {
            publish_interface_counts(set, views, source, final_witnesses, scan_start_wall_ns, true);
        }
        for (auto& l : set) {
            if (l->writer) {
                l->files->finish();  // (the ordered files' windows, then the writer)
                l->ledger.set_outputs(l->files->stats());
                const Writer::Memory m = l->writer->memory();
                if (!out.info.writer_memory) {
                    WriterMemory first;
                    first.bound_bytes = memory_cap.bytes;
                    first.requested_bytes =
                        memory_cap.note.empty() ? 0 : settings.writer.memory_bytes;
                    first.buffer_bytes = m.buffer_bytes;
                    out.info.writer_memory = first;
                }
                add_writer_memory(*out.info.writer_memory, m);
            }
        }
        if (last) {
            std::vector<SourceLane> reports;
            for (auto& l : set) {
                reports.push_back({l->demux.get(), &l->ledger});
            }
            source.report(reports, out.info);
            for (auto& l : set) {
                l->ledger.rebase_source_counters(scan_base);
            }
        } else {
            // The source still runs: its counters as they stand, less their
            // values at the scan's start (the writers' drops are the ledger's own).
            for (SourceCounter& c : less_counters(source.witnesses(), scan_base)) {
                set.front()->ledger.add_source_counter(std::move(c));
            }
        }
        // The last second, from the final counts: the timeline's seconds add up
        // to the report's totals.
        {
            if (pending.open) {
                sample_into(out.info.timeline, pending.at, std::move(pending.witnesses));
                pending.open = false;
            }
            std::uint64_t write_drops = 0;
            std::uint64_t consumer_drops = 0;
            for (std::size_t i = 0; i < set.size(); ++i) {
                views[i].copy_from(set[i]->ledger);
                const Totals t = set[i]->ledger.totals();
                write_drops += t.write_drops;
                consumer_drops += t.consumer_drops;
            }
            sample_into(out.info.timeline, Clock::now(), all_witnesses(source, settings, set));
            out.info.timeline.set_write_drops(write_drops);
            out.info.timeline.set_consumer_drops(consumer_drops);
        }
        if (set.size() == 1) {
            out.ledger = std::move(set.front()->ledger);
        } else {
            for (auto& l : set) {
                out.ledger.merge(l->ledger);
            }
        }
        out.ledger.set_output_formats(cut.outputs.formats);  // (streams in no file)
        for (const std::string& note : window_notes(out.info)) {
            out.ledger.add_note(note);
        }
        if (out.info.writer_memory) {
            WriterMemory& m = *out.info.writer_memory;
            if (m.bound_bytes > 0) {
                m.backlog_peak_share =
                    static_cast<double>(m.backlog_peak_bytes) / static_cast<double>(m.bound_bytes);
            }
            for (const std::string& note : {memory_cap.note, planning_note, core_note}) {
                if (!note.empty()) {
                    out.ledger.add_note(note);
                }
            }
            if (const std::string why = writer_drops_cause(m); !why.empty()) {
                out.ledger.explain_write_drops(why);
            }
        }
        if (settings.expect) {
            ExpectTimes times;
            times.host_clock = source.live();
            times.join_ns = scan_join_ns;
            times.end_ns = end_ns;
            out.ledger.set_expectations(
                evaluate_expectations(*settings.expect, settings.expect_options,
                                      out.ledger.streams(), settings.demux.groups, times));
        }
        out.info.duration_s = std::chrono::duration<double>(Clock::now() - scan_start).count();
        out.info.stats_lines_dropped = ticker.dropped();
        out.exit_code = exit_code_for(out.ledger, out.info);
        if (last) {
            apply_faults(faults, out);
        }
        if (!out.info.error.empty() && !out.info.interrupted) {
            out.info.stopped_by = "error";  // the input cut short, a device or a thread failed
        }
    };
    int worst_code = kExitZeroLoss;
    // With several scans, at a scan's stop and grace: the next scan's lanes
    // made and the source moved onto them, then the scan's files closed and
    // its outcome handed over, while the source runs on. The frames between
    // two scans are the next one's before_window.
    const auto next_scan = [&](Clock::time_point now) {
        std::vector<SourceLane> targets;
        RunLanes next = make_lanes(cuts[scan + 1], targets);
        prepare_writers(next);
        const std::int64_t end_ns = expect_clock_ns();
        source.reconnect(targets);  // (returns once no thread touches the old lanes)
        retired = std::move(lanes);
        lanes = std::move(next);
        RunOutcome done = std::move(outcome);
        done.info.stopped_by = "window_end";
        RunOutcome fresh;
        outcome = std::move(fresh);
        outcome.info.command = done.info.command;
        outcome.info.source = done.info.source;
        outcome.info.input = done.info.input;
        outcome.info.run_id = new_run_id();
        // The old lanes' last counts are read from their ledgers (no thread
        // delivers into them now); the new lanes' views start empty.
        finish_lanes(retired, done, cuts[scan], true, end_ns, false);
        retired.clear();
        views.assign(lanes.size(), LiveView{});
        worst_code = worse_exit_code(worst_code, done.exit_code);
        settings.scan_done(std::move(done));
        ++scan;
        scan_start = Clock::now();
        scan_start_wall_ns = outcome.info.started_ns = wall_clock_ns();
        scan_join_ns = expect_clock_ns();
        scan_base = all_witnesses(source, settings, lanes);
        announce(cuts[scan], now);
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
            if (scan + 1 < cuts.size()) {
                // While the source's threads run, nothing may leave by an
                // exception: a scan that cannot be made ends the capture.
                try {
                    next_scan(now);
                    continue;
                } catch (const std::exception& e) {
                    faults.report(fmt::format("scan {}", cuts[scan + 1].scan_name), e.what());
                    outcome.info.stopped_by = "error";
                    break;
                }
            }
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
                    publish_interface_counts(
                        lanes, views, source,
                        less_counters(all_witnesses(source, settings, lanes), scan_base),
                        scan_start_wall_ns, false);
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
    }
    const bool saw_end =
        outcome.info.stopped_by == "window_end" || outcome.info.stopped_by == "end_of_input";
    finish_lanes(lanes, outcome, cuts[scan], saw_end, end_ns, true);
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
    if (scheduled) {
        // The capture's own outcome: how it ended, the scans' worst verdict.
        RunOutcome capture;
        capture.info = outcome.info;
        worst_code = worse_exit_code(worst_code, outcome.exit_code);
        settings.scan_done(std::move(outcome));
        capture.exit_code = worst_code;
        outcome = std::move(capture);
    }
    IBVCAP_PROBE2(run_stop, settings.command.c_str(), outcome.exit_code);
    return outcome;
}

}  // namespace ibvcap
