// The pcapng framing of the `pcapng` output (docs/formats.md, "pcapng"): the
// blocks ibvcap writes, little-endian (the host order on every target), as
// the pcapng specification lays them out (IETF draft-ietf-opsawg-pcapng,
// "PCAP Next Generation (pcapng) Capture File Format", sections 3-4; block
// and option codes as Wireshark's wiretap/pcapng.c and libpcap's
// sf-pcapng.c read them).
//
// Written here rather than through a library: libpcap writes only the
// classic pcap format (pcap_dump); Wireshark's libwiretap (libwiretap-dev)
// writes pcapng, but only through its own file handle (wtap_dump_open,
// buffered), as libpcap's dumper does. The writers own their buffers and file
// offsets (large aligned buffers, pwritev, O_DIRECT, frames held in their
// receive slots: formats/output.hpp), so the blocks are bytes handed to them.
//
// The per-frame Enhanced Packet Block is two fixed pieces around the frame's
// bytes (epb_header, epb_trailer) and allocates nothing; the other blocks,
// written once per file, are built with BlockBuilder.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/bytes.hpp"

namespace ibvcap::pcapng {

inline constexpr std::uint32_t kSectionHeaderBlock = 0x0A0D0D0Au;
inline constexpr std::uint32_t kInterfaceDescriptionBlock = 1;
inline constexpr std::uint32_t kInterfaceStatisticsBlock = 5;
inline constexpr std::uint32_t kEnhancedPacketBlock = 6;
inline constexpr std::uint32_t kByteOrderMagic = 0x1A2B3C4Du;

// Option codes (spec section 3.5 and the blocks' own tables).
inline constexpr std::uint16_t kOptEndOfOpt = 0;
inline constexpr std::uint16_t kOptComment = 1;
inline constexpr std::uint16_t kShbHardware = 2;
inline constexpr std::uint16_t kShbOs = 3;
inline constexpr std::uint16_t kShbUserAppl = 4;
inline constexpr std::uint16_t kIfName = 2;
inline constexpr std::uint16_t kIfDescription = 3;
inline constexpr std::uint16_t kIfTsresol = 9;
inline constexpr std::uint16_t kIsbStartTime = 2;
inline constexpr std::uint16_t kIsbEndTime = 3;
inline constexpr std::uint16_t kIsbIfRecv = 4;
inline constexpr std::uint16_t kIsbIfDrop = 5;
inline constexpr std::uint16_t kIsbFilterAccept = 6;
inline constexpr std::uint16_t kIsbOsDrop = 7;
inline constexpr std::uint16_t kIsbUsrDeliv = 8;

// if_tsresol 9: time stamps in nanoseconds (10^-9 s), 64 bits.
inline constexpr std::uint8_t kTsresolNanoseconds = 9;

inline constexpr std::size_t kEpbHeaderBytes =
    28;  // type, length, interface, ts hi, lo, caplen, len
inline constexpr std::size_t kEpbTrailerMaxBytes = 3 + 4;  // padding to 32 bits, total length

constexpr std::uint32_t padded4(std::uint32_t n) {
    return (n + 3u) & ~3u;
}
// The Enhanced Packet Block of a frame of `captured` bytes (no options).
constexpr std::uint32_t epb_total_length(std::uint32_t captured) {
    return static_cast<std::uint32_t>(kEpbHeaderBytes) + padded4(captured) + 4u;
}

// A block: the fixed body fields, then options, each padded to 32 bits,
// closed by opt_endofopt when there are any; the total length at both ends.
class BlockBuilder {
  public:
    explicit BlockBuilder(std::uint32_t type);
    BlockBuilder& u16(std::uint16_t v);
    BlockBuilder& u32(std::uint32_t v);
    BlockBuilder& u64(std::uint64_t v);
    // An option; throws std::length_error past 65535 bytes (its length is 16 bits).
    BlockBuilder& option(std::uint16_t code, Bytes value);
    BlockBuilder& option(std::uint16_t code, std::string_view text);
    BlockBuilder& option_u64(std::uint16_t code, std::uint64_t v);
    // A time in the interface's units (nanoseconds here), as the spec's
    // timestamps are: the high 32 bits, then the low 32 bits.
    BlockBuilder& option_time(std::uint16_t code, std::uint64_t ns);
    std::vector<std::uint8_t> finish();

  private:
    std::vector<std::uint8_t> bytes_;
    bool options_ = false;
};

struct SectionInfo {
    std::string hardware;     // shb_hardware
    std::string os;           // shb_os
    std::string application;  // shb_userappl
    std::string comment;      // opt_comment (empty: none)
};
// The Section Header Block: version 1.0, section length -1 (not given).
std::vector<std::uint8_t> section_header(const SectionInfo& info);

struct InterfaceInfo {
    std::uint16_t link_type = 1;  // LINKTYPE_*
    std::uint32_t snaplen = 0;
    std::string name;         // if_name (empty: none)
    std::string description;  // if_description (empty: none)
};
// An Interface Description Block with if_tsresol 9 (nanoseconds).
std::vector<std::uint8_t> interface_description(const InterfaceInfo& info);

// An Interface Statistics Block; an option left unset is not written (the
// spec's "unknown").
struct InterfaceStatistics {
    std::uint32_t interface_id = 0;
    std::uint64_t timestamp_ns = 0;  // when the counts were taken
    std::optional<std::uint64_t> start_ns;
    std::optional<std::uint64_t> end_ns;
    std::optional<std::uint64_t> ifrecv;
    std::optional<std::uint64_t> ifdrop;
    std::optional<std::uint64_t> filteraccept;
    std::optional<std::uint64_t> osdrop;
    std::optional<std::uint64_t> usrdeliv;
    std::string comment;
};
std::vector<std::uint8_t> interface_statistics(const InterfaceStatistics& stats);

// The fixed 28 bytes in front of a frame's bytes in its Enhanced Packet
// Block, and the padding and total length after them.
std::array<std::uint8_t, kEpbHeaderBytes> epb_header(std::uint32_t interface_id,
                                                     std::uint64_t timestamp_ns,
                                                     std::uint32_t captured_bytes,
                                                     std::uint32_t wire_bytes);
struct EpbTrailer {
    std::array<std::uint8_t, kEpbTrailerMaxBytes> bytes{};
    std::size_t size = 0;
    Bytes view() const { return {bytes.data(), size}; }
};
EpbTrailer epb_trailer(std::uint32_t captured_bytes);

}  // namespace ibvcap::pcapng
