// CODIF frame header codec: both layouts (docs/formats.md, "The CODIF header").
//
// Current layout ("v2"): eight little-endian 64-bit words, sync 0xFEEDCAFE in
// word 5 bits 0-31. Draft layout: sixteen little-endian 32-bit words, sync
// 0xADEADBEE in word 11; its channel count is stored minus one. Both layouts'
// frame length is the payload alone in 8-byte units, as DiFX codifio and its
// callers read it (formats/codif.cpp). `CodifHeader` always holds the *meaning*
// (payload bytes / 8, real channel count), whatever the layout on the wire.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "formats/bytes.hpp"
#include "formats/stream_header.hpp"

namespace ibvcap {

inline constexpr std::size_t kCodifHeaderBytes = 64;
inline constexpr std::uint32_t kCodifSyncV2 = 0xFEEDCAFEu;
inline constexpr std::uint32_t kCodifSyncDraft = 0xADEADBEEu;
// The most frames per period ibvcap accepts (codif_frames_per_period).
inline constexpr std::uint64_t kCodifMaxFramesPerPeriod = std::uint64_t{1} << 31;

enum class CodifLayout : std::uint8_t { v2, draft };
std::string_view to_string(CodifLayout layout);

struct CodifHeader {
    CodifLayout layout = CodifLayout::v2;
    std::uint32_t frame = 0;    // frame number within the period
    std::uint32_t seconds = 0;  // seconds since the epoch's reference date
    std::uint8_t epoch = 0;     // half-years since 2000-01-01
    std::uint8_t nbits = 0;     // bits per real sample component
    bool power = false;
    bool invalid = false;
    bool complex = false;
    bool cal = false;
    std::uint8_t representation = 0;
    std::uint8_t version = 0;
    std::uint8_t protocol = 0;
    std::uint16_t period = 0;  // seconds
    std::uint16_t threadid = 0;
    std::uint16_t groupid = 0;
    std::uint16_t secondaryid = 0;
    std::uint16_t stationid = 0;
    std::uint16_t nchan = 0;  // real number of channels (never stored minus one here)
    std::uint16_t blocklength = 0;
    std::uint32_t framelength8 = 0;  // payload bytes / 8 (header excluded, whatever the layout)
    std::uint64_t totalsamples = 0;  // samples per channel per period
    std::uint16_t metaid = 0;
    std::uint16_t meta1 = 0;
    std::array<std::uint64_t, 2> metadata{};  // v2 words 6 and 7

    std::uint64_t payload_bytes() const { return std::uint64_t{framelength8} * 8; }
    std::uint64_t frame_bytes() const { return payload_bytes() + kCodifHeaderBytes; }
    friend bool operator==(const CodifHeader&, const CodifHeader&) = default;
};

enum class CodifError : std::uint8_t {
    none,
    short_buffer,  // fewer than 64 bytes
    bad_sync,      // neither sync word: not a CODIF frame
    zero_nchan,
    zero_nbits,
    zero_period,
    zero_framelength,
    length_mismatch,       // header's frame length disagrees with the datagram
    samples_not_integral,  // payload does not hold a whole number of samples
    frame_beyond_period,   // frame number >= frames per period
};
std::string_view to_string(CodifError error);

// The decoders, inline because every frame is decoded (the word layouts are
// described in formats/codif.cpp).
namespace codif_detail {
// Offsets of the sync words: v2 word 5 low half; draft 32-bit word 11.
inline constexpr std::size_t kV2SyncOffset = 5 * 8;
inline constexpr std::size_t kDraftSyncOffset = 11 * 4;
// The draft frame length is 24 bits of payload bytes / 8 (header excluded).
inline constexpr std::uint32_t kDraftFramelengthMask = 0x00FFFFFFu;  // 24 bits

constexpr std::uint64_t bits64(std::uint64_t word, unsigned shift, std::uint64_t mask) {
    return (word >> shift) & mask;
}
constexpr std::uint32_t bits32(std::uint32_t word, unsigned shift, std::uint32_t mask) {
    return (word >> shift) & mask;
}

// Each assigns every field of CodifHeader (the draft's missing ones as 0):
// the v2 decoder, on every frame, writes each once.
[[gnu::always_inline]] inline void decode_v2(const std::uint8_t* p, CodifHeader& h) {
    const std::uint64_t w0 = load_le64(p);
    const std::uint64_t w1 = load_le64(p + 8);
    const std::uint64_t w2 = load_le64(p + 16);
    const std::uint64_t w3 = load_le64(p + 24);
    const std::uint64_t w5 = load_le64(p + 40);

    h.layout = CodifLayout::v2;
    h.frame = static_cast<std::uint32_t>(bits64(w0, 0, 0xFFFFFFFFu));
    h.seconds = static_cast<std::uint32_t>(bits64(w0, 32, 0xFFFFFFFFu));

    h.epoch = static_cast<std::uint8_t>(bits64(w1, 0, 0xFF));
    h.nbits = static_cast<std::uint8_t>(bits64(w1, 8, 0xFF));
    h.power = bits64(w1, 16, 1) != 0;
    h.invalid = bits64(w1, 17, 1) != 0;
    h.complex = bits64(w1, 18, 1) != 0;
    h.cal = bits64(w1, 19, 1) != 0;
    h.representation = static_cast<std::uint8_t>(bits64(w1, 20, 0xF));
    h.version = static_cast<std::uint8_t>(bits64(w1, 24, 0x1F));
    h.protocol = static_cast<std::uint8_t>(bits64(w1, 29, 0x7));
    h.period = static_cast<std::uint16_t>(bits64(w1, 48, 0xFFFF));

    h.threadid = static_cast<std::uint16_t>(bits64(w2, 0, 0xFFFF));
    h.groupid = static_cast<std::uint16_t>(bits64(w2, 16, 0xFFFF));
    h.secondaryid = static_cast<std::uint16_t>(bits64(w2, 32, 0xFFFF));
    h.stationid = static_cast<std::uint16_t>(bits64(w2, 48, 0xFFFF));

    h.nchan = static_cast<std::uint16_t>(bits64(w3, 0, 0xFFFF));
    h.blocklength = static_cast<std::uint16_t>(bits64(w3, 16, 0xFFFF));
    h.framelength8 = static_cast<std::uint32_t>(bits64(w3, 32, 0xFFFFFFFFu));

    h.totalsamples = load_le64(p + 32);

    h.metaid = static_cast<std::uint16_t>(bits64(w5, 32, 0xFFFF));
    h.meta1 = static_cast<std::uint16_t>(bits64(w5, 48, 0xFFFF));
    h.metadata[0] = load_le64(p + 48);
    h.metadata[1] = load_le64(p + 56);
}

// Out of line (formats/codif.cpp): the draft layout is the rare one, and
// keeping it out lets the v2 path inline where every frame is decoded.
void decode_draft(const std::uint8_t* p, CodifHeader& h);
}  // namespace codif_detail

// Which layout the sync word says, or nullopt when it is not CODIF. The two
// sync words sit at different offsets (v2: bytes 40-43, draft: bytes 44-47).
// A v2 header whose metaid/meta1 happen to spell the draft sync still has the
// v2 sync at 40, so v2 is tested first.
inline std::optional<CodifLayout> detect_codif_layout(Bytes header) {
    if (header.size() < kCodifHeaderBytes) {
        return std::nullopt;
    }
    if (load_le32(header.data() + codif_detail::kV2SyncOffset) == kCodifSyncV2) {
        return CodifLayout::v2;
    }
    if (load_le32(header.data() + codif_detail::kDraftSyncOffset) == kCodifSyncDraft) {
        return CodifLayout::draft;
    }
    return std::nullopt;
}

// Decode the 64-byte header. Checks only that it can be read: at least 64 bytes
// (short_buffer) and a CODIF sync word (bad_sync). Zero nchan/nbits/period/
// framelength decode successfully so that tools can still print such a header;
// validate_codif() rejects them. On error `out` is unspecified.
[[gnu::always_inline]] inline CodifError decode_codif(Bytes header, CodifHeader& out) {
    if (header.size() < kCodifHeaderBytes) {
        return CodifError::short_buffer;
    }
    const std::optional<CodifLayout> layout = detect_codif_layout(header);
    if (!layout) {
        return CodifError::bad_sync;
    }
    if (*layout == CodifLayout::v2) {
        codif_detail::decode_v2(header.data(), out);
    } else {
        codif_detail::decode_draft(header.data(), out);
    }
    return CodifError::none;
}

// Encode `h` in its layout into the first 64 bytes of `out` (out.size() >= 64).
void encode_codif(const CodifHeader& h, MutableBytes out);

// Full validation of a decoded header against the datagram that carried it:
// `datagram_bytes` is the UDP payload length (header + payload).
CodifError validate_codif(const CodifHeader& h, std::uint64_t datagram_bytes);

// Sequence arithmetic (docs/formats.md, "Sequence arithmetic"). Both return 0 when the header
// cannot define them (zero channels/bits, or a payload that is not a whole number of samples);
// frames per period is also 0 above kCodifMaxFramesPerPeriod.
std::uint64_t codif_samples_per_frame(const CodifHeader& h);
std::uint64_t codif_frames_per_period(const CodifHeader& h);

// A stream's timing (formats/stream_header.hpp): CODIF's is (period, frames per period).
using CodifTiming = StreamTiming;

}  // namespace ibvcap
