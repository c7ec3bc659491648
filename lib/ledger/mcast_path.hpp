// The multicast path (docs/operations.md, "The multicast path"): for each
// group a run joined, when the join was made and when its first frame came;
// for each capture interface, whether an IGMP querier was heard during the
// run. The report's "groups" and "igmp" keys and the summary's lines about
// groups that never arrived (docs/formats.md, "The report").
//
// A joined group that is never seen does not change the verdict by itself:
// the ledger judges what arrived (an expected-streams manifest is what makes
// absence count). The summary says it loudly, with the likely cause.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lib/core/netaddr.hpp"

namespace ibvcap {

class Ledger;

// One membership the run held (a kernel IGMP join on the interface).
struct GroupJoin {
    Endpoint group;
    std::string interface;
    std::int64_t joined_ns = 0;  // CLOCK_REALTIME when the join succeeded
    std::uint64_t rejoins = 0;   // after a port came back up
};

// What was heard of IGMP queriers on one interface during the run
// (lib/sources/igmp_query.hpp).
struct QuerierWatch {
    enum class State {
        heard,      // at least one valid membership query arrived
        not_heard,  // the socket listened for the whole run and none arrived
        unknown,    // the socket could not be opened (no CAP_NET_RAW): `why`
    };
    std::string interface;
    State state = State::unknown;
    std::string why;                    // State::unknown: the reason, one line
    std::uint64_t queries = 0;          // valid queries, general and group-specific
    std::uint64_t general_queries = 0;  // group 0.0.0.0
    std::uint64_t group_queries = 0;    // group-specific (and group-and-source-specific)
    std::uint64_t malformed = 0;        // passed the filter, refused by the parser
    std::uint32_t last_querier = 0;     // IPv4 source of the last query, host order
    int last_version = 0;               // 1, 2 or 3 (RFC 3376 §7.1); 0: none heard
    std::int64_t last_query_ns = 0;     // CLOCK_REALTIME
    double listened_s = 0;              // how long the socket listened
};

struct MulticastPath {
    // true: a live capture that joins its groups (capture); false: `read`,
    // which joins nothing (the report says "not applicable" for IGMP).
    bool live = false;
    std::vector<GroupJoin> joins;
    std::vector<QuerierWatch> queriers;
    // `read` with -g: the groups asked for (listed even when never seen).
    std::vector<Endpoint> named_groups;
    // The groups given as GROUP:PORT@SOURCE: joined (live) and taken from
    // those sources only (the report's groups[].sources).
    std::vector<SourceFilter> sources;
};

// One group's line of the report.
struct GroupPath {
    Endpoint group;
    std::string interface;                  // empty for `read`
    std::optional<std::int64_t> joined_ns;  // none for `read`
    std::optional<std::int64_t> first_ns;   // none: never seen
    std::uint64_t frames = 0;               // frames of the group's streams
    std::uint64_t rejoins = 0;
};
// The groups of a run: every join (live), or every group a frame was seen on
// and every group named (read), in that order, each once.
std::vector<GroupPath> group_paths(const Ledger& ledger, const MulticastPath& path);

// The report's "groups" and "igmp" values.
nlohmann::json groups_json(const Ledger& ledger, const MulticastPath& path);
nlohmann::json igmp_json(const MulticastPath& path);
// The summary's lines: one per group never seen, with the likely cause.
std::vector<std::string> never_seen_lines(const Ledger& ledger, const MulticastPath& path);
void print_multicast_path(std::FILE* out, const Ledger& ledger, const MulticastPath& path);

}  // namespace ibvcap
