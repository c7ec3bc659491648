// Frame windows (issue 45; lib/demux/window.hpp, lib/core/utc.hpp): UTC
// instants as operators write them, a window in each stream's frame indices,
// the tracker anchored at the window's start, the demux counting what lies
// outside, the edges' missing frames, and `ibvcap read --start-at --stop-at`
// as typed, checked frame by frame against the generator's truth.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.hpp"
#include "formats/codif.hpp"
#include "frames.hpp"
#include "lib/core/utc.hpp"
#include "lib/demux/demux.hpp"
#include "lib/demux/window.hpp"
#include "lib/ledger/report.hpp"
#include "lib/run/common.hpp"
#include "lib/run/run_window.hpp"
#include "lib/run/schedule.hpp"

namespace ibvcap {
namespace {

constexpr std::uint32_t kGroup = 0xEF110001;  // 239.17.0.1
constexpr std::uint16_t kPort = 36001;
constexpr std::uint32_t kA = 0x0A00000B;  // 10.0.0.11
constexpr std::uint32_t kB = 0x0A00000C;  // 10.0.0.12
constexpr std::int64_t kSecond = 1'000'000'000;
// Epoch 52 (the test frames'): 2026-01-01T00:00:00Z.
constexpr std::int64_t kEpoch52 = 1767225600LL * kSecond;

std::int64_t utc(const char* text) {
    const auto ns = parse_utc_instant(text);
    EXPECT_TRUE(ns.has_value()) << text;
    return ns.value_or(0);
}

// ---------------------------------------------------------------------------
// UTC instants.

TEST(UtcInstant, IsoAndVexFormsReadTheSameInstant) {
    EXPECT_EQ(utc("2026-01-01T00:00:00Z"), kEpoch52);
    EXPECT_EQ(utc("2026-01-01T00:00:00"), kEpoch52);  // UTC whether or not the Z is there
    EXPECT_EQ(utc("2026-01-01 00:00:00"), kEpoch52);
    EXPECT_EQ(utc("2026y001d00h00m00s"), kEpoch52);
    EXPECT_EQ(utc("2026-11-29T10:00:00Z"), utc("2026y333d10h00m00s"));
    EXPECT_EQ(utc("2024y366d23h59m59s"), utc("2024-12-31T23:59:59Z"));  // a leap year's last day
    EXPECT_EQ(utc("2026-01-01T00:00:00.25Z"), kEpoch52 + kSecond / 4);
    EXPECT_EQ(utc("2026y001d00h00m00.000000001s"), kEpoch52 + 1);
}

TEST(UtcInstant, WhatNamesNoInstantIsRefused) {
    for (const char* bad : {"", "2026-13-01T00:00:00Z", "2026-02-29T00:00:00Z",
                            "2026-01-01T24:00:00Z", "2026-01-01T00:60:00Z", "2026-01-01T00:00:60Z",
                            "2026-01-01T00:00:00.Z", "2026-01-01T00:00:00.0000000001Z",
                            "2026-01-01T00:00:00+01:00", "2026y366d00h00m00s", "2026y000d00h00m00s",
                            "2026y001d00h00m00", "10:00:00", "1767225600", "2026-1-1T00:00:00Z"}) {
        EXPECT_FALSE(parse_utc_instant(bad).has_value()) << bad;
    }
}

TEST(UtcInstant, FormattedInstantsReadBack) {
    EXPECT_EQ(format_utc_instant(kEpoch52), "2026-01-01T00:00:00Z");
    EXPECT_EQ(format_utc_instant(kEpoch52 + kSecond / 4), "2026-01-01T00:00:00.25Z");
    EXPECT_EQ(format_utc_instant(kEpoch52 - 1), "2025-12-31T23:59:59.999999999Z");
    for (const std::int64_t t : {kEpoch52, kEpoch52 + 123456789, std::int64_t{0}, kEpoch52 - 7}) {
        EXPECT_EQ(parse_utc_instant(format_utc_instant(t)), t);
    }
}

// ---------------------------------------------------------------------------
// A window in a stream's frame indices.

TEST(WindowIndices, AnEdgeBetweenTwoFramesBelongsToTheLater) {
    // 1000 frames a second: frame i at i ms after the epoch.
    const FrameWindow w{kEpoch52 + 500 * kSecond / 1000, kEpoch52 + 2250 * kSecond / 1000};
    const WindowIndices idx = window_indices(w, 52, 1, 1000);
    EXPECT_EQ(idx.lo, 500u);
    EXPECT_EQ(idx.hi, 2250u);
    // 0.5 ms past a frame: the next frame is the first in.
    const WindowIndices mid =
        window_indices(FrameWindow{kEpoch52 + 500'500'000, kEpoch52 + 600'500'000}, 52, 1, 1000);
    EXPECT_EQ(mid.lo, 501u);
    EXPECT_EQ(mid.hi, 601u);
    // An open window, and a start before the epoch.
    const WindowIndices open = window_indices(FrameWindow{kEpoch52 - kSecond}, 52, 1, 1000);
    EXPECT_EQ(open.lo, 0u);
    EXPECT_EQ(open.hi, UINT64_MAX);
}

TEST(WindowIndices, PeriodsLongerThanASecondAndOddRatesAreExact) {
    // CODIF period 27 s with 3 frames in it: a frame every 9 s.
    const WindowIndices idx =
        window_indices(FrameWindow{kEpoch52 + 10 * kSecond, kEpoch52 + 27 * kSecond}, 52, 27, 3);
    EXPECT_EQ(idx.lo, 2u);  // 18 s
    EXPECT_EQ(idx.hi, 3u);  // 27 s is frame 3's time: not in
    // 3 frames a second: a frame every 333.33 ms.
    const WindowIndices third =
        window_indices(FrameWindow{kEpoch52 + kSecond / 3, kEpoch52 + kSecond}, 52, 1, 3);
    EXPECT_EQ(third.lo, 1u);  // 333333333 ns: frame 1 lies at 333333333.3 ns, after it
    EXPECT_EQ(third.hi, 3u);
    // Ten years into epoch 52: no overflow in the products.
    const std::int64_t far = kEpoch52 + 315'360'000LL * kSecond;
    EXPECT_EQ(window_indices(FrameWindow{far, far + kSecond}, 52, 1, 16'000'000).lo,
              315'360'000ull * 16'000'000ull);
}

// ---------------------------------------------------------------------------
// The tracker anchored at the window's start.

TEST(SequenceAnchor, AStreamThatStartsLateMissesTheFramesBeforeItsFirst) {
    SequenceTracker t;
    t.set_plausible_jump(100);
    t.anchor(1000);
    EXPECT_TRUE(t.reconciles());
    // 5000 frames after the start: far past the plausible jump, taken once
    // 16 frames agree on it (one corrupted header cannot open the gap).
    for (std::uint64_t i = 6000; i < 6015; ++i) {
        EXPECT_EQ(t.observe(i), SequenceTracker::Kind::implausible);
    }
    EXPECT_EQ(t.observe(6015), SequenceTracker::Kind::gap);
    EXPECT_EQ(t.missing(), 5000u);
    EXPECT_EQ(t.lowest(), 1000u);
    EXPECT_EQ(t.first_received(), 6000u);
    EXPECT_EQ(t.restarts(), 0u);
    EXPECT_EQ(t.implausible(), 0u);
    EXPECT_EQ(t.observe(6016), SequenceTracker::Kind::in_order);
    // The anchor's leave is for the first frame only: a later jump is implausible.
    EXPECT_EQ(t.observe(9000), SequenceTracker::Kind::implausible);
    EXPECT_TRUE(t.reconciles());
}

TEST(SequenceAnchor, OneCorruptedHeaderFarInTheWindowOpensNoGap) {
    SequenceTracker t;
    t.set_plausible_jump(100);
    t.anchor(1000);
    EXPECT_EQ(t.observe(900'000), SequenceTracker::Kind::implausible);  // a damaged header
    for (std::uint64_t i = 1000; i < 1010; ++i) {
        t.observe(i);  // the stream, from the window's start
    }
    EXPECT_EQ(t.missing(), 0u);
    EXPECT_EQ(t.implausible(), 1u);
    EXPECT_EQ(t.first_received(), 1000u);
    EXPECT_TRUE(t.reconciles());
    // Nothing placed at the anchor yet, first frames through the inline path.
    SequenceTracker u;
    u.anchor(50);
    EXPECT_EQ(u.observe(50), SequenceTracker::Kind::in_order);
    EXPECT_EQ(u.observe(51), SequenceTracker::Kind::in_order);
    EXPECT_EQ(u.observe(55), SequenceTracker::Kind::gap);
    EXPECT_EQ(u.first_received(), 50u);
}

TEST(SequenceAnchor, ALateFrameFillsTheHeadAndTheEndExtendsTheSpan) {
    SequenceTracker t;
    t.anchor(100);
    EXPECT_EQ(t.observe(100), SequenceTracker::Kind::in_order);  // the window's first frame
    EXPECT_EQ(t.missing(), 0u);
    t.observe(105);
    EXPECT_EQ(t.missing(), 4u);
    EXPECT_EQ(t.observe(103), SequenceTracker::Kind::late);
    EXPECT_EQ(t.missing(), 3u);
    t.extend_to(109);
    EXPECT_EQ(t.missing(), 7u);
    EXPECT_EQ(t.newest(), 109u);
    t.extend_to(50);  // never backwards
    EXPECT_EQ(t.newest(), 109u);
    EXPECT_TRUE(t.reconciles());
    // A frame of the extended span that still comes fills it.
    EXPECT_EQ(t.observe(108), SequenceTracker::Kind::late);
    EXPECT_EQ(t.missing(), 6u);
    EXPECT_TRUE(t.reconciles());
}

// ---------------------------------------------------------------------------
// The demux with a window.

struct Windowed {
    explicit Windowed(FrameWindow w, bool vdif = false, std::uint64_t vdif_rate = 0) {
        DemuxOptions o;
        o.groups = {Endpoint{kGroup, kPort}};
        if (vdif) {
            o.group_formats = {StreamFormat::vdif};
            o.vdif_frames_per_second = vdif_rate;
        }
        o.window = w;
        demux = std::make_unique<Demux>(o, ledger);
    }
    // The CODIF frame of index `index` (1000 a second: seconds index / 1000).
    void codif(std::uint32_t antenna, std::uint32_t index) {
        const auto bytes =
            test::make_frame(antenna, kGroup, kPort, test::make_header(index / 1000, index % 1000));
        demux->on_frame(test::whole(bytes));
    }
    void vdif(std::uint32_t antenna, std::uint32_t seconds, std::uint32_t frame) {
        const auto bytes =
            test::make_vdif_frame(antenna, kGroup, kPort, test::make_vdif_header(seconds, frame));
        demux->on_frame(test::whole(bytes));
    }
    const StreamStats& stream(std::uint32_t antenna) const {
        for (const auto& s : ledger.streams()) {
            if (s.antenna == antenna) {
                return s;
            }
        }
        throw std::runtime_error("no such stream");
    }
    Ledger ledger;
    std::unique_ptr<Demux> demux;
};

// [00:00:01.100, 00:00:01.200) at 1000 frames a second: indices 1100..1199.
FrameWindow window_1100_1200() {
    return FrameWindow{kEpoch52 + 1100 * kSecond / 1000, kEpoch52 + 1200 * kSecond / 1000};
}

TEST(DemuxWindow, FramesOutsideAreCountedNotSequencedNorPassedOn) {
    Windowed w(window_1100_1200());
    std::vector<std::uint32_t> seen;
    w.demux->add_observer([&](const Frame&, const UdpPacket&, const StreamHeader& h,
                              const StreamStats&) { seen.push_back(h.frame); });
    for (std::uint32_t f = 1090; f < 1210; ++f) {
        w.codif(kA, f);
    }
    const StreamStats& s = w.stream(kA);
    EXPECT_EQ(s.packets(), 100u);
    EXPECT_EQ(w.ledger.reason_count(Reason::before_window), 10u);
    EXPECT_EQ(w.ledger.reason_count(Reason::after_window), 10u);
    ASSERT_EQ(seen.size(), 100u);
    EXPECT_EQ(seen.front(), 100u);  // (1, 100): the window's first
    EXPECT_EQ(seen.back(), 199u);
    EXPECT_EQ(s.first.frame, 100u);
    EXPECT_EQ(s.last.frame, 199u);
    w.demux->close_window(true);
    EXPECT_EQ(s.sequence.missing(), 0u);
    EXPECT_EQ(s.window_head_missing, 0u);
    EXPECT_EQ(s.window_tail_missing, 0u);
    EXPECT_TRUE(w.ledger.reconciles()) << w.ledger.disagreement();
    EXPECT_TRUE(w.ledger.zero_loss());
    const Totals t = w.ledger.totals();
    EXPECT_EQ(t.non_codif, 20u);
    EXPECT_EQ(t.codif, 100u);
}

TEST(DemuxWindow, AStreamThatStartsLateOrStopsEarlyIsLossAtTheEdges) {
    Windowed w(window_1100_1200());
    for (std::uint32_t f = 1090; f < 1210; ++f) {
        w.codif(kA, f);
        if (f >= 1130 && f < 1180) {
            w.codif(kB, f);  // B: from 30 frames after the start, 20 before the end
        }
    }
    w.demux->close_window(true);
    const StreamStats& a = w.stream(kA);
    const StreamStats& b = w.stream(kB);
    EXPECT_EQ(a.sequence.missing(), 0u);
    EXPECT_EQ(b.packets(), 50u);
    EXPECT_EQ(b.window_head_missing, 30u);
    EXPECT_EQ(b.window_tail_missing, 20u);
    EXPECT_EQ(b.sequence.missing(), 50u);
    EXPECT_EQ(b.first.frame, 130u);
    EXPECT_EQ(b.window_first.frame, 100u);
    EXPECT_EQ(b.window_last.frame, 199u);
    EXPECT_TRUE(w.ledger.reconciles()) << w.ledger.disagreement();
    EXPECT_FALSE(w.ledger.zero_loss());
    const auto why = w.ledger.loss_reasons();
    EXPECT_NE(std::find(why.begin(), why.end(),
                        "1 stream started after the window's start: 30 of the missing frames lie "
                        "before its first frame in it"),
              why.end());
    EXPECT_NE(std::find(why.begin(), why.end(),
                        "1 stream stopped before the window's end: 20 of the missing frames lie "
                        "after its last frame in it"),
              why.end());
}

TEST(DemuxWindow, WithoutTheEndSeenOnlyTheHeadCounts) {
    Windowed w(window_1100_1200());
    for (std::uint32_t f = 1110; f < 1150; ++f) {
        w.codif(kA, f);
    }
    w.demux->close_window(false);  // stopped by a signal mid-window
    const StreamStats& a = w.stream(kA);
    EXPECT_EQ(a.window_head_missing, 10u);
    EXPECT_EQ(a.window_tail_missing, 0u);
    EXPECT_EQ(a.sequence.missing(), 10u);
}

TEST(DemuxWindow, ALateFrameOfTheHeadFillsIt) {
    Windowed w(window_1100_1200());
    for (std::uint32_t f = 1105; f < 1200; ++f) {
        w.codif(kA, f);
    }
    w.codif(kA, 1102);  // reordered: came after its successors
    w.demux->close_window(true);
    const StreamStats& a = w.stream(kA);
    EXPECT_EQ(a.first.frame, 102u);
    EXPECT_EQ(a.window_head_missing, 2u);  // 1100 and 1101
    EXPECT_EQ(a.sequence.missing(), 4u);   // and 1103, 1104
    EXPECT_TRUE(w.ledger.reconciles()) << w.ledger.disagreement();
}

TEST(DemuxWindow, AStreamWithNoFrameInTheWindowMissesAllOfIt) {
    Windowed w(window_1100_1200());
    for (std::uint32_t f = 1000; f < 1050; ++f) {
        w.codif(kA, f);  // stopped before the window
    }
    w.demux->close_window(true);
    const StreamStats& a = w.stream(kA);
    EXPECT_EQ(a.packets(), 0u);
    EXPECT_EQ(a.sequence.missing(), 100u);
    EXPECT_EQ(a.window_head_missing, 100u);
    EXPECT_EQ(w.ledger.reason_count(Reason::before_window), 50u);
    EXPECT_TRUE(w.ledger.reconciles()) << w.ledger.disagreement();
    EXPECT_FALSE(w.ledger.zero_loss());
}

TEST(DemuxWindow, AVdifRateBeingLearnedIsJudgedByItsSeconds) {
    // Whole seconds 2 and 3; the rate (100 a second) learned from the frames.
    Windowed w(FrameWindow{kEpoch52 + 2 * kSecond, kEpoch52 + 4 * kSecond}, true);
    for (std::uint32_t sec = 1; sec < 6; ++sec) {
        for (std::uint32_t f = 0; f < 100; ++f) {
            if (sec == 2 && f < 10) {
                continue;  // the window's first 10 frames never came
            }
            w.vdif(kA, sec, f);
        }
    }
    w.demux->close_window(true);
    const StreamStats& a = w.stream(kA);
    EXPECT_EQ(a.timing.frames_per_period, 100u);
    EXPECT_EQ(a.packets(), 190u);
    EXPECT_EQ(w.ledger.reason_count(Reason::before_window), 100u);
    EXPECT_EQ(w.ledger.reason_count(Reason::after_window), 200u);
    EXPECT_EQ(a.first.seconds, 2u);
    EXPECT_EQ(a.first.frame, 10u);
    EXPECT_EQ(a.window_head_missing, 10u);
    EXPECT_EQ(a.sequence.missing(), 10u);
    EXPECT_EQ(a.window_last.seconds, 3u);
    EXPECT_EQ(a.window_last.frame, 99u);
    EXPECT_TRUE(w.ledger.reconciles()) << w.ledger.disagreement();
}

TEST(DemuxWindow, TheReportGivesTheWindowAndEachStreamsEdges) {
    Windowed w(window_1100_1200());
    for (std::uint32_t f = 1130; f < 1200; ++f) {
        w.codif(kA, f);
    }
    w.demux->close_window(true);
    RunInfo info;
    WindowInfo wi;
    wi.start_ns = window_1100_1200().start_ns;
    wi.stop_ns = window_1100_1200().stop_ns;
    wi.grace_s = 2;
    wi.saw_end = true;
    info.window = wi;
    const nlohmann::json j = report_json(w.ledger, info);
    EXPECT_EQ(j["window"]["start"], "2026-01-01T00:00:01.1Z");
    EXPECT_EQ(j["window"]["stop"], "2026-01-01T00:00:01.2Z");
    EXPECT_EQ(j["window"]["saw_end"], true);
    const auto& s = j["streams"][0];
    EXPECT_EQ(s["window"]["first"]["frame"], 100);
    EXPECT_EQ(s["window"]["last"]["frame"], 199);
    EXPECT_EQ(s["window"]["missing_before_first"], 30);
    EXPECT_EQ(s["window"]["missing_after_last"], 0);
    EXPECT_EQ(s["first"]["frame"], 130);
    EXPECT_EQ(j["verdict"], "loss");
}

// ---------------------------------------------------------------------------
// `ibvcap read --start-at --stop-at` as typed, against the generator's truth.

struct CodifRecord {
    std::uint32_t seconds;
    std::uint32_t frame;
};
// The records of a -F codif file: back-to-back frames of `frame_bytes`.
std::vector<CodifRecord> codif_records(const std::string& path, std::size_t frame_bytes) {
    std::ifstream in(path, std::ios::binary);
    std::vector<std::uint8_t> buf(frame_bytes);
    std::vector<CodifRecord> out;
    while (
        in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(frame_bytes))) {
        CodifHeader h;
        EXPECT_EQ(decode_codif(Bytes(buf.data(), kCodifHeaderBytes), h), CodifError::none);
        out.push_back({h.seconds, h.frame});
    }
    return out;
}

// g.pcap in `dir`: `ibvcap gen` of 256-byte payloads at 1000 frames a
// second with `options` (antennas, threads, count, start, groups).
void generate(const test::TempDir& dir, const std::string& options) {
    const auto r =
        test::ibvcap(dir, "gen -q -w g.pcap --payload 256 --frames-per-period 1000 " + options);
    ASSERT_EQ(r.code, 0) << r.err;
}

TEST(ReadWindow, EveryStreamsFileHoldsExactlyTheWindowsFrames) {
    test::TempDir dir;
    // Two antennas, 3000 frames each: 2026-01-01T00:00:00 to 00:00:02.999.
    generate(dir, "--antennas 2 --threads 1 -c 3000 239.17.0.1:36001");
    const auto r =
        test::ibvcap(dir,
                     "read -q -r g.pcap -F codif -F pcap -o out --report r.json "
                     "--start-at 2026-01-01T00:00:00.5Z --stop-at 2026y001d00h00m02.25s");
    ASSERT_EQ(r.code, 0) << r.err << r.out;
    const auto j = nlohmann::json::parse(test::slurp(dir / "r.json"));
    EXPECT_EQ(j["stopped_by"], "end_of_input");
    EXPECT_EQ(j["window"]["saw_end"], true);
    EXPECT_EQ(j["reasons"]["non_codif"]["before_window"], 1000);
    EXPECT_EQ(j["reasons"]["non_codif"]["after_window"], 1500);
    ASSERT_EQ(j["streams"].size(), 2u);
    for (const auto& s : j["streams"]) {
        EXPECT_EQ(s["packets"], 1750);
        EXPECT_EQ(s["missing"], 0);
    }
    ASSERT_EQ(j["outputs"].size(), 3u);
    for (const auto& o : j["outputs"]) {
        if (o["format"] == "pcap") {
            EXPECT_EQ(o["packets"], 3500) << "the pcap holds the window's frames only";
            continue;
        }
        const auto recs = codif_records(dir / o["path"].get<std::string>(), 64 + 256);
        ASSERT_EQ(recs.size(), 1750u) << o["path"];
        EXPECT_EQ(recs.front().seconds, 0u);
        EXPECT_EQ(recs.front().frame, 500u);
        EXPECT_EQ(recs.back().seconds, 2u);
        EXPECT_EQ(recs.back().frame, 249u);
    }
}

TEST(ReadWindow, AWindowWiderThanTheRecordingIsLossAtBothEdgesWithTheCause) {
    test::TempDir dir;
    generate(dir, "--antennas 1 --threads 1 -c 1000 --start-seconds 1 239.17.0.1:36001");
    const auto r =
        test::ibvcap(dir,
                     "read -r g.pcap --report r.json "
                     "--start-at 2026-01-01T00:00:00.9Z --stop-at 2026-01-01T00:00:02.05Z");
    EXPECT_EQ(r.code, 3) << r.err << r.out;
    EXPECT_NE(r.out.find("1 stream started after the window's start: 100 of the missing frames"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("1 stream stopped before the window's end: 50 of the missing frames"),
              std::string::npos)
        << r.out;
    const auto j = nlohmann::json::parse(test::slurp(dir / "r.json"));
    EXPECT_EQ(j["streams"][0]["missing"], 150);
    EXPECT_EQ(j["streams"][0]["window"]["missing_before_first"], 100);
}

TEST(ReadWindow, BadWindowsAreOneLineUsageErrors) {
    test::TempDir dir;
    const struct {
        const char* args;
        const char* says;
    } cases[] = {
        {"--start-at 10:00", "bad --start-at '10:00': give a UTC time as 2026-11-29T10:00:00Z"},
        {"--stop-at 2026-02-30T00:00:00Z", "bad --stop-at"},
        {"--start-at 2026-01-01T00:00:01Z --stop-at 2026-01-01T00:00:01Z",
         "--stop-at 2026-01-01T00:00:01Z is not after --start-at 2026-01-01T00:00:01Z"},
        {"--window-grace 1", "--window-grace applies only with --start-at or --stop-at"},
        {"--stop-at 2026-01-01T00:00:01Z --window-grace -1", "bad --window-grace -1"},
        {"--stream-format vdif --start-at 2026-01-01T00:00:00.5Z",
         "a VDIF frame's time within its second needs the frame rate"},
    };
    for (const auto& c : cases) {
        const auto r = test::ibvcap(dir, std::string("read -r none.pcap ") + c.args);
        EXPECT_EQ(r.code, 2) << c.args << ": " << r.err;
        EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << ": " << r.err;
        EXPECT_EQ(test::lines(r.err), 1u) << r.err;
    }
}

TEST(CaptureWindow, APastStopIsRefusedBeforeAnythingIsSetUp) {
    test::TempDir dir;
    const auto r = test::ibvcap(
        dir, "capture --source pcap -i lo --stop-at 2026-01-01T00:00:00Z 239.17.0.1:36001");
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("the window's stop 2026-01-01T00:00:00Z is past"), std::string::npos)
        << r.err;
    const auto both = test::ibvcap(dir,
                                   "capture --source pcap -i lo --start-at 2099-01-01T00:00:00Z "
                                   "--stop-at 2099-01-01T00:01:00Z --duration 5 239.17.0.1:36001");
    EXPECT_EQ(both.code, 2) << both.err;
    EXPECT_NE(both.err.find("give --stop-at or --duration, not both"), std::string::npos)
        << both.err;
    std::ofstream(dir / "old.sched") << "s1 2026-01-01T00:00:00Z 2026-01-01T00:01:00Z\n";
    const auto over = test::ibvcap(
        dir, "capture --source pcap -i lo --schedule old.sched --scan s1 239.17.0.1:36001");
    EXPECT_EQ(over.code, 2) << over.err;
    EXPECT_NE(over.err.find("scan s1 is over: give --scan next"), std::string::npos) << over.err;
    EXPECT_EQ(test::lines(over.err), 1u) << over.err;
}

}  // namespace
}  // namespace ibvcap

// ---------------------------------------------------------------------------
// A site's schedule (lib/run/schedule.hpp).

namespace ibvcap {
namespace {

TEST(Schedule, ScansAreReadInStartOrderWithTheirLists) {
    const auto scans = parse_schedule(
        "# R1234\n"
        "no0043 2026-11-29T10:17:00Z 2026-11-29T10:30:00Z groups=239.17.0.1:36001/vdif "
        "formats=vdif\n"
        "\n"
        "no0042   2026y333d10h00m00s   2026y333d10h15m00s   # the first\n",
        "r1234.sched");
    ASSERT_EQ(scans.size(), 2u);
    EXPECT_EQ(scans[0].name, "no0042");
    EXPECT_EQ(scans[0].line, 4u);
    EXPECT_EQ(scans[0].window.start_ns, utc("2026-11-29T10:00:00Z"));
    EXPECT_TRUE(scans[0].groups.empty());
    EXPECT_EQ(scans[1].name, "no0043");
    EXPECT_EQ(scans[1].groups, std::vector<std::string>{"239.17.0.1:36001/vdif"});
    EXPECT_EQ(scans[1].formats, std::vector<std::string>{"vdif"});
    const std::int64_t at_10_16 = utc("2026-11-29T10:16:00Z");
    EXPECT_EQ(select_scan(scans, "next", at_10_16, "f").name, "no0043");
    EXPECT_EQ(select_scan(scans, "next", utc("2026-11-29T10:05:00Z"), "f").name, "no0042");
    EXPECT_EQ(select_scan(scans, "no0042", at_10_16, "f").name, "no0042");
    EXPECT_THROW(select_scan(scans, "next", utc("2026-11-29T11:00:00Z"), "f"), std::runtime_error);
}

TEST(Schedule, ALineThatCannotBeReadRefusesTheWholeFileNamingIt) {
    const struct {
        const char* text;
        const char* says;
    } cases[] = {
        {"a 2026-11-29T10:00:00Z\n", "schedule s line 1: a scan is NAME START STOP"},
        {"ok 2026-11-29T10:00:00Z 2026-11-29T10:01:00Z\nb 10:00 2026-11-29T10:03:00Z\n",
         "schedule s line 2: bad time '10:00'"},
        {"a 2026-11-29T10:00:00Z 2026-11-29T10:00:00Z\n",
         "scan a stops at 2026-11-29T10:00:00Z, not after its start"},
        {"../x 2026-11-29T10:00:00Z 2026-11-29T10:01:00Z\n", "bad scan name '../x'"},
        {"a 2026-11-29T10:00:00Z 2026-11-29T10:01:00Z\na 2026-11-29T11:00:00Z "
         "2026-11-29T11:01:00Z\n",
         "schedule s line 2: scan a is named twice"},
        {"a 2026-11-29T10:00:00Z 2026-11-29T10:01:00Z mode=x\n", "unknown 'mode=x'"},
        {"a 2026-11-29T10:00:00Z 2026-11-29T10:01:00Z groups=\n", "an empty entry"},
        {"a 2026-11-29T10:00:00Z 2026-11-29T10:10:00Z\nb 2026-11-29T10:09:00Z "
         "2026-11-29T10:20:00Z\n",
         "schedule s line 2: scan b starts at 2026-11-29T10:09:00Z, before scan a (line 1) "
         "stops at 2026-11-29T10:10:00Z: scans may not overlap"},
    };
    for (const auto& c : cases) {
        try {
            parse_schedule(c.text, "s");
            ADD_FAILURE() << "accepted: " << c.text;
        } catch (const std::runtime_error& e) {
            EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
        }
    }
}

// One capture of several scans (--schedule with no --scan) takes the scans
// still to come, and refuses what one set-up cannot record, naming the line.
TEST(Schedule, OneCaptureTakesTheScansToComeAndRefusesScansTooCloseForIt) {
    const auto scans = parse_schedule(
        "a 2026-11-29T10:00:00Z 2026-11-29T10:01:00Z\n"
        "b 2026-11-29T10:01:03Z 2026-11-29T10:02:00Z\n"
        "c 2026-11-29T10:02:03Z 2026-11-29T10:03:00Z formats=vdif\n"
        "d 2026-11-29T10:04:00Z 2026-11-29T10:05:00Z\n",
        "s");
    const std::int64_t at = utc("2026-11-29T10:01:30Z");
    // a is over; c names its formats (one capture opens them once).
    try {
        scans_to_come(scans, at, 2, "s");
        ADD_FAILURE() << "c's formats= accepted";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("schedule s line 3: scan c names its own formats="),
                  std::string::npos)
            << e.what();
    }
    const auto fine = parse_schedule(
        "a 2026-11-29T10:00:00Z 2026-11-29T10:01:00Z\n"
        "b 2026-11-29T10:01:03Z 2026-11-29T10:02:00Z\n"
        "d 2026-11-29T10:04:00Z 2026-11-29T10:05:00Z\n",
        "s");
    const auto left = scans_to_come(fine, at, 2, "s");
    ASSERT_EQ(left.size(), 2u);
    EXPECT_EQ(left[0].name, "b");
    EXPECT_EQ(left[1].name, "d");
    // b starts 3 s after a stops: enough for a grace of 2 s and the set-up's
    // 1 s, not for 2.5 s.
    EXPECT_EQ(scans_to_come(fine, utc("2026-11-29T09:00:00Z"), 2, "s").size(), 3u);
    try {
        scans_to_come(fine, utc("2026-11-29T09:00:00Z"), 2.5, "s");
        ADD_FAILURE() << "a gap shorter than the grace and set-up accepted";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("schedule s line 2: scan b starts 3.000 s after scan "
                                             "a stops; one capture needs 3.5 s between scans"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_THROW(scans_to_come(fine, utc("2026-11-29T11:00:00Z"), 2, "s"), std::runtime_error);
}

TEST(Schedule, TheCapturesExitCodeIsItsWorstScans) {
    EXPECT_EQ(worse_exit_code(kExitZeroLoss, kExitLoss), kExitLoss);
    EXPECT_EQ(worse_exit_code(kExitLoss, kExitZeroLoss), kExitLoss);
    EXPECT_EQ(worse_exit_code(kExitLoss, kExitError), kExitError);
    EXPECT_EQ(worse_exit_code(kExitError, kExitLoss), kExitError);
    EXPECT_EQ(worse_exit_code(kExitZeroLoss, kExitZeroLoss), kExitZeroLoss);
}

// The CLI as typed: read takes one scan; a capture of several scans refuses
// what it cannot do per scan, before anything is set up.
TEST(Schedule, OneCaptureOfSeveralScansRefusesWhatItCannotDoPerScan) {
    test::TempDir dir;
    std::ofstream(dir / "site.sched") << "s1 2036-01-01T00:00:00Z 2036-01-01T00:01:00Z\n"
                                         "s2 2036-01-01T00:02:00Z 2036-01-01T00:03:00Z\n";
    const struct {
        const char* args;
        const char* says;
    } cases[] = {
        {"read -r none.pcap --schedule site.sched", "read takes one scan of --schedule site.sched"},
        {"capture --source pcap -i lo --schedule site.sched --duration 5 239.17.0.1:36001",
         "--duration with --schedule: the capture ends after the schedule's last scan"},
        {"capture --source pcap -i lo --schedule site.sched --html page.html 239.17.0.1:36001",
         "put {scan} in the path"},
        {"capture --source pcap -i lo --schedule site.sched --metrics-file '{scan}.prom' "
         "239.17.0.1:36001",
         "leave {scan} out of it"},
    };
    for (const auto& c : cases) {
        const auto r = test::ibvcap(dir, c.args);
        EXPECT_EQ(r.code, 2) << c.args << ": " << r.err;
        EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << ": " << r.err;
    }
}

TEST(ReadWindow, AScanOfTheScheduleWritesIntoItsOwnDirectory) {
    test::TempDir dir;
    generate(dir, "--antennas 1 --threads 1 -c 3000 239.17.0.1:36001 239.17.0.2:36001");
    std::ofstream(dir / "site.sched")
        << "# scans of frame time 2026-01-01\n"
           "s1 2026-01-01T00:00:00.5Z 2026-01-01T00:00:01Z groups=239.17.0.1:36001\n"
           "s2 2026-01-01T00:00:02Z   2026-01-01T00:00:02.5Z\n";
    for (const char* scan : {"s1", "s2"}) {
        const auto r = test::ibvcap(dir, fmt::format("read -q -r g.pcap -F codif -o out "
                                                     "--report '{{scan}}.json' --schedule "
                                                     "site.sched --scan {} 239.17.0.2:36001",
                                                     scan));
        if (std::string(scan) == "s1") {
            // s1 names its groups: the command line's are refused.
            EXPECT_EQ(r.code, 2) << r.err;
            EXPECT_NE(r.err.find("scan s1 names its groups (schedule line 2): leave GROUP:PORT "
                                 "off the command line"),
                      std::string::npos)
                << r.err;
            const auto ok = test::ibvcap(dir,
                                         "read -q -r g.pcap -F codif -o out --report "
                                         "'{scan}.json' --schedule site.sched --scan s1");
            ASSERT_EQ(ok.code, 0) << ok.err;
        } else {
            ASSERT_EQ(r.code, 0) << r.err;
        }
        const auto j = nlohmann::json::parse(test::slurp(dir / (std::string(scan) + ".json")));
        EXPECT_EQ(j["window"]["scan"], scan);
        ASSERT_EQ(j["streams"].size(), 1u);
        EXPECT_EQ(j["streams"][0]["packets"], 500);
        EXPECT_EQ(j["streams"][0]["group"],
                  std::string(scan) == "s1" ? "239.17.0.1:36001" : "239.17.0.2:36001");
        ASSERT_EQ(j["outputs"].size(), 1u);
        EXPECT_EQ(j["outputs"][0]["path"].get<std::string>().rfind(fmt::format("out/{}/", scan), 0),
                  0u)
            << j["outputs"][0]["path"];
    }
    std::ofstream(dir / "bad.sched") << "s1 2026-01-01T00:00:00Z 2026-01-01T00:00:01Z "
                                        "groups=239.17.0.1\n";
    const auto bad = test::ibvcap(dir, "read -r g.pcap --schedule bad.sched --scan s1");
    EXPECT_EQ(bad.code, 2);
    EXPECT_NE(bad.err.find("schedule bad.sched line 1:"), std::string::npos) << bad.err;
    const auto none = test::ibvcap(dir, "read -r g.pcap --schedule site.sched --scan s9");
    EXPECT_EQ(none.code, 2);
    EXPECT_NE(none.err.find("no scan s9 in the schedule site.sched (its scans: s1, s2)"),
              std::string::npos)
        << none.err;
    const auto both = test::ibvcap(
        dir, "read -r g.pcap --schedule site.sched --scan s1 --start-at 2026-01-01T00:00:00Z");
    EXPECT_EQ(both.code, 2);
    EXPECT_NE(both.err.find("--start-at with --schedule"), std::string::npos) << both.err;
}

}  // namespace
}  // namespace ibvcap

// ---------------------------------------------------------------------------
// The run's notes about its window (lib/run/run_window.hpp).

namespace ibvcap {
namespace {

TEST(WindowNotes, AClockStepLateStartAndEarlyEndAreNoted) {
    const FrameWindow w{kEpoch52, kEpoch52 + 60 * kSecond};
    RunInfo info;
    WindowInfo wi;
    wi.start_ns = w.start_ns;
    wi.stop_ns = w.stop_ns;
    wi.started_late_s = 3.25;
    wi.saw_end = false;
    info.window = wi;
    info.stopped_by = "sigterm";
    EXPECT_EQ(window_notes(info).size(), 2u);
    ClockFigures c;
    c.host_steps = 1;
    c.host_step_max_ns = 1'500'000'000;
    info.clocks.push_back(c);
    const auto notes = window_notes(info);
    ASSERT_EQ(notes.size(), 3u);
    EXPECT_NE(notes[0].find("the capture started 3.250 s after the window's start "
                            "2026-01-01T00:00:00Z"),
              std::string::npos)
        << notes[0];
    EXPECT_NE(notes[1].find("a clock stepped during the window (1 host step, the largest 1.500 s"),
              std::string::npos)
        << notes[1];
    EXPECT_NE(notes[2].find("the run ended (SIGTERM) before the window's end 2026-01-01T00:01:00Z"),
              std::string::npos)
        << notes[2];
    info.window->saw_end = true;
    info.window->started_late_s = 0;
    info.clocks.clear();
    EXPECT_TRUE(window_notes(info).empty());
    info.window.reset();
    EXPECT_TRUE(window_notes(info).empty());
}

}  // namespace
}  // namespace ibvcap
