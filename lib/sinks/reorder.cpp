// One stream's reorder window (lib/sinks/reorder.hpp). Runs on the poll
// thread, per frame: no allocation after the constructor.
#include "lib/sinks/reorder.hpp"

#include <algorithm>

namespace ibvcap {

ReorderWindow::ReorderWindow(std::size_t window, std::size_t slot_bytes, std::uint64_t max_jump)
    : window_(std::max<std::size_t>(window, 1)),
      slot_bytes_(slot_bytes),
      max_jump_(std::max<std::uint64_t>(max_jump, window_)),
      slots_(window_),
      // Not zeroed: a slot's pages are touched when a frame is first held in it.
      bytes_(new std::uint8_t[window_ * slot_bytes_]),
      as_frame_((window_ + 63) / 64, 0) {}

ReorderWindow::Outcome ReorderWindow::offer(std::uint64_t index, Output& out) {
    ++counts_.offered;
    if (!started_) {
        begin(index, out);
        return started_ ? Outcome::held : Outcome::unheld;
    }
    const bool ahead = index >= next_;
    const std::uint64_t distance = ahead ? index - next_ : next_ - index;
    if (distance > max_jump_) {
        // Not the stream's own distance: the run ends here and another
        // starts at this frame (no fills across the jump).
        flush(out);
        ++counts_.restarts;
        begin(index, out);
        return started_ ? Outcome::held : Outcome::unheld;
    }
    if (!ahead) {
        if (!primed_ && high_ - index < window_) {
            // Before the run's first write: it still goes first.
            const Outcome o = hold(index, out);
            if (o == Outcome::held) {
                next_ = index;
            }
            return o;
        }
        if (primed_ && distance <= window_ && written_as_frame(index)) {
            ++counts_.duplicates;
            return Outcome::duplicate;
        }
        ++counts_.too_late;
        return Outcome::too_late;
    }
    if (distance >= window_) {
        advance(index - window_ + 1, out);
    }
    if (held_at(index)) {
        ++counts_.duplicates;
        return Outcome::duplicate;
    }
    if (index == next_) {
        // (Before the run's first write `next_` is held: not here.)
        out.write_arrived(index);
        ++counts_.written;
        mark_written(index, true);
        ++next_;
        high_ = std::max(high_, index);
        drain(out);
        return Outcome::written;
    }
    return hold(index, out);
}

void ReorderWindow::close(Output& out) {
    flush(out);
}

void ReorderWindow::rebase(const std::function<std::uint64_t(std::uint64_t)>& map,
                           std::uint64_t max_jump, Output& out) {
    max_jump_ = std::max<std::uint64_t>(max_jump, window_);
    if (!started_) {
        return;  // nothing held or written: the next frame starts the run
    }
    flush(out);
    const std::vector<std::uint64_t> old = as_frame_;
    const std::uint64_t old_next = next_;
    std::fill(as_frame_.begin(), as_frame_.end(), 0);
    next_ = map(old_next - 1) + 1;
    high_ = next_ - 1;
    for (std::uint64_t k = 1; k <= std::min<std::uint64_t>(window_, old_next); ++k) {
        const std::uint64_t bit = (old_next - k) % window_;
        const std::uint64_t moved = map(old_next - k);
        if (((old[bit / 64] >> (bit % 64)) & 1u) != 0 && moved < next_ &&
            next_ - moved <= window_) {
            mark_written(moved, true);
        }
    }
}

void ReorderWindow::begin(std::uint64_t index, Output& out) {
    started_ = true;
    primed_ = false;
    next_ = index;
    high_ = index;
    std::fill(as_frame_.begin(), as_frame_.end(), 0);
    if (hold(index, out) != Outcome::held) {
        started_ = false;  // nothing held: the next frame starts the run
    }
}

ReorderWindow::Outcome ReorderWindow::hold(std::uint64_t index, Output& out) {
    Slot& s = slot(index);
    std::uint8_t* at = bytes_.get() + (index % window_) * slot_bytes_;
    const std::size_t bytes = out.copy_arrived(MutableBytes(at, slot_bytes_));
    if (bytes == 0) {
        ++counts_.unheld;
        return Outcome::unheld;
    }
    s.index = index;
    s.bytes = static_cast<std::uint32_t>(std::min(bytes, slot_bytes_));
    s.full = true;
    ++held_;
    high_ = std::max(high_, index);
    return Outcome::held;
}

void ReorderWindow::advance(std::uint64_t target, Output& out) {
    while (next_ < target) {
        if (held_at(next_)) {
            write_slot(slot(next_), out);
        } else {
            write_fill(out);
        }
        ++next_;
    }
    primed_ = true;
    drain(out);
}

void ReorderWindow::drain(Output& out) {
    while (held_ > 0 && held_at(next_)) {
        write_slot(slot(next_), out);
        ++next_;
    }
}

void ReorderWindow::flush(Output& out) {
    while (held_ > 0) {
        if (held_at(next_)) {
            write_slot(slot(next_), out);
        } else {
            write_fill(out);
        }
        ++next_;
    }
    primed_ = true;
}

void ReorderWindow::write_slot(Slot& s, Output& out) {
    const std::uint8_t* at = bytes_.get() + (s.index % window_) * slot_bytes_;
    out.write_held(s.index, Bytes(at, s.bytes));
    s.full = false;
    --held_;
    ++counts_.written;
    mark_written(s.index, true);
}

void ReorderWindow::write_fill(Output& out) {
    out.write_fill(next_);
    ++counts_.fills;
    mark_written(next_, false);
}

void ReorderWindow::mark_written(std::uint64_t index, bool frame) {
    const std::uint64_t bit = index % window_;
    const std::uint64_t mask = std::uint64_t{1} << (bit % 64);
    if (frame) {
        as_frame_[bit / 64] |= mask;
    } else {
        as_frame_[bit / 64] &= ~mask;
    }
}

bool ReorderWindow::written_as_frame(std::uint64_t index) const {
    const std::uint64_t bit = index % window_;
    return ((as_frame_[bit / 64] >> (bit % 64)) & 1u) != 0;
}

}  // namespace ibvcap
