// The demux on VDIF and VTP groups (issue 28; docs/formats.md, "Stream
// formats" and "VDIF frame rates"): streams keyed by station and thread,
// the rate given or learned from a whole second, the VTP sequence numbers as
// a second witness, and CODIF and VDIF groups side by side in one run.
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "frames.hpp"
#include "lib/demux/demux.hpp"
#include "lib/ledger/report.hpp"

namespace ibvcap {
namespace {

using test::kAntenna1;
using test::kAntenna2;
using test::kGroup1;
using test::kGroup2;
using test::make_vdif_frame;
using test::make_vdif_header;

constexpr std::uint16_t kPort = 36001;

using test::whole;

DemuxOptions vdif_options(std::uint64_t fps, StreamFormat format = StreamFormat::vdif) {
    DemuxOptions o;
    o.groups = {Endpoint{kGroup1, kPort}};
    o.group_formats = {format};
    o.vdif_frames_per_second = fps;
    return o;
}

void feed(Demux& demux, std::uint32_t seconds, std::uint32_t frame, std::uint16_t thread = 0,
          std::uint16_t station = 0x4142, std::int64_t psn = -1) {
    demux.on_frame(whole(make_vdif_frame(kAntenna1, kGroup1, kPort,
                                         make_vdif_header(seconds, frame, thread, station), psn)));
}

// Every frame of (seconds, frames) runs over the rate, the ones in `lost` left out.
void feed_run(Demux& demux, std::uint32_t first_second, std::uint32_t first_frame,
              std::uint64_t frames, std::uint64_t rate,
              const std::vector<std::uint64_t>& lost = {}) {
    std::uint64_t index = std::uint64_t{first_second} * rate + first_frame;
    for (std::uint64_t i = 0; i < frames; ++i, ++index) {
        if (std::find(lost.begin(), lost.end(), i) != lost.end()) {
            continue;
        }
        feed(demux, static_cast<std::uint32_t>(index / rate),
             static_cast<std::uint32_t>(index % rate));
    }
}

TEST(DemuxVdif, StreamsAreKeyedByStationAndThreadAndCountedAcrossSeconds) {
    Ledger ledger;
    Demux demux(vdif_options(100), ledger);
    // Two stations from one source, thread 3 each, and a second thread.
    for (std::uint32_t f = 95; f < 100; ++f) {
        feed(demux, 7, f, 3, 0x4142);
        feed(demux, 7, f, 3, 0x4243);
        feed(demux, 7, f, 4, 0x4142);
    }
    // Across the second: frame 99 of second 7 to frame 2 of second 8 skips
    // two (0 and 1).
    feed(demux, 8, 2, 3, 0x4142);
    ASSERT_EQ(ledger.streams().size(), 3u);
    const StreamStats& s = ledger.streams()[0];
    EXPECT_EQ(s.format, StreamFormat::vdif);
    EXPECT_EQ(s.station, 0x4142);
    EXPECT_EQ(s.thread, 3);
    EXPECT_EQ(s.rate, StreamStats::Rate::given);
    EXPECT_EQ(s.timing.frames_per_period, 100u);
    EXPECT_EQ(s.packets(), 6u);
    EXPECT_EQ(s.sequence.missing(), 2u);
    EXPECT_EQ(ledger.streams()[1].station, 0x4243);
    EXPECT_EQ(ledger.streams()[2].thread, 4);
    EXPECT_EQ(ledger.totals().codif, 16u);
    EXPECT_TRUE(ledger.reconciles());
}

TEST(DemuxVdif, TheRateIsLearnedFromTheFirstSecondAndConfirmedByAWholeOne) {
    Ledger ledger;
    Demux demux(vdif_options(0), ledger);
    // Starts at frame 600 of second 10, 250 frames a second; 4 seconds, with
    // frames 100 and 101 of the run (in the first second, before the rate is
    // known) and 700 (in the fourth) lost, and one reordered late in the
    // first second.
    constexpr std::uint64_t kRate = 250;
    std::uint64_t index = 10 * kRate + 200;  // second 10, frame 200
    std::vector<std::pair<std::uint32_t, std::uint32_t>> frames;
    for (std::uint64_t i = 0; i < 3 * kRate; ++i, ++index) {
        if (i == 20 || i == 21 || i == 700) {
            continue;
        }
        frames.emplace_back(static_cast<std::uint32_t>(index / kRate),
                            static_cast<std::uint32_t>(index % kRate));
    }
    std::swap(frames[5], frames[6]);  // a late frame while learning
    for (const auto& [s, f] : frames) {
        feed(demux, s, f);
    }
    ASSERT_EQ(ledger.streams().size(), 1u);
    const StreamStats& st = ledger.streams()[0];
    EXPECT_EQ(st.rate, StreamStats::Rate::learned);
    EXPECT_TRUE(st.rate_confirmed);
    EXPECT_EQ(st.timing.frames_per_period, kRate);
    EXPECT_EQ(st.sequence.missing(), 3u);
    EXPECT_EQ(st.sequence.out_of_order(), 1u);
    EXPECT_EQ(st.packets(), 3 * kRate - 3);
    EXPECT_EQ(st.first.seconds, 10u);
    EXPECT_EQ(st.first.frame, 200u);
    EXPECT_TRUE(st.sequence.reconciles());
    EXPECT_TRUE(ledger.reconciles());
    // A frame of the first second that comes after the rate was learned
    // fills its gap at the learned index.
    feed(demux, 10, 220);
    EXPECT_EQ(ledger.streams()[0].sequence.missing(), 2u);
    const auto j = report_json(ledger, RunInfo{});
    EXPECT_EQ(j["streams"][0]["rate"], "learned, confirmed");
    EXPECT_EQ(j["streams"][0]["format"], "vdif");
}

TEST(DemuxVdif, ARateLearnedTooLowIsRaisedAndItsLostFramesCounted) {
    Ledger ledger;
    Demux demux(vdif_options(0), ledger);
    // 100 frames a second; the first second's last 5 (95..99) lost, so 95
    // is learned. The next second's 95..99 raise it (issue 40): the first
    // second's five are missing, nothing is refused.
    constexpr std::uint64_t kRate = 100;
    feed_run(demux, 3, 0, 95, kRate);
    feed_run(demux, 4, 0, 2 * kRate, kRate);
    ASSERT_EQ(ledger.streams().size(), 1u);
    const StreamStats& s = ledger.streams()[0];
    EXPECT_EQ(s.timing.frames_per_period, kRate);
    EXPECT_TRUE(s.rate_confirmed);
    EXPECT_EQ(ledger.reason_count(Reason::vdif_frame_beyond_rate), 0u);
    EXPECT_EQ(s.sequence.missing(), 5u);
    EXPECT_FALSE(ledger.zero_loss());
    EXPECT_EQ(report_json(ledger, RunInfo{})["streams"][0]["rate"], "learned, confirmed");
}

TEST(DemuxVdif, AStreamThatNeverLeavesItsFirstSecondIsCountedAtTheProvisionalRate) {
    Ledger ledger;
    Demux demux(vdif_options(0), ledger);
    feed_run(demux, 3, 10, 50, 1000, {7, 8});
    const StreamStats& s = ledger.streams().at(0);
    EXPECT_EQ(s.rate, StreamStats::Rate::learning);
    EXPECT_EQ(s.sequence.missing(), 2u);
    EXPECT_EQ(s.packets(), 48u);
    EXPECT_EQ(report_json(ledger, RunInfo{})["streams"][0]["rate"], "not learned");
}

TEST(DemuxVdif, VtpSequenceNumbersWitnessLossTheHeadersDoNotShow) {
    Ledger ledger;
    Demux demux(vdif_options(1000, StreamFormat::vtp), ledger);
    // 20 frames in sequence; datagrams 5 and 6 (PSNs) lost on the way, and
    // the sender's frame numbers skip nothing: a sender that re-sent the
    // same frame numbers (the PSN says two datagrams never came).
    std::int64_t psn = 100;
    for (std::uint32_t f = 0; f < 20; ++f, ++psn) {
        if (psn == 105) {
            psn += 2;
        }
        feed(demux, 1, f, 0, 0x4142, psn);
    }
    // A duplicated datagram repeats its number (as the network duplicates
    // it): a duplicate, not a loss hidden by an extra packet.
    feed(demux, 1, 19, 0, 0x4142, psn - 1);
    const StreamStats& s = ledger.streams().at(0);
    EXPECT_EQ(s.format, StreamFormat::vtp);
    EXPECT_EQ(s.sequence.missing(), 0u);
    EXPECT_EQ(s.psn_packets, 21u);
    EXPECT_EQ(s.psn_missing, 2u);
    EXPECT_EQ(s.psn_duplicates, 1u);
    const auto j = report_json(ledger, RunInfo{});
    EXPECT_EQ(j["streams"][0]["psn"]["missing"], 2u);
    // The sequence saw nothing lost; the PSNs did, and the verdict says so.
    EXPECT_FALSE(ledger.zero_loss());
    EXPECT_EQ(ledger.loss_reasons(),
              std::vector<std::string>{"2 datagrams missing from the VTP packet sequence numbers"});
}

TEST(DemuxVdif, InvalidAndLegacyFramesAreTheStreamsOwn) {
    Ledger ledger;
    Demux demux(vdif_options(1000), ledger);
    for (std::uint32_t f = 0; f < 10; ++f) {
        auto h = make_vdif_header(2, f, 1, 0x4142, /*legacy=*/true);
        h.invalid = f % 3 == 0;
        demux.on_frame(whole(make_vdif_frame(kAntenna1, kGroup1, kPort, h)));
    }
    const StreamStats& s = ledger.streams().at(0);
    EXPECT_EQ(s.layout, 1);
    EXPECT_EQ(s.packets(), 10u);
    EXPECT_EQ(s.invalid, 4u);
    EXPECT_EQ(s.frame_bytes, 16u + 8000u);
    EXPECT_TRUE(ledger.zero_loss());
}

TEST(DemuxVdif, CodifAndVdifGroupsSideBySide) {
    DemuxOptions o;
    o.groups = {Endpoint{kGroup1, kPort}, Endpoint{kGroup2, kPort}};
    o.group_formats = {StreamFormat::codif, StreamFormat::vdif};
    o.vdif_frames_per_second = 1000;
    Ledger ledger;
    Demux demux(o, ledger);
    for (std::uint32_t f = 0; f < 5; ++f) {
        demux.on_frame(whole(test::make_frame(kAntenna1, kGroup1, kPort, test::make_header(1, f))));
        demux.on_frame(whole(make_vdif_frame(kAntenna2, kGroup2, kPort, make_vdif_header(1, f))));
    }
    // A VDIF frame to the CODIF group is not CODIF, and a CODIF frame to the
    // VDIF group is read as VDIF (no sync word to tell): its length field
    // disagrees with the datagram.
    demux.on_frame(whole(make_vdif_frame(kAntenna2, kGroup1, kPort, make_vdif_header(1, 9))));
    demux.on_frame(whole(test::make_frame(kAntenna1, kGroup2, kPort, test::make_header(1, 9))));
    ASSERT_EQ(ledger.streams().size(), 2u);
    EXPECT_EQ(ledger.streams()[0].format, StreamFormat::codif);
    EXPECT_EQ(ledger.streams()[1].format, StreamFormat::vdif);
    EXPECT_EQ(ledger.streams()[0].packets(), 5u);
    EXPECT_EQ(ledger.streams()[1].packets(), 5u);
    EXPECT_EQ(ledger.reason_count(Reason::not_codif), 1u);
    EXPECT_EQ(ledger.reason_count(Reason::vdif_bad_length) +
                  ledger.reason_count(Reason::vdif_zero_length),
              1u);
}

// The stream registry keeps the whole group index: the 257th named group is
// not the first (a key packing the index into 8 bits made them one stream).
TEST(DemuxVdif, GroupsBeyondTheFirst256AreStreamsOfTheirOwn) {
    DemuxOptions o;
    for (std::uint32_t i = 0; i < 257; ++i) {
        o.groups.push_back(Endpoint{kGroup1 + i, kPort});
    }
    o.group_formats.assign(o.groups.size(), StreamFormat::vdif);
    o.vdif_frames_per_second = 1000;
    o.max_groups = o.groups.size();
    Ledger ledger;
    Demux demux(o, ledger);
    for (const std::uint32_t g : {kGroup1, kGroup1 + 256}) {
        demux.on_frame(whole(make_vdif_frame(kAntenna1, g, kPort, make_vdif_header(1, 0))));
        demux.on_frame(whole(make_vdif_frame(kAntenna1, g, kPort, make_vdif_header(1, 1))));
    }
    ASSERT_EQ(ledger.streams().size(), 2u);
    EXPECT_EQ(ledger.streams()[1].group.ip, kGroup1 + 256);
    EXPECT_EQ(ledger.streams()[0].packets(), 2u);
    EXPECT_EQ(ledger.streams()[1].packets(), 2u);
    EXPECT_EQ(ledger.streams()[0].sequence.duplicates(), 0u);
}

}  // namespace
}  // namespace ibvcap
