#include "lib/block_sink.hpp"

#include <fmt/format.h>

#include <cstring>

namespace ibvcap {

BlockSink::BlockSink(BlockSinkOptions options) : options_(std::move(options)) {
    if (!options_.memory) {
        options_.memory = make_host_block_memory;
    }
    registry_.reserve(kMaxAntennas);
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
    Bytes first;
    Bytes second;
    frame.slice(offset, bytes, first, second);
    Bytes payload = first;
    if (!second.empty()) {
        // Split at an unexpected place (a VLAN tag the ring was not sized
        // for): join the pieces, the ring wants one payload.
        std::memcpy(scratch_.data(), first.data(), first.size());
        std::memcpy(scratch_.data() + first.size(), second.data(), second.size());
        payload = Bytes(scratch_.data(), bytes);
    }
    it->second.ring->place(header.threadid, stream.timing.index(header.seconds, header.frame),
                           payload);
}

void BlockSink::flush() {
    for (auto& [key, a] : antennas_) {
        a.ring->flush();
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
        if (const auto lost = s.ring_full + s.too_late + s.bad_thread + s.bad_length; lost > 0) {
            ledger.add_note(
                fmt::format("{}: {} frames are in no block (ring full {}, too late "
                            "{}, thread out of range {}, other length {})",
                            name, lost, s.ring_full, s.too_late, s.bad_thread, s.bad_length));
        }
    }
}

}  // namespace ibvcap
