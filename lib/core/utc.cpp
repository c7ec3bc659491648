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

std::optional<std::int64_t> instant(int y, unsigned day_of_year_or_0, int mo, int d, int hour,
                                    int minute, int second, std::int64_t frac_ns) {
    using namespace std::chrono;
    if (hour > 23 || minute > 59 || second > 59) {
        return std::nullopt;  // (no leap second: frame times have none)
    }
    sys_days days;
    if (day_of_year_or_0 != 0) {
        const year yr{y};
        if (day_of_year_or_0 > (yr.is_leap() ? 366u : 365u)) {
            return std::nullopt;
        }
        days = sys_days{yr / January / 1} + std::chrono::days{day_of_year_or_0 - 1};
    } else {
        const year_month_day ymd{year{y}, std::chrono::month{static_cast<unsigned>(mo)},
                                 std::chrono::day{static_cast<unsigned>(d)}};
        if (!ymd.ok()) {
            return std::nullopt;
        }
        days = sys_days{ymd};
    }
    const std::int64_t s =
        days.time_since_epoch().count() * 86400 + hour * 3600 + minute * 60 + second;
    return s * kNsPerSecond + frac_ns;
}

// 2026y333d10h00m00[.25]s
std::optional<std::int64_t> parse_vex(std::string_view s) {
    std::size_t pos = 0;
    int y = 0;
    int doy = 0;
    int h = 0;
    int m = 0;
    int sec = 0;
    std::int64_t frac = 0;
    if (!digits_at(s, pos, 4, y) || !expect_char(s, pos, 'y') || !digits_at(s, pos, 3, doy) ||
        !expect_char(s, pos, 'd') || !digits_at(s, pos, 2, h) || !expect_char(s, pos, 'h') ||
        !digits_at(s, pos, 2, m) || !expect_char(s, pos, 'm') || !digits_at(s, pos, 2, sec) ||
        !fraction_at(s, pos, frac) || !expect_char(s, pos, 's') || pos != s.size() || doy == 0) {
        return std::nullopt;
    }
    return instant(y, static_cast<unsigned>(doy), 0, 0, h, m, sec, frac);
}

// 2026-11-29T10:00:00[.25][Z], or a space for the T
std::optional<std::int64_t> parse_iso(std::string_view s) {
    std::size_t pos = 0;
    int y = 0;
    int mo = 0;
    int d = 0;
    int h = 0;
    int m = 0;
    int sec = 0;
    std::int64_t frac = 0;
    if (!digits_at(s, pos, 4, y) || !expect_char(s, pos, '-') || !digits_at(s, pos, 2, mo) ||
        !expect_char(s, pos, '-') || !digits_at(s, pos, 2, d)) {
        return std::nullopt;
    }
    if (!expect_char(s, pos, 'T') && !expect_char(s, pos, ' ')) {
        return std::nullopt;
    }
    if (!digits_at(s, pos, 2, h) || !expect_char(s, pos, ':') || !digits_at(s, pos, 2, m) ||
        !expect_char(s, pos, ':') || !digits_at(s, pos, 2, sec) || !fraction_at(s, pos, frac)) {
        return std::nullopt;
    }
    expect_char(s, pos, 'Z');
    if (pos != s.size()) {
        return std::nullopt;
    }
    return instant(y, 0, mo, d, h, m, sec, frac);
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
