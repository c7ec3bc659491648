// No output of a run replaces another of its outputs or one of its inputs,
// however the paths are spelled (issue 40): the files are compared, not the
// strings (lib/run/run_paths.hpp). Runs the real binary; each refusal is exit
// 2 (1 where gen's -w rule applies), one line, before anything is written,
// and the file it protects is as it was.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "frames.hpp"
#include "lib/run/run_paths.hpp"

namespace ibvcap {
namespace {

using test::ibvcap;
using test::lines;
using test::Result;
using test::slurp;

namespace fs = std::filesystem;

constexpr const char* kGroup1 = "239.17.0.1:36001";
constexpr const char* kGroup2 = "239.17.0.2:36001";

// The files each case starts from, made once: a pcap, two hosts' reports of
// it (one group each) and a manifest that both read and merge take.
class RunPaths : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        base_ = new test::TempDir();
        const auto run = [](const std::string& args, int want) {
            const Result r = ibvcap(*base_, args);
            ASSERT_EQ(r.code, want) << args << ": " << r.err;
        };
        run(fmt::format("gen -q -w x.pcap -c 20 --antennas 1 --threads 1 {} {}", kGroup1, kGroup2),
            0);
        run(fmt::format("read -q -r x.pcap --report g1.json {}", kGroup1), 0);
        run(fmt::format("read -q -r x.pcap --report g2.json {}", kGroup2), 0);
        std::ofstream(*base_ / "m.json")
            << fmt::format(R"({{"groups": ["{}", "{}"], "antennas": ["10.0.0.11"], "threads": 1}})",
                           kGroup1, kGroup2);
        fs::copy_file(*base_ / "x.pcap", *base_ / "keep.pcap");
    }
    static void TearDownTestSuite() {
        delete base_;
        base_ = nullptr;
    }

    // A fresh directory holding the suite's files and `here`, a link to
    // itself.
    static void fill(const test::TempDir& dir) {
        for (const char* name : {"x.pcap", "g1.json", "g2.json", "m.json", "keep.pcap"}) {
            fs::copy_file(*base_ / name, dir / name);
        }
        fs::create_directory_symlink(".", dir / "here");
    }

    struct Case {
        std::string args;
        int code;
        std::string says;
        std::vector<std::string> kept;  // as they were: their bytes, or absent
    };

    static void check(const Case& c) {
        SCOPED_TRACE(c.args);
        test::TempDir dir;
        fill(dir);
        std::vector<std::optional<std::string>> before;
        for (const auto& name : c.kept) {
            before.push_back(fs::exists(dir / name) ? std::optional(slurp(dir / name))
                                                    : std::nullopt);
        }
        const Result r = ibvcap(dir, c.args);
        EXPECT_EQ(r.code, c.code) << r.out << r.err;
        EXPECT_EQ(lines(r.err), 1u) << r.err;
        EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
        EXPECT_EQ(r.out, "") << "the run started";
        for (std::size_t i = 0; i < c.kept.size(); ++i) {
            const std::string& name = c.kept[i];
            if (before[i]) {
                EXPECT_TRUE(fs::exists(dir / name) && slurp(dir / name) == *before[i])
                    << name << " was changed";
            } else {
                EXPECT_FALSE(fs::exists(dir / name)) << name << " was written";
            }
        }
    }

    static test::TempDir* base_;
};

test::TempDir* RunPaths::base_ = nullptr;

TEST_F(RunPaths, ThePageIsNeverWrittenOverTheReport) {
    const std::string names = "r.json is the --report file (r.json); give the page another path";
    for (const Case& c : std::vector<Case>{
             {"read -q -r x.pcap --report r.json --html ./r.json",
              2,
              "--html ./" + names,
              {"r.json"}},
             {"read -q -r x.pcap --report r.json --html here/r.json",
              2,
              "--html here/" + names,
              {"r.json"}},
             {"read -q -r x.pcap --report here/r.json --html r.json",
              2,
              "--html r.json is the --report file (here/r.json)",
              {"r.json"}},
             {fmt::format("capture -q --source pcap -i lo --duration 1 --report r.json --html "
                          "./r.json {}",
                          kGroup1),
              2,
              "--html ./" + names,
              {"r.json"}},
             {fmt::format("capture -q --source pcap -i lo --duration 1 --report r.json --html "
                          "here/r.json {}",
                          kGroup1),
              2,
              "--html here/" + names,
              {"r.json"}},
         }) {
        check(c);
    }
}

TEST_F(RunPaths, TheManifestIsNeverReplaced) {
    for (const Case& c : std::vector<Case>{
             {"read -q -r x.pcap --expect m.json --report m.json",
              2,
              "--report m.json is the --expect manifest (m.json); give the report another path",
              {"m.json"}},
             {"read -q -r x.pcap --expect here/m.json --report ./m.json",
              2,
              "--report ./m.json is the --expect manifest (here/m.json)",
              {"m.json"}},
             {"read -q -r x.pcap --expect m.json --report r.json --html ./m.json",
              2,
              "--html ./m.json is the --expect manifest",
              {"m.json", "r.json"}},
             {"read -q -r x.pcap --expect m.json --metrics-file here/m.json",
              2,
              "--metrics-file here/m.json is the --expect manifest",
              {"m.json"}},
             {fmt::format("capture -q --source pcap -i lo --duration 1 --expect m.json --report "
                          "./m.json {} {}",
                          kGroup1, kGroup2),
              2,
              "--report ./m.json is the --expect manifest",
              {"m.json"}},
         }) {
        check(c);
    }
}

TEST_F(RunPaths, TheMetricsFileIsNoOtherOutput) {
    for (const Case& c : std::vector<Case>{
             {"read -q -r x.pcap --metrics-file m.prom --html ./m.prom",
              2,
              "--metrics-file m.prom is the --html page (./m.prom); give the metrics file "
              "another path",
              {"m.prom"}},
             {"read -q -r x.pcap --metrics-file ./r.json --report r.json",
              2,
              "--metrics-file ./r.json is the --report file (r.json); give the metrics file "
              "another path",
              {"r.json"}},
             {"read -q -r x.pcap --report here/r.json --metrics-file r.json",
              2,
              "--metrics-file r.json is the --report file (here/r.json)",
              {"r.json"}},
             {"read -q -r x.pcap --metrics-file here/x.pcap",
              2,
              "--metrics-file here/x.pcap is the input file (x.pcap)",
              {"x.pcap"}},
         }) {
        check(c);
    }
}

// Two outputs on standard output would interleave: the frame lines of -v
// inside the report's JSON.
TEST_F(RunPaths, OneOutputOnStandardOutput) {
    check({"read -q -r x.pcap -v --report -",
           2,
           "-v and --report - both write to standard output; give the report a file path",
           {}});
}

TEST_F(RunPaths, GenKeepsAnExistingTruthFileAndNeverWritesOneFileTwice) {
    for (const Case& c : std::vector<Case>{
             // As -w: an existing regular file only with --overwrite (exit 1).
             {"gen -q -w g.pcap -c 3 --truth keep.pcap",
              1,
              "--truth keep.pcap exists; add --overwrite to replace it, or choose another "
              "--truth FILE",
              {"keep.pcap", "g.pcap"}},
             {"gen -q -w g.pcap -c 3 --truth here/keep.pcap",
              1,
              "--truth here/keep.pcap exists; add --overwrite",
              {"keep.pcap", "g.pcap"}},
             // One file for both: never, --overwrite or not.
             {"gen -q -w g.pcap -c 3 --truth g.pcap",
              2,
              "--truth g.pcap is the -w file (g.pcap); give the truth another path",
              {"g.pcap"}},
             {"gen -q -w g.pcap -c 3 --truth ./g.pcap --overwrite",
              2,
              "--truth ./g.pcap is the -w file (g.pcap)",
              {"g.pcap"}},
             {"gen -q -w keep.pcap -c 3 --truth here/keep.pcap --overwrite",
              2,
              "--truth here/keep.pcap is the -w file (keep.pcap)",
              {"keep.pcap"}},
         }) {
        check(c);
    }
    // With --overwrite an existing truth file is replaced.
    test::TempDir dir;
    fill(dir);
    const Result r = ibvcap(dir, "gen -q -w g.pcap -c 3 --truth keep.pcap --overwrite");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(nlohmann::json::parse(slurp(dir / "keep.pcap")).contains("totals"));
}

TEST_F(RunPaths, MergeNeverReplacesAnInputOrItsOtherOutput) {
    for (const Case& c : std::vector<Case>{
             {"merge -q g1.json g2.json --report obs.json --html ./obs.json",
              2,
              "--html ./obs.json is the --report file (obs.json); give the page another path",
              {"obs.json"}},
             {"merge -q g1.json g2.json --report obs.json --html here/obs.json",
              2,
              "--html here/obs.json is the --report file (obs.json)",
              {"obs.json"}},
             {"merge -q g1.json g2.json --expect m.json --report m.json --overwrite",
              2,
              "--report m.json is the --expect manifest (m.json); give the report another path",
              {"m.json"}},
             {"merge -q g1.json g2.json --expect m.json --report here/m.json --overwrite",
              2,
              "--report here/m.json is the --expect manifest (m.json)",
              {"m.json"}},
             {"merge -q g1.json g2.json --expect m.json --report o.json --html ./m.json",
              2,
              "--html ./m.json is the --expect manifest (m.json)",
              {"m.json", "o.json"}},
             {"merge -q g1.json g2.json --report here/g2.json --overwrite",
              2,
              "--report here/g2.json is one of the reports to merge (g2.json)",
              {"g2.json"}},
         }) {
        check(c);
    }
}

// The helper itself, on what the command lines above cannot spell: a hard
// link, a dangling link, a FIFO, and the files of the -o directory.
TEST(RunPathCollision, ComparesFilesNotNames) {
    test::TempDir dir;
    const auto out = [](const std::string& option, const std::string& path) {
        return RunPath{option, path, PathRole::output, "the " + option + " file", "file"};
    };
    const auto in = [](const std::string& path) {
        return RunPath{"-r", path, PathRole::input, "the input file", "input"};
    };
    std::ofstream(dir / "a") << "a";
    ASSERT_EQ(::link((dir / "a").c_str(), (dir / "hard").c_str()), 0);
    EXPECT_NE(run_path_collision({in(dir / "a"), out("--report", dir / "hard")}), "");
    // A dangling link: its target is written by some writers, the link by others.
    fs::create_symlink(dir / "target.json", dir / "dangling");
    EXPECT_NE(
        run_path_collision({out("--report", dir / "dangling"), out("--html", dir / "target.json")}),
        "");
    EXPECT_NE(
        run_path_collision({out("--report", dir / "dangling"), out("--html", dir / "dangling")}),
        "");
    // Different files in one directory, or one name in two directories.
    fs::create_directory(dir / "sub");
    EXPECT_EQ(run_path_collision({out("--report", dir / "r.json"), out("--html", dir / "p.html"),
                                  out("--metrics-file", dir / "sub/r.json"), in(dir / "a")}),
              "");
    // Inputs may be one file (merge says so itself); "-" as an input is stdin.
    EXPECT_EQ(run_path_collision({in(dir / "a"), in(dir / "hard"), in("-"), out("--report", "-")}),
              "");
    // Two outputs into one FIFO interleave; a character device is no file.
    ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
    EXPECT_NE(run_path_collision({out("--report", dir / "fifo"), out("--html", dir / "fifo")}), "");
    EXPECT_EQ(run_path_collision({out("--report", "/dev/null"), out("--html", "/dev/null")}), "");
    // The -o directory's files: its lock and outputs' names, and a link onto them.
    OutputOptions outputs;
    outputs.output_dir = dir / "sub";
    outputs.formats = {OutputFormat::pcap};
    fs::create_symlink(dir / "sub/ibvcap.pcap", dir / "to-pcap");
    for (const std::string name : {"sub/ibvcap.pcap", "sub/.ibvcap.lock", "to-pcap"}) {
        const std::string said = run_path_collision({out("--report", dir / name)}, outputs);
        EXPECT_NE(said.find("is a file this run writes"), std::string::npos)
            << name << ": " << said;
    }
    EXPECT_NE(run_path_collision({in(dir / "sub/ibvcap.000002.pcap")}, outputs)
                  .find("choose another -o DIR or --prefix"),
              std::string::npos);
    EXPECT_EQ(run_path_collision({out("--report", dir / "sub/ibvcap.json")}, outputs), "");
}

}  // namespace
}  // namespace ibvcap
