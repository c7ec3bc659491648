// Expected streams (lib/ledger/expect.hpp): the manifest parser against
// hostile inputs, the evaluation against streams made by hand, and the verdict
// they give. (The runs on the simulated NIC are in test_expect_sim.cpp.)
// Each test here was seen to fail against a one-line fault planted in the code
// it guards (see the commit messages).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lib/ledger/expect.hpp"
#include "lib/ledger/report.hpp"

namespace ibvcap {
namespace {

constexpr std::uint32_t kG1 = (239u << 24) | (17u << 16) | 1u;
constexpr std::uint32_t kG2 = (239u << 24) | (17u << 16) | 2u;
constexpr std::uint16_t kPort = 36001;
constexpr std::uint32_t kA1 = (10u << 24) | 11u;
constexpr std::uint32_t kA2 = (10u << 24) | 12u;
constexpr std::uint32_t kA3 = (10u << 24) | 13u;

// ---- The manifest ----

std::string error_of(const std::string& text) {
    try {
        parse_expect_manifest(text, "m.json");
    } catch (const ExpectManifestError& e) {
        return e.what();
    }
    return "";
}

TEST(ExpectManifest, GroupsAntennasAndThreadsInEveryShape) {
    const auto m = parse_expect_manifest(R"({
      "comment": "two groups",
      "antennas": ["10.0.0.11", {"ip": "10.0.0.12", "threads": [3, 1], "frames_per_second": 500}],
      "threads": 2,
      "frames_per_period": 1000,
      "groups": ["239.17.0.1:36001",
                 {"group": "239.17.0.2:36001", "antennas": ["10.0.0.13"], "threads": [7]}]
    })",
                                         "m.json");
    ASSERT_EQ(m.groups.size(), 2u);
    const auto& g1 = m.groups[0];
    EXPECT_EQ(g1.group, (Endpoint{kG1, kPort}));
    ASSERT_EQ(g1.antennas.size(), 2u);
    EXPECT_EQ(g1.antennas[0].ip, kA1);
    EXPECT_EQ(g1.antennas[0].threads, (std::vector<std::uint16_t>{0, 1}));
    EXPECT_EQ(g1.antennas[0].frames_per_period, 1000u);
    EXPECT_FALSE(g1.antennas[0].frames_per_second);
    EXPECT_EQ(g1.antennas[1].threads, (std::vector<std::uint16_t>{1, 3}));
    EXPECT_EQ(g1.antennas[1].frames_per_second, 500.0);
    EXPECT_FALSE(g1.antennas[1].frames_per_period) << "the nearer level's rate wins";
    const auto& g2 = m.groups[1];
    ASSERT_EQ(g2.antennas.size(), 1u);
    EXPECT_EQ(g2.antennas[0].ip, kA3);
    EXPECT_EQ(g2.antennas[0].threads, (std::vector<std::uint16_t>{7}));
    EXPECT_EQ(m.stream_count(), 2u + 2u + 1u);
}

TEST(ExpectManifest, HostileInputsNameTheFileThePositionAndTheFix) {
    struct Case {
        const char* text;
        const char* says;  // a part of the one-line message
    };
    const Case cases[] = {
        {"", "m.json: line 1, column 1: not valid JSON"},
        {"{\n  \"groups\": [\n    \"239.17.0.1:36001\",,\n", "m.json: line 3"},
        {"[]", "m.json: /: a manifest is a JSON object"},
        {R"({"threads": 1, "antennas": ["10.0.0.11"]})", "/groups: \"groups\" is a non-empty"},
        {R"({"groups": []})", "/groups: \"groups\" is a non-empty"},
        {R"({"groups": ["239.17.0.1:36001"], "threads": 1})", "/groups/0: no antennas"},
        {R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11"]})",
         "/antennas/0: no threads for antenna 10.0.0.11"},
        {R"({"groups": ["239.17.0.1"], "antennas": ["10.0.0.11"], "threads": 1})",
         "/groups/0: bad group"},
        {R"({"groups": ["10.0.0.1:36001"], "antennas": ["10.0.0.11"], "threads": 1})",
         "/groups/0: bad group"},
        {R"({"groups": [5], "antennas": ["10.0.0.11"], "threads": 1})", "/groups/0: a group is"},
        {R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.300"], "threads": 1})",
         "/antennas/0: bad antenna \"10.0.0.300\""},
        {R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11", "10.0.0.11"], "threads": 1})",
         "/antennas/1: antenna 10.0.0.11 is listed twice"},
        {R"({"groups": ["239.17.0.1:36001", "239.17.0.1:36001"], "antennas": ["10.0.0.11"], "threads": 1})",
         "/groups/1: group 239.17.0.1:36001 is listed twice"},
        {R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11"], "threads": 0})",
         "/threads: bad thread count 0"},
        {R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11"], "threads": -2})",
         "/threads: bad thread count -2"},
        {R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11"], "threads": 65537})",
         "/threads: bad thread count 65537"},
        {R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11"], "threads": 1.5})",
         "/threads: bad threads"},
        {R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11"], "threads": [0, 65536]})",
         "/threads/1: bad thread id 65536"},
        {R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11"], "threads": [1, 1]})",
         "/threads/1: thread 1 is listed twice"},
        {R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11"], "threads": 1, "frames_per_second": 0})",
         "/frames_per_second: bad rate 0"},
        {R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11"], "threads": 1, "frames_per_second": "1000"})",
         "/frames_per_second: bad rate"},
        {R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11"], "threads": 1, "frames_per_period": 0})",
         "/frames_per_period: bad frames_per_period 0"},
        {R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11"], "threads": 1, "frames_per_second": 1, "frames_per_period": 1})",
         "both frames_per_second and frames_per_period"},
        {R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11"], "threads": 1, "thread": 1})",
         "/: unknown key \"thread\" (valid here: groups, antennas, threads"},
        {R"({"groups": [{"group": "239.17.0.1:36001", "antenas": []}], "antennas": ["10.0.0.11"], "threads": 1})",
         "/groups/0: unknown key \"antenas\""},
        {R"({"groups": [{"antennas": ["10.0.0.11"]}], "threads": 1})",
         "/groups/0: a group object needs \"group\""},
        {R"({"groups": [{"group": "239.17.0.1:36001", "antennas": [{"threads": 1}]}]})",
         "/groups/0/antennas/0: an antenna object needs \"ip\""},
        {R"({"groups": [{"group": "239.17.0.1:36001", "antennas": "10.0.0.11"}], "threads": 1})",
         "/groups/0/antennas: \"antennas\" is a non-empty list"},
    };
    for (const auto& c : cases) {
        const std::string e = error_of(c.text);
        EXPECT_NE(e.find(c.says), std::string::npos) << c.text << "\n  said: " << e;
        EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
        EXPECT_EQ(e.rfind("m.json: ", 0), 0u) << "names the file: " << e;
    }
}

TEST(ExpectManifest, SizeAndCountLimits) {
    EXPECT_NE(error_of(std::string(kMaxManifestBytes + 1, ' ')).find("a manifest is at most"),
              std::string::npos);
    // Deep nesting: refused while it is parsed (lib/ledger/json_input.hpp),
    // before anything could recurse through it.
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    EXPECT_EQ(error_of(deep),
              "m.json: nested deeper than 128 levels: not a manifest (a JSON "
              "object with \"groups\", docs/operations.md)");
    // 257 groups.
    std::string groups;
    for (int i = 0; i < 257; ++i) {
        groups += (i ? "," : "") + std::string("\"239.17.1.") + std::to_string(i % 250) + ":" +
                  std::to_string(1000 + i) + "\"";
    }
    EXPECT_NE(error_of(R"({"antennas": ["10.0.0.11"], "threads": 1, "groups": [)" + groups + "]}")
                  .find("257 groups: at most 256"),
              std::string::npos);
    // 2 x 40000 streams: over the stream limit at the second group.
    EXPECT_NE(error_of(R"({"antennas": ["10.0.0.11", "10.0.0.12"], "threads": 40000,
                          "groups": ["239.17.0.1:36001"]})")
                  .find("/groups/0: more than 65536 streams"),
              std::string::npos);
}

TEST(ExpectManifest, AFileThatCannotBeReadIsNamed) {
    try {
        load_expect_manifest("/nonexistent/m.json");
        FAIL() << "no error";
    } catch (const ExpectManifestError& e) {
        EXPECT_NE(std::string(e.what()).find("/nonexistent/m.json: cannot read the manifest"),
                  std::string::npos)
            << e.what();
    }
}

TEST(ExpectManifest, TheDocumentedExampleParses) {
    // docs/operations.md, "Telling ibvcap what to expect", shows this file.
    const auto m = load_expect_manifest(IBVCAP_SOURCE_DIR "/docs/examples/expect.json");
    ASSERT_EQ(m.groups.size(), 2u);
    EXPECT_EQ(m.stream_count(), 4u * 2u + 4u * 2u + 1u);
    EXPECT_EQ(m.groups[1].antennas[4].frames_per_second, 500.0);
}

TEST(ExpectManifest, Shorthand) {
    const auto m = expect_shorthand(3, 2);
    EXPECT_TRUE(m.shorthand);
    EXPECT_EQ(m.stream_count(), 6u);
    EXPECT_THROW(expect_shorthand(0, 2), ExpectManifestError);
    EXPECT_THROW(expect_shorthand(2, 0), ExpectManifestError);
    EXPECT_THROW(expect_shorthand(1025, 1), ExpectManifestError);
    EXPECT_THROW(expect_shorthand(2, 40000), ExpectManifestError);
}

TEST(ExpectManifest, AGroupTheRunDoesNotCaptureIsNamed) {
    const auto m = parse_expect_manifest(
        R"({"groups": ["239.17.0.1:36001", "239.17.0.2:36001"], "antennas": ["10.0.0.11"], "threads": 1})",
        "m.json");
    const std::vector<Endpoint> one{{kG1, kPort}};
    EXPECT_NE(manifest_group_not_captured(m, one).find("expects group 239.17.0.2:36001"),
              std::string::npos);
    const std::vector<Endpoint> both{{kG1, kPort}, {kG2, kPort}};
    EXPECT_EQ(manifest_group_not_captured(m, both), "");
    EXPECT_EQ(manifest_group_not_captured(m, {}), "") << "no groups named: every one is captured";
}

// ---- The evaluation ----

constexpr std::int64_t kSecond = 1'000'000'000;

// A stream of `frames` frames at `fps` (its header: 1000 frames per 1 s
// period), first arriving `start_s` after the join (at 0), in both clocks.
StreamStats stream(std::uint32_t group, std::uint32_t antenna, std::uint16_t thread,
                   std::uint64_t frames, double fps = 1000, double start_s = 0.1) {
    StreamStats s;
    s.group = {group, kPort};
    s.antenna = antenna;
    s.thread = thread;
    s.timing.period = 1;
    s.timing.frames_per_period = 1000;
    for (std::uint64_t i = 0; i < frames; ++i) {
        s.sequence.observe(i);
    }
    const auto start = static_cast<std::int64_t>(start_s * 1e9);
    s.registered_ns = start;
    s.first_arrival_ns = 5 * kSecond + static_cast<std::uint64_t>(start);
    s.last_arrival_ns = s.first_arrival_ns +
                        static_cast<std::uint64_t>(static_cast<double>(frames - 1) / fps * 1e9);
    return s;
}

ExpectTimes live(double end_s) {
    return {true, 0, static_cast<std::int64_t>(end_s * 1e9)};
}

const ExpectedStreamResult* find(const ExpectResults& r, std::uint32_t group,
                                 std::optional<std::uint32_t> antenna, std::uint16_t thread) {
    for (const auto& s : r.streams) {
        if (s.group.ip == group && s.antenna == antenna && s.thread == thread) {
            return &s;
        }
    }
    return nullptr;
}

std::vector<ExpectProblem> problems_of(const ExpectResults& r, std::uint32_t group,
                                       std::optional<std::uint32_t> antenna, std::uint16_t thread) {
    const auto* s = find(r, group, antenna, thread);
    return s ? s->problems : std::vector<ExpectProblem>{ExpectProblem::count_};
}

using P = ExpectProblem;
using Problems = std::vector<ExpectProblem>;

const ExpectManifest& two_by_two() {
    static const ExpectManifest m = parse_expect_manifest(
        R"({"groups": ["239.17.0.1:36001", "239.17.0.2:36001"],
            "antennas": ["10.0.0.11", "10.0.0.12"], "threads": 2})",
        "m.json");
    return m;
}

TEST(ExpectEvaluation, EachMissingStreamGetsItsOwnReason) {
    // Group 1: antenna 1 both threads, antenna 2 thread 0 only; group 2: nothing.
    const std::vector<StreamStats> streams{stream(kG1, kA1, 0, 2000), stream(kG1, kA1, 1, 2000),
                                           stream(kG1, kA2, 0, 2000)};
    const auto r = evaluate_expectations(two_by_two(), {}, streams, {}, live(2.2));
    EXPECT_EQ(r.streams.size(), 8u);
    EXPECT_EQ(r.expected_count(), 8u);
    EXPECT_EQ(problems_of(r, kG1, kA1, 0), Problems{});
    EXPECT_EQ(problems_of(r, kG1, kA2, 1), Problems{P::thread_missing});
    for (const auto a : {kA1, kA2}) {
        for (const std::uint16_t t : {std::uint16_t{0}, std::uint16_t{1}}) {
            EXPECT_EQ(problems_of(r, kG2, a, t), Problems{P::group_never_seen});
        }
    }
    EXPECT_EQ(r.count(P::thread_missing), 1u);
    EXPECT_EQ(r.count(P::group_never_seen), 4u);

    const std::vector<StreamStats> no_a2{stream(kG1, kA1, 0, 2000), stream(kG1, kA1, 1, 2000),
                                         stream(kG2, kA1, 0, 2000), stream(kG2, kA1, 1, 2000),
                                         stream(kG2, kA2, 0, 2000), stream(kG2, kA2, 1, 2000)};
    const auto r2 = evaluate_expectations(two_by_two(), {}, no_a2, {}, live(2.2));
    EXPECT_EQ(problems_of(r2, kG1, kA2, 0), Problems{P::antenna_missing});
    EXPECT_EQ(problems_of(r2, kG1, kA2, 1), Problems{P::antenna_missing});
    EXPECT_EQ(r2.count(P::antenna_missing), 2u);
    EXPECT_EQ(r2.count(P::group_never_seen), 0u);
}

TEST(ExpectEvaluation, UnexpectedStreamsAreListedAndLoseNothing) {
    std::vector<StreamStats> streams;
    for (const auto g : {kG1, kG2}) {
        for (const auto a : {kA1, kA2}) {
            for (const std::uint16_t t : {std::uint16_t{0}, std::uint16_t{1}}) {
                streams.push_back(stream(g, a, t, 2000));
            }
        }
    }
    streams.push_back(stream(kG1, kA3, 0, 2000));  // an antenna not in the manifest
    streams.push_back(stream(kG2, kA1, 5, 2000));  // a thread not in the manifest
    const auto r = evaluate_expectations(two_by_two(), {}, streams, {}, live(2.2));
    EXPECT_EQ(r.count(P::unexpected), 2u);
    EXPECT_EQ(r.expected_count(), 8u);
    const auto* u = find(r, kG1, kA3, 0);
    ASSERT_NE(u, nullptr);
    EXPECT_FALSE(u->expected);
    EXPECT_EQ(u->packets, 2000u);
    for (std::size_t i = 0; i < kExpectProblemCount; ++i) {
        if (static_cast<P>(i) != P::unexpected) {
            EXPECT_EQ(r.count(static_cast<P>(i)), 0u) << to_string(static_cast<P>(i));
        }
    }
    Ledger ledger;
    ledger.set_expectations(r);
    // (This ledger has no frames of its own.) An unexpected stream is not loss.
    EXPECT_EQ(ledger.loss_reasons(), std::vector<std::string>{"no stream frames were received"});
}

// Issue 25 item 12: the rate counts what was sent, not only what arrived. A
// stream at the header's 1000 frames/s that lost every fifth frame on the
// way runs at the right rate (its gaps are loss of their own, counted as
// missing), not at 800: the span of frame numbers over the span of time.
TEST(ExpectEvaluation, AStreamThatLostFramesIsNotWrongRate) {
    const auto m = parse_expect_manifest(
        R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11"], "threads": [0]})", "m.json");
    StreamStats s = stream(kG1, kA1, 0, 1);
    s.sequence = SequenceTracker();
    for (std::uint64_t i = 0; i < 3000; ++i) {
        if (i % 5 != 4) {
            s.sequence.observe(i);
        }
    }
    ASSERT_EQ(s.sequence.missing(), 599u);                    // (2999, the last, never came)
    s.last_arrival_ns = s.first_arrival_ns + 2'998'000'000u;  // frames 0..2998 at 1000/s
    const auto r = evaluate_expectations(m, {}, std::vector<StreamStats>{s}, {}, live(3.2));
    EXPECT_EQ(problems_of(r, kG1, kA1, 0), Problems{});
    const auto* e = find(r, kG1, kA1, 0);
    ASSERT_NE(e, nullptr);
    ASSERT_TRUE(e->frames_per_second);
    EXPECT_NEAR(*e->frames_per_second, 1000.0, 1.0);
}

// Issue 25 item 12: `read --expect` judges on the file's own clock: the
// join is the file's first CODIF frame, the end its last, a stream's times
// its frames' timestamps, whatever the host's clock said when the demux
// registered it (here 0 for every stream: a host-clock judgement would see
// neither a late start nor an early stop).
TEST(ExpectEvaluation, ReadJudgesOnTheFilesOwnClock) {
    ExpectOptions o;
    o.grace_s = 0.5;
    const auto m = parse_expect_manifest(
        R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11", "10.0.0.12", "10.0.0.13"], "threads": [0]})",
        "m.json");
    std::vector<StreamStats> streams{
        stream(kG1, kA1, 0, 3000, 1000, 0.1),  // 0.1 .. 3.099 s of the file
        stream(kG1, kA2, 0, 1000, 1000, 0.1),  // stops at 1.099 s: 2 s before the end
        stream(kG1, kA3, 0, 2000, 1000, 1.1),  // starts 1 s after the file's first frame
    };
    for (auto& s : streams) {
        s.registered_ns = 0;
    }
    const auto r = evaluate_expectations(m, o, streams, {}, ExpectTimes{false, 0, 0});
    EXPECT_EQ(r.clock, "file");
    EXPECT_EQ(problems_of(r, kG1, kA1, 0), Problems{});
    EXPECT_EQ(problems_of(r, kG1, kA2, 0), Problems{P::stopped_early});
    EXPECT_EQ(problems_of(r, kG1, kA3, 0), Problems{P::late_start});
}

TEST(ExpectEvaluation, LateStartStoppedEarlyAndWrongRateAgainstTheGrace) {
    ExpectOptions o;
    o.grace_s = 0.5;
    const auto m = parse_expect_manifest(
        R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11", "10.0.0.12", "10.0.0.13"], "threads": [0, 1]})",
        "m.json");
    const std::vector<StreamStats> streams{
        stream(kG1, kA1, 0, 3000, 1000, 0.1),  // on time, the whole run
        stream(kG1, kA1, 1, 2400, 1000, 0.7),  // late: 0.7 s after the join
        stream(kG1, kA2, 0, 2400, 1000, 0.4),  // on time (within the grace)
        stream(kG1, kA2, 1, 2000, 1000, 0.1),  // stops at 2.1 s: 1.0 s before the end
        stream(kG1, kA3, 0, 1470, 490, 0.1),   // 490 frames per second of 1000
        stream(kG1, kA3, 1, 3100, 1040, 0.1),  // 4% fast: within the 5% tolerance
    };
    const auto r = evaluate_expectations(m, o, streams, {}, live(3.1));
    EXPECT_EQ(problems_of(r, kG1, kA1, 0), Problems{});
    EXPECT_EQ(problems_of(r, kG1, kA1, 1), Problems{P::late_start});
    EXPECT_EQ(problems_of(r, kG1, kA2, 0), Problems{});
    EXPECT_EQ(problems_of(r, kG1, kA2, 1), Problems{P::stopped_early});
    EXPECT_EQ(problems_of(r, kG1, kA3, 0), Problems{P::wrong_rate});
    EXPECT_EQ(problems_of(r, kG1, kA3, 1), Problems{});
    const auto* slow = find(r, kG1, kA3, 0);
    ASSERT_NE(slow, nullptr);
    ASSERT_TRUE(slow->frames_per_second);
    EXPECT_NEAR(*slow->frames_per_second, 490.0, 0.5);
    EXPECT_EQ(slow->expected_frames_per_second, 1000.0) << "learned from the CODIF header";
    const auto* late = find(r, kG1, kA1, 1);
    ASSERT_NE(late, nullptr);
    ASSERT_TRUE(late->first_after_join_s);
    EXPECT_NEAR(*late->first_after_join_s, 0.7, 1e-6);

    // The manifest's own rate wins over the header's.
    const auto m490 = parse_expect_manifest(
        R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.13"], "threads": [0], "frames_per_second": 490})",
        "m.json");
    const std::vector<StreamStats> one{stream(kG1, kA3, 0, 1470, 490, 0.1)};
    EXPECT_EQ(problems_of(evaluate_expectations(m490, o, one, {}, live(3.1)), kG1, kA3, 0),
              Problems{});
    // frames_per_period: over the header's period.
    const auto m490p = parse_expect_manifest(
        R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.13"], "threads": [0], "frames_per_period": 490})",
        "m.json");
    EXPECT_EQ(problems_of(evaluate_expectations(m490p, o, one, {}, live(3.1)), kG1, kA3, 0),
              Problems{});
}

TEST(ExpectEvaluation, AShortLifeIsNotRated) {
    const auto m = parse_expect_manifest(
        R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11"], "threads": 1})", "m.json");
    // 100 frames at 300 per second: 0.33 s, under min_rated_life_s.
    const std::vector<StreamStats> s{stream(kG1, kA1, 0, 100, 300, 0.1)};
    const auto r = evaluate_expectations(m, {}, s, {}, live(0.5));
    EXPECT_EQ(problems_of(r, kG1, kA1, 0), Problems{});
    const auto* one = find(r, kG1, kA1, 0);
    ASSERT_NE(one, nullptr);
    EXPECT_FALSE(one->frames_per_second);
}

TEST(ExpectEvaluation, AFileIsJudgedInItsOwnClock) {
    // read: the join is the file's first CODIF frame, the end its last; the
    // host times (registered_ns) mean nothing.
    const auto m = parse_expect_manifest(
        R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11", "10.0.0.12"], "threads": 1})",
        "m.json");
    std::vector<StreamStats> s{stream(kG1, kA1, 0, 5000, 1000, 0.0),
                               stream(kG1, kA2, 0, 2000, 1000, 3.0)};
    s[0].registered_ns = 99 * kSecond;
    const auto r = evaluate_expectations(m, {}, s, {}, {false, 0, 0});
    EXPECT_EQ(r.clock, "file");
    EXPECT_EQ(problems_of(r, kG1, kA1, 0), Problems{});
    EXPECT_EQ(problems_of(r, kG1, kA2, 0), Problems{P::late_start});
    const auto* late = find(r, kG1, kA2, 0);
    ASSERT_NE(late, nullptr);
    ASSERT_TRUE(late->first_after_join_s);
    EXPECT_NEAR(*late->first_after_join_s, 3.0, 1e-6);
}

TEST(ExpectEvaluation, ShorthandCountsAntennasWhateverTheirAddresses) {
    const auto m = expect_shorthand(3, 2);
    const std::vector<Endpoint> groups{{kG1, kPort}, {kG2, kPort}};
    // Group 1: two antennas (one without thread 1) and a third thread 2;
    // group 2: nothing.
    const std::vector<StreamStats> s{stream(kG1, kA2, 0, 2000), stream(kG1, kA2, 1, 2000),
                                     stream(kG1, kA3, 0, 2000), stream(kG1, kA3, 2, 2000)};
    const auto r = evaluate_expectations(m, {}, s, groups, live(2.2));
    EXPECT_EQ(r.expected_count(), 12u);
    EXPECT_EQ(problems_of(r, kG1, kA2, 0), Problems{});
    EXPECT_EQ(problems_of(r, kG1, kA3, 1), Problems{P::thread_missing});
    EXPECT_EQ(problems_of(r, kG1, kA3, 2), Problems{P::unexpected});
    EXPECT_EQ(r.count(P::antenna_missing), 2u) << "the third antenna's two threads";
    EXPECT_EQ(problems_of(r, kG1, std::nullopt, 0), Problems{P::antenna_missing});
    EXPECT_EQ(r.count(P::group_never_seen), 6u);
    EXPECT_EQ(problems_of(r, kG2, std::nullopt, 1), Problems{P::group_never_seen});
}

TEST(ExpectEvaluation, TheLedgersVerdictReportAndSummary) {
    const std::vector<StreamStats> streams{stream(kG1, kA1, 0, 2000), stream(kG1, kA1, 1, 2000),
                                           stream(kG1, kA2, 0, 2000)};
    Ledger ledger;
    ledger.set_expectations(evaluate_expectations(two_by_two(), {}, streams, {}, live(2.2)));
    EXPECT_EQ(ledger.loss_reasons(),
              (std::vector<std::string>{"no stream frames were received",
                                        "4 expected streams: group_never_seen",
                                        "1 expected stream: thread_missing"}));
    const auto j = report_json(ledger, RunInfo{});
    EXPECT_EQ(j["verdict"], "loss");
    const auto& e = j["expected"];
    EXPECT_EQ(e["manifest"], "m.json");
    EXPECT_EQ(e["streams_expected"], 8u);
    EXPECT_EQ(e["as_expected"], 3u);
    EXPECT_EQ(e["problems"]["group_never_seen"], 4u);
    EXPECT_EQ(e["problems"]["thread_missing"], 1u);
    EXPECT_EQ(e["problems"]["unexpected"], 0u);
    ASSERT_EQ(e["streams"].size(), 8u) << "every expected stream, present or not";
    EXPECT_EQ(e["streams"][3]["antenna"], "10.0.0.12");
    EXPECT_EQ(e["streams"][3]["thread"], 1u);
    EXPECT_EQ(e["streams"][3]["state"], "thread_missing");
    EXPECT_EQ(e["streams"][3]["packets"], 0u);
    EXPECT_TRUE(e["streams"][3]["first_after_join_s"].is_null());
    EXPECT_EQ(e["streams"][0]["state"], "ok");
    EXPECT_EQ(e["streams"][0]["expected_frames_per_second"], 1000.0);

    char* text = nullptr;
    std::size_t size = 0;
    std::FILE* out = ::open_memstream(&text, &size);
    print_summary(out, ledger, RunInfo{}, false);
    std::fclose(out);
    const std::string summary(text, size);
    std::free(text);
    EXPECT_NE(summary.find("expected streams (m.json): 8 expected, 3 as expected"),
              std::string::npos)
        << summary;
    EXPECT_NE(summary.find("LOSS group_never_seen: 4 streams (239.17.0.2:36001 10.0.0.11 thread "
                           "0, 239.17.0.2:36001 10.0.0.11 thread 1, 239.17.0.2:36001 10.0.0.12 "
                           "thread 0, ...): nothing of the group arrived"),
              std::string::npos)
        << summary;
    EXPECT_NE(summary.find("LOSS thread_missing: 1 stream (239.17.0.1:36001 10.0.0.12 thread 1)"),
              std::string::npos)
        << summary;
}

TEST(ExpectEvaluation, NoExpectationsNoReportKey) {
    Ledger ledger;
    EXPECT_FALSE(report_json(ledger, RunInfo{}).contains("expected"));
}

}  // namespace
}  // namespace ibvcap
