// Offline source: a pcap or pcapng file, frame by frame, into the
// demultiplexer.
//
// libpcap opens and checks every file. A classic pcap file (the format ibvcap
// and tcpdump -w write) that is a regular file is then read from a read-only
// mapping instead: frames reach the demux where they lie in the page cache,
// with a lease, so the writers write them from there (pwritev) and no byte is
// copied in user space. libpcap cannot do that (it copies every record into
// its own buffer, which the next record overwrites). The record walk mirrors
// libpcap's (sf-pcap.c): the same limits, the same truncation handling, the
// same error messages; a test compares the two on damaged files. pcapng and
// anything else stay with libpcap.
//
// Link types: Ethernet, Linux cooked captures (LINUX_SLL, LINUX_SLL2: what
// tcpdump -i any writes) and raw IP (RAW, IPV4). Every frame carries its
// file's link type (Frame::link), so the demux finds the IP header behind
// whichever header it is; anything else is refused when the file is opened.
//
// Timestamps: a frame's time is carried exactly (Frame::timestamp_ns, 64-bit
// nanoseconds: up to 2554); a time beyond that, or before 1970 (a pcapng
// file can say either), ends the read as a damaged record would, never
// wrapped. Classic pcap times (32-bit unsigned seconds) always fit.
#pragma once

#include <pcap/pcap.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "lib/demux/demux.hpp"
#include "lib/sources/guarded_map.hpp"
#include "lib/sources/source.hpp"

namespace ibvcap {

class PcapFileSource final : public Source {
  public:
    // Opens the file; throws std::runtime_error with a one-line message naming
    // the file and the cause (missing, unreadable, not a capture, a link type
    // it does not read).
    // `mapped`: read classic pcap files from a mapping (false: always libpcap).
    explicit PcapFileSource(const std::string& path, bool mapped = true);
    ~PcapFileSource() override;
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

    // Whether this file is read from a mapping.
    bool is_mapped() const { return guard_ != nullptr; }
    // The file's link type as a pcap file header states it (LINKTYPE_*, which
    // the run's pcap output repeats), and as the frames carry it.
    std::uint32_t pcap_link_type() const { return pcap_link_type_; }
    LinkType link_type() const { return link_; }

    // As a source for the run loop (lib/sources/source.hpp): one step reads
    // to the end of the file (or the limit, or the stop flag).
    std::string kind() const override { return "file"; }
    std::string input() const override { return path_; }
    std::string input_file() const override { return path_; }
    bool live() const override { return false; }
    bool lends_frames() const override { return is_mapped(); }  // (libpcap's frames are copied)
    void connect(std::span<const SourceLane> lanes) override { demux_ = lanes.front().demux; }
    // The demux runs in step(), on the loop's thread: a pointer between steps.
    bool can_reconnect() const override { return true; }
    void reconnect(std::span<const SourceLane> lanes) override { connect(lanes); }
    void start() override {}
    bool step(std::uint64_t limit, std::chrono::milliseconds max_wait,
              const std::atomic<bool>& stop) override;
    std::uint64_t frames() const override { return frames_; }
    void stop(std::optional<std::uint64_t> /*remaining*/) override {}
    void report(std::span<const SourceLane> lanes, RunInfo& info) override;

  private:
    Result run_mapped(Demux& demux, std::uint64_t max_frames, const std::atomic<bool>& stop);

    std::string path_;
    Demux* demux_ = nullptr;
    std::uint64_t frames_ = 0;
    std::string error_;
    pcap_t* pcap_ = nullptr;
    LinkType link_ = LinkType::ethernet;
    std::uint32_t pcap_link_type_ = 1;
    bool classic_ = true;  // classic pcap, not pcapng
    // The mapping (classic pcap only), guarded against the file shrinking;
    // it lends its frames to the writers (the lease's owner).
    std::unique_ptr<GuardedMap> guard_;
    static constexpr std::size_t kShrinkCheckBytes = std::size_t{16} << 20;
    bool swapped_ = false;
    bool nanoseconds_ = false;
    std::uint32_t snapshot_ = 0;
};

}  // namespace ibvcap
