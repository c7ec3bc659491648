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

bool exited(int status, int code) {
    return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == code;
}

// A small capture to read: 50 frames of 2 streams.
void make_input(const test::TempDir& dir, std::uint64_t frames = 50) {
    ASSERT_EQ(run_bounded(dir, {"gen", "-q", "-w", "x.pcap", "-c", std::to_string(frames),
                                "--antennas", "2", "--threads", "1"}),
              0);
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
