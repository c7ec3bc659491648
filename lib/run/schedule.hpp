// A site's schedule of scans (issue 45; docs/operations.md, "Observing a
// window"): one line per scan, read whole and refused whole.
//
//   # name   start                  stop                   [groups=...] [formats=...]
//   no0042   2026y333d10h00m00s     2026y333d10h15m00s
//   no0043   2026-11-29T10:17:00Z   2026-11-29T10:30:00Z   groups=239.17.0.1:36001/vdif
//   formats=vdif
//
// Blank lines and `#` comments are ignored. A scan's name is 1 to 64
// letters, digits, '.', '_' or '-' (it names a directory). Times are UTC
// instants as lib/core/utc.hpp reads them. `groups=` and `formats=` are
// comma-separated, kept as written for the command line to read (the CLI's
// GROUP:PORT and -F syntax).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lib/demux/window.hpp"

namespace ibvcap {

struct Scan {
    std::string name;
    FrameWindow window;
    std::vector<std::string> groups;   // groups=, as written (empty: the command line's)
    std::vector<std::string> formats;  // formats=, as written (empty: the command line's)
    std::size_t line = 0;              // 1-based, in its file
};

// The scans in start order. Throws std::runtime_error, one line naming the
// file, the line and the fix, at the first line that cannot be read (an
// unknown word, a bad time, a stop not after its start, a name given
// twice) and for two scans that overlap: nothing of a refused file is used.
std::vector<Scan> parse_schedule(std::string_view text, const std::string& file);
// parse_schedule of a file's text (at most 16 MiB); throws as it does, and
// when the file cannot be read.
std::vector<Scan> load_schedule(const std::string& path);

// The scan a run takes: `name`, or with "next" the first whose stop is after
// `now_ns` (the one under way, else the next to come). Throws
// std::runtime_error naming the file and the fix when there is none.
const Scan& select_scan(const std::vector<Scan>& scans, std::string_view name, std::int64_t now_ns,
                        const std::string& file);

// The scans one capture records in turn (--schedule with no --scan): those
// whose stop is after `now_ns`. Throws std::runtime_error, one line naming
// the file, the line and the fix, when none is left, when one names its own
// groups= or formats= (one capture joins its groups once), and when a scan
// starts less than `grace_s` + kScanSetUpS after the one before stops (its
// lanes are made once the one before has had its grace).
inline constexpr double kScanSetUpS = 1.0;
std::vector<Scan> scans_to_come(const std::vector<Scan>& scans, std::int64_t now_ns, double grace_s,
                                const std::string& file);

// Whether `name` can name a scan (and a directory): 1 to 64 letters, digits,
// '.', '_' or '-', not starting with '.'.
bool valid_scan_name(std::string_view name);

}  // namespace ibvcap
