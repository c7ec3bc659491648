// The engine's checks on what comes back to it, one test each (issue 12):
// a completion is trusted only when its wr_id names a QP of the engine, a slot
// of its ring, that slot posted, and the ring generation now running; a
// released token only when it names a slot a consumer holds. Each test
// injects the case through the simulated NIC or the lease's owner, asserts
// the counter it moves, and that no frame is delivered twice.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frames.hpp"
#include "lib/sources/verbs/engine.hpp"
#include "lib/sources/verbs/wr_id.hpp"
#include "test/sim/sim_nic.hpp"

namespace ibvcap {
namespace {

constexpr std::uint32_t kDepth = 16;
const Endpoint kG1{test::kGroup1, 36001};

// The wr_id layout the engine posts (lib/sources/verbs/wr_id.hpp):
// QP index (16 bits) | ring generation (16 bits) | slot (32 bits).
std::uint64_t wr_id(std::uint16_t qp, std::uint16_t generation, std::uint32_t slot) {
    return WrId{qp, generation, slot}.encode();
}
// A lease token (lib/sources/verbs/wr_id.hpp): QP index << 32 | slot.
std::uint64_t token(std::uint32_t qp, std::uint32_t slot) {
    return LeaseToken{qp, slot}.encode();
}

std::vector<std::uint8_t> frame(std::uint32_t n) {
    return test::make_frame(test::kAntenna1, test::kGroup1, 36001, test::make_header(1, n));
}

EngineOptions one_queue() {
    EngineOptions o;
    o.groups = {kG1};
    o.ring_depth = kDepth;
    o.poll_batch = kDepth;
    o.repost_batch = kDepth;  // a completed slot is re-posted at the end of its poll
    return o;
}

// One engine on one simulated device, a demux without writers, and an
// observer that may hold frames (as a writer does) and keeps their leases.
struct Rig {
    sim::SimProvider provider;
    std::shared_ptr<sim::SimHardware> nic;
    std::unique_ptr<verbs::Device> device;
    std::unique_ptr<PayloadMemory> memory = make_host_payload_memory();
    Ledger ledger;
    std::unique_ptr<Demux> demux;
    std::unique_ptr<VerbsEngine> engine;
    bool hold_next = false;           // the observer holds the next frame
    SlotOwner* owner = nullptr;       // where leases go back
    std::vector<std::uint64_t> held;  // tokens of the frames it holds

    explicit Rig(EngineOptions options = one_queue(), sim::SimConfig config = {}) {
        nic = provider.add(config);
        device = provider.open(config.name, config.port);
        DemuxOptions d;
        d.groups = options.groups;
        demux = std::make_unique<Demux>(d, ledger);
        demux->add_observer(
            [this](const Frame& f, const UdpPacket&, const StreamHeader&, const StreamStats&) {
                ASSERT_NE(f.lease, nullptr);
                owner = f.lease->owner;
                if (hold_next && f.hold()) {
                    held.push_back(f.lease->token);
                    hold_next = false;
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

    std::uint32_t qpn() const { return engine->qp_numbers().at(0); }
    std::size_t posted() const { return nic->posted_wrs(qpn()); }
    void poll_all() {
        while (engine->poll_once() > 0) {
        }
    }
    // The frame with wr_id `id` instead of the one of the WR it fills.
    void deliver_as(std::uint32_t n, std::uint64_t id) {
        nic->corrupt_next_wr_id(id);
        nic->deliver(frame(n));
    }
    // Frames first..first+count-1, polled as they come: each must reach the
    // stream exactly once.
    void traffic(std::uint32_t first, std::uint32_t count) {
        for (std::uint32_t n = first; n < first + count; ++n) {
            nic->deliver(frame(n));
            poll_all();
        }
    }
    const StreamStats& stream() const { return ledger.streams().at(0); }
};

// No frame was delivered twice, and the stream holds exactly `frames`.
void expect_each_frame_once(const Rig& rig, std::uint64_t frames) {
    EXPECT_EQ(rig.engine->stats().frames, frames);
    ASSERT_EQ(rig.ledger.streams().size(), 1u);
    EXPECT_EQ(rig.stream().packets(), frames);
    EXPECT_EQ(rig.stream().sequence.duplicates(), 0u);
    EXPECT_EQ(rig.ledger.totals().packets, frames);
}

TEST(EngineChecks, ACompletionNamingNoQueuePairIsBadAndDeliversNothing) {
    Rig rig;
    rig.nic->deliver(frame(0));
    rig.deliver_as(1, wr_id(1, 0, 1));       // one QP: index 1 is one past the last
    rig.deliver_as(2, wr_id(0xffff, 0, 2));  // the largest index
    rig.poll_all();
    EXPECT_EQ(rig.engine->stats().bad_wr_id, 2u);
    EXPECT_EQ(rig.engine->stats().stale_completions, 0u);
    expect_each_frame_once(rig, 1);
    rig.engine->report_to(rig.ledger);
    EXPECT_EQ(rig.ledger.totals().wc_errors, 2u);
    EXPECT_FALSE(rig.ledger.zero_loss());
}

TEST(EngineChecks, ACompletionNamingASlotBeyondTheRingIsBadAndDeliversNothing) {
    Rig rig;
    rig.nic->deliver(frame(0));
    rig.deliver_as(1, wr_id(0, 0, kDepth));  // one past the last slot
    rig.deliver_as(2, wr_id(0, 0, 0xffffffffu));
    // Beyond the ring whatever its generation: bad, not stale.
    rig.deliver_as(3, wr_id(0, 7, kDepth));
    rig.poll_all();
    EXPECT_EQ(rig.engine->stats().bad_wr_id, 3u);
    EXPECT_EQ(rig.engine->stats().stale_completions, 0u);
    expect_each_frame_once(rig, 1);
    rig.engine->report_to(rig.ledger);
    EXPECT_EQ(rig.ledger.totals().wc_errors, 3u);
}

// A length error whose wr_id is also bad is one lost frame: counted by its
// status, not a second time as a bad wr_id.
TEST(EngineChecks, AnErrorCompletionWithABadWrIdIsOneWcError) {
    Rig rig;
    rig.nic->deliver(frame(0));
    rig.nic->fail_next_frame(verbs::WcStatus::loc_len_err);
    rig.deliver_as(1, wr_id(1, 0, 1));
    rig.poll_all();
    EXPECT_EQ(rig.engine->stats().bad_wr_id, 1u);
    expect_each_frame_once(rig, 1);
    rig.engine->report_to(rig.ledger);
    EXPECT_EQ(rig.ledger.totals().wc_errors, 1u);
    EXPECT_FALSE(rig.ledger.zero_loss());
}

TEST(EngineChecks, ASecondCompletionOfASlotBeforeItIsPostedAgainIsBadAndNotDeliveredTwice) {
    Rig rig;
    rig.nic->deliver(frame(0));              // slot 0
    rig.deliver_as(1, wr_id(0, 0, 0));       // slot 0 again, in the same poll
    ASSERT_EQ(rig.engine->poll_once(), 2u);  // one batch: slot 0 not yet re-posted
    EXPECT_EQ(rig.engine->stats().bad_wr_id, 1u);
    expect_each_frame_once(rig, 1);
    rig.engine->report_to(rig.ledger);
    EXPECT_EQ(rig.ledger.totals().wc_errors, 1u);
}

TEST(EngineChecks, ACompletionOfASlotAConsumerHoldsIsBadAndNotDeliveredTwice) {
    Rig rig;
    rig.hold_next = true;
    rig.nic->deliver(frame(0));  // slot 0, held by the observer
    rig.poll_all();
    ASSERT_EQ(rig.held.size(), 1u);
    EXPECT_EQ(rig.engine->slots_held(), 1u);
    EXPECT_EQ(rig.posted(), kDepth - 1);
    rig.deliver_as(1, wr_id(0, 0, 0));  // a completion for the held slot
    rig.poll_all();
    EXPECT_EQ(rig.engine->stats().bad_wr_id, 1u);
    expect_each_frame_once(rig, 1);
    // Released, the slot is posted once, and traffic goes on.
    rig.owner->release(rig.held);
    rig.held.clear();
    rig.engine->poll_once();
    EXPECT_EQ(rig.engine->slots_held(), 0u);
    EXPECT_EQ(rig.engine->stats().bad_release, 0u);
}

TEST(EngineChecks, ACompletionOfTheRingBeforeARecoveryWhoseDrainTimedOutIsStale) {
    // A provider that leaves a reset QP's completions in the CQ, and a drain
    // that gives up at once: the old ring's completions arrive after the new
    // ring is posted, naming slots that are posted again.
    sim::SimConfig config;
    config.cq_clean_on_reset = false;
    EngineOptions options = one_queue();
    options.poll_batch = 1;
    options.drain_timeout = std::chrono::milliseconds(0);
    Rig rig(options, config);
    rig.nic->deliver(frame(0));  // slots 0, 1, 2 of generation 0
    rig.nic->deliver(frame(1));
    rig.nic->deliver(frame(2));
    rig.nic->inject_qp_error(rig.qpn());  // flushes slots 3..15; QP_FATAL
    rig.engine->drain();                  // the event, then one completion per poll
    const EngineStats& s = rig.engine->stats();
    EXPECT_EQ(s.recoveries, 1u);
    // Frame 0 came before the recovery; frames 1 and 2 and the 13 flushes
    // after it, from generation 0: their slots were posted again since.
    EXPECT_EQ(s.stale_completions, 2u + (kDepth - 3));
    EXPECT_EQ(s.stale_frames, 2u);
    EXPECT_EQ(s.bad_wr_id, 0u);
    expect_each_frame_once(rig, 1);
    EXPECT_EQ(rig.posted(), kDepth);
    // The new ring delivers, each frame once.
    rig.traffic(3, 2 * kDepth);
    expect_each_frame_once(rig, 1 + 2 * kDepth);
    EXPECT_EQ(rig.stream().sequence.missing(), 2u);  // frames 1 and 2
    rig.engine->report_to(rig.ledger);
    EXPECT_EQ(rig.ledger.totals().wc_errors, 2u);  // the stale frames are loss
    EXPECT_FALSE(rig.ledger.zero_loss());
}

TEST(EngineChecks, ACompletionWhoseByteLenTheSlotCannotHoldIsBadAndDeliversNothing) {
    Rig rig;
    const std::uint32_t capacity = one_queue().max_frame_bytes;  // SGE0 + SGE1
    rig.nic->deliver(frame(0));
    rig.nic->corrupt_next_byte_len(capacity + 1);  // one byte past the slot
    rig.nic->deliver(frame(1));
    rig.nic->corrupt_next_byte_len(0);
    rig.nic->deliver(frame(2));
    rig.poll_all();
    EXPECT_EQ(rig.engine->stats().bad_byte_len, 2u);
    EXPECT_EQ(rig.engine->stats().bad_wr_id, 0u);
    expect_each_frame_once(rig, 1);
    EXPECT_EQ(rig.posted(), kDepth);  // both slots posted again
    rig.engine->report_to(rig.ledger);
    EXPECT_EQ(rig.ledger.totals().wc_errors, 2u);
    EXPECT_FALSE(rig.ledger.zero_loss());
}

// The same with --no-split (one SGE: the whole frame in payload memory): the
// slot holds max_frame_bytes, not the split's header slot as well (issue 25
// item 12: a capacity computed as in split mode let a completion one header
// longer than its slot through, to be read past the slot's end).
TEST(EngineChecks, WithoutTheSplitACompletionLongerThanItsSlotIsBad) {
    EngineOptions o = one_queue();
    o.split = false;
    Rig rig(o);
    const std::uint32_t capacity = o.max_frame_bytes;  // the one SGE
    rig.nic->deliver(frame(0));
    rig.nic->corrupt_next_byte_len(capacity + 1);
    rig.nic->deliver(frame(1));
    rig.nic->deliver(frame(2));
    rig.poll_all();
    EXPECT_EQ(rig.engine->stats().bad_byte_len, 1u);
    expect_each_frame_once(rig, 2);
    EXPECT_EQ(rig.posted(), kDepth);
    rig.engine->report_to(rig.ledger);
    EXPECT_EQ(rig.ledger.totals().wc_errors, 1u);
    EXPECT_FALSE(rig.ledger.zero_loss());
}

// A frame whose completion reports an error that puts the QP in error: the
// frame is a wc error, the rest of the ring flushes, and the QP recovers.
TEST(EngineChecks, AFrameCompletedInErrorIsAWcErrorAndTheQueueRecovers) {
    for (const auto status :
         {verbs::WcStatus::loc_prot_err, verbs::WcStatus::loc_qp_op_err, verbs::WcStatus::other}) {
        SCOPED_TRACE(verbs::to_string(status));
        Rig rig;
        rig.nic->deliver(frame(0));
        rig.nic->fail_next_frame(status);
        rig.nic->deliver(frame(1));
        rig.poll_all();
        const EngineStats& s = rig.engine->stats();
        EXPECT_EQ(s.wc_by_status[static_cast<std::size_t>(status)], 1u);
        EXPECT_EQ(s.wc_by_status[static_cast<std::size_t>(verbs::WcStatus::wr_flush_err)],
                  kDepth - 2);
        EXPECT_EQ(s.recoveries, 1u);
        EXPECT_EQ(rig.posted(), kDepth);
        rig.traffic(2, 2 * kDepth);
        expect_each_frame_once(rig, 1 + 2 * kDepth);
        EXPECT_EQ(rig.stream().sequence.missing(), 1u);  // frame 1
        rig.engine->report_to(rig.ledger);
        EXPECT_EQ(rig.ledger.totals().wc_errors, 1u);  // the frame, not the flushes
        EXPECT_FALSE(rig.ledger.zero_loss());
    }
}

std::uint64_t witness(const VerbsEngine& engine, const std::string& name) {
    for (const auto& c : engine.witnesses("w/")) {
        if (c.name == "w/" + name) {
            return c.value;
        }
    }
    ADD_FAILURE() << "no witness " << name;
    return 0;
}

// Other threads (the timeline, the metrics file) read the witnesses as the
// poll thread last published them: when run() returns, and after stop()'s
// drains, they are those of the end.
TEST(EngineChecks, TheWitnessesOtherThreadsReadAreThoseOfTheEnd) {
    Rig rig;
    rig.deliver_as(0, wr_id(1, 0, 0));  // a wc error
    rig.poll_all();                     // polled, not yet published
    const std::atomic<bool> stop{true};
    rig.engine->run(stop);  // returns at once
    EXPECT_EQ(witness(*rig.engine, "wc_errors"), 1u);

    rig.deliver_as(1, wr_id(1, 0, 1));  // left for stop()'s drains
    rig.nic->set_port_up(false);
    rig.engine->stop();
    EXPECT_EQ(witness(*rig.engine, "wc_errors"), 2u);
    EXPECT_EQ(witness(*rig.engine, "port_down_events"), 1u);
}

TEST(EngineChecks, ADoubleReleaseIsCountedAndPostsTheSlotOnce) {
    Rig rig;
    rig.hold_next = true;
    rig.nic->deliver(frame(0));
    rig.poll_all();
    ASSERT_EQ(rig.held.size(), 1u);
    const std::uint64_t t = rig.held.front();
    rig.held.clear();
    EXPECT_EQ(rig.posted(), kDepth - 1);
    rig.owner->release({&t, 1});
    rig.engine->poll_once();
    EXPECT_EQ(rig.engine->slots_held(), 0u);
    EXPECT_EQ(rig.posted(), kDepth);
    EXPECT_EQ(rig.engine->stats().bad_release, 0u);
    rig.owner->release({&t, 1});  // again
    rig.engine->poll_once();
    EXPECT_EQ(rig.engine->stats().bad_release, 1u);
    EXPECT_EQ(rig.engine->slots_held(), 0u);
    EXPECT_EQ(rig.posted(), kDepth);  // not posted twice
    rig.traffic(1, 2 * kDepth);
    expect_each_frame_once(rig, 1 + 2 * kDepth);
    EXPECT_EQ(rig.stream().sequence.missing(), 0u);
    EXPECT_EQ(rig.posted(), kDepth);
}

TEST(EngineChecks, AReleaseOfATokenNeverHandedOutIsCountedAndPostsNothing) {
    Rig rig;
    rig.nic->deliver(frame(0));
    rig.poll_all();
    ASSERT_NE(rig.owner, nullptr);
    EXPECT_EQ(rig.engine->slots_held(), 0u);
    const std::uint64_t never[] = {
        token(0, 5),       // a slot of the ring, posted, held by no one
        token(1, 0),       // no such QP
        token(0, kDepth),  // beyond the ring
    };
    rig.owner->release(never);
    rig.engine->poll_once();
    EXPECT_EQ(rig.engine->stats().bad_release, 3u);
    EXPECT_EQ(rig.engine->slots_held(), 0u);
    EXPECT_EQ(rig.posted(), kDepth);
    rig.traffic(1, 2 * kDepth);
    expect_each_frame_once(rig, 1 + 2 * kDepth);
    EXPECT_EQ(rig.stream().sequence.missing(), 0u);
    EXPECT_EQ(rig.posted(), kDepth);
}

// The layouts themselves, at run time as well as in wr_id.hpp's static_asserts:
// each field in its own bits, read back as written.
TEST(EngineChecks, AWrIdAndALeaseTokenKeepTheirFieldsInTheirBits) {
    EXPECT_EQ(wr_id(0x1234, 0x5678, 0x9abcdef0u), 0x1234'5678'9abc'def0ull);
    EXPECT_EQ(wr_id(1, 0, 0), 1ull << 48);
    EXPECT_EQ(wr_id(0, 1, 0), 1ull << 32);
    EXPECT_EQ(wr_id(0, 0, 1), 1ull);
    const WrId id = WrId::decode(0xfedc'ba98'7654'3210ull);
    EXPECT_EQ(id.qp, 0xfedcu);
    EXPECT_EQ(id.generation, 0xba98u);
    EXPECT_EQ(id.slot, 0x7654'3210u);
    EXPECT_EQ(id.encode(), 0xfedc'ba98'7654'3210ull);

    EXPECT_EQ(token(0x1234'5678u, 0x9abc'def0u), 0x1234'5678'9abc'def0ull);
    EXPECT_EQ(token(1, 0), 1ull << 32);
    const LeaseToken t = LeaseToken::decode(0xfedc'ba98'7654'3210ull);
    EXPECT_EQ(t.qp, 0xfedc'ba98u);
    EXPECT_EQ(t.slot, 0x7654'3210u);
    EXPECT_EQ(t.encode(), 0xfedc'ba98'7654'3210ull);
}

}  // namespace
}  // namespace ibvcap
