// DiFX's vdifio, transcribed for tests: the header structs, accessors and
// setters that DiFX (difx/difx libraries/vdifio) uses to read and write VDIF,
// and the rules by which its vdifmux counts a stream's frames, so that
// ibvcap's codec (formats/vdif.hpp) and, later, ibvcap's VDIF output files
// are checked against what DiFX does, not against ibvcap's own reading of a
// document.
//
// Source: difx/difx at commit 902730147adee5c409a6b6e30ed0a328375eba36; the
// four files below last changed in 329179891fbfdbed28ab73ee00f99a6b9e2d768c
// ("Remove SVN headers, ...", 2024-07-05):
//   libraries/vdifio/src/vdifio.h   the structs, the static inline getters and
//                                   setters, VDIF_* constants;
//   libraries/vdifio/src/vdifio.c   createVDIFHeader, setVDIFFrameBytes,
//                                   setVDIFNumChannels, getVDIFNumChannels,
//                                   setVDIFThreadID, nextVDIFHeader;
//   libraries/vdifio/src/vdifmux.c  FILL_PATTERN, vdifmux's stage 1 (which
//                                   input frames it takes, skips, counts as
//                                   invalid or duplicate) and stage 2 (the
//                                   filler frames it makes for missing ones);
//   libraries/vdifio/src/vdiffile.c summarizevdiffile (start and end of a
//                                   file: the lowest and highest (second,
//                                   frame) of its frames).
// The structs keep vdifio's bitfield declarations in vdifio's order: GCC and
// Clang allocate bitfields from the least significant bit of each unit on
// little-endian targets, which is what vdifio relies on, so memcpy of 32 bytes
// into them reads a frame exactly as DiFX does. Names of the functions are
// vdifio's; the bodies are restatements of what each does. Where they differ,
// on purpose: pointers become references, createVDIFHeader takes the station
// as two chars, and nextVDIFHeader leaves out its assert.
//
// The file reader (the API other tests use):
//
//   namespace vdifio = ibvcap::test::vdifio;
//   const std::map<vdifio::StreamKey, vdifio::Summary> streams =
//       vdifio::read_file(bytes, frames_per_second);          // or (..., Options{...})
//   const vdifio::Walk walk = vdifio::walk_file(bytes);       // how far the walk got
//
// `bytes` is a whole VDIF file: frames back to back, as jive5ab and DiFX write
// them (no VTP sequence numbers, no other framing). StreamKey is (station id,
// thread id). For each stream, Summary gives:
//   frames      the stream's frames in the file (valid, invalid and repeated)
//   invalid     those with the invalid bit (w0 bit 31) set
//   first_*     the lowest (seconds, frame) of the stream's frames
//               (summarizevdiffile's startSecond / startFrame)
//   last_*      the highest (seconds, frame) (endSecond / endFrame)
//   missing     slots between first and last that no frame of the stream
//               fills: vdifmux's filler frames (nFillerFrame), one thread
//   duplicates  frames whose slot a frame of the stream already filled
//               (vdifmux's nDuplicateFrame)
// Slots are vdifmux's frame numbers, seconds * frames_per_second + frame
// (a frame number past frames_per_second - 1 lands in a later second's slot,
// as in vdifmux). With frames_per_second 0 no slot is defined: missing is 0,
// and duplicates are frames with an earlier frame's (seconds, frame).
//
// How the walk differs from vdifmux (which reads a stream of one frame size
// and one thread set, searching byte by byte for the next frame that matches
// its configuration): here every frame is walked by its own header's frame
// length (getVDIFFrameBytes), every (station, thread) is a stream (vdifmux
// keys by thread alone and drops threads it was not told of), and the walk
// stops at the first header whose frame length is shorter than its header or
// runs past the end of the file (walk_file's complete is false then). Like
// vdifmux, a frame whose first word is the fill pattern 0x11223344 is not a
// frame: the walk steps 8 bytes and counts them as fill; a frame whose last
// word is the fill pattern is counted as fill and skipped whole.
//
// Invalid frames: vdifmux by default (vmux's flags: RESPECTGRANULARITY only)
// treats a frame with the invalid bit like any other, and so does read_file
// unless Options::discard_invalid is set, which is VDIF_MUX_FLAG_ENABLEVALIDITY:
// invalid frames are counted in `invalid` and `frames` but fill no slot, so
// their slots count as missing, and they set neither first nor last. (ibvcap
// itself sequence-tracks invalid frames: docs/formats.md, section 3.)
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <span>
#include <utility>

// vdifio's setters store into bitfields, which keeps the low bits of the value
// (C's conversion): that truncation is part of what is transcribed, so the
// conversion warnings are off for this file only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-conversion"

namespace ibvcap::test::vdifio {

inline constexpr int VDIF_HEADER_BYTES = 32;
inline constexpr int VDIF_LEGACY_HEADER_BYTES = 16;
inline constexpr int MAX_VDIF_FRAME_BYTES = 32832;
inline constexpr int VDIF_MAX_THREAD_ID = 1023;
inline constexpr int VDIF_NOERROR = 0;
inline constexpr int VDIF_ERROR = 1;
inline constexpr std::uint32_t VDIF_EDV2_SUBVER_ALMA = 0x0A5AE5;
inline constexpr std::uint32_t VDIF_EDV2_SUBVER_R2DBE = 0x000000;
inline constexpr int VDIF_VERSION = 0;  // vdifio.c: what createVDIFHeader writes
inline constexpr std::uint32_t FILL_PATTERN = 0x11223344u;  // vdifmux.c, little-endian host

// struct vdif_header.
struct vdif_header {
    std::uint32_t seconds : 30;
    std::uint32_t legacymode : 1;
    std::uint32_t invalid : 1;

    std::uint32_t frame : 24;
    std::uint32_t epoch : 6;
    std::uint32_t unassigned : 2;

    std::uint32_t framelength8 : 24;  // Frame length (including header) divided by 8
    std::uint32_t nchan : 5;
    std::uint32_t version : 3;

    std::uint32_t stationid : 16;
    std::uint32_t threadid : 10;
    std::uint32_t nbits : 5;
    std::uint32_t iscomplex : 1;

    std::uint32_t extended1 : 24;
    std::uint32_t eversion : 8;

    std::uint32_t extended2;
    std::uint32_t extended3;
    std::uint32_t extended4;
};
static_assert(sizeof(vdif_header) == VDIF_HEADER_BYTES);

// The first four words, common to every EDV struct below (vdifio repeats them
// in each).
#define IBVCAP_VDIFIO_WORDS_0_3      \
    std::uint32_t seconds : 30;      \
    std::uint32_t legacymode : 1;    \
    std::uint32_t invalid : 1;       \
    std::uint32_t frame : 24;        \
    std::uint32_t epoch : 6;         \
    std::uint32_t unassigned : 2;    \
    std::uint32_t framelength8 : 24; \
    std::uint32_t nchan : 5;         \
    std::uint32_t version : 3;       \
    std::uint32_t stationid : 16;    \
    std::uint32_t threadid : 10;     \
    std::uint32_t nbits : 5;         \
    std::uint32_t iscomplex : 1;

// struct vdif_edv1_header (NICT).
struct vdif_edv1_header {
    IBVCAP_VDIFIO_WORDS_0_3
    std::uint32_t samprate : 23;      // in samprateunits
    std::uint32_t samprateunits : 1;  // 0 = kHz, 1 = MHz
    std::uint32_t eversion : 8;
    std::uint32_t syncword;  // 0xACABFEED
    char name[8];            // DAS/Station Name
};
static_assert(sizeof(vdif_edv1_header) == VDIF_HEADER_BYTES);

// struct vdif_edv2_header_generic.
struct vdif_edv2_header_generic {
    IBVCAP_VDIFIO_WORDS_0_3
    std::uint32_t notrelevant : 4;
    std::uint32_t subsubversion : 20;  // ALMA = 0x0A5AE5, R2DBE = 0
    std::uint32_t eversion : 8;
    std::uint32_t word5 : 32;
    std::uint32_t word6 : 32;
    std::uint32_t word7 : 32;
};
static_assert(sizeof(vdif_edv2_header_generic) == VDIF_HEADER_BYTES);

// struct vdif_edv2_header_alma.
struct vdif_edv2_header_alma {
    IBVCAP_VDIFIO_WORDS_0_3
    std::uint32_t polblock : 1;        // 0 = X-pol PIC, 1 = Y-pol PIC
    std::uint32_t quadrantminus1 : 2;  // 0 = quadrant 1, ..., 3 = quadrant 4
    std::uint32_t correlator : 1;      // 0 = 2-ant correlator, 1 = BL correlator
    std::uint32_t subsubversion : 20;
    std::uint32_t eversion : 8;
    std::uint32_t picstatus;
    std::uint64_t psn;  // packet serial number
};
static_assert(sizeof(vdif_edv2_header_alma) == VDIF_HEADER_BYTES);

// struct vdif_edv2_header_r2dbe.
struct vdif_edv2_header_r2dbe {
    IBVCAP_VDIFIO_WORDS_0_3
    std::uint32_t polblock : 1;
    std::uint32_t bdcsideband : 1;
    std::uint32_t rxsideband : 1;
    std::uint32_t undefined : 1;
    std::uint32_t subsubversion : 20;
    std::uint32_t eversion : 8;
    std::int32_t ppsdiff : 32;  // 1PPS int/ext difference in 256 MHz clock ticks
    std::uint64_t psn;
};
static_assert(sizeof(vdif_edv2_header_r2dbe) == VDIF_HEADER_BYTES);

// struct vdif_edv2_header.
struct vdif_edv2_header {
    IBVCAP_VDIFIO_WORDS_0_3
    std::uint32_t polblock : 1;
    std::uint32_t quadrantminus1 : 2;
    std::uint32_t correlator : 1;
    std::uint32_t sync : 20;  // For ALMA this is set to 0xA5AE5
    std::uint32_t eversion : 8;
    std::uint32_t status;
    std::uint64_t psn;
};
static_assert(sizeof(vdif_edv2_header) == VDIF_HEADER_BYTES);

// struct vdif_edv3_header (VLBA).
struct vdif_edv3_header {
    IBVCAP_VDIFIO_WORDS_0_3
    std::uint32_t samprate : 23;
    std::uint32_t samprateunits : 1;
    std::uint32_t eversion : 8;
    std::uint32_t syncword;  // 0xACABFEED
    std::uint32_t tuning;    // In DDS units of 1/2^24 MHz
    std::uint32_t personalitytype : 8;
    std::uint32_t minorrev : 4;
    std::uint32_t majorrev : 4;
    std::uint32_t sideband : 1;  // 1 = upper, 0 = lower
    std::uint32_t subband : 3;
    std::uint32_t ifnumber : 4;
    std::uint32_t dbeunit : 4;
    std::uint32_t unassigned2 : 4;
};
static_assert(sizeof(vdif_edv3_header) == VDIF_HEADER_BYTES);

// struct vdif_edv4_header.
struct vdif_edv4_header {
    IBVCAP_VDIFIO_WORDS_0_3
    std::uint32_t dummy : 16;
    std::uint32_t masklength : 8;  // number of bits in the validity mask
    std::uint32_t eversion : 8;    // Should be set to 4
    std::uint32_t syncword;        // 0xACABFEED
    std::uint64_t validitymask;    // bits set if data is present
};
static_assert(sizeof(vdif_edv4_header) == VDIF_HEADER_BYTES);

#undef IBVCAP_VDIFIO_WORDS_0_3

// vdifio.h static inline getters.
inline int getVDIFComplex(const vdif_header& h) {
    return static_cast<int>(h.iscomplex);
}
inline int getVDIFLegacy(const vdif_header& h) {
    return static_cast<int>(h.legacymode);
}
inline int getVDIFThreadID(const vdif_header& h) {
    return static_cast<int>(h.threadid);
}
inline int getVDIFHeaderBytes(const vdif_header& h) {
    return h.legacymode ? VDIF_LEGACY_HEADER_BYTES : VDIF_HEADER_BYTES;
}
inline int getVDIFFrameBytes(const vdif_header& h) {
    return static_cast<int>(h.framelength8) * 8;
}
inline int getVDIFFrameSecond(const vdif_header& h) {
    return static_cast<int>(h.seconds) % 86400;
}
inline int getVDIFFrameNumber(const vdif_header& h) {
    return static_cast<int>(h.frame);
}
inline int getVDIFStationID(const vdif_header& h) {
    return static_cast<int>(h.stationid);
}
inline int getVDIFBitsPerSample(const vdif_header& h) {
    return static_cast<int>(h.nbits) + 1;
}
inline int getVDIFFrameInvalid(const vdif_header& h) {
    return static_cast<int>(h.invalid);
}
inline int getVDIFFrameEpochSecOffset(const vdif_header& h) {
    return static_cast<int>(h.seconds);
}
inline int getVDIFEpoch(const vdif_header& h) {
    return static_cast<int>(h.epoch);
}

// vdifio.c getVDIFNumChannels: 2 to the power of the stored log2.
inline int getVDIFNumChannels(const vdif_header& h) {
    int logchans = static_cast<int>(h.nchan);
    int numchannels = 1;
    while (logchans > 0) {
        numchannels *= 2;
        logchans--;
    }
    return numchannels;
}

// vdifio.h static inline setters.
inline void setVDIFFrameEpochSecOffset(vdif_header& h, int seconds) {
    h.seconds = seconds;
}
inline void setVDIFFrameNumber(vdif_header& h, int framenumber) {
    h.frame = framenumber;
}
inline void setVDIFFrameInvalid(vdif_header& h, unsigned int invalid) {
    h.invalid = invalid;
}
inline void setVDIFBitsPerSample(vdif_header& h, int nbits) {
    h.nbits = nbits - 1;
}
inline void setVDIFComplex(vdif_header& h, int iscomplex) {
    h.iscomplex = (iscomplex > 0);
}
inline void setVDIFEpoch(vdif_header& h, int epoch) {
    h.epoch = epoch;
}

// vdifio.c setters ("Should check bounds", "Should check modulo8": they do not).
inline int setVDIFThreadID(vdif_header& h, int threadid) {
    h.threadid = threadid;
    return VDIF_NOERROR;
}
inline int setVDIFFrameBytes(vdif_header& h, int bytes) {
    h.framelength8 = bytes / 8;
    return VDIF_NOERROR;
}
// The floor of log2: 3 channels are stored as 1 (2 channels).
inline int setVDIFNumChannels(vdif_header& h, int numchannels) {
    unsigned int logchans = 0;
    while (numchannels > 1) {
        numchannels /= 2;
        logchans++;
    }
    h.nchan = logchans;
    return VDIF_NOERROR;
}

// vdifio.c nextVDIFHeader: the next frame of a stream of framepersec frames.
inline int nextVDIFHeader(vdif_header& h, int framepersec) {
    h.frame++;
    if (static_cast<int>(h.frame) > framepersec) {
        return VDIF_ERROR;
    } else if (static_cast<int>(h.frame) == framepersec) {
        h.seconds++;
        h.frame = 0;
    }
    return VDIF_NOERROR;
}

// vdifio.c createVDIFHeader: dataarraylength is the payload; the frame length
// written includes the 32-byte header. Version VDIF_VERSION (0), EDV 0, epoch
// 0, frame 0, standard (not legacy) header. nchan must be a power of two.
inline int createVDIFHeader(vdif_header& h, int dataarraylength, int threadid, int bits, int nchan,
                            int iscomplex, const char stationid[3]) {
    h.epoch = 0;
    if (bits > 32 || bits < 1) {
        return VDIF_ERROR;
    }
    if (dataarraylength % 8 != 0 || dataarraylength < 0) {
        return VDIF_ERROR;
    }
    if (threadid > 1023 || threadid < 0) {
        return VDIF_ERROR;
    }
    if (nchan < 1) {
        return VDIF_ERROR;
    }
    int lognchan = 0;
    while (nchan > 1) {
        if (nchan % 2 == 1) {
            return VDIF_ERROR;
        }
        lognchan++;
        nchan /= 2;
    }
    if (lognchan > 31) {
        return VDIF_ERROR;
    }
    std::memset(&h, 0, VDIF_HEADER_BYTES);
    h.version = VDIF_VERSION;
    h.legacymode = 0;
    h.invalid = 0;
    h.nchan = lognchan;
    h.framelength8 = (dataarraylength + VDIF_HEADER_BYTES) / 8;
    h.iscomplex = iscomplex ? 1 : 0;
    h.nbits = bits - 1;
    h.threadid = threadid;
    h.stationid = stationid[0] << 8 | stationid[1];
    h.frame = 0;
    return VDIF_NOERROR;
}

// A header (or an EDV struct) read from the frame's first bytes, as vdifio
// does by casting the frame pointer. A legacy header's words 4-7 are whatever
// follows it (vdifio reads them only when legacymode is 0).
template <class Header = vdif_header>
Header read_header(std::span<const std::uint8_t> bytes) {
    Header h;
    std::memset(&h, 0, sizeof h);
    std::memcpy(&h, bytes.data(), std::min(sizeof h, bytes.size()));
    return h;
}

// ---------------------------------------------------------------- the file reader

using StreamKey = std::pair<std::uint16_t, std::uint16_t>;  // (station id, thread id)

struct Summary {
    std::uint64_t frames = 0;
    std::uint64_t invalid = 0;
    std::uint32_t first_seconds = 0;
    std::uint32_t first_frame = 0;
    std::uint32_t last_seconds = 0;
    std::uint32_t last_frame = 0;
    std::uint64_t missing = 0;
    std::uint64_t duplicates = 0;
    friend bool operator==(const Summary&, const Summary&) = default;
};

struct Options {
    // VDIF_MUX_FLAG_ENABLEVALIDITY: invalid frames fill no slot.
    bool discard_invalid = false;
};

struct Walk {
    std::size_t frames = 0;      // frames walked (fill not counted)
    std::size_t fill_bytes = 0;  // bytes skipped as fill pattern (vdifmux's nFillByte)
    std::size_t end = 0;         // bytes walked
    bool complete = true;        // false: stopped at a frame that cannot be walked
};

namespace detail {
inline std::uint32_t word_at(std::span<const std::uint8_t> file, std::size_t at) {
    std::uint32_t w = 0;
    std::memcpy(&w, file.data() + at, sizeof w);
    return w;
}

// Walks `file`; calls frame(header, offset) for each frame that is not fill.
template <class OnFrame>
Walk walk(std::span<const std::uint8_t> file, OnFrame&& frame) {
    Walk w;
    std::size_t at = 0;
    while (at < file.size()) {
        const std::size_t left = file.size() - at;
        if (left >= 4 && word_at(file, at) == FILL_PATTERN) {
            // vdifmux: "Fill pattern at beginning of frame": skip 8 bytes.
            const std::size_t step = std::min<std::size_t>(8, left);
            at += step;
            w.fill_bytes += step;
            continue;
        }
        if (left < static_cast<std::size_t>(VDIF_LEGACY_HEADER_BYTES)) {
            w.complete = false;
            break;
        }
        const vdif_header h = read_header(file.subspan(at));
        const int header_bytes = getVDIFHeaderBytes(h);
        const int frame_bytes = getVDIFFrameBytes(h);
        if (frame_bytes < header_bytes || static_cast<std::size_t>(frame_bytes) > left) {
            w.complete = false;
            break;
        }
        // vdifmux: "Fill pattern at end of frame": the whole frame is fill.
        if (word_at(file, at + static_cast<std::size_t>(frame_bytes) - 4) == FILL_PATTERN) {
            at += static_cast<std::size_t>(frame_bytes);
            w.fill_bytes += static_cast<std::size_t>(frame_bytes);
            continue;
        }
        frame(h, at);
        ++w.frames;
        at += static_cast<std::size_t>(frame_bytes);
    }
    w.end = at;
    return w;
}
}  // namespace detail

// How far a walk of `file` gets, and how much of it is fill.
inline Walk walk_file(std::span<const std::uint8_t> file) {
    return detail::walk(file, [](const vdif_header&, std::size_t) {});
}

// Per (station, thread), the summary above.
inline std::map<StreamKey, Summary> read_file(std::span<const std::uint8_t> file,
                                              std::uint64_t frames_per_second,
                                              Options options = {}) {
    struct State {
        Summary s;
        bool any = false;
        std::uint64_t lowest = 0;
        std::uint64_t highest = 0;
        std::set<std::uint64_t> slots;  // vdifmux's per-slot mask bit for this thread
        std::set<std::pair<std::uint32_t, std::uint32_t>> positions;  // frames_per_second 0
    };
    std::map<StreamKey, State> states;
    detail::walk(file, [&](const vdif_header& h, std::size_t) {
        State& st = states[{static_cast<std::uint16_t>(getVDIFStationID(h)),
                            static_cast<std::uint16_t>(getVDIFThreadID(h))}];
        ++st.s.frames;
        const bool invalid = getVDIFFrameInvalid(h) > 0;
        if (invalid) {
            ++st.s.invalid;  // nInvalidFrame (counted here with or without the flag)
            if (options.discard_invalid) {
                return;
            }
        }
        const auto seconds = static_cast<std::uint32_t>(getVDIFFrameEpochSecOffset(h));
        const auto frame = static_cast<std::uint32_t>(getVDIFFrameNumber(h));
        // frameNumber = seconds * inputFramesPerSecond + frame.
        const std::uint64_t slot = std::uint64_t{seconds} * frames_per_second + frame;
        const std::pair<std::uint32_t, std::uint32_t> pos{seconds, frame};
        if (!st.any || pos < std::pair{st.s.first_seconds, st.s.first_frame}) {
            st.s.first_seconds = seconds;
            st.s.first_frame = frame;
        }
        if (!st.any || pos > std::pair{st.s.last_seconds, st.s.last_frame}) {
            st.s.last_seconds = seconds;
            st.s.last_frame = frame;
        }
        if (!st.any || slot < st.lowest) {
            st.lowest = slot;
        }
        if (!st.any || slot > st.highest) {
            st.highest = slot;
        }
        st.any = true;
        // "set mask indicating valid data in place": a slot already set is nDup.
        const bool repeat = frames_per_second == 0 ? !st.positions.insert(pos).second
                                                   : !st.slots.insert(slot).second;
        if (repeat) {
            ++st.s.duplicates;
        }
    });
    std::map<StreamKey, Summary> out;
    for (auto& [key, st] : states) {
        if (st.any && frames_per_second != 0) {
            // Stage 2: every slot from the lowest to the highest is an output
            // frame; one whose mask bit is clear is a filler (nBadOutput).
            st.s.missing = (st.highest - st.lowest + 1) - st.slots.size();
        }
        out[key] = st.s;
    }
    return out;
}

}  // namespace ibvcap::test::vdifio

#pragma GCC diagnostic pop
