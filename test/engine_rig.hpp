// The verbs engine on the simulated NIC as the engine tests wire it (a Rig:
// device, demux, writer and files), the traffic they play, and the GPU
// stand-in helpers the block sink tests share (test_engine.cpp,
// test_block_sink.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "frames.hpp"
#include "generated_frames.hpp"
#include "lib/core/device_calls.hpp"
#include "lib/host/nic_counters.hpp"
#include "lib/run/verbs_capture.hpp"
#include "lib/sinks/block_sink.hpp"
#include "lib/sources/verbs/engine.hpp"
#include "lib/traffic/generator.hpp"
#include "test/sim/sim_nic.hpp"

namespace ibvcap::test {

using sim::SimConfig;
using sim::SimHardware;
using sim::SimProvider;

inline const Endpoint kG1{kGroup1, 36001};
inline const Endpoint kG2{kGroup2, 36002};

// A membership that records what the engine did with it.
// Devices tear down on their own poll threads at once: the log is shared.
struct MembershipLog {
    std::mutex mu;
    std::vector<std::string> events;
    void add(std::string e) {
        const std::lock_guard lock(mu);
        events.push_back(std::move(e));
    }
};
class FakeMembership final : public GroupMembership {
  public:
    FakeMembership(MembershipLog& log, Endpoint g) : log_(log), group_(g) {
        log_.add("join " + group_.to_string());
    }
    ~FakeMembership() override { log_.add("leave " + group_.to_string()); }
    void rejoin() override { log_.add("rejoin " + group_.to_string()); }

  private:
    MembershipLog& log_;
    Endpoint group_;
};
inline MembershipFactory fake_memberships(MembershipLog& log) {
    return [&log](const Endpoint& g) { return std::make_unique<FakeMembership>(log, g); };
}

// Everything one engine needs, wired as run_verbs_capture wires it.
struct Rig {
    SimProvider provider;
    std::shared_ptr<SimHardware> nic;
    std::unique_ptr<verbs::Device> device;
    std::unique_ptr<PayloadMemory> memory = make_host_payload_memory();
    test::TempDir dir;
    Ledger ledger;
    Faults faults;  // what the writer's disk threads report
    std::unique_ptr<Writer> writer;
    std::unique_ptr<FileSinks> files;
    std::unique_ptr<Demux> demux;
    MembershipLog memberships;
    std::unique_ptr<VerbsEngine> engine;

    explicit Rig(EngineOptions options, std::vector<OutputFormat> formats = {},
                 SimConfig config = {}, std::unique_ptr<PayloadMemory> payload = nullptr) {
        if (payload) {
            memory = std::move(payload);
        }
        nic = provider.add(config);
        device = provider.open(config.name, config.port);
        DemuxOptions d;
        d.groups = options.groups;
        OutputOptions outputs;
        outputs.output_dir = dir.path().string();
        outputs.formats = std::move(formats);
        if (!outputs.formats.empty()) {
            Writer::Options w;
            w.block_when_full = false;
            w.buffer_bytes = 1 << 20;
            w.buffers = 8;
            w.faults = &faults;
            writer = std::make_unique<Writer>(w);
        }
        demux = std::make_unique<Demux>(d, ledger);
        files = std::make_unique<FileSinks>(outputs, writer.get());
        demux->add_sinks(files->entries());
        engine = std::make_unique<VerbsEngine>(*device, std::move(options), *demux, ledger, *memory,
                                               fake_memberships(memberships));
    }

    // The writer may hold receive slots (the zero-copy hand-off): it must
    // finish before the engine and its memory go, as in run_verbs_capture.
    ~Rig() {
        if (writer) {
            writer->finish();
        }
    }
    Rig(const Rig&) = delete;
    Rig& operator=(const Rig&) = delete;

    void poll_all() {
        while (engine->poll_once() > 0) {
        }
    }
    // The wire plays `frames`, polled after every `burst` of them and at the end.
    void play(const std::vector<std::vector<std::uint8_t>>& frames, std::size_t burst) {
        burst = std::max<std::size_t>(burst, 1);
        for (std::size_t i = 0; i < frames.size(); ++i) {
            nic->deliver(frames[i]);
            if (i % burst == burst - 1) {
                poll_all();
            }
        }
        poll_all();
    }
    // As play(), and after each burst, while `behind()` (the consumers have
    // not caught up), keep polling, at most 2 s: a wire the disk threads
    // keep up with (for tests about bytes or budgets, not speed).
    template <class Behind>
    void play_paced(const std::vector<std::vector<std::uint8_t>>& frames, std::size_t burst,
                    Behind behind) {
        burst = std::max<std::size_t>(burst, 1);
        for (std::size_t i = 0; i < frames.size(); ++i) {
            nic->deliver(frames[i]);
            if (i % burst == burst - 1) {
                poll_all();
                for (int w = 0; w < 2000 && behind(); ++w) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                    engine->poll_once();
                }
            }
        }
        poll_all();
    }
    // Stop the engine and fold its counts, the NIC's counters (through the
    // sysfs reader, as in production) and the writers into the ledger.
    void finish() {
        engine->stop();
        if (writer) {
            writer->finish();
            ledger.set_outputs(writer->stats());
        }
        engine->report_to(ledger);
        for (auto& c : engine->flow_counters()) {
            ledger.add_source_counter(c);
        }
        NicCounters counters(dir.path() / "sys", nic->config().name, nic->config().port, "");
        counters_end(counters);
    }
    void counters_start() {
        nic->write_sysfs(dir.path() / "sys" / "class" / "infiniband");
        start_counters_ = std::make_unique<NicCounters>(dir.path() / "sys", nic->config().name,
                                                        nic->config().port, "");
        start_counters_->snapshot_start();
    }

  private:
    void counters_end(NicCounters&) {
        if (!start_counters_) {
            return;
        }
        nic->write_sysfs(dir.path() / "sys" / "class" / "infiniband");
        start_counters_->snapshot();
        for (auto& c : start_counters_->to_source_counters()) {
            ledger.add_source_counter(c);
        }
    }
    std::unique_ptr<NicCounters> start_counters_;
};

// The value of the engine's flow counter `name` (VerbsEngine::flow_counters);
// a test failure, and 0, when there is none.
inline std::uint64_t flow_counter(VerbsEngine& engine, const std::string& name) {
    for (const auto& c : engine.flow_counters()) {
        if (c.name == name) {
            return c.value;
        }
    }
    ADD_FAILURE() << "no counter " << name;
    return 0;
}

inline EngineOptions options_for(std::vector<Endpoint> groups, std::uint32_t depth = 64) {
    EngineOptions o;
    o.groups = std::move(groups);
    o.ring_depth = depth;
    o.poll_batch = 16;
    o.repost_batch = 8;
    o.drain_timeout = std::chrono::milliseconds(50);
    return o;
}

inline GeneratorConfig traffic(std::vector<Endpoint> groups, std::uint64_t frames,
                               std::uint32_t payload = 2048) {
    GeneratorConfig c;
    c.antennas = {kAntenna1, kAntenna2};
    c.groups = std::move(groups);
    c.threads = 2;
    c.frames = frames;
    c.frames_per_period = 100;
    c.payload_bytes = payload;
    return c;
}

// Block rings for traffic(): 16 frame times x 2 threads per block, room for
// the whole run, 4 frame times of lateness; spare rings (prepare()) for its
// two antennas.
inline BlockSinkOptions sink_options() {
    BlockSinkOptions bo;
    bo.ring.frames_per_block = 16;
    bo.ring.threads = 2;
    bo.ring.blocks = 64;
    bo.ring.lateness = 4;
    bo.spare_rings = 2;
    return bo;
}

// The GPU stand-in's block memory whose copy thread stops at its first wait
// until the test opens the gate: a burst queues behind it, as it does behind
// a copy thread that is late at line rate.
class GatedSyncMemory final : public ForwardingBlockMemory {
  public:
    GatedSyncMemory(DeviceCallLog& log, std::shared_ptr<std::atomic<bool>> open)
        : ForwardingBlockMemory(make_host_block_memory(&log)), open_(std::move(open)) {}
    void synchronize() override {
        while (!open_->load()) {
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        ForwardingBlockMemory::synchronize();
    }

  private:
    std::shared_ptr<std::atomic<bool>> open_;
};

inline std::uint64_t copy_thread_calls(const DeviceCallLog& log) {
    using C = DeviceCallLog::Call;
    return log.calls(C::flush) + log.calls(C::copy) + log.calls(C::synchronize);
}

}  // namespace ibvcap::test
