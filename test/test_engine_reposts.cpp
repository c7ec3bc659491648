// When the verbs engine re-posts its receive slots (issue 30: many queues as
// fast as one; docs/architecture.md, "The data path"): a QP's completed
// slots go back to the NIC in one post_recv call once repost_batch of them
// wait, at once while fewer than half of its ring is posted (the low-water
// mark), and all of them when a poll finds the CQ empty. Each post_recv is a
// per-call cost on mlx5 (rdma-core providers/mlx5/qp.c mlx5_post_recv: the
// receive queue's lock, a barrier and a doorbell record write per call), so
// with many QPs on one CQ a re-post per QP per poll would be one call per
// frame. These tests count the simulated NIC's calls, and check that a ring
// fed slowly never runs dry waiting for its batch.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "frames.hpp"
#include "lib/demux/demux.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/sources/verbs/engine.hpp"
#include "test/sim/sim_nic.hpp"

namespace ibvcap {
namespace {

Endpoint group(std::uint32_t i) {
    return Endpoint{test::kGroup1 + i, 36001};
}

std::vector<std::uint8_t> frame(std::uint32_t g, std::uint32_t n) {
    return test::make_frame(test::kAntenna1, group(g).ip, 36001, test::make_header(1, n));
}

// One engine on one simulated device and a demux without writers; an
// observer holds the first `hold` frames (as a writer does), and gives them
// back when the rig goes.
struct Rig {
    sim::SimProvider provider;
    std::shared_ptr<sim::SimHardware> nic;
    std::unique_ptr<verbs::Device> device;
    std::unique_ptr<PayloadMemory> memory = make_host_payload_memory();
    Ledger ledger;
    std::unique_ptr<Demux> demux;
    std::unique_ptr<VerbsEngine> engine;
    std::uint32_t hold = 0;
    SlotOwner* owner = nullptr;
    std::vector<std::uint64_t> held;

    explicit Rig(EngineOptions options) {
        const sim::SimConfig config;
        nic = provider.add(config);
        device = provider.open(config.name, config.port);
        DemuxOptions d;
        d.groups = options.groups;
        demux = std::make_unique<Demux>(d, ledger);
        demux->add_observer(
            [this](const Frame& f, const UdpPacket&, const StreamHeader&, const StreamStats&) {
                ASSERT_NE(f.lease, nullptr);
                owner = f.lease->owner;
                if (held.size() < hold) {
                    ASSERT_TRUE(f.hold());
                    held.push_back(f.lease->token);
                }
            });
        engine = std::make_unique<VerbsEngine>(*device, std::move(options), *demux, ledger, *memory,
                                               MembershipFactory{});
        engine->start();
    }
    ~Rig() {
        if (owner != nullptr && !held.empty()) {
            owner->release(held);
        }
    }
    Rig(const Rig&) = delete;
    Rig& operator=(const Rig&) = delete;

    std::uint64_t post_calls() const { return nic->counters().post_recv_calls; }
};

EngineOptions queues(std::uint32_t count, std::uint32_t depth) {
    EngineOptions o;
    for (std::uint32_t i = 0; i < count; ++i) {
        o.groups.push_back(group(i));
    }
    o.queues = count;  // a QP per group: the layout --queues keeps measurable
    o.ring_depth = depth;
    o.poll_batch = 64;
    o.repost_batch = 32;
    return o;
}

// BM_EngineQps's shape (bench/bench_engine.cpp): 64 QPs on the one CQ, the
// wire round-robin over them, 512 frames between polls, each poll taking 64
// completions, one of each QP. Re-posting each QP's slots at the end of every
// poll made that one post_recv per frame; in batches it is at most one per
// repost_batch frames while the CQ has work, and an idle poll fills every
// ring again.
TEST(EngineReposts, ManyQueuesOnOneCqPostInBatchesNotOncePerPoll) {
    constexpr std::uint32_t kQps = 64;
    constexpr std::uint32_t kDepth = 64;
    constexpr std::uint32_t kRounds = 16;
    constexpr std::uint32_t kPerRound = 512;  // 8 frames per QP
    const EngineOptions o = queues(kQps, kDepth);
    Rig rig(o);
    const std::uint64_t calls_at_start = rig.post_calls();
    std::uint64_t frames = 0;
    std::uint64_t polls = 0;
    for (std::uint32_t round = 0; round < kRounds; ++round) {
        for (std::uint32_t i = 0; i < kPerRound; ++i) {
            rig.nic->deliver(frame(i % kQps, round * (kPerRound / kQps) + i / kQps));
        }
        frames += kPerRound;
        while (rig.engine->frames_published() < frames) {
            ASSERT_GT(rig.engine->poll_once(), 0u) << "the NIC dropped frames";
            ++polls;
        }
    }
    const std::uint64_t busy_calls = rig.post_calls() - calls_at_start;
    EXPECT_EQ(polls, frames / o.poll_batch);
    // Every call while the CQ had work carried a whole batch (no ring fell
    // to its low-water mark): one per poll and QP would be `frames` calls.
    EXPECT_LE(busy_calls, frames / o.repost_batch);
    EXPECT_GT(busy_calls, 0u);
    // Idle: every QP posts what waits, and each ring is full again.
    EXPECT_EQ(rig.engine->poll_once(), 0u);
    EXPECT_LE(rig.post_calls() - calls_at_start, busy_calls + kQps);
    for (const std::uint32_t qpn : rig.engine->qp_numbers()) {
        EXPECT_EQ(rig.nic->posted_wrs(qpn), kDepth) << "QP " << qpn;
    }
    EXPECT_EQ(rig.nic->counters().out_of_buffer, 0u);
    EXPECT_EQ(rig.engine->stats().frames, frames);
    EXPECT_EQ(rig.engine->stats().bad_wr_id, 0u);
    EXPECT_EQ(rig.ledger.totals().packets, frames);
    EXPECT_EQ(rig.ledger.totals().missing, 0u);
    EXPECT_EQ(rig.ledger.totals().duplicates, 0u);
}

// A QP fed one frame per poll never sees an idle poll, and may never fill a
// batch before its ring is empty: a ring smaller than the batch, or one whose
// consumers hold most of it. The low-water mark gives its slots back in time:
// the NIC never finds it without a posted WR.
struct SlowRing {
    const char* name;
    std::uint32_t depth;
    std::uint32_t hold;  // frames a consumer holds first
};

void feed_one_frame_per_poll(const SlowRing& c) {
    SCOPED_TRACE(c.name);
    EngineOptions o = queues(1, c.depth);
    o.hold_limit = c.hold;
    Rig rig(o);
    rig.hold = c.hold;
    const std::uint32_t frames = 8 * c.depth;
    for (std::uint32_t n = 0; n < frames; ++n) {
        rig.nic->deliver(frame(0, n));
        ASSERT_EQ(rig.engine->poll_once(), 1u) << "frame " << n << ": the ring ran dry";
    }
    EXPECT_EQ(rig.held.size(), c.hold);
    EXPECT_EQ(rig.nic->counters().out_of_buffer, 0u);
    EXPECT_EQ(rig.engine->stats().frames, frames);
    EXPECT_EQ(rig.ledger.totals().missing, 0u);
    // What the consumer held comes back, and an idle poll posts it all.
    rig.owner->release(rig.held);
    rig.held.clear();
    EXPECT_EQ(rig.engine->poll_once(), 0u);
    EXPECT_EQ(rig.engine->slots_held(), 0u);
    EXPECT_EQ(rig.nic->posted_wrs(rig.engine->qp_numbers().at(0)), c.depth);
}

TEST(EngineReposts, ARingFedOneFramePerPollIsNeverStarved) {
    feed_one_frame_per_poll({"a ring smaller than the batch", 16, 0});
    feed_one_frame_per_poll({"a ring its consumers hold most of", 64, 40});
}

}  // namespace
}  // namespace ibvcap
