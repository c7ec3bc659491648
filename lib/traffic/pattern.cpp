#include "lib/traffic/pattern.hpp"

namespace ibvcap {

namespace {
constexpr std::uint64_t kStep = 0x9E3779B97F4A7C15ull;

std::uint64_t splitmix64(std::uint64_t x) {
    x += kStep;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
}  // namespace

std::uint64_t pattern_key(std::uint32_t antenna, std::uint16_t thread, std::uint64_t frame_index) {
    return splitmix64((std::uint64_t{antenna} << 32) | (std::uint64_t{thread} << 16)) ^
           splitmix64(frame_index);
}

void fill_pattern(std::uint64_t key, MutableBytes out) {
    const std::size_t words = out.size() / 8;
    std::uint64_t w = key;
    for (std::size_t i = 0; i < words; ++i, w += kStep) {
        store_le64(out.data() + i * 8, w);
    }
    for (std::size_t j = words * 8; j < out.size(); ++j) {
        out[j] = static_cast<std::uint8_t>(w >> (8 * (j - words * 8)));
    }
}

std::uint64_t check_pattern(std::uint64_t key, Bytes payload) {
    std::uint64_t bad = 0;
    const std::size_t words = payload.size() / 8;
    std::uint64_t w = key;
    for (std::size_t i = 0; i < words; ++i, w += kStep) {
        const std::uint64_t got = load_le64(payload.data() + i * 8);
        if (got != w) {
            for (int b = 0; b < 8; ++b) {
                bad += ((got ^ w) >> (8 * b)) & 0xff ? 1u : 0u;
            }
        }
    }
    for (std::size_t j = words * 8; j < payload.size(); ++j) {
        bad += payload[j] != static_cast<std::uint8_t>(w >> (8 * (j - words * 8))) ? 1u : 0u;
    }
    return bad;
}

}  // namespace ibvcap
