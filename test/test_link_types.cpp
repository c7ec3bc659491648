// ibvcap read on capture files that are not plain Ethernet: Linux cooked
// captures (tcpdump -i any) and raw IP, and pcapng times at and past 2^32 s.
// The files are made here by hand from the generator's Ethernet frames, with
// the header layouts of libpcap's pcap/sll.h (formats/packet.hpp, LinkType).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "formats/output.hpp"
#include "formats/packet.hpp"
#include "frames.hpp"
#include "lib/run/gen.hpp"
#include "lib/run/read.hpp"
#include "lib/run/run_loop.hpp"
#include "lib/sources/pcap_file.hpp"
#include "lib/traffic/generator.hpp"

namespace ibvcap {
namespace {

using Blob = std::vector<std::uint8_t>;

void put_be16(Blob& b, std::uint16_t v) {
    b.push_back(static_cast<std::uint8_t>(v >> 8));
    b.push_back(static_cast<std::uint8_t>(v));
}
void put_be32(Blob& b, std::uint32_t v) {
    put_be16(b, static_cast<std::uint16_t>(v >> 16));
    put_be16(b, static_cast<std::uint16_t>(v));
}
void put_le16(Blob& b, std::uint16_t v) {
    b.push_back(static_cast<std::uint8_t>(v));
    b.push_back(static_cast<std::uint8_t>(v >> 8));
}
void put_le32(Blob& b, std::uint32_t v) {
    put_le16(b, static_cast<std::uint16_t>(v));
    put_le16(b, static_cast<std::uint16_t>(v >> 16));
}

void write_blob(const std::string& path, const Blob& b) {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<long>(b.size()));
}

// An Ethernet frame's link header replaced by `link`'s: the EtherType (which
// may be 0x8100, a VLAN tag then following) becomes the cooked header's
// protocol; raw IP keeps only what follows the Ethernet header.
Blob relink(const Blob& eth, LinkType link) {
    Blob out;
    const std::uint16_t type = load_be16(eth.data() + 12);
    switch (link) {
        case LinkType::ethernet:
            return eth;
        case LinkType::linux_sll:
            put_be16(out, 2);  // LINUX_SLL_MULTICAST
            put_be16(out, 1);  // ARPHRD_ETHER
            put_be16(out, 6);
            out.insert(out.end(), eth.begin() + 6, eth.begin() + 12);  // source MAC
            out.insert(out.end(), 2, 0);
            put_be16(out, type);
            break;
        case LinkType::linux_sll2:
            put_be16(out, type);
            put_be16(out, 0);  // reserved
            put_be32(out, 7);  // interface index
            put_be16(out, 1);  // ARPHRD_ETHER
            out.push_back(2);  // LINUX_SLL_MULTICAST
            out.push_back(6);  // address length
            out.insert(out.end(), eth.begin() + 6, eth.begin() + 12);
            out.insert(out.end(), 2, 0);
            break;
        case LinkType::raw_ip:
            break;
    }
    out.insert(out.end(), eth.begin() + kEthernetHeaderBytes, eth.end());
    return out;
}

// A classic pcap file (as write_generated_pcap writes them: nanoseconds,
// little-endian, snaplen 262144) with every frame relinked.
Blob relink_pcap(const Blob& eth, LinkType link, std::uint32_t linktype) {
    Blob out(eth.begin(), eth.begin() + 24);
    store_le32(out.data() + 20, linktype);
    for (std::size_t at = 24; at + 16 <= eth.size();) {
        const std::uint32_t caplen = load_le32(eth.data() + at + 8);
        const Blob frame(eth.begin() + static_cast<long>(at + 16),
                         eth.begin() + static_cast<long>(at + 16 + caplen));
        const Blob f = relink(frame, link);
        Blob rec(eth.begin() + static_cast<long>(at), eth.begin() + static_cast<long>(at + 8));
        put_le32(rec, static_cast<std::uint32_t>(f.size()));
        put_le32(rec, static_cast<std::uint32_t>(f.size()));
        out.insert(out.end(), rec.begin(), rec.end());
        out.insert(out.end(), f.begin(), f.end());
        at += 16 + caplen;
    }
    return out;
}

GeneratorConfig clean_config(int vlan) {
    GeneratorConfig c;
    c.antennas = {test::kAntenna1, test::kAntenna2};
    c.groups = {Endpoint{test::kGroup1, 36001}, Endpoint{test::kGroup2, 36002}};
    c.threads = 2;
    c.frames = 60;
    c.payload_bytes = 1024;
    c.vlan_id = vlan;
    return c;
}

std::map<std::string, Blob> files_in(const std::string& dir) {
    std::map<std::string, Blob> out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        out[e.path().filename().string()] = test::read_file(e.path());
    }
    return out;
}

struct Case {
    const char* name;
    LinkType link;
    std::uint32_t linktype;  // in the file header
    std::size_t header;      // link header bytes
};
constexpr Case kCases[] = {
    {"sll", LinkType::linux_sll, 113, 16},
    {"sll2", LinkType::linux_sll2, 276, 20},
    {"raw", LinkType::raw_ip, 101, 0},
    {"ipv4", LinkType::raw_ip, 228, 0},
};

// The cooked and raw-IP forms of the generator's traffic read exactly as the
// Ethernet original: the same ledger, the same codif and codifhdr files, raw
// files of the relinked frames, and a pcap output that is the input file
// itself (link type included), by the mapped reader and by libpcap alike.
TEST(LinkTypes, CookedAndRawIpCapturesReadLikeEthernet) {
    for (const int vlan : {-1, 3}) {
        test::TempDir dir;
        const GeneratorConfig config = clean_config(vlan);
        Generator gen(config);
        const std::string eth_path = dir / "eth.pcap";
        const std::uint64_t sent = write_generated_pcap(gen, eth_path);
        const Blob eth = test::read_file(eth_path);
        const std::vector<OutputFormat> formats = {OutputFormat::codif, OutputFormat::codifhdr,
                                                   OutputFormat::raw, OutputFormat::pcap};
        std::atomic<bool> stop{false};

        ReadRequest ref;
        ref.file = eth_path;
        ref.outputs.formats = formats;
        ref.outputs.output_dir = dir / "eth";
        ASSERT_EQ(run_read(ref, stop).exit_code, kExitZeroLoss);
        const auto ref_files = files_in(ref.outputs.output_dir);

        for (const Case& c : kCases) {
            if (vlan >= 0 && c.link == LinkType::raw_ip) {
                continue;  // no link header, no tag
            }
            const std::string what = fmt::format("{} vlan {}", c.name, vlan);
            const Blob input = relink_pcap(eth, c.link, c.linktype);
            const std::string path = dir / (std::string(c.name) + ".pcap");
            write_blob(path, input);
            for (const bool mapped : {true, false}) {
                const std::string out_dir =
                    dir / fmt::format("{}-{}", c.name, mapped ? "mapped" : "libpcap");
                PcapFileSource probe(path, mapped);
                EXPECT_EQ(probe.is_mapped(), mapped) << what;
                EXPECT_EQ(probe.link_type(), c.link) << what;
                EXPECT_EQ(probe.pcap_link_type(), c.linktype) << what;
                RunOutcome outcome;
                if (mapped) {
                    ReadRequest r;
                    r.file = path;
                    r.outputs.formats = formats;
                    r.outputs.output_dir = out_dir;
                    outcome = run_read(r, stop);
                } else {
                    RunSettings settings;
                    settings.command = "read";
                    settings.outputs.formats = formats;
                    settings.outputs.output_dir = out_dir;
                    settings.outputs.pcap_link_type = probe.pcap_link_type();
                    outcome = run_source(probe, settings, stop);
                }
                EXPECT_EQ(outcome.exit_code, kExitZeroLoss) << what;
                const Totals t = outcome.ledger.totals();
                EXPECT_EQ(t.packets, sent) << what;
                EXPECT_EQ(t.codif, sent) << what;
                EXPECT_EQ(t.malformed + t.non_codif, 0u) << what;
                EXPECT_EQ(outcome.ledger.streams().size(), 8u) << what;
                const auto got = files_in(out_dir);
                ASSERT_EQ(got.size(), ref_files.size()) << what;
                for (const auto& [name, bytes] : ref_files) {
                    ASSERT_TRUE(got.contains(name)) << what << ": " << name;
                    const Blob& mine = got.at(name);
                    if (name.ends_with(".codif") || name.ends_with(".codifhdr")) {
                        EXPECT_TRUE(mine == bytes) << what << ": " << name;
                    } else if (name.ends_with(".pcap")) {
                        EXPECT_TRUE(mine == input) << what << ": " << name;
                    }  // raw: below
                }
                // A raw file holds the frames as captured, their own link
                // header first: the relinked ones, in order.
                const std::string raw_name =
                    fmt::format("ibvcap_{}_36001_{}.raw", format_ipv4(test::kGroup1),
                                format_ipv4(test::kAntenna1));
                const Blob& eth_raw = ref_files.at(raw_name);
                Blob expected_raw;
                const std::size_t n = 46 + 64 + 1024 - (vlan < 0) * 4;
                for (std::size_t at = 0; at + n <= eth_raw.size(); at += n) {
                    const Blob f = relink(Blob(eth_raw.begin() + static_cast<long>(at),
                                               eth_raw.begin() + static_cast<long>(at + n)),
                                          c.link);
                    expected_raw.insert(expected_raw.end(), f.begin(), f.end());
                }
                EXPECT_TRUE(got.at(raw_name) == expected_raw) << what;
            }
        }
    }
}

TEST(LinkTypes, OtherLinkTypesAreRefusedNamingThem) {
    test::TempDir dir;
    for (const auto& [linktype, name] :
         {std::pair{105u, "IEEE802_11"}, std::pair{0u, "NULL"}, std::pair{9u, "PPP"}}) {
        auto header = pcap_file_header(kPcapSnaplen, linktype);
        const std::string path = dir / "x.pcap";
        write_blob(path, Blob(header.begin(), header.end()));
        try {
            PcapFileSource source(path);
            FAIL() << "expected an error for link type " << linktype;
        } catch (const std::runtime_error& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find(fmt::format("link type {} ({})", linktype, name)),
                      std::string::npos)
                << what;
            EXPECT_NE(what.find("LINUX_SLL"), std::string::npos) << what;
            EXPECT_EQ(what.find('\n'), std::string::npos) << what;
        }
    }
}

// The parser behind each link header: offsets, tags, and what a short or
// foreign frame is called.
TEST(LinkTypes, ParserFindsTheIpHeaderBehindEachLinkHeader) {
    const Blob plain =
        test::make_frame(test::kAntenna1, test::kGroup1, 36001, test::make_header(10, 0));
    const Blob tagged =
        test::make_frame(test::kAntenna1, test::kGroup1, 36001, test::make_header(10, 0), 1234);
    auto parse = [](Bytes f, LinkType link, std::size_t captured, UdpPacket& p) {
        return parse_udp_frame(f, captured, p, link);
    };
    for (const Case& c : kCases) {
        UdpPacket p;
        const Blob f = relink(plain, c.link);
        ASSERT_EQ(parse(f, c.link, f.size(), p), PacketError::none) << c.name;
        EXPECT_EQ(p.ip_offset, c.header) << c.name;
        EXPECT_EQ(p.payload_offset, c.header + 28) << c.name;
        EXPECT_EQ(p.dst_ip, test::kGroup1) << c.name;
        EXPECT_EQ(p.src_ip, test::kAntenna1) << c.name;
        EXPECT_EQ(p.vlan_count, 0) << c.name;
        // Read as Ethernet, the same bytes are something else entirely.
        if (c.link != LinkType::ethernet) {
            EXPECT_NE(parse(f, LinkType::ethernet, f.size(), p), PacketError::none) << c.name;
        }
        if (c.header > 0) {
            EXPECT_EQ(parse(f, c.link, c.header - 1, p), PacketError::truncated_ethernet) << c.name;
            // A protocol other than IPv4 (IPv6) in the cooked header.
            Blob v6 = f;
            store_be16(v6.data() + (c.link == LinkType::linux_sll ? 14 : 0), 0x86dd);
            EXPECT_EQ(parse(v6, c.link, v6.size(), p), PacketError::not_ipv4) << c.name;
            // An 802.1Q tag after the cooked header, as libpcap inserts it.
            const Blob t = relink(tagged, c.link);
            ASSERT_EQ(parse(t, c.link, t.size(), p), PacketError::none) << c.name;
            EXPECT_EQ(p.vlan_count, 1) << c.name;
            EXPECT_EQ(p.vlan_ids[0], 1234) << c.name;
            EXPECT_EQ(p.ip_offset, c.header + 4) << c.name;
            EXPECT_EQ(p.payload_offset, c.header + 32) << c.name;
            EXPECT_EQ(parse(t, c.link, c.header + 3, p), PacketError::truncated_ethernet) << c.name;
            EXPECT_EQ(parse(Bytes(t).first(c.header + 2), c.link, t.size(), p),
                      PacketError::headers_split)
                << c.name;
        }
    }
    // Raw IP: no header; IPv6 is another protocol, an empty or odd frame damaged.
    UdpPacket p;
    Blob v6 = relink(plain, LinkType::raw_ip);
    v6[0] = 0x60;
    EXPECT_EQ(parse(v6, LinkType::raw_ip, v6.size(), p), PacketError::not_ipv4);
    EXPECT_EQ(parse(v6, LinkType::raw_ip, 0, p), PacketError::truncated_ipv4);
    Blob v5 = v6;
    v5[0] = 0x55;
    EXPECT_EQ(parse(v5, LinkType::raw_ip, v5.size(), p), PacketError::bad_ip_version);
}

// pcapng (hand-built: SHB, IDB with the default microsecond resolution, EPBs
// with the 64-bit time split high/low).
Blob pcapng(const std::vector<std::pair<std::uint64_t, Blob>>& records) {
    Blob b;
    put_le32(b, 0x0A0D0D0A);  // SHB
    put_le32(b, 28);
    put_le32(b, 0x1A2B3C4D);
    put_le16(b, 1);
    put_le16(b, 0);
    put_le32(b, 0xFFFFFFFF);  // section length: unknown
    put_le32(b, 0xFFFFFFFF);
    put_le32(b, 28);
    put_le32(b, 1);  // IDB
    put_le32(b, 20);
    put_le16(b, 1);  // LINKTYPE_ETHERNET
    put_le16(b, 0);
    put_le32(b, 0);  // snaplen: none
    put_le32(b, 20);
    for (const auto& [us, frame] : records) {
        const std::size_t padded = (frame.size() + 3) / 4 * 4;
        const auto total = static_cast<std::uint32_t>(32 + padded);
        put_le32(b, 6);  // EPB
        put_le32(b, total);
        put_le32(b, 0);  // interface 0
        put_le32(b, static_cast<std::uint32_t>(us >> 32));
        put_le32(b, static_cast<std::uint32_t>(us));
        put_le32(b, static_cast<std::uint32_t>(frame.size()));
        put_le32(b, static_cast<std::uint32_t>(frame.size()));
        b.insert(b.end(), frame.begin(), frame.end());
        b.insert(b.end(), padded - frame.size(), 0);
        put_le32(b, total);
    }
    return b;
}

constexpr std::uint64_t kTwo32 = 1ull << 32;

// Reads `source` through a demux: the time stamp of each CODIF frame it
// delivered into `seen`, and how the read ended.
PcapFileSource::Result read_times(PcapFileSource& source, std::vector<std::uint64_t>& seen) {
    Ledger ledger;
    Demux demux(DemuxOptions{}, ledger);
    demux.add_observer([&](const Frame& fr, const UdpPacket&, const StreamHeader&,
                           const StreamStats&) { seen.push_back(fr.timestamp_ns); });
    const std::atomic<bool> stop{false};
    return source.run(demux, 0, stop);
}

// Times at and past 2^32 s reach the demux exactly; the run's pcap output,
// whose seconds are 32 bits, does not write them (never wrapped) and says so;
// the other outputs keep every frame.
TEST(PcapTimes, PcapngTimesPast2To32SecondsAreCarriedExactly) {
    test::TempDir dir;
    const std::vector<std::uint64_t> us = {(kTwo32 - 1) * 1'000'000 + 999'999,
                                           kTwo32 * 1'000'000 + 123'456,
                                           (kTwo32 << 2) * 1'000'000 + 1};
    std::vector<std::pair<std::uint64_t, Blob>> records;
    for (std::size_t i = 0; i < us.size(); ++i) {
        records.emplace_back(
            us[i], test::make_frame(test::kAntenna1, test::kGroup1, 36001,
                                    test::make_header(10, static_cast<std::uint32_t>(i))));
    }
    ReadRequest r;
    r.file = dir / "times.pcapng";
    write_blob(r.file, pcapng(records));
    r.outputs.formats = {OutputFormat::codif, OutputFormat::pcap};
    r.outputs.output_dir = dir / "out";
    std::vector<std::uint64_t> seen;
    r.observer = [&](const Frame& f, const UdpPacket&, const StreamHeader&, const StreamStats&) {
        seen.push_back(f.timestamp_ns);
    };
    std::atomic<bool> stop{false};
    const RunOutcome o = run_read(r, stop);
    ASSERT_EQ(seen.size(), 3u);
    for (std::size_t i = 0; i < us.size(); ++i) {
        EXPECT_EQ(seen[i], us[i] * 1000) << i;
    }
    EXPECT_EQ(o.exit_code, kExitError);
    EXPECT_TRUE(o.ledger.reconciles());
    bool found_pcap = false;
    for (const auto& out : o.ledger.outputs()) {
        if (out.format == "pcap") {
            found_pcap = true;
            EXPECT_EQ(out.packets, 1u);
            EXPECT_EQ(out.dropped, 2u);
            EXPECT_NE(out.error.find("2 records not written"), std::string::npos) << out.error;
            EXPECT_NE(out.error.find("2106-02-07"), std::string::npos) << out.error;
        } else {
            EXPECT_EQ(out.packets, 3u) << out.path;
            EXPECT_TRUE(out.error.empty()) << out.error;
        }
    }
    EXPECT_TRUE(found_pcap);
    // The pcap output holds the one frame that fits, at its exact time.
    const Blob pcap = test::read_file(run_output_path(r.outputs, OutputFormat::pcap));
    ASSERT_EQ(pcap.size(), 24 + 16 + records[0].second.size());
    EXPECT_EQ(load_le32(pcap.data() + 24), kTwo32 - 1);
    EXPECT_EQ(load_le32(pcap.data() + 28), 999'999'000u);

    EXPECT_THROW(pcap_record_header(kTwo32 * 1'000'000'000, 1, 1), std::out_of_range);
    EXPECT_NO_THROW(pcap_record_header(kTwo32 * 1'000'000'000 - 1, 1, 1));
}

// A time that 64-bit nanoseconds cannot hold (after 2554) ends the read as a
// damaged record does, keeping the frames before it.
TEST(PcapTimes, PcapngTimesBeyond64BitNanosecondsAreRefused) {
    test::TempDir dir;
    const Blob f =
        test::make_frame(test::kAntenna1, test::kGroup1, 36001, test::make_header(10, 0));
    const Blob g =
        test::make_frame(test::kAntenna1, test::kGroup1, 36001, test::make_header(10, 1));
    const std::uint64_t too_late_s = 20'000'000'000;  // 2^64 ns is 18446744073.7 s
    const std::string path = dir / "late.pcapng";
    write_blob(path, pcapng({{1'000'000, f}, {too_late_s * 1'000'000, g}, {2'000'000, g}}));
    PcapFileSource source(path);
    std::vector<std::uint64_t> seen;
    const auto result = read_times(source, seen);
    EXPECT_EQ(result.frames, 1u);
    EXPECT_FALSE(result.complete);
    EXPECT_NE(result.error.find("frame 2 has time stamp 20000000000.000000000 s"),
              std::string::npos)
        << result.error;
    EXPECT_NE(result.error.find("(after 1 frames)"), std::string::npos) << result.error;
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0], 1'000'000'000u);
}

// Classic pcap seconds are unsigned 32 bits: times from 2038 (2^31 s) to
// 2106 read the same through libpcap (a pipe, stdin) as from the mapping,
// never as times before 1970 and never refused.
TEST(PcapTimes, ClassicPcapTimesPast2038ReadTheSameThroughLibpcap) {
    test::TempDir dir;
    const Blob f =
        test::make_frame(test::kAntenna1, test::kGroup1, 36001, test::make_header(10, 0));
    const std::vector<std::uint32_t> secs = {0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFFu};
    for (const bool nano : {true, false}) {
        auto header = pcap_file_header();
        Blob b(header.begin(), header.end());
        if (!nano) {
            store_le32(b.data(), 0xa1b2c3d4u);
        }
        for (const std::uint32_t sec : secs) {
            put_le32(b, sec);
            put_le32(b, nano ? 999'999'999u : 999'999u);
            put_le32(b, static_cast<std::uint32_t>(f.size()));
            put_le32(b, static_cast<std::uint32_t>(f.size()));
            b.insert(b.end(), f.begin(), f.end());
        }
        const std::string path = dir / "late.pcap";
        write_blob(path, b);
        for (const bool mapped : {true, false}) {
            PcapFileSource source(path, mapped);
            ASSERT_EQ(source.is_mapped(), mapped);
            std::vector<std::uint64_t> seen;
            const auto result = read_times(source, seen);
            EXPECT_TRUE(result.complete) << result.error;
            ASSERT_EQ(seen.size(), secs.size());
            for (std::size_t i = 0; i < secs.size(); ++i) {
                EXPECT_EQ(seen[i],
                          std::uint64_t{secs[i]} * 1'000'000'000 + 999'999'000 + (nano ? 999 : 0))
                    << "mapped " << mapped << " nano " << nano << " frame " << i;
            }
        }
    }
}

}  // namespace
}  // namespace ibvcap
