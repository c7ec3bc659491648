// UTC instants as operators and schedules write them (lib/core/utc.hpp).
// Written by hand on std::chrono's civil calendar: strptime(3) reads local
// time and knows neither VEX's day-of-year form nor nanoseconds.
#include "lib/core/utc.hpp"

#include <fmt/format.h>

#include <chrono>

namespace ibvcap {

namespace {

constexpr std::int64_t kNsPerSecond = 1'000'000'000;

// Reads exactly `digits` decimal digits at `pos`.
bool digits_at(std::string_view s, std::size_t& pos, std::size_t digits, int& out) {
    if (pos + digits > s.size()) {
        return false;
    }
    int v = 0;
    for (std::size_t i = 0; i < digits; ++i) {
        const char c = s[pos + i];
        if (c < '0' || c > '9') {
            return false;
        }
        v = v * 10 + (c - '0');
    }
    pos += digits;
    out = v;
    return true;
}

bool expect_char(std::string_view s, std::size_t& pos, char c) {
    if (pos < s.size() && s[pos] == c) {
        ++pos;
        return true;
    }
    return false;
}

// ".25" after the seconds: up to 9 digits, as ns.
bool fraction_at(std::string_view s, std::size_t& pos, std::int64_t& ns) {
    ns = 0;
    if (!expect_char(s, pos, '.')) {
        return true;
    }
    std::size_t n = 0;
    std::int64_t scale = kNsPerSecond;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
        if (++n > 9) {
            return false;  // finer than a nanosecond
        }
        scale /= 10;
        ns += (s[pos] - '0') * scale;
        ++pos;
    }
    return n > 0;
}

// What a form spells out; day_of_year 0: the date is year, month, day.
struct Fields {
    int year = 0;
    int month = 0;
    int day = 0;
    int day_of_year = 0;
    int hour = 0;
    int minute = 0;
    int second = 0;
    std::int64_t frac_ns = 0;
};

std::optional<std::int64_t> instant(const Fields& f) {
    using namespace std::chrono;
    if (f.hour > 23 || f.minute > 59 || f.second > 59) {
        return std::nullopt;  // (no leap second: frame times have none)
    }
    sys_days days;
    if (f.day_of_year != 0) {
        const year yr{f.year};
        const auto doy = static_cast<unsigned>(f.day_of_year);
        if (doy > (yr.is_leap() ? 366u : 365u)) {
            return std::nullopt;
        }
        days = sys_days{yr / January / 1} + std::chrono::days{doy - 1};
    } else {
        const year_month_day ymd{year{f.year}, std::chrono::month{static_cast<unsigned>(f.month)},
                                 std::chrono::day{static_cast<unsigned>(f.day)}};
        if (!ymd.ok()) {
            return std::nullopt;
        }
        days = sys_days{ymd};
    }
    const std::int64_t s =
        days.time_since_epoch().count() * 86400 + f.hour * 3600 + f.minute * 60 + f.second;
    return s * kNsPerSecond + f.frac_ns;
}

// 2026y333d10h00m00[.25]s
std::optional<std::int64_t> parse_vex(std::string_view s) {
    std::size_t pos = 0;
    Fields f;
    if (!digits_at(s, pos, 4, f.year) || !expect_char(s, pos, 'y') ||
        !digits_at(s, pos, 3, f.day_of_year) || !expect_char(s, pos, 'd') ||
        !digits_at(s, pos, 2, f.hour) || !expect_char(s, pos, 'h') ||
        !digits_at(s, pos, 2, f.minute) || !expect_char(s, pos, 'm') ||
        !digits_at(s, pos, 2, f.second) || !fraction_at(s, pos, f.frac_ns) ||
        !expect_char(s, pos, 's') || pos != s.size() || f.day_of_year == 0) {
        return std::nullopt;
    }
    return instant(f);
}

// 2026-11-29T10:00:00[.25][Z], or a space for the T
std::optional<std::int64_t> parse_iso(std::string_view s) {
    std::size_t pos = 0;
    Fields f;
    if (!digits_at(s, pos, 4, f.year) || !expect_char(s, pos, '-') ||
        !digits_at(s, pos, 2, f.month) || !expect_char(s, pos, '-') ||
        !digits_at(s, pos, 2, f.day)) {
        return std::nullopt;
    }
    if (!expect_char(s, pos, 'T') && !expect_char(s, pos, ' ')) {
        return std::nullopt;
    }
    if (!digits_at(s, pos, 2, f.hour) || !expect_char(s, pos, ':') ||
        !digits_at(s, pos, 2, f.minute) || !expect_char(s, pos, ':') ||
        !digits_at(s, pos, 2, f.second) || !fraction_at(s, pos, f.frac_ns)) {
        return std::nullopt;
    }
    expect_char(s, pos, 'Z');
    if (pos != s.size()) {
        return std::nullopt;
    }
    return instant(f);
}

}  // namespace

std::optional<std::int64_t> parse_utc_instant(std::string_view text) {
    if (text.find('y') != std::string_view::npos) {
        return parse_vex(text);
    }
    return parse_iso(text);
}

std::string format_utc_instant(std::int64_t ns) {
    using namespace std::chrono;
    std::int64_t s = ns / kNsPerSecond;
    std::int64_t frac = ns % kNsPerSecond;
    if (frac < 0) {
        frac += kNsPerSecond;
        --s;
    }
    const sys_days days{std::chrono::days{s >= 0 ? s / 86400 : (s - 86399) / 86400}};
    const std::int64_t in_day = s - days.time_since_epoch().count() * 86400;
    const year_month_day ymd{days};
    std::string out =
        fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}", static_cast<int>(ymd.year()),
                    static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                    in_day / 3600, in_day / 60 % 60, in_day % 60);
    if (frac != 0) {
        std::string digits = fmt::format("{:09}", frac);
        digits.erase(digits.find_last_not_of('0') + 1);
        out += "." + digits;
    }
    return out + "Z";
}

}  // namespace ibvcap
