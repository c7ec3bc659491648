// Unit tests for the per-stream CODIF sequence tracker (lib/ledger/sequence.hpp;
// docs/formats.md, "How a stream's frames are counted").
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "lib/ledger/sequence.hpp"

namespace ibvcap {
namespace {

using Kind = SequenceTracker::Kind;
constexpr std::uint64_t kW = SequenceTracker::kWindow;

// The identity reconciles() promises when no frame came too late, computed here
// from the public counters (reconciles() itself skips it once too_late > 0).
bool identity_holds(const SequenceTracker& t) {
    return t.received() - t.duplicates() - t.too_late() + t.missing() ==
           t.newest() - t.lowest() + 1;
}

struct Counts {
    std::uint64_t received, missing, duplicates, out_of_order, too_late;
};

void expect_counts(const SequenceTracker& t, const Counts& c) {
    EXPECT_EQ(t.received(), c.received);
    EXPECT_EQ(t.missing(), c.missing);
    EXPECT_EQ(t.duplicates(), c.duplicates);
    EXPECT_EQ(t.out_of_order(), c.out_of_order);
    EXPECT_EQ(t.too_late(), c.too_late);
    EXPECT_TRUE(t.reconciles());
}

TEST(SequenceTracker, FreshTrackerIsEmptyAndReconciles) {
    SequenceTracker t;
    EXPECT_FALSE(t.started());
    EXPECT_TRUE(t.reconciles());
    expect_counts(t, {0, 0, 0, 0, 0});
}

TEST(SequenceTracker, InOrderRun) {
    SequenceTracker t;
    EXPECT_EQ(t.observe(100), Kind::first);
    EXPECT_TRUE(t.started());
    for (std::uint64_t i = 101; i < 200; ++i) {
        EXPECT_EQ(t.observe(i), Kind::in_order) << i;
        EXPECT_TRUE(t.reconciles());
    }
    EXPECT_EQ(t.lowest(), 100u);
    EXPECT_EQ(t.newest(), 199u);
    expect_counts(t, {100, 0, 0, 0, 0});
}

TEST(SequenceTracker, FirstFrameMayBeZero) {
    SequenceTracker t;
    EXPECT_EQ(t.observe(0), Kind::first);
    EXPECT_EQ(t.observe(1), Kind::in_order);
    EXPECT_EQ(t.lowest(), 0u);
    EXPECT_EQ(t.newest(), 1u);
    expect_counts(t, {2, 0, 0, 0, 0});
}

TEST(SequenceTracker, GapCountsMissing) {
    SequenceTracker t;
    t.observe(10);
    EXPECT_EQ(t.observe(11), Kind::in_order);
    EXPECT_EQ(t.observe(15), Kind::gap);  // 12, 13, 14 missing
    expect_counts(t, {3, 3, 0, 0, 0});
    EXPECT_EQ(t.newest(), 15u);
    EXPECT_EQ(t.observe(16), Kind::in_order);
    EXPECT_EQ(t.observe(18), Kind::gap);  // 17 missing
    expect_counts(t, {5, 4, 0, 0, 0});
    EXPECT_EQ(t.lowest(), 10u);
    EXPECT_EQ(t.newest(), 18u);
}

TEST(SequenceTracker, DuplicatesOfNewestAndOfOlderFrames) {
    SequenceTracker t;
    for (std::uint64_t i = 10; i <= 15; ++i) {
        t.observe(i);
    }
    EXPECT_EQ(t.observe(15), Kind::duplicate);  // the newest again
    expect_counts(t, {7, 0, 1, 0, 0});
    EXPECT_EQ(t.observe(12), Kind::duplicate);  // an older received frame
    EXPECT_EQ(t.observe(10), Kind::duplicate);  // the lowest
    expect_counts(t, {9, 0, 3, 0, 0});
    EXPECT_EQ(t.lowest(), 10u);
    EXPECT_EQ(t.newest(), 15u);
    // The first frame repeated at once is a duplicate too.
    SequenceTracker u;
    u.observe(7);
    EXPECT_EQ(u.observe(7), Kind::duplicate);
    expect_counts(u, {2, 0, 1, 0, 0});
}

TEST(SequenceTracker, LateFrameFillsGap) {
    SequenceTracker t;
    t.observe(10);
    EXPECT_EQ(t.observe(14), Kind::gap);
    expect_counts(t, {2, 3, 0, 0, 0});
    EXPECT_EQ(t.observe(12), Kind::late);
    expect_counts(t, {3, 2, 0, 1, 0});
    EXPECT_EQ(t.observe(12), Kind::duplicate);  // now received: a duplicate, not late
    expect_counts(t, {4, 2, 1, 1, 0});
    EXPECT_EQ(t.observe(11), Kind::late);
    EXPECT_EQ(t.observe(13), Kind::late);
    expect_counts(t, {6, 0, 1, 3, 0});
    EXPECT_EQ(t.newest(), 14u);
    EXPECT_EQ(t.lowest(), 10u);
    EXPECT_EQ(t.observe(15), Kind::in_order);
    expect_counts(t, {7, 0, 1, 3, 0});
}

TEST(SequenceTracker, FrameBeforeLowestMovesTheStart) {
    // The first two frames of a stream swapped, then one more swapped further.
    SequenceTracker t;
    EXPECT_EQ(t.observe(101), Kind::first);
    EXPECT_EQ(t.observe(100), Kind::late);
    EXPECT_EQ(t.lowest(), 100u);
    expect_counts(t, {2, 0, 0, 1, 0});
    EXPECT_EQ(t.observe(97), Kind::late);  // 98 and 99 are now missing
    EXPECT_EQ(t.lowest(), 97u);
    EXPECT_EQ(t.newest(), 101u);
    expect_counts(t, {3, 2, 0, 2, 0});
    EXPECT_EQ(t.observe(98), Kind::late);
    expect_counts(t, {4, 1, 0, 3, 0});
    EXPECT_EQ(t.observe(97), Kind::duplicate);
    EXPECT_EQ(t.observe(99), Kind::late);
    expect_counts(t, {6, 0, 1, 4, 0});
    EXPECT_EQ(t.observe(102), Kind::in_order);
    expect_counts(t, {7, 0, 1, 4, 0});
}

TEST(SequenceTracker, FrameBeforeLowestAtTheWindowEdge) {
    SequenceTracker t;
    t.observe(kW + 10);
    // Exactly kWindow - 1 behind the newest: still classified.
    EXPECT_EQ(t.observe(11), Kind::late);
    EXPECT_EQ(t.lowest(), 11u);
    expect_counts(t, {2, kW - 2, 0, 1, 0});
    // kWindow behind: too late, the start does not move.
    EXPECT_EQ(t.observe(10), Kind::late);
    EXPECT_EQ(t.lowest(), 11u);
    EXPECT_EQ(t.missing(), kW - 2);
    EXPECT_EQ(t.too_late(), 1u);
    EXPECT_EQ(t.out_of_order(), 2u);
    EXPECT_TRUE(t.reconciles());
    EXPECT_TRUE(identity_holds(t));
}

TEST(SequenceTracker, FrameOlderThanWindowIsTooLate) {
    SequenceTracker t;
    t.observe(0);
    t.observe(2);  // 1 missing
    for (std::uint64_t i = 3; i <= kW + 100; ++i) {
        ASSERT_EQ(t.observe(i), Kind::in_order);
    }
    expect_counts(t, {kW + 100, 1, 0, 0, 0});
    // Frame 1 filled the gap, but it is more than a window behind.
    EXPECT_EQ(t.observe(1), Kind::late);
    EXPECT_EQ(t.missing(), 1u);  // unchanged: may overstate, never understate
    EXPECT_EQ(t.too_late(), 1u);
    EXPECT_EQ(t.out_of_order(), 1u);
    EXPECT_EQ(t.duplicates(), 0u);
    EXPECT_EQ(t.received(), kW + 101);
    EXPECT_EQ(t.lowest(), 0u);
    EXPECT_EQ(t.newest(), kW + 100);
    EXPECT_TRUE(t.reconciles());
    EXPECT_TRUE(identity_holds(t));
    // A received frame far behind is too late as well (not a duplicate).
    EXPECT_EQ(t.observe(50), Kind::late);
    EXPECT_EQ(t.duplicates(), 0u);
    EXPECT_EQ(t.too_late(), 2u);
    EXPECT_EQ(t.out_of_order(), 2u);
    EXPECT_TRUE(t.reconciles());
}

TEST(SequenceTracker, WindowBoundaryDuplicateVersusTooLate) {
    SequenceTracker t;
    for (std::uint64_t i = 0; i < 3 * kW; ++i) {
        t.observe(i);
    }
    const std::uint64_t newest = 3 * kW - 1;
    EXPECT_EQ(t.observe(newest - (kW - 1)), Kind::duplicate);
    expect_counts(t, {3 * kW + 1, 0, 1, 0, 0});
    EXPECT_EQ(t.observe(newest - kW), Kind::late);
    EXPECT_EQ(t.too_late(), 1u);
    EXPECT_EQ(t.duplicates(), 1u);
    EXPECT_EQ(t.out_of_order(), 1u);
    EXPECT_EQ(t.missing(), 0u);
}

// With a plausible jump set, one frame far from the stream (a corrupt header)
// is counted as implausible and moves nothing, ahead or behind; the stream
// goes on where it was.
TEST(SequenceTracker, OneImplausibleFrameMovesNothing) {
    SequenceTracker t;
    t.set_plausible_jump(4000);
    for (std::uint64_t i = 5000; i < 5010; ++i) {
        t.observe(i);
    }
    EXPECT_EQ(t.observe(std::uint64_t{1000000000} * 1000), Kind::implausible);  // seconds 1e9
    EXPECT_EQ(t.observe(5010), Kind::in_order);
    EXPECT_EQ(t.observe(3), Kind::implausible);  // seconds 0
    EXPECT_EQ(t.observe(5011), Kind::in_order);
    EXPECT_EQ(t.lowest(), 5000u);
    EXPECT_EQ(t.newest(), 5011u);
    EXPECT_EQ(t.received(), 14u);
    EXPECT_EQ(t.implausible(), 2u);
    EXPECT_EQ(t.missing(), 0u);
    EXPECT_EQ(t.restarts(), 0u);
    EXPECT_TRUE(t.reconciles());
    // Within the plausible jump a gap is loss as before.
    EXPECT_EQ(t.observe(5011 + 4000), Kind::gap);
    EXPECT_EQ(t.missing(), 3999u);
    EXPECT_TRUE(t.reconciles());
}

// kRestartRun frames in a row at a new position, none at the old one between
// them: the stream restarted there. Forwards and backwards.
TEST(SequenceTracker, ARunAtANewPositionIsARestart) {
    constexpr std::size_t kRun = SequenceTracker::kRestartRun;
    for (const std::uint64_t at : {std::uint64_t{5} << 40, std::uint64_t{7}}) {
        SequenceTracker t;
        t.set_plausible_jump(4000);
        for (std::uint64_t i = 100000; i < 100010; ++i) {
            t.observe(i);
        }
        for (std::size_t k = 0; k + 1 < kRun; ++k) {
            // One frame of the run is lost: a gap inside the run still continues it.
            EXPECT_EQ(t.observe(at + k + (k > 3 ? 1 : 0)), Kind::implausible) << k;
        }
        EXPECT_EQ(t.implausible(), kRun - 1);
        EXPECT_EQ(t.observe(at + kRun), Kind::restart);
        EXPECT_EQ(t.restarts(), 1u);
        EXPECT_EQ(t.last_restart_jump(),
                  static_cast<std::int64_t>(at) - static_cast<std::int64_t>(100009));
        EXPECT_EQ(t.implausible(), 0u);
        EXPECT_EQ(t.lowest(), at);
        EXPECT_EQ(t.newest(), at + kRun);
        EXPECT_EQ(t.missing(), 1u);  // the one lost inside the run
        EXPECT_EQ(t.received(), 10u + kRun);
        EXPECT_TRUE(t.reconciles());
        EXPECT_EQ(t.observe(at + kRun + 1), Kind::in_order);
        EXPECT_EQ(t.observe(at + 4), Kind::late);  // the lost one, late
        EXPECT_EQ(t.missing(), 0u);
        EXPECT_TRUE(t.reconciles());
    }
}

// A plausible frame between them breaks the run: corrupt headers now and then
// never add up to a restart.
TEST(SequenceTracker, ScatteredImplausibleFramesAreNoRestart) {
    SequenceTracker t;
    t.set_plausible_jump(4000);
    std::uint64_t next = 100000;
    t.observe(next++);
    for (std::size_t k = 0; k < 10 * SequenceTracker::kRestartRun; ++k) {
        EXPECT_NE(t.observe((std::uint64_t{1} << 40) + k), Kind::restart);
        t.observe(next++);
    }
    EXPECT_EQ(t.restarts(), 0u);
    EXPECT_EQ(t.implausible(), 10 * SequenceTracker::kRestartRun);
    EXPECT_EQ(t.missing(), 0u);
    EXPECT_TRUE(t.reconciles());
}

// The same corrupt header over and over is not a run: each frame of a run is
// ahead of the one before, so repeats of one far index never restart the stream.
TEST(SequenceTracker, OneFarIndexRepeatedIsNoRestart) {
    SequenceTracker t;
    t.set_plausible_jump(4000);
    for (std::uint64_t i = 100000; i < 100010; ++i) {
        t.observe(i);
    }
    const std::uint64_t far = std::uint64_t{1} << 40;
    for (std::size_t k = 0; k < 2 * SequenceTracker::kRestartRun; ++k) {
        EXPECT_EQ(t.observe(far), Kind::implausible) << k;
    }
    EXPECT_EQ(t.restarts(), 0u);
    EXPECT_EQ(t.implausible(), 2 * SequenceTracker::kRestartRun);
    EXPECT_EQ(t.newest(), 100009u);
    EXPECT_TRUE(t.reconciles());
}

// A restart forgets the old segment's window: a frame of the new segment
// whose slot an old frame used is a late first reception, not a duplicate.
TEST(SequenceTracker, ARestartClearsTheWindowOfTheOldSegment) {
    SequenceTracker t;
    t.set_plausible_jump(100);
    for (std::uint64_t i = 0; i <= 40; ++i) {
        t.observe(i);  // slots 0..40
    }
    const std::uint64_t at = kW + 20;  // slots 20.. again
    for (std::size_t k = 0; k < SequenceTracker::kRestartRun; ++k) {
        t.observe(at + k);
    }
    ASSERT_EQ(t.restarts(), 1u);
    ASSERT_EQ(t.lowest(), at);
    // Before the new start: the start moves back, 11 frames between are missing.
    EXPECT_EQ(t.observe(at - 12), Kind::late);
    EXPECT_EQ(t.missing(), 11u);
    // at - 7 shares slot 13 with old frame 13.
    ASSERT_EQ((at - 7) % kW, 13u);
    EXPECT_EQ(t.observe(at - 7), Kind::late);
    EXPECT_EQ(t.missing(), 10u);
    EXPECT_EQ(t.duplicates(), 0u);
    EXPECT_TRUE(t.reconciles());
}

TEST(SequenceTracker, HugeForwardJumpClearsTheWindow) {
    SequenceTracker t;
    for (std::uint64_t i = 0; i < 10; ++i) {
        t.observe(i);
    }
    const std::uint64_t far = 9 + 3 * kW + 1;  // gap of 3 * kWindow
    EXPECT_EQ(t.observe(far), Kind::gap);
    expect_counts(t, {11, 3 * kW, 0, 0, 0});
    // far - 5 shares its window slot with frame 5, which was received: it must
    // be recognised as a late first reception, not as a duplicate.
    ASSERT_EQ((far - 5) % kW, 5u);
    EXPECT_EQ(t.observe(far - 5), Kind::late);
    expect_counts(t, {12, 3 * kW - 1, 0, 1, 0});
    EXPECT_EQ(t.observe(far - 5), Kind::duplicate);
    expect_counts(t, {13, 3 * kW - 1, 1, 1, 0});
}

TEST(SequenceTracker, JumpOfExactlyOneWindow) {
    // index - newest == kWindow: the whole window is cleared.
    SequenceTracker t;
    for (std::uint64_t i = 0; i < 10; ++i) {
        t.observe(i);
    }
    const std::uint64_t far = 9 + kW;
    EXPECT_EQ(t.observe(far), Kind::gap);
    expect_counts(t, {11, kW - 1, 0, 0, 0});
    for (std::uint64_t back = 1; back < 10; ++back) {  // slots of frames 8..0
        EXPECT_EQ(t.observe(far - back), Kind::late) << back;
    }
    expect_counts(t, {20, kW - 10, 0, 9, 0});
}

TEST(SequenceTracker, JumpJustUnderOneWindowClearsTheSlotsItPasses) {
    // index - newest == kWindow - 1: the slots are cleared one by one.
    SequenceTracker t;
    for (std::uint64_t i = 0; i < 10; ++i) {
        t.observe(i);
    }
    const std::uint64_t far = 9 + kW - 1;
    EXPECT_EQ(t.observe(far), Kind::gap);
    expect_counts(t, {11, kW - 2, 0, 0, 0});
    // kW + 2 reuses the slot of frame 2; frame 9 is still in the window.
    EXPECT_EQ(t.observe(kW + 2), Kind::late);
    EXPECT_EQ(t.observe(9), Kind::duplicate);
    EXPECT_EQ(t.observe(kW + 7), Kind::late);  // slot of frame 7
    expect_counts(t, {14, kW - 4, 1, 2, 0});
}

TEST(SequenceTracker, IndicesNearTwoToThe63) {
    const std::uint64_t base = (std::uint64_t{1} << 63) - 5;
    SequenceTracker t;
    EXPECT_EQ(t.observe(base + 1), Kind::first);
    EXPECT_EQ(t.observe(base), Kind::late);
    EXPECT_EQ(t.observe(base + 2), Kind::in_order);
    EXPECT_EQ(t.observe(base + 6), Kind::gap);  // crosses 2^63
    EXPECT_EQ(t.observe(base + 4), Kind::late);
    EXPECT_EQ(t.observe(base + 4), Kind::duplicate);
    EXPECT_EQ(t.lowest(), base);
    EXPECT_EQ(t.newest(), base + 6);
    expect_counts(t, {6, 2, 1, 2, 0});
    EXPECT_TRUE(identity_holds(t));
    // A jump from 0 to 2^63 counts 2^63 - 1 missing frames.
    SequenceTracker u;
    u.observe(0);
    EXPECT_EQ(u.observe(std::uint64_t{1} << 63), Kind::gap);
    expect_counts(u, {2, (std::uint64_t{1} << 63) - 1, 0, 0, 0});
    EXPECT_EQ(u.observe((std::uint64_t{1} << 63) - 1), Kind::late);
    expect_counts(u, {3, (std::uint64_t{1} << 63) - 2, 0, 1, 0});
}

// Frame indices are uint64_t; an index of UINT64_MAX arriving a few frames
// after the newest must be handled like any other gap. The clearing loop in
// sequence.cpp (`for (i = newest_ + 1; i <= index; ++i)`) never ends when
// index == UINT64_MAX. (CodifTiming::index cannot produce UINT64_MAX, so this is
// latent for CODIF sources; the child is killed by an alarm instead of hanging.)
TEST(SequenceTrackerDeathTest, IndexAtUint64MaxTerminates) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    const std::uint64_t top = std::numeric_limits<std::uint64_t>::max();
    EXPECT_EXIT(
        {
            ::alarm(2);
            SequenceTracker t;
            t.observe(top - 3);
            const bool ok = t.observe(top) == Kind::gap && t.missing() == 2 && t.newest() == top;
            std::_Exit(ok ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------
// Randomized comparison against an independent reference model.

// What a tracker with an unbounded memory reports, restricted as the contract
// says for frames more than kWindow behind the newest (too late: counted as
// out of order and too_late, otherwise ignored).
class ReferenceModel {
  public:
    Kind observe(std::uint64_t index) {
        ++received_;
        if (accepted_.empty()) {
            accepted_.insert(index);
            newest_ = index;
            return Kind::first;
        }
        if (index + kW <= newest_) {
            ++out_of_order_;
            ++too_late_;
            return Kind::late;
        }
        if (!accepted_.insert(index).second) {
            ++duplicates_;
            return Kind::duplicate;
        }
        if (index < newest_) {
            ++out_of_order_;
            return Kind::late;
        }
        const Kind kind = index == newest_ + 1 ? Kind::in_order : Kind::gap;
        newest_ = index;
        return kind;
    }
    std::uint64_t lowest() const { return *accepted_.begin(); }
    std::uint64_t newest() const { return newest_; }
    std::uint64_t missing() const { return newest_ - lowest() + 1 - accepted_.size(); }
    std::uint64_t received() const { return received_; }
    std::uint64_t duplicates() const { return duplicates_; }
    std::uint64_t out_of_order() const { return out_of_order_; }
    std::uint64_t too_late() const { return too_late_; }

  private:
    std::set<std::uint64_t> accepted_;
    std::uint64_t newest_ = 0;
    std::uint64_t received_ = 0;
    std::uint64_t duplicates_ = 0;
    std::uint64_t out_of_order_ = 0;
    std::uint64_t too_late_ = 0;
};

struct Faults {
    double skip = 0;
    double duplicate = 0;
    double swap = 0;
    std::size_t max_displacement = 1;  // how far a swapped frame may move
    double far_jump = 0;               // a forward jump of more than a window
    double very_late = 0;              // re-send of a frame far behind the newest
};

// A delivery order: indices from `start`, some skipped, some displaced by up to
// max_displacement positions, some delivered twice, some very late.
std::vector<std::uint64_t> make_deliveries(std::uint64_t seed, std::uint64_t start,
                                           std::size_t slots, const Faults& f) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<std::uint64_t> order;
    std::uint64_t next = start;
    for (std::size_t i = 0; i < slots; ++i) {
        if (u(rng) < f.far_jump) {
            next += kW + 1 + rng() % (2 * kW);
        }
        if (u(rng) >= f.skip) {
            order.push_back(next);
        }
        ++next;
    }
    for (std::size_t i = 0; i + 1 < order.size(); ++i) {
        if (u(rng) < f.swap) {
            const std::size_t span = std::min(f.max_displacement, order.size() - 1 - i);
            std::swap(order[i], order[i + 1 + rng() % span]);
        }
    }
    std::vector<std::uint64_t> out;
    out.reserve(order.size() * 2);
    for (std::size_t i = 0; i < order.size(); ++i) {
        out.push_back(order[i]);
        if (u(rng) < f.duplicate) {
            // Again at once, or a recent frame again.
            out.push_back(i > 0 && u(rng) < 0.5
                              ? order[i - 1 - rng() % std::min<std::size_t>(i, 64)]
                              : order[i]);
        }
        if (f.very_late > 0 && u(rng) < f.very_late && i > 0) {
            const std::uint64_t newest = *std::max_element(out.begin(), out.end());
            if (newest >= start + kW + 100) {
                out.push_back(newest - kW - rng() % 100);
            }
        }
    }
    return out;
}

void run_against_model(const std::vector<std::uint64_t>& deliveries, bool expect_no_too_late) {
    SequenceTracker t;
    ReferenceModel m;
    for (std::size_t i = 0; i < deliveries.size(); ++i) {
        const std::uint64_t index = deliveries[i];
        const Kind got = t.observe(index);
        const Kind want = m.observe(index);
        ASSERT_EQ(got, want) << "step " << i << " index " << index;
        ASSERT_EQ(t.received(), m.received()) << "step " << i;
        ASSERT_EQ(t.lowest(), m.lowest()) << "step " << i;
        ASSERT_EQ(t.newest(), m.newest()) << "step " << i;
        ASSERT_EQ(t.missing(), m.missing()) << "step " << i << " index " << index;
        ASSERT_EQ(t.duplicates(), m.duplicates()) << "step " << i;
        ASSERT_EQ(t.out_of_order(), m.out_of_order()) << "step " << i;
        ASSERT_EQ(t.too_late(), m.too_late()) << "step " << i;
        ASSERT_TRUE(t.reconciles()) << "step " << i;
        ASSERT_TRUE(identity_holds(t)) << "step " << i;
    }
    if (expect_no_too_late) {
        EXPECT_EQ(t.too_late(), 0u);
    }
}

TEST(SequenceTracker, RandomizedAgainstModelBoundedSwaps) {
    const Faults faults{.skip = 0.03, .duplicate = 0.03, .swap = 0.05, .max_displacement = 40};
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
        SCOPED_TRACE(seed);
        auto deliveries = make_deliveries(seed, 1000 * seed, 20000, faults);
        // Make sure the stream start itself is swapped at least once.
        if (seed % 2 == 0) {
            std::swap(deliveries[0], deliveries[3]);
        }
        run_against_model(deliveries, true);
        // The model must have seen every kind of fault for the test to mean something.
        ReferenceModel m;
        for (const auto d : deliveries) {
            m.observe(d);
        }
        EXPECT_GT(m.missing(), 0u);
        EXPECT_GT(m.duplicates(), 0u);
        EXPECT_GT(m.out_of_order(), 0u);
    }
}

TEST(SequenceTracker, RandomizedAgainstModelWithJumpsAndVeryLateFrames) {
    const Faults faults{.skip = 0.02,
                        .duplicate = 0.02,
                        .swap = 0.02,
                        .max_displacement = 500,
                        .far_jump = 0.0005,
                        .very_late = 0.0005};
    for (std::uint64_t seed = 11; seed <= 13; ++seed) {
        SCOPED_TRACE(seed);
        const auto deliveries = make_deliveries(seed, 5, 40000, faults);
        run_against_model(deliveries, false);
        ReferenceModel m;
        for (const auto d : deliveries) {
            m.observe(d);
        }
        EXPECT_GT(m.too_late(), 0u);
        EXPECT_GT(m.missing(), 3 * kW);  // the jumps happened
    }
}

}  // namespace
}  // namespace ibvcap
