#include "lib/run/control.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace ibvcap {

namespace {

// A request or reply line: more is refused (a request is a few words).
constexpr std::size_t kMaxLine = 512;

sockaddr_un address_of(const std::string& path) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof a.sun_path) {
        throw std::runtime_error(fmt::format(
            "control socket '{}': a socket path is 1 to {} bytes; give a shorter path, e.g. "
            "/run/ibvcap/ctl",
            path, sizeof a.sun_path - 1));
    }
    std::memcpy(a.sun_path, path.data(), path.size());
    return a;
}

class Fd {
  public:
    explicit Fd(int fd) : fd_(fd) {}
    ~Fd() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    int get() const { return fd_; }
    int release() { return std::exchange(fd_, -1); }

  private:
    int fd_;
};

// Whether a capture listens at `path` (a connect succeeds).
bool someone_listens(const sockaddr_un& a) {
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    return fd.get() >= 0 &&
           ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
}

// Reads one line from `fd` within `timeout`; false when none came whole.
bool read_line(int fd, std::string& line, std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    char buf[kMaxLine];
    while (line.size() < kMaxLine) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            until - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            return false;
        }
        pollfd p{fd, POLLIN, 0};
        const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
        if (ready < 0 && errno == EINTR) {
            continue;
        }
        if (ready <= 0) {
            return false;
        }
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (n <= 0) {
            return false;
        }
        line.append(buf, static_cast<std::size_t>(n));
        if (const auto nl = line.find('\n'); nl != std::string::npos) {
            line.resize(nl);
            return true;
        }
    }
    return false;
}

void send_all(int fd, std::string_view text) {
    while (!text.empty()) {
        const ssize_t n = ::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return;  // the client went away: its reply is lost, the capture is not
        }
        text.remove_prefix(static_cast<std::size_t>(n));
    }
}

}  // namespace

ControlSocket::ControlSocket(std::string path) : path_(std::move(path)) {
    const sockaddr_un a = address_of(path_);
    struct stat st {};
    if (::lstat(path_.c_str(), &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            throw std::runtime_error(fmt::format(
                "control socket {}: the path exists and is not a socket; give another path",
                path_));
        }
        if (someone_listens(a)) {
            throw std::runtime_error(fmt::format(
                "control socket {}: another capture listens there; stop it, or give another path",
                path_));
        }
        ::unlink(path_.c_str());  // left by a capture that ended without removing it
    }
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (fd.get() < 0) {
        throw std::runtime_error(
            fmt::format("control socket {}: socket: {}", path_, std::strerror(errno)));
    }
    // The file's mode is who may ask: owner and group (umask at bind, unix(7)).
    const mode_t old = ::umask(0117);
    const int bound = ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a);
    const int bind_errno = errno;
    ::umask(old);
    if (bound != 0) {
        throw std::runtime_error(fmt::format(
            "control socket {}: cannot make it: {}; give a path in a directory the capture can "
            "write (e.g. /run/ibvcap/ctl)",
            path_, std::strerror(bind_errno)));
    }
    if (::listen(fd.get(), 8) != 0) {
        const int e = errno;
        ::unlink(path_.c_str());
        throw std::runtime_error(
            fmt::format("control socket {}: listen: {}", path_, std::strerror(e)));
    }
    fd_ = fd.release();
}

ControlSocket::~ControlSocket() {
    if (fd_ >= 0) {
        ::close(fd_);
        ::unlink(path_.c_str());
    }
}

void ControlSocket::serve(const std::function<std::string(std::string_view)>& answer) {
    // One budget for every client of this call: the loop's thread (the
    // libpcap source's capture thread) waits 200 ms at most per call, however
    // many connect and send nothing.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    for (int i = 0; i < 8; ++i) {
        Fd client(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
        if (client.get() < 0) {
            return;  // none waiting (EAGAIN), or it went away
        }
        std::string line;
        std::string reply;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            until - std::chrono::steady_clock::now());
        if (!read_line(client.get(), line, std::max(left, std::chrono::milliseconds(1)))) {
            reply = "error: a request is one line, at most 512 bytes, sent at once";
        } else {
            if (!line.empty() && line.back() == '\r') {
                line.pop_back();
            }
            reply = answer(line);
        }
        send_all(client.get(), reply + "\n");
    }
}

std::string control_request(const std::string& path, std::string_view request,
                            std::chrono::milliseconds timeout) {
    const sockaddr_un a = address_of(path);
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) {
        throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
    }
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
        const int e = errno;
        throw std::runtime_error(fmt::format(
            "no capture answers at {}: {}; is one running with --control {}, and may this user "
            "write to the socket (its mode is 0660)?",
            path, std::strerror(e), path));
    }
    send_all(fd.get(), fmt::format("{}\n", request));
    std::string reply;
    if (!read_line(fd.get(), reply, timeout)) {
        throw std::runtime_error(
            fmt::format("the capture at {} did not answer within {} ms", path, timeout.count()));
    }
    return reply;
}

}  // namespace ibvcap
