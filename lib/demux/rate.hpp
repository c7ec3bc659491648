// VDIF frame rates (docs/formats.md, "VDIF frame rates"). A VDIF header does
// not say how many frames a second holds, and the sequence index (seconds *
// rate + frame) needs it.
//
// Given (--vdif-frames-per-second), it is used as is; the stream's highest
// frame number is watched until one reaches the rate, and a stream of more
// than one second whose frames never do is named in the verdict (the rate
// given may be wrong: the missing count assumes it).
//
// Otherwise each stream learns it. Until its first second ends, the stream
// is tracked at a provisional rate of 2^24 (frame numbers are 24 bits, so
// the order of frames within the second is exact) and no frame of another
// second is placed; when a frame of a later second comes, the rate is the
// highest frame number placed in the first second + 1, and the tracker's
// indices are moved to it (SequenceTracker::shift).
//
// A learned rate is a lower bound until a later whole second confirms it
// (its highest frame was rate - 1): the first second may have lost its last
// frames. Until then a frame numbered at or past the rate raises it to that
// number + 1 (SequenceTracker::rescale re-places what was placed; an
// ordered file's window follows: lib/sinks/ordered_stream.hpp), and the
// report says from what and how often (rate_revised). No frame the stream
// could hold is left out while the rate is unconfirmed.
//
// A frame number cannot set or raise a rate when no rate could hold it: past
// what the frame's length allows on the fastest link (max_frames_per_second),
// or a lone outlier, further past the stream's highest frame than the
// tracker's plausible jump. While learning such a frame is not placed (the
// tracker finds it implausible: the first second's plausible jump is
// min_plausible_jump, not 2^24); after, it is counted vdif_frame_beyond_rate
// (StreamStats::rate_outliers). Once confirmed, a frame past the rate is
// vdif_frame_beyond_rate as before.
//
// The VDIF Transport Protocol's packet sequence numbers are a second witness
// of loss: tracked like frame indices (lib/ledger/sequence.hpp), their
// missing numbers are datagrams lost, whatever the frame headers say (a
// sender that re-sends a frame number, a header that lies).
#pragma once

#include <cstdint>

#include "lib/ledger/ledger.hpp"

namespace ibvcap {

// The most frames a second a stream of `frame_bytes`-byte frames could send
// on the fastest link there is (800 Gb/s), with each datagram's Ethernet,
// IPv4 and UDP overhead, preamble and gap. A frame numbered at or past it is
// no stream's.
std::uint64_t max_frames_per_second(std::uint32_t frame_bytes);

// A new stream with no rate: provisional rate, watching its first second.
// `min_plausible_jump`: the tracker's plausible jump while learning.
void start_learning(StreamStats& s, std::uint64_t min_plausible_jump);
// A new stream with a given rate: its frame numbers are watched until one
// reaches the rate.
void start_given(StreamStats& s);

// One frame of a watched stream, before it is placed. Updates what is
// learned, raising a learned rate that is not yet confirmed; `plausible` is
// applied to the tracker whenever the rate changes. Returns false when the
// frame cannot be placed (its frame number is past a rate that is given or
// confirmed, or no rate could hold it): the caller counts it.
bool watch_rate(StreamStats& s, std::uint32_t seconds, std::uint32_t frame,
                std::uint64_t plausible_periods, std::uint64_t min_plausible_jump);

// A frame of a stream still learning, after the tracker placed it (or not:
// `placed` false for an implausible one): a placed frame of the first second
// may be its highest.
inline void placed_while_learning(StreamStats& s, std::uint32_t seconds, std::uint32_t frame,
                                  bool placed) {
    if (placed && seconds == s.learn_seconds && frame > s.learn_max_frame) {
        s.learn_max_frame = frame;
    }
}

// One VTP sequence number of stream `s`, through the stream's own tracker of
// them (made when the stream was registered; its plausible jump keeps one
// corrupt number from making the count absurd).
inline void note_psn(StreamStats& s, SequenceTracker& psns, std::uint64_t psn) {
    ++s.psn_packets;
    psns.observe(psn);
    s.psn_missing = psns.missing();
    s.psn_duplicates = psns.duplicates();
}

}  // namespace ibvcap
