// The run's per-second timeline and a cause for every gap
// (docs/observability.md, "The timeline and a cause for every gap").
//
// Once a second the run loop samples the lanes' counts (LiveView) and the
// witnesses' values (SourceCounter: growth since the start, each with the
// LossCause it stands for); the timeline keeps each second's growth. At the
// end the run loop samples once more from the final ledgers, so the seconds
// add up to the report's totals exactly.
//
// A gap is a stream's `missing` growing in a second. It is seen when the
// stream's next frame arrives, which may be in the second after the frames
// were lost, so its cause is looked for in that second and the one before:
// the first of kCausePriority whose witness grew there, or "upstream" (no
// witness on this host moved: the sender or the network lost them). Frames
// that turn up late (out of order) take back from the stream's newest gaps,
// so the gaps of a stream add up to its `missing`.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "lib/ledger/ledger.hpp"
#include "lib/ledger/live.hpp"
#include "lib/ledger/presence.hpp"

namespace ibvcap {

// The order causes are named in when several witnesses moved in a gap's
// window: the most specific, or the one that explains the others, first
// (a link down also stops the ring; a held ring shows as out_of_buffer).
inline constexpr std::array kCausePriority{
    LossCause::port_down,       LossCause::gpu_xid,       LossCause::completion_errors,
    LossCause::ring_hold_limit, LossCause::port_discards, LossCause::receive_queue,
    LossCause::kernel,
};

struct TimelineSecond {
    double t = 0;  // seconds since the start, at the end of this window
    std::uint64_t packets = 0;
    std::uint64_t bytes = 0;
    std::uint64_t missing = 0;  // frames in gaps opened in this window
    std::uint64_t filled = 0;   // frames of earlier gaps that arrived late in it
    std::uint64_t backlog = 0;  // the writers' backlog (bytes) at the window's end
    // Witnesses that grew in this window: name → growth.
    std::vector<std::pair<std::string, std::uint64_t>> counters;
};

struct Gap {
    double t = 0;        // the window's end, seconds since the start
    std::string stream;  // "239.17.0.1:36001 10.0.0.11 thread 0"
    std::uint64_t missing = 0;
    LossCause cause = LossCause::upstream;
    std::vector<std::string> witnesses;  // what moved in the window (empty: upstream)
};

class Timeline {
  public:
    // At most `max_gaps` gaps are listed; the rest count in the totals by
    // cause and in gaps_not_listed().
    Timeline() = default;
    explicit Timeline(std::size_t max_gaps) : max_gaps_(max_gaps) {}

    // `t`: seconds since the start. `lanes`: each lane's counts (streams of
    // a lane keep their order between samples). `witnesses`: growth since the
    // start. The first sample is the baseline for the growth.
    // `backlog`: the writers' queued bytes at `t`.
    void sample(double t, std::span<const LiveView> lanes, std::span<const SourceCounter> witnesses,
                std::uint64_t backlog = 0);
    // The writers' dropped records (they are not sequence gaps: the frames
    // were captured, then not written), counted under LossCause::writer.
    void set_write_drops(std::uint64_t records) { write_drops_ = records; }
    // Frames PSRDADA rings had no room for (their readers were behind),
    // counted under LossCause::consumer; not sequence gaps either.
    void set_consumer_drops(std::uint64_t frames) { consumer_drops_ = frames; }

    const std::vector<TimelineSecond>& seconds() const { return seconds_; }
    // The gaps listed, late arrivals taken back (a gap filled whole is gone).
    std::vector<Gap> gaps() const;
    // Gaps opened past max_gaps (counted when opened, also if filled later).
    std::uint64_t gaps_not_listed() const { return unlisted_gaps_; }
    // Frames lost, by cause: gaps (missing frames) by their cause, and the
    // writers' drops under `writer`.
    std::array<std::uint64_t, kLossCauseCount> lost_by_cause() const;
    // The names of the witnesses sampled, with their cause.
    const std::map<std::string, LossCause>& witness_causes() const { return causes_; }
    // Each stream's frames present and missing per bin of windows, with the
    // gaps' causes: the run page's presence map.
    const Presence& presence() const { return presence_; }

  private:
    struct StreamState {
        std::uint64_t missing = 0;
        std::vector<std::size_t> gaps;  // indexes into gaps_, oldest first
        // Missing frames in gaps past max_gaps, by cause (take-backs come
        // from these first: they are the stream's newest).
        std::array<std::uint64_t, kLossCauseCount> unlisted{};
        std::size_t presence_row = kNoRow;  // its row in presence_
    };
    static constexpr std::size_t kNoRow = static_cast<std::size_t>(-1);
    void attribute(Gap& gap, std::size_t window) const;
    void take_back(StreamState& s, std::uint64_t frames);

    std::size_t max_gaps_ = 10000;
    std::uint64_t last_packets_ = 0;
    std::uint64_t last_bytes_ = 0;
    std::map<std::pair<std::size_t, std::size_t>, StreamState> streams_;  // (lane, index)
    std::map<std::string, std::uint64_t> last_witness_;
    std::map<std::string, LossCause> causes_;
    std::vector<TimelineSecond> seconds_;
    std::vector<Gap> gaps_;
    std::uint64_t unlisted_gaps_ = 0;
    std::uint64_t write_drops_ = 0;
    std::uint64_t consumer_drops_ = 0;
    Presence presence_;
};

// "239.17.0.1:36001 10.0.0.11 thread 0"
std::string stream_label(const LiveStream& s);

}  // namespace ibvcap
