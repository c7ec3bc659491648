// Expected streams on the simulated NIC (test/sim/sim_nic.hpp), through the
// verbs capture runner: each case of issue 16's "Done when" (a missing
// antenna, a missing thread, a never-seen group, an unexpected stream, a late
// start, a wrong rate; and a stream that stops early) in a run of its own,
// asserting the reason, its count and the exit verdict.
//
// The wire is paced in real time (a slot every 5 ms) and the simulated
// device clock advances by the same 5 ms per slot, so the frames' completion
// timestamps (the rate) and the host's clock (the join, the end) agree, as
// they do on a NIC whose clock runs at real time.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "frames.hpp"
#include "lib/ledger/expect.hpp"
#include "lib/ledger/report.hpp"
#include "lib/run/verbs_capture.hpp"
#include "test/sim/sim_nic.hpp"

namespace ibvcap {
namespace {

constexpr std::uint16_t kPort = 36001;
const Endpoint kG1{test::kGroup1, kPort};
const Endpoint kG2{test::kGroup2, kPort};
constexpr std::uint32_t kA1 = test::kAntenna1;
constexpr std::uint32_t kA2 = test::kAntenna2;
constexpr std::uint32_t kA3 = (10u << 24) | 13u;
constexpr std::uint64_t kFramesPerSecond = 200;  // the header's: 200 frames per 1 s period
constexpr auto kSlot = std::chrono::milliseconds(5);
constexpr std::uint64_t kSlots = 120;  // 0.6 s

// One stream on the wire: its frames in slots [from, to), one every `step`.
struct Sent {
    Endpoint group;
    std::uint32_t antenna = 0;
    std::uint16_t thread = 0;
    std::uint64_t from = 0;
    std::uint64_t to = kSlots;
    std::uint64_t step = 1;
};

// The four streams the manifest expects on group 1 (antennas 1 and 2,
// threads 0 and 1), all on time.
std::vector<Sent> all_four() {
    return {{kG1, kA1, 0}, {kG1, kA1, 1}, {kG1, kA2, 0}, {kG1, kA2, 1}};
}

std::vector<std::uint8_t> frame_of(const Sent& s, std::uint64_t k) {
    auto h = test::make_header(static_cast<std::uint32_t>(k / kFramesPerSecond),
                               static_cast<std::uint32_t>(k % kFramesPerSecond), s.thread);
    h.totalsamples = kFramesPerSecond * 256;  // 256 samples per frame
    return test::make_frame(s.antenna, s.group.ip, s.group.port, h);
}

RunOutcome run(const std::vector<Sent>& wire, const ExpectManifest& manifest,
               const std::vector<Endpoint>& groups = {kG1}) {
    sim::SimProvider provider;
    auto nic = provider.add({});
    CaptureRequest request;
    request.targets = {{"sim_mlx5_0", 1, "", 0, {}}};
    request.engine.groups = groups;
    request.engine.ring_depth = 256;
    request.demux.groups = groups;
    request.watchdog = false;
    request.tick = std::chrono::milliseconds(100);
    request.duration_s = 30;  // a bound; the wire ends the run with stop
    request.expect = manifest;
    request.expect_options.grace_s = 0.2;
    std::atomic<bool> stop{false};
    std::thread sender([&] {
        while (nic->flows() < groups.size()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        const auto t0 = std::chrono::steady_clock::now();
        std::uint64_t last_slot = 0;
        for (std::uint64_t slot = 0; slot < kSlots; ++slot) {
            std::this_thread::sleep_until(t0 + slot * kSlot);
            for (const Sent& s : wire) {
                if (slot < s.from || slot >= s.to || (slot - s.from) % s.step != 0) {
                    continue;
                }
                while (nic->min_posted_wrs() == 0) {
                    std::this_thread::yield();
                }
                // The device clock moves with the slots (1 tick = 1 ns).
                const auto ticks = static_cast<std::uint64_t>(
                    std::chrono::nanoseconds(kSlot).count() * static_cast<long>(slot - last_slot));
                last_slot = slot;
                nic->deliver(frame_of(s, (slot - s.from) / s.step), ticks);
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        stop = true;
    });
    RunOutcome out = run_verbs_capture(request, provider, {}, stop);
    sender.join();
    return out;
}

const ExpectManifest& manifest() {
    static const ExpectManifest m = parse_expect_manifest(
        R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11", "10.0.0.12"], "threads": 2})",
        "m.json");
    return m;
}

// The one problem the case is about, with its count; every other none.
void expect_only(const RunOutcome& out, ExpectProblem problem, std::uint64_t n, int exit_code) {
    const ExpectResults& e = out.ledger.expectations();
    ASSERT_TRUE(e.active);
    for (std::size_t i = 0; i < kExpectProblemCount; ++i) {
        const auto p = static_cast<ExpectProblem>(i);
        EXPECT_EQ(e.count(p), p == problem ? n : 0u) << to_string(p);
    }
    EXPECT_EQ(out.exit_code, exit_code);
    EXPECT_EQ(out.ledger.totals().missing, 0u) << "no frame of any stream was lost";
    const auto j = report_json(out.ledger, out.info);
    EXPECT_EQ(j["verdict"], exit_code == kExitZeroLoss ? "zero-loss" : "loss");
    EXPECT_EQ(j["expected"]["problems"][std::string(to_string(problem))], n);
}

// The report's entry of one stream.
nlohmann::json entry(const RunOutcome& out, const Endpoint& g, std::uint32_t antenna,
                     std::uint16_t thread) {
    const auto j = report_json(out.ledger, out.info);
    for (const auto& s : j["expected"]["streams"]) {
        if (s["group"] == g.to_string() && s["antenna"] == format_ipv4(antenna) &&
            s["thread"] == thread) {
            return s;
        }
    }
    return {};
}

TEST(ExpectOnTheSimNic, AllAsExpectedIsZeroLoss) {
    const auto out = run(all_four(), manifest());
    expect_only(out, ExpectProblem::unexpected, 0, kExitZeroLoss);
    EXPECT_EQ(out.ledger.expectations().expected_count(), 4u);
    const auto s = entry(out, kG1, kA2, 1);
    EXPECT_EQ(s["state"], "ok");
    EXPECT_EQ(s["packets"], kSlots);
    EXPECT_NEAR(s["frames_per_second"].get<double>(), 200.0, 1.0);
}

TEST(ExpectOnTheSimNic, AMissingAntenna) {
    auto wire = all_four();
    wire.resize(2);  // antenna 2 sends nothing
    const auto out = run(wire, manifest());
    expect_only(out, ExpectProblem::antenna_missing, 2, kExitLoss);
    EXPECT_EQ(entry(out, kG1, kA2, 0)["state"], "antenna_missing");
    EXPECT_EQ(entry(out, kG1, kA2, 1)["packets"], 0u);
}

TEST(ExpectOnTheSimNic, AMissingThread) {
    auto wire = all_four();
    wire.pop_back();  // antenna 2 sends thread 0 only
    const auto out = run(wire, manifest());
    expect_only(out, ExpectProblem::thread_missing, 1, kExitLoss);
    EXPECT_EQ(entry(out, kG1, kA2, 1)["state"], "thread_missing");
}

TEST(ExpectOnTheSimNic, ANeverSeenGroup) {
    const auto two = parse_expect_manifest(
        R"({"groups": ["239.17.0.1:36001", "239.17.0.2:36001"], "antennas": ["10.0.0.11", "10.0.0.12"], "threads": 2})",
        "m.json");
    const auto out = run(all_four(), two, {kG1, kG2});  // nothing to group 2
    expect_only(out, ExpectProblem::group_never_seen, 4, kExitLoss);
    EXPECT_EQ(entry(out, kG2, kA1, 0)["state"], "group_never_seen");
}

TEST(ExpectOnTheSimNic, AnUnexpectedStreamIsListedAndLosesNothing) {
    auto wire = all_four();
    wire.push_back({kG1, kA3, 0});
    const auto out = run(wire, manifest());
    expect_only(out, ExpectProblem::unexpected, 1, kExitZeroLoss);
    const auto s = entry(out, kG1, kA3, 0);
    EXPECT_EQ(s["state"], "unexpected");
    EXPECT_EQ(s["expected"], false);
    EXPECT_EQ(s["packets"], kSlots);
}

TEST(ExpectOnTheSimNic, ALateStart) {
    auto wire = all_four();
    wire.back().from = 60;  // 0.3 s after the others; the grace is 0.2 s
    const auto out = run(wire, manifest());
    expect_only(out, ExpectProblem::late_start, 1, kExitLoss);
    const auto s = entry(out, kG1, kA2, 1);
    EXPECT_EQ(s["state"], "late_start");
    EXPECT_GT(s["first_after_join_s"].get<double>(), 0.2);
}

TEST(ExpectOnTheSimNic, AWrongRate) {
    auto wire = all_four();
    wire.back().step = 2;  // 100 frames per second; its header says 200
    const auto out = run(wire, manifest());
    expect_only(out, ExpectProblem::wrong_rate, 1, kExitLoss);
    const auto s = entry(out, kG1, kA2, 1);
    EXPECT_EQ(s["state"], "wrong_rate");
    EXPECT_NEAR(s["frames_per_second"].get<double>(), 100.0, 1.0);
    EXPECT_EQ(s["expected_frames_per_second"].get<double>(), 200.0);
}

TEST(ExpectOnTheSimNic, AStreamThatStopsEarly) {
    auto wire = all_four();
    wire.back().to = 60;  // stops 0.3 s before the others; the grace is 0.2 s
    const auto out = run(wire, manifest());
    expect_only(out, ExpectProblem::stopped_early, 1, kExitLoss);
    EXPECT_EQ(entry(out, kG1, kA2, 1)["state"], "stopped_early");
}

}  // namespace
}  // namespace ibvcap
