// Lines for stdout and stderr that never stall a run (docs/operations.md,
// "When stdout or stderr is blocked or closed").
//
// A pager, Ctrl-S on a terminal or a pipe nobody reads makes an ordinary
// write wait, and a capture thread waiting on a terminal loses packets. A
// Console writes a line only when the stream takes it at once: a pipe, FIFO
// or terminal is written through a non-blocking description of its own
// (opened from /proc/self/fd/N, so the O_NONBLOCK flag never reaches the
// shell that shares the stream), a socket with MSG_DONTWAIT, a regular file
// as usual (a file never waits for a reader). A line the stream cannot take
// now is dropped and counted; the count goes into the report.
//
// Writes to a stream whose reader has gone (EPIPE) raise SIGPIPE as usual;
// the CLI's handler turns that into a clean stop (capture/signals.cpp).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string_view>

namespace ibvcap {

class Console {
  public:
    // `fd` stays open and owned by the caller.
    explicit Console(int fd);
    ~Console();
    Console(const Console&) = delete;
    Console& operator=(const Console&) = delete;

    // Writes `line` if the stream takes it without waiting; otherwise drops
    // and counts it and returns false. No allocation; any thread.
    bool try_write(std::string_view line);

    // Writes `text`, waiting at most `patience` for the stream to take it
    // (the end-of-run summary); what it cannot take in time is dropped and
    // counted as one line. Returns whether all of it was written.
    bool write_within(std::string_view text, std::chrono::milliseconds patience);

    // Lines (or texts) dropped so far.
    std::uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

  private:
    enum class Mode { plain, nonblocking, socket, poll };
    // Bytes written at once (never waits), or -1.
    long attempt(const char* data, std::size_t size);
    // Writes what is left of a line a terminal took only part of.
    bool flush_pending();

    int fd_;
    int own_fd_ = -1;  // the non-blocking description, when one was opened
    Mode mode_ = Mode::plain;
    std::mutex mutex_;
    std::array<char, 1024> pending_{};  // the unwritten end of a line, written first next time
    std::size_t pending_bytes_ = 0;
    std::atomic<std::uint64_t> dropped_{0};
};

// The process's stdout and stderr (made on first use; stdout's stdio buffer
// is flushed then, so earlier output comes first).
Console& stdout_console();
Console& stderr_console();

}  // namespace ibvcap
