// Feeds CODIF frames from the demultiplexer into one block ring per antenna of
// each group (lib/sinks/block_ring.hpp): the consumer-facing end of the payload path.
// Two groups carry different data (sub-bands) of the same antenna, so each
// (group, antenna) has its own ring.
//
// With the verbs source (frames arrive with a lease, lib/frame.hpp), nothing
// of the block path runs on the poll thread but a table lookup and a queue
// push: the poll thread holds the frame's receive slot and queues a job. The
// copy thread owns the rings. It makes a stream's ring when the stream is not
// one prepare() made memory for (the first job of a stream asks for it, so
// no frame waits and none is lost), and works in batches: it takes every
// queued job (up to 256) and places the payloads, which the block memory all
// rings share queues; the first ring's wait then flushes the NIC's writes
// (DeviceMemory::flush_nic_writes: GPUDirect RDMA write ordering), issues
// them as one batch and waits for them to land; then the slots go back.
//
// A frame the source does not let it hold (its hold limit) is copied into
// one of the sink's bounce slots when its payload is in host memory, and
// counted as dropped from the rings when it is in GPU memory. The mode is
// chosen by the first frame: without a lease (pcap sources) everything is
// placed on the calling thread.
#pragma once

#include <readerwriterqueue/readerwriterqueue.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "lib/fault.hpp"
#include "lib/sinks/block_ring.hpp"
#include "lib/sinks/sink.hpp"

namespace ibvcap {

struct BlockSinkOptions {
    BlockRingOptions ring;  // payload_bytes comes from each antenna's first frame
    // Block memory: device memory in the GPU build, host memory in the
    // stand-in.
    // The sink makes one and every ring shares it (one stream, one staging
    // area, one gather and one wait per batch, whatever the antenna count);
    // only the copy thread (or, without one, the producer) uses it.
    std::function<std::unique_ptr<BlockMemory>()> memory;
    // Where the copy thread reports an exception (a device copy or
    // synchronisation that failed). It then issues no further copies: the
    // frames it still gets are counted (copy_failed) and their slots
    // released at once. Null: counted all the same, the run not told.
    Faults* faults = nullptr;
};

class BlockSink final : public FrameSink {
  public:
    explicit BlockSink(BlockSinkOptions options);
    ~BlockSink() override;
    BlockSink(const BlockSink&) = delete;
    BlockSink& operator=(const BlockSink&) = delete;

    struct Key {
        Endpoint group;
        std::uint32_t antenna = 0;
    };
    // Before the capture starts, on the calling thread: make the block
    // memory (CUDA stream, pinned staging) and the blocks (device memory) of
    // the rings these streams will need, so that nothing is allocated once
    // frames flow. A ring's payload size comes with its first frame, so its
    // blocks are made for `max_payload_bytes` (the capture's payload slot;
    // 0: blocks come with the ring). A stream that is not expected gets its
    // blocks on the copy thread when its first frame comes (its frames wait
    // in the queue meanwhile; none is lost uncounted). For sources that
    // lease their frames (verbs): it also starts the copy thread, so the
    // first frame finds it running.
    void prepare(const std::vector<Key>& expected, std::uint32_t max_payload_bytes);

    // A per-stream sink of the demux: place the frame's payload in its
    // antenna's ring.
    void on_frame(const SinkFrame& f, SinkRoute route) override;
    // End of run (the producer has stopped): the copy thread finishes its
    // queue and releases every slot, then every open block is handed out.
    void flush();
    // Only the first half of flush(): the copy thread finishes and releases
    // every slot it holds (idempotent; flush() does it too).
    void stop_copying();
    // Whether the copy thread ran (frames came with leases).
    bool threaded() const { return mode_ == Mode::threaded; }
    // Frames the copy thread could not take (GPU payload not holdable, no
    // bounce slot free, queue full, too many streams). Read after flush().
    std::uint64_t copy_dropped() const { return copy_dropped_; }
    // Frames whose copy failed or was never issued because an earlier copy
    // failed (the block memory is unusable). Read after flush().
    std::uint64_t copy_failed() const { return copy_failed_.load(); }
    // Whether a copy or synchronisation into the rings failed.
    bool failed() const { return failed_.load(); }
    // Copy-thread batches (each: one flush of NIC writes per payload memory,
    // one wait for the copies). Read after flush().
    std::uint64_t batches() const { return batches_.load(); }

    // The ring of an antenna of a group (nullptr before its first frame).
    // After the producer (and the copy thread) have stopped.
    BlockRing* ring(const Endpoint& group, std::uint32_t antenna);
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
    void place(const Frame& frame, const UdpPacket& packet, const CodifHeader& header,
               const StreamStats& stream);

    struct Job {
        std::uint32_t stream = 0;  // the stream's id (its ring's index in rings_)
        bool create = false;       // make the stream's ring (payload bytes, timing below)
        std::uint64_t index = 0;
        const std::uint8_t* payload = nullptr;
        const DeviceMemory* device = nullptr;
        SlotOwner* owner = nullptr;
        std::uint64_t token = 0;
        std::uint32_t bytes = 0;
        std::uint16_t thread = 0;
        CodifTiming timing;  // create only
        Key key;             // create only
    };
    class Bounce;
    enum class Mode { undecided, inline_copy, threaded };
    void start_copier();
    void copier();
    void create_ring(const Job& job);
    void fail(const char* where, const char* what);
    void queue(std::uint32_t stream, const Frame& frame, std::size_t offset, std::size_t bytes,
               std::uint16_t thread, std::uint64_t index);
    // The stream id of (group, antenna), or a new one; kMaxAntennas when the
    // table is full. Producer thread; no allocation.
    std::uint32_t stream_id(const Endpoint& group, std::uint32_t antenna);
    using MapKey = std::pair<std::uint64_t, std::uint32_t>;  // (group ip:port, antenna)
    static MapKey map_key(const Endpoint& group, std::uint32_t antenna);
    BlockRing* make_ring(const Key& key, std::uint32_t payload_bytes, const CodifTiming& timing);

    struct Antenna {
        std::unique_ptr<BlockMemory> memory;
        std::unique_ptr<BlockRing> ring;
    };
    BlockMemory& shared_memory();  // made at its first use
    BlockSinkOptions options_;
    // Declared before the rings' views of it, so destroyed after them.
    std::unique_ptr<BlockMemory> memory_;
    // Owned by the copy thread in threaded mode (the producer's in inline
    // mode); read by others only after it stopped.
    std::map<MapKey, Antenna> antennas_;
    std::map<MapKey, std::unique_ptr<BlockMemory>> prepared_;
    std::vector<BlockRing*> rings_;      // by stream id; kMaxAntennas, reserved up front
    std::vector<std::uint8_t> scratch_;  // a payload that straddles the two pieces (inline)
    // The producer's stream table: open addressing over a fixed array.
    struct Slot {
        std::uint64_t group = 0;
        std::uint32_t antenna = 0;
        std::uint32_t id = 0;
        bool used = false;
    };
    std::vector<Slot> table_;
    std::uint32_t next_id_ = 0;
    std::vector<std::uint8_t> requested_;  // by stream id: its ring's creation is queued
    // Reserved up front and never reallocated: the consumer reads entries
    // below published_ while the copy thread (or producer) appends.
    std::vector<std::pair<Key, BlockRing*>> registry_;
    std::atomic<std::size_t> published_{0};

    Mode mode_ = Mode::undecided;
    std::unique_ptr<moodycamel::BlockingReaderWriterQueue<Job>> jobs_;
    std::unique_ptr<Bounce> bounce_;
    std::thread copier_;
    std::atomic<bool> copier_stop_{false};
    std::uint64_t copy_dropped_ = 0;  // producer side
    std::atomic<std::uint64_t> copy_failed_{0};
    std::atomic<std::uint64_t> batches_{0};
    std::atomic<bool> failed_{false};
};

}  // namespace ibvcap
