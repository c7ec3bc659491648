// VDIF read by tools no one here wrote (issue 28, item 4): frames built by the
// transcribed writers of DiFX's vdifio (test/vdifio_transcript.hpp) and of the
// baseband package (test/baseband_vdif_transcript.hpp), every EDV and legacy,
// sent through `ibvcap read`, come out in the ledger exactly as built; and the
// files ibvcap writes are read by both transcripts' reading rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "baseband_vdif_transcript.hpp"
#include "cli.hpp"
#include "formats/output.hpp"
#include "frames.hpp"
#include "lib/core/netaddr.hpp"
#include "vdifio_transcript.hpp"

namespace ibvcap::test {
namespace {

namespace bb = baseband_vdif;

using Bytes = std::vector<std::uint8_t>;

constexpr std::uint32_t kFps = 8;          // frames per second of every built stream
constexpr std::uint32_t kSeconds = 3;      // seconds of every built stream
constexpr std::uint32_t kStart = 700'000;  // first second (from the reference epoch)
constexpr std::uint32_t kRefEpoch = 50;    // 2025-01-01
constexpr std::uint32_t kSlots = kFps * kSeconds;

// Which writer builds a stream, with which extended-data version (-1: legacy).
enum class Writer { vdifio, baseband };

// One built stream: who builds it, its (station, thread), and what happens
// to its slots (slot = second offset * kFps + frame) on the way.
struct StreamPlan {
    Writer writer;
    int edv;
    std::uint32_t antenna;
    std::uint16_t station;
    std::uint16_t thread;
    std::set<std::uint32_t> left_out;  // never sent
    std::set<std::uint32_t> invalid;   // sent with the invalid bit set
    std::set<std::uint32_t> repeated;  // sent twice (the second right after the first)
    std::set<std::uint32_t> late;      // sent after the next slot's frame
};

std::uint16_t station_id(char a, char b) {
    return static_cast<std::uint16_t>(static_cast<unsigned char>(a) << 8 |
                                      static_cast<unsigned char>(b));
}

// Two stations of one antenna share thread ids (a stream is its station and
// thread). Frames are left out in the middle of a second, never the last frame of a
// second (a learned rate needs a second's last frame: docs/formats.md, 2b).
std::vector<StreamPlan> plans() {
    const std::uint16_t ar = station_id('A', 'r');
    const std::uint16_t ef = station_id('E', 'f');
    const std::uint16_t mh = station_id('M', 'h');
    return {
        {Writer::vdifio, 0, kAntenna1, ar, 0, {3}, {5}, {9}, {}},
        {Writer::vdifio, 1, kAntenna1, ar, 1, {12, 13}, {}, {}, {4}},
        {Writer::vdifio, 2, kAntenna1, ar, 2, {}, {0, 17}, {17}, {}},
        {Writer::vdifio, 3, kAntenna1, ef, 0, {0, 1, 20}, {}, {}, {}},
        {Writer::vdifio, 4, kAntenna1, ef, 1, {10}, {11}, {2}, {18}},
        {Writer::vdifio, -1, kAntenna1, ef, 1023, {5, 6, 14}, {22}, {}, {}},
        {Writer::baseband, 0, kAntenna2, mh, 0, {2}, {3}, {4}, {}},
        {Writer::baseband, 1, kAntenna2, mh, 1, {}, {}, {}, {}},
        {Writer::baseband, 2, kAntenna2, mh, 2, {16, 17, 18}, {19}, {}, {8}},
        {Writer::baseband, 3, kAntenna2, mh, 3, {9}, {}, {21}, {}},
        {Writer::baseband, 4, kAntenna2, 0x0102, 0, {1}, {6}, {6}, {}},
        {Writer::baseband, -1, kAntenna2, 0x0102, 1, {4, 20}, {10, 11}, {12}, {13}},
    };
}

// ---------------------------------------------------------------- vdifio's writer

// createVDIFHeader, then the EDV's words through vdifio's EDV structs, then
// the slot's time through the setters.
Bytes vdifio_frame(const StreamPlan& p, std::uint32_t slot) {
    namespace v = vdifio;
    const char station[3] = {static_cast<char>(p.station >> 8), static_cast<char>(p.station & 0xFF),
                             0};
    // Payloads: 1000 bytes, 5000 for EDV 2 (ALMA's 629 words), legacy frames
    // 1016 + 16 bytes.
    const int payload = p.edv == 2 ? 5000 : 1000;
    v::vdif_header h{};
    EXPECT_EQ(v::createVDIFHeader(h, payload, p.thread, 2, 4, 0, station), v::VDIF_NOERROR);
    v::setVDIFEpoch(h, static_cast<int>(kRefEpoch));
    switch (p.edv) {
        case -1:
            h.legacymode = 1;
            v::setVDIFFrameBytes(h, payload + v::VDIF_LEGACY_HEADER_BYTES);
            break;
        case 1: {
            auto* e = reinterpret_cast<v::vdif_edv1_header*>(&h);
            e->eversion = 1;
            e->samprate = 64;
            e->samprateunits = 1;
            e->syncword = 0xACABFEED;
            std::memcpy(e->name, "NICT-K5", 8);
            break;
        }
        case 2: {
            auto* e = reinterpret_cast<v::vdif_edv2_header_alma*>(&h);
            e->eversion = 2;
            e->subsubversion = v::VDIF_EDV2_SUBVER_ALMA;
            e->polblock = 1;
            e->quadrantminus1 = 2;
            e->correlator = 1;
            e->picstatus = 0x12345678;
            e->psn = 0x0102030405060708ull + slot;
            break;
        }
        case 3: {
            auto* e = reinterpret_cast<v::vdif_edv3_header*>(&h);
            e->eversion = 3;
            e->samprate = 32;
            e->samprateunits = 1;
            e->syncword = 0xACABFEED;
            e->tuning = 0x40000000;
            e->personalitytype = 0xA2;
            e->minorrev = 3;
            e->majorrev = 2;
            e->sideband = 1;
            e->subband = 5;
            e->ifnumber = 2;
            e->dbeunit = 1;
            break;
        }
        case 4: {
            auto* e = reinterpret_cast<v::vdif_edv4_header*>(&h);
            e->eversion = 4;
            e->masklength = 16;
            e->syncword = 0xACABFEED;
            e->validitymask = 0xBEEF;
            break;
        }
        default:
            break;
    }
    v::setVDIFFrameEpochSecOffset(h, static_cast<int>(kStart));
    v::setVDIFFrameNumber(h, 0);
    for (std::uint32_t i = 0; i < slot; ++i) {
        EXPECT_EQ(v::nextVDIFHeader(h, static_cast<int>(kFps)), v::VDIF_NOERROR);
    }
    v::setVDIFFrameInvalid(h, p.invalid.contains(slot) ? 1u : 0u);
    const auto bytes = static_cast<std::size_t>(v::getVDIFFrameBytes(h));
    Bytes f(bytes, 0);
    std::memcpy(f.data(), &h, static_cast<std::size_t>(v::getVDIFHeaderBytes(h)));
    for (std::size_t i = static_cast<std::size_t>(v::getVDIFHeaderBytes(h)); i < bytes; ++i) {
        f[i] = static_cast<std::uint8_t>(i * 7 + slot);
    }
    return f;
}

// ---------------------------------------------------------------- baseband's writer

// VDIFHeader.fromvalues(edv, ...) with each EDV's own keys.
Bytes baseband_frame(const StreamPlan& p, std::uint32_t slot) {
    std::map<std::string, std::uint64_t> keys = {
        {"seconds", kStart + slot / kFps},
        {"frame_nr", slot % kFps},
        {"ref_epoch", kRefEpoch},
        {"thread_id", p.thread},
        {"invalid_data", p.invalid.contains(slot) ? 1 : 0},
    };
    bb::Properties props;
    props.station =
        p.station == 0x0102
            ? std::variant<std::string, std::uint16_t>(p.station)
            : std::variant<std::string, std::uint16_t>(std::string{
                  static_cast<char>(p.station >> 8), static_cast<char>(p.station & 0xFF)});
    props.bps = 2;
    props.complex_data = false;
    props.nchan = 4;
    switch (p.edv) {
        case 1:
            keys["sampling_unit"] = 1;
            keys["sampling_rate"] = 16;
            keys["das_id"] = 0x3131'3131'4B35'4B35ull;
            props.frame_nbytes = 1032;
            break;
        case 2:
            keys["pol"] = 1;
            keys["BL_quadrant"] = 3;
            keys["BL_correlator"] = 0;
            keys["PIC_status"] = 0xCAFE;
            keys["PSN"] = 1000 + slot;
            props.frame_nbytes = 5032;  // frame_length 629 (verify())
            break;
        case 3:
            keys["sampling_unit"] = 1;
            keys["sampling_rate"] = 32;
            keys["loif_tuning"] = 0x1234;
            keys["dbe_unit"] = 2;
            keys["if_nr"] = 1;
            keys["subband"] = 3;
            keys["sideband"] = 1;
            keys["major_rev"] = 2;
            keys["minor_rev"] = 1;
            keys["personality"] = 0xA1;
            props.frame_nbytes = 1032;  // frame_length 129 (verify())
            break;
        case 4:
            keys["validity_mask_length"] = 8;
            keys["validity_mask"] = 0xA5;
            props.frame_nbytes = 1032;
            break;
        case -1:
            props.payload_nbytes = 1016;
            break;
        default:
            props.payload_nbytes = 1000;
            break;
    }
    const bb::Header h = bb::fromvalues(p.edv, keys, props);
    Bytes f = h.bytes();
    f.resize(h.frame_nbytes());
    for (std::size_t i = h.nbytes(); i < f.size(); ++i) {
        f[i] = static_cast<std::uint8_t>(i * 5 + slot);
    }
    return f;
}

// ---------------------------------------------------------------- the capture

// One VDIF frame as sent: its stream and its bytes.
struct Sent {
    std::size_t stream;
    Bytes frame;
};

// Every stream's frames in arrival order: slot by slot, the streams in turn;
// a late frame after the next slot's, a repeated one twice in a row.
std::vector<Sent> arrivals(const std::vector<StreamPlan>& ps) {
    std::vector<Sent> out;
    std::vector<std::vector<Sent>> held(ps.size());
    for (std::uint32_t slot = 0; slot < kSlots; ++slot) {
        for (std::size_t i = 0; i < ps.size(); ++i) {
            const StreamPlan& p = ps[i];
            std::vector<Sent> now;
            if (!p.left_out.contains(slot)) {
                const Bytes f =
                    p.writer == Writer::vdifio ? vdifio_frame(p, slot) : baseband_frame(p, slot);
                now.push_back({i, f});
                if (p.repeated.contains(slot)) {
                    now.push_back({i, f});
                }
            }
            if (p.late.contains(slot)) {
                held[i] = std::move(now);
                continue;
            }
            out.insert(out.end(), now.begin(), now.end());
            out.insert(out.end(), held[i].begin(), held[i].end());
            held[i].clear();
        }
    }
    return out;
}

void write_pcap(const std::string& path, const std::vector<Sent>& sent,
                const std::vector<StreamPlan>& ps, std::uint16_t port) {
    std::ofstream out(path, std::ios::binary);
    const auto fh = pcap_file_header();
    out.write(reinterpret_cast<const char*>(fh.data()), fh.size());
    std::uint64_t ns = 1'700'000'000'000'000'000ull;
    for (const Sent& s : sent) {
        UdpHeaderSpec spec;
        spec.src_ip = ps[s.stream].antenna;
        spec.dst_ip = kGroup1;
        spec.src_port = 5000;
        spec.dst_port = port;
        Bytes f = udp_frame(spec, s.frame.size());
        std::copy(s.frame.begin(), s.frame.end(),
                  f.end() - static_cast<std::ptrdiff_t>(s.frame.size()));
        const auto rh = pcap_record_header(ns, static_cast<std::uint32_t>(f.size()),
                                           static_cast<std::uint32_t>(f.size()));
        out.write(reinterpret_cast<const char*>(rh.data()), rh.size());
        out.write(reinterpret_cast<const char*>(f.data()), static_cast<std::streamsize>(f.size()));
        ns += 10'000;
    }
}

// What the ledger must say of a stream: counted from the plan, slot by slot,
// with the reference model of test/frames.hpp (Observed) for the sequence.
struct Expected {
    std::uint64_t packets = 0, invalid = 0;
    Observed seq;
    std::uint64_t first = 0, last = 0;  // slots
};

std::map<std::size_t, Expected> expected(const std::vector<StreamPlan>& ps,
                                         const std::vector<Sent>& sent) {
    std::map<std::size_t, Expected> out;
    for (const Sent& s : sent) {
        Expected& e = out[s.stream];
        std::uint32_t seconds = 0, frame = 0;
        bool invalid = false;
        // The slot from the frame's own words (the same for both writers).
        std::uint32_t w0 = 0, w1 = 0;
        std::memcpy(&w0, s.frame.data(), 4);
        std::memcpy(&w1, s.frame.data() + 4, 4);
        seconds = w0 & 0x3FFFFFFFu;
        invalid = (w0 >> 31) != 0;
        frame = w1 & 0xFFFFFFu;
        const std::uint32_t slot = (seconds - kStart) * kFps + frame;
        e.seq.slots.push_back(slot);
        ++e.packets;
        e.invalid += invalid ? 1 : 0;
    }
    for (auto& [i, e] : out) {
        e.seq.finish();
        e.first = *std::min_element(e.seq.slots.begin(), e.seq.slots.end());
        e.last = *std::max_element(e.seq.slots.begin(), e.seq.slots.end());
        EXPECT_EQ(e.packets, kSlots - ps[i].left_out.size() + ps[i].repeated.size());
    }
    return out;
}

const nlohmann::json* find_stream(const nlohmann::json& report, const StreamPlan& p) {
    for (const auto& s : report["streams"]) {
        if (s["antenna"] == format_ipv4(p.antenna) && s["station"] == p.station &&
            s["thread"] == p.thread) {
            return &s;
        }
    }
    return nullptr;
}

Bytes concat(const std::vector<Sent>& sent) {
    Bytes all;
    for (const Sent& s : sent) {
        all.insert(all.end(), s.frame.begin(), s.frame.end());
    }
    return all;
}

TEST(VdifInterop, TranscribedWritersFramesComeOutInTheLedgerAsBuilt) {
    TempDir dir;
    const std::vector<StreamPlan> ps = plans();
    const std::vector<Sent> sent = arrivals(ps);
    write_pcap(dir / "built.pcap", sent, ps, 4001);
    const std::map<std::size_t, Expected> want = expected(ps, sent);

    // The built frames, back to back, as both transcripts' readers see them:
    // the plan's counts, so the writers built what the plan says.
    const Bytes all = concat(sent);
    const auto by_vdifio = vdifio::read_file(all, kFps);
    const auto by_baseband = bb::read_file(all, kFps);
    const bb::Walk bb_walk = bb::walk_file(all);
    EXPECT_TRUE(bb_walk.complete);
    EXPECT_TRUE(vdifio::walk_file(all).complete);
    ASSERT_EQ(by_vdifio.size(), ps.size());  // distinct (station, thread) across antennas
    ASSERT_EQ(by_baseband.size(), ps.size());
    for (std::size_t i = 0; i < ps.size(); ++i) {
        const StreamPlan& p = ps[i];
        const Expected& e = want.at(i);
        const vdifio::Summary& v = by_vdifio.at({p.station, p.thread});
        const bb::Summary& b = by_baseband.at({p.station, p.thread});
        SCOPED_TRACE(::testing::Message() << "stream " << i);
        EXPECT_EQ(v.frames, e.packets);
        EXPECT_EQ(v.invalid, e.invalid);
        EXPECT_EQ(v.missing, e.seq.missing);
        EXPECT_EQ(v.duplicates, e.seq.duplicates);
        EXPECT_EQ(v.first_seconds, kStart + e.first / kFps);
        EXPECT_EQ(v.first_frame, e.first % kFps);
        EXPECT_EQ(v.last_seconds, kStart + e.last / kFps);
        EXPECT_EQ(v.last_frame, e.last % kFps);
        EXPECT_EQ(b.frames, v.frames);
        // The two tools disagree on EDV 2's sync: vdifio writes ALMA's
        // 0x0A5AE5 (VDIF_EDV2_SUBVER_ALMA), baseband's VDIFHeader2 verifies
        // 0xA5EA5. So baseband refuses vdifio's ALMA headers, and only those
        // (ibvcap does not verify EDV contents: they count as frames).
        EXPECT_EQ(b.unverified, p.writer == Writer::vdifio && p.edv == 2 ? b.frames : 0u);
        EXPECT_EQ(b.invalid, v.invalid);
        EXPECT_EQ(b.missing, v.missing);
        EXPECT_EQ(b.duplicates, v.duplicates);
        EXPECT_EQ(std::tie(b.first_seconds, b.first_frame, b.last_seconds, b.last_frame),
                  std::tie(v.first_seconds, v.first_frame, v.last_seconds, v.last_frame));
    }

    // The rate given, and learned (each stream's first second ends with its
    // last frame, and a later one confirms it).
    for (const bool given : {true, false}) {
        SCOPED_TRACE(given ? "rate given" : "rate learned");
        const std::string args =
            std::string("read -q -r built.pcap --report r.json 239.17.0.1:4001/vdif") +
            (given ? " --vdif-frames-per-second 8" : "");
        const Result r = ibvcap(dir, args);
        EXPECT_EQ(r.code, 3) << r.err;  // the frames left out
        const auto report = nlohmann::json::parse(slurp(dir / "r.json"));
        ASSERT_EQ(report["streams"].size(), ps.size());
        EXPECT_EQ(report["totals"]["malformed"], 0);
        EXPECT_EQ(report["totals"]["non_codif"], 0);
        EXPECT_EQ(report["totals"]["packets"], sent.size());
        for (std::size_t i = 0; i < ps.size(); ++i) {
            const StreamPlan& p = ps[i];
            const Expected& e = want.at(i);
            SCOPED_TRACE(::testing::Message() << "stream " << i << " edv " << p.edv);
            const nlohmann::json* s = find_stream(report, p);
            ASSERT_NE(s, nullptr);
            EXPECT_EQ((*s)["format"], "vdif");
            EXPECT_EQ((*s)["layout"], p.edv == -1 ? "legacy" : "standard");
            EXPECT_EQ((*s)["epoch"], kRefEpoch);
            EXPECT_EQ((*s)["packets"], e.packets);
            EXPECT_EQ((*s)["invalid"], e.invalid);
            EXPECT_EQ((*s)["missing"], e.seq.missing);
            EXPECT_EQ((*s)["duplicates"], e.seq.duplicates);
            EXPECT_EQ((*s)["out_of_order"], e.seq.out_of_order);
            EXPECT_EQ((*s)["first"]["seconds"], kStart + e.first / kFps);
            EXPECT_EQ((*s)["first"]["frame"], e.first % kFps);
            EXPECT_EQ((*s)["last"]["seconds"], kStart + e.last / kFps);
            EXPECT_EQ((*s)["last"]["frame"], e.last % kFps);
            EXPECT_EQ((*s)["frames_per_period"], kFps);
            EXPECT_EQ((*s)["rate"], given ? "given" : "learned, confirmed");
        }
    }
}

// ---------------------------------------------------------------- ibvcap's VDIF files

// One frame of a VDIF file as both transcripts read its header, checked to
// agree field by field.
struct FileFrame {
    std::uint64_t slot = 0;
    bool invalid = false;
    bool fill = false;  // ibvcap's fill frame: invalid, payload 0x11223344 to its last word
    Bytes bytes;
};

std::vector<FileFrame> frames_of(const Bytes& file, std::uint64_t fps) {
    std::vector<FileFrame> out;
    std::size_t at = 0;
    while (at + vdifio::VDIF_LEGACY_HEADER_BYTES <= file.size()) {
        const std::span<const std::uint8_t> rest(file.data() + at, file.size() - at);
        const vdifio::vdif_header v = vdifio::read_header(rest);
        const auto frame_bytes = static_cast<std::size_t>(vdifio::getVDIFFrameBytes(v));
        if (frame_bytes < static_cast<std::size_t>(vdifio::getVDIFHeaderBytes(v)) ||
            frame_bytes > rest.size()) {
            ADD_FAILURE() << "a frame that cannot be walked at byte " << at;
            break;
        }
        // baseband reads 32 bytes for every header (a legacy frame among a
        // file's last 32 bytes would be its end: none here, 1 KiB payloads).
        const std::optional<bb::Header> b = bb::fromfile(rest);
        if (!b) {
            ADD_FAILURE() << "baseband: no header at byte " << at;
            break;
        }
        const bb::Header& h = *b;
        EXPECT_EQ(h["seconds"], static_cast<std::uint64_t>(vdifio::getVDIFFrameEpochSecOffset(v)));
        EXPECT_EQ(h["frame_nr"], static_cast<std::uint64_t>(vdifio::getVDIFFrameNumber(v)));
        EXPECT_EQ(h["invalid_data"], static_cast<std::uint64_t>(vdifio::getVDIFFrameInvalid(v)));
        EXPECT_EQ(h["legacy_mode"], static_cast<std::uint64_t>(vdifio::getVDIFLegacy(v)));
        EXPECT_EQ(h["ref_epoch"], static_cast<std::uint64_t>(vdifio::getVDIFEpoch(v)));
        EXPECT_EQ(h.frame_nbytes(), frame_bytes);
        EXPECT_EQ(h.nbytes(), static_cast<std::uint64_t>(vdifio::getVDIFHeaderBytes(v)));
        EXPECT_EQ(h.nchan(), static_cast<std::uint64_t>(vdifio::getVDIFNumChannels(v)));
        EXPECT_EQ(h.bps(), static_cast<std::uint64_t>(vdifio::getVDIFBitsPerSample(v)));
        EXPECT_EQ(h.complex_data(), vdifio::getVDIFComplex(v) != 0);
        EXPECT_EQ(h["thread_id"], static_cast<std::uint64_t>(vdifio::getVDIFThreadID(v)));
        EXPECT_EQ(h["station_id"], static_cast<std::uint64_t>(vdifio::getVDIFStationID(v)));
        EXPECT_EQ(h["vdif_version"], std::uint64_t{v.version});
        if (v.legacymode == 0) {
            EXPECT_EQ(h["edv"], std::uint64_t{v.eversion});
        }
        FileFrame f;
        f.slot = std::uint64_t{v.seconds} * fps + v.frame;
        f.invalid = v.invalid != 0;
        f.bytes.assign(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(frame_bytes));
        std::uint32_t last = 0;
        std::memcpy(&last, f.bytes.data() + frame_bytes - 4, 4);
        f.fill = last == vdifio::FILL_PATTERN;
        out.push_back(std::move(f));
        at += frame_bytes;
    }
    EXPECT_EQ(at, file.size());
    return out;
}

struct FileRead {
    vdifio::StreamKey key;
    vdifio::Summary v;
    vdifio::Walk v_walk;
    bb::Summary b;
    bb::Walk b_walk;
    std::vector<FileFrame> frames;
};

// A file of one stream, read by both transcripts.
FileRead read_vdif_file(const std::string& path, std::uint64_t fps) {
    const Bytes bytes = read_file(path);
    FileRead r;
    const auto v = vdifio::read_file(bytes, fps);
    const auto b = bb::read_file(bytes, fps);
    EXPECT_EQ(v.size(), 1u) << path << ": one station and thread per file";
    EXPECT_EQ(b.size(), 1u) << path;
    if (v.empty() || b.empty()) {
        return r;
    }
    r.key = v.begin()->first;
    EXPECT_EQ(b.begin()->first, r.key) << path;
    r.v = v.begin()->second;
    r.b = b.begin()->second;
    r.v_walk = vdifio::walk_file(bytes);
    r.b_walk = bb::walk_file(bytes);
    EXPECT_TRUE(r.v_walk.complete) << path;
    EXPECT_TRUE(r.b_walk.complete) << path;
    EXPECT_TRUE(r.b_walk.one_stream) << path;
    r.frames = frames_of(bytes, fps);
    return r;
}

std::pair<std::uint64_t, std::uint64_t> position_json(const nlohmann::json& p) {
    return {p["seconds"].get<std::uint64_t>(), p["frame"].get<std::uint64_t>()};
}

const nlohmann::json* report_stream(const nlohmann::json& report, const std::string& antenna,
                                    const vdifio::StreamKey& key) {
    for (const auto& s : report["streams"]) {
        if (s["antenna"] == antenna && s["station"] == key.first && s["thread"] == key.second) {
            return &s;
        }
    }
    return nullptr;
}

// The vdif outputs of a report: (path, antenna, the output's json).
std::vector<std::pair<std::string, nlohmann::json>> vdif_outputs(const nlohmann::json& report) {
    std::vector<std::pair<std::string, nlohmann::json>> out;
    for (const auto& o : report["outputs"]) {
        if (o["format"] == "vdif") {
            out.emplace_back(o["path"].get<std::string>(), o);
        }
    }
    return out;
}

struct GenRun {
    const char* name;
    const char* gen;  // gen's format options
    const char* group;
};

TEST(VdifInterop, IbvcapVdifFilesReadByVdifioAndBasebandOrderedAndNot) {
    constexpr std::uint64_t fps = 20;
    for (const GenRun& run :
         {GenRun{"standard, EDV 0", "--vdif", "239.17.0.1:4001/vdif"},
          GenRun{"legacy", "--vdif --vdif-legacy", "239.17.0.1:4001/vdif"},
          GenRun{"VTP, EDV 1, two stations",
                 "--vtp --vdif-edv 1 --vdif-station Ef --vdif-station 7", "239.17.0.1:4001/vtp"}}) {
        SCOPED_TRACE(run.name);
        TempDir dir;
        ASSERT_EQ(ibvcap(dir, std::string("gen -q -w g.pcap --truth t.json ") + run.gen +
                                  " --vdif-frames-per-second 20 --antennas 2 --threads 3 -c 160"
                                  " --loss 0.06 --duplicate 0.04 --reorder 0.05 --invalid 0.05"
                                  " --seed 7 239.17.0.1:4001")
                      .code,
                  0);
        const auto truth = nlohmann::json::parse(slurp(dir / "t.json"));
        const std::string common =
            std::string(" -r g.pcap --vdif-frames-per-second 20 ") + run.group;
        Result r = ibvcap(dir, "read -q -F vdif -o u --report u.json" + common);
        ASSERT_EQ(r.code, 3) << r.err;  // the injected loss
        r = ibvcap(dir, "read -q -F vdif --ordered -o o --report o.json" + common);
        ASSERT_EQ(r.code, 3) << r.err;
        const auto unordered = nlohmann::json::parse(slurp(dir / "u.json"));
        const auto ordered = nlohmann::json::parse(slurp(dir / "o.json"));
        ASSERT_EQ(unordered["streams"].size(), truth["streams"].size());
        EXPECT_EQ(unordered["totals"]["missing"], truth["totals"]["missing"]);
        EXPECT_EQ(unordered["totals"]["invalid"], truth["totals"]["invalid"]);

        // Unordered: each file is its stream's frames as they arrived.
        const auto u_files = vdif_outputs(unordered);
        ASSERT_EQ(u_files.size(), truth["streams"].size());
        std::map<std::pair<std::string, vdifio::StreamKey>, FileRead> u_reads;
        std::uint64_t total_missing = 0;
        for (const auto& [path, o] : u_files) {
            SCOPED_TRACE(path);
            FileRead f = read_vdif_file(dir / path, fps);
            const std::string antenna = o["antenna"].get<std::string>();
            const nlohmann::json* s = report_stream(unordered, antenna, f.key);
            ASSERT_NE(s, nullptr);
            for (const auto& sum :
                 {std::tie(f.v.frames, f.v.invalid, f.v.missing, f.v.duplicates),
                  std::tie(f.b.frames, f.b.invalid, f.b.missing, f.b.duplicates)}) {
                EXPECT_EQ(std::get<0>(sum), (*s)["packets"]);
                EXPECT_EQ(std::get<1>(sum), (*s)["invalid"]);
                EXPECT_EQ(std::get<2>(sum), (*s)["missing"]);
                EXPECT_EQ(std::get<3>(sum), (*s)["duplicates"]);
            }
            EXPECT_EQ((std::pair<std::uint64_t, std::uint64_t>{f.v.first_seconds, f.v.first_frame}),
                      position_json((*s)["first"]));
            EXPECT_EQ((std::pair<std::uint64_t, std::uint64_t>{f.v.last_seconds, f.v.last_frame}),
                      position_json((*s)["last"]));
            EXPECT_EQ(
                (std::tie(f.b.first_seconds, f.b.first_frame, f.b.last_seconds, f.b.last_frame)),
                (std::tie(f.v.first_seconds, f.v.first_frame, f.v.last_seconds, f.v.last_frame)));
            total_missing += f.v.missing;
            u_reads.emplace(std::pair{antenna, f.key}, std::move(f));
        }
        EXPECT_EQ(total_missing, truth["totals"]["missing"]);
        EXPECT_GT(total_missing, 0u);

        // Ordered: each stream's slots once each, in order, a fill frame at
        // each slot the unordered file lacks, every other frame as it came.
        const auto o_files = vdif_outputs(ordered);
        ASSERT_EQ(o_files.size(), u_files.size());
        std::uint64_t fills_seen = 0;
        for (const auto& [path, o] : o_files) {
            SCOPED_TRACE(path);
            FileRead f = read_vdif_file(dir / path, fps);
            const std::string antenna = o["antenna"].get<std::string>();
            const auto u = u_reads.find({antenna, f.key});
            ASSERT_NE(u, u_reads.end());
            std::map<std::uint64_t, const FileFrame*> received;  // slot -> first arrival
            for (const FileFrame& x : u->second.frames) {
                received.emplace(x.slot, &x);
            }
            ASSERT_FALSE(received.empty());
            std::set<std::uint64_t> lost;
            for (std::uint64_t slot = received.begin()->first; slot <= received.rbegin()->first;
                 ++slot) {
                if (!received.contains(slot)) {
                    lost.insert(slot);
                }
            }
            EXPECT_EQ(lost.size(), u->second.v.missing);
            std::set<std::uint64_t> fills;
            std::uint64_t previous = 0;
            for (std::size_t i = 0; i < f.frames.size(); ++i) {
                const FileFrame& x = f.frames[i];
                if (i > 0) {
                    EXPECT_GT(x.slot, previous) << "frame " << i;
                }
                previous = x.slot;
                if (x.fill) {
                    EXPECT_TRUE(x.invalid)
                        << "a fill frame without its invalid bit, slot " << x.slot;
                    fills.insert(x.slot);
                    continue;
                }
                const auto it = received.find(x.slot);
                ASSERT_NE(it, received.end()) << "slot " << x.slot << " was never received";
                EXPECT_EQ(x.bytes, it->second->bytes) << "slot " << x.slot;
            }
            EXPECT_EQ(fills, lost);
            EXPECT_EQ(f.frames.size(), received.size() + lost.size());
            // baseband reads every slot, the fills as invalid frames.
            EXPECT_EQ(f.b.frames, received.size() + lost.size());
            EXPECT_EQ(f.b.missing, 0u);
            EXPECT_EQ(f.b.duplicates, 0u);
            std::uint64_t invalid_received = 0;
            for (const auto& [slot, x] : received) {
                invalid_received += x->invalid ? 1 : 0;
            }
            EXPECT_EQ(f.b.invalid, invalid_received + lost.size());
            EXPECT_EQ(f.b.filled, invalid_received + lost.size());
            // vdifio (vdifmux) skips a frame ending in the fill pattern: it
            // sees the received frames, and each fill as a missing slot.
            EXPECT_EQ(f.v.frames, received.size());
            EXPECT_EQ(f.v.missing, lost.size());
            EXPECT_EQ(f.v.duplicates, 0u);
            EXPECT_EQ(f.v.invalid, invalid_received);
            EXPECT_EQ(f.v_walk.fill_bytes,
                      lost.size() * (f.frames.empty() ? 0 : f.frames.front().bytes.size()));
            EXPECT_EQ(
                (std::tie(f.v.first_seconds, f.v.first_frame, f.v.last_seconds, f.v.last_frame)),
                (std::tie(u->second.v.first_seconds, u->second.v.first_frame,
                          u->second.v.last_seconds, u->second.v.last_frame)));
            EXPECT_EQ(o["ordered"]["fills"], lost.size());
            fills_seen += fills.size();
        }
        EXPECT_EQ(fills_seen, truth["totals"]["missing"]);
        EXPECT_EQ(ordered["totals"]["fills"], fills_seen);
    }
}

}  // namespace
}  // namespace ibvcap::test
