// Feeds CODIF frames from the demultiplexer into one block ring per antenna
// (lib/block_ring.hpp): the consumer-facing end of the payload path.
#pragma once

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

    // The ring of an antenna (nullptr before its first frame).
    BlockRing* ring(std::uint32_t antenna);
    std::vector<std::uint32_t> antennas() const;
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
    std::map<std::uint32_t, Antenna> antennas_;
    std::vector<std::uint8_t> scratch_;  // a payload that straddles the two pieces
};

}  // namespace ibvcap
