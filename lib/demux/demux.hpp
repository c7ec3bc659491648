// The demultiplexer: every frame from any source (verbs, pcap live, pcap file)
// comes through on_frame(). It classifies the frame exactly once in the ledger,
// assigns CODIF frames to a stream (group, antenna = source IPv4, CODIF
// thread), tracks the stream's sequence, and routes the frame to the writers.
//
// Per frame it allocates nothing; the first frame of a new antenna, group or
// stream registers it (which allocates once).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/codif.hpp"
#include "formats/output.hpp"
#include "formats/packet.hpp"
#include "lib/frame.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/netaddr.hpp"
#include "lib/sinks/writer.hpp"

namespace ibvcap {

struct DemuxOptions {
    std::vector<Endpoint> groups;         // empty: every UDP destination is a group
    std::vector<std::uint32_t> antennas;  // empty: every new source IPv4 is an antenna
    std::vector<OutputFormat> formats;    // what to write; pcap is one file per run
    std::string output_dir = ".";
    std::string prefix = "ibvcap";
    bool pcap_headers_only = false;  // --pcap-snaplen headers: records end after the CODIF header
    std::size_t max_groups = 256;
    std::size_t max_antennas = 1024;
    std::size_t max_streams = 65536;
};

// Called for every CODIF frame when set (the -v per-packet line).
using FrameObserver =
    std::function<void(const Frame&, const UdpPacket&, const CodifHeader&, const StreamStats&)>;

class Demux {
  public:
    // `writer` may be null when `options.formats` is empty.
    Demux(DemuxOptions options, Ledger& ledger, Writer* writer);

    void on_frame(const Frame& frame);
    // Called for every CODIF frame, in the order added (the -v line, the block
    // sink). Add before the first frame.
    void add_observer(FrameObserver observer) { observers_.push_back(std::move(observer)); }
    void set_observer(FrameObserver observer) { add_observer(std::move(observer)); }

    // The file name a per-antenna output gets (docs/formats.md).
    static std::string output_path(const DemuxOptions& options, OutputFormat format,
                                   const Endpoint& group, std::uint32_t antenna);
    static std::string run_output_path(const DemuxOptions& options, OutputFormat format);

  private:
    struct Route {
        Writer::OutputId outputs[3] = {nullptr, nullptr, nullptr};  // raw, codif, codifhdr
    };

    // Index of the group / antenna, registering a new one when allowed; -1 when
    // the frame is not for us, -2 when a limit is reached.
    int group_index(std::uint32_t ip, std::uint16_t port);
    int antenna_index(std::uint32_t ip);
    Route& route(int group, int antenna);
    StreamStats* stream(int group, int antenna, const CodifHeader& header);
    void write_codif(const Route& route, const Frame& frame, const UdpPacket& packet);
    void accept(StreamStats& s, const Route& route, const Frame& frame, const UdpPacket& packet,
                const CodifHeader& header);

    // The fast path: a frame of a stream seen before, whose header has the
    // same parameters, skips the filters, the registries and the divisions
    // of validate_codif (they were all done for the stream's first frame).
    // An open-addressing table (linear probing, at most half full, doubled
    // as streams are registered: small tables stay in cache) of the known
    // streams, keyed by (destination, source, CODIF thread),
    // filled by the slow path.
    struct Known {
        std::uint32_t dst_ip = 0;
        std::uint32_t src_ip = 0;
        std::uint16_t dst_port = 0;
        std::uint16_t thread = 0;
        // The parameter fields of the stream's first frame.
        std::uint16_t period = 0;
        std::uint16_t nchan = 0;
        std::uint8_t nbits = 0;
        bool complex = false;
        CodifLayout layout = CodifLayout::v2;
        std::uint32_t framelength8 = 0;
        std::uint64_t totalsamples = 0;
        std::uint64_t frames_per_period = 0;
        std::size_t stream = 0;  // index in ledger_.streams()
        const Route* route = nullptr;
        bool same_parameters(const CodifHeader& h) const {
            return h.framelength8 == framelength8 && h.totalsamples == totalsamples &&
                   h.period == period && h.nchan == nchan && h.nbits == nbits &&
                   h.complex == complex && h.layout == layout;
        }
    };
    const Known* find_known(const UdpPacket& p, std::uint16_t thread) const;
    void add_known(const UdpPacket& p, const CodifHeader& h, std::size_t stream, const Route* r);
    void place_known(std::size_t n);

    DemuxOptions options_;
    Ledger& ledger_;
    Writer* writer_;
    Writer::OutputId pcap_output_ = nullptr;
    bool per_antenna_formats_[3] = {false, false, false};
    std::vector<Endpoint> groups_;
    std::vector<std::uint32_t> antennas_;
    std::unordered_map<std::uint32_t, int> antenna_lookup_;
    std::unordered_map<std::uint32_t, Route> routes_;               // (group << 16) | antenna
    std::unordered_map<std::uint64_t, std::size_t> stream_lookup_;  // (group, antenna, thread)
    std::vector<FrameObserver> observers_;
    std::vector<Known> known_;
    std::vector<std::uint32_t> known_table_;  // known_ index + 1; 0: empty
};

}  // namespace ibvcap
