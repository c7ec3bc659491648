// A frame window (issue 45): the span of frame time a run writes, [start,
// stop) in UTC, judged by each frame's own time (its CODIF or VDIF header:
// reference epoch, seconds, frame number), never by when it arrived
// (docs/operations.md, "Observing on a schedule").
//
// The demux turns the window into each stream's frame indices once, when
// the stream registers (window_indices), so a frame is judged by two
// compares of the index it computes anyway. A frame before the window is
// counted `before_window`, one at or after its stop `after_window`: both are
// frames of no stream (class non_codif), neither written nor sequenced. A
// stream's span is the whole window: the frames between the window's first
// frame time and a stream's first frame in it are missing, and so are those
// between its last and the window's end when the run saw the end
// (close_window).
#pragma once

#include <cstdint>
#include <limits>

#include "formats/stream_header.hpp"
#include "lib/core/utc.hpp"

namespace ibvcap {

struct FrameWindow {
    static constexpr std::int64_t kOpen = std::numeric_limits<std::int64_t>::max();
    static constexpr std::int64_t kNoStart = std::numeric_limits<std::int64_t>::min();
    std::int64_t start_ns = 0;     // UTC, ns since 1970 (inclusive); kNoStart: none given
    std::int64_t stop_ns = kOpen;  // UTC, ns since 1970 (exclusive); kOpen: no end
    bool has_start() const { return start_ns != kNoStart; }
    bool has_stop() const { return stop_ns != kOpen; }
};

// A stream's window in its own frame indices (StreamTiming::index): the
// frames lo <= index < hi lie in it. hi is UINT64_MAX for an open window.
// A frame's time is epoch + index * period / frames_per_period seconds, so
// lo is the first index whose time is at or after the start: an edge between
// two frames belongs to the later one.
struct WindowIndices {
    std::uint64_t lo = 0;
    std::uint64_t hi = std::numeric_limits<std::uint64_t>::max();
};
WindowIndices window_indices(const FrameWindow& window, std::uint8_t epoch, std::uint32_t period,
                             std::uint64_t frames_per_period);
// Whether both edges fall on whole seconds (a VDIF stream still learning its
// rate can only be judged by its seconds then).
bool whole_seconds(const FrameWindow& window);

}  // namespace ibvcap
