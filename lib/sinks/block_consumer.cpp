#include "lib/sinks/block_consumer.hpp"

#include "lib/traffic/pattern.hpp"

namespace ibvcap {

std::uint64_t check_block_on_host(const Block& block, const BlockRingOptions& o,
                                  std::uint32_t antenna) {
    std::uint64_t bad = 0;
    for (std::uint32_t f = 0; f < o.frames_per_block; ++f) {
        for (std::uint16_t t = 0; t < o.threads; ++t) {
            if (!block.has(f, t, o.threads)) {
                continue;
            }
            const Bytes slot(block.data + (std::size_t{f} * o.threads + t) * o.payload_bytes,
                             o.payload_bytes);
            bad += check_pattern(pattern_key(antenna, t, block.first_index + f), slot);
        }
    }
    return bad;
}

BlockConsumer::BlockConsumer(BlockSink& sink, BlockCheck check, Faults* faults)
    : sink_(sink), check_(std::move(check)), faults_(faults), thread_([this] { run(); }) {}

BlockConsumer::~BlockConsumer() {
    if (thread_.joinable()) {
        finish();
    }
}

bool BlockConsumer::take_one(std::chrono::milliseconds wait) {
    bool took = false;
    for (std::size_t i = 0; i < sink_.ring_count(); ++i) {
        BlockRing& ring = sink_.ring_at(i);
        if (const Block* b = ring.acquire(wait)) {
            if (check_ && !failed_.load()) {
                try {
                    mismatched_ += check_(*b, ring.options(), sink_.antenna_at(i));
                } catch (const std::exception& e) {
                    failed_.store(true);
                    ++unchecked_;
                    if (faults_ != nullptr) {
                        faults_->report("block consumer", e.what());
                    }
                }
            } else if (check_) {
                ++unchecked_;
            }
            ring.release(b);
            ++blocks_;
            took = true;
        }
    }
    return took;
}

void BlockConsumer::run() {
    while (!finishing_.load()) {
        if (!take_one(std::chrono::milliseconds(0))) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    // The producer has flushed: everything left is ready now.
    while (take_one(std::chrono::milliseconds(0))) {
    }
}

void BlockConsumer::finish() {
    finishing_ = true;
    thread_.join();
}

}  // namespace ibvcap
