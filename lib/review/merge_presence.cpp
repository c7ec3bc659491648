// `ibvcap merge`: the hosts' `presence` (each stream's frames present and
// missing per time bin) on one time axis (lib/review/merge.hpp, merge_presence;
// docs/formats.md, "The merged report").
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "lib/review/merge.hpp"
#include "lib/review/merge_parts.hpp"

namespace ibvcap {

namespace {

using merge_parts::is_count;
using nlohmann::json;

// The most bins the merged presence may have: hosts whose started_at lie
// far apart would otherwise ask for an axis of absurd length.
constexpr std::uint64_t kMaxMergedBins = std::uint64_t{1} << 22;
constexpr double kMaxBinSeconds = 1 << 20;

struct BadPresence : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// One host's presence, checked.
struct HostPresence {
    std::string label;
    const json* presence = nullptr;
    double started_at = 0;
    double bin_s = 1;
    std::uint64_t bins = 0;
    double end_s = 0;  // its last bin's end, seconds since its started_at
};

double number_of(const json& p, const char* key) {
    const auto it = p.find(key);
    if (it == p.end() || !it->is_number() || !std::isfinite(it->get<double>())) {
        throw BadPresence(fmt::format("its \"{}\" is missing or not a number", key));
    }
    return it->get<double>();
}

std::uint64_t count_in(const json& v, const std::string& where) {
    if (!is_count(v)) {
        throw BadPresence(fmt::format("{} is not a count", where));
    }
    return v.get<std::uint64_t>();
}

HostPresence check(const std::string& label, const json& p) {
    if (!p.is_object()) {
        throw BadPresence("it is not an object");
    }
    HostPresence h;
    h.label = label;
    h.presence = &p;
    h.started_at = number_of(p, "started_at");
    if (h.started_at <= 0 || h.started_at > 1e11) {
        throw BadPresence("its started_at is not a time in unix seconds");
    }
    h.bin_s = number_of(p, "bin_s");
    if (h.bin_s < 1 || h.bin_s > kMaxBinSeconds ||
        std::exp2(std::round(std::log2(h.bin_s))) != h.bin_s) {
        throw BadPresence("its bin_s is not a power of two from 1 to 2^20 seconds");
    }
    if (!p.contains("bins")) {
        throw BadPresence("its \"bins\" is missing");
    }
    h.bins = count_in(p["bins"], "its bins");
    if (h.bins > kMaxMergedBins) {
        throw BadPresence(fmt::format("its {} bins are more than {}", h.bins, kMaxMergedBins));
    }
    h.end_s = static_cast<double>(h.bins) * h.bin_s;
    if (const auto t = p.find("t"); t != p.end()) {
        if (!t->is_array() || t->size() != h.bins) {
            throw BadPresence("its \"t\" is not a list of one end per bin");
        }
        if (!t->empty()) {
            const json& last = t->back();
            if (!last.is_number() || !std::isfinite(last.get<double>()) ||
                last.get<double>() <= 0) {
                throw BadPresence("its \"t\" does not end at a number of seconds after its start");
            }
            // A live run's windows are ticks of a second and a little more
            // (each waits for the loop's next pass), so its last bin ends
            // past bins x bin_s: its bins are placed by number (rebin), and
            // it ends with its last bin, or within it where the run did.
            h.end_s = std::min(h.end_s, last.get<double>());
        }
    }
    const auto rows = p.find("streams");
    if (rows == p.end() || !rows->is_array()) {
        throw BadPresence("its \"streams\" is missing or not an array");
    }
    for (std::size_t i = 0; i < rows->size(); ++i) {
        const json& row = (*rows)[i];
        const std::string at = fmt::format("streams/{}", i);
        if (!row.is_object()) {
            throw BadPresence(at + " is not an object");
        }
        for (const char* key : {"present", "missing"}) {
            count_in(row.contains(key) ? row[key] : json(), fmt::format("{}/{}", at, key));
        }
        const auto active = row.find("active");
        if (active == row.end() || !active->is_array()) {
            throw BadPresence(at + "/active is not a list of [first_bin, last_bin]");
        }
        for (const json& span : *active) {
            if (!span.is_array() || span.size() != 2 || !is_count(span[0]) || !is_count(span[1]) ||
                span[0].get<std::uint64_t>() > span[1].get<std::uint64_t>() ||
                span[1].get<std::uint64_t>() >= h.bins) {
                throw BadPresence(at +
                                  "/active holds a span that is not [first, last] of its bins");
            }
        }
        const auto cells = row.find("cells");
        if (cells == row.end() || !cells->is_array()) {
            throw BadPresence(at + "/cells is not a list of [bin, present, missing, causes]");
        }
        for (const json& cell : *cells) {
            if (!cell.is_array() || cell.size() != 4 || !is_count(cell[0]) ||
                cell[0].get<std::uint64_t>() >= h.bins || !is_count(cell[1]) ||
                !is_count(cell[2]) || !cell[3].is_array() ||
                !std::all_of(cell[3].begin(), cell[3].end(),
                             [](const json& c) { return c.is_string(); })) {
                throw BadPresence(at +
                                  "/cells holds a cell that is not [bin, present, missing, "
                                  "[cause, ...]] within its bins");
            }
        }
    }
    return h;
}

// Bin `b` of host `h` on the common axis.
std::uint64_t rebin(const HostPresence& h, std::uint64_t b, double started_at, double bin_s) {
    const double start = (h.started_at - started_at) + static_cast<double>(b) * h.bin_s;
    return static_cast<std::uint64_t>(std::floor(start / bin_s + 1e-9));
}

json merge_row(const HostPresence& h, const json& row, double started_at, double bin_s) {
    json out = row;
    out["host"] = h.label;
    // The active spans, re-indexed, sorted, and joined where they touch.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
    for (const json& span : row["active"]) {
        spans.emplace_back(rebin(h, span[0].get<std::uint64_t>(), started_at, bin_s),
                           rebin(h, span[1].get<std::uint64_t>(), started_at, bin_s));
    }
    std::sort(spans.begin(), spans.end());
    json active = json::array();
    for (std::size_t i = 0; i < spans.size();) {
        auto [first, last] = spans[i];
        for (++i; i < spans.size() && spans[i].first <= last + 1; ++i) {
            last = std::max(last, spans[i].second);
        }
        active.push_back({first, last});
    }
    out["active"] = std::move(active);
    // The cells of one common bin summed, their causes united (first seen first).
    struct Cell {
        std::uint64_t present = 0;
        std::uint64_t missing = 0;
        std::vector<std::string> causes;
    };
    std::map<std::uint64_t, Cell> cells;
    for (const json& cell : row["cells"]) {
        Cell& c = cells[rebin(h, cell[0].get<std::uint64_t>(), started_at, bin_s)];
        c.present =
            merge_parts::add_counts(c.present, cell[1].get<std::uint64_t>(), "presence counts");
        c.missing =
            merge_parts::add_counts(c.missing, cell[2].get<std::uint64_t>(), "presence counts");
        for (const json& cause : cell[3]) {
            const std::string text = cause.get<std::string>();
            if (std::find(c.causes.begin(), c.causes.end(), text) == c.causes.end()) {
                c.causes.push_back(text);
            }
        }
    }
    json list = json::array();
    for (const auto& [bin, c] : cells) {
        list.push_back({bin, c.present, c.missing, c.causes});
    }
    out["cells"] = std::move(list);
    return out;
}

}  // namespace

json merge_presence(const std::vector<std::pair<std::string, const json*>>& hosts,
                    std::vector<std::string>& notes) {
    std::vector<HostPresence> usable;
    std::vector<std::string> without;
    for (const auto& [label, presence] : hosts) {
        if (presence == nullptr) {
            without.push_back(label);
            continue;
        }
        try {
            usable.push_back(check(label, *presence));
        } catch (const BadPresence& e) {
            notes.push_back(fmt::format("{}: its presence is left out of the merged presence: {}",
                                        label, e.what()));
        }
    }
    if (usable.empty()) {
        return json();
    }
    if (!without.empty()) {
        notes.push_back(fmt::format(
            "{}: no presence in the report (an older ibvcap): not in the merged presence",
            fmt::join(without, ", ")));
    }
    double bin_s = 1;
    double started_at = usable.front().started_at;
    for (const HostPresence& h : usable) {
        bin_s = std::max(bin_s, h.bin_s);
        started_at = std::min(started_at, h.started_at);
    }
    double end_s = 0;
    for (const HostPresence& h : usable) {
        end_s = std::max(end_s, (h.started_at - started_at) + h.end_s);
    }
    // Every host's bins, and on to the latest host's end.
    const double end_bins = std::ceil(end_s / bin_s - 1e-9);
    if (end_bins > static_cast<double>(kMaxMergedBins)) {
        notes.push_back(fmt::format(
            "the merged presence is left out: the hosts' presence spans {:.0f} s in bins of {} "
            "s, more than {} bins (are their started_at times right?)",
            end_s, bin_s, kMaxMergedBins));
        return json();
    }
    std::uint64_t bins = static_cast<std::uint64_t>(std::max(0.0, end_bins));
    for (const HostPresence& h : usable) {
        if (h.bins > 0) {
            bins = std::max(bins, rebin(h, h.bins - 1, started_at, bin_s) + 1);
        }
    }
    json t = json::array();
    for (std::uint64_t k = 0; k < bins; ++k) {
        const double bin_end = static_cast<double>(k + 1) * bin_s;
        const double bin_start = static_cast<double>(k) * bin_s;
        const double end = end_s > bin_start && end_s < bin_end ? end_s : bin_end;
        t.push_back(std::round(end * 1e6) * 1e-6);
    }
    json rows = json::array();
    for (const HostPresence& h : usable) {
        for (const json& row : (*h.presence)["streams"]) {
            rows.push_back(merge_row(h, row, started_at, bin_s));
        }
    }
    return {{"started_at", started_at},
            {"bin_s", static_cast<std::uint64_t>(bin_s)},
            {"bins", bins},
            {"t", std::move(t)},
            {"streams", std::move(rows)}};
}

}  // namespace ibvcap
