#include "lib/core/fifo.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

namespace ibvcap {

namespace {
constexpr std::chrono::milliseconds kRetry{20};

bool is_fifo(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}
}  // namespace

int open_for_writing(const std::string& path, int flags, const ReaderWait& wait) {
    const auto start = std::chrono::steady_clock::now();
    bool said = false;
    for (;;) {
        const int fd = ::open(path.c_str(), flags | O_NONBLOCK, 0644);
        if (fd >= 0) {
            if ((flags & O_NONBLOCK) == 0) {
                const int fl = ::fcntl(fd, F_GETFL);
                if (fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
                    const int err = errno;
                    ::close(fd);
                    return -err;
                }
            }
            return fd;
        }
        const int err = errno;
        if (err == EINTR) {
            continue;
        }
        // ENXIO from a FIFO: no reader yet (fifo(7)). From anything else (a
        // device with no driver behind it) it is the answer.
        if (err != ENXIO || !is_fifo(path)) {
            return -err;
        }
        if (wait.give_up && wait.give_up()) {
            return -ECANCELED;
        }
        if (!said && wait.notice && std::chrono::steady_clock::now() - start >= wait.notice_after) {
            said = true;
            wait.notice(path);
        }
        std::this_thread::sleep_for(kRetry);
    }
}

int write_into(const std::string& path, std::string_view text, const ReaderWait& wait) {
    const int fd = open_for_writing(path, O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, wait);
    if (fd < 0) {
        return -fd;
    }
    std::size_t done = 0;
    int err = 0;
    while (done < text.size()) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n > 0) {
            done += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && errno == EAGAIN) {
            if (wait.give_up && wait.give_up()) {
                err = ECANCELED;
                break;
            }
            pollfd p{fd, POLLOUT, 0};
            ::poll(&p, 1, static_cast<int>(kRetry.count()));
            continue;
        }
        err = n < 0 ? errno : ENOSPC;
        break;
    }
    ::close(fd);
    return err;
}

std::string reader_wait_text(const std::string& path) {
    return fmt::format(
        "waiting for a reader of {} (a FIFO): start one (e.g. cat {} > FILE), or Ctrl-C to stop "
        "waiting",
        path, path);
}

}  // namespace ibvcap
