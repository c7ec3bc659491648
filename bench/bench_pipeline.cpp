// The whole capture pipeline on one core (issue 30, item 1): simulated NIC
// completions → verbs engine → demux → ledger → file sinks → the writer's
// producer side (records into buffers, buffers handed to a disk thread whose
// writes go to /dev/null), per frame, in the layouts operators use:
//
//   * BM_Pipeline/headers_gpu: -F codifhdr with the payload in GPU memory
//     (the stand-in, lib/sources/verbs/payload_memory.hpp: reached only as
//     device memory, never read by the CPU); the NIC writes only SGE0, the
//     header slot (SimConfig::skip_payload_dma: payload DMA costs the NIC,
//     not the CPU). The goal: >= 6.0 Mpps, one 400 GbE port of 8298-byte
//     frames (400e9 / 8 / (8298 + 20) bytes with preamble and gap).
//   * BM_Pipeline/whole_host: -F codif with host payload. The writer holds
//     the payload in its receive slot (Frame::hold, the zero-copy hand-off)
//     and copies the 64-byte header; the disk thread writes from the slot.
//     The goal: >= 0.7 x this host's single-thread memcpy of the same bytes
//     (BM_MemcpyFrames, the physical limit of a copy).
//   * BM_Pipeline/whole_copied: the same with every record copied into the
//     writer's buffers (min_hold_bytes past any frame: what a source that
//     lends no frames, or a writer past its hold limit, does), for the record.
//
// In every layout the simulated NIC writes only SGE0, the header slot
// (SimConfig::skip_payload_dma). A real NIC's payload DMA costs the NIC, not
// the CPU, and lands in memory (or the last-level cache with DDIO), never in
// the poll core's L1/L2; the simulation's memcpy of 8 KiB per frame would
// instead fill this core's caches with payload just before the poll, which
// is neither a cost nor a cache state the real core sees. So the payload
// slots hold whatever they held (cold, in memory): the capture core never
// reads them when the writer holds them (layout 1), and copies them from
// memory when it does not (layout 2), as BM_MemcpyFrames copies.
//
// Wired as run_verbs_capture wires one device (bench/bench_sim.hpp); the
// writer as the capture command makes it (lib/run/common.cpp make_run_writer:
// live, so records are dropped, never waited for, when no buffer is free;
// --writer-memory's default 1 GiB; one disk thread), its files created by
// StreamFileSink under their real names, each a symbolic link to /dev/null
// made beforehand (so the disk thread's writes cost a system call and no
// copy: what is measured is the capture core). Timing as bench_engine.cpp:
// the NIC side delivers kBatch frames (untimed), then the engine polls until
// it has handled them (timed: the benchmark's manual time). Before a batch,
// when the NIC has fewer than a batch of WRs posted on a QP (slots held by
// the writer's buffers not yet written), the engine polls until it has them
// back; those polls are timed too (the label says how many batches waited),
// since a real poll thread spends them.
//
// After the run: the ledger says zero-loss with every frame counted, the NIC
// dropped nothing, and the writer's outputs hold every frame with none
// dropped; anything else fails the run (bench/run.sh prints FAIL).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_sim.hpp"
#include "formats/output.hpp"
#include "lib/sinks/file_sinks.hpp"
#include "lib/sinks/writer.hpp"
#include "lib/sources/verbs/payload_memory.hpp"

namespace {

using namespace ibvcap;
using bench::frame_set;
using bench::FrameSet;
using bench::kBatch;
using bench::NoMembership;
using bench::SimWire;
using bench::traffic;
using Clock = std::chrono::steady_clock;

enum Layout : int { headers_gpu = 0, whole_host = 1, whole_copied = 2 };

// A directory whose output files are links to /dev/null, removed at the end.
struct NullDir {
    std::filesystem::path path;
    NullDir() {
        std::string t =
            (std::filesystem::temp_directory_path() / "ibvcap-pipeline.XXXXXX").string();
        if (::mkdtemp(t.data()) == nullptr) {
            throw std::runtime_error("cannot make a directory in " +
                                     std::filesystem::temp_directory_path().string());
        }
        path = t;
    }
    ~NullDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    void link(const std::string& file) const { std::filesystem::create_symlink("/dev/null", file); }
};

void run_pipeline(benchmark::State& state, Layout layout) {
    FrameSet& set = frame_set();
    const GeneratorConfig t = traffic();
    sim::SimConfig config;
    config.skip_payload_dma = true;
    SimWire wire(config);
    auto& [provider, nic, device, ledger, demux] = wire;
    std::unique_ptr<PayloadMemory> memory;
    if (layout == headers_gpu) {
        memory = std::make_unique<StandinDevicePayloadMemory>();
    } else {
        memory = make_host_payload_memory();
    }

    NullDir dir;
    OutputOptions oo;
    oo.formats = {layout == headers_gpu ? OutputFormat::codifhdr : OutputFormat::codif};
    oo.output_dir = dir.path.string();
    oo.prefix = "bench";
    oo.groups = t.groups;
    oo.antennas = t.antennas;
    for (const Endpoint& g : t.groups) {
        for (const std::uint32_t a : t.antennas) {
            dir.link(output_path(oo, oo.formats[0], g, a));
        }
    }
    Writer::Options wo;
    wo.memory_bytes = std::size_t{1} << 30;  // --writer-memory's default
    wo.block_when_full = false;              // live (make_run_writer)
    wo.device_payload = layout == headers_gpu;
    if (layout == whole_copied) {
        wo.min_hold_bytes = std::numeric_limits<std::size_t>::max();
    }
    Writer writer(wo);
    StreamFileSink sink(oo, writer);
    for (const Endpoint& g : t.groups) {
        for (const std::uint32_t a : t.antennas) {
            sink.plan(g, a);
        }
    }
    demux.add_sink(sink);
    writer.prepare();

    VerbsEngine engine(*device, SimWire::engine_options(), demux, ledger, *memory,
                       [](const Endpoint&) { return std::make_unique<NoMembership>(); });
    engine.start();

    std::uint64_t fed = 0;
    std::uint64_t release_waits = 0;
    Clock::duration nic_time{};
    Clock::duration engine_time{};
    bool stuck = false;
    for (auto _ : state) {
        set.advance();
        Clock::duration pass{};
        for (std::size_t begin = 0; begin < set.count && !stuck; begin += kBatch) {
            const std::size_t end = std::min(set.count, begin + kBatch);
            const auto t0 = Clock::now();
            if (nic->min_posted_wrs() < end - begin) {
                ++release_waits;
                const auto deadline = t0 + std::chrono::seconds(10);
                while (nic->min_posted_wrs() < end - begin && !stuck) {
                    engine.poll_once();
                    stuck = Clock::now() > deadline;  // slots never came back
                }
            }
            pass += Clock::now() - t0;
            stuck = stuck || !bench::play_batch(*nic, engine, set, begin, end, fed, nic_time, pass);
        }
        engine_time += pass;
        state.SetIterationTime(std::chrono::duration<double>(pass).count());
    }
    sink.close();
    writer.finish();
    engine.stop();
    engine.report_to(ledger);

    std::uint64_t written = 0;
    std::uint64_t dropped = 0;
    std::string failed;
    for (const OutputStats& o : writer.stats()) {
        written += o.packets;
        dropped += o.dropped;
        if (!o.error.empty()) {
            failed = o.path + ": " + o.error;
        }
    }
    const Totals tt = ledger.totals();
    const sim::SimCounters c = nic->counters();
    if (stuck || tt.packets != fed || tt.codif != fed || !ledger.zero_loss() ||
        c.out_of_buffer != 0 || c.unmatched != 0 || written != fed || dropped != 0 ||
        !failed.empty()) {
        state.SkipWithError(("wrong ledger or files: " + std::to_string(tt.codif) + " CODIF of " +
                             std::to_string(fed) + " delivered, " + std::to_string(tt.missing) +
                             " missing, NIC out_of_buffer " + std::to_string(c.out_of_buffer) +
                             ", records written " + std::to_string(written) + ", dropped " +
                             std::to_string(dropped) + " (at the bound " +
                             std::to_string(writer.memory().drops_at_bound) + ", below it " +
                             std::to_string(writer.memory().drops_below_bound) + ")" +
                             (stuck ? ", stuck" : "") + (failed.empty() ? "" : ", " + failed))
                                .c_str());
        return;
    }
    const double frames = static_cast<double>(fed);
    const double nic_s = std::chrono::duration<double>(nic_time).count();
    const double engine_s = std::chrono::duration<double>(engine_time).count();
    state.SetItemsProcessed(static_cast<std::int64_t>(fed));
    state.SetBytesProcessed(static_cast<std::int64_t>(fed * set.frame_bytes));
    static constexpr const char* kLabels[] = {
        "-F codifhdr, payload in GPU memory (stand-in)",
        "-F codif, host payload, held in the slot (zero-copy)",
        "-F codif, host payload, every record copied"};
    // (Not a counter: one that is 0 in every repetition makes the aggregate
    // "cv" 0/0, which Google Benchmark writes as NaN, which is not JSON.)
    state.SetLabel(std::string(kLabels[layout]) +
                   (release_waits == 0
                        ? ""
                        : "; " + std::to_string(release_waits) + " batches waited for slots"));
    state.counters["ns_per_packet"] = benchmark::Counter(
        static_cast<double>(set.count),
        benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
    state.counters["nic_s_per_packet"] = nic_s / frames;
    state.counters["with_nic_Mpps"] = frames / (nic_s + engine_s) / 1e6;
    state.counters["record_bytes"] =
        static_cast<double>(set.frame_bytes - bench::kHeaderOffset);  // the codif record
}

void BM_Pipeline(benchmark::State& state) {
    run_pipeline(state, static_cast<Layout>(state.range(0)));
}
BENCHMARK(BM_Pipeline)
    ->ArgName("layout")
    ->Arg(headers_gpu)
    ->Arg(whole_host)
    ->Arg(whole_copied)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The physical limit of a copy on this host, one thread: the bytes a codif
// record holds (the CODIF frame, 8256 bytes: everything after the UDP
// header) copied with memcpy out of receive slots into 512 KiB buffers, as
// the writer would copy them were nothing held. The slots are the engine's:
// two rings of 4,096 at its payload stride, taken in turn, so each is cold
// (in memory, where the NIC's DMA left it: see the top of the file). The
// destination cycles through 256 MiB of buffers (the writer's stock: a
// sixteenth of its 1 GiB bound), so each buffer is cold too, as a buffer the
// disk thread gave back is.
void BM_MemcpyFrames(benchmark::State& state) {
    FrameSet& set = frame_set();
    const std::size_t record = set.frame_bytes - bench::kHeaderOffset;
    const std::size_t slot = 9216;  // the engine's payload slot stride (max_frame_bytes, aligned)
    const std::size_t ring_slots = 2 * std::size_t{EngineOptions{}.ring_depth};
    std::vector<std::uint8_t> slots(ring_slots * slot);
    for (std::size_t i = 0; i < ring_slots; ++i) {  // the frames, as the NIC left them
        std::memcpy(&slots[i * slot], set.frame(i % set.count).data(), set.frame_bytes);
    }
    std::size_t next_slot = 0;
    constexpr std::size_t kBuffer = 512 * 1024;
    constexpr std::size_t kBuffers = 512;  // 256 MiB
    std::vector<std::uint8_t> buffers(kBuffer * kBuffers);
    std::fill(buffers.begin(), buffers.end(), std::uint8_t{1});  // pages made
    std::size_t buffer = 0;
    std::size_t at = 0;
    std::uint64_t copied = 0;
    for (auto _ : state) {
        Clock::duration pass{};
        for (std::size_t begin = 0; begin < set.count; begin += kBatch) {
            const std::size_t end = std::min(set.count, begin + kBatch);
            const auto t0 = Clock::now();
            for (std::size_t i = begin; i < end; ++i) {
                if (at + record > kBuffer) {
                    buffer = (buffer + 1) % kBuffers;
                    at = 0;
                }
                std::memcpy(&buffers[buffer * kBuffer + at],
                            &slots[next_slot * slot + bench::kHeaderOffset], record);
                next_slot = (next_slot + 1) % ring_slots;
                at += record;
            }
            benchmark::ClobberMemory();
            pass += Clock::now() - t0;
            copied += end - begin;
        }
        state.SetIterationTime(std::chrono::duration<double>(pass).count());
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(copied));
    state.SetBytesProcessed(static_cast<std::int64_t>(copied * record));
    state.SetLabel("memcpy of each codif record from its slot into 512 KiB buffers");
    state.counters["ns_per_packet"] = benchmark::Counter(
        static_cast<double>(set.count),
        benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
    state.counters["record_bytes"] = static_cast<double>(record);
}
BENCHMARK(BM_MemcpyFrames)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
