// Unit tests for the traffic generator's VDIF and VTP frames and its `invalid`
// fault (lib/traffic/generator.hpp), and `ibvcap gen`'s VDIF options
// (capture/cmd_gen.cpp). Every frame is read back with the VDIF decoder
// (formats/vdif.hpp) and every count is made from the frames themselves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "cli.hpp"
#include "formats/codif.hpp"
#include "formats/packet.hpp"
#include "formats/vdif.hpp"
#include "frames.hpp"
#include "lib/core/netaddr.hpp"
#include "lib/traffic/generator.hpp"
#include "lib/traffic/pattern.hpp"

namespace ibvcap {
namespace {

using ByteVec = std::vector<std::uint8_t>;

constexpr std::uint32_t ip(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
    return (std::uint32_t{a} << 24) | (std::uint32_t{b} << 16) | (std::uint32_t{c} << 8) | d;
}

constexpr std::uint16_t code(char a, char b) {
    return static_cast<std::uint16_t>(static_cast<unsigned char>(a) << 8 |
                                      static_cast<unsigned char>(b));
}

// 2 groups x 2 antennas x 3 threads, 40 slots from (100 s, frame 5) at 7
// frames per second; 16 channels x 8 bits x complex = 32 bytes a sample, 32
// samples in the 1024-byte payload.
GeneratorConfig vdif_config(StreamFormat format = StreamFormat::vdif) {
    GeneratorConfig c;
    c.format = format;
    c.antennas = {ip(10, 0, 0, 11), ip(10, 0, 0, 12)};
    c.groups = {Endpoint{ip(239, 17, 0, 1), 36001}, Endpoint{ip(239, 17, 0, 2), 36002}};
    c.threads = 3;
    c.frames = 40;
    c.payload_bytes = 1024;
    c.nchan = 16;
    c.nbits = 8;
    c.complex = true;
    c.vdif.frames_per_second = 7;
    c.start_seconds = 100;
    c.start_frame = 5;
    return c;
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
    return out;
}

// One frame read back: the UDP headers, the VTP sequence number (vtp), the
// VDIF header and the payload.
struct VdifFrame {
    UdpPacket udp;
    bool has_psn = false;
    std::uint64_t psn = 0;
    VdifHeader h;
    Bytes datagram;
    Bytes payload;
};

::testing::AssertionResult read_frame(Bytes frame, StreamFormat format, VdifFrame& d) {
    if (const PacketError e = parse_udp_frame(frame, frame.size(), d.udp); e != PacketError::none) {
        return ::testing::AssertionFailure() << "parse_udp_frame: " << to_string(e);
    }
    if (d.udp.payload_offset + d.udp.payload_bytes != frame.size()) {
        return ::testing::AssertionFailure() << "UDP payload does not end the frame";
    }
    d.datagram = frame.subspan(d.udp.payload_offset, d.udp.payload_bytes);
    Bytes vdif = d.datagram;
    d.has_psn = format == StreamFormat::vtp;
    if (d.has_psn) {
        if (vdif.size() < kVtpPsnBytes) {
            return ::testing::AssertionFailure() << "no room for a VTP sequence number";
        }
        d.psn = load_le64(vdif.data());
        vdif = vdif.subspan(kVtpPsnBytes);
    }
    if (const VdifError e = decode_vdif(vdif, d.h); e != VdifError::none) {
        return ::testing::AssertionFailure() << "decode_vdif: " << to_string(e);
    }
    if (const VdifError e = validate_vdif(d.h, vdif.size()); e != VdifError::none) {
        return ::testing::AssertionFailure() << "validate_vdif: " << to_string(e);
    }
    d.payload = vdif.subspan(d.h.header_bytes());
    return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------
// GeneratorConfig::validate for VDIF

std::string rejection(const std::function<void(GeneratorConfig&)>& change) {
    GeneratorConfig c = vdif_config();
    change(c);
    try {
        c.validate();
    } catch (const std::invalid_argument& e) {
        EXPECT_THROW(Generator{c}, std::invalid_argument);
        return e.what();
    }
    return "(accepted)";
}

TEST(GeneratorVdifConfig, DefaultsAndTheTestConfigAreValid) {
    for (const auto format : {StreamFormat::vdif, StreamFormat::vtp}) {
        GeneratorConfig defaults;
        defaults.format = format;
        defaults.antennas = {1};
        defaults.groups = {Endpoint{ip(239, 1, 1, 1), 1}};
        EXPECT_NO_THROW(defaults.validate());
        EXPECT_NO_THROW(vdif_config(format).validate());
    }
    EXPECT_EQ(vdif_config().frame_bytes(), 42u + 32u + 1024u);
    EXPECT_EQ(vdif_config(StreamFormat::vtp).frame_bytes(), 42u + 8u + 32u + 1024u);
    GeneratorConfig legacy = vdif_config(StreamFormat::vtp);
    legacy.vdif.legacy = true;
    EXPECT_EQ(legacy.frame_bytes(), 42u + 8u + 16u + 1024u);
    legacy.vlan_id = 5;
    EXPECT_EQ(legacy.frame_bytes(), 46u + 8u + 16u + 1024u);
}

TEST(GeneratorVdifConfig, EachInconsistentSettingIsRefusedNamingTheFix) {
    using C = GeneratorConfig;
    const std::vector<std::pair<std::function<void(C&)>, std::string>> cases = {
        {[](C& c) { c.vdif.frames_per_second = 0; }, "--vdif-frames-per-second must be at least 1"},
        {[](C& c) { c.vdif.frames_per_second = (1u << 24) + 1; }, "over 2^24"},
        {[](C& c) { c.payload_bytes = 1020; }, "multiple of 8"},
        {[](C& c) { c.nchan = 12; }, "--nchan 12 is not a power of two"},
        {[](C& c) { c.nchan = 12; }, "use 8 or 16"},
        {[](C& c) { c.nbits = 33; }, "1 to 32 bits"},
        {[](C& c) { c.threads = 1025; }, "at most 1024 threads"},
        {[](C& c) { c.epoch = 64; }, "0 to 63"},
        {[](C& c) { c.period = 2; }, "--period 2 is CODIF's"},
        {[](C& c) { c.vdif.edv = 5; }, "--vdif-edv 5 is not one"},
        {[](C& c) {
             c.vdif.legacy = true;
             c.vdif.edv = 3;
         },
         "leave out --vdif-edv 3 or --vdif-legacy"},
        {[](C& c) { c.vdif.stations = {code('E', 'f')}; }, "give one per antenna"},
        {[](C& c) { c.start_seconds = (1u << 30) - 1; }, "past 2^30 - 1"},
        {[](C& c) { c.invalid = -0.1; }, "--invalid is a probability"},
        {[](C& c) { c.invalid = 1.5; }, "--invalid is a probability"},
        {[](C& c) { c.invalid = std::nan(""); }, "--invalid is a probability"},
        // 20 + 8 + 32 + 65480 = 65540.
        {[](C& c) { c.payload_bytes = 65480; }, "does not fit in one IPv4 datagram"},
    };
    for (const auto& [change, says] : cases) {
        const std::string why = rejection(change);
        EXPECT_NE(why.find(says), std::string::npos) << "wanted '" << says << "', got: " << why;
    }
}

TEST(GeneratorVdifConfig, AcceptsTheEdgesOfEachRange) {
    using C = GeneratorConfig;
    const std::vector<std::function<void(C&)>> cases = {
        [](C& c) { c.vdif.frames_per_second = 1u << 24; },
        [](C& c) { c.vdif.frames_per_second = 1; },
        [](C& c) { c.threads = 1024; },
        [](C& c) {
            c.nchan = 1;
            c.nbits = 32;
            c.complex = false;
        },
        [](C& c) { c.epoch = 63; },
        [](C& c) { c.vdif.edv = 4; },
        [](C& c) { c.vdif.legacy = true; },
        [](C& c) {
            c.vdif.stations = {code('E', 'f'), 0xFFFF};
        },
        // The last frame at 2^30 - 1 seconds: 40 slots at 7 a second from
        // frame 5 reach 6 seconds later.
        [](C& c) { c.start_seconds = (1u << 30) - 7; },
        [](C& c) { c.invalid = 1; },
        // 20 + 8 + 32 + 65472 = 65532 for VDIF: more than CODIF's largest.
        [](C& c) { c.payload_bytes = 65472; },
    };
    for (std::size_t i = 0; i < cases.size(); ++i) {
        EXPECT_EQ(rejection(cases[i]), "(accepted)") << "case " << i;
    }
    // The same payload with a VTP sequence number no longer fits.
    GeneratorConfig c = vdif_config(StreamFormat::vtp);
    c.payload_bytes = 65472;
    EXPECT_THROW(c.validate(), std::invalid_argument);
}

TEST(GeneratorVdifConfig, DefaultStationsAreTwoLetterCodes) {
    EXPECT_EQ(VdifGeneratorConfig::default_station(0), code('A', 'A'));
    EXPECT_EQ(VdifGeneratorConfig::default_station(1), code('A', 'B'));
    EXPECT_EQ(VdifGeneratorConfig::default_station(25), code('A', 'Z'));
    EXPECT_EQ(VdifGeneratorConfig::default_station(26), code('B', 'A'));
    EXPECT_EQ(VdifGeneratorConfig::default_station(199), code('H', 'R'));
    GeneratorConfig c = vdif_config();
    EXPECT_EQ(c.station(1), code('A', 'B'));
    c.vdif.stations = {code('E', 'f'), 42};
    EXPECT_EQ(c.station(0), code('E', 'f'));
    EXPECT_EQ(c.station(1), 42);
    c.format = StreamFormat::codif;  // CODIF: the antenna index
    EXPECT_EQ(c.station(1), 1);
}

// ---------------------------------------------------------------------------
// The frames

TEST(GeneratorVdif, EveryFrameDecodesToTheConfiguredFields) {
    for (const auto format : {StreamFormat::vdif, StreamFormat::vtp}) {
        for (const bool legacy : {false, true}) {
            for (const bool custom_stations : {false, true}) {
                SCOPED_TRACE(std::string(to_string(format)) + (legacy ? " legacy" : " standard") +
                             (custom_stations ? " stations Ef, 0x1234" : " default stations"));
                GeneratorConfig c = vdif_config(format);
                c.vdif.legacy = legacy;
                c.complex = !custom_stations;  // real samples in half the cases
                c.epoch = 51;
                if (custom_stations) {
                    c.vdif.stations = {code('E', 'f'), 0x1234};
                }
                const std::uint16_t stations[2] = {
                    custom_stations ? code('E', 'f') : code('A', 'A'),
                    custom_stations ? std::uint16_t{0x1234} : code('A', 'B')};
                Generator g(c);
                const auto frames = drain(g);
                const std::size_t streams = 2 * 2 * 3;
                ASSERT_EQ(frames.size(), streams * c.frames);
                const std::size_t header = legacy ? 16 : 32;
                const std::size_t prefix = format == StreamFormat::vtp ? 8 : 0;
                for (std::size_t i = 0; i < frames.size(); ++i) {
                    SCOPED_TRACE(i);
                    const Emitted& e = frames[i];
                    const std::size_t slot = i / streams;
                    const std::size_t stream = i % streams;
                    const std::size_t gi = stream / 6;
                    const std::size_t ai = (stream / 3) % 2;
                    const auto thread = static_cast<std::uint16_t>(stream % 3);
                    ASSERT_EQ(e.stream, stream);
                    ASSERT_EQ(e.bytes.size(), 42 + prefix + header + c.payload_bytes);
                    VdifFrame d;
                    ASSERT_TRUE(read_frame(e.bytes, format, d));
                    EXPECT_EQ(d.udp.src_ip, c.antennas[ai]);
                    EXPECT_EQ(d.udp.dst_ip, c.groups[gi].ip);
                    EXPECT_EQ(d.udp.dst_port, c.groups[gi].port);
                    EXPECT_EQ(d.udp.payload_bytes, prefix + header + c.payload_bytes);
                    const VdifHeader& h = d.h;
                    EXPECT_FALSE(h.invalid);
                    EXPECT_EQ(h.legacy, legacy);
                    EXPECT_EQ(h.header_bytes(), header);
                    EXPECT_EQ(h.frame_bytes(), header + c.payload_bytes);
                    EXPECT_EQ(h.framelength8, (header + c.payload_bytes) / 8);
                    EXPECT_EQ(h.epoch, 51);
                    EXPECT_EQ(h.version, 0);
                    EXPECT_EQ(h.log2_nchan, 4);
                    EXPECT_EQ(h.nchan(), 16u);
                    EXPECT_EQ(h.nbits, 8);
                    EXPECT_EQ(h.complex, c.complex);
                    EXPECT_EQ(h.station, stations[ai]);
                    EXPECT_EQ(h.thread, thread);
                    EXPECT_EQ(h.edv, 0);
                    EXPECT_EQ(h.extended, (std::array<std::uint32_t, 4>{}));
                    // Slot 0 is absolute frame 5 of second 100.
                    const std::uint64_t index = 100u * 7u + 5u + slot;
                    EXPECT_EQ(h.seconds, index / 7);
                    EXPECT_EQ(h.frame, index % 7);
                    if (prefix != 0) {
                        EXPECT_EQ(d.psn, slot);
                    }
                    EXPECT_EQ(d.payload.size(), c.payload_bytes);
                    EXPECT_EQ(check_pattern(pattern_key(c.antennas[ai], thread, index), d.payload),
                              0u);
                    // The legacy header is four words: the payload starts at 16.
                    if (legacy) {
                        VdifHeader only16;
                        EXPECT_EQ(
                            decode_vdif(d.datagram.subspan(prefix, kVdifLegacyHeaderBytes), only16),
                            VdifError::none);
                        EXPECT_EQ(only16, h);
                        EXPECT_NE(load_le32(d.datagram.data() + prefix) & (1u << 30), 0u);
                    }
                }
                for (std::size_t s = 0; s < g.truth().size(); ++s) {
                    EXPECT_EQ(g.truth()[s].station, stations[(s / 3) % 2]);
                }
            }
        }
    }
}

TEST(GeneratorVdif, FrameNumbersWrapAtTheFrameRateIntoTheNextSecond) {
    GeneratorConfig c = vdif_config();
    c.groups.resize(1);
    c.antennas.resize(1);
    c.threads = 1;
    c.frames = 30;  // from (100, 5): four wraps
    Generator g(c);
    const auto frames = drain(g);
    ASSERT_EQ(frames.size(), 30u);
    const std::uint64_t epoch_ns = Generator::epoch_unix_ns(52);
    std::uint32_t wraps = 0;
    for (std::size_t i = 0; i < frames.size(); ++i) {
        SCOPED_TRACE(i);
        VdifFrame d;
        ASSERT_TRUE(read_frame(frames[i].bytes, c.format, d));
        EXPECT_LT(d.h.frame, 7u);
        if (i == 0) {
            EXPECT_EQ(d.h.seconds, 100u);
            EXPECT_EQ(d.h.frame, 5u);
        } else {
            VdifFrame p;
            ASSERT_TRUE(read_frame(frames[i - 1].bytes, c.format, p));
            if (p.h.frame == 6) {
                ++wraps;
                EXPECT_EQ(d.h.frame, 0u);
                EXPECT_EQ(d.h.seconds, p.h.seconds + 1);
            } else {
                EXPECT_EQ(d.h.frame, p.h.frame + 1);
                EXPECT_EQ(d.h.seconds, p.h.seconds);
            }
        }
        // The epoch, the seconds, and frame / frames per second.
        EXPECT_EQ(frames[i].timestamp_ns, epoch_ns + std::uint64_t{d.h.seconds} * 1'000'000'000u +
                                              std::uint64_t{d.h.frame} * 1'000'000'000u / 7u);
    }
    EXPECT_EQ(wraps, 4u);
    VdifFrame last;
    ASSERT_TRUE(read_frame(frames.back().bytes, c.format, last));
    EXPECT_EQ(last.h.seconds, 104u);  // absolute 705 + 29 = 734 = 104 * 7 + 6
    EXPECT_EQ(last.h.frame, 6u);
    const auto truth = g.truth_json();
    EXPECT_EQ(truth["streams"][0]["first"], (nlohmann::json{{"seconds", 100}, {"frame", 5}}));
    EXPECT_EQ(truth["streams"][0]["last"], (nlohmann::json{{"seconds", 104}, {"frame", 6}}));
}

TEST(GeneratorVdif, OneFramePerSecondAndTheLargestRate) {
    GeneratorConfig c = vdif_config();
    c.groups.resize(1);
    c.antennas.resize(1);
    c.threads = 1;
    c.start_frame = 0;
    c.frames = 3;
    c.vdif.frames_per_second = 1;
    {
        Generator g(c);
        const auto frames = drain(g);
        for (std::size_t i = 0; i < frames.size(); ++i) {
            VdifFrame d;
            ASSERT_TRUE(read_frame(frames[i].bytes, c.format, d));
            EXPECT_EQ(d.h.seconds, 100u + i);
            EXPECT_EQ(d.h.frame, 0u);
        }
    }
    c.vdif.frames_per_second = 1u << 24;
    c.start_frame = (1u << 24) - 2;  // the last two frame numbers, then a wrap
    Generator g(c);
    const auto frames = drain(g);
    const std::uint32_t want[][2] = {{100, (1u << 24) - 2}, {100, (1u << 24) - 1}, {101, 0}};
    for (std::size_t i = 0; i < frames.size(); ++i) {
        VdifFrame d;
        ASSERT_TRUE(read_frame(frames[i].bytes, c.format, d));
        EXPECT_EQ(d.h.seconds, want[i][0]) << i;
        EXPECT_EQ(d.h.frame, want[i][1]) << i;
    }
}

TEST(GeneratorVdif, ExtendedDataPerEdv) {
    struct Case {
        std::uint8_t edv;
        bool complex;
        std::uint64_t fps;
        std::array<std::uint32_t, 4> want;
    };
    // 1024 bytes of 16-channel 8-bit samples: 32 complex or 64 real a frame.
    const Case cases[] = {
        // 7 frames x 32 = 224 complex samples a second: not whole kHz, 0.
        {1, true, 7, {0, 0xACABFEEDu, 0, 0}},
        // 1000 x 32 = 32,000: 32 kHz.
        {3, true, 1000, {32, 0xACABFEEDu, 0, 0}},
        // 125,000 x 32 = 4 MHz, the MHz unit (bit 23).
        {3, true, 125000, {4u | 1u << 23, 0xACABFEEDu, 0, 0}},
        // Real: 125,000 x 64 = 8 M real samples a second, the field half: 4 MHz.
        {1, false, 125000, {4u | 1u << 23, 0xACABFEEDu, 0, 0}},
        {2, true, 1000, {0xA5EA5u << 4, 0, 0, 0}},
        // 16 channels: a 16-bit validity mask, all set.
        {4, true, 1000, {16u << 16, 0xACABFEEDu, 0xFFFFu, 0}},
        {0, true, 1000, {0, 0, 0, 0}},
    };
    for (const Case& k : cases) {
        SCOPED_TRACE(static_cast<int>(k.edv));
        SCOPED_TRACE(k.fps);
        GeneratorConfig c = vdif_config(StreamFormat::vtp);
        c.vdif.edv = k.edv;
        c.complex = k.complex;
        c.vdif.frames_per_second = k.fps;
        c.frames = 3;
        Generator g(c);
        for (const auto& e : drain(g)) {
            VdifFrame d;
            ASSERT_TRUE(read_frame(e.bytes, c.format, d));
            EXPECT_EQ(d.h.edv, k.edv);
            EXPECT_EQ(d.h.extended, k.want);
        }
    }
    // 64 channels and more: a full 64-bit mask.
    GeneratorConfig c = vdif_config();
    c.vdif.edv = 4;
    c.nchan = 128;
    c.nbits = 2;
    c.complex = false;
    c.frames = 2;
    Generator g(c);
    for (const auto& e : drain(g)) {
        VdifFrame d;
        ASSERT_TRUE(read_frame(e.bytes, c.format, d));
        EXPECT_EQ(d.h.log2_nchan, 7);
        EXPECT_EQ(d.h.extended, (std::array<std::uint32_t, 4>{64u << 16, 0xACABFEEDu, ~0u, ~0u}));
    }
}

// ---------------------------------------------------------------------------
// Faults: the truth against what the frames say

struct Counted {
    test::Observed seen;
    std::uint64_t packets = 0;
    std::uint64_t invalid = 0;  // distinct frames with the invalid bit
    std::uint64_t invalid_copies = 0;
    std::uint16_t station = 0;
    std::vector<std::uint64_t> psns;
};

// Per stream (group, antenna, station, thread) read from the frames alone.
using StreamKey =
    std::tuple<std::uint32_t, std::uint16_t, std::uint32_t, std::uint16_t, std::uint16_t>;

std::map<StreamKey, Counted> count_frames(const std::vector<Emitted>& frames,
                                          const GeneratorConfig& c) {
    std::map<StreamKey, Counted> out;
    const StreamTiming timing = c.timing();
    for (const auto& e : frames) {
        std::uint32_t group = 0, antenna = 0, seconds = 0, frame = 0;
        std::uint16_t port = 0, station = 0, thread = 0;
        bool invalid = false;
        if (c.is_vdif()) {
            VdifFrame d;
            EXPECT_TRUE(read_frame(e.bytes, c.format, d));
            group = d.udp.dst_ip;
            port = d.udp.dst_port;
            antenna = d.udp.src_ip;
            station = d.h.station;
            thread = d.h.thread;
            seconds = d.h.seconds;
            frame = d.h.frame;
            invalid = d.h.invalid;
            if (d.has_psn) {
                out[{group, port, antenna, station, thread}].psns.push_back(d.psn);
            }
        } else {
            UdpPacket udp;
            EXPECT_EQ(parse_udp_frame(e.bytes, e.bytes.size(), udp), PacketError::none);
            CodifHeader h;
            const Bytes datagram = Bytes(e.bytes).subspan(udp.payload_offset);
            EXPECT_EQ(decode_codif(datagram, h), CodifError::none);
            EXPECT_EQ(validate_codif(h, datagram.size()), CodifError::none);
            group = udp.dst_ip;
            port = udp.dst_port;
            antenna = udp.src_ip;
            station = h.stationid;
            thread = h.threadid;
            seconds = h.seconds;
            frame = h.frame;
            invalid = h.invalid;
        }
        Counted& k = out[{group, port, antenna, station, thread}];
        const std::uint64_t index = timing.index(seconds, frame);
        const bool again = std::ranges::find(k.seen.slots, index) != k.seen.slots.end();
        k.seen.slots.push_back(index);
        k.station = station;
        ++k.packets;
        if (invalid) {
            ++(again ? k.invalid_copies : k.invalid);
        }
    }
    for (auto& [key, k] : out) {
        k.seen.finish();
    }
    return out;
}

GeneratorConfig faulty(StreamFormat format, std::uint64_t seed) {
    GeneratorConfig c = vdif_config(format);
    c.groups.resize(1);
    c.frames = 2000;
    c.payload_bytes = 64;
    c.nchan = 2;  // 2 x 8 bits x complex: 4 bytes, 16 samples a frame
    c.vdif.frames_per_second = 100;
    c.start_frame = 0;
    c.loss = 0.05;
    c.duplicate = 0.05;
    c.reorder = 0.05;
    c.invalid = 0.1;
    c.seed = seed;
    return c;
}

void expect_truth_is_what_was_sent(const GeneratorConfig& c) {
    Generator g(c);
    const std::uint64_t announced = g.total_packets();
    const auto frames = drain(g);
    EXPECT_EQ(announced, frames.size());
    const auto counted = count_frames(frames, c);
    ASSERT_EQ(counted.size(), g.truth().size());
    const nlohmann::json j = g.truth_json();
    std::uint64_t invalid = 0, duplicates = 0, missing = 0, out_of_order = 0;
    for (std::size_t s = 0; s < g.truth().size(); ++s) {
        SCOPED_TRACE(s);
        const StreamTruth& t = g.truth()[s];
        const auto it = counted.find({t.group.ip, t.group.port, t.antenna, t.station, t.thread});
        ASSERT_NE(it, counted.end()) << "no frames of the truth's stream";
        const Counted& k = it->second;
        EXPECT_EQ(k.station, t.station);
        EXPECT_EQ(k.packets, t.packets());
        EXPECT_EQ(k.seen.distinct, t.sent);
        EXPECT_EQ(k.seen.missing, t.skipped);
        EXPECT_EQ(k.seen.duplicates, t.duplicated);
        EXPECT_EQ(k.seen.out_of_order, t.reordered);
        EXPECT_EQ(k.invalid, t.invalid);
        EXPECT_EQ(k.invalid_copies, 0u) << "a duplicated frame is never invalid";
        EXPECT_EQ(k.seen.distinct + k.seen.missing, t.slots);
        // Never the first or last slot.
        EXPECT_EQ(k.seen.slots.front(), c.timing().index(c.start_seconds, 0) + c.start_frame);
        const auto& js = j["streams"][s];
        EXPECT_EQ(js["format"], to_string(c.format));
        EXPECT_EQ(js["station"], t.station);
        EXPECT_EQ(js["invalid"], k.invalid);
        EXPECT_EQ(js["packets"], k.packets);
        EXPECT_EQ(js["missing"], k.seen.missing);
        EXPECT_EQ(js["duplicates"], k.seen.duplicates);
        EXPECT_EQ(js["out_of_order"], k.seen.out_of_order);
        // Every fault happened, so each count is tested.
        EXPECT_GT(k.invalid, 0u);
        EXPECT_GT(k.seen.missing, 0u);
        EXPECT_GT(k.seen.duplicates, 0u);
        EXPECT_GT(k.seen.out_of_order, 0u);
        invalid += k.invalid;
        duplicates += k.seen.duplicates;
        missing += k.seen.missing;
        out_of_order += k.seen.out_of_order;
    }
    EXPECT_EQ(j["totals"]["invalid"], invalid);
    EXPECT_EQ(j["totals"]["duplicates"], duplicates);
    EXPECT_EQ(j["totals"]["missing"], missing);
    EXPECT_EQ(j["totals"]["out_of_order"], out_of_order);
    EXPECT_EQ(j["totals"]["packets"], frames.size());
    EXPECT_EQ(j["totals"]["format"], to_string(c.format));
    EXPECT_EQ(j["totals"]["frame_bytes"], c.frame_bytes());
}

TEST(GeneratorVdif, TruthIsWhatWasSentUnderEveryFault) {
    for (const auto format : {StreamFormat::vdif, StreamFormat::vtp, StreamFormat::codif}) {
        for (const std::uint64_t seed : {1u, 77u}) {
            SCOPED_TRACE(std::string(to_string(format)) + " seed " + std::to_string(seed));
            GeneratorConfig c = faulty(format, seed);
            if (format == StreamFormat::codif) {
                c.frames_per_period = 100;
            }
            expect_truth_is_what_was_sent(c);
        }
    }
}

TEST(GeneratorVdif, InvalidIsSetOnTheFrameOnlyAndChangesNoOtherFault) {
    for (const auto format : {StreamFormat::vtp, StreamFormat::codif}) {
        SCOPED_TRACE(to_string(format));
        GeneratorConfig c = faulty(format, 5);
        c.invalid = 0;
        Generator clean(c);
        const auto a = drain(clean);
        c.invalid = 0.3;
        Generator marked(c);
        const auto b = drain(marked);
        ASSERT_EQ(a.size(), b.size());
        std::uint64_t differ = 0;
        for (std::size_t i = 0; i < a.size(); ++i) {
            ASSERT_EQ(a[i].stream, b[i].stream);
            ASSERT_EQ(a[i].timestamp_ns, b[i].timestamp_ns);
            ByteVec x = a[i].bytes, y = b[i].bytes;
            if (x == y) {
                continue;
            }
            ++differ;
            // Only the invalid bit: VDIF w0 bit 31 (after the VTP number);
            // CODIF v2 w1 bit 17.
            const std::size_t at = format == StreamFormat::codif ? 42 + 8 + 2 : 42 + 8 + 3;
            const std::uint8_t bit = format == StreamFormat::codif ? 0x02 : 0x80;
            EXPECT_EQ(x[at] & bit, 0) << i;
            EXPECT_EQ(y[at] & bit, bit) << i;
            y[at] = static_cast<std::uint8_t>(y[at] & ~bit);
            EXPECT_EQ(x, y) << "frame " << i << " differs in more than its invalid bit";
        }
        std::uint64_t invalid = 0;
        for (std::size_t s = 0; s < clean.truth().size(); ++s) {
            const StreamTruth& t0 = clean.truth()[s];
            const StreamTruth& t1 = marked.truth()[s];
            EXPECT_EQ(t0.invalid, 0u);
            EXPECT_EQ(t1.sent, t0.sent);
            EXPECT_EQ(t1.skipped, t0.skipped);
            EXPECT_EQ(t1.duplicated, t0.duplicated);
            EXPECT_EQ(t1.reordered, t0.reordered);
            invalid += t1.invalid;
        }
        EXPECT_EQ(differ, invalid);
        // About 30% of the frames sent once.
        EXPECT_GT(invalid, a.size() / 5);
        EXPECT_LT(invalid, a.size() / 2);
    }
}

TEST(GeneratorVdif, VtpSequenceNumbersCountEachStreamsDatagramsFromZero) {
    // Without faults: each stream's datagrams carry 0, 1, 2, ... in the
    // order they are sent, whatever the interleave.
    for (const std::uint64_t burst : {1u, 7u}) {
        SCOPED_TRACE(burst);
        GeneratorConfig c = vdif_config(StreamFormat::vtp);
        c.burst = burst;
        Generator g(c);
        const auto frames = drain(g);
        std::map<std::size_t, std::uint64_t> next;
        for (const auto& e : frames) {
            VdifFrame d;
            ASSERT_TRUE(read_frame(e.bytes, c.format, d));
            ASSERT_TRUE(d.has_psn);
            EXPECT_EQ(d.psn, next[e.stream]++) << "stream " << e.stream;
        }
        ASSERT_EQ(next.size(), g.truth().size());
        for (const auto& [stream, n] : next) {
            EXPECT_EQ(n, c.frames);
        }
    }
    // With faults, the number is the slot's, faults acting after the
    // sender: a gap per missing frame, a repeat per duplicate, a step back
    // per frame out of order.
    const GeneratorConfig c = faulty(StreamFormat::vtp, 9);
    Generator g(c);
    const auto frames = drain(g);
    const auto counted = count_frames(frames, c);
    for (std::size_t s = 0; s < g.truth().size(); ++s) {
        SCOPED_TRACE(s);
        const StreamTruth& t = g.truth()[s];
        const Counted& k = counted.at({t.group.ip, t.group.port, t.antenna, t.station, t.thread});
        ASSERT_EQ(k.psns.size(), k.seen.slots.size());
        test::Observed by_psn;
        by_psn.slots = k.psns;
        by_psn.finish();
        EXPECT_EQ(by_psn.missing, t.skipped);
        EXPECT_EQ(by_psn.duplicates, t.duplicated);
        EXPECT_EQ(by_psn.out_of_order, t.reordered);
        EXPECT_EQ(k.psns.front(), 0u);
        EXPECT_EQ(*std::ranges::max_element(k.psns), c.frames - 1);
        for (std::size_t i = 0; i < k.psns.size(); ++i) {
            EXPECT_EQ(k.psns[i], k.seen.slots[i] - k.seen.slots.front()) << i;
        }
    }
}

TEST(GeneratorVdif, EarlyEndTruthCountsTheInvalidFramesReturned) {
    GeneratorConfig c = faulty(StreamFormat::vdif, 3);
    c.frames = 400;
    for (const std::uint64_t stop_after : {0u, 1u, 57u, 250u}) {
        SCOPED_TRACE(stop_after);
        Generator g(c);
        std::vector<Emitted> frames;
        GeneratedFrame f;
        std::uint64_t boundaries = 0;
        while (true) {
            if (g.at_slot_boundary() && boundaries++ == stop_after) {
                g.end_early();
            }
            if (!g.next(f)) {
                break;
            }
            frames.push_back({ByteVec(f.bytes.begin(), f.bytes.end()), f.timestamp_ns, f.stream});
        }
        const auto counted = count_frames(frames, c);
        std::uint64_t invalid = 0;
        for (const auto& t : g.truth()) {
            const auto it =
                counted.find({t.group.ip, t.group.port, t.antenna, t.station, t.thread});
            const std::uint64_t seen = it == counted.end() ? 0 : it->second.invalid;
            EXPECT_EQ(seen, t.invalid);
            EXPECT_EQ(it == counted.end() ? 0 : it->second.packets, t.packets());
            invalid += t.invalid;
        }
        EXPECT_EQ(g.truth_json()["totals"]["invalid"], invalid);
        if (stop_after == 250) {
            EXPECT_GT(invalid, 0u);
        }
    }
}

TEST(GeneratorVdif, CodifTruthHasTheNewFieldsAndTheOldOnesUnchanged) {
    GeneratorConfig c = vdif_config(StreamFormat::codif);
    c.frames_per_period = 7;
    c.frames = 5;
    Generator g(c);
    drain(g);
    const nlohmann::json j = g.truth_json();
    EXPECT_EQ(j["totals"]["format"], "codif");
    EXPECT_EQ(j["totals"]["invalid"], 0);
    EXPECT_EQ(j["totals"]["frame_bytes"], 42 + 64 + 1024);
    for (std::size_t s = 0; s < g.truth().size(); ++s) {
        const auto& js = j["streams"][s];
        EXPECT_EQ(js["format"], "codif");
        EXPECT_EQ(js["station"], (s / 3) % 2);  // the CODIF stationid: the antenna index
        EXPECT_EQ(js["invalid"], 0);
        for (const char* key : {"group", "antenna", "thread", "slots", "sent", "packets", "missing",
                                "duplicates", "out_of_order", "first", "last"}) {
            EXPECT_TRUE(js.contains(key)) << key;
        }
    }
}

// ---------------------------------------------------------------------------
// ibvcap gen

using test::ibvcap;
using test::lines;
using test::Result;

TEST(GenCli, VdifUsageErrorsNameTheFix) {
    test::TempDir dir;
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"gen -w x.pcap --vdif --vdif-frames-per-second 16777217", "over 2^24"},
        {"gen -w x.pcap --vdif --vdif-frames-per-second 0",
         "--vdif-frames-per-second must be at least 1"},
        {"gen -w x.pcap --vdif --vdif-frames-per-second x",
         "bad --vdif-frames-per-second 'x': expected 1 to 16777216"},
        {"gen -w x.pcap --vtp --payload 1020", "--payload 1020 must be a positive multiple of 8"},
        {"gen -w x.pcap --vdif --nchan 12", "--nchan 12 is not a power of two"},
        {"gen -w x.pcap --vdif --nchan 12", "use 8 or 16"},
        {"gen -w x.pcap --vdif --threads 1025", "at most 1024 threads"},
        {"gen -w x.pcap --vdif --vtp", "--vdif and --vtp exclude each other"},
        {"gen -w x.pcap --vdif-legacy", "--vdif-legacy applies only with --vdif or --vtp"},
        {"gen -w x.pcap --vdif-frames-per-second 10",
         "--vdif-frames-per-second applies only with --vdif or --vtp"},
        {"gen -w x.pcap --vdif-station Ef", "--vdif-station applies only with --vdif or --vtp"},
        {"gen -w x.pcap --vdif --frames-per-period 10", "give the frame rate as"},
        {"gen -w x.pcap --vtp --period 2", "--period is CODIF's"},
        {"gen -w x.pcap --vdif --codif-layout draft", "--vdif-legacy gives 16-byte headers"},
        {"gen -w x.pcap --vdif --vdif-edv 9", "bad --vdif-edv 9: expected 0 to 4"},
        {"gen -w x.pcap --vdif --vdif-legacy --vdif-edv 3", "leave out --vdif-edv 3 or"},
        {"gen -w x.pcap --vdif --antennas 2 --vdif-station Ef",
         "1 --vdif-station given for 2 antennas"},
        {"gen -w x.pcap --vdif --antennas 1 --vdif-station Eff",
         "bad --vdif-station 'Eff': expected two characters"},
        {"gen -w x.pcap --vdif --antennas 1 --vdif-station 70000", "bad --vdif-station '70000'"},
        {"gen -w x.pcap --vdif --start-seconds 1073741823 -c 1001", "past 2^30 - 1"},
        {"gen -w x.pcap --invalid 2", "--invalid is a probability in [0, 1]"},
        {"gen -w x.pcap --invalid x", "bad --invalid 'x': expected a probability, 0 to 1"},
    };
    for (const auto& [args, says] : cases) {
        const Result r = ibvcap(dir, args);
        EXPECT_EQ(r.code, 2) << args << " said: " << r.err;
        EXPECT_NE(r.err.find(says), std::string::npos) << args << " said: " << r.err;
        EXPECT_EQ(lines(r.err), 1u) << args << " said: " << r.err;
    }
    EXPECT_FALSE(std::filesystem::exists(dir / "x.pcap"));
}

// The frames of a nanosecond pcap `gen -w` wrote (24-byte file header, a
// 16-byte header per record).
std::vector<Emitted> read_pcap(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    const ByteVec all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<Emitted> out;
    EXPECT_GE(all.size(), 24u);
    for (std::size_t at = 24; at + 16 <= all.size();) {
        const std::uint32_t len = load_le32(all.data() + at + 8);
        at += 16;
        EXPECT_LE(at + len, all.size());
        if (at + len > all.size()) {
            break;
        }
        const auto first = all.begin() + static_cast<std::ptrdiff_t>(at);
        out.push_back({ByteVec(first, first + len), 0, 0});
        at += len;
    }
    return out;
}

TEST(GenCli, WritesVtpFramesAndTheirTruth) {
    test::TempDir dir;
    const Result r = ibvcap(
        dir,
        "gen -w x.pcap --truth t.json --vtp --vdif-frames-per-second 50 --vdif-edv 3 -c 300 "
        "--antennas 2 --threads 2 --payload 1024 --vdif-station Ef --vdif-station 0x1234 "
        "--loss 0.02 --duplicate 0.02 --reorder 0.02 --invalid 0.05 --seed 4 239.9.0.1:4000");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("x 300 VTP frames of 1106 bytes"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(", invalid "), std::string::npos) << r.out;
    const nlohmann::json truth = nlohmann::json::parse(test::slurp(dir / "t.json"));
    const auto frames = read_pcap(dir / "x.pcap");
    ASSERT_EQ(truth["totals"]["packets"], frames.size());
    EXPECT_EQ(truth["totals"]["format"], "vtp");
    EXPECT_EQ(truth["totals"]["frame_bytes"], 42 + 8 + 32 + 1024);
    GeneratorConfig c;
    c.format = StreamFormat::vtp;
    c.vdif.frames_per_second = 50;
    const auto counted = count_frames(frames, c);
    ASSERT_EQ(counted.size(), 4u);
    std::set<std::uint16_t> stations;
    for (const auto& js : truth["streams"]) {
        SCOPED_TRACE(js.dump());
        const Endpoint group = parse_group(js["group"].get<std::string>());
        const auto antenna = parse_ipv4(js["antenna"].get<std::string>());
        ASSERT_TRUE(antenna);
        const Counted& k =
            counted.at({group.ip, group.port, *antenna, js["station"].get<std::uint16_t>(),
                        js["thread"].get<std::uint16_t>()});
        EXPECT_EQ(js["format"], "vtp");
        EXPECT_EQ(js["packets"], k.packets);
        EXPECT_EQ(js["missing"], k.seen.missing);
        EXPECT_EQ(js["duplicates"], k.seen.duplicates);
        EXPECT_EQ(js["out_of_order"], k.seen.out_of_order);
        EXPECT_EQ(js["invalid"], k.invalid);
        stations.insert(js["station"].get<std::uint16_t>());
    }
    EXPECT_EQ(stations, (std::set<std::uint16_t>{code('E', 'f'), 0x1234}));
    for (const auto& e : frames) {
        VdifFrame d;
        ASSERT_TRUE(read_frame(e.bytes, StreamFormat::vtp, d));
        EXPECT_EQ(d.h.edv, 3);
        EXPECT_EQ(d.h.extended[1], 0xACABFEEDu);
        EXPECT_LT(d.h.frame, 50u);
    }
}

TEST(GenCli, LegacyVdifFramesHaveSixteenByteHeaders) {
    test::TempDir dir;
    ASSERT_EQ(
        ibvcap(dir, "gen -q -w v.pcap --vdif --vdif-legacy -c 3 --antennas 1 --threads 1").code, 0);
    const auto frames = read_pcap(dir / "v.pcap");
    ASSERT_EQ(frames.size(), 3u);
    for (const auto& e : frames) {
        EXPECT_EQ(e.bytes.size(), 42u + 16u + 8192u);
        VdifFrame d;
        ASSERT_TRUE(read_frame(e.bytes, StreamFormat::vdif, d));
        EXPECT_TRUE(d.h.legacy);
        EXPECT_EQ(d.h.station, code('A', 'A'));
    }
}

}  // namespace
}  // namespace ibvcap
