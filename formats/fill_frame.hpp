// Fill frames: what an ordered file (--ordered, docs/formats.md, "Ordered
// files and fill frames") holds in place of a frame that never came, so that
// a reader that steps through a stream frame by frame (DiFX's mark5access
// and vdifio, the `baseband` package) keeps its time.
//
// A fill frame is the stream's own frame header (a template: a frame of the
// same stream), with its time set to the missing frame's (seconds, frame)
// and its invalid bit set, followed by a payload of the Mark 5 fill pattern:
// the 32-bit word 0x11223344 stored little-endian (bytes 44 33 22 11),
// repeated. The pattern is the field's own mark for "no data here":
//   - DiFX mpifxcorr/src/mark5utils.h and mark5access's blanker
//     (difx/difx libraries/mark5access/mark5access/blanker_mark5.c,
//     MARK5_FILL_WORD32 0x11223344, at commit
//     6f238fd7bfa6754a155c2898b32b91e3aaad5986) take any run of it as
//     data to blank;
//   - DiFX vdifio's vdifreader replaces a missing VDIF frame by exactly
//     this: the thread's last header with the invalid bit, seconds and
//     frame number set, then the pattern (difx/difx
//     libraries/vdifio/src/vdiffilereader.c, vdifreader_get_frame, "Fill
//     pattern or Invalid replacement frame if a frame is missing", the
//     pattern made as "Filler int32 0x11223344 : int8 0x44 0x33 0x22 0x11",
//     at commit 329179891fbfdbed28ab73ee00f99a6b9e2d768c);
//   - vdifio's vdifmux skips an input frame whose last 32-bit word is the
//     pattern ("Fill pattern at end of frame", FILL_PATTERN 0x11223344 on
//     little-endian hosts; libraries/vdifio/src/vdifmux.c, same commit),
//     and writes its own filler frames as the output header with the
//     frame's time and the invalid bit set (setVDIFFrameInvalid);
//   - jive5ab's UDP receiver (udps, VTP) pre-fills every block with
//     0x1122334411223344 so that a datagram that never arrived reads as
//     the pattern (jive-vlbi/jive5ab src/threadfns.cc, udpsreader,
//     "Fill the fillpattern block with fillpattern", at commit
//     f3ffef67e15a6996660aa7980558ffb42994bd6a).
// So a fill frame is skipped by every one of them twice over: by its invalid
// bit, and by its pattern.
//
// Header fields set (everything else is the template's, extended data
// included, as vdifreader keeps the thread's header):
//   CODIF v2     W0 frame 0-31, seconds 32-63; W1 bit 17 invalid
//   CODIF draft  w0 frame; w1 seconds 0-29, bit 31 invalid
//   VDIF         w0 seconds 0-29, bit 31 invalid (bit 30, legacy, kept);
//                w1 frame 0-23 (the epoch, bits 24-29, kept)
// (formats/codif.cpp and formats/vdif.hpp describe the layouts.)
#pragma once

#include <cstdint>

#include "formats/bytes.hpp"
#include "formats/stream_header.hpp"

namespace ibvcap {

// The Mark 5 fill word, as a little-endian 32-bit word of the payload.
inline constexpr std::uint32_t kFillPattern = 0x11223344u;

// The bytes of a template header `format` uses (no VTP prefix): CODIF 64,
// VDIF 32 or, with the legacy bit set, 16; 0 when `header` is too short for
// it or is not a header of `format` (CODIF without a sync word).
std::size_t fill_header_bytes(StreamFormat format, Bytes header);

// Marks the frame header at the start of `header` (the frame's own, without
// a VTP prefix) as a fill frame at (seconds, frame): sets those fields and
// the invalid bit, in place. False, and nothing changed, when
// fill_header_bytes() is 0. VDIF seconds are 30 bits and frame numbers 24:
// wider values are masked, as on the wire.
bool mark_fill_header(StreamFormat format, MutableBytes header, std::uint32_t seconds,
                      std::uint32_t frame);

// `payload` filled with the pattern: whole little-endian words of
// kFillPattern, a last partial word with the pattern's first bytes.
void fill_payload(MutableBytes payload);

// A whole fill frame in `out` (out.size(): the frame's length, header
// included): the template's header, marked, then the pattern. False, and
// `out` unchanged, when the template is not a header of `format` or is
// longer than `out`.
bool build_fill_frame(StreamFormat format, Bytes template_header, std::uint32_t seconds,
                      std::uint32_t frame, MutableBytes out);

// Whether every byte of `payload` is the pattern's (as fill_payload writes
// it); an empty payload is not.
bool is_fill_payload(Bytes payload);

}  // namespace ibvcap
