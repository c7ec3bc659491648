// IPv4 addresses and GROUP:PORT endpoints as the operator types them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ibvcap {

// Dotted-quad IPv4 to host byte order; nullopt for anything else.
std::optional<std::uint32_t> parse_ipv4(std::string_view text);
std::string format_ipv4(std::uint32_t ip);
bool is_multicast(std::uint32_t ip);

struct Endpoint {
    std::uint32_t ip = 0;  // host byte order
    std::uint16_t port = 0;
    friend bool operator==(const Endpoint&, const Endpoint&) = default;
    std::string to_string() const;
};

// "239.17.0.1:36001" → Endpoint. Throws std::invalid_argument with a message
// naming the problem (not an address, port missing or 0, not multicast).
Endpoint parse_group(std::string_view text, bool require_multicast = true);

// The source-specific multicast range, 232.0.0.0/8 (RFC 4607 §1): a network
// that routes it with PIM-SSM forwards a group only to joins that name its
// source (IGMPv3, RFC 3376).
bool is_source_specific(std::uint32_t ip);

// A group and the sources a source-specific join names ("239.1.0.1:4001@
// 10.0.0.11,10.0.0.12", as smcroute and `iperf --ssm-host` name a
// source-specific group by source and group).
struct SourceFilter {
    Endpoint group;
    std::vector<std::uint32_t> sources;  // host byte order; never empty
};
// "GROUP:PORT" or "GROUP:PORT@SOURCE[,SOURCE...]": the endpoint, and the
// sources when given. Throws std::invalid_argument naming the problem (a
// source that is not a unicast IPv4 address, an empty list, one repeated).
std::pair<Endpoint, std::vector<std::uint32_t>> parse_group_and_sources(std::string_view text);
// One command-line argument that may list several groups, split into them:
// a comma followed by GROUP:PORT (a ':') starts a new group; one followed by
// an address continues the source list of a group given with '@' (and no
// /FORMAT yet): "232.1.0.1:4001@10.0.0.11,10.0.0.12,239.1.0.2:4001/vdif" is
// "232.1.0.1:4001@10.0.0.11,10.0.0.12" and "239.1.0.2:4001/vdif". Throws
// std::invalid_argument for an empty item (",," or a comma at either end).
std::vector<std::string_view> split_group_list(std::string_view text);
// The sources `filters` names for `group`; null when it names none (any source).
const std::vector<std::uint32_t>* sources_for(const std::vector<SourceFilter>& filters,
                                              const Endpoint& group);

}  // namespace ibvcap
