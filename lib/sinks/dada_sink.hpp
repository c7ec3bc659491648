// Streams into PSRDADA rings (--dada; docs/formats.md, "PSRDADA rings";
// docs/operations.md, "Feeding a PSRDADA pipeline"): the ring protocol is
// lib/sinks/dada_ring.hpp, the header lib/sinks/dada_header.hpp.
//
// What goes in: one stream's payloads (frame headers stripped), in index
// order through the same reorder window as an --ordered file
// (lib/sinks/reorder.hpp), a fill record (the Mark 5 fill pattern,
// formats/fill_frame.hpp) in place of each frame that never came: so the
// ring holds, byte for byte, the payloads of the stream's --ordered file.
// One stream, not an antenna's threads interleaved: a ring's reader sees one
// time series whose bytes are at a fixed rate, which is what dspsr and
// heimdall read; a site that wants several threads gives each its ring.
//
// The ring's reader never slows the capture. A record the ring has no room
// for (every block written and not yet cleared by a reader) is not waited
// for: a frame is counted `consumer` (LossCause::consumer) and owed as a
// fill record, and so is every record after it until a block comes free;
// then the owed fill records are written first, so every byte after them
// is still at its time. Across a jump in the stream's position (a restart,
// a VDIF rate learned) the transfer is ended (end of data) and a new one
// begins with its own header, since a byte's time follows from its
// position only within one transfer.
//
// Threads: the sink runs on the source's thread (the poll thread, the pcap
// capture thread). A host ring fed host payload is written there (one memcpy
// per payload, as the ordered file's window copies a frame it holds; a semop
// when a block fills; the header once per transfer). A ring in GPU memory
// (dada_db -g: lib/sinks/dada_device.hpp), or payload in GPU memory (--gpu),
// goes through the sink's copy thread (lib/sinks/dada_placer.hpp): the poll
// thread holds the frame's slot (or copies host bytes into a staging slot)
// and queues the record; the copy thread makes every device call, device to
// device for GPU payload, a batch at a time, as the block rings do. A GPU
// frame that arrives out of order cannot be held in the window (its bytes
// are not read on the poll thread): it is counted unheld and a fill takes
// its place.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lib/ledger/ledger.hpp"
#include "lib/sinks/dada_device.hpp"
#include "lib/sinks/dada_ring.hpp"
#include "lib/sinks/sink.hpp"

namespace ibvcap {

class DadaCopier;  // lib/sinks/dada_placer.hpp

// One --dada ring: its key, and which stream it takes (the first stream to
// arrive that matches; unset: any).
struct DadaTarget {
    key_t key = 0;
    std::optional<std::uint32_t> antenna;  // source IPv4, host order
    std::optional<std::uint16_t> thread;
};
// "dada", "dada@10.0.0.5", "dada@10.0.0.5/3": what --dada takes for each
// ring. Throws std::invalid_argument with the fix.
DadaTarget parse_dada_target(const std::string& text);

struct DadaOptions {
    std::vector<DadaTarget> targets;
    // --dada-header KEY=VALUE, in order.
    std::vector<std::pair<std::string, std::string>> header;
    std::uint32_t window = 256;  // the reorder window, frames (--ordered-window)
    std::string run_id;
    // Opens a GPU ring's blocks (the CUDA build's, or the stand-in's); empty:
    // a ring in GPU memory is refused.
    DadaDeviceOpener device_opener;
};

class DadaSink final : public FrameSink {
  public:
    // Attaches to every ring and locks it as its writer (no waiting).
    // Throws DadaError naming the ring: no ring at a key, a ring that has a
    // writer, a key given twice.
    explicit DadaSink(DadaOptions options);
    ~DadaSink() override;
    DadaSink(const DadaSink&) = delete;
    DadaSink& operator=(const DadaSink&) = delete;

    // Before the source starts (the run's id goes into every header).
    void set_run_id(std::string id) { options_.run_id = std::move(id); }
    // Before the source starts, for an offline source (ibvcap read: the file
    // will still be there): a full ring is waited for, in 1 ms naps, until
    // its reader clears a block or `stop` becomes true (Ctrl-C), so a file
    // replayed into a pipeline loses nothing to a slow reader. Live sources
    // never wait (the NIC would drop instead, silently).
    void wait_while_full(const std::atomic<bool>* stop) { wait_stop_ = stop; }
    SinkRoute open_stream(const StreamStats& stream) override;
    void on_frame(const SinkFrame& frame, SinkRoute route) override;
    // The source has stopped: what each window holds is written, and each
    // ring's transfer ended (end of data) and unlocked. Idempotent.
    void finish();
    // After finish(): each ring's figures into the ledger.
    void report_to(Ledger& ledger) const;

    // Any thread, while the run goes on: frames counted `consumer` so far
    // (the timeline's witness "dada/consumer").
    std::uint64_t consumer_so_far() const { return consumer_.load(std::memory_order_relaxed); }
    std::size_t ring_count() const { return rings_.size(); }

    class RingStream;  // dada_sink.cpp
    struct Ring;

  private:
    DadaCopier& copier();
    void start_ring(Ring& ring, std::size_t payload_bytes, bool payload_on_device);
    void fail_ring(Ring& ring, const std::string& why);
    DadaOptions options_;
    std::vector<std::unique_ptr<Ring>> rings_;
    std::unique_ptr<DadaCopier> copier_;  // started by the first ring that needs it
    std::atomic<std::uint64_t> consumer_{0};
    const std::atomic<bool>* wait_stop_ = nullptr;  // non-null: wait for a full ring
    bool finished_ = false;
};

}  // namespace ibvcap
