// Fill frames (formats/fill_frame.hpp): the header fields are set in the
// template's own bytes, so every other bit of it (CODIF's metadata, the
// draft's unmapped extension words, VDIF's extended data) stays as the
// stream sent it.
#include "formats/fill_frame.hpp"

#include <algorithm>
#include <cstring>

#include "formats/codif.hpp"
#include "formats/vdif.hpp"

namespace ibvcap {

std::size_t fill_header_bytes(StreamFormat format, Bytes header) {
    if (format == StreamFormat::codif) {
        return detect_codif_layout(header) ? kCodifHeaderBytes : 0;
    }
    if (header.size() < kVdifLegacyHeaderBytes) {
        return 0;
    }
    const bool legacy = ((load_le32(header.data()) >> 30) & 1u) != 0;
    const std::size_t bytes = legacy ? kVdifLegacyHeaderBytes : kVdifHeaderBytes;
    return header.size() >= bytes ? bytes : 0;
}

bool mark_fill_header(StreamFormat format, MutableBytes header, std::uint32_t seconds,
                      std::uint32_t frame) {
    if (fill_header_bytes(format, header) == 0) {
        return false;
    }
    std::uint8_t* p = header.data();
    if (format != StreamFormat::codif) {
        // VDIF (and VTP: the frame after the sequence number).
        const std::uint32_t w0 = load_le32(p);
        const std::uint32_t w1 = load_le32(p + 4);
        store_le32(p, (w0 & 0x40000000u) | 0x80000000u | (seconds & 0x3FFFFFFFu));
        store_le32(p + 4, (w1 & 0xFF000000u) | (frame & 0x00FFFFFFu));
        return true;
    }
    if (*detect_codif_layout(header) == CodifLayout::v2) {
        store_le64(p, std::uint64_t{seconds} << 32 | frame);
        store_le64(p + 8, load_le64(p + 8) | std::uint64_t{1} << 17);
        return true;
    }
    store_le32(p, frame);
    store_le32(p + 4, (load_le32(p + 4) & 0x40000000u) | 0x80000000u | (seconds & 0x3FFFFFFFu));
    return true;
}

void fill_payload(MutableBytes payload) {
    std::uint8_t word[4];
    store_le32(word, kFillPattern);
    std::size_t i = 0;
    for (; i + 4 <= payload.size(); i += 4) {
        std::memcpy(payload.data() + i, word, 4);
    }
    for (std::size_t k = 0; i < payload.size(); ++i, ++k) {
        payload[i] = word[k];
    }
}

bool build_fill_frame(StreamFormat format, Bytes template_header, std::uint32_t seconds,
                      std::uint32_t frame, MutableBytes out) {
    const std::size_t header = fill_header_bytes(format, template_header);
    if (header == 0 || header > out.size()) {
        return false;
    }
    std::memcpy(out.data(), template_header.data(), header);
    mark_fill_header(format, out.first(header), seconds, frame);
    fill_payload(out.subspan(header));
    return true;
}

bool is_fill_payload(Bytes payload) {
    if (payload.empty()) {
        return false;
    }
    std::uint8_t word[4];
    store_le32(word, kFillPattern);
    for (std::size_t i = 0; i < payload.size(); ++i) {
        if (payload[i] != word[i % 4]) {
            return false;
        }
    }
    return true;
}

}  // namespace ibvcap
