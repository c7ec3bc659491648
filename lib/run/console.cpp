#include "lib/run/console.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace ibvcap {

namespace {

// A terminal may take part of a write; pieces this small keep the poll
// fallback from waiting on a write larger than the room it reported.
constexpr std::size_t kPollPiece = 512;

}  // namespace

Console::Console(int fd) : fd_(fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) {
        return;  // plain: a file never waits for a reader
    }
    if (S_ISSOCK(st.st_mode)) {
        mode_ = Mode::socket;
        return;
    }
    // A pipe, FIFO or character device (a terminal): a description of our
    // own, so O_NONBLOCK stays off the one the shell shares.
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    own_fd_ = ::open(self.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (own_fd_ >= 0) {
        fd_ = own_fd_;
        mode_ = Mode::nonblocking;
    } else {
        mode_ = Mode::poll;  // no /proc, or a pipe whose reader has gone
    }
}

Console::~Console() {
    if (own_fd_ >= 0) {
        ::close(own_fd_);
    }
}

long Console::attempt(const char* data, std::size_t size) {
    for (;;) {
        ssize_t n = -1;
        switch (mode_) {
            case Mode::plain:
            case Mode::nonblocking:
                n = ::write(fd_, data, size);
                break;
            case Mode::socket:
                n = ::send(fd_, data, size, MSG_DONTWAIT);
                break;
            case Mode::poll: {
                pollfd p{fd_, POLLOUT, 0};
                if (::poll(&p, 1, 0) != 1 || (p.revents & POLLOUT) == 0) {
                    if (p.revents & (POLLERR | POLLHUP)) {
                        n = ::write(fd_, data, std::min(size, kPollPiece));  // EPIPE, SIGPIPE
                        break;
                    }
                    return -1;
                }
                n = ::write(fd_, data, std::min(size, kPollPiece));
                break;
            }
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        return n;
    }
}

bool Console::flush_pending() {
    while (pending_bytes_ > 0) {
        const long n = attempt(pending_.data(), pending_bytes_);
        if (n <= 0) {
            return false;
        }
        const auto done = static_cast<std::size_t>(n);
        std::memmove(pending_.data(), pending_.data() + done, pending_bytes_ - done);
        pending_bytes_ -= done;
    }
    return true;
}

bool Console::try_write(std::string_view line) {
    std::lock_guard lock(mutex_);
    if (!flush_pending()) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    std::size_t done = 0;
    while (done < line.size()) {
        const long n = attempt(line.data() + done, line.size() - done);
        if (n <= 0) {
            break;
        }
        done += static_cast<std::size_t>(n);
    }
    if (done == 0 && !line.empty()) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    if (done < line.size()) {
        // Part of the line went out: keep the rest (what fits) for next time,
        // so the stream never shows half a line followed by another. A rest
        // longer than that is cut, and the line counted as not printed.
        if (line.size() - done > pending_.size()) {
            dropped_.fetch_add(1, std::memory_order_relaxed);
        }
        const std::size_t rest = std::min(line.size() - done, pending_.size());
        std::memcpy(pending_.data(), line.data() + done, rest);
        pending_bytes_ = rest;
    }
    return true;
}

bool Console::write_within(std::string_view text, std::chrono::milliseconds patience) {
    std::lock_guard lock(mutex_);
    const auto deadline = std::chrono::steady_clock::now() + patience;
    const auto wait = [&]() {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            return false;
        }
        pollfd p{fd_, POLLOUT, 0};
        const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 100)));
        return r >= 0 || errno == EINTR;
    };
    while (pending_bytes_ > 0) {
        if (!flush_pending() && (errno == EPIPE || !wait())) {
            dropped_.fetch_add(1, std::memory_order_relaxed);
            return false;
        }
    }
    std::size_t done = 0;
    while (done < text.size()) {
        const long n = attempt(text.data() + done, text.size() - done);
        if (n > 0) {
            done += static_cast<std::size_t>(n);
            continue;
        }
        if ((n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) || !wait()) {
            dropped_.fetch_add(1, std::memory_order_relaxed);
            return false;
        }
    }
    return true;
}

Console& stdout_console() {
    static Console console((std::fflush(stdout), STDOUT_FILENO));
    return console;
}

Console& stderr_console() {
    static Console console((std::fflush(stderr), STDERR_FILENO));
    return console;
}

}  // namespace ibvcap
