// What bench_engine and bench_pipeline wire the verbs engine to, as
// run_verbs_capture wires one device (lib/run/verbs_capture.cpp; the tests'
// test/engine_rig.hpp does the same): the simulated NIC (test/sim/sim_nic.hpp,
// whose header cites the rdma-core and kernel files each behaviour follows),
// its device, and a demux with its ledger for the traffic's groups; and the
// traffic's frames, generated once and played again and again, one CODIF
// period later each pass, so that every stream keeps advancing.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "bench/bench_traffic.hpp"
#include "formats/codif.hpp"
#include "lib/demux/demux.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/sources/igmp.hpp"
#include "lib/sources/verbs/engine.hpp"
#include "lib/traffic/generator.hpp"
#include "test/sim/sim_nic.hpp"

namespace ibvcap::bench {

constexpr std::size_t kBatch = 512;  // frames the NIC delivers between polls

struct FrameSet {
    std::size_t frame_bytes = 0;
    std::size_t count = 0;
    std::vector<std::uint8_t> whole;  // count x frame_bytes

    explicit FrameSet(const GeneratorConfig& config) {
        Generator gen(config);
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

// The 24-stream traffic's frames (bench_traffic.hpp), built once.
inline FrameSet& frame_set() {
    static FrameSet set(traffic());
    return set;
}

class NoMembership final : public GroupMembership {
  public:
    void rejoin() override {}
};

// One batch, as every engine benchmark plays it: the NIC delivers frames
// [begin, end) of `set` (its time added to `nic_time`), then the engine polls
// until it has handled them (added to `engine_time`); `fed` counts the frames
// delivered. False when a poll found nothing first: the NIC dropped some,
// which the caller's ledger check reports.
inline bool play_batch(sim::SimHardware& nic, VerbsEngine& engine, const FrameSet& set,
                       std::size_t begin, std::size_t end, std::uint64_t& fed,
                       std::chrono::steady_clock::duration& nic_time,
                       std::chrono::steady_clock::duration& engine_time) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    for (std::size_t i = begin; i < end; ++i) {
        nic.deliver(set.frame(i));
    }
    const auto t1 = Clock::now();
    fed += end - begin;
    bool handled = true;
    while (engine.frames_published() < fed) {
        if (engine.poll_once() == 0) {
            handled = false;
            break;
        }
    }
    nic_time += t1 - t0;
    engine_time += Clock::now() - t1;
    return handled;
}

// One device as run_verbs_capture wires it: the simulated NIC, its device,
// and a demux with its ledger (sinks are the caller's) for `t`'s groups.
struct SimWire {
    sim::SimProvider provider;
    std::shared_ptr<sim::SimHardware> nic;
    std::unique_ptr<verbs::Device> device;
    Ledger ledger;
    Demux demux;

    explicit SimWire(const sim::SimConfig& config, const GeneratorConfig& t = traffic())
        : nic(provider.add(config)),
          device(provider.open(config.name, config.port)),
          demux(demux_options(t), ledger) {}
    static DemuxOptions demux_options(const GeneratorConfig& t = traffic()) {
        DemuxOptions d;
        d.groups = t.groups;
        return d;
    }
    static EngineOptions engine_options(const GeneratorConfig& t = traffic()) {
        EngineOptions o;
        o.groups = t.groups;
        return o;
    }
};

}  // namespace ibvcap::bench
