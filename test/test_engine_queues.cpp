// Many groups, few receive queues (issue 44): by default one raw-packet QP per
// device, every group's rules (every group and antenna's with --hw-demux)
// steering to it; --queues N deals the groups to N QPs in blocks. What a QP
// per group gave the ledger must survive on the shared QP, through the rules'
// flow tags (engine_rules.cpp): each group's matched and undelivered frames,
// the watchdog naming the group that went silent while the others flow, one
// recovery for all the groups of a QP (and said so), a group that never came.
// And where the tags cannot be had (another capture's rule of the same match
// holds the flow-table entry, EEXIST) or cannot be trusted, the queue's count
// instead of wrong per-group ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "engine_rig.hpp"
#include "formats/packet.hpp"
#include "lib/core/netaddr.hpp"

namespace ibvcap {
namespace {

using test::flow_counter;
using test::kG1;
using test::kG2;
using test::options_for;
using test::Rig;
using test::traffic;

const Endpoint kG3{test::kGroup1 + 2, 36003};

bool has_counter(VerbsEngine& engine, const std::string& name) {
    const auto all = engine.flow_counters();
    return std::any_of(all.begin(), all.end(), [&](const auto& c) { return c.name == name; });
}

std::string flow(const Endpoint& g, const char* what) {
    return "sim_mlx5_0/flow/" + g.to_string() + "/" + what;
}

// The frames of `frames` sent to `g`.
std::vector<std::vector<std::uint8_t>> to_group(
    const std::vector<std::vector<std::uint8_t>>& frames, const Endpoint& g) {
    std::vector<std::vector<std::uint8_t>> out;
    for (const auto& f : frames) {
        UdpPacket p;
        if (parse_udp_frame(Bytes(f.data(), f.size()), f.size(), p) == PacketError::none &&
            p.dst_ip == g.ip && p.dst_port == g.port) {
            out.push_back(f);
        }
    }
    return out;
}

TEST(SharedQueue, EveryGroupsRulesSteerToOneQpWithTagsOfTheirOwn) {
    Rig rig(options_for({kG1, kG2, kG3}, 64));
    rig.engine->start();
    EXPECT_EQ(rig.engine->queue_pairs(), 1u);
    const DeviceResources& r = rig.engine->resources();
    ASSERT_EQ(r.qps.size(), 1u);
    EXPECT_EQ(r.qps[0].stream, "queue 0 (3 groups)");
    ASSERT_EQ(r.flows.size(), 3u);
    for (std::size_t i = 0; i < r.flows.size(); ++i) {
        EXPECT_EQ(r.flows[i].qp_num, r.qps[0].qp_num) << r.flows[i].group;
        EXPECT_EQ(r.flows[i].tag, i + 1) << r.flows[i].group;  // entry index + 1
    }
    // One ring: the CQ is one ring deep, not three.
    EXPECT_EQ(r.cqs.at(0).depth_requested, 64u);
    const auto frames = test::frames_of(traffic({kG1, kG2, kG3}, 30));
    rig.play(frames, 7);
    rig.finish();
    EXPECT_EQ(rig.ledger.totals().codif, frames.size());
    EXPECT_TRUE(rig.ledger.zero_loss());
    EXPECT_EQ(rig.engine->stats().unattributed, 0u);
    for (const auto& g : {kG1, kG2, kG3}) {
        EXPECT_EQ(flow_counter(*rig.engine, flow(g, "matched")), to_group(frames, g).size());
        EXPECT_EQ(flow_counter(*rig.engine, flow(g, "undelivered")), 0u) << g.to_string();
    }
}

// The NIC drops three of kG2's frames (no WR posted): only kG2's rule shows
// them undelivered, as when it had a QP of its own.
TEST(SharedQueue, UndeliveredFramesAreTheirGroupsNotTheQueues) {
    Rig rig(options_for({kG1, kG2, kG3}, 64));
    rig.engine->start();
    const auto frames = test::frames_of(traffic({kG1, kG2, kG3}, 20));
    rig.play(to_group(frames, kG1), 5);
    rig.nic->withhold_buffers(3);
    rig.play(to_group(frames, kG2), 5);
    rig.play(to_group(frames, kG3), 5);
    rig.finish();
    EXPECT_EQ(rig.nic->counters().out_of_buffer, 3u);
    EXPECT_EQ(flow_counter(*rig.engine, flow(kG1, "undelivered")), 0u);
    EXPECT_EQ(flow_counter(*rig.engine, flow(kG2, "undelivered")), 3u);
    EXPECT_EQ(flow_counter(*rig.engine, flow(kG3, "undelivered")), 0u);
    EXPECT_FALSE(has_counter(*rig.engine, "sim_mlx5_0/flow/queue 0 (3 groups)/undelivered"));
}

// The watchdog names the group whose frames the NIC counts and drops while
// the queue's other groups are delivered: on the queue as a whole nothing
// would look wrong.
TEST(SharedQueue, TheWatchdogNamesTheSilentGroupAmongLiveOnes) {
    Rig rig(options_for({kG1, kG2}, 64));
    rig.engine->start();
    const auto frames = test::frames_of(traffic({kG1, kG2}, 20));
    const auto one = to_group(frames, kG1);
    const auto two = to_group(frames, kG2);
    EXPECT_TRUE(rig.engine->watchdog().empty());  // the baseline reading
    rig.play({one.begin(), one.begin() + 10}, 5);
    rig.nic->withhold_buffers(4);
    rig.play({two.begin(), two.begin() + 4}, 4);
    const auto alarms = rig.engine->watchdog();
    ASSERT_EQ(alarms.size(), 1u);
    EXPECT_NE(alarms[0].find(kG2.to_string()), std::string::npos) << alarms[0];
    EXPECT_NE(alarms[0].find("steered 4 frames"), std::string::npos) << alarms[0];
    rig.finish();
}

// A group joined and never sent: matched 0 on its rule, nothing undelivered,
// no alarm, and the others counted as usual.
TEST(SharedQueue, AGroupThatNeverCameHasItsOwnZeroCount) {
    Rig rig(options_for({kG1, kG2, kG3}, 64));
    rig.engine->start();
    EXPECT_TRUE(rig.engine->watchdog().empty());
    const auto frames = test::frames_of(traffic({kG1, kG3}, 20));
    rig.play(frames, 8);
    EXPECT_TRUE(rig.engine->watchdog().empty());
    rig.finish();
    EXPECT_EQ(flow_counter(*rig.engine, flow(kG2, "matched")), 0u);
    EXPECT_EQ(flow_counter(*rig.engine, flow(kG2, "undelivered")), 0u);
    EXPECT_EQ(flow_counter(*rig.engine, flow(kG1, "matched")), to_group(frames, kG1).size());
    EXPECT_EQ(rig.ledger.totals().codif, frames.size());
}

// A QP error on the shared queue: one recovery for all its groups, counted
// once, a note naming them, and every group delivered again after it.
TEST(SharedQueue, OneRecoveryForAllItsGroupsCountedOnceAndNamed) {
    Rig rig(options_for({kG1, kG2, kG3}, 64));
    rig.engine->start();
    const auto frames = test::frames_of(traffic({kG1, kG2, kG3}, 20));
    const std::size_t half = frames.size() / 2;
    rig.play({frames.begin(), frames.begin() + static_cast<std::ptrdiff_t>(half)}, 6);
    rig.nic->inject_qp_error(rig.engine->qp_numbers().at(0));
    for (int i = 0; i < 200 && rig.engine->stats().recoveries == 0; ++i) {
        rig.engine->drain();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(rig.engine->stats().recoveries, 1u);
    rig.play({frames.begin() + static_cast<std::ptrdiff_t>(half), frames.end()}, 6);
    rig.finish();
    EXPECT_EQ(rig.ledger.totals().codif, frames.size());
    EXPECT_TRUE(rig.ledger.zero_loss());
    const auto& notes = rig.ledger.notes();
    const auto note = std::find_if(notes.begin(), notes.end(), [](const std::string& n) {
        return n.find("one recovery for all 3 of its entries") != std::string::npos;
    });
    ASSERT_NE(note, notes.end());
    for (const auto& g : {kG1, kG2, kG3}) {
        EXPECT_NE(note->find(g.to_string()), std::string::npos) << *note;
        EXPECT_EQ(flow_counter(*rig.engine, flow(g, "undelivered")), 0u);
    }
    std::uint64_t recoveries = 0;
    for (const auto& c : rig.ledger.source_counters()) {
        if (c.name == "sim_mlx5_0/qp_recoveries") {
            recoveries = c.value;
        }
    }
    EXPECT_EQ(recoveries, 1u);
}

// --hw-demux: a rule per group and antenna, all on the one QP, each with a
// tag of its own: the per-antenna counts a QP per antenna gave.
TEST(SharedQueue, HardwareDemuxCountsEachGroupAndAntenna) {
    auto options = options_for({kG1, kG2}, 64);
    options.hw_demux = true;
    options.antennas = {test::kAntenna1, test::kAntenna2};
    Rig rig(options);
    rig.engine->start();
    EXPECT_EQ(rig.engine->queue_pairs(), 1u);
    EXPECT_EQ(rig.engine->resources().flows.size(), 4u);
    const auto frames = test::frames_of(traffic({kG1, kG2}, 20));
    // Frames of kG2 from antenna 2 only are dropped by the NIC: played last.
    std::vector<std::vector<std::uint8_t>> rest;
    std::vector<std::vector<std::uint8_t>> last;
    for (const auto& f : frames) {
        UdpPacket p;
        ASSERT_EQ(parse_udp_frame(Bytes(f.data(), f.size()), f.size(), p), PacketError::none);
        (p.dst_ip == kG2.ip && p.src_ip == test::kAntenna2 ? last : rest).push_back(f);
    }
    rig.play(rest, 9);
    rig.nic->withhold_buffers(2);
    rig.play(last, 9);
    rig.finish();
    const std::string a1 = format_ipv4(test::kAntenna1);
    const std::string a2 = format_ipv4(test::kAntenna2);
    const auto entry = [](const Endpoint& g, const std::string& a, const char* what) {
        return "sim_mlx5_0/flow/" + g.to_string() + "/" + a + "/" + what;
    };
    EXPECT_EQ(flow_counter(*rig.engine, entry(kG2, a2, "undelivered")), 2u);
    EXPECT_EQ(flow_counter(*rig.engine, entry(kG2, a2, "matched")), last.size());
    EXPECT_EQ(flow_counter(*rig.engine, entry(kG1, a2, "undelivered")), 0u);
    EXPECT_EQ(flow_counter(*rig.engine, entry(kG2, a1, "undelivered")), 0u);
    EXPECT_EQ(flow_counter(*rig.engine, entry(kG1, a1, "matched")) +
                  flow_counter(*rig.engine, entry(kG1, a2, "matched")),
              to_group(frames, kG1).size());
}

// Another capture on the port holds the flow-table entry of kG2's match
// with no tag: ours is refused (EEXIST, kernel fs_core.c
// check_conflicting_ftes), made without, and the queue's groups are counted
// as one, with a note saying why and what to do.
TEST(SharedQueue, ARefusedTagCountsTheQueueAsOneAndSaysSo) {
    Rig rig(options_for({kG1, kG2}, 64));
    auto other = rig.provider.open("sim_mlx5_0", 1);
    auto cq = other->create_cq(64, verbs::TimestampFormat::none, false);
    auto qp = other->create_qp(*cq, 64, 2);
    verbs::FlowMatch m;
    multicast_mac(kG2.ip, m.dst_mac.data());
    m.dst_ip = kG2.ip;
    m.dst_port = kG2.port;
    auto theirs = qp->create_flow(m, false);
    rig.engine->start();
    EXPECT_EQ(rig.engine->stats().untagged_rules, 1u);
    ASSERT_EQ(rig.engine->resources().flows.size(), 2u);
    EXPECT_EQ(rig.engine->resources().flows[0].tag, 1u);
    EXPECT_EQ(rig.engine->resources().flows[1].tag, 0u) << "refused: made without";
    const auto frames = test::frames_of(traffic({kG1, kG2}, 10));
    rig.play(frames, 5);
    rig.nic->withhold_buffers(2);
    rig.play(to_group(test::frames_of(traffic({kG1}, 1)), kG1), 1);
    rig.engine->stop();
    const std::string queue = "sim_mlx5_0/flow/queue 0 (2 groups)/undelivered";
    EXPECT_EQ(flow_counter(*rig.engine, queue), 2u);
    EXPECT_FALSE(has_counter(*rig.engine, flow(kG1, "undelivered")));
    EXPECT_EQ(flow_counter(*rig.engine, flow(kG2, "matched")), to_group(frames, kG2).size());
    const auto& notes = rig.ledger.notes();
    EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
        return n.find("refused the flow tag") != std::string::npos &&
               n.find("--queues 2") != std::string::npos;
    }));
    theirs.reset();
}

// A completion whose tag names no entry of its QP (nothing from the wire is
// trusted): not counted for any group; the queue's groups are counted as one.
TEST(SharedQueue, ATagNamingNoEntryIsNotAttributed) {
    Rig rig(options_for({kG1, kG2}, 64));
    rig.engine->start();
    const auto frames = test::frames_of(traffic({kG1, kG2}, 10));
    rig.nic->corrupt_next_flow_tag(0x00abcdef);
    rig.play(frames, 5);
    rig.finish();
    EXPECT_EQ(rig.engine->stats().unattributed, 1u);
    EXPECT_EQ(rig.ledger.totals().codif, frames.size());  // the frame itself is good
    EXPECT_EQ(flow_counter(*rig.engine, "sim_mlx5_0/flow/queue 0 (2 groups)/unattributed"), 1u);
    EXPECT_EQ(flow_counter(*rig.engine, "sim_mlx5_0/flow/queue 0 (2 groups)/undelivered"), 0u);
    EXPECT_FALSE(has_counter(*rig.engine, flow(kG1, "undelivered")));
}

// An error completion carries no flow tag: a frame too long for its slot
// (LOC_LEN_ERR) on a shared QP cannot be told to be its group's, so it is
// unattributed and the queue's count stands, never a drop of one group that
// did not happen there.
TEST(SharedQueue, AnErrorCompletionIsCountedForTheQueueNotAGroup) {
    Rig rig(options_for({kG1, kG2}, 64));
    rig.engine->start();
    const auto frames = test::frames_of(traffic({kG1, kG2}, 10));
    rig.nic->fail_next_frame(verbs::WcStatus::loc_len_err);
    rig.play(frames, 5);
    rig.finish();
    EXPECT_EQ(rig.engine->stats().unattributed, 1u);
    EXPECT_EQ(flow_counter(*rig.engine, "sim_mlx5_0/flow/queue 0 (2 groups)/unattributed"), 1u);
    EXPECT_EQ(flow_counter(*rig.engine, "sim_mlx5_0/flow/queue 0 (2 groups)/undelivered"), 0u);
    EXPECT_FALSE(has_counter(*rig.engine, flow(kG1, "undelivered")));
    EXPECT_EQ(rig.ledger.totals().wc_errors, 1u);  // the frame's loss, counted once
}

// --queues N deals the groups in blocks; more queues than groups make one
// per group (the old layout, with no tags), and say so.
TEST(SharedQueue, QueuesDealTheGroupsInBlocks) {
    const std::vector<Endpoint> four = {kG1, kG2, kG3, Endpoint{test::kGroup1 + 3, 36004}};
    {
        auto options = options_for(four, 32);
        options.queues = 2;
        Rig rig(options);
        rig.engine->start();
        const DeviceResources& r = rig.engine->resources();
        ASSERT_EQ(r.qps.size(), 2u);
        ASSERT_EQ(r.flows.size(), 4u);
        EXPECT_EQ(r.flows[0].qp_num, r.qps[0].qp_num);
        EXPECT_EQ(r.flows[1].qp_num, r.qps[0].qp_num);
        EXPECT_EQ(r.flows[2].qp_num, r.qps[1].qp_num);
        EXPECT_EQ(r.flows[3].qp_num, r.qps[1].qp_num);
        EXPECT_EQ(r.cqs.at(0).depth_requested, 64u);  // two rings of 32
        const auto frames = test::frames_of(traffic(four, 10));
        rig.play(frames, 7);
        rig.finish();
        EXPECT_TRUE(rig.ledger.zero_loss());
        EXPECT_EQ(flow_counter(*rig.engine, flow(four[3], "matched")),
                  to_group(frames, four[3]).size());
    }
    {
        auto options = options_for(four, 32);
        options.queues = 8;
        Rig rig(options);
        EXPECT_EQ(rig.engine->queue_pairs(), 4u);
        const auto& notes = rig.ledger.notes();
        EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
            return n.find("--queues 8") != std::string::npos &&
                   n.find("4 queues (one per entry)") != std::string::npos;
        }));
        rig.engine->start();
        const auto frames = test::frames_of(traffic(four, 10));
        rig.play(frames, 7);
        rig.finish();
        EXPECT_EQ(rig.engine->resources().qps[2].stream, kG3.to_string());
        EXPECT_EQ(flow_counter(*rig.engine, flow(kG3, "undelivered")), 0u);
        EXPECT_TRUE(rig.ledger.zero_loss());
    }
}

}  // namespace
}  // namespace ibvcap
