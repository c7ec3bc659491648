// Test helper: a reader of pcapng files written from the specification
// (IETF draft-ietf-opsawg-pcapng, sections 3-4), independent of ibvcap's
// encoder (formats/pcapng.hpp): every block's two lengths, their alignment,
// and the options up to opt_endofopt. libpcap and tshark do not show the
// statistics blocks' values; this does.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "formats/bytes.hpp"
#include "formats/pcapng.hpp"

namespace ibvcap::test {

using Blob = std::vector<std::uint8_t>;

struct Block {
    std::uint32_t type = 0;
    std::size_t offset = 0;
    Blob body;                                   // between the two lengths
    std::multimap<std::uint16_t, Blob> options;  // code → value (unpadded)
    Blob option(std::uint16_t code) const {
        const auto it = options.find(code);
        return it == options.end() ? Blob{} : it->second;
    }
    std::string text(std::uint16_t code) const {
        const Blob b = option(code);
        return {b.begin(), b.end()};
    }
    std::uint64_t u64(std::uint16_t code) const {
        const Blob b = option(code);
        return b.size() == 8 ? load_le64(b.data()) : ~std::uint64_t{0};
    }
    // An ISB time option: high 32 bits, then low 32 bits.
    std::uint64_t time(std::uint16_t code) const {
        const Blob b = option(code);
        return b.size() == 8 ? (std::uint64_t{load_le32(b.data())} << 32) | load_le32(b.data() + 4)
                             : ~std::uint64_t{0};
    }
};

// Where a block's options start in its body (the fixed fields before them).
inline std::size_t options_at(const Block& b) {
    switch (b.type) {
        case pcapng::kSectionHeaderBlock:
            return 16;  // magic, major, minor, section length
        case pcapng::kInterfaceDescriptionBlock:
            return 8;  // link type, reserved, snaplen
        case pcapng::kInterfaceStatisticsBlock:
            return 12;  // interface, timestamp high, low
        case pcapng::kEnhancedPacketBlock:
            return 20 + ((load_le32(b.body.data() + 12) + 3u) & ~3u);
        default:
            return b.body.size();
    }
}

// The file's blocks; `error` says where it is not whole pcapng.
inline std::vector<Block> parse(const Blob& f, std::string& error) {
    std::vector<Block> out;
    std::size_t at = 0;
    while (at < f.size()) {
        if (f.size() - at < 12) {
            error = fmt::format("{} bytes at {}: less than a block", f.size() - at, at);
            return out;
        }
        Block b;
        b.type = load_le32(f.data() + at);
        b.offset = at;
        const std::uint32_t len = load_le32(f.data() + at + 4);
        if (len < 12 || len % 4 != 0 || len > f.size() - at) {
            error = fmt::format("block at {}: total length {} (file has {} bytes left)", at, len,
                                f.size() - at);
            return out;
        }
        if (load_le32(f.data() + at + len - 4) != len) {
            error = fmt::format("block at {}: trailing length {} != {}", at,
                                load_le32(f.data() + at + len - 4), len);
            return out;
        }
        b.body.assign(f.begin() + static_cast<long>(at + 8),
                      f.begin() + static_cast<long>(at + len - 4));
        if (b.type == pcapng::kEnhancedPacketBlock && b.body.size() < 20) {
            error = fmt::format("EPB at {} too short", at);
            return out;
        }
        for (std::size_t o = options_at(b); o + 4 <= b.body.size();) {
            const std::uint16_t code = static_cast<std::uint16_t>(b.body[o] | (b.body[o + 1] << 8));
            const std::uint16_t n =
                static_cast<std::uint16_t>(b.body[o + 2] | (b.body[o + 3] << 8));
            if (code == pcapng::kOptEndOfOpt) {
                break;
            }
            if (o + 4 + n > b.body.size()) {
                error = fmt::format("block at {}: option {} runs past the block", at, code);
                return out;
            }
            b.options.emplace(code, Blob(b.body.begin() + static_cast<long>(o + 4),
                                         b.body.begin() + static_cast<long>(o + 4 + n)));
            o += 4 + ((n + 3u) & ~3u);
        }
        out.push_back(std::move(b));
        at += len;
    }
    return out;
}

inline std::vector<Block> parse_ok(const Blob& f) {
    std::string error;
    auto blocks = parse(f, error);
    EXPECT_EQ(error, "");
    return blocks;
}

inline std::vector<const Block*> of_type(const std::vector<Block>& blocks, std::uint32_t type) {
    std::vector<const Block*> out;
    for (const auto& b : blocks) {
        if (b.type == type) {
            out.push_back(&b);
        }
    }
    return out;
}

}  // namespace ibvcap::test
