// Test-only helper for test/e2e/wireshark.sh (the VDIF Wireshark dissector,
// tools/wireshark/vdif.lua):
//
//   vdif_fields dump FILE.pcap vdif|vtp LOPORT HIPORT FPS
//     one CSV line per UDP datagram of FILE whose destination port is in
//     [LOPORT, HIPORT], as ibvcap decodes it (parse_udp_frame,
//     decode_stream_header, decode_vdif, the EDV views): the pcap frame number,
//     then every header field, in the column order and the value formats of
//     `tshark -T fields -E separator=,` with the -e list that wireshark.sh
//     passes (fields a frame does not have are empty; a datagram too short for
//     its header has only the frame number). With FPS > 0 the absolute index
//     (seconds * FPS + frame) and the gap from the stream's previous frame, as
//     vdif.lua's preference vdif.frames_per_second gives them.
//
//   vdif_fields write FILE.pcap vdif|vtp
//     writes VDIF datagrams (vtp: each after an 8-byte little-endian sequence
//     number) to UDP ports 46220 and 46221, and one to 46300: frames of every
//     EDV (0, 1, 2, 3, 4, an unknown one) and legacy frames built by ibvcap's
//     encoder and EDV views with swept field values; frames built the way
//     DiFX's vdifio builds them (createVDIFHeader, its setters and EDV structs,
//     test/vdifio_transcript.hpp) and the way baseband's fromvalues does
//     (test/baseband_vdif_transcript.hpp); gaps, a repeat and a late frame; a
//     frame whose first four bytes are 04 00 00 00 (WireGuard's "Transport
//     Data" to its heuristic); a frame length that disagrees with the datagram;
//     and a datagram too short for a header. Written with libpcap's pcap_dump.
#include <pcap/pcap.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "baseband_vdif_transcript.hpp"
#include "formats/packet.hpp"
#include "formats/stream_decode.hpp"
#include "formats/vdif.hpp"
#include "test/frames.hpp"
#include "vdifio_transcript.hpp"

namespace {

using namespace ibvcap;
namespace vio = ibvcap::test::vdifio;
namespace bb = ibvcap::test::baseband_vdif;

const char* flag(bool b) {
    return b ? "1" : "0";
}

std::string hex32(std::uint32_t v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%08x", v);
    return buf;
}

std::string hex64(std::uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
    return buf;
}

template <class T>
std::string dec(T v) {
    return std::to_string(v);
}

// The columns after frame.number, in wireshark.sh's order: vdif.psn,
// words 0-3, vdif.edv, vdif.extended1-4, EDV 1 (4), EDV 2 (6), EDV 3 (12),
// EDV 4 (4), vdif.index, vdif.gap.
constexpr int kColumns = 1 + 13 + 4 + 4 + 6 + 12 + 4 + 2;

int dump(const char* path, StreamFormat format, unsigned lo, unsigned hi, std::uint64_t fps) {
    char err[PCAP_ERRBUF_SIZE];
    pcap_t* p = pcap_open_offline(path, err);
    if (p == nullptr) {
        std::fprintf(stderr, "vdif_fields: %s\n", err);
        return 1;
    }
    // Per stream (source, group, port, station, thread): its previous index.
    std::map<std::tuple<std::uint32_t, std::uint32_t, std::uint16_t, std::uint16_t, std::uint16_t>,
             std::uint64_t>
        last;
    pcap_pkthdr* hdr = nullptr;
    const u_char* data = nullptr;
    unsigned number = 0;
    while (pcap_next_ex(p, &hdr, &data) == 1) {
        ++number;
        UdpPacket u;
        const Bytes frame(data, hdr->caplen);
        if (parse_udp_frame(frame, hdr->caplen, u) != PacketError::none || u.dst_port < lo ||
            u.dst_port > hi) {
            continue;
        }
        const Bytes payload = frame.subspan(u.payload_offset, u.payload_bytes);
        StreamHeader s;
        const Bytes head = payload.first(std::min(payload.size(), kStreamHeaderMaxBytes));
        VdifHeader h;
        if (decode_stream_header(format, head, s) != StreamError::none ||
            decode_vdif(head.subspan(s.prefix_bytes), h) != VdifError::none) {
            std::printf("%u%s\n", number, std::string(kColumns, ',').c_str());
            continue;
        }
        std::vector<std::string> c;
        c.push_back(s.has_psn ? dec(s.psn) : "");
        c.push_back(flag(h.invalid));
        c.push_back(flag(h.legacy));
        c.push_back(dec(h.seconds));
        c.push_back(dec(unsigned{h.epoch}));
        c.push_back(dec(h.frame));
        c.push_back(dec(unsigned{h.version}));
        c.push_back(dec(h.nchan()));
        c.push_back(dec(h.frame_bytes()));
        c.push_back(flag(h.complex));
        c.push_back(dec(unsigned{h.nbits}));
        c.push_back(dec(h.thread));
        c.push_back(dec(h.station));
        c.push_back(h.legacy ? "" : dec(unsigned{h.edv}));
        const int edv = h.legacy ? -1 : h.edv;
        const bool known = edv >= 1 && edv <= 4;
        for (int i = 0; i < 4; ++i) {
            c.push_back(edv >= 0 && !known ? hex32(h.extended[static_cast<std::size_t>(i)]) : "");
        }
        const VdifEdv1 e1 = decode_vdif_edv1(h);
        for (const std::string& v : {dec(e1.sample_rate), std::string(flag(e1.sample_rate_mhz)),
                                     hex32(e1.sync), hex64(e1.das_id)}) {
            c.push_back(edv == 1 ? v : "");
        }
        const VdifEdv2 e2 = decode_vdif_edv2(h);
        for (const std::string& v :
             {std::string(flag(e2.pol)), dec(unsigned{e2.quadrant_minus1}),
              std::string(flag(e2.correlator)), hex32(e2.sync), hex32(e2.status), dec(e2.psn)}) {
            c.push_back(edv == 2 ? v : "");
        }
        const VdifEdv3 e3 = decode_vdif_edv3(h);
        for (const std::string& v :
             {dec(e3.sample_rate), std::string(flag(e3.sample_rate_mhz)), hex32(e3.sync),
              dec(e3.loif_tuning), dec(unsigned{e3.personality}), dec(unsigned{e3.minor_rev}),
              dec(unsigned{e3.major_rev}), std::string(flag(e3.sideband_upper)),
              dec(unsigned{e3.subband}), dec(unsigned{e3.if_number}), dec(unsigned{e3.dbe_unit}),
              dec(unsigned{e3.unassigned})}) {
            c.push_back(edv == 3 ? v : "");
        }
        const VdifEdv4 e4 = decode_vdif_edv4(h);
        for (const std::string& v : {dec(e4.unassigned), dec(unsigned{e4.mask_length}),
                                     hex32(e4.sync), hex64(e4.validity_mask)}) {
            c.push_back(edv == 4 ? v : "");
        }
        std::string index_s;
        std::string gap_s;
        if (fps != 0) {
            const std::uint64_t index = std::uint64_t{h.seconds} * fps + h.frame;
            index_s = dec(index);
            const auto key = std::make_tuple(u.src_ip, u.dst_ip, u.dst_port, h.station, h.thread);
            if (const auto it = last.find(key); it != last.end()) {
                gap_s = dec(static_cast<std::int64_t>(index - it->second) - 1);
            }
            last[key] = index;
        }
        c.push_back(index_s);
        c.push_back(gap_s);
        std::string line = std::to_string(number);
        for (const std::string& v : c) {
            line += "," + v;
        }
        std::printf("%s\n", line.c_str());
    }
    pcap_close(p);
    return 0;
}

struct Writer {
    pcap_t* dead = nullptr;
    pcap_dumper_t* d = nullptr;
    bool vtp = false;
    std::uint16_t ip_id = 0;
    std::uint64_t psn = 1000;

    // One datagram: the VTP sequence number (vtp), `frame`'s bytes, payload
    // bytes up to `datagram_frame_bytes`.
    void put(const std::uint8_t* header, std::size_t header_bytes, std::size_t frame_bytes,
             std::uint16_t port, std::uint32_t src = (10u << 24) | 11u) {
        UdpHeaderSpec spec;
        spec.src_ip = src;
        spec.dst_ip = (239u << 24) | (17u << 16) | 5u;
        spec.src_port = 50000;
        spec.dst_port = port;
        spec.ip_id = ip_id;
        const std::size_t prefix = vtp ? kVtpPsnBytes : 0;
        std::vector<std::uint8_t> f = test::udp_frame(spec, prefix + frame_bytes);
        const std::size_t off = f.size() - prefix - frame_bytes;
        if (vtp) {
            store_le64(f.data() + off, psn++);
        }
        const std::size_t copy = std::min(header_bytes, frame_bytes);
        std::memcpy(f.data() + off + prefix, header, copy);
        for (std::size_t i = copy; i < frame_bytes; ++i) {
            f[off + prefix + i] = static_cast<std::uint8_t>(i * 13 + ip_id);
        }
        pcap_pkthdr h{};
        h.ts.tv_sec = 1767225600 + ip_id;
        h.caplen = h.len = static_cast<bpf_u_int32>(f.size());
        pcap_dump(reinterpret_cast<u_char*>(d), &h, f.data());
        ++ip_id;
    }
    void put(const VdifHeader& h, std::uint16_t port) {
        std::array<std::uint8_t, kVdifHeaderBytes> b{};
        encode_vdif(h, b);
        put(b.data(), h.header_bytes(), h.frame_bytes(), port);
    }
};

int write(const char* path, bool vtp) {
    Writer w;
    w.vtp = vtp;
    w.dead = pcap_open_dead(DLT_EN10MB, 262144);
    w.d = pcap_dump_open(w.dead, path);
    if (w.d == nullptr) {
        std::fprintf(stderr, "vdif_fields: %s: %s\n", path, pcap_geterr(w.dead));
        pcap_close(w.dead);
        return 1;
    }
    std::mt19937_64 rng(vtp ? 2 : 1);
    auto r32 = [&] { return static_cast<std::uint32_t>(rng()); };

    // ibvcap's encoder: one stream per EDV (and a legacy one), frames 0..5 of
    // second 2000 then 8 (two missing), 8 again (a repeat), 7 (late), next
    // second's 0; every frame's header fields and EDV fields drawn afresh
    // (stream key kept).
    const int edvs[] = {-1, 0, 1, 2, 3, 4, 0x42};
    std::uint16_t thread = 1;
    for (const int edv : edvs) {
        for (const std::uint32_t seq : {0u, 1u, 2u, 3u, 4u, 5u, 8u, 8u, 7u, 10u}) {
            VdifHeader h;
            h.legacy = edv < 0;
            h.invalid = (r32() & 1) != 0;
            h.seconds = 2000 + seq / 10;
            h.frame = seq % 10;
            h.epoch = static_cast<std::uint8_t>(r32() & 0x3F);
            h.log2_nchan = static_cast<std::uint8_t>(r32() % 32);
            h.version = static_cast<std::uint8_t>(r32() & 7);
            h.station = static_cast<std::uint16_t>(0x4100 + thread);
            h.thread = thread;
            h.nbits = static_cast<std::uint8_t>(1 + r32() % 32);
            h.complex = (r32() & 1) != 0;
            h.framelength8 =
                static_cast<std::uint32_t>((h.header_bytes() + 8 * (1 + r32() % 16)) / 8);
            switch (edv) {
                case 1:
                    encode_vdif_edv(VdifEdv1{r32() & 0x7FFFFFu, (r32() & 1) != 0,
                                             (r32() & 1) ? kVdifEdvSyncWord : r32(),
                                             0x3433344B5443494Eull ^ (rng() & 0xFF)},
                                    h);
                    break;
                case 2:
                    encode_vdif_edv(VdifEdv2{(r32() & 1) != 0, static_cast<std::uint8_t>(r32() & 3),
                                             (r32() & 1) != 0, r32() & 0xFFFFFu, r32(), rng()},
                                    h);
                    break;
                case 3:
                    encode_vdif_edv(VdifEdv3{r32() & 0x7FFFFFu, (r32() & 1) != 0, kVdifEdvSyncWord,
                                             r32(), static_cast<std::uint8_t>(r32()),
                                             static_cast<std::uint8_t>(r32() & 0xF),
                                             static_cast<std::uint8_t>(r32() & 0xF),
                                             (r32() & 1) != 0, static_cast<std::uint8_t>(r32() & 7),
                                             static_cast<std::uint8_t>(r32() & 0xF),
                                             static_cast<std::uint8_t>(r32() & 0xF),
                                             static_cast<std::uint8_t>(r32() & 0xF)},
                                    h);
                    break;
                case 4:
                    encode_vdif_edv(
                        VdifEdv4{static_cast<std::uint16_t>(r32()),
                                 static_cast<std::uint8_t>(r32()), kVdifEdvSyncWord, rng()},
                        h);
                    break;
                default:
                    if (edv >= 0) {
                        h.edv = static_cast<std::uint8_t>(edv);
                        h.extended = {r32() & 0xFFFFFFu, r32(), r32(), r32()};
                        if (edv == 0 && seq < 5) {
                            h.extended = {};
                        }
                    }
                    break;
            }
            w.put(h, thread % 2 == 0 ? 46220 : 46221);
        }
        ++thread;
    }

    // vdifio: createVDIFHeader and nextVDIFHeader, 8 frames per second; the
    // EDV structs filled field by field.
    {
        vio::vdif_header v;
        vio::createVDIFHeader(v, 1024, 17, 2, 8, 0, "Pk");
        vio::setVDIFEpoch(v, 50);
        vio::setVDIFFrameEpochSecOffset(v, 300);
        vio::setVDIFFrameNumber(v, 6);
        for (int i = 0; i < 4; ++i) {
            w.put(reinterpret_cast<const std::uint8_t*>(&v), 32, 1024 + 32, 46220);
            vio::nextVDIFHeader(v, 8);
        }
        vio::vdif_edv3_header e3;
        std::memcpy(&e3, &v, sizeof e3);
        e3.eversion = 3;
        e3.samprate = 64;
        e3.samprateunits = 1;
        e3.syncword = 0xACABFEED;
        e3.tuning = 0x12345678;
        e3.personalitytype = 0xC3;
        e3.minorrev = 9;
        e3.majorrev = 2;
        e3.sideband = 1;
        e3.subband = 5;
        e3.ifnumber = 3;
        e3.dbeunit = 1;
        e3.unassigned2 = 0;
        e3.threadid = 18;
        w.put(reinterpret_cast<const std::uint8_t*>(&e3), 32, 1024 + 32, 46220);
        vio::vdif_edv4_header e4;
        std::memcpy(&e4, &v, sizeof e4);
        e4.eversion = 4;
        e4.dummy = 0;
        e4.masklength = 16;
        e4.syncword = 0xACABFEED;
        e4.validitymask = 0xBEEF;
        e4.threadid = 19;
        w.put(reinterpret_cast<const std::uint8_t*>(&e4), 32, 1024 + 32, 46220);
        vio::vdif_edv2_header_alma e2;
        std::memcpy(&e2, &v, sizeof e2);
        e2.eversion = 2;
        e2.polblock = 1;
        e2.quadrantminus1 = 2;
        e2.correlator = 1;
        e2.subsubversion = vio::VDIF_EDV2_SUBVER_ALMA;
        e2.picstatus = 0xCAFEF00D;
        e2.psn = 0x0102030405060708ull;
        e2.threadid = 20;
        w.put(reinterpret_cast<const std::uint8_t*>(&e2), 32, 1024 + 32, 46220);
        vio::vdif_edv1_header e1;
        std::memcpy(&e1, &v, sizeof e1);
        e1.eversion = 1;
        e1.samprate = 16000;
        e1.samprateunits = 0;
        e1.syncword = 0xACABFEED;
        std::memcpy(e1.name, "NICT-K34", 8);
        e1.threadid = 21;
        w.put(reinterpret_cast<const std::uint8_t*>(&e1), 32, 1024 + 32, 46220);
    }

    // baseband: fromvalues for EDV 1, 2, 3 and the tutorial's 4, and legacy.
    {
        const bb::Header hs[] = {
            bb::fromvalues(1,
                           {{"seconds", 400},
                            {"thread_id", 30},
                            {"sampling_rate", 32},
                            {"sampling_unit", 1},
                            {"das_id", 0x4142434445464748ull}},
                           {.bps = 2, .nchan = 4, .samples_per_frame = 256, .station = "Ef"}),
            bb::fromvalues(2, {{"seconds", 400},
                               {"thread_id", 31},
                               {"frame_length", 629},
                               {"pol", 1},
                               {"BL_quadrant", 1},
                               {"PSN", 77}}),
            bb::fromvalues(3,
                           {{"seconds", 400},
                            {"thread_id", 32},
                            {"frame_length", 129},
                            {"personality", 0xC3},
                            {"loif_tuning", 0x01000000},
                            {"sampling_rate", 4},
                            {"sampling_unit", 1}},
                           {.bps = 2}),
            bb::fromvalues(4,
                           {{"seconds", 400},
                            {"thread_id", 33},
                            {"frame_length", 36},
                            {"validity_mask_length", 60},
                            {"validity_mask", (1ull << 59) + 1}},
                           {.bps = 2, .station = std::uint16_t{65532}}),
            bb::fromvalues(-1, {{"seconds", 400}, {"thread_id", 34}, {"frame_nr", 3}},
                           {.payload_nbytes = 512, .bps = 8, .nchan = 2}),
        };
        for (const bb::Header& h : hs) {
            const auto bytes = h.bytes();
            w.put(bytes.data(), bytes.size(), h.frame_nbytes(), 46221);
        }
    }

    // Edge cases: first bytes 04 00 00 00 (seconds 4: WireGuard's heuristic
    // would take it); the widest fields; a frame length disagreeing with the
    // datagram; a frame on a port outside the range; too short for a header.
    {
        VdifHeader h;
        h.seconds = 4;
        h.nbits = 2;
        h.framelength8 = 12;
        h.thread = 40;
        w.put(h, 46220);
        h.seconds = 0x3FFFFFFF;
        h.invalid = true;
        h.frame = 0xFFFFFF;
        h.epoch = 63;
        h.log2_nchan = 31;
        h.version = 7;
        h.station = 0xFFFF;
        h.thread = 1023;
        h.nbits = 32;
        h.complex = true;
        h.edv = 0xFF;
        h.extended = {0xFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF};
        w.put(h, 46221);
        std::array<std::uint8_t, kVdifHeaderBytes> b{};
        h.framelength8 = 100;  // says 800 bytes; the datagram holds 96
        h.thread = 41;
        encode_vdif(h, b);
        w.put(b.data(), b.size(), 96, 46220);
        w.put(b.data(), b.size(), 96, 46300);
        w.put(b.data(), b.size(), 10, 46220);
    }
    pcap_dump_close(w.d);
    pcap_close(w.dead);
    return 0;
}

std::optional<StreamFormat> format_arg(const char* s) {
    const auto f = parse_stream_format(s);
    if (!f || *f == StreamFormat::codif) {
        return std::nullopt;
    }
    return f;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 7 && std::strcmp(argv[1], "dump") == 0 && format_arg(argv[3])) {
        return dump(argv[2], *format_arg(argv[3]), static_cast<unsigned>(std::atoi(argv[4])),
                    static_cast<unsigned>(std::atoi(argv[5])), std::strtoull(argv[6], nullptr, 10));
    }
    if (argc == 4 && std::strcmp(argv[1], "write") == 0 && format_arg(argv[3])) {
        return write(argv[2], *format_arg(argv[3]) == StreamFormat::vtp);
    }
    std::fprintf(stderr,
                 "usage: vdif_fields dump FILE.pcap vdif|vtp LOPORT HIPORT FPS\n"
                 "       vdif_fields write FILE.pcap vdif|vtp\n");
    return 2;
}
