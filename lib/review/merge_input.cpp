// `ibvcap merge`'s inputs (lib/review/merge.hpp): each host's report read and
// checked before anything of it is used. Every problem is one line naming the
// file, where in it (a JSON pointer), the cause and the fix.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "lib/core/usage_error.hpp"
#include "lib/ledger/json_input.hpp"
#include "lib/ledger/json_text.hpp"
#include "lib/review/merge.hpp"
#include "lib/review/merge_parts.hpp"

namespace ibvcap {

namespace merge_parts {

namespace {
constexpr const char* kFix = "give the report each host's run wrote (its --report JSON)";
}

void not_a_report(const std::string& path, const std::string& where, const std::string& what) {
    throw std::runtime_error(fmt::format("{} is not a run's report as ibvcap writes it: {}{}: {}",
                                         path, where.empty() ? "" : where + " ", what, kFix));
}

bool is_count(const json& v) {
    // (A parsed report holds whole numbers >= 0 as unsigned; one built in
    // memory may hold them as signed.)
    return v.is_number_integer() && (v.is_number_unsigned() || v.get<std::int64_t>() >= 0) &&
           v.get<std::uint64_t>() <= kMaxMergeCount;
}

namespace {
std::string shown(const json& v) {
    std::string text = v.dump();
    if (text.size() > 40) {
        text = text.substr(0, 37) + "...";
    }
    return text;
}
}  // namespace

std::uint64_t count_at(const json& object, std::string_view key, const std::string& path,
                       const std::string& where, std::optional<std::uint64_t> absent) {
    const auto it = object.find(key);
    if (it == object.end()) {
        if (!absent) {
            not_a_report(path, fmt::format("{}/{}", where, key), "is missing");
        }
        return *absent;
    }
    if (!is_count(*it)) {
        not_a_report(path, fmt::format("{}/{}", where, key),
                     fmt::format("is {}, not a count (a whole number from 0 to 2^53: the report "
                                 "was edited or damaged)",
                                 shown(*it)));
    }
    return it->get<std::uint64_t>();
}

std::uint64_t add_counts(std::uint64_t a, std::uint64_t b, std::string_view what) {
    if (a > kMaxMergeCount || b > kMaxMergeCount - a) {
        throw std::runtime_error(fmt::format(
            "the reports' {} add up past 2^53, more than any run counts: one of them holds a "
            "damaged count; give the reports the runs wrote",
            what));
    }
    return a + b;
}

std::optional<std::int64_t> parse_utc(std::string_view text) {
    // YYYY-MM-DDTHH:MM:SS[.f{1,9}]Z, 1970 to 2200: in ns since 1970 with a
    // run's duration (at most 1e9 s) added, still within an int64.
    const auto number = [&](std::size_t at, std::size_t digits) -> std::optional<int> {
        if (at + digits > text.size()) {
            return std::nullopt;
        }
        int v = 0;
        const char* begin = text.data() + at;
        const auto [end, ec] = std::from_chars(begin, begin + digits, v);
        if (ec != std::errc() || end != begin + digits) {
            return std::nullopt;
        }
        return v;
    };
    if (text.size() < 20 || text[4] != '-' || text[7] != '-' || text[10] != 'T' ||
        text[13] != ':' || text[16] != ':' || text.back() != 'Z') {
        return std::nullopt;
    }
    const auto year = number(0, 4);
    const auto month = number(5, 2);
    const auto day = number(8, 2);
    const auto hour = number(11, 2);
    const auto minute = number(14, 2);
    const auto second = number(17, 2);
    if (!year || !month || !day || !hour || !minute || !second || *year < 1970 || *year > 2200 ||
        *month < 1 || *month > 12 || *day < 1 || *day > 31 || *hour > 23 || *minute > 59 ||
        *second > 60) {
        return std::nullopt;
    }
    std::int64_t fraction_ns = 0;
    const std::size_t rest = text.size() - 1;  // the index of the Z
    if (rest > 19) {
        const std::size_t digits = rest - 20;
        if (text[19] != '.' || digits == 0 || digits > 9) {
            return std::nullopt;
        }
        const auto f = number(20, digits);
        if (!f) {
            return std::nullopt;
        }
        fraction_ns = *f;
        for (std::size_t i = digits; i < 9; ++i) {
            fraction_ns *= 10;
        }
    }
    std::tm tm{};
    tm.tm_year = *year - 1900;
    tm.tm_mon = *month - 1;
    tm.tm_mday = *day;
    tm.tm_hour = *hour;
    tm.tm_min = *minute;
    tm.tm_sec = *second;
    const std::time_t seconds = ::timegm(&tm);
    if (seconds < 0) {
        return std::nullopt;
    }
    return std::int64_t{seconds} * 1'000'000'000 + fraction_ns;
}

std::optional<std::int64_t> time_at(const json& object, std::string_view key,
                                    const std::string& path, const std::string& where) {
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) {
        return std::nullopt;
    }
    std::optional<std::int64_t> t;
    if (it->is_string()) {
        t = parse_utc(it->get<std::string>());
    }
    if (!t) {
        not_a_report(path, fmt::format("{}/{}", where, key),
                     fmt::format("is {}, not a UTC time such as \"2026-11-24T07:15:58.271685Z\"",
                                 shown(*it)));
    }
    return t;
}

std::string text_at(const json& object, std::string_view key, const std::string& absent) {
    const auto it = object.find(key);
    return it != object.end() && it->is_string() ? it->get<std::string>() : absent;
}

std::string stream_label(const json& stream) {
    return fmt::format("{} {} thread {}", text_at(stream, "group"), text_at(stream, "antenna"),
                       stream.value("thread", std::uint64_t{0}));
}

}  // namespace merge_parts

namespace {

using merge_parts::count_at;
using merge_parts::not_a_report;
using nlohmann::json;

// Saturating: the sums below are compared with a total, never kept.
std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
    return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

void require_type(const json& report, const char* key, json::value_t type, bool required,
                  const std::string& path, const char* what) {
    const auto it = report.find(key);
    if (it == report.end()) {
        if (required) {
            not_a_report(path, fmt::format("/{}", key), "is missing");
        }
        return;
    }
    const bool ok = type == json::value_t::number_float ? it->is_number() : it->type() == type;
    if (!ok) {
        not_a_report(path, fmt::format("/{}", key), fmt::format("is not {}", what));
    }
}

// A total that must equal the sum of its parts, as Ledger::totals() makes it.
void check_sum(const json& totals, const char* key, std::uint64_t sum, const std::string& path,
               const char* parts) {
    if (!totals.contains(key)) {
        return;
    }
    const std::uint64_t total = totals[key].get<std::uint64_t>();
    if (total != sum) {
        not_a_report(
            path, fmt::format("/totals/{}", key),
            fmt::format("is {}, but {} add up to {} (the report was edited or damaged)", total,
                        parts, sum == UINT64_MAX ? std::string("more") : fmt::format("{}", sum)));
    }
}

void check_streams(const json& report, const std::string& path) {
    const json& streams = report["streams"];
    if (streams.size() > (std::size_t{1} << 20)) {
        not_a_report(path, "/streams",
                     fmt::format("holds {} streams, more than a run keeps", streams.size()));
    }
    static constexpr const char* kRequired[] = {"packets", "missing", "duplicates", "out_of_order"};
    static constexpr const char* kSummed[] = {"packets",      "missing",  "duplicates",
                                              "out_of_order", "too_late", "implausible",
                                              "restarts",     "invalid",  "payload_absent"};
    std::map<std::string, std::uint64_t> sums;
    for (std::size_t i = 0; i < streams.size(); ++i) {
        const json& s = streams[i];
        const std::string at = fmt::format("/streams/{}", i);
        if (!s.is_object()) {
            not_a_report(path, at, "is not an object");
        }
        for (const char* key : {"group", "antenna"}) {
            if (!s.contains(key) || !s[key].is_string() || s[key].get<std::string>().size() > 64) {
                not_a_report(path, fmt::format("{}/{}", at, key),
                             "is missing or not a short string");
            }
        }
        if (count_at(s, "thread", path, at, std::nullopt) > 65535) {
            not_a_report(path, at + "/thread", "is not a thread id (0 to 65535)");
        }
        count_at(s, "station", path, at);
        count_at(s, "bytes", path, at);
        if (s.contains("format") && !s["format"].is_string()) {
            not_a_report(path, at + "/format", "is not a string");
        }
        for (const char* key : kRequired) {
            count_at(s, key, path, at, std::nullopt);
        }
        for (const char* key : kSummed) {
            sums[key] = saturating_add(sums[key], count_at(s, key, path, at));
        }
    }
    const json& totals = report["totals"];
    check_sum(totals, "codif", sums["packets"], path, "the streams' packets");
    for (const char* key : kSummed) {
        if (std::string_view(key) != "packets") {
            check_sum(totals, key, sums[key], path, fmt::format("the streams' {}", key).c_str());
        }
    }
}

// The parts of the totals that are sums of other keys: the reasons, the
// source's drop counters, the outputs.
void check_parts(const json& report, const std::string& path) {
    const json& totals = report["totals"];
    if (const auto it = report.find("reasons"); it != report.end()) {
        if (!it->is_object()) {
            not_a_report(path, "/reasons", "is not an object");
        }
        for (const char* cls : {"malformed", "non_codif"}) {
            std::uint64_t sum = 0;
            if (const auto c = it->find(cls); c != it->end()) {
                if (!c->is_object()) {
                    not_a_report(path, fmt::format("/reasons/{}", cls), "is not an object");
                }
                for (const auto& [name, value] : c->items()) {
                    sum = saturating_add(sum,
                                         count_at(*c, name, path, fmt::format("/reasons/{}", cls)));
                }
            }
            check_sum(totals, cls, sum, path, fmt::format("its /reasons/{}", cls).c_str());
        }
    }
    if (const auto it = report.find("source_counters"); it != report.end()) {
        if (!it->is_array()) {
            not_a_report(path, "/source_counters", "is not an array");
        }
        std::uint64_t drops = 0;
        for (std::size_t i = 0; i < it->size(); ++i) {
            const json& c = (*it)[i];
            const std::string at = fmt::format("/source_counters/{}", i);
            if (!c.is_object() || !c.contains("name") || !c["name"].is_string()) {
                not_a_report(path, at, "is not a counter (an object with \"name\")");
            }
            const std::uint64_t value = count_at(c, "value", path, at, std::nullopt);
            if (c.contains("drop") && !c["drop"].is_boolean()) {
                not_a_report(path, at + "/drop", "is not true or false");
            }
            if (c.value("drop", false)) {
                drops = saturating_add(drops, value);
            }
        }
        check_sum(totals, "nic_drops", drops, path, "its drop counters");
    }
    if (const auto it = report.find("outputs"); it != report.end()) {
        if (!it->is_array()) {
            not_a_report(path, "/outputs", "is not an array");
        }
        std::uint64_t written = 0;
        std::uint64_t dropped = 0;
        for (std::size_t i = 0; i < it->size(); ++i) {
            const json& o = (*it)[i];
            const std::string at = fmt::format("/outputs/{}", i);
            if (!o.is_object()) {
                not_a_report(path, at, "is not an object");
            }
            written = saturating_add(written, count_at(o, "packets", path, at));
            dropped = saturating_add(dropped, count_at(o, "dropped", path, at));
        }
        check_sum(totals, "written", written, path, "its outputs' packets");
        check_sum(totals, "write_drops", dropped, path, "its outputs' dropped");
    }
}

// The keys the merge reads beyond the totals and the streams.
void check_extras(const json& report, const std::string& path) {
    for (const char* key : {"lost_by_cause", "lines_not_printed"}) {
        if (const auto it = report.find(key); it != report.end()) {
            if (!it->is_object()) {
                not_a_report(path, fmt::format("/{}", key), "is not an object");
            }
            for (const auto& [name, value] : it->items()) {
                count_at(*it, name, path, fmt::format("/{}", key));
            }
        }
    }
    count_at(report, "watchdog_alarms", path, "");
    count_at(report, "gaps_not_listed", path, "");
    for (const char* key :
         {"timeline", "gaps", "polling", "clocks", "gpu_xids", "groups", "igmp"}) {
        if (const auto it = report.find(key); it != report.end()) {
            if (!it->is_array()) {
                not_a_report(path, fmt::format("/{}", key), "is not an array");
            }
            for (std::size_t i = 0; i < it->size(); ++i) {
                if (!(*it)[i].is_object()) {
                    not_a_report(path, fmt::format("/{}/{}", key, i), "is not an object");
                }
            }
        }
    }
    for (const char* key : {"timeline", "gaps"}) {
        const auto it = report.find(key);
        for (std::size_t i = 0; it != report.end() && i < it->size(); ++i) {
            const json& e = (*it)[i];
            const std::string at = fmt::format("/{}/{}", key, i);
            if (!e.contains("t") || !e["t"].is_number() || !std::isfinite(e["t"].get<double>()) ||
                e["t"].get<double>() < 0 || e["t"].get<double>() > 1e9) {
                not_a_report(path, at + "/t", "is not a time in seconds (0 to 1e9)");
            }
            for (const char* c : {"packets", "bytes", "missing", "filled"}) {
                count_at(e, c, path, at);
            }
            if (const auto counters = e.find("counters"); counters != e.end()) {
                if (!counters->is_object()) {
                    not_a_report(path, at + "/counters", "is not an object");
                }
                for (const auto& [name, value] : counters->items()) {
                    count_at(*counters, name, path, at + "/counters");
                }
            }
        }
    }
    if (const auto it = report.find("notes"); it != report.end()) {
        if (!it->is_array() ||
            !std::all_of(it->begin(), it->end(), [](const json& n) { return n.is_string(); })) {
            not_a_report(path, "/notes", "is not a list of strings");
        }
    }
}

}  // namespace

namespace {

// A report that claims zero-loss must not show a loss in its own counts (the
// conditions of docs/formats.md, "Verdict", that its totals and keys hold).
void check_verdict(const json& report, const std::string& path) {
    if (report["verdict"] != "zero-loss") {
        return;
    }
    const json& totals = report["totals"];
    for (const char* key :
         {"missing", "too_late", "implausible", "restarts", "malformed", "nic_drops", "wc_errors",
          "payload_mismatches", "write_drops", "ordered_too_late", "block_misses", "consumer_drops",
          "ring_unwritten"}) {
        if (totals.contains(key) && totals[key].get<std::uint64_t>() > 0) {
            not_a_report(path, "/verdict",
                         fmt::format("is \"zero-loss\" but its totals count {} {} (the report was "
                                     "edited or damaged)",
                                     totals[key].get<std::uint64_t>(), key));
        }
    }
    const bool reasons = report.contains("loss_reasons") && !report["loss_reasons"].empty();
    if (reasons || report.contains("error") || !report.value("reconciled", true) ||
        (totals.contains("codif") && totals["codif"].get<std::uint64_t>() == 0)) {
        not_a_report(path, "/verdict",
                     "is \"zero-loss\" but the report says otherwise (loss_reasons, error, "
                     "reconciled or no stream frames; the report was edited or damaged)");
    }
}

void check_report(const json& report, const std::string& path) {
    if (!report.is_object()) {
        not_a_report(path, "", "it is not a JSON object");
    }
    require_type(report, "command", json::value_t::string, false, path, "a string");
    if (report.contains("merged") || report.value("command", std::string()) == "merge") {
        throw std::runtime_error(fmt::format(
            "{} is a merged report (ibvcap merge): give the hosts' own reports, each once", path));
    }
    if (!report.contains("verdict") && !report.contains("totals")) {
        not_a_report(path, "", "it has no \"verdict\" and no \"totals\"");
    }
    require_type(report, "verdict", json::value_t::string, true, path, "a string");
    const std::string verdict = report["verdict"].get<std::string>();
    if (verdict != "zero-loss" && verdict != "loss") {
        not_a_report(path, "/verdict", "is neither \"zero-loss\" nor \"loss\"");
    }
    require_type(report, "totals", json::value_t::object, true, path, "an object");
    require_type(report, "streams", json::value_t::array, true, path, "an array");
    require_type(report, "source", json::value_t::string, true, path, "a string");
    require_type(report, "duration_s", json::value_t::number_float, true, path, "a number");
    const double duration = report["duration_s"].get<double>();
    if (!std::isfinite(duration) || duration < 0 || duration > 1e9) {
        not_a_report(path, "/duration_s", "is not a duration in seconds (0 to 1e9)");
    }
    for (const char* key :
         {"command", "run_id", "host", "version", "stopped_by", "error", "input"}) {
        require_type(report, key, json::value_t::string, false, path, "a string");
    }
    require_type(report, "interrupted", json::value_t::boolean, false, path, "true or false");
    require_type(report, "reconciled", json::value_t::boolean, false, path, "true or false");
    if (const auto it = report.find("loss_reasons"); it != report.end()) {
        if (!it->is_array() ||
            !std::all_of(it->begin(), it->end(), [](const json& r) { return r.is_string(); })) {
            not_a_report(path, "/loss_reasons", "is not a list of strings");
        }
    }
    for (const char* key : {"started_at", "first_frame_at", "last_frame_at"}) {
        merge_parts::time_at(report, key, path, "");
    }
    const json& totals = report["totals"];
    for (const char* key : {"packets", "bytes", "missing", "duplicates", "out_of_order",
                            "malformed", "non_codif", "nic_drops", "wc_errors", "written"}) {
        count_at(totals, key, path, "/totals", std::nullopt);
    }
    for (const auto& [key, value] : totals.items()) {
        count_at(totals, key, path, "/totals");
    }
    check_streams(report, path);
    check_parts(report, path);
    check_extras(report, path);
    // A run whose counts reconciled delivered exactly what it classified.
    if (report.value("reconciled", false) && totals.contains("codif")) {
        const std::uint64_t classified =
            saturating_add(saturating_add(totals["codif"].get<std::uint64_t>(),
                                          totals["malformed"].get<std::uint64_t>()),
                           totals["non_codif"].get<std::uint64_t>());
        check_sum(totals, "packets", classified, path, "codif, malformed and non_codif");
    }
    check_verdict(report, path);
}

}  // namespace

void check_run_report(const json& report, const std::string& path) {
    try {
        check_report(report, path);
    } catch (const json::exception&) {
        // (A key of an unexpected type that the checks above read with the
        // library's accessors: its words say nothing to an operator.)
        not_a_report(path, "", "a key holds a value of the wrong type");
    }
}

json read_report_file(const std::string& path, const std::string& fix, std::uint64_t limit) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        throw std::runtime_error(fmt::format("cannot read report {}: {}; check the path ({})", path,
                                             std::strerror(errno), fix));
    }
    if (S_ISDIR(st.st_mode)) {
        throw std::runtime_error(
            fmt::format("cannot read report {}: it is a directory; {}", path, fix));
    }
    if (S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) > limit) {
        throw std::runtime_error(
            fmt::format("report {} is {} bytes, more than the {} a run's report can be: {}", path,
                        st.st_size, limit, fix));
    }
    // Counted as it is read: a pipe, a FIFO or /dev/stdin has the same limit
    // as a file, and one that never ends is cut there.
    BoundedInput in(path, limit);
    if (in.error() != 0) {
        throw std::runtime_error(fmt::format("cannot read report {}: {}; check its permissions",
                                             path, std::strerror(in.error())));
    }
    const auto cut_short = [&] {
        if (in.over_limit()) {
            throw std::runtime_error(fmt::format(
                "report {} is more than the {} bytes a run's report can be: {}", path, limit, fix));
        }
        if (in.read_error() != 0) {
            throw std::runtime_error(
                fmt::format("cannot read report {}: {}", path, std::strerror(in.read_error())));
        }
    };
    json report;
    try {
        report = parse_json(in.stream());
    } catch (const json::parse_error& e) {
        cut_short();
        throw std::runtime_error(
            fmt::format("{} is not JSON ({}): {}", path, json_error_text(e), fix));
    } catch (const JsonTooDeep& e) {
        throw std::runtime_error(
            fmt::format("{}: {}: not an ibvcap report; {}", path, e.what(), fix));
    }
    cut_short();  // (a value, then whitespace past the limit)
    return report;
}

MergeInput load_merge_input(const std::string& path) {
    MergeInput input;
    input.path = path;
    input.report =
        read_report_file(path, "give the report each host's run wrote (its --report JSON)");
    check_run_report(input.report, path);
    return input;
}

void check_distinct_inputs(const std::vector<MergeInput>& inputs) {
    std::error_code ec;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        for (std::size_t j = 0; j < i; ++j) {
            const MergeInput& a = inputs[j];
            const MergeInput& b = inputs[i];
            std::string why;
            if (a.path == b.path || std::filesystem::equivalent(a.path, b.path, ec)) {
                why = "the same file";
            } else if (const std::string id = merge_parts::text_at(a.report, "run_id");
                       !id.empty() && id == merge_parts::text_at(b.report, "run_id")) {
                why = fmt::format("the same run (run_id {})", id);
            } else if (a.report == b.report) {
                why = "the same report (equal in every key)";
            }
            if (!why.empty()) {
                throw UsageError(fmt::format("{} and {} are {}: give each host's report once",
                                             a.path, b.path, why));
            }
        }
    }
}

}  // namespace ibvcap
