// The engine's clock (lib/sources/verbs/nic_clock.hpp): the converter's
// updates (housekeeping: divisions allowed here, never in convert) and the
// measurement each second.
#include "lib/sources/verbs/nic_clock.hpp"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <span>
#include <stdexcept>

namespace ibvcap {

namespace {

std::int64_t abs64(std::int64_t v) {
    return v < 0 ? -v : v;
}

std::int64_t read_ns(clockid_t id) {
    timespec ts{};
    ::clock_gettime(id, &ts);
    return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// A measurement with the host's CLOCK_REALTIME − CLOCK_MONOTONIC read just
// after it (ClockPoint; three vDSO reads, no system call).
ClockPoint with_host_offset(ClockPoint p) {
    const std::int64_t before = read_ns(CLOCK_REALTIME);
    const std::int64_t mono = read_ns(CLOCK_MONOTONIC);
    const std::int64_t after = read_ns(CLOCK_REALTIME);
    p.realtime_minus_monotonic_ns = before + (after - before) / 2 - mono;
    p.monotonic_ns = mono;
    return p;
}

}  // namespace

const char* to_string(FrameTime time) {
    switch (time) {
        case FrameTime::utc:
            return "utc";
        case FrameTime::nic:
            return "nic";
        case FrameTime::host:
            return "host";
    }
    return "?";
}

// --- ClockConverter -----------------------------------------------------------

ClockConverter::ClockConverter(std::uint64_t nominal_q32, std::uint64_t units_per_second)
    : nominal_(static_cast<std::int64_t>(std::max<std::uint64_t>(nominal_q32, 1))),
      units_per_second_(std::max<std::uint64_t>(units_per_second, 1)),
      rate_(nominal_) {}

void ClockConverter::push_piece(const Piece& p) {
    if (pieces_ == kPieces) {
        std::move(piece_.begin() + 1, piece_.end(), piece_.begin());
        --pieces_;
    }
    piece_[pieces_++] = p;
}

void ClockConverter::anchor(const Point& p, std::int64_t slope) {
    // The pieces before the anchor stay (a frame stamped before a forward
    // step, converted after it); those at or after it are replaced.
    while (pieces_ > 0 && static_cast<std::int64_t>(piece_[pieces_ - 1].x0 - p.x) >= 0) {
        --pieces_;
    }
    push_piece(Piece{p.x, p.u, slope});
    window_[0] = p;
    window_count_ = 1;
    open_bound_ = p.w / 2;
    has_slew_end_ = false;
}

std::int64_t ClockConverter::host_step(const ClockPoint& m) {
    if (m.monotonic_ns == 0) {
        return 0;  // not read (tests of the converter alone)
    }
    std::int64_t step = 0;
    if (last_mono_ != 0) {
        const std::int64_t d = m.realtime_minus_monotonic_ns - last_rt_mono_;
        // A daemon slews CLOCK_REALTIME at most 500 ppm (adjtimex MAXFREQ):
        // more than 600 ppm of the time since, and over 1 ms, is a step.
        const std::int64_t slewable =
            std::max<std::int64_t>(1'000'000, (m.monotonic_ns - last_mono_) / 1'000'000 * 600);
        if (abs64(d) > slewable) {
            step = d;
            ++host_steps_;
            host_step_max_ = std::max(host_step_max_, abs64(d));
        }
    }
    last_rt_mono_ = m.realtime_minus_monotonic_ns;
    last_mono_ = m.monotonic_ns;
    return step;
}

bool ClockConverter::update(const ClockPoint& m) {
    if (m.host_after_ns < m.host_before_ns) {
        return false;  // the host clock was stepped between the two reads
    }
    const std::int64_t host_stepped = host_step(m);
    const Point pt{m.device, m.host_before_ns + (m.host_after_ns - m.host_before_ns) / 2,
                   m.host_after_ns - m.host_before_ns};
    ++updates_;
    bracket_max_ = std::max(bracket_max_, pt.w);
    if (pieces_ == 0) {
        anchor(pt, nominal_);
        return true;
    }
    const std::int64_t e = convert(pt.x) - pt.u;  // the residual
    // The host's own step explains the residual when removing it leaves
    // less than the step threshold (a host step of s makes e ≈ −s).
    const bool host_explains = host_stepped != 0 && abs64(e + host_stepped) <= kStepNs;
    if (abs64(e) > kStepNs && host_explains && e > 0) {
        // CLOCK_REALTIME went back (an NTP step, a leap second): frame
        // time does not; the map slews onto the host's new line below.
    } else if (abs64(e) > kStepNs) {
        // The NIC clock jumped (a daemon stepped it), or the host's went
        // forward: so does the map. The interval that ends here held the
        // jump; no bound is claimed for it.
        if (!host_explains) {
            ++steps_;
        }
        anchor(pt, rate_);
        return true;
    }
    residual_max_ = std::max(residual_max_, abs64(e));
    // Close the interval the last update opened: its error is largest at a
    // knot, each bounded by what was measured there.
    std::int64_t closed = std::max(open_bound_, abs64(e) + pt.w / 2);
    if (has_slew_end_ && static_cast<std::int64_t>(pt.x - slew_end_x_) >= 0) {
        closed = std::max(closed, slew_end_bound_);
    }
    bound_ = std::max(bound_.value_or(0), closed + 4);  // + rounding: midpoints, floors

    // The rate: from the oldest point of the window to this one. A residual
    // larger than any rate within kMaxRatePpm explains (at least 1 ms) is a
    // jump of one clock (the host's stepped by NTP, say): it is slewed away,
    // but the rate is not bent by it; the window starts again here.
    const auto since = static_cast<std::int64_t>(pt.x - window_[window_count_ - 1].x);
    const std::int64_t explained = std::max<std::int64_t>(
        1'000'000,
        static_cast<std::int64_t>((Int128{since} * rate_ >> kShift) * kMaxRatePpm / 1'000'000));
    if (abs64(e) > explained) {
        window_count_ = 0;
    }
    if (window_count_ == kWindow) {
        std::move(window_.begin() + 1, window_.end(), window_.begin());
        --window_count_;
    }
    window_[window_count_++] = pt;
    const Point& oldest = window_[0];
    const auto baseline = static_cast<std::int64_t>(pt.x - oldest.x);
    std::int64_t clamp_error_q32 = 0;
    if (baseline > 0) {
        const auto measured =
            static_cast<std::int64_t>((Int128{pt.u - oldest.u} << kShift) / baseline);
        const std::int64_t band = nominal_ / 1'000'000 * kMaxRatePpm;
        rate_ = std::clamp(measured, nominal_ - band, nominal_ + band);
        clamp_error_q32 = abs64(measured - rate_);
        measured_rate_ = true;
    }

    // Slew: from (x, f(x)) to the line u + r·(X − x) in one second, or
    // longer where that would turn the rate by more than kMaxSlewPpm.
    std::uint64_t span = units_per_second_;
    const Int128 need = (Int128{abs64(e)} * (1'000'000 / kMaxSlewPpm) << kShift) / rate_;
    if (need > static_cast<Int128>(span)) {
        span = static_cast<std::uint64_t>(need);
    }
    const auto slew_slope =
        static_cast<std::int64_t>(Int128{rate_} - (Int128{e} << kShift) / Int128{span});
    const std::int64_t y = pt.u + e;
    while (pieces_ > 0 && static_cast<std::int64_t>(piece_[pieces_ - 1].x0 - pt.x) >= 0) {
        --pieces_;  // knots not reached yet: this update replaces them
    }
    push_piece(Piece{pt.x, y, slew_slope});
    const std::int64_t y_end =
        y +
        static_cast<std::int64_t>((Int128{static_cast<std::int64_t>(span)} * slew_slope) >> kShift);
    push_piece(Piece{pt.x + span, y_end, rate_});

    open_bound_ = abs64(e) + pt.w / 2;
    has_slew_end_ = true;
    slew_end_x_ = pt.x + span;
    // At the slew's end the map is on the measured line: half this bracket,
    // plus the rate's uncertainty (both ends' half brackets over the
    // baseline) and any clamp, over the slew.
    std::int64_t unc = 0;
    if (baseline > 0) {
        unc = static_cast<std::int64_t>(Int128{(pt.w + oldest.w) / 2 + 1} *
                                        static_cast<std::int64_t>(span) / baseline);
    }
    unc += static_cast<std::int64_t>((Int128{clamp_error_q32} * static_cast<std::int64_t>(span)) >>
                                     kShift);
    slew_end_bound_ = pt.w / 2 + unc;
    return true;
}

std::optional<double> ClockConverter::rate_ppm() const {
    if (!measured_rate_) {
        return std::nullopt;
    }
    // rate_ is host ns per device unit: the NIC clock runs fast when it is
    // below the nominal.
    return (static_cast<double>(nominal_) / static_cast<double>(rate_) - 1.0) * 1e6;
}

// --- NicClock -----------------------------------------------------------------

std::string NicClock::setup(verbs::Device& device, verbs::TimestampFormat format, FrameTime mode,
                            std::shared_ptr<PhcClock> phc, std::string_view phc_missing) {
    device_ = &device;
    format_ = format;
    mode_ = mode;
    phc_ = std::move(phc);
    phc_missing_ = phc_missing.empty() ? "no PHC was looked for" : std::string(phc_missing);
    if (phc_) {
        info_ = phc_->info();
    }
    const verbs::DeviceCaps& caps = device.caps();
    const std::string dev = caps.name;
    raw_ = true;
    real_time_ = format == verbs::TimestampFormat::wallclock_ns && caps.real_time_ts;
    convert_by_phc_ = false;
    convert_by_pairs_ = false;
    // How the wall-clock stamps are written, for the notes.
    const char* const written =
        real_time_ ? "real-time format (seconds << 32 | ns, decoded)" : "wall-clock ns";
    switch (format) {
        case verbs::TimestampFormat::device_ticks: {
            const std::uint64_t khz = std::max<std::uint64_t>(caps.hca_core_clock_khz, 1);
            // 10^6 << 32 < 2^53: no overflow.
            converter_ = ClockConverter((std::uint64_t{1'000'000} << ClockConverter::kShift) / khz,
                                        khz * 1000);
            const auto s = device.clock_sample();
            if (!s) {
                throw std::runtime_error(fmt::format(
                    "{}: the device clock cannot be read (ibv_query_rt_values_ex)", dev));
            }
            converter_.update(with_host_offset({s->ticks, s->host_before_ns, s->host_after_ns}));
            raw_ = false;
            convert_by_pairs_ = mode == FrameTime::utc;
            if (phc_) {
                read_phc(false);
            }
            if (convert_by_pairs_) {
                return fmt::format(
                    "timestamps: {} completion timestamps (free-running device clock) converted "
                    "to CLOCK_REALTIME by a clock pair each second, slewed, at the measured rate "
                    "(nominal {} kHz); the bound is in the report's clocks",
                    dev, khz);
            }
            return fmt::format(
                "timestamps: {} free-running device clock at its nominal {} kHz from one clock "
                "pair at setup (--timestamps nic: the NIC's own clock, not corrected)",
                dev, khz);
        }
        case verbs::TimestampFormat::wallclock_ns: {
            converter_ = ClockConverter(std::uint64_t{1} << ClockConverter::kShift, 1'000'000'000);
            if (!phc_) {
                return fmt::format(
                    "timestamps: {} completion timestamps in {}: the NIC's own clock (its PHC), "
                    "not measured against CLOCK_REALTIME ({}); it drifts from UTC unless a PTP "
                    "daemon disciplines it, and runs TAI (UTC + 37 s) under ptp4l",
                    dev, written, phc_missing_);
            }
            read_phc(mode == FrameTime::utc);
            const std::string offset =
                phc_reads_ > 0
                    ? fmt::format("PHC − UTC {} ns at setup{}", offset_last_,
                                  offset_is_tai(offset_last_, info_.tai_utc_s) ? " (TAI)" : "")
                    : fmt::format("the PHC could not be read: {}", phc_error_);
            if (mode == FrameTime::utc && converter_.anchored()) {
                raw_ = false;
                convert_by_phc_ = true;
                return fmt::format(
                    "timestamps: {} completion timestamps in {} of its PHC (/dev/ptp{}), "
                    "measured against CLOCK_REALTIME each second and converted to it, slewed; {}; "
                    "the bound is in the report's clocks",
                    dev, written, info_.index, offset);
            }
            return fmt::format(
                "timestamps: {} completion timestamps in {} of its PHC (/dev/ptp{}) as the NIC "
                "gives them{}; {}, measured each second (the report's clocks)",
                dev, written, info_.index,
                mode == FrameTime::nic ? " (--timestamps nic)" : ", not converted", offset);
        }
        case verbs::TimestampFormat::none:
            if (phc_) {
                read_phc(false);
            }
            return {};
    }
    return {};
}

std::string NicClock::implausible(std::uint64_t stamp) {
    if (format_ != verbs::TimestampFormat::wallclock_ns || device_ == nullptr) {
        return {};
    }
    const std::uint64_t ns = real_time_ ? real_time_to_ns(stamp) : stamp;
    const std::string dev = device_->caps().name;
    const std::string format =
        real_time_ ? "decoded as the real-time format (seconds << 32 | ns)" : "read as ns";
    const std::string fix =
        "the NIC writes its timestamps in another format than its driver reports; capture with "
        "--timestamps host (frame times from CLOCK_REALTIME at each poll) and report this with "
        "the output of `ibvcap devices -v`";
    if (phc_) {
        const std::size_t n = phc_->sample(samples_);
        const auto best =
            narrowest(std::span<const PhcSample>(samples_.data(), std::min(n, samples_.size())));
        if (best) {
            const std::int64_t d =
                static_cast<std::int64_t>(ns - static_cast<std::uint64_t>(best->phc_ns));
            if (d > 1'000'000'000 || d < -1'000'000'000) {
                return fmt::format(
                    "{}: the first frame's completion timestamp {} ({}) is {:.3f} s from its PHC "
                    "/dev/ptp{} read now ({} ns): {}",
                    dev, stamp, format, static_cast<double>(d) / 1e9, info_.index, best->phc_ns,
                    fix);
            }
            return {};
        }
    }
    if (ns < kPlausibleFirstNs || ns >= kPlausibleLastNs) {
        return fmt::format(
            "{}: the first frame's completion timestamp {} ({}) is {} ns since 1970, not a time "
            "of this century (no PHC to compare it with: {}): {}",
            dev, stamp, format, ns, phc_ ? phc_->error() : phc_missing_, fix);
    }
    return {};
}

void NicClock::read_phc(bool feed_converter) {
    const std::size_t n = phc_->sample(samples_);
    const auto best =
        narrowest(std::span<const PhcSample>(samples_.data(), std::min(n, samples_.size())));
    if (!best) {
        ++phc_failures_;
        phc_error_ = n == 0 ? phc_->error() : "every bracket ran backwards";
        return;
    }
    const std::int64_t offset =
        best->phc_ns - (best->host_before_ns + (best->host_after_ns - best->host_before_ns) / 2);
    offset_min_ = phc_reads_ == 0 ? offset : std::min(offset_min_, offset);
    offset_max_ = phc_reads_ == 0 ? offset : std::max(offset_max_, offset);
    offset_last_ = offset;
    ++phc_reads_;
    if (feed_converter) {
        converter_.update(with_host_offset(
            {static_cast<std::uint64_t>(best->phc_ns), best->host_before_ns, best->host_after_ns}));
    }
}

void NicClock::measure() {
    if (device_ == nullptr) {
        return;
    }
    if (convert_by_pairs_) {
        if (const auto s = device_->clock_sample()) {
            converter_.update(with_host_offset({s->ticks, s->host_before_ns, s->host_after_ns}));
        }
    }
    if (phc_) {
        read_phc(convert_by_phc_);
    }
}

ClockFigures NicClock::figures(const std::string& device) const {
    ClockFigures f;
    f.device = device;
    f.format = verbs::to_string(format_);
    if (format_ == verbs::TimestampFormat::none) {
        f.frame_times = "host";
    } else {
        f.frame_times = raw_ || mode_ == FrameTime::nic ? "nic" : "utc";
        f.real_time_format = real_time_;
    }
    f.converted_by = convert_by_phc_ ? "phc" : convert_by_pairs_ ? "clock_pairs" : "";
    if (!f.converted_by.empty()) {
        f.measurements = converter_.updates();
        f.steps = converter_.steps();
        f.host_steps = converter_.host_steps();
        f.host_step_max_ns = converter_.host_step_max_ns();
        f.error_bound_ns = converter_.error_bound_ns();
        f.residual_max_ns = converter_.residual_max_ns();
        f.bracket_max_ns = converter_.bracket_max_ns();
        f.rate_ppm = converter_.rate_ppm();
    }
    f.tai_utc_s = info_.tai_utc_s;
    if (!phc_) {
        f.phc_missing = phc_missing_;
        return f;
    }
    f.phc_index = info_.index;
    f.phc_reads = phc_reads_;
    f.phc_read_failures = phc_failures_;
    f.phc_error = phc_error_;
    if (phc_reads_ > 0) {
        f.offset_ns = offset_last_;
        f.offset_spread_ns = offset_max_ - offset_min_;
        f.tai = offset_is_tai(offset_last_, info_.tai_utc_s);
    }
    f.daemons = info_.daemons;
    f.frequency_ppb = info_.frequency_ppb;
    f.disciplined = !info_.daemons.empty() || (info_.frequency_ppb && *info_.frequency_ppb != 0);
    return f;
}

}  // namespace ibvcap
