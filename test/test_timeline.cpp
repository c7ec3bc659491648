// The timeline and the cause of every gap (lib/ledger/timeline.hpp;
// docs/observability.md, "The timeline and a cause for every gap"): the
// attribution rules on their own, then gaps injected on the simulated NIC
// through the capture runner, each attributed to what caused it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "frames.hpp"
#include "generated_frames.hpp"
#include "lib/ledger/report.hpp"
#include "lib/ledger/timeline.hpp"
#include "lib/review/run_page.hpp"
#include "lib/run/verbs_capture.hpp"
#include "lib/traffic/generator.hpp"
#include "test/sim/sim_nic.hpp"

namespace ibvcap {
namespace {

const Endpoint kG1{test::kGroup1, 36001};

LiveView lane_with_missing(std::vector<std::uint64_t> missing, std::uint64_t packets = 0) {
    LiveView v;
    v.packets = packets;
    for (std::size_t i = 0; i < missing.size(); ++i) {
        LiveStream s;
        s.group = kG1;
        s.antenna = test::kAntenna1 + static_cast<std::uint32_t>(i);
        s.missing = missing[i];
        v.streams.push_back(s);
    }
    v.copies = 1;
    return v;
}

SourceCounter witness(std::string name, std::uint64_t value, LossCause cause) {
    return {std::move(name), value, false, cause};
}

std::uint64_t lost(const Timeline& t, LossCause c) {
    return t.lost_by_cause()[static_cast<std::size_t>(c)];
}

TEST(Timeline, AGapWithNoWitnessIsUpstream) {
    Timeline t;
    const std::vector<SourceCounter> w{
        witness("mlx5_0/hw_counters/out_of_buffer", 0, LossCause::receive_queue)};
    t.sample(1, std::vector{lane_with_missing({0}, 100)}, w);
    t.sample(2, std::vector{lane_with_missing({5}, 195)}, w);
    const auto gaps = t.gaps();
    ASSERT_EQ(gaps.size(), 1u);
    EXPECT_EQ(gaps[0].cause, LossCause::upstream);
    EXPECT_EQ(gaps[0].missing, 5u);
    EXPECT_TRUE(gaps[0].witnesses.empty());
    EXPECT_EQ(gaps[0].stream, "239.17.0.1:36001 10.0.0.11 thread 0");
    EXPECT_EQ(lost(t, LossCause::upstream), 5u);
    ASSERT_EQ(t.seconds().size(), 2u);
    EXPECT_EQ(t.seconds()[0].packets, 100u);
    EXPECT_EQ(t.seconds()[1].packets, 95u);
    EXPECT_EQ(t.seconds()[1].missing, 5u);
}

TEST(Timeline, AWitnessInTheGapsWindowOrTheOneBeforeNamesTheCause) {
    for (const std::size_t witness_window : {std::size_t{0}, std::size_t{1}, std::size_t{2}}) {
        // Windows 0..3; the gap shows in window 2; the witness grows in
        // `witness_window`: 1 (before) and 2 (same) explain it, 0 does not.
        Timeline t;
        std::uint64_t oob = 0;
        for (std::size_t w = 0; w < 4; ++w) {
            if (w == witness_window) {
                oob += 7;
            }
            t.sample(double(w + 1), std::vector{lane_with_missing({w >= 2 ? 7u : 0u})},
                     std::vector{witness("hw/out_of_buffer", oob, LossCause::receive_queue)});
        }
        const auto gaps = t.gaps();
        ASSERT_EQ(gaps.size(), 1u);
        EXPECT_EQ(gaps[0].cause,
                  witness_window == 0 ? LossCause::upstream : LossCause::receive_queue)
            << "witness in window " << witness_window;
        if (witness_window != 0) {
            EXPECT_EQ(gaps[0].witnesses, std::vector<std::string>{"hw/out_of_buffer"});
        }
    }
}

TEST(Timeline, SeveralWitnessesNameTheFirstByPriority) {
    Timeline t;
    t.sample(1, std::vector{lane_with_missing({0})},
             std::vector{witness("oob", 0, LossCause::receive_queue),
                         witness("port_down_events", 0, LossCause::port_down),
                         witness("limit_reached", 0, LossCause::ring_hold_limit),
                         witness("diag", 0, LossCause::none)});
    t.sample(2, std::vector{lane_with_missing({3})},
             std::vector{witness("oob", 3, LossCause::receive_queue),
                         witness("port_down_events", 1, LossCause::port_down),
                         witness("limit_reached", 9, LossCause::ring_hold_limit),
                         witness("diag", 4, LossCause::none)});
    const auto gaps = t.gaps();
    ASSERT_EQ(gaps.size(), 1u);
    EXPECT_EQ(gaps[0].cause, LossCause::port_down);
    EXPECT_EQ(gaps[0].witnesses.size(), 3u) << "a diagnostic counter is no witness";
    // Without the link event, the held ring explains the queue's drops.
    Timeline u;
    u.sample(1, std::vector{lane_with_missing({0})},
             std::vector{witness("oob", 0, LossCause::receive_queue),
                         witness("limit_reached", 0, LossCause::ring_hold_limit)});
    u.sample(2, std::vector{lane_with_missing({3})},
             std::vector{witness("oob", 3, LossCause::receive_queue),
                         witness("limit_reached", 9, LossCause::ring_hold_limit)});
    ASSERT_EQ(u.gaps().size(), 1u);
    EXPECT_EQ(u.gaps()[0].cause, LossCause::ring_hold_limit);
}

TEST(Timeline, LateFramesTakeBackFromTheNewestGapsAndTheTotalsAddUp) {
    Timeline t;
    t.sample(1, std::vector{lane_with_missing({4, 0})}, {});
    t.sample(2, std::vector{lane_with_missing({6, 1})}, {});
    t.sample(3, std::vector{lane_with_missing({3, 1})}, {});  // 3 late frames of stream 0
    const auto gaps = t.gaps();
    ASSERT_EQ(gaps.size(), 2u) << "stream 0's second gap was filled whole, its first in part";
    EXPECT_EQ(gaps[0].missing, 3u);
    EXPECT_EQ(gaps[0].t, 1);
    EXPECT_EQ(gaps[1].missing, 1u);
    EXPECT_EQ(t.seconds()[2].filled, 3u);
    std::uint64_t net = 0;
    for (const auto& s : t.seconds()) {
        net += s.missing - s.filled;
    }
    EXPECT_EQ(net, 4u);
    EXPECT_EQ(lost(t, LossCause::upstream), 4u);
}

// A lane's copy that lags the one before (a poll batch) never makes a
// second's count negative or count frames twice: the seconds add up to the
// newest total.
TEST(Timeline, ACopyThatLagsCountsNoFrameTwice) {
    Timeline t;
    t.sample(1, std::vector{lane_with_missing({}, 10)}, {});
    t.sample(2, std::vector{lane_with_missing({}, 8)}, {});
    t.sample(3, std::vector{lane_with_missing({}, 12)}, {});
    ASSERT_EQ(t.seconds().size(), 3u);
    EXPECT_EQ(t.seconds()[0].packets, 10u);
    EXPECT_EQ(t.seconds()[1].packets, 0u);
    EXPECT_EQ(t.seconds()[2].packets, 2u);
}

TEST(Timeline, GapsPastTheListAreStillCountedByCause) {
    Timeline t(2);
    t.sample(1, std::vector{lane_with_missing({1, 1, 1, 1})}, {});
    EXPECT_EQ(t.gaps().size(), 2u);
    EXPECT_EQ(t.gaps_not_listed(), 2u);
    EXPECT_EQ(lost(t, LossCause::upstream), 4u);
}

// A stream's unlisted gaps are its newest: late frames take back from them
// first, and the listed gap keeps its count.
TEST(Timeline, LateFramesTakeBackFromUnlistedGapsFirst) {
    Timeline t(1);
    t.sample(1, std::vector{lane_with_missing({2})}, {});  // listed
    t.sample(2, std::vector{lane_with_missing({5})}, {});  // past the list: 3
    t.sample(3, std::vector{lane_with_missing({4})}, {});  // 1 late frame
    ASSERT_EQ(t.gaps().size(), 1u);
    EXPECT_EQ(t.gaps()[0].missing, 2u);
    EXPECT_EQ(lost(t, LossCause::upstream), 4u);
    t.sample(4, std::vector{lane_with_missing({0})}, {});  // every one came late
    EXPECT_TRUE(t.gaps().empty());
    EXPECT_EQ(lost(t, LossCause::upstream), 0u);
}

TEST(Timeline, WriterDropsAreTheirOwnCauseAndExplainNoGap) {
    Timeline t;
    t.sample(1, std::vector{lane_with_missing({0})},
             std::vector{witness("writer/dropped", 0, LossCause::writer)});
    t.sample(2, std::vector{lane_with_missing({2})},
             std::vector{witness("writer/dropped", 9, LossCause::writer)});
    t.set_write_drops(9);
    ASSERT_EQ(t.gaps().size(), 1u);
    EXPECT_EQ(t.gaps()[0].cause, LossCause::upstream);
    EXPECT_TRUE(t.gaps()[0].witnesses.empty()) << "the writer's drops witness no gap";
    EXPECT_EQ(lost(t, LossCause::writer), 9u);
}

TEST(Timeline, TheReportCarriesTheTimelineGapsAndCauses) {
    RunInfo run;
    run.timeline.sample(1, std::vector{lane_with_missing({2}, 10)},
                        std::vector{witness("mlx5_0/port_down_events", 1, LossCause::port_down)});
    const auto j = report_json(Ledger{}, run);
    ASSERT_EQ(j.at("timeline").size(), 1u);
    EXPECT_EQ(j["timeline"][0]["packets"], 10);
    EXPECT_EQ(j["timeline"][0]["counters"]["mlx5_0/port_down_events"], 1);
    ASSERT_EQ(j.at("gaps").size(), 1u);
    EXPECT_EQ(j["gaps"][0]["cause"], "port_down");
    EXPECT_EQ(j["lost_by_cause"]["port_down"], 2);
    EXPECT_EQ(j["lost_by_cause"]["upstream"], 0);
    EXPECT_FALSE(j["lost_by_cause"].contains("none"));
}

// ---- The lanes' counts as the run loop reads them (lib/ledger/live.hpp) ----

// A ledger with two streams whose counts all differ, so that a count copied
// into the wrong field shows.
Ledger ledger_with_every_count() {
    Ledger ledger;
    StreamStats a;
    a.group = kG1;
    a.antenna = test::kAntenna1;
    a.thread = 3;
    a.bytes = 1000;
    // 0, 2 (1 missing), 2 again, 1 late, 5 (3, 4 missing), 20005 (19999 more
    // missing) twice, then 6, 7 and 5: more than a window behind, too late.
    for (const std::uint64_t i :
         std::initializer_list<std::uint64_t>{0, 2, 2, 1, 5, 20005, 20005, 6, 7, 5}) {
        a.sequence.observe(i);
    }
    StreamStats b;
    b.group = Endpoint{test::kGroup2, 36002};
    b.antenna = test::kAntenna2;
    b.thread = 1;
    b.bytes = 77;
    b.sequence.set_plausible_jump(100);
    for (std::uint64_t i = 0; i < 10; ++i) {
        b.sequence.observe(i);
    }
    for (std::uint64_t k = 0; k < SequenceTracker::kRestartRun; ++k) {
        b.sequence.observe(5000 + k);  // a restart
    }
    for (const std::uint64_t i :
         std::initializer_list<std::uint64_t>{100000, 200000, 300000, 400000, 500000}) {
        b.sequence.observe(i);  // implausible
    }
    ledger.streams().push_back(a);
    ledger.streams().push_back(b);
    for (std::uint64_t n = 0; n < 123; ++n) {
        ledger.count_frame(9);
    }
    for (std::size_t r = 0; r < kReasonCount; ++r) {
        for (std::size_t n = 0; n <= r; ++n) {
            ledger.count_reason(static_cast<Reason>(r));
        }
    }
    return ledger;
}

void expect_copy_of(const LiveView& v, const Ledger& ledger) {
    EXPECT_EQ(v.packets, ledger.packets());
    EXPECT_EQ(v.bytes, ledger.bytes());
    for (std::size_t r = 0; r < kReasonCount; ++r) {
        EXPECT_EQ(v.reasons[r], ledger.reason_count(static_cast<Reason>(r))) << r;
    }
    ASSERT_EQ(v.streams.size(), ledger.streams().size());
    std::uint64_t missing = 0;
    for (std::size_t i = 0; i < v.streams.size(); ++i) {
        const LiveStream& d = v.streams[i];
        const StreamStats& s = ledger.streams()[i];
        EXPECT_EQ(d.group, s.group) << i;
        EXPECT_EQ(d.antenna, s.antenna) << i;
        EXPECT_EQ(d.thread, s.thread) << i;
        EXPECT_EQ(d.packets, s.packets()) << i;
        EXPECT_EQ(d.bytes, s.bytes) << i;
        EXPECT_EQ(d.missing, s.sequence.missing()) << i;
        EXPECT_EQ(d.duplicates, s.sequence.duplicates()) << i;
        EXPECT_EQ(d.out_of_order, s.sequence.out_of_order()) << i;
        EXPECT_EQ(d.too_late, s.sequence.too_late()) << i;
        EXPECT_EQ(d.implausible, s.sequence.implausible()) << i;
        EXPECT_EQ(d.restarts, s.sequence.restarts()) << i;
        missing += s.sequence.missing();
    }
    EXPECT_EQ(v.missing(), missing);
}

TEST(LiveView, ACopyHasEveryCountOfTheLedgerInItsOwnField) {
    const Ledger ledger = ledger_with_every_count();
    const StreamStats& a = ledger.streams()[0];
    const StreamStats& b = ledger.streams()[1];
    // The fixture: every count of a stream differs from the others.
    const std::set<std::uint64_t> counts_a{a.packets(),
                                           a.bytes,
                                           a.sequence.missing(),
                                           a.sequence.duplicates(),
                                           a.sequence.out_of_order(),
                                           a.sequence.too_late()};
    ASSERT_EQ(counts_a.size(), 6u);
    ASSERT_EQ(b.sequence.restarts(), 1u);
    ASSERT_EQ(b.sequence.implausible(), 5u);
    LiveView v;
    v.copy_from(ledger);
    expect_copy_of(v, ledger);
    EXPECT_EQ(v.copies, 1u);
    v.copy_from(ledger);
    expect_copy_of(v, ledger);  // again: the streams are not added twice
    EXPECT_EQ(v.copies, 2u);
}

TEST(LiveView, LanesAddUp) {
    const Ledger ledger = ledger_with_every_count();
    LiveView one;
    one.copy_from(ledger);
    LiveView sum;
    sum.add(one);
    sum.add(one);
    EXPECT_EQ(sum.packets, 2 * ledger.packets());
    EXPECT_EQ(sum.bytes, 2 * ledger.bytes());
    for (std::size_t r = 0; r < kReasonCount; ++r) {
        EXPECT_EQ(sum.reasons[r], 2 * ledger.reason_count(static_cast<Reason>(r))) << r;
    }
    EXPECT_EQ(sum.streams.size(), 4u);
    EXPECT_EQ(sum.missing(), 2 * one.missing());
    EXPECT_EQ(sum.copies, 2u);
}

TEST(LivePublisher, ACopyIsMadeWhenAskedAndReadBack) {
    const Ledger ledger = ledger_with_every_count();
    LivePublisher p;
    EXPECT_FALSE(p.wanted());
    EXPECT_EQ(p.read().copies, 0u);
    p.request();
    EXPECT_TRUE(p.wanted());
    p.publish(ledger);
    EXPECT_FALSE(p.wanted()) << "the request is served";
    const LiveView v = p.read();
    EXPECT_EQ(v.copies, 1u);
    expect_copy_of(v, ledger);
}

// ---- On the simulated NIC, through the capture runner ----

using test::frames_of;

// The capture runner on one simulated NIC, its NIC counters read from the
// sim's sysfs, with short ticks so each phase of a test has windows of its own.
CaptureRequest sim_request(const test::TempDir& sysfs) {
    CaptureRequest request;
    request.targets = {{"sim_mlx5_0", 1, "", 0, {}}};
    request.engine.groups = {kG1};
    request.engine.ring_depth = 64;
    request.demux.groups = {kG1};
    request.nic_counters = true;
    request.sysfs_root = sysfs.path();
    request.watchdog = false;
    request.tick = std::chrono::milliseconds(100);
    request.duration_s = 30;  // a bound; the wire ends the run with stop
    return request;
}

// One stream's frames, so every frame not delivered is a gap of it.
std::vector<std::vector<std::uint8_t>> one_stream(std::uint64_t frames) {
    GeneratorConfig c;
    c.antennas = {test::kAntenna1};
    c.groups = {kG1};
    c.threads = 1;
    c.frames = frames;
    c.frames_per_period = 1000;
    c.payload_bytes = 1024;
    return frames_of(c);
}

// Delivers frames [from, to) as the wire would, never faster than the
// ring is re-posted.
void send(sim::SimHardware& nic, const std::vector<std::vector<std::uint8_t>>& frames,
          std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i) {
        while (nic.min_posted_wrs() == 0) {
            std::this_thread::yield();
        }
        nic.deliver(frames[i]);
    }
}

void wait_for_the_rule(const sim::SimHardware& nic) {
    while (nic.flows() < 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

void settle() {
    std::this_thread::sleep_for(std::chrono::milliseconds(450));
}

// Phases, each followed by several ticks so their windows stay apart:
//   1. 5 frames never sent            → upstream
//   2. 6 frames sent while the port is down → port_down
//   3. 7 frames finding no receive WR (out_of_buffer, read from the sim's
//      sysfs by the NIC counters)     → receive_queue
TEST(GapAttribution, InjectedGapsOnTheSimulatedNicGetTheirCauses) {
    sim::SimProvider provider;
    auto nic = provider.add({});
    test::TempDir sysfs;
    nic->write_sysfs(sysfs.path() / "class" / "infiniband");
    const CaptureRequest request = sim_request(sysfs);
    const auto frames = one_stream(400);
    ASSERT_EQ(frames.size(), 400u);
    std::atomic<bool> stop{false};
    std::thread wire([&] {
        wait_for_the_rule(*nic);
        const auto send = [&](std::size_t from, std::size_t to) {
            ibvcap::send(*nic, frames, from, to);
        };
        send(0, 100);
        settle();
        send(105, 200);  // 1: 100..104 never sent
        settle();
        nic->set_port_up(false);
        send(200, 206);  // 2: lost on the wire
        nic->set_port_up(true);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        send(206, 300);
        settle();
        nic->withhold_buffers(7);
        send(300, 307);  // 3: no receive WR
        nic->write_sysfs(sysfs.path() / "class" / "infiniband");
        send(307, 400);
        settle();
        stop = true;
    });
    RunOutcome out = run_verbs_capture(request, provider, {}, stop);
    wire.join();
    EXPECT_EQ(out.ledger.totals().missing, 18u);
    const auto& t = out.info.timeline;
    std::map<LossCause, std::uint64_t> by;
    for (const auto& g : t.gaps()) {
        by[g.cause] += g.missing;
    }
    EXPECT_EQ(by[LossCause::upstream], 5u);
    EXPECT_EQ(by[LossCause::port_down], 6u);
    EXPECT_EQ(by[LossCause::receive_queue], 7u);
    EXPECT_EQ(lost(t, LossCause::upstream), 5u);
    EXPECT_EQ(lost(t, LossCause::port_down), 6u);
    EXPECT_EQ(lost(t, LossCause::receive_queue), 7u);
    // The seconds add up to the report's totals.
    std::uint64_t packets = 0;
    std::uint64_t net_missing = 0;
    for (const auto& s : t.seconds()) {
        packets += s.packets;
        net_missing += s.missing - s.filled;
    }
    EXPECT_EQ(packets, out.ledger.totals().packets);
    EXPECT_EQ(net_missing, out.ledger.totals().missing);
    EXPECT_GE(t.seconds().size(), 10u) << "100 ms ticks over about two seconds";
}
}  // namespace
}  // namespace ibvcap

namespace ibvcap {
namespace {

// Zero-copy writing holds receive slots until the writer's buffer goes to
// disk (lib/sinks/writer.hpp, write_frame). With a buffer larger than the
// whole run, hold_limit slots (half the ring) stay held and every later frame
// is offered while the limit is reached: the ring runs at half depth. Frames
// that then find no receive WR are the held ring's, not a slow poll thread's.
TEST(GapAttribution, AGapWhileTheRingIsHeldIsTheHoldLimits) {
    sim::SimProvider provider;
    auto nic = provider.add({});
    test::TempDir sysfs;
    test::TempDir out;
    nic->write_sysfs(sysfs.path() / "class" / "infiniband");
    CaptureRequest request = sim_request(sysfs);
    request.engine.zero_copy = true;
    request.outputs.output_dir = (out.path() / "run").string();
    request.outputs.formats = {OutputFormat::raw};
    request.writer.buffer_bytes = 8 << 20;  // never full in this run: the holds stay
    const auto frames = one_stream(200);
    std::atomic<bool> stop{false};
    std::thread wire([&] {
        wait_for_the_rule(*nic);
        send(*nic, frames, 0, 100);  // the writer holds 32 slots, then is refused
        settle();
        nic->withhold_buffers(4);
        send(*nic, frames, 100, 104);
        nic->write_sysfs(sysfs.path() / "class" / "infiniband");
        send(*nic, frames, 104, 200);
        settle();
        stop = true;
    });
    RunOutcome out_run = run_verbs_capture(request, provider, {}, stop);
    wire.join();
    EXPECT_EQ(out_run.ledger.totals().missing, 4u);
    const auto& t = out_run.info.timeline;
    EXPECT_EQ(lost(t, LossCause::ring_hold_limit), 4u);
    EXPECT_EQ(lost(t, LossCause::receive_queue), 0u) << "the held ring explains out_of_buffer";
    EXPECT_EQ(lost(t, LossCause::writer), out_run.ledger.totals().write_drops);
}

// The presence map's data (lib/ledger/presence.hpp): each stream's frames
// present and missing per bin, the gaps' causes, late frames taken back from
// the newest cells; the rows add up to the streams.
LiveView lane_of(std::vector<std::pair<std::uint64_t, std::uint64_t>> packets_missing,
                 std::uint64_t duplicates = 0) {
    LiveView v;
    for (std::size_t i = 0; i < packets_missing.size(); ++i) {
        LiveStream s;
        s.group = kG1;
        s.antenna = test::kAntenna1 + static_cast<std::uint32_t>(i);
        s.packets = packets_missing[i].first;
        s.missing = packets_missing[i].second;
        s.duplicates = i == 0 ? duplicates : 0;
        v.packets += s.packets;
        v.streams.push_back(s);
    }
    v.copies = 1;
    return v;
}

TEST(Presence, CellsHoldEachWindowsFramesGapsAndCauses) {
    Timeline t;
    std::vector<SourceCounter> w{witness("pcap/ps_drop", 0, LossCause::kernel)};
    t.sample(1, std::vector{lane_of({{100, 0}, {100, 0}})}, w);
    t.sample(2, std::vector{lane_of({{195, 5}, {200, 0}})}, w);  // upstream gap on stream 0
    w[0].value = 7;
    t.sample(3, std::vector{lane_of({{290, 12}, {200, 0}}, 3)}, w);  // kernel; 3 duplicates
    t.sample(4, std::vector{lane_of({{392, 10}, {300, 0}}, 3)}, w);  // 2 late frames
    const Presence& p = t.presence();
    ASSERT_EQ(p.rows().size(), 2u);
    EXPECT_EQ(p.windows_per_bin(), 1u);
    EXPECT_EQ(p.bin_ends(), (std::vector<double>{1, 2, 3, 4}));
    const auto& r0 = p.rows()[0];
    EXPECT_EQ(r0.stream, "239.17.0.1:36001 10.0.0.11 thread 0");
    EXPECT_EQ(r0.present, 392u - 3u);
    EXPECT_EQ(r0.missing, 10u);
    ASSERT_EQ(r0.cells.size(), 4u);
    EXPECT_EQ(r0.cells[1].present, 95u);
    EXPECT_EQ(r0.cells[1].missing, 5u);
    EXPECT_EQ(r0.cells[1].causes, 1U << static_cast<unsigned>(LossCause::upstream));
    EXPECT_EQ(r0.cells[2].present, 92u);  // 95 received, 3 of them duplicates
    EXPECT_EQ(r0.cells[2].missing, 5u);   // 7 opened, 2 taken back by the late frames
    EXPECT_EQ(r0.cells[2].causes, 1U << static_cast<unsigned>(LossCause::kernel));
    const auto& r1 = p.rows()[1];
    EXPECT_EQ(r1.missing, 0u);
    EXPECT_EQ(r1.cells[2].present, 0u);  // silent in window 3
    // In the report: cells only where frames are missing, activity as spans.
    const nlohmann::json j = presence_json(p);
    EXPECT_EQ(j["bins"], 4);
    EXPECT_EQ(j["streams"][0]["cells"],
              nlohmann::json::parse(R"([[1,95,5,["upstream"]],[2,92,5,["kernel"]]])"));
    EXPECT_EQ(j["streams"][1]["active"], nlohmann::json::parse("[[0,1],[3,3]]"));
    EXPECT_EQ(j["streams"][1]["cells"], nlohmann::json::array());
}

TEST(Presence, ALongRunMergesPairsOfBinsAndKeepsItsSums) {
    Timeline t;
    const std::vector<SourceCounter> none;
    std::uint64_t packets = 0;
    std::uint64_t missing = 0;
    const std::size_t windows = 3 * Presence::kMaxBins + 5;  // 1541: bins of 4 windows
    for (std::size_t i = 1; i <= windows; ++i) {
        packets += 10;
        if (i % 100 == 0) {
            missing += 3;
        }
        t.sample(static_cast<double>(i), std::vector{lane_of({{packets, missing}})}, none);
    }
    const Presence& p = t.presence();
    EXPECT_EQ(p.windows_per_bin(), 4u);
    ASSERT_EQ(p.bin_ends().size(), (windows + 3) / 4);
    EXPECT_LE(p.bin_ends().size(), Presence::kMaxBins);
    EXPECT_EQ(p.bin_ends().back(), static_cast<double>(windows));
    EXPECT_EQ(p.bin_ends()[0], 4.0);
    std::uint64_t present = 0;
    std::uint64_t lost = 0;
    for (const auto& c : p.rows()[0].cells) {
        present += c.present;
        lost += c.missing;
    }
    EXPECT_EQ(present, packets);
    EXPECT_EQ(lost, missing);
    EXPECT_EQ(p.rows()[0].cells[24].missing, 3u);  // window 100 is in bin 24 (windows 97-100)
}

// The run page's series (lib/review/run_page.hpp, page_series) from a run's
// report: each presence bin sums its windows' packets, bytes and missing, and
// holds the writers' largest backlog in it (its peak: a backlog that rose
// and fell within a bin is not hidden by its lower ends).
TEST(PageSeries, EachBinSumsItsWindowsAndHoldsTheLargestBacklog) {
    RunInfo run;
    const std::vector<SourceCounter> none;
    const std::size_t windows = Presence::kMaxBins + 9;  // 521: bins of 2 windows
    std::uint64_t packets = 0;
    std::vector<std::uint64_t> backlog(windows);
    for (std::size_t i = 0; i < windows; ++i) {
        packets += 10 + i % 3;
        // Up and down within each bin, never 0, never the same twice in a row.
        backlog[i] = 1000 + (i * 7919) % 5003;
        run.timeline.sample(static_cast<double>(i + 1), std::vector{lane_of({{packets, 0}})}, none,
                            backlog[i]);
    }
    const nlohmann::json series = page_series(report_json(Ledger{}, run));
    ASSERT_EQ(series["windows_per_bin"], 2u);
    const std::size_t bins = (windows + 1) / 2;
    ASSERT_EQ(series["backlog"].size(), bins);
    ASSERT_EQ(series["packets"].size(), bins);
    std::uint64_t summed = 0;
    for (std::size_t b = 0; b < bins; ++b) {
        const std::size_t last = std::min(2 * b + 1, windows - 1);
        std::uint64_t peak = 0;
        for (std::size_t i = 2 * b; i <= last; ++i) {
            peak = std::max(peak, backlog[i]);
        }
        EXPECT_EQ(series["backlog"][b], peak) << "bin " << b;
        EXPECT_EQ(series["t"][b], static_cast<double>(last + 1)) << "bin " << b;
        summed += series["packets"][b].get<std::uint64_t>();
    }
    EXPECT_EQ(summed, packets);
}

}  // namespace
}  // namespace ibvcap
