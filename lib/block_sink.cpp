#include "lib/block_sink.hpp"

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
constexpr std::size_t kReleaseBatch = 64;
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
        options_.memory = make_host_block_memory;
    }
    registry_.reserve(kMaxAntennas);
}

BlockSink::~BlockSink() {
    stop_copying();
}

void BlockSink::start_copier() {
    jobs_ = std::make_unique<moodycamel::BlockingReaderWriterQueue<Job>>(kQueueJobs);
    bounce_ = std::make_unique<Bounce>();
    copier_ = std::thread([this] { copier(); });
}

void BlockSink::fail(const char* where, const char* what) {
    if (!failed_.exchange(true) && options_.faults != nullptr) {
        options_.faults->report(where, what);
    }
}

void BlockSink::copier() {
    std::vector<SlotOwner*> owners;
    std::vector<std::uint64_t> tokens;
    std::vector<BlockRing*> touched;
    owners.reserve(kReleaseBatch);
    tokens.reserve(kReleaseBatch);
    touched.reserve(kMaxAntennas);
    // A slot goes back only once its copy has landed: every ring that took a
    // copy since the last release waits for its memory's queue first. After
    // a failure nothing is copied or waited for (the memory is unusable, a
    // CUDA error may be sticky); the slots still go back, so the NIC's ring
    // refills while the run stops.
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
        Job j;
        if (!jobs_->wait_dequeue_timed(j, std::chrono::milliseconds(1))) {
            release_all();
            if (copier_stop_.load() && jobs_->size_approx() == 0) {
                return;
            }
            continue;
        }
        owners.push_back(j.owner);
        tokens.push_back(j.token);
        if (failed_.load()) {
            ++copy_failed_;
        } else {
            try {
                j.ring->place(j.thread, j.index, Bytes(j.payload, j.bytes), j.device);
                if (std::find(touched.begin(), touched.end(), j.ring) == touched.end()) {
                    touched.push_back(j.ring);
                }
            } catch (const std::exception& e) {
                fail("block copy thread", e.what());
                ++copy_failed_;  // its slot stayed absent (BlockRing::place)
            }
        }
        if (tokens.size() >= kReleaseBatch || jobs_->size_approx() == 0) {
            release_all();
        }
    }
}

void BlockSink::queue(BlockRing& ring, const Frame& frame, std::size_t offset, std::size_t bytes,
                      std::uint16_t thread, std::uint64_t index) {
    Bytes first;
    Bytes second;
    frame.slice(offset, bytes, first, second);
    Job j;
    j.ring = &ring;
    j.index = index;
    j.thread = thread;
    j.bytes = static_cast<std::uint32_t>(bytes);
    const bool in_tail = offset >= frame.head.size();
    const bool on_device = frame.tail_device != nullptr && (in_tail || !second.empty());
    if (second.empty() && frame.hold()) {
        j.payload = first.data();
        j.device = in_tail ? frame.tail_device : nullptr;
        j.owner = frame.lease->owner;
        j.token = frame.lease->token;
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

FrameObserver BlockSink::observer() {
    return [this](const Frame& f, const UdpPacket& p, const CodifHeader& h, const StreamStats& s) {
        on_frame(f, p, h, s);
    };
}

void BlockSink::on_frame(const Frame& frame, const UdpPacket& packet, const CodifHeader& header,
                         const StreamStats& stream) {
    const std::pair<std::uint64_t, std::uint32_t> key{
        (std::uint64_t{stream.group.ip} << 16) | stream.group.port, stream.antenna};
    auto it = antennas_.find(key);
    if (it == antennas_.end()) {
        // First frame of the antenna: its ring is sized for this payload (a new
        // antenna allocates once; never per frame).
        Antenna a;
        BlockRingOptions ro = options_.ring;
        ro.payload_bytes = static_cast<std::uint32_t>(header.payload_bytes());
        a.memory = options_.memory();
        a.ring = std::make_unique<BlockRing>(ro, *a.memory, stream.timing);
        if (registry_.size() >= kMaxAntennas) {
            return;  // the demux's own antenna limit is lower; never reached
        }
        scratch_.resize(std::max<std::size_t>(scratch_.size(), ro.payload_bytes));
        it = antennas_.emplace(key, std::move(a)).first;
        registry_.emplace_back(Key{stream.group, stream.antenna}, it->second.ring.get());
        published_.store(registry_.size(), std::memory_order_release);
    }
    const std::size_t offset = packet.payload_offset + kCodifHeaderBytes;
    const std::size_t bytes = static_cast<std::size_t>(header.payload_bytes());
    const std::uint64_t index = stream.timing.index(header.seconds, header.frame);
    if (mode_ == Mode::undecided) {
        mode_ = frame.lease != nullptr ? Mode::threaded : Mode::inline_copy;
        if (mode_ == Mode::threaded) {
            start_copier();
        }
    }
    if (mode_ == Mode::threaded) {
        queue(*it->second.ring, frame, offset, bytes, header.threadid, index);
        return;
    }
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
    if (failed_.load()) {
        ++copy_failed_;
        return;
    }
    try {
        it->second.ring->place(header.threadid, index, payload, device);
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
    const auto it = antennas_.find({(std::uint64_t{group.ip} << 16) | group.port, antenna});
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
