// Unit tests for the CODIF header codec (formats/codif.hpp, docs/formats.md, "The CODIF header").
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "codifio_transcript.hpp"
#include "formats/codif.hpp"

namespace ibvcap {
namespace {

using Header64 = std::array<std::uint8_t, kCodifHeaderBytes>;

// A v2 header written out byte by byte from the word map of docs/formats.md, "The CODIF header",
// independent of encode_codif. Every field has a distinctive value so that a field read from the
// wrong bits cannot pass.
constexpr Header64 kV2Bytes = {
    // W0: frame 0x00012345 (bits 0-31), seconds 0x1A2B3C4D (32-63)
    0x45, 0x23, 0x01, 0x00, 0x4D, 0x3C, 0x2B, 0x1A,
    // W1: epoch 0x30, nbits 8, power 1 / invalid 0 / complex 1 / cal 1 (0xD),
    // representation 5 (0x5_), version 0x13 | protocol 6 << 5 = 0xD3,
    // reserved 0, period 5
    0x30, 0x08, 0x5D, 0xD3, 0x00, 0x00, 0x05, 0x00,
    // W2: threadid 0x0102, groupid 0x0304, secondaryid 0x0506, stationid 0x4B41
    0x02, 0x01, 0x04, 0x03, 0x06, 0x05, 0x41, 0x4B,
    // W3: nchan 16, blocklength 0x0020, framelength8 1024 (8192-byte payload)
    0x10, 0x00, 0x20, 0x00, 0x00, 0x04, 0x00, 0x00,
    // W4: totalsamples 0x0807060504030201
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
    // W5: sync 0xFEEDCAFE, metaid 0xBEEF, meta1 0x1234
    0xFE, 0xCA, 0xED, 0xFE, 0xEF, 0xBE, 0x34, 0x12,
    // W6: metadata[0] 0x1122334455667788
    0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
    // W7: metadata[1] 0x99AABBCCDDEEFF00
    0x00, 0xFF, 0xEE, 0xDD, 0xCC, 0xBB, 0xAA, 0x99};

CodifHeader v2_expected() {
    CodifHeader h;
    h.layout = CodifLayout::v2;
    h.frame = 0x00012345u;
    h.seconds = 0x1A2B3C4Du;
    h.epoch = 0x30;
    h.nbits = 8;
    h.power = true;
    h.invalid = false;
    h.complex = true;
    h.cal = true;
    h.representation = 5;
    h.version = 0x13;
    h.protocol = 6;
    h.period = 5;
    h.threadid = 0x0102;
    h.groupid = 0x0304;
    h.secondaryid = 0x0506;
    h.stationid = 0x4B41;
    h.nchan = 16;
    h.blocklength = 0x0020;
    h.framelength8 = 1024;
    h.totalsamples = 0x0807060504030201ull;
    h.metaid = 0xBEEF;
    h.meta1 = 0x1234;
    h.metadata = {0x1122334455667788ull, 0x99AABBCCDDEEFF00ull};
    return h;
}

// A draft header: sixteen little-endian 32-bit words (DiFX codifio draft
// struct codif_header, sync in word 11).
constexpr Header64 kDraftBytes = {
    // w0: frame 0x00012345
    0x45, 0x23, 0x01, 0x00,
    // w1: seconds 0x0A2B3C4D (bits 0-29), complex 1 (bit 30), invalid 1 (bit 31)
    0x4D, 0x3C, 0x2B, 0xCA,
    // w2: stationid 0x4B41 (0-15), representation 9 (22-25), epoch 42 (26-31)
    //     = 0x4B41 | 0x02400000 | 0xA8000000 = 0xAA404B41
    0x41, 0x4B, 0x40, 0xAA,
    // w3: framelength8 1024 = 8192 payload bytes, header excluded (0-23), nbits 4
    //     (24-28), version 5 (29-31) = 0xA4000400
    0x00, 0x04, 0x00, 0xA4,
    // w4: groupid 0x0304 (0-15), threadid 0x0102 (16-31)
    0x04, 0x03, 0x02, 0x01,
    // w5: nchan-1 = 15 (0-15), blocklength 0x0020 (16-31)
    0x0F, 0x00, 0x20, 0x00,
    // w6: reserved
    0x00, 0x00, 0x00, 0x00,
    // w7: period 5 (0-15)
    0x05, 0x00, 0x00, 0x00,
    // w8-w9: totalsamples 0x0807060504030201
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
    // w10: reserved
    0x00, 0x00, 0x00, 0x00,
    // w11: sync 0xADEADBEE
    0xEE, 0xDB, 0xEA, 0xAD,
    // w12-w15: extended words
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};

CodifHeader draft_expected() {
    CodifHeader h;
    h.layout = CodifLayout::draft;
    h.frame = 0x00012345u;
    h.seconds = 0x0A2B3C4Du;
    h.complex = true;
    h.invalid = true;
    h.stationid = 0x4B41;
    h.representation = 9;
    h.epoch = 42;
    h.framelength8 = 1024;
    h.nbits = 4;
    h.version = 5;
    h.groupid = 0x0304;
    h.threadid = 0x0102;
    h.nchan = 16;
    h.blocklength = 0x0020;
    h.period = 5;
    h.totalsamples = 0x0807060504030201ull;
    return h;
}

// A consistent, realistic header: 8192-byte payload, 16 complex 8-bit
// channels (256 samples per frame), 1000 frames per 1-second period.
CodifHeader realistic(CodifLayout layout) {
    CodifHeader h;
    h.layout = layout;
    h.frame = 17;
    h.seconds = 123456;
    h.epoch = 50;
    h.nbits = 8;
    h.complex = true;
    h.period = 1;
    h.threadid = 3;
    h.groupid = 1;
    h.stationid = 11;
    h.nchan = 16;
    h.blocklength = 1;
    h.framelength8 = 8192 / 8;
    h.totalsamples = 256 * 1000;
    return h;
}

Header64 encode(const CodifHeader& h) {
    Header64 out{};
    encode_codif(h, out);
    return out;
}

CodifHeader decode_ok(Bytes bytes) {
    CodifHeader h;
    const CodifError error = decode_codif(bytes, h);
    EXPECT_EQ(error, CodifError::none) << to_string(error);
    return h;
}

// ---------------------------------------------------------------- v2 layout

TEST(CodifV2, DecodesHandBuiltBytesFieldByField) {
    CodifHeader h;
    ASSERT_EQ(decode_codif(kV2Bytes, h), CodifError::none);
    EXPECT_EQ(h.layout, CodifLayout::v2);
    EXPECT_EQ(h.frame, 0x00012345u);
    EXPECT_EQ(h.seconds, 0x1A2B3C4Du);
    EXPECT_EQ(h.epoch, 0x30);
    EXPECT_EQ(h.nbits, 8);
    EXPECT_TRUE(h.power);
    EXPECT_FALSE(h.invalid);
    EXPECT_TRUE(h.complex);
    EXPECT_TRUE(h.cal);
    EXPECT_EQ(h.representation, 5);
    EXPECT_EQ(h.version, 0x13);
    EXPECT_EQ(h.protocol, 6);
    EXPECT_EQ(h.period, 5);
    EXPECT_EQ(h.threadid, 0x0102);
    EXPECT_EQ(h.groupid, 0x0304);
    EXPECT_EQ(h.secondaryid, 0x0506);
    EXPECT_EQ(h.stationid, 0x4B41);
    EXPECT_EQ(h.nchan, 16);
    EXPECT_EQ(h.blocklength, 0x0020);
    EXPECT_EQ(h.framelength8, 1024u);
    EXPECT_EQ(h.payload_bytes(), 8192u);
    EXPECT_EQ(h.frame_bytes(), 8256u);
    EXPECT_EQ(h.totalsamples, 0x0807060504030201ull);
    EXPECT_EQ(h.metaid, 0xBEEF);
    EXPECT_EQ(h.meta1, 0x1234);
    EXPECT_EQ(h.metadata[0], 0x1122334455667788ull);
    EXPECT_EQ(h.metadata[1], 0x99AABBCCDDEEFF00ull);
    EXPECT_EQ(h, v2_expected());
}

TEST(CodifV2, EncodesExactlyTheHandBuiltBytes) {
    EXPECT_EQ(encode(v2_expected()), kV2Bytes);
}

TEST(CodifV2, SingleFlagBitsLandOnTheirOwnBits) {
    // Each W1 flag alone, so that swapped flag positions cannot cancel out.
    struct Case {
        bool CodifHeader::*flag;
        std::uint8_t byte2;
    };
    const Case cases[] = {{&CodifHeader::power, 0x01},
                          {&CodifHeader::invalid, 0x02},
                          {&CodifHeader::complex, 0x04},
                          {&CodifHeader::cal, 0x08}};
    for (const Case& c : cases) {
        CodifHeader h;
        h.*(c.flag) = true;
        const Header64 bytes = encode(h);
        EXPECT_EQ(bytes[8 + 2], c.byte2);
        CodifHeader back = decode_ok(bytes);
        EXPECT_EQ(back, h);
    }
}

TEST(CodifV2, ReservedBitsAreIgnoredOnDecodeAndZeroOnEncode) {
    Header64 bytes = kV2Bytes;
    bytes[8 + 4] = 0xFF;  // W1 bits 32-47: reserved
    bytes[8 + 5] = 0xFF;
    const CodifHeader h = decode_ok(bytes);
    EXPECT_EQ(h, v2_expected());
    EXPECT_EQ(encode(h), kV2Bytes);
}

TEST(CodifV2, EncodeMasksFieldsToTheirWidths) {
    CodifHeader h = v2_expected();
    h.representation = 0xF5;  // 4 bits
    h.version = 0xF3;         // 5 bits
    h.protocol = 0xFE;        // 3 bits
    const Header64 bytes = encode(h);
    EXPECT_EQ(bytes[8 + 2], 0x5D);
    EXPECT_EQ(bytes[8 + 3], (0x6 << 5) | 0x13);
    EXPECT_EQ(bytes[8 + 4], 0x00);
    const CodifHeader back = decode_ok(bytes);
    EXPECT_EQ(back.representation, 5);
    EXPECT_EQ(back.version, 0x13);
    EXPECT_EQ(back.protocol, 6);
}

TEST(CodifV2, SecondsAreNotWrappedAtOneDay) {
    CodifHeader h = realistic(CodifLayout::v2);
    h.seconds = 0xFFFFFFFFu;
    EXPECT_EQ(decode_ok(encode(h)).seconds, 0xFFFFFFFFu);
    h.seconds = 86400 * 200 + 7;
    EXPECT_EQ(decode_ok(encode(h)).seconds, 86400u * 200 + 7);
}

// ------------------------------------------------------------- draft layout

TEST(CodifDraft, DecodesHandBuiltBytesFieldByField) {
    CodifHeader h;
    ASSERT_EQ(decode_codif(kDraftBytes, h), CodifError::none);
    EXPECT_EQ(h.layout, CodifLayout::draft);
    EXPECT_EQ(h.frame, 0x00012345u);
    EXPECT_EQ(h.seconds, 0x0A2B3C4Du);
    EXPECT_TRUE(h.complex);
    EXPECT_TRUE(h.invalid);
    EXPECT_EQ(h.stationid, 0x4B41);
    EXPECT_EQ(h.representation, 9);
    EXPECT_EQ(h.epoch, 42);
    EXPECT_EQ(h.framelength8, 1024u);  // wire 1032 minus the 8 header words
    EXPECT_EQ(h.payload_bytes(), 8192u);
    EXPECT_EQ(h.frame_bytes(), 8256u);
    EXPECT_EQ(h.nbits, 4);
    EXPECT_EQ(h.version, 5);
    EXPECT_EQ(h.groupid, 0x0304);
    EXPECT_EQ(h.threadid, 0x0102);
    EXPECT_EQ(h.nchan, 16);  // wire 15
    EXPECT_EQ(h.blocklength, 0x0020);
    EXPECT_EQ(h.period, 5);
    EXPECT_EQ(h.totalsamples, 0x0807060504030201ull);
    // Fields the draft layout does not have.
    EXPECT_FALSE(h.power);
    EXPECT_FALSE(h.cal);
    EXPECT_EQ(h.protocol, 0);
    EXPECT_EQ(h.secondaryid, 0);
    EXPECT_EQ(h.metaid, 0);
    EXPECT_EQ(h.meta1, 0);
    EXPECT_EQ(h.metadata[0], 0u);
    EXPECT_EQ(h.metadata[1], 0u);
    EXPECT_EQ(h, draft_expected());
}

TEST(CodifDraft, EncodesExactlyTheHandBuiltBytes) {
    EXPECT_EQ(encode(draft_expected()), kDraftBytes);
}

TEST(CodifDraft, ReservedAndExtendedWordsAreIgnoredOnDecodeAndZeroOnEncode) {
    Header64 bytes = kDraftBytes;
    for (const std::size_t word : {6u, 10u, 12u, 13u, 14u, 15u}) {
        for (std::size_t i = 0; i < 4; ++i) {
            bytes[word * 4 + i] = 0xA5;
        }
    }
    bytes[2 * 4 + 2] |= 0x3F;  // w2 bits 16-21: unassigned
    bytes[7 * 4 + 2] = 0x77;   // w7 bits 16-31: reserved
    bytes[7 * 4 + 3] = 0x77;
    const CodifHeader h = decode_ok(bytes);
    EXPECT_EQ(h, draft_expected());
    EXPECT_EQ(encode(h), kDraftBytes);
}

TEST(CodifDraft, FieldsAbsentFromTheDraftAreNotEncoded) {
    CodifHeader h = draft_expected();
    h.power = true;
    h.cal = true;
    h.protocol = 7;
    h.secondaryid = 0xFFFF;
    h.metaid = 0xFFFF;
    h.meta1 = 0xFFFF;
    h.metadata = {~0ull, ~0ull};
    EXPECT_EQ(encode(h), kDraftBytes);
}

TEST(CodifDraft, OverwritesEveryByteOfTheHeader) {
    Header64 bytes;
    bytes.fill(0xCC);
    encode_codif(draft_expected(), bytes);
    EXPECT_EQ(bytes, kDraftBytes);
}

TEST(CodifDraft, ChannelCountIsStoredMinusOne) {
    CodifHeader h = draft_expected();
    h.nchan = 1;
    Header64 bytes = encode(h);
    EXPECT_EQ(bytes[5 * 4], 0x00);
    EXPECT_EQ(bytes[5 * 4 + 1], 0x00);
    EXPECT_EQ(decode_ok(bytes).nchan, 1);

    h.nchan = 0xFFFF;
    bytes = encode(h);
    EXPECT_EQ(bytes[5 * 4], 0xFE);
    EXPECT_EQ(bytes[5 * 4 + 1], 0xFF);
    EXPECT_EQ(decode_ok(bytes).nchan, 0xFFFF);
}

// The draft frame length is the payload alone, as DiFX's codifio and its callers read it
// (test/codifio_transcript.hpp; formats/codif.cpp says where).
TEST(CodifDraft, FrameLengthIsThePayloadAlone) {
    CodifHeader h = draft_expected();
    h.framelength8 = 0;
    Header64 bytes = encode(h);
    EXPECT_EQ(bytes[3 * 4], 0);  // no payload
    EXPECT_EQ(decode_ok(bytes).framelength8, 0u);

    h.framelength8 = 1;
    bytes = encode(h);
    EXPECT_EQ(bytes[3 * 4], 1);
    EXPECT_EQ(decode_ok(bytes).framelength8, 1u);

    h.framelength8 = (1u << 24) - 1;  // largest payload the 24-bit field holds
    bytes = encode(h);
    EXPECT_EQ(bytes[3 * 4], 0xFF);
    EXPECT_EQ(bytes[3 * 4 + 1], 0xFF);
    EXPECT_EQ(bytes[3 * 4 + 2], 0xFF);
    EXPECT_EQ(bytes[3 * 4 + 3] & 0x1F, 4);  // nbits untouched
    EXPECT_EQ(decode_ok(bytes).framelength8, (1u << 24) - 1);
}

// -------------------------------------------------------- layout detection

TEST(CodifDetect, BySyncWord) {
    EXPECT_EQ(detect_codif_layout(kV2Bytes), CodifLayout::v2);
    EXPECT_EQ(detect_codif_layout(kDraftBytes), CodifLayout::draft);
    const Header64 zeros{};
    EXPECT_EQ(detect_codif_layout(zeros), std::nullopt);
    EXPECT_EQ(detect_codif_layout(Bytes(kV2Bytes).first(63)), std::nullopt);
    EXPECT_EQ(detect_codif_layout(Bytes{}), std::nullopt);
}

TEST(CodifDetect, V2WhoseMetaFieldsSpellTheDraftSyncIsStillV2) {
    CodifHeader h = v2_expected();
    h.metaid = 0xDBEE;  // bytes 44-47 become EE DB EA AD, the draft sync
    h.meta1 = 0xADEA;
    const Header64 bytes = encode(h);
    EXPECT_EQ(load_le32(bytes.data() + 44), kCodifSyncDraft);
    EXPECT_EQ(detect_codif_layout(bytes), CodifLayout::v2);
    EXPECT_EQ(decode_ok(bytes), h);
}

TEST(CodifDetect, ToStringNames) {
    EXPECT_EQ(to_string(CodifLayout::v2), "v2");
    EXPECT_EQ(to_string(CodifLayout::draft), "draft");
    EXPECT_EQ(to_string(CodifError::none), "none");
    EXPECT_EQ(to_string(CodifError::short_buffer), "short_buffer");
    EXPECT_EQ(to_string(CodifError::bad_sync), "bad_sync");
    EXPECT_EQ(to_string(CodifError::zero_nchan), "zero_nchan");
    EXPECT_EQ(to_string(CodifError::zero_nbits), "zero_nbits");
    EXPECT_EQ(to_string(CodifError::zero_period), "zero_period");
    EXPECT_EQ(to_string(CodifError::zero_framelength), "zero_framelength");
    EXPECT_EQ(to_string(CodifError::length_mismatch), "length_mismatch");
    EXPECT_EQ(to_string(CodifError::samples_not_integral), "samples_not_integral");
    EXPECT_EQ(to_string(CodifError::frame_beyond_period), "frame_beyond_period");
}

// ------------------------------------------------------------- round trips

CodifHeader random_header(std::mt19937_64& rng, CodifLayout layout) {
    auto bits = [&rng](unsigned width) -> std::uint64_t {
        const std::uint64_t v = rng();
        return width >= 64 ? v : v & ((std::uint64_t{1} << width) - 1);
    };
    CodifHeader h;
    h.layout = layout;
    h.frame = static_cast<std::uint32_t>(bits(32));
    h.invalid = bits(1) != 0;
    h.complex = bits(1) != 0;
    h.representation = static_cast<std::uint8_t>(bits(4));
    h.period = static_cast<std::uint16_t>(bits(16));
    h.threadid = static_cast<std::uint16_t>(bits(16));
    h.groupid = static_cast<std::uint16_t>(bits(16));
    h.stationid = static_cast<std::uint16_t>(bits(16));
    h.nchan = static_cast<std::uint16_t>(bits(16));
    h.blocklength = static_cast<std::uint16_t>(bits(16));
    h.totalsamples = bits(64);
    if (layout == CodifLayout::v2) {
        h.seconds = static_cast<std::uint32_t>(bits(32));
        h.epoch = static_cast<std::uint8_t>(bits(8));
        h.nbits = static_cast<std::uint8_t>(bits(8));
        h.power = bits(1) != 0;
        h.cal = bits(1) != 0;
        h.version = static_cast<std::uint8_t>(bits(5));
        h.protocol = static_cast<std::uint8_t>(bits(3));
        h.secondaryid = static_cast<std::uint16_t>(bits(16));
        h.framelength8 = static_cast<std::uint32_t>(bits(32));
        h.metaid = static_cast<std::uint16_t>(bits(16));
        h.meta1 = static_cast<std::uint16_t>(bits(16));
        h.metadata = {bits(64), bits(64)};
    } else {
        h.seconds = static_cast<std::uint32_t>(bits(30));
        h.epoch = static_cast<std::uint8_t>(bits(6));
        h.nbits = static_cast<std::uint8_t>(bits(5));
        h.version = static_cast<std::uint8_t>(bits(3));
        h.framelength8 = static_cast<std::uint32_t>(bits(24));  // payload / 8, 24 bits
    }
    return h;
}

TEST(CodifRoundTrip, RandomV2Headers) {
    std::mt19937_64 rng(0xC0D1F2);
    for (int i = 0; i < 20000; ++i) {
        const CodifHeader h = random_header(rng, CodifLayout::v2);
        const Header64 bytes = encode(h);
        CodifHeader back;
        ASSERT_EQ(decode_codif(bytes, back), CodifError::none) << "iteration " << i;
        ASSERT_EQ(back, h) << "iteration " << i;
        ASSERT_EQ(encode(back), bytes) << "iteration " << i;
    }
}

TEST(CodifRoundTrip, RandomDraftHeaders) {
    std::mt19937_64 rng(0xD4AF7);
    for (int i = 0; i < 20000; ++i) {
        const CodifHeader h = random_header(rng, CodifLayout::draft);
        const Header64 bytes = encode(h);
        CodifHeader back;
        ASSERT_EQ(decode_codif(bytes, back), CodifError::none) << "iteration " << i;
        ASSERT_EQ(back, h) << "iteration " << i;
        ASSERT_EQ(encode(back), bytes) << "iteration " << i;
    }
}

TEST(CodifRoundTrip, DecodeOverwritesEveryFieldOfTheOutput) {
    // A draft decode into a header that held v2-only values must clear them.
    CodifHeader out = v2_expected();
    ASSERT_EQ(decode_codif(kDraftBytes, out), CodifError::none);
    EXPECT_EQ(out, draft_expected());
    // A v2 decode assigns every field itself (it does not clear the output
    // first): whatever the output held, random values included, is replaced.
    std::mt19937_64 rng(0x0F1E2D);
    for (int i = 0; i < 100; ++i) {
        CodifHeader held = random_header(rng, i % 2 == 0 ? CodifLayout::v2 : CodifLayout::draft);
        held.power = held.cal = true;
        held.metadata = {~0ull, ~0ull};
        ASSERT_EQ(decode_codif(kV2Bytes, held), CodifError::none);
        ASSERT_EQ(held, v2_expected()) << "iteration " << i;
    }
}

// ------------------------------------------------------ unaligned buffers

TEST(CodifUnaligned, HeaderAtOffset42) {
    constexpr std::size_t kOffset = 42;  // 14 Ethernet + 20 IPv4 + 8 UDP
    for (const Header64* bytes : {&kV2Bytes, &kDraftBytes}) {
        std::vector<std::uint8_t> frame(kOffset + kCodifHeaderBytes + 100, 0x5A);
        std::copy(bytes->begin(), bytes->end(), frame.begin() + kOffset);
        const Bytes view = Bytes(frame).subspan(kOffset);
        const CodifHeader h = decode_ok(view);
        EXPECT_EQ(h, bytes == &kV2Bytes ? v2_expected() : draft_expected());

        // Encoding into the same unaligned spot writes exactly 64 bytes.
        std::vector<std::uint8_t> out(frame.size(), 0x5A);
        encode_codif(h, MutableBytes(out).subspan(kOffset));
        EXPECT_EQ(out, frame);
    }
}

TEST(CodifUnaligned, EncodeIntoTooSmallBufferWritesNothing) {
    std::array<std::uint8_t, 63> small{};
    small.fill(0x11);
    encode_codif(v2_expected(), small);
    for (const std::uint8_t b : small) {
        EXPECT_EQ(b, 0x11);
    }
}

// ------------------------------------------------------ sequence arithmetic

TEST(CodifSequence, SamplesPerFrameRealistic) {
    CodifHeader h = realistic(CodifLayout::v2);
    EXPECT_EQ(codif_samples_per_frame(h), 256u);  // 8192 B * 8 / (16 * 8 * 2)
    EXPECT_EQ(codif_frames_per_period(h), 1000u);
    h.complex = false;
    EXPECT_EQ(codif_samples_per_frame(h), 512u);
    EXPECT_EQ(codif_frames_per_period(h), 500u);
    h.nbits = 2;
    h.nchan = 4;
    EXPECT_EQ(codif_samples_per_frame(h), 8192u);
    h.layout = CodifLayout::draft;  // the layout does not change the meaning
    EXPECT_EQ(codif_samples_per_frame(h), 8192u);
}

TEST(CodifSequence, NonIntegralAndUndefinedCasesAreZero) {
    CodifHeader h = realistic(CodifLayout::v2);
    h.nbits = 12;  // 65536 bits / (16 * 12 * 2) = 170.67
    EXPECT_EQ(codif_samples_per_frame(h), 0u);
    EXPECT_EQ(codif_frames_per_period(h), 0u);

    h = realistic(CodifLayout::v2);
    h.nchan = 3;  // 65536 / 48 not integral
    EXPECT_EQ(codif_samples_per_frame(h), 0u);

    h = realistic(CodifLayout::v2);
    h.nchan = 0;
    EXPECT_EQ(codif_samples_per_frame(h), 0u);
    EXPECT_EQ(codif_frames_per_period(h), 0u);

    h = realistic(CodifLayout::v2);
    h.nbits = 0;
    EXPECT_EQ(codif_samples_per_frame(h), 0u);

    h = realistic(CodifLayout::v2);
    h.framelength8 = 0;
    EXPECT_EQ(codif_samples_per_frame(h), 0u);
    EXPECT_EQ(codif_frames_per_period(h), 0u);

    h = realistic(CodifLayout::v2);
    h.totalsamples = 256 * 1000 + 1;  // not a whole number of frames
    EXPECT_EQ(codif_samples_per_frame(h), 256u);
    EXPECT_EQ(codif_frames_per_period(h), 0u);

    h.totalsamples = 0;
    EXPECT_EQ(codif_frames_per_period(h), 0u);
}

TEST(CodifSequence, LargestFieldsDoNotOverflow) {
    CodifHeader h;
    h.framelength8 = 0xFFFFFFFFu;
    h.nchan = 1;
    h.nbits = 1;
    EXPECT_EQ(codif_samples_per_frame(h), std::uint64_t{0xFFFFFFFFu} * 64);
    h.totalsamples = std::uint64_t{0xFFFFFFFFu} * 64 * 3;
    EXPECT_EQ(codif_frames_per_period(h), 3u);
}

// ------------------------------------------------------------ CodifTiming

TEST(CodifTimingTest, NextWithinAndAcrossAOneSecondPeriod) {
    const CodifTiming t{1, 3};
    std::uint32_t s = 10;
    std::uint32_t f = 0;
    t.next(s, f);
    EXPECT_EQ(s, 10u);
    EXPECT_EQ(f, 1u);
    t.next(s, f);
    EXPECT_EQ(f, 2u);
    t.next(s, f);
    EXPECT_EQ(s, 11u);
    EXPECT_EQ(f, 0u);
}

TEST(CodifTimingTest, NextWrapsToSecondsPlusPeriod) {
    const CodifTiming t{5, 3};
    std::uint32_t s = 100;
    std::uint32_t f = 2;
    t.next(s, f);
    EXPECT_EQ(s, 105u);
    EXPECT_EQ(f, 0u);
}

TEST(CodifTimingTest, PositionIsTheInverseOfIndexForAlignedSeconds) {
    for (const CodifTiming t : {CodifTiming{1, 3}, CodifTiming{5, 3}, CodifTiming{27, 1000}}) {
        for (const std::uint32_t s :
             {0u, t.period, 100u * t.period, 4'000'000u / t.period * t.period}) {
            for (const std::uint32_t f :
                 {0u, 1u, static_cast<std::uint32_t>(t.frames_per_period - 1)}) {
                std::uint32_t ps = 1;
                std::uint32_t pf = 1;
                t.position(t.index(s, f), ps, pf);
                EXPECT_EQ(ps, s) << t.period << " " << s << " " << f;
                EXPECT_EQ(pf, f) << t.period << " " << s << " " << f;
            }
        }
    }
}

TEST(CodifTimingTest, NextDoesNotWrapSecondsAtOneDay) {
    const CodifTiming t{1, 10};
    std::uint32_t s = 86399;
    std::uint32_t f = 9;
    t.next(s, f);
    EXPECT_EQ(s, 86400u);
    EXPECT_EQ(f, 0u);
}

TEST(CodifTimingTest, ConsecutiveFramesHaveGapZeroAcrossManyWraps) {
    const CodifTiming t{5, 3};
    const std::uint32_t s0 = 1000;
    const std::uint32_t f0 = 1;
    std::uint32_t s = s0;
    std::uint32_t f = f0;
    for (std::int64_t k = 1; k <= 50; ++k) {
        std::uint32_t ps = s;
        std::uint32_t pf = f;
        t.next(s, f);
        ASSERT_EQ(t.gap(ps, pf, s, f), 0) << "step " << k;
        ASSERT_EQ(t.gap(s0, f0, s, f), k - 1) << "step " << k;
        ASSERT_EQ(t.gap(s, f, s0, f0), -k - 1) << "step " << k;
        ASSERT_EQ(t.index(s, f), t.index(s0, f0) + static_cast<std::uint64_t>(k));
        ASSERT_EQ(s % 5, 0u);  // s0 is period-aligned, so every wrap is
    }
    EXPECT_EQ(s, s0 + 5 * 17);  // 51 frames from f0=1 with 3 per period
    EXPECT_EQ(f, 0u);
}

TEST(CodifTimingTest, GapAcrossPeriodBoundaryIncludesThePeriod) {
    const CodifTiming t{5, 3};
    // (100, 2) -> (105, 0) is consecutive: codifio's seconds+1 bug would say
    // (101, 0) and count 5 periods here.
    EXPECT_EQ(t.gap(100, 2, 105, 0), 0);
    EXPECT_EQ(t.gap(100, 1, 105, 0), 1);  // (100, 2) missing
    EXPECT_EQ(t.gap(100, 0, 110, 0), 5);  // six frames later
    EXPECT_EQ(t.gap(100, 2, 110, 2), 5);
    EXPECT_EQ(t.gap(100, 2, 105, 0) + 1,
              static_cast<std::int64_t>(t.index(105, 0) - t.index(100, 2)));
}

TEST(CodifTimingTest, DuplicatesAreMinusOne) {
    const CodifTiming t{5, 3};
    EXPECT_EQ(t.gap(105, 0, 105, 0), -1);
    EXPECT_EQ(t.gap(0, 0, 0, 0), -1);
    const CodifTiming one{1, 1000};
    EXPECT_EQ(one.gap(4000000000u, 999, 4000000000u, 999), -1);
}

TEST(CodifTimingTest, ReorderingIsBelowMinusOne) {
    const CodifTiming t{5, 3};
    // Backwards across a period boundary: (100, 2) arrives after (105, 0).
    EXPECT_EQ(t.gap(105, 0, 100, 2), -2);
    EXPECT_EQ(t.gap(105, 1, 105, 0), -2);
    EXPECT_EQ(t.gap(110, 0, 100, 0), -7);
    const CodifTiming one{1, 1000};
    EXPECT_EQ(one.gap(20, 0, 19, 999), -2);
    EXPECT_EQ(one.gap(20, 500, 10, 0), -(10 * 1000 + 500) - 1);
}

TEST(CodifTimingTest, LargeGaps) {
    const CodifTiming t{5, 3};
    EXPECT_EQ(t.gap(0, 0, 5 * 1000000u, 0), 3 * 1000000 - 1);
    const CodifTiming fast{1, 1000000};
    // Hours of seconds past one day: no 86400 wrap, no 32-bit overflow.
    EXPECT_EQ(fast.gap(0, 0, 4000000000u, 0), std::int64_t{4000000000} * 1000000 - 1);
    EXPECT_EQ(fast.gap(4000000000u, 0, 0, 0), -std::int64_t{4000000000} * 1000000 - 1);
    EXPECT_EQ(fast.gap(86399, 999999, 86400, 0), 0);
}

TEST(CodifTimingTest, GapMatchesIndexDifferenceForRandomPositions) {
    std::mt19937_64 rng(42);
    for (int i = 0; i < 10000; ++i) {
        const std::uint32_t period = 1 + static_cast<std::uint32_t>(rng() % 10);
        const std::uint64_t fpp = 1 + rng() % 100000;
        const CodifTiming t{period, fpp};
        const std::uint32_t s0 = static_cast<std::uint32_t>(rng() % 1000000) * period;
        const std::uint32_t s = static_cast<std::uint32_t>(rng() % 1000000) * period;
        const std::uint32_t f0 = static_cast<std::uint32_t>(rng() % fpp);
        const std::uint32_t f = static_cast<std::uint32_t>(rng() % fpp);
        const std::int64_t expected = static_cast<std::int64_t>(t.index(s, f)) -
                                      static_cast<std::int64_t>(t.index(s0, f0)) - 1;
        ASSERT_EQ(t.gap(s0, f0, s, f), expected);
        // The formula of docs/formats.md, "Sequence arithmetic", for period-aligned seconds.
        const std::int64_t design = (static_cast<std::int64_t>(s) - std::int64_t{s0}) /
                                        std::int64_t{period} * static_cast<std::int64_t>(fpp) +
                                    (std::int64_t{f} - std::int64_t{f0}) - 1;
        ASSERT_EQ(t.gap(s0, f0, s, f), design);
    }
}

// -------------------------------------------------------------- validation

TEST(CodifValidate, RealisticHeadersPassInBothLayouts) {
    for (const CodifLayout layout : {CodifLayout::v2, CodifLayout::draft}) {
        const CodifHeader h = decode_ok(encode(realistic(layout)));
        EXPECT_EQ(validate_codif(h, 8192 + 64), CodifError::none) << to_string(layout);
        // The last frame of the period is still inside it.
        CodifHeader last = h;
        last.frame = 999;
        EXPECT_EQ(validate_codif(last, 8256), CodifError::none);
    }
}

TEST(CodifValidate, FrameIsNotCheckedWhenFramesPerPeriodIsUnknown) {
    CodifHeader h = realistic(CodifLayout::v2);
    h.totalsamples = 0;
    h.frame = 0xFFFFFFFFu;
    EXPECT_EQ(validate_codif(h, 8256), CodifError::none);
    h.totalsamples = 256 * 1000 + 1;
    EXPECT_EQ(validate_codif(h, 8256), CodifError::none);
}

TEST(CodifValidate, FirstFailingCheckWins) {
    CodifHeader h = realistic(CodifLayout::v2);
    h.nchan = 0;
    h.nbits = 0;
    h.period = 0;
    h.framelength8 = 0;
    EXPECT_EQ(validate_codif(h, 1), CodifError::zero_nchan);
    h.nchan = 16;
    EXPECT_EQ(validate_codif(h, 1), CodifError::zero_nbits);
    h.nbits = 8;
    EXPECT_EQ(validate_codif(h, 1), CodifError::zero_period);
    h.period = 1;
    EXPECT_EQ(validate_codif(h, 1), CodifError::zero_framelength);
    h.framelength8 = 1023;  // also not a whole number of samples
    h.frame = 5000;
    EXPECT_EQ(validate_codif(h, 1), CodifError::length_mismatch);
    EXPECT_EQ(validate_codif(h, 1023 * 8 + 64), CodifError::samples_not_integral);
    h.framelength8 = 1024;
    EXPECT_EQ(validate_codif(h, 8256), CodifError::frame_beyond_period);
}

// A table of malformed inputs: each row is a byte-level or field-level change
// to a good header, and the exact error that decode or validate must report.
struct Malformed {
    std::string name;
    CodifLayout layout;
    std::vector<std::uint8_t> bytes;  // what arrives (header + nothing)
    std::uint64_t datagram_bytes;
    CodifError decode_error;    // from decode_codif
    CodifError validate_error;  // from validate_codif when decode succeeds
};

std::vector<std::uint8_t> good_bytes(CodifLayout layout) {
    const Header64 b = encode(realistic(layout));
    return {b.begin(), b.end()};
}

std::vector<std::uint8_t> with_field(CodifLayout layout, void (*change)(CodifHeader&)) {
    CodifHeader h = realistic(layout);
    change(h);
    const Header64 b = encode(h);
    return {b.begin(), b.end()};
}

std::vector<Malformed> malformed_table() {
    std::vector<Malformed> rows;
    for (const CodifLayout layout : {CodifLayout::v2, CodifLayout::draft}) {
        const std::string tag = std::string(to_string(layout)) + ": ";
        const std::vector<std::uint8_t> good = good_bytes(layout);
        const std::size_t sync_at = layout == CodifLayout::v2 ? 40 : 44;

        rows.push_back({tag + "good", layout, good, 8256, CodifError::none, CodifError::none});
        rows.push_back({tag + "empty", layout, {}, 0, CodifError::short_buffer, CodifError::none});
        rows.push_back({tag + "63 bytes",
                        layout,
                        {good.begin(), good.end() - 1},
                        8256,
                        CodifError::short_buffer,
                        CodifError::none});

        std::vector<std::uint8_t> bad = good;
        bad[sync_at] ^= 0x01;
        rows.push_back({tag + "sync off by one bit", layout, bad, 8256, CodifError::bad_sync,
                        CodifError::none});
        bad = good;
        for (std::size_t i = 0; i < 4; ++i) {
            bad[sync_at + i] = 0;
        }
        rows.push_back(
            {tag + "sync zeroed", layout, bad, 8256, CodifError::bad_sync, CodifError::none});

        rows.push_back({tag + "zero nchan", layout,
                        with_field(layout, [](CodifHeader& h) { h.nchan = 0; }), 8256,
                        CodifError::none, CodifError::zero_nchan});
        rows.push_back({tag + "zero nbits", layout,
                        with_field(layout, [](CodifHeader& h) { h.nbits = 0; }), 8256,
                        CodifError::none, CodifError::zero_nbits});
        rows.push_back({tag + "zero period", layout,
                        with_field(layout, [](CodifHeader& h) { h.period = 0; }), 8256,
                        CodifError::none, CodifError::zero_period});
        rows.push_back({tag + "zero framelength", layout,
                        with_field(layout, [](CodifHeader& h) { h.framelength8 = 0; }), 64,
                        CodifError::none, CodifError::zero_framelength});
        rows.push_back({tag + "datagram one byte short", layout, good, 8255, CodifError::none,
                        CodifError::length_mismatch});
        rows.push_back({tag + "datagram without header", layout, good, 8192, CodifError::none,
                        CodifError::length_mismatch});
        rows.push_back({tag + "samples not integral", layout,
                        with_field(layout, [](CodifHeader& h) { h.nbits = 12; }), 8256,
                        CodifError::none, CodifError::samples_not_integral});
        rows.push_back({tag + "frame == frames per period", layout,
                        with_field(layout, [](CodifHeader& h) { h.frame = 1000; }), 8256,
                        CodifError::none, CodifError::frame_beyond_period});
        rows.push_back({tag + "frame far beyond period", layout,
                        with_field(layout, [](CodifHeader& h) { h.frame = 0xFFFFFFFFu; }), 8256,
                        CodifError::none, CodifError::frame_beyond_period});
    }

    // Draft only: every wire frame length decodes (it is the payload alone);
    // 0 is a header without payload.
    std::vector<std::uint8_t> draft = good_bytes(CodifLayout::draft);
    for (const int wire : {0, 1, 7}) {
        std::vector<std::uint8_t> bad = draft;
        bad[12] = static_cast<std::uint8_t>(wire);
        bad[13] = 0;
        bad[14] = 0;
        rows.push_back(
            {"draft: wire framelength8 " + std::to_string(wire), CodifLayout::draft, bad,
             64 + 8 * static_cast<std::uint64_t>(wire), CodifError::none,
             wire == 0 ? CodifError::zero_framelength : CodifError::samples_not_integral});
    }
    std::vector<std::uint8_t> header_plus_8 = draft;
    header_plus_8[12] = 8;
    header_plus_8[13] = 0;
    header_plus_8[14] = 0;
    rows.push_back({"draft: wire framelength8 8 with the old meaning's datagram",
                    CodifLayout::draft, header_plus_8, 64, CodifError::none,
                    CodifError::length_mismatch});
    // Wire nchan-1 = 0xFFFF would be 65536 channels: not representable, decodes
    // as 0 and is rejected.
    std::vector<std::uint8_t> nchan_max = draft;
    nchan_max[20] = 0xFF;
    nchan_max[21] = 0xFF;
    rows.push_back({"draft: wire nchan 0xFFFF", CodifLayout::draft, nchan_max, 8256,
                    CodifError::none, CodifError::zero_nchan});
    return rows;
}

TEST(CodifMalformed, EachRowReportsItsExactError) {
    const std::vector<Malformed> rows = malformed_table();
    ASSERT_GE(rows.size(), 30u);
    for (const Malformed& row : rows) {
        SCOPED_TRACE(row.name);
        CodifHeader h;
        const CodifError decoded = decode_codif(row.bytes, h);
        EXPECT_EQ(decoded, row.decode_error)
            << "got " << to_string(decoded) << ", want " << to_string(row.decode_error);
        if (decoded == CodifError::none) {
            EXPECT_EQ(h.layout, row.layout);
            const CodifError validated = validate_codif(h, row.datagram_bytes);
            EXPECT_EQ(validated, row.validate_error)
                << "got " << to_string(validated) << ", want " << to_string(row.validate_error);
        }
    }
}

// ------------------------------------------- DiFX codifio, field by field
//
// test/codifio_transcript.hpp transcribes DiFX's codifio (difx/difx
// libraries/codifio: codifio.h's accessors and setters, codifio.c's
// createCODIFHeader, setCODIFFrameBytes, setCODIFNumChannels and
// getCODIFFramesPerPeriod / getCODIFFrameperperiod). Frames built by codifio
// must be read by ibvcap as valid with every field, and every field ibvcap
// writes must read back through codifio's getters.

namespace cio = test::codifio;

Header64 bytes_of(const void* header) {
    Header64 b{};
    std::memcpy(b.data(), header, b.size());
    return b;
}

// One distinct value per field, built only through codifio's setters.
cio::draft::Header draft_by_codifio(int payload, int nchan, int nbits, bool complex) {
    cio::draft::Header d;
    const std::uint64_t spf = static_cast<std::uint64_t>(payload) * 8 /
                              static_cast<std::uint64_t>(nchan * nbits * (complex ? 2 : 1));
    EXPECT_TRUE(cio::draft::createCODIFHeader(d, payload, 0x0102, 0x0304, nbits,
                                              static_cast<std::uint16_t>(nchan), 4, 2, spf * 1000,
                                              complex ? 1 : 0, "Pk"));
    cio::draft::setCODIFFrameNumber(d, 999);
    cio::draft::setCODIFFrameEpochSecOffset(d, 0x2B3C4D);
    cio::draft::setCODIFEpoch(d, 52);
    cio::draft::setCODIFFrameInvalid(d, 1);
    cio::draft::setCODIFRepresentation(d, 9);
    return d;
}

cio::v2::Header v2_by_codifio(int payload, int nchan, int nbits, bool complex) {
    cio::v2::Header v;
    const std::uint64_t spf = static_cast<std::uint64_t>(payload) * 8 /
                              static_cast<std::uint64_t>(nchan * nbits * (complex ? 2 : 1));
    EXPECT_TRUE(cio::v2::createCODIFHeader(
        v, static_cast<std::uint32_t>(payload), 0x0102, 0x0304, static_cast<std::uint8_t>(nbits),
        static_cast<std::uint16_t>(nchan), 4, 2, spf * 1000, complex ? 1 : 0, "Pk", 0x0506));
    cio::v2::setCODIFFrameNumber(v, 999);
    cio::v2::setCODIFFrameEpochSecOffset(v, 0x1A2B3C4Du);
    cio::v2::setCODIFEpoch(v, 52);
    cio::v2::setCODIFFrameInvalid(v, 1);
    cio::v2::setCODIFIsPower(v, 1);
    cio::v2::setCODIFCalEnabled(v, 1);
    v.metaid = 0xBEEF;
    v.meta1 = 0x1234;
    v.meta2 = 0x1122334455667788ull;
    v.meta3 = 0x99AABBCCDDEEFF00ull;
    return v;
}

void expect_fields_equal(const CodifHeader& h, const cio::draft::Header& d) {
    EXPECT_EQ(h.layout, CodifLayout::draft);
    EXPECT_EQ(cio::draft::getCODIFSync(d), cio::draft::kSync);
    EXPECT_EQ(h.frame, static_cast<std::uint32_t>(cio::draft::getCODIFFrameNumber(d)));
    EXPECT_EQ(h.seconds, static_cast<std::uint32_t>(cio::draft::getCODIFFrameEpochSecOffset(d)));
    EXPECT_EQ(h.complex, cio::draft::getCODIFComplex(d) != 0);
    EXPECT_EQ(h.invalid, cio::draft::getCODIFFrameInvalid(d) != 0);
    EXPECT_EQ(h.stationid, cio::draft::getCODIFStationID(d));
    EXPECT_EQ(h.representation, cio::draft::getCODIFRepresentation(d));
    EXPECT_EQ(h.epoch, cio::draft::getCODIFEpoch(d));
    EXPECT_EQ(h.payload_bytes(), static_cast<std::uint64_t>(cio::draft::getCODIFFrameBytes(d)));
    EXPECT_EQ(h.nbits, cio::draft::getCODIFBitsPerSample(d));
    EXPECT_EQ(h.version, cio::draft::getCODIFVersion(d));
    EXPECT_EQ(h.groupid, cio::draft::getCODIFGroupID(d));
    EXPECT_EQ(h.threadid, cio::draft::getCODIFThreadID(d));
    EXPECT_EQ(h.nchan, cio::draft::getCODIFNumChannels(d) & 0xFFFF);
    EXPECT_EQ(h.blocklength, cio::draft::getCODIFSampleblockLength(d));
    EXPECT_EQ(h.period, cio::draft::getCODIFPeriod(d));
    EXPECT_EQ(h.totalsamples, cio::draft::getCODIFTotalSamples(d));
}

void expect_fields_equal(const CodifHeader& h, const cio::v2::Header& v) {
    EXPECT_EQ(h.layout, CodifLayout::v2);
    EXPECT_EQ(cio::v2::getCODIFSync(v), cio::v2::kSync);
    EXPECT_EQ(h.frame, cio::v2::getCODIFFrameNumber(v));
    EXPECT_EQ(h.seconds, cio::v2::getCODIFFrameEpochSecOffset(v));
    EXPECT_EQ(h.epoch, cio::v2::getCODIFEpoch(v));
    EXPECT_EQ(h.nbits, cio::v2::getCODIFBitsPerSample(v));
    EXPECT_EQ(h.power, cio::v2::getCODIFIsPower(v) != 0);
    EXPECT_EQ(h.invalid, cio::v2::getCODIFFrameInvalid(v) != 0);
    EXPECT_EQ(h.complex, cio::v2::getCODIFComplex(v) != 0);
    EXPECT_EQ(h.cal, cio::v2::getCODIFCalEnabled(v) != 0);
    EXPECT_EQ(h.representation, cio::v2::getCODIFRepresentation(v));
    EXPECT_EQ(h.version, cio::v2::getCODIFVersion(v));
    EXPECT_EQ(h.protocol, cio::v2::getCODIFProtocol(v));
    EXPECT_EQ(h.period, cio::v2::getCODIFPeriod(v));
    EXPECT_EQ(h.threadid, cio::v2::getCODIFThreadID(v));
    EXPECT_EQ(h.groupid, cio::v2::getCODIFGroupID(v));
    EXPECT_EQ(h.secondaryid, cio::v2::getCODIFSecondaryID(v));
    EXPECT_EQ(h.stationid, cio::v2::getCODIFStationID(v));
    EXPECT_EQ(h.nchan, cio::v2::getCODIFNumChannels(v));
    EXPECT_EQ(h.blocklength, cio::v2::getCODIFSampleblockLength(v));
    EXPECT_EQ(h.payload_bytes(), cio::v2::getCODIFFrameBytes(v));
    EXPECT_EQ(h.totalsamples, cio::v2::getCODIFTotalSamples(v));
    EXPECT_EQ(h.metaid, v.metaid);
    EXPECT_EQ(h.meta1, v.meta1);
    EXPECT_EQ(h.metadata[0], v.meta2);
    EXPECT_EQ(h.metadata[1], v.meta3);
}

struct Shape {
    int payload, nchan, nbits;
    bool complex;
};
constexpr Shape kShapes[] = {{8192, 16, 8, true},
                             {8000, 1, 2, false},
                             {1024, 4, 16, true},
                             {7168, 7, 4, false},
                             {64, 1, 1, false}};

TEST(Codifio, DraftFramesBuiltByCodifioAreValidWithEveryField) {
    for (const Shape& s : kShapes) {
        SCOPED_TRACE(s.payload);
        const cio::draft::Header d = draft_by_codifio(s.payload, s.nchan, s.nbits, s.complex);
        CodifHeader h;
        ASSERT_EQ(decode_codif(bytes_of(&d), h), CodifError::none);
        expect_fields_equal(h, d);
        // The datagram codifio's callers send: header + getCODIFFrameBytes() of payload.
        EXPECT_EQ(validate_codif(h, 64 + static_cast<std::uint64_t>(s.payload)), CodifError::none);
        EXPECT_EQ(codif_frames_per_period(h), cio::draft::getCODIFFramesPerPeriod(d));
    }
}

TEST(Codifio, V2FramesBuiltByCodifioAreValidWithEveryField) {
    for (const Shape& s : kShapes) {
        SCOPED_TRACE(s.payload);
        const cio::v2::Header v = v2_by_codifio(s.payload, s.nchan, s.nbits, s.complex);
        CodifHeader h;
        ASSERT_EQ(decode_codif(bytes_of(&v), h), CodifError::none);
        expect_fields_equal(h, v);
        EXPECT_EQ(validate_codif(h, 64 + static_cast<std::uint64_t>(s.payload)), CodifError::none);
        EXPECT_EQ(codif_frames_per_period(h), cio::v2::getCODIFFrameperperiod(v));
    }
}

TEST(Codifio, EveryFieldIbvcapWritesReadsBackThroughCodifioGetters) {
    std::mt19937_64 rng(1616);
    for (int i = 0; i < 2000; ++i) {
        const CodifHeader d = random_header(rng, CodifLayout::draft);
        const Header64 db = encode(d);
        expect_fields_equal(d, cio::read_header<cio::draft::Header>(db));
        const CodifHeader v = random_header(rng, CodifLayout::v2);
        const Header64 vb = encode(v);
        expect_fields_equal(v, cio::read_header<cio::v2::Header>(vb));
        if (testing::Test::HasFailure()) {
            break;
        }
    }
}

TEST(Codifio, IbvcapRealisticFramesHaveCodifioFrameSizes) {
    for (const CodifLayout layout : {CodifLayout::v2, CodifLayout::draft}) {
        const Header64 b = encode(realistic(layout));
        const std::uint64_t payload =
            layout == CodifLayout::v2
                ? cio::v2::getCODIFFrameBytes(cio::read_header<cio::v2::Header>(b))
                : static_cast<std::uint64_t>(
                      cio::draft::getCODIFFrameBytes(cio::read_header<cio::draft::Header>(b)));
        EXPECT_EQ(payload, 8192u) << to_string(layout);
    }
}

}  // namespace
}  // namespace ibvcap
