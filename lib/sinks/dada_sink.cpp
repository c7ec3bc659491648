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

// One stream into one ring: its reorder window, the fill records it owes,
// and its transfers.
class DadaSink::RingStream final : private ReorderWindow::Output {
  public:
    RingStream(DadaSink::Ring& ring, const StreamStats& stream, std::uint32_t window)
        : ring_(ring),
          timing_(stream.timing),
          rate_known_(stream.rate != StreamStats::Rate::learning),
          frame_bytes_(stream.frame_bytes),
          window_(window, stream.frame_bytes, OrderedStream::max_jump_of(stream)),
          label_(fmt::format("{} {} station {} thread {}", stream.group.to_string(),
                             format_ipv4(stream.antenna), stream.station, stream.thread)),
          pattern_(stream.frame_bytes) {
        fill_payload(pattern_);
    }

    void write(const SinkFrame& f);
    void close();
    const ReorderWindow::Counts& counts() const { return window_.counts(); }
    const std::string& label() const { return label_; }
    std::uint64_t payload_bytes() const { return payload_bytes_; }
    bool started() const { return header_.frame_bytes != 0; }
    StreamFormat format() const { return header_.format; }

  private:
    // arrived: the frame being offered; held: one from a window slot;
    // unreadable: a frame whose length is off the stream's (the pattern goes
    // in its place, counted unwritten); fill: a frame that never came.
    enum class Kind : std::uint8_t { arrived, held, unreadable, fill };
    void write_arrived(std::uint64_t index) override;
    void write_held(std::uint64_t index, Bytes frame) override;
    void write_fill(std::uint64_t index) override;
    std::size_t copy_arrived(MutableBytes slot) override;

    // One record at `index` (`src`: a held frame's payload).
    void record(std::uint64_t index, Kind kind, const std::uint8_t* src);
    // Room for one record, and its bytes (or the pattern) copied in; false
    // when the ring has no room or failed.
    bool place(Kind kind, const std::uint8_t* src);
    bool begin_transfer(std::uint64_t index);
    void retime(const StreamStats& s);

    DadaSink::Ring& ring_;
    StreamTiming timing_;
    bool rate_known_;
    std::size_t frame_bytes_;
    ReorderWindow window_;
    std::string label_;
    std::vector<std::uint8_t> pattern_;
    StreamHeader header_{};  // the stream's first frame's
    std::size_t payload_bytes_ = 0;
    bool checked_ = false;  // the ring's blocks checked against the payload
    bool in_transfer_ = false;
    bool rebased_ = false;  // the next record starts a transfer
    std::uint64_t next_index_ = 0;
    std::uint64_t owed_ = 0;    // fill records owed to the ring
    std::uint64_t unread_ = 0;  // arrived frames whose bytes could not be read
    // The frame being offered (during write()).
    const Frame* frame_ = nullptr;
    std::size_t offset_ = 0;
    std::size_t len_ = 0;
};

struct DadaSink::Ring {
    DadaTarget target;
    std::unique_ptr<DadaRingWriter> writer;
    std::unique_ptr<RingStream> stream;
    RingStats stats;
    DadaSink* sink = nullptr;
    void count_consumer() {
        ++stats.consumer;
        sink->consumer_.fetch_add(1, std::memory_order_relaxed);
    }
    void fail(std::string why) {
        if (stats.error.empty()) {
            stats.error = std::move(why);
        }
    }
    bool failed() const { return !stats.error.empty(); }
};

void DadaSink::RingStream::write(const SinkFrame& f) {
    const StreamStats& s = *f.stream;
    if (s.timing.frames_per_period != timing_.frames_per_period ||
        s.timing.period != timing_.period) [[unlikely]] {
        retime(s);
    }
    const StreamHeader& h = *f.header;
    if (header_.frame_bytes == 0) [[unlikely]] {
        header_ = h;
        payload_bytes_ = h.frame_bytes > h.header_bytes ? h.frame_bytes - h.header_bytes : 0;
    }
    frame_ = &f.frame;
    offset_ = f.packet->payload_offset + h.prefix_bytes;
    len_ = f.packet->payload_bytes - h.prefix_bytes;
    window_.offer(timing_.index(h.seconds, h.frame), *this);
    frame_ = nullptr;
}

// A VDIF rate learned: what the window holds goes out in the old
// arithmetic, and the ring's next record starts a transfer whose header
// has the rate.
void DadaSink::RingStream::retime(const StreamStats& s) {
    const StreamTiming old = timing_;
    const StreamTiming now = s.timing;
    window_.rebase(
        [&](std::uint64_t index) {
            std::uint32_t seconds = 0;
            std::uint32_t frame = 0;
            old.position(index, seconds, frame);
            return now.index(seconds, frame);
        },
        OrderedStream::max_jump_of(s), *this);
    timing_ = now;
    rate_known_ = s.rate != StreamStats::Rate::learning;
    rebased_ = true;
}

void DadaSink::RingStream::write_arrived(std::uint64_t index) {
    // The payload straight from the frame into the ring: gathered from its
    // pieces in place().
    const bool whole = frame_ != nullptr && len_ == header_.header_bytes + payload_bytes_;
    record(index, whole ? Kind::arrived : Kind::unreadable, nullptr);
}

void DadaSink::RingStream::write_held(std::uint64_t index, Bytes frame) {
    const std::size_t header = header_.header_bytes;
    if (frame.size() != header + payload_bytes_) {
        record(index, Kind::unreadable, nullptr);
        return;
    }
    record(index, Kind::held, frame.data() + header);
}

void DadaSink::RingStream::write_fill(std::uint64_t index) {
    record(index, Kind::fill, nullptr);
}

std::size_t DadaSink::RingStream::copy_arrived(MutableBytes slot) {
    if (frame_ == nullptr || len_ > slot.size()) {
        return 0;
    }
    return frame_->gather(offset_, slot.first(len_)) ? len_ : 0;
}

bool DadaSink::RingStream::begin_transfer(std::uint64_t index) {
    DadaRingWriter& w = *ring_.writer;
    if (in_transfer_) {
        // Fill records still owed to the transfer that ends are not in it.
        ring_.stats.owed_at_end += owed_;
        owed_ = 0;
        w.end_transfer();
    }
    in_transfer_ = true;
    rebased_ = false;
    next_index_ = index;
    if (!checked_) {
        checked_ = true;
        const std::uint64_t block = w.data().block_bytes();
        if (payload_bytes_ == 0 || block % payload_bytes_ != 0 || w.data().blocks() < 2) {
            ring_.fail(fmt::format(
                "PSRDADA ring {}: its {} blocks of {} bytes do not hold whole payloads of stream "
                "{} ({} bytes){}: make it with dada_db -k {} -b {} -n 8 (or more blocks)",
                dada_key_name(w.key()), w.data().blocks(), block, label_, payload_bytes_,
                w.data().blocks() < 2 ? ", or are fewer than 2" : "", dada_key_name(w.key()),
                payload_bytes_ *
                    std::max<std::uint64_t>(1, (block + payload_bytes_ - 1) /
                                                   std::max<std::size_t>(payload_bytes_, 1))));
            return false;
        }
        if (w.data().on_device()) {
            ring_.fail(
                fmt::format("PSRDADA ring {} is in GPU memory (dada_db -g): this capture's "
                            "payload is in host memory; make the ring without -g",
                            dada_key_name(w.key())));
            return false;
        }
    }
    DadaHeaderInput in;
    in.first = header_;
    in.timing = timing_;
    in.rate_known = rate_known_;
    in.first_index = index;
    in.payload_bytes = payload_bytes_;
    in.header_block_bytes = w.header_block_bytes();
    in.stream = label_;
    in.run_id = ring_.sink->options_.run_id;
    in.key = dada_key_name(w.key());
    in.transfer = w.transfers();
    in.extra = ring_.sink->options_.header;
    // Once per transfer (the stream's first record, a restart): the header
    // is made and written here, as a stream's files are opened on this
    // thread at its first frame.
    try {
        w.write_header(dada_header(in));
    } catch (const std::exception& e) {
        ring_.fail(e.what());
        return false;
    }
    return true;
}

bool DadaSink::RingStream::place(Kind kind, const std::uint8_t* src) {
    std::uint64_t block = 0;
    std::size_t at = 0;
    DadaRingWriter& w = *ring_.writer;
    DadaRingWriter::Room room = w.reserve(payload_bytes_, block, at);
    if (const auto* stop = ring_.sink->wait_stop_; stop != nullptr) {
        // An offline source waits for the reader (DadaSink::wait_while_full).
        while (room == DadaRingWriter::Room::full && !stop->load(std::memory_order_relaxed)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            room = w.reserve(payload_bytes_, block, at);
        }
    }
    switch (room) {
        case DadaRingWriter::Room::ok:
            break;
        case DadaRingWriter::Room::full:
            return false;
        case DadaRingWriter::Room::failed:
            ring_.fail(w.error());
            return false;
    }
    std::uint8_t* dst = w.data().segment(block) + at;
    if (kind == Kind::arrived) {
        if (frame_->gather(offset_ + header_.header_bytes, MutableBytes(dst, payload_bytes_))) {
            return true;
        }
        // Bytes this thread cannot read (device memory): the pattern.
        ++ring_.stats.unwritten;
        ++unread_;
    } else if (kind == Kind::held) {
        std::memcpy(dst, src, payload_bytes_);
        return true;
    }
    std::memcpy(dst, pattern_.data(), payload_bytes_);
    return true;
}

void DadaSink::RingStream::record(std::uint64_t index, Kind kind, const std::uint8_t* src) {
    RingStats& st = ring_.stats;
    const bool frame = kind != Kind::fill;
    const auto lost = [&] { st.unwritten += frame ? 1 : 0; };
    if (ring_.failed()) {
        lost();
        return;
    }
    if ((!in_transfer_ || rebased_ || index != next_index_) && !begin_transfer(index)) {
        lost();
        return;
    }
    next_index_ = index + 1;
    // What is owed goes first: every byte stays at its time.
    while (owed_ > 0 && place(Kind::fill, nullptr)) {
        --owed_;
    }
    const std::uint64_t unread = unread_;
    const bool placed = owed_ == 0 && place(kind, src);
    if (ring_.failed()) {
        lost();
        return;
    }
    if (!placed) {
        // No room: the ring's reader is behind. Owed as a fill record.
        ++owed_;
        if (frame) {
            ring_.count_consumer();
        } else {
            ++st.fills;
        }
        return;
    }
    if (kind == Kind::fill) {
        ++st.fills;
    } else if (kind == Kind::unreadable) {
        ++st.unwritten;  // the pattern in its place (a length off the stream's)
    } else if (unread_ == unread) {
        ++st.frames;
    }
}

void DadaSink::RingStream::close() {
    window_.close(*this);
    // Owed when the run ended: not in the ring (its data ends before them).
    ring_.stats.owed_at_end += owed_;
    owed_ = 0;
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
        r->stats.key = dada_key_name(r->target.key);
        r->stats.block_bytes = r->writer->data().block_bytes();
        r->stats.blocks = r->writer->data().blocks();
        r->stats.header_block_bytes = r->writer->header_block_bytes();
        r->stats.readers = r->writer->data().readers();
        rings_.push_back(std::move(r));
    }
}

DadaSink::~DadaSink() {
    finish();
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
    auto* ring = static_cast<Ring*>(route);
    ring->stream->write(frame);
}

void DadaSink::finish() {
    if (finished_) {
        return;
    }
    finished_ = true;
    for (auto& r : rings_) {
        if (r->stream) {
            r->stream->close();
            const auto& c = r->stream->counts();
            r->stats.ordered.window = options_.window;
            r->stats.ordered.duplicates = c.duplicates;
            r->stats.ordered.too_late = c.too_late;
            r->stats.ordered.unheld = c.unheld;
            r->stats.ordered.restarts = c.restarts;
            r->stats.payload_bytes = r->stream->payload_bytes();
        }
        r->writer->end();
        r->stats.bytes = r->writer->bytes_written();
        r->stats.readers_attached = r->writer->readers_attached();
        r->stats.end_of_data = r->writer->ended_with_eod() || r->writer->bytes_written() == 0;
        if (r->writer->failed()) {
            r->fail(r->writer->error());
        }
    }
}

void DadaSink::report_to(Ledger& ledger) const {
    for (const auto& r : rings_) {
        ledger.add_ring(r->stats);
    }
}

}  // namespace ibvcap
