// The per-antenna block ring on the host-memory stand-in: frames land in
// sequence order, missing ones are marked absent and nothing shifts.
#include <gtest/gtest.h>

#include <set>

#include "frames.hpp"
#include "lib/sinks/block_ring.hpp"
#include "lib/traffic/generator.hpp"
#include "lib/traffic/pattern.hpp"

namespace ibvcap {
namespace {

constexpr std::uint32_t kPayload = 256;

struct Sent {
    std::uint16_t thread;
    std::uint64_t index;
    friend auto operator<=>(const Sent&, const Sent&) = default;
};

// One antenna, `threads` threads, with faults; every frame placed in the ring.
struct Fed {
    std::set<Sent> sent;
    std::uint64_t frames = 0;
};
Fed feed(BlockRing& ring, const GeneratorConfig& config, std::size_t stop_after = SIZE_MAX) {
    Generator gen(config);
    const CodifTiming timing{config.period, config.frames_per_period};
    Fed fed;
    GeneratedFrame f;
    while (gen.next(f) && fed.frames < stop_after) {
        CodifHeader h;
        EXPECT_EQ(decode_codif(f.bytes.subspan(42, 64), h), CodifError::none);
        const std::uint64_t index = timing.index(h.seconds, h.frame);
        ring.place(h.threadid, index, f.bytes.subspan(42 + 64));
        fed.sent.insert({h.threadid, index});
        ++fed.frames;
    }
    return fed;
}

GeneratorConfig one_antenna(std::uint64_t frames, double loss = 0, double dup = 0,
                            double reorder = 0) {
    GeneratorConfig c;
    c.antennas = {test::kAntenna1};
    c.groups = {Endpoint{test::kGroup1, 36001}};
    c.threads = 2;
    c.frames = frames;
    c.payload_bytes = kPayload;
    c.nchan = 4;
    c.frames_per_period = 50;
    c.start_seconds = 100;
    c.start_frame = 13;  // not block-aligned
    c.loss = loss;
    c.duplicate = dup;
    c.reorder = reorder;
    c.seed = 3;
    return c;
}

BlockRingOptions ring_options(std::uint32_t blocks = 64) {
    BlockRingOptions o;
    o.frames_per_block = 16;
    o.threads = 2;
    o.payload_bytes = kPayload;
    o.blocks = blocks;
    o.lateness = 4;
    return o;
}

// Check every slot of every block against what was sent: present exactly when
// sent, and then holding exactly the generator's pattern for that slot.
void check_blocks(BlockRing& ring, const Fed& fed, std::uint64_t* blocks_seen) {
    const auto& o = ring.options();
    std::uint64_t sequence = 0;
    std::set<Sent> seen;
    while (const Block* b = ring.acquire(std::chrono::milliseconds(0))) {
        EXPECT_EQ(b->sequence, sequence++);
        EXPECT_EQ(b->first_index % o.frames_per_block, 0u);
        EXPECT_EQ(ring.position(b->first_index).seconds, b->first.seconds);
        EXPECT_EQ(ring.position(b->first_index).frame, b->first.frame);
        std::uint64_t present = 0;
        for (std::uint32_t f = 0; f < o.frames_per_block; ++f) {
            for (std::uint16_t t = 0; t < o.threads; ++t) {
                const Sent s{t, b->first_index + f};
                const bool sent = fed.sent.count(s) > 0;
                ASSERT_EQ(b->has(f, t, o.threads), sent) << "frame " << s.index << " thread " << t;
                if (sent) {
                    ++present;
                    seen.insert(s);
                    const Bytes slot(b->data + (std::size_t{f} * o.threads + t) * o.payload_bytes,
                                     o.payload_bytes);
                    EXPECT_EQ(check_pattern(pattern_key(test::kAntenna1, t, s.index), slot), 0u)
                        << "frame " << s.index << " thread " << t << " is not where it belongs";
                }
            }
        }
        EXPECT_EQ(b->present_count, present);
        ring.release(b);
    }
    EXPECT_EQ(seen, fed.sent);  // every frame sent is in exactly one block
    *blocks_seen = sequence;
}

TEST(BlockRing, CleanStreamFillsWholeBlocksInOrder) {
    auto memory = make_host_block_memory();
    const auto config = one_antenna(160);
    BlockRing ring(ring_options(), *memory, CodifTiming{1, 50});
    const Fed fed = feed(ring, config);
    ring.flush();
    std::uint64_t blocks = 0;
    check_blocks(ring, fed, &blocks);
    // Frames 13..172: blocks start at 0 (aligned), so 11 blocks, 13 slots absent in the first.
    EXPECT_EQ(blocks, 11u);
    EXPECT_EQ(ring.stats().placed, 320u);
    EXPECT_EQ(ring.stats().too_late + ring.stats().ring_full + ring.stats().duplicates, 0u);
}

TEST(BlockRing, MissingFramesAreMarkedAndNothingShifts) {
    auto memory = make_host_block_memory();
    const auto config = one_antenna(400, 0.05, 0.03, 0.03);
    BlockRing ring(ring_options(), *memory, CodifTiming{1, 50});
    const Fed fed = feed(ring, config);
    ring.flush();
    std::uint64_t blocks = 0;
    check_blocks(ring, fed, &blocks);
    Generator truth_gen(config);
    GeneratedFrame f;
    while (truth_gen.next(f)) {
    }
    std::uint64_t duplicated = 0;
    for (const auto& t : truth_gen.truth()) {
        duplicated += t.duplicated;
    }
    ASSERT_GT(duplicated, 0u);
    EXPECT_EQ(ring.stats().duplicates, duplicated);
    EXPECT_EQ(ring.stats().placed, fed.sent.size());
    EXPECT_EQ(ring.stats().too_late, 0u);  // swaps of neighbours stay within the lateness
}

TEST(BlockRing, LateFramesBeyondTheWindowAreCountedNotPlaced) {
    auto memory = make_host_block_memory();
    BlockRing ring(ring_options(), *memory, CodifTiming{1, 1000});
    std::vector<std::uint8_t> payload(kPayload, 1);
    for (std::uint64_t i = 0; i < 40; ++i) {
        ring.place(0, i, payload);  // block [0,16) goes out when frame 20 arrives
    }
    ring.place(1, 3, payload);  // thread 1 of frame 3: its block has been handed out
    EXPECT_EQ(ring.stats().too_late, 1u);
    ring.place(2, 41, payload);
    EXPECT_EQ(ring.stats().bad_thread, 1u);
    ring.place(0, 41, std::vector<std::uint8_t>(kPayload - 8, 1));
    EXPECT_EQ(ring.stats().bad_length, 1u);
}

TEST(BlockRing, AFullRingDropsAndCountsInsteadOfStalling) {
    auto memory = make_host_block_memory();
    BlockRing ring(ring_options(2), *memory, CodifTiming{1, 1000});
    std::vector<std::uint8_t> payload(kPayload, 1);
    // Nobody acquires: two blocks fill and are handed out, the third cannot open.
    for (std::uint64_t i = 0; i < 16 * 3; ++i) {
        ring.place(0, i, payload);
    }
    EXPECT_EQ(ring.stats().blocks_out, 1u);  // block 0 out once frame 20 came; block 1 open
    EXPECT_EQ(ring.stats().ring_full, 16u);  // block 2's frames: no free block
    const Block* b = ring.acquire(std::chrono::milliseconds(0));
    ASSERT_NE(b, nullptr);
    ring.release(b);
    ring.place(0, 48, payload);  // a block is free again
    EXPECT_EQ(ring.stats().ring_full, 16u);
    EXPECT_EQ(ring.stats().placed, 33u);
}

TEST(BlockRing, AcquireWaitsForABlockFromAnotherThread) {
    auto memory = make_host_block_memory();
    BlockRing ring(ring_options(), *memory, CodifTiming{1, 1000});
    std::vector<std::uint8_t> payload(kPayload, 7);
    std::thread producer([&] {
        for (std::uint64_t i = 0; i < 16; ++i) {
            ring.place(0, i, payload);
            ring.place(1, i, payload);
        }
        ring.flush();
    });
    const Block* b = ring.acquire(std::chrono::seconds(10));
    producer.join();
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->present_count, 32u);
    ring.release(b);
    EXPECT_EQ(ring.acquire(std::chrono::milliseconds(0)), nullptr);  // flushed and empty
    EXPECT_THROW(ring.release(reinterpret_cast<const Block*>(&ring)), std::invalid_argument);
}

}  // namespace
}  // namespace ibvcap
