// Streams into PSRDADA rings (lib/sinks/dada_sink.hpp).
#include "lib/sinks/dada_sink.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "formats/fill_frame.hpp"
#include "lib/core/netaddr.hpp"
#include "lib/sinks/dada_header.hpp"
#include "lib/sinks/dada_placer.hpp"
#include "lib/sinks/ordered_stream.hpp"
#include "lib/sinks/reorder.hpp"

namespace ibvcap {

DadaTarget parse_dada_target(const std::string& text) {
    DadaTarget t;
    const auto at = text.find('@');
    const std::string key = text.substr(0, at);
    const auto k = parse_dada_key(key);
    if (!k) {
        throw std::invalid_argument(fmt::format(
            "bad --dada ring '{}': expected a PSRDADA key in hex, as dada_db -k takes it "
            "(e.g. dada), then optionally @ANTENNA[/THREAD]",
            key));
    }
    t.key = *k;
    if (at == std::string::npos) {
        return t;
    }
    const std::string rest = text.substr(at + 1);
    const auto slash = rest.find('/');
    const auto ip = parse_ipv4(rest.substr(0, slash));
    if (!ip) {
        throw std::invalid_argument(fmt::format(
            "bad --dada ring '{}': '{}' is not an antenna's IPv4 address (KEY@ANTENNA[/THREAD])",
            text, rest.substr(0, slash)));
    }
    t.antenna = *ip;
    if (slash != std::string::npos) {
        const std::string th = rest.substr(slash + 1);
        std::uint32_t v = 0;
        const auto [end, ec] = std::from_chars(th.data(), th.data() + th.size(), v);
        if (th.empty() || ec != std::errc() || end != th.data() + th.size() || v > 0xFFFF) {
            throw std::invalid_argument(fmt::format(
                "bad --dada ring '{}': thread '{}' is not a number from 0 to 65535", text, th));
        }
        t.thread = static_cast<std::uint16_t>(v);
    }
    return t;
}

// One stream's side of a ring, on the source's thread: its reorder window,
// the records it makes of what leaves it, and each transfer's header.
class DadaSink::RingStream final : private ReorderWindow::Output {
  public:
    RingStream(DadaSink::Ring& ring, const StreamStats& stream, std::uint32_t window)
        : ring_(ring),
          timing_(stream.timing),
          rate_known_(stream.rate != StreamStats::Rate::learning),
          window_(window, stream.frame_bytes, OrderedStream::max_jump_of(stream)),
          max_jump_(OrderedStream::max_jump_of(stream)),
          label_(fmt::format("{} {} station {} thread {}", stream.group.to_string(),
                             format_ipv4(stream.antenna), stream.station, stream.thread)) {}

    void write(const SinkFrame& f);
    void close() {
        if (!direct_) {
            window_.close(*this);
        }
    }
    // The window's counts, or the direct path's (GPU payload).
    ReorderWindow::Counts counts() const {
        ReorderWindow::Counts c = window_.counts();
        c.too_late += direct_too_late_;
        c.restarts += direct_restarts_;
        return c;
    }
    const std::string& label() const { return label_; }
    std::uint64_t payload_bytes() const { return payload_bytes_; }
    std::uint64_t unwritten() const { return unwritten_; }

  private:
    void write_arrived(std::uint64_t index) override;
    void write_held(std::uint64_t index, Bytes frame) override;
    void write_fill(std::uint64_t index) override;
    std::size_t copy_arrived(MutableBytes slot) override;
    // Hand a record to the ring (inline, or queued for the copy thread),
    // with a header when a transfer starts at it.
    void send(DadaRecord r);
    void retime(const StreamStats& s);
    // GPU payload: in index order as it comes (its bytes cannot be held in
    // the window: they are not read on this thread), a fill for each index
    // skipped, a frame behind the last one written too late.
    void write_direct(std::uint64_t index);
    // A staging slot for host bytes bound for the copy thread; null when
    // every one is still waiting for it.
    std::uint8_t* staging_slot();

    DadaSink::Ring& ring_;
    StreamTiming timing_;
    bool rate_known_;
    ReorderWindow window_;
    std::uint64_t max_jump_;
    bool direct_ = false;  // GPU payload: no reordering (write_direct)
    bool direct_started_ = false;
    std::uint64_t direct_next_ = 0;
    std::uint64_t direct_too_late_ = 0;
    std::uint64_t direct_restarts_ = 0;
    std::string label_;
    StreamHeader header_{};  // the stream's first frame's
    std::size_t payload_bytes_ = 0;
    bool in_transfer_ = false;
    bool rebased_ = false;  // the next record starts a transfer
    std::uint64_t next_index_ = 0;
    std::uint64_t transfers_ = 0;
    std::uint64_t unwritten_ = 0;                  // frames this side could not hand over
    std::unique_ptr<std::string> pending_header_;  // a transfer's, not yet handed over
    std::uint64_t transfer_first_ = 0;             // the index the pending header is for
    // Queued rings: host bytes staged for the copy thread, in FIFO order.
    static constexpr std::size_t kStagingSlots = 4096;
    std::vector<std::uint8_t> staging_;
    std::uint64_t staged_ = 0;
    // The frame being offered (during write()).
    const Frame* frame_ = nullptr;
    std::size_t offset_ = 0;
    std::size_t len_ = 0;
};

struct DadaSink::Ring {
    DadaTarget target;
    std::unique_ptr<DadaRingWriter> writer;
    DadaDeviceBlocks device;                   // a GPU ring's blocks
    std::unique_ptr<BlockMemory> host_memory;  // a host ring fed GPU payload
    std::unique_ptr<DadaPlacer> placer;        // made with the stream
    bool queued = false;                       // placements on the copy thread
    std::unique_ptr<RingStream> stream;
    RingStats stats;
    DadaSink* sink = nullptr;
};

void DadaSink::RingStream::write(const SinkFrame& f) {
    const StreamStats& s = *f.stream;
    if (s.timing.frames_per_period != timing_.frames_per_period ||
        s.timing.period != timing_.period) [[unlikely]] {
        retime(s);
    }
    const StreamHeader& h = *f.header;
    if (header_.frame_bytes == 0) [[unlikely]] {
        // The stream's first frame: its payload size sets the ring's
        // records, and where its payload lies whether the ring's copies
        // need the copy thread. (Registration time: may allocate.)
        header_ = h;
        payload_bytes_ = h.frame_bytes > h.header_bytes ? h.frame_bytes - h.header_bytes : 0;
        ring_.sink->start_ring(ring_, payload_bytes_, f.frame.tail_device != nullptr);
        if (ring_.queued) {
            staging_.resize(kStagingSlots * payload_bytes_);
        }
        direct_ = f.frame.tail_device != nullptr;
    }
    frame_ = &f.frame;
    offset_ = f.packet->payload_offset + h.prefix_bytes;
    len_ = f.packet->payload_bytes - h.prefix_bytes;
    const std::uint64_t index = timing_.index(h.seconds, h.frame);
    if (direct_) {
        write_direct(index);
    } else {
        window_.offer(index, *this);
    }
    frame_ = nullptr;
}

void DadaSink::RingStream::write_direct(std::uint64_t index) {
    if (direct_started_ && index < direct_next_) {
        ++direct_too_late_;  // behind what was written (a duplicate, or reordered)
        return;
    }
    if (!direct_started_ || index - direct_next_ > max_jump_) {
        // The start, or a jump past the plausible: a new run (a new transfer).
        direct_restarts_ += direct_started_ ? 1 : 0;
        direct_started_ = true;
        direct_next_ = index;
    }
    while (direct_next_ < index) {
        write_fill(direct_next_++);
    }
    write_arrived(index);
    direct_next_ = index + 1;
}

// A VDIF rate learned: what the window holds goes out in the old
// arithmetic, and the ring's next record starts a transfer whose header
// has the rate.
void DadaSink::RingStream::retime(const StreamStats& s) {
    rebase_window(window_, timing_, s, *this);
    timing_ = s.timing;
    rate_known_ = s.rate != StreamStats::Rate::learning;
    rebased_ = true;
    max_jump_ = OrderedStream::max_jump_of(s);
    direct_started_ = false;
}

std::uint8_t* DadaSink::RingStream::staging_slot() {
    const auto* stop = ring_.sink->wait_stop_;
    while (staged_ - ring_.placer->staged_done() >= kStagingSlots) {
        if (stop == nullptr || stop->load(std::memory_order_relaxed)) {
            return nullptr;  // a live source never waits
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return staging_.data() + (staged_ % kStagingSlots) * payload_bytes_;
}

void DadaSink::RingStream::write_arrived(std::uint64_t index) {
    DadaRecord r;
    r.index = index;
    const std::size_t payload = offset_ + header_.header_bytes;
    if (frame_ == nullptr || len_ != header_.header_bytes + payload_bytes_) {
        r.kind = DadaRecord::Kind::unreadable;  // a length off the stream's
        send(r);
        return;
    }
    r.kind = DadaRecord::Kind::payload;
    const Frame& f = *frame_;
    if (!ring_.queued) {
        r.frame = &f;  // gathered into the ring from the frame's pieces
        r.offset = payload;
        send(r);
        return;
    }
    // For the copy thread: the slot held, or host bytes staged.
    const bool in_tail = payload >= f.head.size();
    const bool in_head = payload + payload_bytes_ <= f.head.size();
    if ((in_tail || in_head) && f.hold(Holder::ring)) {
        r.src = in_tail ? f.tail.data() + (payload - f.head.size()) : f.head.data() + payload;
        r.device = in_tail ? f.tail_device : nullptr;
        r.owner = f.lease->owner;
        r.token = f.lease->token_of(Holder::ring);
    } else if (std::uint8_t* slot = staging_slot();
               slot != nullptr && f.gather(payload, MutableBytes(slot, payload_bytes_))) {
        r.src = slot;
        r.staged = true;
        ++staged_;
    } else {
        // GPU bytes the rings' hold share could not take, or no staging slot.
        r.kind = DadaRecord::Kind::unreadable;
    }
    send(r);
}

void DadaSink::RingStream::write_held(std::uint64_t index, Bytes frame) {
    DadaRecord r;
    r.index = index;
    const std::size_t header = header_.header_bytes;
    if (frame.size() != header + payload_bytes_) {
        r.kind = DadaRecord::Kind::unreadable;
    } else if (!ring_.queued) {
        r.kind = DadaRecord::Kind::payload;
        r.src = frame.data() + header;  // copied before send() returns
    } else if (std::uint8_t* slot = staging_slot(); slot != nullptr) {
        std::memcpy(slot, frame.data() + header, payload_bytes_);
        r.kind = DadaRecord::Kind::payload;
        r.src = slot;
        r.staged = true;
        ++staged_;
    } else {
        r.kind = DadaRecord::Kind::unreadable;
    }
    send(r);
}

void DadaSink::RingStream::write_fill(std::uint64_t index) {
    DadaRecord r;
    r.index = index;
    r.kind = DadaRecord::Kind::fill;
    send(r);
}

std::size_t DadaSink::RingStream::copy_arrived(MutableBytes slot) {
    if (frame_ == nullptr || len_ > slot.size()) {
        return 0;
    }
    // False when the bytes are device memory: the window counts the frame
    // unheld, and a fill takes its place.
    return frame_->gather(offset_, slot.first(len_)) ? len_ : 0;
}

void DadaSink::RingStream::send(DadaRecord r) {
    if (r.kind == DadaRecord::Kind::unreadable) {
        ++unwritten_;  // the pattern goes in its place
    }
    if (!in_transfer_ || rebased_ || r.index != next_index_) {
        // A transfer starts here (the stream's first record, a restart, a
        // rate learned): its header, made once per transfer.
        in_transfer_ = true;
        rebased_ = false;
        DadaHeaderInput in;
        in.first = header_;
        in.timing = timing_;
        in.rate_known = rate_known_;
        in.first_index = r.index;
        in.payload_bytes = payload_bytes_;
        in.header_block_bytes = ring_.writer->header_block_bytes();
        in.stream = label_;
        in.run_id = ring_.sink->options_.run_id;
        in.key = dada_key_name(ring_.target.key);
        in.transfer = transfers_++;
        in.extra = ring_.sink->options_.header;
        transfer_first_ = r.index;
        try {
            pending_header_ = std::make_unique<std::string>(dada_header(in));
        } catch (const std::exception& e) {
            pending_header_.reset();
            ring_.sink->fail_ring(ring_, e.what());
        }
    }
    next_index_ = r.index + 1;
    r.header = pending_header_.get();
    r.first = transfer_first_;
    if (!ring_.queued) {
        pending_header_.release();  // the placer owns it now
        ring_.placer->record(r);
        return;
    }
    bool pushed = ring_.sink->copier().push(*ring_.placer, r);
    for (const auto* stop = ring_.sink->wait_stop_;
         !pushed && stop != nullptr && !stop->load(std::memory_order_relaxed);) {
        // An offline source waits for the copy thread, as for the reader.
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        pushed = ring_.sink->copier().push(*ring_.placer, r);
    }
    if (pushed) {
        pending_header_.release();
        return;
    }
    // The copy thread's queue is full: not placed (the placer fills the
    // gap). A held slot goes back now; a transfer's header waits for the
    // next record.
    if (r.kind == DadaRecord::Kind::payload) {
        ++unwritten_;  // (an unreadable one was counted above, once)
    }
    if (r.owner != nullptr) {
        const std::uint64_t token[] = {r.token};
        r.owner->release(token);
    }
}

// ---------------------------------------------------------------------------

DadaSink::DadaSink(DadaOptions options) : options_(std::move(options)) {
    for (std::size_t i = 0; i < options_.targets.size(); ++i) {
        for (std::size_t j = 0; j < i; ++j) {
            if (options_.targets[j].key == options_.targets[i].key) {
                throw DadaError(
                    fmt::format("--dada names ring {} twice: a ring has one writer, "
                                "and one stream",
                                dada_key_name(options_.targets[i].key)));
            }
        }
        auto r = std::make_unique<Ring>();
        r->target = options_.targets[i];
        r->sink = this;
        r->writer = std::make_unique<DadaRingWriter>(r->target.key);
        DadaBuffer& data = r->writer->data();
        if (data.on_device()) {
            // Opened before the run: the handles' opening is a device call.
            if (!options_.device_opener) {
                throw DadaError(
                    fmt::format("PSRDADA ring {} is in GPU memory (dada_db -g {}): write it with "
                                "--gpu (the CUDA build), or make the ring without -g",
                                dada_key_name(r->target.key), data.sync().on_device_id));
            }
            std::vector<const std::uint8_t*> handles;
            for (std::uint64_t b = 0; b < data.blocks(); ++b) {
                handles.push_back(data.segment(b));
            }
            try {
                r->device =
                    options_.device_opener(data.sync().on_device_id, handles, data.block_bytes());
            } catch (const std::exception& e) {
                throw DadaError(
                    fmt::format("PSRDADA ring {}: {}", dada_key_name(r->target.key), e.what()));
            }
        }
        r->stats.key = dada_key_name(r->target.key);
        r->stats.block_bytes = data.block_bytes();
        r->stats.blocks = data.blocks();
        r->stats.header_block_bytes = r->writer->header_block_bytes();
        r->stats.readers = data.readers();
        rings_.push_back(std::move(r));
    }
}

DadaSink::~DadaSink() {
    finish();
}

DadaCopier& DadaSink::copier() {
    if (!copier_) {
        copier_ = std::make_unique<DadaCopier>();
    }
    return *copier_;
}

void DadaSink::start_ring(Ring& ring, std::size_t payload_bytes, bool payload_on_device) {
    DadaBuffer& data = ring.writer->data();
    std::vector<std::uint8_t*> blocks;
    BlockMemory* memory = nullptr;
    if (data.on_device()) {
        blocks = ring.device.blocks;
        memory = ring.device.memory.get();
    } else {
        for (std::uint64_t b = 0; b < data.blocks(); ++b) {
            blocks.push_back(data.segment(b));
        }
        if (payload_on_device) {
            // GPU payload into a host ring: read by the copy thread, in batches.
            ring.host_memory = make_host_block_memory();
            memory = ring.host_memory.get();
        }
    }
    ring.queued = memory != nullptr;
    if (ring.queued) {
        (void)copier();  // its thread started here, at registration time
    }
    ring.placer = std::make_unique<DadaPlacer>(
        *ring.writer, payload_bytes, std::move(blocks), memory, [this, &ring] {
            ++ring.stats.consumer;
            consumer_.fetch_add(1, std::memory_order_relaxed);
        });
    ring.placer->wait_while_full(wait_stop_);
}

void DadaSink::fail_ring(Ring& ring, const std::string& why) {
    if (ring.stats.error.empty()) {
        ring.stats.error = why;
    }
}

SinkRoute DadaSink::open_stream(const StreamStats& stream) {
    for (auto& r : rings_) {
        if (r->stream != nullptr) {
            continue;
        }
        if ((r->target.antenna && *r->target.antenna != stream.antenna) ||
            (r->target.thread && *r->target.thread != stream.thread)) {
            continue;
        }
        // The window's slots: allocated here, at registration time.
        r->stream =
            std::make_unique<RingStream>(*r, stream, std::max<std::uint32_t>(options_.window, 1));
        r->stats.stream = r->stream->label();
        r->stats.format = std::string(to_string(stream.format));
        return r.get();
    }
    return nullptr;
}

void DadaSink::on_frame(const SinkFrame& frame, SinkRoute route) {
    if (route == nullptr || frame.packet == nullptr || frame.header == nullptr) {
        return;
    }
    static_cast<Ring*>(route)->stream->write(frame);
}

void DadaSink::finish() {
    if (finished_) {
        return;
    }
    finished_ = true;
    for (auto& r : rings_) {
        if (r->stream) {
            r->stream->close();  // the window's last records (queued or placed)
        }
    }
    if (copier_) {
        copier_->stop();  // every queued record placed, its slot given back
    }
    for (auto& r : rings_) {
        if (r->placer) {
            r->placer->close();
        }
        r->writer->end();
        if (r->device.close) {
            r->device.close();
            r->device.close = nullptr;
        }
        RingStats& s = r->stats;
        if (r->stream) {
            const auto& c = r->stream->counts();
            s.ordered.window = options_.window;
            s.ordered.duplicates = c.duplicates;
            s.ordered.too_late = c.too_late;
            s.ordered.unheld = c.unheld;
            s.ordered.restarts = c.restarts;
            s.payload_bytes = r->stream->payload_bytes();
            s.unwritten += r->stream->unwritten();
        }
        if (r->placer) {
            const DadaPlacerCounts& p = r->placer->counts();
            s.frames = p.frames;
            s.fills = p.fills;
            s.owed_at_end = p.owed_at_end;
            s.unwritten += p.unwritten;
            if (!r->placer->error().empty()) {
                fail_ring(*r, r->placer->error());
            }
        }
        s.bytes = r->writer->bytes_written();
        s.readers_attached = r->writer->readers_attached();
        s.end_of_data = r->writer->ended_with_eod();
        if (r->writer->failed()) {
            fail_ring(*r, r->writer->error());
        }
    }
}

void DadaSink::report_to(Ledger& ledger) const {
    for (const auto& r : rings_) {
        ledger.add_ring(r->stats);
    }
}

}  // namespace ibvcap
