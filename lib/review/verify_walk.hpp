// `ibvcap verify`'s walks of one output file (lib/review/verify.hpp): record
// by record, each frame fed to the run's own demux, so that the file's
// ledger is rebuilt from the file alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/bytes.hpp"
#include "formats/packet.hpp"
#include "lib/core/frame.hpp"
#include "lib/core/netaddr.hpp"
#include "lib/demux/demux.hpp"

namespace ibvcap::verify_parts {

// What the walk of one file found.
struct Walk {
    std::uint64_t frames = 0;
    std::string error;  // the file ends in, or holds, something that is not a whole record
};

// Frames of a stream's format (a CODIF frame or header, a VDIF frame)
// wrapped in the Ethernet/IPv4/UDP headers of their stream, so that the
// run's own demux counts them.
class Wrapper {
  public:
    Wrapper(Endpoint group, std::uint32_t antenna);
    // The frame for a datagram of `frame_bytes` of which `held` bytes (the
    // whole frame, or its header) are `bytes`.
    Frame frame(Bytes bytes, std::uint64_t frame_bytes);

  private:
    UdpHeaderSpec spec_;
    std::vector<std::uint8_t> scratch_;
};

// codif (or codifhdr: `headers_only`), vdif and raw files, and pcap or
// pcapng files through the pcap source.
Walk walk_codif(Bytes file, bool headers_only, Wrapper& wrap, Demux& demux);
Walk walk_vdif(Bytes file, Wrapper& wrap, Demux& demux);
Walk walk_raw(Bytes file, Demux& demux);
Walk walk_pcap(const std::string& path, Demux& demux);

}  // namespace ibvcap::verify_parts
