// Opening and writing a FIFO without waiting forever for its reader. A
// blocking open(2) of a FIFO for writing waits until some process opens it
// for reading, with no way to say so or to stop it but a signal that may go
// to another thread; a non-blocking one fails at once with ENXIO while there
// is no reader (fifo(7)). So the open is tried without blocking, again every
// 20 ms, until a reader comes, the caller gives up (Ctrl-C), or never: and
// once, after about a second, the wait is said.
#pragma once

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ibvcap {

struct ReaderWait {
    // Asked every 20 ms while the FIFO has no reader (and, in write_into,
    // while it takes no more bytes): true ends the wait, which fails with
    // ECANCELED. Empty: the wait never ends but by a reader.
    std::function<bool()> give_up;
    // Called once, from the waiting thread, when no reader came within
    // notice_after: with the path. Empty: nothing is said.
    std::function<void(const std::string& path)> notice;
    std::chrono::milliseconds notice_after{1000};
};

// open(2) of `path` with `flags` (for writing: O_WRONLY and any others). A
// FIFO with no reader yet is waited for as above; any other file opens as
// open(2) opens it. The descriptor blocks as open(2) without O_NONBLOCK would
// make it, unless `flags` has O_NONBLOCK. Returns it, or -errno (-ECANCELED:
// the caller gave up waiting).
int open_for_writing(const std::string& path, int flags, const ReaderWait& wait);

// `text` written into the FIFO, device or socket at `path` (never created,
// never replaced): opened as open_for_writing does, and written without
// blocking, so that a reader that stops reading is waited for only as long
// as wait.give_up() allows. 0, or an errno value (ECANCELED: given up).
int write_into(const std::string& path, std::string_view text, const ReaderWait& wait);

// Thrown by the writers of the report and the run page (write_report,
// write_run_page) when the wait for a FIFO's reader was given up: one line
// naming the file.
class ReaderWaitGivenUp : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// The line that says a wait: "waiting for a reader of PATH (a FIFO): start
// one (e.g. cat PATH > FILE), or Ctrl-C to stop waiting".
std::string reader_wait_text(const std::string& path);

}  // namespace ibvcap
