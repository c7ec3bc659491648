// The signals of a run: SIGINT and SIGTERM stop it (the second at once, the
// third ends the process), SIGHUP and SIGPIPE stop it cleanly (SIGHUP reads a
// schedule of scans again instead), SIGUSR1 prints the counts so far; and the
// wait for a FIFO's reader that a stop ends.
#include <fmt/format.h>

#include <atomic>
#include <csignal>

#include "capture/cli.hpp"

namespace ibvcap::cli {

namespace {
std::atomic<bool> g_stop{false};
// The signal that stopped the run (the first one): the report's stopped_by.
// (A lock-free atomic: safe to store from a signal handler.)
std::atomic<int> g_stop_signal{0};
void note_stop_signal(int sig) {
    int none = 0;
    g_stop_signal.compare_exchange_strong(none, sig);
}

std::atomic<bool> g_urgent{false};
// Every stop signal so far: a wait for a FIFO's reader ends at the next one.
std::atomic<unsigned> g_signals{0};

// First interrupt: finish cleanly. Second: stop at once; the writers drop
// what is queued but finish the write in progress, so files hold whole
// records (exiting here could cut a write in the middle of a record). Third:
// end the process on the spot.
extern "C" void on_stop_signal(int sig) {
    note_stop_signal(sig);
    g_signals.fetch_add(1);
    if (!g_stop.exchange(true)) {
        return;
    }
    if (!g_urgent.exchange(true)) {
        return;
    }
    std::_Exit(130);
}

// SIGHUP (the terminal or ssh session went away) and SIGPIPE (stdout or
// stderr lost its reader, e.g. `| head -1`): a clean stop, as the first
// Ctrl-C. They never escalate: every later write to a closed pipe raises
// SIGPIPE again, and that must not abandon the queued records.
extern "C" void on_end_signal(int sig) {
    note_stop_signal(sig);
    g_signals.fetch_add(1);
    g_stop.store(true);
}

// SIGHUP with a schedule of scans: read it again (the run loop does).
std::atomic<bool> g_reload{false};
extern "C" void on_reload_signal(int) {
    g_reload.store(true);
}

// SIGUSR1: print the counts so far and go on (tcpdump's use of it).
std::atomic<bool> g_counts{false};
extern "C" void on_counts_signal(int) {
    g_counts.store(true);
}
}  // namespace

void install_stop_handler() {
    // No SA_RESTART: a read blocked on a pipe or FIFO (`read -r -`) returns
    // EINTR, so the run sees the stop at once.
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    struct sigaction end {};
    end.sa_handler = on_end_signal;
    sigemptyset(&end.sa_mask);
    sigaction(SIGHUP, &end, nullptr);
    sigaction(SIGPIPE, &end, nullptr);
    // Every other signal whose default ends the process (signal(7): Term or
    // Core, less the faults of the program itself, SIGSEGV, SIGBUS, SIGFPE,
    // SIGILL, SIGTRAP, SIGABRT, SIGSYS) ends the run as SIGTERM does, with
    // its files and report: a stray `kill -USR2` or an alarm must not lose a
    // capture.
    for (const int sig :
         {SIGQUIT, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGSTKFLT}) {
        sigaction(sig, &sa, nullptr);
    }
    for (int sig = SIGRTMIN; sig <= SIGRTMAX; ++sig) {
        sigaction(sig, &sa, nullptr);
    }
    struct sigaction counts {};
    counts.sa_handler = on_counts_signal;
    counts.sa_flags = SA_RESTART;  // (it stops nothing: blocked reads go on)
    sigemptyset(&counts.sa_mask);
    sigaction(SIGUSR1, &counts, nullptr);
    // A file past RLIMIT_FSIZE: the write fails with EFBIG and that output
    // fails naming it (the others go on), instead of the process ending.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGXFSZ, &ignore, nullptr);
    // The non-blocking stdout and stderr, made now: stdio's buffered stdout
    // is flushed before the run rather than from a capture thread.
    stdout_console();
    stderr_console();
}

void install_reload_handler() {
    struct sigaction reload {};
    reload.sa_handler = on_reload_signal;
    reload.sa_flags = SA_RESTART;  // (it stops nothing)
    sigemptyset(&reload.sa_mask);
    sigaction(SIGHUP, &reload, nullptr);
}

std::atomic<bool>& reload_flag() {
    return g_reload;
}

const std::atomic<bool>& stop_flag() {
    return g_stop;
}

const std::atomic<int>& stop_signal() {
    return g_stop_signal;
}

ReaderWait reader_wait(const std::string& command) {
    ReaderWait wait;
    wait.give_up = [seen = g_signals.load()] { return g_signals.load() != seen; };
    wait.notice = [command](const std::string& path) {
        stderr_console().write_within(
            fmt::format("ibvcap {}: {}\n", command, reader_wait_text(path)), kEndPatience);
    };
    return wait;
}

const std::atomic<bool>& urgent_flag() {
    return g_urgent;
}

std::atomic<bool>& counts_flag() {
    return g_counts;
}

}  // namespace ibvcap::cli
