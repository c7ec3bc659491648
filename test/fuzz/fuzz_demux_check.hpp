// The checks fuzz_demux and fuzz_pcap_file share: a Demux with a Ledger and no
// writer, an observer that checks every CODIF frame the demux accepts, and the
// ledger invariants at the end (docs/architecture.md, "Every frame counted once").
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "formats/codif.hpp"
#include "fuzz_common.hpp"
#include "lib/demux/demux.hpp"
#include "lib/ledger/ledger.hpp"

namespace ibvcap::fuzz {

// Demux limits kept small: the fuzzer reaches them, and the ledger's stream
// table (reserved up front, about 1 KiB a stream) stays cheap to build per input.
inline DemuxOptions small_demux_options(std::uint8_t config) {
    DemuxOptions o;
    o.max_groups = 1 + ((config >> 2) & 3u);
    o.max_antennas = 1 + ((config >> 4) & 3u);
    o.max_streams = 1 + ((config >> 6) & 3u) * 5;  // 1, 6, 11, 16
    if ((config & 0x80u) != 0) {
        // A plausible jump the fuzzer's frame numbers reach: implausible
        // frames and restarts (lib/ledger/sequence.hpp).
        o.plausible_periods = 0;
        o.min_plausible_jump = 32;
    }
    return o;
}

// A fuzz_demux input's configuration: [0] config (small_demux_options; bit
// 0: a GROUP:PORT list of one, LE32 address + LE16 port follow; bit 1: an
// --antenna list of one, LE32 address follows).
inline DemuxOptions read_demux_config(Reader& in) {
    const std::uint8_t config = in.u8();
    DemuxOptions options = small_demux_options(config);
    if ((config & 1u) != 0) {
        const std::uint32_t ip = in.u32();
        const std::uint16_t port = in.u16();
        options.groups.push_back(Endpoint{ip, port});
    }
    if ((config & 2u) != 0) {
        options.antennas.push_back(in.u32());
    }
    return options;
}

// The frames of a fuzz_demux input after its configuration, in its chunk
// format (fuzz_demux.cpp), each given to `feed` as a Frame whose pieces are
// copies of exactly their size (AddressSanitizer catches a read past them).
template <typename Feed>
void feed_chunks(Reader& in, std::size_t max_frames, Feed&& feed) {
    using ibvcap::Bytes;
    for (std::size_t n = 0; n < max_frames && in.remaining() > 0; ++n) {
        const std::uint16_t length = in.u16();
        const std::uint16_t split = in.u16();
        const std::uint8_t flags = in.u8();
        const std::uint8_t delta = in.u8();
        const Bytes bytes = in.take(length);
        const std::size_t head_size =
            (flags & 1u) != 0 && split < bytes.size() ? std::size_t{split} : bytes.size();
        const auto cut = bytes.begin() + static_cast<std::ptrdiff_t>(head_size);
        const std::vector<std::uint8_t> head(bytes.begin(), cut);
        const std::vector<std::uint8_t> tail(cut, bytes.end());

        Frame frame;
        frame.head = Bytes(head.data(), head.size());
        frame.tail = Bytes(tail.data(), tail.size());
        const auto captured = static_cast<std::uint32_t>(bytes.size());
        if ((flags & 2u) != 0) {
            frame.wire_bytes = captured + delta;
        } else if ((flags & 4u) != 0) {
            frame.wire_bytes = captured - (delta < captured ? delta : captured);
        } else {
            frame.wire_bytes = captured;
        }
        frame.timestamp_ns = 1'000'000'000u * n;
        feed(frame);
    }
}

class DemuxCheck {
  public:
    explicit DemuxCheck(DemuxOptions options)
        : max_streams_(options.max_streams),
          ledger_(options.max_streams),
          demux_(std::move(options), ledger_) {
        demux_.add_observer(
            [this](const Frame& frame, const UdpPacket& packet, const StreamHeader& header,
                   const StreamStats& stats) { observe(frame, packet, header, stats); });
    }

    DemuxCheck(const DemuxCheck&) = delete;
    DemuxCheck& operator=(const DemuxCheck&) = delete;

    Demux& demux() { return demux_; }
    const Ledger& ledger() const { return ledger_; }

    void feed(const Frame& frame) {
        demux_.on_frame(frame);
        ++frames_;
        // A length on the wire under the bytes captured or past any link's
        // is a damaged record header, counted at the captured length
        // (Demux::on_frame).
        const std::uint64_t captured = frame.captured_bytes();
        const bool damaged = frame.wire_bytes < captured || frame.wire_bytes > kMaxWireBytes;
        wire_bytes_ += damaged ? captured : frame.wire_bytes;
        damaged_ += damaged ? 1 : 0;
    }
    // For frames that reached the demux other than through feed() (PcapFileSource).
    void delivered(std::uint64_t frames, std::uint64_t wire_bytes) {
        frames_ += frames;
        wire_bytes_ += wire_bytes;
    }

    // The ledger after the last frame.
    void check_ledger(bool check_bytes = true) const {
        const Totals t = ledger_.totals();
        FUZZ_CHECK(t.packets == frames_);
        FUZZ_CHECK(!check_bytes || t.bytes == wire_bytes_);
        FUZZ_CHECK(!check_bytes || t.bad_wire_length == damaged_);
        FUZZ_CHECK(t.packets == t.codif + t.malformed + t.non_codif);
        FUZZ_CHECK(t.codif == observed_);
        FUZZ_CHECK(t.payload_absent == observed_absent_);
        FUZZ_CHECK(ledger_.reconciles());
        FUZZ_CHECK(ledger_.streams().size() <= max_streams_);
        for (const StreamStats& s : ledger_.streams()) {
            FUZZ_CHECK(s.sequence.started() && s.packets() > 0);
            FUZZ_CHECK(s.timing.period != 0 && s.timing.frames_per_period != 0);
            // first/last are the (seconds, frame) of the lowest and newest index.
            FUZZ_CHECK(s.timing.index(s.first.seconds, s.first.frame) == s.sequence.lowest());
            FUZZ_CHECK(s.timing.index(s.last.seconds, s.last.frame) == s.sequence.newest());
            FUZZ_CHECK(s.invalid <= s.packets());
            // Bounded: no placed frame moves the stream by more than the
            // plausible jump, so one header cannot make `missing` absurd.
            const SequenceTracker& q = s.sequence;
            FUZZ_CHECK(q.implausible() < s.packets());
            FUZZ_CHECK(q.plausible_jump() != 0);
            FUZZ_CHECK(q.missing() / q.plausible_jump() <= s.packets() - q.implausible());
            FUZZ_CHECK((q.restarts() == 0) == (q.last_restart_jump() == 0));
        }
        (void)loss_reasons_are_consistent();
    }

  private:
    // Every frame the demux puts in a stream: the packet lies within the
    // frame, the header is the one in the frame and valid, and the stream is
    // the one the frame belongs to.
    void observe(const Frame& frame, const UdpPacket& packet, const StreamHeader& header,
                 const StreamStats& stats) {
        ++observed_;
        FUZZ_CHECK(packet.payload_offset >= kPlainUdpPayloadOffset);
        // The header was captured; the payload too, unless the capture
        // cut the frame after the header (then it lay within the wire length).
        FUZZ_CHECK(std::uint64_t{packet.payload_offset} + header.head_bytes() <=
                   frame.captured_bytes());
        const bool whole =
            std::uint64_t{packet.payload_offset} + packet.payload_bytes <= frame.captured_bytes();
        if (!whole) {
            ++observed_absent_;
            FUZZ_CHECK(frame.captured_bytes() < frame.wire_bytes && frame.tail.empty());
            FUZZ_CHECK(std::uint64_t{packet.payload_offset} + packet.payload_bytes <=
                       frame.wire_bytes);
        }
        FUZZ_CHECK(packet.payload_bytes >= header.head_bytes());
        FUZZ_CHECK(header.frame_bytes + header.prefix_bytes == packet.payload_bytes);
        std::uint8_t raw[kStreamHeaderMaxBytes];
        const std::size_t head = std::min<std::size_t>(
            {packet.payload_bytes, kStreamHeaderMaxBytes,
             static_cast<std::size_t>(frame.captured_bytes() - packet.payload_offset)});
        // An observed frame's header was read: it lies in host memory.
        FUZZ_CHECK(frame.gather(packet.payload_offset, MutableBytes(raw, head)));
        StreamHeader decoded;
        FUZZ_CHECK(decode_stream_header(stats.format, Bytes(raw, head), decoded) ==
                   StreamError::none);
        // The decoder leaves frames per period to the checks (a frame on the
        // demux's fast path never has them run): compared apart, below.
        StreamHeader decoded_fields = decoded;
        StreamHeader header_fields = header;
        decoded_fields.frames_per_period = header_fields.frames_per_period = 0;
        FUZZ_CHECK(decoded_fields == header_fields);
        FUZZ_CHECK(check_stream_header(Bytes(raw, head), packet.payload_bytes, decoded) ==
                   StreamError::none);
        // The payload pieces as a writer would get them cover exactly the payload.
        if (whole) {
            Bytes first;
            Bytes second;
            frame.slice(packet.payload_offset, packet.payload_bytes, first, second);
            FUZZ_CHECK(first.size() + second.size() == packet.payload_bytes);
        }
        FUZZ_CHECK(stats.group == (Endpoint{packet.dst_ip, packet.dst_port}));
        FUZZ_CHECK(stats.antenna == packet.src_ip);
        FUZZ_CHECK(stats.thread == header.thread && stats.key == header.key);
        FUZZ_CHECK(stats.timing.period == header.period);
        // The header's rate (CODIF), or the one given or learned (VDIF).
        FUZZ_CHECK(decoded.frames_per_period == 0 ||
                   stats.timing.frames_per_period == decoded.frames_per_period);
        FUZZ_CHECK(header.frame < stats.timing.frames_per_period);
        FUZZ_CHECK(stats.frame_bytes == header.frame_bytes);
        FUZZ_CHECK(stats.packets() > 0);
    }

    bool loss_reasons_are_consistent() const {
        const bool zero = ledger_.zero_loss();
        FUZZ_CHECK(zero == ledger_.loss_reasons().empty());
        return zero;
    }

    std::size_t max_streams_;
    Ledger ledger_;
    Demux demux_;
    std::uint64_t frames_ = 0;
    std::uint64_t wire_bytes_ = 0;
    std::uint64_t damaged_ = 0;  // frames fed with a damaged length on the wire
    std::uint64_t observed_ = 0;
    std::uint64_t observed_absent_ = 0;
};

}  // namespace ibvcap::fuzz
