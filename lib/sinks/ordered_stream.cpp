// One stream's frames into an ordered file (lib/sinks/ordered_stream.hpp).
#include "lib/sinks/ordered_stream.hpp"

#include <algorithm>
#include <cstring>

#include "formats/fill_frame.hpp"

namespace ibvcap {

std::uint64_t OrderedStream::max_jump_of(const StreamStats& stream) {
    const std::uint64_t jump = stream.sequence.plausible_jump();
    return jump != 0 ? jump
                     : std::max<std::uint64_t>(4 * stream.timing.frames_per_period,
                                               SequenceTracker::kWindow);
}

OrderedStream::OrderedStream(Writer& writer, Writer::OutputId output, const StreamStats& stream,
                             std::uint32_t window)
    : writer_(writer),
      output_(output),
      format_(stream.format),
      timing_(stream.timing),
      frame_bytes_(stream.frame_bytes),
      window_(window, stream.frame_bytes, max_jump_of(stream)),
      pattern_(stream.frame_bytes) {
    fill_payload(pattern_);
}

void OrderedStream::write(const SinkFrame& f) {
    const StreamStats& s = *f.stream;
    if (s.timing.frames_per_period != timing_.frames_per_period ||
        s.timing.period != timing_.period) [[unlikely]] {
        retime(s);
    }
    const StreamHeader& h = *f.header;
    const std::size_t offset = f.packet->payload_offset + h.prefix_bytes;
    const std::size_t len = f.packet->payload_bytes - h.prefix_bytes;
    if (template_bytes_ == 0 && h.header_bytes <= template_.size() && h.header_bytes <= len) {
        // The stream's first frame: its header is every fill's. (Headers are
        // host memory whatever the source: Frame::head.)
        const MutableBytes t(template_.data(), h.header_bytes);
        if (f.frame.gather(offset, t) && fill_header_bytes(format_, t) == h.header_bytes) {
            template_bytes_ = h.header_bytes;
        }
    }
    frame_ = &f.frame;
    offset_ = offset;
    len_ = len;
    timestamp_ns_ = f.frame.timestamp_ns;
    window_.offer(timing_.index(h.seconds, h.frame), *this);
    frame_ = nullptr;
}

// The stream's arithmetic changed (a VDIF rate learned): what the window
// holds goes out in the old one, and it goes on in the new.
void OrderedStream::retime(const StreamStats& s) {
    rebase_window(window_, timing_, s, *this);
    timing_ = s.timing;
}

void rebase_window(ReorderWindow& window, const StreamTiming& old, const StreamStats& stream,
                   ReorderWindow::Output& out) {
    const StreamTiming now = stream.timing;
    window.rebase(
        [&](std::uint64_t index) {
            std::uint32_t seconds = 0;
            std::uint32_t frame = 0;
            old.position(index, seconds, frame);
            return now.index(seconds, frame);
        },
        OrderedStream::max_jump_of(stream), out);
}

void OrderedStream::close() {
    window_.close(*this);
}

void OrderedStream::write_arrived(std::uint64_t /*index*/) {
    writer_.write_frame(output_, {}, *frame_, offset_, len_);
}

void OrderedStream::write_held(std::uint64_t /*index*/, Bytes frame) {
    const Bytes pieces[] = {frame};
    writer_.write(output_, pieces, timestamp_ns_);
}

void OrderedStream::write_fill(std::uint64_t index) {
    const std::size_t header = template_bytes_;
    if (header == 0 || header > frame_bytes_) {
        // No header to make it of (the first frame's could not be read):
        // counted as a record not written, so the output still reconciles.
        writer_.refuse(output_,
                       "fill frames of an ordered file: the stream's first frame header could not "
                       "be read to make them of");
        return;
    }
    std::uint32_t seconds = 0;
    std::uint32_t frame = 0;
    timing_.position(index, seconds, frame);
    std::memcpy(fill_header_.data(), template_.data(), header);
    mark_fill_header(format_, MutableBytes(fill_header_.data(), header), seconds, frame);
    const Bytes pieces[] = {Bytes(fill_header_.data(), header),
                            Bytes(pattern_.data(), frame_bytes_ - header)};
    writer_.write(output_, pieces, timestamp_ns_);
}

std::size_t OrderedStream::copy_arrived(MutableBytes slot) {
    if (frame_ == nullptr || len_ > slot.size()) {
        return 0;
    }
    // False when the bytes are device memory (GPU payload: --ordered is
    // refused with it): the window counts the frame unheld.
    return frame_->gather(offset_, slot.first(len_)) ? len_ : 0;
}

}  // namespace ibvcap
