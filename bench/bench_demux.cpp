// Parse + demux + ledger per 8298-byte CODIF packet, on one core (issue 6:
// goal <= 40 ns/packet). See bench/README.md.
//
// A realistic set of frames is generated once in memory (lib/traffic/generator.hpp:
// 6 antennas x 2 CODIF threads x 2 groups = 24 streams, 8192-byte payloads in
// Eth/IPv4/UDP, untagged), then fed to Demux::on_frame with a Ledger and no
// writer, as often as the benchmark asks. Between passes over the set every
// frame's CODIF seconds move on by one period (untimed), so each stream's
// sequence keeps advancing as on the wire: no pass is a run of duplicates.
//
// Two layouts of the same frames:
//   contiguous  each frame whole in one buffer, as the pcap sources hand them;
//   split       the verbs header/payload split: the 106 header bytes in a
//               compact arena (128-byte slots), the payload elsewhere.
// The time per pass is taken around the on_frame loop only (manual time).
// BM_DemuxStreams (issue 18) times the split layout with 24, 240 and 2,400
// streams (see scaling_traffic below).
// After the run the ledger must say zero-loss with every frame counted as
// CODIF; anything else is an error (the benchmark reports it and fails).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_traffic.hpp"
#include "formats/codif.hpp"
#include "lib/demux/demux.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/netaddr.hpp"
#include "lib/traffic/generator.hpp"

namespace {

using namespace ibvcap;
using bench::kFramesPerPeriod;
using bench::kHeaderOffset;
using bench::traffic;

constexpr std::size_t kHeadBytes = kHeaderOffset + kCodifHeaderBytes;
constexpr std::size_t kHeadStride = 128;

// The generated frames, stored whole (unless only the split layout is
// wanted); the split copy of their headers.
struct FrameSet {
    std::size_t frame_bytes = 0;
    std::size_t count = 0;
    std::vector<std::uint8_t> whole;   // count x frame_bytes (empty: heads only)
    std::vector<std::uint8_t> heads;   // count x kHeadStride (split layout)
    std::vector<std::uint8_t> tail;    // one payload, shared by every split frame
    std::vector<std::uint64_t> stamp;  // timestamps

    explicit FrameSet(const GeneratorConfig& config, bool keep_whole = true) {
        Generator gen(config);
        frame_bytes = static_cast<std::size_t>(gen.config().frame_bytes());
        GeneratedFrame f;
        while (gen.next(f)) {
            if (keep_whole) {
                whole.insert(whole.end(), f.bytes.begin(), f.bytes.end());
            }
            heads.insert(heads.end(), f.bytes.begin(),
                         f.bytes.begin() + static_cast<std::ptrdiff_t>(kHeadBytes));
            heads.resize(heads.size() + kHeadStride - kHeadBytes, 0);
            if (tail.empty()) {
                tail.assign(f.bytes.begin() + static_cast<std::ptrdiff_t>(kHeadBytes),
                            f.bytes.end());
            }
            stamp.push_back(f.timestamp_ns);
            ++count;
        }
    }

    // Every frame one period later (CODIF seconds + period).
    static void advance(std::uint8_t* header) {
        CodifHeader h;
        if (decode_codif(Bytes(header, kCodifHeaderBytes), h) != CodifError::none) {
            return;
        }
        h.seconds += h.period;
        encode_codif(h, MutableBytes(header, kCodifHeaderBytes));
    }
    void advance_whole() {
        for (std::size_t i = 0; i < count; ++i) {
            advance(&whole[i * frame_bytes + kHeaderOffset]);
        }
    }
    void advance_heads() {
        for (std::size_t i = 0; i < count; ++i) {
            advance(&heads[i * kHeadStride + kHeaderOffset]);
        }
    }
};

FrameSet& frame_set() {
    static FrameSet set(traffic());  // built once, shared by both benchmarks (each restores
                                     // nothing: a fresh Demux and Ledger start every run)
    return set;
}

void report(benchmark::State& state, const Ledger& ledger, std::uint64_t fed, std::size_t per_pass,
            std::size_t frame_bytes) {
    const Totals t = ledger.totals();
    if (t.packets != fed || t.codif != fed || !ledger.zero_loss()) {
        state.SkipWithError(("wrong ledger: " + std::to_string(t.packets) + " packets, " +
                             std::to_string(t.codif) + " CODIF, " + std::to_string(t.missing) +
                             " missing, " + std::to_string(t.duplicates) + " duplicates of " +
                             std::to_string(fed) + " fed")
                                .c_str());
        return;
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(fed));
    state.SetBytesProcessed(static_cast<std::int64_t>(fed * frame_bytes));
    // Seconds per packet: the console prints it with an SI prefix ("38.2ns"),
    // the JSON output in seconds.
    state.counters["ns_per_packet"] = benchmark::Counter(
        static_cast<double>(per_pass),
        benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
    state.counters["streams"] = static_cast<double>(ledger.streams().size());
}

DemuxOptions demux_options(const GeneratorConfig& config = traffic()) {
    DemuxOptions d;
    d.groups = config.groups;  // as a capture of the GROUP:PORTs sets them
    return d;
}

void BM_DemuxContiguous(benchmark::State& state) {
    FrameSet& set = frame_set();
    Ledger ledger;
    Demux demux(demux_options(), ledger);
    std::uint64_t fed = 0;
    for (auto _ : state) {
        set.advance_whole();
        const auto t0 = std::chrono::steady_clock::now();
        for (std::size_t i = 0; i < set.count; ++i) {
            Frame f;
            f.head = Bytes(&set.whole[i * set.frame_bytes], set.frame_bytes);
            f.wire_bytes = static_cast<std::uint32_t>(set.frame_bytes);
            f.timestamp_ns = set.stamp[i];
            demux.on_frame(f);
        }
        const auto t1 = std::chrono::steady_clock::now();
        state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
        fed += set.count;
    }
    report(state, ledger, fed, set.count, set.frame_bytes);
}

// One pass over `set` in the split layout, timed around the on_frame loop.
void run_split(benchmark::State& state, FrameSet& set, const DemuxOptions& options) {
    Ledger ledger;
    Demux demux(options, ledger);
    std::uint64_t fed = 0;
    const Bytes tail(set.tail.data(), set.tail.size());
    for (auto _ : state) {
        set.advance_heads();
        const auto t0 = std::chrono::steady_clock::now();
        for (std::size_t i = 0; i < set.count; ++i) {
            Frame f;
            f.head = Bytes(&set.heads[i * kHeadStride], kHeadBytes);
            f.tail = tail;
            f.wire_bytes = static_cast<std::uint32_t>(set.frame_bytes);
            f.timestamp_ns = set.stamp[i];
            demux.on_frame(f);
        }
        const auto t1 = std::chrono::steady_clock::now();
        state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
        fed += set.count;
    }
    report(state, ledger, fed, set.count, set.frame_bytes);
}

void BM_DemuxSplit(benchmark::State& state) {
    run_split(state, frame_set(), demux_options());
}

// Scaling (issue 18): the same number of frames per pass (9,600, so the
// headers' memory is the same in every case: 1.2 MB) spread over 24, 240 or
// 2,400 streams (antennas x CODIF threads x groups: 6x2x2, 30x2x4,
// 150x4x4), interleaved as a NIC delivers steady senders: one frame of
// every stream in turn (lib/traffic/generator.hpp: frame slot by frame
// slot, every stream in each). Every frame is a different stream from the
// one before, so each touches its stream's state cold when there are many:
// the worst case for the demux's per-stream memory.
constexpr std::size_t kScalingFrames = 9600;
GeneratorConfig scaling_traffic(std::size_t streams) {
    std::uint32_t antennas = 6, groups = 2;
    std::uint16_t threads = 2;
    if (streams == 240) {
        antennas = 30;
        groups = 4;
    } else if (streams == 2400) {
        antennas = 150;
        threads = 4;
        groups = 4;
    }
    GeneratorConfig c = traffic();
    c.antennas.clear();
    for (std::uint32_t a = 0; a < antennas; ++a) {
        c.antennas.push_back(0x0a000000u + 11 + a);  // 10.0.0.11, ...
    }
    c.groups.clear();
    for (std::uint32_t g = 0; g < groups; ++g) {
        c.groups.push_back(Endpoint{0xef110001u + g, 36001});  // 239.17.0.1, ...
    }
    c.threads = threads;
    c.frames = kScalingFrames / (std::size_t{antennas} * threads * groups);
    c.frames_per_period = c.frames;  // one period per stream per pass
    return c;
}

void BM_DemuxStreams(benchmark::State& state) {
    const auto streams = static_cast<std::size_t>(state.range(0));
    static std::map<std::size_t, std::unique_ptr<FrameSet>> sets;  // built once per stream count
    const GeneratorConfig config = scaling_traffic(streams);
    auto& built = sets[streams];
    if (!built) {
        built = std::make_unique<FrameSet>(config, false);
    }
    FrameSet* set = built.get();
    if (set->count != kScalingFrames) {
        state.SkipWithError(("the traffic has " + std::to_string(set->count) + " frames, " +
                             std::to_string(kScalingFrames) + " wanted")
                                .c_str());
        return;
    }
    run_split(state, *set, demux_options(config));
    if (state.counters["streams"] != static_cast<double>(streams)) {
        state.SkipWithError("wrong number of streams in the ledger");
    }
}

BENCHMARK(BM_DemuxContiguous)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DemuxSplit)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DemuxStreams)
    ->ArgName("streams")
    ->Arg(24)
    ->Arg(240)
    ->Arg(2400)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
