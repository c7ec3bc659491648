// The live stats line (lib/run/stats_line.hpp): the rates between two snapshots,
// the formatting, the ticker's first tick and -q; then the line as both
// sources print it, once a second: the verbs capture runner on the simulated
// NIC, and libpcap on the loopback interface.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <future>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "frames.hpp"
#include "full_pipe.hpp"
#include "lib/run/console.hpp"
#include "lib/run/pcap_capture.hpp"
#include "lib/run/stats_line.hpp"
#include "lib/run/verbs_capture.hpp"
#include "lib/sources/pcap_live.hpp"
#include "lib/traffic/generator.hpp"
#include "test/sim/sim_nic.hpp"

namespace ibvcap {
namespace {

using namespace std::chrono_literals;

// The line's clock is local time: pin the zone so the expected text is fixed.
class StatsLine : public ::testing::Test {
  protected:
    void SetUp() override {
        ::setenv("TZ", "UTC", 1);
        ::tzset();
    }
};

// 2024-01-02 12:00:03 UTC.
const std::chrono::system_clock::time_point kWall =
    std::chrono::system_clock::from_time_t(1704196803);

StatsSnapshot at(std::chrono::steady_clock::time_point t, std::uint64_t packets,
                 std::optional<std::uint64_t> bytes) {
    StatsSnapshot s;
    s.time = t;
    s.wall = kWall;
    s.packets = packets;
    s.bytes = bytes;
    return s;
}

// Everything a FILE* received, read back from a tmpfile.
std::string contents(std::FILE* f) {
    std::fflush(f);
    std::rewind(f);
    std::string out;
    char buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
        out.append(buf, n);
    }
    return out;
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        out.push_back(line);
    }
    return out;
}

TEST_F(StatsLine, RatesFromTwoSnapshots) {
    const auto t0 = std::chrono::steady_clock::time_point{} + 100s;
    StatsSnapshot prev = at(t0, 1'000, 1'000 * 8298);
    // 98,311 frames of 8298 bytes in one second: 6.526 Gb/s.
    StatsSnapshot now = at(t0 + 1s, 1'000 + 98'311, (1'000 + 98'311) * 8298ull);
    now.drops = 3;
    now.slots_held = 512;
    now.writer_backlog_bytes = std::uint64_t{12} << 20;
    EXPECT_EQ(format_stats_line(prev, now),
              "ibvcap stats: 12:00:03  98,311 pkt/s  6.53 Gb/s  drops 3  slots held 512  "
              "writer backlog 12.0 MiB");
}

TEST_F(StatsLine, RatesAreOverTheElapsedTimeNotPerTick) {
    const auto t0 = std::chrono::steady_clock::time_point{} + 100s;
    // A tick that came late: 3,000 frames of 1250 bytes in 1.5 s.
    const StatsSnapshot prev = at(t0, 0, 0);
    const StatsSnapshot now = at(t0 + 1500ms, 3'000, 3'000 * 1250);
    EXPECT_EQ(format_stats_line(prev, now),
              "ibvcap stats: 12:00:03  2,000 pkt/s  0.02 Gb/s  drops 0  slots held -  "
              "writer backlog -");
}

TEST_F(StatsLine, BigNumbersAreGroupedInThousands) {
    EXPECT_EQ(group_thousands(0), "0");
    EXPECT_EQ(group_thousands(999), "999");
    EXPECT_EQ(group_thousands(1'000), "1,000");
    EXPECT_EQ(group_thousands(1'234'567), "1,234,567");
    EXPECT_EQ(group_thousands(100'000'000), "100,000,000");
    EXPECT_EQ(group_thousands(std::numeric_limits<std::uint64_t>::max()),
              "18,446,744,073,709,551,615");

    const auto t0 = std::chrono::steady_clock::time_point{} + 100s;
    // 20 Mpps of 8298-byte frames: 1.33 Tb/s, 1,234,567 drops, a 4 GiB backlog.
    const StatsSnapshot prev = at(t0, 0, 0);
    StatsSnapshot now = at(t0 + 1s, 20'000'000, 20'000'000ull * 8298);
    now.drops = 1'234'567;
    now.slots_held = 131'072;
    now.writer_backlog_bytes = std::uint64_t{4} << 30;
    EXPECT_EQ(format_stats_line(prev, now),
              "ibvcap stats: 12:00:03  20,000,000 pkt/s  1327.68 Gb/s  drops 1,234,567  "
              "slots held 131,072  writer backlog 4096.0 MiB");
}

TEST_F(StatsLine, UnknownFiguresAreDashes) {
    const auto t0 = std::chrono::steady_clock::time_point{} + 100s;
    // Bytes unknown at either end: no Gb/s.
    EXPECT_EQ(format_stats_line(at(t0, 0, std::nullopt), at(t0 + 1s, 10, std::nullopt)),
              "ibvcap stats: 12:00:03  10 pkt/s  - Gb/s  drops 0  slots held -  "
              "writer backlog -");
    EXPECT_EQ(format_stats_line(at(t0, 0, std::nullopt), at(t0 + 1s, 10, 1000)),
              "ibvcap stats: 12:00:03  10 pkt/s  - Gb/s  drops 0  slots held -  "
              "writer backlog -");
}

TEST_F(StatsLine, CountersThatGoBackwardsGiveZeroNeverNegative) {
    const auto t0 = std::chrono::steady_clock::time_point{} + 100s;
    const StatsSnapshot prev = at(t0, 5'000, 5'000'000);
    const StatsSnapshot now = at(t0 + 1s, 10, 100);  // a reset
    const std::string line = format_stats_line(prev, now);
    EXPECT_EQ(line,
              "ibvcap stats: 12:00:03  0 pkt/s  0.00 Gb/s  drops 0  slots held -  "
              "writer backlog -");
}

TEST_F(StatsLine, AnIntervalOfZeroOrLessGivesZeroRates) {
    const auto t0 = std::chrono::steady_clock::time_point{} + 100s;
    EXPECT_EQ(format_stats_line(at(t0, 0, 0), at(t0, 500, 50'000)),
              "ibvcap stats: 12:00:03  0 pkt/s  0.00 Gb/s  drops 0  slots held -  "
              "writer backlog -");
    EXPECT_EQ(format_stats_line(at(t0 + 1s, 0, 0), at(t0, 500, 50'000)),
              "ibvcap stats: 12:00:03  0 pkt/s  0.00 Gb/s  drops 0  slots held -  "
              "writer backlog -");
}

TEST_F(StatsLine, TheFirstTickIsTheBaselineThenOneWholeLinePerTick) {
    std::FILE* out = std::tmpfile();
    ASSERT_NE(out, nullptr);
    StatsTicker ticker(out);
    EXPECT_TRUE(ticker.enabled());
    const auto t0 = std::chrono::steady_clock::time_point{} + 100s;
    EXPECT_FALSE(ticker.tick(at(t0, 0, 0)));
    EXPECT_EQ(contents(out), "") << "nothing before the first second";
    EXPECT_TRUE(ticker.tick(at(t0 + 1s, 100, 100'000)));
    EXPECT_TRUE(ticker.tick(at(t0 + 2s, 300, 300'000)));
    const std::string text = contents(out);
    std::fclose(out);
    EXPECT_EQ(text,
              "ibvcap stats: 12:00:03  100 pkt/s  0.00 Gb/s  drops 0  slots held -  "
              "writer backlog -\n"
              "ibvcap stats: 12:00:03  200 pkt/s  0.00 Gb/s  drops 0  slots held -  "
              "writer backlog -\n")
        << "each line from the previous tick, whole lines ending in a newline";
}

// Issue 14, item 4: a stats line the stream cannot take at once is dropped
// and counted; the tick never waits (it runs on the capture thread).
TEST_F(StatsLine, AFullStreamDropsAndCountsTheLineInsteadOfWaiting) {
    std::signal(SIGPIPE, SIG_IGN);  // the unblocking below closes the reader
    test::FullPipe pipe;
    std::FILE* out = ::fdopen(::dup(pipe.fds[1]), "w");
    ASSERT_NE(out, nullptr);
    auto ticker = std::make_unique<StatsTicker>(out);
    const auto t0 = std::chrono::steady_clock::time_point{} + 100s;
    auto ticks = std::async(std::launch::async, [&] {
        ticker->tick(at(t0, 0, 0));
        return ticker->tick(at(t0 + 1s, 100, 100)) || ticker->tick(at(t0 + 2s, 200, 200));
    });
    const bool returned = ticks.wait_for(5s) == std::future_status::ready;
    if (!returned) {
        ::close(pipe.fds[0]);  // EPIPE ends the blocked write
        pipe.fds[0] = -1;
    }
    EXPECT_TRUE(returned) << "the tick waited for a full stream";
    EXPECT_FALSE(ticks.get()) << "a full stream took a line";
    EXPECT_EQ(ticker->dropped(), returned ? 2u : 0u);
    ticker.reset();
    std::fclose(out);
    // Once the reader catches up, lines go out again, whole.
    if (returned) {
        pipe.drain();
        StatsTicker again(::fdopen(::dup(pipe.fds[1]), "w"));
        again.tick(at(t0, 0, 0));
        EXPECT_TRUE(again.tick(at(t0 + 1s, 100, 100)));
        EXPECT_EQ(again.dropped(), 0u);
    }
}

// The Console behind it: never waits in try_write, waits at most its
// patience in write_within, and leaves the caller's descriptor blocking (the
// shell shares it).
TEST_F(StatsLine, ConsoleNeverWaitsLongerThanAskedAndLeavesTheStreamBlocking) {
    test::FullPipe pipe;
    Console console(pipe.fds[1]);
    EXPECT_FALSE(console.try_write("one line\n"));
    EXPECT_EQ(console.dropped(), 1u);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(console.write_within("the summary\n", 300ms));
    const auto waited = std::chrono::steady_clock::now() - start;
    EXPECT_GE(waited, 250ms);
    EXPECT_LT(waited, 3s);
    EXPECT_EQ(console.dropped(), 2u);
    EXPECT_EQ(::fcntl(pipe.fds[1], F_GETFL) & O_NONBLOCK, 0);
    pipe.drain();
    EXPECT_TRUE(console.try_write("after\n"));
    EXPECT_TRUE(console.write_within("the summary\n", 300ms));
    char buf[64] = {};
    EXPECT_EQ(::read(pipe.fds[0], buf, sizeof buf), 18);
    EXPECT_EQ(std::string(buf), "after\nthe summary\n");
}

TEST_F(StatsLine, QuietPrintsNothing) {
    StatsTicker ticker(nullptr);  // -q
    EXPECT_FALSE(ticker.enabled());
    const auto t0 = std::chrono::steady_clock::time_point{} + 100s;
    EXPECT_FALSE(ticker.tick(at(t0, 0, 0)));
    EXPECT_FALSE(ticker.tick(at(t0 + 1s, 100, 100)));
    EXPECT_FALSE(ticker.tick(at(t0 + 2s, 200, 200)));
}

// ------------------------------------------------------ the sources print it

// "ibvcap stats: HH:MM:SS  N pkt/s  G Gb/s  drops N  slots held S  writer backlog B"
const std::regex kLine(
    R"(ibvcap stats: \d\d:\d\d:\d\d  ([0-9,]+) pkt/s  (-|\d+\.\d\d) Gb/s  drops [0-9,]+  )"
    R"(slots held (-|[0-9,]+)  writer backlog (-|\d+\.\d MiB))");

TEST_F(StatsLine, TheVerbsCaptureRunnerPrintsOneLineASecond) {
    sim::SimProvider provider;
    auto nic = provider.add({});
    test::TempDir dir;
    const Endpoint group{test::kGroup1, 36001};
    CaptureRequest request;
    request.targets = {{"sim_mlx5_0", 1, "", 0, {}}};
    request.engine.groups = {group};
    request.engine.ring_depth = 64;
    request.engine.poll_batch = 16;
    request.engine.repost_batch = 8;
    request.demux.groups = {group};
    request.outputs.output_dir = dir.path().string();
    request.outputs.formats = {OutputFormat::codif};
    request.nic_counters = false;
    request.duration_s = 1.5;
    std::FILE* out = std::tmpfile();
    ASSERT_NE(out, nullptr);
    request.stats = out;

    GeneratorConfig config;
    config.antennas = {test::kAntenna1};
    config.groups = {group};
    config.frames = 200;
    config.payload_bytes = 2048;
    std::atomic<bool> stop{false};
    std::thread wire([&] {
        while (nic->flows() < 1) {
            std::this_thread::sleep_for(1ms);
        }
        Generator gen(config);
        GeneratedFrame f;
        while (gen.next(f)) {
            while (nic->min_posted_wrs() == 0) {
                std::this_thread::yield();
            }
            nic->deliver(f.bytes);
        }
    });
    const RunOutcome outcome = run_verbs_capture(request, provider, {}, stop);
    wire.join();
    EXPECT_EQ(outcome.ledger.totals().codif, 200u);
    const auto lines = lines_of(contents(out));
    std::fclose(out);
    ASSERT_EQ(lines.size(), 1u) << "1.5 s: one line, after the first second";
    std::uint64_t sum = 0;
    for (const auto& line : lines) {
        std::smatch m;
        ASSERT_TRUE(std::regex_match(line, m, kLine)) << line;
        std::string pps = m[1].str();
        std::erase(pps, ',');
        sum += std::stoull(pps);
        // The verbs source knows bytes, slots and the writer's backlog.
        EXPECT_EQ(line.find("  - Gb/s  "), std::string::npos) << line;
        EXPECT_EQ(line.find("slots held -"), std::string::npos) << line;
        EXPECT_NE(line.find(" MiB"), std::string::npos) << line;
    }
    EXPECT_GT(sum, 0u) << "the 200 frames arrived in the first second";
}

TEST_F(StatsLine, ThePcapSourcePrintsOneLineASecondAndNothingWhenQuiet) {
    PcapCaptureRequest request;
    request.interface = "lo";
    request.demux.groups = {Endpoint{(239u << 24) | (255u << 16) | 73u,
                                     static_cast<std::uint16_t>(40000 + ::getpid() % 20000)}};
    request.buffer_bytes = std::size_t{4} << 20;
    request.duration_s = 1.5;
    std::FILE* out = std::tmpfile();
    ASSERT_NE(out, nullptr);
    request.stats = out;
    const std::atomic<bool> stop{false};
    try {
        (void)run_pcap_capture(request, {}, stop);
    } catch (const std::runtime_error& e) {
        std::fclose(out);
        if (std::string(e.what()).find("no permission") != std::string::npos) {
            IBVCAP_SKIP_UNLESS_CI("no permission to capture on lo (needs CAP_NET_RAW)");
        }
        FAIL() << e.what();
    }
    const auto lines = lines_of(contents(out));
    std::fclose(out);
    ASSERT_EQ(lines.size(), 1u) << "1.5 s: one line, after the first second";
    EXPECT_TRUE(std::regex_match(lines[0], kLine)) << lines[0];
    // A silent group; no slots (libpcap's ring), no writer (no -F).
    EXPECT_NE(lines[0].find("  0 pkt/s  0.00 Gb/s  drops 0  slots held -  writer backlog -"),
              std::string::npos)
        << lines[0];

    request.stats = nullptr;  // -q
    request.duration_s = 1.1;
    testing::internal::CaptureStderr();
    (void)run_pcap_capture(request, {}, stop);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace ibvcap
