// Hostile and careless inputs (issue 25 items 8 and 9): bounded answers, and
// no internal text (a library's exception, a C++ type name, an errno that
// names the wrong thing) reaches the operator. Runs the real binary.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.hpp"
#include "frames.hpp"

namespace ibvcap {
namespace {

using test::ibvcap;
using test::Result;

// Words that only a programmer reads: a library's exception text, a C++
// name, mmap's errno for a directory.
void expect_operator_text(const Result& r, const std::string& command) {
    for (const char* inner : {"std::", "bad_alloc", "stoull", "stoi", "json.exception",
                              "basic_filebuf", "No such device", "at() with", "0 MiB"}) {
        EXPECT_EQ(r.err.find(inner), std::string::npos)
            << command << " printed '" << inner << "': " << r.err;
    }
}

// One line naming the cause, a non-zero exit code.
void expect_one_clear_line(const Result& r, const std::string& command) {
    EXPECT_NE(r.code, 0) << command;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << command << ": " << r.err;
    expect_operator_text(r, command);
}

TEST(CliInputs, NoInternalTextReachesTheOperator) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w a.pcap --antennas 1 --threads 1 -c 20").code, 0);
    ASSERT_EQ(ibvcap(dir, "read -q -r a.pcap -F codif -o run --report run/r.json").code, 0);
    std::ofstream(dir / "bad.json") << "{\n";
    std::ofstream(dir / "number.json") << R"({"outputs": 3})";
    std::ofstream(dir / "streams.json") << R"({"outputs": [], "streams": [{"group": 1}]})";
    std::ofstream(dir / "array.json") << "[1]";
    struct Case {
        std::string args;
        std::string says;  // in the line
    };
    const std::vector<Case> cases = {
        {"verify run", "run: it is a directory"},
        {"verify --report run", "it is a directory"},
        {"verify --report bad.json", "not valid JSON: parse error at line 2, column 1"},
        {"verify --report number.json", "its \"outputs\" is missing or not as a report writes it"},
        {"verify --report streams.json", "its \"streams\" is missing"},
        {"verify --report array.json",
         "array.json is not an ibvcap report (give the --report JSON of the run): it is not a JSON "
         "object"},
        {"read -r a.pcap -F pcap -o m1 --writer-memory 1k", "--writer-memory 1 KiB is too small"},
        {"read -r a.pcap -F pcap -o m2 --writer-memory 1536",
         "--writer-memory 1536 bytes is too small"},
    };
    for (const auto& c : cases) {
        const Result r = ibvcap(dir, c.args);
        expect_one_clear_line(r, c.args);
        EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << ": " << r.err;
    }
    // A sidecar index whose checksum is not hex: verify names the index,
    // not the parser (std::stoull's exception says only "stoull").
    std::string index_path;
    for (const auto& e : std::filesystem::directory_iterator(dir / "run")) {
        if (e.path().string().ends_with(".idx.json")) {
            index_path = e.path().string();
        }
    }
    ASSERT_FALSE(index_path.empty());
    std::string index = test::slurp(index_path);
    const std::string key = "\"value\": \"";
    const auto value = index.find(key);
    ASSERT_NE(value, std::string::npos) << index;
    index.replace(value + key.size(), 16, "zzzzzzzzzzzzzzzz");
    std::ofstream(index_path, std::ios::trunc) << index;
    const Result r = ibvcap(dir, "verify --report run/r.json");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("checksum value is not 16 hex digits"), std::string::npos) << r.out;
    expect_operator_text(r, "verify with a damaged index");
}

// The top of an option's range runs: -W's is 4,294,967,295 files, which
// made the writer reserve a ring of that many entries (std::bad_alloc).
TEST(CliInputs, AFileCountAtTheTopOfItsRangeRuns) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w a.pcap --antennas 1 --threads 1 -c 20").code, 0);
    const Result r = ibvcap(dir, "read -q -r a.pcap -F pcap -o w -C 1 -W 4294967295");
    EXPECT_EQ(r.code, 0) << r.err;
    expect_operator_text(r, "-W 4294967295");
    EXPECT_TRUE(std::filesystem::exists(dir / "w/ibvcap.000000.pcap"));
}

// --help shows no default an option refuses: -c, -G, -C, -W and --duration
// take 1 or more, and "(default: 0)" read as a limit of zero.
TEST(CliInputs, HelpShowsNoDefaultAnOptionRefuses) {
    test::TempDir dir;
    for (const char* command : {"capture", "read", "gen"}) {
        const Result r = ibvcap(dir, std::string(command) + " --help");
        ASSERT_EQ(r.code, 0) << command;
        const std::string& help = r.out;
        for (const char* option :
             {"--duration", "--count", "--rotate-seconds", "--file-size", "--file-count"}) {
            const auto at = help.find(std::string(option) + " ");
            if (at == std::string::npos) {
                continue;  // (gen has no -G)
            }
            // The option's text runs to the next option's line.
            auto end = help.find("\n  -", at);
            end = std::min(end, help.find("\n      --", at));
            const std::string text = help.substr(at, end - at);
            if (std::string(command) == "gen" && std::string(option) == "--count") {
                EXPECT_NE(text.find("(default: 1000)"), std::string::npos) << text;
                continue;
            }
            EXPECT_EQ(text.find("default: 0)"), std::string::npos) << command << ": " << text;
        }
    }
}

}  // namespace
}  // namespace ibvcap

namespace ibvcap::test {
namespace {

// GROUP:PORT@SOURCE (verbs-mlx5-2.md N7). A 232/8 group without a source is
// refused with the form that works; gen, which sends, takes no source; read
// keeps the named source's frames, counts the other sender's as not ours,
// and the report lists the group's sources.
TEST(CliInputs, SourceSpecificGroups) {
    TempDir dir;
    Result r = ibvcap(dir, "capture --source pcap -i lo -o o 232.1.1.1:4001");
    EXPECT_EQ(r.code, 2);
    expect_one_clear_line(r, "capture 232/8 without a source");
    EXPECT_NE(r.err.find("give it as 232.1.1.1:4001@SOURCE[,SOURCE...]"), std::string::npos)
        << r.err;
    r = ibvcap(dir, "capture --source pcap -i lo -o o 239.1.1.1:4001@10.0.0.1 239.1.1.1:4001");
    EXPECT_EQ(r.code, 2);
    expect_one_clear_line(r, "a group with and without sources");
    r = ibvcap(dir, "read -r a.pcap 239.1.1.1:4001@239.0.0.1");
    EXPECT_EQ(r.code, 2);
    expect_one_clear_line(r, "a multicast source");
    r = ibvcap(dir, "gen -w a.pcap 239.1.1.1:4001@10.0.0.11");
    EXPECT_EQ(r.code, 2);
    expect_one_clear_line(r, "gen with a source");

    ASSERT_EQ(ibvcap(dir,
                     "gen -q -w a.pcap --antennas 2 --threads 1 -c 30 239.1.0.1:4001 "
                     "239.1.0.2:4001")
                  .code,
              0);
    r = ibvcap(dir, "read -q -r a.pcap --report r.json 239.1.0.1:4001@10.0.0.12 239.1.0.2:4001");
    EXPECT_EQ(r.code, 0) << r.err;
    const auto report = nlohmann::json::parse(slurp(dir / "r.json"));
    EXPECT_EQ(report["totals"]["codif"], 30 + 60);
    EXPECT_EQ(report["reasons"]["non_codif"]["unlisted_source"], 30);
    EXPECT_EQ(report["groups"][0]["group"], "239.1.0.1:4001");
    EXPECT_EQ(report["groups"][0]["sources"], nlohmann::json::array({"10.0.0.12"}));
    EXPECT_EQ(report["groups"][1]["sources"], nlohmann::json::array());
    for (const auto& s : report["streams"]) {
        if (s["group"] == "239.1.0.1:4001") {
            EXPECT_EQ(s["antenna"], "10.0.0.12");
        }
    }
}

// --timestamps as typed (verbs-mlx5-3.md R1): host is taken by both
// sources (the verbs capture then fails only for want of a device here);
// nic only by verbs; any other word is one clear line naming the three.
TEST(CliInputs, TimestampsTakesUtcNicOrHost) {
    TempDir dir;
    Result r = ibvcap(dir, "capture --source pcap -i lo -o o --timestamps bogus 239.1.1.1:4001");
    EXPECT_EQ(r.code, 2);
    expect_one_clear_line(r, "--timestamps bogus");
    EXPECT_NE(r.err.find("give utc, nic or host"), std::string::npos) << r.err;
    r = ibvcap(dir, "capture --source pcap -i lo -o o --timestamps nic 239.1.1.1:4001");
    EXPECT_EQ(r.code, 2);
    expect_one_clear_line(r, "--timestamps nic with pcap");
    r = ibvcap(dir, "capture -i lo -o o --timestamps host 239.1.1.1:4001");
    EXPECT_NE(r.code, 2) << "--timestamps host is not a usage error: " << r.err;
    EXPECT_EQ(r.err.find("--timestamps"), std::string::npos) << r.err;
}

// GROUP:PORT@SOURCE,SOURCE as docs/operations.md writes it (issue 40): a
// comma before an address continues the group's sources, one before
// GROUP:PORT starts another group, in read and in capture; a list with an
// empty item is one clear line.
TEST(CliInputs, SourcesAfterCommasAsTheDocsWriteThem) {
    TempDir dir;
    ASSERT_EQ(ibvcap(dir,
                     "gen -q -w a.pcap --antennas 3 --threads 1 -c 20 239.1.0.1:4001 "
                     "239.1.0.2:4001 239.1.0.3:4001")
                  .code,
              0);
    const auto sources_of = [&](const std::string& groups) {
        const Result r = ibvcap(dir, "read -q -r a.pcap --overwrite --report r.json " + groups);
        EXPECT_EQ(r.code, 0) << groups << "\n" << r.err;
        const auto report = nlohmann::json::parse(slurp(dir / "r.json"));
        std::map<std::string, nlohmann::json> by_group;
        for (const auto& g : report["groups"]) {
            by_group[g["group"].get<std::string>()] = g["sources"];
        }
        EXPECT_EQ(report["reasons"]["non_codif"]["unlisted_source"], 20)
            << groups << ": the one other sender's frames";
        return by_group;
    };
    const auto two = nlohmann::json::array({"10.0.0.11", "10.0.0.13"});
    const auto any = nlohmann::json::array();
    using Groups = std::map<std::string, nlohmann::json>;
    EXPECT_EQ(sources_of("239.1.0.1:4001@10.0.0.11,10.0.0.13 239.1.0.2:4001 239.1.0.3:4001"),
              (Groups{{"239.1.0.1:4001", two}, {"239.1.0.2:4001", any}, {"239.1.0.3:4001", any}}));
    // Groups and sources in one argument, a /FORMAT after the sources.
    EXPECT_EQ(sources_of("239.1.0.1:4001,239.1.0.2:4001@10.0.0.11,10.0.0.13/codif,239.1.0.3:4001"),
              (Groups{{"239.1.0.1:4001", any}, {"239.1.0.2:4001", two}, {"239.1.0.3:4001", any}}));

    // capture: the form of docs/operations.md as written; the report lists
    // both sources of the 232/8 group.
    Result r = ibvcap(dir,
                      "capture --source pcap -i lo -q --duration 0.3 --report c.json "
                      "232.10.0.1:4001@10.1.0.11,10.1.0.12 239.17.0.1:36001");
    ASSERT_EQ(r.code, 3) << r.err;  // nothing sent: no frames
    const auto live = nlohmann::json::parse(slurp(dir / "c.json"));
    ASSERT_EQ(live["groups"].size(), 2u) << live["groups"].dump();
    EXPECT_EQ(live["groups"][0]["sources"], nlohmann::json::array({"10.1.0.11", "10.1.0.12"}));
    EXPECT_EQ(live["groups"][1]["sources"], any);

    for (const char* bad :
         {"239.1.0.1:4001@10.0.0.11,,10.0.0.13", "239.1.0.1:4001@10.0.0.11,", ",239.1.0.1:4001",
          "239.1.0.1:4001,10.0.0.11", "239.1.0.1:4001@10.0.0.11/codif,10.0.0.13"}) {
        r = ibvcap(dir, std::string("read -r a.pcap ") + bad);
        EXPECT_EQ(r.code, 2) << bad;
        expect_one_clear_line(r, bad);
    }
    r = ibvcap(dir, "read -r a.pcap 239.1.0.1:4001@10.0.0.11,,10.0.0.13");
    EXPECT_NE(r.err.find("an empty item in the list (two commas, or one at either end)"),
              std::string::npos)
        << r.err;
    r = ibvcap(dir, "read -r a.pcap 239.1.0.1:4001,10.0.0.11");
    EXPECT_NE(r.err.find("bad group '10.0.0.11'"), std::string::npos) << r.err;
}

// GROUP:PORT/FORMAT (issue 28): a group's stream format, its usage errors,
// and a VDIF read whose report equals the generator's truth.
TEST(CliInputs, StreamFormatsPerGroup) {
    TempDir dir;
    Result r = ibvcap(dir, "read -r a.pcap 239.1.1.1:4001/mark5b");
    EXPECT_EQ(r.code, 2);
    expect_one_clear_line(r, "an unknown format");
    EXPECT_NE(r.err.find("valid: codif, vdif, vtp"), std::string::npos) << r.err;
    r = ibvcap(dir, "read -r a.pcap 239.1.1.1:4001/vdif 239.1.1.1:4001/codif");
    EXPECT_EQ(r.code, 2);
    expect_one_clear_line(r, "one group, two formats");
    r = ibvcap(dir, "read -r a.pcap --vdif-frames-per-second 0 239.1.1.1:4001/vdif");
    EXPECT_EQ(r.code, 2);
    expect_one_clear_line(r, "a rate of 0");
    r = ibvcap(dir, "read -r a.pcap --stream-format mark5b");
    EXPECT_EQ(r.code, 2);
    expect_one_clear_line(r, "an unknown --stream-format");
    r = ibvcap(dir, "gen -w a.pcap 239.1.1.1:4001/vdif");
    EXPECT_EQ(r.code, 2);
    expect_one_clear_line(r, "gen with a /FORMAT");

    // Two groups, one CODIF and one VDIF, in one file; read with each
    // group's format, the rate learned.
    ASSERT_EQ(
        ibvcap(dir, "gen -q -w c.pcap --truth c.json --antennas 1 --threads 1 -c 40 239.1.0.1:4001")
            .code,
        0);
    ASSERT_EQ(ibvcap(dir,
                     "gen -q -w v.pcap --truth v.json --vdif --vdif-frames-per-second 20 "
                     "--antennas 2 --threads 2 -c 90 --loss 0.05 --invalid 0.05 239.1.0.2:4001")
                  .code,
              0);
    for (const char* args : {"read -q -r v.pcap --report r.json 239.1.0.2:4001/vdif",
                             "read -q -r v.pcap --report r.json --stream-format vdif"}) {
        r = ibvcap(dir, args);
        EXPECT_EQ(r.code, 3) << args << ": " << r.err;  // the injected loss
        const auto report = nlohmann::json::parse(slurp(dir / "r.json"));
        const auto truth = nlohmann::json::parse(slurp(dir / "v.json"));
        ASSERT_EQ(report["streams"].size(), 4u) << args;
        ASSERT_EQ(truth["streams"].size(), 4u);
        for (std::size_t i = 0; i < 4; ++i) {
            const auto& s = report["streams"][i];
            const auto& t = truth["streams"][i];
            EXPECT_EQ(s["format"], "vdif");
            EXPECT_EQ(s["station"], t["station"]);
            EXPECT_EQ(s["thread"], t["thread"]);
            EXPECT_EQ(s["packets"], t["packets"]);
            EXPECT_EQ(s["missing"], t["missing"]);
            EXPECT_EQ(s["invalid"], t["invalid"]);
            EXPECT_EQ(s["rate"], "learned, confirmed");
            EXPECT_EQ(s["frames_per_period"], 20);
        }
    }
    // The CODIF file read as VDIF is not VDIF: its frame lengths disagree.
    r = ibvcap(dir, "read -q -r c.pcap --report r.json 239.1.0.1:4001/vdif");
    EXPECT_EQ(r.code, 3) << r.err;
    const auto wrong = nlohmann::json::parse(slurp(dir / "r.json"));
    EXPECT_EQ(wrong["totals"]["codif"], 0);
    EXPECT_EQ(wrong["reasons"]["malformed"]["vdif_bad_length"], 40);
}

// Issue 42 item 3: a run of VDIF streams speaks of streams and their frames,
// never of CODIF: the summary's counts, the reasons' classes, a payload-absent
// read and every verdict reason (frames missing, no frames at all). A CODIF
// run says the same words of its frames.
TEST(CliInputs, VdifRunSaysStreamsNotCodif) {
    TempDir dir;
    // Two antennas: the second is left out by --antenna (non-stream frames).
    ASSERT_EQ(ibvcap(dir,
                     "gen -q -w v.pcap --vdif --vdif-frames-per-second 20 --antennas 2 "
                     "--threads 2 -c 60 --loss 0.1 --duplicate 0.05 --reorder 0.05 "
                     "239.1.0.2:4001")
                  .code,
              0);
    const auto no_codif = [](const Result& r, const std::string& command) {
        EXPECT_EQ((r.out + r.err).find("CODIF"), std::string::npos)
            << command << " said CODIF of VDIF streams:\n"
            << r.out << r.err;
    };
    const std::string lossy =
        "read -r v.pcap --antenna 10.0.0.11 -F pcap --pcap-snaplen headers -o h "
        "239.1.0.2:4001/vdif";
    Result r = ibvcap(dir, lossy);
    EXPECT_EQ(r.code, 3) << r.out << r.err;  // the injected loss
    EXPECT_NE(r.out.find("  stream frames: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" in 2 streams "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("non-stream unlisted_source: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("frames missing from the stream sequences"), std::string::npos) << r.out;
    no_codif(r, lossy);

    // Its headers-only pcap read back: frames without their payload.
    const std::string headers = "read -r h/*.pcap 239.1.0.2:4001/vdif";
    r = ibvcap(dir, headers);
    EXPECT_EQ(r.code, 3) << r.out << r.err;
    EXPECT_NE(r.out.find("  stream frames without payload (cut after the header by the "
                         "capture): "),
              std::string::npos)
        << r.out;
    no_codif(r, headers);

    // A group nothing was sent to: no stream frame at all.
    const std::string nothing = "read -r v.pcap 239.9.9.9:4001/vdif";
    r = ibvcap(dir, nothing);
    EXPECT_EQ(r.code, 3) << r.out << r.err;
    EXPECT_NE(r.out.find("no stream frames were received"), std::string::npos) << r.out;
    no_codif(r, nothing);

    // CODIF: the same summary and verdict words.
    ASSERT_EQ(ibvcap(dir,
                     "gen -q -w c.pcap --antennas 1 --threads 1 -c 40 --loss 0.1 "
                     "239.1.0.1:4001")
                  .code,
              0);
    r = ibvcap(dir, "read -r c.pcap 239.1.0.1:4001");
    EXPECT_EQ(r.code, 3) << r.out << r.err;
    EXPECT_NE(r.out.find("  stream frames: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" in 1 streams "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("frames missing from the stream sequences"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ibvcap::test
