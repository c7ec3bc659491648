// `ibvcap gen -w FILE`: the generator's frames into a pcap file.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "lib/traffic/generator.hpp"

namespace ibvcap {

// Write every frame of `generator` to a nanosecond pcap file ("-": standard
// output, with no sidecar index). When `stop` is set (Ctrl-C, SIGTERM) the
// run ends at the next slot boundary (Generator::end_early): the file holds
// whole records and its index, and the truth is that of what was written.
// Throws std::runtime_error (one line) when the file cannot be written
// completely. A FIFO with no reader yet is waited for before the first frame
// (said on stderr after a second); `stop` ends that wait too: then nothing
// is generated (the truth has no frames), 0 is returned and
// `*stopped_waiting` set.
std::uint64_t write_generated_pcap(Generator& generator, const std::string& path,
                                   const std::atomic<bool>* stop = nullptr,
                                   bool* stopped_waiting = nullptr);

}  // namespace ibvcap
