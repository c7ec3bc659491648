// Fuzz target: the per-frame path with a frame window (lib/demux/window.hpp,
// --start-at/--stop-at): the window's edges are hostile too.
//
// Input: LE64 start, LE64 length (ns; the window is [start, start + length)
// from the start of reference epoch 48, 2024-01-01, where the replay seeds'
// frames lie; length 0: no stop), then a fuzz_demux input (its configuration
// and frames).
//
// Checks: every frame counted once; the ledger reconciles while the frames
// come and once the window has closed (its end seen); no stream's first or
// last frame lies outside the window; and one corrupted header cannot make a
// count absurd: a stream's `missing` is at most the window's frames for each
// of its segments.
#include <cstdint>
#include <limits>
#include <vector>

#include "fuzz_common.hpp"
#include "fuzz_demux_check.hpp"
#include "fuzz_entries.hpp"
#include "lib/demux/window.hpp"

namespace {
constexpr std::size_t kMaxFrames = 1024;
constexpr std::int64_t kEpoch48 = 1704067200LL * 1'000'000'000LL;  // 2024-01-01T00:00:00Z
}  // namespace

int ibvcap_fuzz_window(const std::uint8_t* data, std::size_t size) {
    using namespace ibvcap;
    fuzz::Reader in(data, size);
    // Offsets of at most ±2^62 ns from the epoch: the sum cannot overflow.
    const auto start_offset = static_cast<std::int64_t>(in.u64() >> 1) - (std::int64_t{1} << 62);
    const auto length = static_cast<std::int64_t>(in.u64() >> 2);
    FrameWindow window;
    window.start_ns = kEpoch48 + start_offset;
    window.stop_ns = length == 0 ? FrameWindow::kOpen : window.start_ns + length;
    DemuxOptions options = fuzz::read_demux_config(in);
    options.window = window;
    Ledger ledger(options.max_streams);
    Demux demux(options, ledger);
    std::uint64_t frames = 0;
    fuzz::feed_chunks(in, kMaxFrames, [&](const Frame& f) {
        demux.on_frame(f);
        ++frames;
    });
    const auto check = [&](bool closed) {
        const Totals t = ledger.totals();
        FUZZ_CHECK(t.packets == frames);
        FUZZ_CHECK(t.packets == t.codif + t.malformed + t.non_codif);
        FUZZ_CHECK(t.outside_window <= t.packets);
        FUZZ_CHECK(ledger.reason_count(Reason::before_window) +
                       ledger.reason_count(Reason::after_window) <=
                   t.non_codif);
        FUZZ_CHECK(ledger.reconciles());
        for (const StreamStats& s : ledger.streams()) {
            const WindowIndices w =
                window_indices(window, s.epoch, s.timing.period, s.timing.frames_per_period);
            const SequenceTracker& q = s.sequence;
            if (q.received() > q.implausible()) {
                FUZZ_CHECK(s.timing.index(s.first.seconds, s.first.frame) >= w.lo);
                FUZZ_CHECK(w.hi == std::numeric_limits<std::uint64_t>::max() ||
                           s.timing.index(s.last.seconds, s.last.frame) < w.hi);
            }
            if (w.hi != std::numeric_limits<std::uint64_t>::max() && w.lo > 0 && w.hi > w.lo) {
                FUZZ_CHECK(q.missing() <= (q.restarts() + 1) * (w.hi - w.lo));
            }
            if (closed) {
                FUZZ_CHECK(s.window_head_missing + s.window_tail_missing <= q.missing());
            }
        }
    };
    check(false);
    demux.close_window(true);
    check(true);
    return 0;
}

IBVCAP_FUZZ_TARGET(ibvcap_fuzz_window)
