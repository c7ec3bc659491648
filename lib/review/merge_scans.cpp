// `ibvcap merge` by scan (issue 45): the reports of windowed runs
// (--start-at, --stop-at, --scan) grouped by their scan, each group merged
// on its own; within a scan, the hosts' windows and the frame spans of the
// streams two hosts both wrote are compared (docs/operations.md, "Observing
// a window").
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "lib/review/merge.hpp"
#include "lib/review/merge_parts.hpp"

namespace ibvcap {

namespace {

using merge_parts::text_at;
using nlohmann::json;

// The window of a report, or null.
const json* window_of(const json& report) {
    const auto it = report.find("window");
    return it != report.end() && it->is_object() ? &*it : nullptr;
}

std::string edge_text(const json& window, const char* key) {
    const auto it = window.find(key);
    return it != window.end() && it->is_string() ? it->get<std::string>() : std::string("-");
}

// "[START, STOP)", as the notes name a window.
std::string window_text(const json& window) {
    return fmt::format("[{}, {})", edge_text(window, "start"), edge_text(window, "stop"));
}

std::string position_text(const json& stream, const char* key) {
    const auto it = stream.find(key);
    if (it == stream.end() || !it->is_object()) {
        return "-";
    }
    return fmt::format("({}, {})", it->value("seconds", json()).dump(),
                       it->value("frame", json()).dump());
}

}  // namespace

std::string scan_key(const json& report) {
    const json* w = window_of(report);
    if (w == nullptr) {
        return {};
    }
    if (const std::string scan = text_at(*w, "scan"); !scan.empty()) {
        return scan;
    }
    return window_text(*w);
}

namespace merge_parts {

json window_agreement(const std::vector<Host>& hosts, const std::vector<MergedStream>& streams,
                      std::vector<std::string>& reasons, std::vector<std::string>& notes) {
    // The scan's window: the one most hosts wrote (the first of a tie).
    std::map<std::string, std::size_t> votes;
    std::vector<std::string> texts;
    std::string scan;
    for (const auto& h : hosts) {
        const json* w = window_of(h.report());
        texts.push_back(w != nullptr ? window_text(*w) : std::string());
        if (w != nullptr) {
            ++votes[texts.back()];
            if (scan.empty()) {
                scan = text_at(*w, "scan");
            }
        }
    }
    if (votes.empty()) {
        return json();
    }
    std::string agreed;
    std::size_t most = 0;
    for (const std::string& t : texts) {
        if (!t.empty() && votes[t] > most) {
            most = votes[t];
            agreed = t;
        }
    }
    json out = json::object();
    out["scan"] = scan.empty() ? json() : json(scan);
    json differing = json::array();
    for (std::size_t i = 0; i < hosts.size(); ++i) {
        if (texts[i] == agreed) {
            out["start"] = window_of(hosts[i].report())->value("start", json());
            out["stop"] = window_of(hosts[i].report())->value("stop", json());
            continue;
        }
        const std::string what = texts[i].empty() ? "no window" : "the window " + texts[i];
        differing.push_back({{"host", hosts[i].label}, {"window", texts[i]}});
        // Its streams span other frames than the scan's: the scan's frames
        // of its streams are not all in its files, or more are.
        reasons.push_back(
            fmt::format("{} wrote {}, not the scan's {}: its streams span other "
                        "frames; give every host the same --start-at and --stop-at",
                        hosts[i].label, what, agreed));
    }
    // The streams two hosts both captured: the same frames, first to last?
    json spans_differ = json::array();
    for (const auto& m : streams) {
        if (m.copies.size() < 2) {
            continue;
        }
        const json& a = *m.copies.front().second;
        for (std::size_t c = 1; c < m.copies.size(); ++c) {
            const json& b = *m.copies[c].second;
            if (a.value("first", json()) == b.value("first", json()) &&
                a.value("last", json()) == b.value("last", json())) {
                continue;
            }
            const std::string line =
                fmt::format("{}: {} wrote {} to {}, {} {} to {}", merge_parts::stream_label(a),
                            hosts[m.copies.front().first].label, position_text(a, "first"),
                            position_text(a, "last"), hosts[m.copies[c].first].label,
                            position_text(b, "first"), position_text(b, "last"));
            spans_differ.push_back(line);
            notes.push_back("frame spans differ: " + line);
        }
    }
    out["hosts_agree"] = differing.empty();
    out["hosts_differing"] = std::move(differing);
    out["spans_differ"] = std::move(spans_differ);
    if (out["hosts_agree"].get<bool>() && out["spans_differ"].empty()) {
        notes.push_back(
            fmt::format("all {} hosts wrote the scan's window {}", hosts.size(), agreed));
    }
    return out;
}

}  // namespace merge_parts

json merge_by_scan(const std::vector<MergeInput>& inputs,
                   const std::optional<ExpectManifest>& expect) {
    // In the order each scan first appears.
    std::vector<std::string> keys;
    std::map<std::string, std::vector<MergeInput>> groups;
    for (const MergeInput& in : inputs) {
        const std::string key = scan_key(in.report);
        if (groups.find(key) == groups.end()) {
            keys.push_back(key);
        }
        groups[key].push_back(in);
    }
    if (keys.size() <= 1) {
        return merge_reports(inputs, expect);
    }
    json out = json::object();
    out["command"] = "merge";
    out["version"] = IBVCAP_VERSION;
    json scans = json::array();
    std::vector<std::string> reasons;
    for (const std::string& key : keys) {
        const auto& group = groups[key];
        json merged = merge_reports(group, expect);
        json hosts = json::array();
        for (const MergeInput& in : group) {
            hosts.push_back(in.path);
        }
        const std::string name = key.empty() ? std::string("(no window)") : key;
        for (const json& r : merged["loss_reasons"]) {
            reasons.push_back(fmt::format("scan {}: {}", name, r.get<std::string>()));
        }
        scans.push_back({{"scan", key.empty() ? json() : json(key)},
                         {"verdict", merged["verdict"]},
                         {"reports", std::move(hosts)},
                         {"merged", std::move(merged)}});
    }
    out["scans"] = std::move(scans);
    out["verdict"] = reasons.empty() ? "zero-loss" : "loss";
    out["loss_reasons"] = reasons;
    return out;
}

}  // namespace ibvcap
