// The loss ledger: every frame a source delivers is counted exactly once, as a
// frame of some stream (CODIF, VDIF or VTP) or under a named reason
// (docs/architecture.md, "Every frame counted once").
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/codif.hpp"
#include "formats/output.hpp"
#include "formats/packet.hpp"
#include "lib/core/netaddr.hpp"
#include "lib/core/probes.hpp"
#include "lib/ledger/expected.hpp"
#include "lib/ledger/sequence.hpp"

namespace ibvcap {

// Why a frame is not counted as a frame of a stream. The first group is
// "not telescope data" (the report's class non_codif, whatever the streams'
// format); the rest are damaged or unusable frames (malformed), which make
// the verdict "loss".
enum class Reason : std::uint8_t {
    // non_codif (not a stream's frame)
    not_ipv4,
    not_udp,
    other_destination,  // to a GROUP:PORT not asked for (named groups: damaged frames too)
    unlisted_source,    // source IP not in the --antenna list
    not_codif,          // to a CODIF group, a UDP datagram without a CODIF sync word
    not_vdif,           // to a VDIF group, a UDP datagram too short for a VDIF header
    // A stream's frame whose own time lies outside the run's frame window
    // (--start-at/--stop-at: lib/demux/window.hpp): counted, not written.
    before_window,
    after_window,
    // malformed
    truncated_capture,  // fewer bytes captured than were on the wire (snaplen)
    truncated_ethernet,
    too_many_vlans,
    truncated_ipv4,
    bad_ip_version,
    bad_ip_header_length,
    bad_ip_total_length,
    ip_fragment,
    truncated_udp,
    bad_udp_length,
    headers_split,
    codif_zero_field,   // nchan, nbits, period or frame length of 0
    codif_bad_length,   // CODIF frame length disagrees with the datagram
    codif_bad_samples,  // payload is not a whole number of samples
    codif_frame_beyond_period,
    codif_no_frames_per_period,  // total samples do not give whole frames per period
    vdif_zero_length,            // VDIF frame length of 0
    vdif_bad_length,             // VDIF frame length disagrees with the datagram
    vdif_frame_beyond_rate,      // VDIF frame number >= the stream's frames per second
    layout_changed,  // a stream's header layout changed (VDIF legacy/standard, CODIF v2/draft)
    frame_length_changed,   // a stream's frame length changed
    epoch_changed,          // a stream's reference epoch changed
    stream_params_changed,  // any other of a stream's parameters changed (channels, bits, period)
    too_many_streams,
    count_
};
inline constexpr std::size_t kReasonCount = static_cast<std::size_t>(Reason::count_);
std::string_view to_string(Reason reason);
namespace detail {
// The reasons' names in Reason order (ledger.cpp): string literals, so each
// view's data() is a NUL-terminated static string (the ibvcap:reason probe).
extern const std::array<std::string_view, kReasonCount> kReasonNames;
}  // namespace detail
bool is_malformed(Reason reason);
Reason reason_for(PacketError error);  // error != none
Reason reason_for(CodifError error);   // error != none, != bad_sync
// A decoder's refusal in the group's format (error != none).
Reason reason_for(StreamError error, StreamFormat format);

struct FramePosition {
    std::uint32_t seconds = 0;
    std::uint32_t frame = 0;
};

// One stream's state and counts. Field order is a cost (issue 30, item 5):
// with thousands of streams each frame finds its stream's state out of cache,
// so what every frame reads or writes is packed into the first cache line
// (the struct is 64-byte aligned), the sequence tracker's hot fields open
// the second, and the rest (slow path, report) follows the tracker's window.
struct alignas(64) StreamStats {
    // -- line 0: read or written by every frame (Demux::accept, the probes).
    Endpoint group;
    std::uint32_t antenna = 0;  // source IPv4, host byte order
    std::uint16_t thread = 0;
    std::uint16_t station = 0;
    // What the demux keys the stream by within (group, antenna)
    // (StreamHeader::key: station << 16 | thread, CODIF and VDIF alike).
    std::uint32_t key = 0;
    StreamFormat format = StreamFormat::codif;
    std::uint8_t layout = 0;  // StreamHeader::layout of its first frame
    std::uint8_t epoch = 0;
    // Where the frames per second came from: the header (CODIF's period),
    // --vdif-frames-per-second, or learned from the stream's frames
    // (lib/demux/rate.hpp); while learning, timing holds a provisional rate.
    enum class Rate : std::uint8_t { header, given, learning, learned };
    Rate rate = Rate::header;
    StreamTiming timing;
    // Learning, or learned and not yet confirmed: the demux watches each
    // frame's second (one test per frame for every other stream).
    bool rate_watch = false;
    // Learned: whether a later whole second confirmed the rate (its highest
    // frame was rate - 1).
    bool rate_confirmed = false;
    std::uint32_t frame_bytes = 0;  // the frame's header + payload (no VTP prefix)
    std::uint64_t bytes = 0;        // wire bytes of the stream's frames
    // Arrival times, for the expected streams (lib/ledger/expect.hpp): the
    // frame timestamps (Frame::timestamp_ns, the source's clock) of the
    // stream's latest frame (first_arrival_ns below: of its first), and
    // CLOCK_MONOTONIC ns when the demux registered the stream (read once
    // per stream, never per frame).
    std::uint64_t last_arrival_ns = 0;
    // -- line 1: the newest position, then the tracker, whose counters every
    // frame reads or writes (sequence.hpp orders them first), ahead of its
    // 1 KiB window.
    FramePosition last;   // newest (seconds, frame) received
    FramePosition first;  // lowest (seconds, frame) received
    SequenceTracker sequence;
    // -- the slow path's and the report's.
    std::uint64_t first_arrival_ns = 0;
    std::int64_t registered_ns = 0;
    // Learning: the second being watched and its highest frame number
    // (a given rate: the highest frame number of the run, while none has
    // reached the rate).
    std::uint32_t learn_seconds = 0;
    std::uint32_t learn_max_frame = 0;
    // Learned: the rate the first second gave, and how many times a later
    // frame numbered past the rate raised it before it was confirmed
    // (lib/demux/rate.hpp; the report's rate_revised).
    std::uint64_t rate_first_learned = 0;
    std::uint32_t rate_raises = 0;
    // Frames whose number no rate can hold (past what their length allows
    // on the fastest link, or a lone outlier far past the rate): counted
    // vdif_frame_beyond_rate, never allowed to set or raise the rate.
    std::uint64_t rate_outliers = 0;
    // A given rate (--vdif-frames-per-second) that the stream's frames, over
    // more than one second, never reached: the highest frame number seen,
    // else -1 (the verdict names the option: lib/demux/rate.hpp).
    std::int64_t given_rate_unreached() const {
        if (rate != Rate::given || !rate_watch || !sequence.started() ||
            first.seconds == last.seconds) {
            return -1;
        }
        return learn_max_frame;
    }
    // The VDIF Transport Protocol's packet sequence numbers (vtp groups): a
    // second witness of loss, independent of the frame headers, tracked by a
    // sequence tracker of their own (the demux's; lib/demux/rate.hpp).
    std::uint64_t psn_packets = 0;     // frames that came with one
    std::uint64_t psn_missing = 0;     // numbers in the span never received
    std::uint64_t psn_duplicates = 0;  // numbers received more than once
    std::uint64_t invalid = 0;         // frames whose header has the invalid flag set
    // Frames the capture cut after the frame header (a headers-only pcap):
    // sequence-tracked, but their payload is in no output.
    std::uint64_t payload_absent = 0;
    // A run with a frame window (lib/demux/window.hpp): the frames of the
    // window missing before the stream's first frame in it (it started
    // late) and after its last (it stopped early, or the run saw no frame
    // of it in the window), both among `sequence.missing()`; set when the
    // window closes. The window's first and last frame of the stream.
    std::uint64_t window_head_missing = 0;
    std::uint64_t window_tail_missing = 0;
    FramePosition window_first;
    FramePosition window_last;

    std::uint64_t packets() const { return sequence.received(); }
};

// One file of an output that is on disk at the end of the run.
struct OutputFile {
    std::string path;
    std::uint64_t packets = 0;  // records it holds
    std::uint64_t bytes = 0;    // its length, format framing included
};

// An ordered output's (--ordered) reorder windows, summed over its streams
// (lib/sinks/reorder.hpp): window 0 is an output in arrival order. Its file
// holds the frames routed to it, less those left out, plus the fills.
struct OrderedCounts {
    std::uint32_t window = 0;      // frames (--ordered-window)
    std::uint64_t fills = 0;       // fill frames written for frames that never came
    std::uint64_t duplicates = 0;  // left out: that index was written already
    std::uint64_t too_late = 0;    // left out: behind the window when it came
    std::uint64_t unheld = 0;      // left out: could not be copied into the window
    std::uint64_t restarts = 0;    // runs restarted at a frame beyond the plausible jump
    // Frames routed to the output that it does not hold.
    std::uint64_t left_out() const { return duplicates + too_late + unheld; }
};

// One output file as the writers report it.
struct OutputStats {
    std::string path;
    std::string format;
    std::string group;    // empty for per-run outputs (pcap)
    std::string antenna;  // empty for per-run outputs
    // A per-stream output (-F vdif: one VDIF station and thread): its
    // stream's station and thread; -1 for outputs of a (group, antenna).
    std::int32_t station = -1;
    std::int32_t thread = -1;
    OrderedCounts ordered;
    std::uint64_t packets = 0;  // records written and durable in the file
    std::uint64_t bytes = 0;    // file bytes, format framing included
    std::uint64_t dropped = 0;  // records that were meant for it but are not in it
    std::uint64_t files = 1;    // files opened (more than one with -G/-C rotation)
    // The files that exist at the end, in the order they were started: their
    // packets add up to packets - overwritten (docs/formats.md, "The report").
    std::vector<OutputFile> on_disk;
    std::uint64_t overwritten = 0;  // records written, then overwritten by the -W ring
    std::string error;              // empty unless the output failed
    // A FIFO that no process opened for reading before the run was stopped
    // (Ctrl-C ended the wait for its reader): nothing was written to it.
    bool stopped_waiting = false;
};

// A PSRDADA ring the run wrote one stream's payload into (--dada;
// lib/sinks/dada_sink.hpp, docs/formats.md "PSRDADA rings"). Every record
// routed to it is one of frames, fills, consumer, unwritten, owed_at_end or
// the window's left-outs (ordered); the ring holds frames + fills + consumer
// - owed_at_end records of payload_bytes.
struct RingStats {
    std::string key;     // "dada": the data ring's key, hex (the header ring is key + 1)
    std::string stream;  // the stream written into it; empty when none came
    std::string format;  // the stream's format (codif, vdif)
    std::uint64_t payload_bytes = 0;
    std::uint64_t block_bytes = 0;
    std::uint64_t blocks = 0;
    std::uint64_t header_block_bytes = 0;
    std::uint32_t readers = 0;           // the ring's readers (dada_db -r)
    std::uint32_t readers_attached = 0;  // readers locked on it at the end
    std::uint64_t frames = 0;            // the stream's frames in the ring
    std::uint64_t fills = 0;             // fill records for frames that never came (as --ordered)
    // Frames the ring had no room for when they were due: its reader was
    // behind. Each was written as a fill record once room came back, so
    // every later byte is still at its time (LossCause::consumer).
    std::uint64_t consumer = 0;
    // Fill records owed (for consumer drops or missing frames) when the run
    // ended with the ring still full: the ring's data ends before them.
    std::uint64_t owed_at_end = 0;
    std::uint64_t unwritten = 0;  // frames not in the ring because it failed (error)
    OrderedCounts ordered;        // the reorder window's duplicates, too late, unheld
    std::uint64_t bytes = 0;      // data bytes written into the ring
    bool end_of_data = false;     // the transfer was ended (end of data marked)
    std::string error;            // empty unless the ring failed
};

// Where frames were lost, as a witness outside the sequence counts tells it
// (docs/observability.md, "The timeline and a cause for every gap").
enum class LossCause : std::uint8_t {
    none,               // the counter witnesses no loss (diagnostic only)
    port_discards,      // the NIC port dropped them (buffer full: rx_discards_phy and peers)
    receive_queue,      // matched, but no receive WR posted (out_of_buffer, undelivered)
    ring_hold_limit,    // receive slots held by consumers ran the ring dry
    completion_errors,  // work-completion errors and QP recovery
    port_down,          // the link was down
    gpu_xid,            // the capture's GPU reported an XID
    kernel,             // the kernel's receive path (libpcap ring, netdev rings)
    writer,             // records the writers could not write
    consumer,           // a PSRDADA ring was full: its reader (the pipeline) was behind
    upstream,           // no witness on this host moved: the sender or the network
    count_
};
inline constexpr std::size_t kLossCauseCount = static_cast<std::size_t>(LossCause::count_);
std::string_view to_string(LossCause cause);

// A NIC- or kernel-side counter, read at the start and the end of a run.
struct SourceCounter {
    std::string name;
    std::uint64_t value = 0;  // delta over the run
    bool is_drop = false;     // counts frames lost before they reached ibvcap
    // What its growth witnesses. A counter can witness a cause without
    // counting drops itself (a port-down event count, a GPU XID count).
    LossCause cause = LossCause::none;
};

// An XID the NVIDIA driver reported while the capture watched
// (lib/host/xid_watch.hpp); one on the capture's own GPU makes the verdict loss.
struct GpuXid {
    std::int64_t time_ns = 0;  // CLOCK_REALTIME, ns since the epoch
    std::string device;        // PCI address, "0000:3b:00.0"
    std::uint32_t code = 0;    // the XID
    std::string message;
    bool capture_gpu = false;  // on the GPU the capture wrote into
};
// "2026-11-24T06:50:53.123456Z": UTC, microseconds (what trace times carry).
std::string format_utc_time(std::int64_t time_ns);

// The first frame addressed to a group (lib/ledger/mcast_path.hpp), a stream's
// frame or not: noted by the demux once per group, never per frame.
struct GroupArrival {
    Endpoint group;
    std::uint64_t first_ns = 0;  // that frame's timestamp (Frame::timestamp_ns, UNIX ns)
};

struct Totals {
    std::uint64_t packets = 0;  // frames the source delivered
    std::uint64_t bytes = 0;    // their wire bytes
    std::uint64_t codif = 0;    // of those, frames of a stream, any format (key "codif")
    std::uint64_t missing = 0;
    std::uint64_t duplicates = 0;
    std::uint64_t out_of_order = 0;
    std::uint64_t too_late = 0;
    std::uint64_t implausible = 0;  // frames not placed: header too far from the stream's
    std::uint64_t restarts = 0;     // streams re-synchronised at a new position
    std::uint64_t invalid = 0;
    std::uint64_t payload_absent = 0;  // stream frames captured without their payload
    std::uint64_t malformed = 0;
    std::uint64_t non_codif = 0;  // frames of no stream, not damaged (key "non_codif")
    std::uint64_t nic_drops = 0;
    std::uint64_t wc_errors = 0;
    std::uint64_t written = 0;      // records written, all outputs together
    std::uint64_t write_drops = 0;  // records not written, all outputs together
    // Ordered outputs (--ordered): fill frames among the records written,
    // and frames routed to them that they left out (later than the window,
    // or not copied: not duplicates, which are written once).
    std::uint64_t fills = 0;
    std::uint64_t ordered_too_late = 0;
    std::uint64_t payload_mismatches = 0;  // bytes off the generator's pattern (--gpu-verify)
    // Frames captured but in no block of the block rings (--gpu, --gpu-standin):
    // the consumer never sees them, so they are loss for it.
    std::uint64_t block_misses = 0;
    // PSRDADA rings (--dada): frames a full ring could not take (its reader
    // was behind: LossCause::consumer), and frames a failed ring did not get.
    std::uint64_t consumer_drops = 0;
    std::uint64_t ring_unwritten = 0;
    // Frames whose length on the wire was less than the bytes captured or
    // more than kMaxWireBytes (a damaged pcap record header): counted at
    // their captured length, so one such record cannot inflate the bytes.
    std::uint64_t bad_wire_length = 0;
    // With a frame window (--start-at, --stop-at): frames outside it (a
    // stream's by its own time, any other by its arrival), in no output of
    // every frame (pcap, pcapng).
    std::uint64_t outside_window = 0;
};

class Ledger {
  public:
    explicit Ledger(std::size_t max_streams = 65536) { streams_.reserve(max_streams); }

    // Per-frame entry points (demux thread; no allocation).
    void count_frame(std::uint64_t wire_bytes) {
        ++packets_;
        bytes_ += wire_bytes;
    }
    // (Rare: a damaged record header; Demux::on_frame.)
    void count_bad_wire_length() { ++bad_wire_length_; }
    // With a frame window: a frame outside it, kept from the outputs of
    // every frame (pcap, pcapng), which hold packets less these.
    void count_outside_window() { ++outside_window_; }
    void count_reason(Reason reason) {
        const auto i = static_cast<std::size_t>(reason);
        ++reasons_[i];
        // docs/observability.md, "USDT probes": one per frame counted under a reason.
        IBVCAP_PROBE2(reason, static_cast<std::uint32_t>(i), detail::kReasonNames[i].data());
    }

    std::uint64_t packets() const { return packets_; }
    std::uint64_t bytes() const { return bytes_; }
    std::vector<StreamStats>& streams() { return streams_; }
    const std::vector<StreamStats>& streams() const { return streams_; }
    std::uint64_t reason_count(Reason reason) const {
        return reasons_[static_cast<std::size_t>(reason)];
    }

    // End-of-run inputs.
    void set_outputs(std::vector<OutputStats> outputs) { outputs_ = std::move(outputs); }
    // The PSRDADA rings the run wrote (--dada).
    void add_ring(RingStats ring) { rings_.push_back(std::move(ring)); }
    const std::vector<RingStats>& rings() const { return rings_; }
    // The formats the run wrote (-F; empty: no files asked for), once its
    // streams are all in. A stream that none of them takes (takes_stream) is
    // captured and written nowhere: its frames are `unwritten`, a note says
    // so, and the verdict is loss (the CLI refuses such formats before the
    // run: lib/sinks/file_sinks.hpp, output_format_problem).
    void set_output_formats(std::vector<OutputFormat> formats);
    const std::vector<OutputFormat>& output_formats() const { return output_formats_; }
    // A stream's frames in no file because no format asked for takes it
    // (0 when one does, or no files were asked for).
    std::uint64_t unwritten(const StreamStats& s) const;
    void add_source_counter(SourceCounter counter) {
        source_counters_.push_back(std::move(counter));
    }
    // A scan's share of counters that count from the capture's start
    // (lib/run/run_loop.hpp, several scans): each counter named in
    // `at_start` less its value there (never below 0).
    void rebase_source_counters(std::span<const SourceCounter> at_start);
    void add_wc_errors(std::uint64_t n) { wc_errors_ += n; }
    // Payload bytes that differ from the generator's pattern (--gpu-verify).
    void add_payload_mismatches(std::uint64_t bytes) { payload_mismatches_ += bytes; }
    // Frames the block rings could not place (lib/sinks/block_sink.cpp report_to).
    void add_block_misses(std::uint64_t frames) { block_misses_ += frames; }
    void add_note(std::string note) { notes_.push_back(std::move(note)); }
    // Why records were not written, appended to the verdict's "N records not
    // written" (the writers' memory bound that was reached); set on the
    // run's merged ledger.
    void explain_write_drops(std::string why) { write_drops_why_ = std::move(why); }
    // The demux, at a group's first frame (once per group; merge keeps the earliest).
    void note_group_arrival(const Endpoint& group, std::uint64_t ns);
    const std::vector<GroupArrival>& group_arrivals() const { return group_arrivals_; }
    // XIDs reported while the capture watched its GPU (lib/host/xid_watch.hpp),
    // and XID events the trace buffer lost (any could be the capture GPU's).
    void add_gpu_xid(GpuXid xid) { gpu_xids_.push_back(std::move(xid)); }
    void add_gpu_xids_lost(std::uint64_t n) { gpu_xids_lost_ += n; }
    // The run ended before its source was exhausted (read error, device
    // fatal): what was counted is true, but nothing proves the rest arrived.
    void set_incomplete(std::string why) { incomplete_ = std::move(why); }
    // The expected streams' verdict (lib/ledger/expect.hpp), made once the
    // run has stopped: each problem but `unexpected` makes the verdict loss.
    void set_expectations(ExpectResults results) { expected_ = std::move(results); }
    const ExpectResults& expectations() const { return expected_; }

    const std::vector<OutputStats>& outputs() const { return outputs_; }
    const std::vector<SourceCounter>& source_counters() const { return source_counters_; }
    const std::vector<std::string>& notes() const { return notes_; }
    const std::vector<GpuXid>& gpu_xids() const { return gpu_xids_; }
    std::uint64_t gpu_xids_lost() const { return gpu_xids_lost_; }

    // Fold another ledger in (one ledger per device poll thread, merged for
    // the report when the threads have stopped).
    void merge(const Ledger& other);

    Totals totals() const;
    // Every frame is in exactly one place, every stream's sequence adds up, and
    // every output's records are written or counted as dropped.
    bool reconciles() const { return disagreement().empty(); }
    // Empty when the counts reconcile; otherwise where they first disagree,
    // with the figures: the frame classes, a stream (group, antenna,
    // thread) or an output (its path, and the stream's frames it should
    // hold), so that "the counts do not reconcile" says where to look.
    std::string disagreement() const;
    // "zero-loss" only when nothing at all was lost and the counts reconcile.
    bool zero_loss() const;
    // Human reasons the verdict is "loss" (empty when zero-loss).
    std::vector<std::string> loss_reasons() const;

  private:
    std::uint64_t packets_ = 0;
    std::uint64_t bytes_ = 0;
    std::uint64_t bad_wire_length_ = 0;
    std::uint64_t outside_window_ = 0;
    std::uint64_t wc_errors_ = 0;
    std::uint64_t payload_mismatches_ = 0;
    std::uint64_t block_misses_ = 0;
    std::array<std::uint64_t, kReasonCount> reasons_{};
    std::vector<StreamStats> streams_;
    std::vector<OutputStats> outputs_;
    std::vector<RingStats> rings_;
    std::vector<OutputFormat> output_formats_;
    std::vector<SourceCounter> source_counters_;
    std::vector<std::string> notes_;
    std::string write_drops_why_;
    std::vector<GroupArrival> group_arrivals_;
    std::vector<GpuXid> gpu_xids_;
    std::uint64_t gpu_xids_lost_ = 0;
    std::string incomplete_;
    ExpectResults expected_;
    // Set once other ledgers are merged in: their outputs were checked
    // against their own frames, which the merged totals can no longer split.
    bool merged_ = false;
    std::string merged_disagreement_;  // the first part's that did not reconcile
};

}  // namespace ibvcap
