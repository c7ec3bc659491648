// FileAhead (lib/sinks/writer_ahead.hpp): the writer's helper thread that
// creates output files ahead of their first buffer and writes the indexes of
// the files closed at the end of the run.
#include "lib/sinks/writer_ahead.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lib/sinks/writer_lane.hpp"

namespace ibvcap::writer_parts {

int create_output_file(const std::string& path, int flags, bool index, const ReaderWait& wait) {
    const int fd = open_for_writing(path, flags, wait);
    if (fd < 0) {
        return fd;
    }
    if (index) {
        const std::string idx = file_index_path(path);
        struct stat st {};
        if (::lstat(idx.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
            ::unlink(idx.c_str());
        }
    }
    return fd;
}

FileAhead::FileAhead(const Writer::Options& options) : options_(options) {
    flags_ = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (options.direct_io ? O_DIRECT : 0);
    asked_.reserve(options.max_outputs);
    thread_ = std::thread([this] { run(); });
    ::pthread_setname_np(thread_.native_handle(), "ibvcap-files");
}

FileAhead::~FileAhead() {
    finish();
}

void FileAhead::request(Writer::Output& out) {
    out.ahead.helper = this;
    out.ahead.state.store(OutputAhead::kQueued, std::memory_order_release);
    {
        const std::lock_guard lock(mu_);
        creates_.push_back(&out);
        asked_.push_back(&out);
    }
    cv_.notify_one();
}

bool FileAhead::take(Writer::Output& out, int& fd, int& err) {
    OutputAhead& a = out.ahead;
    int s = OutputAhead::kQueued;
    if (a.state.compare_exchange_strong(s, OutputAhead::kTaken, std::memory_order_acq_rel)) {
        return false;  // not begun: the caller's
    }
    while (s == OutputAhead::kCreating) {
        a.state.wait(s, std::memory_order_acquire);
        s = a.state.load(std::memory_order_acquire);
    }
    if (s != OutputAhead::kReady) {
        return false;  // kNone (never asked) or kTaken (the first file taken already)
    }
    fd = a.fd;
    err = a.err;
    a.fd = -1;
    a.state.store(OutputAhead::kTaken, std::memory_order_release);
    return true;
}

void FileAhead::write_index(Writer::Output& out, FileIndex index, std::string path) {
    {
        const std::lock_guard lock(mu_);
        indexes_.push_back(IndexJob{&out, std::move(index), std::move(path)});
    }
    cv_.notify_one();
}

void FileAhead::finish() {
    if (finished_) {
        return;
    }
    finished_ = true;
    {
        const std::lock_guard lock(mu_);
        quit_ = true;
    }
    cv_.notify_one();
    thread_.join();
    for (Writer::Output* out : asked_) {
        if (out->ahead.state.load(std::memory_order_acquire) == OutputAhead::kReady &&
            out->ahead.fd >= 0) {
            ::close(out->ahead.fd);
            out->ahead.fd = -1;
        }
    }
}

// Creations first (a disk thread may be waiting for one), then indexes; at
// quit, whatever is left, then out.
bool FileAhead::wait_created(std::chrono::milliseconds patience) {
    std::unique_lock lock(mu_);
    return idle_.wait_for(lock, patience,
                          [this] { return finished_ || (creates_.empty() && !creating_); });
}

void FileAhead::run() {
    std::unique_lock lock(mu_);
    for (;;) {
        cv_.wait(lock, [this] { return quit_ || !creates_.empty() || !indexes_.empty(); });
        if (!creates_.empty()) {
            Writer::Output* out = creates_.front();
            creates_.pop_front();
            creating_ = true;
            lock.unlock();
            create(*out);
            lock.lock();
            creating_ = false;
            if (creates_.empty()) {
                idle_.notify_all();
            }
        } else if (!indexes_.empty()) {
            IndexJob job = std::move(indexes_.front());
            indexes_.pop_front();
            lock.unlock();
            if (const int err = write_file_index(job.path, job.index)) {
                Writer::Output& out = *job.out;
                if (out.index_failures++ == 0) {
                    out.index_error = fmt::format("cannot write the index {}: {}",
                                                  file_index_path(job.path), std::strerror(err));
                }
            }
            lock.lock();
        } else if (quit_) {
            return;
        }
    }
}

void FileAhead::create(Writer::Output& out) {
    OutputAhead& a = out.ahead;
    int s = OutputAhead::kQueued;
    if (!a.state.compare_exchange_strong(s, OutputAhead::kCreating, std::memory_order_acq_rel)) {
        return;  // a disk thread took it first
    }
    // The name the disk thread opens first (WriterIo::file_path, file 0).
    const std::string path =
        options_.rotation.active() ? Writer::rotated_path(out.path, 0) : out.path;
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        // A FIFO, a device: the disk thread opens it (a FIFO's open waits
        // for its reader).
        a.state.store(OutputAhead::kNone, std::memory_order_release);
        a.state.notify_all();
        return;
    }
    const int fd = create_output_file(path, flags_, options_.index);
    a.fd = fd >= 0 ? fd : -1;
    a.err = fd >= 0 ? 0 : -fd;
    a.state.store(OutputAhead::kReady, std::memory_order_release);
    a.state.notify_all();
}

void start_writeback(int fd, std::uint64_t& kicked, std::uint64_t to) {
    const std::uint64_t end = to / kPage * kPage;
    if (end < kicked + kWriteBehindBytes) {
        return;
    }
    ::sync_file_range(fd, static_cast<off_t>(kicked), static_cast<off_t>(end - kicked),
                      SYNC_FILE_RANGE_WRITE);
    kicked = end;
}

void finish_writeback(int fd, std::uint64_t kicked) {
    ::sync_file_range(fd, static_cast<off_t>(kicked), 0, SYNC_FILE_RANGE_WRITE);  // (0: to the end)
}

}  // namespace ibvcap::writer_parts
