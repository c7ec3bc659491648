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
    if (!plausible(index)) {
        return candidate(index);
    }
    run_length_ = 0;  // the stream is where it was: no restart under way
    return place(index);
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
        // Forget the indices the window slides past; they become the slots of
        // newest_+1 .. index. Once the gap covers the window, clear all of it.
        if (gap + 1 >= kWindow) {
            seen_.fill(0);
        } else {
            // Counted by offset so that index = UINT64_MAX cannot loop forever.
            for (std::uint64_t k = 1; k <= gap + 1; ++k) {
                clear(newest_ + k);
            }
        }
        missing_ += gap;
        newest_ = index;
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

void SequenceTracker::shift(std::int64_t delta) {
    if (!started_ || delta == 0) {
        return;
    }
    const auto moved = [delta](std::uint64_t i) {
        return static_cast<std::uint64_t>(static_cast<std::int64_t>(i) + delta);
    };
    // The window's bits are by index modulo kWindow: rebuilt at the new
    // indices (those older than the window are not held).
    std::array<std::uint64_t, kWindow / 64> seen{};
    const std::uint64_t oldest = newest_ - lowest_ >= kWindow ? newest_ - kWindow + 1 : lowest_;
    for (std::uint64_t i = oldest;; ++i) {
        if (test(i)) {
            const std::uint64_t bit = moved(i) % kWindow;
            seen[bit / 64] |= std::uint64_t{1} << (bit % 64);
        }
        if (i == newest_) {
            break;
        }
    }
    seen_ = seen;
    lowest_ = moved(lowest_);
    newest_ = moved(newest_);
    for (std::size_t i = 0; i < run_length_; ++i) {
        run_[i] = moved(run_[i]);
    }
}

}  // namespace ibvcap
