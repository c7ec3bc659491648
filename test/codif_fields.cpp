// Test-only helper for test/e2e/wireshark.sh (the CODIF Wireshark dissector,
// tools/wireshark/codif.lua):
//
//   codif_fields dump FILE.pcap
//     one CSV line per CODIF frame of FILE, as ibvcap decodes it (parse_udp_frame,
//     decode_codif, codif_frames_per_period, CodifTiming): the pcap frame number,
//     then every header field and the sequence position, in the column order and
//     the value formats of `tshark -T fields -E separator=,` with the -e list
//     that wireshark.sh passes (fields a layout does not have are empty).
//
//   codif_fields write-independent FILE.pcap
//     writes frames whose CODIF headers are built the way DiFX's codifio builds
//     them (createCODIFHeader and the setters, transcribed in
//     test/codifio_transcript.hpp), not by ibvcap's encoder, in both layouts,
//     with a frame number 4 (WireGuard's "Transport Data" type byte), a gap and a
//     repeat, a header-only frame and a draft frame of 65536 channels; written
//     with libpcap's pcap_dump, not ibvcap's writer.
#include <pcap/pcap.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "codifio_transcript.hpp"
#include "formats/codif.hpp"
#include "formats/packet.hpp"
#include "test/frames.hpp"

namespace {

using namespace ibvcap;
namespace cio = ibvcap::test::codifio;

const char* flag(bool b) {
    return b ? "1" : "0";
}

int dump(const char* path) {
    char err[PCAP_ERRBUF_SIZE];
    pcap_t* p = pcap_open_offline(path, err);
    if (p == nullptr) {
        std::fprintf(stderr, "codif_fields: %s\n", err);
        return 1;
    }
    // Per stream (source, group, port, thread): the index of its previous frame.
    std::map<std::tuple<std::uint32_t, std::uint32_t, std::uint16_t, std::uint16_t>, std::uint64_t>
        last;
    pcap_pkthdr* hdr = nullptr;
    const u_char* data = nullptr;
    unsigned number = 0;
    while (pcap_next_ex(p, &hdr, &data) == 1) {
        ++number;
        UdpPacket u;
        const Bytes frame(data, hdr->caplen);
        if (parse_udp_frame(frame, hdr->caplen, u) != PacketError::none ||
            u.payload_bytes < kCodifHeaderBytes ||
            hdr->caplen < u.payload_offset + kCodifHeaderBytes) {
            continue;
        }
        CodifHeader h;
        if (decode_codif(frame.subspan(u.payload_offset, kCodifHeaderBytes), h) !=
            CodifError::none) {
            continue;
        }
        const bool v2 = h.layout == CodifLayout::v2;
        std::string v2only;
        if (v2) {
            char buf[160];
            std::snprintf(buf, sizeof buf, "%s,%s", flag(h.power), flag(h.cal));
            v2only = buf;
        } else {
            v2only = ",";
        }
        std::printf("%u,%s,%u,%u,%u,%u,%s,%s,%s,%u,%u,", number,
                    std::string(to_string(h.layout)).c_str(), h.frame, h.seconds, h.epoch, h.nbits,
                    v2only.c_str(), flag(h.invalid), flag(h.complex), h.representation, h.version);
        if (v2) {
            std::printf("%u,", h.protocol);
        } else {
            std::printf(",");
        }
        std::printf("%u,%u,%u,", h.period, h.threadid, h.groupid);
        if (v2) {
            std::printf("%u,", h.secondaryid);
        } else {
            std::printf(",");
        }
        std::printf("%u,%u,%u,%llu,%llu,0x%08x,", h.stationid, h.nchan, h.blocklength,
                    static_cast<unsigned long long>(h.payload_bytes()),
                    static_cast<unsigned long long>(h.totalsamples),
                    v2 ? kCodifSyncV2 : kCodifSyncDraft);
        if (v2) {
            std::printf("%u,%u,0x%016llx,0x%016llx,", h.metaid, h.meta1,
                        static_cast<unsigned long long>(h.metadata[0]),
                        static_cast<unsigned long long>(h.metadata[1]));
        } else {
            std::printf(",,,,");
        }
        const std::uint64_t spf = codif_samples_per_frame(h);
        const std::uint64_t fpp = codif_frames_per_period(h);
        std::string spf_s = spf != 0 ? std::to_string(spf) : "";
        std::string fpp_s = fpp != 0 ? std::to_string(fpp) : "";
        std::string index_s;
        std::string gap_s;
        if (fpp != 0 && h.period != 0) {
            const CodifTiming timing{h.period, fpp};
            const std::uint64_t index = timing.index(h.seconds, h.frame);
            index_s = std::to_string(index);
            const auto key = std::make_tuple(u.src_ip, u.dst_ip, u.dst_port, h.threadid);
            if (const auto it = last.find(key); it != last.end()) {
                gap_s = std::to_string(static_cast<std::int64_t>(index - it->second) - 1);
            }
            last[key] = index;
        }
        std::printf("%s,%s,%s,%s\n", spf_s.c_str(), fpp_s.c_str(), index_s.c_str(), gap_s.c_str());
    }
    pcap_close(p);
    return 0;
}

std::vector<std::uint8_t> ethernet_frame(const std::uint8_t* header, std::uint32_t payload,
                                         std::uint32_t src, std::uint32_t group, std::uint16_t port,
                                         std::uint16_t ip_id) {
    UdpHeaderSpec spec;
    spec.src_ip = src;
    spec.dst_ip = group;
    spec.src_port = 50000;
    spec.dst_port = port;
    spec.ip_id = ip_id;
    std::vector<std::uint8_t> f = test::udp_frame(spec, kCodifHeaderBytes + payload);
    const std::size_t off = f.size() - kCodifHeaderBytes - payload;
    std::memcpy(f.data() + off, header, kCodifHeaderBytes);
    for (std::uint32_t i = 0; i < payload; ++i) {
        f[off + kCodifHeaderBytes + i] = static_cast<std::uint8_t>(i * 7 + ip_id);
    }
    return f;
}

int write_independent(const char* path) {
    pcap_t* dead = pcap_open_dead(DLT_EN10MB, 262144);
    pcap_dumper_t* d = pcap_dump_open(dead, path);
    if (d == nullptr) {
        std::fprintf(stderr, "codif_fields: %s: %s\n", path, pcap_geterr(dead));
        pcap_close(dead);
        return 1;
    }
    std::uint16_t ip_id = 0;
    auto put = [&](const void* header, std::uint32_t payload, std::uint32_t src,
                   std::uint32_t group, std::uint16_t port) {
        const auto f = ethernet_frame(static_cast<const std::uint8_t*>(header), payload, src, group,
                                      port, ip_id);
        pcap_pkthdr h{};
        h.ts.tv_sec = 1767225600 + ip_id;
        h.caplen = h.len = static_cast<bpf_u_int32>(f.size());
        pcap_dump(reinterpret_cast<u_char*>(d), &h, f.data());
        ++ip_id;
    };
    const std::uint32_t src = (10u << 24) | 11u;
    const std::uint32_t group = (239u << 24) | (17u << 16) | 1u;
    // v2: 1024-byte payload, 4 complex 16-bit channels: 64 samples per frame,
    // 10 frames per 1-second period. Frames 0..5 (4 among them), then 8 (two
    // missing), then 8 again (a repeat), then the next second's frame 0.
    {
        cio::v2::Header v;
        cio::v2::createCODIFHeader(v, 1024, 3, 1, 16, 4, 2, 1, 640, 1, "Pk", 9);
        cio::v2::setCODIFEpoch(v, 52);
        cio::v2::setCODIFCalEnabled(v, 1);
        v.metaid = 0xBEEF;
        v.meta1 = 0x1234;
        v.meta2 = 0x1122334455667788ull;
        v.meta3 = 0x99AABBCCDDEEFF00ull;
        for (const std::uint32_t frame : {0u, 1u, 2u, 3u, 4u, 5u, 8u, 8u, 10u}) {
            cio::v2::setCODIFFrameEpochSecOffset(v, 1000 + frame / 10);
            cio::v2::setCODIFFrameNumber(v, frame % 10);
            put(&v, 1024, src, group, 36001);
        }
    }
    // Draft: 512-byte payload, 8 real 4-bit channels: 128 samples per frame,
    // 2-second period with 5 frames. Frames 3, 4, 0 of the next period (late),
    // and another thread's frame 4.
    {
        cio::draft::Header dh;
        cio::draft::createCODIFHeader(dh, 512, 2, 0, 4, 8, 1, 2, 640, 0, "Dr");
        cio::draft::setCODIFEpoch(dh, 52);
        cio::draft::setCODIFRepresentation(dh, 3);
        for (const std::uint32_t frame : {3u, 4u, 5u, 4u}) {
            cio::draft::setCODIFFrameEpochSecOffset(dh, static_cast<int>(200 + (frame / 5) * 2));
            cio::draft::setCODIFFrameNumber(dh, static_cast<int>(frame % 5));
            put(&dh, 512, src + 1, group + 1, 36002);
        }
        dh.threadid = 7;
        cio::draft::setCODIFFrameInvalid(dh, 1);
        put(&dh, 512, src + 1, group + 1, 36002);
    }
    // Headers codifio builds that define no sequence position: a header-only
    // frame (createCODIFHeader takes a dataarraylength of 0: no samples per
    // frame, nothing to divide by), and a draft frame of 65536 channels
    // (setCODIFNumChannels stores 65535, which ibvcap reads as 0 channels).
    {
        cio::v2::Header v;
        cio::v2::createCODIFHeader(v, 0, 5, 2, 8, 2, 1, 1, 100, 0, "Hd", 0);
        put(&v, 0, src + 2, group + 2, 36003);
        cio::draft::Header dh;
        cio::draft::createCODIFHeader(dh, 64, 6, 2, 8, 1, 1, 1, 100, 0, "Wd");
        cio::draft::setCODIFNumChannels(dh, 65536);
        put(&dh, 64, src + 3, group + 2, 36003);
    }
    pcap_dump_close(d);
    pcap_close(dead);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 3 && std::strcmp(argv[1], "dump") == 0) {
        return dump(argv[2]);
    }
    if (argc == 3 && std::strcmp(argv[1], "write-independent") == 0) {
        return write_independent(argv[2]);
    }
    std::fprintf(stderr, "usage: codif_fields dump|write-independent FILE.pcap\n");
    return 2;
}
