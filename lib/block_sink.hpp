// Feeds CODIF frames from the demultiplexer into one block ring per antenna of
// each group (lib/block_ring.hpp): the consumer-facing end of the payload path.
// Two groups carry different data (sub-bands) of the same antenna, so each
// (group, antenna) has its own ring.
//
// With the verbs source (frames arrive with a lease, lib/frame.hpp), copies
// into the rings run on the sink's own copy thread, off the poll thread: the
// poll thread holds the frame's receive slot and queues a job; the copy
// thread places the payload (device to device when it is in GPU memory,
// through pinned staging when it is in host memory), waits for the copies of
// a batch to land, and releases the slots. A frame the source does not let
// it hold (its hold limit) is copied into one of the sink's bounce slots
// when its payload is in host memory, and counted as dropped from the rings
// when it is in GPU memory. The mode is chosen by the first frame: without a
// lease (pcap sources) everything is placed on the calling thread.
#pragma once

#include <readerwriterqueue/readerwriterqueue.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "lib/block_ring.hpp"
#include "lib/demux.hpp"
#include "lib/fault.hpp"

namespace ibvcap {

struct BlockSinkOptions {
    BlockRingOptions ring;  // payload_bytes comes from each antenna's first frame
    // Memory for one antenna's ring: device memory in the GPU build, host
    // memory in the stand-in.
    std::function<std::unique_ptr<BlockMemory>()> memory;
    // Where the copy thread reports an exception (a device copy or
    // synchronisation that failed). It then issues no further copies: the
    // frames it still gets are counted (copy_failed) and their slots
    // released at once. Null: counted all the same, the run not told.
    Faults* faults = nullptr;
};

class BlockSink {
  public:
    explicit BlockSink(BlockSinkOptions options);
    ~BlockSink();
    BlockSink(const BlockSink&) = delete;
    BlockSink& operator=(const BlockSink&) = delete;

    // The Demux observer: place the frame's payload in its antenna's ring.
    FrameObserver observer();
    // End of run (the producer has stopped): the copy thread finishes its
    // queue and releases every slot, then every open block is handed out.
    void flush();
    // Only the first half of flush(): the copy thread finishes and releases
    // every slot it holds (idempotent; flush() does it too).
    void stop_copying();
    // Whether the copy thread ran (frames came with leases).
    bool threaded() const { return mode_ == Mode::threaded; }
    // Frames the copy thread could not take (GPU payload not holdable, no
    // bounce slot free, queue full). Read after flush().
    std::uint64_t copy_dropped() const { return copy_dropped_; }
    // Frames whose copy failed or was never issued because an earlier copy
    // failed (the block memory is unusable). Read after flush().
    std::uint64_t copy_failed() const { return copy_failed_.load(); }
    // Whether a copy or synchronisation into the rings failed.
    bool failed() const { return failed_.load(); }

    // The ring of an antenna of a group (nullptr before its first frame).
    // Producer thread, or after the producer has stopped.
    BlockRing* ring(const Endpoint& group, std::uint32_t antenna);
    struct Key {
        Endpoint group;
        std::uint32_t antenna = 0;
    };
    std::vector<Key> keys() const;

    // For a consumer thread while the producer runs: the rings made so far,
    // in the order their antennas appeared (append-only, so safe to read).
    std::size_t ring_count() const { return published_.load(std::memory_order_acquire); }
    BlockRing& ring_at(std::size_t i) { return *registry_[i].second; }
    std::uint32_t antenna_at(std::size_t i) const { return registry_[i].first.antenna; }
    static constexpr std::size_t kMaxAntennas = 1024;
    // Ledger lines: per antenna, what the ring could not place.
    void report_to(Ledger& ledger) const;

  private:
    void on_frame(const Frame& frame, const UdpPacket& packet, const CodifHeader& header,
                  const StreamStats& stream);

    struct Job {
        BlockRing* ring = nullptr;
        std::uint64_t index = 0;
        const std::uint8_t* payload = nullptr;
        const DeviceMemory* device = nullptr;
        SlotOwner* owner = nullptr;
        std::uint64_t token = 0;
        std::uint32_t bytes = 0;
        std::uint16_t thread = 0;
    };
    class Bounce;
    enum class Mode { undecided, inline_copy, threaded };
    void start_copier();
    void copier();
    void queue(BlockRing& ring, const Frame& frame, std::size_t offset, std::size_t bytes,
               std::uint16_t thread, std::uint64_t index);

    struct Antenna {
        std::unique_ptr<BlockMemory> memory;
        std::unique_ptr<BlockRing> ring;
    };
    BlockSinkOptions options_;
    std::map<std::pair<std::uint64_t, std::uint32_t>, Antenna> antennas_;
    std::vector<std::uint8_t> scratch_;  // a payload that straddles the two pieces
    // Reserved up front and never reallocated: the consumer reads entries
    // below published_ while the producer appends.
    std::vector<std::pair<Key, BlockRing*>> registry_;
    std::atomic<std::size_t> published_{0};

    Mode mode_ = Mode::undecided;
    std::unique_ptr<moodycamel::BlockingReaderWriterQueue<Job>> jobs_;
    std::unique_ptr<Bounce> bounce_;
    std::thread copier_;
    std::atomic<bool> copier_stop_{false};
    std::uint64_t copy_dropped_ = 0;  // producer side
    std::atomic<std::uint64_t> copy_failed_{0};
    std::atomic<bool> failed_{false};
    void fail(const char* where, const char* what);
};

}  // namespace ibvcap
