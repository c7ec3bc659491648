// The verbs engine on the simulated NIC (docs/architecture.md, "The verbs seam"): the same engine
// code as on mlx5, with the wire played by the test. Every test ends by checking that the ledger
// reconciles exactly against what was sent.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "formats/stream_header.hpp"
#include "frames.hpp"
#include "generated_frames.hpp"
#include "lib/core/usage_error.hpp"
#include "lib/host/nic_counters.hpp"
#include "lib/run/verbs_capture.hpp"
#include "lib/sinks/block_consumer.hpp"
#include "lib/sources/verbs/engine.hpp"
#include "lib/traffic/generator.hpp"
#include "test/engine_rig.hpp"
#include "test/sim/sim_nic.hpp"

namespace ibvcap {
namespace {

using sim::SimConfig;
using sim::SimHardware;
using sim::SimProvider;
using test::copy_thread_calls;
using test::fake_memberships;
using test::FakeMembership;
using test::GatedSyncMemory;
using test::kG1;
using test::kG2;
using test::MembershipLog;
using test::options_for;
using test::Rig;
using test::sink_options;
using test::traffic;

// A capture of kG1 on the one simulated device sim_mlx5_0, port 1, without
// the NIC's sysfs counters.
CaptureRequest one_device_request(std::uint32_t depth) {
    CaptureRequest request;
    request.targets = {{"sim_mlx5_0", 1, "", 0, {}}};
    request.engine = options_for({kG1}, depth);
    request.demux.groups = {kG1};
    request.nic_counters = false;
    return request;
}

// The wire's first wait: until the engine's flow rule steers (start() made it).
void wait_for_the_rule(const SimHardware& nic) {
    while (nic.flows() < 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

using test::frames_of;

TEST(Engine, SplitPlacesHeadersAndPayloadAndFilesAreExact) {
    Rig rig(options_for({kG1, kG2}), {OutputFormat::codif, OutputFormat::pcap});
    rig.counters_start();
    rig.engine->start();
    const auto config = traffic({kG1, kG2}, 50);
    const auto frames = frames_of(config);
    rig.play(frames, 10);
    rig.finish();
    EXPECT_EQ(rig.engine->header_bytes(), 42u + 64u);
    EXPECT_EQ(rig.engine->queue_pairs(), 1u);  // both groups' rules steer to one QP
    EXPECT_EQ(rig.ledger.totals().codif, frames.size());
    EXPECT_EQ(rig.ledger.totals().nic_drops, 0u);
    EXPECT_TRUE(rig.ledger.zero_loss()) << rig.ledger.loss_reasons().front();
    EXPECT_EQ(rig.engine->stats().split_misaligned, 0u);
    // The pcap holds every frame exactly as sent: header slot + payload slot
    // joined back together.
    const auto pcap = test::read_file(rig.dir / "ibvcap.pcap");
    std::size_t off = 24;
    for (const auto& f : frames) {
        ASSERT_LE(off + 16 + f.size(), pcap.size());
        EXPECT_EQ(load_le32(pcap.data() + off + 8), f.size());
        EXPECT_TRUE(std::equal(f.begin(), f.end(), pcap.begin() + static_cast<long>(off + 16)));
        off += 16 + f.size();
    }
    EXPECT_EQ(off, pcap.size());
    // Timestamps come from the NIC's completion clock.
    EXPECT_GE(load_le32(pcap.data() + 24), 1'767'225'600u);
}

TEST(Engine, VlanTaggedFramesOnAnUntaggedRingAreCountedAndStillParsed) {
    Rig rig(options_for({kG1}), {OutputFormat::codif});
    rig.engine->start();
    auto config = traffic({kG1}, 10);
    config.vlan_id = 5;
    const auto frames = frames_of(config);
    rig.play(frames, frames.size());
    rig.finish();
    EXPECT_EQ(rig.engine->stats().split_misaligned, frames.size());
    EXPECT_EQ(rig.ledger.totals().codif, frames.size());
    EXPECT_TRUE(rig.ledger.zero_loss());
    OutputOptions where;
    where.output_dir = rig.dir.path().string();
    const auto codif =
        test::read_file(output_path(where, OutputFormat::codif, kG1, test::kAntenna1));
    std::vector<std::uint8_t> expected;
    for (const auto& f : frames) {
        if (load_be32(f.data() + 30) == test::kAntenna1) {  // IPv4 source behind the tag
            expected.insert(expected.end(), f.begin() + 46, f.end());
        }
    }
    EXPECT_EQ(codif, expected);
}

TEST(Engine, FramesShorterThanTheHeaderSlotLandInSge0Only) {
    Rig rig(options_for({kG1}));
    rig.engine->start();
    UdpHeaderSpec spec;
    spec.src_ip = test::kAntenna1;
    spec.dst_ip = kG1.ip;
    spec.dst_port = kG1.port;
    std::vector<std::uint8_t> small(60, 0xee);
    build_udp_headers(spec, 18, small);
    rig.nic->deliver(small);
    rig.poll_all();
    rig.finish();
    EXPECT_EQ(rig.engine->stats().frames, 1u);
    EXPECT_EQ(rig.ledger.totals().packets, 1u);
    EXPECT_EQ(rig.ledger.reason_count(Reason::not_codif), 1u);
    EXPECT_EQ(rig.ledger.totals().bytes, 60u);
}

TEST(Engine, OversizeFramesAreLengthErrorsAndTheQueueKeepsGoing) {
    auto options = options_for({kG1});
    options.max_frame_bytes = 4096;
    Rig rig(options);
    rig.engine->start();
    auto config = traffic({kG1}, 20, 2048);
    config.antennas = {test::kAntenna1};
    config.threads = 1;
    auto frames = frames_of(config);
    auto big = traffic({kG1}, 20, 8192);
    big.antennas = {test::kAntenna1};
    big.threads = 1;
    const auto big_frames = frames_of(big);
    // Frames 5 and 12 of the stream arrive too large for the slot.
    for (std::size_t i = 0; i < frames.size(); ++i) {
        rig.nic->deliver(i == 5 || i == 12 ? big_frames[i] : frames[i]);
    }
    rig.poll_all();
    rig.finish();
    const auto wc =
        rig.engine->stats().wc_by_status[static_cast<int>(verbs::WcStatus::loc_len_err)];
    EXPECT_EQ(wc, 2u);
    EXPECT_EQ(rig.ledger.totals().wc_errors, 2u);
    EXPECT_EQ(rig.ledger.totals().codif, 18u);
    EXPECT_EQ(rig.ledger.totals().missing, 2u);  // the two lost frames, seen in the sequence
    EXPECT_EQ(rig.engine->stats().recoveries, 0u);
    EXPECT_TRUE(rig.ledger.reconciles());
    EXPECT_FALSE(rig.ledger.zero_loss());
    // The two reached their WRs: wc errors, not frames the NIC dropped, so
    // the rule's counter finds every matched frame delivered.
    bool found = false;
    for (const auto& c : rig.ledger.source_counters()) {
        if (c.name == "sim_mlx5_0/flow/239.17.0.1:36001/undelivered") {
            EXPECT_EQ(c.value, 0u);
            found = true;
        }
    }
    EXPECT_TRUE(found);
}

TEST(Engine, RingStarvationIsCountedAsOutOfBufferNotLostSilently) {
    Rig rig(options_for({kG1}, 16));
    rig.counters_start();
    rig.engine->start();
    auto config = traffic({kG1}, 100);
    config.antennas = {test::kAntenna1};
    config.threads = 1;
    const auto frames = frames_of(config);
    for (const auto& f : frames) {
        rig.nic->deliver(f);  // nobody polls: only 16 WRs are posted
    }
    rig.poll_all();
    rig.finish();
    const Totals t = rig.ledger.totals();
    EXPECT_EQ(rig.nic->counters().out_of_buffer, 84u);
    EXPECT_EQ(t.nic_drops, 84u);  // read back through hw_counters/out_of_buffer
    EXPECT_EQ(t.codif, 16u);
    // The sequence sees frames 0..15: the 84 after them are beyond the last
    // frame received, so only the NIC counter can tell; it does.
    EXPECT_FALSE(rig.ledger.zero_loss());
    EXPECT_TRUE(rig.ledger.reconciles());
    // Per-flow counters: matched 100, delivered 16 → 84 undelivered.
    bool found = false;
    for (const auto& c : rig.ledger.source_counters()) {
        if (c.name == "sim_mlx5_0/flow/239.17.0.1:36001/undelivered") {
            EXPECT_EQ(c.value, 84u);
            found = true;
        }
    }
    EXPECT_TRUE(found);
}

TEST(Engine, QueueErrorMidStreamRecoversAndCountsTheOutage) {
    Rig rig(options_for({kG1}, 32));
    rig.counters_start();
    rig.engine->start();
    auto config = traffic({kG1}, 150);
    config.antennas = {test::kAntenna1};
    config.threads = 1;
    const auto frames = frames_of(config);
    for (std::size_t i = 0; i < 50; ++i) {
        rig.nic->deliver(frames[i]);
        rig.poll_all();
    }
    rig.nic->inject_qp_error(rig.engine->qp_numbers().at(0));
    for (std::size_t i = 50; i < 100; ++i) {
        rig.nic->deliver(frames[i]);  // the QP is in error: out_of_buffer
    }
    rig.engine->drain();  // qp_fatal event, flushes, RESET → INIT → post → RTR
    rig.poll_all();
    for (std::size_t i = 100; i < 150; ++i) {
        rig.nic->deliver(frames[i]);
        rig.poll_all();
    }
    rig.finish();
    const Totals t = rig.ledger.totals();
    EXPECT_EQ(rig.engine->stats().recoveries, 1u);
    EXPECT_EQ(t.codif, 100u);
    EXPECT_EQ(t.missing, 50u);
    EXPECT_EQ(t.nic_drops, 50u);
    EXPECT_EQ(rig.engine->stats().wc_by_status[static_cast<int>(verbs::WcStatus::wr_flush_err)],
              32u);
    EXPECT_EQ(t.wc_errors, 0u);  // flushes carry no frames
    EXPECT_TRUE(rig.ledger.reconciles());
    EXPECT_FALSE(rig.ledger.zero_loss());
}

TEST(Engine, PortDownAndUpRejoinsTheGroups) {
    Rig rig(options_for({kG1, kG2}));
    rig.engine->start();
    auto config = traffic({kG1}, 30);
    config.antennas = {test::kAntenna1};
    config.threads = 1;
    const auto frames = frames_of(config);
    for (std::size_t i = 0; i < 10; ++i)
        rig.nic->deliver(frames[i]);
    rig.nic->set_port_up(false);
    for (std::size_t i = 10; i < 20; ++i)
        rig.nic->deliver(frames[i]);
    rig.nic->set_port_up(true);
    for (std::size_t i = 20; i < 30; ++i)
        rig.nic->deliver(frames[i]);
    rig.engine->drain();
    rig.finish();
    EXPECT_EQ(rig.engine->stats().port_down_events, 1u);
    EXPECT_EQ(rig.engine->stats().rejoins, 2u);
    EXPECT_EQ(rig.ledger.totals().missing, 10u);
    EXPECT_EQ(rig.nic->counters().link_down_lost, 10u);
    const std::vector<std::string> expected = {"join 239.17.0.1:36001",   "join 239.17.0.2:36002",
                                               "rejoin 239.17.0.1:36001", "rejoin 239.17.0.2:36002",
                                               "leave 239.17.0.2:36002",  "leave 239.17.0.1:36001"};
    EXPECT_EQ(rig.memberships.events, expected);
    EXPECT_TRUE(rig.ledger.reconciles());
}

// A capture of several scans moves the running poll thread onto the next
// scan's lanes (VerbsEngine::reconnect): every frame delivered before the
// call is the first lane's, every frame after it the second's, none lost or
// counted twice, and nothing touches the first lane once the call returns.
TEST(Engine, ReconnectMovesTheRunningPollThreadOntoTheNextLane) {
    Rig rig(options_for({kG1}));
    rig.engine->start();
    auto config = traffic({kG1}, 400);
    config.antennas = {test::kAntenna1};
    config.threads = 1;
    const auto frames = frames_of(config);
    std::atomic<bool> stop{false};
    std::thread poll([&] { rig.engine->run(stop); });
    const auto deliver = [&](std::size_t from, std::size_t to) {
        for (std::size_t i = from; i < to; ++i) {
            while (rig.nic->min_posted_wrs() == 0) {
                std::this_thread::yield();
            }
            rig.nic->deliver(frames[i]);
        }
    };
    deliver(0, 150);
    // The first lane has them all before it is let go.
    while (rig.engine->frames_published() < 150) {
        std::this_thread::yield();
    }
    Ledger next_ledger;
    DemuxOptions d;
    d.groups = {kG1};
    Demux next_demux(d, next_ledger);
    rig.engine->reconnect(next_demux, next_ledger, nullptr);
    const std::uint64_t first_lane = rig.ledger.packets();  // (no thread writes it now)
    deliver(150, frames.size());
    while (rig.engine->frames_published() < frames.size()) {
        std::this_thread::yield();
    }
    stop = true;
    poll.join();
    rig.engine->stop();
    EXPECT_EQ(first_lane, 150u);
    EXPECT_EQ(rig.ledger.packets(), 150u);
    EXPECT_EQ(next_ledger.packets(), frames.size() - 150);
    EXPECT_EQ(next_ledger.totals().missing, 0u);
    EXPECT_TRUE(next_ledger.reconciles());
}

// Not polling (before start, or after its thread ended): reconnect sets the
// lane itself.
TEST(Engine, ReconnectWithNoPollThreadTakesEffectAtOnce) {
    Rig rig(options_for({kG1}));
    Ledger next_ledger;
    DemuxOptions d;
    d.groups = {kG1};
    Demux next_demux(d, next_ledger);
    rig.engine->reconnect(next_demux, next_ledger, nullptr);
    rig.engine->start();
    auto config = traffic({kG1}, 20);
    config.antennas = {test::kAntenna1};
    config.threads = 1;
    for (const auto& f : frames_of(config)) {
        rig.nic->deliver(f);
    }
    rig.engine->drain();
    rig.engine->stop();
    EXPECT_EQ(rig.ledger.packets(), 0u);
    EXPECT_EQ(next_ledger.packets(), 20u);
}

TEST(Engine, CorruptedWrIdIsRejectedAndCounted) {
    Rig rig(options_for({kG1}, 32));
    rig.engine->start();
    auto config = traffic({kG1}, 20);
    config.antennas = {test::kAntenna1};
    config.threads = 1;
    const auto frames = frames_of(config);
    for (std::size_t i = 0; i < 20; ++i) {
        if (i == 7) {
            rig.nic->corrupt_next_wr_id(0xdeadbeefcafef00dull);
        }
        rig.nic->deliver(frames[i]);
        rig.poll_all();
    }
    rig.finish();
    EXPECT_EQ(rig.engine->stats().bad_wr_id, 1u);
    EXPECT_EQ(rig.ledger.totals().wc_errors, 1u);
    EXPECT_EQ(rig.ledger.totals().codif, 19u);
    EXPECT_EQ(rig.ledger.totals().missing, 1u);
    EXPECT_TRUE(rig.ledger.reconciles());
}

// --queues equal to the groups: the layout before issue 44, a QP per group.
TEST(Engine, ManyQueuePairsShareOneCompletionQueue) {
    std::vector<Endpoint> groups;
    for (std::uint16_t i = 0; i < 8; ++i) {
        groups.push_back(Endpoint{test::kGroup1 + i, static_cast<std::uint16_t>(36001 + i)});
    }
    auto options = options_for(groups, 32);
    options.queues = 8;
    Rig rig(options);
    rig.engine->start();
    const auto frames = frames_of(traffic(groups, 40));
    rig.play(frames, 50);
    rig.finish();
    EXPECT_EQ(rig.engine->queue_pairs(), 8u);
    EXPECT_EQ(rig.ledger.streams().size(), 8u * 2 * 2);
    EXPECT_EQ(rig.ledger.totals().codif, frames.size());
    EXPECT_TRUE(rig.ledger.zero_loss());
}

// Many streams through the engine (issue 18): 160 antennas x 2 threads on
// two QPs, every frame counted and the raw files byte-exact per antenna.
TEST(Engine, ManyStreamsOnTwoQueuePairsAreCountedAndWritten) {
    const std::vector<Endpoint> groups = {kG1, kG2};
    Rig rig(options_for(groups, 128), {OutputFormat::raw});
    rig.engine->start();
    GeneratorConfig t = traffic(groups, 6, 256);
    t.antennas.clear();
    for (std::uint32_t a = 0; a < 160; ++a) {
        t.antennas.push_back(0x0a020000u + a);
    }
    const auto frames = frames_of(t);
    rig.play(frames, 100);
    rig.finish();
    EXPECT_EQ(rig.ledger.streams().size(), 160u * 2 * 2);
    EXPECT_EQ(rig.ledger.totals().codif, frames.size());
    EXPECT_EQ(rig.ledger.totals().written, frames.size());
    EXPECT_TRUE(rig.ledger.zero_loss());
}

TEST(Engine, HardwareDemuxSteersOnlyListedAntennas) {
    auto options = options_for({kG1});
    options.hw_demux = true;
    options.antennas = {test::kAntenna2};
    Rig rig(options);
    rig.engine->start();
    const auto frames = frames_of(traffic({kG1}, 10));  // antennas 1 and 2
    for (const auto& f : frames)
        rig.nic->deliver(f);
    rig.poll_all();
    rig.finish();
    EXPECT_EQ(rig.ledger.totals().codif, frames.size() / 2);
    EXPECT_EQ(rig.nic->counters().unmatched, frames.size() / 2);
    for (const auto& s : rig.ledger.streams())
        EXPECT_EQ(s.antenna, test::kAntenna2);
}

TEST(Engine, NonSplitModeUsesOneSge) {
    auto options = options_for({kG1});
    options.split = false;
    Rig rig(options, {OutputFormat::raw});
    rig.engine->start();
    const auto frames = frames_of(traffic({kG1}, 10));
    for (const auto& f : frames)
        rig.nic->deliver(f);
    rig.poll_all();
    rig.finish();
    EXPECT_EQ(rig.ledger.totals().codif, frames.size());
    EXPECT_TRUE(rig.ledger.zero_loss());
}

// A decorator over the seam that logs the calls the engine makes, to check
// the order of docs/architecture.md, "Setup and teardown order".
struct CallLog {
    std::vector<std::string> calls;
};
class LoggedFlow final : public verbs::Flow {
  public:
    LoggedFlow(std::unique_ptr<verbs::Flow> f, CallLog& log) : f_(std::move(f)), log_(log) {}
    ~LoggedFlow() override { log_.calls.push_back("destroy flow"); }
    std::optional<std::uint64_t> matched_packets() override { return f_->matched_packets(); }

  private:
    std::unique_ptr<verbs::Flow> f_;
    CallLog& log_;
};
class LoggedQp final : public verbs::QueuePair {
  public:
    LoggedQp(std::unique_ptr<verbs::QueuePair> q, CallLog& log) : q_(std::move(q)), log_(log) {}
    ~LoggedQp() override { log_.calls.push_back("destroy qp"); }
    std::uint32_t qp_num() const override { return q_->qp_num(); }
    verbs::QpState state() const override { return q_->state(); }
    std::uint32_t recv_depth() const override { return q_->recv_depth(); }
    std::uint32_t recv_sge() const override { return q_->recv_sge(); }
    void modify(verbs::QpState to) override {
        log_.calls.push_back(std::string("modify ") + verbs::to_string(to));
        q_->modify(to);
    }
    void post_recv(std::span<const verbs::RecvRequest> r) override {
        log_.calls.push_back("post " + std::to_string(r.size()));
        q_->post_recv(r);
    }
    std::unique_ptr<verbs::Flow> create_flow(const verbs::FlowMatch& m, bool counter) override {
        log_.calls.push_back("create flow");
        return std::make_unique<LoggedFlow>(q_->create_flow(m, counter), log_);
    }

  private:
    std::unique_ptr<verbs::QueuePair> q_;
    CallLog& log_;
};
class LoggedDevice final : public verbs::Device {
  public:
    LoggedDevice(verbs::Device& d, CallLog& log) : d_(d), log_(log) {}
    const verbs::DeviceCaps& caps() const override { return d_.caps(); }
    std::unique_ptr<verbs::MemoryRegion> register_memory(void* a, std::size_t n) override {
        return d_.register_memory(a, n);
    }
    std::unique_ptr<verbs::MemoryRegion> register_dmabuf(int fd, std::uint64_t o, std::size_t n,
                                                         std::uint64_t iova) override {
        return d_.register_dmabuf(fd, o, n, iova);
    }
    std::unique_ptr<verbs::CompletionQueue> create_cq(std::uint32_t depth,
                                                      verbs::TimestampFormat ts,
                                                      bool flow_tags) override {
        log_.calls.push_back("create cq");
        return d_.create_cq(depth, ts, flow_tags);
    }
    std::unique_ptr<verbs::QueuePair> create_qp(verbs::CompletionQueue& cq, std::uint32_t depth,
                                                std::uint32_t sge) override {
        log_.calls.push_back("create qp");
        return std::make_unique<LoggedQp>(d_.create_qp(cq, depth, sge), log_);
    }
    std::optional<verbs::AsyncEvent> wait_event(std::chrono::milliseconds t) override {
        return d_.wait_event(t);
    }
    std::optional<std::pair<std::uint64_t, std::uint64_t>> clock_pair() override {
        return d_.clock_pair();
    }

  private:
    verbs::Device& d_;
    CallLog& log_;
};

TEST(Engine, SetupAndTeardownFollowTheDesignOrder) {
    SimProvider provider;
    auto nic = provider.add({});
    auto device = provider.open("sim_mlx5_0", 1);
    CallLog log;
    LoggedDevice logged(*device, log);
    Ledger ledger;
    Demux demux({}, ledger);
    auto memory = make_host_payload_memory();
    MembershipFactory join = [&log](const Endpoint& g) -> std::unique_ptr<GroupMembership> {
        struct Join final : GroupMembership {
            CallLog& log;
            explicit Join(CallLog& l) : log(l) { log.calls.push_back("join"); }
            ~Join() override { log.calls.push_back("leave"); }
            void rejoin() override {}
        };
        (void)g;
        return std::make_unique<Join>(log);
    };
    {
        VerbsEngine engine(logged, options_for({kG1}, 16), demux, ledger, *memory, join);
        engine.start();
        engine.stop();
    }
    const std::vector<std::string> expected = {
        "create cq",   "create qp", "modify init", "post 16",      "modify rtr",
        "create flow", "join",      "leave",       "destroy flow", "destroy qp"};
    EXPECT_EQ(log.calls, expected);
    EXPECT_EQ(nic->ordering_violations(), 0u);
}

TEST(Engine, TwoDevicesEachWithTheirOwnCqThroughTheCaptureRunner) {
    SimProvider provider;
    SimConfig a;
    a.name = "sim_mlx5_0";
    SimConfig b;
    b.name = "sim_mlx5_1";
    auto nic_a = provider.add(a);
    auto nic_b = provider.add(b);
    test::TempDir dir;
    CaptureRequest request;
    request.targets = {{"sim_mlx5_0", 1, "", 0, {}}, {"sim_mlx5_1", 1, "", 0, {}}};
    request.engine = options_for({kG1, kG2}, 64);
    request.demux.groups = {kG1, kG2};
    request.outputs.output_dir = dir.path().string();
    request.outputs.formats = {OutputFormat::codif, OutputFormat::pcap};
    request.nic_counters = false;
    const auto fa = frames_of(traffic({kG1}, 200));
    const auto fb = frames_of(traffic({kG2}, 200));
    std::atomic<bool> stop{false};
    request.duration_s = 60;  // a bound, never reached when all goes well
    std::thread wire([&] {
        // The capture runner creates the rules after posting the rings: play
        // the wire only once both devices steer (the rules exist).
        while (nic_a->flows() < 2 || nic_b->flows() < 2) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        // A lossless sender: wait for room on every ring, however slowly the
        // poll threads are scheduled (CI machines have two busy cores).
        for (std::size_t i = 0; i < fa.size(); ++i) {
            while (nic_a->min_posted_wrs() == 0 || nic_b->min_posted_wrs() == 0) {
                std::this_thread::yield();
            }
            nic_a->deliver(fa[i]);
            nic_b->deliver(fb[i]);
        }
    });
    request.count = fa.size() + fb.size();
    MembershipLog log;
    RunOutcome out = run_verbs_capture(
        request, provider,
        [&log](const CaptureTarget&, const Endpoint& g) {
            return std::make_unique<FakeMembership>(log, g);
        },
        stop);
    wire.join();
    EXPECT_EQ(out.ledger.totals().codif, fa.size() + fb.size());
    EXPECT_EQ(nic_a->counters().out_of_buffer + nic_b->counters().out_of_buffer, 0u);
    EXPECT_TRUE(out.ledger.zero_loss()) << out.ledger.loss_reasons().front();
    EXPECT_EQ(out.exit_code, kExitZeroLoss);
    // One pcap and per-antenna files per device, prefixed with the device.
    EXPECT_TRUE(std::filesystem::exists(dir / "ibvcap_sim_mlx5_0p1.pcap"));
    EXPECT_TRUE(std::filesystem::exists(dir / "ibvcap_sim_mlx5_1p1.pcap"));
    EXPECT_EQ(log.events.size(), 8u);  // 2 devices x 2 groups, joined and left
}

// verbs-mlx5-2.md N6: the same device and port given twice (here by two
// names of one netdev) would install every rule twice, and mlx5 forwards each
// frame to both destinations of the entry: a usage error before anything is
// made. Two devices are two captures.
TEST(Engine, OnePortGivenTwiceIsAUsageError) {
    SimProvider provider;
    auto nic = provider.add({});
    CaptureRequest request = one_device_request(16);
    request.targets = {{"sim_mlx5_0", 1, "ens1f0np0", 0, {}}, {"sim_mlx5_0", 1, "10.0.0.1", 0, {}}};
    std::atomic<bool> stop{true};
    try {
        run_verbs_capture(request, provider, {}, stop);
        ADD_FAILURE() << "a port given twice was accepted";
    } catch (const UsageError& e) {
        EXPECT_STREQ(e.what(),
                     "-i ens1f0np0 and -i 10.0.0.1 are the same port (sim_mlx5_0 port 1): each "
                     "frame would be captured twice; give each port once");
    }
    EXPECT_EQ(nic->flows(), 0u);
    SimConfig second;
    second.name = "sim_mlx5_1";
    provider.add(second);
    request.targets = {{"sim_mlx5_0", 1, "ens1f0np0", 0, {}},
                       {"sim_mlx5_1", 1, "ens1f1np1", 0, {}}};
    EXPECT_NO_THROW(VerbsSource(request, provider, {}));
}

}  // namespace
}  // namespace ibvcap

namespace ibvcap {
namespace {

TEST(Engine, WatchdogSpeaksWhenTheNicCountsButNothingIsDelivered) {
    Rig rig(options_for({kG1}, 32));
    rig.engine->start();
    auto config = traffic({kG1}, 40);
    config.antennas = {test::kAntenna1};
    config.threads = 1;
    const auto frames = frames_of(config);
    EXPECT_TRUE(rig.engine->watchdog().empty());  // the baseline reading
    for (std::size_t i = 0; i < 20; ++i) {
        rig.nic->deliver(frames[i]);
    }
    rig.poll_all();
    EXPECT_TRUE(rig.engine->watchdog().empty()) << "healthy: matched and delivered both grew";
    rig.nic->inject_qp_error(rig.engine->qp_numbers().at(0));  // stuck until someone polls
    for (std::size_t i = 20; i < 40; ++i) {
        rig.nic->deliver(frames[i]);
    }
    const auto alarms = rig.engine->watchdog();
    ASSERT_EQ(alarms.size(), 1u);
    EXPECT_NE(alarms[0].find("239.17.0.1:36001 on sim_mlx5_0: the NIC steered 20 frames"),
              std::string::npos)
        << alarms[0];
    EXPECT_TRUE(rig.engine->watchdog().empty()) << "nothing new since the last check";
}

TEST(Engine, CaptureRunnerReportsPollingFiguresAndPinsThreads) {
    SimProvider provider;
    auto nic = provider.add({});
    CaptureRequest request = one_device_request(64);
    request.cpus = {0};
    const auto frames = frames_of(traffic({kG1}, 100));
    request.count = frames.size();
    request.duration_s = 60;  // a bound, never reached when all goes well
    std::atomic<bool> stop{false};
    std::thread wire([&] {
        wait_for_the_rule(*nic);
        for (const auto& f : frames) {
            while (nic->min_posted_wrs() == 0) {
                std::this_thread::yield();
            }
            nic->deliver(f);
        }
    });
    RunOutcome out = run_verbs_capture(request, provider, {}, stop);
    wire.join();
    ASSERT_EQ(out.info.polling.size(), 1u);
    const PollFigures& p = out.info.polling[0];
    EXPECT_EQ(p.device, "sim_mlx5_0:1");
    EXPECT_EQ(p.cpu, 0);
    EXPECT_EQ(p.frames, frames.size());
    EXPECT_GE(p.polls, p.busy_waits);
    EXPECT_GT(p.polls, 0u);
    EXPECT_EQ(out.exit_code, kExitZeroLoss);
}

// A capture of two scans through the verbs source: the running poll thread
// moves onto the second scan's lanes (VerbsSource::reconnect) at the first
// one's stop, and each scan gets exactly its window's frames, in its own
// ledger and directory. The frames are stamped in the next wall-clock second
// (100 a second), the scans' windows lie in it.
TEST(Engine, TwoScansInOneCaptureEachGetExactlyTheirWindowsFrames) {
    SimProvider provider;
    auto nic = provider.add({});
    CaptureRequest request = one_device_request(256);
    test::TempDir dir;
    request.outputs.output_dir = dir.path().string();
    request.outputs.formats = {OutputFormat::codif};
    const auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    const std::int64_t epoch_s = reference_epoch_unix_s(52);
    const auto second = static_cast<std::uint32_t>(now_ns / 1'000'000'000 + 1 - epoch_s);
    const std::int64_t t0 = (epoch_s + second) * 1'000'000'000LL;
    Scan a;
    a.name = "a";
    a.window = {t0, t0 + 500'000'000};  // frames 0..49 of the second
    a.line = 1;
    Scan b;
    b.name = "b";
    b.window = {t0 + 600'000'000, t0 + 1'000'000'000};  // frames 60..99
    b.line = 2;
    request.scans = {a, b};
    request.window_grace_s = 0;
    std::vector<RunOutcome> done;
    std::atomic<int> scans_done{0};
    request.scan_done = [&](RunOutcome&& o) {
        done.push_back(std::move(o));
        ++scans_done;
    };
    auto config = traffic({kG1}, 100);
    config.antennas = {test::kAntenna1};
    config.threads = 1;
    config.start_seconds = second;
    const auto frames = frames_of(config);
    std::atomic<bool> stop{false};
    std::thread wire([&] {
        wait_for_the_rule(*nic);
        const auto deliver = [&](std::size_t from, std::size_t to) {
            for (std::size_t i = from; i < to; ++i) {
                while (nic->min_posted_wrs() == 0) {
                    std::this_thread::yield();
                }
                nic->deliver(frames[i]);
            }
        };
        deliver(0, 60);  // a's, and 10 after its window: a's after_window
        while (scans_done == 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        deliver(60, frames.size());  // b's
    });
    RunOutcome out = run_verbs_capture(request, provider, {}, stop);
    wire.join();
    ASSERT_EQ(done.size(), 2u);
    EXPECT_EQ(out.exit_code, kExitZeroLoss);
    EXPECT_EQ(out.info.stopped_by, "window_end");
    for (std::size_t k = 0; k < 2; ++k) {
        const Ledger& l = done[k].ledger;
        ASSERT_EQ(l.streams().size(), 1u) << k;
        const StreamStats& s = l.streams().front();
        EXPECT_EQ(s.packets(), k == 0 ? 50u : 40u) << k;
        EXPECT_EQ(s.first.frame, k == 0 ? 0u : 60u) << k;
        EXPECT_EQ(s.last.frame, k == 0 ? 49u : 99u) << k;
        EXPECT_EQ(l.totals().missing, 0u) << k;
        EXPECT_TRUE(l.reconciles()) << k;
        ASSERT_EQ(l.outputs().size(), 1u) << k;
        EXPECT_EQ(l.outputs().front().packets, k == 0 ? 50u : 40u) << k;
        EXPECT_EQ(l.outputs().front().path.rfind((dir.path() / (k == 0 ? "a/" : "b/")).string(), 0),
                  0u)
            << l.outputs().front().path;
        EXPECT_EQ(done[k].info.window->scan, k == 0 ? "a" : "b");
    }
    EXPECT_EQ(done[0].ledger.totals().outside_window, 10u);  // (b's were b's: after the swap)
}

// A device fatal error through the capture runner (VerbsSource): the run
// ends at once with the cause, exit 1, the frames before it counted, and the
// ledger marked incomplete, so the verdict cannot read as zero-loss.
TEST(Engine, ADeviceFatalErrorEndsTheRunWithItsCauseAndAnIncompleteLedger) {
    SimProvider provider;
    auto nic = provider.add({});
    CaptureRequest request = one_device_request(64);
    request.duration_s = 30;  // a bound: the fault must end the run long before
    const auto frames = frames_of(traffic({kG1}, 10));
    std::atomic<bool> stop{false};
    std::thread wire([&] {
        wait_for_the_rule(*nic);
        for (const auto& f : frames) {
            nic->deliver(f);
        }
        // deliver() takes a posted WR at once; the poll thread re-posts it
        // once the frame is handled, so the ring is full again only then.
        while (nic->min_posted_wrs() < 64) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        nic->raise_device_fatal();
    });
    RunOutcome out = run_verbs_capture(request, provider, {}, stop);
    wire.join();
    EXPECT_EQ(out.exit_code, kExitError);
    EXPECT_NE(out.info.error.find("the device reported a fatal error"), std::string::npos)
        << out.info.error;
    EXPECT_LT(out.info.duration_s, 10.0);
    EXPECT_EQ(out.ledger.totals().codif, frames.size());
    EXPECT_FALSE(out.ledger.zero_loss());
    bool ended_early = false;
    for (const auto& why : out.ledger.loss_reasons()) {
        ended_early = ended_early || why.find("the run ended early") != std::string::npos;
    }
    EXPECT_TRUE(ended_early);
    // The rules' counters are not read from a device in internal error (its
    // firmware refuses the read), and the report says so (verbs-mlx5-2 N4).
    const auto& notes = out.ledger.notes();
    EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
        return n.find("counters were not read after the fatal error") != std::string::npos;
    }));
}

// The poll loop may see a device fatal error's flushes, and fail to recover
// a QP, before it reads the event that says why (the kernel dispatches it
// from a work item). Whichever comes first, the cause is the device's: the
// event already waiting, arriving within the grace, or never (then the
// recovery's own error stands, and still ends the run).
TEST(Engine, ADeviceFatalErrorIsTheCauseWhenTheFlushesComeFirst) {
    for (const bool announce_now : {true, false}) {
        Rig rig(options_for({kG1}, 16));
        rig.engine->start();
        rig.nic->raise_device_fatal(announce_now);
        std::thread late;
        if (!announce_now) {
            late = std::thread([&] {
                std::this_thread::sleep_for(VerbsEngine::kFatalEventGrace / 4);
                rig.nic->announce_device_fatal();
            });
        }
        std::atomic<bool> stop{false};
        EXPECT_NO_THROW(rig.engine->run(stop)) << "announced at once: " << announce_now;
        if (late.joinable()) {
            late.join();
        }
        EXPECT_TRUE(rig.engine->stats().device_fatal);
        EXPECT_FALSE(rig.ledger.zero_loss());
        bool cause = false;
        for (const auto& why : rig.ledger.loss_reasons()) {
            cause = cause || why.find("IBV_EVENT_DEVICE_FATAL") != std::string::npos;
        }
        EXPECT_TRUE(cause) << "announced at once: " << announce_now;
    }
}

TEST(Engine, ARecoveryThatFailsWithNoFatalEventEndsTheRunWithItsError) {
    Rig rig(options_for({kG1}, 16));
    rig.engine->start();
    rig.nic->raise_device_fatal(false);  // the event never comes
    std::atomic<bool> stop{false};
    const auto t0 = std::chrono::steady_clock::now();
    try {
        rig.engine->run(stop);
        ADD_FAILURE() << "run() returned";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("ibv_modify_qp"), std::string::npos) << e.what();
    }
    EXPECT_GE(std::chrono::steady_clock::now() - t0, VerbsEngine::kFatalEventGrace);
    EXPECT_FALSE(rig.engine->stats().device_fatal);
}

TEST(Engine, PinningToACpuThatDoesNotExistEndsTheRunWithAnError) {
    SimProvider provider;
    provider.add({});
    CaptureRequest request = one_device_request(16);
    request.cpus = {1000};
    request.duration_s = 10;
    std::atomic<bool> stop{false};
    RunOutcome out = run_verbs_capture(request, provider, {}, stop);
    EXPECT_EQ(out.exit_code, kExitError);
    EXPECT_NE(out.info.error.find("cannot pin the poll thread to cpu 1000"), std::string::npos)
        << out.info.error;
    EXPECT_LT(out.info.duration_s, 5.0);
    bool ended_early = false;  // the ledger says why it is incomplete
    for (const auto& why : out.ledger.loss_reasons()) {
        ended_early = ended_early || why.find("cannot pin the poll thread") != std::string::npos;
    }
    EXPECT_TRUE(ended_early);
}

}  // namespace
}  // namespace ibvcap

#include "lib/core/device_calls.hpp"
#include "lib/sinks/block_sink.hpp"
#include "lib/traffic/pattern.hpp"

namespace ibvcap {
namespace {

// The GPU payload path's logic on the stand-in: the engine in split mode on
// the simulated NIC, payload slots in (staging) host memory, every CODIF frame
// placed in its antenna's block ring; the blocks hold exactly what was sent.
TEST(Engine, SplitModeFeedsTheBlockRingsWithExactlyWhatWasSent) {
    Rig rig(options_for({kG1}, 64));
    BlockSink sink(sink_options());
    rig.demux->add_sink(sink);
    rig.engine->start();
    auto config = traffic({kG1}, 300);
    config.loss = 0.03;
    config.duplicate = 0.02;
    config.reorder = 0.03;
    config.seed = 11;
    Generator gen(config);
    const CodifTiming timing{config.period, config.frames_per_period};
    std::map<std::uint32_t, std::set<std::pair<std::uint16_t, std::uint64_t>>> sent;
    GeneratedFrame f;
    std::size_t n = 0;
    while (gen.next(f)) {
        CodifHeader h;
        ASSERT_EQ(decode_codif(f.bytes.subspan(42, 64), h), CodifError::none);
        sent[load_be32(f.bytes.data() + 26)].insert({h.threadid, timing.index(h.seconds, h.frame)});
        rig.nic->deliver(f.bytes);
        if (++n % 16 == 0) {
            rig.poll_all();
        }
    }
    rig.poll_all();
    sink.flush();
    rig.finish();
    sink.report_to(rig.ledger);
    EXPECT_TRUE(rig.ledger.reconciles());
    EXPECT_EQ(rig.ledger.totals().nic_drops, 0u);
    ASSERT_EQ(sink.keys().size(), 2u);
    // A frame that was sent and captured is in its block, or counted as a
    // block miss in the verdict: never silently absent. (On a busy machine
    // the copy thread may not run while the test's wire plays the whole
    // burst; the sink then drops what it cannot take, and says so.)
    std::uint64_t sent_not_in_block = 0;
    for (const auto& key : sink.keys()) {
        const std::uint32_t antenna = key.antenna;
        EXPECT_EQ(key.group, kG1);
        BlockRing* ring = sink.ring(key.group, antenna);
        const auto& o = ring->options();
        std::set<std::pair<std::uint16_t, std::uint64_t>> seen;
        std::uint64_t absent = 0;
        while (const Block* b = ring->acquire(std::chrono::milliseconds(0))) {
            for (std::uint32_t fi = 0; fi < o.frames_per_block; ++fi) {
                for (std::uint16_t t = 0; t < o.threads; ++t) {
                    const std::uint64_t index = b->first_index + fi;
                    const bool was_sent = sent[antenna].count({t, index}) > 0;
                    if (!b->has(fi, t, o.threads)) {
                        ++absent;
                        continue;
                    }
                    ASSERT_TRUE(was_sent) << "antenna " << format_ipv4(antenna) << " frame "
                                          << index << " is in a block but was never sent";
                    seen.insert({t, index});
                    const Bytes slot(b->data + (std::size_t{fi} * o.threads + t) * o.payload_bytes,
                                     o.payload_bytes);
                    EXPECT_EQ(check_pattern(pattern_key(antenna, t, index), slot), 0u);
                }
            }
            ring->release(b);
        }
        sent_not_in_block += sent[antenna].size() - seen.size();
        EXPECT_GT(absent, 0u);  // the injected losses are marked, not skipped over
        EXPECT_EQ(ring->stats().too_late + ring->stats().ring_full, 0u);
    }
    const Totals t = rig.ledger.totals();
    // Whatever the copy thread's scheduling: every CODIF frame the sink was
    // given is in its ring's accounting or counted as a block miss (a miss
    // may be a duplicate whose first copy is in its block, so misses can
    // exceed the frames absent, never fall short of them).
    std::uint64_t accounted = t.block_misses;
    for (const auto& key : sink.keys()) {
        const BlockRingStats st = sink.ring(key.group, key.antenna)->stats();
        accounted +=
            st.placed + st.duplicates + st.too_late + st.ring_full + st.bad_thread + st.bad_length;
    }
    EXPECT_EQ(accounted, t.codif);
    EXPECT_LE(sent_not_in_block, t.block_misses);
    EXPECT_EQ(t.block_misses, sink.copy_dropped());
    const auto reasons = rig.ledger.loss_reasons();
    const bool named = std::any_of(reasons.begin(), reasons.end(), [](const std::string& r) {
        return r.find("in no block") != std::string::npos;
    });
    EXPECT_EQ(named, t.block_misses > 0);
}

// Block memory whose copies wait until the test opens the gate: a copy
// thread that gets no CPU, made certain.
class GatedBlockMemory final : public ForwardingBlockMemory {
  public:
    explicit GatedBlockMemory(std::shared_ptr<std::atomic<bool>> open)
        : ForwardingBlockMemory(make_host_block_memory()), open_(std::move(open)) {}
    void copy_in(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) override {
        wait();
        ForwardingBlockMemory::copy_in(dst, src, bytes);
    }
    void copy_in_held(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) override {
        wait();
        ForwardingBlockMemory::copy_in_held(dst, src, bytes);
    }
    void copy_in_device(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes,
                        const DeviceMemory& from) override {
        wait();
        ForwardingBlockMemory::copy_in_device(dst, src, bytes, from);
    }

  private:
    void wait() const {
        while (!open_->load()) {
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
    }
    std::shared_ptr<std::atomic<bool>> open_;
};

// What the flaky run above hit by chance, made certain: the copy thread is
// stalled, the hold limit and the bounce slots run out, and the frames the
// sink drops are loss in the verdict (they were counted but not judged).
TEST(Engine, FramesTheBlockSinkCannotTakeAreLossInTheVerdict) {
    auto open = std::make_shared<std::atomic<bool>>(false);
    Rig rig(options_for({kG1}, 64));
    BlockSinkOptions bo = sink_options();
    bo.ring.blocks = 256;
    bo.memory = [open] { return std::make_unique<GatedBlockMemory>(open); };
    BlockSink sink(bo);
    rig.demux->add_sink(sink);
    rig.engine->start();
    auto config = traffic({kG1}, 2400);
    config.antennas = {test::kAntenna1};
    const auto frames = frames_of(config);  // 4800: more than 16 held + 4096 staged
    rig.play(frames, 16);
    open->store(true);
    sink.flush();
    rig.finish();
    sink.report_to(rig.ledger);
    const Totals t = rig.ledger.totals();
    EXPECT_EQ(t.codif, frames.size());
    EXPECT_EQ(t.missing, 0u);
    EXPECT_EQ(t.nic_drops, 0u);
    EXPECT_GT(sink.copy_dropped(), 0u);
    EXPECT_EQ(t.block_misses, sink.copy_dropped());
    std::uint64_t placed = 0;
    for (const auto& key : sink.keys()) {
        placed += sink.ring(key.group, key.antenna)->stats().placed;
    }
    EXPECT_EQ(placed + t.block_misses, frames.size());
    EXPECT_TRUE(rig.ledger.reconciles());
    EXPECT_FALSE(rig.ledger.zero_loss());
}

// The GPUDirect path without a GPU: payload slots the engine may reach only as
// device memory. Every writer format and the block rings get their bytes
// through held slots and batched copies on their own threads, the poll thread
// never reads a payload, every slot comes back, and the files and rings hold
// exactly what was sent.
TEST(Engine, DevicePayloadIsHeldCopiedInBatchesOffThePollThreadAndEveryByteLands) {
    auto standin = std::make_unique<StandinDevicePayloadMemory>();
    StandinDevicePayloadMemory& device = *standin;
    EngineOptions eo = options_for({kG1}, 256);
    eo.ring_hold_limit = 128;  // this test is about bytes: the rings may hold as the writers do
    Rig rig(eo,
            {OutputFormat::raw, OutputFormat::codif, OutputFormat::codifhdr, OutputFormat::pcap},
            {}, std::move(standin));
    BlockSink sink(sink_options());
    rig.demux->add_sink(sink);
    rig.engine->start();
    auto config = traffic({kG1}, 400);
    config.loss = 0.02;
    config.seed = 5;
    const auto frames = frames_of(config);
    // A line rate the disk threads keep up with (this test is about bytes).
    rig.play_paced(frames, 32, [&] { return rig.engine->slots_held() > 64; });
    sink.flush();          // the copy thread has released its slots
    rig.writer->finish();  // and the writers theirs
    for (int i = 0; i < 10 && rig.engine->slots_held() > 0; ++i) {
        rig.engine->poll_once();  // takes the released tokens
    }
    EXPECT_EQ(rig.engine->slots_held(), 0u);
    EXPECT_TRUE(sink.threaded());
    EXPECT_EQ(sink.copy_dropped(), 0u);
    const EngineStats& es = rig.engine->stats();
    EXPECT_EQ(es.frames, frames.size());
    EXPECT_GT(es.held, 0u);
    EXPECT_EQ(es.bad_release, 0u);
    // Copies were batched: far fewer calls than payloads copied.
    EXPECT_GT(device.copies(), frames.size());
    EXPECT_LT(device.batches() * 2, device.copies());
    rig.finish();
    sink.report_to(rig.ledger);
    EXPECT_TRUE(rig.ledger.reconciles());
    EXPECT_EQ(rig.ledger.totals().write_drops, 0u);
    EXPECT_EQ(rig.ledger.totals().nic_drops, 0u);
    // The pcap and raw files hold every frame exactly.
    const auto pcap = test::read_file(rig.dir / "ibvcap.pcap");
    std::size_t off = 24;
    std::map<std::uint32_t, std::vector<std::uint8_t>> raw_expected;
    for (const auto& f : frames) {
        ASSERT_LE(off + 16 + f.size(), pcap.size());
        EXPECT_TRUE(std::equal(f.begin(), f.end(), pcap.begin() + static_cast<long>(off + 16)));
        off += 16 + f.size();
        auto& r = raw_expected[load_be32(f.data() + 26)];
        r.insert(r.end(), f.begin(), f.end());
    }
    EXPECT_EQ(off, pcap.size());
    for (const auto& [antenna, expected] : raw_expected) {
        OutputOptions d;
        d.output_dir = rig.dir.path().string();
        EXPECT_EQ(test::read_file(output_path(d, OutputFormat::raw, kG1, antenna)), expected);
    }
    // The rings hold the generator's pattern wherever a frame arrived.
    ASSERT_EQ(sink.keys().size(), 2u);
    for (const auto& key : sink.keys()) {
        BlockRing* ring = sink.ring(key.group, key.antenna);
        const auto& o = ring->options();
        std::uint64_t present = 0;
        while (const Block* b = ring->acquire(std::chrono::milliseconds(0))) {
            for (std::uint32_t fi = 0; fi < o.frames_per_block; ++fi) {
                for (std::uint16_t t = 0; t < o.threads; ++t) {
                    if (b->has(fi, t, o.threads)) {
                        ++present;
                        const Bytes slot(
                            b->data + (std::size_t{fi} * o.threads + t) * o.payload_bytes,
                            o.payload_bytes);
                        EXPECT_EQ(
                            check_pattern(pattern_key(key.antenna, t, b->first_index + fi), slot),
                            0u);
                    }
                }
            }
            ring->release(b);
        }
        EXPECT_EQ(present, ring->stats().placed);
    }
}

// Writers that never finish a buffer must not starve the NIC: at most
// hold_limit slots of a ring are held, later frames are copied, and nothing
// is lost.
TEST(Engine, HeldSlotsStopAtTheHoldLimitAndTheRestAreCopied) {
    auto options = options_for({kG1}, 64);
    options.hold_limit = 8;
    Rig rig(options, {OutputFormat::codif});
    rig.engine->start();
    const auto frames = frames_of(traffic({kG1}, 100));
    for (std::size_t i = 0; i < frames.size(); ++i) {
        rig.nic->deliver(frames[i]);
        if (i % 8 == 7) {
            rig.poll_all();
            EXPECT_LE(rig.engine->slots_held(), 8u);
        }
    }
    rig.poll_all();
    EXPECT_GT(rig.engine->stats().hold_refused, 0u);
    rig.finish();
    EXPECT_TRUE(rig.ledger.zero_loss()) << rig.ledger.loss_reasons().front();
    EXPECT_EQ(rig.ledger.totals().nic_drops, 0u);
}

// --- mlx5 as it really behaves (issue: ready for a real ConnectX host) -------------

bool has_note(const Ledger& ledger, const std::string& part) {
    return std::any_of(ledger.notes().begin(), ledger.notes().end(),
                       [&](const std::string& n) { return n.find(part) != std::string::npos; });
}

// The simulated NIC reports what mlx5 reports in a raw-packet completion's
// qpn field: the flow tag, 0 (test/sim/sim_nic.hpp). An engine that matched
// completions by QP number would count every one bad_wr_id and deliver
// nothing, as the first run on a real ConnectX host would have.
TEST(Engine, CompletionsAreMatchedByWrIdAloneAsMlx5Reports) {
    const std::vector<Endpoint> groups = {kG1, kG2, Endpoint{test::kGroup1 + 7, 36009}};
    Rig rig(options_for(groups, 32));
    for (const std::uint32_t n : rig.engine->qp_numbers()) {
        EXPECT_NE(n, 0u);  // so a QP-number match could never pass by chance
    }
    rig.engine->start();
    const auto frames = frames_of(traffic(groups, 60));  // 2 rings' worth per QP
    rig.play(frames, 8);
    rig.finish();
    EXPECT_EQ(rig.engine->stats().bad_wr_id, 0u);
    EXPECT_EQ(rig.engine->stats().frames, frames.size());
    EXPECT_EQ(rig.nic->counters().out_of_buffer, 0u);  // every slot came back
    EXPECT_EQ(rig.ledger.streams().size(), groups.size() * 2 * 2);
    EXPECT_TRUE(rig.ledger.zero_loss());
}

// A ConnectX-6 Dx/7 running its real-time clock refuses a QP whose CQ asked
// for free-running ticks (kernel mlx5/qp.c get_ts_format): the engine falls
// back to wall-clock timestamps, then to none, and says which stamped the pcap.
TEST(Engine, TimestampsFallBackToWhatTheDevicesClockModeGives) {
    struct Row {
        const char* mode;
        bool fr;
        bool rt;
        verbs::TimestampFormat expect;
        const char* note;
    };
    const Row rows[] = {
        {"free-running", true, false, verbs::TimestampFormat::device_ticks, "free-running device"},
        // The CQEs carry seconds << 32 | ns, decoded (verbs-mlx5-3.md R1):
        // the pcap's times below are the same as the other formats'.
        {"real-time", false, true, verbs::TimestampFormat::wallclock_ns,
         "real-time format (seconds << 32 | ns, decoded)"},
        {"neither", false, false, verbs::TimestampFormat::none, "CLOCK_REALTIME"},
    };
    for (const Row& row : rows) {
        SCOPED_TRACE(row.mode);
        SimConfig config;
        config.ts_free_running = row.fr;
        config.ts_real_time = row.rt;
        Rig rig(options_for({kG1}, 16), {OutputFormat::pcap}, config);
        EXPECT_EQ(rig.engine->timestamps(), row.expect);
        EXPECT_TRUE(has_note(rig.ledger, "timestamps: ")) << row.mode;
        EXPECT_TRUE(has_note(rig.ledger, row.note)) << row.mode;
        rig.engine->start();
        auto config_t = traffic({kG1}, 3);
        config_t.antennas = {test::kAntenna1};
        config_t.threads = 1;
        const auto frames = frames_of(config_t);
        for (const auto& f : frames) {
            rig.nic->deliver(f, 1000);  // the device clock runs 1000 ns per frame
        }
        rig.poll_all();
        rig.finish();
        ASSERT_EQ(rig.ledger.totals().codif, 3u);
        const auto pcap = test::read_file(rig.dir / "ibvcap.pcap");
        std::size_t off = 24;
        const std::uint64_t base_s = config.host_time_base_ns / 1'000'000'000u;
        for (std::size_t i = 0; i < frames.size(); ++i) {
            ASSERT_LE(off + 16, pcap.size());
            const std::uint32_t sec = load_le32(pcap.data() + off);
            const std::uint32_t nsec = load_le32(pcap.data() + off + 4);
            if (row.expect == verbs::TimestampFormat::none) {
                // Host time at poll, not the device's (which starts at base_s).
                const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count();
                EXPECT_NEAR(static_cast<double>(sec), static_cast<double>(now), 60.0);
            } else {
                EXPECT_EQ(sec, base_s);
                EXPECT_EQ(nsec, 1000u * (i + 1));
            }
            off += 16 + load_le32(pcap.data() + off + 8);
        }
        EXPECT_TRUE(rig.ledger.zero_loss());
        EXPECT_EQ(rig.nic->ordering_violations(), 0u);  // the refused CQ/QPs went in order
    }
}

// verbs-mlx5-2.md N3: a wall-clock CQ reads the kernel's clock-info page with
// every poll that finds a completion, also in real-time mode, and fails with
// EINVAL, the completion consumed, where the page is not mapped (rdma-core
// providers/mlx5/cq.c mlx5_start_poll, mlx5.c _mlx5dv_get_clock_info). The run
// goes on with host timestamps, says so, and counts the consumed frame lost.
TEST(Engine, AClockPageThatCannotBeReadFallsBackToHostTimestamps) {
    SimConfig config;
    config.ts_free_running = false;
    config.ts_real_time = true;
    config.clock_info_page = false;
    Rig rig(options_for({kG1}, 16), {OutputFormat::pcap}, config);
    ASSERT_EQ(rig.engine->timestamps(), verbs::TimestampFormat::wallclock_ns);
    rig.engine->start();
    auto t = traffic({kG1}, 4);
    t.antennas = {test::kAntenna1};
    t.threads = 1;
    const auto frames = frames_of(t);
    for (const auto& f : frames) {
        rig.nic->deliver(f, 1000);
    }
    EXPECT_NO_THROW(rig.poll_all());
    for (const auto& f : frames) {
        rig.nic->deliver(f, 1000);  // after the switch: no completion is lost
    }
    rig.poll_all();
    rig.finish();
    EXPECT_EQ(rig.engine->timestamps(), verbs::TimestampFormat::none);
    EXPECT_TRUE(has_note(rig.ledger, "could not read its clock while polling"));
    // The report's clock figures say the same (clocks[].format, frame_times).
    EXPECT_EQ(rig.engine->clock_figures().format, "none");
    EXPECT_EQ(rig.engine->clock_figures().frame_times, "host");
    EXPECT_EQ(rig.engine->stats().clock_lost_completions, 1u);
    EXPECT_EQ(rig.engine->stats().frames, 2 * frames.size() - 1);
    EXPECT_EQ(rig.ledger.totals().codif, 2 * frames.size() - 1);
    EXPECT_FALSE(rig.ledger.zero_loss()) << "the consumed completion is a lost frame";
    EXPECT_EQ(rig.ledger.totals().wc_errors, 1u);
    // Host time at the poll, not the NIC's clock (which starts in 2026-01-01).
    const auto pcap = test::read_file(rig.dir / "ibvcap.pcap");
    ASSERT_GE(pcap.size(), 24u + 16u);
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    EXPECT_NEAR(static_cast<double>(load_le32(pcap.data() + 24)), static_cast<double>(now), 60.0);
}

// verbs-mlx5-2.md N1: a capture on a VLAN netdev takes the netdev's tag
// count for its header slots and matches its VLAN id in the rules (kernel
// drivers/infiniband/hw/mlx5/fs.c parse_flow_attr: cvlan_tag, first_vid), so
// two VLANs bringing one group to a port are two captures, each whole, and
// untagged frames of the group reach neither.
TEST(Engine, TwoVlansOfOnePortAreTwoCaptures) {
    SimProvider provider;
    auto nic = provider.add({});
    test::TempDir dir;
    CaptureRequest request = one_device_request(64);
    request.targets = {{"sim_mlx5_0", 1, "ens1f0np0.100", 0, {100}},
                       {"sim_mlx5_0", 1, "ens1f0np0.200", 0, {200}}};
    request.outputs.output_dir = dir.path().string();
    request.outputs.formats = {OutputFormat::pcap};
    auto t = traffic({kG1}, 50);
    t.vlan_id = 100;
    const auto v100 = frames_of(t);
    t.vlan_id = 200;
    t.seed = 7;
    const auto v200 = frames_of(t);
    t.vlan_id = -1;
    const auto untagged = frames_of(t);
    request.count = v100.size() + v200.size();
    request.duration_s = 60;  // a bound, never reached when all goes well
    std::atomic<bool> stop{false};
    std::thread wire([&] {
        while (nic->flows() < 2) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        for (std::size_t i = 0; i < v100.size(); ++i) {
            while (nic->min_posted_wrs() == 0) {
                std::this_thread::yield();
            }
            nic->deliver(v100[i]);
            nic->deliver(v200[i]);
            nic->deliver(untagged[i]);
        }
    });
    RunOutcome out = run_verbs_capture(request, provider, {}, stop);
    wire.join();
    EXPECT_EQ(out.ledger.totals().codif, v100.size() + v200.size());
    EXPECT_EQ(nic->counters().unmatched, untagged.size());
    EXPECT_TRUE(out.ledger.zero_loss()) << out.ledger.loss_reasons().front();
    const auto& notes = out.ledger.notes();
    for (const char* vlan : {"the rules match VLAN 100", "the rules match VLAN 200"}) {
        EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [&](const std::string& n) {
            return n.find("expects 1 tag(s) on the wire (from the netdev)") != std::string::npos &&
                   n.find(vlan) != std::string::npos;
        })) << vlan;
    }
    // The header slots were sized for the tag: no header ran past SGE0.
    for (const auto& c : out.ledger.source_counters()) {
        EXPECT_EQ(c.name.find("split_misaligned"), std::string::npos) << c.name;
    }
    // Each VLAN's capture has its own file, with its own frames (the same
    // count and sizes, 4 bytes of tag each).
    const auto a = test::read_file(dir / "ibvcap_sim_mlx5_0p1v100.pcap");
    const auto b = test::read_file(dir / "ibvcap_sim_mlx5_0p1v200.pcap");
    EXPECT_GT(a.size(), 24 + v100.size() * 16);
    EXPECT_EQ(a.size(), b.size());
}

// verbs-mlx5-2.md N7: a source-specific group's rules match each source it
// names (kernel drivers/infiniband/hw/mlx5/fs.c parse_flow_attr: the IPv4
// spec's src_ip with a full mask), so another sender's frames to the group
// never reach the ring; hardware demux makes QPs only for the named sources.
TEST(Engine, ASourceSpecificGroupSteersOnlyItsSources) {
    const auto frames = frames_of(traffic({kG1}, 40));  // from kAntenna1 and kAntenna2
    {
        EngineOptions options = options_for({kG1}, 64);
        options.sources = {SourceFilter{kG1, {test::kAntenna1}}};
        Rig rig(options);
        rig.engine->start();
        EXPECT_EQ(rig.nic->flows(), 1u);
        ASSERT_EQ(rig.engine->resources().flows.size(), 1u);
        EXPECT_EQ(rig.engine->resources().flows[0].source, "10.0.0.11");
        rig.play(frames, 8);
        rig.finish();
        EXPECT_EQ(rig.engine->stats().frames, frames.size() / 2);
        EXPECT_EQ(rig.nic->counters().unmatched, frames.size() / 2);
        ASSERT_EQ(rig.ledger.streams().size(), 2u);  // kAntenna1's two threads
        for (const auto& st : rig.ledger.streams()) {
            EXPECT_EQ(st.antenna, test::kAntenna1);
        }
        EXPECT_TRUE(rig.ledger.zero_loss());
    }
    {
        // Both sources named: one QP, a rule for each.
        EngineOptions options = options_for({kG1}, 64);
        options.sources = {SourceFilter{kG1, {test::kAntenna1, test::kAntenna2}}};
        Rig rig(options);
        rig.engine->start();
        EXPECT_EQ(rig.engine->queue_pairs(), 1u);
        EXPECT_EQ(rig.nic->flows(), 2u);
        rig.play(frames, 8);
        rig.finish();
        EXPECT_EQ(rig.engine->stats().frames, frames.size());
        EXPECT_EQ(rig.nic->counters().unmatched, 0u);
    }
    {
        // Hardware demux: a QP for each antenna the group names a source of.
        EngineOptions options = options_for({kG1}, 64);
        options.hw_demux = true;
        options.antennas = {test::kAntenna1, test::kAntenna2};
        options.sources = {SourceFilter{kG1, {test::kAntenna2}}};
        Rig rig(options);
        EXPECT_EQ(rig.engine->queue_pairs(), 1u);
        options.sources = {SourceFilter{kG1, {(10u << 24) | 99u}}};
        EXPECT_THROW(Rig{options}, UsageError);  // exit 2: the operator's to fix
    }
}

// verbs-mlx5-2.md N5: frames the rule counted just after a poll found the CQ
// empty (steered, not yet completed) are delivered by the stop's drain and
// not reported as undelivered.
TEST(Engine, TheStopDrainTakesFramesSteeredJustAfterAnEmptyPoll) {
    Rig rig(options_for({kG1}, 16));
    rig.engine->start();
    auto t = traffic({kG1}, 5);
    t.antennas = {test::kAntenna1};
    t.threads = 1;
    const auto frames = frames_of(t);
    std::size_t next = 0;
    rig.nic->on_poll([&](bool empty) {
        if (empty && next < frames.size()) {
            rig.nic->deliver(frames[next++]);
        }
    });
    rig.engine->stop();
    rig.nic->on_poll(nullptr);
    EXPECT_EQ(rig.engine->stats().frames, frames.size());
    EXPECT_EQ(test::flow_counter(*rig.engine, "sim_mlx5_0/flow/239.17.0.1:36001/matched"),
              frames.size());
    EXPECT_EQ(test::flow_counter(*rig.engine, "sim_mlx5_0/flow/239.17.0.1:36001/undelivered"), 0u);
    EXPECT_FALSE(has_note(rig.ledger, "ended at its bound"));
}

// A switch that goes on forwarding after the leave (snooping off, a static
// route, or the last-member queries' two seconds) keeps the CQ busy: the
// stop's drain ends at its bound and says so, instead of running as long as
// the traffic does.
TEST(Engine, TheStopDrainIsBoundedInTime) {
    EngineOptions options = options_for({kG1}, 16);
    options.stop_drain_bound = std::chrono::milliseconds(50);
    Rig rig(options);
    rig.engine->start();
    auto t = traffic({kG1}, 1);
    t.antennas = {test::kAntenna1};
    t.threads = 1;
    const auto frame = frames_of(t).front();
    constexpr std::uint64_t kEndless = 2'000'000;  // far more than 50 ms of polls here
    std::uint64_t sent = 0;
    rig.nic->on_poll([&](bool) {
        if (sent < kEndless) {
            ++sent;
            rig.nic->deliver(frame);
        }
    });
    rig.nic->deliver(frame);  // in flight when the stop begins: no poll is ever empty
    const auto t0 = std::chrono::steady_clock::now();
    rig.engine->stop();
    const auto took = std::chrono::steady_clock::now() - t0;
    rig.nic->on_poll(nullptr);
    EXPECT_LT(sent, kEndless);
    EXPECT_LT(took, std::chrono::seconds(5));
    EXPECT_TRUE(has_note(rig.ledger, "the stop's drain before the rules went ended at its bound"));
}

// The counted rule is refused only at ibv_create_flow (rdma-core mlx5/verbs.c:
// the probe's attach never reaches the kernel). The run goes on without
// counters for that rule and the rest, and says so.
TEST(Engine, ARefusedCountedRuleIsMadeWithoutItsCounter) {
    SimConfig config;
    config.counted_rule_limit = 1;
    const std::vector<Endpoint> groups = {kG1, kG2, Endpoint{test::kGroup1 + 7, 36009}};
    Rig rig(options_for(groups, 32), {}, config);
    rig.engine->start();
    EXPECT_EQ(rig.nic->flows(), 3u);
    EXPECT_EQ(rig.engine->stats().uncounted_rules, 2u);
    EXPECT_TRUE(has_note(rig.ledger, "refused a counted flow rule"));
    const auto frames = frames_of(traffic(groups, 10));
    rig.play(frames, 8);
    rig.finish();
    // Only the first group's rule counts; its figure is true.
    std::size_t matched_rows = 0;
    for (const auto& c : rig.engine->flow_counters()) {
        if (c.name.find("/matched") != std::string::npos) {
            ++matched_rows;
            EXPECT_NE(c.name.find(kG1.to_string()), std::string::npos) << c.name;
            EXPECT_EQ(c.value, frames.size() / 3);
        }
    }
    EXPECT_EQ(matched_rows, 1u);
    EXPECT_EQ(rig.ledger.totals().codif, frames.size());
    EXPECT_TRUE(rig.ledger.zero_loss());
}

// Every context gets every port's events (ibv_get_async_event(3)): another
// port going down and up is neither an outage of ours nor a reason to rejoin.
TEST(Engine, PortEventsOfAnotherPortAreNotOurs) {
    Rig rig(options_for({kG1}));
    rig.engine->start();
    rig.nic->raise_port_event(2, false);
    rig.nic->raise_port_event(2, true);
    rig.engine->drain();
    EXPECT_EQ(rig.engine->stats().port_down_events, 0u);
    EXPECT_EQ(rig.engine->stats().rejoins, 0u);
    EXPECT_EQ(rig.engine->stats().other_port_events, 2u);
    EXPECT_FALSE(has_note(rig.ledger, "went down"));
    // Our own port still counts.
    rig.nic->set_port_up(false);
    rig.nic->set_port_up(true);
    rig.engine->drain();
    EXPECT_EQ(rig.engine->stats().port_down_events, 1u);
    EXPECT_EQ(rig.engine->stats().rejoins, 1u);
    rig.finish();
    const auto& counters = rig.ledger.source_counters();
    EXPECT_TRUE(std::any_of(counters.begin(), counters.end(), [](const SourceCounter& c) {
        return c.name == "sim_mlx5_0/other_port_events" && c.value == 2;
    }));
}

// A payload region lets go of its registration before its memory:
// ibv_dereg_mr must not run on freed pages.
TEST(PayloadRegion, TheRegistrationGoesBeforeTheMemory) {
    std::vector<std::string> order;
    struct LoggedMr final : verbs::MemoryRegion {
        std::vector<std::string>& log;
        explicit LoggedMr(std::vector<std::string>& l) : log(l) {}
        ~LoggedMr() override { log.push_back("dereg"); }
        std::uint32_t lkey() const override { return 1; }
    };
    {
        PayloadMemory::Region region;
        region.owner = std::shared_ptr<void>(new int(0), [&order](void* p) {
            order.push_back("free");
            delete static_cast<int*>(p);
        });
        region.mr = std::make_unique<LoggedMr>(order);
    }
    const std::vector<std::string> expected = {"dereg", "free"};
    EXPECT_EQ(order, expected);
}

// --- No thread can kill a run (issue: ready for a real GPU host) ---------------------

// Block memory whose copy number `fail_at` throws, as a CUDA copy does on a
// device error; counts the calls that reached it from then on.
class FailingBlockMemory final : public ForwardingBlockMemory {
  public:
    explicit FailingBlockMemory(std::uint64_t fail_at, std::atomic<std::uint64_t>& after)
        : ForwardingBlockMemory(make_host_block_memory()), fail_at_(fail_at), after_(after) {}
    void copy_in(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) override {
        counted_copy([&] { ForwardingBlockMemory::copy_in(dst, src, bytes); });
    }
    void copy_in_held(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) override {
        counted_copy([&] { ForwardingBlockMemory::copy_in_held(dst, src, bytes); });
    }
    void copy_in_device(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes,
                        const DeviceMemory& from) override {
        sticky_.run([&] { ForwardingBlockMemory::copy_in_device(dst, src, bytes, from); });
    }
    void synchronize() override {
        sticky_.run([&] { ForwardingBlockMemory::synchronize(); });
    }

  private:
    template <class F>
    void counted_copy(F&& copy) {
        sticky_.run([&] {
            if (++calls_ >= fail_at_) {
                ++after_;
                throw std::runtime_error("cudaMemcpyAsync: unspecified launch failure (injected)");
            }
            copy();
        });
    }
    std::uint64_t fail_at_;
    std::uint64_t calls_ = 0;
    std::atomic<std::uint64_t>& after_;
    StickyDeviceError sticky_;
};

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// Every record of a classic nanosecond pcap file is whole.
void expect_whole_pcap(const std::filesystem::path& path) {
    const auto bytes = test::read_file(path);
    ASSERT_GE(bytes.size(), 24u) << path;
    std::size_t off = 24;
    while (off < bytes.size()) {
        ASSERT_LE(off + 16, bytes.size()) << path << ": a cut record header";
        off += 16 + load_le32(bytes.data() + off + 8);
    }
    EXPECT_EQ(off, bytes.size()) << path << ": a cut record";
}

TEST(ThreadFaults, ADeviceCopyFailingOnADiskThreadFailsItsOutputAndStopsTheRunNotTheProcess) {
    auto standin = std::make_unique<StandinDevicePayloadMemory>();
    StandinDevicePayloadMemory& device = *standin;
    device.fail_after(1);  // the second batch fails
    Rig rig(options_for({kG1}, 256), {OutputFormat::codif, OutputFormat::pcap}, {},
            std::move(standin));
    rig.engine->start();
    const auto frames = frames_of(traffic({kG1}, 300));
    rig.play(frames, 16);
    rig.finish();
    // Reported, with its cause, instead of std::terminate.
    ASSERT_TRUE(rig.faults.raised());
    EXPECT_TRUE(contains(rig.faults.summary(), "disk thread 0")) << rig.faults.summary();
    EXPECT_TRUE(contains(rig.faults.summary(), "illegal memory access")) << rig.faults.summary();
    // After the error no further device call was made: later buffers failed
    // at once (StickyDeviceError).
    EXPECT_EQ(device.device_calls_after_fault(), 1u);
    // Every slot a writer held came back to the NIC.
    rig.poll_all();
    EXPECT_EQ(rig.engine->slots_held(), 0u);
    // The outputs that met the error failed with it; the counts are true and
    // the files hold whole records.
    std::size_t failed = 0;
    for (const auto& o : rig.ledger.outputs()) {
        if (!o.error.empty()) {
            ++failed;
            EXPECT_TRUE(contains(o.error, "illegal memory access")) << o.error;
        }
        if (o.format == "pcap") {
            expect_whole_pcap(o.path);
        } else {
            // .codif: whole CODIF frames (the datagram without its 42 bytes of headers)
            EXPECT_EQ(std::filesystem::file_size(o.path) % (frames[0].size() - 42), 0u) << o.path;
        }
    }
    EXPECT_GE(failed, 1u);
    EXPECT_TRUE(rig.ledger.reconciles());
    RunOutcome outcome;
    outcome.ledger = rig.ledger;
    outcome.exit_code = exit_code_for(outcome.ledger, outcome.info);
    apply_faults(rig.faults, outcome);
    EXPECT_EQ(outcome.exit_code, kExitError);
    EXPECT_TRUE(contains(outcome.info.error, "a worker thread failed: disk thread 0"));
    EXPECT_FALSE(outcome.ledger.zero_loss());
}

TEST(ThreadFaults, ACopyThreadFailureIssuesNoMoreCopiesAndCountsEveryFrameItMisses) {
    std::atomic<std::uint64_t> after{0};
    Rig rig(options_for({kG1}, 64));
    BlockSinkOptions bo = sink_options();
    bo.memory = [&after] { return std::make_unique<FailingBlockMemory>(100, after); };
    Faults faults;
    bo.faults = &faults;
    BlockSink sink(bo);
    rig.demux->add_sink(sink);
    rig.engine->start();
    auto config = traffic({kG1}, 200);
    config.antennas = {test::kAntenna1};
    const auto frames = frames_of(config);
    for (std::size_t i = 0; i < frames.size(); ++i) {
        rig.nic->deliver(frames[i]);
        if (i % 8 == 7) {
            rig.poll_all();
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
    }
    rig.poll_all();
    sink.flush();
    rig.poll_all();  // the releases the copy thread made on its way out
    rig.finish();
    sink.report_to(rig.ledger);
    ASSERT_TRUE(faults.raised());
    EXPECT_TRUE(contains(faults.summary(), "block copy thread")) << faults.summary();
    EXPECT_TRUE(sink.failed());
    EXPECT_EQ(after.load(), 1u);  // the failing copy, and none after it
    EXPECT_EQ(rig.engine->slots_held(), 0u);
    BlockRing* ring = sink.ring(kG1, test::kAntenna1);
    ASSERT_NE(ring, nullptr);
    const BlockRingStats s = ring->stats();
    EXPECT_EQ(s.placed, 99u);  // copies 1..99 landed
    // Every frame is placed or counted as failed, once.
    EXPECT_EQ(s.placed + sink.copy_failed() + sink.copy_dropped(), frames.size());
    std::uint64_t handed = 0;
    while (const Block* b = ring->acquire(std::chrono::milliseconds(0))) {
        handed += b->present_count;
        ring->release(b);
    }
    EXPECT_EQ(handed + s.abandoned, s.placed);
    const Totals t = rig.ledger.totals();
    EXPECT_EQ(t.block_misses, sink.copy_failed() + sink.copy_dropped() + s.abandoned);
    EXPECT_FALSE(rig.ledger.zero_loss());
}

TEST(ThreadFaults, AConsumerWhoseCheckThrowsReportsItAndStillGivesEveryBlockBack) {
    BlockSinkOptions bo = sink_options();
    bo.ring.blocks = 4;  // a consumer that stopped giving blocks back would fill it
    Faults faults;
    bo.faults = &faults;
    BlockSink sink(bo);
    Ledger ledger;
    DemuxOptions d;
    d.groups = {kG1};
    Demux demux(d, ledger);
    demux.add_sink(sink);
    std::atomic<int> checks{0};
    BlockConsumer consumer(
        sink,
        [&checks](const Block&, const BlockRingOptions&, std::uint32_t) -> std::uint64_t {
            if (++checks == 2) {
                throw std::runtime_error("verify_pattern: an illegal memory access (injected)");
            }
            return 0;
        },
        &faults);
    auto config = traffic({kG1}, 400);
    config.antennas = {test::kAntenna1};
    config.threads = 1;
    std::size_t n = 0;
    for (const auto& f : frames_of(config)) {
        Frame frame;
        frame.head = Bytes(f.data(), f.size());
        frame.wire_bytes = static_cast<std::uint32_t>(f.size());
        demux.on_frame(frame);
        if (++n % 32 == 0) {
            // Paced so the copy thread and the consumer keep up: a 4-block
            // ring is 64 frame times.
            for (int i = 0; i < 200 && consumer.blocks() + 2 < (n / 16); ++i) {
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
        }
    }
    sink.flush();
    consumer.finish();
    sink.report_to(ledger);
    ASSERT_TRUE(faults.raised());
    EXPECT_TRUE(contains(faults.summary(), "block consumer")) << faults.summary();
    EXPECT_EQ(checks.load(), 2);  // no check after the one that failed
    EXPECT_TRUE(consumer.failed());
    EXPECT_EQ(consumer.blocks(), 400u / 16);
    EXPECT_EQ(consumer.unchecked(), consumer.blocks() - 1);
    EXPECT_EQ(sink.ring(kG1, test::kAntenna1)->stats().ring_full, 0u);
}

// Through the capture runner: a failing device copy on a disk thread ends the
// run at once (not at its 60 s bound) with exit 1 and the cause, and the
// report can be written.
TEST(ThreadFaults, TheCaptureRunnerStopsOnAWorkerFaultAsOnADeviceFault) {
    SimProvider provider;
    auto nic = provider.add({});
    test::TempDir dir;
    StandinDevicePayloadMemory device;
    device.fail_after(0);
    CaptureRequest request = one_device_request(256);
    request.outputs.output_dir = dir.path().string();
    request.outputs.formats = {OutputFormat::codif};
    request.payload = &device;
    request.duration_s = 60;
    const auto frames = frames_of(traffic({kG1}, 100));
    std::atomic<bool> stop{false};
    std::atomic<bool> done{false};
    std::thread wire([&] {
        wait_for_the_rule(*nic);
        for (std::size_t i = 0; !done.load(); i = (i + 1) % frames.size()) {
            while (nic->min_posted_wrs() == 0 && !done.load()) {
                std::this_thread::yield();
            }
            nic->deliver(frames[i]);
        }
    });
    const auto start = std::chrono::steady_clock::now();
    RunOutcome out = run_verbs_capture(
        request, provider,
        [](const CaptureTarget&, const Endpoint&) { return std::unique_ptr<GroupMembership>(); },
        stop);
    const auto took = std::chrono::steady_clock::now() - start;
    done = true;
    wire.join();
    EXPECT_LT(took, std::chrono::seconds(30));
    EXPECT_EQ(out.exit_code, kExitError);
    EXPECT_TRUE(contains(out.info.error, "a worker thread failed: disk thread 0"))
        << out.info.error;
    const auto reasons = out.ledger.loss_reasons();
    EXPECT_TRUE(std::any_of(reasons.begin(), reasons.end(), [](const std::string& r) {
        return contains(r, "the run ended early");
    }));
    EXPECT_EQ(device.device_calls_after_fault(), 1u);
    const std::string report = dir / "r.json";
    EXPECT_NO_THROW(write_report(report, report_json(out.ledger, out.info)));
    EXPECT_TRUE(std::filesystem::exists(report));
}

// --- The GPU path's device calls, on the stand-in (issue: ready for a real GPU host)

// The whole GPU path on the stand-in: payload slots reachable only as device
// memory, writers and block rings fed from held slots. The poll thread (this
// test's thread while it polls) makes no device call at all, every read of
// payload slots (copy thread and disk threads) comes after a flush of the
// NIC's writes on the reading thread, the expected antenna's ring and blocks
// are made before the engine starts, and (no spare rings) the other
// antenna's on the copy thread, its frames not lost and the report saying so.
TEST(GpuStandin, ThePollThreadMakesNoDeviceCallAndEveryPayloadReadFollowsAFlush) {
    auto standin = std::make_unique<StandinDevicePayloadMemory>();
    StandinDevicePayloadMemory& device = *standin;
    DeviceCallLog& log = device.log();
    const EngineOptions eo = options_for({kG1}, 1024);
    Rig rig(eo, {OutputFormat::codif, OutputFormat::pcap}, {}, std::move(standin));
    BlockSinkOptions bo = sink_options();
    bo.spare_rings = 0;
    bo.memory = [&log] { return make_host_block_memory(&log); };
    BlockSink sink(bo);
    sink.prepare({{kG1, test::kAntenna1}}, max_payload_bytes(eo));
    EXPECT_EQ(log.calls(DeviceCallLog::Call::allocate), bo.ring.blocks);
    EXPECT_EQ(log.calls(DeviceCallLog::Call::setup), 1u);
    rig.demux->add_sink(sink);
    rig.engine->start();
    log.watch(std::this_thread::get_id());
    const auto frames = frames_of(traffic({kG1}, 300));
    rig.play(frames, 16);
    log.watch(std::thread::id{});
    sink.flush();
    rig.finish();
    sink.report_to(rig.ledger);
    EXPECT_EQ(log.on_watched(), 0u) << "device calls on the poll thread";
    EXPECT_EQ(log.unflushed_reads(), 0u) << "payload read with no flush of the NIC's writes";
    EXPECT_GT(log.calls(DeviceCallLog::Call::flush), 0u);
    // One block memory serves every ring; the unexpected antenna's blocks
    // came on the copy thread.
    EXPECT_EQ(log.calls(DeviceCallLog::Call::setup), 1u);
    EXPECT_EQ(log.calls(DeviceCallLog::Call::allocate), 2u * bo.ring.blocks);
    EXPECT_EQ(sink.rings_made_late(), 1u);
    EXPECT_TRUE(has_note(rig.ledger, "allocated on the copy thread"));
    ASSERT_EQ(sink.keys().size(), 2u);
    const Totals t = rig.ledger.totals();
    EXPECT_EQ(t.codif, frames.size());
    std::uint64_t placed = 0;
    for (const auto& key : sink.keys()) {
        placed += sink.ring(key.group, key.antenna)->stats().placed;
    }
    EXPECT_EQ(placed + t.block_misses, frames.size());
    rig.poll_all();  // the engine takes the last released slots
    EXPECT_EQ(rig.engine->slots_held(), 0u);
    EXPECT_TRUE(rig.ledger.reconciles());
}

// Copies that keep up: however many frames wait for the copy thread, it
// spends a bounded number of device calls per batch (one flush, one gather,
// one wait, for every ring together: the rings share one block memory), not
// per frame or per antenna. A burst of 1,200 frames of two antennas queues
// behind a copy thread stopped at its first wait.
TEST(GpuStandin, TheCopyThreadMakesAtMost20DeviceCallsPer1000Frames) {
    auto standin = std::make_unique<StandinDevicePayloadMemory>();
    StandinDevicePayloadMemory& device = *standin;
    DeviceCallLog& log = device.log();
    EngineOptions eo = options_for({kG1}, 4096);
    eo.ring_hold_limit = 2048;  // every frame of the burst held by the rings
    Rig rig(eo, {}, {}, std::move(standin));
    auto open = std::make_shared<std::atomic<bool>>(false);
    BlockSinkOptions bo = sink_options();
    bo.memory = [&log, open] { return std::make_unique<GatedSyncMemory>(log, open); };
    BlockSink sink(bo);
    sink.prepare({{kG1, test::kAntenna1}, {kG1, test::kAntenna2}}, max_payload_bytes(eo));
    rig.demux->add_sink(sink);
    rig.engine->start();
    const std::uint64_t before = copy_thread_calls(log);
    const auto frames = frames_of(traffic({kG1}, 300));  // 1,200: 2 antennas x 2 threads
    rig.play(frames, 64);
    open->store(true);
    sink.flush();
    rig.finish();
    sink.report_to(rig.ledger);
    const std::uint64_t calls = copy_thread_calls(log) - before;
    ASSERT_EQ(sink.copy_dropped(), 0u);
    ASSERT_EQ(rig.ledger.totals().block_misses, 0u);
    EXPECT_LE(calls * 1000, 20u * frames.size())
        << calls << " calls for " << frames.size() << " frames: flush "
        << log.calls(DeviceCallLog::Call::flush) << ", copy "
        << log.calls(DeviceCallLog::Call::copy) << ", synchronize "
        << log.calls(DeviceCallLog::Call::synchronize) << ", batches " << sink.batches();
    // Before the gate: at most a batch with only a ring's creation and one
    // with the first frames; after it, full batches of 256.
    EXPECT_LE(sink.batches(), 2 + (frames.size() + 255) / 256);
    // Every frame's payload went in a batch: copies counted, bytes whole.
    EXPECT_EQ(log.copies(), frames.size());
    EXPECT_EQ(log.bytes(), frames.size() * traffic({kG1}, 1).payload_bytes);
    EXPECT_EQ(log.unflushed_reads(), 0u);
}

// A header that spills into GPU payload (a VLAN tag the ring was not sized
// for) is never read on the poll thread: the frame is counted headers_split,
// the verdict says loss, and the note names --vlan-tags.
TEST(GpuStandin, AHeaderSpillingIntoDevicePayloadIsCountedNotReadOnThePollThread) {
    auto standin = std::make_unique<StandinDevicePayloadMemory>();
    DeviceCallLog& log = standin->log();
    Rig rig(options_for({kG1}), {}, {}, std::move(standin));
    rig.engine->start();
    log.watch(std::this_thread::get_id());
    auto config = traffic({kG1}, 10);
    config.vlan_id = 5;
    const auto frames = frames_of(config);
    rig.play(frames, frames.size());
    log.watch(std::thread::id{});
    rig.finish();
    EXPECT_EQ(log.on_watched(), 0u);
    EXPECT_EQ(log.total(), 0u);  // no writer, no rings: nothing read the payload
    EXPECT_EQ(rig.engine->stats().split_misaligned, frames.size());
    EXPECT_EQ(rig.ledger.reason_count(Reason::headers_split), frames.size());
    EXPECT_EQ(rig.ledger.totals().codif, 0u);
    EXPECT_FALSE(rig.ledger.zero_loss());
    const auto& notes = rig.ledger.notes();
    EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
        return n.find("--vlan-tags") != std::string::npos &&
               n.find("headers_split") != std::string::npos;
    }));
}

// Control-path accounting (docs/observability.md §5): what the engine made,
// as it made it. One QP per (group, antenna) with hardware demux and
// --queues 4 (test_engine_queues.cpp has the default, one QP); the sizes
// are what the simulated mlx5 gives (test/sim/sim_nic.cpp mlx5_cq_entries,
// mlx5_recv_depth); each payload region is one ring, the header region all.
TEST(Resources, TheEngineRecordsWhatItCreated) {
    auto options = options_for({kG1, kG2}, 100);
    options.hw_demux = true;
    options.antennas = {test::kAntenna1, test::kAntenna2};
    options.queues = 4;
    Rig rig(options);
    const DeviceResources& before = rig.engine->resources();
    EXPECT_TRUE(before.flows.empty()) << "rules are made at start()";
    rig.engine->start();
    const DeviceResources& r = rig.engine->resources();
    EXPECT_EQ(r.device, "sim_mlx5_0");
    EXPECT_EQ(r.port, 1);
    EXPECT_EQ(r.protection_domains, 1u);
    ASSERT_EQ(r.cqs.size(), 1u);
    EXPECT_EQ(r.cqs[0].depth_requested, 400u);  // 4 rings of 100 on one CQ
    EXPECT_EQ(r.cqs[0].depth, 511u);            // 2^9 − 1
    EXPECT_EQ(r.cqs[0].timestamps, "device_ticks");
    const auto qp_nums = rig.engine->qp_numbers();
    ASSERT_EQ(r.qps.size(), 4u);  // 2 groups × 2 antennas
    ASSERT_EQ(qp_nums.size(), 4u);
    const std::vector<std::string> streams = {
        kG1.to_string() + "/10.0.0.11", kG1.to_string() + "/10.0.0.12",
        kG2.to_string() + "/10.0.0.11", kG2.to_string() + "/10.0.0.12"};
    for (std::size_t i = 0; i < r.qps.size(); ++i) {
        EXPECT_EQ(r.qps[i].qp_num, qp_nums[i]);
        EXPECT_EQ(r.qps[i].stream, streams[i]);
        EXPECT_EQ(r.qps[i].recv_depth_requested, 100u);
        EXPECT_EQ(r.qps[i].recv_depth, 128u);  // a power of two
        EXPECT_EQ(r.qps[i].sge_requested, 2u);
        EXPECT_EQ(r.qps[i].sge, 2u);
    }
    const std::uint64_t header_stride = (rig.engine->header_bytes() + 63) / 64 * 64;
    const std::uint64_t payload_stride = (9022 - rig.engine->header_bytes() + 63) / 64 * 64;
    ASSERT_EQ(r.mrs.size(), 5u);
    EXPECT_EQ(r.mrs[0].use, "headers");
    EXPECT_EQ(r.mrs[0].kind, "host");
    EXPECT_EQ(r.mrs[0].bytes, header_stride * 100 * 4);
    for (std::size_t i = 1; i < r.mrs.size(); ++i) {
        EXPECT_EQ(r.mrs[i].use, "payload");
        EXPECT_EQ(r.mrs[i].kind, "host");
        EXPECT_EQ(r.mrs[i].bytes, payload_stride * 100);
        EXPECT_EQ(r.mrs[i].qp_num, qp_nums[i - 1]);
    }
    ASSERT_EQ(r.flows.size(), 4u);
    for (std::size_t i = 0; i < r.flows.size(); ++i) {
        EXPECT_EQ(r.flows[i].group, format_ipv4(i < 2 ? kG1.ip : kG2.ip));
        EXPECT_EQ(r.flows[i].port, i < 2 ? kG1.port : kG2.port);
        EXPECT_EQ(r.flows[i].source, i % 2 == 0 ? "10.0.0.11" : "10.0.0.12");
        EXPECT_EQ(r.flows[i].qp_num, qp_nums[i]);
        EXPECT_TRUE(r.flows[i].counter);
        EXPECT_EQ(r.flows[i].tag, 0u);  // a QP each: nothing to tell apart
    }
    const std::vector<std::pair<std::string, std::uint64_t>> limits = {
        {"max_qp", 131072},
        {"max_qp_wr", 32768},
        {"max_sge", 30},
        {"max_cq", 16777216},
        {"max_cqe", 4194303},
        {"max_mr", 16777216},
        {"max_mr_size", ~std::uint64_t{0}},
        {"max_pd", 8388608}};
    EXPECT_EQ(r.limits, limits);
}

// The limits shape what is made: a ring clamped to max_qp_wr is what the
// report shows; one SGE per WR (no split) and no header region.
TEST(Resources, ClampedRingsAndOneSgeAreReportedAsMade) {
    SimConfig config;
    config.max_qp_wr = 40;
    config.max_sge = 1;
    Rig rig(options_for({kG1}, 64), {}, config);
    const DeviceResources& r = rig.engine->resources();
    ASSERT_EQ(r.qps.size(), 1u);
    EXPECT_EQ(r.qps[0].recv_depth_requested, 40u);
    EXPECT_EQ(r.qps[0].recv_depth, 64u);
    EXPECT_EQ(r.qps[0].sge_requested, 1u);
    EXPECT_EQ(r.qps[0].sge, 1u);
    ASSERT_EQ(r.mrs.size(), 1u);
    EXPECT_EQ(r.mrs[0].use, "payload");
    EXPECT_EQ(r.mrs[0].bytes, std::uint64_t{(9022 + 63) / 64 * 64} * 40);
    EXPECT_EQ(r.limits.at(1), (std::pair<std::string, std::uint64_t>{"max_qp_wr", 40}));
}

// A device that grants one counted rule: the first flow has its counter, the
// rest are recorded without.
TEST(Resources, FlowsWithoutTheirCounterAreRecordedSo) {
    SimConfig config;
    config.counted_rule_limit = 1;
    Rig rig(options_for({kG1, kG2}, 32), {}, config);
    rig.engine->start();
    const auto& flows = rig.engine->resources().flows;
    ASSERT_EQ(flows.size(), 2u);
    EXPECT_TRUE(flows[0].counter);
    EXPECT_FALSE(flows[1].counter);
    EXPECT_EQ(flows[0].source, "");  // any source without hardware demux
}

// Through the capture runner (VerbsSource::report): the account is in the
// run's info and in the report's JSON, per device, with the bytes summed and
// this process's RLIMIT_MEMLOCK; a NIC without flow counters gives rules
// without them.
TEST(Resources, TheCaptureReportCarriesTheAccount) {
    SimProvider provider;
    SimConfig a;
    a.name = "sim_mlx5_0";
    a.flow_counters = false;
    SimConfig b;
    b.name = "sim_mlx5_1";
    auto nic_a = provider.add(a);
    auto nic_b = provider.add(b);
    CaptureRequest request;
    request.targets = {{"sim_mlx5_0", 1, "", 0, {}}, {"sim_mlx5_1", 1, "", 0, {}}};
    request.engine = options_for({kG1, kG2}, 64);
    request.demux.groups = {kG1, kG2};
    request.nic_counters = false;
    request.duration_s = 60;  // a bound, never reached
    std::atomic<bool> stop{false};
    std::thread stopper([&] {
        while (nic_a->flows() < 2 || nic_b->flows() < 2) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        stop = true;
    });
    RunOutcome out = run_verbs_capture(request, provider, {}, stop);
    stopper.join();
    ASSERT_TRUE(out.info.resources.has_value());
    const ResourceAccount& acc = *out.info.resources;
    ASSERT_EQ(acc.devices.size(), 2u);
    EXPECT_EQ(acc.devices[0].device, "sim_mlx5_0");
    EXPECT_EQ(acc.devices[1].device, "sim_mlx5_1");
    std::uint64_t bytes = 0;
    for (const auto& d : acc.devices) {
        EXPECT_EQ(d.qps.size(), 1u);  // both groups' rules on one QP (issue 44)
        EXPECT_EQ(d.flows.size(), 2u);
        EXPECT_EQ(d.mrs.size(), 2u);  // the header slots and the one ring's payload
        for (const auto& f : d.flows) {
            EXPECT_EQ(f.counter, d.device == "sim_mlx5_1") << d.device;
        }
        for (const auto& m : d.mrs) {
            bytes += m.bytes;
        }
    }
    EXPECT_GT(bytes, 0u);
    EXPECT_EQ(acc.registered_bytes, bytes);
    EXPECT_EQ(acc.memory_locked_bytes, bytes);  // all host memory
    rlimit limit{};
    ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &limit), 0);
    if (limit.rlim_cur == RLIM_INFINITY) {
        EXPECT_FALSE(acc.memlock_limit_bytes.has_value());
    } else {
        EXPECT_EQ(acc.memlock_limit_bytes, std::optional<std::uint64_t>(limit.rlim_cur));
    }
    const nlohmann::json j = report_json(out.ledger, out.info);
    ASSERT_TRUE(j.contains("resources")) << j.dump();
    const auto& res = j["resources"];
    EXPECT_EQ(res["memory_locked_bytes"], bytes);
    EXPECT_EQ(res["registered_bytes"], bytes);
    EXPECT_EQ(res["devices"].size(), 2u);
    const auto& dev0 = res["devices"][0];
    EXPECT_EQ(dev0["device"], "sim_mlx5_0");
    EXPECT_EQ(dev0["cqs"][0]["depth_requested"], 64);  // one ring: both groups on one QP
    EXPECT_EQ(dev0["cqs"][0]["depth"], 127);
    EXPECT_EQ(dev0["qps"][0]["recv_depth"], 64);
    EXPECT_EQ(dev0["flows"][0]["counter"], false);
    EXPECT_EQ(dev0["flows"][0]["group"], format_ipv4(kG1.ip));
    EXPECT_EQ(dev0["flows"][0]["port"], kG1.port);
    EXPECT_TRUE(dev0["flows"][0]["source"].is_null());
    EXPECT_EQ(dev0["flows"][1]["tag"], 2);  // two groups share the QP: entry index + 1
    EXPECT_EQ(dev0["mrs"][0]["use"], "headers");
    EXPECT_EQ(dev0["limits"]["max_qp_wr"], 32768);
    EXPECT_EQ(dev0["limits"].size(), 8u);
    EXPECT_EQ(res["cap_ipc_lock"].is_boolean(), true);
}

// Every other source leaves the key out.
TEST(Resources, NoAccountNoKey) {
    Ledger ledger;
    RunInfo info;
    info.source = "pcap";
    EXPECT_FALSE(report_json(ledger, info).contains("resources"));
}

// `ibvcap devices -v`: the limits, one a line, in the fixed order, after the
// capability lines; without -v none of them.
TEST(DevicesVerbose, OneLinePerLimitInAFixedOrder) {
    SimProvider provider;
    SimConfig c;
    c.max_qp = 7;
    c.max_mr_size = 1ull << 40;
    provider.add(c);
    const auto plain = device_capability_lines(provider, "sim_mlx5_0", 1);
    const auto verbose = device_capability_lines(provider, "sim_mlx5_0", 1, true);
    ASSERT_EQ(verbose.size(), plain.size() + 8);
    EXPECT_TRUE(std::equal(plain.begin(), plain.end(), verbose.begin()));
    const std::vector<std::string> limits(verbose.end() - 8, verbose.end());
    const std::vector<std::string> expected = {"max_qp: 7",
                                               "max_qp_wr: 32768",
                                               "max_sge: 30",
                                               "max_cq: 16777216",
                                               "max_cqe: 4194303",
                                               "max_mr: 16777216",
                                               "max_mr_size: 1099511627776",
                                               "max_pd: 8388608"};
    EXPECT_EQ(limits, expected);
    for (const auto& line : plain) {
        EXPECT_EQ(line.find("max_pd"), std::string::npos) << line;
    }
    // A device that cannot be opened says so, -v or not.
    const auto missing = device_capability_lines(provider, "sim_mlx5_9", 1, true);
    ASSERT_EQ(missing.size(), 1u);
    EXPECT_EQ(missing[0].rfind("cannot open: ", 0), 0u) << missing[0];
}

}  // namespace
}  // namespace ibvcap
