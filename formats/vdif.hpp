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
// A legacy header (w0 bit 30 set) is the first four words only. The meaning
// of w4-w7 for each extended data version (EDV 1-4), and where every bit
// comes from, is listed at the top of formats/vdif.cpp; the named views of
// them are VdifEdv1..VdifEdv4 below.
//
// VTP (VDIF Transport Protocol, vlbi.org draft; what jive5ab's `udps`
// protocol sends): a 64-bit little-endian packet sequence number, then
// one VDIF frame.
#pragma once

#include <array>
#include <cstdint>
#include <string>
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

// ------------------------------------------------------------ extended data
// Named views of the extended user data for the EDVs that DiFX's vdifio
// (vdif_edv1_header .. vdif_edv4_header) and the baseband package
// (VDIFHeader1/2/3, and EDV 4 in its "new EDV" tutorial) both define; the bits
// of each, with their sources, are listed at the top of formats/vdif.cpp.
//
// decode_vdif_edvN reads h.extended whatever h.edv says (the caller picks the
// view by h.edv); encode_vdif_edv sets h.edv to the view's EDV and all four
// extended words from the view, masking each field to its width. Every view
// holds every bit of w4 0-23 and w5-w7, unassigned bits included, so that
// decode then encode gives back the same words.

// w5 of EDV 1, 3 and 4 (vdifio "syncword", baseband "sync_pattern").
inline constexpr std::uint32_t kVdifEdvSyncWord = 0xACABFEEDu;
// EDV 2's 20-bit sub-version in w4 4-23. The two sources disagree on ALMA's:
// vdifio's VDIF_EDV2_SUBVER_ALMA (and DiFX's m6support ALMA_EXT_HDR, the
// same bits with w4 0-3 zero) is 0xA5AE5; baseband's default sync_pattern
// for EDV 2 is 0xA5EA5 (its VDIFHeader2 is marked untested). R2DBE's is 0.
inline constexpr std::uint32_t kVdifEdv2SyncAlma = 0xA5AE5u;
inline constexpr std::uint32_t kVdifEdv2SyncBaseband = 0xA5EA5u;
inline constexpr std::uint32_t kVdifEdv2SyncR2dbe = 0;

// EDV 1 (NICT): sample rate, sync word, DAS/station name.
struct VdifEdv1 {
    std::uint32_t sample_rate = 0;          // w4 0-22, in kHz, or MHz with sample_rate_mhz
    bool sample_rate_mhz = false;           // w4 23
    std::uint32_t sync = kVdifEdvSyncWord;  // w5
    // w6 | w7 << 32: the DAS/station name, eight ASCII bytes in frame order
    // (vdifio char name[8]; baseband das_id, the same bytes as one integer).
    std::uint64_t das_id = 0;

    // The header's rate (not baseband's sample_rate property, which doubles it
    // for real data): sample_rate * 1000 or * 1000000.
    std::uint64_t sample_rate_hz() const;
    // The eight name bytes in frame order.
    std::array<char, 8> name() const;
    friend bool operator==(const VdifEdv1&, const VdifEdv1&) = default;
};

// EDV 2 (ALMA, and the R2DBE's use of the same EDV with sub-version 0).
struct VdifEdv2 {
    bool pol = false;  // w4 0: ALMA polarisation block (0 X, 1 Y); R2DBE polarisation
    // w4 1-2: ALMA baseline-correlator quadrant minus one; the R2DBE uses bit 1
    // as the BDC sideband and bit 2 as the receiver sideband.
    std::uint8_t quadrant_minus1 = 0;
    bool correlator = false;                 // w4 3: ALMA 0 two-antenna, 1 BL correlator
    std::uint32_t sync = kVdifEdv2SyncAlma;  // w4 4-23, 20 bits (vdifio "subsubversion")
    std::uint32_t status = 0;                // w5: ALMA PIC status; R2DBE signed PPS difference
    std::uint64_t psn = 0;                   // w6 | w7 << 32: packet serial number

    bool r2dbe_bdc_sideband() const { return (quadrant_minus1 & 1u) != 0; }
    bool r2dbe_rx_sideband() const { return (quadrant_minus1 & 2u) != 0; }
    // 1PPS internal/external difference in 256 MHz clock ticks.
    std::int32_t r2dbe_pps_diff() const { return static_cast<std::int32_t>(status); }
    friend bool operator==(const VdifEdv2&, const VdifEdv2&) = default;
};

// EDV 3 (VLBA RDBE).
struct VdifEdv3 {
    std::uint32_t sample_rate = 0;          // w4 0-22, in kHz, or MHz with sample_rate_mhz
    bool sample_rate_mhz = false;           // w4 23
    std::uint32_t sync = kVdifEdvSyncWord;  // w5
    std::uint32_t loif_tuning = 0;          // w6: LO/IF tuning, units of 2^-24 MHz
    std::uint8_t personality = 0;           // w7 0-7: personality type
    std::uint8_t minor_rev = 0;             // w7 8-11
    std::uint8_t major_rev = 0;             // w7 12-15
    bool sideband_upper = false;            // w7 16: 1 upper, 0 lower
    std::uint8_t subband = 0;               // w7 17-19
    std::uint8_t if_number = 0;             // w7 20-23
    std::uint8_t dbe_unit = 0;              // w7 24-27
    std::uint8_t unassigned = 0;            // w7 28-31

    std::uint64_t sample_rate_hz() const;
    friend bool operator==(const VdifEdv3&, const VdifEdv3&) = default;
};

// EDV 4 (multiplexed data validity).
struct VdifEdv4 {
    std::uint16_t unassigned = 0;           // w4 0-15 (vdifio "dummy")
    std::uint8_t mask_length = 0;           // w4 16-23: bits of the validity mask used
    std::uint32_t sync = kVdifEdvSyncWord;  // w5
    std::uint64_t validity_mask = 0;  // w6 | w7 << 32: bit i set if channel (group) i is valid
    friend bool operator==(const VdifEdv4&, const VdifEdv4&) = default;
};

VdifEdv1 decode_vdif_edv1(const VdifHeader& h);
VdifEdv2 decode_vdif_edv2(const VdifHeader& h);
VdifEdv3 decode_vdif_edv3(const VdifHeader& h);
VdifEdv4 decode_vdif_edv4(const VdifHeader& h);
void encode_vdif_edv(const VdifEdv1& e, VdifHeader& h);
void encode_vdif_edv(const VdifEdv2& e, VdifHeader& h);
void encode_vdif_edv(const VdifEdv3& e, VdifHeader& h);
void encode_vdif_edv(const VdifEdv4& e, VdifHeader& h);

// One line per view, "name=value" pairs in word order.
std::string to_string(const VdifEdv1& e);
std::string to_string(const VdifEdv2& e);
std::string to_string(const VdifEdv3& e);
std::string to_string(const VdifEdv4& e);
// The extended data of `h` by its EDV: "legacy" for a legacy header, the view
// of EDV 1-4 after "edv N ", and the raw words for any other EDV.
std::string vdif_edv_string(const VdifHeader& h);

// Full validation against the bytes the frame occupies (the datagram less a
// VTP sequence number): the frame length must equal them and be longer than
// the header. The packing of samples is not checked: it decides nothing the
// ledger counts (docs/formats.md, "The VDIF header").
VdifError validate_vdif(const VdifHeader& h, std::uint64_t frame_bytes);

}  // namespace ibvcap
