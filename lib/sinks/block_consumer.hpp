// A consumer of the block rings (lib/sinks/block_sink.hpp) on its own thread: takes
// each full block, optionally checks it (--gpu-verify: the generator's payload
// pattern, on the GPU where the blocks live there), and gives it back. It is
// the reference for how a beamformer or search plugs in: acquire, process on
// your stream, release.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

#include "lib/core/fault.hpp"
#include "lib/sinks/block_sink.hpp"

namespace ibvcap {

// Bytes of a block's present slots that differ from the generator's pattern.
using BlockCheck =
    std::function<std::uint64_t(const Block&, const BlockRingOptions&, std::uint32_t antenna)>;
// The host version, for blocks in host memory (the stand-in).
std::uint64_t check_block_on_host(const Block& block, const BlockRingOptions& options,
                                  std::uint32_t antenna);

class BlockConsumer {
  public:
    // `check` may be empty: blocks are then only taken and given back. An
    // exception from `check` is reported to `faults` (when given); the
    // consumer then checks no further block (a CUDA error may be sticky) but
    // still takes and gives back every block, so the producer is never
    // stalled, and counts them as unchecked.
    BlockConsumer(BlockSink& sink, BlockCheck check, Faults* faults = nullptr);
    ~BlockConsumer();
    BlockConsumer(const BlockConsumer&) = delete;
    BlockConsumer& operator=(const BlockConsumer&) = delete;

    // After the producer has flushed the sink: take what is left, then stop.
    void finish();
    std::uint64_t blocks() const { return blocks_.load(); }
    std::uint64_t mismatched_bytes() const { return mismatched_.load(); }
    // Blocks taken but not checked because a check failed (0 without one).
    std::uint64_t unchecked() const { return unchecked_.load(); }
    bool failed() const { return failed_.load(); }

  private:
    void run();
    bool take_one(std::chrono::milliseconds wait);

    BlockSink& sink_;
    BlockCheck check_;
    Faults* faults_ = nullptr;
    std::atomic<bool> failed_{false};
    std::atomic<std::uint64_t> unchecked_{0};
    std::atomic<bool> finishing_{false};
    std::atomic<std::uint64_t> blocks_{0};
    std::atomic<std::uint64_t> mismatched_{0};
    std::thread thread_;
};

}  // namespace ibvcap
