// One stream's reorder window (--ordered; docs/formats.md, "Ordered files and
// fill frames"): the stream's frames leave in index order (StreamTiming::index
// of their seconds and frame), each index exactly once, a frame that never
// came as a fill frame. Pure logic: what is written, and when, goes to an
// Output the caller implements (lib/sinks/file_sinks.cpp writes through the
// Writer); tested alone in test/test_reorder.cpp.
//
// The window is W frames: [next, next + W), next being the lowest index not
// yet written. A frame that arrives
//   - at `next`, with nothing held there, is written at once, as it is (no
//     copy), and so is every held frame that follows it without a gap;
//   - within the window, ahead of a gap, is copied into a slot of the
//     stream's buffer (W slots of the stream's frame length, made with the
//     window: nothing is allocated per frame) and held;
//   - W or more ahead of `next` moves the window up to end at it: every index
//     that leaves the window is written in order, a held frame as held, one
//     that never came as a fill; then the held frames that follow without a
//     gap, then the frame itself when it is next (it is held otherwise);
//   - behind `next` is not written: a duplicate when its index was written as
//     a frame within the last W indices, else too late (it was written as a
//     fill, or is older than W indices: then it is not known which, and it
//     is counted too late); a frame whose index is held is a duplicate too.
// At close() the held frames are written in order, with fills between them.
//
// A run's start: the first frame (and the first after a restart) is held, not
// written, and so are the frames after it, until one arrives W or more ahead
// of the lowest held: so a frame that arrives before its predecessors still
// goes first (as DiFX's vdifmux starts at the lowest frame among the first it
// sorts, difx/difx libraries/vdifio/src/vdifmux.c). Until then a frame
// behind the lowest held is held too when the held frames still span less
// than W (too late otherwise).
//
// Hostile indices (a corrupt header, a sender that restarted): a frame more
// than `max_jump` ahead of `next` or behind it does not fill the distance (a
// header 2^40 frames ahead would otherwise write 2^40 fills): the run ends
// (the held frames are written in order with fills between them, as at close)
// and a new run starts at that frame; `restarts` counts it. So the fills
// written for one frame's arrival are at most max_jump (the file sink passes
// the sequence tracker's plausible jump, lib/ledger/sequence.hpp: the same
// distance past which the ledger takes a frame as implausible). The frame
// that restarts is kept (it starts the new run), so one corrupt header costs
// the file one stray frame and two jumps in time (there and back), and the
// counts still add up: nothing is dropped for it.
//
// Counts: every frame offered is exactly one of written, duplicate, too late
// or unheld (its bytes could not be copied into a slot), or still held; the
// file holds written + fills records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "formats/bytes.hpp"

namespace ibvcap {

class ReorderWindow {
  public:
    // Where the window's frames go, in index order. Called during offer()
    // and close() only.
    class Output {
      public:
        // The frame being offered, as it is: it is the next index.
        virtual void write_arrived(std::uint64_t index) = 0;
        // A frame held in a slot (valid during the call only).
        virtual void write_held(std::uint64_t index, Bytes frame) = 0;
        // A fill frame for an index that never came.
        virtual void write_fill(std::uint64_t index) = 0;
        // Copy the frame being offered into `slot` (the stream's frame
        // length); the bytes copied, 0 when they cannot be (then the frame is
        // counted unheld and not written).
        virtual std::size_t copy_arrived(MutableBytes slot) = 0;

      protected:
        ~Output() = default;
    };

    // What happened to a frame offered.
    enum class Outcome : std::uint8_t { written, held, duplicate, too_late, unheld };

    struct Counts {
        std::uint64_t offered = 0;
        std::uint64_t written = 0;     // frames written (at once or from a slot)
        std::uint64_t fills = 0;       // fill frames written
        std::uint64_t duplicates = 0;  // not written: the index was written or held already
        std::uint64_t too_late = 0;    // not written: behind the window
        std::uint64_t unheld = 0;      // not written: its bytes could not be copied to a slot
        std::uint64_t restarts = 0;    // runs ended by a frame more than max_jump away
        // Records the output holds.
        std::uint64_t records() const { return written + fills; }
        // Frames offered and not written (once nothing is held).
        std::uint64_t dropped() const { return duplicates + too_late + unheld; }
    };

    // `window` frames (at least 1), slots of `slot_bytes` (the stream's frame
    // length), `max_jump` frames (raised to the window when smaller: a frame
    // inside the window never restarts the run). Allocates the slots.
    ReorderWindow(std::size_t window, std::size_t slot_bytes, std::uint64_t max_jump);

    // One frame of the stream, at `index`.
    Outcome offer(std::uint64_t index, Output& out);
    // The end of the stream: every held frame written, in order, fills between.
    void close(Output& out);
    // The stream's position arithmetic changed (a VDIF stream that learned
    // its rate, lib/demux/rate.hpp): `map` takes an index of the old one to
    // the new. What is held is written as at close(); the run then goes on at
    // the position after the last one written, mapped, so the next frame is
    // written at once if it follows it and a gap to it is filled. The last W
    // positions written are mapped too (a duplicate of one is still one).
    // `max_jump` replaces the old. Once per stream: may allocate.
    void rebase(const std::function<std::uint64_t(std::uint64_t)>& map, std::uint64_t max_jump,
                Output& out);

    const Counts& counts() const { return counts_; }
    std::size_t held() const { return held_; }
    std::size_t window() const { return window_; }
    std::size_t slot_bytes() const { return slot_bytes_; }
    std::uint64_t max_jump() const { return max_jump_; }
    // The lowest index not yet written (while held: the lowest held, before
    // the run's first write). Meaningless before the first frame.
    std::uint64_t next() const { return next_; }

  private:
    struct Slot {
        std::uint64_t index = 0;
        std::uint32_t bytes = 0;
        bool full = false;
    };
    void begin(std::uint64_t index, Output& out);
    Outcome hold(std::uint64_t index, Output& out);
    // Writes every index below `target` (held or fill), then what follows
    // without a gap.
    void advance(std::uint64_t target, Output& out);
    void drain(Output& out);
    void write_slot(Slot& slot, Output& out);
    void write_fill(Output& out);
    void flush(Output& out);
    Slot& slot(std::uint64_t index) { return slots_[index % window_]; }
    bool held_at(std::uint64_t index) const {
        const Slot& s = slots_[index % window_];
        return s.full && s.index == index;
    }
    void mark_written(std::uint64_t index, bool frame);
    bool written_as_frame(std::uint64_t index) const;

    std::size_t window_;
    std::size_t slot_bytes_;
    std::uint64_t max_jump_;
    bool started_ = false;
    bool primed_ = false;  // the run has written something
    std::uint64_t next_ = 0;
    std::uint64_t high_ = 0;  // the highest index held or written in this run
    std::size_t held_ = 0;
    Counts counts_;
    std::vector<Slot> slots_;
    std::unique_ptr<std::uint8_t[]> bytes_;  // window_ × slot_bytes_, not zeroed
    // One bit per index of [next - W, next): written as a frame (1) or a fill (0).
    std::vector<std::uint64_t> as_frame_;
};

}  // namespace ibvcap
