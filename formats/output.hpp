// Output file formats and their on-disk framing (docs/formats.md).
//
// raw      whole captured frames (Ethernet header onwards), back to back
// codif    CODIF frames (64-byte header + payload), back to back, as DiFX-style
//          CODIF readers read them
// codifhdr the 64-byte CODIF headers only, back to back
// vdif     VDIF frames (header + payload, no VTP sequence number), back to
//          back: a file per VDIF station and thread, as jive5ab and DiFX's
//          vdifio and mark5access read them
// pcap     libpcap format with nanosecond timestamps (magic 0xa1b23c4d), link
//          type Ethernet (or the input file's: ibvcap read); what tcpdump,
//          tshark and Wireshark open. Its seconds are 32 bits: times from
//          2106-02-07 06:28:16 UTC (2^32 s) on do not fit
// pcapng   pcapng (formats/pcapng.hpp): a section header naming the host and
//          ibvcap, an interface block, 64-bit nanosecond times (no 2106
//          limit), and the capture's counts in statistics blocks at the end
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
#include "formats/stream_header.hpp"

namespace ibvcap {

enum class OutputFormat : std::uint8_t { raw, codif, codifhdr, pcap, pcapng, vdif };
inline constexpr std::array<OutputFormat, 6> kAllOutputFormats = {
    OutputFormat::raw,  OutputFormat::codif, OutputFormat::codifhdr,
    OutputFormat::vdif, OutputFormat::pcap,  OutputFormat::pcapng};

// raw, codif and codifhdr: one file per (group, antenna); vdif: one per
// (group, antenna, station, thread); pcap and pcapng: one file for the run.
constexpr bool per_antenna(OutputFormat format) {
    return format == OutputFormat::raw || format == OutputFormat::codif ||
           format == OutputFormat::codifhdr || format == OutputFormat::vdif;
}
// Whether a stream whose frames are `frames` goes into a per-antenna output
// of `format`: codif and codifhdr hold CODIF streams, vdif VDIF (and VTP)
// streams, raw any stream (whole frames as captured).
constexpr bool holds_stream(OutputFormat format, StreamFormat frames) {
    switch (format) {
        case OutputFormat::codif:
        case OutputFormat::codifhdr:
            return frames == StreamFormat::codif;
        case OutputFormat::vdif:
            return frames != StreamFormat::codif;
        case OutputFormat::raw:
            return true;
        case OutputFormat::pcap:
        case OutputFormat::pcapng:
            break;
    }
    return false;
}
// Whether an output of `format` gets a stream's frames at all: pcap and
// pcapng every frame, a per-antenna output the streams it holds.
constexpr bool takes_stream(OutputFormat format, StreamFormat frames) {
    return !per_antenna(format) || holds_stream(format, frames);
}

std::string_view to_string(OutputFormat format);
std::optional<OutputFormat> parse_output_format(std::string_view name);
// "raw", "codif", "codifhdr", "vdif", "pcap", "pcapng"
std::string_view file_extension(OutputFormat format);
// "raw, codif, codifhdr, vdif, pcap, pcapng": for usage errors.
std::string_view output_format_choices();

inline constexpr std::uint32_t kPcapMagicNanoseconds = 0xa1b23c4du;
inline constexpr std::uint32_t kPcapLinkTypeEthernet = 1;
inline constexpr std::uint32_t kPcapSnaplen = 262144;  // tcpdump's default
inline constexpr std::size_t kPcapFileHeaderBytes = 24;
inline constexpr std::size_t kPcapRecordHeaderBytes = 16;

// The 24-byte pcap file header, little-endian (the host order on every target).
std::array<std::uint8_t, kPcapFileHeaderBytes> pcap_file_header(
    std::uint32_t snaplen = kPcapSnaplen, std::uint32_t link_type = kPcapLinkTypeEthernet);
// Whether a time fits a pcap record header (seconds below 2^32).
constexpr bool pcap_time_fits(std::uint64_t timestamp_ns) {
    return timestamp_ns / 1'000'000'000u <= 0xFFFF'FFFFu;
}
// The 16-byte record header of one frame. Throws std::out_of_range when the
// time does not fit (pcap_time_fits), rather than wrap it.
std::array<std::uint8_t, kPcapRecordHeaderBytes> pcap_record_header(std::uint64_t timestamp_ns,
                                                                    std::uint32_t captured_bytes,
                                                                    std::uint32_t wire_bytes);

}  // namespace ibvcap
