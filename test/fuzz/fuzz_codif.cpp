// Fuzz target: the CODIF header codec (formats/codif.hpp).
//
// Input: [0, 64) the header bytes (a shorter input is a short header);
// [64] mode: bit 0 set = validate against the header's own frame length;
// [65, 73) LE64 datagram length to validate against when bit 0 is clear;
// [73, 77) LE32 seconds and [77, 81) LE32 frame of an earlier frame, for
// CodifTiming::gap. Missing bytes read as zero.
//
// Checks, beyond "no crash, no out-of-bounds read, no UB":
//   - detect_codif_layout and decode_codif agree (short_buffer, bad_sync,
//     layout of the result; any 64 bytes with a sync word decode);
//   - a decoded header survives encode_codif + decode_codif unchanged and
//     re-encodes to the same bytes (what the API promises for headers that came
//     from decode; reserved bits and unmapped draft words are not promised);
//   - validate_codif == none implies every condition it documents;
//   - samples per frame and frames per period divide exactly as documented;
//   - CodifTiming::next/gap/index agree with docs/formats.md, "Sequence arithmetic".
#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "formats/codif.hpp"
#include "fuzz_common.hpp"
#include "fuzz_entries.hpp"

namespace {

using ibvcap::Bytes;
using ibvcap::CodifError;
using ibvcap::CodifHeader;
using ibvcap::CodifTiming;
using ibvcap::kCodifHeaderBytes;

void check_round_trip(const CodifHeader& h) {
    std::array<std::uint8_t, kCodifHeaderBytes> encoded{};
    ibvcap::encode_codif(h, encoded);
    FUZZ_CHECK(ibvcap::detect_codif_layout(encoded) == h.layout);
    CodifHeader again;
    FUZZ_CHECK(ibvcap::decode_codif(encoded, again) == CodifError::none);
    FUZZ_CHECK(again == h);
    std::array<std::uint8_t, kCodifHeaderBytes> reencoded{};
    ibvcap::encode_codif(again, reencoded);
    FUZZ_CHECK(reencoded == encoded);
}

void check_validation(const CodifHeader& h, std::uint64_t datagram) {
    const CodifError v = ibvcap::validate_codif(h, datagram);
    FUZZ_CHECK(v != CodifError::short_buffer && v != CodifError::bad_sync);
    FUZZ_CHECK(!ibvcap::to_string(v).empty());
    if (v != CodifError::none) {
        return;
    }
    FUZZ_CHECK(h.nchan != 0 && h.nbits != 0 && h.period != 0 && h.framelength8 != 0);
    FUZZ_CHECK(h.frame_bytes() == datagram);
    FUZZ_CHECK(ibvcap::codif_samples_per_frame(h) != 0);
    const std::uint64_t fpp = ibvcap::codif_frames_per_period(h);
    FUZZ_CHECK(fpp == 0 || h.frame < fpp);
}

void check_sample_arithmetic(const CodifHeader& h) {
    const std::uint64_t spf = ibvcap::codif_samples_per_frame(h);
    const std::uint64_t fpp = ibvcap::codif_frames_per_period(h);
    if (spf != 0) {
        // spf * nchan * nbits * (1 + complex) is the payload in bits, exactly.
        const std::uint64_t divisor =
            std::uint64_t{h.nchan} * std::uint64_t{h.nbits} * (h.complex ? 2u : 1u);
        std::uint64_t bits = 0;
        FUZZ_CHECK(!__builtin_mul_overflow(spf, divisor, &bits));
        FUZZ_CHECK(bits == std::uint64_t{h.framelength8} * 64);
    }
    if (fpp != 0) {
        std::uint64_t total = 0;
        FUZZ_CHECK(spf != 0);
        FUZZ_CHECK(!__builtin_mul_overflow(fpp, spf, &total));
        FUZZ_CHECK(total == h.totalsamples);
    }
}

void check_timing(const CodifHeader& h, std::uint32_t s0, std::uint32_t f0) {
    CodifTiming t;
    t.period = h.period;
    t.frames_per_period = ibvcap::codif_frames_per_period(h);
    const std::uint32_t p = h.period == 0 ? 1u : h.period;  // what next() and gap() use

    // index() treats period 0 as 1, like next() and gap() (it once divided by
    // zero: FuzzRegression.CodifTimingIndexPeriodZero).
    FUZZ_CHECK(t.index(h.seconds, h.frame) ==
               std::uint64_t{h.seconds / p} * t.frames_per_period + h.frame);
    // Frames per period are capped, which keeps every index below 2^63.
    FUZZ_CHECK(t.frames_per_period <= ibvcap::kCodifMaxFramesPerPeriod);

    // A frame compared with itself is a duplicate.
    FUZZ_CHECK(t.gap(h.seconds, h.frame, h.seconds, h.frame) == -1);

    // next(): (s, f+1), or (s + period, 0) on the wrap.
    std::uint32_t s = h.seconds;
    std::uint32_t f = h.frame;
    t.next(s, f);
    const std::uint64_t fpp = t.frames_per_period;
    if (fpp != 0 && h.frame < fpp) {
        const bool in_period = std::uint64_t{h.frame} + 1 < fpp;
        // With at most 2^31 frames per period the next frame number always fits
        // 32 bits (it once did not: FuzzRegression.CodifTimingNextPastFrame32).
        if (in_period) {
            FUZZ_CHECK(s == h.seconds && std::uint64_t{f} == std::uint64_t{h.frame} + 1);
        } else {
            FUZZ_CHECK(s == static_cast<std::uint32_t>(h.seconds + p) && f == 0);
        }
        // Without a seconds wrap the following frame is exactly one on: gap 0.
        if (std::uint64_t{h.seconds} + p <= std::numeric_limits<std::uint32_t>::max()) {
            FUZZ_CHECK(t.gap(h.seconds, h.frame, s, f) == 0);
        }
    }

    // gap() from an earlier frame (s0, f0): index(s, f) - index(s0, f0) - 1 in
    // exact arithmetic, always representable now that frames per period are
    // capped (it once overflowed: FuzzRegression.CodifTimingGapOverflow).
    const std::int64_t periods =
        static_cast<std::int64_t>(h.seconds / p) - static_cast<std::int64_t>(s0 / p);
    const std::int64_t frames = static_cast<std::int64_t>(h.frame) - static_cast<std::int64_t>(f0);
    std::int64_t expected = 0;
    const bool representable = !__builtin_mul_overflow(periods, fpp, &expected) &&
                               !__builtin_add_overflow(expected, frames, &expected) &&
                               !__builtin_sub_overflow(expected, 1, &expected);
    FUZZ_CHECK(representable);
    FUZZ_CHECK(!representable || t.gap(s0, f0, h.seconds, h.frame) == expected);
}

}  // namespace

int ibvcap_fuzz_codif(const std::uint8_t* data, std::size_t size) {
    // The header in a buffer of exactly its size, so that a read past it is
    // caught by AddressSanitizer.
    const std::size_t header_size = size < kCodifHeaderBytes ? size : kCodifHeaderBytes;
    const std::vector<std::uint8_t> header(data, data + header_size);
    ibvcap::fuzz::Reader in(data + header_size, size - header_size);
    const std::uint8_t mode = in.u8();
    const std::uint64_t datagram_field = in.u64();
    const std::uint32_t s0 = in.u32();
    const std::uint32_t f0 = in.u32();

    const Bytes bytes(header.data(), header.size());
    const auto layout = ibvcap::detect_codif_layout(bytes);
    CodifHeader h;
    const CodifError err = ibvcap::decode_codif(bytes, h);
    FUZZ_CHECK(!ibvcap::to_string(err).empty());
    if (header_size < kCodifHeaderBytes) {
        FUZZ_CHECK(!layout.has_value());
        FUZZ_CHECK(err == CodifError::short_buffer);
        return 0;
    }
    if (!layout) {
        FUZZ_CHECK(err == CodifError::bad_sync);
        return 0;
    }
    FUZZ_CHECK(err == CodifError::none);
    FUZZ_CHECK(h.layout == *layout);
    FUZZ_CHECK(!ibvcap::to_string(h.layout).empty());

    check_round_trip(h);
    check_validation(h, (mode & 1u) != 0 ? h.frame_bytes() : datagram_field);
    check_sample_arithmetic(h);
    check_timing(h, s0, f0);
    return 0;
}

IBVCAP_FUZZ_TARGET(ibvcap_fuzz_codif)
