#include "lib/demux/window.hpp"

#include <algorithm>
#include <chrono>

namespace ibvcap {

namespace {

constexpr std::int64_t kNsPerSecond = 1'000'000'000;
// 128 bits: a frame index times a rate times 1e9 overflows 64 (GCC's
// extension; __extension__ keeps -Wpedantic quiet).
__extension__ typedef __int128 Wide;

// floor(a / b) for b > 0, a of either sign.
Wide floor_div(Wide a, Wide b) {
    const Wide q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

// The first index whose time is at or after `t_ns` (0 when t is before the
// epoch), saturated at UINT64_MAX.
std::uint64_t first_index_at(std::int64_t t_ns, std::uint8_t epoch, std::uint32_t period,
                             std::uint64_t frames_per_period) {
    const Wide rel = Wide{t_ns} - Wide{reference_epoch_unix_s(epoch)} * kNsPerSecond;
    if (rel <= 0) {
        return 0;
    }
    // index * period * 1e9 >= rel * frames_per_period
    const Wide den = Wide{std::max<std::uint32_t>(period, 1)} * kNsPerSecond;
    const Wide num = rel * Wide{std::max<std::uint64_t>(frames_per_period, 1)};
    const Wide idx = -floor_div(-num, den);  // ceil
    constexpr Wide kMax = std::numeric_limits<std::uint64_t>::max();
    return static_cast<std::uint64_t>(std::min(idx, kMax));
}

}  // namespace

WindowIndices window_indices(const FrameWindow& window, std::uint8_t epoch, std::uint32_t period,
                             std::uint64_t frames_per_period) {
    WindowIndices w;
    w.lo = first_index_at(window.start_ns, epoch, period, frames_per_period);
    if (window.has_stop()) {
        w.hi = first_index_at(window.stop_ns, epoch, period, frames_per_period);
    }
    return w;
}

bool whole_seconds(const FrameWindow& window) {
    return window.start_ns % kNsPerSecond == 0 &&
           (!window.has_stop() || window.stop_ns % kNsPerSecond == 0);
}

}  // namespace ibvcap
