// `ibvcap merge` (lib/review/merge.hpp): what the merge found besides the
// counts: the site's expected streams, the streams two hosts saw, the runs
// that do not overlap in time, the versions, and each host's line of the
// report's `hosts` (docs/formats.md, "The merged report").
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>

#include "lib/core/netaddr.hpp"
#include "lib/ledger/expected.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/review/merge_parts.hpp"

namespace ibvcap::merge_parts {

namespace {
// The pairs of runs that do not overlap, listed at most.
constexpr std::size_t kMaxPairsListed = 1000;
}  // namespace

std::uint64_t count_of(const json& object, const char* key) {
    const auto it = object.find(key);
    return it != object.end() && is_count(*it) ? it->get<std::uint64_t>() : 0;
}

std::optional<std::int64_t> time_of(const json& report, const char* key) {
    const auto it = report.find(key);
    if (it == report.end() || !it->is_string()) {
        return std::nullopt;
    }
    return parse_utc(it->get<std::string>());
}

std::int64_t seconds_to_ns(double s) {
    return static_cast<std::int64_t>(std::llround(s * 1e9));
}

json time_json(const std::optional<std::int64_t>& ns) {
    return ns ? json(format_utc_time(*ns)) : json();
}

// The expected streams: the site's manifest against every host's streams. A
// stream is there when any host saw it; its timing and rate are each host's
// own --expect's to judge (docs/formats.md, "The merged report").

json merge_expected(const ExpectManifest& manifest, const std::vector<Host>& hosts,
                    const std::vector<MergedStream>& streams) {
    struct Seen {
        std::uint64_t packets = 0;
        std::vector<std::string> seen_by;
    };
    std::map<std::string, Seen> seen;  // "group|antenna|thread"
    std::vector<std::string> order;
    const auto key3 = [](const std::string& g, const std::string& a, std::uint64_t t) {
        return fmt::format("{}|{}|{}", g, a, t);
    };
    for (const MergedStream& m : streams) {
        const json& s = *m.stream;
        const std::string k =
            key3(text_at(s, "group"), text_at(s, "antenna"), s["thread"].get<std::uint64_t>());
        auto [it, added] = seen.try_emplace(k);
        if (added) {
            order.push_back(k);
        }
        it->second.packets += count_of(s, "packets");
        for (const std::size_t h : m.seen_by) {
            if (std::find(it->second.seen_by.begin(), it->second.seen_by.end(), hosts[h].label) ==
                it->second.seen_by.end()) {
                it->second.seen_by.push_back(hosts[h].label);
            }
        }
    }
    std::array<std::uint64_t, kExpectProblemCount> counts{};
    json list = json::array();
    std::set<std::string> claimed;
    std::uint64_t expected = 0;
    std::uint64_t as_expected = 0;
    const auto entry = [&](const std::string& group, const std::string& antenna,
                           std::uint64_t thread, bool is_expected,
                           std::optional<ExpectProblem> problem, const Seen* s,
                           std::optional<double> fps) {
        json problems = json::array();
        if (problem) {
            problems.push_back(to_string(*problem));
            ++counts[static_cast<std::size_t>(*problem)];
        }
        list.push_back({{"group", group},
                        {"antenna", antenna},
                        {"thread", thread},
                        {"expected", is_expected},
                        {"state", problem ? std::string(to_string(*problem)) : "ok"},
                        {"problems", std::move(problems)},
                        {"packets", s != nullptr ? s->packets : 0},
                        {"seen_by", s != nullptr ? json(s->seen_by) : json::array()},
                        {"first_after_join_s", nullptr},
                        {"last_before_end_s", nullptr},
                        {"frames_per_second", nullptr},
                        {"expected_frames_per_second", fps ? json(*fps) : json()}});
    };
    for (const ExpectedGroup& g : manifest.groups) {
        const std::string group = g.group.to_string();
        bool group_seen = false;
        std::set<std::uint32_t> antennas_seen;
        for (const ExpectedAntenna& a : g.antennas) {
            for (const auto t : a.threads) {
                if (seen.count(key3(group, format_ipv4(a.ip), t)) != 0) {
                    group_seen = true;
                    antennas_seen.insert(a.ip);
                }
            }
        }
        for (const ExpectedAntenna& a : g.antennas) {
            for (const auto t : a.threads) {
                ++expected;
                const std::string k = key3(group, format_ipv4(a.ip), t);
                const auto it = seen.find(k);
                std::optional<ExpectProblem> problem;
                if (it != seen.end()) {
                    claimed.insert(k);
                    ++as_expected;
                } else if (!group_seen) {
                    problem = ExpectProblem::group_never_seen;
                } else if (antennas_seen.count(a.ip) == 0) {
                    problem = ExpectProblem::antenna_missing;
                } else {
                    problem = ExpectProblem::thread_missing;
                }
                entry(group, format_ipv4(a.ip), t, true, problem,
                      it != seen.end() ? &it->second : nullptr, a.frames_per_second);
            }
        }
    }
    for (const std::string& k : order) {
        if (claimed.count(k) == 0) {
            const auto bar1 = k.find('|');
            const auto bar2 = k.find('|', bar1 + 1);
            entry(k.substr(0, bar1), k.substr(bar1 + 1, bar2 - bar1 - 1),
                  std::stoull(k.substr(bar2 + 1)), false, ExpectProblem::unexpected, &seen[k],
                  std::nullopt);
        }
    }
    json problems = json::object();
    for (std::size_t i = 0; i < kExpectProblemCount; ++i) {
        problems[std::string(to_string(static_cast<ExpectProblem>(i)))] = counts[i];
    }
    return {{"manifest", manifest.name},
            {"clock", "merged"},
            {"grace_s", nullptr},
            {"rate_tolerance", nullptr},
            {"streams_expected", expected},
            {"as_expected", as_expected},
            {"problems", std::move(problems)},
            {"streams", std::move(list)}};
}

// ---------------------------------------------------------------------------
// What the merge found: streams seen twice, runs that do not overlap,
// versions. Each is named in `merged` and in `notes`; none changes the
// verdict by itself.

json duplicates_json(const std::vector<Host>& hosts, const std::vector<MergedStream>& streams) {
    json out = json::array();
    for (const MergedStream& m : streams) {
        if (m.seen_by.size() < 2) {
            continue;
        }
        json packets = json::object();
        json missing = json::object();
        json seen_by = json::array();
        for (const auto& [h, copy] : m.copies) {
            seen_by.push_back(hosts[h].label);
            packets[hosts[h].label] = count_of(*copy, "packets");
            missing[hosts[h].label] = count_of(*copy, "missing");
        }
        const json& s = *m.stream;
        out.push_back({{"stream", stream_label(s)},
                       {"group", s["group"]},
                       {"antenna", s["antenna"]},
                       {"thread", s["thread"]},
                       {"seen_by", std::move(seen_by)},
                       {"counted_from", hosts[m.host].label},
                       {"packets", std::move(packets)},
                       {"missing", std::move(missing)}});
    }
    return out;
}

json not_overlapping_json(const std::vector<Host>& hosts, std::uint64_t& pairs) {
    json out = json::array();
    pairs = 0;
    for (std::size_t i = 0; i < hosts.size(); ++i) {
        for (std::size_t j = i + 1; j < hosts.size(); ++j) {
            const Host& a = hosts[i];
            const Host& b = hosts[j];
            if (!a.from_ns || !b.from_ns) {
                continue;
            }
            const Host& early = *a.from_ns <= *b.from_ns ? a : b;
            const Host& late = &early == &a ? b : a;
            if (*early.to_ns >= *late.from_ns) {
                continue;
            }
            if (++pairs <= kMaxPairsListed) {
                out.push_back({{"hosts", {early.label, late.label}},
                               {"gap_s", static_cast<double>(*late.from_ns - *early.to_ns) * 1e-9},
                               {"ends", format_utc_time(*early.to_ns)},
                               {"starts", format_utc_time(*late.from_ns)}});
            }
        }
    }
    return out;
}

std::vector<std::string> merge_notes(const std::vector<Host>& hosts, const json& merged,
                                     std::uint64_t pairs) {
    std::vector<std::string> notes;
    if (const auto n = merged["duplicate_streams"].size(); n > 0) {
        notes.push_back(fmt::format(
            "{} stream{} seen by more than one host: each counted once, from the host with the "
            "most packets (merged.duplicate_streams)",
            n, n == 1 ? "" : "s"));
    }
    for (const json& p : merged["not_overlapping"]) {
        notes.push_back(fmt::format(
            "{} and {} do not overlap in time: {} ended at {}, {} s before {} started: not one "
            "observation? (the verdict judges each run as it is)",
            p["hosts"][0].get<std::string>(), p["hosts"][1].get<std::string>(),
            p["hosts"][0].get<std::string>(), p["ends"].get<std::string>(),
            fmt::format("{:.3f}", p["gap_s"].get<double>()), p["hosts"][1].get<std::string>()));
    }
    if (pairs > kMaxPairsListed) {
        notes.push_back(
            fmt::format("{} more pairs of runs do not overlap in time", pairs - kMaxPairsListed));
    }
    for (const Host& h : hosts) {
        if (!h.from_ns) {
            notes.push_back(fmt::format(
                "{}: its report has no start time (started_at, or first_frame_at and "
                "last_frame_at: a report of an older ibvcap): its overlap with the others is "
                "not checked",
                h.label));
        }
    }
    if (merged["versions"].size() > 1) {
        std::string list;
        for (const auto& [version, labels] : merged["versions"].items()) {
            list += fmt::format("{}{} ({})", list.empty() ? "" : ", ", version,
                                fmt::join(labels.get<std::vector<std::string>>(), ", "));
        }
        notes.push_back(fmt::format(
            "the reports are from different ibvcap versions: {}: their counts are merged as "
            "they are (the verdict is not changed by it)",
            list));
    }
    return notes;
}

json host_entry(const Host& h, const std::vector<MergedStream>& streams, std::size_t index) {
    const json& r = h.report();
    std::vector<std::string> groups;
    const auto add_group = [&groups](const std::string& g) {
        if (!g.empty() && std::find(groups.begin(), groups.end(), g) == groups.end()) {
            groups.push_back(g);
        }
    };
    for (const json& s : r["streams"]) {
        add_group(text_at(s, "group"));
    }
    if (const auto it = r.find("groups"); it != r.end()) {
        for (const json& g : *it) {
            add_group(text_at(g, "group"));
        }
    }
    std::uint64_t counted = 0;
    std::uint64_t shared = 0;
    for (const MergedStream& m : streams) {
        const bool seen = std::find(m.seen_by.begin(), m.seen_by.end(), index) != m.seen_by.end();
        counted += m.host == index ? 1u : 0u;
        shared += seen && m.seen_by.size() > 1 ? 1u : 0u;
    }
    const auto optional_text = [&r](const char* key) {
        const std::string t = text_at(r, key);
        return t.empty() ? json() : json(t);
    };
    const double duration = r["duration_s"].get<double>();
    return {{"name", h.label},
            {"path", h.input->path},
            {"host", optional_text("host")},
            {"run_id", optional_text("run_id")},
            {"command", optional_text("command")},
            {"source", r["source"]},
            {"input", optional_text("input")},
            {"version", optional_text("version")},
            {"started_at", time_json(h.started_ns)},
            {"ended_at", time_json(h.started_ns ? std::optional<std::int64_t>(
                                                      *h.started_ns + seconds_to_ns(duration))
                                                : std::nullopt)},
            {"first_frame_at", optional_text("first_frame_at")},
            {"last_frame_at", optional_text("last_frame_at")},
            {"window", h.from_ns ? json{{"from", format_utc_time(*h.from_ns)},
                                        {"to", format_utc_time(*h.to_ns)},
                                        {"basis", h.basis}}
                                 : json()},
            {"duration_s", duration},
            {"interrupted", r.value("interrupted", false)},
            {"stopped_by", optional_text("stopped_by")},
            {"error", optional_text("error")},
            {"verdict", r["verdict"]},
            {"loss_reasons", r.value("loss_reasons", json::array())},
            {"packets", count_of(r["totals"], "packets")},
            {"missing", count_of(r["totals"], "missing")},
            {"streams", r["streams"].size()},
            {"streams_counted", counted},
            {"streams_shared", shared},
            {"groups", groups}};
}

}  // namespace ibvcap::merge_parts
