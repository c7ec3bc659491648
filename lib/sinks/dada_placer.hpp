// One PSRDADA ring's placement (lib/sinks/dada_sink.hpp): its transfers, the
// fill records it owes, and the copies into its blocks; and the copy thread
// that runs placements when they involve a device (a ring in GPU memory,
// dada_db -g, or payload in GPU memory).
//
// A record arrives in index order from the stream's reorder window. The
// placer starts a transfer where the record carries a header, writes what
// it owes first, then the record; with no room it owes a fill record in its
// place (a frame is then the consumer's loss). Copies go straight into the
// ring's host blocks (memcpy) or through a BlockMemory (lib/sinks/
// block_ring.hpp): device-to-device for GPU payload, staged host-to-device
// for host bytes, each batch issued and waited for before a block is marked
// filled and before the slots it read are given back, as the block rings do.
#pragma once

#include <readerwriterqueue/readerwriterqueue.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lib/core/frame.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/sinks/block_ring.hpp"
#include "lib/sinks/dada_ring.hpp"

namespace ibvcap {

// One record for a ring, in index order.
struct DadaRecord {
    // payload: `src` (or `frame` at `offset`); fill: a frame that never came;
    // unreadable: a frame whose bytes could not be taken (the pattern goes in
    // its place: counted unwritten by the stream's side).
    enum class Kind : std::uint8_t { payload, fill, unreadable };
    Kind kind = Kind::fill;
    std::uint64_t index = 0;
    const std::uint8_t* src = nullptr;     // host bytes, or device bytes with `device`
    const DeviceMemory* device = nullptr;  // src is device memory read through it
    const Frame* frame = nullptr;          // inline only: gather from the frame at offset
    std::size_t offset = 0;
    SlotOwner* owner = nullptr;  // a held slot: released once its copy landed
    std::uint64_t token = 0;
    bool staged = false;            // src is a staging slot (returned once copied)
    std::string* header = nullptr;  // a transfer starts with this header (owned)...
    std::uint64_t first = 0;        // ...at this index (<= index)
};

// The figures a placer keeps (read once it has stopped).
struct DadaPlacerCounts {
    std::uint64_t frames = 0;
    std::uint64_t fills = 0;
    std::uint64_t owed_at_end = 0;
    std::uint64_t unwritten = 0;  // frames lost to a failed ring
};

class DadaPlacer {
  public:
    // `blocks`: each ring block's address (host: the segments; GPU: device
    // pointers); `memory` null: host blocks written with memcpy.
    DadaPlacer(DadaRingWriter& writer, std::size_t payload_bytes, std::vector<std::uint8_t*> blocks,
               BlockMemory* memory, std::function<void()> on_consumer);
    // An offline source's (DadaSink::wait_while_full): a full ring is waited
    // for, in 1 ms naps, until `stop` becomes true.
    void wait_while_full(const std::atomic<bool>* stop) { wait_stop_ = stop; }
    void record(DadaRecord& r);
    // Issue and wait for the copies placed, then give back what they read.
    void synchronize();
    // The stream ended: what is still owed is not in the ring.
    void close();
    const DadaPlacerCounts& counts() const { return counts_; }
    // The ring failed (its writer's error, a copy, the blocks' size).
    const std::string& error() const { return error_; }
    // Staging slots whose bytes were copied (the copy thread's side of the
    // staging ring).
    std::uint64_t staged_done() const { return staged_done_.load(std::memory_order_acquire); }

  private:
    bool begin_transfer(std::uint64_t index, const std::string& header);
    bool place(DadaRecord& r);
    void release(DadaRecord& r);
    void fail(std::string why);

    DadaRingWriter& writer_;
    std::size_t payload_bytes_;
    std::vector<std::uint8_t*> blocks_;
    BlockMemory* memory_;
    std::function<void()> on_consumer_;
    const std::atomic<bool>* wait_stop_ = nullptr;
    std::vector<std::uint8_t> pattern_;
    bool checked_ = false;
    bool in_transfer_ = false;
    std::uint64_t next_index_ = 0;
    std::uint64_t owed_ = 0;
    std::vector<std::pair<SlotOwner*, std::uint64_t>> held_;  // released at synchronize()
    std::vector<std::uint64_t> tokens_;
    std::atomic<std::uint64_t> staged_done_{0};
    DadaPlacerCounts counts_;
    std::string error_;
};

// The copy thread of the rings whose placements involve a device: records
// come through a bounded single-producer queue; a batch (the queue emptied,
// or 256 records) ends with one synchronize() per placer.
class DadaCopier {
  public:
    static constexpr std::size_t kQueue = 65536;
    static constexpr std::size_t kBatch = 256;
    DadaCopier();
    ~DadaCopier();
    DadaCopier(const DadaCopier&) = delete;
    DadaCopier& operator=(const DadaCopier&) = delete;
    // Producer: false when the queue is full (the record was not taken).
    bool push(DadaPlacer& placer, const DadaRecord& r);
    // Producer, at the end: every record queued is placed, then the thread ends.
    void stop();

  private:
    struct Job {
        DadaPlacer* placer = nullptr;
        DadaRecord record;
    };
    void run();
    moodycamel::BlockingReaderWriterQueue<Job> queue_{kQueue};
    std::atomic<bool> stopping_{false};
    std::thread thread_;
};

}  // namespace ibvcap
