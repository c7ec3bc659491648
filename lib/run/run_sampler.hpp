// The timeline's seconds of a run (or of a scan of a capture of several):
// the witnesses read at the 1 Hz tick, the lanes' counts and the writers'
// backlog, sampled into the run's Timeline (lib/ledger/timeline.hpp) by the
// run loop (run_loop.cpp). Internal to lib/run/.
//
// A poll thread copies its lane's counts when asked (within 1024 polls,
// lib/ledger/live.hpp), so the loop asks at the tick and samples once every
// copy has come, or after `copy_wait` (half a tick at most): the counts then
// lag the witnesses by milliseconds, not by a window. A lane whose demux
// runs on the loop's thread is read at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "lib/ledger/live.hpp"
#include "lib/ledger/timeline.hpp"
#include "lib/run/run_lanes.hpp"

namespace ibvcap {

class SecondSampler {
  public:
    using Clock = std::chrono::steady_clock;

    explicit SecondSampler(std::chrono::milliseconds copy_wait) : copy_wait_(copy_wait) {}

    // From `start` on, `lanes` lanes: a second's `t` counts from it, and the
    // witnesses sampled are their growth since `base` (their values then;
    // none: the source's start), a scan's share.
    void begin(Clock::time_point start, std::vector<SourceCounter> base, std::size_t lanes);

    // At the tick: with the demux on this thread, the lanes' ledgers read
    // and sampled into `into` now; otherwise their copies asked for (a
    // pending sample whose copies never came sampled first, as it is).
    // Returns whether a sample was taken.
    bool ask(Timeline& into, Clock::time_point now, const RunLanes& lanes,
             std::vector<SourceCounter> witnesses, bool demux_on_loop_thread);
    // Between ticks: the pending sample once every copy has come, or
    // copy_wait has passed. Returns whether it was taken.
    bool collect(Timeline& into, Clock::time_point now, const RunLanes& lanes);
    bool pending() const { return pending_.open; }
    // Once the lanes' frames have stopped: the pending sample, then the last
    // second from the ledgers themselves, so that the timeline's seconds add
    // up to the report's totals.
    void close(Timeline& into, Clock::time_point now, const RunLanes& lanes,
               std::vector<SourceCounter> witnesses);

    // The lanes' last copies, and the last sample's witnesses (the metrics
    // and the pcapng statistics read them).
    const std::vector<LiveView>& views() const { return views_; }
    const std::vector<SourceCounter>& witnesses() const { return witnesses_; }
    const std::vector<SourceCounter>& base() const { return base_; }

  private:
    void sample(Timeline& into, Clock::time_point at, std::vector<SourceCounter> witnesses,
                const RunLanes& lanes);

    std::chrono::milliseconds copy_wait_;
    Clock::time_point start_{};
    std::vector<SourceCounter> base_;
    std::vector<LiveView> views_;
    std::vector<SourceCounter> witnesses_;
    struct Pending {
        bool open = false;
        Clock::time_point at;
        std::vector<SourceCounter> witnesses;
        std::vector<std::uint64_t> copies;  // each lane's copies when asked
    } pending_;
};

}  // namespace ibvcap
