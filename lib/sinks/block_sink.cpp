#include "lib/sinks/block_sink.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <span>

namespace ibvcap {

namespace {
constexpr std::size_t kBounceSlots = 1024;
constexpr std::size_t kBounceStride = 9216;  // a jumbo frame's payload
constexpr std::size_t kQueueJobs = 65536 + kBounceSlots;
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

// Host memory for frames the source would not let the sink hold: slots
// handed out by the producer and returned by the copy thread (SPSC both ways).
class BlockSink::Bounce final : public SlotOwner {
  public:
    Bounce() : memory_(new std::uint8_t[kBounceSlots * kBounceStride]), free_(kBounceSlots) {
        for (std::uint32_t i = 0; i < kBounceSlots; ++i) {
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
        bytes = memory_.get() + std::size_t{slot} * kBounceStride;
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
    for (const Key& k : expected) {
        const MapKey key = map_key(k.group, k.antenna);
        if (prepared_.size() < kMaxAntennas && !prepared_.contains(key)) {
            const std::size_t block_bytes = std::size_t{options_.ring.frames_per_block} *
                                            options_.ring.threads * max_payload_bytes;
            prepared_.emplace(key, std::make_unique<ReservedBlockMemory>(
                                       shared_memory(), options_.ring.blocks, block_bytes));
        }
    }
    // The source leases its frames (the verbs engine): the copy thread, its
    // queue and its bounce slots exist before the first frame, not made by
    // the poll thread when it comes. Started last: it reads prepared_.
    if (mode_ == Mode::undecided) {
        mode_ = Mode::threaded;
        start_copier();
    }
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
    if (auto it = prepared_.find(key); it != prepared_.end()) {
        a.memory = std::move(it->second);
        prepared_.erase(it);
    } else {
        a.memory = std::make_unique<ReservedBlockMemory>(shared_memory(), 0, 0);
    }
    BlockRingOptions ro = options_.ring;
    ro.payload_bytes = payload_bytes;
    // The copy thread waits once per batch (release_all) and hands out the
    // blocks completed in it then; inline, place() waits itself.
    ro.batched = mode_ == Mode::threaded;
    a.ring = std::make_unique<BlockRing>(ro, *a.memory, timing);
    BlockRing* ring = a.ring.get();
    antennas_.emplace(key, std::move(a));
    registry_.emplace_back(k, ring);
    published_.store(registry_.size(), std::memory_order_release);
    return ring;
}

void BlockSink::start_copier() {
    jobs_ = std::make_unique<moodycamel::BlockingReaderWriterQueue<Job>>(kQueueJobs);
    bounce_ = std::make_unique<Bounce>();
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
                // (a receive slot or a bounce slot): read in place.
                ring->place(j.thread, j.index, Bytes(j.payload, j.bytes), j.device, true);
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
    if (second.empty() && frame.hold(Holder::ring)) {
        j.payload = first.data();
        j.device = in_tail ? frame.tail_device : nullptr;
        j.owner = frame.lease->owner;
        j.token = frame.lease->ring_token;
    } else if (on_device) {
        // GPU memory is never read here, and this frame cannot be held.
        ++copy_dropped_;
        return;
    } else {
        std::uint8_t* dst = nullptr;
        if (bytes > kBounceStride || !bounce_->take(j.token, dst)) {
            ++copy_dropped_;
            return;
        }
        std::memcpy(dst, first.data(), first.size());
        if (!second.empty()) {  // (memcpy from a null span is undefined, even of 0 bytes)
            std::memcpy(dst + first.size(), second.data(), second.size());
        }
        j.payload = dst;
        j.owner = bounce_.get();
    }
    if (!jobs_->try_enqueue(j)) {
        j.owner->release({&j.token, 1});
        ++copy_dropped_;
    }
}

void BlockSink::on_frame(const SinkFrame& f, SinkRoute /*route*/) {
    if (!f.payload_captured()) {
        ++copy_dropped_;  // no payload to place (a frame the capture cut short)
        return;
    }
    place(f.frame, *f.packet, *f.header, *f.stream);
}

void BlockSink::place(const Frame& frame, const UdpPacket& packet, const CodifHeader& header,
                      const StreamStats& stream) {
    if (mode_ == Mode::undecided) {
        mode_ = frame.lease != nullptr ? Mode::threaded : Mode::inline_copy;
        if (mode_ == Mode::threaded) {
            start_copier();
        }
    }
    const std::uint32_t id = stream_id(stream.group, stream.antenna);
    if (id >= kMaxAntennas) {
        ++copy_dropped_;  // more streams than rings (the demux's own limit is lower)
        return;
    }
    const std::size_t offset = packet.payload_offset + kCodifHeaderBytes;
    const std::size_t bytes = static_cast<std::size_t>(header.payload_bytes());
    const std::uint64_t index = stream.timing.index(header.seconds, header.frame);
    if (mode_ == Mode::threaded) {
        if (requested_[id] == 0) {
            // The copy thread makes the ring (device memory: never on the
            // poll thread) before it takes this stream's first frame. With
            // no room in the queue this frame is dropped (counted once) and
            // the next one asks again.
            Job create;
            create.stream = id;
            create.create = true;
            create.bytes = static_cast<std::uint32_t>(bytes);
            create.timing = stream.timing;
            create.key = Key{stream.group, stream.antenna};
            if (!jobs_->try_enqueue(create)) {
                ++copy_dropped_;
                return;
            }
            requested_[id] = 1;
        }
        queue(id, frame, offset, bytes, header.threadid, index);
        return;
    }
    if (rings_[id] == nullptr && !failed_.load()) {
        // First frame of the antenna: its ring is sized for this payload (a new
        // antenna allocates once; never per frame).
        scratch_.resize(std::max(scratch_.size(), bytes));
        try {
            rings_[id] = make_ring(Key{stream.group, stream.antenna},
                                   static_cast<std::uint32_t>(bytes), stream.timing);
        } catch (const std::exception& e) {
            fail("block rings (making a ring)", e.what());
        }
    }
    BlockRing* ring = rings_[id];
    Bytes first;
    Bytes second;
    frame.slice(offset, bytes, first, second);
    Bytes payload = first;
    const DeviceMemory* device = offset >= frame.head.size() ? frame.tail_device : nullptr;
    if (!second.empty() && frame.tail_device != nullptr) {
        ++copy_dropped_;  // split payload in GPU memory: not read on this thread
        return;
    }
    if (!second.empty()) {
        // Split at an unexpected place (a VLAN tag the ring was not sized
        // for): join the pieces, the ring wants one payload.
        std::memcpy(scratch_.data(), first.data(), first.size());
        std::memcpy(scratch_.data() + first.size(), second.data(), second.size());
        payload = Bytes(scratch_.data(), bytes);
    }
    if (failed_.load() || ring == nullptr) {
        ++copy_failed_;
        return;
    }
    if (device != nullptr) {
        // Device payload without a lease: no source makes such frames (the
        // verbs engine leases every frame, pcap has no device memory), and
        // this thread may not touch the device. Counted, never read.
        ++copy_dropped_;
        return;
    }
    try {
        ring->place(header.threadid, index, payload, nullptr);
    } catch (const std::exception& e) {
        fail("block rings", e.what());
        ++copy_failed_;
    }
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
    std::uint64_t misses = copy_dropped_ + copy_failed_.load();
    if (const std::uint64_t n = copy_failed_.load(); n > 0) {
        ledger.add_source_counter({"blocks/copy_failed", n, false});
        ledger.add_note(fmt::format(
            "{} frames are in no block: their copy into the rings failed, or came after a "
            "copy that failed",
            n));
    }
    if (copy_dropped_ > 0) {
        ledger.add_source_counter({"blocks/copy_dropped", copy_dropped_, false});
        ledger.add_note(fmt::format(
            "{} frames are in no block: the copy thread could not take them (GPU payload "
            "the capture could not hold, or no bounce slot free)",
            copy_dropped_));
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
