#include "lib/sinks/block_sink.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <span>

namespace ibvcap {

namespace {
// Staging: host memory for payloads the copy thread cannot read in place
// (frames without a lease, or that the rings may not hold). kStagingSlots
// (block_sink.hpp), 4,096 slots of a
// jumbo payload, 36 MiB: sixteen copy-thread batches, ~2.7 ms of a 100 GbE
// port of 8 KB frames, 34 ms of the pcap source at 120,000 frames/s. With
// 1,024 the namespace testbed at 120,000 frames/s on the 2-core VM (the
// sender on the same cores) lost 110 frames to a copy thread that fell
// behind for ~9 ms.
constexpr std::size_t kStagingSlots = BlockSink::kStagingSlots;
constexpr std::size_t kStagingStride = BlockSink::kMaxStagedPayload;
constexpr std::size_t kQueueJobs = 65536 + kStagingSlots;
// Jobs the copy thread takes at once: one flush of the NIC's writes, one
// batch of copies and one wait per ring for all of them. At 1.5 M frames/s
// (a 100 GbE port of 8 KB frames) 256 frames are 170 us.
constexpr std::size_t kReleaseBatch = 256;

// Blocks made before the capture (BlockSink::prepare), handed to the ring
// when it is made; every other call goes to the memory underneath.
class ReservedBlockMemory final : public ForwardingBlockMemory {
  public:
    ReservedBlockMemory(BlockMemory& inner, std::size_t blocks, std::size_t block_bytes)
        : ForwardingBlockMemory(inner), block_bytes_(block_bytes) {
        for (std::size_t i = 0; i < blocks && block_bytes > 0; ++i) {
            reserved_.push_back(inner.allocate(block_bytes));
        }
    }
    std::uint8_t* allocate(std::size_t bytes) override {
        if (bytes <= block_bytes_ && !reserved_.empty()) {
            std::uint8_t* b = reserved_.back();
            reserved_.pop_back();
            return b;
        }
        return ForwardingBlockMemory::allocate(bytes);
    }

  private:
    std::size_t block_bytes_;
    std::vector<std::uint8_t*> reserved_;
};
}  // namespace

// Host memory for payloads the copy thread cannot read in place: slots
// handed out by the producer and returned by the copy thread (SPSC both
// ways). A producer that finds none free drops the frame (counted): it never
// waits.
class BlockSink::Staging final : public SlotOwner {
  public:
    Staging() : memory_(new std::uint8_t[kStagingSlots * kStagingStride]), free_(kStagingSlots) {
        for (std::uint32_t i = 0; i < kStagingSlots; ++i) {
            free_.enqueue(i);
        }
    }
    // Producer: a free slot, or false.
    bool take(std::uint64_t& token, std::uint8_t*& bytes) {
        std::uint32_t slot = 0;
        if (!free_.try_dequeue(slot)) {
            return false;
        }
        token = slot;
        bytes = memory_.get() + std::size_t{slot} * kStagingStride;
        return true;
    }
    // Copy thread.
    void release(std::span<const std::uint64_t> tokens) override {
        for (const auto t : tokens) {
            free_.enqueue(static_cast<std::uint32_t>(t));  // capacity covers every slot
        }
    }

  private:
    std::unique_ptr<std::uint8_t[]> memory_;
    moodycamel::ReaderWriterQueue<std::uint32_t> free_;
};

BlockSink::BlockSink(BlockSinkOptions options) : options_(std::move(options)) {
    if (!options_.memory) {
        options_.memory = [] { return make_host_block_memory(); };
    }
    registry_.reserve(kMaxAntennas);
    rings_.assign(kMaxAntennas, nullptr);
    requested_.assign(kMaxAntennas, 0);
    table_.assign(kMaxAntennas * 2, Slot{});  // at most half full: short probes
}

BlockSink::~BlockSink() {
    stop_copying();
}

BlockSink::MapKey BlockSink::map_key(const Endpoint& group, std::uint32_t antenna) {
    return {(std::uint64_t{group.ip} << 16) | group.port, antenna};
}

void BlockSink::prepare(const std::vector<Key>& expected, std::uint32_t max_payload_bytes) {
    if (started_) {
        return;  // frames came first: the copy thread owns the rings now
    }
    // The block memory first, whatever is listed: its stream and staging are
    // device calls too.
    BlockMemory& shared = shared_memory();
    const std::uint32_t payload = max_payload_bytes > 0 ? max_payload_bytes : kMaxStagedPayload;
    const std::size_t block_bytes =
        std::size_t{options_.ring.frames_per_block} * options_.ring.threads * payload;
    for (const Key& k : expected) {
        const MapKey key = map_key(k.group, k.antenna);
        if (prepared_.size() < kMaxAntennas && !prepared_.contains(key)) {
            prepared_.emplace(key, std::make_unique<ReservedBlockMemory>(
                                       shared, options_.ring.blocks, block_bytes));
        }
    }
    // Listed streams are the only ones the demux takes (DemuxOptions: the
    // groups and antennas given); none listed, any may come.
    const std::uint32_t spares = expected.empty() ? options_.spare_rings : 0;
    for (std::uint32_t i = 0; i < spares && i < kMaxAntennas; ++i) {
        spares_.push_back(
            std::make_unique<ReservedBlockMemory>(shared, options_.ring.blocks, block_bytes));
    }
    spare_block_bytes_ = block_bytes;
    spares_made_ = spares_.size();
    // The copy thread, its queue and its staging exist before the first
    // frame, not made on the frames' thread when it comes. Started last: it
    // reads prepared_ and spares_.
    start_copier();
}

std::uint64_t BlockSink::copy_dropped() const {
    std::uint64_t n = 0;
    for (const auto d : dropped_) {
        n += d;
    }
    return n;
}

BlockMemory& BlockSink::shared_memory() {
    if (!memory_) {
        memory_ = options_.memory();
    }
    return *memory_;
}

void BlockSink::fail(const char* where, const char* what) {
    if (!failed_.exchange(true) && options_.faults != nullptr) {
        options_.faults->report(where, what);
    }
}

std::uint32_t BlockSink::stream_id(const Endpoint& group, std::uint32_t antenna) {
    const std::uint64_t g = map_key(group, antenna).first;
    const std::size_t mask = table_.size() - 1;  // a power of two
    std::size_t h = static_cast<std::size_t>((g * 0x9E3779B97F4A7C15ull) ^ antenna) & mask;
    for (std::size_t probe = 0; probe < table_.size(); ++probe, h = (h + 1) & mask) {
        Slot& slot = table_[h];
        if (!slot.used) {
            if (next_id_ >= kMaxAntennas) {
                return kMaxAntennas;
            }
            slot = Slot{g, antenna, next_id_++, true};
            return slot.id;
        }
        if (slot.group == g && slot.antenna == antenna) {
            return slot.id;
        }
    }
    return kMaxAntennas;
}

BlockRing* BlockSink::make_ring(const Key& k, std::uint32_t payload_bytes,
                                const CodifTiming& timing) {
    const MapKey key = map_key(k.group, k.antenna);
    Antenna a;
    const std::size_t block_bytes =
        std::size_t{options_.ring.frames_per_block} * options_.ring.threads * payload_bytes;
    if (auto it = prepared_.find(key); it != prepared_.end()) {
        a.memory = std::move(it->second);
        prepared_.erase(it);
    } else if (!spares_.empty() && block_bytes <= spare_block_bytes_) {
        a.memory = std::move(spares_.back());
        spares_.pop_back();
    } else {
        // No memory made for it before the start: its blocks are allocated
        // here, on the copy thread, while the frames queue behind it.
        rings_made_late_.fetch_add(1, std::memory_order_relaxed);
        a.memory = std::make_unique<ReservedBlockMemory>(shared_memory(), 0, 0);
    }
    BlockRingOptions ro = options_.ring;
    ro.payload_bytes = payload_bytes;
    // The copy thread waits once per batch (release_all) and hands out the
    // blocks completed in it then.
    ro.batched = true;
    a.ring = std::make_unique<BlockRing>(ro, *a.memory, timing);
    BlockRing* ring = a.ring.get();
    antennas_.emplace(key, std::move(a));
    registry_.emplace_back(k, ring);
    published_.store(registry_.size(), std::memory_order_release);
    return ring;
}

void BlockSink::start_copier() {
    started_ = true;
    jobs_ = std::make_unique<moodycamel::BlockingReaderWriterQueue<Job>>(kQueueJobs);
    staging_ = std::make_unique<Staging>();
    copier_ = std::thread([this] { copier(); });
}

void BlockSink::create_ring(const Job& job) {
    rings_[job.stream] = make_ring(job.key, job.bytes, job.timing);
}

void BlockSink::copier() {
    std::vector<Job> batch;
    std::vector<SlotOwner*> owners;
    std::vector<std::uint64_t> tokens;
    std::vector<BlockRing*> touched;
    batch.reserve(kReleaseBatch);
    owners.reserve(kReleaseBatch);
    tokens.reserve(kReleaseBatch);
    touched.reserve(kMaxAntennas);
    // A slot goes back only once its copy has landed: every ring that took a
    // copy in the batch waits for its memory's queue first. After a failure
    // nothing is copied or waited for (the memory is unusable, a CUDA error
    // may be sticky); the slots still go back, so the NIC's ring refills
    // while the run stops.
    auto release_all = [&] {
        if (!failed_.load()) {
            try {
                for (BlockRing* r : touched) {
                    r->synchronize_copies();
                }
            } catch (const std::exception& e) {
                // Their copies may not have landed: their blocks are still
                // open and are abandoned at flush, which counts them.
                fail("block copy thread", e.what());
            }
        }
        touched.clear();
        for (std::size_t i = 0; i < tokens.size();) {
            std::size_t j = i + 1;
            while (j < tokens.size() && owners[j] == owners[i]) {
                ++j;
            }
            owners[i]->release(std::span<const std::uint64_t>(tokens.data() + i, j - i));
            i = j;
        }
        owners.clear();
        tokens.clear();
    };
    for (;;) {
        Job first;
        if (!jobs_->wait_dequeue_timed(first, std::chrono::milliseconds(1))) {
            if (copier_stop_.load() && jobs_->size_approx() == 0) {
                return;
            }
            continue;
        }
        // The batch: everything queued now (up to kReleaseBatch). Every frame
        // in it was completed by the NIC before it was queued, so the one
        // flush of the NIC's writes that each ring's memory issues in
        // synchronize() (BlockMemory::copy_in_device) covers them all.
        batch.clear();
        batch.push_back(first);
        Job next;
        while (batch.size() < kReleaseBatch && jobs_->try_dequeue(next)) {
            batch.push_back(next);
        }
        batches_.fetch_add(1, std::memory_order_relaxed);
        for (const Job& j : batch) {
            if (j.create) {
                if (!failed_.load()) {
                    try {
                        create_ring(j);
                    } catch (const std::exception& e) {
                        fail("block copy thread (making a ring)", e.what());
                    }
                }
                continue;
            }
            owners.push_back(j.owner);
            tokens.push_back(j.token);
            BlockRing* ring = rings_[j.stream];
            if (failed_.load() || ring == nullptr) {
                ++copy_failed_;
                continue;
            }
            try {
                // Held until release_all() has waited for the batch's copies
                // (a receive slot or a staging slot): read in place. A head
                // piece (host memory) is copied at once.
                ring->place(j.thread, j.index, Bytes(j.head, j.head_bytes),
                            Bytes(j.payload, j.bytes - j.head_bytes), j.device, true);
                if (std::find(touched.begin(), touched.end(), ring) == touched.end()) {
                    touched.push_back(ring);
                }
            } catch (const std::exception& e) {
                fail("block copy thread", e.what());
                ++copy_failed_;  // its slot stayed absent (BlockRing::place)
            }
        }
        release_all();
    }
}

void BlockSink::queue(std::uint32_t stream, const Frame& frame, std::size_t offset,
                      std::size_t bytes, std::uint16_t thread, std::uint64_t index) {
    Bytes first;
    Bytes second;
    frame.slice(offset, bytes, first, second);
    Job j;
    j.stream = stream;
    j.index = index;
    j.thread = thread;
    j.bytes = static_cast<std::uint32_t>(bytes);
    const bool in_tail = offset >= frame.head.size();
    const bool on_device = frame.tail_device != nullptr && (in_tail || !second.empty());
    if (frame.hold(Holder::ring)) {
        if (second.empty()) {
            j.payload = first.data();
            j.device = in_tail ? frame.tail_device : nullptr;
        } else {
            // Split where the header slot ended, not where the payload
            // starts (more VLAN tags expected than the frame has): its first
            // bytes are in SGE0 (host memory), the rest in SGE1 (device
            // memory, or host). Two copies on the copy thread.
            j.head = first.data();
            j.head_bytes = static_cast<std::uint32_t>(first.size());
            j.payload = second.data();
            j.device = frame.tail_device;
        }
        j.owner = frame.lease->owner;
        j.token = frame.lease->ring_token;
    } else if (on_device) {
        // GPU memory is never read here, and this frame cannot be held.
        drop(Drop::device_unheld);
        return;
    } else {
        // No lease (pcap sources), or the rings' hold share is used up: the
        // payload (host memory) goes into a staging slot now.
        std::uint8_t* dst = nullptr;
        if (bytes > kStagingStride || !staging_->take(j.token, dst)) {
            drop(Drop::no_staging);
            return;
        }
        std::memcpy(dst, first.data(), first.size());
        if (!second.empty()) {  // (memcpy from a null span is undefined, even of 0 bytes)
            std::memcpy(dst + first.size(), second.data(), second.size());
        }
        j.payload = dst;
        j.owner = staging_.get();
    }
    if (!jobs_->try_enqueue(j)) {
        j.owner->release({&j.token, 1});
        drop(Drop::queue_full);
    }
}

void BlockSink::on_frame(const SinkFrame& f, SinkRoute /*route*/) {
    if (!f.payload_captured()) {
        drop(Drop::not_captured);  // no payload to place (a frame the capture cut short)
        return;
    }
    place(f.frame, *f.packet, *f.header, *f.stream);
}

void BlockSink::place(const Frame& frame, const UdpPacket& packet, const StreamHeader& header,
                      const StreamStats& stream) {
    if (!started_) {
        // Not prepared: the copy thread starts now, and makes the block
        // memory and the rings itself.
        start_copier();
    }
    const std::uint32_t id = stream_id(stream.group, stream.antenna);
    if (id >= kMaxAntennas) {
        drop(Drop::too_many_streams);  // more streams than rings (the demux's own limit is lower)
        return;
    }
    const std::size_t offset = std::size_t{packet.payload_offset} + header.head_bytes();
    const std::size_t bytes = static_cast<std::size_t>(header.payload_bytes());
    const std::uint64_t index = stream.timing.index(header.seconds, header.frame);
    if (requested_[id] == 0) {
        // The copy thread makes the ring (device memory: never on the
        // frames' thread) before it takes this stream's first frame. With no
        // room in the queue this frame is dropped (counted once) and the
        // next one asks again.
        Job create;
        create.stream = id;
        create.create = true;
        create.bytes = static_cast<std::uint32_t>(bytes);
        create.timing = stream.timing;
        create.key = Key{stream.group, stream.antenna};
        if (!jobs_->try_enqueue(create)) {
            drop(Drop::queue_full);
            return;
        }
        requested_[id] = 1;
    }
    queue(id, frame, offset, bytes, header.thread, index);
}

void BlockSink::stop_copying() {
    if (copier_.joinable()) {
        copier_stop_.store(true);
        copier_.join();
    }
}

void BlockSink::flush() {
    stop_copying();
    for (auto& [key, a] : antennas_) {
        if (failed_.load()) {
            a.ring->abandon();
            continue;
        }
        try {
            a.ring->flush();
        } catch (const std::exception& e) {
            fail("block rings (flush)", e.what());
            a.ring->abandon();
        }
    }
}

BlockRing* BlockSink::ring(const Endpoint& group, std::uint32_t antenna) {
    const auto it = antennas_.find(map_key(group, antenna));
    return it == antennas_.end() ? nullptr : it->second.ring.get();
}

std::vector<BlockSink::Key> BlockSink::keys() const {
    std::vector<Key> out;
    for (std::size_t i = 0; i < published_.load(std::memory_order_acquire); ++i) {
        out.push_back(registry_[i].first);
    }
    return out;
}

void BlockSink::report_to(Ledger& ledger) const {
    // Every way a captured frame can miss its block is loss for the consumer,
    // and so for the verdict (docs/architecture.md).
    const std::uint64_t dropped = copy_dropped();
    std::uint64_t misses = dropped + copy_failed_.load();
    if (const std::uint64_t n = copy_failed_.load(); n > 0) {
        ledger.add_source_counter({"blocks/copy_failed", n, false});
        ledger.add_note(fmt::format(
            "{} frames are in no block: their copy into the rings failed, or came after a "
            "copy that failed",
            n));
    }
    if (dropped > 0) {
        ledger.add_source_counter({"blocks/copy_dropped", dropped, false});
        static constexpr std::array<const char*, static_cast<std::size_t>(Drop::count_)> kCauses{
            "payload not captured", "more streams than rings",
            "GPU payload the capture could not hold", "no staging slot free", "copy queue full"};
        std::string causes;
        for (std::size_t i = 0; i < kCauses.size(); ++i) {
            if (dropped_[i] > 0) {
                causes +=
                    fmt::format("{}{} {}", causes.empty() ? "" : ", ", kCauses[i], dropped_[i]);
            }
        }
        ledger.add_note(
            fmt::format("{} frames are in no block: the copy thread could not take them ({})",
                        dropped, causes));
    }
    if (const std::uint64_t n = rings_made_late_.load(); n > 0) {
        ledger.add_source_counter({"blocks/rings_made_late", n, false});
        ledger.add_note(fmt::format(
            "{} streams had their ring's blocks allocated on the copy thread at their first "
            "frame (more streams than listed antennas and the {} spare rings made before the "
            "start): their frames, and the other streams', waited for it",
            n, spares_made_));
    }
    for (const auto& [key, ring] : registry_) {
        const BlockRingStats s = ring->stats();
        const std::string name =
            fmt::format("blocks/{}/{}", key.group.to_string(), format_ipv4(key.antenna));
        ledger.add_source_counter({name + "/placed", s.placed, false});
        ledger.add_source_counter({name + "/handed_out", s.blocks_out, false});
        ledger.add_source_counter({name + "/duplicates", s.duplicates, false});
        ledger.add_source_counter({name + "/ring_full", s.ring_full, false});
        ledger.add_source_counter({name + "/too_late", s.too_late, false});
        ledger.add_source_counter({name + "/bad_thread", s.bad_thread, false});
        ledger.add_source_counter({name + "/bad_length", s.bad_length, false});
        // Captured (and written) but in no block: the consumer never sees them.
        const auto lost = s.ring_full + s.too_late + s.bad_thread + s.bad_length + s.abandoned;
        misses += lost;
        if (lost > 0) {
            ledger.add_note(
                fmt::format("{}: {} frames are in no block (ring full {}, too late "
                            "{}, thread out of range {}, other length {})",
                            name, lost, s.ring_full, s.too_late, s.bad_thread, s.bad_length));
        }
    }
    ledger.add_block_misses(misses);
}

}  // namespace ibvcap
