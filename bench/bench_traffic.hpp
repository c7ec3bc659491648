// The traffic both benchmark programs feed: 6 antennas x 2 CODIF threads x
// 2 groups of 8298-byte frames (8192-byte payloads), one period per stream.
#pragma once

#include <cstddef>
#include <cstdint>

#include "formats/codif.hpp"
#include "lib/netaddr.hpp"
#include "lib/traffic/generator.hpp"

namespace ibvcap::bench {

constexpr std::size_t kHeaderOffset = 42;        // Ethernet 14 + IPv4 20 + UDP 8
constexpr std::uint64_t kFramesPerPeriod = 256;  // one period per stream per pass

inline GeneratorConfig traffic() {
    GeneratorConfig c;
    for (std::uint32_t a = 0; a < 6; ++a) {
        c.antennas.push_back(0x0a00000bu + a);  // 10.0.0.11, .12, ... as ibvcap gen
    }
    c.groups = {parse_group("239.17.0.1:36001"), parse_group("239.17.0.2:36001")};
    c.threads = 2;
    c.frames = kFramesPerPeriod;
    c.frames_per_period = kFramesPerPeriod;
    c.payload_bytes = 8192;
    return c;
}

}  // namespace ibvcap::bench
