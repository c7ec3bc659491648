// The capture's control socket (lib/run/control.hpp) and its scan queue
// (lib/run/scan_queue.hpp): one line each way, the file's mode, a socket in
// use or left behind, a client that sends nothing; and the scans to come as
// SIGHUP and a start request change them.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "frames.hpp"
#include "lib/core/utc.hpp"
#include "lib/run/control.hpp"
#include "lib/run/scan_queue.hpp"
#include "lib/run/schedule.hpp"

namespace ibvcap {
namespace {

using namespace std::chrono_literals;

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Serves `socket` on a thread until stopped, answering "ok " + the request.
struct Server {
    ControlSocket& socket;
    std::atomic<bool> stop{false};
    std::thread thread{[this] {
        while (!stop) {
            socket.serve([](std::string_view r) { return "ok " + std::string(r); });
            std::this_thread::sleep_for(2ms);
        }
    }};
    ~Server() {
        stop = true;
        thread.join();
    }
};

TEST(Control, ARequestLineGetsItsReplyLineAndTheSocketIsOwnerAndGroupOnly) {
    test::TempDir dir;
    const std::string path = (dir / "ctl");
    {
        ControlSocket socket(path);
        struct stat st {};
        ASSERT_EQ(::lstat(path.c_str(), &st), 0);
        EXPECT_TRUE(S_ISSOCK(st.st_mode));
        EXPECT_EQ(st.st_mode & 0777, 0660u);
        Server server{socket};
        EXPECT_EQ(control_request(path, "status", 5s), "ok status");
        EXPECT_EQ(control_request(path, "start s1 2026-11-29T10:00:00Z", 5s),
                  "ok start s1 2026-11-29T10:00:00Z");
    }
    // Removed when the capture ends; asking then names the fix.
    EXPECT_FALSE(std::filesystem::exists(path));
    try {
        control_request(path, "status", 1s);
        ADD_FAILURE() << "a request with no capture answered";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("is one running with --control"), std::string::npos)
            << e.what();
    }
}

TEST(Control, ASocketInUseIsRefusedAndOneLeftBehindIsReplaced) {
    test::TempDir dir;
    const std::string path = (dir / "ctl");
    ControlSocket first(path);
    try {
        ControlSocket second(path);
        ADD_FAILURE() << "two captures on one socket";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("another capture listens there"), std::string::npos)
            << e.what();
    }
    // A socket file nobody listens on (a capture killed with -9).
    const std::string stale = (dir / "stale");
    {
        const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::strcpy(a.sun_path, stale.c_str());
        ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
        ::close(fd);
    }
    ControlSocket replaced(stale);
    Server server{replaced};
    EXPECT_EQ(control_request(stale, "next", 5s), "ok next");
    // Something else at the path is never removed.
    std::ofstream(dir / "file") << "mine";
    EXPECT_THROW(ControlSocket((dir / "file")), std::runtime_error);
    EXPECT_EQ(slurp(dir / "file"), "mine");
    EXPECT_THROW(ControlSocket(std::string(200, 'x')), std::runtime_error);
}

TEST(Control, AClientThatSendsNoLineIsAnsweredAndTheNextIsServed) {
    test::TempDir dir;
    const std::string path = (dir / "ctl");
    ControlSocket socket(path);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strcpy(a.sun_path, path.c_str());
    // Four clients that send half a request (no newline): the loop's thread
    // waits for them all together at most 200 ms, not 200 ms each.
    int fds[4];
    for (int& fd : fds) {
        fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
        ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
        ASSERT_EQ(::write(fd, "stat", 4), 4);
    }
    const int fd = fds[0];
    const auto t0 = std::chrono::steady_clock::now();
    socket.serve([](std::string_view) { return std::string("ok"); });
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
    for (int i = 1; i < 4; ++i) {
        ::close(fds[i]);
    }
    char buf[256] = {};
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    ASSERT_GT(n, 0);
    EXPECT_NE(std::string(buf).find("error: a request is one line"), std::string::npos) << buf;
    Server server{socket};
    EXPECT_EQ(control_request(path, "status", 5s), "ok status");
}

// The scans to come as SIGHUP replaces them: all admitted or none, the scan
// under way and those recorded never again, those too early left out.
TEST(ScanQueue, AReReadReplacesTheScansToComeOrNothing) {
    test::TempDir dir;
    RunSettings settings;
    settings.outputs.output_dir = (dir / "out");
    settings.outputs.formats = {OutputFormat::codif};
    ScanQueue queue(settings);
    queue.admit(
        parse_schedule("a 2026-11-29T10:00:00Z 2026-11-29T10:01:00Z\n"
                       "b 2026-11-29T10:02:00Z 2026-11-29T10:03:00Z\n",
                       "s"));
    EXPECT_TRUE(std::filesystem::is_directory(dir / "out/a"));
    EXPECT_TRUE(std::filesystem::is_directory(dir / "out/b"));
    EXPECT_EQ(queue.pop().name, "a");  // under way
    const auto said = queue.replace(parse_schedule("a 2026-11-29T10:00:00Z 2026-11-29T10:01:00Z\n"
                                                   "x 2026-11-29T10:01:01Z 2026-11-29T10:01:30Z\n"
                                                   "c 2026-11-29T10:04:00Z 2026-11-29T10:05:00Z\n",
                                                   "s"),
                                    *parse_utc_instant("2026-11-29T10:01:03Z"));
    EXPECT_NE(said.find("1 scan to come, the next c at 2026-11-29T10:04:00Z"), std::string::npos)
        << said;
    EXPECT_NE(said.find("left out, as they start before the scan under way can end and close: x"),
              std::string::npos)
        << said;
    ASSERT_EQ(queue.to_come().size(), 1u);
    EXPECT_EQ(queue.front().name, "c");
    EXPECT_FALSE(std::filesystem::exists(dir / "out/b"));  // no longer to come: let go
    // A scan whose directory holds an earlier capture's file: refused, and
    // the scans to come stay as they were.
    std::filesystem::create_directories(dir / "out/d");
    std::ofstream(dir / "out/d/ibvcap_239.17.0.1_36001_10.0.0.11.codif") << "earlier";
    EXPECT_THROW(queue.replace(parse_schedule("d 2026-11-29T10:06:00Z 2026-11-29T10:07:00Z\n"
                                              "e 2026-11-29T10:08:00Z 2026-11-29T10:09:00Z\n",
                                              "s"),
                               0),
                 std::runtime_error);
    ASSERT_EQ(queue.to_come().size(), 1u);
    EXPECT_EQ(queue.front().name, "c");
    EXPECT_EQ(slurp(dir / "out/d/ibvcap_239.17.0.1_36001_10.0.0.11.codif"), "earlier");
    // A start request's scan goes first; a name used is refused.
    Scan now;
    now.name = "live";
    queue.push_front(now);
    EXPECT_EQ(queue.front().name, "live");
    EXPECT_THROW(queue.push_front(now), std::runtime_error);
    Scan again;
    again.name = "a";
    EXPECT_THROW(queue.push_front(again), std::runtime_error);
}

}  // namespace
}  // namespace ibvcap
