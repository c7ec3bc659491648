#include "lib/core/netaddr.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <charconv>
#include <stdexcept>

namespace ibvcap {

std::optional<std::uint32_t> parse_ipv4(std::string_view text) {
    // inet_pton accepts exactly dotted-quad for AF_INET (no octal, no short forms).
    std::string s(text);
    in_addr addr{};
    if (inet_pton(AF_INET, s.c_str(), &addr) != 1) {
        return std::nullopt;
    }
    return ntohl(addr.s_addr);
}

std::string format_ipv4(std::uint32_t ip) {
    return fmt::format("{}.{}.{}.{}", ip >> 24, (ip >> 16) & 0xff, (ip >> 8) & 0xff, ip & 0xff);
}

bool is_multicast(std::uint32_t ip) {
    return (ip >> 28) == 0xe;
}

std::string Endpoint::to_string() const {
    return fmt::format("{}:{}", format_ipv4(ip), port);
}

Endpoint parse_group(std::string_view text, bool require_multicast) {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) {
        throw std::invalid_argument(
            fmt::format("bad group '{}': expected GROUP:PORT, e.g. 239.17.0.1:36001", text));
    }
    const auto ip = parse_ipv4(text.substr(0, colon));
    if (!ip) {
        throw std::invalid_argument(fmt::format("bad group '{}': '{}' is not an IPv4 address", text,
                                                text.substr(0, colon)));
    }
    const auto port_text = text.substr(colon + 1);
    unsigned port = 0;
    const auto [end, ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc{} || end != port_text.data() + port_text.size() || port == 0 ||
        port > 65535) {
        throw std::invalid_argument(
            fmt::format("bad group '{}': port must be 1-65535, got '{}'", text, port_text));
    }
    if (require_multicast && !is_multicast(*ip)) {
        throw std::invalid_argument(fmt::format(
            "bad group '{}': {} is not a multicast address (224.0.0.0/4)", text, format_ipv4(*ip)));
    }
    return Endpoint{*ip, static_cast<std::uint16_t>(port)};
}

bool is_source_specific(std::uint32_t ip) {
    return (ip >> 24) == 232;
}

std::pair<Endpoint, std::vector<std::uint32_t>> parse_group_and_sources(std::string_view text) {
    const auto at = text.find('@');
    const Endpoint group = parse_group(text.substr(0, at));
    std::vector<std::uint32_t> sources;
    if (at == std::string_view::npos) {
        return {group, sources};
    }
    std::string_view rest = text.substr(at + 1);
    for (;;) {
        const auto comma = rest.find(',');
        const std::string_view one = rest.substr(0, comma);
        const auto ip = parse_ipv4(one);
        if (!ip || *ip == 0 || is_multicast(*ip) || *ip == 0xffffffffu) {
            throw std::invalid_argument(fmt::format(
                "bad source '{}' in '{}': expected the sender's unicast IPv4 address, as in "
                "GROUP:PORT@SOURCE[,SOURCE...]",
                one, text));
        }
        for (const auto s : sources) {
            if (s == *ip) {
                throw std::invalid_argument(
                    fmt::format("source {} is given twice in '{}'", format_ipv4(*ip), text));
            }
        }
        sources.push_back(*ip);
        if (comma == std::string_view::npos) {
            break;
        }
        rest = rest.substr(comma + 1);
    }
    return {group, sources};
}

std::vector<std::string_view> split_group_list(std::string_view text) {
    std::vector<std::string_view> groups;
    if (text.empty()) {
        return {text};  // parse_group says what is wrong with it
    }
    std::size_t start = 0;  // of the group being read
    std::size_t item = 0;   // of the item after the last comma
    for (;;) {
        const std::size_t comma = text.find(',', item);
        const std::string_view one = text.substr(item, comma - item);
        if (one.empty()) {
            throw std::invalid_argument(fmt::format(
                "'{}': an empty item in the list (two commas, or one at either end): give "
                "GROUP:PORT[@SOURCE[,SOURCE...]][/FORMAT], groups separated by commas or spaces",
                text));
        }
        const std::string_view group = text.substr(start, item - start);
        const bool continues_sources = item > start && one.find(':') == std::string_view::npos &&
                                       group.find('@') != std::string_view::npos &&
                                       group.find('/') == std::string_view::npos;
        if (item > start && !continues_sources) {
            groups.push_back(text.substr(start, item - 1 - start));
            start = item;
        }
        if (comma == std::string_view::npos) {
            groups.push_back(text.substr(start));
            return groups;
        }
        item = comma + 1;
    }
}

const std::vector<std::uint32_t>* sources_for(const std::vector<SourceFilter>& filters,
                                              const Endpoint& group) {
    for (const auto& f : filters) {
        if (f.group == group) {
            return &f.sources;
        }
    }
    return nullptr;
}

}  // namespace ibvcap
