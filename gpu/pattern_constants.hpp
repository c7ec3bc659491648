// The generator's payload pattern (lib/traffic/pattern.hpp) in a form both the host
// compiler and nvcc can use: constexpr functions with no dependency on the
// rest of lib/, marked __host__ __device__ under nvcc. The device kernels
// (gpu/kernels.cu) verify payloads with these; test/test_gpu.cpp checks on the
// host that they agree with lib/traffic/pattern.cpp bit for bit, so the two copies of
// the formula cannot drift apart unnoticed.
//
// Payload word i (little-endian 64-bit) = key + i * kStep, where
// key = splitmix64(antenna << 32 | thread << 16) ^ splitmix64(frame index);
// a trailing partial word holds the low bytes of the next word.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define IBVCAP_HOST_DEVICE __host__ __device__
#else
#define IBVCAP_HOST_DEVICE
#endif

namespace ibvcap::gpu::pattern {

inline constexpr std::uint64_t kStep = 0x9E3779B97F4A7C15ull;

IBVCAP_HOST_DEVICE constexpr std::uint64_t splitmix64(std::uint64_t x) {
    x += kStep;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

IBVCAP_HOST_DEVICE constexpr std::uint64_t key(std::uint32_t antenna, std::uint32_t thread,
                                               std::uint64_t frame_index) {
    return splitmix64((std::uint64_t{antenna} << 32) | (std::uint64_t{thread & 0xffffu} << 16)) ^
           splitmix64(frame_index);
}

// Word i of a payload with `key`.
IBVCAP_HOST_DEVICE constexpr std::uint64_t word(std::uint64_t key, std::uint64_t i) {
    return key + i * kStep;
}

// Bytes of a 64-bit word that are not zero (mismatched bytes of got ^ want).
IBVCAP_HOST_DEVICE constexpr unsigned nonzero_bytes(std::uint64_t x) {
    unsigned n = 0;
    for (int b = 0; b < 8; ++b) {
        n += ((x >> (8 * b)) & 0xffu) != 0 ? 1u : 0u;
    }
    return n;
}

}  // namespace ibvcap::gpu::pattern
