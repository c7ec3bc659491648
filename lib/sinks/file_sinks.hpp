// The files a run writes, as sinks (lib/sinks/sink.hpp): the run's pcap and
// pcapng files (every frame, as on the wire) and the per-antenna raw, codif and codifhdr
// files (docs/formats.md, "Output files"). Naming the files is theirs; the
// bytes go through a Writer (lib/sinks/writer.hpp), which owns the disk.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "formats/output.hpp"
#include "lib/core/netaddr.hpp"
#include "lib/sinks/sink.hpp"
#include "lib/sinks/writer.hpp"

namespace ibvcap {

struct OutputOptions {
    std::vector<OutputFormat> formats;  // what to write; pcap is one file per run
    std::string output_dir = ".";
    std::string prefix = "ibvcap";
    bool pcap_headers_only = false;  // --pcap-snaplen headers: records end after the CODIF header
    // The pcap file's link type (LINKTYPE_*): the frames' own, which is the
    // input file's for ibvcap read.
    std::uint32_t pcap_link_type = kPcapLinkTypeEthernet;
    bool overwrite = false;  // --overwrite: an earlier run's files of the same names are removed
    // --ordered: the codif and vdif files hold each stream's frames in
    // sequence order through a reorder window of this many frames, with fill
    // frames where frames never came (lib/sinks/reorder.hpp); 0: arrival order.
    std::uint32_t ordered_window = 0;
    // The streams whose per-antenna files this run may write: the groups
    // given (GROUP:PORT) and the antennas (--antenna); empty: any. What
    // --overwrite removes and what a run without it refuses to start over:
    // another group's files in the same directory are not this run's.
    std::vector<Endpoint> groups;
    std::vector<std::uint32_t> antennas;
    // How each of `groups` is read (DemuxOptions::group_formats; beyond the
    // list's end, and with no groups, any_group_format): a VDIF group's
    // (group, antenna) gets no codif or codifhdr file made ahead.
    std::vector<StreamFormat> group_formats;
    StreamFormat any_group_format = StreamFormat::codif;
    // The pcapng file's interface (its if_name and if_description): the
    // lane's device and port, the interface, or the file read.
    std::string interface_name;
    std::string interface_description;
};

// --ordered-window's default and its largest value. 256 frames: 8 times
// what DiFX's VDIF reader tolerates out of order (nSort = 32,
// difx/difx mpifxcorr/src/vdiffile.cpp), 2 ms at 125,000 frames/s (8 Gb/s
// of 8 KiB frames), 2 MiB of host memory per stream of 8 KiB frames. Not
// more: after a lost frame each of the stream's next W - 1 frames is copied
// into the window and out again, so with one frame in 1,000 lost the share
// of frames copied is 1 - 0.999^W: `read` of 8 KiB frames ran 9 % slower
// than unordered at 256, 20 % at 1024 (docs/formats.md, "Ordered files").
// At most the sequence tracker's window (lib/ledger/sequence.hpp, kWindow):
// a frame later than that is too late for the ledger as well.
inline constexpr std::uint32_t kDefaultOrderedWindow = 256;
inline constexpr std::uint32_t kMaxOrderedWindow = 8192;

// The pcapng file's snapshot length with --pcap-snaplen headers: every record
// is at most this long (a UDP frame ends 64 bytes into its payload, after a
// CODIF header or the VDIF or VTP headers: kStreamHeaderMaxBytes; any other
// frame is cut here, as tcpdump -s 256 would), so the interface block can say
// so. 256 bytes leave 124 for the link header and its tags in front of the
// longest IPv4 header (60), UDP (8) and a stream's (64) headers.
inline constexpr std::uint32_t kPcapngHeadersSnaplen = 256;

// What the run knows of its interface's counts, for the pcapng statistics
// blocks (docs/formats.md, "pcapng"): published by the run loop once a
// second and once more before the writers close, read by the disk thread
// that closes a file. Counts run from the start of the run; an unset one is
// not written.
struct InterfaceCounts {
    std::optional<std::uint64_t> start_ns;  // unset: the first frame's time
    std::optional<std::uint64_t> end_ns;    // unset: the last frame's time
    std::optional<std::uint64_t> ifrecv;
    std::optional<std::uint64_t> ifdrop;
    std::optional<std::uint64_t> filteraccept;
    std::optional<std::uint64_t> osdrop;
};
class InterfaceCountsBox {
  public:
    void publish(const InterfaceCounts& counts) {
        const std::lock_guard lock(mu_);
        counts_ = counts;
    }
    InterfaceCounts get() const {
        const std::lock_guard lock(mu_);
        return counts_;
    }

  private:
    mutable std::mutex mu_;
    InterfaceCounts counts_;
};

// Before the run: a format asked for that can take none of the run's
// streams (-F vdif when every group is read as CODIF), or a group whose
// streams no format asked for takes (-F codif for a /vdif group: its frames
// would be captured and written nowhere). Each group's format is known from
// the options (group_formats; with no groups, any_group_format for every
// destination). One line naming the format, the group and the fix; empty
// when every stream has a file and every format a stream, or no -F.
std::string output_format_problem(const OutputOptions& options);

// The file a per-antenna output gets, and the run's own (pcap) file.
std::string output_path(const OutputOptions& options, OutputFormat format, const Endpoint& group,
                        std::uint32_t antenna);
// The codif or codifhdr file of a CODIF station that is not the first its
// (group, antenna) sent: {prefix}_{group}_{port}_{antenna}_station{N}.EXT.
std::string station_output_path(const OutputOptions& options, OutputFormat format,
                                const Endpoint& group, std::uint32_t antenna,
                                std::uint16_t station);
// A vdif file: one per stream, {prefix}_{group}_{port}_{antenna}_{station}_{thread}.vdif,
// the station and thread in decimal.
std::string stream_output_path(const OutputOptions& options, const Endpoint& group,
                               std::uint32_t antenna, std::uint16_t station, std::uint16_t thread);
std::string run_output_path(const OutputOptions& options, OutputFormat format);
// Whether `name` (a file name, no directory) is one these options make in
// output_dir: {prefix}.pcap or {prefix}_{group}_{port}_{antenna}.{ext} of a
// format asked for ({prefix}_{group}_{port}_{antenna}_{station}_{thread}.vdif), with or without a
// device's lane prefix
// (`_mlx5_0p1`) and a rotation index (`.000003`), and their sidecar indexes
// (`.idx.json`).
bool is_output_name(const OutputOptions& options, const std::string& name);
// is_output_name, and for a per-antenna file also of a stream this run may
// write (options.groups, options.antennas): a name this run may write.
bool is_run_output_name(const OutputOptions& options, const std::string& name);

// Every frame into the run's pcap file. --pcap-snaplen headers: a UDP frame
// is cut 64 bytes into its payload, after its stream header (the original
// length is kept, as tcpdump -s does); others go whole. A frame whose time
// does not fit a pcap record (2^32 s and later) is not written but counted,
// and fails the output (Writer::refuse).
class PcapFileSink final : public FrameSink {
  public:
    PcapFileSink(const OutputOptions& options, Writer& writer);
    void on_frame(const SinkFrame& f, SinkRoute route) override;

  private:
    Writer& writer_;
    Writer::OutputId output_;
    bool headers_only_;
};

// Every frame into the run's pcapng file (formats/pcapng.hpp): a section
// header block naming the host and ibvcap, one interface description block
// (a file holds one lane, so one interface), an enhanced packet block per
// frame (64-bit nanosecond times: no 2106 limit), and at the close of each
// file one interface statistics block with the counts published to
// counts() and the records written. --pcap-snaplen headers: as for pcap,
// every record at most kPcapngHeadersSnaplen bytes.
class PcapngFileSink final : public FrameSink {
  public:
    PcapngFileSink(const OutputOptions& options, Writer& writer);
    void on_frame(const SinkFrame& f, SinkRoute route) override;
    InterfaceCountsBox& counts() { return state_->counts; }

    struct State {
        InterfaceCountsBox counts;
        std::atomic<std::uint64_t> first_ns{0};
        std::atomic<std::uint64_t> last_ns{0};
        std::atomic<bool> any{false};
    };

  private:
    std::shared_ptr<State> state_;  // shared with the writer's trailer
    Writer& writer_;
    Writer::OutputId output_;
    bool headers_only_;
    std::uint32_t snaplen_;
};

// The frames of each stream into its per-antenna files: the raw, codif and
// codifhdr files of its (group, antenna), opened with the antenna's first
// stream, and the vdif file of a VDIF stream, opened with it. Which of them a
// stream gets is decided once, when it opens (holds_stream: codif and
// codifhdr CODIF streams, vdif VDIF and VTP streams, raw any); its frames
// then go where its route says. With --ordered (options.ordered_window) the
// codif and vdif records of each stream go through its reorder window
// (lib/sinks/ordered_stream.hpp).
class StreamFileSink final : public FrameSink {
  public:
    StreamFileSink(const OutputOptions& options, Writer& writer);
    ~StreamFileSink() override;
    SinkRoute open_stream(const StreamStats& stream) override;
    void on_frame(const SinkFrame& f, SinkRoute route) override;
    // Before the first frame: the files of a (group, antenna) the run knows
    // it will have, added now (their buffers made before the source starts:
    // Writer::prepare) rather than at its first frame. A VDIF group's vdif
    // files wait for their streams (their station and thread).
    void plan(const Endpoint& group, std::uint32_t antenna);
    // The producer, once no frame will come: the ordered files' last frames
    // (what their windows hold), before the writer finishes.
    void close();
    // The writer's stats of these outputs with what only this sink knows: a
    // vdif file's station and thread, an ordered file's window and counts.
    void annotate(std::vector<OutputStats>& stats) const;

  private:
    struct Files;
    struct Route;
    Files& files_for(const Endpoint& group, std::uint32_t antenna, StreamFormat format);
    Writer::OutputId add(OutputFormat format, const std::string& path, const Endpoint& group,
                         std::uint32_t antenna, std::int32_t station = -1,
                         std::int32_t thread = -1);

    OutputOptions options_;
    Writer& writer_;
    // (group ip, port, antenna): looked up at a stream's first frame only.
    std::map<std::tuple<std::uint32_t, std::uint16_t, std::uint32_t>, std::unique_ptr<Files>>
        files_;
    std::vector<std::unique_ptr<Route>> routes_;  // one per stream
    // What annotate() adds to an output's stats, by the output's path.
    struct Note {
        std::int32_t station = -1;
        std::int32_t thread = -1;
        bool ordered = false;
    };
    std::map<std::string, Note> notes_;
    std::map<Writer::OutputId, std::string> ordered_paths_;
};

// The file sinks `options` asks for, in the order they go to the demux
// (pcap first, so its records keep the source's order whatever the others do).
class FileSinks {
  public:
    // `writer` may be null only when `options.formats` is empty.
    FileSinks(const OutputOptions& options, Writer* writer);
    const std::vector<SinkEntry>& entries() const { return entries_; }
    // The per-antenna files of these (group, antenna) pairs, added before
    // the first frame (nothing without a per-antenna format).
    void plan_streams(std::span<const std::pair<Endpoint, std::uint32_t>> streams);
    // The producer, once no frame will come: the ordered files' windows
    // written out, then the writer finished (Writer::finish).
    void finish();
    // After finish(): the writer's stats of every output, with what the
    // sinks know of them (a vdif file's stream, an ordered file's counts).
    std::vector<OutputStats> stats() const;
    // Where the run publishes its counts for the pcapng file (null: none).
    InterfaceCountsBox* interface_counts() { return pcapng_ ? &pcapng_->counts() : nullptr; }

  private:
    Writer* writer_ = nullptr;
    std::unique_ptr<PcapFileSink> pcap_;
    std::unique_ptr<PcapngFileSink> pcapng_;
    std::unique_ptr<StreamFileSink> streams_;
    std::vector<SinkEntry> entries_;
};

}  // namespace ibvcap
