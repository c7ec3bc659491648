// DiFX's codifio, transcribed for tests: the header structs, accessors and
// setters that DiFX (difx/difx libraries/codifio) and its callers (mark5access
// libraries/mark5access/mark5access/format_codif.c, utils/codifsum.c) use to
// read and write CODIF, so that ibvcap's codec (formats/codif.cpp) is checked
// against what DiFX does, not against ibvcap's own reading of a document.
//
// Two revisions of codifio.h, one per layout:
//   - draft (sync 0xADEADBEE): libraries/codifio/trunk/src/codifio.h and
//     codifio.c at commit a02bc7ff6cc16df6d64c5b0b5ec70c7276a6beb0 ("Add
//     FramesPerPeriod", 2019; the word order is that of 2acba4a11 "Don't offset
//     nchan by 1", the last draft revision before the 2022 switch to v2);
//   - v2 (sync 0xFEEDCAFE): libraries/codifio/src/codifio.h and codifio.c at
//     difx/difx master ("#define CODIFV2", commit dacf99364 and later; the
//     same at 902730147).
// The structs keep codifio's bitfield declarations in codifio's order: GCC and
// Clang allocate bitfields from the least significant bit of each unit on
// little-endian targets, which is what codifio relies on, so memcpy of 64
// bytes into them reads a frame exactly as DiFX does. Names of the functions
// are codifio's; the bodies are one-line restatements of what each does.
// Where they differ, on purpose: v2 getCODIFFrameBytes and
// getCODIFFrameperperiod compute in 64 bits (codifio's int arithmetic overflows
// for frames of 256 MiB and more; no datagram is that large), and
// createCODIFHeader leaves out the range checks its uint16_t arguments cannot
// fail.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

// codifio's setters store into bitfields, which keeps the low bits of the
// value (C's conversion): that truncation is part of what is transcribed, so
// the conversion warnings are off for this file only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-conversion"

namespace ibvcap::test::codifio {

inline constexpr int kHeaderBytes = 64;  // CODIF_HEADER_BYTES

namespace draft {

// struct codif_header, draft revision: sixteen 32-bit words.
struct Header {
    std::uint32_t frame : 32;  // word 0

    std::uint32_t seconds : 30;  // word 1
    std::uint32_t iscomplex : 1;
    std::uint32_t invalid : 1;

    std::uint32_t stationid : 16;  // word 2
    std::uint32_t unassigned : 6;
    std::uint32_t representation : 4;
    std::uint32_t epoch : 6;

    std::uint32_t framelength8 : 24;  // word 3 (the struct's comment says "including header";
    std::uint32_t nbits : 5;          // every accessor and caller below uses the payload alone)
    std::uint32_t version : 3;

    std::uint32_t groupid : 16;  // word 4
    std::uint32_t threadid : 16;

    std::uint32_t nchan : 16;  // word 5: stored minus one (setCODIFNumChannels)
    std::uint32_t blocklength : 16;

    std::uint32_t reserved2 : 32;  // word 6

    std::uint32_t period : 16;  // word 7
    std::uint32_t reserved1 : 16;

    std::uint64_t totalsamples;  // words 8-9

    std::uint32_t reserved3;  // word 10
    std::uint32_t sync;       // word 11

    std::uint32_t extended2;  // word 12

    std::uint32_t eversion : 8;  // word 13
    std::uint32_t extended1 : 24;

    std::uint32_t extended4;  // word 14
    std::uint32_t extended3;  // word 15
};
static_assert(sizeof(Header) == kHeaderBytes);

inline constexpr std::uint32_t kSync = 0xADEADBEEu;  // createCODIFHeader: header->sync

// codifio.h inline getters (draft revision).
inline int getCODIFComplex(const Header& h) {
    return static_cast<int>(h.iscomplex);
}
inline int getCODIFThreadID(const Header& h) {
    return static_cast<int>(h.threadid);
}
inline int getCODIFGroupID(const Header& h) {
    return static_cast<int>(h.groupid);
}
inline int getCODIFFrameBytes(const Header& h) {
    return static_cast<int>(h.framelength8) * 8;
}
inline int getCODIFPeriod(const Header& h) {
    return static_cast<int>(h.period);
}
inline std::uint32_t getCODIFSync(const Header& h) {
    return h.sync;
}
inline std::uint64_t getCODIFTotalSamples(const Header& h) {
    return h.totalsamples;
}
inline int getCODIFFrameEpochSecOffset(const Header& h) {
    return static_cast<int>(h.seconds);
}
inline int getCODIFFrameNumber(const Header& h) {
    return static_cast<int>(h.frame);
}
inline int getCODIFStationID(const Header& h) {
    return static_cast<int>(h.stationid);
}
inline int getCODIFBitsPerSample(const Header& h) {
    return static_cast<int>(h.nbits);
}
inline int getCODIFRepresentation(const Header& h) {
    return static_cast<int>(h.representation);
}
inline int getCODIFVersion(const Header& h) {
    return static_cast<int>(h.version);
}
inline int getCODIFNumChannels(const Header& h) {
    return static_cast<int>(h.nchan) + 1;
}
inline int getCODIFSampleblockLength(const Header& h) {
    return static_cast<int>(h.blocklength);
}
inline int getCODIFFrameInvalid(const Header& h) {
    return static_cast<int>(h.invalid);
}
inline int getCODIFEpoch(const Header& h) {
    return static_cast<int>(h.epoch);
}

// codifio.c getCODIFFramesPerPeriod: payload bits over bits per complete sample.
inline std::uint32_t getCODIFFramesPerPeriod(const Header& h) {
    const std::uint64_t databytes = static_cast<std::uint64_t>(getCODIFFrameBytes(h));
    std::uint64_t samplesperframe =
        (databytes * 8) /
        static_cast<std::uint64_t>(getCODIFNumChannels(h) * getCODIFBitsPerSample(h));
    if (getCODIFComplex(h) != 0) {
        samplesperframe /= 2;
    }
    return static_cast<std::uint32_t>(getCODIFTotalSamples(h) / samplesperframe);
}

// codifio.h inline setters and codifio.c setCODIFFrameBytes / setCODIFNumChannels.
inline void setCODIFFrameEpochSecOffset(Header& h, int seconds) {
    h.seconds = static_cast<std::uint32_t>(seconds);
}
inline void setCODIFFrameNumber(Header& h, int frame) {
    h.frame = static_cast<std::uint32_t>(frame);
}
inline void setCODIFFrameInvalid(Header& h, unsigned invalid) {
    h.invalid = invalid;
}
inline void setCODIFBitsPerSample(Header& h, int nbits) {
    h.nbits = static_cast<std::uint32_t>(nbits);
}
inline void setCODIFRepresentation(Header& h, int r) {
    h.representation = static_cast<std::uint32_t>(r);
}
inline void setCODIFSampleblockLength(Header& h, int b) {
    h.blocklength = static_cast<std::uint32_t>(b);
}
inline void setCODIFPeriod(Header& h, std::uint32_t period) {
    h.period = period;
}
inline void setCODIFVersion(Header& h, int version) {
    h.version = static_cast<std::uint32_t>(version);
}
inline void setCODIFEpoch(Header& h, int epoch) {
    h.epoch = static_cast<std::uint32_t>(epoch);
}
inline void setCODIFFrameBytes(Header& h, int bytes) {
    h.framelength8 = static_cast<std::uint32_t>(bytes / 8);
}
inline void setCODIFNumChannels(Header& h, int n) {
    h.nchan = static_cast<std::uint32_t>(n - 1);
}

// codifio.c createCODIFHeader (draft revision): dataarraylength is the payload.
inline bool createCODIFHeader(Header& h, int dataarraylength, std::uint16_t threadid,
                              std::uint16_t groupid, int bits, std::uint16_t nchan,
                              int sampleblocklength, int period, std::uint64_t totalsamples,
                              int iscomplex, const char stationid[3]) {
    if (bits > 32 || bits < 1 || dataarraylength % 8 != 0 || dataarraylength < 0 || nchan < 1) {
        return false;
    }
    std::memset(&h, 0, sizeof h);
    h.invalid = 0;
    setCODIFNumChannels(h, nchan);
    setCODIFFrameBytes(h, dataarraylength);
    h.iscomplex = iscomplex != 0 ? 1 : 0;
    setCODIFBitsPerSample(h, bits);
    setCODIFVersion(h, 1);
    setCODIFRepresentation(h, 0);
    h.threadid = threadid;
    h.groupid = groupid;
    h.stationid = static_cast<std::uint32_t>((stationid[0] << 8) | stationid[1]) & 0xFFFFu;
    setCODIFPeriod(h, static_cast<std::uint32_t>(period));
    h.totalsamples = totalsamples;
    setCODIFSampleblockLength(h, sampleblocklength);
    h.frame = 0;
    h.sync = kSync;
    return true;
}

}  // namespace draft

namespace v2 {

// struct codif_header, v2 revision: eight 64-bit words.
struct Header {
    std::uint64_t frame : 32;  // word 0
    std::uint64_t seconds : 32;
    std::uint64_t epoch : 8;  // word 1
    std::uint64_t nbits : 8;
    std::uint64_t power : 1;
    std::uint64_t invalid : 1;
    std::uint64_t iscomplex : 1;
    std::uint64_t calEnabled : 1;
    std::uint64_t representation : 4;
    std::uint64_t version : 5;
    std::uint64_t protocol : 3;
    std::uint64_t reserved : 16;
    std::uint64_t period : 16;
    std::uint64_t threadid : 16;  // word 2
    std::uint64_t groupid : 16;
    std::uint64_t secondaryid : 16;
    std::uint64_t stationid : 16;
    std::uint64_t nchan : 16;  // word 3: not offset
    std::uint64_t blocklength : 16;
    std::uint64_t framelength8 : 32;  // "Frame length (excluding header) divided by 8"
    std::uint64_t totalsamples;       // word 4
    std::uint64_t sync : 32;          // word 5
    std::uint64_t metaid : 16;
    std::uint64_t meta1 : 16;
    std::uint64_t meta2;  // word 6
    std::uint64_t meta3;  // word 7
};
static_assert(sizeof(Header) == kHeaderBytes);

inline constexpr std::uint32_t kSync = 0xFEEDCAFEu;  // CODIF_SYNC

inline int getCODIFComplex(const Header& h) {
    return static_cast<int>(h.iscomplex);
}
inline int getCODIFThreadID(const Header& h) {
    return static_cast<int>(h.threadid);
}
inline int getCODIFGroupID(const Header& h) {
    return static_cast<int>(h.groupid);
}
inline std::uint64_t getCODIFFrameBytes(const Header& h) {
    return static_cast<std::uint64_t>(h.framelength8) * 8;
}
inline int getCODIFPeriod(const Header& h) {
    return static_cast<int>(h.period);
}
inline std::uint32_t getCODIFSync(const Header& h) {
    return static_cast<std::uint32_t>(h.sync);
}
inline std::uint64_t getCODIFTotalSamples(const Header& h) {
    return h.totalsamples;
}
inline std::uint32_t getCODIFFrameEpochSecOffset(const Header& h) {
    return static_cast<std::uint32_t>(h.seconds);
}
inline std::uint32_t getCODIFFrameNumber(const Header& h) {
    return static_cast<std::uint32_t>(h.frame);
}
inline int getCODIFStationID(const Header& h) {
    return static_cast<int>(h.stationid);
}
inline int getCODIFSecondaryID(const Header& h) {
    return static_cast<int>(h.secondaryid);
}
inline int getCODIFBitsPerSample(const Header& h) {
    return static_cast<int>(h.nbits);
}
inline int getCODIFRepresentation(const Header& h) {
    return static_cast<int>(h.representation);
}
inline int getCODIFProtocol(const Header& h) {
    return static_cast<int>(h.protocol);
}
inline int getCODIFVersion(const Header& h) {
    return static_cast<int>(h.version);
}
inline int getCODIFNumChannels(const Header& h) {
    return static_cast<int>(h.nchan);
}
inline int getCODIFSampleblockLength(const Header& h) {
    return static_cast<int>(h.blocklength);
}
inline int getCODIFFrameInvalid(const Header& h) {
    return static_cast<int>(h.invalid);
}
inline int getCODIFIsPower(const Header& h) {
    return static_cast<int>(h.power);
}
inline int getCODIFCalEnabled(const Header& h) {
    return static_cast<int>(h.calEnabled);
}
inline int getCODIFEpoch(const Header& h) {
    return static_cast<int>(h.epoch);
}

// codifio.c getCODIFFrameperperiod.
inline std::uint64_t getCODIFFrameperperiod(const Header& h) {
    const std::uint64_t sampleperframe =
        getCODIFFrameBytes(h) * 8 /
        static_cast<std::uint64_t>(getCODIFBitsPerSample(h) * getCODIFNumChannels(h) *
                                   (getCODIFComplex(h) + 1));
    return getCODIFTotalSamples(h) / sampleperframe;
}

inline void setCODIFFrameEpochSecOffset(Header& h, std::uint32_t s) {
    h.seconds = s;
}
inline void setCODIFFrameNumber(Header& h, std::uint32_t f) {
    h.frame = f;
}
inline void setCODIFFrameInvalid(Header& h, unsigned invalid) {
    h.invalid = invalid;
}
inline void setCODIFCalEnabled(Header& h, unsigned cal) {
    h.calEnabled = cal;
}
inline void setCODIFIsPower(Header& h, unsigned power) {
    h.power = power;
}
inline void setCODIFBitsPerSample(Header& h, int nbits) {
    h.nbits = static_cast<std::uint64_t>(nbits);
}
inline void setCODIFRepresentation(Header& h, int r) {
    h.representation = static_cast<std::uint64_t>(r);
}
inline void setCODIFSampleblockLength(Header& h, int b) {
    h.blocklength = static_cast<std::uint64_t>(b);
}
inline void setCODIFPeriod(Header& h, std::uint32_t period) {
    h.period = period;
}
inline void setCODIFVersion(Header& h, int version) {
    h.version = static_cast<std::uint64_t>(version);
}
inline void setCODIFEpoch(Header& h, int epoch) {
    h.epoch = static_cast<std::uint64_t>(epoch);
}
inline void setCODIFFrameBytes(Header& h, int bytes) {
    h.framelength8 = static_cast<std::uint64_t>(bytes / 8);
}
inline void setCODIFNumChannels(Header& h, int n) {
    h.nchan = static_cast<std::uint64_t>(n);
}

// codifio.c createCODIFHeader (v2): version 3 then setCODIFVersion(2),
// protocol 7, representation 1, stationid from two characters.
inline bool createCODIFHeader(Header& h, std::uint32_t dataarraylength, std::uint16_t threadid,
                              std::uint16_t groupid, std::uint8_t bits, std::uint16_t nchan,
                              std::uint16_t sampleblocklength, std::uint16_t period,
                              std::uint64_t totalsamples, int iscomplex, const char stationid[3],
                              std::uint16_t secondaryid) {
    if (dataarraylength % 8 != 0 || nchan == 0) {
        return false;
    }
    std::memset(&h, 0, sizeof h);
    h.version = 3;
    h.protocol = 7;
    setCODIFNumChannels(h, nchan);
    setCODIFFrameBytes(h, static_cast<int>(dataarraylength));
    h.iscomplex = iscomplex != 0 ? 1 : 0;
    setCODIFBitsPerSample(h, bits);
    setCODIFVersion(h, 2);
    setCODIFRepresentation(h, 1);
    h.threadid = threadid;
    h.groupid = groupid;
    h.stationid = static_cast<std::uint64_t>((stationid[0] << 8) | stationid[1]) & 0xFFFFu;
    h.secondaryid = secondaryid;
    setCODIFPeriod(h, period);
    h.totalsamples = totalsamples;
    setCODIFSampleblockLength(h, sampleblocklength);
    h.sync = kSync;
    return true;
}

}  // namespace v2

template <class Header>
Header read_header(std::span<const std::uint8_t> bytes) {
    Header h;
    std::memcpy(&h, bytes.data(), sizeof h);
    return h;
}

// utils/codifsum.c's walk of a .codif file, and mark5access's sync check
// (mark5_format_codif_validate): read a 64-byte header, check its sync, skip
// getCODIFFrameBytes() bytes of payload to the next header. Frames of both
// layouts are walked (a pre-2024 mark5access accepted both syncs at its own
// struct's sync offset; here each frame's layout is taken from where its
// sync lies). `frames` counts the headers found in sync; `in_sync` is false
// at the first header with neither sync or a payload that runs past the end.
struct Walk {
    std::size_t frames = 0;
    bool in_sync = true;
    std::size_t end = 0;  // bytes walked
};

inline Walk walk_codif_file(std::span<const std::uint8_t> file) {
    Walk w;
    std::size_t at = 0;
    while (at < file.size()) {
        if (file.size() - at < static_cast<std::size_t>(kHeaderBytes)) {
            w.in_sync = false;
            break;
        }
        const auto header = file.subspan(at, kHeaderBytes);
        std::uint64_t payload = 0;
        const auto v2h = read_header<v2::Header>(header);
        const auto dh = read_header<draft::Header>(header);
        if (v2::getCODIFSync(v2h) == v2::kSync) {
            payload = v2::getCODIFFrameBytes(v2h);
        } else if (draft::getCODIFSync(dh) == draft::kSync) {
            payload = static_cast<std::uint64_t>(draft::getCODIFFrameBytes(dh));
        } else {
            w.in_sync = false;
            break;
        }
        if (payload > file.size() - at - kHeaderBytes) {
            w.in_sync = false;
            break;
        }
        at += kHeaderBytes + payload;
        ++w.frames;
    }
    w.end = at;
    return w;
}

}  // namespace ibvcap::test::codifio

#pragma GCC diagnostic pop
