// Unit tests for fill frames (formats/fill_frame.hpp): the header a reader
// sees (time, invalid bit, every other field the template's) and the payload
// pattern, for CODIF v2 and draft and VDIF standard and legacy headers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "formats/codif.hpp"
#include "formats/fill_frame.hpp"
#include "formats/vdif.hpp"

namespace ibvcap {
namespace {

CodifHeader codif_template(CodifLayout layout) {
    CodifHeader h;
    h.layout = layout;
    h.frame = 17;
    h.seconds = 123456;
    h.epoch = 50;
    h.nbits = 8;
    h.complex = true;
    h.representation = 1;
    h.version = 1;
    h.period = 1;
    h.threadid = 3;
    h.groupid = 5;
    h.stationid = 12;
    h.nchan = 4;
    h.blocklength = 1;
    h.framelength8 = 1024;
    h.totalsamples = 32000;
    if (layout == CodifLayout::v2) {
        h.power = true;
        h.cal = true;
        h.protocol = 2;
        h.secondaryid = 9;
        h.metaid = 7;
        h.meta1 = 8;
        h.metadata = {0x1111222233334444ull, 0x5555666677778888ull};
    }
    return h;
}

// The payload's bytes are 44 33 22 11 repeated: 0x11223344 little-endian.
void expect_pattern(Bytes payload) {
    ASSERT_FALSE(payload.empty());
    for (std::size_t i = 0; i < payload.size(); ++i) {
        const std::uint8_t want = static_cast<std::uint8_t>(0x44 - 0x11 * (i % 4));
        ASSERT_EQ(payload[i], want) << "byte " << i;
    }
    // What vdifmux tests for: the frame's last 32-bit word is the pattern.
    EXPECT_EQ(load_le32(payload.data() + payload.size() - 4), kFillPattern);
    EXPECT_TRUE(is_fill_payload(payload));
}

TEST(FillFrame, CodifV2SetsTimeAndInvalidAndKeepsEveryOtherField) {
    const CodifHeader t = codif_template(CodifLayout::v2);
    std::vector<std::uint8_t> header(kCodifHeaderBytes);
    encode_codif(t, header);
    std::vector<std::uint8_t> frame(t.frame_bytes(), 0xEE);
    ASSERT_TRUE(build_fill_frame(StreamFormat::codif, header, 987654, 4242, frame));
    CodifHeader got;
    ASSERT_EQ(decode_codif(Bytes(frame).first(kCodifHeaderBytes), got), CodifError::none);
    CodifHeader want = t;
    want.seconds = 987654;
    want.frame = 4242;
    want.invalid = true;
    EXPECT_EQ(got, want);
    // Exactly W0 and bit 17 of W1 differ from the template.
    std::vector<std::uint8_t> expected = header;
    store_le64(expected.data(), std::uint64_t{987654} << 32 | 4242);
    expected[8 + 2] |= 0x02;
    EXPECT_EQ(std::vector<std::uint8_t>(frame.begin(), frame.begin() + kCodifHeaderBytes),
              expected);
    expect_pattern(Bytes(frame).subspan(kCodifHeaderBytes));
}

TEST(FillFrame, CodifDraftSetsTimeAndInvalidAndKeepsTheUnmappedWords) {
    const CodifHeader t = codif_template(CodifLayout::draft);
    std::vector<std::uint8_t> header(kCodifHeaderBytes);
    encode_codif(t, header);
    // The draft's extension words (12-15) are not decoded: they must survive.
    for (std::size_t i = 48; i < 64; ++i) {
        header[i] = static_cast<std::uint8_t>(i);
    }
    std::vector<std::uint8_t> frame(t.frame_bytes());
    ASSERT_TRUE(build_fill_frame(StreamFormat::codif, header, 0x3FFFFFFFu, 99, frame));
    CodifHeader got;
    ASSERT_EQ(decode_codif(Bytes(frame).first(kCodifHeaderBytes), got), CodifError::none);
    EXPECT_EQ(got.layout, CodifLayout::draft);
    EXPECT_EQ(got.seconds, 0x3FFFFFFFu);
    EXPECT_EQ(got.frame, 99u);
    EXPECT_TRUE(got.invalid);
    EXPECT_TRUE(got.complex) << "w1 bit 30 is the template's";
    CodifHeader want = t;
    want.seconds = got.seconds;
    want.frame = got.frame;
    want.invalid = true;
    EXPECT_EQ(got, want);
    EXPECT_TRUE(std::equal(frame.begin() + 48, frame.begin() + 64, header.begin() + 48));
    expect_pattern(Bytes(frame).subspan(kCodifHeaderBytes));
}

VdifHeader vdif_template(bool legacy) {
    VdifHeader h;
    h.legacy = legacy;
    h.seconds = 1000;
    h.frame = 5;
    h.epoch = 49;
    h.framelength8 = 1004;  // 8032 bytes
    h.log2_nchan = 3;
    h.version = 1;
    h.station = 0x4142;  // "AB"
    h.thread = 513;
    h.nbits = 2;
    h.complex = true;
    if (!legacy) {
        h.edv = 3;
        h.extended = {0x123456, 0xDEADBEEF, 0x01020304, 0xCAFEF00D};
    }
    return h;
}

TEST(FillFrame, VdifSetsTimeAndInvalidAndKeepsEpochAndExtendedData) {
    for (const bool legacy : {false, true}) {
        const VdifHeader t = vdif_template(legacy);
        std::vector<std::uint8_t> header(t.header_bytes());
        encode_vdif(t, header);
        std::vector<std::uint8_t> frame(t.frame_bytes());
        // Seconds wider than 30 bits and frames wider than 24 are masked.
        ASSERT_TRUE(build_fill_frame(StreamFormat::vdif, header, 0x40000000u | 777,
                                     0x01000000u | 124999, frame));
        VdifHeader got;
        ASSERT_EQ(decode_vdif(Bytes(frame).first(t.header_bytes()), got), VdifError::none);
        VdifHeader want = t;
        want.seconds = 777;
        want.frame = 124999;
        want.invalid = true;
        EXPECT_EQ(got, want) << (legacy ? "legacy" : "standard");
        expect_pattern(Bytes(frame).subspan(t.header_bytes()));
    }
}

TEST(FillFrame, AVtpStreamsFramesAreVdif) {
    const VdifHeader t = vdif_template(false);
    std::vector<std::uint8_t> header(t.header_bytes());
    encode_vdif(t, header);
    std::vector<std::uint8_t> frame(t.frame_bytes());
    ASSERT_TRUE(build_fill_frame(StreamFormat::vtp, header, 1, 2, frame));
    VdifHeader got;
    ASSERT_EQ(decode_vdif(frame, got), VdifError::none);
    EXPECT_TRUE(got.invalid);
    EXPECT_EQ(got.seconds, 1u);
    EXPECT_EQ(got.frame, 2u);
}

TEST(FillFrame, AnUnreadableTemplateBuildsNothing) {
    std::vector<std::uint8_t> frame(256, 0xAB);
    const std::vector<std::uint8_t> before = frame;
    // No CODIF sync word.
    std::vector<std::uint8_t> zeros(kCodifHeaderBytes, 0);
    EXPECT_FALSE(build_fill_frame(StreamFormat::codif, zeros, 1, 1, frame));
    // Too short: a standard VDIF header cut at 16 bytes, a CODIF one at 63.
    const VdifHeader v = vdif_template(false);
    std::vector<std::uint8_t> vh(kVdifHeaderBytes);
    encode_vdif(v, vh);
    EXPECT_FALSE(build_fill_frame(StreamFormat::vdif, Bytes(vh).first(16), 1, 1, frame));
    std::vector<std::uint8_t> ch(kCodifHeaderBytes);
    encode_codif(codif_template(CodifLayout::v2), ch);
    EXPECT_FALSE(build_fill_frame(StreamFormat::codif, Bytes(ch).first(63), 1, 1, frame));
    // A frame shorter than its header.
    std::vector<std::uint8_t> small(16);
    EXPECT_FALSE(build_fill_frame(StreamFormat::codif, ch, 1, 1, small));
    EXPECT_EQ(frame, before);
    EXPECT_EQ(fill_header_bytes(StreamFormat::vdif, vh), kVdifHeaderBytes);
    EXPECT_EQ(fill_header_bytes(StreamFormat::codif, ch), kCodifHeaderBytes);
}

TEST(FillFrame, ThePatternFillsAPartialLastWordWithItsFirstBytes) {
    std::vector<std::uint8_t> p(10);
    fill_payload(p);
    EXPECT_EQ(
        p, (std::vector<std::uint8_t>{0x44, 0x33, 0x22, 0x11, 0x44, 0x33, 0x22, 0x11, 0x44, 0x33}));
    EXPECT_TRUE(is_fill_payload(p));
    p[9] = 0;
    EXPECT_FALSE(is_fill_payload(p));
    EXPECT_FALSE(is_fill_payload({}));
}

}  // namespace
}  // namespace ibvcap
