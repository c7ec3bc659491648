// Which frames of each stream were present, when, and why the others were
// not: the data of the run page's presence map (docs/observability.md, "The
// run page"; the report's `presence`, docs/formats.md).
//
// The timeline feeds it once a window (the run loop's tick, about a second):
// each stream's frames present in the window (its packets' growth less its
// duplicates'), the frames of the gaps opened in it with their cause, and the
// late frames that filled earlier gaps, taken back from the stream's newest
// cells as the timeline takes them back from its newest gaps. So each row's
// cells add up to the stream's present frames and its `missing`.
//
// Windows are kept in at most kMaxBins bins: when a run outgrows them, pairs
// of bins merge and a bin spans twice as many windows (1, 2, 4, ...), so a
// 24-hour run at one tick a second keeps 338 bins of 256 windows. A cell is
// 10 bytes (its counts saturate at 2^32 - 1; the row's totals are exact):
// 2,400 streams hold at most 12 MiB. Nothing here runs on a poll thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "lib/ledger/ledger.hpp"
#include "lib/ledger/live.hpp"

namespace ibvcap {

class Presence {
  public:
    static constexpr std::size_t kMaxBins = 512;

    struct Cell {
        std::uint32_t present = 0;
        std::uint32_t missing = 0;
        std::uint16_t causes = 0;  // bit c: frames of a gap of LossCause c
    };
    struct Row {
        std::string stream;  // stream_label(): "239.17.0.1:36001 10.0.0.11 thread 0"
        Endpoint group;
        std::uint32_t antenna = 0;
        std::uint16_t thread = 0;
        std::uint64_t present = 0;  // exact, whatever the cells saturated at
        std::uint64_t missing = 0;
        std::vector<Cell> cells;  // one per bin, up to the last bin it was touched in
        // The stream's counts at the last window (their growth is the window's).
        std::uint64_t last_packets = 0;
        std::uint64_t last_duplicates = 0;
    };

    // A window ends at `t` (seconds since the start): the streams' figures
    // that follow belong to it. The first call also fixes `started_at`.
    void begin_window(double t, double started_at_unix);
    // A new stream's row (the timeline keeps its index with the stream).
    std::size_t add_row(const LiveStream& s);
    // Row `row`'s stream in the current window: its counts now,
    // frames of gaps opened in the window (with their cause) and frames
    // taken back from earlier gaps by late arrivals.
    void stream(std::size_t row, const LiveStream& s, std::uint64_t opened, LossCause cause,
                std::uint64_t taken_back);

    double started_at() const { return started_at_; }
    std::size_t windows_per_bin() const { return windows_per_bin_; }
    // Each bin's end, seconds since the start (the last window's end in it).
    const std::vector<double>& bin_ends() const { return bin_ends_; }
    const std::vector<Row>& rows() const { return rows_; }

  private:
    Cell& cell(Row& row);
    void halve();

    double started_at_ = 0;
    std::size_t windows_ = 0;  // windows begun
    std::size_t windows_per_bin_ = 1;
    std::vector<double> bin_ends_;
    std::vector<Row> rows_;
};

// The report's `presence` (docs/formats.md): cells only where frames were
// missing, each row's active bins as spans.
nlohmann::json presence_json(const Presence& presence);

}  // namespace ibvcap
