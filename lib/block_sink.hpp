// Feeds CODIF frames from the demultiplexer into one block ring per antenna of
// each group (lib/block_ring.hpp): the consumer-facing end of the payload path.
// Two groups carry different data (sub-bands) of the same antenna, so each
// (group, antenna) has its own ring.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "lib/block_ring.hpp"
#include "lib/demux.hpp"

namespace ibvcap {

struct BlockSinkOptions {
    BlockRingOptions ring;  // payload_bytes comes from each antenna's first frame
    // Memory for one antenna's ring: device memory in the GPU build, host
    // memory in the stand-in.
    std::function<std::unique_ptr<BlockMemory>()> memory;
};

class BlockSink {
  public:
    explicit BlockSink(BlockSinkOptions options);

    // The Demux observer: place the frame's payload in its antenna's ring.
    FrameObserver observer();
    void flush();

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
};

}  // namespace ibvcap
