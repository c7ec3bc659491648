#include "lib/ledger/mcast_path.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "lib/ledger/ledger.hpp"

namespace ibvcap {

namespace {

std::optional<std::int64_t> first_arrival(const Ledger& ledger, const Endpoint& group) {
    for (const auto& a : ledger.group_arrivals()) {
        if (a.group == group) {
            return static_cast<std::int64_t>(a.first_ns);
        }
    }
    return std::nullopt;
}

std::uint64_t stream_frames(const Ledger& ledger, const Endpoint& group) {
    std::uint64_t n = 0;
    for (const auto& s : ledger.streams()) {
        if (s.group == group) {
            n += s.packets();
        }
    }
    return n;
}

nlohmann::json utc_or_null(std::optional<std::int64_t> ns) {
    return ns ? nlohmann::json(format_utc_time(*ns)) : nlohmann::json();
}

const QuerierWatch* watch_of(const MulticastPath& path, const std::string& interface) {
    for (const auto& w : path.queriers) {
        if (w.interface == interface) {
            return &w;
        }
    }
    return nullptr;
}

std::string_view state_name(QuerierWatch::State s) {
    switch (s) {
        case QuerierWatch::State::heard:
            return "heard";
        case QuerierWatch::State::not_heard:
            return "not heard";
        case QuerierWatch::State::unknown:
            return "unknown";
    }
    return "unknown";
}

}  // namespace

std::vector<GroupPath> group_paths(const Ledger& ledger, const MulticastPath& path) {
    std::vector<GroupPath> out;
    const auto add = [&](const Endpoint& g) -> GroupPath* {
        for (const auto& p : out) {
            if (p.group == g && p.interface.empty()) {
                return nullptr;
            }
        }
        GroupPath& p = out.emplace_back();
        p.group = g;
        p.first_ns = first_arrival(ledger, g);
        p.frames = stream_frames(ledger, g);
        return &p;
    };
    if (path.live) {
        for (const auto& j : path.joins) {
            GroupPath& p = out.emplace_back();
            p.group = j.group;
            p.interface = j.interface;
            p.joined_ns = j.joined_ns;
            p.rejoins = j.rejoins;
            p.first_ns = first_arrival(ledger, j.group);
            p.frames = stream_frames(ledger, j.group);
        }
        return out;
    }
    for (const auto& a : ledger.group_arrivals()) {
        add(a.group);
    }
    for (const auto& g : path.named_groups) {
        add(g);
    }
    return out;
}

nlohmann::json groups_json(const Ledger& ledger, const MulticastPath& path) {
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& p : group_paths(ledger, path)) {
        nlohmann::json to_first;
        if (p.joined_ns && p.first_ns) {
            // Signed: a frame before the join (another member on this host
            // had the group already, or a switch floods it) is negative.
            to_first = static_cast<double>(*p.first_ns - *p.joined_ns) / 1e6;
        }
        nlohmann::json sources = nlohmann::json::array();
        if (const auto* from = sources_for(path.sources, p.group)) {
            for (const auto ip : *from) {
                sources.push_back(format_ipv4(ip));
            }
        }
        groups.push_back(
            {{"group", p.group.to_string()},
             {"sources", std::move(sources)},
             {"address", format_ipv4(p.group.ip)},
             {"port", p.group.port},
             {"interface", p.interface.empty() ? nlohmann::json() : nlohmann::json(p.interface)},
             {"joined_at", utc_or_null(p.joined_ns)},
             {"rejoins", p.rejoins},
             {"first_frame_at", utc_or_null(p.first_ns)},
             {"join_to_first_ms", to_first},
             {"seen", p.first_ns.has_value()},
             {"frames", p.frames}});
    }
    return groups;
}

nlohmann::json igmp_json(const MulticastPath& path) {
    nlohmann::json out = nlohmann::json::array();
    if (!path.live) {
        // A capture file's IGMP is not looked at: ibvcap's own pcap files
        // hold only the groups' UDP (the capture filter), so there is none.
        out.push_back({{"interface", nullptr},
                       {"querier", "not applicable"},
                       {"querier_heard", nullptr},
                       {"why", "read joins no group and listens on no interface"}});
        return out;
    }
    for (const auto& w : path.queriers) {
        out.push_back(
            {{"interface", w.interface},
             {"querier", state_name(w.state)},
             {"querier_heard", w.state == QuerierWatch::State::unknown
                                   ? nlohmann::json()
                                   : nlohmann::json(w.state == QuerierWatch::State::heard)},
             {"why", w.why.empty() ? nlohmann::json() : nlohmann::json(w.why)},
             {"queries", w.queries},
             {"general_queries", w.general_queries},
             {"group_queries", w.group_queries},
             {"malformed", w.malformed},
             {"last_querier",
              w.queries > 0 ? nlohmann::json(format_ipv4(w.last_querier)) : nlohmann::json()},
             {"last_version", w.queries > 0 ? nlohmann::json(w.last_version) : nlohmann::json()},
             {"last_query_at", w.queries > 0 ? utc_or_null(w.last_query_ns) : nlohmann::json()},
             {"listened_s", w.listened_s}});
    }
    return out;
}

std::vector<std::string> never_seen_lines(const Ledger& ledger, const MulticastPath& path) {
    std::vector<std::string> lines;
    for (const auto& p : group_paths(ledger, path)) {
        if (p.first_ns) {
            continue;
        }
        if (!p.joined_ns) {
            lines.push_back(
                fmt::format("{} was asked for and never seen in the file", p.group.to_string()));
            continue;
        }
        std::string head = fmt::format("joined {} on {} at {}, never seen: ", p.group.to_string(),
                                       p.interface, format_utc_time(*p.joined_ns));
        const QuerierWatch* w = watch_of(path, p.interface);
        if (w == nullptr || w->state == QuerierWatch::State::unknown) {
            lines.push_back(
                head +
                fmt::format("whether an IGMP querier is on {} is unknown ({}); without one, "
                            "switches with IGMP snooping may not forward the group: check that "
                            "an IGMP snooping querier is enabled on the VLAN, and the sender",
                            p.interface, w != nullptr ? w->why : "not watched"));
        } else if (w->state == QuerierWatch::State::not_heard) {
            lines.push_back(
                head +
                fmt::format("no IGMP querier was heard on {} during the run ({:.0f} s; queriers "
                            "send general queries every 125 s by default), so switches may not "
                            "be forwarding the group: enable an IGMP snooping querier on the "
                            "VLAN (or check the sender)",
                            p.interface, w->listened_s));
        } else {
            lines.push_back(head + fmt::format("an IGMP querier was heard on {} ({}, IGMPv{}), "
                                               "so the switch knows of the join: check the "
                                               "sender and the route to this VLAN",
                                               p.interface, format_ipv4(w->last_querier),
                                               w->last_version));
        }
    }
    return lines;
}

void print_multicast_path(std::FILE* out, const Ledger& ledger, const MulticastPath& path) {
    if (path.live) {
        for (const auto& w : path.queriers) {
            switch (w.state) {
                case QuerierWatch::State::heard:
                    fmt::print(out,
                               "  IGMP querier on {}: heard ({} queries, last from {}, "
                               "IGMPv{})\n",
                               w.interface, w.queries, format_ipv4(w.last_querier), w.last_version);
                    break;
                case QuerierWatch::State::not_heard:
                    fmt::print(out, "  IGMP querier on {}: none heard in {:.0f} s\n", w.interface,
                               w.listened_s);
                    break;
                case QuerierWatch::State::unknown:
                    fmt::print(out, "  IGMP querier on {}: unknown ({})\n", w.interface, w.why);
                    break;
            }
        }
    }
    for (const auto& line : never_seen_lines(ledger, path)) {
        fmt::print(out, "  NEVER SEEN: {}\n", line);
    }
}

}  // namespace ibvcap
