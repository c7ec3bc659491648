// Per-stream sequence tracking (docs/formats.md, "How a stream's frames are counted").
//
// Frames are numbered by their absolute index (CodifTiming::index). The
// tracker remembers which of the last kWindow indices behind the newest frame
// arrived, so a late frame that fills an earlier gap is told apart from a
// duplicate, and the missing count stays exact under reordering:
//   missing      = indices in [lowest, newest] never received
//   duplicates   = receptions of an index already received
//   out_of_order = first receptions of an index lower than one already received
// Every reception is exactly one of: new and advancing (first, in_order, gap),
// new and late, or a duplicate.
// A frame later than the window cannot be classified; it is counted in
// `too_late` (and out_of_order) and leaves `missing` unchanged, so missing may
// then overstate, never understate, the loss.
//
// With a plausible jump set (set_plausible_jump), a frame further than that
// from the newest, ahead or behind, is not placed: it is `implausible` (a
// corrupt header) and moves nothing. kRestartRun such frames in a row, each
// ahead of the one before by at most the plausible jump and with no plausible
// frame between them, are a stream that restarted elsewhere: the tracker
// starts a new segment there (`restarts`, `last_restart_jump`), those frames
// are counted in it and no longer implausible. The jump itself is neither
// missing nor received: it is the restart.
//
// A sender that numbers its frames again (its clock stepped back) sends
// duplicates in a row, each the successor of the one before. kRestartRun of
// them, starting at least kRestartRun behind the newest (a re-sent burst of
// the last few frames is duplicates), and with no new frame between them,
// are a restart backwards: the new segment starts at the first of them, which
// are counted in it, not as duplicates (last_restart_jump < 0).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace ibvcap {

class SequenceTracker {
  public:
    static constexpr std::uint64_t kWindow = 8192;  // frames; about 1 ms at 8 Mpps
    // Frames in a row at a new position that make a restart (docs/formats.md,
    // "How a stream's frames are counted").
    static constexpr std::size_t kRestartRun = 16;

    // implausible: not placed (yet); restart: this frame completed a run of
    // kRestartRun that started a new segment.
    enum class Kind : std::uint8_t { first, in_order, gap, duplicate, late, implausible, restart };

    // The largest jump from the newest index, ahead or behind, that is taken
    // as the stream's own; 0 (the default): no limit.
    void set_plausible_jump(std::uint64_t frames) { plausible_jump_ = frames; }
    std::uint64_t plausible_jump() const { return plausible_jump_; }

    // Record one received frame; returns how it was classified. Inline for
    // the common case, the stream's next frame (always plausible, moves the
    // window by one: what place() does for a gap of 0); everything else in
    // observe_general().
    Kind observe(std::uint64_t index) {
        if (started_ && index > newest_ && index - newest_ == 1) {
            ++received_;
            run_length_ = 0;
            newest_ = index;
            set(index);  // the slot newest_ + 1 reuses, cleared and set at once
            return Kind::in_order;
        }
        return observe_general(index);
    }

    // Move every index the tracker holds by `delta` (a stream whose rate was
    // provisional: lib/demux/rate.hpp), as if each frame had arrived with
    // its index + delta. Not per frame: once per stream.
    void shift(std::int64_t delta);
    // Re-place every index the tracker holds at a higher rate (a VDIF rate
    // learned too low, raised: lib/demux/rate.hpp): index i = p * from + f
    // becomes p * to + f, as if each frame had arrived at the new rate. The
    // frame numbers [from, to) of every period from the lowest to the
    // newest's are new slots, missing until they come. Requires to > from
    // and every held index's f < from. Not per frame: O(kWindow).
    void rescale(std::uint64_t from, std::uint64_t to);

    // A frame window (lib/demux/window.hpp): the stream's span starts at
    // `lowest`, received or not. Before its first frame: the tracker starts
    // there with nothing received. A first frame within the plausible jump
    // of it is placed, the indices before it missing; one further (a stream
    // that starts late in the window) is placed once kRestartRun frames in
    // a row agree on where the stream is (as a restart would be), the
    // indices from the anchor to the first of them missing, and no restart
    // counted. Not per frame: once per stream.
    void anchor(std::uint64_t lowest);
    // Anchored: the lowest index received (the window's lowest() may never
    // have come); lowest() when nothing has been placed.
    // Whether anchor() started the tracker (a window that starts at or
    // before the stream's epoch anchors nothing: its first frame starts it).
    bool anchored() const { return windowed_; }
    std::uint64_t first_received() const { return first_recorded_ ? first_received_ : lowest_; }
    // The window's end was seen: its span runs to `newest`, the indices
    // after the newest received missing (a stream that stopped early).
    // Nothing when the newest is already there or beyond. Once per stream.
    void extend_to(std::uint64_t newest);

    bool started() const { return started_; }
    std::uint64_t lowest() const { return lowest_; }
    std::uint64_t newest() const { return newest_; }
    std::uint64_t received() const { return received_; }
    std::uint64_t missing() const { return missing_; }
    std::uint64_t duplicates() const { return duplicates_; }
    std::uint64_t out_of_order() const { return out_of_order_; }
    std::uint64_t too_late() const { return too_late_; }
    std::uint64_t implausible() const { return implausible_; }
    std::uint64_t restarts() const { return restarts_; }
    // New segment's first index minus the old newest index, of the latest
    // restart (negative: backwards); 0 when there was none.
    std::int64_t last_restart_jump() const { return last_restart_jump_; }

    // Distinct frames placed plus missing equals the spans [lowest, newest] of
    // the segments unless a frame arrived later than the window allowed to
    // classify.
    bool reconciles() const {
        return !started_ || (too_late_ > 0 || received_ - implausible_ - duplicates_ + missing_ ==
                                                  spanned_ + newest_ - lowest_ + 1);
    }

  private:
    Kind observe_general(std::uint64_t index);
    Kind place(std::uint64_t index);
    // newest_ moves to index (> newest_), the slots it passes cleared.
    void slide_to(std::uint64_t index);
    bool plausible(std::uint64_t index) const {
        const std::uint64_t d = index > newest_ ? index - newest_ : newest_ - index;
        return plausible_jump_ == 0 || d <= plausible_jump_;
    }
    Kind candidate(std::uint64_t index);
    Kind repeated(std::uint64_t index);
    template <typename Moved>
    void move_indices(const Moved& moved);  // sequence.cpp: shift and rescale
    template <typename Moved>
    void move_anchor(const Moved& moved);  // the same, with nothing placed after the anchor
    // Anchored, and nothing placed since (every frame so far implausible).
    bool anchor_pending() const { return windowed_ && received_ == implausible_; }

    bool test(std::uint64_t index) const {
        const std::uint64_t bit = index % kWindow;
        return (seen_[bit / 64] >> (bit % 64)) & 1u;
    }
    void set(std::uint64_t index) {
        const std::uint64_t bit = index % kWindow;
        seen_[bit / 64] |= std::uint64_t{1} << (bit % 64);
    }
    void clear(std::uint64_t index) {
        const std::uint64_t bit = index % kWindow;
        seen_[bit / 64] &= ~(std::uint64_t{1} << (bit % 64));
    }

    // What the in-order path (observe) and Demux::accept touch per frame,
    // first: 41 bytes, in one cache line after StreamStats' first (issue 30).
    std::uint64_t newest_ = 0;
    std::uint64_t received_ = 0;
    std::uint64_t lowest_ = 0;
    std::uint64_t missing_ = 0;
    std::size_t run_length_ = 0;  // of run_; with the counters: every frame writes it
    bool started_ = false;
    bool windowed_ = false;  // anchor() was called: first_received_ is kept
    bool first_recorded_ = false;
    std::uint64_t first_received_ = 0;
    std::uint64_t duplicates_ = 0;
    std::uint64_t out_of_order_ = 0;
    std::uint64_t too_late_ = 0;
    std::uint64_t implausible_ = 0;
    std::uint64_t restarts_ = 0;
    std::int64_t last_restart_jump_ = 0;
    std::uint64_t spanned_ = 0;  // frames spanned by the segments before the current one
    std::uint64_t plausible_jump_ = 0;
    // Duplicates in a row, each the successor of the one before, that may be
    // a restart backwards: the first and how many.
    std::uint64_t repeat_first_ = 0;
    std::size_t repeat_length_ = 0;
    std::uint64_t repeat_at_ = 0;  // received_ at the run's last
    // The run of implausible frames that may be a restart (indices, in arrival order).
    std::array<std::uint64_t, kRestartRun> run_{};
    std::array<std::uint64_t, kWindow / 64> seen_{};
};

}  // namespace ibvcap
