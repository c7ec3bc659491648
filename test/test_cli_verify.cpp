// Outputs in each stream's own format, and `ibvcap verify` of what was
// written (issue 40): a format that can take none of a run's streams is
// refused before the run; verify reads a pcap of VDIF or VTP streams as
// them, finds a run's files from any directory, never opens a FIFO output,
// and fails a file of another run. Runs the real binary.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.hpp"
#include "frames.hpp"

namespace ibvcap {
namespace {

using test::ibvcap;
using test::Result;

bool has(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

nlohmann::json read_json(const std::string& path) {
    return nlohmann::json::parse(test::slurp(path));
}

// Two pcaps' records in one file (the first's header): a run of both.
void concatenate(const std::string& a, const std::string& b, const std::string& out) {
    const std::string second = test::slurp(b);
    std::ofstream o(out, std::ios::binary);
    o << test::slurp(a) << second.substr(24);  // (pcap's file header: 24 bytes)
}

// -F codif on VDIF streams, -F vdif on CODIF streams: the run wrote no file
// at all, said nothing and exited 0. Each group's format is known before the
// run (GROUP:PORT/FORMAT, --stream-format), so such a format is a usage
// error: one line naming the format, the group and the fix, and nothing made.
TEST(CliOutputs, AFormatThatTakesNoStreamIsRefusedBeforeTheRun) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w v.pcap --vdif --antennas 1 --threads 1 -c 50").code, 0);
    ASSERT_EQ(ibvcap(dir, "gen -q -w c.pcap --antennas 1 --threads 1 -c 50").code, 0);
    struct Case {
        std::string args;
        std::string says;
    };
    const std::string vdif_fix = "use -F vdif, raw, pcap or pcapng for vdif groups";
    const std::vector<Case> cases = {
        {"read -r v.pcap -F codif -o o 239.17.0.1:36001/vdif",
         "-F codif writes no file of group 239.17.0.1:36001 (read as vdif): its vdif frames would "
         "be captured and written nowhere; " +
             vdif_fix},
        {"read -r v.pcap -F codif,codifhdr --ordered -o o 239.17.0.1:36001/vdif",
         "-F codif,codifhdr writes no file of group 239.17.0.1:36001 (read as vdif)"},
        {"read -r v.pcap -F codif -o o --stream-format vtp",
         "-F codif writes no file of any stream (every group is read as vtp)"},
        {"read -r c.pcap -F vdif -o o",
         "-F vdif writes no file of any stream (every group is read as codif): its codif frames "
         "would be captured and written nowhere; use -F codif, codifhdr, raw, pcap or pcapng for "
         "codif groups"},
        {"read -r c.pcap -F vdif --ordered -o o 239.17.0.1:36001",
         "-F vdif writes no file of group 239.17.0.1:36001 (read as codif)"},
        {"read -r c.pcap -F vdif,pcap -o o",
         "-F vdif holds VDIF and VTP streams only, and no group of this run is read as vdif or "
         "vtp (they are read as codif): its files would never be made"},
        {"read -r v.pcap -F codif,raw -o o 239.17.0.1:36001/vdif",
         "-F codif holds CODIF streams only, and no group of this run is read as codif"},
        {"read -r c.pcap -F codif -o o 239.17.0.1:36001 239.17.0.2:36001/vtp",
         "-F codif writes no file of group 239.17.0.2:36001 (read as vtp)"},
        {"capture -i lo -F codif -o o 239.17.0.1:36001/vdif",
         "-F codif writes no file of group 239.17.0.1:36001 (read as vdif)"},
        {"capture -i lo -F vdif,pcap -o o 239.17.0.1:36001",
         "-F vdif holds VDIF and VTP streams only"},
    };
    for (const auto& c : cases) {
        const Result r = ibvcap(dir, c.args);
        EXPECT_EQ(r.code, 2) << c.args << ": " << r.err << r.out;
        EXPECT_EQ(test::lines(r.err), 1u) << c.args << ": " << r.err;
        EXPECT_TRUE(has(r.err, c.says)) << c.args << ": " << r.err;
        EXPECT_FALSE(std::filesystem::exists(dir / "o")) << c.args;
    }
    // A format that takes the streams beside one that does not, or one per
    // group's format: the run writes them.
    ASSERT_EQ(ibvcap(dir, "gen -q -w c2.pcap --antennas 1 --threads 1 -c 50 239.17.0.2:36001").code,
              0);
    concatenate(dir / "c2.pcap", dir / "v.pcap", dir / "mixed.pcap");
    Result r = ibvcap(
        dir, "read -q -r mixed.pcap -F codif,vdif -o a 239.17.0.2:36001 239.17.0.1:36001/vdif");
    EXPECT_EQ(r.code, 0) << r.err << r.out;
    EXPECT_TRUE(std::filesystem::exists(dir / "a/ibvcap_239.17.0.2_36001_10.0.0.11.codif"));
    r = ibvcap(dir, "read -q -r v.pcap -F vdif,pcap -o b --stream-format vdif");
    EXPECT_EQ(r.code, 0) << r.err << r.out;
    EXPECT_TRUE(std::filesystem::exists(dir / "b/ibvcap.pcap"));
}

// verify walked a pcap or pcapng output as CODIF: every VDIF or VTP stream
// of a clean run was "in the report but not in ibvcap.pcap". Each stream is
// read in its own format, a mixed run's too.
TEST(CliVerify, PcapOutputsAreReadInEachStreamsOwnFormat) {
    test::TempDir dir;
    ASSERT_EQ(
        ibvcap(dir, "gen -q -w v.pcap --vdif --antennas 2 --threads 2 -c 300 --payload 1024").code,
        0);
    ASSERT_EQ(
        ibvcap(dir, "gen -q -w t.pcap --vtp --antennas 2 --threads 1 -c 300 --payload 1024").code,
        0);
    ASSERT_EQ(ibvcap(dir,
                     "gen -q -w c.pcap --antennas 2 --threads 2 -c 300 --payload 1024 "
                     "239.17.0.2:36001")
                  .code,
              0);
    concatenate(dir / "c.pcap", dir / "v.pcap", dir / "mixed.pcap");
    struct Case {
        std::string name;
        std::string read;  // the input and the groups
        std::uint64_t streams;
    };
    const std::vector<Case> cases = {
        {"vdif", "-r v.pcap 239.17.0.1:36001/vdif", 4},
        {"vdif-any", "-r v.pcap --stream-format vdif", 4},
        {"vtp", "-r t.pcap 239.17.0.1:36001/vtp", 2},
        {"mixed", "-r mixed.pcap 239.17.0.2:36001 239.17.0.1:36001/vdif", 8},
    };
    for (const auto& c : cases) {
        const std::string report = c.name + "/r.json";
        Result r = ibvcap(
            dir, "read -q " + c.read + " -F pcap,pcapng,raw -o " + c.name + " --report " + report);
        ASSERT_EQ(r.code, 0) << c.name << ": " << r.err << r.out;
        ASSERT_EQ(read_json(dir / report)["streams"].size(), c.streams) << c.name;
        r = ibvcap(dir, "verify --report " + report);
        EXPECT_EQ(r.code, 0) << c.name << ": " << r.out << r.err;
        EXPECT_FALSE(has(r.out, "FAIL")) << c.name << ": " << r.out;
        EXPECT_TRUE(has(r.out, "OK " + c.name + "/ibvcap.pcap: ")) << c.name << ": " << r.out;
        EXPECT_TRUE(has(r.out, "OK " + c.name + "/ibvcap.pcapng: ")) << c.name << ": " << r.out;
        // pcap and pcapng hold every stream; each raw file its antenna's.
        EXPECT_TRUE(has(
            r.out, fmt::format("{} streams checked against the report", c.streams * 2 + c.streams)))
            << c.name << ": " << r.out;
    }
    // Still a check: a report that claims a frame more of a VDIF stream fails.
    nlohmann::json report = read_json(dir / "vdif/r.json");
    report["streams"][0]["packets"] = report["streams"][0]["packets"].get<std::uint64_t>() + 1;
    std::ofstream(dir / "vdif/edited.json") << report.dump(1);
    const Result r = ibvcap(dir, "verify --report vdif/edited.json");
    EXPECT_EQ(r.code, 3) << r.out;
    EXPECT_TRUE(has(r.out, "FAIL vdif/ibvcap.pcap: stream 239.17.0.1:36001")) << r.out;
}

// `report R.json --verify` and `verify --report R.json` from another
// directory than the run's: every file was "missing". A relative output
// path is relative to the run's directory, which the report gives (cwd).
TEST(CliVerify, ARunsFilesAreFoundFromAnyDirectory) {
    test::TempDir run;
    test::TempDir elsewhere;
    ASSERT_EQ(ibvcap(run, "gen -q -w c.pcap --antennas 2 --threads 1 -c 100 --payload 1024").code,
              0);
    // (The report in a directory of its own: not the run's, nor the files'.)
    std::filesystem::create_directory(run / "reports");
    ASSERT_EQ(ibvcap(run, "read -q -r c.pcap -F codif,pcap -o out --report reports/r.json").code,
              0);
    const std::string report = run / "reports/r.json";
    EXPECT_EQ(read_json(report)["cwd"], std::filesystem::canonical(run.path()).string());
    Result r = ibvcap(elsewhere, "verify --report " + report);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 4) << r.out;  // 3 files and the sum
    r = ibvcap(elsewhere, "report " + report + " --html page.html --verify");
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_TRUE(has(r.out, "every file holds what was claimed")) << r.out;
    // From the run's directory, as before: the paths as the report names them.
    r = ibvcap(run, "verify --report reports/r.json");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(has(r.out, "OK out/ibvcap.pcap: ")) << r.out;
    // A file gone is missing at the run's path.
    std::filesystem::remove(run / "out/ibvcap.pcap");
    r = ibvcap(elsewhere, "verify --report " + report);
    EXPECT_EQ(r.code, 3) << r.out;
    EXPECT_TRUE(has(r.out, "FAIL " + run / "out/ibvcap.pcap" + ": missing\n")) << r.out;
    // A report without cwd (an older ibvcap's): a relative path that cannot
    // be found says why, and how to verify it.
    nlohmann::json old = read_json(report);
    old.erase("cwd");
    std::ofstream(elsewhere / "old.json") << old.dump(1);
    r = ibvcap(elsewhere, "verify --report old.json");
    EXPECT_EQ(r.code, 3) << r.out;
    EXPECT_TRUE(has(r.out,
                    "FAIL out/ibvcap_239.17.0.1_36001_10.0.0.11.codif: missing: "
                    "out/ibvcap_239.17.0.1_36001_10.0.0.11.codif is relative to the run's "
                    "directory, which the report (of an older ibvcap) does not give: verify "
                    "from that directory"))
        << r.out;
}

// verify of a run whose pcap output was a FIFO blocked for ever opening it.
// A FIFO (device, socket) output is never opened: a line says it was written
// as a stream, it is counted as not verifiable (neither a pass nor a
// failure), and the run's files verify.
TEST(CliVerify, AFifoOutputIsNotOpenedAndNotVerifiable) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w c.pcap --antennas 1 --threads 2 -c 100 --payload 1024").code,
              0);
    ASSERT_EQ(ibvcap(dir, "read -q -r c.pcap -F codif,pcap -o run --report run/r.json").code, 0);
    // The run's pcap as it is when the run wrote into a FIFO: a FIFO.
    std::filesystem::remove(dir / "run/ibvcap.pcap");
    ASSERT_EQ(::mkfifo((dir / "run/ibvcap.pcap").c_str(), 0600), 0);
    Result r =
        test::sh(dir, "timeout 20 " + std::string(IBVCAP_BINARY) + " verify --report run/r.json");
    EXPECT_EQ(r.code, 0) << r.out << r.err;  // (124: it blocked)
    EXPECT_TRUE(has(r.out,
                    "SKIP run/ibvcap.pcap is a FIFO: written as a stream, nothing to "
                    "verify on disk\n"))
        << r.out;
    EXPECT_TRUE(has(r.out, "OK run/ibvcap_239.17.0.1_36001_10.0.0.11.codif: ")) << r.out;
    EXPECT_TRUE(has(r.out,
                    "verify: 1 of 1 files hold what was claimed, 2 streams checked against "
                    "the report, 1 not verifiable (written as a stream, not a file)"))
        << r.out;
    // Named on the command line too; and the run page says so.
    r = test::sh(dir, "timeout 20 " + std::string(IBVCAP_BINARY) + " verify run/ibvcap.pcap");
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_TRUE(has(r.out, "SKIP run/ibvcap.pcap is a FIFO")) << r.out;
    r = test::sh(dir, "timeout 20 " + std::string(IBVCAP_BINARY) +
                          " report run/r.json --html page.html --verify");
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_TRUE(has(test::slurp(dir / "page.html"), "is a FIFO: written as a stream"));
    // An index that is a FIFO is not opened either: the file fails, at once.
    const std::string codif = "run/ibvcap_239.17.0.1_36001_10.0.0.11.codif";
    std::filesystem::remove(dir / (codif + ".idx.json"));
    ASSERT_EQ(::mkfifo((dir / (codif + ".idx.json")).c_str(), 0600), 0);
    r = test::sh(dir, "timeout 20 " + std::string(IBVCAP_BINARY) + " verify " + codif);
    EXPECT_EQ(r.code, 3) << r.out << r.err;  // (124: it blocked)
    EXPECT_TRUE(
        has(r.out, "FAIL " + codif + ": index " + codif + ".idx.json: not a regular file\n"))
        << r.out;
}

// A file the report does not list (another run's, of the same input: the
// same name, frames and bytes) is not this run's: verify fails it, saying
// so, whatever else is right or wrong with it.
TEST(CliVerify, AFileOfAnotherRunFails) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w c.pcap --antennas 1 --threads 1 -c 100 --payload 1024").code,
              0);
    for (const char* run : {"one", "two"}) {
        ASSERT_EQ(ibvcap(dir, fmt::format("read -q -r c.pcap -F codif,pcap -o {0} --report "
                                          "{0}/r.json",
                                          run))
                      .code,
                  0);
    }
    const std::string codif = "ibvcap_239.17.0.1_36001_10.0.0.11.codif";
    // Its own: passes.
    Result r = ibvcap(dir, "verify one/" + codif + " --report one/r.json");
    ASSERT_EQ(r.code, 0) << r.out;
    r = ibvcap(dir, "verify two/" + codif + " --report one/r.json");
    EXPECT_EQ(r.code, 3) << r.out;
    EXPECT_TRUE(has(r.out, "FAIL two/" + codif +
                               ": not an output of the report's run: one/r.json lists no such "
                               "file\n"))
        << r.out;
    EXPECT_TRUE(has(r.out, "verify: 0 of 1 files hold what was claimed")) << r.out;
    // With the report's own files beside it, the other run's still fails.
    r = ibvcap(dir, "verify one/" + codif + " two/ibvcap.pcap --report one/r.json");
    EXPECT_EQ(r.code, 3) << r.out;
    EXPECT_TRUE(has(r.out, "OK one/" + codif)) << r.out;
    EXPECT_TRUE(has(r.out, "FAIL two/ibvcap.pcap: not an output of the report's run")) << r.out;
    // Without its index, the first line still says whose it is not.
    std::filesystem::remove(dir / ("two/" + codif + ".idx.json"));
    r = ibvcap(dir, "verify two/" + codif + " --report one/r.json");
    EXPECT_EQ(r.code, 3) << r.out;
    EXPECT_TRUE(has(r.out, "FAIL two/" + codif + ": not an output of the report's run")) << r.out;
}

}  // namespace
}  // namespace ibvcap
