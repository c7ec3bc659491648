// IGMP packets built by hand for the tests (test_mcast_path.cpp) and the
// e2e querier (igmp_querier.cpp): an IPv4 header with the Router Alert option
// (RFC 2113; RFC 2236 §2 and RFC 3376 §4 send every IGMP message with it and
// TTL 1), then an IGMP message. Layouts: RFC 2236 §2 (v1/v2 query, report,
// leave: 8 octets) and RFC 3376 §4.1 (v3 query: 12 octets + 4 per source).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ibvcap::igmp_packets {

inline constexpr std::uint32_t kAllHosts = (224u << 24) | 1u;  // 224.0.0.1

inline void put16(std::vector<std::uint8_t>& p, std::size_t at, std::uint32_t v) {
    p[at] = static_cast<std::uint8_t>(v >> 8);
    p[at + 1] = static_cast<std::uint8_t>(v);
}
inline void put32(std::vector<std::uint8_t>& p, std::size_t at, std::uint32_t v) {
    put16(p, at, v >> 16);
    put16(p, at + 2, v & 0xffff);
}
inline std::uint16_t checksum(const std::uint8_t* p, std::size_t n) {
    std::uint32_t sum = 0;
    for (std::size_t i = 0; i < n; i += 2) {
        sum += std::uint32_t{p[i]} << 8 | (i + 1 < n ? p[i + 1] : 0u);
    }
    while (sum >> 16) {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    return static_cast<std::uint16_t>(~sum);
}

// An IPv4 packet (with the Router Alert option, IHL 6) carrying `igmp`,
// protocol `proto`; the IGMP checksum filled in unless `bad_checksum`.
inline std::vector<std::uint8_t> ipv4(std::uint32_t src, std::uint32_t dst,
                                      std::vector<std::uint8_t> igmp, std::uint8_t proto = 2,
                                      bool bad_checksum = false) {
    if (igmp.size() >= 4) {
        igmp[2] = igmp[3] = 0;
        const std::uint16_t c = checksum(igmp.data(), igmp.size());
        igmp[2] = static_cast<std::uint8_t>(c >> 8);
        igmp[3] = static_cast<std::uint8_t>(c ^ (bad_checksum ? 0x5a : 0));
    }
    std::vector<std::uint8_t> p(24 + igmp.size());
    p[0] = 0x46;  // version 4, IHL 6 (24 octets)
    p[1] = 0xc0;
    put16(p, 2, static_cast<std::uint32_t>(24 + igmp.size()));
    p[8] = 1;  // TTL 1
    p[9] = proto;
    put32(p, 12, src);
    put32(p, 16, dst);
    p[20] = 0x94;  // Router Alert (RFC 2113)
    p[21] = 4;
    const std::uint16_t h = checksum(p.data(), 24);  // the IPv4 header checksum (RFC 791)
    p[10] = static_cast<std::uint8_t>(h >> 8);
    p[11] = static_cast<std::uint8_t>(h);
    for (std::size_t i = 0; i < igmp.size(); ++i) {
        p[24 + i] = igmp[i];
    }
    return p;
}

// IGMPv1/v2 (8 octets) and IGMPv3 queries (12 + 4 * sources).
inline std::vector<std::uint8_t> query_v2(std::uint32_t group, std::uint8_t max_resp = 100) {
    std::vector<std::uint8_t> q(8);
    q[0] = 0x11;
    q[1] = max_resp;
    put32(q, 4, group);
    return q;
}
inline std::vector<std::uint8_t> query_v3(std::uint32_t group,
                                          std::vector<std::uint32_t> sources = {}) {
    std::vector<std::uint8_t> q(12 + 4 * sources.size());
    q[0] = 0x11;
    q[1] = 100;
    put32(q, 4, group);
    q[8] = 2;    // QRV 2
    q[9] = 125;  // QQIC 125 s
    put16(q, 10, static_cast<std::uint32_t>(sources.size()));
    for (std::size_t i = 0; i < sources.size(); ++i) {
        put32(q, 12 + 4 * i, sources[i]);
    }
    return q;
}
inline std::vector<std::uint8_t> igmp_message(std::uint8_t type, std::uint32_t group) {
    std::vector<std::uint8_t> m(8);
    m[0] = type;
    put32(m, 4, group);
    return m;
}

}  // namespace ibvcap::igmp_packets
