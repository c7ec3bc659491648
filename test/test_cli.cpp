// The command-line contract (docs/formats.md, "Command line" and "The report"): exit codes,
// one-line errors, the report's keys, and output that tshark reads. Runs the real binary.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "cli.hpp"
#include "frames.hpp"
#include "full_pipe.hpp"

namespace ibvcap {
namespace {

using test::ibvcap;
using test::Result;
using test::sh;
using test::slurp;

using test::describe;
using test::lines;
using test::open_file;
using test::spawn;
using test::spawn_to_files;
using test::wait_for;
using test::wait_for_handler;

// The binary must load on acquisition hosts with an older rdma-core:
// ibv_reg_dmabuf_mr (IBVERBS_1.12, rdma-core 34) is looked up at run time, so
// the highest libibverbs symbol version it needs is IBVERBS_1.8
// (ibv_reg_mr_iova2, which the ibv_reg_mr macro calls for relaxed ordering).
TEST(Cli, LoadsWithALibibverbsOlderThanDmaBufSupport) {
    test::TempDir dir;
    const Result r = sh(dir, "readelf -W --dyn-syms " + std::string(IBVCAP_BINARY));
    ASSERT_EQ(r.code, 0) << r.err;
    ASSERT_NE(r.out.find("@IBVERBS_1.1"), std::string::npos) << "not linked to libibverbs?";
    EXPECT_EQ(r.out.find("ibv_reg_dmabuf_mr"), std::string::npos)
        << "a direct reference to ibv_reg_dmabuf_mr needs rdma-core 34";
    int highest = 0;
    for (std::size_t at = r.out.find("@IBVERBS_1."); at != std::string::npos;
         at = r.out.find("@IBVERBS_1.", at + 1)) {
        highest = std::max(highest, std::atoi(r.out.c_str() + at + 11));
    }
    EXPECT_LE(highest, 8) << "needs IBVERBS_1." << highest;
}

TEST(Cli, UsageErrorsExitTwoWithOneLineNamingTheFix) {
    test::TempDir dir;
    struct Case {
        std::string args;
        std::string says;
    };
    const std::vector<Case> cases = {
        {"", "usage: ibvcap"},
        {"frobnicate",
         "unknown command 'frobnicate' (valid: capture, read, gen, devices, doctor, verify, "
         "merge, report, ctl)"},
        {"doctor --cpus 3-1", "bad --cpus '3-1'"},
        {"doctor --gpu x", "bad --gpu 'x'"},
        {"read", "-r FILE is required"},
        {"verify", "give the files to check, or --report REPORT.json"},
        {"read -r x.pcap -F foo",
         "unknown format 'foo' (valid: raw, codif, codifhdr, vdif, pcap, pcapng)"},
        {"read -r x.pcap -F pcap --ordered",
         "--ordered orders the codif and vdif files: add -F codif or -F vdif"},
        {"read -r x.pcap -F codif --ordered-window 8",
         "--ordered-window applies only with --ordered or --dada: add --ordered"},
        {"read -r x.pcap -F vdif --ordered --ordered-window 0",
         "bad --ordered-window 0: expected 1 to 8192 (frames)"},
        {"read -r x.pcap -F codif --ordered --ordered-window 8193",
         "bad --ordered-window 8193: expected 1 to 8192 (frames)"},
        {"read -r x.pcap -F codif --ordered --ordered-window -1", "expected 1 to 8192 (frames)"},
        {"capture -i lo -F codif --ordered --gpu-standin 239.17.0.1:36001",
         "--ordered holds each stream's frames in host memory, but --gpu-standin puts the payload "
         "in GPU memory: leave out --ordered, or --gpu-standin"},
        {"capture -i lo --queues 0 239.17.0.1:36001", "--queues must be 1 to 65535"},
        {"capture -i lo --queues x 239.17.0.1:36001", "expected 1 to 65535"},
        {"capture -i lo --queues 65536 239.17.0.1:36001", "--queues must be 1 to 65535"},
        {"capture --source pcap -i lo --queues 2 239.17.0.1:36001",
         "--queues applies to --source verbs only"},
        {"read -r x.pcap 239.1.1.1", "expected GROUP:PORT"},
        {"read -r x.pcap 10.0.0.1:5000", "is not a multicast address"},
        {"read -r x.pcap 239.1.1.1:0", "port must be 1-65535"},
        {"read -r x.pcap --antenna 10.0.0", "bad --antenna '10.0.0'"},
        {"read -r x.pcap --bogus", "unknown option --bogus (see 'ibvcap read --help')"},
        {"read -r x.pcap -Z", "unknown option -Z (see 'ibvcap read --help')"},
        {"read -r", "-r (--read) needs a value (see 'ibvcap read --help')"},
        {"capture --duration", "--duration needs a value (see 'ibvcap capture --help')"},
        {"devices --x", "unknown option --x (see 'ibvcap devices --help')"},
        {"read -r x.pcap --pcap-snaplen 100", "valid: full, headers"},
        {"read -r x.pcap -W 3", "-W needs -G or -C"},
        {"read -r x.pcap --disk-threads 0", "--disk-threads takes 1 to 64"},
        {"read -r x.pcap --disk-cpu -1", "--disk-cpu: bad CPU -1"},
        {"read -r x.pcap --writer-memory 100M",
         "--writer-memory 100 MiB is too small: up to 4096 output files need a buffer of at "
         "least 68 KiB each, with 1 disk thread; give --writer-memory"},
        {"read -r x.pcap --writer-memory 1x", "bad --writer-memory '1x': expected a size"},
        {"read -r x.pcap --writer-memory 0", "bad --writer-memory '0'"},
        {"capture -i lo --writer-memory 600M -i lo2 239.17.0.1:36001", "per interface (2 -i)"},
        {"capture -i lo --writer-memory 600M -i lo2 239.17.0.1:36001", "give --writer-memory 8"},
        {"read -r x.pcap -F pcap --prefix ../x", "without / or .."},
        {"read -r x.pcap -F pcap --prefix a/b", "without / or .."},
        {"read -r x.pcap -F pcap --prefix ''", "must be non-empty"},
        {"gen --send -i lo --overwrite", "--overwrite applies only with -w FILE"},
        {"read -r x.pcap --report ''", "--report needs a file name"},
        {"gen", "-w FILE.pcap is required"},
        {"gen -w x.pcap --payload 100", "multiple of 8"},
        {"gen -w x.pcap --burst 0", "bad --burst 0: expected a whole number of frame slots"},
        {"gen -w x.pcap --codif-layout v3", "valid: v2, draft"},
        {"gen -w x.pcap --loss 0.7 --duplicate 0.7", "must not exceed 1"},
    };
    for (const auto& c : cases) {
        const Result r = ibvcap(dir, c.args);
        EXPECT_EQ(r.code, 2) << c.args;
        EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << " said: " << r.err;
        if (!c.args.empty()) {
            EXPECT_EQ(lines(r.err), 1u) << c.args << " said: " << r.err;
        }
    }
}

TEST(Cli, RuntimeErrorsExitOneWithOneLine) {
    test::TempDir dir;
    std::ofstream(dir / "garbage.pcap") << "not a capture";
    for (const auto& [args, says] :
         {std::pair{"read -r missing.pcap",
                    "cannot read missing.pcap: No such file or directory\n"},
          std::pair{
              "read -r garbage.pcap",
              "cannot read garbage.pcap: not a pcap or pcapng file (unknown file format)\n"}}) {
        const Result r = ibvcap(dir, args);
        EXPECT_EQ(r.code, 1) << args;
        EXPECT_EQ(lines(r.err), 1u) << r.err;
        EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    }
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 10").code, 0);
    const Result r = ibvcap(dir, "read -r x.pcap -F codif -o x.pcap/out");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("choose another with -o DIR"), std::string::npos) << r.err;
    // A disk thread pinned to a CPU that is not there.
    const Result cpu = ibvcap(dir, "read -q -r x.pcap -F codif -o out --disk-cpu 1023");
    EXPECT_EQ(cpu.code, 1);
    EXPECT_EQ(lines(cpu.err), 1u) << cpu.err;
    EXPECT_NE(cpu.err.find("cannot pin a disk thread to cpu 1023: it is offline, absent or "
                           "outside this process's cpuset; give --disk-cpu a CPU"),
              std::string::npos)
        << cpu.err;
}

// Outputs that fail alike (a full disk, here a directory in each file's
// place) are said once on stderr, naming the first and how many more; the
// summary lists each.
TEST(Cli, OutputsFailingAlikeAreOneLine) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 5 --antennas 3 239.1.1.1:1").code, 0);
    for (int host = 11; host <= 13; ++host) {
        std::filesystem::create_directories(
            dir.path() / "out" / fmt::format("ibvcap_239.1.1.1_1_10.0.0.{}.codif", host));
    }
    const Result r = ibvcap(dir, "read -q -r x.pcap -o out -F codif");
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("ibvcap_239.1.1.1_1_10.0.0.11.codif (and 2 other outputs): cannot "
                         "create file: Is a directory"),
              std::string::npos)
        << r.err;
}

// The writer options end to end: O_DIRECT, two disk threads and -C rotation
// give the same bytes as a plain run, and the report counts the files.
TEST(Cli, DirectIoDiskThreadsAndRotationKeepEveryByte) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w in.pcap -c 400 --antennas 2").code, 0);
    ASSERT_EQ(ibvcap(dir, "read -q -r in.pcap -F pcap -F codif -o plain").code, 0);
    const Result d =
        ibvcap(dir, "read -q -r in.pcap -F pcap -o direct --direct-io --disk-threads 2");
    ASSERT_EQ(d.code, 0) << d.err;
    EXPECT_TRUE(slurp((dir.path() / "plain" / "ibvcap.pcap").string()) ==
                slurp((dir.path() / "direct" / "ibvcap.pcap").string()));
    const Result r = ibvcap(dir,
                            "read -q -r in.pcap -F codif -o fast --direct-io --disk-threads 2 -C 2 "
                            "--report fast.json");
    ASSERT_EQ(r.code, 0) << r.err;
    const auto report = nlohmann::json::parse(slurp(dir / "fast.json"));
    std::uint64_t codif_files = 0;
    for (const auto& o : report["outputs"]) {
        if (o["format"] == "codif") {
            codif_files += o["files"].get<std::uint64_t>();
            // 400 x 2 threads x 8234 bytes = 6.6 MB per antenna: 4 files of <= 2 MB.
            EXPECT_EQ(o["files"], 4) << o.dump();
        }
    }
    EXPECT_EQ(codif_files, 8u);
    // The rotated pieces of one antenna, joined, are its plain file.
    const std::string stem = "ibvcap_239.17.0.1_36001_10.0.0.11";
    std::string joined;
    for (int i = 0; i < 4; ++i) {
        joined += slurp((dir.path() / "fast" / fmt::format("{}.{:06}.codif", stem, i)).string());
    }
    EXPECT_TRUE(joined == slurp((dir.path() / "plain" / (stem + ".codif")).string()));
}

TEST(Cli, GenThenReadReproducesTruthInTheReport) {
    test::TempDir dir;
    const Result g = ibvcap(dir,
                            "gen -w x.pcap --truth truth.json -c 500 --loss 0.01 --duplicate 0.01 "
                            "--reorder 0.01 239.17.0.1:36001 239.17.0.2:36001");
    ASSERT_EQ(g.code, 0) << g.err;
    const Result r =
        ibvcap(dir, "read -r x.pcap -o out -F codif -F codifhdr -F pcap --report r.json");
    EXPECT_EQ(r.code, 3) << r.err;  // loss was injected
    EXPECT_NE(r.out.find("verdict: loss"), std::string::npos);
    EXPECT_NE(r.out.find("total packets:"), std::string::npos);
    EXPECT_NE(r.out.find("average bytes per packet: 8298.0"), std::string::npos);

    const auto truth = nlohmann::json::parse(slurp(dir / "truth.json"));
    const auto report = nlohmann::json::parse(slurp(dir / "r.json"));
    // The contract keys of docs/formats.md, "The report".
    EXPECT_EQ(report["verdict"], "loss");
    EXPECT_EQ(report["source"], "file");
    EXPECT_TRUE(report["duration_s"].is_number());
    for (const char* key : {"packets", "bytes", "missing", "duplicates", "out_of_order",
                            "malformed", "non_codif", "nic_drops", "wc_errors", "written"}) {
        EXPECT_TRUE(report["totals"].contains(key)) << key;
    }
    for (const char* key : {"packets", "missing", "duplicates", "out_of_order"}) {
        EXPECT_EQ(report["totals"][key], truth["totals"][key]) << key;
    }
    ASSERT_EQ(report["streams"].size(), truth["streams"].size());
    ASSERT_EQ(report["streams"].size(), 24u);
    for (const auto& t : truth["streams"]) {
        bool found = false;
        for (const auto& s : report["streams"]) {
            if (s["group"] == t["group"] && s["antenna"] == t["antenna"] &&
                s["thread"] == t["thread"]) {
                found = true;
                for (const char* key :
                     {"packets", "missing", "duplicates", "out_of_order", "first", "last"}) {
                    EXPECT_EQ(s[key], t[key]) << key << " of " << t.dump();
                }
            }
        }
        EXPECT_TRUE(found) << t.dump();
    }
    // 2 groups x 6 antennas x (codif + codifhdr) + 1 pcap
    ASSERT_EQ(report["outputs"].size(), 25u);
    for (const auto& o : report["outputs"]) {
        for (const char* key : {"path", "format", "antenna", "packets", "bytes"}) {
            EXPECT_TRUE(o.contains(key)) << key;
        }
    }
    EXPECT_EQ(report["totals"]["written"].get<std::uint64_t>(),
              3 * report["totals"]["packets"].get<std::uint64_t>());
    // The writers' memory against --writer-memory (default 1 GiB).
    EXPECT_EQ(report["writer_memory"]["bound_bytes"], std::uint64_t{1} << 30);
    EXPECT_GT(report["writer_memory"]["peak_bytes"].get<std::uint64_t>(), 0u);
    EXPECT_LE(report["writer_memory"]["peak_bytes"].get<std::uint64_t>(), std::uint64_t{1} << 30);
    EXPECT_EQ(report["writer_memory"]["buffer_bytes"], 512 * 1024);
}

TEST(Cli, CleanTrafficExitsZero) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 50 --antennas 2 --threads 3").code, 0);
    const Result r = ibvcap(dir, "read -r x.pcap -q --report r.json");
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("verdict: zero-loss"), std::string::npos) << r.out;
    EXPECT_EQ(nlohmann::json::parse(slurp(dir / "r.json"))["verdict"], "zero-loss");
}

TEST(Cli, VerbosePrintsOneLinePerCodifFrame) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 5 --antennas 2 --threads 1").code, 0);
    const Result r = ibvcap(dir, "read -r x.pcap -v -q");
    EXPECT_EQ(r.code, 0);
    std::size_t frames = 0;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
        if (line.find(" codif v2 ") != std::string::npos) {
            ++frames;
        }
    }
    EXPECT_EQ(frames, 10u) << r.out;
}

TEST(Cli, TruncatedInputExitsOneButKeepsTheReport) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 20 --antennas 1 --threads 1").code, 0);
    std::filesystem::resize_file(dir / "x.pcap", 24 + 10 * (16 + 8298) + 100);
    const Result r = ibvcap(dir, "read -r x.pcap -F pcap -o out --report r.json");
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;
    const auto report = nlohmann::json::parse(slurp(dir / "r.json"));
    EXPECT_EQ(report["totals"]["packets"], 10);
    EXPECT_EQ(report["outputs"][0]["packets"], 10);
}

// tshark must read every pcap we write without a warning. The test suite's
// setup (scripts/install-deps.sh) installs tshark; its absence is a failure.
TEST(Cli, TsharkReadsThePcapOutputCleanly) {
    test::TempDir dir;
    ASSERT_EQ(sh(dir, "command -v tshark").code, 0)
        << "tshark is not installed: run scripts/install-deps.sh";
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 30 --vlan 7 --loss 0.1").code, 0);
    ASSERT_EQ(ibvcap(dir, "read -q -r x.pcap -F pcap -o out").code, 3);
    const Result t = sh(dir,
                        "tshark -n -r out/ibvcap.pcap -T fields -e frame.len -e vlan.id "
                        "-e ip.dst -e udp.length");
    EXPECT_EQ(t.code, 0) << t.err;
    // tshark's only allowed remark is its own notice about running as root.
    std::string err = t.err;
    const std::string root_notice =
        "Running as user \"root\" and group \"root\". This could be dangerous.\n";
    if (err.rfind(root_notice, 0) == 0) {
        err.erase(0, root_notice.size());
    }
    EXPECT_EQ(err, "");
    const auto report_lines = lines(t.out);
    EXPECT_GT(report_lines, 300u);
    std::istringstream in(t.out);
    std::string first;
    std::getline(in, first);
    EXPECT_EQ(first, "8302\t7\t239.17.0.1\t8264");
    const Result info = sh(dir, "capinfos -M -c -t out/ibvcap.pcap");
    EXPECT_EQ(info.code, 0) << info.err;
    EXPECT_NE(info.out.find("nsecpcap"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find(std::to_string(report_lines)), std::string::npos) << info.out;
}

// Issue 14, item 1: --report replaces a regular file atomically and writes
// into anything else in place; it never replaces the input, an output of the
// run, a device, a FIFO or a symbolic link; a bad path fails before the run.
TEST(Cli, ReportIsWrittenWithoutDestroyingWhatIsAtThePath) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 5 --antennas 1 --threads 1").code, 0);
    const std::string input = slurp(dir / "x.pcap");
    // The input file, or a file this run writes: usage errors, nothing run.
    for (const std::string args :
         {"read -q -r x.pcap --report x.pcap", "read -q -r x.pcap -o . -F pcap --report x.pcap",
          "read -q -r x.pcap -o out -F pcap --report out/ibvcap.pcap",
          "read -q -r x.pcap -o out -F codif --report "
          "out/ibvcap_239.17.0.1_36001_10.0.0.11.000002.codif"}) {
        const Result r = ibvcap(dir, args);
        EXPECT_EQ(r.code, 2) << args << ": " << r.err;
        EXPECT_EQ(lines(r.err), 1u) << r.err;
        EXPECT_NE(r.err.find("give the report another path"), std::string::npos) << r.err;
        EXPECT_EQ(r.out, "") << args;
        EXPECT_TRUE(slurp(dir / "x.pcap") == input) << args;
    }
    // A report in the -o directory before it exists.
    Result r = ibvcap(dir, "read -q -r x.pcap -o new/sub -F pcap --report new/sub/r.json");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(slurp(dir / "new/sub/r.json"))["verdict"], "zero-loss");
    // A directory, or a directory that does not exist: exit 1 before the run.
    for (const std::string where : {"new", "nowhere/r.json"}) {
        r = ibvcap(dir, "read -q -r x.pcap --report " + where);
        EXPECT_EQ(r.code, 1) << where << ": " << r.err;
        EXPECT_EQ(lines(r.err), 1u) << r.err;
        EXPECT_NE(r.err.find("choose another path with --report"), std::string::npos) << r.err;
        EXPECT_EQ(r.out, "") << "the run started: " << r.out;
    }
    // A stray FILE.tmp is someone's file: left alone. A regular file is
    // replaced (a new inode: the rename), keeping its mode.
    std::ofstream(dir / "r.json.tmp") << "mine";
    std::ofstream(dir / "r.json") << "old";
    ::chmod((dir / "r.json").c_str(), 0600);
    ASSERT_EQ(ibvcap(dir, "read -q -r x.pcap --report r.json").code, 0);
    EXPECT_EQ(slurp(dir / "r.json.tmp"), "mine");
    EXPECT_EQ(nlohmann::json::parse(slurp(dir / "r.json"))["verdict"], "zero-loss");
    struct stat st {};
    ASSERT_EQ(::stat((dir / "r.json").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    // A symbolic link stays a link; its target gets the report.
    std::filesystem::create_directory(dir / "real");
    std::filesystem::create_symlink(dir / "real/t.json", dir / "link.json");
    std::ofstream(dir / "real/t.json") << "old";
    ASSERT_EQ(ibvcap(dir, "read -q -r x.pcap --report link.json").code, 0);
    EXPECT_TRUE(std::filesystem::is_symlink(dir / "link.json"));
    EXPECT_EQ(nlohmann::json::parse(slurp(dir / "real/t.json"))["verdict"], "zero-loss");
    // A link to a device (as /dev/stdout is) is written into, not replaced.
    std::filesystem::create_symlink("/dev/null", dir / "null");
    ASSERT_EQ(ibvcap(dir, "read -q -r x.pcap --report null").code, 0);
    EXPECT_TRUE(std::filesystem::is_symlink(dir / "null"));
    EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
    // A FIFO stays a FIFO, and its reader gets the report.
    ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
    r = sh(dir, "(cat fifo > got &) ; " + std::string(IBVCAP_BINARY) +
                    " read -q -r x.pcap --report fifo; wait");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(std::filesystem::is_fifo(dir / "fifo"));
    for (int i = 0; i < 50 && slurp(dir / "got").empty(); ++i) {
        ::usleep(20'000);
    }
    EXPECT_EQ(nlohmann::json::parse(slurp(dir / "got"))["verdict"], "zero-loss");
    // `-`: the report on stdout, alone (the summary goes to stderr).
    r = ibvcap(dir, "read -r x.pcap --report -");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["verdict"], "zero-loss");
    EXPECT_NE(r.err.find("verdict: zero-loss"), std::string::npos) << r.err;
}

// Issue 14, item 2: a second run into the same -o fails at once naming the
// holder; outputs of an earlier run are kept unless --overwrite, which also
// removes the earlier run's rotated set.
TEST(Cli, RunsNeverShareOrSilentlyOverwriteOutputs) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 200 --antennas 1 --threads 1").code, 0);
    // gen -w keeps an existing file too.
    const std::string input = slurp(dir / "x.pcap");
    Result r = ibvcap(dir, "gen -q -w x.pcap -c 3");
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find("add --overwrite"), std::string::npos) << r.err;
    EXPECT_TRUE(slurp(dir / "x.pcap") == input);
    ASSERT_EQ(ibvcap(dir, "gen -q -w y.pcap -c 3").code, 0);
    ASSERT_EQ(ibvcap(dir, "gen -q -w y.pcap -c 3 --overwrite").code, 0);

    // Another run holds the directory (this test, as PID 4242).
    std::filesystem::create_directory(dir / "out");
    {
        const int fd = ::open((dir / "out/.ibvcap.lock").c_str(), O_RDWR | O_CREAT, 0644);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::write(fd, "4242\n", 5), 5);
        ASSERT_EQ(::flock(fd, LOCK_EX), 0);
        r = ibvcap(dir, "read -q -r x.pcap -F pcap -o out");
        ::close(fd);
        EXPECT_EQ(r.code, 1) << r.err;
        EXPECT_EQ(lines(r.err), 1u) << r.err;
        EXPECT_NE(r.err.find("in use by another ibvcap run (PID 4242)"), std::string::npos)
            << r.err;
        EXPECT_FALSE(std::filesystem::exists(dir / "out/ibvcap.pcap"));
    }

    // A rotated set of 4 files, then a re-run: refused, nothing touched.
    r = ibvcap(dir, "read -q -r x.pcap -F codif -F pcap -o out -C 1");
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string stem = "out/ibvcap_239.17.0.1_36001_10.0.0.11";
    ASSERT_TRUE(std::filesystem::exists(dir / (stem + ".000001.codif")));
    const std::string first = slurp(dir / (stem + ".000001.codif"));
    r = ibvcap(dir, "read -q -r x.pcap -F codif -o out");
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("add --overwrite"), std::string::npos) << r.err;
    EXPECT_TRUE(slurp(dir / (stem + ".000001.codif")) == first);
    EXPECT_FALSE(std::filesystem::exists(dir / (stem + ".codif")));
    // --overwrite: the earlier set is gone, so what is there is this run's.
    r = ibvcap(dir, "read -q -r x.pcap -F codif -o out --overwrite");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(std::filesystem::exists(dir / (stem + ".codif")));
    for (int i = 0; i < 4; ++i) {
        EXPECT_FALSE(std::filesystem::exists(dir / fmt::format("{}.{:06}.codif", stem, i))) << i;
    }
    // Other formats' files and the lock are not this run's business.
    EXPECT_TRUE(std::filesystem::exists(dir / "out/ibvcap.000000.pcap"));
    EXPECT_FALSE(std::filesystem::exists(dir / "out/.ibvcap.lock"));
    // The input is never an output to overwrite: refused before the run.
    r = ibvcap(dir, "read -q -r out/ibvcap.000000.pcap -F pcap -o out --overwrite");
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("is the input file"), std::string::npos) << r.err;
    EXPECT_TRUE(std::filesystem::exists(dir / "out/ibvcap.000000.pcap"));
}

// Issue 14, item 3: with a -W ring the report lists the files that exist,
// their records, and the records the ring overwrote; the listed files add up
// to what is on disk.
TEST(Cli, ReportListsTheFilesOfARingAsTheyAreOnDisk) {
    test::TempDir dir;
    // 400 slots x 2 threads x 8256 bytes = 6.6 MB of codif: 7 files of at
    // most 1 MB (121 records), of which the ring of 2 keeps the last two.
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 400 --antennas 1").code, 0);
    const Result r = ibvcap(dir, "read -q -r x.pcap -F codif -o out -C 1 -W 2 --report r.json");
    ASSERT_EQ(r.code, 0) << r.err;
    const auto report = nlohmann::json::parse(slurp(dir / "r.json"));
    ASSERT_EQ(report["outputs"].size(), 1u);
    const auto& o = report["outputs"][0];
    ASSERT_TRUE(o.contains("on_disk")) << o.dump();
    ASSERT_EQ(o["on_disk"].size(), 2u) << o.dump();
    std::uint64_t listed = 0;
    for (const auto& f : o["on_disk"]) {
        const std::string path = dir / f["path"].get<std::string>();  // relative to the run's cwd
        ASSERT_TRUE(std::filesystem::exists(path)) << path;
        EXPECT_EQ(std::filesystem::file_size(path), f["bytes"].get<std::uint64_t>()) << path;
        EXPECT_EQ(f["bytes"].get<std::uint64_t>(), f["packets"].get<std::uint64_t>() * 8256)
            << path;
        listed += f["packets"].get<std::uint64_t>();
    }
    std::size_t files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir / "out")) {
        files += e.path().extension() == ".codif" ? 1u : 0u;
    }
    EXPECT_EQ(files, 2u);
    EXPECT_EQ(o["packets"].get<std::uint64_t>(), 800u);
    EXPECT_EQ(listed + o["overwritten"].get<std::uint64_t>(), 800u);
    EXPECT_GT(o["overwritten"].get<std::uint64_t>(), 0u);
}

TEST(Cli, VersionSaysHowTheGpuSideWasBuilt) {
    test::TempDir dir;
    const Result r = ibvcap(dir, "--version");
    EXPECT_EQ(r.code, 0);
    EXPECT_NE(r.out.find("gpu: "), std::string::npos) << r.out;
}

// --source pcap on the loopback interface with nothing sent: the run ends at
// the duration with the "nothing received" verdict; verbs-only options and a
// second interface are usage errors.
TEST(Cli, PcapSourceOnASilentInterfaceExitsThree) {
    test::TempDir dir;
    const Result r = ibvcap(dir, "capture --source pcap -i lo 239.1.2.3:5000 --duration 1 -q");
    if (r.code == 1 && r.err.find("no permission to capture") != std::string::npos) {
        IBVCAP_SKIP_UNLESS_CI(r.err);
    }
    EXPECT_EQ(r.code, 3) << r.out << r.err;
    EXPECT_NE(r.out.find("no stream frames were received"), std::string::npos) << r.out;
    EXPECT_EQ(r.err, "");
    for (const std::string args : {"--hw-demux", "--cpu 1", "--ring-depth 64", "-i lo"}) {
        const Result u = ibvcap(dir, "capture --source pcap -i lo 239.1.2.3:5000 " + args);
        EXPECT_EQ(u.code, 2) << args << ": " << u.err;
        EXPECT_EQ(lines(u.err), 1u) << u.err;
    }
}

}  // namespace
}  // namespace ibvcap

namespace ibvcap {
namespace {

// Issue contract: on a host without a GPU (or a build without CUDA), --gpu
// fails before anything starts, in one line naming what to do.
TEST(Cli, GpuWithoutAGpuFailsInOneLine) {
    test::TempDir dir;
    const Result r =
        ibvcap(dir, "capture --source pcap -i lo --gpu --duration 1 -q 239.1.2.3:5000");
    if (r.code == 3 && r.out.find("no stream frames were received") != std::string::npos) {
        GTEST_SKIP() << "a GPU is present, so --gpu started a capture: this test checks the "
                        "error on hosts without one";
    }
    ASSERT_EQ(r.code, 1) << r.out << r.err;
    // `--gpu ID`, as docs/formats.md, "Command line" spells it, names the GPU (not a GROUP:PORT).
    const Result one =
        ibvcap(dir, "capture --source pcap -i lo --gpu 1 --duration 1 -q 239.1.2.3:5000");
    EXPECT_EQ(one.code, 1) << one.err;
    EXPECT_TRUE(one.err.find("--gpu 1:") != std::string::npos ||
                one.err.find("built without CUDA") != std::string::npos)
        << one.err;
    EXPECT_TRUE(r.err.find("--gpu 0: no usable GPU") != std::string::npos ||
                r.err.find("built without CUDA") != std::string::npos)
        << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_EQ(r.out, "");
}

}  // namespace
}  // namespace ibvcap

// Issue 14, "Every way a run can end" and "Options an operator gets wrong".
namespace ibvcap {
namespace {

using test::silent_capture;

// Item 4: stdout and stderr full (a pager, Ctrl-S, a pipe nobody reads) never
// stall the run: the stats line is dropped and counted, --duration ends the
// run, the report says how many lines were not printed. The old code waited
// on stderr at the first stats line and never ended.
TEST(CliEnds, AFullStdoutAndStderrNeverStallTheCapture) {
    test::TempDir dir;
    SKIP_WITHOUT_CAPTURE_PERMISSION(dir);
    test::FullPipe out;
    test::FullPipe err;
    const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const pid_t pid = spawn(dir, silent_capture({"--duration", "2.5", "--report", "r.json"}), null,
                            out.fds[1], err.fds[1]);
    const int status = wait_for(pid, std::chrono::seconds(20));
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << describe(status);
    const auto report = nlohmann::json::parse(slurp(dir / "r.json"));
    EXPECT_EQ(report["interrupted"], false);
    EXPECT_GE(report["lines_not_printed"]["stats"].get<int>(), 1) << report.dump();
    EXPECT_EQ(report["lines_not_printed"]["frames"], 0);

    // Ctrl-C keeps working too.
    const pid_t again =
        spawn(dir, silent_capture({"--report", "i.json"}), null, out.fds[1], err.fds[1]);
    ASSERT_TRUE(wait_for_handler(again, SIGINT));
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ::kill(again, SIGINT);
    const int interrupted = wait_for(again, std::chrono::seconds(20));
    ::close(null);
    ASSERT_TRUE(WIFEXITED(interrupted) && WEXITSTATUS(interrupted) == 3) << describe(interrupted);
    EXPECT_EQ(nlohmann::json::parse(slurp(dir / "i.json"))["interrupted"], true);
}

// Item 4: -v lines to a stdout nobody reads are dropped and counted (one per
// frame), and the run ends with its report. The old code waited on stdout.
TEST(CliEnds, VerboseLinesToAFullStdoutAreCountedNotWaitedFor) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 200 --antennas 2 --threads 2").code, 0);
    test::FullPipe out;
    const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int err = open_file(dir / "err");
    const pid_t pid =
        spawn(dir, {"read", "-r", "x.pcap", "-v", "--report", "r.json"}, null, out.fds[1], err);
    const int status = wait_for(pid, std::chrono::seconds(20));
    ::close(null);
    ::close(err);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe(status);
    const auto report = nlohmann::json::parse(slurp(dir / "r.json"));
    EXPECT_EQ(report["lines_not_printed"]["frames"], 800);
    EXPECT_EQ(report["lines_not_printed"]["stats"], 0);
    EXPECT_EQ(report["totals"]["packets"], 800);
}

// Item 12: a number out of its range, or one that does not parse, is a usage
// error naming the option and what it takes. cxxopts' own message named only
// the value ("Argument '-5' failed to parse"); -G 0, -C 0, -W 0, -c 0,
// --duration -1 and --duration 0 used to be taken (the last two as "no limit").
TEST(CliEnds, NumbersOutOfRangeAreUsageErrorsNamingTheOptionAndRange) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 10").code, 0);
    const std::string live = "capture --source pcap -i lo 239.1.2.3:5000 ";
    struct Case {
        std::string args;
        std::string says;
    };
    const std::vector<Case> cases = {
        {"read -r x.pcap -c -5", "bad -c (--count) '-5': expected a whole number, 1 or more"},
        {"read -r x.pcap -c abc", "bad -c (--count) 'abc': expected a whole number, 1 or more"},
        {"read -r x.pcap --count=1x", "bad -c (--count) '1x'"},
        {"read -r x.pcap -c0", "bad -c (--count) 0: expected a whole number, 1 or more"},
        {"read -r x.pcap -G 0", "bad -G (--rotate-seconds) 0: expected a whole number of seconds"},
        {"read -r x.pcap -G -1", "bad -G (--rotate-seconds) '-1'"},
        {"read -r x.pcap -C 0", "bad -C (--file-size) 0"},
        {"read -r x.pcap -C 2000000", "bad -C (--file-size) 2000000: expected 1 to 1099511"},
        {"read -r x.pcap -C 1 -W 0", "bad -W (--file-count) 0"},
        {"read -r x.pcap -W -1", "bad -W (--file-count) '-1'"},
        {"read -r x.pcap --disk-threads -1", "bad --disk-threads '-1': expected 1 to 64"},
        {"read -r x.pcap --disk-cpu a", "bad --disk-cpu 'a'"},
        {live + "--duration -1", "bad --duration -1: expected a number of seconds greater than 0"},
        {live + "--duration 0", "bad --duration 0"},
        {live + "--duration abc", "bad --duration 'abc'"},
        {live + "--ring-depth -1", "bad --ring-depth '-1': expected 16 to 4294967295"},
        {live + "--max-frame x", "bad --max-frame 'x'"},
        {live + "--gpu=-1", "bad --gpu -1: expected a GPU number, 0 or more"},
        {live + "--num-antennas 0", "bad --num-antennas 0"},
        {"gen -w y.pcap --threads 70000", "bad --threads '70000': expected 1 to 65535"},
        {"gen -w y.pcap --payload -8", "bad --payload '-8'"},
        {"gen -w y.pcap --vlan -5", "bad --vlan -5: expected 0 to 4094"},
        {"gen -w y.pcap --loss x", "bad --loss 'x': expected a probability, 0 to 1"},
        {"gen --send -i lo --ttl x", "bad --ttl 'x': expected 0 to 255"},
    };
    for (const auto& c : cases) {
        // Bounded: a --duration taken as "no limit" would capture for ever.
        const Result r = sh(dir, "timeout 20 " + std::string(IBVCAP_BINARY) + " " + c.args);
        EXPECT_EQ(r.code, 2) << c.args << " said: " << r.err;
        EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << " said: " << r.err;
        EXPECT_EQ(lines(r.err), 1u) << c.args << " said: " << r.err;
    }
}

// Item 13: tcpdump's habits get a pointer to ibvcap's own option, and
// --version works after the subcommand. -q does what its help says.
TEST(CliEnds, TcpdumpHabitsGetPointers) {
    test::TempDir dir;
    struct Case {
        std::string args;
        std::string says;
    };
    const std::vector<Case> cases = {
        {"capture -i lo -w out.pcap 239.1.2.3:5000", "-F pcap -o DIR"},
        {"read -r x.pcap -w out.pcap", "-F pcap -o DIR"},
        {"capture -i lo -s 96 239.1.2.3:5000", "--pcap-snaplen full|headers"},
        {"read -r x.pcap --snaplen 96", "--pcap-snaplen full|headers"},
        {"capture -i lo -B 4096 239.1.2.3:5000", "--ring-depth N"},
        {"capture -r x.pcap", "use ibvcap read -r FILE"},
        {"read -i lo", "use ibvcap capture -i IF"},
    };
    for (const auto& c : cases) {
        const Result r = ibvcap(dir, c.args);
        EXPECT_EQ(r.code, 2) << c.args << " said: " << r.err;
        EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << " said: " << r.err;
        EXPECT_EQ(lines(r.err), 1u) << c.args << " said: " << r.err;
    }
    for (const std::string command : {"capture", "read", "gen", "devices"}) {
        const Result r = ibvcap(dir, command + " --version");
        EXPECT_EQ(r.code, 0) << command << ": " << r.err;
        EXPECT_EQ(r.out.rfind("ibvcap ", 0), 0u) << command << ": " << r.out;
        EXPECT_NE(r.out.find("gpu: "), std::string::npos) << r.out;
    }
}

// `devices -v` on a host without RDMA devices says so, as `devices` does,
// and lists no limits (there is no device to have them); -v is in the help.
TEST(CliDevices, VerboseWithoutDevicesSaysSo) {
    test::TempDir dir;
    const Result r = ibvcap(dir, "devices -v --sysfs-root " + dir.path().string());
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("no RDMA devices (nothing under /sys/class/infiniband); capture with "
                          "--source pcap\n",
                          0),
              0u)
        << r.out;
    EXPECT_EQ(r.out.find("max_"), std::string::npos) << r.out;
    EXPECT_NE(ibvcap(dir, "devices --help").out.find("-v, --verbose"), std::string::npos);
}

TEST(CliEnds, QuietDoesWhatItsHelpSays) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 10").code, 0);
    for (const std::string command : {"read", "capture"}) {
        std::istringstream help(ibvcap(dir, command + " --help").out);
        std::string text;  // the help with its line wrapping undone
        for (std::string word; help >> word;) {
            text += word + " ";
        }
        EXPECT_NE(text.find("-q, --quiet no per-stream table and no live stats line: the totals, "
                            "notes and verdict only"),
                  std::string::npos)
            << text;
    }
    const Result q = ibvcap(dir, "read -q -r x.pcap");
    EXPECT_EQ(q.code, 0);
    EXPECT_NE(q.out.find("total packets: 120"), std::string::npos) << q.out;
    EXPECT_NE(q.out.find("verdict: zero-loss"), std::string::npos) << q.out;
    EXPECT_EQ(q.out.find("antenna"), std::string::npos) << "a per-stream table: " << q.out;
    const Result loud = ibvcap(dir, "read -r x.pcap");
    EXPECT_NE(loud.out.find("antenna"), std::string::npos) << loud.out;
}

}  // namespace
}  // namespace ibvcap

namespace ibvcap {
namespace {

// --metrics-file and --metrics-interval (docs/observability.md, "Metrics"):
// a bad interval is a usage error (exit 2), a path that cannot be the metrics
// file stops the run before it starts (exit 1), in one line each.
TEST(CliMetrics, BadOptionsStopTheRunBeforeItStarts) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 10").code, 0);
    ASSERT_EQ(::mkfifo((dir / "fifo.prom").c_str(), 0600), 0);
    struct Case {
        std::string args;
        int code;
        std::string says;
    };
    const std::vector<Case> cases = {
        {"--metrics-file m.prom --metrics-interval 0", 2,
         "bad --metrics-interval 0: expected a number of seconds greater than 0"},
        {"--metrics-file m.prom --metrics-interval -1", 2, "bad --metrics-interval -1"},
        {"--metrics-file m.prom --metrics-interval abc", 2, "bad --metrics-interval 'abc'"},
        {"--metrics-file m.prom --metrics-interval nan", 2, "bad --metrics-interval 'nan'"},
        {"--metrics-interval 5", 2, "--metrics-interval needs --metrics-file PATH"},
        {"--metrics-file ''", 2, "--metrics-file needs a file name"},
        {"--metrics-file nowhere/m.prom", 1,
         "--metrics-file nowhere/m.prom: directory nowhere does not exist"},
        {"--metrics-file fifo.prom", 1, "--metrics-file fifo.prom: it is not a regular file"},
        {"--metrics-file x.pcap", 2, "--metrics-file x.pcap is the input file (x.pcap)"},
        {"--metrics-file r.json --report r.json", 2,
         "--metrics-file r.json is the --report file (r.json)"},
        {"-F codif -o out --metrics-file out/.ibvcap.lock", 2, "is a file this run writes"},
    };
    for (const auto& c : cases) {
        const Result r = ibvcap(dir, "read -q -r x.pcap " + c.args);
        EXPECT_EQ(r.code, c.code) << c.args << " said: " << r.err;
        EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << " said: " << r.err;
        EXPECT_EQ(lines(r.err), 1u) << c.args << " said: " << r.err;
        EXPECT_EQ(r.out, "") << c.args;
    }
    struct stat st {};
    ASSERT_EQ(::stat((dir / "fifo.prom").c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode));
    EXPECT_FALSE(std::filesystem::exists(dir / "m.prom"));
    const Result help = ibvcap(dir, "capture --help");
    EXPECT_NE(help.out.find("--metrics-file PATH"), std::string::npos) << help.out;
    EXPECT_NE(help.out.find("*.prom"), std::string::npos) << help.out;
}

// A run writes the file at its end with the final values: the report's
// totals, the verdict, up 0; the report counts the writes.
TEST(CliMetrics, TheFinalFileHasTheReportsTotals) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 40 --antennas 2 --threads 2 --loss 0.05").code, 0);
    std::ofstream(dir / "m.prom") << "stale 1\n";
    ::chmod((dir / "m.prom").c_str(), 0640);
    const Result r = ibvcap(dir, "read -q -r x.pcap --report r.json --metrics-file m.prom");
    ASSERT_EQ(r.code, 3) << r.err;
    const auto report = nlohmann::json::parse(slurp(dir / "r.json"));
    const std::string m = slurp(dir / "m.prom");
    const auto value = [&m](const std::string& series) {
        const auto at = m.find("\n" + series + " ");
        return at == std::string::npos ? std::string("(none)")
                                       : m.substr(at + series.size() + 2,
                                                  m.find('\n', at + 1) - at - series.size() - 2);
    };
    EXPECT_EQ(m.find("stale"), std::string::npos);
    EXPECT_EQ(value("ibvcap_up{run=\"m\"}"), "0");
    EXPECT_EQ(value("ibvcap_zero_loss{run=\"m\"}"), "0");
    EXPECT_EQ(value("ibvcap_packets_total{run=\"m\"}"), report["totals"]["packets"].dump());
    EXPECT_EQ(value("ibvcap_bytes_total{run=\"m\"}"), report["totals"]["bytes"].dump());
    EXPECT_EQ(value("ibvcap_lost_frames_total{run=\"m\",cause=\"upstream\"}"),
              report["totals"]["missing"].dump());
    EXPECT_NE(report["totals"]["missing"], 0);
    EXPECT_EQ(report["metrics_file"]["path"], "m.prom");
    EXPECT_EQ(report["metrics_file"]["writes"], 1);
    EXPECT_EQ(report["metrics_file"]["failures"], 0);
    struct stat st {};
    ASSERT_EQ(::stat((dir / "m.prom").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0640u);  // an existing file keeps its mode
    // Clean traffic: the verdict gauge says zero-loss.
    ASSERT_EQ(ibvcap(dir, "gen -q -w y.pcap -c 20").code, 0);
    ASSERT_EQ(ibvcap(dir, "read -q -r y.pcap --metrics-file m.prom").code, 0);
    const std::string clean = slurp(dir / "m.prom");
    EXPECT_NE(clean.find("\nibvcap_zero_loss{run=\"m\"} 1\n"), std::string::npos) << clean;
}

}  // namespace
}  // namespace ibvcap

namespace ibvcap {
namespace {

// --expect on the command line (lib/ledger/expect.hpp): a manifest that cannot
// be used is a usage error in one line naming the file, the position and the
// fix; read judges in the file's own clock.
TEST(CliExpect, BadManifestsAndOptionsAreUsageErrors) {
    test::TempDir dir;
    std::ofstream(dir / "bad.json") << "{\"groups\": [\"239.17.0.1:36001\"],\n \"antennas\": "
                                       "[\"10.0.0.11\"], \"threads\": [0, 0]}\n";
    std::ofstream(dir / "syntax.json") << "{\"groups\": [\n";
    std::ofstream(dir / "m.json")
        << R"({"groups": ["239.17.0.1:36001"], "antennas": ["10.0.0.11"], "threads": 1})";
    struct Case {
        std::string args;
        std::string says;
    };
    const std::vector<Case> cases = {
        {"read -r x.pcap --expect bad.json", "bad.json: /threads/1: thread 0 is listed twice"},
        {"read -r x.pcap --expect syntax.json", "syntax.json: line 2, column 1: not valid JSON"},
        {"read -r x.pcap --expect none.json", "none.json: cannot read the manifest"},
        {"read -r x.pcap --expect m.json 239.17.0.2:36001",
         "m.json: expects group 239.17.0.1:36001, which this run does not capture"},
        {"read -r x.pcap --expect m.json --expect-antennas 2 --expect-threads 1",
         "exclude each other"},
        {"read -r x.pcap --expect-antennas 2", "go together"},
        {"read -r x.pcap --expect-grace 1", "--expect-grace applies only with --expect"},
        {"read -r x.pcap --expect m.json --expect-grace -1", "bad --expect-grace -1"},
        {"read -r x.pcap --expect m.json --expect-rate-tolerance 0",
         "bad --expect-rate-tolerance 0"},
        {"read -r x.pcap --expect-antennas 0 --expect-threads 1", "bad --expect-antennas 0"},
        {"capture -i lo --expect bad.json 239.17.0.1:36001", "bad.json: /threads/1"},
    };
    for (const auto& c : cases) {
        const Result r = ibvcap(dir, c.args);
        EXPECT_EQ(r.code, 2) << c.args << " said: " << r.err;
        EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << " said: " << r.err;
        EXPECT_EQ(lines(r.err), 1u) << c.args << " said: " << r.err;
    }
}

TEST(CliExpect, ReadJudgesTheFileAgainstTheManifest) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 1500 --antennas 2 --threads 2").code, 0);
    std::ofstream(dir / "m.json") << R"({"groups": ["239.17.0.1:36001"],
        "antennas": ["10.0.0.11", "10.0.0.12"], "threads": 2})";
    const Result ok = ibvcap(dir, "read -r x.pcap -q --expect m.json --report r.json");
    EXPECT_EQ(ok.code, 0) << ok.out << ok.err;
    auto e = nlohmann::json::parse(slurp(dir / "r.json"))["expected"];
    EXPECT_EQ(e["clock"], "file");
    EXPECT_EQ(e["as_expected"], 4u);
    EXPECT_NEAR(e["streams"][0]["frames_per_second"].get<double>(), 1000.0, 0.01)
        << "gen -w times frames at the header's rate";

    const Result three =
        ibvcap(dir, "read -r x.pcap -q --expect-antennas 3 --expect-threads 3 --report r.json");
    EXPECT_EQ(three.code, 3) << three.out << three.err;
    EXPECT_NE(three.out.find("LOSS antenna_missing: 3 streams"), std::string::npos) << three.out;
    EXPECT_NE(three.out.find("LOSS thread_missing: 2 streams"), std::string::npos) << three.out;
    e = nlohmann::json::parse(slurp(dir / "r.json"))["expected"];
    EXPECT_EQ(e["streams_expected"], 9u);
    EXPECT_TRUE(e["streams"][8]["antenna"].is_null()) << "an antenna that never came";
}

// Only the run's own files (-F pcap): the bound need not leave room for 4,096
// per-stream files, so a small one is usable; with per-stream files it is
// still refused. The report gives the backlog's peak and the drops by bound.
TEST(Cli, ASmallWriterMemoryServesThePcapAlone) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 50 --antennas 2 --threads 1").code, 0);
    const Result small =
        ibvcap(dir, "read -r x.pcap -F pcap -q --writer-memory 32M --report r.json");
    EXPECT_EQ(small.code, 0) << small.err;
    const auto report = nlohmann::json::parse(slurp(dir / "r.json"));
    const auto& m = report["writer_memory"];
    EXPECT_EQ(m["bound_bytes"], std::uint64_t{32} << 20);
    EXPECT_GT(m["backlog_peak_bytes"].get<std::uint64_t>(), 0u);
    EXPECT_EQ(m["drops_at_bound"], 0u);
    EXPECT_EQ(m["drops_below_bound"], 0u);
    EXPECT_FALSE(m.contains("requested_bytes"));  // not capped
    const Result codif = ibvcap(dir, "read -r x.pcap -F codif -q --writer-memory 32M -o c");
    EXPECT_EQ(codif.code, 2);
    EXPECT_NE(codif.err.find("--writer-memory 32 MiB is too small"), std::string::npos)
        << codif.err;
}

// What the writers make ahead follows the run, not the bound (issue 39): a
// 3 MB read with --writer-memory 1T (capped to what this host has) takes no
// more memory than with the default bound, plus a few MiB (the queues sized
// for the bound's most buffers). Before, the stock kept a sixteenth of the
// bound made: 279 MiB of RSS against 86 MiB. The report says how much was
// made ahead and by which rule.
TEST(Cli, MadeAheadMemoryFollowsTheRunNotTheBound) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 30").code, 0);
    // The least RSS of three runs (what the stock makes ahead follows the
    // carving's pace, which varies from run to run), and the largest
    // made-ahead peak.
    const auto runs = [&](const std::string& bound) {
        std::uint64_t rss = ~std::uint64_t{0};
        std::uint64_t ahead = 0;
        for (int i = 0; i < 3; ++i) {
            const std::string tag = bound + std::to_string(i);
            const Result r =
                sh(dir, "/usr/bin/time -f %M -o rss" + tag + " " + std::string(IBVCAP_BINARY) +
                            " read -r x.pcap -F pcap -q -o o" + tag + " --report r" + tag +
                            ".json --writer-memory " + bound);
            EXPECT_EQ(r.code, 0) << r.err;
            const auto m =
                nlohmann::json::parse(slurp(dir / ("r" + tag + ".json")))["writer_memory"];
            rss = std::min<std::uint64_t>(rss, std::stoull(slurp(dir / ("rss" + tag))) << 10);
            ahead = std::max(ahead, m["made_ahead_peak_bytes"].get<std::uint64_t>());
            EXPECT_GT(m["made_ahead_peak_bytes"].get<std::uint64_t>(), 0u);
            EXPECT_TRUE(m["made_ahead_rule"] == "least" || m["made_ahead_rule"] == "rate")
                << m.dump();
            EXPECT_LE(m["peak_bytes"].get<std::uint64_t>(), std::uint64_t{8} << 20) << m.dump();
        }
        return std::make_pair(rss, ahead);
    };
    const auto [rss_default, ahead_default] = runs("1G");
    const auto [rss_huge, ahead_huge] = runs("1T");
    // (Under AddressSanitizer the binary's shadow and quarantine add to both
    // and vary more: a wider margin, still far below the old 193 MiB.)
#ifdef __SANITIZE_ADDRESS__
    constexpr std::uint64_t kMargin = std::uint64_t{48} << 20;
#else
    // (On a loaded machine the carving's pace, and so what the stock makes
    // ahead, varies run to run: 6.9 MiB apart once under a parallel ctest.)
    constexpr std::uint64_t kMargin = std::uint64_t{16} << 20;
#endif
    EXPECT_LE(rss_huge, rss_default + kMargin)
        << "RSS " << rss_huge << " with 1T against " << rss_default << " with 1G";
    // (The old stock: 64 MiB ahead at 1G, 256 MiB at 1T.)
    EXPECT_LE(ahead_default, std::uint64_t{16} << 20);
    EXPECT_LE(ahead_huge, std::uint64_t{16} << 20);
}

// The per-antenna files the options name are made before the first frame: an
// antenna named by --antenna that never sends has its (empty, indexed) file,
// and the run is still zero-loss. Options that name more files than the
// writer's outputs plan none, and say so.
TEST(Cli, AntennasNamedByTheOptionsHaveTheirFilesFromTheStart) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 20 --antennas 2 --threads 1 239.1.0.1:36001").code,
              0);
    const Result r = ibvcap(dir,
                            "read -r x.pcap -F codif -o o -q --report r.json --antenna 10.0.0.11 "
                            "--antenna 10.0.0.12 --antenna 10.0.0.99 239.1.0.1:36001");
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    const std::string silent = dir / "o/ibvcap_239.1.0.1_36001_10.0.0.99.codif";
    EXPECT_TRUE(std::filesystem::exists(silent));
    EXPECT_EQ(std::filesystem::file_size(silent), 0u);
    EXPECT_TRUE(std::filesystem::exists(silent + ".idx.json"));
    EXPECT_EQ(nlohmann::json::parse(slurp(dir / "r.json"))["outputs"].size(), 3u);

    // 5 groups x 820 antennas (x.pcap's two among them): 4,100 files, past
    // the writer's 4,096.
    std::string many =
        "read -r x.pcap -F codif -o m -q --report m.json --antenna 10.0.0.11 --antenna 10.0.0.12";
    for (int a = 0; a < 818; ++a) {
        many += fmt::format(" --antenna 10.1.{}.{}", a / 250, 1 + a % 250);
    }
    for (int g = 1; g <= 5; ++g) {
        many += fmt::format(" 239.1.0.{}:36001", g);
    }
    const Result m = ibvcap(dir, many);
    EXPECT_EQ(m.code, 0) << m.err;
    const auto report = nlohmann::json::parse(slurp(dir / "m.json"));
    EXPECT_EQ(report["outputs"].size(), 2u);  // made at their streams' first frames
    EXPECT_NE(report["notes"].dump().find("none was made ahead"), std::string::npos)
        << report["notes"].dump();
}

// Groups that share their low 16 bits (239.1.0.1, 239.2.0.1), planned or
// not, each have their own per-antenna files with their own frames.
TEST(Cli, GroupsDifferingOnlyInTheirFirstOctetsHaveFilesOfTheirOwn) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir,
                     "gen -q -w x.pcap -c 30 --antennas 1 --threads 1 239.1.0.1:36001 "
                     "239.2.0.1:36001")
                  .code,
              0);
    for (const char* planned : {"", " --antenna 10.0.0.11"}) {
        const std::string out = *planned == '\0' ? "a" : "p";
        const Result r = ibvcap(dir, "read -r x.pcap -F codif -q -o " + out + planned +
                                         " 239.1.0.1:36001 239.2.0.1:36001");
        EXPECT_EQ(r.code, 0) << planned << r.out << r.err;
        for (const char* group : {"239.1.0.1", "239.2.0.1"}) {
            const std::string file = dir / (out + "/ibvcap_" + group + "_36001_10.0.0.11.codif");
            ASSERT_TRUE(std::filesystem::exists(file)) << file;
            EXPECT_EQ(std::filesystem::file_size(file), 30u * 8256) << file;
        }
    }
}

// Every key built from a stream's group, port and antenna source is exact
// (issue 25): groups that differ only in their first octet, ports that differ
// only in their high byte and antennas that differ only in their first
// octet are streams, files and report entries of their own, each with its
// own frames, in the per-antenna files and the report alike.
TEST(Cli, StreamsDifferingOnlyInHighBitsAreKeptApart) {
    test::TempDir dir;
    const std::string streams = " 239.1.0.1:36001 238.1.0.1:36001 239.1.0.1:36257";
    ASSERT_EQ(ibvcap(dir,
                     "gen -q -w x.pcap -c 20 --threads 1 --antenna 10.0.0.11 --antenna "
                     "138.0.0.11" +
                         streams)
                  .code,
              0);
    const Result r = ibvcap(dir, "read -r x.pcap -F codif -q -o o --report r.json" + streams);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    const auto report = nlohmann::json::parse(slurp(dir / "r.json"));
    std::set<std::string> seen;
    for (const auto& s : report["streams"]) {
        const std::string key =
            s["group"].get<std::string>() + " " + s["antenna"].get<std::string>();
        EXPECT_EQ(s["packets"], 20) << key;
        EXPECT_TRUE(seen.insert(key).second) << key << " twice";
    }
    EXPECT_EQ(seen.size(), 6u);
    std::size_t files = 0;
    for (const char* group : {"239.1.0.1_36001", "238.1.0.1_36001", "239.1.0.1_36257"}) {
        for (const char* antenna : {"10.0.0.11", "138.0.0.11"}) {
            const std::string file = dir / fmt::format("o/ibvcap_{}_{}.codif", group, antenna);
            ASSERT_TRUE(std::filesystem::exists(file)) << file;
            EXPECT_EQ(std::filesystem::file_size(file), 20u * 8256) << file;
            ++files;
        }
    }
    for (const auto& o : report["outputs"]) {
        EXPECT_EQ(o["packets"], 20) << o["path"];
    }
    EXPECT_EQ(report["outputs"].size(), files);
}

// --overwrite removes only the files this run would write (issue 25): another
// group's or another antenna's files in the same directory are left as they
// are, and are no reason to refuse a run without --overwrite either; a run
// that names no group may write any, so it still refuses.
TEST(Cli, OverwriteRemovesOnlyThisRunsFiles) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir,
                     "gen -q -w m.pcap -c 20 --antennas 2 --threads 1 239.17.0.1:36001 "
                     "239.17.0.2:36001")
                  .code,
              0);
    const auto inode = [&](const std::string& group, const std::string& antenna) {
        struct stat st {};
        const std::string path = dir / fmt::format("ow/ibvcap_{}_36001_{}.codif", group, antenna);
        return ::stat(path.c_str(), &st) == 0 ? st.st_ino : ino_t{0};
    };
    ASSERT_EQ(ibvcap(dir, "read -r m.pcap -q -F codif -o ow 239.17.0.1:36001").code, 0);
    const ino_t first_11 = inode("239.17.0.1", "10.0.0.11");
    const ino_t first_12 = inode("239.17.0.1", "10.0.0.12");
    ASSERT_NE(first_11, 0u);
    ASSERT_NE(first_12, 0u);
    // Another group into the same directory: nothing of this run's there.
    Result r = ibvcap(dir, "read -r m.pcap -q -F codif -o ow 239.17.0.2:36001");
    ASSERT_EQ(r.code, 0) << r.err;
    r = ibvcap(dir, "read -r m.pcap -q -F codif -o ow --overwrite 239.17.0.2:36001");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(inode("239.17.0.1", "10.0.0.11"), first_11) << "another group's file was replaced";
    EXPECT_EQ(inode("239.17.0.1", "10.0.0.12"), first_12) << "another group's file was replaced";
    // One antenna of the first group: only its file is replaced.
    r = ibvcap(dir,
               "read -r m.pcap -q -F codif -o ow --antenna 10.0.0.12 --overwrite 239.17.0.1:36001");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(inode("239.17.0.1", "10.0.0.11"), first_11) << "another antenna's file was replaced";
    EXPECT_NE(inode("239.17.0.1", "10.0.0.12"), 0u);
    EXPECT_EQ(std::filesystem::file_size(dir / "ow/ibvcap_239.17.0.1_36001_10.0.0.11.codif"),
              20u * 8256);
    // A run that names no group may write every group's files.
    r = ibvcap(dir, "read -r m.pcap -q -F codif -o ow");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("add --overwrite"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ibvcap
