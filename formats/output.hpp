// Output file formats and their on-disk framing (docs/formats.md).
//
// raw      whole captured frames (Ethernet header onwards), back to back
// codif    CODIF frames (64-byte header + payload), back to back, as DiFX-style
//          CODIF readers read them
// codifhdr the 64-byte CODIF headers only, back to back
// pcap     libpcap format with nanosecond timestamps (magic 0xa1b23c4d), link
//          type Ethernet; what tcpdump, tshark and Wireshark open
//
// The pcap framing is written here rather than through pcap_dump(): the writers
// own their buffers and file offsets (large aligned buffers, pwrite, O_DIRECT),
// which libpcap's stdio-based dumper cannot do. The format is 24 + 16 bytes of
// fixed layout (pcap-savefile(5)).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "formats/bytes.hpp"

namespace ibvcap {

enum class OutputFormat : std::uint8_t { raw, codif, codifhdr, pcap };
inline constexpr std::array<OutputFormat, 4> kAllOutputFormats = {
    OutputFormat::raw, OutputFormat::codif, OutputFormat::codifhdr, OutputFormat::pcap};

std::string_view to_string(OutputFormat format);
std::optional<OutputFormat> parse_output_format(std::string_view name);
std::string_view file_extension(OutputFormat format);  // "raw", "codif", "codifhdr", "pcap"
// "raw, codif, codifhdr, pcap": for usage errors.
std::string_view output_format_choices();

inline constexpr std::uint32_t kPcapMagicNanoseconds = 0xa1b23c4du;
inline constexpr std::uint32_t kPcapLinkTypeEthernet = 1;
inline constexpr std::uint32_t kPcapSnaplen = 262144;  // tcpdump's default
inline constexpr std::size_t kPcapFileHeaderBytes = 24;
inline constexpr std::size_t kPcapRecordHeaderBytes = 16;

// The 24-byte pcap file header, little-endian (the host order on every target).
std::array<std::uint8_t, kPcapFileHeaderBytes> pcap_file_header(
    std::uint32_t snaplen = kPcapSnaplen);
// The 16-byte record header of one frame.
std::array<std::uint8_t, kPcapRecordHeaderBytes> pcap_record_header(std::uint64_t timestamp_ns,
                                                                    std::uint32_t captured_bytes,
                                                                    std::uint32_t wire_bytes);

}  // namespace ibvcap
