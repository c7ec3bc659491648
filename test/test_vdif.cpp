// Unit tests for the VDIF header codec (formats/vdif.hpp): every field of
// words 0-3 in standard and legacy headers, the EDV 1-4 views of words 4-7,
// masking, hostile inputs, the VDIF and VTP stream decoders, and cross-checks
// both ways against two independent implementations transcribed from their
// sources: DiFX's vdifio (test/vdifio_transcript.hpp) and the baseband
// package (test/baseband_vdif_transcript.hpp), including their file readers.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "baseband_vdif_transcript.hpp"
#include "formats/stream_decode.hpp"
#include "formats/vdif.hpp"
#include "vdifio_transcript.hpp"

namespace ibvcap {
namespace {

namespace vio = test::vdifio;
namespace bb = test::baseband_vdif;

using Header32 = std::array<std::uint8_t, kVdifHeaderBytes>;

Header32 encode(const VdifHeader& h) {
    Header32 out{};
    encode_vdif(h, out);
    return out;
}

VdifHeader decode_ok(Bytes bytes) {
    VdifHeader h;
    const VdifError error = decode_vdif(bytes, h);
    EXPECT_EQ(error, VdifError::none) << to_string(error);
    return h;
}

std::uint32_t word(const Header32& b, std::size_t i) {
    return load_le32(b.data() + 4 * i);
}

// A standard EDV 0 header written out byte by byte from the word map at the
// top of formats/vdif.cpp, independent of encode_vdif. Every field has a
// distinctive value so that a field read from the wrong bits cannot pass.
constexpr Header32 kStandardBytes = {
    // w0: seconds 0x2A3B4C5D (0-29), legacy 0 (30), invalid 1 (31) = 0xAA3B4C5D
    0x5D, 0x4C, 0x3B, 0xAA,
    // w1: frame 0x123456 (0-23), epoch 0x2B (24-29), unassigned 0 = 0x2B123456
    0x56, 0x34, 0x12, 0x2B,
    // w2: framelength8 0x000405 (0-23), log2_nchan 0x13 (24-28), version 5 (29-31)
    //     = 0x000405 | 0x13000000 | 0xA0000000 = 0xB3000405
    0x05, 0x04, 0x00, 0xB3,
    // w3: station 0x4B41 (0-15), thread 0x2C5 (16-25), nbits-1 0x0B (26-30), complex 1 (31)
    //     = 0x4B41 | 0x02C50000 | 0x2C000000 | 0x80000000 = 0xAEC54B41
    0x41, 0x4B, 0xC5, 0xAE,
    // w4: extended 0x00ABCDEF (0-23), edv 0x7E (24-31)
    0xEF, 0xCD, 0xAB, 0x7E,
    // w5-w7
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C};

VdifHeader standard_expected() {
    VdifHeader h;
    h.seconds = 0x2A3B4C5Du;
    h.legacy = false;
    h.invalid = true;
    h.frame = 0x123456u;
    h.epoch = 0x2B;
    h.framelength8 = 0x405u;
    h.log2_nchan = 0x13;
    h.version = 5;
    h.station = 0x4B41;
    h.thread = 0x2C5;
    h.nbits = 12;
    h.complex = true;
    h.edv = 0x7E;
    h.extended = {0x00ABCDEFu, 0x04030201u, 0x08070605u, 0x0C0B0A09u};
    return h;
}

// A legacy header: w0 bit 30 set, the four words only.
constexpr std::array<std::uint8_t, kVdifLegacyHeaderBytes> kLegacyBytes = {
    // w0: seconds 0x01020304, legacy 1, invalid 0 = 0x41020304
    0x04, 0x03, 0x02, 0x41,
    // w1: frame 0x00FEDC, epoch 0x3F = 0x3F00FEDC
    0xDC, 0xFE, 0x00, 0x3F,
    // w2: framelength8 1002 (0x3EA), log2_nchan 3, version 1 = 0x230003EA
    0xEA, 0x03, 0x00, 0x23,
    // w3: station 0x0102, thread 0x3FF, nbits-1 1, complex 0 = 0x07FF0102
    0x02, 0x01, 0xFF, 0x07};

// ---------------------------------------------------------------- words 0-3

TEST(VdifStandard, DecodesHandBuiltBytesFieldByField) {
    VdifHeader h;
    ASSERT_EQ(decode_vdif(kStandardBytes, h), VdifError::none);
    EXPECT_EQ(h.seconds, 0x2A3B4C5Du);
    EXPECT_FALSE(h.legacy);
    EXPECT_TRUE(h.invalid);
    EXPECT_EQ(h.frame, 0x123456u);
    EXPECT_EQ(h.epoch, 0x2B);
    EXPECT_EQ(h.framelength8, 0x405u);
    EXPECT_EQ(h.frame_bytes(), 0x405u * 8);
    EXPECT_EQ(h.log2_nchan, 0x13);
    EXPECT_EQ(h.nchan(), 1u << 0x13);
    EXPECT_EQ(h.version, 5);
    EXPECT_EQ(h.station, 0x4B41);
    EXPECT_EQ(h.thread, 0x2C5);
    EXPECT_EQ(h.nbits, 12);
    EXPECT_TRUE(h.complex);
    EXPECT_EQ(h.edv, 0x7E);
    EXPECT_EQ(h.extended[0], 0x00ABCDEFu);
    EXPECT_EQ(h.extended[1], 0x04030201u);
    EXPECT_EQ(h.extended[2], 0x08070605u);
    EXPECT_EQ(h.extended[3], 0x0C0B0A09u);
    EXPECT_EQ(h.header_bytes(), kVdifHeaderBytes);
    EXPECT_EQ(h, standard_expected());
}

TEST(VdifStandard, EncodesExactlyTheHandBuiltBytes) {
    EXPECT_EQ(encode(standard_expected()), kStandardBytes);
}

TEST(VdifLegacy, DecodesHandBuiltBytesFieldByField) {
    VdifHeader h;
    ASSERT_EQ(decode_vdif(kLegacyBytes, h), VdifError::none);
    EXPECT_TRUE(h.legacy);
    EXPECT_FALSE(h.invalid);
    EXPECT_EQ(h.seconds, 0x01020304u);
    EXPECT_EQ(h.frame, 0x00FEDCu);
    EXPECT_EQ(h.epoch, 0x3F);
    EXPECT_EQ(h.framelength8, 1002u);
    EXPECT_EQ(h.log2_nchan, 3);
    EXPECT_EQ(h.version, 1);
    EXPECT_EQ(h.station, 0x0102);
    EXPECT_EQ(h.thread, 0x3FF);
    EXPECT_EQ(h.nbits, 2);
    EXPECT_FALSE(h.complex);
    EXPECT_EQ(h.edv, 0);
    EXPECT_EQ(h.extended, (std::array<std::uint32_t, 4>{}));
    EXPECT_EQ(h.header_bytes(), kVdifLegacyHeaderBytes);
}

TEST(VdifLegacy, IgnoresWhateverFollowsTheSixteenBytes) {
    // A legacy header followed by payload that looks like an EDV: not read.
    std::array<std::uint8_t, 32> bytes{};
    std::memcpy(bytes.data(), kLegacyBytes.data(), kLegacyBytes.size());
    std::fill(bytes.begin() + 16, bytes.end(), std::uint8_t{0xFF});
    VdifHeader h = standard_expected();  // every field set: decode must overwrite them
    ASSERT_EQ(decode_vdif(bytes, h), VdifError::none);
    EXPECT_EQ(h.edv, 0);
    EXPECT_EQ(h.extended, (std::array<std::uint32_t, 4>{}));
    EXPECT_EQ(h.seconds, 0x01020304u);
}

TEST(VdifLegacy, EncodeWritesOnlySixteenBytes) {
    VdifHeader h = decode_ok(kLegacyBytes);
    h.edv = 3;  // not written for a legacy header
    h.extended = {1, 2, 3, 4};
    std::array<std::uint8_t, 32> out;
    out.fill(0xA5);
    encode_vdif(h, out);
    EXPECT_TRUE(std::equal(kLegacyBytes.begin(), kLegacyBytes.end(), out.begin()));
    for (std::size_t i = 16; i < out.size(); ++i) {
        EXPECT_EQ(out[i], 0xA5) << "byte " << i;
    }
}

TEST(VdifStandard, UnassignedW1BitsAreIgnoredOnDecodeAndZeroOnEncode) {
    Header32 b = kStandardBytes;
    b[7] |= 0xC0;  // w1 bits 30-31
    const VdifHeader h = decode_ok(b);
    EXPECT_EQ(h, standard_expected());
    EXPECT_EQ(encode(h), kStandardBytes);
}

TEST(VdifStandard, DecodeOverwritesEveryFieldOfTheOutput) {
    Header32 zero{};
    VdifHeader h = standard_expected();
    ASSERT_EQ(decode_vdif(zero, h), VdifError::none);
    VdifHeader expected;
    expected.nbits = 1;  // stored minus one: 0 is one bit
    EXPECT_EQ(h, expected);
}

TEST(VdifUnaligned, HeaderAtOffsetFortyTwo) {
    std::vector<std::uint8_t> buf(42 + kVdifHeaderBytes + 3, 0x77);
    std::memcpy(buf.data() + 42, kStandardBytes.data(), kVdifHeaderBytes);
    EXPECT_EQ(decode_ok(Bytes(buf).subspan(42)), standard_expected());
    MutableBytes out(buf.data() + 43, kVdifHeaderBytes);
    encode_vdif(standard_expected(), out);
    EXPECT_TRUE(std::equal(kStandardBytes.begin(), kStandardBytes.end(), buf.begin() + 43));
}

// ------------------------------------------------ every field alone, swept

// One field of words 0-3: where it lives, how ibvcap sets and gets its raw
// (stored) value, and how each transcript reads it.
struct Field {
    const char* name;
    std::size_t word;
    unsigned shift;
    unsigned width;
    std::function<void(VdifHeader&, std::uint32_t)> set;
    std::function<std::uint32_t(const VdifHeader&)> get;
    std::function<std::uint32_t(const vio::vdif_header&)> vdifio;
    std::function<void(vio::vdif_header&, std::uint32_t)> vdifio_set;
    const char* baseband_key;
};

std::ostream& operator<<(std::ostream& os, const Field& f) {
    return os << f.name;
}

template <class T, class U>
T narrow(U v) {
    return static_cast<T>(v);
}

// The vdifio setters below assign to vdifio's bitfields directly where vdifio
// has no setter (version, station, EDV byte): C's truncation, as in vdifio.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-conversion"
const std::vector<Field>& fields() {
    static const std::vector<Field> f = {
        {"seconds", 0, 0, 30, [](VdifHeader& h, std::uint32_t v) { h.seconds = v; },
         [](const VdifHeader& h) { return h.seconds; },
         [](const vio::vdif_header& h) {
             return static_cast<std::uint32_t>(vio::getVDIFFrameEpochSecOffset(h));
         },
         [](vio::vdif_header& h, std::uint32_t v) {
             vio::setVDIFFrameEpochSecOffset(h, static_cast<int>(v));
         },
         "seconds"},
        {"legacy", 0, 30, 1, [](VdifHeader& h, std::uint32_t v) { h.legacy = v != 0; },
         [](const VdifHeader& h) { return std::uint32_t{h.legacy}; },
         [](const vio::vdif_header& h) {
             return static_cast<std::uint32_t>(vio::getVDIFLegacy(h));
         },
         [](vio::vdif_header& h, std::uint32_t v) { h.legacymode = v & 1u; }, "legacy_mode"},
        {"invalid", 0, 31, 1, [](VdifHeader& h, std::uint32_t v) { h.invalid = v != 0; },
         [](const VdifHeader& h) { return std::uint32_t{h.invalid}; },
         [](const vio::vdif_header& h) {
             return static_cast<std::uint32_t>(vio::getVDIFFrameInvalid(h));
         },
         [](vio::vdif_header& h, std::uint32_t v) { vio::setVDIFFrameInvalid(h, v); },
         "invalid_data"},
        {"frame", 1, 0, 24, [](VdifHeader& h, std::uint32_t v) { h.frame = v; },
         [](const VdifHeader& h) { return h.frame; },
         [](const vio::vdif_header& h) {
             return static_cast<std::uint32_t>(vio::getVDIFFrameNumber(h));
         },
         [](vio::vdif_header& h, std::uint32_t v) {
             vio::setVDIFFrameNumber(h, static_cast<int>(v));
         },
         "frame_nr"},
        {"epoch", 1, 24, 6,
         [](VdifHeader& h, std::uint32_t v) { h.epoch = narrow<std::uint8_t>(v); },
         [](const VdifHeader& h) { return std::uint32_t{h.epoch}; },
         [](const vio::vdif_header& h) { return static_cast<std::uint32_t>(vio::getVDIFEpoch(h)); },
         [](vio::vdif_header& h, std::uint32_t v) { vio::setVDIFEpoch(h, static_cast<int>(v)); },
         "ref_epoch"},
        {"framelength8", 2, 0, 24, [](VdifHeader& h, std::uint32_t v) { h.framelength8 = v; },
         [](const VdifHeader& h) { return h.framelength8; },
         [](const vio::vdif_header& h) {
             return static_cast<std::uint32_t>(vio::getVDIFFrameBytes(h) / 8);
         },
         [](vio::vdif_header& h, std::uint32_t v) {
             vio::setVDIFFrameBytes(h, static_cast<int>(v * 8));
         },
         "frame_length"},
        {"log2_nchan", 2, 24, 5,
         [](VdifHeader& h, std::uint32_t v) { h.log2_nchan = narrow<std::uint8_t>(v); },
         [](const VdifHeader& h) { return std::uint32_t{h.log2_nchan}; },
         [](const vio::vdif_header& h) {
             // getVDIFNumChannels is an int: 2^31 overflows; read the field there.
             if (h.nchan >= 31) {
                 return static_cast<std::uint32_t>(h.nchan);
             }
             std::uint32_t log2 = 0;
             while ((1u << (log2 + 1)) <= static_cast<std::uint32_t>(vio::getVDIFNumChannels(h))) {
                 ++log2;
             }
             return log2;
         },
         [](vio::vdif_header& h, std::uint32_t v) {
             if (v >= 31) {
                 h.nchan = v;  // 2^31 channels is no int
             } else {
                 vio::setVDIFNumChannels(h, 1 << v);
             }
         },
         "lg2_nchan"},
        {"version", 2, 29, 3,
         [](VdifHeader& h, std::uint32_t v) { h.version = narrow<std::uint8_t>(v); },
         [](const VdifHeader& h) { return std::uint32_t{h.version}; },
         [](const vio::vdif_header& h) { return static_cast<std::uint32_t>(h.version); },
         [](vio::vdif_header& h, std::uint32_t v) { h.version = v; }, "vdif_version"},
        {"station", 3, 0, 16,
         [](VdifHeader& h, std::uint32_t v) { h.station = narrow<std::uint16_t>(v); },
         [](const VdifHeader& h) { return std::uint32_t{h.station}; },
         [](const vio::vdif_header& h) {
             return static_cast<std::uint32_t>(vio::getVDIFStationID(h));
         },
         [](vio::vdif_header& h, std::uint32_t v) { h.stationid = v; }, "station_id"},
        {"thread", 3, 16, 10,
         [](VdifHeader& h, std::uint32_t v) { h.thread = narrow<std::uint16_t>(v); },
         [](const VdifHeader& h) { return std::uint32_t{h.thread}; },
         [](const vio::vdif_header& h) {
             return static_cast<std::uint32_t>(vio::getVDIFThreadID(h));
         },
         [](vio::vdif_header& h, std::uint32_t v) { vio::setVDIFThreadID(h, static_cast<int>(v)); },
         "thread_id"},
        {"nbits-1", 3, 26, 5,
         [](VdifHeader& h, std::uint32_t v) { h.nbits = narrow<std::uint8_t>(v + 1); },
         [](const VdifHeader& h) { return std::uint32_t{h.nbits} - 1u; },
         [](const vio::vdif_header& h) {
             return static_cast<std::uint32_t>(vio::getVDIFBitsPerSample(h) - 1);
         },
         [](vio::vdif_header& h, std::uint32_t v) {
             vio::setVDIFBitsPerSample(h, static_cast<int>(v + 1));
         },
         "bits_per_sample"},
        {"complex", 3, 31, 1, [](VdifHeader& h, std::uint32_t v) { h.complex = v != 0; },
         [](const VdifHeader& h) { return std::uint32_t{h.complex}; },
         [](const vio::vdif_header& h) {
             return static_cast<std::uint32_t>(vio::getVDIFComplex(h));
         },
         [](vio::vdif_header& h, std::uint32_t v) { vio::setVDIFComplex(h, static_cast<int>(v)); },
         "complex_data"},
        {"edv", 4, 24, 8, [](VdifHeader& h, std::uint32_t v) { h.edv = narrow<std::uint8_t>(v); },
         [](const VdifHeader& h) { return std::uint32_t{h.edv}; },
         [](const vio::vdif_header& h) { return static_cast<std::uint32_t>(h.eversion); },
         [](vio::vdif_header& h, std::uint32_t v) { h.eversion = v; }, "edv"},
    };
    return f;
}
#pragma GCC diagnostic pop

// Values to sweep for a field of `width` bits: the edges, single bits and
// alternating patterns, and random values.
std::vector<std::uint32_t> sweep_values(unsigned width, std::uint32_t seed) {
    const std::uint32_t max = width == 32 ? 0xFFFFFFFFu : (1u << width) - 1u;
    std::vector<std::uint32_t> v = {
        0, 1, max, max - 1, max >> 1, (max >> 1) + 1, 0x55555555u & max, 0xAAAAAAAAu & max};
    for (unsigned b = 0; b < width; ++b) {
        v.push_back(1u << b);
    }
    std::mt19937 rng(seed);
    for (int i = 0; i < 16; ++i) {
        v.push_back(static_cast<std::uint32_t>(rng()) & max);
    }
    return v;
}

class VdifFieldSweep : public ::testing::TestWithParam<Field> {};

// Each value of a field alone: ibvcap writes exactly the field's bits and
// nothing else, reads them back, and both transcripts read the same value.
TEST_P(VdifFieldSweep, IbvcapWritesOnlyItsBitsAndBothTranscriptsReadThem) {
    const Field& f = GetParam();
    for (const std::uint32_t v : sweep_values(f.width, f.shift * 131u + f.width)) {
        SCOPED_TRACE(testing::Message() << f.name << " = " << v);
        VdifHeader h;
        h.nbits = 1;  // the all-zero header
        f.set(h, v);
        const Header32 b = encode(h);
        for (std::size_t w = 0; w < 8; ++w) {
            const std::uint32_t expected = w == f.word ? v << f.shift : 0u;
            if (f.word < 4 && h.legacy && w >= 4) {
                continue;  // a legacy header has no w4-w7
            }
            EXPECT_EQ(word(b, w), expected) << "word " << w;
        }
        VdifHeader back;
        ASSERT_EQ(decode_vdif(b, back), VdifError::none);
        EXPECT_EQ(f.get(back), v);
        EXPECT_EQ(back, h);
        // vdifio's getter on the same bytes.
        EXPECT_EQ(f.vdifio(vio::read_header(b)), v);
        // baseband's parser on the same words (its class by legacy_mode / edv).
        const auto bh = bb::fromfile(b);
        ASSERT_TRUE(bh);
        if (bh->has(f.baseband_key)) {
            EXPECT_EQ((*bh)[f.baseband_key], v);
        }
    }
}

// The other direction: the field set by vdifio's setter, and by baseband's
// setter, reads back through ibvcap's decoder.
TEST_P(VdifFieldSweep, TranscriptWrittenFieldsDecodeInIbvcap) {
    const Field& f = GetParam();
    for (const std::uint32_t v : sweep_values(f.width, f.width * 17u + f.shift)) {
        SCOPED_TRACE(testing::Message() << f.name << " = " << v);
        vio::vdif_header vh;
        std::memset(&vh, 0, sizeof vh);
        f.vdifio_set(vh, v);
        Header32 b;
        std::memcpy(b.data(), &vh, sizeof vh);
        EXPECT_EQ(f.get(decode_ok(b)), v);

        // An all-zero header: VDIFHeader0, whose parser is VDIFBaseHeader's
        // (every key of words 0-4).
        bb::Header bh = bb::from_words(bb::Words(8, 0));
        bh.set(f.baseband_key, v);
        const auto bytes = bh.bytes();
        EXPECT_EQ(f.get(decode_ok(bytes)), v);
    }
}

INSTANTIATE_TEST_SUITE_P(Words0To4, VdifFieldSweep, ::testing::ValuesIn(fields()),
                         [](const auto& p) {
                             std::string n = p.param.name;
                             for (char& c : n) {
                                 c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                             }
                             return n;
                         });

TEST(VdifMasking, EncodeKeepsTheLowBitsOfEachFieldAndTouchesNoOther) {
    VdifHeader h;
    h.seconds = 0xFFFFFFFFu;  // 30 bits
    h.frame = 0xFFFFFFFFu;    // 24
    h.epoch = 0xFF;           // 6
    h.framelength8 = 0xFFFFFFFFu;
    h.log2_nchan = 0xFF;          // 5
    h.version = 0xFF;             // 3
    h.thread = 0xFFFF;            // 10
    h.nbits = 0xFF;               // 255 - 1 = 254: low 5 bits 0x1E
    h.extended[0] = 0xFFFFFFFFu;  // 24 bits below the EDV byte
    h.edv = 0x12;
    const VdifHeader back = decode_ok(encode(h));
    EXPECT_EQ(back.seconds, 0x3FFFFFFFu);
    EXPECT_FALSE(back.legacy);
    EXPECT_FALSE(back.invalid);
    EXPECT_EQ(back.frame, 0xFFFFFFu);
    EXPECT_EQ(back.epoch, 0x3F);
    EXPECT_EQ(back.framelength8, 0xFFFFFFu);
    EXPECT_EQ(back.log2_nchan, 0x1F);
    EXPECT_EQ(back.version, 7);
    EXPECT_EQ(back.station, 0);
    EXPECT_EQ(back.thread, 0x3FF);
    EXPECT_EQ(back.nbits, 0x1E + 1);
    EXPECT_FALSE(back.complex);
    EXPECT_EQ(back.edv, 0x12);
    EXPECT_EQ(back.extended[0], 0xFFFFFFu);
}

TEST(VdifMasking, NbitsZeroAndThirtyThreeWrapToOneBit) {
    for (const std::uint8_t n : {std::uint8_t{0}, std::uint8_t{33}}) {
        VdifHeader h;
        h.nbits = n;
        EXPECT_EQ(decode_ok(encode(h)).nbits, 1) << int{n};
    }
    VdifHeader h;
    h.nbits = 32;
    EXPECT_EQ(decode_ok(encode(h)).nbits, 32);
    EXPECT_EQ(word(encode(h), 3), 0x1Fu << 26);
}

VdifHeader random_header(std::mt19937_64& rng, bool legacy) {
    VdifHeader h;
    h.legacy = legacy;
    h.invalid = (rng() & 1) != 0;
    h.seconds = static_cast<std::uint32_t>(rng()) & 0x3FFFFFFFu;
    h.frame = static_cast<std::uint32_t>(rng()) & 0xFFFFFFu;
    h.epoch = static_cast<std::uint8_t>(rng() & 0x3F);
    h.framelength8 = static_cast<std::uint32_t>(rng()) & 0xFFFFFFu;
    h.log2_nchan = static_cast<std::uint8_t>(rng() & 0x1F);
    h.version = static_cast<std::uint8_t>(rng() & 7);
    h.station = static_cast<std::uint16_t>(rng());
    h.thread = static_cast<std::uint16_t>(rng() & 0x3FF);
    h.nbits = static_cast<std::uint8_t>((rng() & 0x1F) + 1);
    h.complex = (rng() & 1) != 0;
    if (!legacy) {
        h.edv = static_cast<std::uint8_t>(rng());
        h.extended = {static_cast<std::uint32_t>(rng()) & 0xFFFFFFu,
                      static_cast<std::uint32_t>(rng()), static_cast<std::uint32_t>(rng()),
                      static_cast<std::uint32_t>(rng())};
    }
    return h;
}

TEST(VdifRoundTrip, RandomStandardAndLegacyHeaders) {
    std::mt19937_64 rng(28);
    for (int i = 0; i < 4000; ++i) {
        const VdifHeader h = random_header(rng, i % 3 == 0);
        const Header32 b = encode(h);
        EXPECT_EQ(decode_ok(b), h) << i;
        EXPECT_EQ(encode(decode_ok(b)), b) << i;
    }
}

// ---------------------------------------------------------------- hostile input

TEST(VdifHostile, ShortBuffers) {
    VdifHeader h;
    for (std::size_t n = 0; n < kVdifLegacyHeaderBytes; ++n) {
        EXPECT_EQ(decode_vdif(Bytes(kStandardBytes.data(), n), h), VdifError::short_buffer) << n;
        EXPECT_EQ(decode_vdif(Bytes(kLegacyBytes.data(), n), h), VdifError::short_buffer) << n;
    }
    // A standard header needs all 32 bytes; a legacy one 16.
    for (std::size_t n = kVdifLegacyHeaderBytes; n < kVdifHeaderBytes; ++n) {
        EXPECT_EQ(decode_vdif(Bytes(kStandardBytes.data(), n), h), VdifError::short_buffer) << n;
    }
    EXPECT_EQ(decode_vdif(Bytes(kLegacyBytes.data(), kVdifLegacyHeaderBytes), h), VdifError::none);
    EXPECT_EQ(decode_vdif(Bytes(), h), VdifError::short_buffer);
}

TEST(VdifHostile, ValidateRejectsZeroShortAndMismatchedLengths) {
    VdifHeader h = decode_ok(kStandardBytes);
    h.framelength8 = 0;
    EXPECT_EQ(validate_vdif(h, 0), VdifError::zero_framelength);
    EXPECT_EQ(validate_vdif(h, 8232), VdifError::zero_framelength);
    // Under the header, and the header alone (no payload), for both layouts.
    for (const bool legacy : {false, true}) {
        h.legacy = legacy;
        const std::uint32_t header8 = legacy ? 2 : 4;
        for (std::uint32_t fl = 1; fl <= header8; ++fl) {
            h.framelength8 = fl;
            EXPECT_EQ(validate_vdif(h, fl * 8u), VdifError::length_mismatch) << legacy << fl;
        }
        h.framelength8 = header8 + 1;
        EXPECT_EQ(validate_vdif(h, (header8 + 1) * 8u), VdifError::none) << legacy;
    }
    h.legacy = false;
    h.framelength8 = 1029;  // 8232 bytes
    EXPECT_EQ(validate_vdif(h, 8232), VdifError::none);
    for (const std::uint64_t n : {0ull, 8224ull, 8231ull, 8233ull, 8240ull, 1ull << 40}) {
        EXPECT_EQ(validate_vdif(h, n), VdifError::length_mismatch) << n;
    }
    h.framelength8 = 0xFFFFFFu;  // the largest frame: 128 MiB
    EXPECT_EQ(validate_vdif(h, 0xFFFFFFull * 8), VdifError::none);
}

TEST(VdifHostile, ErrorNames) {
    EXPECT_EQ(to_string(VdifError::none), "none");
    EXPECT_EQ(to_string(VdifError::short_buffer), "short_buffer");
    EXPECT_EQ(to_string(VdifError::zero_framelength), "zero_framelength");
    EXPECT_EQ(to_string(VdifError::length_mismatch), "length_mismatch");
}

// ---------------------------------------------------------------- EDV views

TEST(VdifEdv, Edv1FromHandBuiltWords) {
    VdifHeader h;
    h.edv = 1;
    // w4: sample rate 0x3ABCDE (0-22) | MHz (23); w5 sync; w6-w7 "NICT-K34"
    h.extended = {0x00BABCDEu, 0xACABFEEDu, 0x5443494Eu, 0x3433344Bu};
    const VdifEdv1 e = decode_vdif_edv1(h);
    EXPECT_EQ(e.sample_rate, 0x3ABCDEu);
    EXPECT_TRUE(e.sample_rate_mhz);
    EXPECT_EQ(e.sample_rate_hz(), 0x3ABCDEull * 1000000);
    EXPECT_EQ(e.sync, kVdifEdvSyncWord);
    EXPECT_EQ(e.das_id, 0x3433344B5443494Eull);
    const auto name = e.name();
    EXPECT_EQ(std::string(name.data(), name.size()), "NICTK434");
    VdifHeader back;
    encode_vdif_edv(e, back);
    EXPECT_EQ(back.edv, 1);
    EXPECT_EQ(back.extended, h.extended);
    EXPECT_EQ(to_string(e),
              "sample_rate=3849438 MHz sync=0xacabfeed das_id=0x3433344b5443494e "
              "name=\"NICTK434\"");
}

TEST(VdifEdv, Edv2FromHandBuiltWords) {
    VdifHeader h;
    h.edv = 2;
    // w4: pol 1 | quadrant-1 2 (bits 1-2) | correlator 1 (3) | sync 0xA5AE5 (4-23)
    h.extended = {0x00A5AE5Du, 0x89ABCDEFu, 0x76543210u, 0xFEDCBA98u};
    const VdifEdv2 e = decode_vdif_edv2(h);
    EXPECT_TRUE(e.pol);
    EXPECT_EQ(e.quadrant_minus1, 2);
    EXPECT_TRUE(e.correlator);
    EXPECT_EQ(e.sync, kVdifEdv2SyncAlma);
    EXPECT_EQ(e.status, 0x89ABCDEFu);
    EXPECT_EQ(e.psn, 0xFEDCBA9876543210ull);
    EXPECT_FALSE(e.r2dbe_bdc_sideband());
    EXPECT_TRUE(e.r2dbe_rx_sideband());
    EXPECT_EQ(e.r2dbe_pps_diff(), static_cast<std::int32_t>(0x89ABCDEFu));
    VdifHeader back;
    encode_vdif_edv(e, back);
    EXPECT_EQ(back.edv, 2);
    EXPECT_EQ(back.extended, h.extended);
}

TEST(VdifEdv, Edv3FromHandBuiltWords) {
    VdifHeader h;
    h.edv = 3;
    // w4: 0x000400 kHz; w6 tuning; w7: personality 0xC3, minor 0xA, major 0x5,
    // sideband 1, subband 6, IF 0xB, DBE unit 0xD, unassigned 0x9
    //   = 0xC3 | 0xA00 | 0x5000 | 0x10000 | 0xC0000 | 0xB00000 | 0xD000000 | 0x90000000
    h.extended = {0x00000400u, 0xACABFEEDu, 0x12345678u, 0x9DBD5AC3u};
    const VdifEdv3 e = decode_vdif_edv3(h);
    EXPECT_EQ(e.sample_rate, 0x400u);
    EXPECT_FALSE(e.sample_rate_mhz);
    EXPECT_EQ(e.sample_rate_hz(), 0x400ull * 1000);
    EXPECT_EQ(e.sync, kVdifEdvSyncWord);
    EXPECT_EQ(e.loif_tuning, 0x12345678u);
    EXPECT_EQ(e.personality, 0xC3);
    EXPECT_EQ(e.minor_rev, 0xA);
    EXPECT_EQ(e.major_rev, 0x5);
    EXPECT_TRUE(e.sideband_upper);
    EXPECT_EQ(e.subband, 6);
    EXPECT_EQ(e.if_number, 0xB);
    EXPECT_EQ(e.dbe_unit, 0xD);
    EXPECT_EQ(e.unassigned, 0x9);
    VdifHeader back;
    encode_vdif_edv(e, back);
    EXPECT_EQ(back.edv, 3);
    EXPECT_EQ(back.extended, h.extended);
    EXPECT_NE(to_string(e).find("rev=5.10 sideband=U subband=6 if=11 dbe_unit=13"),
              std::string::npos)
        << to_string(e);
}

TEST(VdifEdv, Edv4FromHandBuiltWords) {
    VdifHeader h;
    h.edv = 4;
    h.extended = {0x003CBEEFu, 0xACABFEEDu, 0x00000001u, 0x08000000u};
    const VdifEdv4 e = decode_vdif_edv4(h);
    EXPECT_EQ(e.unassigned, 0xBEEF);
    EXPECT_EQ(e.mask_length, 60);
    EXPECT_EQ(e.sync, kVdifEdvSyncWord);
    EXPECT_EQ(e.validity_mask, (1ull << 59) + 1);  // baseband's tutorial example
    VdifHeader back;
    encode_vdif_edv(e, back);
    EXPECT_EQ(back.edv, 4);
    EXPECT_EQ(back.extended, h.extended);
}

// Every bit of w4 0-23 and w5-w7 belongs to one field of each view: decode
// then encode gives back any words.
TEST(VdifEdv, EveryViewRoundTripsRandomWordsExactly) {
    std::mt19937_64 rng(4);
    for (int i = 0; i < 2000; ++i) {
        VdifHeader h;
        h.extended = {static_cast<std::uint32_t>(rng()) & 0xFFFFFFu,
                      static_cast<std::uint32_t>(rng()), static_cast<std::uint32_t>(rng()),
                      static_cast<std::uint32_t>(rng())};
        VdifHeader b1, b2, b3, b4;
        encode_vdif_edv(decode_vdif_edv1(h), b1);
        encode_vdif_edv(decode_vdif_edv2(h), b2);
        encode_vdif_edv(decode_vdif_edv3(h), b3);
        encode_vdif_edv(decode_vdif_edv4(h), b4);
        EXPECT_EQ(b1.extended, h.extended) << i;
        EXPECT_EQ(b2.extended, h.extended) << i;
        EXPECT_EQ(b3.extended, h.extended) << i;
        EXPECT_EQ(b4.extended, h.extended) << i;
        // And through the wire: encode_vdif / decode_vdif carry them unchanged.
        b3.nbits = 2;
        EXPECT_EQ(decode_vdif_edv3(decode_ok(encode(b3))), decode_vdif_edv3(h)) << i;
    }
}

TEST(VdifEdv, ViewEncodeMasksFieldsToTheirWidths) {
    VdifEdv1 e1;
    e1.sample_rate = 0xFFFFFFFFu;  // 23 bits
    VdifHeader h;
    encode_vdif_edv(e1, h);
    EXPECT_EQ(h.extended[0], 0x7FFFFFu);
    EXPECT_EQ(decode_vdif_edv1(h).sample_rate, 0x7FFFFFu);
    EXPECT_FALSE(decode_vdif_edv1(h).sample_rate_mhz);

    VdifEdv2 e2;
    e2.quadrant_minus1 = 0xFF;  // 2 bits
    e2.sync = 0xFFFFFFFFu;      // 20 bits
    encode_vdif_edv(e2, h);
    EXPECT_EQ(h.extended[0], 0xFFFFF6u);
    EXPECT_FALSE(decode_vdif_edv2(h).pol);
    EXPECT_FALSE(decode_vdif_edv2(h).correlator);

    VdifEdv3 e3;
    e3.minor_rev = 0xFF;
    e3.subband = 0xFF;
    e3.unassigned = 0xFF;
    encode_vdif_edv(e3, h);
    EXPECT_EQ(h.extended[3], 0x00000F00u | 0x000E0000u | 0xF0000000u);
    const VdifEdv3 d3 = decode_vdif_edv3(h);
    EXPECT_EQ(d3.minor_rev, 0xF);
    EXPECT_EQ(d3.subband, 7);
    EXPECT_EQ(d3.major_rev, 0);
    EXPECT_FALSE(d3.sideband_upper);
    EXPECT_EQ(d3.if_number, 0);
}

TEST(VdifEdv, EncodeThroughTheWireSetsTheEdvByte) {
    VdifHeader h;
    h.nbits = 2;
    VdifEdv4 e;
    e.mask_length = 8;
    e.validity_mask = 0xA5;
    encode_vdif_edv(e, h);
    const Header32 b = encode(h);
    EXPECT_EQ(word(b, 4), 0x04080000u);
    EXPECT_EQ(word(b, 5), 0xACABFEEDu);
    EXPECT_EQ(word(b, 6), 0xA5u);
    EXPECT_EQ(word(b, 7), 0u);
}

TEST(VdifEdv, DescribeByEdv) {
    VdifHeader h;
    h.legacy = true;
    EXPECT_EQ(vdif_edv_string(h), "legacy");
    h.legacy = false;
    h.edv = 0x42;
    h.extended = {0x123456u, 1, 2, 3};
    EXPECT_EQ(vdif_edv_string(h), "edv 66 w4=0x123456 w5=0x00000001 w6=0x00000002 w7=0x00000003");
    encode_vdif_edv(VdifEdv4{}, h);
    EXPECT_EQ(vdif_edv_string(h).rfind("edv 4 mask_length=0 sync=0xacabfeed", 0), 0u)
        << vdif_edv_string(h);
    encode_vdif_edv(VdifEdv2{}, h);
    EXPECT_EQ(vdif_edv_string(h),
              "edv 2 pol=0 quadrant_minus1=0 correlator=0 sync=0xa5ae5 status=0x00000000 psn=0");
}

// ------------------------------------------ EDV fields against both transcripts

// One EDV field: ibvcap's view, vdifio's struct field, baseband's key.
struct EdvField {
    const char* name;
    int edv;
    std::size_t word;
    unsigned shift;
    unsigned width;                                       // up to 64
    std::function<void(VdifHeader&, std::uint64_t)> set;  // through the view
    std::function<std::uint64_t(const VdifHeader&)> get;
    std::function<std::uint64_t(const Header32&)> vdifio;
    const char* baseband_key;
};

std::ostream& operator<<(std::ostream& os, const EdvField& f) {
    return os << "edv" << f.edv << "_" << f.name;
}

template <class View, class Decode>
std::function<void(VdifHeader&, std::uint64_t)> via(Decode decode,
                                                    std::function<void(View&, std::uint64_t)> put) {
    return [decode, put](VdifHeader& h, std::uint64_t v) {
        View e = decode(h);
        put(e, v);
        encode_vdif_edv(e, h);
    };
}

template <class Edv>
Edv vread(const Header32& b) {
    return vio::read_header<Edv>(b);
}

const std::vector<EdvField>& edv_fields() {
    using E1 = vio::vdif_edv1_header;
    using E2 = vio::vdif_edv2_header;
    using E2a = vio::vdif_edv2_header_alma;
    using E3 = vio::vdif_edv3_header;
    using E4 = vio::vdif_edv4_header;
    static const std::vector<EdvField> f = {
        // EDV 1
        {"sample_rate", 1, 4, 0, 23,
         via<VdifEdv1>(
             decode_vdif_edv1,
             [](VdifEdv1& e, std::uint64_t v) { e.sample_rate = narrow<std::uint32_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv1(h).sample_rate}; },
         [](const Header32& b) { return std::uint64_t{vread<E1>(b).samprate}; }, "sampling_rate"},
        {"sample_rate_mhz", 1, 4, 23, 1,
         via<VdifEdv1>(decode_vdif_edv1,
                       [](VdifEdv1& e, std::uint64_t v) { e.sample_rate_mhz = v != 0; }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv1(h).sample_rate_mhz}; },
         [](const Header32& b) { return std::uint64_t{vread<E1>(b).samprateunits}; },
         "sampling_unit"},
        {"sync", 1, 5, 0, 32,
         via<VdifEdv1>(decode_vdif_edv1,
                       [](VdifEdv1& e, std::uint64_t v) { e.sync = narrow<std::uint32_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv1(h).sync}; },
         [](const Header32& b) { return std::uint64_t{vread<E1>(b).syncword}; }, "sync_pattern"},
        {"das_id", 1, 6, 0, 64,
         via<VdifEdv1>(decode_vdif_edv1, [](VdifEdv1& e, std::uint64_t v) { e.das_id = v; }),
         [](const VdifHeader& h) { return decode_vdif_edv1(h).das_id; },
         [](const Header32& b) {
             const E1 e = vread<E1>(b);
             std::uint64_t v = 0;
             std::memcpy(&v, e.name, sizeof v);  // char name[8], in frame order
             return v;
         },
         "das_id"},
        // EDV 2 (vdif_edv2_header; the ALMA struct names the same bits)
        {"pol", 2, 4, 0, 1,
         via<VdifEdv2>(decode_vdif_edv2, [](VdifEdv2& e, std::uint64_t v) { e.pol = v != 0; }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv2(h).pol}; },
         [](const Header32& b) {
             EXPECT_EQ(vread<E2a>(b).polblock, vread<E2>(b).polblock);
             return std::uint64_t{vread<E2>(b).polblock};
         },
         "pol"},
        {"quadrant_minus1", 2, 4, 1, 2,
         via<VdifEdv2>(
             decode_vdif_edv2,
             [](VdifEdv2& e, std::uint64_t v) { e.quadrant_minus1 = narrow<std::uint8_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv2(h).quadrant_minus1}; },
         [](const Header32& b) {
             EXPECT_EQ(vread<E2a>(b).quadrantminus1, vread<E2>(b).quadrantminus1);
             const auto r = vio::read_header<vio::vdif_edv2_header_r2dbe>(b);
             EXPECT_EQ(r.bdcsideband | r.rxsideband << 1, vread<E2>(b).quadrantminus1);
             return std::uint64_t{vread<E2>(b).quadrantminus1};
         },
         "BL_quadrant"},
        {"correlator", 2, 4, 3, 1,
         via<VdifEdv2>(decode_vdif_edv2,
                       [](VdifEdv2& e, std::uint64_t v) { e.correlator = v != 0; }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv2(h).correlator}; },
         [](const Header32& b) { return std::uint64_t{vread<E2>(b).correlator}; }, "BL_correlator"},
        {"sync", 2, 4, 4, 20,
         via<VdifEdv2>(decode_vdif_edv2,
                       [](VdifEdv2& e, std::uint64_t v) { e.sync = narrow<std::uint32_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv2(h).sync}; },
         [](const Header32& b) {
             EXPECT_EQ(vio::read_header<vio::vdif_edv2_header_generic>(b).subsubversion,
                       vread<E2>(b).sync);
             return std::uint64_t{vread<E2>(b).sync};
         },
         "sync_pattern"},
        {"status", 2, 5, 0, 32,
         via<VdifEdv2>(decode_vdif_edv2,
                       [](VdifEdv2& e, std::uint64_t v) { e.status = narrow<std::uint32_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv2(h).status}; },
         [](const Header32& b) {
             EXPECT_EQ(vread<E2a>(b).picstatus, vread<E2>(b).status);
             return std::uint64_t{vread<E2>(b).status};
         },
         "PIC_status"},
        {"psn", 2, 6, 0, 64,
         via<VdifEdv2>(decode_vdif_edv2, [](VdifEdv2& e, std::uint64_t v) { e.psn = v; }),
         [](const VdifHeader& h) { return decode_vdif_edv2(h).psn; },
         [](const Header32& b) {
             EXPECT_EQ(vio::read_header<vio::vdif_edv2_header_r2dbe>(b).psn, vread<E2>(b).psn);
             return std::uint64_t{vread<E2>(b).psn};
         },
         "PSN"},
        // EDV 3
        {"sample_rate", 3, 4, 0, 23,
         via<VdifEdv3>(
             decode_vdif_edv3,
             [](VdifEdv3& e, std::uint64_t v) { e.sample_rate = narrow<std::uint32_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv3(h).sample_rate}; },
         [](const Header32& b) { return std::uint64_t{vread<E3>(b).samprate}; }, "sampling_rate"},
        {"sample_rate_mhz", 3, 4, 23, 1,
         via<VdifEdv3>(decode_vdif_edv3,
                       [](VdifEdv3& e, std::uint64_t v) { e.sample_rate_mhz = v != 0; }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv3(h).sample_rate_mhz}; },
         [](const Header32& b) { return std::uint64_t{vread<E3>(b).samprateunits}; },
         "sampling_unit"},
        {"sync", 3, 5, 0, 32,
         via<VdifEdv3>(decode_vdif_edv3,
                       [](VdifEdv3& e, std::uint64_t v) { e.sync = narrow<std::uint32_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv3(h).sync}; },
         [](const Header32& b) { return std::uint64_t{vread<E3>(b).syncword}; }, "sync_pattern"},
        {"loif_tuning", 3, 6, 0, 32,
         via<VdifEdv3>(
             decode_vdif_edv3,
             [](VdifEdv3& e, std::uint64_t v) { e.loif_tuning = narrow<std::uint32_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv3(h).loif_tuning}; },
         [](const Header32& b) { return std::uint64_t{vread<E3>(b).tuning}; }, "loif_tuning"},
        {"personality", 3, 7, 0, 8,
         via<VdifEdv3>(
             decode_vdif_edv3,
             [](VdifEdv3& e, std::uint64_t v) { e.personality = narrow<std::uint8_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv3(h).personality}; },
         [](const Header32& b) { return std::uint64_t{vread<E3>(b).personalitytype}; },
         "personality"},
        {"minor_rev", 3, 7, 8, 4,
         via<VdifEdv3>(decode_vdif_edv3,
                       [](VdifEdv3& e, std::uint64_t v) { e.minor_rev = narrow<std::uint8_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv3(h).minor_rev}; },
         [](const Header32& b) { return std::uint64_t{vread<E3>(b).minorrev}; }, "minor_rev"},
        {"major_rev", 3, 7, 12, 4,
         via<VdifEdv3>(decode_vdif_edv3,
                       [](VdifEdv3& e, std::uint64_t v) { e.major_rev = narrow<std::uint8_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv3(h).major_rev}; },
         [](const Header32& b) { return std::uint64_t{vread<E3>(b).majorrev}; }, "major_rev"},
        {"sideband_upper", 3, 7, 16, 1,
         via<VdifEdv3>(decode_vdif_edv3,
                       [](VdifEdv3& e, std::uint64_t v) { e.sideband_upper = v != 0; }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv3(h).sideband_upper}; },
         [](const Header32& b) { return std::uint64_t{vread<E3>(b).sideband}; }, "sideband"},
        {"subband", 3, 7, 17, 3,
         via<VdifEdv3>(decode_vdif_edv3,
                       [](VdifEdv3& e, std::uint64_t v) { e.subband = narrow<std::uint8_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv3(h).subband}; },
         [](const Header32& b) { return std::uint64_t{vread<E3>(b).subband}; }, "subband"},
        {"if_number", 3, 7, 20, 4,
         via<VdifEdv3>(decode_vdif_edv3,
                       [](VdifEdv3& e, std::uint64_t v) { e.if_number = narrow<std::uint8_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv3(h).if_number}; },
         [](const Header32& b) { return std::uint64_t{vread<E3>(b).ifnumber}; }, "if_nr"},
        {"dbe_unit", 3, 7, 24, 4,
         via<VdifEdv3>(decode_vdif_edv3,
                       [](VdifEdv3& e, std::uint64_t v) { e.dbe_unit = narrow<std::uint8_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv3(h).dbe_unit}; },
         [](const Header32& b) { return std::uint64_t{vread<E3>(b).dbeunit}; }, "dbe_unit"},
        {"unassigned", 3, 7, 28, 4,
         via<VdifEdv3>(
             decode_vdif_edv3,
             [](VdifEdv3& e, std::uint64_t v) { e.unassigned = narrow<std::uint8_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv3(h).unassigned}; },
         [](const Header32& b) { return std::uint64_t{vread<E3>(b).unassigned2}; }, "_7_28_4"},
        // EDV 4 (baseband: the tutorial's VDIFHeader4 does not name w4 0-15)
        {"unassigned", 4, 4, 0, 16,
         via<VdifEdv4>(
             decode_vdif_edv4,
             [](VdifEdv4& e, std::uint64_t v) { e.unassigned = narrow<std::uint16_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv4(h).unassigned}; },
         [](const Header32& b) { return std::uint64_t{vread<E4>(b).dummy}; }, nullptr},
        {"mask_length", 4, 4, 16, 8,
         via<VdifEdv4>(
             decode_vdif_edv4,
             [](VdifEdv4& e, std::uint64_t v) { e.mask_length = narrow<std::uint8_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv4(h).mask_length}; },
         [](const Header32& b) { return std::uint64_t{vread<E4>(b).masklength}; },
         "validity_mask_length"},
        {"sync", 4, 5, 0, 32,
         via<VdifEdv4>(decode_vdif_edv4,
                       [](VdifEdv4& e, std::uint64_t v) { e.sync = narrow<std::uint32_t>(v); }),
         [](const VdifHeader& h) { return std::uint64_t{decode_vdif_edv4(h).sync}; },
         [](const Header32& b) { return std::uint64_t{vread<E4>(b).syncword}; }, "sync_pattern"},
        {"validity_mask", 4, 6, 0, 64,
         via<VdifEdv4>(decode_vdif_edv4, [](VdifEdv4& e, std::uint64_t v) { e.validity_mask = v; }),
         [](const VdifHeader& h) { return decode_vdif_edv4(h).validity_mask; },
         [](const Header32& b) { return std::uint64_t{vread<E4>(b).validitymask}; },
         "validity_mask"},
    };
    return f;
}

std::vector<std::uint64_t> sweep_values64(unsigned width, std::uint64_t seed) {
    const std::uint64_t max = width == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << width) - 1;
    std::vector<std::uint64_t> v = {
        0, 1, max, max - 1, max >> 1, 0x5555555555555555ull & max, 0xAAAAAAAAAAAAAAAAull & max};
    for (unsigned b = 0; b < width; ++b) {
        v.push_back(std::uint64_t{1} << b);
    }
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 16; ++i) {
        v.push_back(rng() & max);
    }
    return v;
}

class VdifEdvFieldSweep : public ::testing::TestWithParam<EdvField> {};

// ibvcap's view writes the field: only its bits change, and vdifio's struct
// field and baseband's key (class chosen by the EDV byte) read it.
TEST_P(VdifEdvFieldSweep, IbvcapViewWritesOnlyItsBitsAndBothTranscriptsReadThem) {
    const EdvField& f = GetParam();
    for (const std::uint64_t v : sweep_values64(f.width, f.word * 64 + f.shift)) {
        SCOPED_TRACE(testing::Message() << f.name << " = " << v);
        VdifHeader h;
        h.nbits = 1;
        encode_vdif_edv(VdifEdv4{.unassigned = 0, .mask_length = 0, .sync = 0, .validity_mask = 0},
                        h);  // all extended bits zero
        f.set(h, v);
        EXPECT_EQ(h.edv, f.edv);
        const Header32 b = encode(h);
        const std::uint64_t w64 =
            std::uint64_t{word(b, f.word)} |
            (f.word < 7 ? std::uint64_t{word(b, f.word + 1)} << 32 : std::uint64_t{0});
        const std::uint64_t mask =
            f.width == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << f.width) - 1;
        EXPECT_EQ((w64 >> f.shift) & mask, v);
        // No other bit of w4 0-23, w5-w7 is set.
        std::uint64_t others = 0;
        for (std::size_t w = 4; w < 8; ++w) {
            std::uint64_t bits = word(b, w);
            if (w == 4) {
                bits &= 0xFFFFFFu;
            }
            const unsigned lo = static_cast<unsigned>(w - f.word) * 32;
            if (w >= f.word && lo < f.shift + f.width) {
                // The part of the field inside this word.
                const std::uint64_t field = (mask << f.shift) >> lo;
                bits &= ~field;
            }
            others |= bits;
        }
        EXPECT_EQ(others, 0u);
        EXPECT_EQ(f.get(decode_ok(b)), v);
        EXPECT_EQ(f.vdifio(b), v);
        if (f.baseband_key != nullptr) {
            const auto bh = bb::fromfile(b);
            ASSERT_TRUE(bh);
            EXPECT_EQ(bh->kind, bb::kind_for(f.edv));
            EXPECT_EQ((*bh)[f.baseband_key], v);
        }
    }
}

// The EDV fields baseband names (all but EDV 4's w4 0-15).
class BasebandEdvFieldSweep : public ::testing::TestWithParam<EdvField> {};

std::vector<EdvField> baseband_edv_fields() {
    std::vector<EdvField> out;
    for (const EdvField& f : edv_fields()) {
        if (f.baseband_key != nullptr) {
            out.push_back(f);
        }
    }
    return out;
}

// Baseband's setter writes the field (into a header of the EDV's class):
// ibvcap's view reads it.
TEST_P(BasebandEdvFieldSweep, BasebandWrittenFieldsReadThroughIbvcapsView) {
    const EdvField& f = GetParam();
    for (const std::uint64_t v : sweep_values64(f.width, f.width * 3 + f.shift)) {
        SCOPED_TRACE(testing::Message() << f.name << " = " << v);
        bb::Words words(8, 0);
        words[4] = static_cast<std::uint32_t>(f.edv) << 24;
        bb::Header bh = bb::from_words(words);
        bh.set(f.baseband_key, v);
        EXPECT_EQ(f.get(decode_ok(bh.bytes())), v);
    }
}

INSTANTIATE_TEST_SUITE_P(Edv1To4, VdifEdvFieldSweep, ::testing::ValuesIn(edv_fields()),
                         [](const auto& p) {
                             return "edv" + std::to_string(p.param.edv) + "_" +
                                    std::string(p.param.name);
                         });
INSTANTIATE_TEST_SUITE_P(Edv1To4, BasebandEdvFieldSweep, ::testing::ValuesIn(baseband_edv_fields()),
                         [](const auto& p) {
                             return "edv" + std::to_string(p.param.edv) + "_" +
                                    std::string(p.param.name);
                         });

// ------------------------------------------------ whole headers, both ways

// Parameters a VDIF stream is made of, swept over.
struct Shape {
    int payload;  // bytes
    int thread;
    int bits;
    int nchan;
    bool complex;
    const char* station;
};

std::vector<Shape> shapes() {
    std::vector<Shape> s;
    const char* stations[] = {"Pk", "At", "\x01\x02", "zz"};
    int i = 0;
    for (const int payload : {0, 8, 1024, 5000, 8000, 8192, 32800}) {
        for (const int bits : {1, 2, 3, 4, 8, 16, 32}) {
            for (const int nchan : {1, 2, 16, 1024}) {
                s.push_back({payload, (i * 37) % 1024, bits, nchan, (i & 1) != 0, stations[i % 4]});
                ++i;
            }
        }
    }
    return s;
}

// vdifio builds a header (createVDIFHeader, then the setters DiFX's writers
// use); ibvcap decodes every field to what vdifio's getters read.
TEST(VdifioCrossCheck, HeadersBuiltByCreateVDIFHeaderDecodeInIbvcap) {
    int n = 0;
    for (const Shape& s : shapes()) {
        SCOPED_TRACE(testing::Message() << "payload " << s.payload << " bits " << s.bits
                                        << " nchan " << s.nchan << " thread " << s.thread);
        vio::vdif_header v;
        ASSERT_EQ(vio::createVDIFHeader(v, s.payload, s.thread, s.bits, s.nchan, s.complex ? 1 : 0,
                                        s.station),
                  vio::VDIF_NOERROR);
        vio::setVDIFEpoch(v, 50 + n % 10);
        vio::setVDIFFrameEpochSecOffset(v, 12345678 + n);
        vio::setVDIFFrameNumber(v, (n * 7919) % 0xFFFFFF);
        vio::setVDIFFrameInvalid(v, static_cast<unsigned>(n % 3 == 0));
        Header32 b;
        std::memcpy(b.data(), &v, sizeof v);
        const VdifHeader h = decode_ok(b);
        EXPECT_EQ(h.seconds, static_cast<std::uint32_t>(vio::getVDIFFrameEpochSecOffset(v)));
        EXPECT_EQ(h.frame, static_cast<std::uint32_t>(vio::getVDIFFrameNumber(v)));
        EXPECT_EQ(h.epoch, vio::getVDIFEpoch(v));
        EXPECT_EQ(h.invalid, vio::getVDIFFrameInvalid(v) != 0);
        EXPECT_EQ(h.legacy, vio::getVDIFLegacy(v) != 0);
        EXPECT_EQ(h.frame_bytes(), static_cast<std::uint64_t>(vio::getVDIFFrameBytes(v)));
        EXPECT_EQ(h.frame_bytes(), static_cast<std::uint64_t>(s.payload) + 32);
        EXPECT_EQ(h.header_bytes(), static_cast<std::size_t>(vio::getVDIFHeaderBytes(v)));
        EXPECT_EQ(h.nchan(), static_cast<std::uint32_t>(vio::getVDIFNumChannels(v)));
        EXPECT_EQ(h.nchan(), static_cast<std::uint32_t>(s.nchan));
        EXPECT_EQ(h.nbits, vio::getVDIFBitsPerSample(v));
        EXPECT_EQ(h.complex, vio::getVDIFComplex(v) != 0);
        EXPECT_EQ(h.thread, vio::getVDIFThreadID(v));
        EXPECT_EQ(h.station, vio::getVDIFStationID(v));
        EXPECT_EQ(h.station, (s.station[0] << 8) | s.station[1]);
        EXPECT_EQ(h.version, vio::VDIF_VERSION);
        EXPECT_EQ(h.edv, 0);
        EXPECT_EQ(h.extended, (std::array<std::uint32_t, 4>{}));
        // A frame of it passes ibvcap's validation unless it has no payload.
        EXPECT_EQ(validate_vdif(h, h.frame_bytes()),
                  s.payload == 0 ? VdifError::length_mismatch : VdifError::none);
        ++n;
    }
    EXPECT_GT(n, 100);
}

TEST(VdifioCrossCheck, CreateVDIFHeaderRefusesWhatIbvcapCannotRepresent) {
    vio::vdif_header v;
    EXPECT_EQ(vio::createVDIFHeader(v, 8, 0, 0, 1, 0, "Pk"), vio::VDIF_ERROR);     // bits
    EXPECT_EQ(vio::createVDIFHeader(v, 8, 0, 33, 1, 0, "Pk"), vio::VDIF_ERROR);    // bits
    EXPECT_EQ(vio::createVDIFHeader(v, 12, 0, 2, 1, 0, "Pk"), vio::VDIF_ERROR);    // % 8
    EXPECT_EQ(vio::createVDIFHeader(v, 8, 1024, 2, 1, 0, "Pk"), vio::VDIF_ERROR);  // thread
    EXPECT_EQ(vio::createVDIFHeader(v, 8, 0, 2, 3, 0, "Pk"), vio::VDIF_ERROR);     // nchan
    EXPECT_EQ(vio::createVDIFHeader(v, 8, 0, 2, 0, 0, "Pk"), vio::VDIF_ERROR);     // nchan
    EXPECT_EQ(vio::createVDIFHeader(v, 8, 1023, 32, 1 << 30, 1, "Pk"), vio::VDIF_NOERROR);
}

TEST(VdifioCrossCheck, LegacyAndNextVDIFHeader) {
    vio::vdif_header v;
    ASSERT_EQ(vio::createVDIFHeader(v, 8000 - 16, 5, 2, 4, 0, "Ef"), vio::VDIF_NOERROR);
    v.legacymode = 1;
    vio::setVDIFFrameBytes(v, 8000);  // legacy: 16-byte header + 7984 bytes
    Header32 b;
    std::memcpy(b.data(), &v, sizeof v);
    VdifHeader h = decode_ok(Bytes(b.data(), 16));
    EXPECT_TRUE(h.legacy);
    EXPECT_EQ(h.header_bytes(), static_cast<std::size_t>(vio::getVDIFHeaderBytes(v)));
    EXPECT_EQ(h.frame_bytes(), 8000u);
    EXPECT_EQ(validate_vdif(h, 8000), VdifError::none);
    // nextVDIFHeader's wrap matches StreamTiming::next for VDIF's 1-second period.
    const StreamTiming timing{1, 25};
    for (int i = 0; i < 60; ++i) {
        std::uint32_t s = h.seconds;
        std::uint32_t f = h.frame;
        timing.next(s, f);
        ASSERT_EQ(vio::nextVDIFHeader(v, 25), vio::VDIF_NOERROR);
        std::memcpy(b.data(), &v, sizeof v);
        h = decode_ok(Bytes(b.data(), 16));
        EXPECT_EQ(h.seconds, s) << i;
        EXPECT_EQ(h.frame, f) << i;
    }
}

// ibvcap encodes random headers, standard (every EDV byte) and legacy: every
// field reads back through vdifio's getters and baseband's parsers alike.
TEST(VdifCrossCheck, IbvcapHeadersReadBackThroughBothTranscripts) {
    std::mt19937_64 rng(1128);
    for (int i = 0; i < 3000; ++i) {
        VdifHeader h = random_header(rng, i % 4 == 0);
        if (!h.legacy) {
            h.edv = static_cast<std::uint8_t>(i % 6 == 5 ? rng() : rng() % 5);
        }
        SCOPED_TRACE(testing::Message() << i << " legacy " << h.legacy << " edv " << int{h.edv});
        const Header32 b = encode(h);
        const vio::vdif_header v = vio::read_header(b);
        EXPECT_EQ(static_cast<std::uint32_t>(vio::getVDIFFrameEpochSecOffset(v)), h.seconds);
        EXPECT_EQ(vio::getVDIFLegacy(v) != 0, h.legacy);
        EXPECT_EQ(vio::getVDIFFrameInvalid(v) != 0, h.invalid);
        EXPECT_EQ(static_cast<std::uint32_t>(vio::getVDIFFrameNumber(v)), h.frame);
        EXPECT_EQ(vio::getVDIFEpoch(v), h.epoch);
        EXPECT_EQ(static_cast<std::uint64_t>(static_cast<std::uint32_t>(vio::getVDIFFrameBytes(v))),
                  h.frame_bytes());
        if (h.log2_nchan < 31) {
            EXPECT_EQ(static_cast<std::uint32_t>(vio::getVDIFNumChannels(v)), h.nchan());
        }
        EXPECT_EQ(v.version, h.version);
        EXPECT_EQ(vio::getVDIFStationID(v), h.station);
        EXPECT_EQ(vio::getVDIFThreadID(v), h.thread);
        EXPECT_EQ(vio::getVDIFBitsPerSample(v), h.nbits);
        EXPECT_EQ(vio::getVDIFComplex(v) != 0, h.complex);
        EXPECT_EQ(static_cast<std::size_t>(vio::getVDIFHeaderBytes(v)), h.header_bytes());

        const auto bh = bb::fromfile(b);
        ASSERT_TRUE(bh);
        EXPECT_EQ(bh->kind, h.legacy ? bb::Kind::legacy : bb::kind_for(h.edv));
        EXPECT_EQ(bh->nbytes(), h.header_bytes());
        EXPECT_EQ(bh->words.size(), h.header_bytes() / 4);
        EXPECT_EQ((*bh)["seconds"], h.seconds);
        EXPECT_EQ((*bh)["legacy_mode"], std::uint64_t{h.legacy});
        EXPECT_EQ((*bh)["invalid_data"], std::uint64_t{h.invalid});
        EXPECT_EQ((*bh)["frame_nr"], h.frame);
        EXPECT_EQ((*bh)["ref_epoch"], h.epoch);
        EXPECT_EQ(bh->frame_nbytes(), h.frame_bytes());
        EXPECT_EQ(bh->payload_nbytes(), static_cast<std::int64_t>(h.frame_bytes()) -
                                            static_cast<std::int64_t>(h.header_bytes()));
        EXPECT_EQ(bh->nchan(), h.nchan());
        EXPECT_EQ((*bh)["vdif_version"], h.version);
        EXPECT_EQ((*bh)["station_id"], h.station);
        EXPECT_EQ((*bh)["thread_id"], h.thread);
        EXPECT_EQ(bh->bps(), h.nbits);
        EXPECT_EQ(bh->complex_data(), h.complex);
        if (!h.legacy) {
            EXPECT_EQ((*bh)["edv"], h.edv);
        }
        if (h.legacy || h.edv > 4) {
            continue;
        }
        // The EDV's named fields, through each.
        switch (h.edv) {
            case 1: {
                const VdifEdv1 e = decode_vdif_edv1(h);
                const auto x = vio::read_header<vio::vdif_edv1_header>(b);
                EXPECT_EQ(x.samprate, e.sample_rate);
                EXPECT_EQ(x.samprateunits != 0, e.sample_rate_mhz);
                EXPECT_EQ(x.syncword, e.sync);
                EXPECT_EQ(std::memcmp(x.name, e.name().data(), 8), 0);
                EXPECT_EQ((*bh)["sampling_rate"], e.sample_rate);
                EXPECT_EQ((*bh)["sampling_unit"] != 0, e.sample_rate_mhz);
                EXPECT_EQ((*bh)["sync_pattern"], e.sync);
                EXPECT_EQ((*bh)["das_id"], e.das_id);
                EXPECT_EQ(bh->sample_rate_hz(), e.sample_rate_hz() * (h.complex ? 1 : 2));
                break;
            }
            case 2: {
                const VdifEdv2 e = decode_vdif_edv2(h);
                const auto x = vio::read_header<vio::vdif_edv2_header>(b);
                EXPECT_EQ(x.polblock != 0, e.pol);
                EXPECT_EQ(x.quadrantminus1, e.quadrant_minus1);
                EXPECT_EQ(x.correlator != 0, e.correlator);
                EXPECT_EQ(x.sync, e.sync);
                EXPECT_EQ(x.status, e.status);
                EXPECT_EQ(x.psn, e.psn);
                const auto r = vio::read_header<vio::vdif_edv2_header_r2dbe>(b);
                EXPECT_EQ(r.bdcsideband != 0, e.r2dbe_bdc_sideband());
                EXPECT_EQ(r.rxsideband != 0, e.r2dbe_rx_sideband());
                EXPECT_EQ(r.ppsdiff, e.r2dbe_pps_diff());
                EXPECT_EQ((*bh)["pol"] != 0, e.pol);
                EXPECT_EQ((*bh)["BL_quadrant"], e.quadrant_minus1);
                EXPECT_EQ((*bh)["BL_correlator"] != 0, e.correlator);
                EXPECT_EQ((*bh)["sync_pattern"], e.sync);
                EXPECT_EQ((*bh)["PIC_status"], e.status);
                EXPECT_EQ((*bh)["PSN"], e.psn);
                break;
            }
            case 3: {
                const VdifEdv3 e = decode_vdif_edv3(h);
                const auto x = vio::read_header<vio::vdif_edv3_header>(b);
                EXPECT_EQ(x.samprate, e.sample_rate);
                EXPECT_EQ(x.samprateunits != 0, e.sample_rate_mhz);
                EXPECT_EQ(x.syncword, e.sync);
                EXPECT_EQ(x.tuning, e.loif_tuning);
                EXPECT_EQ(x.personalitytype, e.personality);
                EXPECT_EQ(x.minorrev, e.minor_rev);
                EXPECT_EQ(x.majorrev, e.major_rev);
                EXPECT_EQ(x.sideband != 0, e.sideband_upper);
                EXPECT_EQ(x.subband, e.subband);
                EXPECT_EQ(x.ifnumber, e.if_number);
                EXPECT_EQ(x.dbeunit, e.dbe_unit);
                EXPECT_EQ(x.unassigned2, e.unassigned);
                EXPECT_EQ((*bh)["loif_tuning"], e.loif_tuning);
                EXPECT_EQ((*bh)["personality"], e.personality);
                EXPECT_EQ((*bh)["minor_rev"], e.minor_rev);
                EXPECT_EQ((*bh)["major_rev"], e.major_rev);
                EXPECT_EQ((*bh)["sideband"] != 0, e.sideband_upper);
                EXPECT_EQ((*bh)["subband"], e.subband);
                EXPECT_EQ((*bh)["if_nr"], e.if_number);
                EXPECT_EQ((*bh)["dbe_unit"], e.dbe_unit);
                EXPECT_EQ((*bh)["_7_28_4"], e.unassigned);
                break;
            }
            case 4: {
                const VdifEdv4 e = decode_vdif_edv4(h);
                const auto x = vio::read_header<vio::vdif_edv4_header>(b);
                EXPECT_EQ(x.dummy, e.unassigned);
                EXPECT_EQ(x.masklength, e.mask_length);
                EXPECT_EQ(x.syncword, e.sync);
                EXPECT_EQ(x.validitymask, e.validity_mask);
                EXPECT_EQ((*bh)["validity_mask_length"], e.mask_length);
                EXPECT_EQ((*bh)["sync_pattern"], e.sync);
                EXPECT_EQ((*bh)["validity_mask"], e.validity_mask);
                break;
            }
            default:
                break;
        }
    }
}

// baseband builds headers (fromvalues with keys and properties, verify on)
// for each class; ibvcap decodes every field to what baseband reads.
TEST(BasebandCrossCheck, HeadersBuiltByFromvaluesDecodeInIbvcap) {
    int n = 0;
    for (const int edv : {-1, 0, 1, 2, 3, 4, 0x42}) {
        for (const std::uint64_t bps : {1u, 2u, 4u, 8u, 16u}) {
            for (const std::uint64_t nchan : {1u, 4u, 64u}) {
                for (const bool complex : {false, true}) {
                    std::map<std::string, std::uint64_t> keys = {
                        {"seconds", 0x1ABCDEF0u + static_cast<std::uint64_t>(n)},
                        {"ref_epoch", static_cast<std::uint64_t>(n % 64)},
                        {"frame_nr", static_cast<std::uint64_t>(n * 31)},
                        {"thread_id", static_cast<std::uint64_t>(n % 1024)},
                        {"invalid_data", static_cast<std::uint64_t>(n % 2)}};
                    bb::Properties p;
                    p.bps = bps;
                    p.complex_data = complex;
                    p.nchan = nchan;
                    if (n % 2 == 0) {
                        p.station = std::variant<std::string, std::uint16_t>(std::string("Wb"));
                    } else {
                        p.station = std::variant<std::string, std::uint16_t>(
                            static_cast<std::uint16_t>(0xF00D + n));
                    }
                    if (edv == 3) {
                        p.frame_nbytes = 5032;  // EDV 3 verify: 629 or 129
                        keys["sampling_rate"] = 32;
                        keys["sampling_unit"] = 1;
                        keys["personality"] = 0xC3;
                        keys["major_rev"] = 4;
                        keys["minor_rev"] = 2;
                        keys["dbe_unit"] = 1;
                        keys["if_nr"] = 3;
                        keys["subband"] = 5;
                        keys["sideband"] = 1;
                        keys["loif_tuning"] = 0x4000000u;
                    } else if (edv == 2) {
                        if (bps != 2 || complex) {
                            continue;  // VDIFHeader2.verify: 2-bit real only
                        }
                        p.frame_nbytes = 8032;  // frame_length 1004
                        keys["pol"] = 1;
                        keys["BL_quadrant"] = 3;
                        keys["BL_correlator"] = 1;
                        keys["PIC_status"] = 0xDEADBEEFu;
                        keys["PSN"] =
                            std::uint64_t{0x0123456789ABCDEF} + static_cast<std::uint64_t>(n);
                    } else {
                        p.samples_per_frame = 16384 / nchan;
                    }
                    if (edv == 1) {
                        keys["sampling_rate"] = 16000;
                        keys["das_id"] = 0x3433344B5443494Eull;
                    }
                    if (edv == 4) {
                        keys["validity_mask_length"] = 60;
                        keys["validity_mask"] = (1ull << 59) + 1;
                    }
                    SCOPED_TRACE(testing::Message() << "edv " << edv << " bps " << bps << " nchan "
                                                    << nchan << " complex " << complex);
                    bb::Header bh;
                    try {
                        bh = bb::fromvalues(edv, keys, p);
                    } catch (const std::exception& e) {
                        ADD_FAILURE() << e.what();
                        continue;
                    }
                    const auto bytes = bh.bytes();
                    ASSERT_EQ(bytes.size(), edv == -1 ? 16u : 32u);
                    const VdifHeader h = decode_ok(bytes);
                    EXPECT_EQ(h.legacy, edv == -1);
                    EXPECT_EQ(h.header_bytes(), bh.nbytes());
                    EXPECT_EQ(h.seconds, bh["seconds"]);
                    EXPECT_EQ(h.epoch, bh["ref_epoch"]);
                    EXPECT_EQ(h.frame, bh["frame_nr"]);
                    EXPECT_EQ(h.thread, bh["thread_id"]);
                    EXPECT_EQ(h.invalid, bh["invalid_data"] != 0);
                    EXPECT_EQ(h.version, 1);  // baseband's default vdif_version
                    EXPECT_EQ(h.nbits, bps);
                    EXPECT_EQ(h.nchan(), nchan);
                    EXPECT_EQ(h.complex, complex);
                    EXPECT_EQ(h.station, bh["station_id"]);
                    EXPECT_EQ(h.frame_bytes(), bh.frame_nbytes());
                    if (edv != 2 && edv != 3) {
                        // payload_nbytes / 4 * (32 / bps / (2 if complex)) / nchan
                        const std::uint64_t payload = h.frame_bytes() - h.header_bytes();
                        EXPECT_EQ(payload / 4 * (32 / bps / (complex ? 2 : 1)) / nchan,
                                  16384 / nchan);
                        EXPECT_EQ(bh.samples_per_frame(), 16384 / nchan);
                    }
                    if (edv != -1) {
                        EXPECT_EQ(h.edv, edv);
                    }
                    if (edv == 0) {
                        EXPECT_EQ(h.extended, (std::array<std::uint32_t, 4>{}));
                    }
                    if (edv == 1) {
                        const VdifEdv1 e = decode_vdif_edv1(h);
                        EXPECT_EQ(e.sync, kVdifEdvSyncWord);  // baseband's default
                        EXPECT_EQ(e.sample_rate, 16000u);
                        EXPECT_FALSE(e.sample_rate_mhz);
                        EXPECT_EQ(e.das_id, 0x3433344B5443494Eull);
                    }
                    if (edv == 2) {
                        const VdifEdv2 e = decode_vdif_edv2(h);
                        EXPECT_EQ(e.sync, kVdifEdv2SyncBaseband);  // baseband's default
                        EXPECT_TRUE(e.pol);
                        EXPECT_EQ(e.quadrant_minus1, 3);
                        EXPECT_TRUE(e.correlator);
                        EXPECT_EQ(e.status, 0xDEADBEEFu);
                        EXPECT_EQ(e.psn, bh["PSN"]);
                    }
                    if (edv == 3) {
                        const VdifEdv3 e = decode_vdif_edv3(h);
                        EXPECT_EQ(e.sync, kVdifEdvSyncWord);
                        EXPECT_EQ(e.sample_rate, 32u);
                        EXPECT_TRUE(e.sample_rate_mhz);
                        EXPECT_EQ(e.loif_tuning, 0x4000000u);
                        EXPECT_EQ(e.personality, 0xC3);
                        EXPECT_EQ(e.major_rev, 4);
                        EXPECT_EQ(e.minor_rev, 2);
                        EXPECT_EQ(e.dbe_unit, 1);
                        EXPECT_EQ(e.if_number, 3);
                        EXPECT_EQ(e.subband, 5);
                        EXPECT_TRUE(e.sideband_upper);
                        EXPECT_EQ(h.frame_bytes(), 5032u);
                    }
                    if (edv == 4) {
                        const VdifEdv4 e = decode_vdif_edv4(h);
                        EXPECT_EQ(e.sync, kVdifEdvSyncWord);
                        EXPECT_EQ(e.mask_length, 60);
                        EXPECT_EQ(e.validity_mask, (1ull << 59) + 1);
                    }
                    // ibvcap encodes it back to the same bytes.
                    Header32 again{};
                    encode_vdif(h, again);
                    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), again.begin()));
                    ++n;
                }
            }
        }
    }
    EXPECT_GT(n, 150);
}

TEST(BasebandCrossCheck, SamplesPerFrameDoesNotSplitValuesOverWords) {
    // 3-bit real samples, one channel: 10 per 32-bit word, not 32 * 8000 / 3.
    bb::Header bh = bb::fromvalues(0, {{"bits_per_sample", 2}, {"frame_length", 1004}});
    EXPECT_EQ(bh.payload_nbytes(), 8000);
    EXPECT_EQ(bh.samples_per_frame(), 2000u * 10);
    EXPECT_NE(bh.samples_per_frame(), 8000u * 8 / 3);
    // Power-of-two bits: the same as payload bits / (bps * nchan * 2 if complex).
    bh = bb::fromvalues(0, {{"frame_length", 1004}}, {.bps = 4, .complex_data = true, .nchan = 2});
    EXPECT_EQ(bh.samples_per_frame(), 8000u * 8 / (4 * 2 * 2));
    // A frame is a whole number of 8-byte words: 20000 1-bit samples need 313
    // of them, which hold 20032, and baseband refuses the header.
    EXPECT_THROW(bb::fromvalues(0, {}, {.bps = 1, .samples_per_frame = 20000}),
                 std::invalid_argument);
    EXPECT_EQ(bb::fromvalues(0, {}, {.bps = 1, .samples_per_frame = 20032}).payload_nbytes(),
              313 * 8);
    // baseband refuses a non-power-of-two bps with several channels.
    EXPECT_THROW(bb::fromvalues(0, {{"lg2_nchan", 1}}, {.bps = 3}), std::invalid_argument);
    // And values wider than their field.
    EXPECT_THROW(bb::fromvalues(0, {{"thread_id", 1024}}), std::invalid_argument);
}

TEST(BasebandCrossCheck, ClassSelectionAndVerify) {
    // The legacy bit picks VDIFLegacyHeader whatever w4 says; fromfile keeps 4 words.
    VdifHeader h;
    h.legacy = true;
    h.framelength8 = 2;
    Header32 b = encode(h);
    b[19] = 3;  // an "EDV 3" byte after the legacy header: ignored
    auto bh = bb::fromfile(b);
    ASSERT_TRUE(bh);
    EXPECT_EQ(bh->kind, bb::Kind::legacy);
    EXPECT_EQ(bh->words.size(), 4u);
    EXPECT_TRUE(bh->verify());  // frame_length >= 2
    // fromfile needs 32 bytes, legacy or not.
    EXPECT_FALSE(bb::fromfile(Bytes(b.data(), 31)));
    // EDV 0 verify: words 4-7 zero, frame length at least 4.
    h = VdifHeader{};
    h.framelength8 = 4;
    bh = bb::fromfile(encode(h));
    EXPECT_EQ(bh->kind, bb::Kind::edv0);
    EXPECT_TRUE(bh->verify());
    h.extended[3] = 1;
    EXPECT_FALSE(bb::fromfile(encode(h))->verify());
    // EDV 1: the sync word must be 0xACABFEED.
    encode_vdif_edv(VdifEdv1{}, h);
    EXPECT_TRUE(bb::fromfile(encode(h))->verify());
    VdifEdv1 bad;
    bad.sync = 0;
    encode_vdif_edv(bad, h);
    EXPECT_FALSE(bb::fromfile(encode(h))->verify());
    // EDV 3: frame length 629 or 129 only.
    encode_vdif_edv(VdifEdv3{}, h);
    h.framelength8 = 629;
    EXPECT_TRUE(bb::fromfile(encode(h))->verify());
    h.framelength8 = 630;
    EXPECT_FALSE(bb::fromfile(encode(h))->verify());
    // An EDV baseband has no class for: VDIFBaseHeader.
    h.edv = 0x42;
    EXPECT_EQ(bb::fromfile(encode(h))->kind, bb::Kind::base);
    EXPECT_TRUE(bb::fromfile(encode(h))->verify());
    // Station: two characters when the high byte is printable ASCII 48-127.
    h.station = ('W' << 8) | 'b';
    EXPECT_EQ(std::get<std::string>(bb::fromfile(encode(h))->station()), "Wb");
    h.station = 0x2F41;
    EXPECT_EQ(std::get<std::uint16_t>(bb::fromfile(encode(h))->station()), 0x2F41);
}

// ---------------------------------------------------------------- stream headers

// A datagram: optional VTP sequence number, then the frame.
std::vector<std::uint8_t> datagram(const VdifHeader& h, std::optional<std::uint64_t> psn,
                                   std::size_t payload) {
    std::vector<std::uint8_t> d(psn ? kVtpPsnBytes : 0);
    if (psn) {
        store_le64(d.data(), *psn);
    }
    const std::size_t at = d.size();
    d.resize(at + h.header_bytes() + payload, 0x5A);
    encode_vdif(h, MutableBytes(d.data() + at, h.header_bytes()));
    return d;
}

VdifHeader stream_header(bool legacy, std::size_t payload) {
    VdifHeader h;
    h.legacy = legacy;
    h.invalid = true;
    h.seconds = 0x12345678;
    h.frame = 4321;
    h.epoch = 51;
    h.log2_nchan = 3;
    h.version = 1;
    h.station = 0x5062;
    h.thread = 0x2AA;
    h.nbits = 4;
    h.complex = true;
    h.framelength8 = static_cast<std::uint32_t>((h.header_bytes() + payload) / 8);
    if (!legacy) {
        encode_vdif_edv(VdifEdv3{}, h);
    }
    return h;
}

TEST(VdifStreamHeader, DecodesVdifAndVtpIntoTheNeutralHeader) {
    for (const bool legacy : {false, true}) {
        for (const bool vtp : {false, true}) {
            SCOPED_TRACE(testing::Message() << "legacy " << legacy << " vtp " << vtp);
            const VdifHeader v = stream_header(legacy, 8000);
            const std::uint64_t psn = 0x0102030405060708ull;
            const auto d = datagram(v, vtp ? std::optional(psn) : std::nullopt, 8000);
            const StreamFormat format = vtp ? StreamFormat::vtp : StreamFormat::vdif;
            StreamHeader s;
            s.frames_per_period = 99;  // decode leaves it 0: not in a VDIF header
            const Bytes head(d.data(), std::min(d.size(), kStreamHeaderMaxBytes));
            ASSERT_EQ(decode_stream_header(format, head, s), StreamError::none);
            EXPECT_EQ(s.format, format);
            EXPECT_EQ(s.layout, legacy ? 1 : 0);
            EXPECT_EQ(layout_name(format, s.layout), legacy ? "legacy" : "standard");
            EXPECT_EQ(s.epoch, 51);
            EXPECT_TRUE(s.invalid);
            EXPECT_EQ(s.has_psn, vtp);
            EXPECT_EQ(s.psn, vtp ? psn : 0u);
            EXPECT_EQ(s.seconds, 0x12345678u);
            EXPECT_EQ(s.frame, 4321u);
            EXPECT_EQ(s.key, (0x5062u << 16) | 0x2AAu);
            EXPECT_EQ(s.thread, 0x2AA);
            EXPECT_EQ(s.station, 0x5062);
            EXPECT_EQ(s.period, 1);
            EXPECT_EQ(s.prefix_bytes, vtp ? 8 : 0);
            EXPECT_EQ(s.header_bytes, legacy ? 16 : 32);
            EXPECT_EQ(s.head_bytes(), (vtp ? 8u : 0u) + (legacy ? 16u : 32u));
            EXPECT_EQ(s.frame_bytes, v.frame_bytes());
            EXPECT_EQ(s.payload_bytes(), 8000u);
            EXPECT_EQ(s.frames_per_period, 0u);
            EXPECT_EQ(s.params, std::uint64_t{3} | std::uint64_t{4} << 8 | std::uint64_t{1} << 16 |
                                    std::uint64_t{1} << 17 | std::uint64_t{legacy ? 0u : 3u} << 24 |
                                    std::uint64_t{v.framelength8} << 32);
            EXPECT_EQ(s.params2, 0u);
            EXPECT_EQ(check_stream_header(head, d.size(), s), StreamError::none);
        }
    }
}

TEST(VdifStreamHeader, VtpSequenceNumberIsLittleEndianBeforeTheFrame) {
    const VdifHeader v = stream_header(false, 64);
    auto d = datagram(v, 0, 64);
    const std::array<std::uint8_t, 8> psn = {0xEF, 0xCD, 0xAB, 0x89, 0x67, 0x45, 0x23, 0x01};
    std::memcpy(d.data(), psn.data(), psn.size());
    StreamHeader s;
    ASSERT_EQ(decode_stream_header(StreamFormat::vtp, Bytes(d.data(), 40), s), StreamError::none);
    EXPECT_EQ(s.psn, 0x0123456789ABCDEFull);
    // The same bytes read as plain VDIF: the PSN is taken for w0-w1.
    StreamHeader plain;
    ASSERT_EQ(decode_stream_header(StreamFormat::vdif, Bytes(d.data(), 40), plain),
              StreamError::none);
    EXPECT_EQ(plain.seconds, 0x09ABCDEFu & 0x3FFFFFFFu);
    EXPECT_FALSE(plain.has_psn);
}

TEST(VdifStreamHeader, TooShortForAHeaderIsNotAFrame) {
    const VdifHeader v = stream_header(false, 64);
    const auto d = datagram(v, 7, 64);
    StreamHeader s;
    for (std::size_t n = 0; n < kVtpPsnBytes + kVdifHeaderBytes; ++n) {
        EXPECT_EQ(decode_stream_header(StreamFormat::vtp, Bytes(d.data(), n), s),
                  StreamError::not_a_frame)
            << n;
    }
    for (std::size_t n = 0; n < kVdifHeaderBytes; ++n) {
        EXPECT_EQ(decode_stream_header(StreamFormat::vdif, Bytes(d.data() + 8, n), s),
                  StreamError::not_a_frame)
            << n;
    }
    // A legacy frame needs only 16 (VTP: 24).
    const auto l = datagram(stream_header(true, 64), 7, 64);
    EXPECT_EQ(decode_stream_header(StreamFormat::vtp, Bytes(l.data(), 24), s), StreamError::none);
    EXPECT_EQ(decode_stream_header(StreamFormat::vtp, Bytes(l.data(), 23), s),
              StreamError::not_a_frame);
}

TEST(VdifStreamHeader, CheckComparesTheFrameLengthWithTheDatagramLessThePsn) {
    for (const bool vtp : {false, true}) {
        SCOPED_TRACE(vtp);
        const StreamFormat format = vtp ? StreamFormat::vtp : StreamFormat::vdif;
        VdifHeader v = stream_header(false, 1024);
        auto d = datagram(v, vtp ? std::optional<std::uint64_t>(1) : std::nullopt, 1024);
        const Bytes head(d.data(), std::min(d.size(), kStreamHeaderMaxBytes));
        StreamHeader s;
        ASSERT_EQ(decode_stream_header(format, head, s), StreamError::none);
        EXPECT_EQ(check_stream_header(head, d.size(), s), StreamError::none);
        EXPECT_EQ(check_stream_header(head, d.size() - 1, s), StreamError::bad_length);
        EXPECT_EQ(check_stream_header(head, d.size() + 8, s), StreamError::bad_length);
        EXPECT_EQ(check_stream_header(head, 0, s), StreamError::bad_length);
        // Frame length 0; frame length of the header alone.
        for (const std::uint32_t fl : {0u, 4u}) {
            v.framelength8 = fl;
            d = datagram(v, vtp ? std::optional<std::uint64_t>(1) : std::nullopt, 0);
            const Bytes h2(d.data(), d.size());
            ASSERT_EQ(decode_stream_header(format, h2, s), StreamError::none);
            EXPECT_EQ(check_stream_header(h2, d.size(), s),
                      fl == 0 ? StreamError::zero_field : StreamError::bad_length);
        }
    }
}

// ---------------------------------------------------------------- file readers

// A VDIF file, frames back to back, built by ibvcap's encoder.
struct FileBuilder {
    std::vector<std::uint8_t> bytes;
    void add(VdifHeader h, std::size_t payload, std::uint8_t fill = 0x3C) {
        h.framelength8 = static_cast<std::uint32_t>((h.header_bytes() + payload) / 8);
        const std::size_t at = bytes.size();
        bytes.resize(at + h.header_bytes() + payload, fill);
        encode_vdif(h, MutableBytes(bytes.data() + at, h.header_bytes()));
    }
};

VdifHeader file_header(std::uint16_t station, std::uint16_t thread, std::uint32_t seconds,
                       std::uint32_t frame, bool invalid = false, bool legacy = false) {
    VdifHeader h;
    h.station = station;
    h.thread = thread;
    h.seconds = seconds;
    h.frame = frame;
    h.invalid = invalid;
    h.legacy = legacy;
    h.nbits = 2;
    h.version = 1;
    h.epoch = 50;
    return h;
}

// Four streams with known gaps, repeats, invalid frames and a legacy stream;
// both readers give the same summary, and it is the one planned.
TEST(VdifFileReaders, BothTranscriptsSummariseAPlannedFile) {
    constexpr std::uint64_t fps = 10;
    FileBuilder f;
    // Stream (0x4B41, 0): seconds 100 frames 0-9, then 101 frames 0-9 without
    // 3 and 4; frame 101:6 twice; 100:2 invalid.
    for (std::uint32_t i = 0; i < 20; ++i) {
        if (i == 13 || i == 14) {
            continue;
        }
        f.add(file_header(0x4B41, 0, 100 + i / 10, i % 10, i == 2), 992);
        if (i == 16) {
            f.add(file_header(0x4B41, 0, 101, 6), 992);
        }
    }
    // Stream (0x4B41, 1): out of order (101:1 before 101:0), no gaps.
    for (const std::uint32_t i : {9u, 11u, 10u, 12u}) {
        f.add(file_header(0x4B41, 1, 100 + i / 10, i % 10), 992);
    }
    // Stream (7, 1023): legacy frames 200:5 and 200:8, the second invalid.
    f.add(file_header(7, 1023, 200, 5, false, true), 1008);
    f.add(file_header(7, 1023, 200, 8, true, true), 1008);
    // Stream (7, 0): one EDV 3 frame.
    VdifHeader e3 = file_header(7, 0, 5, 0);
    encode_vdif_edv(VdifEdv3{}, e3);
    f.add(e3, 5000);

    const auto v = vio::read_file(f.bytes, fps);
    const auto b = bb::read_file(f.bytes, fps);
    ASSERT_EQ(v.size(), 4u);
    ASSERT_EQ(b.size(), 4u);

    const vio::Summary s0 = v.at({0x4B41, 0});
    EXPECT_EQ(s0.frames, 19u);
    EXPECT_EQ(s0.invalid, 1u);
    EXPECT_EQ(s0.first_seconds, 100u);
    EXPECT_EQ(s0.first_frame, 0u);
    EXPECT_EQ(s0.last_seconds, 101u);
    EXPECT_EQ(s0.last_frame, 9u);
    EXPECT_EQ(s0.missing, 2u);
    EXPECT_EQ(s0.duplicates, 1u);
    const vio::Summary s1 = v.at({0x4B41, 1});
    EXPECT_EQ(s1.frames, 4u);
    EXPECT_EQ(s1.missing, 0u);
    EXPECT_EQ(s1.duplicates, 0u);
    EXPECT_EQ(s1.first_frame, 9u);
    EXPECT_EQ(s1.last_seconds, 101u);
    EXPECT_EQ(s1.last_frame, 2u);
    const vio::Summary s2 = v.at({7, 1023});
    EXPECT_EQ(s2.frames, 2u);
    EXPECT_EQ(s2.invalid, 1u);
    EXPECT_EQ(s2.missing, 2u);  // 200:6 and 200:7
    EXPECT_EQ(v.at({7, 0}).frames, 1u);

    // baseband's reader agrees on every common field.
    for (const auto& [key, s] : v) {
        const bb::Summary& o = b.at(key);
        SCOPED_TRACE(testing::Message() << key.first << "/" << key.second);
        EXPECT_EQ(o.frames, s.frames);
        EXPECT_EQ(o.invalid, s.invalid);
        EXPECT_EQ(o.first_seconds, s.first_seconds);
        EXPECT_EQ(o.first_frame, s.first_frame);
        EXPECT_EQ(o.last_seconds, s.last_seconds);
        EXPECT_EQ(o.last_frame, s.last_frame);
        EXPECT_EQ(o.missing, s.missing);
        EXPECT_EQ(o.duplicates, s.duplicates);
    }
    // Its own: the invalid frame's slot reads as fill too; the EDV 3 frame's
    // length (5032 bytes) passes verify, the EDV 0 frames too.
    EXPECT_EQ(b.at({0x4B41, 0}).filled, 3u);
    EXPECT_EQ(b.at({7, 1023}).filled, 3u);  // 2 missing + the invalid 200:8
    EXPECT_EQ(b.at({7, 0}).unverified, 0u);

    const vio::Walk vw = vio::walk_file(f.bytes);
    EXPECT_TRUE(vw.complete);
    EXPECT_EQ(vw.frames, 19u + 4 + 2 + 1);
    EXPECT_EQ(vw.end, f.bytes.size());
    EXPECT_EQ(vw.fill_bytes, 0u);
    const bb::Walk bw = bb::walk_file(f.bytes);
    EXPECT_TRUE(bw.complete);
    EXPECT_EQ(bw.frames, vw.frames);
    EXPECT_FALSE(bw.one_stream);  // several stations, legacy and EDV 3: not one baseband stream

    // With VDIF_MUX_FLAG_ENABLEVALIDITY the invalid frames fill no slot.
    const auto strict = vio::read_file(f.bytes, fps, {.discard_invalid = true});
    EXPECT_EQ(strict.at({0x4B41, 0}).missing, 3u);
    EXPECT_EQ(strict.at({0x4B41, 0}).invalid, 1u);
    EXPECT_EQ(strict.at({7, 1023}).missing, 0u);  // only 200:5 is left
    EXPECT_EQ(strict.at({7, 1023}).last_frame, 5u);
}

// Random streams: both readers agree with each other and with the plan.
TEST(VdifFileReaders, RandomFilesAgreeWithThePlan) {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 40; ++trial) {
        const std::uint64_t fps = 1 + rng() % 50;
        const int nstreams = 1 + static_cast<int>(rng() % 4);
        FileBuilder f;
        std::map<std::pair<std::uint16_t, std::uint16_t>, vio::Summary> plan;
        for (int st = 0; st < nstreams; ++st) {
            const auto station = static_cast<std::uint16_t>(rng());
            const auto thread = static_cast<std::uint16_t>(st);
            const std::uint64_t start = 1000 * fps + rng() % 100;
            const std::uint64_t count = 1 + rng() % 200;
            vio::Summary& s = plan[{station, thread}];
            std::uint64_t present = 0;
            std::uint64_t last = 0;
            bool any = false;
            for (std::uint64_t i = 0; i < count; ++i) {
                if (i != 0 && i + 1 != count && rng() % 10 == 0) {
                    continue;  // missing
                }
                const std::uint64_t idx = start + i;
                const bool invalid = rng() % 13 == 0;
                const int copies = rng() % 17 == 0 ? 2 : 1;
                for (int c = 0; c < copies; ++c) {
                    f.add(file_header(station, thread, static_cast<std::uint32_t>(idx / fps),
                                      static_cast<std::uint32_t>(idx % fps), invalid),
                          8 * (1 + rng() % 4));
                    ++s.frames;
                    s.invalid += invalid ? 1 : 0;
                }
                s.duplicates += static_cast<std::uint64_t>(copies - 1);
                ++present;
                last = idx;
                if (!any) {
                    s.first_seconds = static_cast<std::uint32_t>(idx / fps);
                    s.first_frame = static_cast<std::uint32_t>(idx % fps);
                    any = true;
                }
            }
            s.last_seconds = static_cast<std::uint32_t>(last / fps);
            s.last_frame = static_cast<std::uint32_t>(last % fps);
            s.missing = last - start + 1 - present;
        }
        const auto v = vio::read_file(f.bytes, fps);
        const auto b = bb::read_file(f.bytes, fps);
        ASSERT_EQ(v.size(), plan.size()) << trial;
        for (const auto& [key, s] : plan) {
            EXPECT_EQ(v.at(key), s) << trial;
            const bb::Summary& o = b.at(key);
            EXPECT_EQ((vio::Summary{o.frames, o.invalid, o.first_seconds, o.first_frame,
                                    o.last_seconds, o.last_frame, o.missing, o.duplicates}),
                      s)
                << trial;
        }
    }
}

TEST(VdifFileReaders, TruncatedAndHostileFiles) {
    FileBuilder f;
    for (std::uint32_t i = 0; i < 5; ++i) {
        f.add(file_header(1, 2, 10, i), 96);
    }
    const std::size_t whole = f.bytes.size();
    // Cut inside the last frame: four frames, walk incomplete.
    auto cut = f.bytes;
    cut.resize(whole - 1);
    EXPECT_FALSE(vio::walk_file(cut).complete);
    EXPECT_EQ(vio::walk_file(cut).frames, 4u);
    EXPECT_EQ(vio::read_file(cut, 5).at({1, 2}).frames, 4u);
    EXPECT_FALSE(bb::walk_file(cut).complete);
    EXPECT_EQ(bb::read_file(cut, 5).at({1, 2}).frames, 4u);
    // A frame length of zero stops both walks there.
    auto zero = f.bytes;
    store_le32(zero.data() + 2 * 128 + 8, 0);
    EXPECT_EQ(vio::walk_file(zero).frames, 2u);
    EXPECT_FALSE(vio::walk_file(zero).complete);
    EXPECT_EQ(bb::walk_file(zero).frames, 2u);
    EXPECT_FALSE(bb::walk_file(zero).complete);
    // A frame length under the header (2: 16 bytes of a 32-byte header).
    auto under = f.bytes;
    store_le32(under.data() + 128 + 8, 2);
    EXPECT_EQ(vio::walk_file(under).frames, 1u);
    EXPECT_EQ(bb::walk_file(under).frames, 1u);
    // A frame length past the end of the file.
    auto past = f.bytes;
    store_le32(past.data() + 4 * 128 + 8, 17);
    EXPECT_EQ(vio::walk_file(past).frames, 4u);
    EXPECT_EQ(bb::walk_file(past).frames, 4u);
    // Empty file: nothing, complete.
    EXPECT_TRUE(vio::read_file({}, 5).empty());
    EXPECT_TRUE(vio::walk_file({}).complete);
    EXPECT_TRUE(bb::walk_file({}).complete);
    // A legacy frame in the last 32 bytes: baseband's fromfile wants 32 bytes.
    FileBuilder l;
    l.add(file_header(1, 2, 10, 0, false, true), 8);
    EXPECT_EQ(vio::walk_file(l.bytes).frames, 1u);
    EXPECT_TRUE(vio::walk_file(l.bytes).complete);
    EXPECT_EQ(bb::walk_file(l.bytes).frames, 0u);
    EXPECT_FALSE(bb::walk_file(l.bytes).complete);
}

TEST(VdifFileReaders, VdifioSkipsFillPattern) {
    FileBuilder f;
    f.add(file_header(1, 2, 10, 0), 96);
    // 16 bytes of fill pattern between frames: stepped over 8 at a time.
    for (int i = 0; i < 4; ++i) {
        f.bytes.insert(f.bytes.end(), {0x44, 0x33, 0x22, 0x11});
    }
    f.add(file_header(1, 2, 10, 2), 96);
    // A frame whose last word is the fill pattern: not a frame.
    f.add(file_header(1, 2, 10, 3), 96);
    store_le32(f.bytes.data() + f.bytes.size() - 4, vio::FILL_PATTERN);
    const vio::Walk w = vio::walk_file(f.bytes);
    EXPECT_TRUE(w.complete);
    EXPECT_EQ(w.frames, 2u);
    EXPECT_EQ(w.fill_bytes, 16u + 128u);
    const vio::Summary s = vio::read_file(f.bytes, 4).at({1, 2});
    EXPECT_EQ(s.frames, 2u);
    EXPECT_EQ(s.missing, 1u);
    EXPECT_EQ(s.last_frame, 2u);
}

TEST(VdifFileReaders, NoFramesPerSecond) {
    FileBuilder f;
    for (const std::uint32_t fr : {0u, 1u, 1u, 5u}) {
        f.add(file_header(1, 2, 10, fr, fr == 5), 8);
    }
    const vio::Summary s = vio::read_file(f.bytes, 0).at({1, 2});
    EXPECT_EQ(s.frames, 4u);
    EXPECT_EQ(s.duplicates, 1u);
    EXPECT_EQ(s.missing, 0u);
    EXPECT_EQ(s.last_frame, 5u);
    const bb::Summary o = bb::read_file(f.bytes, 0).at({1, 2});
    EXPECT_EQ(o.duplicates, 1u);
    EXPECT_EQ(o.missing, 0u);
    EXPECT_EQ(o.filled, 1u);
}

}  // namespace
}  // namespace ibvcap
