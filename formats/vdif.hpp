// VDIF frame header codec (VLBI Data Interchange Format, vlbi.org, VDIF
// specification release 1.1.1, June 2014; docs/formats.md, "The VDIF
// header"), and the VDIF Transport Protocol's packet sequence number.
//
// Four little-endian 32-bit words, then (standard, not legacy) four words of
// extended data:
//   w0  seconds from the reference epoch 0-29, legacy 30, invalid 31
//   w1  frame number within the second 0-23, reference epoch 24-29
//       (half-years since 2000-01-01), unassigned 30-31
//   w2  frame length in 8-byte units, header INCLUDED, 0-23; log2(channels)
//       24-28; VDIF version 29-31
//   w3  station id 0-15, thread id 16-25, bits per sample - 1 26-30,
//       complex 31
//   w4  extended data version (EDV) 24-31, extended data 0-23
//   w5-w7 extended data
// A legacy header (w0 bit 30 set) is the first four words only.
//
// VTP (VDIF Transport Protocol, vlbi.org draft; what jive5ab's `udps`
// protocol sends): a 64-bit little-endian packet sequence number, then
// one VDIF frame.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "formats/bytes.hpp"

namespace ibvcap {

inline constexpr std::size_t kVdifHeaderBytes = 32;
inline constexpr std::size_t kVdifLegacyHeaderBytes = 16;
inline constexpr std::size_t kVtpPsnBytes = 8;
// Frame numbers are 24 bits: no stream has more frames per second.
inline constexpr std::uint64_t kVdifMaxFramesPerSecond = std::uint64_t{1} << 24;

struct VdifHeader {
    bool invalid = false;
    bool legacy = false;
    std::uint32_t seconds = 0;       // 30 bits
    std::uint32_t frame = 0;         // 24 bits
    std::uint8_t epoch = 0;          // 6 bits
    std::uint32_t framelength8 = 0;  // frame bytes / 8, header included (24 bits)
    std::uint8_t log2_nchan = 0;     // 5 bits
    std::uint8_t version = 0;        // 3 bits
    std::uint16_t station = 0;
    std::uint16_t thread = 0;  // 10 bits
    std::uint8_t nbits = 1;    // bits per sample (1..32; stored minus one)
    bool complex = false;
    std::uint8_t edv = 0;  // w4 bits 24-31 (standard headers only)
    // w4 bits 0-23 in extended[0] (its EDV byte is `edv`), w5-w7 in
    // extended[1..3]: the extended user data, as on the wire.
    std::array<std::uint32_t, 4> extended{};

    std::uint64_t frame_bytes() const { return std::uint64_t{framelength8} * 8; }
    std::size_t header_bytes() const { return legacy ? kVdifLegacyHeaderBytes : kVdifHeaderBytes; }
    std::uint32_t nchan() const { return std::uint32_t{1} << log2_nchan; }
    friend bool operator==(const VdifHeader&, const VdifHeader&) = default;
};

enum class VdifError : std::uint8_t {
    none,
    short_buffer,      // fewer bytes than the header (16, or 32 unless legacy)
    zero_framelength,  // frame length 0
    length_mismatch,   // frame length disagrees with the datagram, or leaves no payload
};
std::string_view to_string(VdifError error);

// Decode the header at `header` (legacy: 16 bytes read; standard: 32).
// Checks only that it can be read. Inline: every frame is decoded.
[[gnu::always_inline]] inline VdifError decode_vdif(Bytes header, VdifHeader& h) {
    if (header.size() < kVdifLegacyHeaderBytes) {
        return VdifError::short_buffer;
    }
    const std::uint8_t* p = header.data();
    const std::uint32_t w0 = load_le32(p);
    const std::uint32_t w1 = load_le32(p + 4);
    const std::uint32_t w2 = load_le32(p + 8);
    const std::uint32_t w3 = load_le32(p + 12);
    h.seconds = w0 & 0x3FFFFFFFu;
    h.legacy = ((w0 >> 30) & 1u) != 0;
    h.invalid = ((w0 >> 31) & 1u) != 0;
    h.frame = w1 & 0x00FFFFFFu;
    h.epoch = static_cast<std::uint8_t>((w1 >> 24) & 0x3Fu);
    h.framelength8 = w2 & 0x00FFFFFFu;
    h.log2_nchan = static_cast<std::uint8_t>((w2 >> 24) & 0x1Fu);
    h.version = static_cast<std::uint8_t>((w2 >> 29) & 0x7u);
    h.station = static_cast<std::uint16_t>(w3 & 0xFFFFu);
    h.thread = static_cast<std::uint16_t>((w3 >> 16) & 0x3FFu);
    h.nbits = static_cast<std::uint8_t>(((w3 >> 26) & 0x1Fu) + 1);
    h.complex = ((w3 >> 31) & 1u) != 0;
    if (h.legacy) {
        h.edv = 0;
        h.extended = {};
        return VdifError::none;
    }
    if (header.size() < kVdifHeaderBytes) {
        return VdifError::short_buffer;
    }
    const std::uint32_t w4 = load_le32(p + 16);
    h.edv = static_cast<std::uint8_t>(w4 >> 24);
    h.extended = {w4 & 0x00FFFFFFu, load_le32(p + 20), load_le32(p + 24), load_le32(p + 28)};
    return VdifError::none;
}

// Encode `h` into the first header_bytes() bytes of `out` (out.size() >=
// h.header_bytes()). Fields are masked to their widths.
void encode_vdif(const VdifHeader& h, MutableBytes out);

// Full validation against the bytes the frame occupies (the datagram less a
// VTP sequence number): the frame length must equal them and be longer than
// the header. The packing of samples is not checked: it decides nothing the
// ledger counts (docs/formats.md, "The VDIF header").
VdifError validate_vdif(const VdifHeader& h, std::uint64_t frame_bytes);

}  // namespace ibvcap
