#include "formats/output.hpp"

#include <stdexcept>
#include <string>

namespace ibvcap {

std::string_view to_string(OutputFormat format) {
    switch (format) {
        case OutputFormat::raw:
            return "raw";
        case OutputFormat::codif:
            return "codif";
        case OutputFormat::codifhdr:
            return "codifhdr";
        case OutputFormat::pcap:
            return "pcap";
        case OutputFormat::pcapng:
            return "pcapng";
        case OutputFormat::vdif:
            return "vdif";
    }
    return "unknown";
}

std::optional<OutputFormat> parse_output_format(std::string_view name) {
    for (const auto f : kAllOutputFormats) {
        if (to_string(f) == name) {
            return f;
        }
    }
    return std::nullopt;
}

std::string_view file_extension(OutputFormat format) {
    return to_string(format);
}

std::string_view output_format_choices() {
    return "raw, codif, codifhdr, vdif, pcap, pcapng";
}

std::array<std::uint8_t, kPcapFileHeaderBytes> pcap_file_header(std::uint32_t snaplen,
                                                                std::uint32_t link_type) {
    std::array<std::uint8_t, kPcapFileHeaderBytes> h{};
    store_le32(h.data(), kPcapMagicNanoseconds);
    h[4] = 2;  // version 2.4
    h[6] = 4;
    // thiszone (8..11) and sigfigs (12..15) stay 0
    store_le32(h.data() + 16, snaplen);
    store_le32(h.data() + 20, link_type);
    return h;
}

std::array<std::uint8_t, kPcapRecordHeaderBytes> pcap_record_header(std::uint64_t timestamp_ns,
                                                                    std::uint32_t captured_bytes,
                                                                    std::uint32_t wire_bytes) {
    if (!pcap_time_fits(timestamp_ns)) {
        throw std::out_of_range("time stamp " + std::to_string(timestamp_ns / 1'000'000'000u) +
                                " s is at or after 2^32 s (2106-02-07 06:28:16 UTC), past the "
                                "32-bit seconds of a pcap record");
    }
    std::array<std::uint8_t, kPcapRecordHeaderBytes> h{};
    store_le32(h.data(), static_cast<std::uint32_t>(timestamp_ns / 1'000'000'000u));
    store_le32(h.data() + 4, static_cast<std::uint32_t>(timestamp_ns % 1'000'000'000u));
    store_le32(h.data() + 8, captured_bytes);
    store_le32(h.data() + 12, wire_bytes);
    return h;
}

}  // namespace ibvcap
