// The verbs capture engine for one device (docs/architecture.md, "The data path",
// "Setup and teardown order", "QP error recovery"): one completion queue shared by every QP of the
// device, one raw-packet QP by default (--queues for more) to which the flow rules of every
// GROUP:PORT (every group and antenna with hardware demux) steer, a receive ring per QP whose work
// requests scatter each frame into a header slot (SGE0, host memory) and a payload slot (SGE1, host
// or GPU memory), and a poll loop that hands frames to the demultiplexer and re-posts their slots
// in batches. On a QP that several groups share, each group's rules carry a flow tag, which tells
// the poll loop whose frame a completion is (the per-group counts a QP per group gave).
//
// Written once against the verbs seam (lib/sources/verbs/seam.hpp): the same code runs on
// libibverbs and on the simulated NIC.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "lib/core/device_calls.hpp"
#include "lib/core/netaddr.hpp"
#include "lib/demux/demux.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/ledger/live.hpp"
#include "lib/ledger/report.hpp"
#include "lib/sources/igmp.hpp"
#include "lib/sources/verbs/nic_clock.hpp"
#include "lib/sources/verbs/payload_memory.hpp"
#include "lib/sources/verbs/seam.hpp"

namespace ibvcap {

struct EngineOptions {
    std::vector<Endpoint> groups;
    std::vector<std::uint32_t> antennas;  // with hw_demux: one rule per (group, antenna)
    // Source-specific groups (GROUP:PORT@SOURCE): their rules match each
    // source named, so other senders' frames are never steered to us.
    std::vector<SourceFilter> sources;
    bool hw_demux = false;        // needs `antennas`
    bool split = true;            // two SGEs: headers to host, payload to payload memory
    std::uint32_t vlan_tags = 0;  // tags expected on the wire: SGE0 grows 4 bytes per tag
    // --vlan-tags given: it overrides the tags of the capture's netdev.
    // Otherwise a VLAN netdev's own count replaces vlan_tags (VerbsSource).
    bool vlan_tags_given = false;
    // The capture's netdev is a VLAN (lib/host/devices.hpp NetInterface::
    // vlan_ids, outermost first): with one tag the rules match its id as well
    // as the group, so two VLANs bringing one group to a port are two
    // captures. Set per device by the verbs source.
    std::vector<std::uint16_t> vlan_ids;
    // Receive QPs (--queues; 0: one). The plan's entries (each group, or each
    // (group, antenna) with hw_demux) are dealt to them in order, in blocks
    // of equal size (entry i to QP i * queues / entries); more queues than
    // entries make one per entry, the layout before issue 44. One QP walks
    // one ring's slots in order, which the caches follow; a QP per group
    // jumps between rings (docs/performance.md, "Many groups, one queue").
    // Reasons for more: a ring deeper than max_qp_wr allows in all, or a QP
    // error that must not touch the other groups (docs/operations.md).
    std::uint32_t queues = 0;
    std::uint32_t ring_depth = 4096;       // receive WRs per QP
    std::uint32_t max_frame_bytes = 9022;  // MTU 9000 + Ethernet header + two VLAN tags
    std::uint32_t poll_batch = 64;
    // A QP's completed slots go back in one post_recv once this many wait;
    // sooner when its ring is half empty or a poll finds the CQ idle
    // (engine_poll.cpp, VerbsEngine::repost_due).
    std::uint32_t repost_batch = 32;
    bool flow_counters = true;  // a count action on each rule, when the device has them
    // The zero-copy hand-off: consumers (writers, the block-ring copy thread)
    // may hold a frame's slot past on_frame(); it is re-posted when released.
    // At most hold_limit slots of a QP are held at once (0: half the ring),
    // so the NIC always has the rest posted; beyond it consumers copy.
    // The block rings' copy thread has a share of its own beside it
    // (ring_hold_limit, 0: a quarter of the ring, four of its 256-frame
    // batches at the default depth), so a stalled copy thread runs out of
    // its share only and never refuses the writers' holds (gpu-cuda-2.md
    // N2); with both shares used up the NIC still has a quarter posted.
    bool zero_copy = true;
    std::uint32_t hold_limit = 0;
    std::uint32_t ring_hold_limit = 0;
    std::chrono::milliseconds drain_timeout{200};  // recovery: wait for flushes this long
    // The stop's drains (verbs-mlx5-2.md N5): each polls until the CQ has
    // been empty for stop_quiet (a frame the rule already counted may
    // complete a little later), and at most stop_drain_bound, as the switch
    // may go on forwarding after the leave (IGMP snooping keeps a group for
    // its last-member queries, RFC 2236 §8.8 and §8.9 / RFC 3376 §8.8: 2 ×
    // 1 s by default; forever with snooping off or a static route).
    std::chrono::milliseconds stop_quiet{10};
    std::chrono::milliseconds stop_drain_bound{1000};
    // --timestamps (docs/operations.md, "Time"): frame times in host UTC, the
    // NIC clock measured each second and converted, or the NIC's own clock.
    FrameTime frame_time = FrameTime::utc;
    // --timestamps was given on the command line: an explicit utc that cannot
    // be had (wall-clock stamps and no PHC to measure them by) stops the
    // start; the default only warns (verbs-mlx5-3.md R3).
    bool frame_time_given = false;
    // The device's netdev's PTP hardware clock (lib/host/phc.hpp); null when
    // it has none, and phc_missing says why.
    std::shared_ptr<PhcClock> phc;
    std::string phc_missing;
};

// The largest CODIF payload (the bytes after the 64-byte CODIF header) a
// frame of at most options.max_frame_bytes can carry: no VLAN tag, no IP
// options. Sizes the block rings made before a capture (BlockSink::prepare).
std::uint32_t max_payload_bytes(const EngineOptions& options);

// What the poll loop did (the prototype's figures and the recovery record).
struct EngineStats {
    std::uint64_t polls = 0;        // calls to poll the CQ
    std::uint64_t empty_polls = 0;  // busy waits: polls that returned nothing
    std::uint64_t completions = 0;
    std::uint64_t frames = 0;             // successful completions handed to the demux
    std::uint64_t bad_wr_id = 0;          // completions whose wr_id names no posted slot
    std::uint64_t bad_wr_id_frames = 0;   // of those, frames (dropped: no slot to read)
    std::uint64_t stale_completions = 0;  // from a ring generation before a recovery
    std::uint64_t stale_frames = 0;       // of those, frames (dropped: their slot was reused)
    std::uint64_t bad_byte_len = 0;       // byte_len larger than the slot
    std::uint64_t held = 0;               // frames a consumer held (zero-copy hand-offs)
    std::uint64_t hold_refused = 0;       // frames offered while the hold limit was reached
    std::uint64_t ring_hold_refused = 0;  // ... while the rings' share was used up
    std::uint64_t bad_release = 0;        // released tokens naming no held slot
    std::uint64_t split_misaligned = 0;   // headers not ending where SGE0 ends
    std::uint64_t wc_by_status[6] = {};   // indexed by verbs::WcStatus
    std::uint64_t recoveries = 0;         // QP resets after an error
    std::uint64_t flow_matched = 0;       // packets the rules' counters saw (when they have them)
    std::uint64_t port_down_events = 0;
    std::uint64_t rejoins = 0;
    std::uint64_t other_port_events = 0;  // port events of a port this engine does not use
    std::uint64_t uncounted_rules = 0;    // rules made without the count action the device refused
    std::uint64_t untagged_rules = 0;     // rules of a shared QP made without their refused tag
    // Frames of a shared, tagged QP whose completion's flow tag named no
    // entry of that QP (another process's rule of the same match, or a
    // corrupted tag): not attributed to a group.
    std::uint64_t unattributed = 0;
    // Completions a wall-clock CQ consumed when it could not read its clock
    // (verbs-mlx5-2.md N3): frames lost, counted as work-completion errors.
    std::uint64_t clock_lost_completions = 0;
    bool device_fatal = false;
};

class VerbsEngine {
  public:
    // Builds the plan on `device`: CQ, QPs, rings, memory. Throws
    // std::system_error (with the verbs layer's hint) or std::invalid_argument.
    VerbsEngine(verbs::Device& device, EngineOptions options, Demux& demux, Ledger& ledger,
                PayloadMemory& payload, MembershipFactory memberships);
    ~VerbsEngine();
    VerbsEngine(const VerbsEngine&) = delete;
    VerbsEngine& operator=(const VerbsEngine&) = delete;

    // The order of docs/architecture.md, "Setup and teardown order": post every receive WR and move
    // the QPs to RTR, then create the flow rules, then join the groups.
    void start();
    // One poll batch: completions → demux → re-post; QPs in error recovered.
    // Returns the number of completions handled. The poll thread calls this
    // in a loop; tests call it directly.
    std::size_t poll_once();
    // Busy-poll until `stop`; handles async events between batches. Ends
    // without throwing on a device fatal error (stats().device_fatal), also
    // when a failure it caused came first; throws on any other failure.
    void run(const std::atomic<bool>& stop);
    // How long run() waits, after a failure, for the device to say it was
    // a fatal error.
    static constexpr std::chrono::milliseconds kFatalEventGrace{200};
    // An asynchronous event (from the device's event queue).
    void handle_event(const verbs::AsyncEvent& event);
    // One measurement of the NIC clock against CLOCK_REALTIME (the poll
    // loop's housekeeping, once a second; tests call it as their simulated
    // seconds pass). Poll thread only.
    void resync_clock();
    // Drain what the CQ holds and handle pending events without waiting.
    void drain();
    // Poll until the CQ has been empty for `quiet`, at most `bound`; false
    // when the bound ended it with completions still coming.
    bool drain_until_quiet(std::chrono::milliseconds quiet, std::chrono::milliseconds bound);
    // Stop order of docs/architecture.md, "Setup and teardown order": leave the groups, drain,
    // destroy the flows (before their QPs). Idempotent; the destructor calls it.
    void stop();

    const EngineStats& stats() const { return stats_; }
    // The lane's ledger copies for the timeline and the metrics
    // (lib/ledger/live.hpp): made on the poll thread when asked, every 1024
    // polls, next to the device events. Call before start().
    void set_live(LivePublisher* live) { live_ = live; }
    // Deliver into another lane from the next poll batch on (a new scan's
    // demux and ledger, lib/run/run_loop.hpp): taken by the poll thread at
    // its housekeeping, between batches; returns once it has been, so that
    // nothing touches the old lane after. Any thread but the poll thread.
    void reconnect(Demux& demux, Ledger& ledger, LivePublisher* live);
    // Another thread's view of this engine's witnesses (published every 1024
    // polls and when the poll loop ends), names prefixed with `prefix`:
    // completion errors and QP recoveries (LossCause::completion_errors), port
    // down events (port_down), frames offered while consumers held
    // hold_limit slots of a ring, i.e. the ring ran at half its depth
    // (ring_hold_limit).
    std::vector<SourceCounter> witnesses(const std::string& prefix) const;
    // Another thread's view, once a second while the poll thread runs: for
    // each QP whose rules counted arrivals since the last call but which
    // delivered nothing in that time, a line saying so (a starved ring or a
    // stuck QP). Reads the rules' counters (an ioctl each), so never call it
    // from the poll loop, nor after the run has been halted.
    std::vector<std::string> watchdog();

    // Frames handed to the demux so far; safe to read from another thread
    // (published once per poll batch).
    std::uint64_t frames_published() const { return published_.load(std::memory_order_relaxed); }
    // Their bytes on the wire (the stats line's Gb/s), published likewise.
    std::uint64_t bytes_published() const {
        return bytes_published_.load(std::memory_order_relaxed);
    }
    // Receive slots whose frames a consumer (a writer) still holds, so they
    // are not re-posted yet; any thread (published once per poll batch).
    std::uint64_t slots_held() const { return held_published_.load(std::memory_order_relaxed); }
    const EngineOptions& options() const { return options_; }
    std::size_t queue_pairs() const;
    std::uint32_t header_bytes() const { return header_bytes_; }
    // Per group (per group and antenna with --hw-demux), when the rules
    // carry counters: what its rules matched, and matched − delivered:
    // packets the NIC steered but never delivered (a per-group view of
    // out_of_buffer). On a shared QP whose groups cannot be told apart (a
    // tag refused, or completions with tags naming none of its groups), the
    // undelivered count is the queue's. Entries: (label, value).
    // After stop(), the values read just before the rules were destroyed.
    std::vector<SourceCounter> flow_counters();
    std::vector<std::uint32_t> qp_numbers() const;
    // The verbs objects this engine made on its device, recorded as it made
    // them: the CQ, the QPs, the memory regions, the flow rules (once
    // started), and the device's limits (docs/observability.md §5).
    const DeviceResources& resources() const { return resources_; }
    // What the completion timestamps are (what stamps the pcap records).
    verbs::TimestampFormat timestamps() const { return timestamps_; }
    // How the frame times were made, with the clock's measurements (the
    // report's clocks). Not while the poll thread runs.
    ClockFigures clock_figures() const;
    // The ledger entries for what the engine counted (work-completion errors
    // by status, recoveries, wr_id and byte_len rejections).
    void report_to(Ledger& ledger) const;

  private:
    struct Qp;
    struct Entry;
    class Releases;
    // The plan (engine_rules.cpp): one entry per group, or per (group,
    // antenna) with hw_demux; throws UsageError when --hw-demux would make
    // no rule for a group.
    void plan_entries();
    // Start's step 2: every entry's rules, tagged where its QP is shared.
    void create_rules(bool counters);
    // Whether a QP's completions can be told apart by group: one entry, or
    // tagged with nothing unattributed.
    bool attributable(const Qp& q) const;
    std::uint64_t entry_delivered(const Entry& e) const;  // any thread
    // One recovered QP's note (report_to), naming the groups it carries.
    std::string recovery_note(const Qp& q) const;
    void take_releases();
    void post_all(Qp& qp);
    void flush_reposts(Qp& qp);
    // Whether a QP's waiting re-posts go to the NIC at the end of this poll.
    bool repost_due(const Qp& qp, bool idle) const;
    // The QPs a poll must look at when it ends (engine_poll.cpp, poll_once):
    // those it (or an event before it) changed, and those awaiting recovery.
    void touch(Qp& qp);
    // The end of a poll for one QP: publish, recover or re-post. True while
    // it awaits recovery (it is looked at again after the next poll).
    bool finish_poll(Qp& qp, bool idle);
    void poll_until(const std::atomic<bool>& stop);      // run() without its error handling
    void check_first_stamp(const verbs::Completion& c);  // throws: an implausible stamp
    void recover(Qp& qp);
    // The CQ (reading flow tags when a QP is shared) and the QPs, with the
    // first timestamp format the device takes (device ticks, wall clock, none).
    void create_queues(std::uint32_t cq_depth, bool flow_tags);
    std::unique_ptr<verbs::Flow> create_flow(Qp& q, const verbs::FlowMatch& match, bool& counters);
    // create_flow, and once more without the tag when the device refuses it
    // (the QP then counts its groups as one; match.tag is then 0).
    std::unique_ptr<verbs::Flow> create_tagged_flow(Qp& q, const Entry& e, verbs::FlowMatch& match,
                                                    bool& counters);
    void handle(const verbs::Completion& c);
    std::uint64_t timestamp_ns(const verbs::Completion& c);
    // The CQ went on without timestamps (its clock could not be read).
    void clock_unreadable();
    std::vector<SourceCounter> read_flow_counters();
    // Each entry's rule counts now (nullopt: no counter), and the counters'
    // entries for them against what each has delivered by now.
    std::vector<std::optional<std::uint64_t>> read_rule_matches();
    std::vector<SourceCounter> counters_for(
        const std::vector<std::optional<std::uint64_t>>& matches);
    // The receive WR of a slot (SGE0 header slot + SGE1 payload slot, or one SGE).
    verbs::RecvRequest request_for(const Qp& q, std::uint64_t slot) const;
    std::uint8_t* header_slot(const Qp& q, std::uint64_t slot) const;
    // The poll loop's hint (engine_poll.cpp): a prefetch of the first two
    // cache lines of a completion's frame, as far as its wr_id names a slot.
    void prefetch_slot(const verbs::Completion& c) const;
    static constexpr std::size_t kSlotAhead = 8;
    std::uint64_t payload_offset(std::uint64_t slot) const;
    // What the entry's rules counted, when they carry counters (an ioctl each).
    std::optional<std::uint64_t> rule_matches(Entry& e);

    verbs::Device& device_;
    EngineOptions options_;
    // The lane delivered into: changed only by the poll thread
    // (take_lane_swap), or by reconnect() while no poll thread runs.
    Demux* demux_;
    Ledger* ledger_;
    PayloadMemory& payload_;
    MembershipFactory membership_factory_;

    std::uint32_t header_bytes_ = 0;   // SGE0 length
    std::uint32_t header_stride_ = 0;  // bytes between header slots
    std::uint32_t payload_bytes_ = 0;  // SGE1 (or the single SGE) length
    std::unique_ptr<std::uint8_t[], void (*)(void*)> header_arena_{nullptr, nullptr};
    std::unique_ptr<verbs::MemoryRegion> header_mr_;
    std::unique_ptr<verbs::CompletionQueue> cq_;
    // Declared after the CQ so they go first; each Qp owns its flows, which
    // it destroys before its queue pair (Qp's member order).
    std::vector<std::unique_ptr<Qp>> qps_;
    // The plan's entries; declared after the QPs, so their rules go first.
    std::vector<Entry> entries_;
    // Per entry, for the poll loop's flow tags (tag = index + 1): its QP, and
    // the frames delivered to it, written by the poll thread only (a plain
    // load and store) and read by the watchdog's.
    std::vector<std::uint16_t> entry_qp_;
    std::unique_ptr<std::atomic<std::uint64_t>[]> entry_delivered_;
    std::vector<Qp*> touched_;  // reserved for every QP: never grows while polling
    std::vector<std::unique_ptr<GroupMembership>> memberships_;
    std::vector<verbs::Completion> batch_;
    std::vector<SourceCounter> final_flow_counters_;
    DeviceResources resources_;
    EngineStats stats_;
    std::atomic<std::uint64_t> published_{0};
    std::atomic<std::uint64_t> held_published_{0};
    std::atomic<std::uint64_t> bytes_published_{0};
    struct PublishedWitnesses {
        std::atomic<std::uint64_t> wc_errors{0};
        std::atomic<std::uint64_t> recoveries{0};
        std::atomic<std::uint64_t> port_down{0};
        std::atomic<std::uint64_t> hold_limit{0};
    } witnesses_published_;
    void publish_witnesses();
    std::uint64_t wc_errors() const;  // the frames report_to counts as wc errors
    LivePublisher* live_ = nullptr;
    struct LaneSwap {
        Demux* demux;
        Ledger* ledger;
        LivePublisher* live;
    };
    std::atomic<const LaneSwap*> lane_swap_{nullptr};  // reconnect()'s, until taken
    std::atomic<bool> polling_{false};                 // run() is in its poll loop
    void take_lane_swap();
    std::uint64_t bytes_ = 0;
    std::unique_ptr<Releases> releases_;
    std::vector<std::uint64_t> released_;  // the poll thread's side of the swap
    std::uint64_t held_total_ = 0;
    std::uint32_t hold_limit_ = 0;
    std::uint32_t ring_hold_limit_ = 0;
    bool started_ = false;
    bool stopped_ = false;
    // Completion timestamps → host ns (lib/sources/verbs/nic_clock.hpp).
    verbs::TimestampFormat timestamps_ = verbs::TimestampFormat::none;
    NicClock clock_;
    std::uint64_t batch_realtime_ns_ = 0;
    bool first_stamp_checked_ = false;
    // The device went fatal (its event, or a counter read's EIO): the
    // watchdog reads no more counters (main thread; verbs-mlx5-3.md R8).
    std::atomic<bool> fatal_seen_{false};
    std::chrono::steady_clock::time_point last_clock_sync_{};
};

}  // namespace ibvcap
