// The writer's file work that need not wait for a buffer or hold up a disk
// thread (lib/sinks/writer.hpp), and the buffered writes' write-behind
// (start_writeback, at the end). FileAhead, one helper thread per writer,
// creates each output's first file as soon as the output is added (not when
// its first buffer reaches the disk thread) and writes the sidecar index
// (lib/sinks/file_index.hpp) of each file closed at the end of the run, while
// the disk threads go on with the other outputs. With thousands of outputs,
// two inodes each, the disk thread otherwise spent the run's start and end
// creating files, most of all on an ext4 without a journal shortly after
// many files were deleted (docs/performance.md, "Files").
//
// A disk thread that reaches an output's first file before the helper does
// takes the job back and creates the file itself, so it never waits behind
// the helper's queue; one that finds the helper creating it waits for that
// one file. Only regular files (or names not yet on disk) are made ahead: a
// FIFO or a device is opened by the disk thread, as before (opening a FIFO
// waits for its reader). Only the first file of an output is made ahead
// (rotation's later files would otherwise appear, or overwrite the -W ring's
// oldest, before their time), and only the indexes of outputs that do not
// rotate are written by the helper (a -W ring reuses names: the disk thread
// removes and writes them in order itself).
//
// Include only from lib/sinks/writer*.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lib/sinks/file_index.hpp"
#include "lib/sinks/writer.hpp"

namespace ibvcap {

namespace writer_parts {

// Creates `path` for writing with `flags` (O_CREAT | O_TRUNC among them) and,
// with `index`, removes the index a file of that name had (a -W ring reuses a
// name; before the run, claim_outputs kept or removed an earlier run's
// indexes: lib/run/common.hpp). A FIFO's reader is waited for as `wait`
// says (lib/core/fifo.hpp). The descriptor, or -errno (-ECANCELED: the wait for a
// reader was given up).
int create_output_file(const std::string& path, int flags, bool index, const ReaderWait& wait = {});

class FileAhead;

// An output's share of FileAhead (a member of Writer::Output).
struct OutputAhead {
    enum State : int { kNone, kQueued, kCreating, kReady, kTaken };
    std::atomic<int> state{kNone};
    int fd = -1;  // kReady: the file made ahead, or -1 and `err`
    int err = 0;
    FileAhead* helper = nullptr;  // set by FileAhead::request
    // The current file, when it is a regular one written without O_DIRECT
    // (start_writeback), and its bytes whose writeback was started.
    bool write_behind = false;
    std::uint64_t kicked = 0;
};

class FileAhead {
  public:
    explicit FileAhead(const Writer::Options& options);
    ~FileAhead();  // finish()
    FileAhead(const FileAhead&) = delete;
    FileAhead& operator=(const FileAhead&) = delete;

    // Producer (Writer::add_output): make `out`'s first file ahead. Does not
    // wait for it.
    void request(Writer::Output& out);
    // Producer, before the source starts (Writer::prepare): waits until the
    // files asked for so far are made, at most `patience`; whether they are.
    bool wait_created(std::chrono::milliseconds patience);
    // Disk thread, opening `out`'s first file: true when the helper made it
    // (`fd`, or -1 with `err`, an errno); false when it is the caller's to
    // create (not asked for, or not begun: the helper will skip it).
    bool take(Writer::Output& out, int& fd, int& err);
    // Disk thread, after closing a file of an output that does not rotate:
    // the helper writes its index; a failure is counted in the output's
    // index_failures and index_error, which are the helper's from then on.
    void write_index(Writer::Output& out, FileIndex index, std::string path);
    // Every job done and the thread joined (after the disk threads: the
    // outputs' index counts are then final). Files made ahead that no disk
    // thread took are closed. Idempotent.
    void finish();

  private:
    struct IndexJob {
        Writer::Output* out = nullptr;
        FileIndex index;
        std::string path;
    };
    void run();
    void create(Writer::Output& out);

    const Writer::Options& options_;
    int flags_ = 0;
    std::mutex mu_;
    std::condition_variable cv_;
    std::condition_variable idle_;  // the creations asked for are done
    bool creating_ = false;
    std::deque<Writer::Output*> creates_;  // in the order the outputs were added
    std::deque<IndexJob> indexes_;
    std::vector<Writer::Output*> asked_;  // every output asked for (finish closes the untaken)
    bool quit_ = false;
    bool finished_ = false;
    std::thread thread_;
};

// Buffered writes' write-behind: `fd`, a regular file, holds `to` bytes, of
// which the first `kicked` are on their way to the disk. The writeback of the
// whole pages after them starts now (sync_file_range(SYNC_FILE_RANGE_WRITE),
// which does not wait for it) instead of when the kernel's dirty thresholds
// or timers say so, and `kicked` moves past them (the last, partial page is
// started with the next buffer, so no page is written twice). The disk is
// then busy while the run is, instead of after it (a sync, or the close of
// a live capture), and pages leave the dirty state as they come rather than
// all at once at a threshold (balance_dirty_pages throttles writers by dirty
// and writeback pages together). Waiting for older ranges and dropping them
// from the page cache (SYNC_FILE_RANGE_WAIT_AFTER, POSIX_FADV_DONTNEED) was
// measured too and made `read` slower (docs/performance.md, "Files").
// Offline runs only (Options::block_when_full): starting writeback can wait
// for the disk's queue, which moves a slow disk's backlog from the page cache
// into the writer's buffers; a live capture keeps the page cache as a second
// buffer in front of a stalled disk, as before.
// Started only once kWriteBehindBytes wait (one buffer of the default
// size): each call costs a system call and one request to the disk, so small
// buffers (many outputs share the memory bound) are gathered into one call,
// and a small file is left to the kernel's writeback; at 2,400 files of
// 68 KiB buffers a call per buffer took an eighth of the run's CPU.
// Errors are ignored: it only advises, a write error is pwritev's.
inline constexpr std::uint64_t kWriteBehindBytes = std::uint64_t{512} << 10;
void start_writeback(int fd, std::uint64_t& kicked, std::uint64_t to);
// At a file's close: the writeback of what is left after `kicked` starts,
// the last partial page included.
void finish_writeback(int fd, std::uint64_t kicked);

}  // namespace writer_parts

}  // namespace ibvcap
