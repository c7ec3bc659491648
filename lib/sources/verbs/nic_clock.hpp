// The verbs engine's clock (docs/operations.md, "Time"; docs/architecture.md,
// "The data path"): completion timestamps → host UTC (CLOCK_REALTIME) ns.
//
// Once a second (the poll thread's housekeeping) the NIC clock is measured
// against CLOCK_REALTIME: in wall-clock mode the netdev's PHC, read with
// PTP_SYS_OFFSET_EXTENDED (lib/host/phc.hpp), whose time is the CQEs' time; in
// device-tick mode a clock pair (ibv_query_rt_values_ex bracketed by two host
// reads). Each measurement is a point (device reading x, host midpoint u,
// bracket width w). ClockConverter turns them into a piecewise-linear map that
// is continuous and increasing, so frame times never step backwards:
//
//   * the rate r is the slope between this point and the oldest of the last
//     eight (up to 8 s of baseline; ticks: not the nominal hca_core_clock),
//     kept within 1000 ppm of the nominal; a residual no such rate explains
//     (over 1 ms a second) is a jump of a clock, slewed without bending r;
//   * at an update the map's prediction f(x) differs from u by e (the
//     residual); the map goes on from (x, f(x)) with a slope that reaches the
//     line u + r·(X − x) one second later (slewing at most 500 ppm, the
//     kernel's limit for adjtimex, include/linux/timex.h MAXFREQ; a larger e
//     takes longer), then follows that line;
//   * |e| > 128 ms (ntpd's step threshold) means a clock was stepped. Which
//     one CLOCK_MONOTONIC tells (ClockPoint): where CLOCK_REALTIME moved
//     against it by the step, the host was stepped (an NTP step, a leap
//     second): forward, the map steps with it; backward, the map slews (at
//     most 500 ppm, so a 1 s step takes 2000 s, and the error bound says
//     so): frame time never goes back. Otherwise the NIC clock was stepped
//     (a daemon set the PHC): the map steps too, and `steps` counts it. A
//     step keeps the pieces before it, so a frame stamped before the step
//     and converted after it still gets the old map (a forward NIC step; a
//     backward one cannot be told from a later stamp).
//
// Error bound. Where the NIC clock's rate against CLOCK_REALTIME is constant
// between two measurements (a free-running or a steadily disciplined clock),
// truth and map are both linear on each piece, so the error is largest at a
// knot: at a measurement it is at most |e| + w/2 (residual plus half the
// bracket), and where the slew ends at most w/2 plus the rate's uncertainty
// over the slew, (w + w_oldest)/2 · slew / baseline. error_bound_ns() is the
// largest over the intervals closed so far, plus 4 ns of rounding. A rate
// change inside an interval (a daemon turning the frequency) adds at most
// its size times one second; the last interval, after the final measurement,
// is extrapolated.
//
// Per frame (convert): a compare per piece (at most four), a 64×64→128-bit
// multiply and a shift: no division, no allocation, no system call.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "lib/host/phc.hpp"
#include "lib/ledger/report.hpp"
#include "lib/sources/verbs/seam.hpp"

namespace ibvcap {

// --timestamps: frame times in host UTC (measured and converted), the NIC's
// own clock (wall-clock ns as the NIC gives them, decoded; device ticks scaled
// by the nominal hca_core_clock from one clock pair at setup), or host: no
// completion timestamps, CLOCK_REALTIME when each batch is polled (the way
// out where the NIC's timestamps cannot be trusted).
enum class FrameTime : std::uint8_t { utc, nic, host };
const char* to_string(FrameTime time);

// A real-time CQE timestamp (DeviceCaps::real_time_ts), seconds << 32 |
// nanoseconds, in nanoseconds: the kernel decodes it so (drivers/net/
// ethernet/mellanox/mlx5/core/lib/clock.h REAL_TIME_TO_NS, used by
// mlx5_real_time_cyc2time), as does libxlio (time_converter_rtc.cpp). A
// nanoseconds field of 10^9 or more (never written by a sane NIC) still
// gives a value, never an overflow: 2^32 s · 10^9 < 2^63.
constexpr std::uint64_t real_time_to_ns(std::uint64_t stamp) {
    return (stamp >> 32) * 1'000'000'000ull + (stamp & 0xffffffffull);
}

// Wall-clock ns a frame of this century can carry: 2000-01-01 to 2100-01-01
// UTC. A real-time stamp read as ns lands in the 23rd century, plain ns read
// as a real-time stamp in 1982: both are outside.
inline constexpr std::uint64_t kPlausibleFirstNs = 946'684'800ull * 1'000'000'000ull;
inline constexpr std::uint64_t kPlausibleLastNs = 4'102'444'800ull * 1'000'000'000ull;

struct ClockPoint {
    std::uint64_t device = 0;  // PHC ns, or device ticks
    std::int64_t host_before_ns = 0;
    std::int64_t host_after_ns = 0;
    // CLOCK_REALTIME − CLOCK_MONOTONIC just after the measurement, and
    // CLOCK_MONOTONIC then (0: not read). CLOCK_MONOTONIC is never stepped
    // (clock_gettime(2)), so a change of the difference larger than any slew
    // is a step of the host clock: the residual it causes is the host's,
    // not the NIC's (verbs-mlx5-3.md R7).
    std::int64_t realtime_minus_monotonic_ns = 0;
    std::int64_t monotonic_ns = 0;
};

class ClockConverter {
  public:
    static constexpr int kShift = 32;  // slopes are host ns per device unit, Q32.32
    static constexpr std::int64_t kStepNs = 128'000'000;
    static constexpr std::int64_t kMaxSlewPpm = 500;
    static constexpr std::int64_t kMaxRatePpm = 1000;  // the rate kept within the nominal ± this
    static constexpr std::size_t kWindow = 8;
    static constexpr std::size_t kPieces = 4;

    ClockConverter() = default;
    // `nominal_q32`: host ns per device unit, << 32 (1 << 32 for PHC ns);
    // `units_per_second`: device units in one second (the slew interval).
    ClockConverter(std::uint64_t nominal_q32, std::uint64_t units_per_second);

    // A measurement; the first anchors the map. Housekeeping: may divide.
    // Returns false (and changes nothing) for a bracket that runs backwards.
    bool update(const ClockPoint& p);
    bool anchored() const { return pieces_ > 0; }

    // Per frame: host ns of a device reading (0 before the first update).
    std::int64_t convert(std::uint64_t device) const {
        if (pieces_ == 0) {
            return 0;
        }
        std::size_t i = pieces_ - 1;
        while (i > 0 && static_cast<std::int64_t>(device - piece_[i].x0) < 0) {
            --i;
        }
        const Piece& p = piece_[i];
        const auto d = static_cast<std::int64_t>(device - p.x0);
        return p.y0 + static_cast<std::int64_t>((Int128{d} * p.slope) >> kShift);
    }

    std::uint64_t updates() const { return updates_; }
    std::uint64_t steps() const { return steps_; }
    std::uint64_t host_steps() const { return host_steps_; }
    std::int64_t host_step_max_ns() const { return host_step_max_; }
    std::optional<std::int64_t> error_bound_ns() const { return bound_; }
    std::int64_t residual_max_ns() const { return residual_max_; }
    std::int64_t bracket_max_ns() const { return bracket_max_; }
    // The measured rate against the nominal one, − 1, in ppm (nullopt before
    // two measurements).
    std::optional<double> rate_ppm() const;

  private:
    __extension__ using Int128 = __int128;
    struct Piece {
        std::uint64_t x0 = 0;
        std::int64_t y0 = 0;
        std::int64_t slope = 0;  // Q32.32, > 0
    };
    struct Point {
        std::uint64_t x = 0;
        std::int64_t u = 0;  // the bracket's midpoint
        std::int64_t w = 0;  // its width
    };
    void push_piece(const Piece& p);
    void anchor(const Point& p, std::int64_t slope);
    // The host clock's step since the last measurement (0: none, or unknown).
    std::int64_t host_step(const ClockPoint& m);

    std::int64_t nominal_ = std::int64_t{1} << kShift;
    std::uint64_t units_per_second_ = 1'000'000'000;
    std::array<Piece, kPieces> piece_{};
    std::size_t pieces_ = 0;
    std::array<Point, kWindow> window_{};
    std::size_t window_count_ = 0;  // points in the window (oldest first)
    std::int64_t rate_ = std::int64_t{1} << kShift;
    bool measured_rate_ = false;
    // The interval opened by the last update: its bound at the open end, and
    // where its slew ends (a knot inside it if the next update comes later).
    std::int64_t open_bound_ = 0;
    bool has_slew_end_ = false;
    std::uint64_t slew_end_x_ = 0;
    std::int64_t slew_end_bound_ = 0;
    std::uint64_t updates_ = 0;
    std::uint64_t steps_ = 0;
    std::uint64_t host_steps_ = 0;
    std::int64_t host_step_max_ = 0;
    std::int64_t last_rt_mono_ = 0;
    std::int64_t last_mono_ = 0;  // 0: no host reading yet
    std::optional<std::int64_t> bound_;
    std::int64_t residual_max_ = 0;
    std::int64_t bracket_max_ = 0;
};

// The engine's clock: the mode chosen at setup, the measurement each second,
// the per-frame conversion and the report's figures. Owned by the engine;
// measure() and to_host_ns() run on the poll thread only.
class NicClock {
  public:
    // After the CQ is made: how frame times in `format` will be made. `phc`
    // may be null (`phc_missing` says why). Measures once (the anchor).
    // Returns the ledger note that says what the timestamps are.
    std::string setup(verbs::Device& device, verbs::TimestampFormat format, FrameTime mode,
                      std::shared_ptr<PhcClock> phc, std::string_view phc_missing);

    // Per frame: the host UTC ns of a completion timestamp (a real-time one
    // decoded first: a shift, a mask and a multiply).
    std::uint64_t to_host_ns(std::uint64_t stamp) const {
        if (real_time_) {
            stamp = real_time_to_ns(stamp);
        }
        if (raw_) {
            return stamp;
        }
        return static_cast<std::uint64_t>(converter_.convert(stamp));
    }

    // Once, for the first completion that carries a timestamp (poll thread;
    // one PHC read): what is wrong with it, or empty. A wall-clock stamp,
    // decoded, must be within a second of the PHC read now (the CQE's own
    // clock; the completion was polled within milliseconds of its arrival),
    // or, without a PHC, in this century. A stamp that fails says the
    // timestamps are decoded in a format the NIC does not write
    // (verbs-mlx5-3.md R1): every frame time would be wrong, so the run
    // stops with this line.
    std::string implausible(std::uint64_t stamp);

    // Once a second, on the poll thread: one measurement (an ioctl or a
    // clock pair), never an allocation unless a read fails.
    void measure();
    // The CQ went on without timestamps (its clock could not be read,
    // VerbsEngine::clock_unreadable): frames are stamped with host time from
    // now on, and the figures say so.
    void stamps_from_host() {
        format_ = verbs::TimestampFormat::none;
        raw_ = true;
        real_time_ = false;
        convert_by_phc_ = false;
        convert_by_pairs_ = false;
    }

    ClockFigures figures(const std::string& device) const;

  private:
    void read_phc(bool feed_converter);
    verbs::Device* device_ = nullptr;
    verbs::TimestampFormat format_ = verbs::TimestampFormat::none;
    FrameTime mode_ = FrameTime::utc;
    bool raw_ = true;
    bool real_time_ = false;  // stamps are seconds << 32 | ns (DeviceCaps::real_time_ts)
    bool convert_by_phc_ = false;
    bool convert_by_pairs_ = false;
    std::shared_ptr<PhcClock> phc_;
    std::string phc_missing_;
    PhcInfo info_;
    std::array<PhcSample, 9> samples_{};
    ClockConverter converter_;
    std::uint64_t phc_reads_ = 0;
    std::uint64_t phc_failures_ = 0;
    std::string phc_error_;
    std::int64_t offset_last_ = 0;
    std::int64_t offset_min_ = 0;
    std::int64_t offset_max_ = 0;
};

}  // namespace ibvcap
