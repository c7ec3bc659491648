// The capture's control socket (capture --control SOCKET; `ibvcap ctl SOCKET
// REQUEST`; docs/operations.md, "Observing a window"): a Unix stream socket
// that takes one request line per connection and answers one line, for a
// site's scheduler that commands scans as they come. Who may ask is the
// socket file's mode, 0660: its owner and group.
//
// Requests (the run loop answers them, lib/run/run_loop.cpp):
//   status              what is under way and what comes next
//   next                the next scan: "ok NAME START STOP", or "ok none"
//   start NAME [STOP]   a scan from now to STOP (a UTC time; none: until stop)
//   stop                the scan under way ends now
// Every reply starts "ok " or "error: ".
//
// Written by hand over socket(7) and unix(7): a line each way needs no
// protocol library, and Debian's RPC and message-queue libraries would
// bring a daemon's worth of dependencies for it.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

namespace ibvcap {

class ControlSocket {
  public:
    // Binds and listens at `path` (mode 0660). A socket file no one listens
    // on (a capture that ended without removing it) is replaced. Throws
    // std::runtime_error, one line naming the fix, when another capture
    // listens there, when `path` is something else, or it cannot be made.
    explicit ControlSocket(std::string path);
    ~ControlSocket();  // closed and its file removed
    ControlSocket(const ControlSocket&) = delete;
    ControlSocket& operator=(const ControlSocket&) = delete;

    // Answers the requests waiting now (at most 8), each line through
    // `answer`; never waits for a connection. Clients that have connected
    // but send no whole line are answered with an error; all of one call's
    // waits for lines together last 200 ms at most.
    void serve(const std::function<std::string(std::string_view request)>& answer);
    const std::string& path() const { return path_; }

  private:
    std::string path_;
    int fd_ = -1;
};

// The client's side: sends `request` as one line and returns the reply line
// (without its newline). Throws std::runtime_error, one line naming the fix,
// when nothing listens at `path` or no reply comes within `timeout`.
std::string control_request(const std::string& path, std::string_view request,
                            std::chrono::milliseconds timeout);

}  // namespace ibvcap
