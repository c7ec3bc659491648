// Replay of the fuzz targets under GoogleTest, with any compiler and no
// libFuzzer: each entry (fuzz_entries.hpp) is driven with
//   (a) hand-made seeds: valid CODIF UDP frames in both CODIF layouts, with 0, 1
//       and 2 VLAN tags and with IP options, whole and split into head + tail,
//       non-CODIF frames, and small pcap / pcapng files;
//   (b) every truncation of every seed;
//   (c) deterministic random mutations of the seeds (fixed-seed PRNG: bit
//       flips, bytes set to 0 / 0xff / random, 16- to 64-bit boundary values,
//       truncations, insertions, erasures, splices between seeds);
// and must return 0 with every FUZZ_CHECK holding.
//
// The FuzzRegression tests keep the input of every bug fuzzing found, run in a
// child process (a hang or a crash fails the test, not the whole program): they
// guard the fixes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "formats/bytes.hpp"
#include "formats/codif.hpp"
#include "formats/output.hpp"
#include "formats/packet.hpp"
#include "fuzz_common.hpp"
#include "fuzz_entries.hpp"
#include "lib/core/netaddr.hpp"

namespace ibvcap {
namespace {

using Buffer = std::vector<std::uint8_t>;
using Entry = int (*)(const std::uint8_t*, std::size_t);

constexpr std::size_t kMutations = 20000;  // per target
constexpr std::size_t kMaxReportedFailures = 5;

constexpr std::uint32_t kAntenna1 = (10u << 24) | 11u;              // 10.0.0.11
constexpr std::uint32_t kAntenna2 = (10u << 24) | 12u;              // 10.0.0.12
constexpr std::uint32_t kGroup1 = (239u << 24) | (17u << 16) | 1u;  // 239.17.0.1
constexpr std::uint32_t kGroup2 = (239u << 24) | (17u << 16) | 2u;  // 239.17.0.2
constexpr std::uint16_t kPort = 36001;

// --- little helpers --------------------------------------------------------

void put_le16(Buffer& b, std::uint16_t v) {
    b.push_back(static_cast<std::uint8_t>(v));
    b.push_back(static_cast<std::uint8_t>(v >> 8));
}
void put_le32(Buffer& b, std::uint32_t v) {
    put_le16(b, static_cast<std::uint16_t>(v));
    put_le16(b, static_cast<std::uint16_t>(v >> 16));
}
void put_le64(Buffer& b, std::uint64_t v) {
    put_le32(b, static_cast<std::uint32_t>(v));
    put_le32(b, static_cast<std::uint32_t>(v >> 32));
}
void append(Buffer& b, Bytes bytes) {
    b.insert(b.end(), bytes.begin(), bytes.end());
}

std::string hex(const Buffer& b, std::size_t limit = 1024) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s;
    for (std::size_t i = 0; i < b.size() && i < limit; ++i) {
        s += kDigits[b[i] >> 4];
        s += kDigits[b[i] & 0xF];
    }
    if (b.size() > limit) {
        s += "... (" + std::to_string(b.size()) + " bytes)";
    }
    return s;
}

// --- frames ----------------------------------------------------------------

// A small CODIF header: 64-byte payload of 2 channels x 2 bits, 128 samples a
// frame, 100 frames a period of 1 s.
CodifHeader codif_header(CodifLayout layout, std::uint32_t seconds, std::uint32_t frame,
                         std::uint16_t thread = 0) {
    CodifHeader h;
    h.layout = layout;
    h.seconds = seconds;
    h.frame = frame;
    h.epoch = 48;
    h.nbits = 2;
    h.period = 1;
    h.threadid = thread;
    h.stationid = 0x4B41;
    h.nchan = 2;
    h.blocklength = 1;
    h.framelength8 = 8;
    h.totalsamples = 128 * 100;
    h.version = 1;
    return h;
}

struct FrameSpec {
    std::uint32_t src = kAntenna1;
    std::uint32_t dst = kGroup1;
    std::uint16_t port = kPort;
    int vlans = 0;            // 0, 1 or 2 tags
    std::size_t options = 0;  // IPv4 option words (0..10)
    std::uint8_t protocol = 17;
};

// Ethernet [+ tags] + IPv4 [+ options] + UDP + `payload`, built with
// build_udp_headers and then widened by hand for tags and options.
Buffer udp_frame(const FrameSpec& spec, Bytes payload) {
    UdpHeaderSpec u;
    u.src_ip = spec.src;
    u.dst_ip = spec.dst;
    u.src_port = 5000;
    u.dst_port = spec.port;
    u.ttl = 4;
    Buffer f(kPlainUdpPayloadOffset);
    const std::size_t off = build_udp_headers(u, static_cast<std::uint32_t>(payload.size()), f);
    f.resize(off);
    append(f, payload);
    constexpr std::size_t kIp = kEthernetHeaderBytes;
    f[kIp + 9] = spec.protocol;
    if (spec.options > 0) {
        const std::size_t extra = 4 * spec.options;
        Buffer opts(extra, 0x01);  // NOP options
        opts[extra - 1] = 0x00;    // end of options list
        f.insert(f.begin() + static_cast<std::ptrdiff_t>(kIp + kIpv4MinHeaderBytes), opts.begin(),
                 opts.end());
        f[kIp] = static_cast<std::uint8_t>(0x45 + spec.options);
        const auto total = static_cast<std::uint16_t>(load_be16(&f[kIp + 2]) + extra);
        store_be16(&f[kIp + 2], total);
    }
    store_be16(&f[kIp + 10], 0);
    store_be16(&f[kIp + 10],
               internet_checksum(Bytes(&f[kIp], kIpv4MinHeaderBytes + 4 * spec.options)));
    if (spec.vlans > 0) {
        // 802.1Q, PCP 1, VLAN 7; behind an 802.1ad outer tag, VLAN 100, for two.
        const Buffer tags = spec.vlans == 2 ? Buffer{0x88, 0xA8, 0x00, 0x64, 0x81, 0x00, 0x20, 0x07}
                                            : Buffer{0x81, 0x00, 0x20, 0x07};
        f.insert(f.begin() + 12, tags.begin(), tags.end());
    }
    return f;
}

Buffer codif_frame(const FrameSpec& spec, const CodifHeader& h) {
    Buffer payload(kCodifHeaderBytes + h.payload_bytes());
    encode_codif(h, payload);
    for (std::size_t i = kCodifHeaderBytes; i < payload.size(); ++i) {
        payload[i] = static_cast<std::uint8_t>(i * 37 + h.frame);
    }
    return udp_frame(spec, payload);
}

std::size_t payload_offset(const FrameSpec& spec) {
    return kPlainUdpPayloadOffset + kVlanTagBytes * static_cast<std::size_t>(spec.vlans) +
           4 * spec.options;
}

Buffer arp_frame() {
    Buffer f(60, 0);
    std::fill_n(f.begin(), 6, 0xFF);
    f[6] = 0x02;
    store_be16(&f[12], 0x0806);
    store_be16(&f[14], 1);       // Ethernet
    store_be16(&f[16], 0x0800);  // IPv4
    f[18] = 6;
    f[19] = 4;
    store_be16(&f[20], 1);  // request
    return f;
}

// --- per-target seed encodings (see the input layout in each target) -------

Buffer codif_input(const CodifHeader& h, std::uint8_t mode, std::uint64_t datagram,
                   std::uint32_t s0, std::uint32_t f0) {
    Buffer b(kCodifHeaderBytes);
    encode_codif(h, b);
    b.push_back(mode);
    put_le64(b, datagram);
    put_le32(b, s0);
    put_le32(b, f0);
    return b;
}

Buffer packet_input(std::uint8_t mode, std::uint16_t head, std::uint16_t captured,
                    const Buffer& frame) {
    Buffer b{mode};
    put_le16(b, head);
    put_le16(b, captured);
    b.insert(b.end(), frame.begin(), frame.end());
    return b;
}

struct Chunk {
    Buffer bytes;
    std::uint16_t split = 0;
    std::uint8_t flags = 0;
    std::uint8_t delta = 0;
};
Chunk whole(Buffer b) {
    return Chunk{std::move(b), 0, 0, 0};
}
Chunk split_at(Buffer b, std::size_t at) {
    return Chunk{std::move(b), static_cast<std::uint16_t>(at), 1, 0};
}

Buffer demux_input(std::uint8_t config, const std::vector<Chunk>& chunks,
                   Endpoint group = {kGroup1, kPort}, std::uint32_t antenna = kAntenna1) {
    Buffer b{config};
    if ((config & 1u) != 0) {
        put_le32(b, group.ip);
        put_le16(b, group.port);
    }
    if ((config & 2u) != 0) {
        put_le32(b, antenna);
    }
    for (const Chunk& c : chunks) {
        put_le16(b, static_cast<std::uint16_t>(c.bytes.size()));
        put_le16(b, c.split);
        b.push_back(c.flags);
        b.push_back(c.delta);
        b.insert(b.end(), c.bytes.begin(), c.bytes.end());
    }
    return b;
}

// A classic pcap file: `magic_ns` nanosecond (formats/output.hpp) or
// microsecond, optionally big-endian, with the given link type.
Buffer pcap_file(const std::vector<Buffer>& frames, bool nanoseconds = true,
                 bool big_endian = false, std::uint32_t link = kPcapLinkTypeEthernet,
                 std::uint32_t cut = 0) {
    Buffer b;
    const auto header = pcap_file_header();
    append(b, header);
    if (!nanoseconds) {
        store_le32(b.data(), 0xa1b2c3d4u);
    }
    store_le32(b.data() + 20, link);
    std::uint64_t ts = 1'700'000'000'000'000'000u;
    for (const Buffer& f : frames) {
        const auto wire = static_cast<std::uint32_t>(f.size());
        const std::uint32_t caplen = cut != 0 && cut < wire ? cut : wire;
        const auto record = pcap_record_header(ts, caplen, wire);
        append(b, record);
        if (!nanoseconds) {
            store_le32(b.data() + b.size() - 12, static_cast<std::uint32_t>((ts / 1000) % 1000000));
        }
        b.insert(b.end(), f.begin(), f.begin() + caplen);
        ts += 10'000;
    }
    if (big_endian) {  // byte-swap every 32-bit header field (and the two 16-bit versions)
        auto swap32 = [&](std::size_t at) {
            std::reverse(b.begin() + static_cast<std::ptrdiff_t>(at),
                         b.begin() + static_cast<std::ptrdiff_t>(at + 4));
        };
        swap32(0);
        std::swap(b[4], b[5]);
        std::swap(b[6], b[7]);
        for (std::size_t at = 8; at < 24; at += 4) {
            swap32(at);
        }
        std::size_t at = 24;
        while (at + 16 <= b.size()) {
            const std::uint32_t caplen = load_le32(&b[at + 8]);
            for (std::size_t k = 0; k < 16; k += 4) {
                swap32(at + k);
            }
            at += 16 + caplen;
        }
    }
    return b;
}

// A pcapng file: section header, one Ethernet interface, enhanced packet blocks.
Buffer pcapng_file(const std::vector<Buffer>& frames) {
    Buffer b;
    put_le32(b, 0x0A0D0D0Au);  // section header block
    put_le32(b, 28);
    put_le32(b, 0x1A2B3C4Du);
    put_le16(b, 1);
    put_le16(b, 0);
    put_le64(b, ~std::uint64_t{0});  // section length unknown
    put_le32(b, 28);
    put_le32(b, 1);  // interface description block
    put_le32(b, 20);
    put_le16(b, 1);  // LINKTYPE_ETHERNET
    put_le16(b, 0);
    put_le32(b, 0);  // no snaplen
    put_le32(b, 20);
    std::uint64_t ts = 1'700'000'000'000'000u;  // microseconds (default if_tsresol)
    for (const Buffer& f : frames) {
        const std::size_t padded = (f.size() + 3) & ~std::size_t{3};
        const auto total = static_cast<std::uint32_t>(32 + padded);
        put_le32(b, 6);  // enhanced packet block
        put_le32(b, total);
        put_le32(b, 0);
        put_le32(b, static_cast<std::uint32_t>(ts >> 32));
        put_le32(b, static_cast<std::uint32_t>(ts));
        put_le32(b, static_cast<std::uint32_t>(f.size()));
        put_le32(b, static_cast<std::uint32_t>(f.size()));
        b.insert(b.end(), f.begin(), f.end());
        b.resize(b.size() + padded - f.size(), 0);
        put_le32(b, total);
        ts += 10;
    }
    return b;
}

// --- the seeds ----------------------------------------------------------------

std::vector<FrameSpec> frame_variants() {
    std::vector<FrameSpec> v;
    for (const int vlans : {0, 1, 2}) {
        for (const std::size_t options : {std::size_t{0}, std::size_t{1}, std::size_t{10}}) {
            FrameSpec s;
            s.vlans = vlans;
            s.options = options;
            v.push_back(s);
        }
    }
    return v;
}

std::vector<Buffer> codif_seeds() {
    std::vector<Buffer> seeds;
    for (const CodifLayout layout : {CodifLayout::v2, CodifLayout::draft}) {
        CodifHeader h = codif_header(layout, 100, 7, 3);
        seeds.push_back(codif_input(h, 1, 0, 99, 98));  // valid, previous period
        seeds.push_back(codif_input(h, 0, h.frame_bytes(), 100, 6));
        seeds.push_back(codif_input(h, 0, 8192 + 64, 0, 0));  // length mismatch
        h.frame = 99;                                         // last frame of the period
        h.complex = true;
        h.invalid = true;
        seeds.push_back(codif_input(h, 1, 0, 100, 99));
        h.totalsamples = 128 * 100 + 1;  // no whole frames per period
        seeds.push_back(codif_input(h, 1, 0, 0, 0));
        h = codif_header(layout, 0xFFFFFFFFu, 0, 0xFFFF);
        h.period = 0xFFFF;
        h.nchan = 0xFFFF;  // draft: stored as 0xFFFE
        seeds.push_back(codif_input(h, 1, 0, 0, 0));
    }
    return seeds;
}

std::vector<Buffer> packet_seeds() {
    std::vector<Buffer> seeds;
    for (const FrameSpec& spec : frame_variants()) {
        for (const CodifLayout layout : {CodifLayout::v2, CodifLayout::draft}) {
            const Buffer f = codif_frame(spec, codif_header(layout, 100, 7));
            const auto po = static_cast<std::uint16_t>(payload_offset(spec));
            seeds.push_back(packet_input(0, 0xFFFF, 0, f));  // contiguous
            seeds.push_back(
                packet_input(0, static_cast<std::uint16_t>(po + 64), 0, f));  // verbs split
        }
        const Buffer f = codif_frame(spec, codif_header(CodifLayout::v2, 100, 7));
        seeds.push_back(packet_input(0, 30, 0, f));  // headers split
        seeds.push_back(packet_input(1, 0xFFFF, static_cast<std::uint16_t>(f.size() - 20), f));
        seeds.push_back(packet_input(2, 0xFFFF, 100, f));
        seeds.push_back(packet_input(3, 0xFFFF, 0, f));
    }
    seeds.push_back(packet_input(0, 0xFFFF, 0, arp_frame()));
    FrameSpec igmp;
    igmp.protocol = 2;
    seeds.push_back(packet_input(0, 0xFFFF, 0, udp_frame(igmp, Buffer(8, 0x11))));
    return seeds;
}

std::vector<Buffer> demux_seeds() {
    std::vector<Buffer> seeds;
    const CodifLayout v2 = CodifLayout::v2;
    const CodifLayout draft = CodifLayout::draft;
    FrameSpec a1;
    FrameSpec a2;
    a2.src = kAntenna2;
    a2.vlans = 1;
    FrameSpec a3;
    a3.src = kAntenna2;
    a3.dst = kGroup2;
    a3.vlans = 2;
    a3.options = 2;

    std::vector<Chunk> chunks;
    // Stream (group 1, antenna 1, thread 0), v2: in order, a gap, a duplicate,
    // a late frame, across the end of a period.
    for (const std::uint32_t frame : {97u, 98u, 0u, 2u, 2u, 1u, 5u}) {
        const std::uint32_t seconds = frame >= 97 ? 100u : 101u;
        chunks.push_back(whole(codif_frame(a1, codif_header(v2, seconds, frame))));
    }
    // Stream (group 1, antenna 2, thread 1), draft, VLAN: split like verbs
    // (headers + CODIF header in the head), split inside the CODIF header, and
    // a snaplen-truncated capture.
    const std::size_t po2 = payload_offset(a2);
    chunks.push_back(split_at(codif_frame(a2, codif_header(draft, 5, 0, 1)), po2 + 64));
    chunks.push_back(split_at(codif_frame(a2, codif_header(draft, 5, 1, 1)), po2 + 10));
    chunks.push_back(split_at(codif_frame(a2, codif_header(draft, 5, 2, 1)), 20));
    Buffer cut = codif_frame(a2, codif_header(draft, 5, 3, 1));
    cut.resize(po2 + 40);
    chunks.push_back(Chunk{cut, 0, 2, 100});
    // Stream (group 2, antenna 2, thread 9), QinQ + IP options.
    chunks.push_back(whole(codif_frame(a3, codif_header(v2, 7, 0, 9))));
    chunks.push_back(split_at(codif_frame(a3, codif_header(v2, 7, 1, 9)), payload_offset(a3)));
    // Same stream, changed period; a frame beyond the period; a zero field.
    CodifHeader changed = codif_header(v2, 7, 2, 9);
    changed.period = 2;
    chunks.push_back(whole(codif_frame(a3, changed)));
    chunks.push_back(whole(codif_frame(a3, codif_header(v2, 7, 100, 9))));
    CodifHeader zero = codif_header(v2, 7, 3, 9);
    zero.nbits = 0;
    chunks.push_back(whole(codif_frame(a3, zero)));
    // Not CODIF: ARP, IGMP, a short UDP datagram, UDP without a sync word.
    chunks.push_back(whole(arp_frame()));
    FrameSpec igmp;
    igmp.protocol = 2;
    chunks.push_back(whole(udp_frame(igmp, Buffer(8, 0x11))));
    chunks.push_back(whole(udp_frame(a1, Buffer(16, 0x22))));
    chunks.push_back(whole(udp_frame(a1, Buffer(100, 0x33))));
    chunks.push_back(Chunk{Buffer(10, 0x44), 0, 4, 3});  // runt, wire shorter than captured

    seeds.push_back(demux_input(0xFC, chunks));  // no lists, limits 4 / 4 / 16
    seeds.push_back(demux_input(0x03, chunks));  // group and antenna lists, limits 1 / 1 / 1
    seeds.push_back(demux_input(0x41, chunks, {kGroup2, kPort}, kAntenna2));
    std::vector<Chunk> streams;
    for (std::uint16_t thread = 0; thread < 20; ++thread) {  // past the stream limit
        streams.push_back(whole(codif_frame(a1, codif_header(v2, 1, 0, thread))));
    }
    seeds.push_back(demux_input(0x7C, streams));
    return seeds;
}

std::vector<Buffer> pcap_seeds() {
    std::vector<Buffer> frames;
    FrameSpec a1;
    FrameSpec a2;
    a2.src = kAntenna2;
    a2.vlans = 2;
    a2.options = 1;
    for (std::uint32_t frame = 0; frame < 4; ++frame) {
        frames.push_back(codif_frame(a1, codif_header(CodifLayout::v2, 10, frame)));
        frames.push_back(codif_frame(a2, codif_header(CodifLayout::draft, 10, 3 - frame, 2)));
    }
    frames.push_back(arp_frame());
    std::vector<Buffer> seeds;
    seeds.push_back(pcap_file(frames));
    seeds.push_back(pcap_file(frames, false));
    seeds.push_back(pcap_file(frames, true, true));
    seeds.push_back(pcap_file(frames, true, false, kPcapLinkTypeEthernet, 80));  // snaplen 80
    seeds.push_back(pcap_file(frames, true, false, 113));  // Linux cooked: refused at open
    seeds.push_back(pcapng_file(frames));
    return seeds;
}

// --- mutation -----------------------------------------------------------------

class Rng {
  public:
    explicit Rng(std::uint64_t seed) : state_(seed) {}
    std::uint64_t next() {  // splitmix64
        std::uint64_t z = (state_ += 0x9E3779B97F4A7C15u);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
        return z ^ (z >> 31);
    }
    std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(next() % n); }
    std::uint8_t byte() { return static_cast<std::uint8_t>(next()); }

  private:
    std::uint64_t state_;
};

void store_value(Buffer& b, std::size_t at, std::size_t width, std::uint64_t v, bool big) {
    for (std::size_t i = 0; i < width && at + i < b.size(); ++i) {
        const std::size_t shift = 8 * (big ? width - 1 - i : i);
        b[at + i] = static_cast<std::uint8_t>(v >> shift);
    }
}

Buffer mutate(const std::vector<Buffer>& seeds, Rng& rng) {
    Buffer b = seeds[rng.below(seeds.size())];
    const std::size_t ops = 1 + rng.below(4);
    for (std::size_t op = 0; op < ops; ++op) {
        const std::size_t at = rng.below(b.size() + 1);
        const bool inside = at < b.size();
        const auto pos = b.begin() + static_cast<std::ptrdiff_t>(at);
        switch (rng.below(10)) {
            case 0:
                if (inside) {
                    b[at] = static_cast<std::uint8_t>(b[at] ^ (1u << rng.below(8)));
                }
                break;
            case 1:
                if (inside) {
                    b[at] = 0;
                }
                break;
            case 2:
                if (inside) {
                    b[at] = 0xFF;
                }
                break;
            case 3:
                if (inside) {
                    b[at] = rng.byte();
                }
                break;
            case 4:
                b.resize(at);
                break;
            case 5: {
                Buffer ins(1 + rng.below(8));
                for (auto& x : ins) {
                    x = rng.byte();
                }
                b.insert(pos, ins.begin(), ins.end());
                break;
            }
            case 6:
                b.erase(pos, pos + static_cast<std::ptrdiff_t>(
                                       std::min<std::size_t>(1 + rng.below(16), b.size() - at)));
                break;
            case 7:
            case 8: {
                static constexpr std::array<std::uint64_t, 10> kValues = {
                    0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x8000, 0x7FFFFFFFu, 0xFFFFFFFFu};
                const std::size_t width = std::size_t{1} << (1 + rng.below(3));  // 2, 4, 8
                std::uint64_t v =
                    rng.below(4) == 0 ? rng.next() : kValues[rng.below(kValues.size())];
                if (rng.below(4) == 0) {
                    v = ~v;
                }
                store_value(b, at, width, v, rng.below(2) == 0);
                break;
            }
            default: {  // splice: a piece of another seed over or into this one
                const Buffer& other = seeds[rng.below(seeds.size())];
                const std::size_t from = rng.below(other.size());
                const std::size_t len =
                    std::min<std::size_t>(1 + rng.below(64), other.size() - from);
                const auto src = other.begin() + static_cast<std::ptrdiff_t>(from);
                if (rng.below(2) == 0) {
                    b.insert(pos, src, src + static_cast<std::ptrdiff_t>(len));
                } else {
                    for (std::size_t i = 0; i < len && at + i < b.size(); ++i) {
                        b[at + i] = other[from + i];
                    }
                }
                break;
            }
        }
    }
    return b;
}

// --- drivers --------------------------------------------------------------------

// Runs one input (in a buffer of exactly its size); "" when the entry returned
// 0 and every FUZZ_CHECK held, else what went wrong.
std::string run_one(Entry entry, const Buffer& input) {
    fuzz::take_failure();
    const Buffer exact(input.begin(), input.end());
    const int rc = entry(exact.data(), exact.size());
    std::string failure = fuzz::take_failure();
    if (rc != 0 && failure.empty()) {
        failure = "entry returned " + std::to_string(rc);
    }
    return failure;
}

class Campaign {
  public:
    Campaign(const char* name, Entry entry) : name_(name), entry_(entry) {}
    Campaign(const Campaign&) = delete;
    Campaign& operator=(const Campaign&) = delete;

    void run(const Buffer& input, const char* kind) {
        ++executions_;
        const std::string failure = run_one(entry_, input);
        if (!failure.empty() && ++failures_ <= kMaxReportedFailures) {
            ADD_FAILURE() << name_ << " (" << kind << " input): " << failure
                          << "\n  input: " << hex(input);
        }
    }

    void run_all(const std::vector<Buffer>& seeds, std::uint64_t rng_seed) {
        const auto start = std::chrono::steady_clock::now();
        ASSERT_FALSE(seeds.empty());
        write_seeds(seeds);
        for (const Buffer& s : seeds) {
            run(s, "seed");
        }
        for (const Buffer& s : seeds) {
            for (std::size_t n = 0; n < s.size(); ++n) {
                run(Buffer(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(n)),
                    "truncated seed");
            }
        }
        Rng rng(rng_seed);
        for (std::size_t i = 0; i < kMutations; ++i) {
            run(mutate(seeds, rng), "mutated seed");
        }
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        std::printf("[ replay   ] %s: %zu seeds, %zu executions in %.2f s\n", name_, seeds.size(),
                    executions_, took.count());
        EXPECT_EQ(failures_, 0u) << name_ << ": " << failures_ << " failing inputs";
    }

  private:
    // IBVCAP_FUZZ_SEED_DIR=DIR writes the seeds to DIR/<target>/seed-N: a
    // starting corpus for the libFuzzer programs (CMakeLists.txt).
    void write_seeds(const std::vector<Buffer>& seeds) const {
        const char* dir = std::getenv("IBVCAP_FUZZ_SEED_DIR");
        if (dir == nullptr || dir[0] == '\0') {
            return;
        }
        const std::filesystem::path target = std::filesystem::path(dir) / name_;
        std::filesystem::create_directories(target);
        for (std::size_t i = 0; i < seeds.size(); ++i) {
            std::ofstream out(target / ("seed-" + std::to_string(i)), std::ios::binary);
            out.write(reinterpret_cast<const char*>(seeds[i].data()),
                      static_cast<std::streamsize>(seeds[i].size()));
            EXPECT_TRUE(out.good()) << "cannot write seeds to " << target;
        }
    }

    const char* name_;
    Entry entry_;
    std::size_t executions_ = 0;
    std::size_t failures_ = 0;
};

// The seeds are what they claim to be: the valid ones parse and decode.
TEST(FuzzSeeds, FramesAreValidCodif) {
    for (const FrameSpec& spec : frame_variants()) {
        for (const CodifLayout layout : {CodifLayout::v2, CodifLayout::draft}) {
            const CodifHeader h = codif_header(layout, 100, 7);
            const Buffer f = codif_frame(spec, h);
            UdpPacket pkt;
            ASSERT_EQ(parse_udp_frame(f, f.size(), pkt), PacketError::none)
                << "vlans " << spec.vlans << " options " << spec.options;
            EXPECT_EQ(pkt.vlan_count, spec.vlans);
            EXPECT_EQ(pkt.ip_options, spec.options > 0);
            EXPECT_EQ(pkt.payload_offset, payload_offset(spec));
            CodifHeader decoded;
            ASSERT_EQ(decode_codif(Bytes(f).subspan(pkt.payload_offset), decoded),
                      CodifError::none);
            EXPECT_EQ(decoded, h);
            EXPECT_EQ(validate_codif(decoded, pkt.payload_bytes), CodifError::none);
            EXPECT_EQ(codif_frames_per_period(decoded), 100u);
        }
    }
}

// fuzz_window: the demux seeds behind windows over their frames (seconds 1
// to 101 past epoch 48), a narrow one, one past them all and an open one
// from the epoch's start, in fuzz_window.cpp's encoding.
std::vector<Buffer> window_seeds() {
    constexpr std::int64_t kSecond = 1'000'000'000;
    const struct {
        std::int64_t start_ns;   // from epoch 48's start
        std::int64_t length_ns;  // 0: no stop
    } windows[] = {{5 * kSecond, 96 * kSecond},
                   {7 * kSecond, kSecond / 100},
                   {200 * kSecond, kSecond},
                   {-kSecond, 0}};
    std::vector<Buffer> seeds;
    for (const Buffer& d : demux_seeds()) {
        for (const auto& w : windows) {
            Buffer b;
            put_le64(b, static_cast<std::uint64_t>(w.start_ns + (std::int64_t{1} << 62)) << 1);
            put_le64(b, static_cast<std::uint64_t>(w.length_ns) << 2);
            b.insert(b.end(), d.begin(), d.end());
            seeds.push_back(std::move(b));
        }
    }
    return seeds;
}

TEST(FuzzReplay, Codif) {
    Campaign c("fuzz_codif", ibvcap_fuzz_codif);
    c.run_all(codif_seeds(), 1);
}

TEST(FuzzReplay, Packet) {
    Campaign c("fuzz_packet", ibvcap_fuzz_packet);
    c.run_all(packet_seeds(), 2);
}

TEST(FuzzReplay, Demux) {
    Campaign c("fuzz_demux", ibvcap_fuzz_demux);
    c.run_all(demux_seeds(), 3);
}

TEST(FuzzReplay, Window) {
    Campaign c("fuzz_window", ibvcap_fuzz_window);
    c.run_all(window_seeds(), 5);
}

TEST(FuzzReplay, PcapFile) {
    Campaign c("fuzz_pcap_file", ibvcap_fuzz_pcap_file);
    c.run_all(pcap_seeds(), 4);
}

// --- regressions: inputs for the bugs found while fuzzing ---------------------

constexpr int kCheckFailedExit = 97;

// Runs `input` through `entry` in a child process (known bugs not skipped) with
// a time limit: a failed check, a crash or a hang fails the test.
void expect_clean_in_child(Entry entry, const Buffer& input, unsigned seconds = 2) {
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
        ::alarm(seconds);
        const std::string failure = run_one(entry, input);
        if (!failure.empty()) {
            std::fprintf(stderr, "%s\n", failure.c_str());
            std::fflush(stderr);
        }
        ::_exit(failure.empty() ? 0 : kCheckFailedExit);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        ADD_FAILURE() << (sig == SIGALRM
                              ? "hang: still running after " + std::to_string(seconds) + " s"
                              : "killed by signal " + std::to_string(sig))
                      << "\n  input: " << hex(input);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == kCheckFailedExit) {
        ADD_FAILURE() << "a FUZZ_CHECK failed (message above)\n  input: " << hex(input);
    } else {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
            << "exit status " << WEXITSTATUS(status)
            << " (a sanitizer report above?)\n  input: " << hex(input);
    }
}

// A valid v2 header: 1 channel of 64-bit samples, 8-byte payload (1 sample a
// frame), period 1 s, and `totalsamples` frames per period.
CodifHeader huge_period_header(std::uint64_t totalsamples, std::uint32_t seconds,
                               std::uint32_t frame) {
    CodifHeader h;
    h.layout = CodifLayout::v2;
    h.seconds = seconds;
    h.frame = frame;
    h.nbits = 64;
    h.nchan = 1;
    h.period = 1;
    h.framelength8 = 1;
    h.totalsamples = totalsamples;
    return h;
}

// formats/codif.cpp CodifTiming::gap: `periods * frames_per_period` in int64
// overflows (UB) for a frames per period that a validated header can give:
// here 2^62 frames per period and 4 periods between the two frames.
TEST(FuzzRegression, CodifTimingGapOverflow) {
    expect_clean_in_child(
        ibvcap_fuzz_codif,
        codif_input(huge_period_header(std::uint64_t{1} << 62, 4, 0), 1, 0, 0, 0));
}

// formats/codif.hpp CodifTiming::index divides by `period` unguarded (next()
// and gap() treat 0 as 1): a period-0 timing raises SIGFPE.
TEST(FuzzRegression, CodifTimingIndexPeriodZero) {
    CodifHeader h = codif_header(CodifLayout::v2, 100, 7);
    h.period = 0;
    expect_clean_in_child(ibvcap_fuzz_codif, codif_input(h, 1, 0, 0, 0));
}

// formats/codif.cpp CodifTiming::next: with 2^33 frames per period (a header
// validate_codif accepts), the frame after 0xFFFFFFFF is 2^32, which the 32-bit
// frame number cannot hold: next() returns (100, 0), neither (s, f+1) nor
// (s + period, 0), and gap() from the frame to its "next" is -2^32, not 0.
TEST(FuzzRegression, CodifTimingNextPastFrame32) {
    expect_clean_in_child(
        ibvcap_fuzz_codif,
        codif_input(huge_period_header(std::uint64_t{1} << 33, 100, 0xFFFFFFFFu), 1, 0, 100, 0));
}

// lib/ledger/sequence.cpp SequenceTracker::observe: the loop
// `for (i = newest_ + 1; i <= index; ++i)` never ended when index was 2^64-1.
// Two valid CODIF frames of one stream with totalsamples 2^64-1 (frames per
// period 2^64-1) at (2 s, frame 0) and (2 s, frame 1) have indices 2^64-2 and
// 2^64-1: the demux thread hung on the second frame (fixed by counting the loop
// by offset; these keep it fixed).
std::vector<Buffer> hang_frames() {
    const std::uint64_t all = std::numeric_limits<std::uint64_t>::max();
    return {codif_frame(FrameSpec{}, huge_period_header(all, 2, 0)),
            codif_frame(FrameSpec{}, huge_period_header(all, 2, 1))};
}

TEST(FuzzRegression, DemuxSequenceHangAtMaxIndex) {
    const auto frames = hang_frames();
    expect_clean_in_child(ibvcap_fuzz_demux,
                          demux_input(0xFC, {whole(frames[0]), whole(frames[1])}));
}

// The same two frames in a pcap file (`ibvcap read -r FILE` hung).
TEST(FuzzRegression, PcapFileSequenceHangAtMaxIndex) {
    expect_clean_in_child(ibvcap_fuzz_pcap_file, pcap_file(hang_frames()));
}

}  // namespace
}  // namespace ibvcap
