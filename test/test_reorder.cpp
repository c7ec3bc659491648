// Unit tests for one stream's reorder window (lib/sinks/reorder.hpp): what an
// ordered file (--ordered) holds, index by index, for every arrival order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "formats/bytes.hpp"
#include "lib/sinks/reorder.hpp"

namespace ibvcap {
namespace {

using Outcome = ReorderWindow::Outcome;

// What the window wrote, in order: each record's index and how it came.
struct Record {
    enum Kind { arrived, held, fill } kind;
    std::uint64_t index;
};

// A frame is kSlot bytes that spell its index, so a held frame read back from
// the wrong slot is seen.
constexpr std::size_t kSlot = 16;

class Recorder final : public ReorderWindow::Output {
  public:
    void write_arrived(std::uint64_t index) override {
        EXPECT_EQ(index, current) << "only the frame being offered is written as it arrived";
        add({Record::arrived, index});
    }
    void write_held(std::uint64_t index, Bytes frame) override {
        EXPECT_EQ(frame.size(), kSlot);
        EXPECT_EQ(load_le64(frame.data()), index) << "a held frame's bytes are its own";
        EXPECT_EQ(load_le64(frame.data() + 8), ~index);
        add({Record::held, index});
    }
    void write_fill(std::uint64_t index) override { add({Record::fill, index}); }
    std::size_t copy_arrived(MutableBytes slot) override {
        if (!copy_ok) {
            return 0;
        }
        EXPECT_EQ(slot.size(), kSlot);
        store_le64(slot.data(), current);
        store_le64(slot.data() + 8, ~current);
        ++copies;
        return kSlot;
    }

    std::uint64_t current = 0;
    bool copy_ok = true;
    std::size_t copies = 0;
    std::vector<Record> records;

    // A window that writes without bound (fills across a hostile jump)
    // fails the test at once instead of filling the memory.
    void add(const Record& r) {
        if (records.size() >= 1'000'000) {
            throw std::length_error("more than a million records written");
        }
        records.push_back(r);
    }

    // Every index written, in order.
    std::vector<std::uint64_t> indices() const {
        std::vector<std::uint64_t> v;
        for (const auto& r : records) {
            v.push_back(r.index);
        }
        return v;
    }
    std::vector<std::uint64_t> fills() const {
        std::vector<std::uint64_t> v;
        for (const auto& r : records) {
            if (r.kind == Record::fill) {
                v.push_back(r.index);
            }
        }
        return v;
    }
};

Outcome offer(ReorderWindow& w, Recorder& r, std::uint64_t index) {
    r.current = index;
    return w.offer(index, r);
}

std::vector<std::uint64_t> range(std::uint64_t first, std::uint64_t last) {
    std::vector<std::uint64_t> v;
    for (std::uint64_t i = first; i <= last; ++i) {
        v.push_back(i);
    }
    return v;
}

// Every frame offered is written, a duplicate, too late or unheld, or still
// held; the records are the written frames and the fills.
void expect_balanced(const ReorderWindow& w, const Recorder& r) {
    const auto& c = w.counts();
    EXPECT_EQ(c.offered, c.written + c.duplicates + c.too_late + c.unheld + w.held());
    EXPECT_EQ(r.records.size(), c.records());
    EXPECT_EQ(r.fills().size(), c.fills);
}

TEST(ReorderWindow, InOrderFramesAreWrittenAtOnceAfterTheRunStarts) {
    ReorderWindow w(4, kSlot, 1000);
    Recorder r;
    // The run's first frames wait for a frame W ahead of the lowest (one
    // earlier than the first may still come) ...
    for (std::uint64_t i = 10; i < 14; ++i) {
        EXPECT_EQ(offer(w, r, i), Outcome::held) << i;
    }
    EXPECT_TRUE(r.records.empty());
    // ... then go, and every frame after them is written as it arrives.
    for (std::uint64_t i = 14; i < 40; ++i) {
        EXPECT_EQ(offer(w, r, i), Outcome::written) << i;
    }
    EXPECT_EQ(r.copies, 4u) << "only the run's first W frames are copied";
    EXPECT_EQ(w.held(), 0u);
    w.close(r);
    EXPECT_EQ(r.indices(), range(10, 39));
    EXPECT_EQ(std::count_if(r.records.begin(), r.records.end(),
                            [](const Record& x) { return x.kind == Record::arrived; }),
              26);
    EXPECT_EQ(w.counts().fills, 0u);
    EXPECT_EQ(w.counts().written, 30u);
    expect_balanced(w, r);
}

// A run started: frames 10..14 written.
void start_run(ReorderWindow& w, Recorder& r) {
    for (std::uint64_t i = 10; i <= 14; ++i) {
        offer(w, r, i);
    }
    ASSERT_EQ(r.indices(), range(10, 14));
    ASSERT_EQ(w.next(), 15u);
}

TEST(ReorderWindow, AGapIsFilledWhenAFrameArrivesAWindowAheadOfIt) {
    ReorderWindow w(4, kSlot, 1000);
    Recorder r;
    start_run(w, r);
    // 15 never comes: 16..18 wait for it within the window ...
    EXPECT_EQ(offer(w, r, 16), Outcome::held);
    EXPECT_EQ(offer(w, r, 17), Outcome::held);
    EXPECT_EQ(offer(w, r, 18), Outcome::held);
    EXPECT_EQ(r.records.size(), 5u);
    // ... until 19, W ahead of it: 15 is a fill, the held frames follow.
    EXPECT_EQ(offer(w, r, 19), Outcome::written);
    EXPECT_EQ(r.indices(), range(10, 19));
    EXPECT_EQ(r.fills(), std::vector<std::uint64_t>{15});
    EXPECT_EQ(w.counts().fills, 1u);
    w.close(r);
    expect_balanced(w, r);
}

TEST(ReorderWindow, FramesReorderedWithinTheWindowGoOutInOrderWithoutFills) {
    ReorderWindow w(4, kSlot, 1000);
    Recorder r;
    start_run(w, r);
    EXPECT_EQ(offer(w, r, 17), Outcome::held);
    EXPECT_EQ(offer(w, r, 16), Outcome::held);
    EXPECT_EQ(offer(w, r, 15), Outcome::written);  // and the held 16, 17 behind it
    EXPECT_EQ(offer(w, r, 18), Outcome::written);
    EXPECT_EQ(r.indices(), range(10, 18));
    EXPECT_TRUE(r.fills().empty());
    EXPECT_EQ(w.held(), 0u);
    w.close(r);
    expect_balanced(w, r);
}

TEST(ReorderWindow, AFrameFarAheadFillsEveryIndexThatLeavesTheWindow) {
    ReorderWindow w(4, kSlot, 1000);
    Recorder r;
    start_run(w, r);
    // 25 is 10 ahead of 15: the window moves to [22, 26), 15..21 are fills.
    EXPECT_EQ(offer(w, r, 25), Outcome::held);
    EXPECT_EQ(w.next(), 22u);
    EXPECT_EQ(r.fills(), range(15, 21));
    EXPECT_EQ(offer(w, r, 23), Outcome::held);
    EXPECT_EQ(offer(w, r, 27), Outcome::held);  // window [24, 28): 22 a fill, 23 held
    EXPECT_EQ(w.next(), 24u);
    w.close(r);
    // 24 and 26 never came: fills between the held frames, none after the last.
    EXPECT_EQ(r.indices(), range(10, 27));
    std::vector<std::uint64_t> expected = range(15, 22);
    expected.push_back(24);
    expected.push_back(26);
    EXPECT_EQ(r.fills(), expected);
    expect_balanced(w, r);
}

TEST(ReorderWindow, ADuplicateIsWrittenOnce) {
    ReorderWindow w(4, kSlot, 1000);
    Recorder r;
    start_run(w, r);
    EXPECT_EQ(offer(w, r, 14), Outcome::duplicate);  // written already
    EXPECT_EQ(offer(w, r, 11), Outcome::duplicate);  // written, W behind next
    EXPECT_EQ(offer(w, r, 17), Outcome::held);
    EXPECT_EQ(offer(w, r, 17), Outcome::duplicate);  // held already
    EXPECT_EQ(offer(w, r, 15), Outcome::written);
    EXPECT_EQ(offer(w, r, 16), Outcome::written);
    EXPECT_EQ(offer(w, r, 17), Outcome::duplicate);  // held, then written
    w.close(r);
    EXPECT_EQ(r.indices(), range(10, 17));
    EXPECT_EQ(w.counts().duplicates, 4u);
    EXPECT_EQ(w.counts().too_late, 0u);
    expect_balanced(w, r);
}

TEST(ReorderWindow, AFrameBehindWhatWasWrittenIsTooLate) {
    ReorderWindow w(4, kSlot, 1000);
    Recorder r;
    start_run(w, r);
    EXPECT_EQ(offer(w, r, 20), Outcome::held);  // 15, 16 are fills
    ASSERT_EQ(r.fills(), range(15, 16));
    EXPECT_EQ(offer(w, r, 15), Outcome::too_late);  // written as a fill
    EXPECT_EQ(offer(w, r, 16), Outcome::too_late);
    EXPECT_EQ(offer(w, r, 3), Outcome::too_late);  // older than the window
    w.close(r);
    EXPECT_EQ(r.indices(), range(10, 20));
    EXPECT_EQ(w.counts().too_late, 3u);
    EXPECT_EQ(w.counts().duplicates, 0u);
    expect_balanced(w, r);
}

TEST(ReorderWindow, CloseWritesTheHeldFramesInOrderWithFillsBetween) {
    ReorderWindow w(4, kSlot, 1000);
    Recorder r;
    start_run(w, r);
    EXPECT_EQ(offer(w, r, 18), Outcome::held);
    EXPECT_EQ(offer(w, r, 16), Outcome::held);
    EXPECT_EQ(w.held(), 2u);
    w.close(r);
    EXPECT_EQ(w.held(), 0u);
    EXPECT_EQ(r.indices(), range(10, 18));
    EXPECT_EQ(r.fills(), (std::vector<std::uint64_t>{15, 17}));
    expect_balanced(w, r);
    // A run that never wrote: its held frames, from the lowest.
    ReorderWindow v(8, kSlot, 1000);
    Recorder q;
    offer(v, q, 7);
    offer(v, q, 4);
    offer(v, q, 5);
    EXPECT_TRUE(q.records.empty());
    v.close(q);
    EXPECT_EQ(q.indices(), range(4, 7));
    EXPECT_EQ(q.fills(), std::vector<std::uint64_t>{6});
    expect_balanced(v, q);
}

TEST(ReorderWindow, AFrameBeforeTheFirstStillGoesFirst) {
    ReorderWindow w(4, kSlot, 1000);
    Recorder r;
    EXPECT_EQ(offer(w, r, 12), Outcome::held);
    EXPECT_EQ(offer(w, r, 10), Outcome::held);  // before the first: the run starts at 10
    EXPECT_EQ(w.next(), 10u);
    EXPECT_EQ(offer(w, r, 11), Outcome::held);
    EXPECT_EQ(offer(w, r, 13), Outcome::held);
    EXPECT_EQ(offer(w, r, 14), Outcome::written);  // W ahead of 10
    EXPECT_EQ(r.indices(), range(10, 14));
    // Before the first write, a frame as far below the highest held as the
    // window is long no longer fits: too late.
    ReorderWindow v(4, kSlot, 1000);
    Recorder q;
    offer(v, q, 12);
    offer(v, q, 14);
    EXPECT_EQ(offer(v, q, 10), Outcome::too_late);
    EXPECT_EQ(offer(v, q, 11), Outcome::held);
    v.close(q);
    EXPECT_EQ(q.indices(), range(11, 14));
    EXPECT_EQ(q.fills(), std::vector<std::uint64_t>{13});
    expect_balanced(v, q);
}

TEST(ReorderWindow, AHostileJumpRestartsTheRunInsteadOfFillingIt) {
    ReorderWindow w(4, kSlot, 100);
    Recorder r;
    start_run(w, r);
    EXPECT_EQ(offer(w, r, 16), Outcome::held);
    // A corrupt header 2^40 frames ahead: no 2^40 fills. The run ends (16
    // written after a fill for 15) and one starts at it.
    const std::uint64_t far = std::uint64_t{1} << 40;
    EXPECT_EQ(offer(w, r, far), Outcome::held);
    EXPECT_EQ(w.counts().restarts, 1u);
    EXPECT_EQ(r.indices(), range(10, 16));
    // The stream's own frames come back: another restart, back at them.
    EXPECT_EQ(offer(w, r, 17), Outcome::held);
    EXPECT_EQ(w.counts().restarts, 2u);
    for (std::uint64_t i = 18; i <= 22; ++i) {
        offer(w, r, i);
    }
    // Within max_jump ahead, the distance is filled: 23..122 (100 frames
    // ahead of 23 is the most that is filled, not a restart).
    EXPECT_EQ(offer(w, r, 23 + 100), Outcome::held);
    EXPECT_EQ(w.counts().restarts, 2u);
    // Behind by more than max_jump, and the ends of the index space.
    EXPECT_EQ(offer(w, r, 0), Outcome::held);
    EXPECT_EQ(offer(w, r, std::numeric_limits<std::uint64_t>::max()), Outcome::held);
    EXPECT_EQ(offer(w, r, std::numeric_limits<std::uint64_t>::max() - 1), Outcome::held);
    EXPECT_EQ(w.counts().restarts, 4u);
    w.close(r);
    std::vector<std::uint64_t> expected = range(10, 16);
    expected.push_back(far);
    for (std::uint64_t i = 17; i <= 123; ++i) {
        expected.push_back(i);
    }
    expected.push_back(0);
    expected.push_back(std::numeric_limits<std::uint64_t>::max() - 1);
    expected.push_back(std::numeric_limits<std::uint64_t>::max());
    EXPECT_EQ(r.indices(), expected);
    EXPECT_EQ(w.counts().fills, 1u + 100u);
    expect_balanced(w, r);
}

TEST(ReorderWindow, AFrameThatCannotBeCopiedIsCountedUnheld) {
    ReorderWindow w(4, kSlot, 1000);
    Recorder r;
    start_run(w, r);
    r.copy_ok = false;
    EXPECT_EQ(offer(w, r, 17), Outcome::unheld);   // ahead of a gap: must be copied
    EXPECT_EQ(offer(w, r, 15), Outcome::written);  // the next frame needs no copy
    r.copy_ok = true;
    EXPECT_EQ(offer(w, r, 16), Outcome::written);
    w.close(r);
    EXPECT_EQ(r.indices(), range(10, 16));
    EXPECT_EQ(w.counts().unheld, 1u);
    expect_balanced(w, r);
    // A first frame that cannot be held starts nothing.
    ReorderWindow v(4, kSlot, 1000);
    Recorder q;
    q.copy_ok = false;
    EXPECT_EQ(offer(v, q, 5), Outcome::unheld);
    q.copy_ok = true;
    EXPECT_EQ(offer(v, q, 9), Outcome::held);
    v.close(q);
    EXPECT_EQ(q.indices(), std::vector<std::uint64_t>{9});
    expect_balanced(v, q);
}

// A stream whose arithmetic changes (a VDIF rate learned): the held frames go
// out as at close, and the run goes on right after the last one written, in
// the new arithmetic, what was written still known as written.
TEST(ReorderWindow, ARebaseFlushesAndGoesOnAfterTheLastWrittenInTheNewArithmetic) {
    ReorderWindow w(4, kSlot, 100);
    Recorder r;
    const auto map = [](std::uint64_t i) { return i + 1000; };
    w.rebase(map, 100, r);  // nothing yet: nothing to do
    EXPECT_TRUE(r.records.empty());
    start_run(w, r);
    EXPECT_EQ(offer(w, r, 16), Outcome::held);
    w.rebase(map, 5000, r);
    EXPECT_EQ(r.indices(), range(10, 16));  // 15 a fill, 16 written
    EXPECT_EQ(w.next(), 1017u);
    EXPECT_EQ(w.max_jump(), 5000u);
    EXPECT_EQ(offer(w, r, 1017), Outcome::written);    // follows at once
    EXPECT_EQ(offer(w, r, 1016), Outcome::duplicate);  // 16, written before the change
    EXPECT_EQ(offer(w, r, 1015), Outcome::too_late);   // 15, a fill
    EXPECT_EQ(offer(w, r, 1019), Outcome::held);       // a gap after the change
    EXPECT_EQ(offer(w, r, 1022), Outcome::held);       // fills 1018
    w.close(r);
    std::vector<std::uint64_t> expected = range(10, 16);
    for (std::uint64_t i = 1017; i <= 1022; ++i) {
        expected.push_back(i);
    }
    EXPECT_EQ(r.indices(), expected);
    EXPECT_EQ(r.fills(), (std::vector<std::uint64_t>{15, 1018, 1020, 1021}));
    EXPECT_EQ(w.counts().restarts, 0u);
    expect_balanced(w, r);
}

// A rebase maps every one of the last W positions written, the oldest (W
// back) too: a duplicate of any that was written as a frame is still a
// duplicate in the new arithmetic, and one that was a fill is too late.
TEST(ReorderWindow, ARebaseKeepsEachOfTheLastWPositionsWrittenTheOldestToo) {
    for (const std::uint64_t window : {4u, 5u, 64u, 65u}) {
        SCOPED_TRACE(window);
        ReorderWindow w(window, kSlot, 1000);
        Recorder r;
        // Frames 100 .. 100 + 2W written, but for 101 and 100 + 2W - 2 (fills);
        // then the arithmetic moves every position 5000 on.
        const std::uint64_t last = 100 + 2 * window;
        for (std::uint64_t i = 100; i <= last; ++i) {
            if (i != 101 && i != last - 2) {
                offer(w, r, i);
            }
        }
        w.rebase([](std::uint64_t i) { return i + 5000; }, 1000, r);
        ASSERT_EQ(w.held(), 0u);
        ASSERT_EQ(w.next(), last + 5001);
        // Each of the last W positions, oldest first, before anything else
        // arrives (a later frame would mark its own bit).
        for (std::uint64_t i = last + 1 - window; i <= last; ++i) {
            const Outcome want = i == last - 2 ? Outcome::too_late : Outcome::duplicate;
            EXPECT_EQ(offer(w, r, i + 5000), want) << "old position " << i;
        }
        w.close(r);
        expect_balanced(w, r);
    }
}

// Random loss, duplicates and reordering within the window: the output is
// every index from the first to the last exactly once, in order, a fill
// exactly where no frame came, and nothing is too late.
TEST(ReorderWindow, RandomArrivalsWithinTheWindowGiveTheWholeSequence) {
    std::mt19937_64 rng(2026);
    for (int trial = 0; trial < 50; ++trial) {
        const std::size_t window = 1 + rng() % 64;
        ReorderWindow w(window, kSlot, 100000);
        Recorder r;
        // The indices 1000.. that are sent (some lost), then duplicated and
        // shuffled by at most window - 1 places.
        std::vector<std::uint64_t> sent;
        std::set<std::uint64_t> kept;
        for (std::uint64_t i = 1000; i < 3000; ++i) {
            if (i == 1000 || i == 2999 || rng() % 10 != 0) {
                sent.push_back(i);
                kept.insert(i);
                if (rng() % 20 == 0) {
                    sent.push_back(i);
                }
            }
        }
        // Each frame moves later by less than the window, in frames of the
        // sequence (so that none arrives W or more behind a later one).
        std::vector<std::pair<std::uint64_t, std::uint64_t>> order;
        for (std::size_t k = 0; k < sent.size(); ++k) {
            order.push_back({sent[k] * 4 + rng() % (4 * (window - 1) + 1), sent[k]});
        }
        std::stable_sort(order.begin(), order.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        std::uint64_t lowest = std::numeric_limits<std::uint64_t>::max();
        for (const auto& [key, index] : order) {
            (void)key;
            lowest = std::min(lowest, index);
            offer(w, r, index);
        }
        w.close(r);
        const auto& c = w.counts();
        EXPECT_EQ(c.too_late, 0u) << "window " << window;
        EXPECT_EQ(c.restarts, 0u);
        EXPECT_EQ(c.duplicates, sent.size() - kept.size());
        const auto out = r.indices();
        // The first frame offered may not be the lowest: the run starts at
        // the lowest of those that arrive before one W ahead of it.
        ASSERT_FALSE(out.empty());
        EXPECT_EQ(out.back(), 2999u);
        for (std::size_t k = 1; k < out.size(); ++k) {
            ASSERT_EQ(out[k], out[k - 1] + 1) << "window " << window;
        }
        for (const auto& rec : r.records) {
            EXPECT_EQ(rec.kind == Record::fill, kept.count(rec.index) == 0) << rec.index;
        }
        EXPECT_EQ(out.front(), 1000u) << "window " << window << " lowest " << lowest;
        expect_balanced(w, r);
    }
}

}  // namespace
}  // namespace ibvcap
