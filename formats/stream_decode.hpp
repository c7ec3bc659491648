// The one place that knows the stream formats (formats/stream_header.hpp):
// each decoder fills the format-neutral StreamHeader from its datagram.
// Inline because every frame is decoded; the checks that a known stream's
// frames skip (the divisions) are out of line, in stream_header.cpp.
#pragma once

#include "formats/codif.hpp"
#include "formats/stream_header.hpp"
#include "formats/vdif.hpp"

namespace ibvcap {

namespace stream_detail {
[[gnu::always_inline]] inline void from_codif(const CodifHeader& c, StreamHeader& h) {
    h.format = StreamFormat::codif;
    h.layout = static_cast<std::uint8_t>(c.layout);
    h.epoch = c.epoch;
    h.invalid = c.invalid;
    h.has_psn = false;
    h.seconds = c.seconds;
    h.frame = c.frame;
    // Two stations sent from one address and port are two streams, as
    // VDIF's are (issue 40): the station id is part of the key.
    h.key = std::uint32_t{c.stationid} << 16 | c.threadid;
    h.thread = c.threadid;
    h.station = c.stationid;
    h.period = c.period;
    h.prefix_bytes = 0;
    h.header_bytes = static_cast<std::uint16_t>(kCodifHeaderBytes);
    // framelength8 is 32 bits: a frame of 32 GiB. No datagram is that
    // long (the checks compare it with the datagram), but the neutral field
    // is 32 bits, so anything past it is clamped to a value no datagram has.
    h.frame_bytes = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(c.frame_bytes(), std::uint64_t{0xFFFFFFFFu}));
    h.frames_per_period = 0;  // the slow path's check computes it
    h.params = std::uint64_t{c.nchan} | std::uint64_t{c.nbits} << 16 |
               std::uint64_t{c.complex} << 24 | std::uint64_t{c.framelength8} << 32;
    h.params2 = c.totalsamples;
    h.psn = 0;
}

[[gnu::always_inline]] inline void from_vdif(const VdifHeader& v, std::uint16_t prefix,
                                             StreamHeader& h) {
    h.layout = v.legacy ? 1 : 0;
    h.epoch = v.epoch;
    h.invalid = v.invalid;
    h.seconds = v.seconds;
    h.frame = v.frame;
    h.key = std::uint32_t{v.station} << 16 | v.thread;
    h.thread = v.thread;
    h.station = v.station;
    h.period = 1;
    h.prefix_bytes = prefix;
    h.header_bytes = static_cast<std::uint16_t>(v.header_bytes());
    h.frame_bytes = static_cast<std::uint32_t>(v.frame_bytes());  // 24 bits * 8: fits
    h.frames_per_period = 0;  // not in the header: given or learned (the demux)
    h.params = std::uint64_t{v.log2_nchan} | std::uint64_t{v.nbits} << 8 |
               std::uint64_t{v.complex} << 16 | std::uint64_t{v.version} << 17 |
               std::uint64_t{v.edv} << 24 | std::uint64_t{v.framelength8} << 32;
    h.params2 = 0;
}
}  // namespace stream_detail

// Decode the header of a datagram of `format`: `head` holds at least the
// datagram's first min(its length, kStreamHeaderMaxBytes) bytes. Checks only
// that a header can be read (not_a_frame otherwise: too short, or a CODIF
// datagram without a sync word); check_stream_header does the rest.
[[gnu::always_inline]] inline StreamError decode_stream_header(StreamFormat format, Bytes head,
                                                               StreamHeader& out) {
    if (format == StreamFormat::codif) {
        CodifHeader c;
        if (decode_codif(head, c) != CodifError::none) {
            return StreamError::not_a_frame;
        }
        stream_detail::from_codif(c, out);
        return StreamError::none;
    }
    std::uint16_t prefix = 0;
    out.format = format;
    out.has_psn = false;
    out.psn = 0;
    if (format == StreamFormat::vtp) {
        if (head.size() < kVtpPsnBytes) {
            return StreamError::not_a_frame;
        }
        out.has_psn = true;
        out.psn = load_le64(head.data());
        prefix = static_cast<std::uint16_t>(kVtpPsnBytes);
        head = head.subspan(kVtpPsnBytes);
    }
    VdifHeader v;
    if (decode_vdif(head, v) != VdifError::none) {
        return StreamError::not_a_frame;
    }
    stream_detail::from_vdif(v, prefix, out);
    return StreamError::none;
}

// The checks a stream's first frame passes (and any frame whose parameters
// differ from its stream's), with `datagram_bytes` the UDP payload length;
// fills out.frames_per_period when the header gives it (CODIF).
StreamError check_stream_header(Bytes head, std::uint64_t datagram_bytes, StreamHeader& out);

}  // namespace ibvcap
