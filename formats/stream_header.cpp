// The format-neutral stream header (formats/stream_header.hpp): names, the
// sequence arithmetic, and the checks of a stream's first frame per format
// (formats/stream_decode.hpp).
#include <algorithm>
#include <chrono>

#include "formats/stream_decode.hpp"

namespace ibvcap {

std::int64_t reference_epoch_unix_s(std::uint8_t epoch) {
    using namespace std::chrono;
    const year_month_day ymd{year{2000 + epoch / 2}, month{epoch % 2 == 0 ? 1u : 7u}, day{1}};
    return sys_days{ymd}.time_since_epoch().count() * 86400;
}

std::string_view to_string(StreamFormat format) {
    switch (format) {
        case StreamFormat::codif:
            return "codif";
        case StreamFormat::vdif:
            return "vdif";
        case StreamFormat::vtp:
            return "vtp";
    }
    return "unknown";
}

std::optional<StreamFormat> parse_stream_format(std::string_view name) {
    for (const auto f : {StreamFormat::codif, StreamFormat::vdif, StreamFormat::vtp}) {
        if (name == to_string(f)) {
            return f;
        }
    }
    return std::nullopt;
}

std::string_view layout_name(StreamFormat format, std::uint8_t layout) {
    if (format == StreamFormat::codif) {
        return to_string(static_cast<CodifLayout>(layout));
    }
    return layout == 0 ? "standard" : "legacy";
}

std::string_view to_string(StreamError error) {
    switch (error) {
        case StreamError::none:
            return "none";
        case StreamError::not_a_frame:
            return "not_a_frame";
        case StreamError::zero_field:
            return "zero_field";
        case StreamError::bad_length:
            return "bad_length";
        case StreamError::bad_samples:
            return "bad_samples";
        case StreamError::frame_beyond_period:
            return "frame_beyond_period";
        case StreamError::no_frames_per_period:
            return "no_frames_per_period";
    }
    return "unknown";
}

namespace {
StreamError from(CodifError e) {
    switch (e) {
        case CodifError::none:
            return StreamError::none;
        case CodifError::short_buffer:
        case CodifError::bad_sync:
            return StreamError::not_a_frame;
        case CodifError::zero_nchan:
        case CodifError::zero_nbits:
        case CodifError::zero_period:
        case CodifError::zero_framelength:
            return StreamError::zero_field;
        case CodifError::length_mismatch:
            return StreamError::bad_length;
        case CodifError::samples_not_integral:
            return StreamError::bad_samples;
        case CodifError::frame_beyond_period:
            return StreamError::frame_beyond_period;
    }
    return StreamError::not_a_frame;
}
}  // namespace

StreamError check_stream_header(Bytes head, std::uint64_t datagram_bytes, StreamHeader& out) {
    if (out.format == StreamFormat::codif) {
        CodifHeader c;
        if (decode_codif(head, c) != CodifError::none) {
            return StreamError::not_a_frame;
        }
        if (const CodifError e = validate_codif(c, datagram_bytes); e != CodifError::none) {
            return from(e);
        }
        out.frames_per_period = codif_frames_per_period(c);
        return out.frames_per_period == 0 ? StreamError::no_frames_per_period : StreamError::none;
    }
    VdifHeader v;
    if (decode_vdif(head.subspan(std::min<std::size_t>(out.prefix_bytes, head.size())), v) !=
        VdifError::none) {
        return StreamError::not_a_frame;
    }
    switch (validate_vdif(
        v, datagram_bytes - std::min<std::uint64_t>(out.prefix_bytes, datagram_bytes))) {
        case VdifError::none:
            return StreamError::none;
        case VdifError::short_buffer:
            return StreamError::not_a_frame;
        case VdifError::zero_framelength:
            return StreamError::zero_field;
        case VdifError::length_mismatch:
            return StreamError::bad_length;
    }
    return StreamError::not_a_frame;
}

void StreamTiming::position(std::uint64_t index, std::uint32_t& seconds,
                            std::uint32_t& frame) const {
    const std::uint64_t fpp = frames_per_period == 0 ? 1 : frames_per_period;
    seconds = static_cast<std::uint32_t>(index / fpp * (period == 0 ? 1u : period));
    frame = static_cast<std::uint32_t>(index % fpp);
}

void StreamTiming::next(std::uint32_t& seconds, std::uint32_t& frame) const {
    const std::uint64_t following = std::uint64_t{frame} + 1;
    if (frames_per_period != 0 && following >= frames_per_period) {
        seconds += period == 0 ? 1u : period;
        frame = 0;
    } else {
        frame = static_cast<std::uint32_t>(following);
    }
}

// Signed 64-bit throughout so that a frame from an earlier period gives a
// negative gap. Periods are counted as seconds / period for each side (exactly
// index(s, f) - index(s0, f0) - 1); when seconds are period-aligned this equals
// ((s - s0) / period) * fpp + (f - f0) - 1.
std::int64_t StreamTiming::gap(std::uint32_t s0, std::uint32_t f0, std::uint32_t s,
                               std::uint32_t f) const {
    // Both indices are below 2^63 (frames per period <= 2^31, seconds < 2^32),
    // so their difference fits a signed 64-bit value exactly.
    return static_cast<std::int64_t>(index(s, f) - index(s0, f0)) - 1;
}

}  // namespace ibvcap
