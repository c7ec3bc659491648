// VDIF header codec (formats/vdif.hpp); the decoder is inline there.
#include "formats/vdif.hpp"

namespace ibvcap {

std::string_view to_string(VdifError error) {
    switch (error) {
        case VdifError::none:
            return "none";
        case VdifError::short_buffer:
            return "short_buffer";
        case VdifError::zero_framelength:
            return "zero_framelength";
        case VdifError::length_mismatch:
            return "length_mismatch";
    }
    return "unknown";
}

void encode_vdif(const VdifHeader& h, MutableBytes out) {
    std::uint8_t* p = out.data();
    store_le32(p, (h.seconds & 0x3FFFFFFFu) | std::uint32_t{h.legacy} << 30 |
                      std::uint32_t{h.invalid} << 31);
    store_le32(p + 4, (h.frame & 0x00FFFFFFu) | (std::uint32_t{h.epoch} & 0x3Fu) << 24);
    store_le32(p + 8, (h.framelength8 & 0x00FFFFFFu) | (std::uint32_t{h.log2_nchan} & 0x1Fu) << 24 |
                          (std::uint32_t{h.version} & 0x7u) << 29);
    const std::uint32_t nbits_minus1 = h.nbits == 0 ? 0u : std::uint32_t{h.nbits} - 1u;
    store_le32(p + 12, std::uint32_t{h.station} | (std::uint32_t{h.thread} & 0x3FFu) << 16 |
                           (nbits_minus1 & 0x1Fu) << 26 | std::uint32_t{h.complex} << 31);
    if (h.legacy) {
        return;
    }
    store_le32(p + 16, (h.extended[0] & 0x00FFFFFFu) | std::uint32_t{h.edv} << 24);
    store_le32(p + 20, h.extended[1]);
    store_le32(p + 24, h.extended[2]);
    store_le32(p + 28, h.extended[3]);
}

VdifError validate_vdif(const VdifHeader& h, std::uint64_t frame_bytes) {
    if (h.framelength8 == 0) {
        return VdifError::zero_framelength;
    }
    if (h.frame_bytes() != frame_bytes || h.frame_bytes() <= h.header_bytes()) {
        return VdifError::length_mismatch;
    }
    return VdifError::none;
}

}  // namespace ibvcap
