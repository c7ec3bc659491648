// One stream's frames into an ordered file (--ordered; docs/formats.md,
// "Ordered files and fill frames"): the stream's reorder window
// (lib/sinks/reorder.hpp) over a Writer output. The frame that is next is
// written from where it lies (held by the writer like any frame: no copy
// here); a frame held in the window and a fill frame are copied into the
// writer's buffer. Fill frames are the stream's own header (taken from its
// first frame) marked as fill (formats/fill_frame.hpp) and the fill pattern.
//
// A VDIF stream that learns its rate (lib/demux/rate.hpp) changes its
// position arithmetic once: the window then writes what it holds, as at the
// end, and goes on from the position after the last one written in the new
// arithmetic (ReorderWindow::rebase), so nothing is filled across the change
// that was not missing.
//
// Poll thread only. The constructor allocates (the window's W slots, the
// pattern), and the one change of arithmetic; nothing else does.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "formats/stream_header.hpp"
#include "lib/core/frame.hpp"
#include "lib/sinks/reorder.hpp"
#include "lib/sinks/sink.hpp"
#include "lib/sinks/writer.hpp"

namespace ibvcap {

// A stream's arithmetic changed (a VDIF rate learned): `window` writes
// what it holds in the `old` arithmetic, to `out`, and goes on in the
// stream's new one (ReorderWindow::rebase), with the stream's new plausible
// jump. The ordered files' and the PSRDADA rings' windows alike.
void rebase_window(ReorderWindow& window, const StreamTiming& old, const StreamStats& stream,
                   ReorderWindow::Output& out);

class OrderedStream final : private ReorderWindow::Output {
  public:
    // The stream's format, record length (frame header + payload), position
    // arithmetic and plausible jump (a frame further away restarts the run)
    // are taken from `stream` as it opens.
    OrderedStream(Writer& writer, Writer::OutputId output, const StreamStats& stream,
                  std::uint32_t window);

    // One frame of the stream (its record: the datagram less any VTP prefix).
    void write(const SinkFrame& f);
    // The end of the stream: what the window holds, in order, fills between.
    void close();

    const ReorderWindow::Counts& counts() const { return window_.counts(); }
    Writer::OutputId output() const { return output_; }

    // The largest distance a frame may jump without restarting the run: the
    // stream's plausible jump, or, where the tracker has no limit, the
    // larger of 4 periods and the tracker's window.
    static std::uint64_t max_jump_of(const StreamStats& stream);

  private:
    void retime(const StreamStats& stream);
    void write_arrived(std::uint64_t index) override;
    void write_held(std::uint64_t index, Bytes frame) override;
    void write_fill(std::uint64_t index) override;
    std::size_t copy_arrived(MutableBytes slot) override;

    Writer& writer_;
    Writer::OutputId output_;
    StreamFormat format_;
    StreamTiming timing_;
    std::size_t frame_bytes_;
    ReorderWindow window_;
    // The frame being offered (during write()), and the latest arrival's
    // time (the records written at its arrival take it: -G rotation).
    const Frame* frame_ = nullptr;
    std::size_t offset_ = 0;
    std::size_t len_ = 0;
    std::uint64_t timestamp_ns_ = 0;
    // The fill frames' header: the stream's first frame's (0 bytes until
    // then), and the one being built; their payload, the fill pattern.
    std::array<std::uint8_t, kStreamHeaderMaxBytes> template_{};
    std::size_t template_bytes_ = 0;
    std::array<std::uint8_t, kStreamHeaderMaxBytes> fill_header_{};
    std::vector<std::uint8_t> pattern_;
};

}  // namespace ibvcap
