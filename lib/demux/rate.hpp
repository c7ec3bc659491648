// VDIF frame rates (docs/formats.md, "VDIF frame rates"). A VDIF header does
// not say how many frames a second holds, and the sequence index (seconds *
// rate + frame) needs it. Given (--vdif-frames-per-second), it is used as is.
// Otherwise each stream learns it: until its first second ends, the stream is
// tracked at a provisional rate of 2^24 (frame numbers are 24 bits, so the
// order of frames within the second is exact) and no frame of another second
// is placed; when a frame of a later second comes, the rate is the highest
// frame number seen in the first second + 1, and the tracker's indices are
// moved to it (SequenceTracker::shift). Losing the first second's last frames
// would learn too low a rate: a frame number at or past it is then counted
// (vdif_frame_beyond_rate, which fails the verdict) and the report says the
// rate was learned and whether a later whole second confirmed it (its
// highest frame was rate - 1).
//
// The VDIF Transport Protocol's packet sequence numbers are a second witness
// of loss: their span less the packets that came is the packets lost,
// whatever the frame headers say.
#pragma once

#include <cstdint>

#include "lib/ledger/ledger.hpp"

namespace ibvcap {

// A new stream with no rate: provisional rate, watching its first second.
void start_learning(StreamStats& s);

// One frame of a watched stream, before it is placed. Updates what is
// learned; `plausible` is applied to the tracker once the rate is learned.
// Returns false when the frame cannot be placed (its frame number is past the
// learned rate): the caller counts it.
bool watch_rate(StreamStats& s, std::uint32_t seconds, std::uint32_t frame,
                std::uint64_t plausible_periods, std::uint64_t min_plausible_jump);

inline void note_psn(StreamStats& s, std::uint64_t psn) {
    if (s.psn_packets++ == 0) {
        s.psn_lowest = psn;
        s.psn_highest = psn;
        return;
    }
    if (psn < s.psn_lowest) {
        s.psn_lowest = psn;
    }
    if (psn > s.psn_highest) {
        s.psn_highest = psn;
    }
}

}  // namespace ibvcap
