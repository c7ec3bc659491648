// The one interface through which frames leave the demultiplexer: the
// per-antenna files, the run's pcap file, the GPU block rings and the -v line
// are all FrameSinks. The demux classifies and accounts; it knows nothing of
// files, names or formats. A sink is registered with the demux (Demux::add_sink)
// either for every frame the source delivers (before classification: the pcap
// file keeps what was on the wire, a stream's frame or not) or for the frames accepted
// into a stream; sinks are called in the order they were added.
//
// A per-stream sink is told once, when a stream is registered, and returns
// what it wants back with each of that stream's frames (its output files, its
// ring): the lookup by name is done once per stream, never per frame.
#pragma once

#include <functional>

#include "formats/packet.hpp"
#include "formats/stream_header.hpp"
#include "lib/core/frame.hpp"
#include "lib/ledger/ledger.hpp"

namespace ibvcap {

// What a sink learns about one frame. Views, valid only during the call.
struct SinkFrame {
    const Frame& frame;
    // The parsed Ethernet/IPv4/UDP headers; null when the frame is not a
    // well-formed UDP/IPv4 frame (an every-frame sink still gets it).
    const UdpPacket* packet = nullptr;
    // The frame's header in the format-neutral view (formats/stream_header.hpp:
    // CODIF or VDIF, whichever the stream speaks) and the stream the frame was
    // accepted into; null for an every-frame sink (it is called before
    // classification).
    const StreamHeader* header = nullptr;
    const StreamStats* stream = nullptr;

    // Whether the whole UDP payload was captured: false for a frame the
    // capture cut after its header (a headers-only pcap read back), whose
    // payload a sink must not read.
    bool payload_captured() const {
        return packet != nullptr && std::uint64_t{packet->payload_offset} + packet->payload_bytes <=
                                        frame.captured_bytes();
    }
};

// What a sink gets back with each frame of a stream (its own pointer, opaque
// to the demux).
using SinkRoute = void*;

// When a sink is called: for every frame the source delivers, or for the
// frames accepted into a stream.
enum class SinkScope { every_frame, streams };

class FrameSink {
  public:
    virtual ~FrameSink() = default;
    // A stream's first accepted frame (registration time: may allocate and
    // open outputs). Called on the source's thread, before that frame's
    // on_frame. Every-frame sinks are never asked.
    virtual SinkRoute open_stream(const StreamStats& /*stream*/) { return nullptr; }
    // Per frame, on the source's thread: no allocation, no blocking I/O.
    // `route` is what open_stream returned for the frame's stream (null for
    // an every-frame sink).
    virtual void on_frame(const SinkFrame& frame, SinkRoute route) = 0;
};

class FrameSink;
struct SinkEntry {
    FrameSink* sink = nullptr;
    SinkScope scope = SinkScope::streams;
};

// Called for every frame accepted into a stream (the -v line, tests).
using FrameObserver =
    std::function<void(const Frame&, const UdpPacket&, const StreamHeader&, const StreamStats&)>;

// A FrameObserver as a per-stream sink.
class ObserverSink final : public FrameSink {
  public:
    explicit ObserverSink(FrameObserver observer) : observer_(std::move(observer)) {}
    void on_frame(const SinkFrame& f, SinkRoute /*route*/) override {
        observer_(f.frame, *f.packet, *f.header, *f.stream);
    }

  private:
    FrameObserver observer_;
};

}  // namespace ibvcap
