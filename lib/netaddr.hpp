// IPv4 addresses and GROUP:PORT endpoints as the operator types them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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

}  // namespace ibvcap
