#include "lib/run/verbs_capture.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "lib/host/devices.hpp"
#include "lib/host/nic_counters.hpp"
#include "lib/run/stats_line.hpp"
#include "lib/sources/igmp.hpp"

namespace ibvcap {

namespace {

// Everything one device needs; members in construction order, so the engine
// (QPs, flows) goes before the writer it feeds and the device it uses.
struct DevicePart {
    Ledger ledger;
    std::unique_ptr<verbs::Device> device;
    std::unique_ptr<Writer> writer;
    std::unique_ptr<Demux> demux;
    std::unique_ptr<NicCounters> counters;
    std::unique_ptr<VerbsEngine> engine;
    std::thread thread;
    int cpu = -1;
    std::atomic<bool> done{false};  // the poll thread has ended
    std::string error;              // what ended the poll thread early (read after join)
};

}  // namespace

std::vector<std::string> device_capability_lines(verbs::Provider& provider,
                                                 const std::string& device, std::uint8_t port) {
    try {
        const auto dev = provider.open(device, port);
        const verbs::DeviceCaps& c = dev->caps();
        auto yes = [](bool b) { return b ? "yes" : "no"; };
        return {fmt::format("raw-packet QP: {}   managed flow steering: {}   flow counters: {}",
                            yes(c.raw_packet_qp), yes(c.flow_steering), yes(c.flow_counters)),
                fmt::format("max_qp_wr: {}   max_cqe: {}   max_sge: {}", c.max_qp_wr, c.max_cqe,
                            c.max_sge),
                fmt::format("completion timestamps: {}{}", yes(c.completion_timestamps),
                            c.completion_timestamps
                                ? fmt::format(" (clock {} kHz)", c.hca_core_clock_khz)
                                : std::string())};
    } catch (const std::exception& e) {
        return {fmt::format("cannot open: {}", e.what())};
    }
}

CaptureTarget verbs_target(verbs::Provider& provider, const std::string& interface) {
    if (provider.device_names().empty()) {
        throw std::runtime_error("no RDMA devices found; on this host use --source pcap");
    }
    const NetInterface nif = resolve_interface(interface);
    if (nif.rdma_device.empty()) {
        throw std::runtime_error(fmt::format(
            "interface {} is not driven by an RDMA device (see ibvcap devices); use an mlx5 "
            "interface or --source pcap",
            nif.name));
    }
    CaptureTarget t;
    t.device = nif.rdma_device;
    t.port = nif.rdma_port;
    t.netdev = nif.name;
    t.ipv4 = nif.ipv4.front();
    return t;
}

TargetMembershipFactory kernel_memberships() {
    return [](const CaptureTarget& target, const Endpoint& group) {
        return kernel_membership(group, target.netdev, target.ipv4);
    };
}

RunOutcome run_verbs_capture(const CaptureRequest& request, verbs::Provider& provider,
                             const TargetMembershipFactory& memberships,
                             const std::atomic<bool>& stop) {
    RunOutcome outcome;
    outcome.info.command = "capture";
    outcome.info.source = "verbs";
    for (const auto& t : request.targets) {
        outcome.info.input += (outcome.info.input.empty() ? "" : ",") +
                              fmt::format("{}:{}({})", t.device, t.port, t.netdev);
    }
    if (request.targets.empty()) {
        throw std::runtime_error("no device to capture on");
    }
    if (!request.demux.formats.empty()) {
        prepare_output_dir(request.demux.output_dir);
    }
    // Declared before the parts so that it outlives their memory regions.
    const std::unique_ptr<PayloadMemory> host_memory = make_host_payload_memory();
    Faults local_faults;
    Writer::Options writer_options = request.writer;
    if (writer_options.faults == nullptr) {
        writer_options.faults = &local_faults;
    }
    const Faults& faults = *writer_options.faults;

    std::vector<std::unique_ptr<DevicePart>> parts;
    // Writers and the block sink's copy thread may hold receive slots (the
    // zero-copy hand-off): whatever way this function is left, they finish
    // with them while the engines and their memory still exist. (Declared
    // after `parts`, so it runs first; on the normal path both are no-ops by
    // then.)
    struct HoldersFinish {
        std::vector<std::unique_ptr<DevicePart>>& parts;
        BlockSink* blocks;
        ~HoldersFinish() {
            if (blocks != nullptr) {
                blocks->stop_copying();
            }
            for (auto& p : parts) {
                if (p->writer) {
                    p->writer->finish();
                }
            }
        }
    } holders_finish{parts, request.blocks};
    for (const auto& target : request.targets) {
        auto part = std::make_unique<DevicePart>();
        part->device = provider.open(target.device, target.port);
        DemuxOptions demux = request.demux;
        if (request.targets.size() > 1) {
            demux.prefix = fmt::format("{}_{}p{}", demux.prefix, target.device, target.port);
        }
        part->writer = make_run_writer(demux, writer_options, /*live=*/true);
        part->demux = std::make_unique<Demux>(demux, part->ledger, part->writer.get());
        if (request.observer) {
            part->demux->set_observer(request.observer);
        }
        if (request.blocks != nullptr) {
            if (request.targets.size() > 1) {
                throw std::runtime_error(
                    "--gpu takes one -i interface (one poll thread feeds the block rings)");
            }
            part->demux->add_observer(request.blocks->observer());
        }
        if (request.nic_counters) {
            part->counters = std::make_unique<NicCounters>(request.sysfs_root, target.device,
                                                           target.port, target.netdev);
        }
        MembershipFactory join;
        if (memberships) {
            join = [&memberships, target](const Endpoint& g) { return memberships(target, g); };
        }
        part->engine = std::make_unique<VerbsEngine>(
            *part->device, request.engine, *part->demux, part->ledger,
            request.payload != nullptr ? *request.payload : *host_memory, join);
        parts.push_back(std::move(part));
    }

    if (request.blocks != nullptr) {
        // Every ring the options let us foresee, with its blocks, made here:
        // no device memory or CUDA stream is made once frames flow (the poll
        // thread never, the copy thread only for a stream nobody listed).
        std::vector<BlockSink::Key> expected;
        for (const Endpoint& g : request.engine.groups) {
            for (const std::uint32_t a : request.engine.antennas) {
                expected.push_back({g, a});
            }
        }
        request.blocks->prepare(expected, max_payload_bytes(request.engine));
    }
    // Counters first, so that everything the rules steer is inside the window.
    for (auto& p : parts) {
        if (p->counters) {
            p->counters->snapshot_start();
            for (const auto& name : p->counters->missing()) {
                p->ledger.add_note(fmt::format("{}: drop counter {} cannot be read",
                                               p->device->caps().name, name));
            }
        }
    }
    for (auto& p : parts) {
        p->engine->start();
    }

    const auto start = std::chrono::steady_clock::now();
    // The live stats line, from the 1 Hz housekeeping below (this thread,
    // never a poll thread), summed over the devices, from what the poll
    // threads publish for other threads:
    //   packets  VerbsEngine::frames_published();
    //   bytes    VerbsEngine::bytes_published() (no counter in sysfs has the
    //            raw-packet QPs' bytes: the netdev's rx_bytes are the
    //            kernel's own rings; mlx5's port_rcv_data counts RoCE only);
    //   drops    the NIC and netdev drop counters read here once a second
    //            (out_of_buffer, rx_missed_errors, ...). Work-completion
    //            errors and the flow rules' undelivered counts are in the
    //            engine's poll-thread state and the writers' drops are known
    //            only when they finish: the summary has them, the line not;
    //   slots    VerbsEngine::slots_held();
    //   backlog  Writer::backlog_bytes().
    StatsTicker ticker(request.stats);
    const auto take_stats = [&parts] {
        StatsSnapshot s;
        stamp_now(s);
        std::uint64_t slots = 0;
        s.bytes = 0;
        for (const auto& p : parts) {
            s.packets += p->engine->frames_published();
            *s.bytes += p->engine->bytes_published();
            slots += p->engine->slots_held();
            if (p->counters) {
                s.drops += nic_drops_so_far(*p->counters);
            }
            if (p->writer) {
                s.writer_backlog_bytes =
                    s.writer_backlog_bytes.value_or(0) + p->writer->backlog_bytes();
            }
        }
        s.slots_held = slots;
        return s;
    };
    if (ticker.enabled()) {
        ticker.tick(take_stats());  // the baseline
    }
    std::atomic<bool> halt{false};
    std::size_t parts_started = 0;
    for (auto& p : parts) {
        DevicePart* part = p.get();
        const int cpu = parts_started < request.cpus.size() ? request.cpus[parts_started] : -1;
        ++parts_started;
        part->cpu = cpu;
        part->thread = std::thread([part, &halt, cpu] {
            if (cpu >= 0) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(static_cast<unsigned>(cpu), &set);
                if (const int err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set)) {
                    part->error = fmt::format("cannot pin the poll thread to cpu {}: {}", cpu,
                                              std::strerror(err));
                    part->done.store(true);
                    halt.wait(false);
                    return;
                }
            }
            try {
                part->engine->run(halt);
            } catch (const std::exception& e) {
                part->error = e.what();
            }
            part->done.store(true);
            // Every device tears down on its own thread at once, so no device
            // waits, joined and steering but unpolled, while another drains.
            halt.wait(false);
            try {
                part->engine->stop();  // leave the groups, drain, destroy the rules
            } catch (const std::exception& e) {
                part->error = part->error.empty() ? e.what() : part->error;
            }
            if (part->engine->stats().device_fatal && part->error.empty()) {
                part->error = fmt::format(
                    "{}: the device reported a fatal error; the capture "
                    "stopped (check dmesg and the NIC firmware)",
                    part->device->caps().name);
            }
        });
    }
    auto last_second = start;
    for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        if (std::chrono::steady_clock::now() - last_second >= std::chrono::seconds(1)) {
            // Once a second, off the poll threads: the NIC counters, and the
            // watchdog for streams that went silent while the NIC counts them.
            last_second = std::chrono::steady_clock::now();
            // The poll threads are running: nothing may leave this loop by
            // an exception (their std::thread would terminate the process).
            try {
                for (auto& p : parts) {
                    if (p->counters) {
                        p->counters->snapshot();
                    }
                    if (request.watchdog && !p->done.load()) {
                        for (const auto& alarm : p->engine->watchdog()) {
                            ++outcome.info.watchdog_alarms;
                            std::fprintf(stderr, "ibvcap capture: watchdog: %s\n", alarm.c_str());
                        }
                    }
                }
                if (ticker.enabled()) {
                    ticker.tick(take_stats());
                }
            } catch (const std::exception& e) {
                writer_options.faults->report("counters and stats", e.what());
            }
        }
        if (stop.load()) {
            outcome.info.interrupted = true;
            break;
        }
        if (faults.raised()) {
            break;  // a worker thread failed: stop as after a device fault
        }
        const double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (request.duration_s > 0 && elapsed >= request.duration_s) {
            break;
        }
        std::uint64_t frames = 0;
        bool ended = false;
        for (const auto& p : parts) {
            frames += p->engine->frames_published();
            ended = ended || p->done.load();
        }
        if (ended || (request.count > 0 && frames >= request.count)) {
            break;
        }
    }
    halt = true;
    halt.notify_all();
    for (auto& p : parts) {
        p->thread.join();
    }
    if (request.blocks != nullptr) {
        request.blocks->flush();  // the poll thread has stopped: hand out the open blocks
    }

    Ledger merged;
    for (auto& p : parts) {
        if (!p->error.empty()) {
            p->ledger.set_incomplete(p->error);
            outcome.info.error = outcome.info.error.empty() ? p->error : outcome.info.error;
        }
        if (p->writer) {
            p->writer->finish();
            p->ledger.set_outputs(p->writer->stats());
        }
        p->engine->report_to(p->ledger);
        const EngineStats& es = p->engine->stats();
        outcome.info.polling.push_back(
            PollFigures{fmt::format("{}:{}", p->device->caps().name, p->device->caps().port),
                        es.polls, es.empty_polls, es.frames, p->cpu});
        for (auto& c : p->engine->flow_counters()) {
            p->ledger.add_source_counter(std::move(c));
        }
        if (p->counters) {
            p->counters->snapshot();
            for (auto& c : p->counters->to_source_counters(p->device->caps().name + "/")) {
                p->ledger.add_source_counter(std::move(c));
            }
        }
        merged.merge(p->ledger);
    }
    outcome.info.duration_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    outcome.ledger = std::move(merged);
    outcome.exit_code = exit_code_for(outcome.ledger, outcome.info);
    apply_faults(faults, outcome);
    return outcome;
}

}  // namespace ibvcap
