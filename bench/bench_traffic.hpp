// The traffic both benchmark programs feed: 6 antennas x 2 CODIF threads x
// 2 groups of 8298-byte frames (8192-byte payloads), one period per stream;
// and the same streams as VDIF or VTP frames (vdif_traffic).
#pragma once

#include <cstddef>
#include <cstdint>

#include "formats/codif.hpp"
#include "lib/core/netaddr.hpp"
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

// `c` as VDIF (standard 32-byte headers) or VTP (an 8-byte packet sequence
// number, then the VDIF frame) datagrams: one stream per (group, antenna =
// station, thread), one second per stream per pass (frames per second = the
// frame slots per stream), and Ethernet frames as long as CODIF's (8298
// bytes: a 8224-byte VDIF payload, or 8184 bytes after the sequence number;
// VTP with 4 channels, so that 8184 bytes hold whole 8-byte samples).
inline GeneratorConfig vdif_traffic(GeneratorConfig c, StreamFormat format) {
    const std::uint64_t frame_bytes = c.frame_bytes();
    c.format = format;
    c.vdif.frames_per_second = c.frames;
    if (format == StreamFormat::vtp) {
        c.nchan = 4;
    }
    c.payload_bytes = static_cast<std::uint32_t>(frame_bytes - kHeaderOffset - c.head_bytes());
    return c;
}

}  // namespace ibvcap::bench
