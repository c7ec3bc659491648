#include "lib/demux/rate.hpp"

#include <algorithm>

#include "formats/vdif.hpp"

namespace ibvcap {

void start_learning(StreamStats& s) {
    s.rate = StreamStats::Rate::learning;
    s.rate_watch = true;
    s.timing.frames_per_period = kVdifMaxFramesPerSecond;
    // While learning, a frame of another second is never placed (it would
    // count the provisional second's unused frame numbers as missing): the
    // first second's frames are at most 2^24 - 1 apart.
    s.sequence.set_plausible_jump(kVdifMaxFramesPerSecond - 1);
}

bool watch_rate(StreamStats& s, std::uint32_t seconds, std::uint32_t frame,
                std::uint64_t plausible_periods, std::uint64_t min_plausible_jump) {
    if (s.rate == StreamStats::Rate::learning) {
        if (!s.sequence.started()) {
            s.learn_seconds = seconds;
            s.learn_max_frame = frame;
            return true;
        }
        if (seconds == s.learn_seconds) {
            s.learn_max_frame = std::max(s.learn_max_frame, frame);
            return true;
        }
        if (seconds < s.learn_seconds) {
            return true;  // an earlier second: the tracker finds it implausible
        }
        // A later second: the first one is over.
        const std::uint64_t rate = std::uint64_t{s.learn_max_frame} + 1;
        const std::uint64_t old_rate = s.timing.frames_per_period;
        // Every placed frame is of learn_seconds: its index moves by
        // learn_seconds * (rate - old_rate).
        const auto delta = static_cast<std::int64_t>(std::uint64_t{s.learn_seconds} * rate) -
                           static_cast<std::int64_t>(std::uint64_t{s.learn_seconds} * old_rate);
        s.sequence.shift(delta);
        s.timing.frames_per_period = rate;
        s.rate = StreamStats::Rate::learned;
        s.sequence.set_plausible_jump(std::max(plausible_periods * rate, min_plausible_jump));
        s.learn_seconds = seconds;
        s.learn_max_frame = frame;
        return frame < rate;
    }
    // Learned, not yet confirmed: watch each second's highest frame (those
    // past the rate included); a second that ended at rate - 1 confirms it.
    if (seconds == s.learn_seconds) {
        s.learn_max_frame = std::max(s.learn_max_frame, frame);
    } else if (seconds > s.learn_seconds) {
        if (std::uint64_t{s.learn_max_frame} + 1 == s.timing.frames_per_period) {
            s.rate_confirmed = true;
            s.rate_watch = false;
        } else {
            s.learn_seconds = seconds;
            s.learn_max_frame = frame;
        }
    }
    return frame < s.timing.frames_per_period;
}

}  // namespace ibvcap
