// Expected streams (lib/ledger/expect.hpp): the problems' names and hints, and
// the evaluation against the ledger's streams at the end of a run.
#include "lib/ledger/expect.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "lib/ledger/report.hpp"

namespace ibvcap {

std::string_view to_string(ExpectProblem problem) {
    switch (problem) {
        case ExpectProblem::group_never_seen:
            return "group_never_seen";
        case ExpectProblem::antenna_missing:
            return "antenna_missing";
        case ExpectProblem::thread_missing:
            return "thread_missing";
        case ExpectProblem::late_start:
            return "late_start";
        case ExpectProblem::stopped_early:
            return "stopped_early";
        case ExpectProblem::wrong_rate:
            return "wrong_rate";
        case ExpectProblem::unexpected:
            return "unexpected";
        case ExpectProblem::count_:
            break;
    }
    return "unknown";
}

bool is_loss(ExpectProblem problem) {
    // An unexpected stream lost nothing: it is listed, and the verdict stays.
    return problem != ExpectProblem::unexpected && problem != ExpectProblem::count_;
}

std::string_view hint(ExpectProblem problem) {
    switch (problem) {
        case ExpectProblem::group_never_seen:
            return "nothing of the group arrived: check the senders' destination, the switch's "
                   "multicast (IGMP snooping, a querier) and the interface";
        case ExpectProblem::antenna_missing:
            return "the antenna sent nothing to this group: check its sender, its destination "
                   "and its source address";
        case ExpectProblem::thread_missing:
            return "the antenna sends, but not this thread: check its thread ids";
        case ExpectProblem::late_start:
            return "started after the grace: start the senders before the capture, or raise "
                   "--expect-grace";
        case ExpectProblem::stopped_early:
            return "stopped before the run's end: check the sender and the path";
        case ExpectProblem::wrong_rate:
            return "frames per second off the expected: check the sender's configuration and "
                   "pacing (or the manifest's rate)";
        case ExpectProblem::unexpected:
            return "arrived but not in the manifest: add it, or check the sender's "
                   "configuration";
        case ExpectProblem::count_:
            break;
    }
    return "";
}

std::uint64_t ExpectResults::count(ExpectProblem problem) const {
    std::uint64_t n = 0;
    for (const auto& s : streams) {
        if (std::find(s.problems.begin(), s.problems.end(), problem) != s.problems.end()) {
            ++n;
        }
    }
    return n;
}

std::uint64_t ExpectResults::expected_count() const {
    return static_cast<std::uint64_t>(
        std::count_if(streams.begin(), streams.end(), [](const auto& s) { return s.expected; }));
}

std::size_t ExpectManifest::stream_count() const {
    if (shorthand) {
        return std::size_t{antennas} * threads;
    }
    std::size_t n = 0;
    for (const auto& g : groups) {
        for (const auto& a : g.antennas) {
            n += a.threads.size();
        }
    }
    return n;
}

// ---------------------------------------------------------------------------
// The evaluation.

namespace {

struct Key {
    std::uint32_t group_ip;
    std::uint16_t group_port;
    std::uint32_t antenna;
    std::uint16_t thread;
    auto tie() const { return std::tie(group_ip, group_port, antenna, thread); }
    bool operator<(const Key& o) const { return tie() < o.tie(); }
};

Key key_of(const StreamStats& s) {
    return {s.group.ip, s.group.port, s.antenna, s.thread};
}

// A stream as it arrived: its streams in the ledger (one per lane that saw it)
// taken together.
struct Arrival {
    std::uint64_t packets = 0;
    std::int64_t first_ns = 0;  // in the evaluation's clock
    std::int64_t last_ns = 0;
    std::optional<double> frames_per_second;
    double header_frames_per_second = 0;
    std::uint32_t period = 0;
    std::uint64_t rated_packets = 0;  // the packets of the stream the rate is from
};

// The span of a stream's frame timestamps, ns (0 when unknown).
std::int64_t timestamp_span(const StreamStats& s) {
    if (s.first_arrival_ns == 0 || s.last_arrival_ns < s.first_arrival_ns) {
        return 0;
    }
    return static_cast<std::int64_t>(s.last_arrival_ns - s.first_arrival_ns);
}

}  // namespace

ExpectResults evaluate_expectations(const ExpectManifest& manifest, const ExpectOptions& options,
                                    std::span<const StreamStats> streams,
                                    std::span<const Endpoint> run_groups,
                                    const ExpectTimes& times) {
    ExpectResults out;
    out.active = true;
    out.manifest = manifest.name;
    out.grace_s = options.grace_s;
    out.rate_tolerance = options.rate_tolerance;
    out.clock = times.host_clock ? "host" : "file";

    // The run's join and end in the evaluation's clock.
    std::int64_t join = times.join_ns;
    std::int64_t end = times.end_ns;
    if (!times.host_clock) {
        bool any = false;
        for (const auto& s : streams) {
            if (s.packets() == 0 || s.first_arrival_ns == 0) {
                continue;
            }
            const auto first = static_cast<std::int64_t>(s.first_arrival_ns);
            const auto last = first + timestamp_span(s);
            join = any ? std::min(join, first) : first;
            end = any ? std::max(end, last) : last;
            any = true;
        }
    }

    std::map<Key, Arrival> arrived;
    std::vector<Key> order;  // first seen first
    for (const auto& s : streams) {
        if (s.packets() == 0) {
            continue;
        }
        const Key k = key_of(s);
        const std::int64_t first =
            times.host_clock ? s.registered_ns : static_cast<std::int64_t>(s.first_arrival_ns);
        const std::int64_t last = std::min(first + timestamp_span(s), std::max(end, first));
        auto [it, inserted] = arrived.try_emplace(k);
        Arrival& a = it->second;
        if (inserted) {
            order.push_back(k);
            a.first_ns = first;
            a.last_ns = last;
        } else {
            a.first_ns = std::min(a.first_ns, first);
            a.last_ns = std::max(a.last_ns, last);
        }
        a.packets += s.packets();
        // The rate: the frames the stream spans (received, duplicates and
        // implausible frames left out, missing ones in: the sender's rate,
        // not the network's) over the time its frames span.
        const SequenceTracker& q = s.sequence;
        const std::uint64_t distinct = q.received() - q.implausible() - q.duplicates();
        const std::uint64_t spanned = distinct + q.missing();
        const double life_s = static_cast<double>(timestamp_span(s)) * 1e-9;
        if (s.packets() >= a.rated_packets) {
            a.rated_packets = s.packets();
            a.period = s.timing.period;
            // A VDIF stream still learning its rate has only a provisional
            // one (lib/demux/rate.hpp): no rate to hold it to.
            a.header_frames_per_second =
                s.timing.period > 0 && s.rate != StreamStats::Rate::learning
                    ? static_cast<double>(s.timing.frames_per_period) / s.timing.period
                    : 0.0;
            a.frames_per_second.reset();
            if (spanned >= 2 && life_s >= options.min_rated_life_s) {
                a.frames_per_second = static_cast<double>(spanned - 1) / life_s;
            }
        }
    }

    const double grace_ns = options.grace_s * 1e9;
    const auto judge_present = [&](ExpectedStreamResult& r, const Arrival& a,
                                   std::optional<double> expected_fps) {
        r.packets = a.packets;
        r.first_after_join_s =
            static_cast<double>(std::max<std::int64_t>(0, a.first_ns - join)) * 1e-9;
        r.last_before_end_s =
            static_cast<double>(std::max<std::int64_t>(0, end - a.last_ns)) * 1e-9;
        r.frames_per_second = a.frames_per_second;
        r.expected_frames_per_second =
            expected_fps ? expected_fps : std::optional<double>(a.header_frames_per_second);
        if (static_cast<double>(a.first_ns - join) > grace_ns) {
            r.problems.push_back(ExpectProblem::late_start);
        }
        if (static_cast<double>(end - a.last_ns) > grace_ns) {
            r.problems.push_back(ExpectProblem::stopped_early);
        }
        if (r.frames_per_second && r.expected_frames_per_second &&
            *r.expected_frames_per_second > 0 &&
            std::abs(*r.frames_per_second - *r.expected_frames_per_second) >
                options.rate_tolerance * *r.expected_frames_per_second) {
            r.problems.push_back(ExpectProblem::wrong_rate);
        }
    };

    std::set<Key> claimed;
    if (manifest.shorthand) {
        // Every group of the run, or (none named) every group that arrived.
        std::vector<Endpoint> groups(run_groups.begin(), run_groups.end());
        if (groups.empty()) {
            for (const auto& k : order) {
                const Endpoint g{k.group_ip, k.group_port};
                if (std::find(groups.begin(), groups.end(), g) == groups.end()) {
                    groups.push_back(g);
                }
            }
        }
        for (const Endpoint& g : groups) {
            // The group's antennas in the order they arrived; the first N are the expected ones.
            std::vector<std::uint32_t> antennas;
            for (const auto& k : order) {
                if (k.group_ip == g.ip && k.group_port == g.port &&
                    std::find(antennas.begin(), antennas.end(), k.antenna) == antennas.end()) {
                    antennas.push_back(k.antenna);
                }
            }
            if (antennas.size() > manifest.antennas) {
                antennas.resize(manifest.antennas);
            }
            for (const std::uint32_t ip : antennas) {
                for (std::uint32_t t = 0; t < manifest.threads; ++t) {
                    ExpectedStreamResult r;
                    r.group = g;
                    r.antenna = ip;
                    r.thread = static_cast<std::uint16_t>(t);
                    const Key k{g.ip, g.port, ip, static_cast<std::uint16_t>(t)};
                    if (const auto it = arrived.find(k); it != arrived.end()) {
                        claimed.insert(k);
                        judge_present(r, it->second, std::nullopt);
                    } else {
                        r.problems.push_back(ExpectProblem::thread_missing);
                    }
                    out.streams.push_back(std::move(r));
                }
            }
            for (std::size_t n = antennas.size(); n < manifest.antennas; ++n) {
                for (std::uint32_t t = 0; t < manifest.threads; ++t) {
                    ExpectedStreamResult r;
                    r.group = g;
                    r.thread = static_cast<std::uint16_t>(t);
                    r.problems.push_back(antennas.empty() ? ExpectProblem::group_never_seen
                                                          : ExpectProblem::antenna_missing);
                    out.streams.push_back(std::move(r));
                }
            }
        }
    } else {
        for (const auto& g : manifest.groups) {
            bool group_seen = false;
            std::set<std::uint32_t> antennas_seen;
            for (const auto& a : g.antennas) {
                for (const auto t : a.threads) {
                    if (arrived.count({g.group.ip, g.group.port, a.ip, t}) != 0) {
                        group_seen = true;
                        antennas_seen.insert(a.ip);
                    }
                }
            }
            for (const auto& a : g.antennas) {
                for (const auto t : a.threads) {
                    ExpectedStreamResult r;
                    r.group = g.group;
                    r.antenna = a.ip;
                    r.thread = t;
                    const Key k{g.group.ip, g.group.port, a.ip, t};
                    if (const auto it = arrived.find(k); it != arrived.end()) {
                        claimed.insert(k);
                        std::optional<double> fps = a.frames_per_second;
                        if (a.frames_per_period && it->second.period > 0) {
                            fps = static_cast<double>(*a.frames_per_period) / it->second.period;
                        }
                        judge_present(r, it->second, fps);
                    } else if (!group_seen) {
                        r.problems.push_back(ExpectProblem::group_never_seen);
                    } else if (antennas_seen.count(a.ip) == 0) {
                        r.problems.push_back(ExpectProblem::antenna_missing);
                    } else {
                        r.problems.push_back(ExpectProblem::thread_missing);
                    }
                    out.streams.push_back(std::move(r));
                }
            }
        }
    }
    for (const auto& k : order) {
        if (claimed.count(k) != 0) {
            continue;
        }
        ExpectedStreamResult r;
        r.group = {k.group_ip, k.group_port};
        r.antenna = k.antenna;
        r.thread = k.thread;
        r.expected = false;
        const Arrival& a = arrived.at(k);
        r.packets = a.packets;
        r.first_after_join_s =
            static_cast<double>(std::max<std::int64_t>(0, a.first_ns - join)) * 1e-9;
        r.last_before_end_s =
            static_cast<double>(std::max<std::int64_t>(0, end - a.last_ns)) * 1e-9;
        r.frames_per_second = a.frames_per_second;
        r.problems.push_back(ExpectProblem::unexpected);
        out.streams.push_back(std::move(r));
    }
    return out;
}

// docs/formats.md, "Expected streams".
nlohmann::json expected_json(const ExpectResults& e) {
    const auto optional = [](const std::optional<double>& v) {
        return v ? nlohmann::json(*v) : nlohmann::json();
    };
    nlohmann::json problems = nlohmann::json::object();
    for (std::size_t i = 0; i < kExpectProblemCount; ++i) {
        const auto p = static_cast<ExpectProblem>(i);
        problems[std::string(to_string(p))] = e.count(p);
    }
    nlohmann::json streams = nlohmann::json::array();
    std::uint64_t as_expected = 0;
    for (const auto& s : e.streams) {
        nlohmann::json list = nlohmann::json::array();
        for (const auto p : s.problems) {
            list.push_back(to_string(p));
        }
        if (s.expected && s.problems.empty()) {
            ++as_expected;
        }
        streams.push_back(
            {{"group", s.group.to_string()},
             {"antenna", s.antenna ? nlohmann::json(format_ipv4(*s.antenna)) : nlohmann::json()},
             {"thread", s.thread},
             {"expected", s.expected},
             {"state", s.problems.empty() ? "ok" : to_string(s.problems.front())},
             {"problems", std::move(list)},
             {"packets", s.packets},
             {"first_after_join_s", optional(s.first_after_join_s)},
             {"last_before_end_s", optional(s.last_before_end_s)},
             {"frames_per_second", optional(s.frames_per_second)},
             {"expected_frames_per_second", optional(s.expected_frames_per_second)}});
    }
    return {{"manifest", e.manifest},
            {"clock", e.clock},
            {"grace_s", e.grace_s},
            {"rate_tolerance", e.rate_tolerance},
            {"streams_expected", e.expected_count()},
            {"as_expected", as_expected},
            {"problems", std::move(problems)},
            {"streams", std::move(streams)}};
}

}  // namespace ibvcap
