// Running the real binary from a test (test_cli*.cpp): a shell command line
// in a test's directory, its exit code and output.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "frames.hpp"

namespace ibvcap::test {

struct Result {
    int code = -1;
    std::string out;
    std::string err;
};

inline std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Run a shell command line in `dir`, capturing its exit code and output.
inline Result sh(const TempDir& dir, const std::string& command) {
    const std::string line = "cd '" + dir.path().string() + "' && " + command + " >" +
                             (dir / "stdout") + " 2>" + (dir / "stderr");
    const int status = std::system(line.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(dir / "stdout");
    r.err = slurp(dir / "stderr");
    return r;
}

inline Result ibvcap(const TempDir& dir, const std::string& args) {
    return sh(dir, std::string(IBVCAP_BINARY) + " " + args);
}

inline std::size_t lines(const std::string& s) {
    return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

// The binary started directly (no shell between it and the signals a test
// sends), with stdin, stdout and stderr on the descriptors given.
inline pid_t spawn(const TempDir& dir, const std::vector<std::string>& args, int in, int out,
                   int err) {
    std::vector<std::string> argv{IBVCAP_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::dup2(in, 0);
        ::dup2(out, 1);
        ::dup2(err, 2);
        if (::chdir(dir.path().c_str()) != 0) {
            ::_exit(127);
        }
        std::vector<char*> cargv;
        for (auto& a : argv) {
            cargv.push_back(a.data());
        }
        cargv.push_back(nullptr);
        ::execv(cargv[0], cargv.data());
        ::_exit(127);
    }
    return pid;
}

// Its wait status, or -1 after killing it when it runs past `limit`.
inline int wait_for(pid_t pid, std::chrono::seconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > end) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            return -1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return status;
}

inline std::string describe(int status) {
    if (status == -1) {
        return "still running at the limit (killed)";
    }
    return WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status))
                             : fmt::format("killed by signal {}", WTERMSIG(status));
}

// Whether `pid` has a handler for `sig` (/proc/PID/status, SigCgt): from
// then on the signal is the run's to handle.
inline bool wait_for_handler(pid_t pid, int sig) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < end) {
        std::ifstream status("/proc/" + std::to_string(pid) + "/status");
        for (std::string line; std::getline(status, line);) {
            if (line.rfind("SigCgt:", 0) == 0 &&
                (std::stoull(line.substr(7), nullptr, 16) >> (sig - 1) & 1) != 0) {
                return true;
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
}

inline int open_file(const std::string& path) {
    return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

// spawn() with stdin /dev/null and stdout and stderr into the files `out`
// and `err` of `dir`.
inline pid_t spawn_to_files(const TempDir& dir, const std::vector<std::string>& args) {
    const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int out = open_file(dir / "out");
    const int err = open_file(dir / "err");
    const pid_t pid = spawn(dir, args, null, out, err);
    ::close(null);
    ::close(out);
    ::close(err);
    return pid;
}

// A live capture on the loopback interface with nothing sent (exit 3, "no
// stream frames were received"): a run that only ends by its duration or a
// signal. Skips where libpcap may not capture.
inline std::vector<std::string> silent_capture(std::vector<std::string> more) {
    std::vector<std::string> args{"capture", "--source", "pcap", "-i", "lo", "239.1.2.3:5000"};
    args.insert(args.end(), more.begin(), more.end());
    return args;
}

#define SKIP_WITHOUT_CAPTURE_PERMISSION(dir)                                                      \
    do {                                                                                          \
        const ::ibvcap::test::Result probe = ::ibvcap::test::ibvcap(                              \
            dir, "capture --source pcap -i lo 239.1.2.3:5000 --duration 0.1 -q");                 \
        if (probe.code == 1 && probe.err.find("no permission to capture") != std::string::npos) { \
            IBVCAP_SKIP_UNLESS_CI(probe.err);                                                     \
        }                                                                                         \
    } while (false)

}  // namespace ibvcap::test
