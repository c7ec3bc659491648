// `ibvcap gen -w FILE`: the generator's frames into a pcap file.
#pragma once

#include <cstdint>
#include <string>

#include "lib/traffic/generator.hpp"

namespace ibvcap {

// Write every frame of `generator` to a nanosecond pcap file. Throws
// std::runtime_error (one line) when the file cannot be written completely.
std::uint64_t write_generated_pcap(Generator& generator, const std::string& path);

}  // namespace ibvcap
