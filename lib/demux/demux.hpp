// The demultiplexer: every frame from any source (verbs, pcap live, pcap file)
// comes through on_frame(). It classifies the frame exactly once in the ledger,
// decodes it in its group's format (CODIF, VDIF or VTP: formats/stream_decode.hpp,
// the only place that knows them), assigns it to a stream (group, antenna =
// source IPv4, the header's stream key: CODIF thread, VDIF station and
// thread), tracks the stream's sequence, and hands the frame to the sinks
// (lib/sinks/sink.hpp): those registered for every frame before it is
// classified, those registered per stream once it is accepted. It knows
// nothing of files, names or formats.
//
// Per frame it allocates nothing; the first frame of a new antenna, group or
// stream registers it (which allocates once).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "formats/packet.hpp"
#include "formats/stream_decode.hpp"
#include "lib/core/frame.hpp"
#include "lib/core/netaddr.hpp"
#include "lib/demux/window.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/sinks/sink.hpp"

namespace ibvcap {

struct DemuxOptions {
    std::vector<Endpoint> groups;  // empty: every UDP destination is a group
    // Per named group, in groups' order, how its datagrams are read
    // (GROUP:PORT/vdif); groups beyond the list's end are CODIF.
    std::vector<StreamFormat> group_formats;
    // With no named groups: the format of every UDP destination.
    StreamFormat any_group_format = StreamFormat::codif;
    // Frames per second of every VDIF stream (--vdif-frames-per-second);
    // 0: each stream's is learned from its first whole second
    // (docs/formats.md, "VDIF frame rates").
    std::uint64_t vdif_frames_per_second = 0;
    std::vector<std::uint32_t> antennas;  // empty: every new source IPv4 is an antenna
    // Groups given as GROUP:PORT@SOURCE[,...]: a frame to one of them from
    // another source is not ours (Reason::unlisted_source).
    std::vector<SourceFilter> sources;
    std::size_t max_groups = 256;
    std::size_t max_antennas = 1024;
    std::size_t max_streams = 65536;
    // A frame further than max(plausible_periods periods, min_plausible_jump
    // frames) from its stream's newest frame is implausible (docs/formats.md,
    // "How a stream's frames are counted").
    std::uint32_t plausible_periods = 4;
    std::uint64_t min_plausible_jump = SequenceTracker::kWindow;
    // --start-at/--stop-at: only frames whose own time lies in the window
    // are the streams' (lib/demux/window.hpp); none: every frame is.
    std::optional<FrameWindow> window;
};

class Demux {
  public:
    Demux(DemuxOptions options, Ledger& ledger);

    void on_frame(const Frame& frame);
    // Sinks are called in the order added; add them before the first frame.
    // The demux does not own them.
    void add_sink(FrameSink& sink, SinkScope scope = SinkScope::streams);
    void add_sinks(std::span<const SinkEntry> sinks);
    // A FrameObserver as a per-stream sink the demux owns (the -v line, tests).
    void add_observer(FrameObserver observer);

    // With a window, once the frames have stopped (the source stopped; never
    // while on_frame may run): each stream's span becomes the whole window.
    // The frames before its first in the window are missing already (its
    // tracker was anchored at the window's first index); with `saw_end`
    // (the run lasted past the window's stop, or its input ended), so are
    // those after its last, and a stream with no frame in the window misses
    // all of them. Records each stream's head and tail in its StreamStats.
    void close_window(bool saw_end);

  private:
    // on_frame with its length on the wire checked: classified, and (with
    // a window) given to the sinks of every frame when it lies in it.
    void deliver(const Frame& frame);
    // Classifies the frame; returns whether `packet` was parsed from it.
    bool accept_frame(const Frame& frame, UdpPacket& packet);
    // Index of the group / antenna, registering a new one when allowed; -1 when
    // the frame is not for us, -2 when a limit is reached.
    int group_index(std::uint32_t ip, std::uint16_t port);
    int antenna_index(std::uint32_t ip);
    // The group's first frame, noted in the ledger once (lib/ledger/mcast_path.hpp).
    void note_group(int group, const Frame& frame) {
        if (group >= 0 && static_cast<std::size_t>(group) < group_seen_.size() &&
            group_seen_[static_cast<std::size_t>(group)] == 0) {
            group_seen_[static_cast<std::size_t>(group)] = 1;
            ledger_.note_group_arrival(groups_[static_cast<std::size_t>(group)],
                                       frame.timestamp_ns);
        }
    }
    // With named groups: whether a frame the parser refused may have been
    // addressed to one of them (its IPv4 destination, and UDP port when it can
    // be read, match one; or its destination cannot be read at all).
    bool may_be_for_a_group(const Frame& frame) const;
    // A new stream's first arrival: `timestamp_ns` (the frame's) and the
    // host's CLOCK_MONOTONIC, read here once per stream. `created`: it was
    // registered by this call.
    StreamStats* stream(int group, int antenna, const StreamHeader& header,
                        std::uint64_t timestamp_ns, bool& created);
    // The reason a frame of stream `s` is not the stream's own (its layout,
    // length, epoch or other parameters differ from its first frame's, or its
    // frame number is past the stream's rate); nullopt when it is.
    std::optional<Reason> mismatch(const StreamStats& s, std::size_t index,
                                   const StreamHeader& h) const;
    // payload_absent: the capture cut the frame after its header.
    void accept(std::size_t stream, const Frame& frame, const UdpPacket& packet,
                const StreamHeader& header, bool payload_absent);
    // With a window: whether the frame at `index` of `stream` lies in it,
    // counted before_window or after_window when not; anchors the stream's
    // tracker at the window's start with its first frame in it.
    bool in_window(std::size_t stream, StreamStats& s, const StreamHeader& h, std::uint64_t index);
    // The format a datagram to this destination is read in.
    StreamFormat format_of(const UdpPacket& p) const {
        if (uniform_format_) {
            return *uniform_format_;
        }
        for (std::size_t i = 0; i < options_.groups.size(); ++i) {
            if (options_.groups[i].ip == p.dst_ip && options_.groups[i].port == p.dst_port) {
                return i < options_.group_formats.size() ? options_.group_formats[i]
                                                         : StreamFormat::codif;
            }
        }
        return StreamFormat::codif;  // not a named group: other_destination follows
    }

    // The fast path: a frame of a stream seen before, whose header has the
    // same parameters, skips the filters, the registries and the divisions
    // of validate_codif (they were all done for the stream's first frame).
    // An open-addressing table (linear probing, at most half full, doubled
    // as streams are registered: small tables stay in cache) of the known
    // streams, keyed by (destination, source, stream key),
    // filled by the slow path.
    struct Known {
        // The parameter fields of the stream's first frame.
        std::uint64_t params = 0;
        std::uint64_t params2 = 0;
        std::uint32_t frame_bytes = 0;
        std::uint16_t period = 0;
        std::uint8_t layout = 0;
        std::uint8_t epoch = 0;
        // The stream's (a learned VDIF rate updates it).
        std::uint64_t frames_per_period = 0;
        bool same_parameters(const StreamHeader& h) const {
            return h.params == params && h.params2 == params2 && h.frame_bytes == frame_bytes &&
                   h.period == period && h.layout == layout && h.epoch == epoch;
        }
    };
    // A slot of the table: the key, compared in place (no load of a Known
    // to reject a collision), and the stream's index + 1 (0: empty), which
    // is also its Known's index in known_.
    struct KnownSlot {
        std::uint32_t dst_ip = 0;
        std::uint32_t src_ip = 0;
        std::uint32_t key = 0;
        std::uint16_t dst_port = 0;
        std::uint32_t stream_plus1 = 0;
    };
    // The stream index + 1 of a known stream's key, 0 when unknown.
    std::uint32_t find_stream(const UdpPacket& p, std::uint32_t key) const;
    void add_known(const UdpPacket& p, const StreamHeader& h, std::size_t stream);
    void place_known(const KnownSlot& slot);

    DemuxOptions options_;
    Ledger& ledger_;
    std::vector<FrameSink*> every_frame_sinks_;
    std::vector<FrameSink*> stream_sinks_;
    // Per stream, what each stream sink asked for: stream_sinks_.size()
    // entries per stream, in ledger_.streams() order.
    std::vector<SinkRoute> stream_routes_;
    std::vector<std::unique_ptr<ObserverSink>> observers_;
    std::vector<Endpoint> groups_;
    std::vector<std::uint8_t> group_seen_;  // per groups_ index: its first frame was noted
    // Per named group (options_.groups' order): the sources its
    // source-specific join names; empty: any source.
    std::vector<std::vector<std::uint32_t>> group_sources_;
    std::vector<std::uint32_t> antennas_;
    std::unordered_map<std::uint32_t, int> antenna_lookup_;
    // (group, antenna, stream key), whole: no field is packed into fewer
    // bits than it has (named groups are not limited to 256, and a VDIF key
    // is 26 bits). Slow path only (registration, frames off the fast path).
    std::map<std::tuple<int, int, std::uint32_t>, std::size_t> stream_lookup_;
    // The format of every group when they all share one (the common case: no
    // lookup per frame), else nullopt.
    std::optional<StreamFormat> uniform_format_;
    std::vector<Known> known_;  // by stream index (one not in the table is never read)
    // By stream index: the VTP streams' sequence-number trackers (null for others).
    std::vector<std::unique_ptr<SequenceTracker>> psn_trackers_;
    // With a window, by stream index: its edges in the stream's frame
    // indices, or (a VDIF rate still being learned: by_seconds) in its
    // seconds, where an index would move once the rate is known.
    struct StreamWindow {
        std::uint64_t lo = 0;
        std::uint64_t hi = 0;
        bool by_seconds = false;
        // The index `first` was last set from (the tracker's first_received).
        std::uint64_t first_index = std::numeric_limits<std::uint64_t>::max();
    };
    std::vector<StreamWindow> windows_;
    bool windows_on_ = false;  // options_.window is set
    // The frame being classified, with a window: a stream's frame inside
    // or outside it, or no stream's frame (judged by its arrival).
    enum class WindowFate : std::uint8_t { not_a_stream_frame, inside, outside };
    WindowFate window_fate_ = WindowFate::not_a_stream_frame;
    std::size_t known_count_ = 0;  // streams in the table
    std::vector<KnownSlot> known_table_;
};

}  // namespace ibvcap
