#include "formats/pcapng.hpp"

#include <stdexcept>

namespace ibvcap::pcapng {

namespace {
void store_le16(std::uint8_t* p, std::uint16_t v) {
    p[0] = static_cast<std::uint8_t>(v);
    p[1] = static_cast<std::uint8_t>(v >> 8);
}
}  // namespace

BlockBuilder::BlockBuilder(std::uint32_t type) {
    bytes_.reserve(256);
    u32(type);
    u32(0);  // total length, set by finish()
}

BlockBuilder& BlockBuilder::u16(std::uint16_t v) {
    const std::size_t at = bytes_.size();
    bytes_.resize(at + 2);
    store_le16(bytes_.data() + at, v);
    return *this;
}

BlockBuilder& BlockBuilder::u32(std::uint32_t v) {
    const std::size_t at = bytes_.size();
    bytes_.resize(at + 4);
    store_le32(bytes_.data() + at, v);
    return *this;
}

BlockBuilder& BlockBuilder::u64(std::uint64_t v) {
    const std::size_t at = bytes_.size();
    bytes_.resize(at + 8);
    store_le64(bytes_.data() + at, v);
    return *this;
}

BlockBuilder& BlockBuilder::option(std::uint16_t code, Bytes value) {
    if (value.size() > 0xFFFF) {
        throw std::length_error("a pcapng option holds at most 65535 bytes");
    }
    options_ = true;
    u16(code);
    u16(static_cast<std::uint16_t>(value.size()));
    bytes_.insert(bytes_.end(), value.begin(), value.end());
    bytes_.resize(bytes_.size() + (padded4(static_cast<std::uint32_t>(value.size())) -
                                   static_cast<std::uint32_t>(value.size())),
                  0);
    return *this;
}

BlockBuilder& BlockBuilder::option(std::uint16_t code, std::string_view text) {
    // UTF-8 without a terminating zero (spec: "string" options).
    return option(code, Bytes(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

BlockBuilder& BlockBuilder::option_u64(std::uint16_t code, std::uint64_t v) {
    std::array<std::uint8_t, 8> b{};
    store_le64(b.data(), v);
    return option(code, b);
}

BlockBuilder& BlockBuilder::option_time(std::uint16_t code, std::uint64_t ns) {
    std::array<std::uint8_t, 8> b{};
    store_le32(b.data(), static_cast<std::uint32_t>(ns >> 32));
    store_le32(b.data() + 4, static_cast<std::uint32_t>(ns));
    return option(code, b);
}

std::vector<std::uint8_t> BlockBuilder::finish() {
    if (options_) {
        u16(kOptEndOfOpt);
        u16(0);
        options_ = false;
    }
    const auto total = static_cast<std::uint32_t>(bytes_.size() + 4);
    u32(total);
    store_le32(bytes_.data() + 4, total);
    return std::move(bytes_);
}

std::vector<std::uint8_t> section_header(const SectionInfo& info) {
    BlockBuilder b(kSectionHeaderBlock);
    b.u32(kByteOrderMagic).u16(1).u16(0).u64(~std::uint64_t{0});  // version 1.0, length unknown
    if (!info.comment.empty()) {
        b.option(kOptComment, info.comment);
    }
    if (!info.hardware.empty()) {
        b.option(kShbHardware, info.hardware);
    }
    if (!info.os.empty()) {
        b.option(kShbOs, info.os);
    }
    if (!info.application.empty()) {
        b.option(kShbUserAppl, info.application);
    }
    return b.finish();
}

std::vector<std::uint8_t> interface_description(const InterfaceInfo& info) {
    BlockBuilder b(kInterfaceDescriptionBlock);
    b.u16(info.link_type).u16(0).u32(info.snaplen);
    if (!info.name.empty()) {
        b.option(kIfName, info.name);
    }
    if (!info.description.empty()) {
        b.option(kIfDescription, info.description);
    }
    const std::uint8_t tsresol = kTsresolNanoseconds;
    b.option(kIfTsresol, Bytes(&tsresol, 1));
    return b.finish();
}

std::vector<std::uint8_t> interface_statistics(const InterfaceStatistics& s) {
    BlockBuilder b(kInterfaceStatisticsBlock);
    b.u32(s.interface_id)
        .u32(static_cast<std::uint32_t>(s.timestamp_ns >> 32))
        .u32(static_cast<std::uint32_t>(s.timestamp_ns));
    if (!s.comment.empty()) {
        b.option(kOptComment, s.comment);
    }
    if (s.start_ns) {
        b.option_time(kIsbStartTime, *s.start_ns);
    }
    if (s.end_ns) {
        b.option_time(kIsbEndTime, *s.end_ns);
    }
    const std::pair<std::uint16_t, const std::optional<std::uint64_t>*> counts[] = {
        {kIsbIfRecv, &s.ifrecv},
        {kIsbIfDrop, &s.ifdrop},
        {kIsbFilterAccept, &s.filteraccept},
        {kIsbOsDrop, &s.osdrop},
        {kIsbUsrDeliv, &s.usrdeliv}};
    for (const auto& [code, value] : counts) {
        if (*value) {
            b.option_u64(code, **value);
        }
    }
    return b.finish();
}

std::array<std::uint8_t, kEpbHeaderBytes> epb_header(std::uint32_t interface_id,
                                                     std::uint64_t timestamp_ns,
                                                     std::uint32_t captured_bytes,
                                                     std::uint32_t wire_bytes) {
    std::array<std::uint8_t, kEpbHeaderBytes> h{};
    store_le32(h.data(), kEnhancedPacketBlock);
    store_le32(h.data() + 4, epb_total_length(captured_bytes));
    store_le32(h.data() + 8, interface_id);
    store_le32(h.data() + 12, static_cast<std::uint32_t>(timestamp_ns >> 32));
    store_le32(h.data() + 16, static_cast<std::uint32_t>(timestamp_ns));
    store_le32(h.data() + 20, captured_bytes);
    store_le32(h.data() + 24, wire_bytes);
    return h;
}

EpbTrailer epb_trailer(std::uint32_t captured_bytes) {
    EpbTrailer t;
    const std::size_t pad = padded4(captured_bytes) - captured_bytes;  // zeros already
    store_le32(t.bytes.data() + pad, epb_total_length(captured_bytes));
    t.size = pad + 4;
    return t;
}

}  // namespace ibvcap::pcapng
