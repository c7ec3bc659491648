// CODIF frame header codec: both layouts (docs/formats.md, "The CODIF header").
//
// Every field is read and written with explicit little-endian loads/stores and
// shifts (formats/bytes.hpp): the header sits unaligned at offset 42 of an
// Ethernet frame, so there are no bitfields and no pointer casts here.
//
// v2 layout (eight LE 64-bit words), as docs/formats.md, "The CODIF header" and DiFX codifio
// (difx/difx libraries/codifio/src/codifio.h, "#define CODIFV2"):
//   W0  frame 0-31, seconds 32-63
//   W1  epoch 0-7, nbits 8-15, power 16, invalid 17, complex 18, cal 19,
//       representation 20-23, version 24-28, protocol 29-31, (reserved 32-47),
//       period 48-63
//   W2  threadid 0-15, groupid 16-31, secondaryid 32-47, stationid 48-63
//   W3  nchan 0-15, blocklength 16-31, framelength8 32-63 (payload bytes / 8)
//   W4  totalsamples
//   W5  sync 0xFEEDCAFE 0-31, metaid 32-47, meta1 48-63
//   W6  metadata[0]
//   W7  metadata[1]
//
// Draft layout (sixteen LE 32-bit words), from the DiFX codifio draft header
// difx/difx libraries/codifio/trunk/src/codifio.h at commit
// 2acba4a117eed54a51ef75b8562dac7c5de5c729 (struct codif_header; the revision
// whose sync word is word 11 and whose getCODIFNumChannels() returns nchan+1).
// GCC allocates bitfields from the least significant bit on little-endian
// hosts, so the first declared field of each 32-bit word is at bit 0:
//   w0   frame 0-31
//   w1   seconds 0-29, complex 30, invalid 31
//   w2   stationid 0-15, (unassigned 16-21), representation 22-25, epoch 26-31
//   w3   framelength8 0-23 (payload bytes / 8, the 64-byte header EXCLUDED),
//        nbits 24-28, version 29-31
//   w4   groupid 0-15, threadid 16-31
//   w5   nchan-1 0-15, blocklength 16-31
//   w6   reserved
//   w7   period 0-15, (reserved 16-31)
//   w8-9 totalsamples, one LE 64-bit value at byte 32 (w8 low half, w9 high
//        half: the struct declares it uint64_t and getCODIFTotalSamples() reads
//        it natively; a wordswap() variant is present there only commented out)
//   w10  reserved
//   w11  sync 0xADEADBEE
//   w12-15 extended-header words (eversion, extended1..4): not mapped.
// codifio's setCODIFBitsPerSample() stores nbits as is (not minus one) and
// setCODIFNumChannels() stores numchannels-1, which is what is done here.
// The frame length: that struct's comment says "including header", but every
// user of the field treats it as the payload alone, and so does ibvcap:
// codifio.c createCODIFHeader(dataarraylength) calls setCODIFFrameBytes(header,
// dataarraylength) (framelength8 = bytes/8) and getCODIFFramesPerPeriod() divides
// getCODIFFrameBytes() as "databytes"; utils/codifsum.c sets framesize =
// getCODIFFrameBytes() + CODIF_HEADER_BYTES and, after reading a 64-byte header,
// seeks getCODIFFrameBytes() forward to the next one; mark5access's
// format_codif.c takes getCODIFFrameBytes() as databytesperpacket and
// find_codif_frame() finds the next header at fs + CODIF_HEADER_BYTES. So every
// 24-bit value decodes; 0 (a header with no payload) is zero_framelength. An
// earlier revision of the same file (commit 2716e3707f221c0c06f9a2c2226d078ee0f3b6c8)
// has the 32-bit words of each pair in the other order (sync in word 10, nchan
// not offset); docs/formats.md, "The CODIF header" has sync in word 11, so that revision is not
// used. Draft has no power, cal, protocol, secondaryid, metaid, meta1 or metadata: they decode as 0
// and are not encoded.
//
// Deliberate differences from codifio: seconds are never wrapped at 86400
// (codifio's getCODIFFrameSecond() does), and the period is part of the
// sequence arithmetic (codifio's incrementCODIFHeader() steps seconds by 1).
//
// Decoding (detect_codif_layout, decode_codif) is inline in codif.hpp: it is
// on every frame's path.
#include "formats/codif.hpp"

#include <cstddef>

namespace ibvcap {

namespace {

using codif_detail::kDraftFramelengthMask;
using codif_detail::kDraftSyncOffset;

constexpr std::uint64_t put64(std::uint64_t value, unsigned shift, std::uint64_t mask) {
    return (value & mask) << shift;
}
constexpr std::uint32_t put32(std::uint32_t value, unsigned shift, std::uint32_t mask) {
    return (value & mask) << shift;
}

void encode_v2(const CodifHeader& h, std::uint8_t* p) {
    const std::uint64_t w0 = put64(h.frame, 0, 0xFFFFFFFFu) | put64(h.seconds, 32, 0xFFFFFFFFu);
    const std::uint64_t w1 = put64(h.epoch, 0, 0xFF) | put64(h.nbits, 8, 0xFF) |
                             put64(h.power ? 1 : 0, 16, 1) | put64(h.invalid ? 1 : 0, 17, 1) |
                             put64(h.complex ? 1 : 0, 18, 1) | put64(h.cal ? 1 : 0, 19, 1) |
                             put64(h.representation, 20, 0xF) | put64(h.version, 24, 0x1F) |
                             put64(h.protocol, 29, 0x7) | put64(h.period, 48, 0xFFFF);
    const std::uint64_t w2 = put64(h.threadid, 0, 0xFFFF) | put64(h.groupid, 16, 0xFFFF) |
                             put64(h.secondaryid, 32, 0xFFFF) | put64(h.stationid, 48, 0xFFFF);
    const std::uint64_t w3 = put64(h.nchan, 0, 0xFFFF) | put64(h.blocklength, 16, 0xFFFF) |
                             put64(h.framelength8, 32, 0xFFFFFFFFu);
    const std::uint64_t w5 = put64(kCodifSyncV2, 0, 0xFFFFFFFFu) | put64(h.metaid, 32, 0xFFFF) |
                             put64(h.meta1, 48, 0xFFFF);
    store_le64(p, w0);
    store_le64(p + 8, w1);
    store_le64(p + 16, w2);
    store_le64(p + 24, w3);
    store_le64(p + 32, h.totalsamples);
    store_le64(p + 40, w5);
    store_le64(p + 48, h.metadata[0]);
    store_le64(p + 56, h.metadata[1]);
}

// Fields wider than the draft layout allows are truncated to its widths
// (seconds 30 bits, epoch 6, nbits 5, version 3, framelength8 24).
void encode_draft(const CodifHeader& h, std::uint8_t* p) {
    for (std::size_t i = 0; i < kCodifHeaderBytes; ++i) {
        p[i] = 0;
    }
    const std::uint32_t w1 = put32(h.seconds, 0, 0x3FFFFFFFu) | put32(h.complex ? 1 : 0, 30, 1) |
                             put32(h.invalid ? 1 : 0, 31, 1);
    const std::uint32_t w2 =
        put32(h.stationid, 0, 0xFFFF) | put32(h.representation, 22, 0xF) | put32(h.epoch, 26, 0x3F);
    const std::uint32_t w3 = put32(h.framelength8, 0, kDraftFramelengthMask) |
                             put32(h.nbits, 24, 0x1F) | put32(h.version, 29, 0x7);
    const std::uint32_t w4 = put32(h.groupid, 0, 0xFFFF) | put32(h.threadid, 16, 0xFFFF);
    const std::uint32_t w5 = put32(static_cast<std::uint32_t>(h.nchan) - 1u, 0, 0xFFFF) |
                             put32(h.blocklength, 16, 0xFFFF);
    const std::uint32_t w7 = put32(h.period, 0, 0xFFFF);

    store_le32(p + 0 * 4, h.frame);
    store_le32(p + 1 * 4, w1);
    store_le32(p + 2 * 4, w2);
    store_le32(p + 3 * 4, w3);
    store_le32(p + 4 * 4, w4);
    store_le32(p + 5 * 4, w5);
    store_le32(p + 7 * 4, w7);
    store_le64(p + 8 * 4, h.totalsamples);
    store_le32(p + kDraftSyncOffset, kCodifSyncDraft);
}

}  // namespace

namespace codif_detail {

void decode_draft(const std::uint8_t* p, CodifHeader& h) {
    h = CodifHeader{};  // the fields the draft lacks decode as 0
    const std::uint32_t w1 = load_le32(p + 4 * 1);
    const std::uint32_t w2 = load_le32(p + 4 * 2);
    const std::uint32_t w3 = load_le32(p + 4 * 3);
    const std::uint32_t w4 = load_le32(p + 4 * 4);
    const std::uint32_t w5 = load_le32(p + 4 * 5);
    const std::uint32_t w7 = load_le32(p + 4 * 7);

    h.layout = CodifLayout::draft;
    h.frame = load_le32(p + 4 * 0);
    h.seconds = bits32(w1, 0, 0x3FFFFFFFu);
    h.complex = bits32(w1, 30, 1) != 0;
    h.invalid = bits32(w1, 31, 1) != 0;

    h.stationid = static_cast<std::uint16_t>(bits32(w2, 0, 0xFFFF));
    h.representation = static_cast<std::uint8_t>(bits32(w2, 22, 0xF));
    h.epoch = static_cast<std::uint8_t>(bits32(w2, 26, 0x3F));

    h.framelength8 = bits32(w3, 0, kDraftFramelengthMask);
    h.nbits = static_cast<std::uint8_t>(bits32(w3, 24, 0x1F));
    h.version = static_cast<std::uint8_t>(bits32(w3, 29, 0x7));

    h.groupid = static_cast<std::uint16_t>(bits32(w4, 0, 0xFFFF));
    h.threadid = static_cast<std::uint16_t>(bits32(w4, 16, 0xFFFF));

    // Stored minus one. The wire value 0xFFFF (65536 channels) does not fit the
    // 16-bit nchan and decodes as 0, which validate_codif() rejects as zero_nchan;
    // encode_codif() writes nchan 0 as 0xFFFF, so the round trip is exact.
    h.nchan = static_cast<std::uint16_t>(bits32(w5, 0, 0xFFFF) + 1);
    h.blocklength = static_cast<std::uint16_t>(bits32(w5, 16, 0xFFFF));

    h.period = static_cast<std::uint16_t>(bits32(w7, 0, 0xFFFF));

    h.totalsamples = load_le64(p + 8 * 4);
}

}  // namespace codif_detail

std::string_view to_string(CodifLayout layout) {
    switch (layout) {
        case CodifLayout::v2:
            return "v2";
        case CodifLayout::draft:
            return "draft";
    }
    return "unknown";
}

std::string_view to_string(CodifError error) {
    switch (error) {
        case CodifError::none:
            return "none";
        case CodifError::short_buffer:
            return "short_buffer";
        case CodifError::bad_sync:
            return "bad_sync";
        case CodifError::zero_nchan:
            return "zero_nchan";
        case CodifError::zero_nbits:
            return "zero_nbits";
        case CodifError::zero_period:
            return "zero_period";
        case CodifError::zero_framelength:
            return "zero_framelength";
        case CodifError::length_mismatch:
            return "length_mismatch";
        case CodifError::samples_not_integral:
            return "samples_not_integral";
        case CodifError::frame_beyond_period:
            return "frame_beyond_period";
    }
    return "unknown";
}

void encode_codif(const CodifHeader& h, MutableBytes out) {
    if (out.size() < kCodifHeaderBytes) {
        return;  // precondition violated: never write past the buffer
    }
    if (h.layout == CodifLayout::draft) {
        encode_draft(h, out.data());
    } else {
        encode_v2(h, out.data());
    }
}

std::uint64_t codif_samples_per_frame(const CodifHeader& h) {
    const std::uint64_t divisor = std::uint64_t{h.nchan} * std::uint64_t{h.nbits} *
                                  (h.complex ? std::uint64_t{2} : std::uint64_t{1});
    if (divisor == 0) {
        return 0;
    }
    const std::uint64_t payload_bits = std::uint64_t{h.framelength8} * 64;
    if (payload_bits % divisor != 0) {
        return 0;
    }
    return payload_bits / divisor;
}

std::uint64_t codif_frames_per_period(const CodifHeader& h) {
    const std::uint64_t spf = codif_samples_per_frame(h);
    if (spf == 0 || h.totalsamples % spf != 0) {
        return 0;
    }
    const std::uint64_t fpp = h.totalsamples / spf;
    // Above 2^31 frames per period no real stream exists (that is 2 GHz of
    // frames), and the bound keeps every absolute frame index below 2^63, so
    // index and gap arithmetic are exact in 64 bits.
    return fpp <= kCodifMaxFramesPerPeriod ? fpp : 0;
}

CodifError validate_codif(const CodifHeader& h, std::uint64_t datagram_bytes) {
    if (h.nchan == 0) {
        return CodifError::zero_nchan;
    }
    if (h.nbits == 0) {
        return CodifError::zero_nbits;
    }
    if (h.period == 0) {
        return CodifError::zero_period;
    }
    if (h.framelength8 == 0) {
        return CodifError::zero_framelength;
    }
    if (h.frame_bytes() != datagram_bytes) {
        return CodifError::length_mismatch;
    }
    if (codif_samples_per_frame(h) == 0) {
        return CodifError::samples_not_integral;
    }
    const std::uint64_t fpp = codif_frames_per_period(h);
    if (fpp > 0 && h.frame >= fpp) {
        return CodifError::frame_beyond_period;
    }
    return CodifError::none;
}

// A period of 0 (which validate_codif rejects) is treated as 1 here so that a
// badly built CodifTiming cannot divide by zero.
}  // namespace ibvcap
