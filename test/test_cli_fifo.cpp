// FIFOs, signals and hostile JSON (issue 40, item 5): no open of a FIFO
// blocks a run before it starts, a FIFO's reader is waited for with a word
// and Ctrl-C ends the wait, a signal while the writers drain is in the
// report, every report or manifest read is bounded in size and in depth.
// Runs the real binary, every run bounded in time (a hang fails, never
// blocks the suite).
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "frames.hpp"

namespace ibvcap {
namespace {

using test::describe;
using test::lines;
using test::slurp;
using test::spawn_to_files;
using test::wait_for;
using test::wait_for_handler;

using Clock = std::chrono::steady_clock;

// The binary with `args`, its stdout and stderr in dir/out and dir/err;
// its wait status, or -1 when it ran past `limit` (killed).
int run_bounded(const test::TempDir& dir, const std::vector<std::string>& args,
                std::chrono::seconds limit = std::chrono::seconds(30)) {
    return wait_for(spawn_to_files(dir, args), limit);
}

// A spawned run that is killed and reaped at scope exit, whatever assertion
// ended the test first: none is left behind to hold a FIFO.
class Child {
  public:
    Child(const test::TempDir& dir, const std::vector<std::string>& args)
        : pid_(spawn_to_files(dir, args)) {}
    ~Child() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
    }
    Child(const Child&) = delete;
    Child& operator=(const Child&) = delete;
    pid_t pid() const { return pid_; }
    // Its wait status, or -1 when it ran past `limit` (then killed).
    int wait(std::chrono::seconds limit) {
        const int status = wait_for(pid_, limit);
        pid_ = -1;
        return status;
    }

  private:
    pid_t pid_;
};

bool exited(int status, int code) {
    return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == code;
}

// Waits (at most `limit`) until dir/err holds `text`; how long it took, or
// nothing.
std::optional<Clock::duration> said_within(const test::TempDir& dir, const std::string& text,
                                           std::chrono::seconds limit) {
    const auto start = Clock::now();
    while (Clock::now() - start < limit) {
        if (slurp(dir / "err").find(text) != std::string::npos) {
            return Clock::now() - start;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::nullopt;
}

// A reader of the FIFO `path` on a thread of its own: opened without
// blocking (so it never waits for a writer that does not come), read until
// its writer closes it or `limit` passes.
class FifoReader {
  public:
    explicit FifoReader(const std::string& path,
                        std::chrono::seconds limit = std::chrono::seconds(30)) {
        fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        thread_ = std::thread([this, limit] {
            const auto end = Clock::now() + limit;
            char buf[65536];
            while (fd_ >= 0 && Clock::now() < end) {
                const ssize_t n = ::read(fd_, buf, sizeof buf);
                if (n > 0) {
                    got_.append(buf, static_cast<std::size_t>(n));
                } else if (n == 0 && !got_.empty()) {
                    break;  // its writer closed it
                } else {
                    // No writer yet (a non-blocking read then says 0), or
                    // nothing written yet: wait.
                    pollfd p{fd_, POLLIN, 0};
                    ::poll(&p, 1, 20);
                    std::this_thread::sleep_for(std::chrono::milliseconds(5));
                }
            }
        });
    }
    ~FifoReader() { join(); }
    FifoReader(const FifoReader&) = delete;
    FifoReader& operator=(const FifoReader&) = delete;
    const std::string& join() {
        if (thread_.joinable()) {
            thread_.join();
        }
        if (fd_ >= 0) {
            ::close(fd_);
            fd_ = -1;
        }
        return got_;
    }

  private:
    int fd_ = -1;
    std::string got_;
    std::thread thread_;
};

// A small capture to read: 50 frames of 2 streams.
void make_input(const test::TempDir& dir, std::uint64_t frames = 50) {
    ASSERT_EQ(run_bounded(dir, {"gen", "-q", "-w", "x.pcap", "-c", std::to_string(frames),
                                "--antennas", "2", "--threads", "1"}),
              0);
}

// --html onto a FIFO used to hang before the run started: the check opened
// the FIFO to read it (a page there may not be replaced), which waits for a
// writer; Ctrl-C then killed it with no report. Now the check never blocks,
// the page is written into the FIFO at the end, and with no reader the wait
// is said and Ctrl-C ends it, the report already written.
TEST(CliFifo, ARunPageOntoAFifoNeverHangsTheRun) {
    test::TempDir dir;
    make_input(dir);
    ASSERT_EQ(::mkfifo((dir / "page.fifo").c_str(), 0600), 0);
    {
        SCOPED_TRACE("read --html FIFO, with a reader");
        FifoReader reader(dir / "page.fifo");
        const int status = run_bounded(
            dir, {"read", "-q", "-r", "x.pcap", "--report", "r.json", "--html", "page.fifo"});
        const std::string page = reader.join();
        ASSERT_TRUE(exited(status, 0)) << describe(status) << slurp(dir / "err");
        EXPECT_NE(page.find("<!-- The ibvcap run page"), std::string::npos) << page.substr(0, 300);
        EXPECT_EQ(nlohmann::json::parse(slurp(dir / "r.json"))["verdict"], "zero-loss");
    }
    {
        SCOPED_TRACE("report R.json --html FIFO, with a reader");
        FifoReader reader(dir / "page.fifo");
        const int status = run_bounded(dir, {"report", "r.json", "--html", "page.fifo"});
        const std::string page = reader.join();
        ASSERT_TRUE(exited(status, 0)) << describe(status) << slurp(dir / "err");
        EXPECT_NE(page.find("<!-- The ibvcap run page"), std::string::npos) << page.substr(0, 300);
    }
    {
        SCOPED_TRACE("read --html FIFO, no reader: said, and Ctrl-C ends the wait");
        std::filesystem::remove(dir / "r.json");
        Child run(dir, {"read", "-q", "-r", "x.pcap", "--report", "r.json", "--html", "page.fifo"});
        ASSERT_TRUE(wait_for_handler(run.pid(), SIGINT));
        const auto took =
            said_within(dir, "ibvcap read: waiting for a reader of page.fifo (a FIFO)",
                        std::chrono::seconds(10));
        EXPECT_TRUE(took.has_value()) << slurp(dir / "err");
        ::kill(run.pid(), SIGINT);
        const int status = run.wait(std::chrono::seconds(20));
        const std::string said = slurp(dir / "err");
        EXPECT_TRUE(exited(status, 130)) << describe(status) << said;
        EXPECT_NE(said.find("cannot write the run page page.fifo: no reader took it before the "
                            "stop"),
                  std::string::npos)
            << said;
        // The report was written before the page, whole.
        const auto j = nlohmann::json::parse(slurp(dir / "r.json"));
        EXPECT_EQ(j["verdict"], "zero-loss");
        EXPECT_EQ(j["totals"]["packets"], 100);
    }
}

// A run waiting for a FIFO's reader: `line` said (within 4 s), then the
// first Ctrl-C; what it said on stderr once it ended, with exit 130 (a
// failure of the test otherwise).
std::string interrupt_the_wait(Child& run, const test::TempDir& dir, const std::string& line) {
    if (!wait_for_handler(run.pid(), SIGINT)) {
        ADD_FAILURE() << "no SIGINT handler";
        return {};
    }
    const auto took = said_within(dir, line, std::chrono::seconds(10));
    EXPECT_TRUE(took.has_value()) << slurp(dir / "err");
    if (took) {
        EXPECT_LT(*took, std::chrono::seconds(4));
    }
    ::kill(run.pid(), SIGINT);
    const int status = run.wait(std::chrono::seconds(20));
    const std::string said = slurp(dir / "err");
    EXPECT_TRUE(exited(status, 130)) << describe(status) << said;
    return said;
}

// A FIFO output (or gen -w FIFO) that nobody reads used to block with no
// word; the first two Ctrl-C did nothing, the third killed it without a
// report or a truth file. Now the wait is said within about a second, and
// the first Ctrl-C ends it: the report (gen: the truth, of no frames) is
// written and the exit code is 130.
TEST(CliFifo, AFifoNobodyReadsIsSaidAndCtrlCEndsTheWait) {
    test::TempDir dir;
    make_input(dir);
    ASSERT_EQ(::mkdir((dir / "o").c_str(), 0755), 0);
    ASSERT_EQ(::mkfifo((dir / "o/ibvcap.pcap").c_str(), 0600), 0);
    {
        SCOPED_TRACE("read -F pcap -o DIR, the output a FIFO");
        Child run(dir, {"read", "-q", "-r", "x.pcap", "-F", "pcap", "-F", "codif", "-o", "o",
                        "--report", "r.json"});
        const std::string said = interrupt_the_wait(
            run, dir, "ibvcap read: waiting for a reader of o/ibvcap.pcap (a FIFO): start one");
        ASSERT_FALSE(HasFailure());
        EXPECT_NE(said.find("o/ibvcap.pcap: no process opened this FIFO for reading before the "
                            "run was stopped"),
                  std::string::npos)
            << said;
        const auto j = nlohmann::json::parse(slurp(dir / "r.json"));
        EXPECT_EQ(j["interrupted"], true);
        EXPECT_EQ(j["stopped_by"], "sigint");
        EXPECT_EQ(j["totals"]["packets"], 100);
        for (const auto& o : j["outputs"]) {
            if (o["format"] == "pcap") {
                EXPECT_EQ(o["packets"], 0) << o.dump();
                EXPECT_EQ(o["dropped"], 100) << o.dump();
            } else {
                EXPECT_EQ(o["packets"], 50) << o.dump();  // the other outputs are whole
            }
        }
    }
    {
        SCOPED_TRACE("gen -w FIFO");
        ASSERT_EQ(::mkfifo((dir / "g.fifo").c_str(), 0600), 0);
        Child run(dir,
                  {"gen", "-w", "g.fifo", "--truth", "t.json", "-c", "1000", "--antennas", "1"});
        const std::string said =
            interrupt_the_wait(run, dir, "ibvcap gen: waiting for a reader of g.fifo (a FIFO)");
        ASSERT_FALSE(HasFailure());
        EXPECT_NE(said.find("ibvcap gen: stopped while waiting for a reader of g.fifo: nothing "
                            "was written to it"),
                  std::string::npos)
            << said;
        // The truth is that of what the FIFO got: nothing.
        const auto truth = nlohmann::json::parse(slurp(dir / "t.json"));
        EXPECT_EQ(truth["totals"]["packets"], 0) << truth["totals"].dump();
    }
}

// Two Ctrl-C while the writers drain, after the input ended: exit 130, and
// the report used to say `interrupted: false`, `stopped_by: end_of_input`.
// The run's FIFO output has a reader that does not read, so the drain waits
// on it.
TEST(CliFifo, InterruptsWhileTheWritersDrainAreInTheReport) {
    test::TempDir dir;
    make_input(dir, 200);  // 400 records, 3.3 MB: far more than a pipe holds
    ASSERT_EQ(::mkdir((dir / "o").c_str(), 0755), 0);
    ASSERT_EQ(::mkfifo((dir / "o/ibvcap.pcap").c_str(), 0600), 0);
    const int idle_reader =
        ::open((dir / "o/ibvcap.pcap").c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    ASSERT_GE(idle_reader, 0);
    Child run(dir, {"read", "-q", "-r", "x.pcap", "-F", "pcap", "-o", "o", "--report", "r.json"});
    ASSERT_TRUE(wait_for_handler(run.pid(), SIGINT));
    // The input is read in milliseconds; the writer then waits on the FIFO.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ::kill(run.pid(), SIGINT);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::kill(run.pid(), SIGINT);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::close(idle_reader);  // the write in progress ends (EPIPE)
    const int status = run.wait(std::chrono::seconds(20));
    const std::string said = slurp(dir / "err");
    ASSERT_TRUE(exited(status, 130)) << describe(status) << said;
    const auto j = nlohmann::json::parse(slurp(dir / "r.json"));
    EXPECT_EQ(j["interrupted"], true);
    EXPECT_EQ(j["stopped_by"], "sigint");
    EXPECT_EQ(j["totals"]["packets"], 400);
    EXPECT_NE(slurp(dir / "out").find("(interrupted by Ctrl-C (SIGINT) after "), std::string::npos)
        << slurp(dir / "out");
}

// JSON nested 200,000 levels deep (400 KB) inside what looks like a report
// or a manifest: `report` died with SIGSEGV (the library's copy and dump
// recurse per level). Every command that reads JSON from the operator now
// refuses it with one line.
TEST(CliFifo, JsonNestedTooDeepIsRefusedByEveryReader) {
    test::TempDir dir;
    const std::string deep = std::string(200000, '[') + std::string(200000, ']');
    std::ofstream(dir / "deep.json")
        << R"({"verdict": "loss", "totals": {}, "streams": [], "outputs": [], "timeline": )" << deep
        << "}";
    std::ofstream(dir / "deep2.json")
        << R"({"verdict": "zero-loss", "totals": {}, "notes": )" << deep << "}";
    std::ofstream(dir / "site.json")
        << R"({"groups": ["239.17.0.1:36001"], "comment": )" << deep << "}";
    make_input(dir);
    const auto refused = [&](const std::vector<std::string>& args, const std::string& file,
                             int code) {
        SCOPED_TRACE(args.front());
        const int status = run_bounded(dir, args);
        const std::string said = slurp(dir / "err");
        EXPECT_TRUE(exited(status, code)) << describe(status) << said;
        EXPECT_NE(said.find(fmt::format("{}: nested deeper than 128 levels: not a", file)),
                  std::string::npos)
            << said;
        EXPECT_EQ(lines(said), 1u) << said;
    };
    refused({"report", "deep.json", "--html", "d.html"}, "deep.json", 1);
    refused({"merge", "deep.json", "deep2.json"}, "deep.json", 1);
    refused({"verify", "--report", "deep.json"}, "deep.json", 1);
    refused({"read", "-q", "-r", "x.pcap", "--expect", "site.json"}, "site.json", 2);
    ASSERT_EQ(run_bounded(dir, {"read", "-q", "-r", "x.pcap", "--report", "r.json"}), 0);
    ASSERT_EQ(run_bounded(dir, {"read", "-q", "-r", "x.pcap", "--report", "r2.json"}), 0);
    refused({"merge", "r.json", "r2.json", "--expect", "site.json"}, "site.json", 2);
    // A report as deep as a report is stays readable.
    const int ok = run_bounded(dir, {"report", "r.json", "--html", "r.html"});
    EXPECT_TRUE(exited(ok, 0)) << describe(ok) << slurp(dir / "err");
}

}  // namespace
}  // namespace ibvcap
