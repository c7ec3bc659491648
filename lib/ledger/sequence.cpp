#include "lib/ledger/sequence.hpp"

namespace ibvcap {

SequenceTracker::Kind SequenceTracker::observe_general(std::uint64_t index) {
    ++received_;
    if (!started_) {
        started_ = true;
        lowest_ = newest_ = index;
        set(index);
        return Kind::first;
    }
    if (windowed_ && !first_recorded_ && received_ - implausible_ > 1) {
        // The inline path placed the stream's first frames: from the anchor.
        first_recorded_ = true;
        first_received_ = lowest_;
    }
    if (!plausible(index)) {
        // With the anchor: a first frame far from the window's start is
        // taken only when kRestartRun frames agree on where the stream is
        // (candidate), so one corrupted header cannot open a huge gap.
        return candidate(index);
    }
    run_length_ = 0;  // the stream is where it was: no restart under way
    const Kind kind = place(index);
    if (windowed_ && kind != Kind::duplicate && (!first_recorded_ || index < first_received_)) {
        first_recorded_ = true;
        first_received_ = index;
    }
    return kind == Kind::duplicate ? repeated(index) : kind;
}

void SequenceTracker::anchor(std::uint64_t lowest) {
    if (started_ || lowest == 0) {
        return;  // (a window from the epoch's start: the first frame starts it)
    }
    started_ = true;
    windowed_ = true;
    first_recorded_ = false;
    lowest_ = lowest;
    newest_ = lowest - 1;  // nothing received: [lowest, newest] is empty
}

void SequenceTracker::extend_to(std::uint64_t newest) {
    if (!started_ || newest <= newest_) {
        return;
    }
    missing_ += newest - newest_;
    slide_to(newest);
}

void SequenceTracker::slide_to(std::uint64_t index) {
    // Forget the indices the window slides past; they become the slots of
    // newest_+1 .. index. Once the slide covers the window, clear all of it.
    const std::uint64_t slide = index - newest_;
    if (slide >= kWindow) {
        seen_.fill(0);
    } else {
        // Counted by offset so that index = UINT64_MAX cannot loop forever.
        for (std::uint64_t k = 1; k <= slide; ++k) {
            clear(newest_ + k);
        }
    }
    newest_ = index;
}

// A duplicate: alone, or one of a run that numbers the stream again.
SequenceTracker::Kind SequenceTracker::repeated(std::uint64_t index) {
    // In a row: the reception before this one was the run's last (no
    // store on the in-order path, which every frame takes).
    if (repeat_length_ > 0 && index == repeat_first_ + repeat_length_ &&
        received_ == repeat_at_ + 1) {
        ++repeat_length_;
    } else {
        repeat_first_ = index;
        repeat_length_ = 1;
    }
    repeat_at_ = received_;
    if (repeat_length_ < kRestartRun || newest_ - repeat_first_ < kRestartRun) {
        return Kind::duplicate;
    }
    // The stream is numbered again from repeat_first_: a new segment there,
    // its frames so far counted in it.
    spanned_ += newest_ - lowest_ + 1;
    last_restart_jump_ =
        -static_cast<std::int64_t>(newest_ - repeat_first_);  // backwards, by at most the jump
    ++restarts_;
    duplicates_ -= kRestartRun;
    seen_.fill(0);
    lowest_ = repeat_first_;
    newest_ = index;
    for (std::uint64_t i = lowest_; i <= newest_; ++i) {
        set(i);
    }
    repeat_length_ = 0;
    return Kind::restart;
}

// A frame too far from the newest to be the stream's next: not placed. It may
// be the start, or the continuation, of a run at a new position.
SequenceTracker::Kind SequenceTracker::candidate(std::uint64_t index) {
    ++implausible_;
    const bool continues = run_length_ > 0 && index > run_[run_length_ - 1] &&
                           index - run_[run_length_ - 1] <= plausible_jump_;
    if (!continues) {
        run_length_ = 0;
    }
    run_[run_length_++] = index;
    if (run_length_ < kRestartRun) {
        return Kind::implausible;
    }
    if (anchor_pending()) {
        // kRestartRun frames agree where a stream with nothing placed yet
        // is: it started late in its window. Not a restart: its span still
        // starts at the anchor, and the frames before run_[0] are missing.
        implausible_ -= kRestartRun;
        for (std::size_t i = 0; i < kRestartRun; ++i) {
            place(run_[i]);  // the first opens the gap from the anchor; the rest follow it
        }
        first_recorded_ = true;
        first_received_ = run_[0];
        run_length_ = 0;
        return Kind::gap;
    }
    // kRestartRun frames agree: the stream restarted at run_[0]. The old
    // segment is closed; the run's frames are placed in the new one.
    spanned_ += newest_ - lowest_ + 1;
    last_restart_jump_ = static_cast<std::int64_t>(run_[0] - newest_);
    ++restarts_;
    implausible_ -= kRestartRun;
    seen_.fill(0);
    lowest_ = newest_ = run_[0];
    set(run_[0]);
    for (std::size_t i = 1; i < kRestartRun; ++i) {
        place(run_[i]);  // each is ahead of the one before: in order or a gap
    }
    run_length_ = 0;
    return Kind::restart;
}

SequenceTracker::Kind SequenceTracker::place(std::uint64_t index) {
    if (index > newest_) {
        const std::uint64_t gap = index - newest_ - 1;
        missing_ += gap;
        slide_to(index);
        set(index);
        return gap == 0 ? Kind::in_order : Kind::gap;
    }
    // index <= newest_: a duplicate, or a late frame.
    if (newest_ - index >= kWindow) {
        ++out_of_order_;
        ++too_late_;
        return Kind::late;
    }
    if (index < lowest_) {
        // Earlier than anything seen: the stream's start moves back, and the
        // frames between the new start and the old one are now missing.
        missing_ += lowest_ - index - 1;
        lowest_ = index;
        ++out_of_order_;
        set(index);
        return Kind::late;
    }
    if (test(index)) {
        ++duplicates_;
        return Kind::duplicate;
    }
    // A late frame filling a gap counted as missing when a later frame arrived.
    --missing_;
    ++out_of_order_;
    set(index);
    return Kind::late;
}

// Every held index i to moved(i): the window's bits (by index modulo
// kWindow) rebuilt at the new indices, those that fall out of the new
// window forgotten.
template <typename Moved>
void SequenceTracker::move_indices(const Moved& moved) {
    std::array<std::uint64_t, kWindow / 64> seen{};
    const std::uint64_t oldest = newest_ - lowest_ >= kWindow ? newest_ - kWindow + 1 : lowest_;
    const std::uint64_t newest = moved(newest_);
    for (std::uint64_t i = oldest;; ++i) {
        if (test(i) && newest - moved(i) < kWindow) {
            const std::uint64_t bit = moved(i) % kWindow;
            seen[bit / 64] |= std::uint64_t{1} << (bit % 64);
        }
        if (i == newest_) {
            break;
        }
    }
    seen_ = seen;
    lowest_ = moved(lowest_);
    newest_ = newest;
    first_received_ = moved(first_received_);
    for (std::size_t i = 0; i < run_length_; ++i) {
        run_[i] = moved(run_[i]);
    }
    repeat_first_ = moved(repeat_first_);
}

template <typename Moved>
void SequenceTracker::move_anchor(const Moved& moved) {
    // Nothing placed: only the anchor (and a restart run under way) moves.
    lowest_ = moved(lowest_);
    newest_ = lowest_ - 1;
    for (std::size_t i = 0; i < run_length_; ++i) {
        run_[i] = moved(run_[i]);
    }
}

void SequenceTracker::rescale(std::uint64_t from, std::uint64_t to) {
    if (!started_ || from == 0 || to <= from) {
        return;
    }
    const auto moved = [from, to](std::uint64_t i) { return i / from * to + i % from; };
    if (anchor_pending()) {
        move_anchor(moved);
        return;
    }
    // Each period boundary the segment spans opens (to - from) new slots.
    missing_ += (newest_ / from - lowest_ / from) * (to - from);
    // Moved indices only spread out: whatever lands in the new window was in
    // the old one.
    move_indices(moved);
}

void SequenceTracker::shift(std::int64_t delta) {
    if (!started_ || delta == 0) {
        return;
    }
    const auto moved = [delta](std::uint64_t i) {
        return static_cast<std::uint64_t>(static_cast<std::int64_t>(i) + delta);
    };
    if (anchor_pending()) {
        move_anchor(moved);
        return;
    }
    move_indices(moved);
}

}  // namespace ibvcap
