// A consumer of the block rings (lib/block_sink.hpp) on its own thread: takes
// each full block, optionally checks it (--gpu-verify: the generator's payload
// pattern, on the GPU where the blocks live there), and gives it back. It is
// the reference for how a beamformer or search plugs in: acquire, process on
// your stream, release.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

#include "lib/block_sink.hpp"

namespace ibvcap {

// Bytes of a block's present slots that differ from the generator's pattern.
using BlockCheck =
    std::function<std::uint64_t(const Block&, const BlockRingOptions&, std::uint32_t antenna)>;
// The host version, for blocks in host memory (the stand-in).
std::uint64_t check_block_on_host(const Block& block, const BlockRingOptions& options,
                                  std::uint32_t antenna);

class BlockConsumer {
  public:
    // `check` may be empty: blocks are then only taken and given back.
    BlockConsumer(BlockSink& sink, BlockCheck check);
    ~BlockConsumer();
    BlockConsumer(const BlockConsumer&) = delete;
    BlockConsumer& operator=(const BlockConsumer&) = delete;

    // After the producer has flushed the sink: take what is left, then stop.
    void finish();
    std::uint64_t blocks() const { return blocks_.load(); }
    std::uint64_t mismatched_bytes() const { return mismatched_.load(); }

  private:
    void run();
    bool take_one(std::chrono::milliseconds wait);

    BlockSink& sink_;
    BlockCheck check_;
    std::atomic<bool> finishing_{false};
    std::atomic<std::uint64_t> blocks_{0};
    std::atomic<std::uint64_t> mismatched_{0};
    std::thread thread_;
};

}  // namespace ibvcap
