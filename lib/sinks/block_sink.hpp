// Feeds stream frames from the demultiplexer into one block ring per antenna of
// each group (lib/sinks/block_ring.hpp): the consumer-facing end of the payload path.
// Two groups carry different data (sub-bands) of the same antenna, so each
// (group, antenna) has its own ring.
//
// Nothing of the block path runs on the thread that calls on_frame (the verbs
// poll thread, the pcap capture thread) but a table lookup, at most a copy
// into host memory, and a queue push: no device call. The copy thread owns
// the rings. A stream's ring comes from the memory prepare() made (its own
// when the stream was listed, else one of the spare rings); only when those
// are used up does the copy thread allocate one itself (counted: the report
// says so). The first job of a stream asks for its ring, so no frame waits
// uncounted. The copy thread works in batches: it takes every queued job (up
// to 256) and places the payloads, which the block memory all rings share
// queues; the first ring's wait then flushes the NIC's writes
// (DeviceMemory::flush_nic_writes: GPUDirect RDMA write ordering), issues
// them as one batch and waits for them to land; then the slots go back.
//
// A frame with a lease (verbs) is held: its receive slot is read in place by
// the copy thread. A payload split across the slot's two pieces (more VLAN
// tags expected than the frame has) is placed with two copies. A frame
// without a lease (pcap sources), or one the source does not let the rings
// hold (their share of the hold budget), is copied into one of the sink's
// staging slots (bounded host memory, never allocated per frame) when its
// payload is in host memory; with no slot free, or its payload in GPU
// memory, it is counted as dropped from the rings, with its cause.
#pragma once

#include <readerwriterqueue/readerwriterqueue.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "lib/core/fault.hpp"
#include "lib/sinks/block_ring.hpp"
#include "lib/sinks/sink.hpp"

namespace ibvcap {

struct BlockSinkOptions {
    BlockRingOptions ring;  // payload_bytes comes from each antenna's first frame
    // Block memory: device memory in the GPU build, host memory in the
    // stand-in.
    // The sink makes one and every ring shares it (one stream, one staging
    // area, one gather and one wait per batch, whatever the antenna count);
    // made by prepare() (or the copy thread), then used by the copy thread
    // only.
    std::function<std::unique_ptr<BlockMemory>()> memory;
    // Spare rings made by prepare() when it is given no streams (the CLI's
    // default: every source an antenna, no --antenna; the pcap source), so
    // that a stream's first frame takes its ring with no device call on the
    // copy thread (cudaMalloc, memset and a wait per block: tens of ms a
    // ring, while the rings' share of the hold budget, 1,024 slots at the
    // default --ring-depth, ~0.7 ms of a 100 GbE port, runs out). When
    // streams are listed the demux takes no others, so none are made. Each
    // is `ring.blocks` blocks of frames_per_block × threads × the largest
    // payload: ~70 MiB of GPU memory at the defaults (16 × 256 × 2 ×
    // 8916 B). 16 (~1.1 GiB, 1.4 % of an 80 GB H100) cover 8 antennas on
    // two groups (the review's experiment had 8, gpu-cuda-2.md N2; the
    // namespace testbed's default traffic is 2 groups x 6): with 8, the
    // testbed's four late rings, made and zeroed on the copy thread during
    // the traffic, cost the capture thread 6,571 and 8,856 kernel drops at
    // 120,000 frames/s on the 2-core VM, with 16 none. More streams than
    // spares get their ring on the copy thread, counted (rings_made_late)
    // and named in the report.
    std::uint32_t spare_rings = 16;
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
    // memory (CUDA stream, pinned staging), the blocks (device memory) of
    // the rings these streams will need (none listed: options.spare_rings
    // spare rings for whichever come), and start the copy thread, so that nothing
    // is allocated and no device call is made on the frames' path. A ring's
    // payload size comes with its first frame, so its blocks are made for
    // `max_payload_bytes` (the capture's payload slot; 0: the largest
    // payload a staging slot takes, kMaxStagedPayload, which bounds the
    // payloads of sources that do not lease their frames). Without
    // prepare() the first frame starts the copy thread, which makes the
    // block memory and every ring itself.
    void prepare(const std::vector<Key>& expected, std::uint32_t max_payload_bytes);
    // The largest payload a staging slot takes (a jumbo frame's).
    static constexpr std::uint32_t kMaxStagedPayload = 9216;

    // A per-stream sink of the demux: place the frame's payload in its
    // antenna's ring.
    void on_frame(const SinkFrame& f, SinkRoute route) override;
    // End of run (the producer has stopped): the copy thread finishes its
    // queue and releases every slot, then every open block is handed out.
    void flush();
    // Only the first half of flush(): the copy thread finishes and releases
    // every slot it holds (idempotent; flush() does it too).
    void stop_copying();
    // Whether the copy thread ran.
    bool threaded() const { return started_; }
    // Frames the copy thread could not take, by cause. Read after flush().
    enum class Drop : std::uint8_t {
        not_captured,      // the capture cut the payload short
        too_many_streams,  // more streams than kMaxAntennas
        device_unheld,     // GPU payload the rings' hold share could not take
        no_staging,        // no staging slot free (or a payload larger than one)
        queue_full,        // the copy thread's queue was full
        count_
    };
    std::uint64_t dropped(Drop cause) const { return dropped_[static_cast<std::size_t>(cause)]; }
    std::uint64_t copy_dropped() const;
    // Streams whose ring the copy thread had to allocate itself (neither
    // listed in prepare() nor covered by a spare ring). Read after flush().
    std::uint64_t rings_made_late() const { return rings_made_late_.load(); }
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
    // Host slots for payloads the copy thread cannot read in place
    // (block_sink.cpp, Staging).
    static constexpr std::size_t kStagingSlots = 4096;
    // Ledger lines: per antenna, what the ring could not place.
    void report_to(Ledger& ledger) const;

  private:
    void place(const Frame& frame, const UdpPacket& packet, const StreamHeader& header,
               const StreamStats& stream);

    struct Job {
        std::uint32_t stream = 0;  // the stream's id (its ring's index in rings_)
        bool create = false;       // make the stream's ring (payload bytes, timing below)
        std::uint64_t index = 0;
        // A payload split across the slot's two pieces: its first
        // `head_bytes` (host memory, SGE0); `payload` is then the rest.
        const std::uint8_t* head = nullptr;
        std::uint32_t head_bytes = 0;
        const std::uint8_t* payload = nullptr;
        const DeviceMemory* device = nullptr;
        SlotOwner* owner = nullptr;
        std::uint64_t token = 0;
        std::uint32_t bytes = 0;  // the whole payload (head piece included)
        std::uint16_t thread = 0;
        CodifTiming timing;  // create only
        Key key;             // create only
    };
    class Staging;
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
    // Owned by the copy thread (made by prepare() before it starts); read by
    // others only after it stopped.
    std::map<MapKey, Antenna> antennas_;
    std::map<MapKey, std::unique_ptr<BlockMemory>> prepared_;
    std::vector<std::unique_ptr<BlockMemory>> spares_;  // spare rings' blocks
    std::size_t spare_block_bytes_ = 0;                 // each spare block's size
    std::size_t spares_made_ = 0;
    std::vector<BlockRing*> rings_;  // by stream id; kMaxAntennas, reserved up front
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

    void drop(Drop cause) { ++dropped_[static_cast<std::size_t>(cause)]; }
    bool started_ = false;
    std::unique_ptr<moodycamel::BlockingReaderWriterQueue<Job>> jobs_;
    std::unique_ptr<Staging> staging_;
    std::thread copier_;
    std::atomic<bool> copier_stop_{false};
    std::array<std::uint64_t, static_cast<std::size_t>(Drop::count_)> dropped_{};  // producer
    std::atomic<std::uint64_t> rings_made_late_{0};
    std::atomic<std::uint64_t> copy_failed_{0};
    std::atomic<std::uint64_t> batches_{0};
    std::atomic<bool> failed_{false};
};

}  // namespace ibvcap
