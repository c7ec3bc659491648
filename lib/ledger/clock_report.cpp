// The report's "clocks" and the summary's clock lines (docs/formats.md,
// "clocks"): how each device's frame times were made (lib/ledger/report.hpp,
// ClockFigures; filled by lib/sources/verbs/nic_clock.cpp).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "lib/ledger/report.hpp"

namespace ibvcap {

namespace {

template <typename T>
nlohmann::json or_null(const std::optional<T>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json clocks_json(const std::vector<ClockFigures>& clocks) {
    nlohmann::json out = nlohmann::json::array();
    for (const ClockFigures& c : clocks) {
        nlohmann::json phc = nullptr;
        if (c.phc_index >= 0) {
            phc = {{"index", c.phc_index},
                   {"reads", c.phc_reads},
                   {"read_failures", c.phc_read_failures},
                   {"error",
                    c.phc_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.phc_error)},
                   {"offset_ns", or_null(c.offset_ns)},
                   {"offset_spread_ns", or_null(c.offset_spread_ns)},
                   {"tai", or_null(c.tai)},
                   {"tai_utc_s", c.tai_utc_s},
                   {"disciplined", or_null(c.disciplined)},
                   {"daemons", c.daemons},
                   {"frequency_ppb", or_null(c.frequency_ppb)}};
        }
        out.push_back({{"device", c.device},
                       {"format", c.format},
                       {"frame_times", c.frame_times},
                       {"converted_by", c.converted_by.empty() ? nlohmann::json(nullptr)
                                                               : nlohmann::json(c.converted_by)},
                       {"measurements", c.measurements},
                       {"real_time_format", c.real_time_format},
                       {"steps", c.steps},
                       {"host_steps", c.host_steps},
                       {"host_step_max_ns", c.host_step_max_ns},
                       {"error_bound_ns", or_null(c.error_bound_ns)},
                       {"residual_max_ns", c.residual_max_ns},
                       {"bracket_max_ns", c.bracket_max_ns},
                       {"rate_ppm", or_null(c.rate_ppm)},
                       {"phc", phc},
                       {"phc_missing", c.phc_index >= 0 ? nlohmann::json(nullptr)
                                                        : nlohmann::json(c.phc_missing)}});
    }
    return out;
}

std::string clock_summary(const ClockFigures& c) {
    std::string line = fmt::format("clock {}: frame times {}", c.device, c.frame_times);
    if (!c.converted_by.empty()) {
        line += fmt::format(" (by {}, {} measurements", c.converted_by, c.measurements);
        if (c.error_bound_ns) {
            line += fmt::format(", within {} ns", *c.error_bound_ns);
        }
        if (c.rate_ppm) {
            line += fmt::format(", rate {:+.3f} ppm", *c.rate_ppm);
        }
        if (c.host_steps > 0) {
            line += fmt::format(", host clock stepped {} times, at most {} ns", c.host_steps,
                                c.host_step_max_ns);
        }
        line += c.steps > 0 ? fmt::format(", {} steps)", c.steps) : std::string(")");
    }
    if (c.phc_index < 0) {
        return line + fmt::format("; no PHC: {}", c.phc_missing);
    }
    line += fmt::format("; PHC /dev/ptp{}", c.phc_index);
    if (c.offset_ns) {
        line += fmt::format(" − UTC {} ns (spread {} ns){}", *c.offset_ns,
                            c.offset_spread_ns.value_or(0), c.tai.value_or(false) ? ", TAI" : "");
    }
    if (c.disciplined) {
        line += *c.disciplined ? ", disciplined" : ", not disciplined";
    }
    if (c.phc_read_failures > 0) {
        line += fmt::format(", {} reads failed ({})", c.phc_read_failures, c.phc_error);
    }
    return line;
}

}  // namespace ibvcap
