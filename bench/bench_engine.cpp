// The verbs engine (lib/sources/verbs/engine.hpp) on the simulated NIC, packets/s on
// one core, split and non-split (issue 6: goal >= 20 Mpps split). See
// bench/README.md.
//
// Wired as run_verbs_capture wires one device (test/test_engine.cpp does the
// same): a SimHardware, a VerbsEngine with two GROUP:PORTs (two QPs, one CQ,
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

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_traffic.hpp"
#include "formats/codif.hpp"
#include "lib/demux/demux.hpp"
#include "lib/device_calls.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/netaddr.hpp"
#include "lib/sinks/block_sink.hpp"
#include "lib/sources/igmp.hpp"
#include "lib/sources/verbs/engine.hpp"
#include "lib/traffic/generator.hpp"
#include "test/sim/sim_nic.hpp"

namespace {

using namespace ibvcap;
using bench::kFramesPerPeriod;
using bench::kHeaderOffset;
using bench::traffic;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kBatch = 512;  // frames the NIC delivers between polls

struct FrameSet {
    std::size_t frame_bytes = 0;
    std::size_t count = 0;
    std::vector<std::uint8_t> whole;  // count x frame_bytes

    FrameSet() {
        Generator gen(traffic());
        frame_bytes = static_cast<std::size_t>(gen.config().frame_bytes());
        GeneratedFrame f;
        while (gen.next(f)) {
            whole.insert(whole.end(), f.bytes.begin(), f.bytes.end());
            ++count;
        }
    }
    Bytes frame(std::size_t i) const { return Bytes(&whole[i * frame_bytes], frame_bytes); }
    // Every frame one period later (CODIF seconds + period).
    void advance() {
        for (std::size_t i = 0; i < count; ++i) {
            std::uint8_t* header = &whole[i * frame_bytes + kHeaderOffset];
            CodifHeader h;
            if (decode_codif(Bytes(header, kCodifHeaderBytes), h) == CodifError::none) {
                h.seconds += h.period;
                encode_codif(h, MutableBytes(header, kCodifHeaderBytes));
            }
        }
    }
};

FrameSet& frame_set() {
    static FrameSet set;
    return set;
}

class NoMembership final : public GroupMembership {
  public:
    void rejoin() override {}
};

// What both benchmarks wire the engine to, as run_verbs_capture does for one
// device: the simulated NIC, its device, and a demux with its ledger (no
// writer) for the traffic's groups.
struct SimWire {
    sim::SimProvider provider;
    std::shared_ptr<sim::SimHardware> nic;
    std::unique_ptr<verbs::Device> device;
    Ledger ledger;
    Demux demux;

    explicit SimWire(const sim::SimConfig& config)
        : nic(provider.add(config)),
          device(provider.open(config.name, config.port)),
          demux(demux_options(), ledger) {}
    static DemuxOptions demux_options() {
        DemuxOptions d;
        d.groups = traffic().groups;
        return d;
    }
    static EngineOptions engine_options() {
        EngineOptions o;
        o.groups = traffic().groups;
        return o;
    }
};

void BM_Engine(benchmark::State& state) {
    const bool split = state.range(0) != 0;
    FrameSet& set = frame_set();

    sim::SimConfig config;
    config.skip_payload_dma = true;  // only SGE1 is skipped: without the split all is copied
    SimWire wire(config);
    auto& [provider, nic, device, ledger, demux] = wire;
    const auto memory = make_host_payload_memory();
    EngineOptions o = SimWire::engine_options();
    o.split = split;
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
            const std::size_t end = std::min(set.count, begin + kBatch);
            const auto t0 = Clock::now();
            for (std::size_t i = begin; i < end; ++i) {
                nic->deliver(set.frame(i));
            }
            const auto t1 = Clock::now();
            const std::uint64_t want = fed + (end - begin);
            while (engine.frames_published() < want) {
                if (engine.poll_once() == 0) {
                    stuck = true;  // the NIC dropped some: the check below reports it
                    break;
                }
            }
            const auto t2 = Clock::now();
            nic_time += t1 - t0;
            pass += t2 - t1;
            fed = want;
        }
        engine_time += pass;
        state.SetIterationTime(std::chrono::duration<double>(pass).count());
    }
    engine.stop();
    engine.report_to(ledger);

    const Totals t = ledger.totals();
    const sim::SimCounters c = nic->counters();
    if (stuck || t.packets != fed || t.codif != fed || !ledger.zero_loss() ||
        c.out_of_buffer != 0 || c.unmatched != 0 || engine.stats().frames != fed) {
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
}

BENCHMARK(BM_Engine)->ArgName("split")->Arg(1)->Arg(0)->UseManualTime()->Unit(
    benchmark::kMicrosecond);

// The GPU path on its stand-in (issue 11: copies that keep up): payload slots
// reachable only as device memory, every CODIF frame held and placed in its
// (group, antenna) block ring by the sink's copy thread, which reads them in
// batches. What is measured is the copy thread's device calls (the calls the
// GPU build would make in the stand-in's place, lib/device_calls.hpp) per
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
