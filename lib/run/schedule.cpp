#include "lib/run/schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <stdexcept>

#include "lib/core/utc.hpp"

namespace ibvcap {

namespace {

constexpr std::size_t kMaxScheduleBytes = std::size_t{16} << 20;

std::vector<std::string> words_of(std::string_view line) {
    std::vector<std::string> words;
    std::istringstream in{std::string(line)};
    for (std::string w; in >> w;) {
        words.push_back(w);
    }
    return words;
}

std::vector<std::string> comma_list(std::string_view text) {
    std::vector<std::string> out;
    std::size_t from = 0;
    while (from <= text.size()) {
        const std::size_t to = std::min(text.find(',', from), text.size());
        out.emplace_back(text.substr(from, to - from));
        from = to + 1;
    }
    return out;
}

}  // namespace

bool valid_scan_name(std::string_view name) {
    return !name.empty() && name.size() <= 64 && name.front() != '.' &&
           name.find_first_not_of(
               "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
               "0123456789._-") == std::string_view::npos;
}

std::vector<Scan> parse_schedule(std::string_view text, const std::string& file) {
    std::vector<Scan> scans;
    std::set<std::string> names;
    std::size_t number = 0;
    std::size_t from = 0;
    while (from < text.size()) {
        const std::size_t end = std::min(text.find('\n', from), text.size());
        std::string_view line = text.substr(from, end - from);
        from = end + 1;
        ++number;
        const auto bad = [&](const std::string& what) {
            return std::runtime_error(fmt::format("schedule {} line {}: {}", file, number, what));
        };
        if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) {
            line = line.substr(0, hash);
        }
        const std::vector<std::string> words = words_of(line);
        if (words.empty()) {
            continue;
        }
        if (words.size() < 3) {
            throw bad(
                "a scan is NAME START STOP [groups=GROUP:PORT,...] [formats=FORMAT,...]; this "
                "line has " +
                std::to_string(words.size()) + " word" + (words.size() == 1 ? "" : "s"));
        }
        Scan s;
        s.line = number;
        s.name = words[0];
        if (!valid_scan_name(s.name)) {
            throw bad(fmt::format(
                "bad scan name '{}': 1 to 64 letters, digits, '.', '_' or '-', not starting "
                "with '.' (it names the scan's directory)",
                s.name));
        }
        if (!names.insert(s.name).second) {
            throw bad(fmt::format("scan {} is named twice", s.name));
        }
        const auto start = parse_utc_instant(words[1]);
        const auto stop = parse_utc_instant(words[2]);
        for (const auto& [t, w] : {std::pair{start, words[1]}, std::pair{stop, words[2]}}) {
            if (!t) {
                throw bad(fmt::format(
                    "bad time '{}': give UTC as 2026-11-29T10:00:00Z or 2026y333d10h00m00s", w));
            }
        }
        if (*stop <= *start) {
            throw bad(fmt::format("scan {} stops at {}, not after its start {}", s.name,
                                  format_utc_instant(*stop), format_utc_instant(*start)));
        }
        s.window = FrameWindow{*start, *stop};
        for (std::size_t i = 3; i < words.size(); ++i) {
            const std::string& w = words[i];
            std::vector<std::string>* list = w.starts_with("groups=")    ? &s.groups
                                             : w.starts_with("formats=") ? &s.formats
                                                                         : nullptr;
            if (list == nullptr) {
                throw bad(
                    fmt::format("unknown '{}': after the stop only groups=... and "
                                "formats=... may follow",
                                w));
            }
            if (!list->empty()) {
                throw bad(fmt::format("'{}' given twice", w.substr(0, w.find('=') + 1)));
            }
            *list = comma_list(std::string_view(w).substr(w.find('=') + 1));
            if (std::any_of(list->begin(), list->end(),
                            [](const std::string& e) { return e.empty(); })) {
                throw bad(fmt::format("'{}': an empty entry in the list", w));
            }
        }
        scans.push_back(std::move(s));
    }
    std::stable_sort(scans.begin(), scans.end(), [](const Scan& a, const Scan& b) {
        return a.window.start_ns < b.window.start_ns;
    });
    for (std::size_t i = 1; i < scans.size(); ++i) {
        const Scan& a = scans[i - 1];
        const Scan& b = scans[i];
        if (b.window.start_ns < a.window.stop_ns) {
            throw std::runtime_error(fmt::format(
                "schedule {} line {}: scan {} starts at {}, before scan {} (line {}) stops at "
                "{}: scans may not overlap",
                file, b.line, b.name, format_utc_instant(b.window.start_ns), a.name, a.line,
                format_utc_instant(a.window.stop_ns)));
        }
    }
    return scans;
}

std::vector<Scan> load_schedule(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw std::runtime_error(
            fmt::format("cannot read the schedule {}: give the path of a schedule file", path));
    }
    std::string text;
    text.resize(kMaxScheduleBytes + 1);
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxScheduleBytes) {
        throw std::runtime_error(
            fmt::format("the schedule {} is larger than 16 MiB: not a schedule file", path));
    }
    return parse_schedule(text, path);
}

const Scan& select_scan(const std::vector<Scan>& scans, std::string_view name, std::int64_t now_ns,
                        const std::string& file) {
    if (name == "next") {
        for (const Scan& s : scans) {
            if (s.window.stop_ns > now_ns) {
                return s;
            }
        }
        throw std::runtime_error(
            fmt::format("no scan of the schedule {} ends after now ({}): its last has passed", file,
                        format_utc_instant(now_ns)));
    }
    for (const Scan& s : scans) {
        if (s.name == name) {
            return s;
        }
    }
    std::string listed;
    for (std::size_t i = 0; i < scans.size() && i < 5; ++i) {
        listed += (i == 0 ? "" : ", ") + scans[i].name;
    }
    throw std::runtime_error(fmt::format("no scan {} in the schedule {} (its scans: {}{})", name,
                                         file, listed.empty() ? "none" : listed,
                                         scans.size() > 5 ? ", ..." : ""));
}

std::vector<Scan> scans_to_come(const std::vector<Scan>& scans, std::int64_t now_ns, double grace_s,
                                const std::string& file) {
    std::vector<Scan> left;
    for (const Scan& s : scans) {
        if (s.window.stop_ns > now_ns) {
            left.push_back(s);
        }
    }
    if (left.empty()) {
        throw std::runtime_error(
            fmt::format("no scan of the schedule {} ends after now ({}): its last has passed", file,
                        format_utc_instant(now_ns)));
    }
    for (std::size_t i = 0; i < left.size(); ++i) {
        const Scan& s = left[i];
        if (!s.groups.empty() || !s.formats.empty()) {
            throw std::runtime_error(fmt::format(
                "schedule {} line {}: scan {} names its own {}: one capture of several scans "
                "joins its groups and opens its formats once; give them on the command line, or "
                "take the scan alone with --scan {}",
                file, s.line, s.name, s.groups.empty() ? "formats=" : "groups=", s.name));
        }
        if (i == 0) {
            continue;
        }
        const Scan& before = left[i - 1];
        const double gap_s = static_cast<double>(s.window.start_ns - before.window.stop_ns) / 1e9;
        if (gap_s < grace_s + kScanSetUpS) {
            throw std::runtime_error(fmt::format(
                "schedule {} line {}: scan {} starts {:.3f} s after scan {} stops; one capture "
                "needs {:g} s between scans (--window-grace {:g} for the late frames, then {:g} s "
                "to open the next scan's files): give a shorter --window-grace, or take each "
                "scan with its own capture (--scan NAME)",
                file, s.line, s.name, gap_s, before.name, grace_s + kScanSetUpS, grace_s,
                kScanSetUpS));
        }
    }
    return left;
}

}  // namespace ibvcap
