#include "lib/host/privileges.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <linux/capability.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace ibvcap {

namespace {

// Why capset(2) by hand and not libcap's cap_set_proc: both change the
// calling thread only (kernel/capability.c, SYSCALL_DEFINE2(capset): "pid
// ... may only be the calling thread"), and the other threads must be reached
// from a signal handler, where only async-signal-safe calls are allowed
// (signal-safety(7)): the raw system call is one, libcap's allocating API is
// not. libcap's own answer (libpsx: psx_syscall on every thread) registers
// threads by wrapping pthread_create at link time (-Wl,-wrap,pthread_create,
// /usr/include/sys/psx_syscall.h), which cannot reach the pthread_create
// call inside libstdc++.so that std::thread makes.
//
// Empty effective, permitted and inheritable sets also empty the ambient set
// (security/commoncap.c, cap_capset: "Mask off ambient bits that are no
// longer both permitted and inheritable").
long clear_this_thread() {
    __user_cap_header_struct header{};
    header.version = _LINUX_CAPABILITY_VERSION_3;
    header.pid = 0;
    __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
    if (::syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1L, 0L, 0L, 0L) != 0) {
        return -1;
    }
    return ::syscall(SYS_capset, &header, data);
}

std::atomic<int> g_threads_done{0};
std::atomic<int> g_threads_failed{0};

extern "C" void clear_on_signal(int) {
    const int saved = errno;
    if (clear_this_thread() != 0) {
        g_threads_failed.fetch_add(1);
    }
    g_threads_done.fetch_add(1);
    errno = saved;
}

std::uint64_t hex_field(const std::string& line, std::size_t prefix) {
    try {
        return std::stoull(line.substr(prefix), nullptr, 16);
    } catch (const std::exception&) {
        return ~std::uint64_t{0};  // unreadable: counts as "something left"
    }
}

// Every other thread of the process empties its sets in clear_on_signal.
// Returns how many were asked and how many failed or did not answer in time.
std::pair<int, int> clear_other_threads() {
    const int signal = SIGRTMIN + 3;  // not used elsewhere in ibvcap
    struct sigaction action {};
    struct sigaction previous {};
    action.sa_handler = clear_on_signal;
    action.sa_flags = SA_RESTART;  // the threads' blocking calls carry on
    sigemptyset(&action.sa_mask);
    if (::sigaction(signal, &action, &previous) != 0) {
        throw std::runtime_error(
            fmt::format("cannot drop capabilities: sigaction: {}", std::strerror(errno)));
    }
    g_threads_done = 0;
    g_threads_failed = 0;
    const pid_t self = static_cast<pid_t>(::syscall(SYS_gettid));
    const pid_t process = ::getpid();
    int asked = 0;
    if (DIR* dir = ::opendir("/proc/self/task")) {
        while (const dirent* e = ::readdir(dir)) {
            char* end = nullptr;
            const long tid = std::strtol(e->d_name, &end, 10);
            if (end == e->d_name || *end != '\0' || tid <= 0 || tid == self) {
                continue;
            }
            if (::syscall(SYS_tgkill, process, tid, signal) == 0) {
                ++asked;  // a thread that ended meanwhile (ESRCH) needs nothing
            }
        }
        ::closedir(dir);
    } else {
        throw std::runtime_error(fmt::format(
            "cannot drop capabilities: cannot list /proc/self/task: {}", std::strerror(errno)));
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (g_threads_done.load() < asked && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const int failed = g_threads_failed.load() + (asked - g_threads_done.load());
    ::sigaction(signal, &previous, nullptr);
    return {asked, failed};
}

std::string hex16(std::uint64_t v) {
    return fmt::format("{:016x}", v);
}

}  // namespace

RunUser resolve_run_user(const std::string& name) {
    errno = 0;
    const passwd* pw = ::getpwnam(name.c_str());
    if (pw == nullptr) {
        throw std::runtime_error(
            fmt::format("--user {}: no such user on this host (create it, e.g. adduser --system "
                        "{}, or name another)",
                        name, name));
    }
    RunUser user{name, pw->pw_uid, pw->pw_gid};
    if (::geteuid() != 0 && ::geteuid() != user.uid) {
        throw std::runtime_error(
            fmt::format("--user {}: this process (uid {}) cannot become another user; run as "
                        "root, or leave --user out",
                        name, ::geteuid()));
    }
    return user;
}

ThreadCapabilities read_thread_capabilities(const std::filesystem::path& task_dir) {
    ThreadCapabilities caps;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(task_dir, ec)) {
        std::ifstream status(entry.path() / "status");
        if (!status) {
            continue;  // the thread ended meanwhile
        }
        bool seen_nnp = false;
        for (std::string line; std::getline(status, line);) {
            if (line.rfind("CapEff:", 0) == 0) {
                caps.effective |= hex_field(line, 7);
            } else if (line.rfind("CapPrm:", 0) == 0) {
                caps.permitted |= hex_field(line, 7);
            } else if (line.rfind("CapAmb:", 0) == 0) {
                caps.ambient |= hex_field(line, 7);
            } else if (line.rfind("CapInh:", 0) == 0) {
                caps.inheritable |= hex_field(line, 7);
            } else if (line.rfind("NoNewPrivs:", 0) == 0) {
                seen_nnp = true;
                caps.no_new_privs = caps.no_new_privs && line.find('1', 11) != std::string::npos;
            }
        }
        caps.no_new_privs = caps.no_new_privs && seen_nnp;
        ++caps.threads;
    }
    if (ec) {
        throw std::runtime_error(
            fmt::format("cannot read {}: {}", task_dir.string(), ec.message()));
    }
    return caps;
}

PrivilegeState drop_privileges(const std::optional<RunUser>& user,
                               const std::vector<std::filesystem::path>& writable_dirs) {
    PrivilegeState state;
    if (user && user->uid != ::geteuid()) {
        // glibc applies setgroups and the set*id calls to every thread
        // (nptl's setxid broadcast, /usr/include/sys/psx_syscall.h says so);
        // leaving uid 0 for another on all of real, effective and saved
        // clears the permitted and effective sets of each thread
        // (security/commoncap.c, cap_emulate_setxuid).
        if (::initgroups(user->name.c_str(), user->gid) != 0 ||
            ::setresgid(user->gid, user->gid, user->gid) != 0 ||
            ::setresuid(user->uid, user->uid, user->uid) != 0) {
            throw std::runtime_error(
                fmt::format("--user {}: cannot become it: {}", user->name, std::strerror(errno)));
        }
    }
    const auto [asked, failed] = clear_other_threads();
    if (clear_this_thread() != 0) {
        throw std::runtime_error(
            fmt::format("cannot drop capabilities: capset: {}", std::strerror(errno)));
    }
    if (failed > 0) {
        throw std::runtime_error(fmt::format(
            "cannot drop capabilities: {} of {} threads did not drop theirs", failed, asked));
    }
    const ThreadCapabilities after = read_thread_capabilities();
    state.dropped = after.effective == 0 && after.permitted == 0 && after.ambient == 0 &&
                    after.inheritable == 0;
    state.no_new_privs = after.no_new_privs;
    state.threads = after.threads;
    state.uid = ::geteuid();
    state.gid = ::getegid();
    if (const passwd* pw = ::getpwuid(state.uid)) {
        state.user = pw->pw_name;
    } else {
        state.user = std::to_string(state.uid);
    }
    state.after = {{"CapEff", hex16(after.effective)},
                   {"CapPrm", hex16(after.permitted)},
                   {"CapAmb", hex16(after.ambient)},
                   {"CapInh", hex16(after.inheritable)}};
    if (!state.dropped) {
        throw std::runtime_error(
            fmt::format("cannot drop capabilities: after the drop a thread still has CapEff {} "
                        "CapPrm {} CapAmb {}",
                        hex16(after.effective), hex16(after.permitted), hex16(after.ambient)));
    }
    // Files made later (rotated files, the report, the metrics file) are made
    // with what the process is now: plain file permissions.
    for (const auto& dir : writable_dirs) {
        if (::faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
            throw std::runtime_error(fmt::format(
                "{} is not writable by uid {} once capabilities are dropped (root keeps no "
                "CAP_DAC_OVERRIDE after setup): make it writable by that user (chown/chmod)",
                dir.string(), state.uid));
        }
    }
    return state;
}

}  // namespace ibvcap
