// `ibvcap merge` (lib/review/merge.hpp): the hosts' reports made into one
// (docs/formats.md, "The merged report", says what each key is made from).
#include "lib/review/merge.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "lib/core/netaddr.hpp"
#include "lib/ledger/expected.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/review/merge_parts.hpp"
#include "lib/run/common.hpp"

namespace ibvcap {

namespace {

using merge_parts::add_counts;
using merge_parts::count_of;
using merge_parts::Host;
using merge_parts::MergedStream;
using merge_parts::seconds_to_ns;
using merge_parts::text_at;
using merge_parts::time_json;
using merge_parts::time_of;
using nlohmann::json;

// The gaps listed at most, as a run lists them (lib/ledger/timeline.hpp).
constexpr std::size_t kMaxGapsListed = 10000;

// The totals made from the merged streams; every other total is summed over
// the hosts (docs/formats.md, "The merged report").
constexpr const char* kStreamTotals[] = {"missing",  "duplicates",    "out_of_order",
                                         "too_late", "implausible",   "restarts",
                                         "invalid",  "payload_absent"};

std::string file_name(const std::string& path) {
    return std::filesystem::path(path).filename().string();
}

// Each input's name in the merged report: its host name when that is unique
// among the inputs, else the host name and the file, else the file.
std::vector<std::string> labels_of(const std::vector<MergeInput>& inputs) {
    std::map<std::string, std::size_t> uses;
    for (const auto& in : inputs) {
        ++uses[text_at(in.report, "host")];
    }
    std::vector<std::string> labels;
    std::set<std::string> taken;
    for (const auto& in : inputs) {
        const std::string host = text_at(in.report, "host");
        const std::string base = host.empty() ? file_name(in.path)
                                 : uses[host] == 1
                                     ? host
                                     : fmt::format("{} ({})", host, file_name(in.path));
        std::string label = base;
        for (std::size_t n = 2; taken.count(label) != 0; ++n) {
            label = fmt::format("{} #{}", base, n);
        }
        taken.insert(label);
        labels.push_back(label);
    }
    return labels;
}

void place_in_time(Host& h) {
    const json& r = h.report();
    h.started_ns = time_of(r, "started_at");
    const auto first = time_of(r, "first_frame_at");
    const auto last = time_of(r, "last_frame_at");
    const double duration = r["duration_s"].get<double>();
    const bool live = text_at(r, "source") != "file";
    if (live && h.started_ns) {
        h.from_ns = h.started_ns;
        h.to_ns = *h.started_ns + seconds_to_ns(duration);
        h.basis = "run";
    } else if (first && last && *last >= *first) {
        h.from_ns = first;
        h.to_ns = last;
        h.basis = "frames";
    } else if (h.started_ns) {
        h.from_ns = h.started_ns;
        h.to_ns = *h.started_ns + seconds_to_ns(duration);
        h.basis = "run";
    }
}

// ---------------------------------------------------------------------------
// Streams: keyed by (group, antenna, thread, station, format) and, for a
// stream a host's report lists more than once (two -i lanes that both
// received it), its occurrence in that report.

std::string stream_key(const json& s) {
    return fmt::format("{}|{}|{}|{}|{}", text_at(s, "group"), text_at(s, "antenna"),
                       s["thread"].get<std::uint64_t>(), s.value("station", std::uint64_t{0}),
                       text_at(s, "format", "codif"));
}

// The copy a stream seen by several hosts is counted from: the most packets,
// then the fewest missing, then the earliest input.
bool better(const json& a, const json& b) {
    if (count_of(a, "packets") != count_of(b, "packets")) {
        return count_of(a, "packets") > count_of(b, "packets");
    }
    return count_of(a, "missing") < count_of(b, "missing");
}

std::vector<MergedStream> merge_streams(const std::vector<Host>& hosts) {
    std::map<std::string, std::size_t> index;
    std::vector<MergedStream> merged;
    for (std::size_t h = 0; h < hosts.size(); ++h) {
        std::map<std::string, std::size_t> occurrences;
        for (const json& s : hosts[h].report()["streams"]) {
            const std::string base = stream_key(s);
            const std::string key = fmt::format("{}#{}", base, occurrences[base]++);
            const auto [it, added] = index.try_emplace(key, merged.size());
            if (added) {
                merged.push_back({h, &s, {h}, {{h, &s}}});
                continue;
            }
            MergedStream& m = merged[it->second];
            m.seen_by.push_back(h);
            m.copies.emplace_back(h, &s);
            if (better(s, *m.stream)) {
                m.host = h;
                m.stream = &s;
            }
        }
    }
    return merged;
}

// ---------------------------------------------------------------------------
// Keys summed or listed over the hosts.

void sum_into(json& into, const json& from, const char* what) {
    for (const auto& [key, value] : from.items()) {
        if (merge_parts::is_count(value)) {
            into[key] = add_counts(count_of(into, key.c_str()), value.get<std::uint64_t>(), what);
        }
    }
}

// Each host's entries of the array `key`, each with "host" added.
json listed(const std::vector<Host>& hosts, const char* key) {
    json out = json::array();
    for (const Host& h : hosts) {
        const auto it = h.report().find(key);
        if (it == h.report().end()) {
            continue;
        }
        for (const json& e : *it) {
            json copy = e;
            copy["host"] = h.label;
            out.push_back(std::move(copy));
        }
    }
    return out;
}

json merge_totals(const std::vector<Host>& hosts, const std::vector<MergedStream>& streams) {
    json totals = json::object();
    for (const Host& h : hosts) {
        sum_into(totals, h.report()["totals"], "totals");
    }
    // The copies of a stream that are not counted: their frames come off
    // the hosts' packets and bytes, so that packets is still codif +
    // malformed + non_codif.
    std::uint64_t uncounted_packets = 0;
    std::uint64_t uncounted_bytes = 0;
    json from_streams = {{"codif", 0}};
    for (const char* key : kStreamTotals) {
        from_streams[key] = 0;
    }
    for (const MergedStream& m : streams) {
        from_streams["codif"] = add_counts(from_streams["codif"].get<std::uint64_t>(),
                                           count_of(*m.stream, "packets"), "stream packets");
        for (const char* key : kStreamTotals) {
            from_streams[key] = add_counts(from_streams[key].get<std::uint64_t>(),
                                           count_of(*m.stream, key), "stream counts");
        }
        for (const auto& [h, copy] : m.copies) {
            if (copy != m.stream) {
                uncounted_packets =
                    add_counts(uncounted_packets, count_of(*copy, "packets"), "stream packets");
                uncounted_bytes = add_counts(uncounted_bytes, count_of(*copy, "bytes"), "bytes");
            }
        }
    }
    for (const auto& [key, value] : from_streams.items()) {
        totals[key] = value;
    }
    const auto less = [&](const char* key, std::uint64_t minus) {
        const std::uint64_t v = count_of(totals, key);
        totals[key] = v > minus ? v - minus : 0;
    };
    less("packets", uncounted_packets);
    less("bytes", uncounted_bytes);
    return totals;
}

json merge_reasons(const std::vector<Host>& hosts) {
    json out = {{"malformed", json::object()}, {"non_codif", json::object()}};
    for (const Host& h : hosts) {
        const auto it = h.report().find("reasons");
        if (it == h.report().end()) {
            continue;
        }
        for (const char* cls : {"malformed", "non_codif"}) {
            if (const auto c = it->find(cls); c != it->end()) {
                sum_into(out[cls], *c, "reasons");
            }
        }
    }
    return out;
}

json summed_object(const std::vector<Host>& hosts, const char* key) {
    json out = json::object();
    for (const Host& h : hosts) {
        if (const auto it = h.report().find(key); it != h.report().end()) {
            sum_into(out, *it, key);
        }
    }
    return out;
}

std::uint64_t summed_count(const std::vector<Host>& hosts, const char* key) {
    std::uint64_t sum = 0;
    for (const Host& h : hosts) {
        sum = add_counts(sum, count_of(h.report(), key), key);
    }
    return sum;
}

// The timeline and the gaps on one axis: seconds since the earliest start.
// A host's entry at t is placed at t + (its started_at − the earliest), the
// timeline's in whole seconds (entries of the same second summed).
void merge_timeline(const std::vector<Host>& hosts, json& out) {
    std::optional<std::int64_t> earliest;
    for (const Host& h : hosts) {
        if (h.started_ns) {
            earliest = earliest ? std::min(*earliest, *h.started_ns) : *h.started_ns;
        }
    }
    std::map<std::int64_t, json> seconds;
    json gaps = json::array();
    std::uint64_t not_listed = summed_count(hosts, "gaps_not_listed");
    for (const Host& h : hosts) {
        const double offset =
            h.started_ns && earliest ? static_cast<double>(*h.started_ns - *earliest) * 1e-9 : 0.0;
        if (const auto it = h.report().find("timeline"); it != h.report().end()) {
            for (const json& e : *it) {
                const double t = offset + e["t"].get<double>();
                const auto second = static_cast<std::int64_t>(std::ceil(t - 1e-9));
                json& s = seconds[second];
                if (s.is_null()) {
                    s = {{"t", second},  {"packets", 0}, {"bytes", 0},
                         {"missing", 0}, {"filled", 0},  {"counters", json::object()}};
                }
                for (const char* key : {"packets", "bytes", "missing", "filled"}) {
                    s[key] = add_counts(s[key].get<std::uint64_t>(), count_of(e, key), "timeline");
                }
                if (const auto c = e.find("counters"); c != e.end()) {
                    sum_into(s["counters"], *c, "timeline");
                }
            }
        }
        if (const auto it = h.report().find("gaps"); it != h.report().end()) {
            for (const json& g : *it) {
                json copy = g;
                copy["t"] = std::round((offset + g["t"].get<double>()) * 1e6) * 1e-6;
                copy["host"] = h.label;
                gaps.push_back(std::move(copy));
            }
        }
    }
    json timeline = json::array();
    for (auto& [second, entry] : seconds) {
        timeline.push_back(std::move(entry));
    }
    std::stable_sort(gaps.begin(), gaps.end(), [](const json& a, const json& b) {
        return a["t"].get<double>() < b["t"].get<double>();
    });
    if (gaps.size() > kMaxGapsListed) {
        not_listed = add_counts(not_listed, gaps.size() - kMaxGapsListed, "gaps");
        gaps.erase(gaps.begin() + static_cast<std::ptrdiff_t>(kMaxGapsListed), gaps.end());
    }
    out["timeline"] = std::move(timeline);
    out["gaps"] = std::move(gaps);
    out["gaps_not_listed"] = not_listed;
}

bool host_lost(const json& report) {
    return report["verdict"] != "zero-loss" ||
           (report.contains("loss_reasons") && !report["loss_reasons"].empty());
}

}  // namespace

json merge_reports(const std::vector<MergeInput>& inputs,
                   const std::optional<ExpectManifest>& expect) {
    const std::vector<std::string> labels = labels_of(inputs);
    std::vector<Host> hosts;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        Host h;
        h.label = labels[i];
        h.input = &inputs[i];
        place_in_time(h);
        hosts.push_back(std::move(h));
    }
    const std::vector<MergedStream> streams = merge_streams(hosts);

    json j = json::object();
    j["command"] = "merge";
    j["version"] = IBVCAP_VERSION;
    std::set<std::string> sources;
    std::vector<std::string> paths;
    bool interrupted = false;
    bool reconciled = true;
    std::optional<std::int64_t> started;
    std::optional<std::int64_t> ended;
    std::optional<std::int64_t> first_frame;
    std::optional<std::int64_t> last_frame;
    double longest = 0;
    bool all_started = true;
    for (const Host& h : hosts) {
        const json& r = h.report();
        sources.insert(text_at(r, "source"));
        paths.push_back(h.input->path);
        interrupted = interrupted || r.value("interrupted", false);
        reconciled = reconciled && r.value("reconciled", true);
        const double duration = r["duration_s"].get<double>();
        longest = std::max(longest, duration);
        if (h.started_ns) {
            const std::int64_t end = *h.started_ns + seconds_to_ns(duration);
            started = started ? std::min(*started, *h.started_ns) : *h.started_ns;
            ended = ended ? std::max(*ended, end) : end;
        } else {
            all_started = false;
        }
        if (const auto f = time_of(r, "first_frame_at")) {
            first_frame = first_frame ? std::min(*first_frame, *f) : *f;
        }
        if (const auto l = time_of(r, "last_frame_at")) {
            last_frame = last_frame ? std::max(*last_frame, *l) : *l;
        }
    }
    j["source"] = sources.size() == 1 ? *sources.begin() : std::string("mixed");
    j["input"] = fmt::format("{}", fmt::join(paths, ","));
    j["duration_s"] =
        all_started && started ? static_cast<double>(*ended - *started) * 1e-9 : longest;
    j["interrupted"] = interrupted;
    j["started_at"] = time_json(started);
    j["first_frame_at"] = time_json(first_frame);
    j["last_frame_at"] = time_json(last_frame);

    j["totals"] = merge_totals(hosts, streams);
    json merged_streams = json::array();
    for (const MergedStream& m : streams) {
        json s = *m.stream;
        s["host"] = hosts[m.host].label;
        json seen_by = json::array();
        for (const std::size_t h : m.seen_by) {
            seen_by.push_back(hosts[h].label);
        }
        s["seen_by"] = std::move(seen_by);
        merged_streams.push_back(std::move(s));
    }
    j["streams"] = std::move(merged_streams);
    j["reasons"] = merge_reasons(hosts);
    for (const char* key :
         {"source_counters", "outputs", "polling", "clocks", "gpu_xids", "groups", "igmp"}) {
        j[key] = listed(hosts, key);
    }
    j["watchdog_alarms"] = summed_count(hosts, "watchdog_alarms");
    j["lines_not_printed"] = summed_object(hosts, "lines_not_printed");
    j["lost_by_cause"] = summed_object(hosts, "lost_by_cause");
    merge_timeline(hosts, j);
    const json& t = j["totals"];
    reconciled = reconciled && count_of(t, "packets") == count_of(t, "codif") +
                                                             count_of(t, "malformed") +
                                                             count_of(t, "non_codif");
    j["reconciled"] = reconciled;

    // What the merge found, and the notes.
    json merged = json::object();
    merged["inputs"] = inputs.size();
    merged["expect"] = expect ? json(expect->name) : json();
    merged["duplicate_streams"] = merge_parts::duplicates_json(hosts, streams);
    std::uint64_t pairs = 0;
    merged["not_overlapping"] = merge_parts::not_overlapping_json(hosts, pairs);
    json versions = json::object();
    for (const Host& h : hosts) {
        versions[text_at(h.report(), "version", "unknown")].push_back(h.label);
    }
    merged["versions"] = std::move(versions);
    std::vector<std::string> notes = merge_parts::merge_notes(hosts, merged, pairs);
    std::vector<std::pair<std::string, const json*>> presences;
    for (const Host& h : hosts) {
        const auto it = h.report().find("presence");
        presences.emplace_back(h.label, it != h.report().end() ? &*it : nullptr);
    }
    json presence = merge_presence(presences, notes);
    if (!presence.is_null()) {
        j["presence"] = std::move(presence);
    }
    merged["notes"] = notes;
    for (const Host& h : hosts) {
        if (const auto it = h.report().find("notes"); it != h.report().end()) {
            for (const json& n : *it) {
                notes.push_back(fmt::format("{}: {}", h.label, n.get<std::string>()));
            }
        }
    }
    j["notes"] = notes;

    // The verdict: every host's, and the site's expected streams.
    std::vector<std::string> reasons;
    // Windowed runs: the same window on every host, the same frames of a
    // stream two hosts wrote.
    if (json window = merge_parts::window_agreement(hosts, streams, reasons, notes);
        !window.is_null()) {
        j["window"] = std::move(window);
        j["notes"] = notes;
    }
    if (expect) {
        j["expected"] = merge_parts::merge_expected(*expect, hosts, streams);
        for (std::size_t i = 0; i < kExpectProblemCount; ++i) {
            const auto problem = static_cast<ExpectProblem>(i);
            const auto n =
                j["expected"]["problems"][std::string(to_string(problem))].get<std::uint64_t>();
            if (n > 0 && is_loss(problem)) {
                reasons.push_back(fmt::format("{} expected stream{} seen by no host: {}", n,
                                              n == 1 ? "" : "s", to_string(problem)));
            }
        }
    }
    for (const Host& h : hosts) {
        if (!host_lost(h.report())) {
            continue;
        }
        const json& why = h.report().value("loss_reasons", json::array());
        if (why.empty()) {
            reasons.push_back(fmt::format("{}: verdict loss", h.label));
        }
        for (const json& r : why) {
            reasons.push_back(fmt::format("{}: {}", h.label, r.get<std::string>()));
        }
    }
    if (!reconciled && std::all_of(hosts.begin(), hosts.end(), [](const Host& h) {
            return h.report().value("reconciled", true);
        })) {
        reasons.push_back("the counts do not reconcile across the hosts");
    }
    j["verdict"] = reasons.empty() ? "zero-loss" : "loss";
    j["loss_reasons"] = reasons;

    json table = json::array();
    for (std::size_t i = 0; i < hosts.size(); ++i) {
        table.push_back(merge_parts::host_entry(hosts[i], streams, i));
    }
    j["hosts"] = std::move(table);
    j["merged"] = std::move(merged);
    return j;
}

int merge_exit_code(const json& merged) {
    return merged.value("verdict", std::string()) == "zero-loss" ? kExitZeroLoss : kExitLoss;
}

}  // namespace ibvcap
