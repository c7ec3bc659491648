// Where a real mlx5 host differs from the simulation as it was
// (../shared/reviews/verbs-mlx5-3.md), one test each, on the simulated NIC
// that now behaves as the real one does:
//   R1  a real-time device's wall-clock stamps are seconds << 32 | ns; a
//       stamp decoded in the wrong format stops the run at the first frame;
//       --timestamps host takes none;
//   R5  rdma-core before v55: after a clock-page failure the CQ's QPs are
//       reset before anything more is polled, so no slot is delivered under
//       the previous WR's wr_id;
//   R6  two netdevs of one port whose rules overlap are refused;
//   R8  the watchdog reads no counters of a device already fatal.
// The converter's host-clock steps (R7) are in test_nic_clock.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine_rig.hpp"
#include "lib/core/usage_error.hpp"
#include "lib/sources/verbs/engine.hpp"
#include "lib/sources/verbs/nic_clock.hpp"
#include "lib/sources/verbs/source.hpp"
#include "test/sim/sim_nic.hpp"
#include "test/sim/sim_phc.hpp"

namespace ibvcap {
namespace {

using sim::SimConfig;
using sim::SimHardware;
using sim::SimProvider;
using test::kG1;
using test::options_for;
using test::Rig;
using test::traffic;

bool has_note(const Ledger& ledger, const std::string& part) {
    for (const auto& n : ledger.notes()) {
        if (n.find(part) != std::string::npos) {
            return true;
        }
    }
    return false;
}

// A ConnectX-6 Dx/7 running its real-time clock.
SimConfig real_time_device() {
    SimConfig c;
    c.ts_free_running = false;
    c.ts_real_time = true;
    return c;
}

std::vector<std::vector<std::uint8_t>> one_stream(std::uint64_t frames) {
    auto t = traffic({kG1}, frames);
    t.antennas = {test::kAntenna1};
    t.threads = 1;
    return test::frames_of(t);
}

// An engine on its own device, with or without the netdev's PHC.
struct PhcRig {
    SimProvider provider;
    std::shared_ptr<SimHardware> nic;
    std::unique_ptr<verbs::Device> device;
    std::unique_ptr<PayloadMemory> memory = make_host_payload_memory();
    Ledger ledger;
    std::unique_ptr<Demux> demux;
    std::unique_ptr<VerbsEngine> engine;

    PhcRig(const SimConfig& config, bool with_phc, FrameTime mode = FrameTime::utc,
           bool mode_given = false) {
        nic = provider.add(config);
        device = provider.open(config.name, config.port);
        EngineOptions o = options_for({kG1}, 16);
        o.frame_time = mode;
        o.frame_time_given = mode_given;
        if (with_phc) {
            o.phc = std::make_shared<sim::SimPhc>(nic, std::vector<std::string>{}, 2);
        } else {
            o.phc_missing = "sim0 has no PTP hardware clock (ETHTOOL_GET_TS_INFO)";
        }
        DemuxOptions d;
        d.groups = o.groups;
        demux = std::make_unique<Demux>(d, ledger);
        engine = std::make_unique<VerbsEngine>(*device, std::move(o), *demux, ledger, *memory,
                                               MembershipFactory{});
        engine->start();
    }
    // Polls until the CQ is empty; the error of the first poll that throws.
    std::string poll_error() {
        try {
            while (engine->poll_once() > 0) {
            }
        } catch (const std::runtime_error& e) {
            return e.what();
        }
        return {};
    }
};

TEST(RealTimeStamps, DecodingMatchesTheKernels) {
    // mlx5/core/lib/clock.h REAL_TIME_TO_NS(ts >> 32, ts & 0xFFFFFFFF).
    EXPECT_EQ(real_time_to_ns(0), 0u);
    EXPECT_EQ(real_time_to_ns(std::uint64_t{1'767'225'600} << 32 | 999'999'999u),
              1'767'225'600'999'999'999ull);
    // A nanoseconds field a sane NIC never writes: a value, not an overflow.
    EXPECT_EQ(real_time_to_ns(0xFFFFFFFFFFFFFFFFull),
              0xFFFFFFFFull * 1'000'000'000ull + 0xFFFFFFFFull);
}

// A driver that says "free-running" while the queue writes the real-time
// format: read as ns, the first stamp is in the 23rd century. Without a PHC
// to compare with, the century check stops the run at the first frame, and
// the line names the way out.
TEST(RealTimeStamps, AStampDecodedInTheWrongFormatStopsTheRunWithoutAPhc) {
    SimConfig c = real_time_device();
    c.reports_real_time_ts = false;
    PhcRig rig(c, false);
    ASSERT_EQ(rig.engine->timestamps(), verbs::TimestampFormat::wallclock_ns);
    for (const auto& f : one_stream(3)) {
        rig.nic->deliver(f, 1000);
    }
    const std::string why = rig.poll_error();
    EXPECT_NE(why.find("not a time of this century"), std::string::npos) << why;
    EXPECT_NE(why.find("--timestamps host"), std::string::npos) << why;
    EXPECT_EQ(rig.engine->stats().frames, 0u) << "no frame is handed on with a wrong time";
}

// The same with the netdev's PHC: the first stamp is compared with a PHC
// read, within a second. And the other way round: a driver that says
// "real-time" while the queue writes ns decodes to 1982.
TEST(RealTimeStamps, AStampDecodedInTheWrongFormatStopsTheRunAgainstThePhc) {
    SimConfig c = real_time_device();
    c.reports_real_time_ts = false;
    c.phc_read_ns = 1000;
    PhcRig rig(c, true);
    for (const auto& f : one_stream(3)) {
        rig.nic->deliver(f, 1000);
    }
    const std::string why = rig.poll_error();
    EXPECT_NE(why.find("from its PHC /dev/ptp2"), std::string::npos) << why;
    EXPECT_EQ(rig.engine->stats().frames, 0u);

    // The other way round, on the clock alone: a driver that says
    // "real-time" while the queue writes plain ns decodes to 1983.
    SimConfig lying;
    lying.reports_real_time_ts = true;
    SimProvider provider;
    provider.add(lying);
    const auto device = provider.open(lying.name, lying.port);
    NicClock clock;
    clock.setup(*device, verbs::TimestampFormat::wallclock_ns, FrameTime::utc, nullptr,
                "no PHC here");
    const std::string why2 = clock.implausible(lying.host_time_base_ns);
    EXPECT_NE(why2.find("decoded as the real-time format"), std::string::npos) << why2;
}

// The format decoded right passes the check and every frame is the PHC's
// time (test_nic_clock.cpp checks the conversion itself).
TEST(RealTimeStamps, RightlyDecodedStampsPassTheCheck) {
    SimConfig c = real_time_device();
    c.phc_read_ns = 1000;
    PhcRig rig(c, true, FrameTime::nic);
    for (const auto& f : one_stream(5)) {
        rig.nic->deliver(f, 1000);
    }
    EXPECT_EQ(rig.poll_error(), "");
    EXPECT_EQ(rig.engine->stats().frames, 5u);
    EXPECT_TRUE(rig.engine->clock_figures().real_time_format);
}

// --timestamps host: no completion timestamps asked for; CLOCK_REALTIME at
// each poll, said in the note.
TEST(RealTimeStamps, TimestampsHostAsksForNone) {
    PhcRig rig(real_time_device(), true, FrameTime::host);
    EXPECT_EQ(rig.engine->timestamps(), verbs::TimestampFormat::none);
    EXPECT_TRUE(has_note(rig.ledger, "--timestamps host"));
    EXPECT_EQ(rig.engine->clock_figures().frame_times, "host");
}

// R3: a wall-clock device whose PHC cannot be opened (the service user and
// a root-only /dev/ptpN): --timestamps utc asked for explicitly cannot be had
// and the start is refused with the reason; as the default it goes on in the
// NIC's own clock, with a warning and the note.
TEST(RealTimeStamps, AnExplicitUtcWithoutThePhcIsRefused) {
    const std::string missing =
        "cannot open /dev/ptp2: Permission denied; add the user to the group ibvcap-ptp";
    try {
        SimConfig c = real_time_device();
        SimProvider provider;
        provider.add(c);
        auto device = provider.open(c.name, c.port);
        auto memory = make_host_payload_memory();
        Ledger ledger;
        EngineOptions o = options_for({kG1}, 16);
        o.frame_time_given = true;
        o.phc_missing = missing;
        DemuxOptions d;
        d.groups = o.groups;
        Demux demux(d, ledger);
        VerbsEngine engine(*device, std::move(o), demux, ledger, *memory, MembershipFactory{});
        engine.start();
        ADD_FAILURE() << "an explicit --timestamps utc without a PHC started";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("--timestamps utc"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("ibvcap-ptp"), std::string::npos) << e.what();
    }
    PhcRig by_default(real_time_device(), false);
    EXPECT_EQ(by_default.engine->clock_figures().frame_times, "nic");
    EXPECT_TRUE(has_note(by_default.ledger, "not measured against CLOCK_REALTIME"));
}

// R5: the clock-info page unreadable on rdma-core 44 (Debian 12). The
// completion the failed poll consumed left its QP's tail behind; every QP is
// reset before the next poll, so no completion is taken under the previous
// WR's wr_id, and the frames after are whole. On v56 nothing is reset.
TEST(ClockPageFallback, BeforeRdmaCoreV55EveryQpIsResetBeforeMoreIsPolled) {
    for (const std::uint32_t release : {44u, 56u}) {
        SCOPED_TRACE(release);
        SimConfig c = real_time_device();
        c.clock_info_page = false;
        c.provider_release = release;
        Rig rig(options_for({kG1}, 16), {}, c);
        rig.engine->start();
        const auto frames = one_stream(4);
        for (const auto& f : frames) {
            rig.nic->deliver(f, 1000);
        }
        rig.poll_all();
        for (const auto& f : one_stream(8)) {
            rig.nic->deliver(f, 1000);
        }
        rig.poll_all();
        EXPECT_EQ(rig.nic->shifted_wr_ids(), 0u) << "a slot was delivered as another's";
        EXPECT_EQ(rig.engine->stats().clock_lost_completions, 1u);
        EXPECT_EQ(rig.engine->stats().bad_wr_id, 0u);
        if (release < 55) {
            EXPECT_GE(rig.engine->stats().recoveries, 1u);
            EXPECT_TRUE(has_note(rig.ledger, "rdma-core 44 (before v55)"));
            // The three left in the CQ went with the reset; the eight after
            // are whole.
            EXPECT_EQ(rig.engine->stats().frames, 8u);
        } else {
            EXPECT_EQ(rig.engine->stats().recoveries, 0u);
            EXPECT_EQ(rig.engine->stats().frames, 3u + 8u);
        }
    }
}

// R6: two netdevs of one port whose rules overlap are refused before
// anything is made: a QinQ pair (two tags each: the rules match no VID, so
// they are identical, one entry, every frame twice) and a parent with its
// VLAN (two flow groups: one lane starves). Two single-tagged VLANs of
// different ids stay two captures (test_engine TwoVlansOfOnePortAreTwoCaptures).
TEST(SamePort, OverlappingNetdevsOfOnePortAreAUsageError) {
    struct Row {
        const char* what;
        std::vector<std::uint16_t> a;
        std::vector<std::uint16_t> b;
        const char* says;
    };
    const Row rows[] = {
        {"QinQ pair", {100, 7}, {100, 8}, "a netdev with two VLAN tags is matched without its ids"},
        {"parent and VLAN", {}, {100}, "an untagged netdev's rules also match its VLANs' frames"},
        {"one QinQ, one single", {100}, {100, 8}, "two VLAN tags"},
    };
    for (const Row& row : rows) {
        SCOPED_TRACE(row.what);
        SimProvider provider;
        auto nic = provider.add({});
        CaptureRequest request;
        request.engine = options_for({kG1}, 16);
        request.demux.groups = {kG1};
        request.nic_counters = false;
        request.targets = {{"sim_mlx5_0", 1, "x.a", 0, row.a}, {"sim_mlx5_0", 1, "x.b", 0, row.b}};
        try {
            VerbsSource source(request, provider, {});
            ADD_FAILURE() << "accepted";
        } catch (const UsageError& e) {
            EXPECT_NE(std::string(e.what()).find(row.says), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("capture the port once"), std::string::npos);
        }
        EXPECT_EQ(nic->flows(), 0u);
    }
}

// R8: a device gone fatal before its event reached the poll thread. The
// watchdog's counter read fails with EIO; it raises no alarm and throws
// nothing (it used to become a "counters and stats" worker failure).
TEST(Watchdog, ReadsNoCountersOfAFatalDevice) {
    Rig rig(options_for({kG1}, 16));
    rig.engine->start();
    EXPECT_TRUE(rig.engine->watchdog().empty());
    rig.nic->raise_device_fatal(false);  // the event not yet seen
    std::vector<std::string> alarms;
    EXPECT_NO_THROW(alarms = rig.engine->watchdog());
    EXPECT_TRUE(alarms.empty());
    EXPECT_NO_THROW(alarms = rig.engine->watchdog());  // and once known, no read at all
}

}  // namespace
}  // namespace ibvcap
