// Every way a run stops is a clean, recorded stop (issue 25 items 5, 6, 7;
// issue 14): signals, a closed pipe, the end of the input, -c, --duration,
// an error, and a stop before the first byte of a pipe. Runs the real binary.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "frames.hpp"

namespace ibvcap {
namespace {

using test::describe;
using test::ibvcap;
using test::lines;
using test::open_file;
using test::Result;
using test::silent_capture;
using test::slurp;
using test::spawn;
using test::spawn_to_files;
using test::wait_for;
using test::wait_for_handler;

// `read -r -` (from_stdin) or `read -r fifo` (a FIFO the test made in
// `dir`), with `more` arguments, stdout and stderr into dir/out and dir/err;
// its pid and the write end of its input (-1 when it could not be opened),
// which stays open: read waits for whatever is not written.
struct PipedRead {
    pid_t pid = -1;
    int writer = -1;
};
PipedRead spawn_piped_read(const test::TempDir& dir, bool from_stdin,
                           const std::vector<std::string>& more) {
    std::vector<std::string> args{"read", "-r", from_stdin ? "-" : "fifo"};
    args.insert(args.end(), more.begin(), more.end());
    int fds[2] = {-1, -1};
    if (::pipe2(fds, O_CLOEXEC) != 0) {
        return {};
    }
    const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int out = open_file(dir / "out");
    const int err = open_file(dir / "err");
    PipedRead r;
    r.pid = spawn(dir, args, from_stdin ? fds[0] : null, out, err);
    ::close(fds[0]);
    ::close(null);
    ::close(out);
    ::close(err);
    r.writer = fds[1];
    if (!from_stdin) {
        ::close(fds[1]);
        r.writer = ::open((dir / "fifo").c_str(), O_WRONLY | O_CLOEXEC);
    }
    return r;
}

// Items 4 and 5: SIGTERM and SIGHUP end a run as the first Ctrl-C does (a
// clean stop, the files and the report, exit by the verdict), and the stop
// is acknowledged at once on stderr with what is still queued. The old code
// died on SIGHUP without a report and said nothing on SIGINT or SIGTERM.
TEST(CliEnds, InterruptTermAndHangupEndTheRunWithAReport) {
    test::TempDir dir;
    SKIP_WITHOUT_CAPTURE_PERMISSION(dir);
    for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
        SCOPED_TRACE(strsignal(sig));
        const std::string report = fmt::format("r{}.json", sig);
        const pid_t pid =
            spawn_to_files(dir, silent_capture({"-q", "-F", "pcap", "-o", "o" + std::to_string(sig),
                                                "--report", report}));
        ASSERT_TRUE(wait_for_handler(pid, sig));
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        ::kill(pid, sig);
        const int status = wait_for(pid, std::chrono::seconds(20));
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << describe(status);
        const auto j = nlohmann::json::parse(slurp(dir / report));
        EXPECT_EQ(j["interrupted"], true);
        // Item 6: what stopped it, in the report, the summary and the
        // acknowledgement (SIGHUP never escalates: only a Ctrl-C abandons).
        const char* name = sig == SIGINT ? "sigint" : sig == SIGTERM ? "sigterm" : "sighup";
        EXPECT_EQ(j["stopped_by"], name);
        const char* by = sig == SIGINT    ? "Ctrl-C (SIGINT)"
                         : sig == SIGTERM ? "SIGTERM"
                                          : "SIGHUP (the terminal or session went away)";
        EXPECT_NE(slurp(dir / "out").find(fmt::format("(interrupted by {} after ", by)),
                  std::string::npos)
            << slurp(dir / "out");
        const char* ack =
            sig == SIGINT ? "ibvcap capture: stopping: writing 0.0 MiB; Ctrl-C again to abandon it"
            : sig == SIGTERM
                ? "ibvcap capture: stopping (SIGTERM): writing 0.0 MiB; SIGTERM or Ctrl-C again to "
                  "abandon it"
                : "ibvcap capture: stopping (SIGHUP): writing 0.0 MiB; Ctrl-C to abandon it";
        const std::string said = slurp(dir / "err");
        EXPECT_NE(said.find(ack), std::string::npos) << said;
        EXPECT_EQ(lines(said), 1u) << said;
    }
}

// Issue 25 item 5: SIGUSR1 (tcpdump's "print the counts") prints the run's
// counts so far and the run goes on; every other signal whose default ends
// the process ends the run as SIGTERM does, with its report (the old code
// died on SIGUSR1 without one).
TEST(CliEnds, Usr1PrintsTheCountsAndOtherSignalsEndTheRunWithAReport) {
    test::TempDir dir;
    SKIP_WITHOUT_CAPTURE_PERMISSION(dir);
    for (const int sig : {SIGUSR2, SIGALRM, SIGQUIT, SIGRTMIN + 3}) {
        SCOPED_TRACE(strsignal(sig));
        const std::string report = fmt::format("u{}.json", sig);
        const pid_t pid =
            spawn_to_files(dir, silent_capture({"-q", "-F", "pcap", "-o", "u" + std::to_string(sig),
                                                "--report", report}));
        ASSERT_TRUE(wait_for_handler(pid, SIGUSR1));
        ASSERT_TRUE(wait_for_handler(pid, sig));
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        ::kill(pid, SIGUSR1);
        // The counts, and the run still going.
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (slurp(dir / "err").find("frames") == std::string::npos &&
               std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        const std::string counts = slurp(dir / "err");
        EXPECT_NE(counts.find("ibvcap capture: after "), std::string::npos) << counts;
        EXPECT_NE(counts.find(" 0 frames, 0 bytes received"), std::string::npos) << counts;
        int status = 0;
        EXPECT_EQ(::waitpid(pid, &status, WNOHANG), 0) << "SIGUSR1 ended the run";
        ::kill(pid, sig);
        status = wait_for(pid, std::chrono::seconds(20));
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << describe(status);
        const auto j = nlohmann::json::parse(slurp(dir / report));
        EXPECT_EQ(j["interrupted"], true);
    }
}

// Item 4: stderr closed under the run (`2>&1 | head -1`): SIGPIPE is a clean
// stop with the report, not death by signal.
TEST(CliEnds, AClosedStderrEndsTheRunCleanly) {
    test::TempDir dir;
    SKIP_WITHOUT_CAPTURE_PERMISSION(dir);
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int out = open_file(dir / "out");
    const pid_t pid =
        spawn(dir, silent_capture({"--duration", "30", "--report", "r.json"}), null, out, fds[1]);
    ::close(fds[1]);
    ::close(null);
    ::close(out);
    // Read the first stats line (after a second), then go away as head -1 does.
    std::string first;
    for (char c = 0; first.find('\n') == std::string::npos && ::read(fds[0], &c, 1) == 1;) {
        first += c;
    }
    ::close(fds[0]);
    EXPECT_NE(first.find("ibvcap stats:"), std::string::npos) << first;
    const auto start = std::chrono::steady_clock::now();
    const int status = wait_for(pid, std::chrono::seconds(20));
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << describe(status);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10))
        << "ended by its duration, not by the closed stderr";
    const auto j = nlohmann::json::parse(slurp(dir / "r.json"));
    EXPECT_EQ(j["interrupted"], true);
    EXPECT_EQ(j["stopped_by"], "sigpipe");
    // Not presented like a complete run (item 6).
    const std::string summary = slurp(dir / "out");
    EXPECT_NE(summary.find("(interrupted by a closed stdout or stderr (SIGPIPE) after "),
              std::string::npos)
        << summary;
    EXPECT_NE(summary.find("verdict:"), std::string::npos);
}

// Item 6: Ctrl-C while `read` waits on a FIFO or on stdin is a clean stop:
// what arrived is counted, `interrupted` is true, the exit code is the
// verdict's. The old code reported "Interrupted system call" and exit 1.
TEST(CliEnds, InterruptWhileReadingAPipeIsACleanStop) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 10 --antennas 1 --threads 1").code, 0);
    const std::string capture = slurp(dir / "x.pcap");
    ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
    for (const bool from_stdin : {false, true}) {
        SCOPED_TRACE(from_stdin ? "read -r -" : "read -r FIFO");
        // One -o per run: a second run into the same directory would be
        // refused (its outputs exist).
        const auto [pid, writer] = spawn_piped_read(
            dir, from_stdin,
            {"-F", "pcap", "-o", from_stdin ? "o-stdin" : "o-fifo", "--report", "r.json"});
        ASSERT_GE(writer, 0);
        // The file header and every record; the writer stays open, so read waits for more.
        ASSERT_EQ(::write(writer, capture.data(), capture.size()),
                  static_cast<ssize_t>(capture.size()));
        ASSERT_TRUE(wait_for_handler(pid, SIGINT));
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        ::kill(pid, SIGINT);
        const int status = wait_for(pid, std::chrono::seconds(20));
        ::close(writer);
        const std::string said = slurp(dir / "err");
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe(status) << said;
        const auto j = nlohmann::json::parse(slurp(dir / "r.json"));
        EXPECT_EQ(j["interrupted"], true);
        EXPECT_EQ(j["stopped_by"], "sigint");
        EXPECT_EQ(j["totals"]["packets"], 10);
        EXPECT_EQ(j["outputs"][0]["packets"], 10);
        EXPECT_EQ(said.find("error"), std::string::npos) << said;
        EXPECT_EQ(j.count("error"), 0u) << j.dump();
    }
}

// Item 6: the report says what ended every run, not only the interrupted
// ones: the end of the input, -c, an error (a truncated file), --duration.
TEST(CliEnds, TheReportSaysWhatEndedTheRun) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 20 --antennas 1 --threads 1").code, 0);
    const auto stopped_by = [&](const std::string& args) {
        const Result r = ibvcap(dir, args + " --report r.json");
        const auto j = nlohmann::json::parse(slurp(dir / "r.json"));
        std::filesystem::remove(dir / "r.json");
        EXPECT_EQ(j["interrupted"], false) << args;
        return j.value("stopped_by", std::string("(none)"));
    };
    EXPECT_EQ(stopped_by("read -q -r x.pcap -F pcap -o a"), "end_of_input");
    EXPECT_EQ(stopped_by("read -q -r x.pcap -F pcap -o b -c 5"), "count");
    const std::string whole = slurp(dir / "x.pcap");
    std::ofstream(dir / "cut.pcap", std::ios::binary) << whole.substr(0, whole.size() / 2);
    EXPECT_EQ(stopped_by("read -q -r cut.pcap -F pcap -o c"), "error");
    SKIP_WITHOUT_CAPTURE_PERMISSION(dir);
    EXPECT_EQ(stopped_by("capture --source pcap -i lo 239.1.2.3:5000 -q --duration 0.3"),
              "duration");
}

// Item 7: Ctrl-C (or SIGTERM) while `read -r -` or a FIFO waits for its first
// byte is a clean stop with a report: no frames, interrupted, stopped_by the
// signal, a pcap that holds its header. The old code said "cannot read -:
// error reading dump file: Interrupted system call" and exit 1.
TEST(CliEnds, AStopBeforeTheFirstByteIsACleanStop) {
    test::TempDir dir;
    ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
    for (const int sig : {SIGINT, SIGTERM}) {
        for (const bool from_stdin : {false, true}) {
            SCOPED_TRACE(
                fmt::format("{} {}", from_stdin ? "read -r -" : "read -r FIFO", strsignal(sig)));
            const std::string o = fmt::format("o{}{}", sig, from_stdin ? "s" : "f");
            const auto [pid, writer] =
                spawn_piped_read(dir, from_stdin, {"-F", "pcap", "-o", o, "--report", o + ".json"});
            ASSERT_GE(writer, 0);
            // Nothing written: read waits for the file's header.
            ASSERT_TRUE(wait_for_handler(pid, sig));
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            ::kill(pid, sig);
            const int status = wait_for(pid, std::chrono::seconds(20));
            ::close(writer);
            const std::string said = slurp(dir / "err");
            // No stream frames: the verdict is loss (exit 3), not an error (1).
            ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << describe(status) << said;
            EXPECT_EQ(said.find("Interrupted system call"), std::string::npos) << said;
            const auto j = nlohmann::json::parse(slurp(dir / (o + ".json")));
            EXPECT_EQ(j["interrupted"], true);
            EXPECT_EQ(j["stopped_by"], sig == SIGINT ? "sigint" : "sigterm");
            EXPECT_EQ(j["totals"]["packets"], 0);
            EXPECT_EQ(j.count("error"), 0u) << j.dump();
        }
    }
}

// Item 7: an output name that is a FIFO is written into, as docs/formats.md
// promises (every write used to fail with ESPIPE: pwritev on a FIFO); when
// its reader goes away only that output fails (EPIPE), the run goes on and
// is not taken for one stopped by a closed stdout (SIGPIPE). With
// --direct-io, which writes pages at offsets, the FIFO is refused before
// the run starts.
TEST(CliEnds, AFifoOutputIsWrittenInto) {
    test::TempDir dir;
    ASSERT_EQ(ibvcap(dir, "gen -q -w x.pcap -c 50 --antennas 2 --threads 1").code, 0);
    ASSERT_EQ(::mkdir((dir / "o").c_str(), 0755), 0);
    ASSERT_EQ(::mkfifo((dir / "o/ibvcap.pcap").c_str(), 0600), 0);
    std::string got;
    std::thread reader([&] {
        const int fd = ::open((dir / "o/ibvcap.pcap").c_str(), O_RDONLY | O_CLOEXEC);
        char buf[65536];
        for (ssize_t n; fd >= 0 && (n = ::read(fd, buf, sizeof buf)) > 0;) {
            got.append(buf, static_cast<std::size_t>(n));
        }
        ::close(fd);
    });
    const Result r = ibvcap(dir, "read -q -r x.pcap -F pcap -o o --report r.json");
    reader.join();
    EXPECT_EQ(r.code, 0) << r.err;
    // The pcap's header and the 100 records, as the input holds them.
    EXPECT_EQ(got, slurp(dir / "x.pcap"));
    EXPECT_FALSE(std::filesystem::exists(dir / "o/ibvcap.pcap.idx.json"));

    // A reader that goes away after 100 bytes.
    ASSERT_EQ(::mkdir((dir / "p").c_str(), 0755), 0);
    ASSERT_EQ(::mkfifo((dir / "p/ibvcap.pcap").c_str(), 0600), 0);
    std::thread quitter([&] {
        const int fd = ::open((dir / "p/ibvcap.pcap").c_str(), O_RDONLY | O_CLOEXEC);
        char buf[100];
        static_cast<void>(::read(fd, buf, sizeof buf));
        ::close(fd);
    });
    const Result q = ibvcap(dir, "read -q -r x.pcap -F pcap -F codif -o p --report q.json");
    quitter.join();
    EXPECT_EQ(q.code, 1) << q.err;
    EXPECT_NE(q.err.find("p/ibvcap.pcap: write failed: Broken pipe"), std::string::npos) << q.err;
    const auto j = nlohmann::json::parse(slurp(dir / "q.json"));
    EXPECT_EQ(j["interrupted"], false);
    EXPECT_EQ(j["stopped_by"], "end_of_input");
    for (const auto& o : j["outputs"]) {
        if (o["format"] == "codif") {
            EXPECT_EQ(o["packets"], 50) << o.dump();
        }
    }

    const Result d = ibvcap(dir, "read -q -r x.pcap -F pcap -o p --direct-io");
    EXPECT_EQ(d.code, 1);
    EXPECT_NE(d.err.find("p/ibvcap.pcap is a FIFO, which --direct-io cannot write"),
              std::string::npos)
        << d.err;
    EXPECT_EQ(lines(d.err), 1u) << d.err;
}

// Item 7: `gen -w -` writes the pcap to standard output (the summary to
// stderr), so that `gen -w - | read -r -` works; it used to make a file
// named "-".
TEST(CliEnds, GenWritesToStandardOutput) {
    test::TempDir dir;
    // (Braces: the redirections of sh() then take both commands' stderr.)
    const Result r = test::sh(
        dir, std::string("{ ") + IBVCAP_BINARY + " gen -w - -c 30 --antennas 1 --threads 1 | " +
                 IBVCAP_BINARY + " read -q -r - -F pcap -o o --report r.json; }");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "-"));
    const auto j = nlohmann::json::parse(slurp(dir / "r.json"));
    EXPECT_EQ(j["verdict"], "zero-loss");
    EXPECT_EQ(j["totals"]["packets"], 30);
    EXPECT_NE(r.err.find("ibvcap gen: wrote 30 packets to -"), std::string::npos) << r.err;
}

// Item 7: Ctrl-C during `gen -w` ends it at a slot boundary with whole
// records, the file's index and the truth of what was written (the default
// action killed it mid-record, with neither).
TEST(CliEnds, InterruptedGenLeavesWholeRecordsTheIndexAndTheTruth) {
    test::TempDir dir;
    const pid_t pid =
        spawn_to_files(dir, {"gen", "-w", "g.pcap", "--truth", "t.json", "-c", "100000000",
                             "--antennas", "2", "--threads", "2", "--loss", "0.01"});
    ASSERT_TRUE(wait_for_handler(pid, SIGINT));
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    ::kill(pid, SIGINT);
    const int status = wait_for(pid, std::chrono::seconds(60));
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe(status);
    EXPECT_NE(slurp(dir / "out").find("stopped early after "), std::string::npos)
        << slurp(dir / "out");
    EXPECT_TRUE(std::filesystem::exists(dir / "g.pcap.idx.json"));
    const Result v = ibvcap(dir, "verify g.pcap");
    EXPECT_EQ(v.code, 0) << v.out << v.err;
    // The truth is that of the file: read judges it against the same counts.
    const Result rd = ibvcap(dir, "read -q -r g.pcap --report r.json");
    const auto truth = nlohmann::json::parse(slurp(dir / "t.json"));
    const auto report = nlohmann::json::parse(slurp(dir / "r.json"));
    EXPECT_EQ(report["totals"]["packets"], truth["totals"]["packets"]);
    EXPECT_EQ(report["totals"]["missing"], truth["totals"]["missing"]);
    EXPECT_LT(truth["totals"]["packets"].get<std::uint64_t>(), 400000000u);
}

}  // namespace
}  // namespace ibvcap
