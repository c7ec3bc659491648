// The engine's clock (lib/sources/verbs/nic_clock.hpp; docs/operations.md,
// "Time"): frame times converted to host UTC by measurements of the NIC clock
// each second, against the simulated NIC's clock model (test/sim/sim_nic.hpp,
// SimConfig::drift_ppb) and its PHC (test/sim/sim_phc.hpp): a PHC that drifts
// from where the driver set it at load, and a TAI PHC a daemon disciplines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "frames.hpp"
#include "generated_frames.hpp"
#include "lib/demux/demux.hpp"
#include "lib/ledger/report.hpp"
#include "lib/sources/verbs/engine.hpp"
#include "lib/sources/verbs/nic_clock.hpp"
#include "test/sim/sim_nic.hpp"
#include "test/sim/sim_phc.hpp"

namespace ibvcap {
namespace {

using sim::SimConfig;
using sim::SimHardware;
using sim::SimPhc;
using sim::SimProvider;

const Endpoint kG1{test::kGroup1, 36001};
constexpr std::uint64_t kTicksPerSecond = 1'000'000'000;  // SimConfig's 1 GHz clock

// Records every frame's time, as a writer would stamp it.
class Stamps final : public FrameSink {
  public:
    void on_frame(const SinkFrame& f, SinkRoute /*route*/) override {
        ns.push_back(f.frame.timestamp_ns);
    }
    std::vector<std::uint64_t> ns;
};

struct ClockRig {
    SimProvider provider;
    std::shared_ptr<SimHardware> nic;
    std::unique_ptr<verbs::Device> device;
    std::unique_ptr<PayloadMemory> memory = make_host_payload_memory();
    Ledger ledger;
    Stamps stamps;
    std::unique_ptr<Demux> demux;
    std::unique_ptr<VerbsEngine> engine;
    // Per frame delivered: the device clock when it arrived.
    std::vector<std::uint64_t> ticks;

    ClockRig(SimConfig config, FrameTime mode, bool with_phc,
             std::vector<std::string> daemons = {}) {
        nic = provider.add(config);
        device = provider.open(config.name, config.port);
        EngineOptions o;
        o.groups = {kG1};
        o.ring_depth = 128;
        o.poll_batch = 16;
        o.repost_batch = 8;
        o.frame_time = mode;
        if (with_phc) {
            o.phc = std::make_shared<SimPhc>(nic, std::move(daemons), 3);
        } else {
            o.phc_missing = "sim0 has no PTP hardware clock (ETHTOOL_GET_TS_INFO)";
        }
        DemuxOptions d;
        d.groups = o.groups;
        demux = std::make_unique<Demux>(d, ledger);
        const SinkEntry entry{&stamps, SinkScope::every_frame};
        demux->add_sinks(std::span<const SinkEntry>(&entry, 1));
        engine = std::make_unique<VerbsEngine>(*device, std::move(o), *demux, ledger, *memory,
                                               MembershipFactory{});
        engine->start();
    }

    void poll_all() {
        while (engine->poll_once() > 0) {
        }
    }

    // `seconds` of wire: `per_second` frames a second, evenly spaced. Half
    // of each second's frames are polled before the once-a-second
    // measurement, half after it (completions that waited in the CQ across
    // an update, older than the measurement).
    void play(int seconds, int per_second = 40) {
        GeneratorConfig g;
        g.antennas = {test::kAntenna1};
        g.groups = {kG1};
        g.threads = 1;
        g.frames = static_cast<std::uint64_t>(seconds) * static_cast<std::uint64_t>(per_second);
        g.frames_per_period = 100;
        g.payload_bytes = 256;
        const auto frames = test::frames_of(g);
        const std::uint64_t gap = kTicksPerSecond / static_cast<std::uint64_t>(per_second);
        std::size_t next = 0;
        for (int s = 0; s < seconds; ++s) {
            for (int j = 0; j < per_second && next < frames.size(); ++j, ++next) {
                nic->deliver(frames[next], gap);
                ticks.push_back(nic->clock_ticks());
                if (j == per_second / 2) {
                    poll_all();
                }
            }
            engine->resync_clock();
            poll_all();
        }
        engine->resync_clock();
    }

    // |frame time − true UTC| for every frame.
    std::vector<std::int64_t> errors() const {
        std::vector<std::int64_t> e;
        for (std::size_t i = 0; i < stamps.ns.size() && i < ticks.size(); ++i) {
            e.push_back(
                std::abs(static_cast<std::int64_t>(stamps.ns[i]) - nic->host_time_ns(ticks[i])));
        }
        return e;
    }

    bool monotonic() const { return std::is_sorted(stamps.ns.begin(), stamps.ns.end()); }

    bool has_note(const std::string& part) const {
        return std::any_of(ledger.notes().begin(), ledger.notes().end(),
                           [&](const std::string& n) { return n.find(part) != std::string::npos; });
    }
};

SimConfig real_time_device() {
    SimConfig c;
    c.ts_free_running = false;  // a ConnectX-6 Dx/7 running its real-time clock
    c.ts_real_time = true;
    return c;
}

// A PHC 20 ppm fast, 3 ms ahead of UTC since the driver loaded, nobody
// disciplining it; reads cost 1 µs. Converted frame times are within the
// bound the clock states, and that bound is the first second's drift (the
// nominal rate, before a second measurement) plus the bracket; from the
// second measurement on, the rate is measured and the error is the
// bracket's.
TEST(NicClock, DriftingPhcIsConvertedWithinTheStatedBound) {
    SimConfig c = real_time_device();
    c.drift_ppb = 20'000;
    c.phc_offset_ns = 3'000'000;
    c.phc_read_ns = 1000;
    ClockRig rig(c, FrameTime::utc, true);
    ASSERT_EQ(rig.engine->timestamps(), verbs::TimestampFormat::wallclock_ns);
    EXPECT_TRUE(rig.has_note("measured against CLOCK_REALTIME each second"))
        << rig.ledger.notes()[0];
    rig.play(60);
    ASSERT_EQ(rig.stamps.ns.size(), rig.ticks.size());
    const ClockFigures f = rig.engine->clock_figures();
    ASSERT_TRUE(f.error_bound_ns.has_value());
    const auto errors = rig.errors();
    const std::int64_t worst = *std::max_element(errors.begin(), errors.end());
    EXPECT_LE(worst, *f.error_bound_ns);
    // 20 ppm over the first second, half a 1 µs bracket, rounding.
    EXPECT_LE(*f.error_bound_ns, 21'000);
    // After ten seconds: the bracket's error, not the drift's.
    const std::int64_t later = *std::max_element(errors.begin() + 10 * 40, errors.end());
    EXPECT_LE(later, 1'500) << "worst after 10 s";
    EXPECT_TRUE(rig.monotonic());
    EXPECT_EQ(f.frame_times, "utc");
    EXPECT_EQ(f.converted_by, "phc");
    EXPECT_EQ(f.steps, 0u);
    ASSERT_TRUE(f.rate_ppm.has_value());
    EXPECT_NEAR(*f.rate_ppm, 20.0, 0.2);
    EXPECT_EQ(f.phc_index, 3);
    ASSERT_TRUE(f.offset_ns.has_value());
    // 3 ms at load, + 20 ppm of the 60 s since.
    EXPECT_NEAR(static_cast<double>(*f.offset_ns), 3'000'000.0 + 1'200'000.0, 2'000.0);
    EXPECT_NEAR(static_cast<double>(*f.offset_spread_ns), 1'200'000.0, 2'000.0);
    EXPECT_EQ(f.tai, false);
    EXPECT_EQ(f.disciplined, false);
}

// ptp4l makes the PHC run TAI and a daemon disciplines it: 37 s come off,
// and the report says TAI and disciplined.
TEST(NicClock, TaiPhcIsConvertedToUtcAndDetected) {
    SimConfig c = real_time_device();
    c.drift_ppb = 20'000;
    c.phc_disciplined = true;
    c.phc_offset_ns = 37'000'000'000;
    c.phc_read_ns = 1000;
    ClockRig rig(c, FrameTime::utc, true, {"phc2sys", "ptp4l"});
    EXPECT_TRUE(rig.has_note("(TAI)"));
    rig.play(20);
    const ClockFigures f = rig.engine->clock_figures();
    const auto errors = rig.errors();
    const std::int64_t worst = *std::max_element(errors.begin(), errors.end());
    ASSERT_TRUE(f.error_bound_ns.has_value());
    EXPECT_LE(worst, *f.error_bound_ns);
    EXPECT_LE(*f.error_bound_ns, 2'000);  // the rate is right from the start: the bracket's
    EXPECT_TRUE(rig.monotonic());
    // The raw PHC is 37 s ahead; the frame times are not.
    EXPECT_NEAR(static_cast<double>(rig.nic->phc_time_ns(rig.ticks.back()) -
                                    static_cast<std::int64_t>(rig.stamps.ns.back())),
                37e9, 2'000.0);
    EXPECT_EQ(f.tai, true);
    EXPECT_EQ(f.disciplined, true);
    EXPECT_EQ(f.daemons, (std::vector<std::string>{"phc2sys", "ptp4l"}));
    ASSERT_TRUE(f.frequency_ppb.has_value());
    EXPECT_EQ(*f.frequency_ppb, -20'000.0);
    ASSERT_TRUE(f.offset_spread_ns.has_value());
    EXPECT_LE(*f.offset_spread_ns, 1'000);
}

// Device ticks: the rate comes from the clock pairs, not the nominal
// hca_core_clock, and the map slews: no step, none backwards, across every
// update (the old re-anchoring stepped by the drift each second).
TEST(NicClock, DeviceTicksAreSlewedAtTheMeasuredRate) {
    SimConfig c;  // free-running clock: device ticks
    c.drift_ppb = -35'000;
    c.phc_read_ns = 1000;
    ClockRig rig(c, FrameTime::utc, false);
    ASSERT_EQ(rig.engine->timestamps(), verbs::TimestampFormat::device_ticks);
    EXPECT_TRUE(rig.has_note("by a clock pair each second, slewed"));
    rig.play(60);
    const ClockFigures f = rig.engine->clock_figures();
    EXPECT_EQ(f.converted_by, "clock_pairs");
    const auto errors = rig.errors();
    ASSERT_TRUE(f.error_bound_ns.has_value());
    EXPECT_LE(*std::max_element(errors.begin(), errors.end()), *f.error_bound_ns);
    EXPECT_LE(*f.error_bound_ns, 37'000);
    EXPECT_LE(*std::max_element(errors.begin() + 10 * 40, errors.end()), 1'500);
    EXPECT_TRUE(rig.monotonic());
    ASSERT_TRUE(f.rate_ppm.has_value());
    EXPECT_NEAR(*f.rate_ppm, -35.0, 0.2);
    EXPECT_EQ(f.phc_index, -1);
    EXPECT_NE(f.phc_missing.find("no PTP hardware clock"), std::string::npos);
}

// --timestamps nic: the raw NIC clock, as the NIC gives it (wall clock) or
// at the nominal rate from the setup's clock pair (ticks); the PHC is still
// measured for the report.
TEST(NicClock, NicTimestampsKeepTheRawClock) {
    SimConfig c = real_time_device();
    c.drift_ppb = 20'000;
    c.phc_offset_ns = 5'000'000;
    c.phc_read_ns = 1000;
    ClockRig rig(c, FrameTime::nic, true);
    EXPECT_TRUE(rig.has_note("--timestamps nic"));
    rig.play(5);
    for (std::size_t i = 0; i < rig.ticks.size(); ++i) {
        ASSERT_EQ(static_cast<std::int64_t>(rig.stamps.ns[i]), rig.nic->phc_time_ns(rig.ticks[i]));
    }
    const ClockFigures f = rig.engine->clock_figures();
    EXPECT_EQ(f.frame_times, "nic");
    EXPECT_EQ(f.converted_by, "");
    EXPECT_FALSE(f.error_bound_ns.has_value());
    ASSERT_TRUE(f.offset_ns.has_value());
    EXPECT_NEAR(static_cast<double>(*f.offset_ns), 5'000'000.0 + 100'000.0, 2'000.0);

    SimConfig t;  // device ticks
    t.drift_ppb = 20'000;
    ClockRig ticks(t, FrameTime::nic, false);
    ticks.play(3);
    for (std::size_t i = 0; i < ticks.ticks.size(); ++i) {
        ASSERT_EQ(ticks.stamps.ns[i], t.host_time_base_ns + ticks.ticks[i]);  // 1 tick = 1 ns
    }
    EXPECT_EQ(ticks.engine->clock_figures().frame_times, "nic");
}

// No PHC (the simulated NIC as wired by default, a host without one): wall
// clock stays the NIC's own, and the note says it is not measured.
TEST(NicClock, WithoutAPhcWallClockIsTheNicsOwnAndSaysSo) {
    SimConfig c = real_time_device();
    c.phc_offset_ns = 2'000;
    ClockRig rig(c, FrameTime::utc, false);
    EXPECT_TRUE(rig.has_note("not measured against CLOCK_REALTIME"));
    rig.play(2);
    for (std::size_t i = 0; i < rig.ticks.size(); ++i) {
        ASSERT_EQ(static_cast<std::int64_t>(rig.stamps.ns[i]), rig.nic->phc_time_ns(rig.ticks[i]));
    }
    EXPECT_EQ(rig.engine->clock_figures().frame_times, "nic");
}

// A PHC read that fails is counted and said; the map goes on from the last.
TEST(NicClock, FailedPhcReadsAreCountedAndTheMapGoesOn) {
    SimConfig c = real_time_device();
    c.phc_read_ns = 1000;
    ClockRig rig(c, FrameTime::utc, true);
    rig.play(3);
    rig.nic->fail_phc_reads(2);
    rig.play(3);
    const ClockFigures f = rig.engine->clock_figures();
    EXPECT_EQ(f.phc_read_failures, 2u);
    EXPECT_NE(f.phc_error.find("PTP_SYS_OFFSET_EXTENDED"), std::string::npos);
    EXPECT_TRUE(rig.monotonic());
}

// The report carries the figures (docs/formats.md, "clocks"), and the summary a line.
TEST(NicClock, TheReportShowsTheClock) {
    SimConfig c = real_time_device();
    c.phc_disciplined = true;
    c.phc_offset_ns = 37'000'000'000;
    c.phc_read_ns = 1000;
    ClockRig rig(c, FrameTime::utc, true, {"ptp4l"});
    rig.play(3);
    RunInfo info;
    info.command = "capture";
    info.clocks.push_back(rig.engine->clock_figures());
    const nlohmann::json j = report_json(rig.ledger, info);
    ASSERT_EQ(j["clocks"].size(), 1u);
    const auto& k = j["clocks"][0];
    EXPECT_EQ(k["device"], "sim_mlx5_0:1");
    EXPECT_EQ(k["format"], "wallclock_ns");
    EXPECT_EQ(k["frame_times"], "utc");
    EXPECT_EQ(k["converted_by"], "phc");
    EXPECT_TRUE(k["error_bound_ns"].is_number_integer());
    EXPECT_EQ(k["measurements"], 5u);  // setup, three seconds, the end
    EXPECT_EQ(k["phc"]["index"], 3);
    EXPECT_EQ(k["phc"]["tai"], true);
    EXPECT_EQ(k["phc"]["disciplined"], true);
    EXPECT_EQ(k["phc"]["daemons"], nlohmann::json::array({"ptp4l"}));
    EXPECT_NEAR(k["phc"]["offset_ns"].get<double>(), 37e9, 2'000.0);
    EXPECT_TRUE(k["phc_missing"].is_null());
    const std::string line = clock_summary(info.clocks[0]);
    EXPECT_NE(line.find("frame times utc (by phc"), std::string::npos) << line;
    EXPECT_NE(line.find("TAI, disciplined"), std::string::npos) << line;
}

// --- ClockConverter alone ---------------------------------------------------

ClockPoint point(std::uint64_t x, std::int64_t u, std::int64_t w = 0) {
    return ClockPoint{x, u - w / 2, u - w / 2 + w};
}

// A NIC clock stepped by a daemon (37 s, ptp4l setting TAI) steps the map
// once; it is not slewed for hours.
TEST(ClockConverter, AJumpOfTheNicClockStepsTheMap) {
    ClockConverter conv(std::uint64_t{1} << ClockConverter::kShift, 1'000'000'000);
    const std::int64_t base = 1'700'000'000'000'000'000;
    for (int s = 0; s <= 3; ++s) {
        conv.update(point(static_cast<std::uint64_t>(base + s * 1'000'000'000LL),
                          base + s * 1'000'000'000LL));
    }
    const std::uint64_t jumped =
        static_cast<std::uint64_t>(base + 4'000'000'000LL + 37'000'000'000LL);
    conv.update(point(jumped, base + 4'000'000'000LL));
    EXPECT_EQ(conv.steps(), 1u);
    EXPECT_EQ(conv.host_steps(), 0u);
    EXPECT_EQ(conv.convert(jumped + 500), base + 4'000'000'000LL + 500);
    // A frame stamped before the jump, converted after it, keeps the old map
    // (verbs-mlx5-3.md R7: it was extrapolated from the new anchor, 37 s off).
    EXPECT_EQ(conv.convert(static_cast<std::uint64_t>(base + 3'500'000'000LL)),
              base + 3'500'000'000LL);
}

// A measurement with the host's CLOCK_REALTIME − CLOCK_MONOTONIC (s seconds
// since the start; `host_offset` the host clock's steps so far).
ClockPoint host_point(std::uint64_t x, std::int64_t u, int s, std::int64_t host_offset) {
    ClockPoint p = point(x, u);
    p.monotonic_ns = 1'000'000'000LL * (s + 1);
    p.realtime_minus_monotonic_ns = 1'700'000'000'000'000'000LL + host_offset;
    return p;
}

constexpr std::int64_t kHostBase = 1'700'000'000'000'000'000;

// A PHC-ns converter measured at 0, 1, 2, 3 s after kHostBase, host steady.
ClockConverter four_seconds_of_ns() {
    ClockConverter conv(std::uint64_t{1} << ClockConverter::kShift, 1'000'000'000);
    for (int s = 0; s <= 3; ++s) {
        const std::int64_t t = kHostBase + s * 1'000'000'000LL;
        conv.update(host_point(static_cast<std::uint64_t>(t), t, s, 0));
    }
    return conv;
}

// The host clock stepped back 1 s (an NTP step, a leap second): CLOCK_MONOTONIC
// says it was the host's, so frame time does not go back: the map slews onto
// the host's new line, at most 500 ppm (2000 s for 1 s), and says so.
TEST(ClockConverter, AHostClockSteppedBackIsSlewedNeverFollowedBack) {
    constexpr std::int64_t base = kHostBase;
    constexpr std::int64_t kS = 1'000'000'000;
    ClockConverter conv = four_seconds_of_ns();
    const auto x4 = static_cast<std::uint64_t>(base + 4 * kS);
    const std::int64_t before = conv.convert(x4 - 1);
    conv.update(host_point(x4, base + 3 * kS, 4, -kS));
    EXPECT_EQ(conv.steps(), 0u) << "the NIC clock did not step";
    EXPECT_EQ(conv.host_steps(), 1u);
    EXPECT_EQ(conv.host_step_max_ns(), kS);
    EXPECT_GE(conv.convert(x4), before);
    std::int64_t last = conv.convert(x4);
    for (std::uint64_t dx = 1'000'000'000; dx <= 2'100'000'000'000ull; dx += 1'000'000'000) {
        const std::int64_t y = conv.convert(x4 + dx);
        ASSERT_GE(y - last, kS - 500'000) << dx;  // per second: at most 500 ppm slower
        ASSERT_LE(y - last, kS) << dx;
        last = y;
    }
    // Caught up with the host's line after 2000 s (within the Q32.32 slope's
    // rounding over 2·10^12 ns: 2^-32 ns per ns, about 500 ns).
    EXPECT_LE(
        std::abs(conv.convert(x4 + 2'100'000'000'000ull) - (base + 3 * kS + 2'100'000'000'000LL)),
        1'000);
}

// Stepped forward, the host is followed at once (time goes forward), and it
// is the host's step, not the NIC's.
TEST(ClockConverter, AHostClockSteppedForwardIsFollowed) {
    constexpr std::int64_t base = kHostBase;
    constexpr std::int64_t kS = 1'000'000'000;
    ClockConverter conv = four_seconds_of_ns();
    const auto x4 = static_cast<std::uint64_t>(base + 4 * kS);
    conv.update(host_point(x4, base + 5 * kS, 4, kS));
    EXPECT_EQ(conv.steps(), 0u);
    EXPECT_EQ(conv.host_steps(), 1u);
    EXPECT_EQ(conv.convert(x4 + 500), base + 5 * kS + 500);
    // The PHC stepped (a daemon set it), the host not: the NIC's step.
    const auto x5 = static_cast<std::uint64_t>(base + 5 * kS + 37 * kS);
    conv.update(host_point(x5, base + 6 * kS, 5, kS));
    EXPECT_EQ(conv.steps(), 1u);
    EXPECT_EQ(conv.host_steps(), 1u);
}

// A residual under the step threshold is slewed at most 500 ppm: the map
// stays continuous and increasing, and its slope within the limit.
TEST(ClockConverter, ALargeResidualIsSlewedWithinTheLimit) {
    ClockConverter conv(std::uint64_t{1} << ClockConverter::kShift, 1'000'000'000);
    const std::int64_t base = 1'700'000'000'000'000'000;
    for (int s = 0; s <= 2; ++s) {
        conv.update(point(static_cast<std::uint64_t>(base + s * 1'000'000'000LL),
                          base + s * 1'000'000'000LL));
    }
    // The host clock is 10 ms ahead of the map now (an NTP step of the host).
    const auto x3 = static_cast<std::uint64_t>(base + 3'000'000'000LL);
    const std::int64_t before = conv.convert(x3 - 1);
    conv.update(point(x3, base + 3'000'000'000LL + 10'000'000));
    EXPECT_EQ(conv.steps(), 0u);
    EXPECT_GE(conv.convert(x3), before);
    std::int64_t last = conv.convert(x3);
    for (std::uint64_t dx = 1'000'000; dx <= 30'000'000'000ull; dx += 1'000'000) {
        const std::int64_t y = conv.convert(x3 + dx);
        const std::int64_t slope_ns = y - last;  // per 1 ms of NIC clock
        ASSERT_GE(slope_ns, 1'000'000 - 500);
        ASSERT_LE(slope_ns, 1'000'000 + 501);
        last = y;
    }
    // 10 ms at 500 ppm: caught up after 20 s.
    EXPECT_NEAR(static_cast<double>(conv.convert(x3 + 25'000'000'000ull)),
                static_cast<double>(base + 28'000'000'000LL + 10'000'000), 2.0);
}

}  // namespace
}  // namespace ibvcap
