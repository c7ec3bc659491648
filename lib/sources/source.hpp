// What every source is to the run loop (lib/run/run_loop.hpp): the pcap file,
// the libpcap live capture and the verbs engines all deliver frames into one
// demux per lane and are started, stepped, ticked, stopped and asked for
// their counts the same way. The run loop owns the order; a source owns only
// what happens between its own frames and the NIC, the kernel or the file.
//
// A lane is one thread's worth of delivery: one demux with its ledger (and
// the run's writer and sinks behind it). The libpcap sources have one; the
// verbs source one per device, each with its own poll thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lib/demux/demux.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/ledger/live.hpp"
#include "lib/ledger/report.hpp"
#include "lib/sinks/block_sink.hpp"

namespace ibvcap {

struct SourceLane {
    Demux* demux = nullptr;
    Ledger* ledger = nullptr;
    // Where a source whose demux runs on a thread of its own publishes the
    // lane's counts when asked (lib/ledger/live.hpp); null: nobody asks.
    LivePublisher* live = nullptr;
};

// What a source knows live, for the stats line (lib/run/stats_line.hpp).
struct SourceFigures {
    std::uint64_t packets = 0;
    std::optional<std::uint64_t> bytes;
    std::uint64_t drops = 0;
    std::optional<std::uint64_t> slots_held;
};

class Source {
  public:
    virtual ~Source() = default;

    // For the report: "file", "pcap", "verbs"; and the file or interfaces.
    virtual std::string kind() const = 0;
    virtual std::string input() const = 0;
    // The file read, when the source reads one (an output of the run must
    // never be it); empty otherwise.
    virtual std::string input_file() const { return {}; }
    // Whether a full writer queue waits (a file: it will still be there) or
    // drops and counts (live: a stalled producer loses frames at the NIC).
    virtual bool live() const = 0;
    // Whether its frames may be held by the writers until written (a lease:
    // receive slots, a mapped file). A source that never lends has every
    // record copied, so the writers' buffers need no piece lists for held
    // frames: a fifth less memory to make at 68 KiB buffers.
    virtual bool lends_frames() const { return false; }
    // Whether frames it lends carry payload in device memory (GPU payload,
    // or the stand-in): the writers read it in one device batch per buffer,
    // so their buffers default to 4 MiB (Writer::Options::device_payload).
    virtual bool lends_device_memory() const { return false; }

    // Lanes, and what each adds to the output file prefix ("" for one).
    virtual std::size_t lanes() const { return 1; }
    virtual std::string lane_prefix(std::size_t /*lane*/) const { return {}; }

    // Before any output exists: what can fail and be undone without a
    // frame lost (the libpcap source joins its groups here: its kernel ring
    // holds what they bring in). May throw; nothing is written then.
    virtual void arm() {}
    // Before start: where each lane delivers (and notes go). May throw (one
    // line naming the fix): the run then writes nothing more.
    virtual void connect(std::span<const SourceLane> lanes) = 0;
    // While started, on the run loop's thread: deliver into other lanes (the
    // next scan's, in a capture of several scans) from the next frame on.
    // Returns once no thread of the source touches the old lanes, so that
    // they can be finished; the notes and counters of report() go to the
    // lanes connected last. A source that cannot says so (the run refuses
    // a schedule of several scans before it starts).
    virtual bool can_reconnect() const { return false; }
    virtual void reconnect(std::span<const SourceLane> /*lanes*/) {}
    // The GPU block rings: which streams to make rings for before the source
    // joins, and how large a payload can be (none and 0: the sink makes spare
    // rings sized for its staging, BlockSink::prepare).
    struct BlockPlan {
        std::vector<BlockSink::Key> expected;
        std::uint32_t max_payload_bytes = 0;
    };
    virtual BlockPlan block_plan() const { return {}; }
    // Counters to their baseline, groups joined, threads started.
    virtual void start() = 0;
    // Deliver what is ready, waiting at most `max_wait` for more, and at most
    // `limit` frames (0: no limit; a source that cannot stop exactly may
    // deliver more). Returns false when the source has ended by itself (end
    // of file, an error, a device fault); true otherwise, also when `stop`
    // cut it short.
    virtual bool step(std::uint64_t limit, std::chrono::milliseconds max_wait,
                      const std::atomic<bool>& stop) = 0;
    // Frames delivered so far (readable from the run loop's thread).
    virtual std::uint64_t frames() const = 0;
    // Once a second on the run loop's thread, never a poll thread: read the
    // counters (and the verbs watchdog, which counts its alarms in `info`).
    virtual void tick(RunInfo& /*info*/) {}
    // What the source knows live (the stats line), on the run loop's thread.
    virtual SourceFigures figures() const { return {frames(), {}, 0, {}}; }
    // Its witnesses (NIC, port and kernel counters, completion errors,
    // recoveries, port events...), each with its growth since start() and
    // the cause it witnesses, on the run loop's thread right after tick().
    // The timeline (docs/observability.md) takes per-second deltas of these.
    virtual std::vector<SourceCounter> witnesses() const { return {}; }
    // Whether the lanes' demux runs on the run loop's thread (in step()), so
    // the loop may read their ledgers itself; otherwise the source publishes
    // them to SourceLane::live when asked.
    virtual bool demux_on_loop_thread() const { return true; }
    // No frame is delivered after this returns: groups left, queues drained
    // (at most `remaining` more frames when set), threads joined.
    virtual void stop(std::optional<std::uint64_t> remaining) = 0;
    // After stop, and after the sinks have drained: the source's counters,
    // notes and error into the lanes' ledgers, and its figures into `info`.
    virtual void report(std::span<const SourceLane> lanes, RunInfo& info) = 0;
};

}  // namespace ibvcap
