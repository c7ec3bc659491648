// The generator's deterministic payload pattern: every byte of a frame's
// payload is a function of (antenna, thread, frame index), so any reader (a
// test, --gpu-verify, a person with a hex dump) can check a payload on its own.
//
// Payload word i (little-endian 64-bit) = key + i * 0x9E3779B97F4A7C15, where
// key = splitmix64(antenna << 32 | thread << 16) ^ splitmix64(frame index);
// a trailing partial word holds the low bytes of the next word.
#pragma once

#include <cstdint>

#include "formats/bytes.hpp"

namespace ibvcap {

std::uint64_t pattern_key(std::uint32_t antenna, std::uint16_t thread, std::uint64_t frame_index);
void fill_pattern(std::uint64_t key, MutableBytes out);
// Number of bytes of `payload` that differ from the pattern (0 = intact).
std::uint64_t check_pattern(std::uint64_t key, Bytes payload);

}  // namespace ibvcap
