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
#include "lib/core/utc.hpp"
#include "lib/host/cores.hpp"
#include "lib/run/console.hpp"
#include "lib/run/metrics.hpp"
#include "lib/run/run_lanes.hpp"
#include "lib/run/run_sampler.hpp"
#include "lib/run/run_window.hpp"
#include "lib/run/scan_queue.hpp"
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
    // A capture of several scans: the scans to come, their directories held
    // (lib/run/scan_queue.hpp); the first one's settings, else the run's own.
    const bool scheduled = !settings.scans.empty() || settings.control != nullptr;
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
    ScanQueue queue(settings, source.input_file());
    // Held until every file of the run is closed (it outlives the lanes).
    OutputDirLock output_lock;
    if (scheduled) {
        queue.admit(settings.scans);
    } else if (!settings.outputs.formats.empty()) {
        prepare_output_dir(settings.outputs.output_dir);
        output_lock = OutputDirLock(settings.outputs.output_dir);
        // Every name this run may write is checked here, under the lock:
        // the per-antenna files that appear with their first frame too, so
        // the disk threads never find an earlier run's file in their way.
        claim_outputs(settings.outputs, source.input_file(), settings.writer.direct_io);
    }
    // What the lanes are now: a scan (scan_now), idle between scans, or the run.
    std::optional<Scan> scan_now;
    if (scheduled &&
        queue.due(static_cast<std::int64_t>(wall_clock_ns()), settings.control != nullptr)) {
        scan_now = queue.pop();
    }
    RunSettings cut_now = !scheduled ? settings
                          : scan_now ? scan_cut(settings, *scan_now)
                                     : idle_cut(settings);
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
        lanes = make_lanes(cut_now, targets);
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
    auto scan_start = start;  // its start (the timeline's seconds count from it)
    std::uint64_t scan_start_wall_ns = start_wall_ns;
    std::int64_t scan_join_ns = join_ns;
    std::vector<std::string> scan_notes;  // for its ledger, when it ends
    // 0, negative or NaN: no limit; capped at ~30 years so the cast cannot overflow.
    double limit_s = settings.duration_s > 0 ? std::min(settings.duration_s, 1e9) : 0.0;
    auto deadline =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit_s));
    // A frame window: said at its scan's start; a live run (or scan) ends at its stop and grace.
    bool window_ends_run = false;
    const auto announce = [&](const RunSettings& cut, Clock::time_point now) {
        window_ends_run = false;
        if (!cut.demux.window) {
            return;
        }
        // (A scan of a start request: one with no schedule line.)
        const double until_stop_s = announce_window(*cut.demux.window, cut, source.live(),
                                                    outcome.info, scan_now && scan_now->line == 0);
        if (source.live() && cut.demux.window->has_stop()) {
            deadline =
                now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                          std::clamp(until_stop_s + cut.window_grace_s, 0.0, 1e9)));
            window_ends_run = true;
        }
    };
    announce(cut_now, start);
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
    // The timeline's seconds (lib/run/run_sampler.hpp); copies waited for
    // half a tick at most.
    SecondSampler sampler(std::min(std::chrono::milliseconds(200), settings.tick / 2));
    sampler.begin(start, {}, lanes.size());
    const auto seconds_since_start = [&](Clock::time_point t) {
        return std::chrono::duration<double>(t - start).count();
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
        for (const auto& v : sampler.views()) {
            in.packets += v.packets;
            in.bytes += v.bytes;
            for (std::size_t r = 0; r < kReasonCount; ++r) {
                in.reasons[r] += v.reasons[r];
            }
            in.streams.insert(in.streams.end(), v.streams.begin(), v.streams.end());
        }
        in.witnesses = sampler.witnesses();
        in.lost_by_cause = timeline.lost_by_cause();
        // The writers' drops reach the timeline at the end; until then their
        // witness has them.
        for (const LossCause c : {LossCause::writer, LossCause::consumer}) {
            auto& lost = in.lost_by_cause[static_cast<std::size_t>(c)];
            for (const auto& w : sampler.witnesses()) {
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
    // closed, the source's counters (its share: sampler.base()), the last
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
        if (lanes_write_pcapng(set)) {
            publish_interface_counts(
                set, sampler.views(), source,
                less_counters(all_witnesses(source, settings, set), sampler.base()),
                scan_start_wall_ns, true);
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
                l->ledger.rebase_source_counters(sampler.base());
            }
        } else {
            // The source still runs: its counters as they stand, less their
            // values at the scan's start (the writers' drops are the ledger's own).
            for (SourceCounter& c : less_counters(source.witnesses(), sampler.base())) {
                set.front()->ledger.add_source_counter(std::move(c));
            }
        }
        // The last second, from the final counts: the timeline's seconds add up
        // to the report's totals.
        sampler.close(out.info.timeline, Clock::now(), set, all_witnesses(source, settings, set));
        {
            std::uint64_t write_drops = 0;
            std::uint64_t consumer_drops = 0;
            for (const auto& l : set) {
                const Totals t = l->ledger.totals();
                write_drops += t.write_drops;
                consumer_drops += t.consumer_drops;
            }
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
        for (std::string& note : scan_notes) {  // (the schedule's re-reads in it)
            out.ledger.add_note(std::move(note));
        }
        scan_notes.clear();
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
    std::uint64_t idle_frames = 0;
    const auto due = [&](const ScanQueue& q) {
        return q.due(static_cast<std::int64_t>(wall_clock_ns()), settings.control != nullptr);
    };
    // With several scans, at a scan's stop and grace, at a control stop, or
    // when a scan comes while idle: the next scan's lanes (idle ones with
    // --control and none to come) made and the source moved onto them, then
    // the scan's files closed and its outcome handed over, while the source
    // runs on. The frames between two scans are the next one's before_window.
    // Returns false when there is nothing to move on to: the capture ends.
    const auto move_on = [&](bool saw_end, const std::string& why) {
        if (queue.empty() && settings.control == nullptr) {
            return false;
        }
        std::optional<Scan> next_scan;
        if (due(queue)) {
            next_scan = queue.pop();
            if (next_scan->line == 0) {
                // A start request's scan starts as its lanes take the frames:
                // those that came before were the idle lanes'.
                next_scan->window.start_ns = static_cast<std::int64_t>(wall_clock_ns());
            }
        }
        RunSettings next_cut = next_scan ? scan_cut(settings, *next_scan) : idle_cut(settings);
        std::vector<SourceLane> targets;
        RunLanes next = make_lanes(next_cut, targets);
        prepare_writers(next);
        const std::int64_t end_ns = expect_clock_ns();
        source.reconnect(targets);  // (returns once no thread touches the old lanes)
        retired = std::move(lanes);
        lanes = std::move(next);
        RunOutcome done = std::move(outcome);
        RunOutcome fresh;
        outcome = std::move(fresh);
        outcome.info.command = done.info.command;
        outcome.info.source = done.info.source;
        outcome.info.input = done.info.input;
        outcome.info.run_id = new_run_id();
        // (No thread delivers into the old lanes now: their ledgers are read.)
        if (scan_now) {
            done.info.stopped_by = why;
            finish_lanes(retired, done, cut_now, saw_end, end_ns, false);
            worst_code = worse_exit_code(worst_code, done.exit_code);
            settings.scan_done(std::move(done));
        } else {
            for (const auto& l : retired) {
                idle_frames += l->ledger.packets();
            }
        }
        retired.clear();
        scan_now = std::move(next_scan);
        cut_now = std::move(next_cut);
        scan_start = Clock::now();
        scan_start_wall_ns = outcome.info.started_ns = wall_clock_ns();
        scan_join_ns = expect_clock_ns();
        sampler.begin(scan_start, all_witnesses(source, settings, lanes), lanes.size());
        announce(cut_now, scan_start);  // (not `now`: closing the files took time)
        return true;
    };
    const auto notice = [&](const std::string& line) {
        if (settings.notices != nullptr) {
            settings.notices->write_within(fmt::format("ibvcap {}: {}\n", settings.command, line),
                                           std::chrono::seconds(1));
        }
    };
    // SIGHUP: the schedule read again, the scans to come replaced, or kept
    // when the file is refused; said on stderr and noted in the scan under way.
    const auto reload = [&] {
        const std::string line = queue.reload(
            settings.reload_schedule,
            scan_after_ns(scan_now ? &*scan_now : nullptr,
                          static_cast<std::int64_t>(wall_clock_ns()), settings.window_grace_s));
        notice(line);
        scan_notes.push_back(line);
    };
    // The control socket's requests (lib/run/control.hpp, answered by
    // answer_request): a stop is done by the loop right after; a start is a
    // scan at the head of the queue, taken at once as the loop is idle.
    bool stop_requested = false;
    const auto answer = [&](std::string_view request) {
        ControlState state{scan_now ? &*scan_now : nullptr, source.frames(),
                           settings.window_grace_s, stop_requested};
        std::string reply = answer_request(request, state, queue);
        stop_requested = state.stop_requested;
        return reply;
    };
    auto last_serve = start;
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
        if (scheduled) {
            // While the source's threads run, nothing may leave by an
            // exception: a scan that cannot be made ends the capture.
            try {
                if (settings.reload_request != nullptr &&
                    settings.reload_request->exchange(false, std::memory_order_relaxed)) {
                    reload();
                }
                if (settings.control != nullptr && now - last_serve >= kMaxStepWait) {
                    last_serve = now;
                    settings.control->serve(answer);
                }
                bool moved = false;
                if (stop_requested) {
                    stop_requested = false;
                    moved = move_on(false, "control");
                } else if (window_ends_run && now >= deadline) {
                    moved = move_on(true, "window_end");
                    if (!moved) {
                        outcome.info.stopped_by = "window_end";
                        break;
                    }
                } else if (!scan_now && due(queue)) {
                    moved = move_on(true, "");  // idle, and a scan is due
                }
                if (moved) {
                    continue;
                }
            } catch (const std::exception& e) {
                faults.report("scans", e.what());
                outcome.info.stopped_by = "error";
                break;
            }
        } else if ((limit_s > 0 || window_ends_run) && now >= deadline) {
            outcome.info.stopped_by = window_ends_run ? "window_end" : "duration";
            break;
        }
        if (now - last_tick >= settings.tick) {
            last_tick = now;
            // While the source's threads run, nothing may leave this loop by
            // an exception (a running std::thread would terminate the process).
            try {
                source.tick(outcome.info);
                if (sampler.ask(timeline, now, lanes, all_witnesses(source, settings, lanes),
                                source.demux_on_loop_thread())) {
                    after_sample(now);
                }
                if (ticker.enabled()) {
                    ticker.tick(snapshot(source.figures()));
                }
                if (lanes_write_pcapng(lanes)) {
                    publish_interface_counts(
                        lanes, sampler.views(), source,
                        less_counters(all_witnesses(source, settings, lanes), sampler.base()),
                        scan_start_wall_ns, false);
                }
            } catch (const std::exception& e) {
                faults.report("counters and stats", e.what());
            }
        }
        if (sampler.pending()) {
            try {
                if (sampler.collect(timeline, now, lanes)) {
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
    if (!scheduled || scan_now) {
        finish_lanes(lanes, outcome, cut_now, saw_end, end_ns, true);
    } else {
        for (const auto& l : lanes) {  // idle at the end: only its count
            idle_frames += l->ledger.packets();
        }
        outcome.exit_code = kExitZeroLoss;
        apply_faults(faults, outcome);
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
    if (scheduled) {
        // The capture's own outcome: how it ended, the scans' worst verdict.
        RunOutcome capture;
        capture.info = outcome.info;
        worst_code = worse_exit_code(worst_code, outcome.exit_code);
        if (scan_now) {
            settings.scan_done(std::move(outcome));
        }
        capture.exit_code = worst_code;
        capture.idle_frames = idle_frames;
        for (const Scan& s : queue.to_come()) {
            capture.scans_not_recorded.push_back(s.name);
        }
        outcome = std::move(capture);
    }
    IBVCAP_PROBE2(run_stop, settings.command.c_str(), outcome.exit_code);
    return outcome;
}

}  // namespace ibvcap
