// The per-antenna block ring (the GPU payload path's hand-off to consumers).
//
// Frames of one antenna are placed, by sequence index, into blocks of
// `frames_per_block` frame times × `threads` threads. A block is a
// contiguous array of payloads, slot (frame time f, thread t) at offset
// ((f * threads) + t) * payload_bytes, with a presence bitmap of the same
// shape and the (seconds, frame) of its first frame time. Missing frames are
// marked absent, never shifted: a consumer sees exactly where each payload
// belongs in time. Absent slots hold whatever the block held before (the
// consumer zero-fills them, as the example kernel does); a span of frame
// times with no frame at all produces no block, which first_index shows.
//
// The producer (the capture's poll or copy thread) calls place() per frame;
// a block is handed to the consumer once a frame arrives `lateness` frame
// times beyond its end (so reordered frames still land), or at flush(). The
// consumer calls acquire(), processes the block (on its own CUDA stream on a
// GPU), then release(); released blocks are reused. A full ring never stalls
// the producer: the frame is counted as dropped.
//
// Memory is reached through BlockMemory: device memory with cudaMemcpyAsync
// in the GPU build (gpu/), plain host memory in the stand-in that tests and
// hosts without a GPU use. The logic here is the same for both.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "formats/bytes.hpp"
#include "formats/codif.hpp"
#include "lib/core/device_calls.hpp"
#include "lib/core/frame.hpp"
#include "lib/ledger/ledger.hpp"

namespace ibvcap {

// Where block payloads live, and how payloads get there.
class BlockMemory {
  public:
    virtual ~BlockMemory() = default;
    // `bytes` of memory for one block; freed when the memory object goes.
    virtual std::uint8_t* allocate(std::size_t bytes) = 0;
    // Copy `bytes` from host memory `src` into block memory at `dst`.
    virtual void copy_in(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) = 0;
    // Like copy_in, but `src` stays valid and unchanged until synchronize()
    // returns (a receive slot the caller holds until then): the copy may read
    // it late, with no staging copy (the GPU build reads page-locked slots
    // directly, in the batch's one gather). The default is copy_in.
    virtual void copy_in_held(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) {
        copy_in(dst, src, bytes);
    }
    // Copy `bytes` from device memory `src` (a receive slot in GPU memory,
    // readable through `from`) into block memory at `dst`; device to device
    // on a GPU. Queued until synchronize(), which first flushes the NIC's
    // writes of every device memory it is about to read
    // (DeviceMemory::flush_nic_writes: the slot was completed before it was
    // queued here, so the flush covers it) and then issues every queued copy
    // as one batch (a gather: a bounded number of device calls per batch,
    // not per frame).
    virtual void copy_in_device(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes,
                                const DeviceMemory& from) = 0;
    // Issue what is queued and wait until every copy has landed (before a
    // hand-off, and before held sources are given back).
    virtual void synchronize() = 0;
    virtual bool host_visible() const = 0;  // can the CPU read the blocks
    virtual std::string describe() const = 0;
};
// A BlockMemory that passes every call on to another, owned or not:
// decorators (reserved blocks, test gates and faults) override only what
// they change.
class ForwardingBlockMemory : public BlockMemory {
  public:
    explicit ForwardingBlockMemory(BlockMemory& inner) : inner_(&inner) {}
    explicit ForwardingBlockMemory(std::unique_ptr<BlockMemory> inner)
        : owned_(std::move(inner)), inner_(owned_.get()) {}
    std::uint8_t* allocate(std::size_t bytes) override { return inner_->allocate(bytes); }
    void copy_in(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) override {
        inner_->copy_in(dst, src, bytes);
    }
    void copy_in_held(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) override {
        inner_->copy_in_held(dst, src, bytes);
    }
    void copy_in_device(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes,
                        const DeviceMemory& from) override {
        inner_->copy_in_device(dst, src, bytes, from);
    }
    void synchronize() override { inner_->synchronize(); }
    bool host_visible() const override { return inner_->host_visible(); }
    std::string describe() const override { return inner_->describe(); }

  private:
    std::unique_ptr<BlockMemory> owned_;
    BlockMemory* inner_;
};

// Host memory: the stand-in for tests and GPU-less hosts. With `log`, it is
// the GPU stand-in's block memory and logs the device calls the GPU build
// would make (lib/core/device_calls.hpp).
std::unique_ptr<BlockMemory> make_host_block_memory(DeviceCallLog* log = nullptr);

struct BlockRingOptions {
    std::uint32_t frames_per_block = 256;  // frame times per block
    std::uint16_t threads = 1;             // the antenna's threads (thread ids 0..threads-1)
    std::uint32_t payload_bytes = 8192;
    std::uint32_t blocks = 8;     // ring depth
    std::uint32_t lateness = 64;  // frame times a block waits for late frames
    // A block whose frame times are over waits for synchronize_copies() to be
    // handed out, so that one wait serves every block of a batch (the block
    // sink's copy thread). false: place() waits for the copies itself.
    bool batched = false;
};

struct Block {
    std::uint64_t sequence = 0;          // blocks handed out by this ring, from 0
    std::uint64_t first_index = 0;       // absolute frame index of frame time 0
    FramePosition first;                 // its (seconds, frame)
    std::uint8_t* data = nullptr;        // frames_per_block * threads * payload_bytes
    std::vector<std::uint64_t> present;  // bit (f * threads + t)
    std::uint64_t present_count = 0;

    bool has(std::uint32_t frame_time, std::uint16_t thread, std::uint16_t threads) const {
        const std::uint64_t bit = std::uint64_t{frame_time} * threads + thread;
        return (present[bit / 64] >> (bit % 64)) & 1u;
    }
};

struct BlockRingStats {
    std::uint64_t placed = 0;
    std::uint64_t duplicates = 0;  // a slot already filled
    std::uint64_t too_late = 0;    // its block was already handed out
    std::uint64_t ring_full = 0;   // no free block: the consumer is behind
    std::uint64_t bad_thread = 0;  // thread id outside 0..threads-1
    std::uint64_t bad_length = 0;  // payload of another size
    std::uint64_t blocks_out = 0;  // handed to the consumer
    std::uint64_t abandoned = 0;   // frames in blocks never handed out (abandon())
};

class BlockRing {
  public:
    BlockRing(const BlockRingOptions& options, BlockMemory& memory, CodifTiming timing);

    // Producer side (one thread). `index` is the frame's absolute index
    // (CodifTiming::index of its seconds and frame).
    // `payload_device` non-null: the payload is device memory read through it.
    // `held`: the payload stays valid until synchronize_copies() returns, so
    // it is copied without staging (BlockMemory::copy_in_held).
    void place(std::uint16_t thread, std::uint64_t index, Bytes payload,
               const DeviceMemory* payload_device = nullptr, bool held = false) {
        place(thread, index, Bytes{}, payload, payload_device, held);
    }
    // A payload in two pieces (a receive slot split where the ring's header
    // slot ended, not where the payload starts: more VLAN tags expected than
    // the frame has): `head`, host memory, is copied at once (copy_in); the
    // rest, `payload`, as above. Together they are one payload.
    void place(std::uint16_t thread, std::uint64_t index, Bytes head, Bytes payload,
               const DeviceMemory* payload_device, bool held);
    // Hand out every open block (end of run).
    void flush();
    // End of a run whose block memory failed: the open blocks are not handed
    // out (their copies may never have landed) and issue no device call;
    // their frames count as abandoned. The consumer then sees the ring end.
    void abandon();
    // Producer: wait until every copy placed so far has landed (before the
    // sources of those copies are reused), then hand out the blocks that
    // were waiting for it (options.batched).
    void synchronize_copies();

    // Consumer side (any one thread): the next full block, waiting up to
    // `timeout`; nullptr when none came (or the ring is flushed and empty).
    const Block* acquire(std::chrono::milliseconds timeout);
    void release(const Block* block);

    const BlockRingOptions& options() const { return options_; }
    // Read once the producer has stopped (the producer updates it unlocked).
    BlockRingStats stats() const { return stats_; }
    std::size_t block_bytes() const { return block_bytes_; }
    FramePosition position(std::uint64_t index) const;

  private:
    Block* open_block(std::uint64_t first_index);
    void hand_out_front();
    void hand_out_closing();

    BlockRingOptions options_;
    BlockMemory& memory_;
    CodifTiming timing_;
    std::size_t block_bytes_ = 0;
    std::vector<std::unique_ptr<Block>> storage_;

    mutable std::mutex mu_;  // guards the queues below (not the producer's fast path)
    std::condition_variable ready_cv_;
    std::deque<Block*> free_;
    std::deque<Block*> ready_;
    bool flushed_ = false;

    // Producer-only state.
    std::deque<Block*> open_;     // by first_index, ascending
    std::deque<Block*> closing_;  // complete, their copies not yet waited for (batched)
    bool origin_set_ = false;
    std::uint64_t origin_ = 0;        // first_index of block 0: blocks align to it
    std::uint64_t handed_up_to_ = 0;  // every index below this is in a handed-out block
    std::uint64_t next_sequence_ = 0;
    BlockRingStats stats_;
};

}  // namespace ibvcap
