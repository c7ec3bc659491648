// `ibvcap merge` (lib/review/merge.hpp): one verdict for an observation that
// several hosts captured, each some of its groups or antennas. The hosts are
// played by `ibvcap read` of one generated pcap with a subset of the groups
// or antennas; the merge of their reports must be the read of the whole.
// Then: a stream two hosts saw is counted once and named; an expected stream
// that no host saw is loss; runs that do not overlap, and reports of other
// versions, are named without changing the verdict; presence on one time
// axis; and every mistake an operator can make is one line and an exit code.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli.hpp"
#include "frames.hpp"
#include "lib/review/merge.hpp"

namespace ibvcap {
namespace {

using nlohmann::json;
using test::ibvcap;
using test::lines;
using test::Result;
using test::slurp;

constexpr const char* kGroup1 = "239.17.0.1:36001";
constexpr const char* kGroup2 = "239.17.0.2:36001";

// The totals a merge makes from its streams: equal to the whole read's.
constexpr const char* kStreamTotals[] = {"codif",        "missing",  "duplicates",
                                         "out_of_order", "too_late", "implausible",
                                         "restarts",     "invalid",  "payload_absent"};

json load(const std::string& path) {
    return json::parse(slurp(path));
}

void save(const std::string& path, const json& j) {
    std::ofstream(path) << j.dump(2);
}

std::uint64_t n(const json& j) {
    return j.get<std::uint64_t>();
}

// One directory for the whole suite: two pcaps (one lossless, one with loss,
// duplicates and reordering injected) and their reads: whole, per group,
// per antenna.
class Merge : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ = new test::TempDir();
        const std::string groups = fmt::format("{} {}", kGroup1, kGroup2);
        run(fmt::format("gen -q -w z.pcap --antennas 3 --payload 64 -c 300 {}", groups), 0);
        run(fmt::format("gen -q -w l.pcap --antennas 3 --payload 64 -c 300 --loss 0.02 "
                        "--reorder 0.01 --duplicate 0.01 {}",
                        groups),
            0);
        for (const char* pcap : {"z", "l"}) {
            const int want = std::string(pcap) == "z" ? 0 : 3;
            run(fmt::format("read -q -r {0}.pcap --report {0}_all.json", pcap), want);
            run(fmt::format("read -q -r {0}.pcap --report {0}_g1.json {1}", pcap, kGroup1), want);
            run(fmt::format("read -q -r {0}.pcap --report {0}_g2.json {1}", pcap, kGroup2), want);
        }
        run(fmt::format("read -q -r z.pcap --report z_a1.json --antenna 10.0.0.11 {}", groups), 0);
        run(fmt::format("read -q -r z.pcap --report z_a23.json --antenna 10.0.0.12 --antenna "
                        "10.0.0.13 {}",
                        groups),
            0);
    }
    static void TearDownTestSuite() {
        delete dir_;
        dir_ = nullptr;
    }
    static void run(const std::string& args, int want) {
        const Result r = ibvcap(*dir_, args);
        ASSERT_EQ(r.code, want) << args << "\n" << r.out << r.err;
    }
    static std::string path(const std::string& name) { return *dir_ / name; }
    static MergeInput input(const std::string& name) { return load_merge_input(path(name)); }
    static Result merge(const std::string& args) { return ibvcap(*dir_, "merge " + args); }
    // A report of the suite's directory, edited, saved as `name`.
    template <typename Edit>
    static void edited(const std::string& from, const std::string& name, Edit edit) {
        json j = load(path(from));
        edit(j);
        save(path(name), j);
    }

    static test::TempDir* dir_;
};
test::TempDir* Merge::dir_ = nullptr;

// The streams by their key, without what the merge adds to each.
std::map<std::string, json> streams_by_key(const json& report) {
    std::map<std::string, json> out;
    for (json s : report["streams"]) {
        s.erase("host");
        s.erase("seen_by");
        out[fmt::format("{} {} {}", s["group"].get<std::string>(), s["antenna"].get<std::string>(),
                        n(s["thread"]))] = s;
    }
    return out;
}

void expect_streams_of(const json& merged, const json& whole) {
    for (const char* key : kStreamTotals) {
        EXPECT_EQ(merged["totals"][key], whole["totals"][key]) << key;
    }
    EXPECT_EQ(streams_by_key(merged), streams_by_key(whole));
    EXPECT_EQ(merged["reconciled"], true);
    const json& t = merged["totals"];
    EXPECT_EQ(n(t["packets"]), n(t["codif"]) + n(t["malformed"]) + n(t["non_codif"]));
}

TEST_F(Merge, TwoHostsWithDisjointGroupsAreTheReadOfAllGroups) {
    for (const std::string p : {"z", "l"}) {
        SCOPED_TRACE(p);
        const std::vector<MergeInput> inputs{input(p + "_g1.json"), input(p + "_g2.json")};
        const json merged = merge_reports(inputs, std::nullopt);
        const json whole = load(path(p + "_all.json"));
        expect_streams_of(merged, whole);
        EXPECT_EQ(merged["verdict"], whole["verdict"]);
        EXPECT_TRUE(merged["merged"]["duplicate_streams"].empty());
        EXPECT_TRUE(merged["merged"]["not_overlapping"].empty());
        // Host-level counters are each host's, summed: each host's read
        // delivered every frame of the file (the other group's as
        // other_destination).
        EXPECT_EQ(n(merged["totals"]["packets"]), 2 * n(whole["totals"]["packets"]));
        ASSERT_EQ(merged["hosts"].size(), 2u);
        EXPECT_EQ(merged["hosts"][0]["groups"], json::array({kGroup1}));
        EXPECT_EQ(merged["hosts"][1]["groups"], json::array({kGroup2}));
        EXPECT_EQ(merged["hosts"][0]["run_id"], inputs[0].report["run_id"]);
        EXPECT_EQ(merged["hosts"][0]["verdict"], whole["verdict"]);
        // Same host name twice (both reads ran here): told apart by file.
        EXPECT_NE(merged["hosts"][0]["name"], merged["hosts"][1]["name"]);
        EXPECT_EQ(merge_exit_code(merged), p == "z" ? 0 : 3);
        if (p == "l") {
            // Each host's reasons, named by host; lost_by_cause summed.
            const auto reasons = merged["loss_reasons"].get<std::vector<std::string>>();
            ASSERT_FALSE(reasons.empty());
            EXPECT_EQ(
                reasons.front().rfind(merged["hosts"][0]["name"].get<std::string>() + ": ", 0), 0u)
                << reasons.front();
            EXPECT_EQ(merged["lost_by_cause"]["upstream"], merged["totals"]["missing"]);
        }
    }
}

TEST_F(Merge, TwoHostsWithDisjointAntennasAreTheReadOfAllAntennas) {
    const std::vector<MergeInput> inputs{input("z_a1.json"), input("z_a23.json")};
    const json merged = merge_reports(inputs, std::nullopt);
    expect_streams_of(merged, load(path("z_all.json")));
    EXPECT_EQ(merged["verdict"], "zero-loss");
}

TEST_F(Merge, AStreamTwoHostsSawIsCountedOnceAndNamed) {
    // Host 1 read group 1; host 2 read both: group 1's streams twice.
    const json whole = load(path("z_all.json"));
    const json g1 = load(path("z_g1.json"));
    const json merged = merge_reports({input("z_g1.json"), input("z_all.json")}, std::nullopt);
    expect_streams_of(merged, whole);
    const json& dups = merged["merged"]["duplicate_streams"];
    ASSERT_EQ(dups.size(), g1["streams"].size());
    const std::string h1 = merged["hosts"][0]["name"];
    const std::string h2 = merged["hosts"][1]["name"];
    for (const json& d : dups) {
        EXPECT_EQ(d["group"], kGroup1);
        EXPECT_EQ(d["seen_by"], json::array({h1, h2}));
        EXPECT_EQ(d["counted_from"], h1);  // equal counts: the first input's
    }
    for (const json& s : merged["streams"]) {
        EXPECT_EQ(s["seen_by"].size(), s["group"] == kGroup1 ? 2u : 1u) << s.dump();
    }
    EXPECT_EQ(merged["hosts"][0]["streams_shared"], g1["streams"].size());
    // Packets: each host's, less the copies not counted.
    std::uint64_t g1_packets = 0;
    for (const json& s : g1["streams"]) {
        g1_packets += n(s["packets"]);
    }
    EXPECT_EQ(n(merged["totals"]["packets"]),
              n(whole["totals"]["packets"]) + n(g1["totals"]["packets"]) - g1_packets);
    EXPECT_EQ(merged["verdict"], "zero-loss");
    bool noted = false;
    for (const json& note : merged["merged"]["notes"]) {
        noted = noted ||
                note.get<std::string>().find("seen by more than one host") != std::string::npos;
    }
    EXPECT_TRUE(noted) << merged["merged"]["notes"].dump();

    // The copy with more packets is the one counted, whichever input it is in.
    std::vector<MergeInput> inputs{input("z_g1.json"), input("z_all.json")};
    json& s0 = inputs[0].report["streams"][0];
    s0["packets"] = n(s0["packets"]) - 1;
    s0["missing"] = n(s0["missing"]) + 1;
    const json fewer = merge_reports(inputs, std::nullopt);
    EXPECT_EQ(fewer["merged"]["duplicate_streams"][0]["counted_from"], h2);
    EXPECT_EQ(fewer["totals"]["missing"], 0u);
}

TEST_F(Merge, AnExpectedStreamNoHostSawIsLoss) {
    const std::vector<MergeInput> inputs{input("z_g1.json"), input("z_g2.json")};
    const auto manifest = [](const std::string& antennas, const std::string& groups) {
        return parse_expect_manifest(
            fmt::format(R"({{"threads": 2, "antennas": [{}], "groups": [{}]}})", antennas, groups),
            "site.json");
    };
    const std::string three = R"("10.0.0.11", "10.0.0.12", "10.0.0.13")";
    const std::string both = fmt::format(R"("{}", "{}")", kGroup1, kGroup2);
    const json ok = merge_reports(inputs, manifest(three, both));
    EXPECT_EQ(ok["verdict"], "zero-loss") << ok["loss_reasons"].dump();
    EXPECT_EQ(ok["expected"]["streams_expected"], 12u);
    EXPECT_EQ(ok["expected"]["as_expected"], 12u);

    // A fourth antenna no host saw: 2 groups x 2 threads.
    const json four = merge_reports(inputs, manifest(three + R"(, "10.0.0.14")", both));
    EXPECT_EQ(four["verdict"], "loss");
    EXPECT_EQ(four["expected"]["problems"]["antenna_missing"], 4u);
    EXPECT_EQ(four["loss_reasons"],
              json::array({"4 expected streams seen by no host: antenna_missing"}));
    EXPECT_EQ(merge_exit_code(four), 3);

    // A group no host captured; the hosts' streams of a group the manifest
    // does not name are unexpected (not loss).
    const json other =
        merge_reports(inputs, manifest(three, fmt::format(R"("{}", "239.17.0.9:36001")", kGroup1)));
    EXPECT_EQ(other["expected"]["problems"]["group_never_seen"], 6u);
    EXPECT_EQ(other["expected"]["problems"]["unexpected"], 6u);
    EXPECT_EQ(other["loss_reasons"],
              json::array({"6 expected streams seen by no host: group_never_seen"}));
}

TEST_F(Merge, RunsThatDoNotOverlapAndOtherVersionsAreNamed) {
    // Host 2's frames a day after host 1's, and from another version.
    std::vector<MergeInput> inputs{input("z_g1.json"), input("z_g2.json")};
    json& later = inputs[1].report;
    ASSERT_TRUE(later["first_frame_at"].is_string());
    ASSERT_EQ(later["version"], inputs[0].report["version"]);
    later["first_frame_at"] = "2031-01-02T00:00:00.000000Z";
    later["last_frame_at"] = "2031-01-02T00:00:10.500000Z";
    later["version"] = "9.9.9";
    const json merged = merge_reports(inputs, std::nullopt);
    ASSERT_EQ(merged["merged"]["not_overlapping"].size(), 1u);
    const json& pair = merged["merged"]["not_overlapping"][0];
    EXPECT_EQ(pair["hosts"][1], merged["hosts"][1]["name"]);
    EXPECT_GT(pair["gap_s"].get<double>(), 0);
    EXPECT_EQ(merged["merged"]["versions"].size(), 2u);
    EXPECT_EQ(merged["merged"]["versions"]["9.9.9"], json::array({merged["hosts"][1]["name"]}));
    std::string notes;
    for (const json& note : merged["notes"]) {
        notes += note.get<std::string>() + "\n";
    }
    EXPECT_NE(notes.find("do not overlap in time"), std::string::npos) << notes;
    EXPECT_NE(notes.find("different ibvcap versions: "), std::string::npos) << notes;
    // Named, not judged: the verdict is the hosts'.
    EXPECT_EQ(merged["verdict"], "zero-loss");

    // And on the console, from the binary.
    save(path("later.json"), later);
    const Result r = merge("z_g1.json later.json");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("note: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("do not overlap in time"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("different ibvcap versions"), std::string::npos) << r.out;
}

// The merged run starts with the earliest host and ends with the latest, in
// either order of the inputs, whichever host is the longer.
TEST_F(Merge, TheMergedRunEndsWithTheLatestHost) {
    struct Host {
        const char* started_at;
        double duration_s;
    };
    const auto merged_run = [&](Host a, Host b) {
        std::vector<MergeInput> inputs{input("z_g1.json"), input("z_g2.json")};
        for (const auto& [in, h] : {std::pair{&inputs[0], a}, std::pair{&inputs[1], b}}) {
            in->report["started_at"] = h.started_at;
            in->report["duration_s"] = h.duration_s;
        }
        const json m = merge_reports(inputs, std::nullopt);
        return std::pair{m["started_at"].get<std::string>(), m["duration_s"].get<double>()};
    };
    const Host early_long{"2030-01-01T00:00:00.000000Z", 10};
    const Host late_short{"2030-01-01T00:00:02.000000Z", 5};  // ends at 7 s
    const Host early_short{"2030-01-01T00:00:00.000000Z", 3};
    const Host late_long{"2030-01-01T00:00:01.000000Z", 9};  // ends at 10 s
    for (const auto& [a, b] :
         {std::pair{early_long, late_short}, std::pair{late_short, early_long},
          std::pair{early_short, late_long}, std::pair{late_long, early_short}}) {
        SCOPED_TRACE(fmt::format("{} for {} s and {} for {} s", a.started_at, a.duration_s,
                                 b.started_at, b.duration_s));
        const auto [started, duration] = merged_run(a, b);
        EXPECT_EQ(started, "2030-01-01T00:00:00.000000Z");
        EXPECT_DOUBLE_EQ(duration, 10.0);
    }
}

// Presence, hand-built: host A from t0 in 1 s bins, host B from t0 + 1.5 s in
// 2 s bins. On the common axis (2 s bins from t0) A's bins 0,1 -> 0 and
// 2,3 -> 1; B's bin 0 (1.5 s) -> 0 and bin 1 (3.5 s) -> 1.
// Scans (issue 45): each host's report of a window (--start-at, --stop-at,
// --scan), grouped by scan, each scan's verdict over the hosts. z.pcap's
// frames lie 0.000 to 0.299 s past 2026-01-01T00:00:00Z (1000 a second).
constexpr const char* kScan1 =
    "--scan s1 --start-at 2026-01-01T00:00:00Z --stop-at 2026-01-01T00:00:00.1Z";
constexpr const char* kScan2 =
    "--scan s2 --start-at 2026-01-01T00:00:00.15Z --stop-at 2026-01-01T00:00:00.25Z";

TEST_F(Merge, TheReportsOfTwoScansFromTwoHostsGiveEachScansVerdict) {
    for (const auto& [scan, window] : {std::pair{"s1", kScan1}, std::pair{"s2", kScan2}}) {
        run(fmt::format("read -q -r z.pcap --report {}_g1.json {} {}", scan, window, kGroup1), 0);
        run(fmt::format("read -q -r z.pcap --report {}_g2.json {} {}", scan, window, kGroup2), 0);
    }
    const Result r = merge("s1_g1.json s2_g1.json s1_g2.json s2_g2.json --report scans.json");
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("== scan s1 (2 reports)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("== scan s2 (2 reports)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("ibvcap merge: 2 scans, verdict: zero-loss"), std::string::npos) << r.out;
    const json j = load(path("scans.json"));
    ASSERT_EQ(j["scans"].size(), 2u);
    EXPECT_EQ(j["verdict"], "zero-loss");
    for (const json& scan : j["scans"]) {
        const json& m = scan["merged"];
        EXPECT_EQ(scan["verdict"], "zero-loss");
        EXPECT_EQ(scan["reports"].size(), 2u);
        EXPECT_EQ(m["window"]["scan"], scan["scan"]);
        EXPECT_EQ(m["window"]["hosts_agree"], true);
        EXPECT_EQ(n(m["totals"]["codif"]), 100u * 3 * 2 * 2) << "100 frames of 12 streams";
        for (const json& st : m["streams"]) {
            EXPECT_EQ(n(st["packets"]), 100u);
            EXPECT_EQ(st["first"]["frame"], scan["scan"] == "s1" ? 0 : 150);
            EXPECT_EQ(st["last"]["frame"], scan["scan"] == "s1" ? 99 : 249);
        }
    }
    const Result html = merge("s1_g1.json s2_g1.json --html scans.html");
    EXPECT_EQ(html.code, 2) << html.err;
    EXPECT_NE(html.err.find("--html draws one scan's merge"), std::string::npos) << html.err;
}

TEST_F(Merge, AHostThatWroteAnotherWindowOfTheScanIsNamed) {
    run(fmt::format("read -q -r z.pcap --report w1.json {} {}", kScan1, kGroup1), 0);
    run(fmt::format("read -q -r z.pcap --report w2.json --scan s1 --start-at "
                    "2026-01-01T00:00:00Z --stop-at 2026-01-01T00:00:00.09Z {}",
                    kGroup2),
        0);
    const Result r = merge("w1.json w2.json --report w.json");
    EXPECT_EQ(r.code, 3) << r.out << r.err;
    const json j = load(path("w.json"));
    EXPECT_EQ(j["window"]["hosts_agree"], false);
    bool named = false;
    for (const json& why : j["loss_reasons"]) {
        named = named || why.get<std::string>().find(
                             "wrote the window [2026-01-01T00:00:00Z, 2026-01-01T00:00:00.09Z), "
                             "not the scan's [2026-01-01T00:00:00Z, 2026-01-01T00:00:00.1Z)") !=
                             std::string::npos;
    }
    EXPECT_TRUE(named) << j["loss_reasons"].dump();
}

TEST(MergePresence, RowsOnACommonAxisCoarsened) {
    const json a = json::parse(R"({
      "started_at": 1700000000.0, "bin_s": 1, "bins": 4, "t": [1, 2, 3, 4],
      "streams": [{"stream": "239.17.0.1:36001 10.0.0.11 thread 0", "group": "239.17.0.1:36001",
                   "antenna": "10.0.0.11", "thread": 0, "present": 36, "missing": 4,
                   "active": [[0, 0], [2, 3]],
                   "cells": [[0, 8, 2, ["upstream"]], [1, 9, 1, ["kernel", "upstream"]],
                             [3, 9, 1, ["kernel"]]]}]})");
    const json b = json::parse(R"({
      "started_at": 1700000001.5, "bin_s": 2, "bins": 2, "t": [2, 4],
      "streams": [{"stream": "239.17.0.2:36001 10.0.0.12 thread 1", "group": "239.17.0.2:36001",
                   "antenna": "10.0.0.12", "thread": 1, "present": 20, "missing": 1,
                   "active": [[1, 1]], "cells": [[1, 9, 1, ["receive_queue"]]]}]})");
    std::vector<std::string> notes;
    const json m = merge_presence({{"A", &a}, {"B", &b}, {"C", nullptr}}, notes);
    ASSERT_TRUE(m.is_object());
    EXPECT_EQ(m["bin_s"], 2);
    EXPECT_EQ(m["started_at"].get<double>(), 1700000000.0);
    // B ends at 1.5 + 4 = 5.5 s: a third bin, ending there.
    EXPECT_EQ(m["bins"], 3u);
    EXPECT_EQ(m["t"], json::parse("[2.0, 4.0, 5.5]"));
    ASSERT_EQ(m["streams"].size(), 2u);
    const json& ra = m["streams"][0];
    EXPECT_EQ(ra["host"], "A");
    EXPECT_EQ(ra["present"], 36u);
    EXPECT_EQ(ra["missing"], 4u);
    EXPECT_EQ(ra["active"], json::parse("[[0, 1]]"));  // [0,0] and [1,1] touch: joined
    EXPECT_EQ(ra["cells"], json::parse(R"([[0, 17, 3, ["upstream", "kernel"]],
                                           [1, 9, 1, ["kernel"]]])"));
    const json& rb = m["streams"][1];
    EXPECT_EQ(rb["host"], "B");
    EXPECT_EQ(rb["active"], json::parse("[[1, 1]]"));
    EXPECT_EQ(rb["cells"], json::parse(R"([[1, 9, 1, ["receive_queue"]]])"));
    ASSERT_EQ(notes.size(), 1u);  // C has none
    EXPECT_NE(notes[0].find("C: no presence"), std::string::npos) << notes[0];

    // One host: its own axis, unchanged.
    notes.clear();
    const json alone = merge_presence({{"A", &a}}, notes);
    EXPECT_EQ(alone["bins"], 4u);
    EXPECT_EQ(alone["streams"][0]["cells"], a["streams"][0]["cells"]);
    EXPECT_TRUE(notes.empty());

    // None: no presence at all. A damaged one: left out, with a note.
    EXPECT_TRUE(merge_presence({{"C", nullptr}}, notes).is_null());
    json bad = a;
    bad["bin_s"] = 3;
    notes.clear();
    const json without_bad = merge_presence({{"A", &bad}, {"B", &b}}, notes);
    EXPECT_EQ(without_bad["streams"].size(), 1u);
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_NE(notes[0].find("power of two"), std::string::npos) << notes[0];
    bad = a;
    bad["streams"][0]["cells"][0][0] = 4;  // past its bins
    notes.clear();
    EXPECT_TRUE(merge_presence({{"A", &bad}}, notes).is_null());
    EXPECT_EQ(notes.size(), 1u);
}

// A live run's windows are ticks of a second and a little more: its bins'
// ends (t) run past bins x bin_s. Its presence is kept, its bins placed by
// number, and it ends with its last bin.
TEST(MergePresence, ALiveRunsBinsThatEndPastTheirNumberAreKept) {
    const auto live = [](double started_at, const char* group) {
        return json{{"started_at", started_at},
                    {"windows_per_bin", 1},
                    {"bin_s", 1},
                    {"bins", 3},
                    {"t", {1.0004, 2.0011, 3.0017}},
                    {"streams",
                     {{{"stream", fmt::format("{} 10.0.0.11 thread 0", group)},
                       {"group", group},
                       {"antenna", "10.0.0.11"},
                       {"thread", 0},
                       {"present", 29},
                       {"missing", 1},
                       {"active", {{0, 2}}},
                       {"cells", {{2, 9, 1, {"upstream"}}}}}}}};
    };
    const json a = live(1700000000.0, kGroup1);
    const json b = live(1700000000.25, kGroup2);
    std::vector<std::string> notes;
    const json m = merge_presence({{"A", &a}, {"B", &b}}, notes);
    EXPECT_TRUE(notes.empty()) << json(notes).dump();
    ASSERT_TRUE(m.is_object());
    ASSERT_EQ(m["streams"].size(), 2u);
    EXPECT_EQ(m["bins"], 4u);  // B's last bin ends at 3.25 s
    EXPECT_EQ(m["t"], json::parse("[1.0, 2.0, 3.0, 3.25]"));
    EXPECT_EQ(m["streams"][0]["cells"], json::parse(R"([[2, 9, 1, ["upstream"]]])"));
    EXPECT_EQ(m["streams"][1]["host"], "B");
    EXPECT_EQ(m["streams"][1]["active"], json::parse("[[0, 2]]"));
    // One alone: its own bins.
    const json alone = merge_presence({{"A", &a}}, notes);
    EXPECT_TRUE(notes.empty()) << json(notes).dump();
    EXPECT_EQ(alone["bins"], 3u);
    EXPECT_EQ(alone["t"], json::parse("[1.0, 2.0, 3.0]"));
    // A t that ends at no time after the start is still refused.
    json bad = a;
    bad["t"] = {1, 2, 0};
    EXPECT_TRUE(merge_presence({{"A", &bad}}, notes).is_null());
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_NE(notes[0].find("A: its presence is left out"), std::string::npos) << notes[0];
}

// Two live captures' reports (reads' reports given a live run's windows,
// each a tick of 1.0007 s) merged by the binary with --html: the merged
// report and the page keep both hosts' presence.
TEST_F(Merge, TwoLiveCapturesKeepTheirPresenceOnThePage) {
    for (const char* name : {"z_g1", "z_g2"}) {
        edited(std::string(name) + ".json", std::string(name) + "_live.json", [](json& j) {
            j["source"] = "pcap";
            json& p = j["presence"];
            ASSERT_GT(p["bins"].get<std::uint64_t>(), 0u);
            json t = json::array();
            for (std::uint64_t b = 1; b <= p["bins"].get<std::uint64_t>(); ++b) {
                t.push_back(1.0007 * static_cast<double>(b));
            }
            p["t"] = t;
        });
    }
    const Result r = merge("z_g1_live.json z_g2_live.json --report live_m.json --html live_m.html");
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_EQ(r.out.find("presence is left out"), std::string::npos) << r.out;
    const json m = load(path("live_m.json"));
    for (const json& note : m["merged"]["notes"]) {
        EXPECT_EQ(note.get<std::string>().find("presence"), std::string::npos) << note;
    }
    ASSERT_TRUE(m.contains("presence")) << m["merged"]["notes"].dump();
    std::set<std::string> hosts;
    for (const json& row : m["presence"]["streams"]) {
        hosts.insert(row["host"].get<std::string>());
    }
    EXPECT_EQ(hosts.size(), 2u);
    // The page carries the report it draws, presence and all.
    const std::string page = slurp(path("live_m.html"));
    const std::string open = R"(<script type="application/json" id="ibvcap-data">)";
    const auto from = page.find(open);
    ASSERT_NE(from, std::string::npos);
    const auto to = page.find("</script>", from);
    ASSERT_NE(to, std::string::npos);
    const json drawn = json::parse(page.substr(from + open.size(), to - from - open.size()));
    EXPECT_EQ(drawn["presence"], m["presence"]);
}

TEST_F(Merge, PresenceIsMergedWhenTheReportsHaveIt) {
    // Runs' reports carry their presence (lib/ledger/presence.hpp): the
    // merge has every host's rows, each naming its host.
    std::vector<MergeInput> inputs{input("z_g1.json"), input("z_g2.json")};
    const std::size_t rows = inputs[0].report["presence"]["streams"].size() +
                             inputs[1].report["presence"]["streams"].size();
    ASSERT_GT(rows, 0u);
    const json merged = merge_reports(inputs, std::nullopt);
    ASSERT_TRUE(merged.contains("presence")) << merged["notes"].dump();
    EXPECT_EQ(merged["presence"]["streams"].size(), rows);
    for (const json& r : merged["presence"]["streams"]) {
        EXPECT_TRUE(r.contains("host") && r["host"].is_string()) << r.dump();
    }
    // Reports without one (older versions): no presence in the merge.
    for (MergeInput& in : inputs) {
        in.report.erase("presence");
    }
    EXPECT_FALSE(merge_reports(inputs, std::nullopt).contains("presence"));
}

// The merged report has every key a run's report has (but those of one run
// alone: its run_id, host, cwd and stopped_by, which `hosts` lists), so that
// whatever reads a report reads it.
TEST_F(Merge, TheMergedReportHasTheKeysOfARunsReport) {
    const Result r = merge("z_g1.json z_g2.json --report m.json");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(r.err.empty()) << r.err;
    const json merged = load(path("m.json"));
    const json run = load(path("z_all.json"));
    for (const auto& [key, value] : run.items()) {
        if (key == "run_id" || key == "host" || key == "cwd" || key == "stopped_by") {
            continue;
        }
        ASSERT_TRUE(merged.contains(key)) << key;
        EXPECT_EQ(merged[key].type(), value.type()) << key;
    }
    EXPECT_EQ(merged["command"], "merge");
    EXPECT_EQ(merged["hosts"].size(), 2u);
    EXPECT_EQ(merged["merged"]["inputs"], 2u);
    // The console: one pair of lines per host, the totals, the verdict.
    for (const json& h : merged["hosts"]) {
        EXPECT_NE(r.out.find("  " + h["name"].get<std::string>() + ": read run " +
                             h["run_id"].get<std::string>()),
                  std::string::npos)
            << r.out;
    }
    EXPECT_NE(r.out.find("verdict: zero-loss"), std::string::npos) << r.out;

    // Loss: exit 3, each host's reasons on the verdict line.
    const Result loss = merge("l_g1.json l_g2.json");
    EXPECT_EQ(loss.code, 3) << loss.err;
    EXPECT_NE(loss.out.find("verdict: loss: "), std::string::npos) << loss.out;
    EXPECT_NE(loss.out.find("frames missing from the stream sequences"), std::string::npos);

    // --report -: the JSON alone on stdout, the summary on stderr.
    const Result out = merge("-q z_g1.json z_g2.json --report -");
    ASSERT_EQ(out.code, 0) << out.err;
    EXPECT_EQ(json::parse(out.out)["verdict"], "zero-loss");
    EXPECT_NE(out.err.find("verdict: zero-loss"), std::string::npos) << out.err;

    // The expected streams from a manifest file, through the binary.
    save(path("site.json"),
         json::parse(R"({"threads": 2, "antennas": ["10.0.0.11", "10.0.0.12", "10.0.0.13",
                     "10.0.0.14"], "groups": ["239.17.0.1:36001", "239.17.0.2:36001"]})"));
    const Result expect = merge("z_g1.json z_g2.json --expect site.json");
    EXPECT_EQ(expect.code, 3) << expect.err;
    EXPECT_NE(expect.out.find("LOSS antenna_missing: 4 streams"), std::string::npos) << expect.out;
}

// Each mistake: one line on stderr that names the cause and the fix, and its
// exit code; no merged report is written.
TEST_F(Merge, EveryOperatorMistakeIsOneLineAndAnExitCode) {
    std::filesystem::copy_file(path("z_g1.json"), path("copy.json"));
    std::ofstream(path("text.json")) << "hello, not json\n";
    std::ofstream(path("other.json")) << R"({"name": "a manifest?", "groups": []})";
    std::ofstream(path("exists.json")) << "{}";
    std::ofstream(path("bad_site.json")) << R"({"groups": "239.17.0.1:36001"})";
    edited("z_g1.json", "negative.json", [](json& j) { j["totals"]["missing"] = -5; });
    edited("z_g1.json", "edited.json", [](json& j) { j["totals"]["missing"] = 1; });
    edited("z_g1.json", "huge.json", [](json& j) {
        j["streams"][0]["missing"] = std::uint64_t{1} << 60;
        j["totals"]["missing"] = std::uint64_t{1} << 60;
    });
    edited("z_g1.json", "future.json",
           [](json& j) { j["started_at"] = "9999-12-31T23:59:59.000000Z"; });
    edited("z_g1.json", "claims.json", [](json& j) {
        j["streams"][0]["missing"] = 2;
        j["totals"]["missing"] = 2;
    });
    ASSERT_EQ(merge("z_g1.json z_g2.json --report merged.json").code, 0);
    struct Case {
        std::string args;
        int code;
        std::string says;
    };
    const std::vector<Case> cases{
        {"", 2, "give the hosts' reports"},
        {"z_g1.json nope.json", 1, "cannot read report nope.json: No such file or directory"},
        {"z_g1.json text.json", 1, "text.json is not JSON"},
        {"z_g1.json other.json", 1, "other.json is not a run's report as ibvcap writes it"},
        {"z_g1.json .", 1, "cannot read report .: it is a directory"},
        {"z_g1.json negative.json", 1, "/totals/missing is -5, not a count"},
        {"z_g1.json edited.json", 1, "/totals/missing is 1, but the streams' missing add up to 0"},
        {"z_g1.json huge.json", 1, "not a count"},
        {"z_g1.json future.json", 1,
         "/started_at is \"9999-12-31T23:59:59.000000Z\", not a UTC time"},
        {"z_g1.json claims.json", 1, "is \"zero-loss\" but its totals count 2 missing"},
        {"z_g1.json merged.json", 1, "merged.json is a merged report"},
        {"z_g1.json z_g1.json", 2, "z_g1.json and z_g1.json are the same file"},
        {"z_g1.json ./z_g1.json", 2, "are the same file"},
        {"z_g1.json copy.json", 2, "are the same run (run_id "},
        {"z_g1.json z_g2.json --report exists.json", 1,
         "--report exists.json exists (a host's report left off the list?): give another path, "
         "or --overwrite"},
        {"z_g1.json z_g2.json --report z_g2.json --overwrite", 2,
         "--report z_g2.json is one of the reports to merge"},
        {"z_g1.json z_g2.json --report nodir/m.json", 1, "cannot write report nodir/m.json"},
        {"z_g1.json z_g2.json --overwrite", 2, "--overwrite replaces the --report file"},
        {"z_g1.json z_g2.json --expect nope.json", 2, "nope.json: cannot read the manifest"},
        {"z_g1.json z_g2.json --expect bad_site.json", 2, "bad_site.json: /groups: "},
        {"z_g1.json --bogus", 2, "--bogus"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.args);
        const Result r = merge(c.args);
        EXPECT_EQ(r.code, c.code) << r.out << r.err;
        EXPECT_EQ(lines(r.err), 1u) << r.err;
        EXPECT_EQ(r.err.rfind("ibvcap merge: ", 0), 0u) << r.err;
        EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
        EXPECT_TRUE(r.out.empty()) << r.out;
    }
    EXPECT_EQ(slurp(path("exists.json")), "{}");  // not replaced
    const Result over = merge("z_g1.json z_g2.json --report exists.json --overwrite");
    EXPECT_EQ(over.code, 0) << over.err;
    EXPECT_EQ(load(path("exists.json"))["command"], "merge");
}

}  // namespace
}  // namespace ibvcap
