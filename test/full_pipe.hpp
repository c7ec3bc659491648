// A pipe whose buffer is full, its write end blocking again: what a pager,
// Ctrl-S or a reader that went away leaves a writer facing (a stdout or
// stderr nobody reads). Shared by the CLI and stats-line tests.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <string>

namespace ibvcap::test {

struct FullPipe {
    int fds[2] = {-1, -1};
    FullPipe() {
        EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
        const int flags = ::fcntl(fds[1], F_GETFL);
        ::fcntl(fds[1], F_SETFL, flags | O_NONBLOCK);
        const std::string block(4096, 'x');
        while (::write(fds[1], block.data(), block.size()) > 0) {
        }
        for (char c = 'x'; ::write(fds[1], &c, 1) == 1;) {
        }
        ::fcntl(fds[1], F_SETFL, flags);
    }
    ~FullPipe() {
        for (const int fd : fds) {
            if (fd >= 0) {
                ::close(fd);
            }
        }
    }
    std::size_t drain() {
        std::size_t n = 0;
        char buf[4096];
        ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
        for (ssize_t r; (r = ::read(fds[0], buf, sizeof buf)) > 0;) {
            n += static_cast<std::size_t>(r);
        }
        return n;
    }
};

}  // namespace ibvcap::test
