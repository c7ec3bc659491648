// Offline source: a pcap or pcapng file read through libpcap, frame by frame,
// into the demultiplexer.
#pragma once

#include <pcap/pcap.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "lib/demux.hpp"

namespace ibvcap {

class PcapFileSource {
  public:
    // Opens the file; throws std::runtime_error with a one-line message naming
    // the file and the cause (missing, unreadable, not a capture, not Ethernet).
    explicit PcapFileSource(const std::string& path);
    ~PcapFileSource();
    PcapFileSource(const PcapFileSource&) = delete;
    PcapFileSource& operator=(const PcapFileSource&) = delete;

    struct Result {
        std::uint64_t frames = 0;
        bool complete = false;  // reached the end of the file
        std::string error;      // a read error (truncated or corrupt file)
    };
    // Deliver frames until the end of the file, an error, `max_frames` (0 = no
    // limit), or `stop` becomes true. Frames before an error are delivered.
    Result run(Demux& demux, std::uint64_t max_frames, const std::atomic<bool>& stop);

  private:
    std::string path_;
    pcap_t* pcap_ = nullptr;
};

}  // namespace ibvcap
