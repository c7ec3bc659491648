#include "lib/demux/rate.hpp"

#include <algorithm>

#include "formats/vdif.hpp"

namespace ibvcap {

namespace {
// The fastest Ethernet port there is: 800 Gb/s (ConnectX-8). A frame
// number no such link could carry in one second is no stream's.
constexpr std::uint64_t kFastestLinkBitsPerSecond = 800'000'000'000;
// Per datagram on the wire besides its frame: preamble and start (8),
// Ethernet header (14), IPv4 (20), UDP (8), frame check (4), gap (12).
constexpr std::uint64_t kDatagramOverheadBytes = 66;

void set_rate(StreamStats& s, std::uint64_t rate, std::uint64_t plausible_periods,
              std::uint64_t min_plausible_jump) {
    s.timing.frames_per_period = rate;
    s.sequence.set_plausible_jump(std::max(plausible_periods * rate, min_plausible_jump));
}
}  // namespace

std::uint64_t max_frames_per_second(std::uint32_t frame_bytes) {
    return kFastestLinkBitsPerSecond / (8 * (std::uint64_t{frame_bytes} + kDatagramOverheadBytes));
}

void start_learning(StreamStats& s, std::uint64_t min_plausible_jump) {
    s.rate = StreamStats::Rate::learning;
    s.rate_watch = true;
    s.timing.frames_per_period = kVdifMaxFramesPerSecond;
    // While learning, a frame of another second is never placed (it would
    // count the provisional second's unused frame numbers as missing), and
    // neither is a frame number far from the others of the first second:
    // one corrupt number (0xFFFFFF) must not set the rate.
    s.sequence.set_plausible_jump(std::min(kVdifMaxFramesPerSecond - 1, min_plausible_jump));
}

void start_given(StreamStats& s) {
    s.rate_watch = true;
}

bool watch_rate(StreamStats& s, std::uint32_t seconds, std::uint32_t frame,
                std::uint64_t plausible_periods, std::uint64_t min_plausible_jump) {
    const std::uint64_t rate = s.timing.frames_per_period;
    if (s.rate == StreamStats::Rate::given) {
        if (frame + std::uint64_t{1} >= rate) {
            s.rate_watch = false;  // reached: the rate given is the stream's
            return frame < rate;
        }
        s.learn_max_frame = std::max(s.learn_max_frame, frame);
        return true;
    }
    if (frame >= max_frames_per_second(s.frame_bytes)) {
        ++s.rate_outliers;
        return false;
    }
    if (s.rate == StreamStats::Rate::learning) {
        if (!s.sequence.started()) {
            s.learn_seconds = seconds;
            s.learn_max_frame = frame;
            return true;
        }
        if (seconds <= s.learn_seconds) {
            // The first second (its highest frame is noted once placed:
            // placed_while_learning), or an earlier one, which the tracker
            // finds implausible.
            return true;
        }
        // A later second: the first one is over.
        const std::uint64_t learned = std::uint64_t{s.learn_max_frame} + 1;
        // Every placed frame is of learn_seconds: its index moves by
        // learn_seconds * (learned - rate).
        const auto delta = static_cast<std::int64_t>(std::uint64_t{s.learn_seconds} * learned) -
                           static_cast<std::int64_t>(std::uint64_t{s.learn_seconds} * rate);
        s.sequence.shift(delta);
        set_rate(s, learned, plausible_periods, min_plausible_jump);
        s.rate = StreamStats::Rate::learned;
        s.rate_first_learned = learned;
        s.learn_seconds = seconds;
        s.learn_max_frame = 0;
        return watch_rate(s, seconds, frame, plausible_periods, min_plausible_jump);
    }
    // Learned, not yet confirmed: a second that ended at rate - 1 confirms it.
    if (seconds > s.learn_seconds) {
        if (std::uint64_t{s.learn_max_frame} + 1 == rate) {
            s.rate_confirmed = true;
            s.rate_watch = false;
            return frame < rate;
        }
        s.learn_seconds = seconds;
        s.learn_max_frame = 0;
    }
    if (frame >= rate) {
        // A lower bound until confirmed: a frame past it raises it, unless
        // it is a lone outlier (as far past the stream's highest frame as
        // the tracker would not place).
        const std::uint64_t highest =
            std::max<std::uint64_t>(seconds == s.learn_seconds ? s.learn_max_frame : 0, rate - 1);
        if (frame - highest > min_plausible_jump) {
            ++s.rate_outliers;
            return false;
        }
        const std::uint64_t raised = std::uint64_t{frame} + 1;
        s.sequence.rescale(rate, raised);
        set_rate(s, raised, plausible_periods, min_plausible_jump);
        ++s.rate_raises;
    }
    if (seconds == s.learn_seconds) {
        s.learn_max_frame = std::max(s.learn_max_frame, frame);
    }
    return true;
}

}  // namespace ibvcap
