// The verbs engine's flow rules (lib/sources/verbs/engine.hpp): the plan's
// entries (a group, or a group and antenna with --hw-demux), the rules that
// steer each entry's frames to its QP, their flow tags where a QP is shared,
// and what their counters say per entry: matched, undelivered, and the
// watchdog's alarms.
//
// Many rules on one QP (issue 44): each rule is a flow-table entry of its
// own whose destination is the QP's TIR (kernel drivers/infiniband/hw/mlx5/
// fs.c, create_flow_rule: the raw-packet QP's rq.tirn), so a QP shared by 64
// groups costs the flow table what 64 QPs' rules cost: 64 entries of the
// 2^16 that every verbs multicast rule of the device shares (fs.c
// get_flow_table: MLX5_FS_MAX_ENTRIES at MLX5_IB_FLOW_MCAST_PRIO; past it
// ENOSPC, fs_core.c add_rule_fg). What a shared QP loses is the QP as a
// label: a completion names the QP (its wr_id), not the rule. The rule's
// flow tag names it (IBV_FLOW_SPEC_ACTION_TAG; the CQE's sop_drop_qpn bits,
// rdma-core providers/mlx5/cq.c mlx5_cq_read_flow_tag), so each entry of a
// shared QP tags its rules with its index + 1 and the poll loop counts
// every frame for its entry (engine_poll.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "lib/core/netaddr.hpp"
#include "lib/core/usage_error.hpp"
#include "lib/sources/verbs/engine.hpp"
#include "lib/sources/verbs/engine_ring.hpp"

namespace ibvcap {

void VerbsEngine::plan_entries() {
    const auto add = [this](const Endpoint& g, std::uint32_t antenna) {
        Entry e;
        e.group = g;
        e.antenna = antenna;
        e.label = antenna == 0 ? g.to_string()
                               : fmt::format("{}/{}", g.to_string(), format_ipv4(antenna));
        entries_.push_back(std::move(e));
    };
    for (const auto& g : options_.groups) {
        if (!options_.hw_demux) {
            add(g, 0);
            continue;
        }
        const auto* from = sources_for(options_.sources, g);
        const std::size_t before = entries_.size();
        for (const auto a : options_.antennas) {
            // A source-specific group: the antennas it names a source of.
            if (from == nullptr || std::find(from->begin(), from->end(), a) != from->end()) {
                add(g, a);
            }
        }
        if (entries_.size() == before) {
            // The operator's mistake: exit 2 (lib/core/usage_error.hpp).
            throw UsageError(
                fmt::format("{} names no source among the --antenna given, so --hw-demux would "
                            "make no rule for it: list its sources with --antenna",
                            g.to_string()));
        }
    }
}

void VerbsEngine::create_rules(bool counters) {
    bool counting = counters;
    for (auto& e : entries_) {
        Qp& q = *qps_[e.qp];
        // One rule for the entry's antenna, or any source; a source-specific
        // group's entry gets one rule per source it names (verbs-mlx5-2.md N7).
        std::vector<std::uint32_t> from{e.antenna};
        if (const auto* named = sources_for(options_.sources, e.group);
            named != nullptr && e.antenna == 0) {
            from = *named;
        }
        for (const std::uint32_t src : from) {
            verbs::FlowMatch m;
            multicast_mac(e.group.ip, m.dst_mac.data());
            m.dst_ip = e.group.ip;
            m.src_ip = src;
            m.dst_port = e.group.port;
            m.match_vlan = options_.vlan_ids.size() == 1;
            m.vlan_id = m.match_vlan ? options_.vlan_ids.front() : 0;
            m.tag = q.tagged ? e.tag : 0;
            e.flows.push_back(create_tagged_flow(q, e, m, counting));
            // `counting` now says whether this rule got its counter, m.tag
            // which tag it carries (0 where the device refused it).
            resources_.flows.push_back(FlowRecord{format_ipv4(e.group.ip), e.group.port,
                                                  src == 0 ? "" : format_ipv4(src), q.qp->qp_num(),
                                                  counting, m.tag});
        }
    }
}

std::unique_ptr<verbs::Flow> VerbsEngine::create_tagged_flow(Qp& q, const Entry& e,
                                                             verbs::FlowMatch& match,
                                                             bool& counters) {
    if (match.tag == 0) {
        return create_flow(q, match, counters);
    }
    try {
        return create_flow(q, match, counters);
    } catch (const std::system_error& err) {
        // The tag refused: EEXIST when a rule of the same match (another
        // capture of this group on the port) made the flow-table entry with
        // another tag or none (kernel mlx5 fs_core.c check_conflicting_ftes),
        // EOPNOTSUPP where the device has no tag action. The rule is made
        // without it; this QP's frames can then no longer be told apart by
        // group, and its undelivered count is the queue's (counters_for).
        match.tag = 0;
        auto flow = create_flow(q, match, counters);
        ++stats_.untagged_rules;
        if (q.tagged) {
            q.tagged = false;
            ledger_->add_note(fmt::format(
                "{} refused the flow tag of the rule for {} ({}): the {} entries of {} cannot be "
                "told apart at the NIC, so their undelivered frames are counted for the queue "
                "({}/flow/{}/undelivered); restart with --queues {} for a queue per group",
                device_.caps().name, e.label, err.what(), q.entries.size(), q.label,
                device_.caps().name, q.label, entries_.size()));
        }
        return flow;
    }
}

std::unique_ptr<verbs::Flow> VerbsEngine::create_flow(Qp& q, const verbs::FlowMatch& match,
                                                      bool& counters) {
    if (!counters) {
        if (stats_.uncounted_rules > 0) {
            ++stats_.uncounted_rules;
        }
        return q.qp->create_flow(match, false);
    }
    try {
        return q.qp->create_flow(match, true);
    } catch (const std::system_error& e) {
        // Whether the device grants a flow counter is known only now: the
        // probe's attach is bookkeeping in user space (rdma-core
        // providers/mlx5/verbs.c mlx5_attach_counters_point_flow). The rule
        // is made without it, and so are the rest; a rule that fails again
        // fails the run with its own error.
        auto flow = q.qp->create_flow(match, false);
        counters = false;
        ++stats_.uncounted_rules;
        ledger_->add_note(fmt::format(
            "{} refused a counted flow rule for {} ({}): this and later rules have no counter, "
            "so their per-group NIC drop counts are not available (out_of_buffer still counts "
            "every drop)",
            device_.caps().name, q.label, e.what()));
        return flow;
    }
}

std::optional<std::uint64_t> VerbsEngine::rule_matches(Entry& e) {
    std::optional<std::uint64_t> matched;
    for (auto& f : e.flows) {
        if (const auto n = f->matched_packets()) {
            matched = matched.value_or(0) + *n;
        }
    }
    return matched;
}

bool VerbsEngine::attributable(const Qp& q) const {
    return q.entries.size() == 1 ||
           (q.tagged && q.unattributed_published.load(std::memory_order_relaxed) == 0);
}

std::uint64_t VerbsEngine::entry_delivered(const Entry& e) const {
    const Qp& q = *qps_[e.qp];
    if (q.entries.size() == 1) {
        return q.delivered_published.load(std::memory_order_relaxed);
    }
    return entry_delivered_[static_cast<std::size_t>(&e - entries_.data())].load(
        std::memory_order_relaxed);
}

std::vector<std::string> VerbsEngine::watchdog() {
    std::vector<std::string> alarms;
    // A device already fatal answers counter reads with EIO (mlx5 cmd.c
    // mlx5_internal_err_ret_value): no alarm can come of it, and the run's
    // error is the device's, which the poll thread reports (verbs-mlx5-3.md
    // R8). The poll thread may not have seen the event yet: the read's EIO
    // says the same.
    if (fatal_seen_.load(std::memory_order_relaxed)) {
        return alarms;
    }
    std::vector<std::optional<std::uint64_t>> matches;
    try {
        matches = read_rule_matches();
    } catch (const std::system_error& e) {
        if (e.code().value() == EIO) {
            fatal_seen_.store(true, std::memory_order_relaxed);
            return alarms;
        }
        throw;
    }
    const std::string& dev = device_.caps().name;
    const auto check = [&](std::uint64_t matched, std::uint64_t delivered, std::uint64_t& seen,
                           std::uint64_t& got, const std::string& label) {
        if (matched > seen && delivered == got) {
            alarms.push_back(fmt::format(
                "{} on {}: the NIC steered {} frames to it since the last check but none were "
                "delivered (ring starved or queue stuck; see out_of_buffer)",
                label, dev, matched - seen));
        }
        seen = matched;
        got = delivered;
    };
    for (auto& qp : qps_) {
        Qp& q = *qp;
        // Without rule counters the NIC's side cannot be seen.
        bool all_counted = true;
        std::uint64_t sum = 0;
        for (const std::uint32_t i : q.entries) {
            all_counted = all_counted && matches[i].has_value();
            sum += matches[i].value_or(0);
        }
        if (attributable(q)) {
            // Each group alone: one that went silent among live ones shows.
            for (const std::uint32_t i : q.entries) {
                if (matches[i]) {
                    Entry& e = entries_[i];
                    check(*matches[i], entry_delivered(e), e.watch_matched, e.watch_delivered,
                          e.label);
                }
            }
        } else if (all_counted) {
            check(sum, q.delivered_published.load(std::memory_order_relaxed), q.watch_matched,
                  q.watch_delivered, q.label);
        }
    }
    return alarms;
}

std::vector<SourceCounter> VerbsEngine::read_flow_counters() {
    return counters_for(read_rule_matches());
}

std::vector<std::optional<std::uint64_t>> VerbsEngine::read_rule_matches() {
    std::vector<std::optional<std::uint64_t>> matches;
    matches.reserve(entries_.size());
    for (auto& e : entries_) {
        matches.push_back(rule_matches(e));
    }
    return matches;
}

std::vector<SourceCounter> VerbsEngine::counters_for(
    const std::vector<std::optional<std::uint64_t>>& matches) {
    std::vector<SourceCounter> out;
    stats_.flow_matched = 0;
    const std::string& dev = device_.caps().name;
    const auto undelivered = [](std::uint64_t matched, std::uint64_t delivered) {
        return matched > delivered ? matched - delivered : 0;
    };
    for (const auto& qp : qps_) {
        const Qp& q = *qp;
        const bool each = attributable(q);
        bool all_counted = true;
        std::uint64_t sum = 0;
        for (const std::uint32_t i : q.entries) {
            if (i >= matches.size() || !matches[i]) {
                all_counted = false;
                continue;
            }
            const Entry& e = entries_[i];
            const std::uint64_t matched = *matches[i];
            sum += matched;
            stats_.flow_matched += matched;
            out.push_back(
                SourceCounter{fmt::format("{}/flow/{}/matched", dev, e.label), matched, false});
            if (each) {
                out.push_back(SourceCounter{fmt::format("{}/flow/{}/undelivered", dev, e.label),
                                            undelivered(matched, entry_delivered(e)), false});
            }
        }
        if (!each && all_counted) {
            // The groups of this queue cannot be told apart: its count.
            out.push_back(SourceCounter{
                fmt::format("{}/flow/{}/undelivered", dev, q.label),
                undelivered(sum, q.delivered_published.load(std::memory_order_relaxed)), false});
        }
        if (const auto n = q.unattributed_published.load(std::memory_order_relaxed); n > 0) {
            out.push_back(
                SourceCounter{fmt::format("{}/flow/{}/unattributed", dev, q.label), n, false});
        }
    }
    return out;
}

std::string VerbsEngine::recovery_note(const Qp& q) const {
    std::string groups;
    constexpr std::size_t kNamed = 4;
    for (std::size_t i = 0; i < q.entries.size() && i < kNamed; ++i) {
        groups += (i == 0 ? "" : ", ") + entries_[q.entries[i]].label;
    }
    if (q.entries.size() > kNamed) {
        groups += fmt::format(" and {} more", q.entries.size() - kNamed);
    }
    return fmt::format(
        "{}: QP {:#x} ({}) was reset {} time(s) after an error: one recovery for all {} of its "
        "entries ({}), whose frames stopped together meanwhile (their undelivered counts and "
        "out_of_buffer; --queues gives groups queues of their own)",
        device_.caps().name, q.qp->qp_num(), q.label, q.recoveries, q.entries.size(), groups);
}

}  // namespace ibvcap
