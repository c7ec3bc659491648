// UTC instants as an operator or a schedule writes them (issue 45: frame
// windows and scans), to and from ns since 1970. No leap seconds: frame
// times (CODIF, VDIF) have none, and neither has CLOCK_REALTIME.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ibvcap {

// A UTC instant as an operator or a schedule writes it, to ns since 1970:
//   2026-11-29T10:00:00Z, 2026-11-29T10:00:00.25Z, 2026-11-29 10:00:00
//     (ISO 8601, UTC; the Z may be left out: never local time)
//   2026y333d10h00m00s, 2026y333d10h00m00.25s (VEX, as VLBI schedules write it)
// nullopt when `text` is neither, or names no real time (month 13, day 366
// of a common year, 24:00:00, more than nanoseconds).
std::optional<std::int64_t> parse_utc_instant(std::string_view text);
// "2026-11-29T10:00:00Z", with the fraction of a second when there is one
// (to the ns, trailing zeros left out): what parse_utc_instant reads back.
std::string format_utc_instant(std::int64_t ns);

}  // namespace ibvcap
