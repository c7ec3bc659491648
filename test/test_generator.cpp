// Unit tests for the CODIF traffic generator (lib/traffic/generator.hpp) and its payload
// pattern (lib/traffic/pattern.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "codifio_transcript.hpp"
#include "formats/codif.hpp"
#include "formats/packet.hpp"
#include "frames.hpp"
#include "lib/core/netaddr.hpp"
#include "lib/traffic/generator.hpp"
#include "lib/traffic/pattern.hpp"

namespace ibvcap {
namespace {

using test::Observed;

using ByteVec = std::vector<std::uint8_t>;

constexpr std::uint32_t ip(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
    return (std::uint32_t{a} << 24) | (std::uint32_t{b} << 16) | (std::uint32_t{c} << 8) | d;
}

// ---------------------------------------------------------------------------
// lib/traffic/pattern.hpp, against a reference written from the header comment.

std::uint64_t ref_splitmix64(std::uint64_t x) {
    std::uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

ByteVec ref_pattern(std::uint64_t key, std::size_t bytes) {
    ByteVec out(bytes);
    for (std::size_t j = 0; j < bytes; ++j) {
        const std::uint64_t word = key + (j / 8) * 0x9E3779B97F4A7C15ull;
        out[j] = static_cast<std::uint8_t>(word >> (8 * (j % 8)));
    }
    return out;
}

ByteVec pattern(std::uint64_t key, std::size_t bytes) {
    ByteVec out(bytes, 0xEE);
    fill_pattern(key, out);
    return out;
}

TEST(Pattern, ReferenceSplitmixIsTheKnownOne) {
    // First output of the splitmix64 generator seeded with 0.
    EXPECT_EQ(ref_splitmix64(0), 0xE220A8397B1DCDAFull);
}

TEST(Pattern, KeyIsSplitmixOfStreamXorSplitmixOfIndex) {
    const std::uint32_t antenna = ip(10, 0, 0, 11);
    for (const std::uint16_t thread : {std::uint16_t{0}, std::uint16_t{1}, std::uint16_t{65535}}) {
        for (const std::uint64_t index :
             {std::uint64_t{0}, std::uint64_t{12345}, std::numeric_limits<std::uint64_t>::max()}) {
            const std::uint64_t expected =
                ref_splitmix64((std::uint64_t{antenna} << 32) | (std::uint64_t{thread} << 16)) ^
                ref_splitmix64(index);
            EXPECT_EQ(pattern_key(antenna, thread, index), expected);
        }
    }
    EXPECT_NE(pattern_key(antenna, 0, 1), pattern_key(antenna, 0, 2));
    EXPECT_NE(pattern_key(antenna, 0, 1), pattern_key(antenna, 1, 1));
    EXPECT_NE(pattern_key(antenna, 0, 1), pattern_key(antenna + 1, 0, 1));
}

TEST(Pattern, FillMatchesTheDocumentedWordsIncludingATrailingPartialWord) {
    const std::uint64_t key = 0x0123456789ABCDEFull;
    for (const std::size_t n : {0u, 1u, 7u, 8u, 9u, 15u, 16u, 64u, 1029u, 8192u}) {
        SCOPED_TRACE(n);
        EXPECT_EQ(pattern(key, n), ref_pattern(key, n));
    }
    // Word 1 of the pattern, spelled out: key + step, little-endian.
    const ByteVec p = pattern(0, 16);
    const ByteVec word1 = {0x15, 0x7C, 0x4A, 0x7F, 0xB9, 0x79, 0x37, 0x9E};
    EXPECT_TRUE(std::equal(word1.begin(), word1.end(), p.begin() + 8));
    EXPECT_TRUE(std::all_of(p.begin(), p.begin() + 8, [](std::uint8_t b) { return b == 0; }));
}

TEST(Pattern, CheckIsZeroOnIntactPayloads) {
    const std::uint64_t key = pattern_key(ip(10, 0, 0, 12), 3, 777);
    for (const std::size_t n : {0u, 1u, 5u, 8u, 13u, 8192u, 8197u}) {
        SCOPED_TRACE(n);
        const ByteVec p = pattern(key, n);
        EXPECT_EQ(check_pattern(key, p), 0u);
    }
}

TEST(Pattern, CheckCountsExactlyTheCorruptedBytes) {
    const std::uint64_t key = pattern_key(ip(10, 0, 0, 12), 3, 777);
    for (const std::size_t n : {8192u, 8197u, 21u}) {
        SCOPED_TRACE(n);
        ByteVec p = pattern(key, n);
        // Three bytes in three different words.
        p[0] ^= 0x01;
        p[n / 2] ^= 0x80;
        p[n - 9] ^= 0xFF;
        EXPECT_EQ(check_pattern(key, p), 3u);
        // Three bytes of one word.
        ByteVec q = pattern(key, n);
        q[8] ^= 0x10;
        q[9] ^= 0x20;
        q[15] ^= 0x40;
        EXPECT_EQ(check_pattern(key, q), 3u);
        // A whole word.
        ByteVec w = pattern(key, n);
        for (std::size_t j = 0; j < 8; ++j) {
            w[j] = static_cast<std::uint8_t>(~w[j]);
        }
        EXPECT_EQ(check_pattern(key, w), 8u);
    }
    // In the trailing partial word (8197 = 1024 words + 5 bytes).
    ByteVec t = pattern(key, 8197);
    t[8192] ^= 0x02;
    t[8196] ^= 0x04;
    EXPECT_EQ(check_pattern(key, t), 2u);
    ByteVec t2 = pattern(key, 8197);
    t2[8191] ^= 0x01;  // last byte of the last whole word
    t2[8194] ^= 0x01;
    t2[100] ^= 0x01;
    EXPECT_EQ(check_pattern(key, t2), 3u);
    // Every byte of a short payload.
    ByteVec all = pattern(key, 5);
    for (auto& b : all) {
        b ^= 0x33;
    }
    EXPECT_EQ(check_pattern(key, all), 5u);
    // The wrong key: almost every byte differs.
    const ByteVec p = pattern(key, 8192);
    EXPECT_GT(check_pattern(key + 1, p), 1000u);
    EXPECT_GT(check_pattern(pattern_key(ip(10, 0, 0, 12), 3, 778), p), 7000u);
}

// ---------------------------------------------------------------------------
// GeneratorConfig::validate

GeneratorConfig base_config() {
    GeneratorConfig c;
    c.antennas = {ip(10, 0, 0, 11), ip(10, 0, 0, 12)};
    c.groups = {Endpoint{ip(239, 17, 0, 1), 36001}, Endpoint{ip(239, 17, 0, 2), 36002}};
    c.threads = 2;
    c.frames = 20;
    c.payload_bytes = 1024;  // 16 channels x 8 bits x complex = 32 bytes: 32 samples
    c.nchan = 16;
    c.nbits = 8;
    c.complex = true;
    c.period = 2;
    c.frames_per_period = 7;
    c.start_seconds = 10;
    c.start_frame = 5;
    return c;
}

void expect_rejected(const std::function<void(GeneratorConfig&)>& change, const char* what) {
    GeneratorConfig c = base_config();
    change(c);
    EXPECT_THROW(c.validate(), std::invalid_argument) << what;
    EXPECT_THROW(Generator{c}, std::invalid_argument) << what;
}

void expect_accepted(const std::function<void(GeneratorConfig&)>& change, const char* what) {
    GeneratorConfig c = base_config();
    change(c);
    EXPECT_NO_THROW(c.validate()) << what;
}

TEST(GeneratorConfig, BaseConfigIsValid) {
    EXPECT_NO_THROW(base_config().validate());
    GeneratorConfig defaults;  // the defaults plus one antenna and one group
    defaults.antennas = {1};
    defaults.groups = {Endpoint{ip(239, 1, 1, 1), 1}};
    EXPECT_NO_THROW(defaults.validate());
    EXPECT_EQ(base_config().samples_per_frame(), 32u);
    EXPECT_EQ(base_config().frame_bytes(), 42u + 64u + 1024u);
}

TEST(GeneratorConfig, RejectsEachBadSetting) {
    using C = GeneratorConfig;
    expect_rejected([](C& c) { c.antennas.clear(); }, "no antennas");
    expect_rejected([](C& c) { c.groups.clear(); }, "no groups");
    expect_rejected([](C& c) { c.threads = 0; }, "0 threads");
    expect_rejected([](C& c) { c.frames = 0; }, "0 frames");
    expect_rejected([](C& c) { c.burst = 0; }, "a burst of 0 slots");
    expect_rejected([](C& c) { c.payload_bytes = 0; }, "empty payload");
    expect_rejected([](C& c) { c.payload_bytes = 1028; }, "payload not a multiple of 8");
    expect_rejected([](C& c) { c.payload_bytes = 1000; }, "payload not a multiple of 8");
    expect_rejected([](C& c) { c.payload_bytes = 65472; }, "payload beyond one IPv4 datagram");
    expect_rejected([](C& c) { c.nchan = 0; }, "0 channels");
    expect_rejected([](C& c) { c.nbits = 0; }, "0 bits");
    expect_rejected([](C& c) { c.period = 0; }, "0 period");
    expect_rejected([](C& c) { c.frames_per_period = 0; }, "0 frames per period");
    expect_rejected([](C& c) { c.payload_bytes = 1048; }, "payload not whole samples");
    expect_rejected(
        [](C& c) {
            c.nchan = 3;
            c.nbits = 2;
            c.complex = false;
        },
        "payload not whole samples (6-bit samples)");
    expect_rejected([](C& c) { c.frames_per_period = kCodifMaxFramesPerPeriod + 1; },
                    "fpp beyond 2^31");
    expect_rejected([](C& c) { c.loss = -0.01; }, "negative loss");
    expect_rejected([](C& c) { c.duplicate = 1.5; }, "duplicate above 1");
    expect_rejected([](C& c) { c.reorder = std::nan(""); }, "NaN reorder");
    expect_rejected(
        [](C& c) {
            c.loss = 0.5;
            c.duplicate = 0.4;
            c.reorder = 0.2;
        },
        "loss + duplicate + reorder > 1");
    expect_rejected([](C& c) { c.vlan_id = 4095; }, "vlan 4095");
    expect_rejected([](C& c) { c.vlan_id = 100000; }, "vlan far beyond 4094");
    expect_rejected(
        [](C& c) {
            c.layout = CodifLayout::draft;
            c.frames_per_period = 0x08000000;  // x 32 samples = 2^32
        },
        "draft total samples beyond 32 bits");
}

TEST(GeneratorConfig, AcceptsTheEdgesOfEachRange) {
    using C = GeneratorConfig;
    expect_accepted([](C& c) { c.vlan_id = 4094; }, "vlan 4094");
    expect_accepted([](C& c) { c.vlan_id = 0; }, "vlan 0");
    expect_accepted([](C& c) { c.frames_per_period = kCodifMaxFramesPerPeriod; }, "fpp 2^31");
    expect_accepted(
        [](C& c) {
            c.layout = CodifLayout::draft;
            c.frames_per_period = 0x07FFFFFF;  // x 32 samples < 2^32
        },
        "draft total samples within 32 bits");
    expect_accepted([](C& c) { c.frames_per_period = 0x08000000; }, "v2 total samples 64 bits");
    expect_accepted([](C& c) { c.loss = 1; }, "loss 1");
    expect_accepted(
        [](C& c) {
            c.loss = 0.5;
            c.duplicate = 0.25;
            c.reorder = 0.25;
        },
        "sum exactly 1");
    // The largest payload that fits an IPv4 datagram: 20 + 8 + 64 + 65440 = 65532,
    // with or without a VLAN tag (the tag is not part of the datagram).
    expect_accepted([](C& c) { c.payload_bytes = 65440; }, "largest payload");
    expect_accepted(
        [](C& c) {
            c.payload_bytes = 65440;
            c.vlan_id = 7;
        },
        "largest payload with a VLAN tag");
}

// ---------------------------------------------------------------------------
// Generated frames

struct Decoded {
    UdpPacket udp;
    CodifHeader codif;
    Bytes payload;
};

// Parses and validates one frame; fails the test when it is not a valid frame.
::testing::AssertionResult decode_frame(Bytes frame, Decoded& d) {
    if (const PacketError e = parse_udp_frame(frame, frame.size(), d.udp); e != PacketError::none) {
        return ::testing::AssertionFailure() << "parse_udp_frame: " << to_string(e);
    }
    if (d.udp.payload_offset + d.udp.payload_bytes != frame.size()) {
        return ::testing::AssertionFailure() << "UDP payload does not end the frame";
    }
    const Bytes datagram = frame.subspan(d.udp.payload_offset, d.udp.payload_bytes);
    if (const CodifError e = decode_codif(datagram, d.codif); e != CodifError::none) {
        return ::testing::AssertionFailure() << "decode_codif: " << to_string(e);
    }
    if (const CodifError e = validate_codif(d.codif, datagram.size()); e != CodifError::none) {
        return ::testing::AssertionFailure() << "validate_codif: " << to_string(e);
    }
    d.payload = datagram.subspan(kCodifHeaderBytes);
    return ::testing::AssertionSuccess();
}

struct Emitted {
    ByteVec bytes;
    std::uint64_t timestamp_ns;
    std::size_t stream;
};

std::vector<Emitted> drain(Generator& g) {
    std::vector<Emitted> out;
    GeneratedFrame f;
    while (g.next(f)) {
        out.push_back({ByteVec(f.bytes.begin(), f.bytes.end()), f.timestamp_ns, f.stream});
    }
    EXPECT_FALSE(g.next(f));  // stays finished
    return out;
}

TEST(Generator, EpochStarts) {
    EXPECT_EQ(Generator::epoch_unix_ns(0), 946684800ull * 1'000'000'000ull);    // 2000-01-01
    EXPECT_EQ(Generator::epoch_unix_ns(1), 962409600ull * 1'000'000'000ull);    // 2000-07-01
    EXPECT_EQ(Generator::epoch_unix_ns(52), 1767225600ull * 1'000'000'000ull);  // 2026-01-01
    EXPECT_EQ(Generator::epoch_unix_ns(53), 1782864000ull * 1'000'000'000ull);  // 2026-07-01
}

TEST(Generator, WithoutFaultsEmitsEveryFrameInInterleavedOrder) {
    const GeneratorConfig c = base_config();
    Generator g(c);
    const std::size_t streams = c.groups.size() * c.antennas.size() * c.threads;
    ASSERT_EQ(g.truth().size(), streams);
    EXPECT_EQ(g.total_packets(), streams * c.frames);
    const auto frames = drain(g);
    ASSERT_EQ(frames.size(), streams * c.frames);

    const CodifTiming timing{c.period, c.frames_per_period};
    const std::uint64_t epoch_ns = Generator::epoch_unix_ns(c.epoch);
    const std::uint64_t period_ns = std::uint64_t{c.period} * 1'000'000'000ull;
    // Each stream's expected (seconds, frame), walked independently from (10, 5).
    std::vector<std::pair<std::uint32_t, std::uint32_t>> position(streams, {10u, 5u});
    std::vector<std::uint64_t> last_ts(streams, 0);
    std::map<std::uint32_t, std::uint16_t> last_ip_id;

    for (std::size_t i = 0; i < frames.size(); ++i) {
        SCOPED_TRACE(i);
        const Emitted& e = frames[i];
        const std::size_t slot = i / streams;
        const std::size_t stream = i % streams;
        const std::size_t gi = stream / (c.antennas.size() * c.threads);
        const std::size_t ai = (stream / c.threads) % c.antennas.size();
        const auto thread = static_cast<std::uint16_t>(stream % c.threads);
        ASSERT_EQ(e.stream, stream);
        ASSERT_EQ(e.bytes.size(), c.frame_bytes());
        Decoded d;
        ASSERT_TRUE(decode_frame(e.bytes, d));
        EXPECT_EQ(d.udp.vlan_count, 0u);
        EXPECT_FALSE(d.udp.ip_options);
        EXPECT_EQ(d.udp.payload_offset, 42u);
        EXPECT_EQ(d.udp.payload_bytes, 64u + c.payload_bytes);
        EXPECT_EQ(d.udp.src_ip, c.antennas[ai]);
        EXPECT_EQ(d.udp.dst_ip, c.groups[gi].ip);
        EXPECT_EQ(d.udp.src_port, c.src_port);
        EXPECT_EQ(d.udp.dst_port, c.groups[gi].port);
        // Ethernet: the group's multicast MAC, a locally administered source.
        std::uint8_t mac[6];
        multicast_mac(c.groups[gi].ip, mac);
        EXPECT_TRUE(std::equal(mac, mac + 6, e.bytes.begin()));
        EXPECT_EQ(e.bytes[0], 0x01);
        EXPECT_EQ(e.bytes[1], 0x00);
        EXPECT_EQ(e.bytes[2], 0x5e);
        EXPECT_EQ(e.bytes[6] & 0x03, 0x02);

        const CodifHeader& h = d.codif;
        EXPECT_EQ(h.layout, CodifLayout::v2);
        EXPECT_EQ(h.threadid, thread);
        EXPECT_EQ(h.stationid, ai);
        EXPECT_EQ(h.groupid, gi);
        EXPECT_EQ(h.epoch, 52);
        EXPECT_EQ(h.nbits, 8);
        EXPECT_EQ(h.nchan, 16);
        EXPECT_TRUE(h.complex);
        EXPECT_FALSE(h.invalid);
        EXPECT_EQ(h.period, 2);
        EXPECT_EQ(h.framelength8, c.payload_bytes / 8);
        EXPECT_EQ(h.blocklength, 4u);  // 16 x 8 bits x 2 = 256 bits = four 8-byte words
        EXPECT_EQ(h.version, 1u);
        EXPECT_EQ(h.totalsamples, 7u * 32u);
        EXPECT_EQ(codif_frames_per_period(h), 7u);
        EXPECT_EQ(h.seconds, position[stream].first) << "slot " << slot;
        EXPECT_EQ(h.frame, position[stream].second) << "slot " << slot;
        // (10, 5), (10, 6), (12, 0), ...: the independent walk.
        if (++position[stream].second == 7) {
            position[stream].second = 0;
            position[stream].first += 2;
        }
        const std::uint64_t index = timing.index(h.seconds, h.frame);
        EXPECT_EQ(index, 5u * 7u + 5u + slot);
        EXPECT_EQ(check_pattern(pattern_key(c.antennas[ai], thread, index), d.payload), 0u);
        EXPECT_TRUE(std::ranges::equal(
            d.payload, pattern(pattern_key(c.antennas[ai], thread, index), c.payload_bytes)));

        // Timestamps: the epoch, the header's seconds, frame x period / fpp.
        EXPECT_EQ(e.timestamp_ns, epoch_ns + std::uint64_t{h.seconds} * 1'000'000'000ull +
                                      std::uint64_t{h.frame} * period_ns / c.frames_per_period);
        if (slot > 0) {
            const std::uint64_t step = e.timestamp_ns - last_ts[stream];
            EXPECT_LE(step, period_ns / c.frames_per_period + 1);
            EXPECT_GE(step, period_ns / c.frames_per_period);
        }
        last_ts[stream] = e.timestamp_ns;
    }
    // First and last positions: slot 0 at (10, 5), slot 19 (absolute 24) at (16, 3).
    EXPECT_EQ(position[0].first, 16u);
    EXPECT_EQ(position[0].second, 4u);

    for (const auto& t : g.truth()) {
        EXPECT_EQ(t.slots, c.frames);
        EXPECT_EQ(t.sent, c.frames);
        EXPECT_EQ(t.skipped, 0u);
        EXPECT_EQ(t.duplicated, 0u);
        EXPECT_EQ(t.reordered, 0u);
        EXPECT_EQ(t.packets(), c.frames);
    }
    EXPECT_EQ(g.truth()[5].group, c.groups[1]);
    EXPECT_EQ(g.truth()[5].antenna, c.antennas[0]);
    EXPECT_EQ(g.truth()[5].thread, 1);
}

TEST(Generator, SinglePeriodAndDefaultPayload) {
    GeneratorConfig c;
    c.antennas = {ip(192, 168, 1, 2)};
    c.groups = {Endpoint{ip(239, 0, 0, 9), 4000}};
    c.frames = 5;
    c.frames_per_period = 3;
    Generator g(c);
    const auto frames = drain(g);
    ASSERT_EQ(frames.size(), 5u);
    const std::uint32_t expect_seconds[] = {0, 0, 0, 1, 1};
    const std::uint32_t expect_frame[] = {0, 1, 2, 0, 1};
    for (std::size_t i = 0; i < frames.size(); ++i) {
        Decoded d;
        ASSERT_TRUE(decode_frame(frames[i].bytes, d));
        EXPECT_EQ(d.codif.seconds, expect_seconds[i]);
        EXPECT_EQ(d.codif.frame, expect_frame[i]);
        EXPECT_EQ(d.payload.size(), 8192u);
        EXPECT_EQ(d.codif.totalsamples, 3u * 256u);
        EXPECT_EQ(check_pattern(pattern_key(c.antennas[0], 0, i), d.payload), 0u);
        EXPECT_EQ(frames[i].timestamp_ns, Generator::epoch_unix_ns(52) +
                                              expect_seconds[i] * 1'000'000'000ull +
                                              expect_frame[i] * 333'333'333ull);
    }
}

GeneratorConfig faulty_config(std::uint64_t seed) {
    GeneratorConfig c;
    c.antennas = {ip(10, 1, 0, 1), ip(10, 1, 0, 2), ip(10, 1, 0, 3)};
    c.groups = {Endpoint{ip(239, 17, 0, 1), 36001}};
    c.threads = 2;
    c.frames = 3000;
    c.payload_bytes = 64;
    c.nchan = 4;
    c.nbits = 8;
    c.complex = true;  // 64 bits per sample: 8 samples per frame
    c.frames_per_period = 100;
    c.start_seconds = 1000;
    c.loss = 0.05;
    c.duplicate = 0.05;
    c.reorder = 0.05;
    c.seed = seed;
    return c;
}

TEST(Generator, InjectedFaultsMatchTheGroundTruth) {
    const GeneratorConfig c = faulty_config(2024);
    Generator g(c);
    const std::uint64_t announced = g.total_packets();
    const auto frames = drain(g);
    EXPECT_EQ(announced, frames.size());
    EXPECT_EQ(g.total_packets(), frames.size());

    const CodifTiming timing{c.period, c.frames_per_period};
    const std::uint64_t first_index = timing.index(c.start_seconds, 0);
    std::vector<Observed> observed(g.truth().size());
    for (std::size_t i = 0; i < frames.size(); ++i) {
        Decoded d;
        ASSERT_TRUE(decode_frame(frames[i].bytes, d)) << i;
        const std::size_t s = frames[i].stream;
        ASSERT_LT(s, observed.size());
        const std::size_t ai = s / c.threads;
        ASSERT_EQ(d.udp.src_ip, c.antennas[ai]);
        ASSERT_EQ(d.codif.threadid, s % c.threads);
        const std::uint64_t index = timing.index(d.codif.seconds, d.codif.frame);
        ASSERT_GE(index, first_index);
        ASSERT_EQ(check_pattern(pattern_key(c.antennas[ai], d.codif.threadid, index), d.payload),
                  0u);
        observed[s].slots.push_back(index - first_index);
    }
    std::uint64_t skipped = 0, duplicated = 0, reordered = 0, packets = 0;
    for (std::size_t s = 0; s < observed.size(); ++s) {
        SCOPED_TRACE(s);
        Observed& o = observed[s];
        o.finish();
        const StreamTruth& t = g.truth()[s];
        EXPECT_EQ(t.slots, c.frames);
        EXPECT_EQ(t.sent, o.distinct);
        EXPECT_EQ(t.skipped, o.missing);
        EXPECT_EQ(t.duplicated, o.duplicates);
        EXPECT_EQ(t.reordered, o.out_of_order);
        EXPECT_EQ(t.packets(), o.slots.size());
        EXPECT_EQ(t.sent + t.skipped, c.frames);
        // First and last slots are sent as is: first and last to arrive, once each.
        ASSERT_FALSE(o.slots.empty());
        EXPECT_EQ(o.slots.front(), 0u);
        EXPECT_EQ(o.slots.back(), c.frames - 1);
        EXPECT_EQ(std::count(o.slots.begin(), o.slots.end(), 0u), 1);
        EXPECT_EQ(std::count(o.slots.begin(), o.slots.end(), c.frames - 1), 1);
        // Every fault shows up in every stream at these rates.
        EXPECT_GT(t.skipped, 50u);
        EXPECT_GT(t.duplicated, 50u);
        EXPECT_GT(t.reordered, 50u);
        skipped += t.skipped;
        duplicated += t.duplicated;
        reordered += t.reordered;
        packets += t.packets();
    }
    EXPECT_EQ(packets, frames.size());
    const nlohmann::json j = g.truth_json();
    EXPECT_EQ(j["totals"]["packets"], packets);
    EXPECT_EQ(j["totals"]["missing"], skipped);
    EXPECT_EQ(j["totals"]["duplicates"], duplicated);
    EXPECT_EQ(j["totals"]["out_of_order"], reordered);
}

TEST(Generator, FaultsOnlyAtTheEdgesOfTinyStreams) {
    // With every middle slot lost, only the first and last are sent.
    GeneratorConfig c = faulty_config(5);
    c.frames = 10;
    c.loss = 1;
    c.duplicate = 0;
    c.reorder = 0;
    Generator g(c);
    EXPECT_EQ(g.total_packets(), 2 * g.truth().size());
    const auto frames = drain(g);
    ASSERT_EQ(frames.size(), 2 * g.truth().size());
    for (const auto& t : g.truth()) {
        EXPECT_EQ(t.sent, 2u);
        EXPECT_EQ(t.skipped, 8u);
    }
    // All reordered: slots swap in pairs (1,2), (3,4), ..., never the last one.
    c.loss = 0;
    c.reorder = 1;
    c.frames = 7;
    Generator r(c);
    const auto swapped = drain(r);
    const CodifTiming timing{c.period, c.frames_per_period};
    const std::uint64_t first_index = timing.index(c.start_seconds, 0);
    std::vector<std::vector<std::uint64_t>> order(r.truth().size());
    for (const auto& f : swapped) {
        Decoded d;
        ASSERT_TRUE(decode_frame(f.bytes, d));
        order[f.stream].push_back(timing.index(d.codif.seconds, d.codif.frame) - first_index);
    }
    for (std::size_t s = 0; s < order.size(); ++s) {
        EXPECT_EQ(order[s], (std::vector<std::uint64_t>{0, 2, 1, 4, 3, 5, 6})) << s;
        EXPECT_EQ(r.truth()[s].reordered, 2u);
        EXPECT_EQ(r.truth()[s].sent, 7u);
    }
    EXPECT_EQ(r.total_packets(), swapped.size());
}

// (stream, slot) of every frame, in the order sent; the slot from the
// frame's own CODIF time.
std::vector<std::pair<std::size_t, std::uint64_t>> sent_order(const GeneratorConfig& c,
                                                              const std::vector<Emitted>& frames) {
    const CodifTiming timing{c.period, c.frames_per_period};
    const std::uint64_t first_index = timing.index(c.start_seconds, 0) + c.start_frame;
    std::vector<std::pair<std::size_t, std::uint64_t>> order;
    for (const auto& f : frames) {
        Decoded d;
        EXPECT_TRUE(decode_frame(f.bytes, d));
        order.emplace_back(f.stream, timing.index(d.codif.seconds, d.codif.frame) - first_index);
    }
    return order;
}

TEST(Generator, BurstSendsThatManySlotsOfOneStreamThenOfTheNext) {
    GeneratorConfig c = base_config();  // 8 streams x 20 slots, no faults
    for (const std::uint64_t burst : {1u, 3u, 20u, 50u}) {
        SCOPED_TRACE(burst);
        c.burst = burst;
        Generator g(c);
        const auto frames = drain(g);
        std::vector<std::pair<std::size_t, std::uint64_t>> expected;
        for (std::uint64_t first = 0; first < c.frames; first += burst) {
            for (std::size_t s = 0; s < g.truth().size(); ++s) {
                for (std::uint64_t slot = first; slot < std::min(c.frames, first + burst); ++slot) {
                    expected.emplace_back(s, slot);
                }
            }
        }
        EXPECT_EQ(sent_order(c, frames), expected);
        EXPECT_EQ(g.total_packets(), frames.size());
    }
}

TEST(Generator, BurstChangesTheOrderOnlyNotTheFramesOrTheTruth) {
    GeneratorConfig c = faulty_config(31);
    c.frames = 1000;
    Generator round_robin(c);
    const auto rr = drain(round_robin);
    c.burst = 7;  // 1000 is not a multiple: the last burst is short
    Generator bursts(c);
    const auto b = drain(bursts);
    ASSERT_EQ(rr.size(), b.size());
    EXPECT_EQ(round_robin.total_packets(), bursts.total_packets());
    EXPECT_EQ(round_robin.truth_json(), bursts.truth_json());
    const auto rr_order = sent_order(c, rr);
    const auto b_order = sent_order(c, b);
    EXPECT_NE(rr_order, b_order);
    // Per stream, the same frames (CODIF header and payload) in the same order.
    std::vector<std::vector<ByteVec>> per_stream_rr(round_robin.truth().size());
    std::vector<std::vector<ByteVec>> per_stream_b(bursts.truth().size());
    for (const auto& f : rr) {
        per_stream_rr[f.stream].emplace_back(f.bytes.begin() + 42, f.bytes.end());
    }
    for (const auto& f : b) {
        per_stream_b[f.stream].emplace_back(f.bytes.begin() + 42, f.bytes.end());
    }
    EXPECT_EQ(per_stream_rr, per_stream_b);
    // Runs of one stream are at most 7 slots long (a duplicate adds one frame).
    std::size_t longest = 0;
    for (std::size_t i = 0, run = 0; i < b.size(); ++i) {
        run = i > 0 && b[i].stream == b[i - 1].stream ? run + 1 : 1;
        longest = std::max(longest, run);
    }
    EXPECT_GE(longest, 6u);
    EXPECT_LE(longest, 14u);
}

ByteVec concatenated(const GeneratorConfig& c, std::vector<std::uint64_t>* timestamps = nullptr) {
    Generator g(c);
    ByteVec all;
    GeneratedFrame f;
    while (g.next(f)) {
        all.insert(all.end(), f.bytes.begin(), f.bytes.end());
        if (timestamps != nullptr) {
            timestamps->push_back(f.timestamp_ns);
        }
    }
    return all;
}

TEST(Generator, SameSeedSameBytesDifferentSeedDifferentFaults) {
    GeneratorConfig c = faulty_config(77);
    c.frames = 500;
    std::vector<std::uint64_t> ts1, ts2, ts3;
    const ByteVec a = concatenated(c, &ts1);
    const ByteVec b = concatenated(c, &ts2);
    EXPECT_TRUE(a == b);
    EXPECT_EQ(ts1, ts2);
    c.seed = 78;
    const ByteVec other = concatenated(c, &ts3);
    EXPECT_FALSE(a == other);
    EXPECT_NE(ts1, ts3);
    // The fates differ per stream, not only the bytes.
    Generator g77(faulty_config(77)), g78(faulty_config(78));
    drain(g77);
    drain(g78);
    std::vector<std::uint64_t> skipped77, skipped78;
    for (std::size_t s = 0; s < g77.truth().size(); ++s) {
        skipped77.push_back(g77.truth()[s].skipped);
        skipped78.push_back(g78.truth()[s].skipped);
    }
    EXPECT_NE(skipped77, skipped78);
}

TEST(Generator, DraftLayoutCarriesTheSameFields) {
    GeneratorConfig c = base_config();
    const auto v2 = [&] {
        Generator g(c);
        return drain(g);
    }();
    c.layout = CodifLayout::draft;
    Generator g(c);
    const auto draft = drain(g);
    ASSERT_EQ(draft.size(), v2.size());
    for (std::size_t i = 0; i < draft.size(); ++i) {
        SCOPED_TRACE(i);
        Decoded dd, dv;
        ASSERT_TRUE(decode_frame(draft[i].bytes, dd));
        ASSERT_TRUE(decode_frame(v2[i].bytes, dv));
        EXPECT_EQ(detect_codif_layout(Bytes(draft[i].bytes).subspan(42)), CodifLayout::draft);
        EXPECT_EQ(dd.codif.layout, CodifLayout::draft);
        CodifHeader as_v2 = dd.codif;
        as_v2.layout = CodifLayout::v2;
        EXPECT_EQ(as_v2, dv.codif);
        // Everything but the 64-byte CODIF header is the same frame.
        EXPECT_TRUE(
            std::equal(draft[i].bytes.begin(), draft[i].bytes.begin() + 42, v2[i].bytes.begin()));
        EXPECT_TRUE(std::equal(draft[i].bytes.begin() + 106, draft[i].bytes.end(),
                               v2[i].bytes.begin() + 106));
        EXPECT_EQ(draft[i].timestamp_ns, v2[i].timestamp_ns);
        EXPECT_EQ(draft[i].stream, v2[i].stream);
    }
}

// The sample block length, as DiFX's CODIF generator computes it
// (difx/difx libraries/vdifio/utils/generateVDIF.c: "sampleblock = 8*8; while
// (sampleblock % completesample) sampleblock += 64; sampleblock /= 64;" with
// completesample = nbits * (complex ? 2 : 1) * nchan bits), restated here.
std::uint64_t difx_sampleblock(std::uint64_t nbits, std::uint64_t nchan, bool complex) {
    const std::uint64_t completesample = nbits * (complex ? 2 : 1) * nchan;
    std::uint64_t sampleblock = 8 * 8;
    while (sampleblock % completesample != 0) {
        sampleblock += 64;
    }
    return sampleblock / 64;
}

// How a reader divides by it: CODIF.jl (david-macmahon/CODIF.jl src/CODIF.jl,
// getntime, written from the CODIF v1.2 specification) takes the sample block
// as 8 * blocklength bytes and the frame as data_length / blocklength sample
// blocks, each holding ceil(block bytes / bytes per complete sample) time
// samples (bytes per sample = nbits / 8, so whole-byte samples only), restated.
std::uint64_t codif_jl_ntime(const CodifHeader& h) {
    const std::uint64_t bytes_per_channel_block =
        std::uint64_t{h.nbits} / 8 * (h.complex ? 2u : 1u) * h.nchan;
    const std::uint64_t bytes_per_sample_block = 8 * std::uint64_t{h.blocklength};
    const std::uint64_t channel_blocks_per_sample_block =
        (bytes_per_sample_block + bytes_per_channel_block - 1) / bytes_per_channel_block;
    return channel_blocks_per_sample_block * (h.framelength8 / h.blocklength);
}

TEST(Generator, BlocklengthIsDifxSampleBlockInBothLayouts) {
    struct Shape {
        std::uint32_t payload;
        std::uint16_t nchan;
        std::uint8_t nbits;
        bool complex;
        std::uint64_t words;  // worked out by hand
    };
    const Shape shapes[] = {
        {1024, 16, 8, true, 4},  // 256-bit sample: 4 words
        {1024, 1, 2, false, 1},  // 2-bit sample: 32 per word
        {8000, 1, 8, false, 1},  // 8-bit sample: 8 per word
        {8064, 7, 4, false, 7},  // 28-bit sample: lcm(64, 28) = 448 bits = 7 words
        {960, 3, 10, true, 15},  // 60-bit sample: lcm(64, 60) = 960 bits = 15 words
        {4096, 64, 16, true, 32}, {1200, 5, 3, false, 15},  // 15-bit sample: lcm(64, 15) = 960 bits
    };
    for (const Shape& s : shapes) {
        SCOPED_TRACE(s.words);
        GeneratorConfig c = base_config();
        c.payload_bytes = s.payload;
        c.nchan = s.nchan;
        c.nbits = s.nbits;
        c.complex = s.complex;
        c.frames = 2;
        ASSERT_NO_THROW(c.validate());
        EXPECT_EQ(difx_sampleblock(s.nbits, s.nchan, s.complex), s.words);
        EXPECT_EQ(c.blocklength(), s.words);
        EXPECT_EQ(s.payload % (s.words * 8), 0u);  // the payload is whole blocks
        for (const CodifLayout layout : {CodifLayout::v2, CodifLayout::draft}) {
            c.layout = layout;
            Generator g(c);
            for (const Emitted& e : drain(g)) {
                const auto header = Bytes(e.bytes).subspan(42, kCodifHeaderBytes);
                const std::uint64_t read_by_difx =
                    layout == CodifLayout::v2
                        ? static_cast<std::uint64_t>(test::codifio::v2::getCODIFSampleblockLength(
                              test::codifio::read_header<test::codifio::v2::Header>(header)))
                        : static_cast<std::uint64_t>(
                              test::codifio::draft::getCODIFSampleblockLength(
                                  test::codifio::read_header<test::codifio::draft::Header>(
                                      header)));
                EXPECT_EQ(read_by_difx, s.words) << to_string(layout);
                if (s.nbits % 8 == 0) {
                    CodifHeader h;
                    ASSERT_EQ(decode_codif(header, h), CodifError::none);
                    EXPECT_EQ(codif_jl_ntime(h), c.samples_per_frame()) << to_string(layout);
                }
            }
        }
    }
}

TEST(Generator, VlanTaggedFrames) {
    for (const int vlan : {100, 0, 4094}) {
        SCOPED_TRACE(vlan);
        GeneratorConfig c = base_config();
        c.vlan_id = vlan;
        c.frames = 3;
        EXPECT_EQ(c.frame_bytes(), 46u + 64u + 1024u);
        Generator g(c);
        const auto frames = drain(g);
        ASSERT_EQ(frames.size(), 3u * 8u);
        for (const auto& f : frames) {
            ASSERT_EQ(f.bytes.size(), c.frame_bytes());
            Decoded d;
            ASSERT_TRUE(decode_frame(f.bytes, d));
            EXPECT_EQ(d.udp.vlan_count, 1u);
            EXPECT_EQ(d.udp.vlan_ids[0], vlan);
            EXPECT_EQ(d.udp.payload_offset, 46u);
            EXPECT_EQ(d.udp.ip_offset, 18u);
            EXPECT_EQ(d.codif.period, 2);
            const std::size_t ai = (f.stream / c.threads) % c.antennas.size();
            EXPECT_EQ(
                check_pattern(pattern_key(c.antennas[ai], d.codif.threadid,
                                          CodifTiming{2, 7}.index(d.codif.seconds, d.codif.frame)),
                              d.payload),
                0u);
        }
    }
}

TEST(Generator, TruthJsonKeysAndValues) {
    GeneratorConfig c = base_config();
    c.reorder = 0.2;
    c.loss = 0.1;
    c.seed = 3;
    Generator g(c);
    const auto frames = drain(g);
    const nlohmann::json j = g.truth_json();
    ASSERT_TRUE(j.contains("totals"));
    ASSERT_TRUE(j.contains("streams"));
    const auto& totals = j["totals"];
    for (const char* key : {"packets", "missing", "duplicates", "out_of_order", "frame_bytes"}) {
        EXPECT_TRUE(totals.contains(key)) << key;
    }
    EXPECT_EQ(totals["packets"], frames.size());
    EXPECT_EQ(totals["frame_bytes"], 42 + 64 + 1024);
    ASSERT_EQ(j["streams"].size(), 8u);
    std::uint64_t missing = 0, out_of_order = 0;
    for (std::size_t s = 0; s < 8; ++s) {
        SCOPED_TRACE(s);
        const auto& js = j["streams"][s];
        const StreamTruth& t = g.truth()[s];
        for (const char* key : {"group", "antenna", "thread", "slots", "sent", "packets", "missing",
                                "duplicates", "out_of_order", "first", "last"}) {
            EXPECT_TRUE(js.contains(key)) << key;
        }
        EXPECT_EQ(js["group"], s < 4 ? "239.17.0.1:36001" : "239.17.0.2:36002");
        EXPECT_EQ(js["antenna"], (s / 2) % 2 == 0 ? "10.0.0.11" : "10.0.0.12");
        EXPECT_EQ(js["thread"], s % 2);
        EXPECT_EQ(js["slots"], 20);
        EXPECT_EQ(js["sent"], t.sent);
        EXPECT_EQ(js["packets"], t.packets());
        EXPECT_EQ(js["missing"], t.skipped);
        EXPECT_EQ(js["duplicates"], t.duplicated);
        EXPECT_EQ(js["out_of_order"], t.reordered);
        // Slot 0 is (10, 5); slot 19 is absolute frame 24: period 5 + 3 = 8 -> (16, 3).
        EXPECT_EQ(js["first"], (nlohmann::json{{"seconds", 10}, {"frame", 5}}));
        EXPECT_EQ(js["last"], (nlohmann::json{{"seconds", 16}, {"frame", 3}}));
        missing += t.skipped;
        out_of_order += t.reordered;
    }
    EXPECT_EQ(totals["missing"], missing);
    EXPECT_EQ(totals["out_of_order"], out_of_order);
    EXPECT_EQ(totals["duplicates"], 0);
    EXPECT_GT(missing, 0u);
    EXPECT_GT(out_of_order, 0u);
}

// A header layout that cannot hold a setting must be refused by validate(), or
// the frames must still carry it: the draft layout has 5 bits for nbits (the CLI
// allows --nbits 32), 6 for the epoch and 30 for the seconds.
TEST(Generator, DraftLayoutRefusesOrKeepsFieldsItCannotHold) {
    struct Case {
        const char* what;
        std::function<void(GeneratorConfig&)> change;
        std::function<void(const CodifHeader&, const GeneratorConfig&)> check;
    };
    const std::vector<Case> cases = {
        {"nbits 32",
         [](GeneratorConfig& c) {
             c.nbits = 32;
             c.payload_bytes = 8192;
         },
         [](const CodifHeader& h, const GeneratorConfig&) { EXPECT_EQ(h.nbits, 32); }},
        {"epoch 64 (2032-01-01)", [](GeneratorConfig& c) { c.epoch = 64; },
         [](const CodifHeader& h, const GeneratorConfig&) { EXPECT_EQ(h.epoch, 64); }},
        {"seconds 2^30", [](GeneratorConfig& c) { c.start_seconds = 1u << 30; },
         [](const CodifHeader& h, const GeneratorConfig&) { EXPECT_GE(h.seconds, 1u << 30); }},
    };
    for (const auto& k : cases) {
        SCOPED_TRACE(k.what);
        GeneratorConfig c = base_config();
        c.layout = CodifLayout::draft;
        c.frames = 2;
        k.change(c);
        bool refused = false;
        try {
            c.validate();
        } catch (const std::invalid_argument&) {
            refused = true;
        }
        if (refused) {
            continue;
        }
        Generator g(c);
        GeneratedFrame f;
        ASSERT_TRUE(g.next(f));
        Decoded d;
        EXPECT_TRUE(decode_frame(f.bytes, d));
        k.check(d.codif, c);
    }
}

// The same for the v2 layout's 32-bit seconds: a run that walks past 2^32 - 1
// seconds must be refused, not wrapped to 0.
TEST(Generator, RefusesOrKeepsSecondsBeyond32Bits) {
    GeneratorConfig c = base_config();
    c.groups.resize(1);
    c.antennas.resize(1);
    c.threads = 1;
    c.period = 1;
    c.frames_per_period = 1;
    c.start_frame = 0;
    c.start_seconds = 0xFFFFFFFEu;
    c.frames = 4;
    bool refused = false;
    try {
        c.validate();
    } catch (const std::invalid_argument&) {
        refused = true;
    }
    if (refused) {
        return;
    }
    Generator g(c);
    const auto frames = drain(g);
    ASSERT_EQ(frames.size(), 4u);
    std::uint64_t previous = 0;
    for (std::size_t i = 0; i < frames.size(); ++i) {
        Decoded d;
        ASSERT_TRUE(decode_frame(frames[i].bytes, d));
        if (i > 0) {
            EXPECT_GT(d.codif.seconds, previous) << "seconds wrapped at frame " << i;
        }
        previous = d.codif.seconds;
    }
}

}  // namespace
}  // namespace ibvcap
