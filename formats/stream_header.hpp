// A format-neutral view of one stream frame (issue 28): what the demux, the
// ledger, the sequence tracker and the sinks need of a telescope frame,
// filled by each format's decoder (CODIF: formats/codif.hpp; VDIF and the
// VDIF Transport Protocol: formats/vdif.hpp; the one dispatch is
// decode_stream_header in formats/stream_header.cpp). Nothing past the
// decoders branches on the format: a third format is one more decoder.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "formats/bytes.hpp"

namespace ibvcap {

// How a group's datagrams are read: declared per group by the operator
// (GROUP:PORT/codif, /vdif, /vtp; docs/formats.md, "Stream formats"), since
// VDIF has no sync word to recognise it by.
//   codif  a CODIF frame per datagram (64-byte header, sync word)
//   vdif   a VDIF frame per datagram (32- or 16-byte header)
//   vtp    the VDIF Transport Protocol: a 64-bit little-endian packet
//          sequence number, then a VDIF frame (jive5ab's udps)
enum class StreamFormat : std::uint8_t { codif, vdif, vtp };
std::string_view to_string(StreamFormat format);
std::optional<StreamFormat> parse_stream_format(std::string_view name);

// The most bytes of a datagram a decoder reads: the CODIF header (64), or
// the VTP sequence number and a VDIF header (8 + 32).
inline constexpr std::size_t kStreamHeaderMaxBytes = 64;

// A frame's position in one stream: (seconds, frame) with the stream's period
// and frames per period. `index` is the absolute frame count from seconds 0.
struct StreamTiming {
    std::uint32_t period = 1;
    std::uint64_t frames_per_period = 1;

    std::uint64_t index(std::uint32_t seconds, std::uint32_t frame) const {
        // Period 1 (the common case) skips the division: it is per frame.
        const std::uint32_t periods = period <= 1 ? seconds : seconds / period;
        return std::uint64_t{periods} * frames_per_period + frame;
    }
    // The (period-aligned seconds, frame) of an index: index(position(i)) == i.
    // Period 0 counts as 1, frames per period 0 as 1 (no division by zero).
    void position(std::uint64_t index, std::uint32_t& seconds, std::uint32_t& frame) const;
    // The (seconds, frame) that follows (s, f): (s, f+1), or (s + period, 0) on the wrap.
    void next(std::uint32_t& seconds, std::uint32_t& frame) const;
    // gap = index(s, f) - index(s0, f0) - 1: >0 frames missing between them,
    // -1 a duplicate of (s0, f0), < -1 a frame that arrives after a later one.
    std::int64_t gap(std::uint32_t s0, std::uint32_t f0, std::uint32_t s, std::uint32_t f) const;
};

struct StreamHeader {
    StreamFormat format = StreamFormat::codif;
    // The format's header layout: CODIF 0 v2, 1 draft (CodifLayout); VDIF 0
    // standard (32 bytes), 1 legacy (16 bytes). A stream keeps its first
    // frame's.
    std::uint8_t layout = 0;
    std::uint8_t epoch = 0;     // reference epoch: half-years since 2000-01-01
    bool invalid = false;       // the sender marked the frame's data invalid
    bool has_psn = false;       // a transport sequence number came with it (vtp)
    std::uint32_t seconds = 0;  // since the reference epoch
    std::uint32_t frame = 0;    // frame number within the period
    // What keys the stream within (group, source): station << 16 | thread,
    // CODIF and VDIF alike (streams are per station and thread).
    std::uint32_t key = 0;
    std::uint16_t thread = 0;
    std::uint16_t station = 0;
    std::uint16_t period = 1;        // seconds (VDIF: 1)
    std::uint16_t prefix_bytes = 0;  // datagram bytes before the frame (vtp: 8)
    std::uint16_t header_bytes = 0;  // the frame's own header (64; 32 or 16)
    std::uint32_t frame_bytes = 0;   // frame header + payload: a record of the format's file
    // Frames per period from the header; 0 when the header does not say
    // (VDIF: given with --vdif-frames-per-second, or learned).
    std::uint64_t frames_per_period = 0;
    // The format's other parameter fields (channels, bits, complex, version,
    // CODIF's total samples, ...) packed in two words: every frame of one
    // stream has the same.
    std::uint64_t params = 0;
    std::uint64_t params2 = 0;
    std::uint64_t psn = 0;  // with has_psn

    std::uint64_t payload_bytes() const { return frame_bytes - header_bytes; }
    // Datagram bytes up to the end of the frame's header.
    std::uint32_t head_bytes() const { return std::uint32_t{prefix_bytes} + header_bytes; }
    friend bool operator==(const StreamHeader&, const StreamHeader&) = default;
};

// The fewest datagram bytes that can hold a header of the format: CODIF 64,
// VDIF 16 (legacy), VTP 8 + 16.
constexpr std::size_t min_header_bytes(StreamFormat format) {
    return format == StreamFormat::codif ? 64 : format == StreamFormat::vdif ? 16 : 24;
}

// Seconds since 1970-01-01 UTC of a reference epoch: half-years since
// 2000-01-01, January or July (VDIF specification 1.1.1 §3, word 1; CODIF
// alike). Every epoch is a whole UTC day, so no leap second falls inside.
std::int64_t reference_epoch_unix_s(std::uint8_t epoch);

// "v2"/"draft" for CODIF, "standard"/"legacy" for VDIF.
std::string_view layout_name(StreamFormat format, std::uint8_t layout);

// Why a datagram is not a frame of its group's format. The demux maps each
// to a ledger reason (lib/ledger/ledger.cpp reason_for).
enum class StreamError : std::uint8_t {
    none,
    not_a_frame,           // too short for a header, or (CODIF) no sync word
    zero_field,            // a field that must not be 0 is 0
    bad_length,            // the header's frame length disagrees with the datagram
    bad_samples,           // the payload is not a whole number of samples
    frame_beyond_period,   // frame number >= frames per period
    no_frames_per_period,  // the header's samples do not give whole frames per period
};
std::string_view to_string(StreamError error);

// The decoders and the checks, per format, are in formats/stream_decode.hpp
// (inline: every frame is decoded).

}  // namespace ibvcap
