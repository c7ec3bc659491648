// All frames of a generator configuration, in the order it makes them: what
// the tests deliver to the simulated NIC.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/traffic/generator.hpp"

namespace ibvcap::test {

inline std::vector<std::vector<std::uint8_t>> frames_of(const GeneratorConfig& c) {
    Generator g(c);
    std::vector<std::vector<std::uint8_t>> out;
    GeneratedFrame f;
    while (g.next(f)) {
        out.emplace_back(f.bytes.begin(), f.bytes.end());
    }
    return out;
}

}  // namespace ibvcap::test
