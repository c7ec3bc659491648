// The verbs engine (lib/sources/verbs/engine.hpp) on the simulated NIC, packets/s on
// one core, split and non-split (issue 6: goal >= 20 Mpps split). See
// bench/README.md.
//
// Wired as run_verbs_capture wires one device (test/test_engine.cpp does the
// same): a SimHardware, a VerbsEngine with two GROUP:PORTs (one QP, one CQ,
// default ring depth and batches), a Demux with a Ledger and no writer, and a
// membership that joins nothing. The frames are generated once (6 antennas x
// 2 CODIF threads x 2 groups = 24 streams of 8298-byte frames) and played
// again and again, one CODIF period later each pass, so every stream keeps
// advancing.
//
// One benchmark iteration is one pass over the set, in batches: the NIC side
// delivers kBatch frames (SimHardware::deliver: steering, WR pop, DMA of what
// lands in host memory, completion), then the engine polls until it has
// handled them all (poll_once: CQ poll, wr_id checks, Frame, Demux::on_frame,
// re-post in batches). The two phases are timed apart:
//   * the benchmark's time (manual time, so items_per_second and
//     ns_per_packet) is the engine's phase only: what the poll core spends;
//     the simulated CQ poll and post_recv (a mutex each per batch) stand in
//     for libibverbs' user-space poll and post, which also run on that core;
//   * nic_s_per_packet and with_nic_Mpps add the NIC side: what one core
//     does when it plays the NIC too (a lower bound on the engine's rate).
// With the split the simulated NIC writes only SGE0 (the header slot, host
// memory): SimConfig::skip_payload_dma, since payload DMA costs the real NIC,
// not the CPU. Without the split the whole frame lands in host memory and is
// copied.
// After the run the ledger must say zero-loss with every frame counted as
// CODIF and the NIC must have dropped nothing; anything else fails the run.
#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_sim.hpp"
#include "formats/codif.hpp"
#include "lib/core/device_calls.hpp"
#include "lib/core/netaddr.hpp"
#include "lib/demux/demux.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/sinks/block_sink.hpp"
#include "lib/sources/igmp.hpp"
#include "lib/sources/verbs/engine.hpp"
#include "lib/sources/verbs/payload_memory.hpp"
#include "lib/traffic/generator.hpp"
#include "test/sim/sim_nic.hpp"

namespace {

using namespace ibvcap;
using bench::frame_set;
using bench::FrameSet;
using bench::kBatch;
using bench::NoMembership;
using bench::SimWire;
using bench::traffic;
using Clock = std::chrono::steady_clock;

// One run of the engine with options `o` over `set` (see the top of the file).
void run_engine(benchmark::State& state, FrameSet& set, const GeneratorConfig& traffic_config,
                const EngineOptions& o, bool dma_leaves_cache = false) {
    sim::SimConfig config;
    config.skip_payload_dma = true;  // only SGE1 is skipped: without the split all is copied
    config.dma_leaves_cache = dma_leaves_cache;
    SimWire wire(config, traffic_config);
    auto& [provider, nic, device, ledger, demux] = wire;
    const auto memory = make_host_payload_memory();
    const bool split = o.split;
    VerbsEngine engine(*device, o, demux, ledger, *memory,
                       [](const Endpoint&) { return std::make_unique<NoMembership>(); });
    engine.start();

    std::uint64_t fed = 0;
    Clock::duration nic_time{};
    Clock::duration engine_time{};
    bool stuck = false;
    for (auto _ : state) {
        set.advance();
        Clock::duration pass{};
        for (std::size_t begin = 0; begin < set.count && !stuck; begin += kBatch) {
            stuck = !bench::play_batch(*nic, engine, set, begin,
                                       std::min(set.count, begin + kBatch), fed, nic_time, pass);
        }
        engine_time += pass;
        state.SetIterationTime(std::chrono::duration<double>(pass).count());
    }
    engine.stop();
    engine.report_to(ledger);

    const Totals t = ledger.totals();
    const sim::SimCounters c = nic->counters();
    if (stuck || t.packets != fed || t.codif != fed || !ledger.zero_loss() ||
        c.out_of_buffer != 0 || c.unmatched != 0 || engine.stats().frames != fed ||
        engine.stats().unattributed != 0) {
        state.SkipWithError(("wrong ledger: " + std::to_string(t.packets) + " packets, " +
                             std::to_string(t.codif) + " CODIF, " + std::to_string(t.missing) +
                             " missing, NIC out_of_buffer " + std::to_string(c.out_of_buffer) +
                             ", engine frames " + std::to_string(engine.stats().frames) + " of " +
                             std::to_string(fed) + " delivered")
                                .c_str());
        return;
    }
    const double frames = static_cast<double>(fed);
    const double nic_s = std::chrono::duration<double>(nic_time).count();
    const double engine_s = std::chrono::duration<double>(engine_time).count();
    state.SetItemsProcessed(static_cast<std::int64_t>(fed));
    state.SetLabel(split ? "split (SGE0 header slot, SGE1 payload not written)"
                         : "no split (whole frame written to host memory)");
    state.counters["ns_per_packet"] = benchmark::Counter(
        static_cast<double>(set.count),  // seconds per packet
        benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
    state.counters["nic_s_per_packet"] = nic_s / frames;
    state.counters["with_nic_Mpps"] = frames / (nic_s + engine_s) / 1e6;
    state.counters["polls_per_frame"] =
        static_cast<double>(engine.stats().polls) / static_cast<double>(fed);
    state.counters["qps"] = static_cast<double>(engine.queue_pairs());
}

void BM_Engine(benchmark::State& state) {
    EngineOptions o = SimWire::engine_options();
    o.split = state.range(0) != 0;
    run_engine(state, frame_set(), traffic(), o);
}

BENCHMARK(BM_Engine)->ArgName("split")->Arg(1)->Arg(0)->UseManualTime()->Unit(
    benchmark::kMicrosecond);

// Many groups (issues 18, 30, 44): 1 or 64 groups, 64 streams in each case
// (1 group x 32 antennas x 2 threads, 8 x 4 x 2, 64 x 1 x 1), 96 frames per
// stream per pass, round-robin over the streams; split; rings of 1,024 WRs
// (64 QPs x 4,096 default slots would be 2 GiB of payload slots).
GeneratorConfig group_traffic(std::size_t groups) {
    std::uint32_t antennas = 32;
    std::uint16_t threads = 2;
    if (groups == 8) {
        antennas = 4;
    } else if (groups == 64) {
        antennas = 1;
        threads = 1;
    }
    GeneratorConfig c = traffic();
    c.antennas.clear();
    for (std::uint32_t a = 0; a < antennas; ++a) {
        c.antennas.push_back(0x0a000000u + 11 + a);
    }
    c.groups.clear();
    for (std::size_t g = 0; g < groups; ++g) {
        c.groups.push_back(Endpoint{0xef110001u + static_cast<std::uint32_t>(g), 36001});
    }
    c.threads = threads;
    c.frames = 96;
    c.frames_per_period = 96;
    return c;
}

// Args: groups, queues (--queues; 0: the default, one QP for every group's
// rules; 64 with 64 groups: a QP per group, the layout before issue 44),
// dma (the NIC's writes flushed from the poll core's caches, below).
void BM_EngineGroups(benchmark::State& state) {
    const auto groups = static_cast<std::size_t>(state.range(0));
    static std::map<std::size_t, std::unique_ptr<FrameSet>> sets;  // built once per group count
    const GeneratorConfig t = group_traffic(groups);
    auto& built = sets[groups];
    if (!built) {
        built = std::make_unique<FrameSet>(t);
    }
    EngineOptions o = SimWire::engine_options(t);
    o.queues = static_cast<std::uint32_t>(state.range(1));
    o.ring_depth = 1024;
    run_engine(state, *built, t, o, state.range(2) != 0);
    state.counters["groups"] = static_cast<double>(groups);
}

// dma:1: the NIC's writes flushed from the poll core's caches
// (SimConfig::dma_leaves_cache), as after a real NIC's DMA: one ring's
// header slots (128 KiB) otherwise sit in the poll core's L2 when it reads
// them, and 64 rings' (8 MiB) do not, which flatters one QP against many.
BENCHMARK(BM_EngineGroups)
    ->ArgNames({"groups", "queues", "dma"})
    ->Args({1, 0, 0})
    ->Args({64, 0, 0})
    ->Args({64, 64, 0})
    ->Args({1, 0, 1})
    ->Args({64, 0, 1})
    ->Args({64, 64, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Many streams through the engine on the default layout (issue 44): 24 or
// 2,400 streams of 24 groups (1 antenna x 1 thread each, or 50 x 2), the same
// 9,600 frames per pass round-robin over them, so only the per-stream state
// grows; the default ring (4,096 WRs, one QP).
GeneratorConfig stream_traffic(std::size_t streams) {
    GeneratorConfig c = traffic();
    const std::uint32_t antennas = streams >= 2400 ? 50 : 1;
    c.threads = streams >= 2400 ? 2 : 1;
    const std::uint32_t ngroups = 24;
    c.antennas.clear();
    for (std::uint32_t a = 0; a < antennas; ++a) {
        c.antennas.push_back(0x0a000000u + 11 + a);
    }
    c.groups.clear();
    for (std::uint32_t g = 0; g < ngroups; ++g) {
        c.groups.push_back(Endpoint{0xef110001u + g, 36001});
    }
    c.frames = 9600 / (ngroups * antennas * c.threads);
    c.frames_per_period = c.frames;
    return c;
}

void BM_EngineStreams(benchmark::State& state) {
    const auto streams = static_cast<std::size_t>(state.range(0));
    static std::map<std::size_t, std::unique_ptr<FrameSet>> sets;
    const GeneratorConfig t = stream_traffic(streams);
    auto& built = sets[streams];
    if (!built) {
        built = std::make_unique<FrameSet>(t);
    }
    run_engine(state, *built, t, SimWire::engine_options(t), state.range(1) != 0);
    state.counters["streams"] = static_cast<double>(streams);
}

BENCHMARK(BM_EngineStreams)
    ->ArgNames({"streams", "dma"})
    ->Args({24, 1})
    ->Args({2400, 1})
    ->Args({24, 0})
    ->Args({2400, 0})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Several devices (issue 30, item 4): N simulated devices, each wired as
// run_verbs_capture wires one -i (its own SimHardware, engine, CQ, demux and
// ledger) on a thread of its own pinned to core d % cores, as --poll-cpu
// pins each device's poll thread. Each thread plays its NIC too (deliver,
// then poll, as BM_Engine; split, payload not written), so a core does both
// the NIC's simulated work and the engine's: frames/s here are with the
// NIC's work (BM_Engine's with_nic_Mpps), and the ratio of N devices to one
// says how the per-device work scales across cores, not what one real NIC
// port would deliver. One iteration: every thread runs kDevicePasses passes
// over its own copy of the 24-stream traffic, started together; the time is
// the wall clock until the last thread is done. Setup (rings, rules) is
// before the first iteration. Each ledger must say zero-loss with every frame.
constexpr int kDevicePasses = 40;

void BM_Devices(benchmark::State& state) {
    const auto devices = static_cast<std::size_t>(state.range(0));
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    struct Lane {
        FrameSet set = frame_set();
        std::unique_ptr<SimWire> wire;
        std::unique_ptr<PayloadMemory> memory;
        std::unique_ptr<VerbsEngine> engine;
        std::uint64_t fed = 0;
        bool stuck = false;
    };
    std::vector<std::unique_ptr<Lane>> lanes;
    for (std::size_t d = 0; d < devices; ++d) {
        auto lane = std::make_unique<Lane>();
        sim::SimConfig config;
        config.name = "sim_mlx5_" + std::to_string(d);
        config.skip_payload_dma = true;
        lane->wire = std::make_unique<SimWire>(config);
        lane->memory = make_host_payload_memory();
        lane->engine = std::make_unique<VerbsEngine>(
            *lane->wire->device, SimWire::engine_options(), lane->wire->demux, lane->wire->ledger,
            *lane->memory, [](const Endpoint&) { return std::make_unique<NoMembership>(); });
        lanes.push_back(std::move(lane));
    }
    // The threads wait for each iteration's start, run it, and report done.
    std::atomic<std::uint64_t> round{0};
    std::atomic<std::size_t> done{0};
    std::atomic<bool> quit{false};
    std::vector<std::thread> threads;
    for (std::size_t d = 0; d < devices; ++d) {
        threads.emplace_back([&, d] {
            cpu_set_t cpus;
            CPU_ZERO(&cpus);
            CPU_SET(d % cores, &cpus);
            ::pthread_setaffinity_np(::pthread_self(), sizeof cpus, &cpus);
            Lane& lane = *lanes[d];
            lane.engine->start();
            std::uint64_t seen = 0;
            for (;;) {
                round.wait(seen);  // (C++20 atomic wait: a futex, no spinning core)
                if (quit.load()) {
                    break;
                }
                seen = round.load();
                for (int p = 0; p < kDevicePasses && !lane.stuck; ++p) {
                    lane.set.advance();
                    Clock::duration unused{};
                    for (std::size_t begin = 0; begin < lane.set.count && !lane.stuck;
                         begin += kBatch) {
                        lane.stuck = !bench::play_batch(
                            *lane.wire->nic, *lane.engine, lane.set, begin,
                            std::min(lane.set.count, begin + kBatch), lane.fed, unused, unused);
                    }
                }
                done.fetch_add(1);
                done.notify_all();
            }
            lane.engine->stop();
        });
    }
    std::uint64_t frames = 0;
    for (auto _ : state) {
        done.store(0);
        const auto t0 = Clock::now();
        round.fetch_add(1);
        round.notify_all();
        for (std::size_t n = done.load(); n < devices; n = done.load()) {
            done.wait(n);
        }
        state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
        frames += devices * kDevicePasses * lanes[0]->set.count;
    }
    quit.store(true);
    round.fetch_add(1);
    round.notify_all();
    for (auto& t : threads) {
        t.join();
    }
    for (auto& lane : lanes) {
        lane->engine->report_to(lane->wire->ledger);
        const Totals t = lane->wire->ledger.totals();
        if (lane->stuck || t.codif != lane->fed || !lane->wire->ledger.zero_loss() ||
            lane->wire->nic->counters().out_of_buffer != 0) {
            state.SkipWithError(("wrong ledger: " + std::to_string(t.codif) + " CODIF of " +
                                 std::to_string(lane->fed) + " delivered")
                                    .c_str());
            return;
        }
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(frames));
    state.counters["devices"] = static_cast<double>(devices);
    state.counters["cores"] = static_cast<double>(cores);
    state.SetLabel("each device's NIC and engine on its own pinned thread");
}
BENCHMARK(BM_Devices)
    ->ArgName("devices")
    ->Arg(1)
    ->Arg(2)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// The GPU path on its stand-in (issue 11: copies that keep up): payload slots
// reachable only as device memory, every CODIF frame held and placed in its
// (group, antenna) block ring by the sink's copy thread, which reads them in
// batches. What is measured is the copy thread's device calls (the calls the
// GPU build would make in the stand-in's place, lib/core/device_calls.hpp) per
// 1,000 frames and the payload bytes per copy call; the goal is <= 20 calls
// per 1,000 frames. 24 streams in 12 rings (6 antennas x 2 groups). Each pass
// waits until the copy thread has given every slot back.
void BM_GpuStandin(benchmark::State& state) {
    FrameSet& set = frame_set();
    SimWire wire{sim::SimConfig{}};
    auto& [provider, nic, device, ledger, demux] = wire;
    StandinDevicePayloadMemory memory;
    DeviceCallLog& log = memory.log();
    const EngineOptions o = SimWire::engine_options();
    BlockSinkOptions bo;
    bo.ring.frames_per_block = 256;
    bo.ring.threads = 2;
    bo.ring.blocks = 8;
    bo.memory = [&log] { return make_host_block_memory(&log); };
    BlockSink sink(bo);
    std::vector<BlockSink::Key> keys;
    for (const Endpoint& g : o.groups) {
        for (const std::uint32_t a : traffic().antennas) {
            keys.push_back({g, a});
        }
    }
    sink.prepare(keys, max_payload_bytes(o));
    // Blocks are taken and given back at once, as a consumer that keeps up.
    std::atomic<bool> stop{false};
    std::thread consumer([&] {
        while (!stop.load()) {
            bool any = false;
            for (std::size_t i = 0; i < sink.ring_count(); ++i) {
                BlockRing& ring = sink.ring_at(i);
                while (const Block* b = ring.acquire(std::chrono::milliseconds(0))) {
                    ring.release(b);
                    any = true;
                }
            }
            if (!any) {
                std::this_thread::sleep_for(std::chrono::microseconds(200));
            }
        }
    });
    demux.add_sink(sink);
    VerbsEngine engine(*device, o, demux, ledger, memory,
                       [](const Endpoint&) { return std::make_unique<NoMembership>(); });
    engine.start();
    using C = DeviceCallLog::Call;
    const auto copy_calls = [&] {
        return log.calls(C::flush) + log.calls(C::copy) + log.calls(C::synchronize);
    };
    const std::uint64_t calls_before = copy_calls();
    std::uint64_t fed = 0;
    for (auto _ : state) {
        set.advance();
        for (std::size_t begin = 0; begin < set.count; begin += kBatch) {
            const std::size_t end = std::min(set.count, begin + kBatch);
            for (std::size_t i = begin; i < end; ++i) {
                nic->deliver(set.frame(i));
            }
            const std::uint64_t want = fed + (end - begin);
            while (engine.frames_published() < want && engine.poll_once() != 0) {
            }
            fed = want;
            while (engine.slots_held() > 0) {
                engine.poll_once();  // takes back what the copy thread released
            }
        }
    }
    engine.stop();
    sink.flush();
    stop.store(true);
    consumer.join();
    engine.report_to(ledger);
    sink.report_to(ledger);
    const Totals t = ledger.totals();
    if (t.codif != fed || t.block_misses != 0 || log.on_watched() != 0 ||
        log.unflushed_reads() != 0) {
        state.SkipWithError(("frames " + std::to_string(t.codif) + " of " + std::to_string(fed) +
                             ", block misses " + std::to_string(t.block_misses))
                                .c_str());
        return;
    }
    const double frames = static_cast<double>(fed);
    const double calls = static_cast<double>(copy_calls() - calls_before);
    state.SetItemsProcessed(static_cast<std::int64_t>(fed));
    state.SetLabel("device payload stand-in, block sink copy thread");
    state.counters["calls_per_1000_frames"] = 1000.0 * calls / frames;
    state.counters["bytes_per_copy_call"] =
        static_cast<double>(log.bytes()) / static_cast<double>(log.calls(C::copy));
    state.counters["frames_per_batch"] = frames / static_cast<double>(sink.batches());
}

BENCHMARK(BM_GpuStandin)->Unit(benchmark::kMillisecond)->Iterations(20);

}  // namespace
