// The disk threads' side of the writer (lib/sinks/writer.hpp): WriterIo
// opens, writes, rotates and closes one output's files from the buffers the
// producer hands over: pwritev straight from held receive slots, O_DIRECT in
// whole aligned pages, device memory copied out in one batch per buffer, and
// a write error cutting the file back to its last whole record. The producer
// side and the disk threads' loop are in writer.cpp.
#include "lib/sinks/writer_io.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>
#include <thread>

#include "lib/core/probes.hpp"

namespace ibvcap {

using writer_parts::kPage;
using writer_parts::page_alloc;
using writer_parts::Piece;

namespace {

// pwritev of every iovec (advancing through partial writes); 0 or an errno.
int pwritev_all(int fd, iovec* iov, std::size_t count, std::uint64_t offset) {
    bool seekable = true;
    for (;;) {
        while (count > 0 && iov->iov_len == 0) {  // nothing to write there
            ++iov;
            --count;
        }
        if (count == 0) {
            return 0;
        }
        const int chunk = static_cast<int>(std::min<std::size_t>(count, IOV_MAX));
        // A FIFO or character device has no offsets (ESPIPE): written in
        // order, as docs/formats.md promises an output of that name is.
        const ssize_t n = seekable ? ::pwritev(fd, iov, chunk, static_cast<off_t>(offset))
                                   : ::writev(fd, iov, chunk);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == ESPIPE && seekable) {
                seekable = false;
                continue;
            }
            return errno;
        }
        if (n == 0) {
            return ENOSPC;
        }
        offset += static_cast<std::uint64_t>(n);
        auto left = static_cast<std::size_t>(n);
        while (count > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            ++iov;
            --count;
        }
        if (left > 0) {
            iov->iov_base = static_cast<std::uint8_t*>(iov->iov_base) + left;
            iov->iov_len -= left;
        }
    }
}

// Write all of `bytes` at `offset`; returns 0 or an errno value.
int pwrite_all(int fd, const std::uint8_t* bytes, std::size_t size, std::uint64_t offset) {
    iovec one{const_cast<std::uint8_t*>(bytes), size};
    return pwritev_all(fd, &one, 1, offset);
}

// O_DIRECT: whole pages from an aligned buffer at an aligned offset. A short
// write (the disk filled, a size limit) leaves an unaligned remainder that
// O_DIRECT refuses, so the next try restarts at the last whole page written
// (rewriting it is harmless); without a page of progress, one more page is
// tried to learn the real error.
int pwrite_direct_all(int fd, const std::uint8_t* bytes, std::size_t size, std::uint64_t offset) {
    while (size > 0) {
        const ssize_t n = ::pwrite(fd, bytes, size, static_cast<off_t>(offset));
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno;
        }
        const std::size_t whole = static_cast<std::size_t>(n) / kPage * kPage;
        if (whole == 0) {
            if (static_cast<std::size_t>(n) == size) {
                return 0;
            }
            const ssize_t again = ::pwrite(fd, bytes, kPage, static_cast<off_t>(offset));
            return again < 0 ? errno : ENOSPC;
        }
        bytes += whole;
        size -= std::min(size, whole);
        offset += whole;
    }
    return 0;
}

bool is_regular(int fd) {
    struct stat st {};
    return fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

namespace writer_parts {

AsyncPwrite::AsyncPwrite() {
    thread_ = std::thread([this] {
        block_sigpipe_here();
        std::unique_lock lock(mu_);
        for (;;) {
            cv_.wait(lock, [this] { return job_ || quit_; });
            if (quit_) {
                return;
            }
            lock.unlock();
            const int err = pwrite_direct_all(fd_, bytes_, size_, offset_);
            lock.lock();
            err_ = err;
            job_ = false;
            done_ = true;
            cv_.notify_all();
        }
    });
    ::pthread_setname_np(thread_.native_handle(), "ibvcap-direct");
}

AsyncPwrite::~AsyncPwrite() {
    {
        const std::lock_guard lock(mu_);
        quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void AsyncPwrite::issue(int fd, const std::uint8_t* bytes, std::size_t size, std::uint64_t offset) {
    {
        const std::lock_guard lock(mu_);
        fd_ = fd;
        bytes_ = bytes;
        size_ = size;
        offset_ = offset;
        done_ = false;
        job_ = true;
    }
    cv_.notify_all();
}

int AsyncPwrite::wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    return err_;
}

}  // namespace writer_parts

WriterIo::~WriterIo() {
    complete_pending();
    lane_.unpin(other_staging_.get());
}

void WriterIo::complete_pending() {
    if (pending_.out == nullptr) {
        return;
    }
    Writer::Output& out = *pending_.out;
    const Pending p = pending_;
    pending_ = Pending{};
    if (const int err = async_->wait()) {
        // The file holds what it held before this write: its offset and
        // checksum go back (also past a buffer of the same output gathered
        // meanwhile, which is then not written), and the file is cut back.
        out.offset = p.offset_before;
        out.checksum.copy_from(pending_checksum_before_);
        fail(out, "write failed", err);
        drop(out, p.records);
        IBVCAP_PROBE3(write_drop, to_string(out.format).data(), p.records,
                      std::uint8_t{probe::output_failed});
        return;
    }
    out.written_records += p.records;
    out.on_disk[out.on_disk_current].packets += p.records;
    IBVCAP_PROBE4(write, to_string(out.format).data(), p.records, p.bytes,
                  out.current_path.c_str());
}

void WriterIo::write_buffer(Writer::Buffer& buffer, Writer::Output& out) {
    bool abandoned = false;  // records of this buffer (so of the file it goes to) not written
    if (options_.abandon != nullptr && options_.abandon->load(std::memory_order_relaxed)) {
        // Asked to stop at once: not written, counted. The file is still
        // created with its header and closed below, so it is valid.
        drop(out, buffer.records);
        if (buffer.records > 0) {
            abandoned = true;
            IBVCAP_PROBE3(write_drop, to_string(out.format).data(), buffer.records,
                          std::uint8_t{probe::abandoned});
        }
        buffer.records = 0;
        buffer.pieces.clear();
        buffer.bytes = 0;
    }
    if (buffer.rotate_before && out.fd >= 0 && !out.failed) {
        close_file(out);
        ++out.file_index;
    }
    if (!out.failed && out.fd < 0) {
        open_file(out);
    }
    out.abandoned = out.abandoned || abandoned;
    if (!out.failed && buffer.records > 0) {
        // (A buffer of empty records writes nothing but still counts them.)
        const std::uint64_t before = out.offset;
        current_ = &buffer;
        const int err = write_pieces(out, buffer.pieces, buffer.bytes, buffer.records);
        current_ = nullptr;
        if (err == kDeferred) {
            // Counted when the write completes (complete_pending).
        } else if (err != 0) {
            fail(out, "write failed", err);
        } else if (!out.failed && !held_intact(buffer)) {
            // Written, but a held frame's bytes went while they were read
            // (the guard gave zeros): not this run's records; cut back.
            out.offset = before;
            out.checksum.copy_from(lane_.checksum_before);
            fail(out, "write failed", EFAULT);
        } else if (!out.failed) {  // (failed: the write behind of its last buffer failed)
            out.written_records += buffer.records;
            out.on_disk[out.on_disk_current].packets += buffer.records;
            IBVCAP_PROBE4(write, to_string(out.format).data(), buffer.records, buffer.bytes,
                          out.current_path.c_str());
        }
    }
    if (out.failed) {
        drop(out, buffer.records);
        if (buffer.records > 0) {
            IBVCAP_PROBE3(write_drop, to_string(out.format).data(), buffer.records,
                          std::uint8_t{probe::output_failed});
        }
    }
    if (buffer.close_after && out.fd >= 0) {
        close_file(out);
    }
}

// An exception escaped write_buffer: the output fails with its cause and
// this buffer's records are counted as not written.
void WriterIo::fail_on_exception(Writer::Buffer& buffer, Writer::Output& out, const char* what) {
    complete_pending();
    if (!out.failed) {
        out.failed = true;
        out.error = fmt::format("write failed: {}", what);
    }
    drop(out, buffer.records);
    if (buffer.records > 0) {
        IBVCAP_PROBE3(write_drop, to_string(out.format).data(), buffer.records,
                      std::uint8_t{probe::thread_failed});
    }
    buffer.records = 0;
    if (buffer.close_after && out.fd >= 0) {
        close_file(out);
    }
}

std::string WriterIo::file_path(const Writer::Output& out) const {
    const Writer::Rotation& r = options_.rotation;
    if (!r.active()) {
        return out.path;
    }
    return Writer::rotated_path(out.path, r.files > 0 ? out.file_index % r.files : out.file_index);
}

bool WriterIo::held_intact(const Writer::Buffer& buffer) const {
    const SlotOwner* asked = nullptr;
    for (const SlotOwner* owner : buffer.owners) {
        if (owner == asked) {
            continue;  // (a buffer's frames mostly share one owner)
        }
        asked = owner;
        for (const Piece& p : buffer.pieces) {
            if (p.device == nullptr && !owner->intact(p.ptr, p.len)) {
                return false;
            }
        }
    }
    return true;
}

void WriterIo::fail(Writer::Output& out, const std::string& what, int err) {
    out.failed = true;
    out.error = fmt::format("{}: {}", what, std::strerror(err));
    if (err == ENOSPC || err == EDQUOT) {
        out.error += " (free space on that filesystem, or write to another)";
    }
    if (err == EFAULT) {
        // A held frame's bytes were gone: the pages of a mapped input file
        // that another program shrank (lib/sources/guarded_map.hpp).
        out.error +=
            " (a record's bytes were gone when it was written: its input file shrank "
            "while it was read)";
    }
    if (err == EINVAL && options_.direct_io) {
        // After O_DIRECT writes have worked on this file, EINVAL means the
        // kernel cut a write short (a full disk or a file size limit) and
        // refused the unaligned rest.
        out.error += out.offset > 0
                         ? " (an O_DIRECT write was cut short: the disk is full or the file "
                           "reached a size limit)"
                         : " (this filesystem may not support O_DIRECT: drop --direct-io)";
    }
    // Cut any partial record: the file holds whole records only. Only a
    // regular file can be cut (a FIFO or device has nothing to cut back).
    if (is_regular(out.fd) && ::ftruncate(out.fd, static_cast<off_t>(out.offset)) != 0) {
        out.error += " (and could not cut the file back to its last whole record)";
    }
}

void WriterIo::open_file(Writer::Output& out) {
    out.current_path = file_path(out);
    int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
    if (options_.direct_io) {
        flags |= O_DIRECT;
    }
    int open_err = 0;
    if (out.files > 0 || out.ahead.helper == nullptr ||
        !out.ahead.helper->take(out, out.fd, open_err)) {
        // A FIFO with no reader: waited for, said once, given up at a stop.
        ReaderWait wait = options_.reader_wait;
        wait.give_up = [this] {
            return (options_.reader_wait.give_up && options_.reader_wait.give_up()) ||
                   (options_.abandon != nullptr &&
                    options_.abandon->load(std::memory_order_relaxed));
        };
        out.fd = writer_parts::create_output_file(out.current_path, flags, options_.index, wait);
        open_err = out.fd < 0 ? -out.fd : 0;
    }
    if (out.fd < 0 && open_err == ECANCELED) {
        out.fd = -1;
        out.failed = true;
        out.stopped_waiting = true;
        out.error =
            "no process opened this FIFO for reading before the run was stopped: nothing was "
            "written to it";
        return;
    }
    if (out.fd < 0) {
        out.fd = -1;
        out.failed = true;
        out.error = fmt::format("cannot create file: {}", std::strerror(open_err));
        if (open_err == EINVAL && options_.direct_io) {
            out.error += " (this filesystem does not support O_DIRECT: drop --direct-io)";
        }
        return;
    }
    ++out.files;
    // (Offline runs only: a live capture keeps the page cache between its
    // writer and a slow disk; writer_ahead.hpp, start_writeback.)
    out.ahead.write_behind = !options_.direct_io && options_.block_when_full && is_regular(out.fd);
    out.ahead.kicked = 0;
    out.offset = 0;
    out.carry_len = 0;
    out.checksum.reset();
    // Only a file that gets an index needs its digest (write_index: regular
    // files, with Options::index).
    out.checksum.enable(options_.index && is_regular(out.fd));
    out.abandoned = false;
    note_file_on_disk(out);
    if (out.preamble.empty()) {
        return;
    }
    const Piece p{out.preamble.data(), out.preamble.size(), nullptr};
    if (const int err = write_pieces(out, {&p, 1}, p.len)) {
        // Without its header the file is not valid in its format: remove
        // it, but only a regular file (never a device node or a FIFO).
        fail(out, "write failed", err);
        const bool regular = is_regular(out.fd);
        ::close(out.fd);
        out.fd = -1;
        if (regular && ::unlink(out.current_path.c_str()) == 0) {
            out.error += " (file removed: its header could not be written)";
            out.on_disk.erase(out.on_disk.begin() +
                              static_cast<std::ptrdiff_t>(out.on_disk_current));
            out.on_disk_current = 0;
        }
    }
}

// The file just opened, in the list of files on disk. In a -W ring, file
// index i reuses name i mod W: the records that name held are overwritten.
// (An entry is added per file made until the ring is full, not per record.)
void WriterIo::note_file_on_disk(Writer::Output& out) {
    const std::uint32_t ring = options_.rotation.files;
    if (ring > 0 && out.on_disk.size() >= ring) {
        // The ring's index runs one by one: the name reused is the oldest's.
        out.overwritten += out.on_disk.front().packets;
        std::rotate(out.on_disk.begin(), out.on_disk.begin() + 1, out.on_disk.end());
        out.on_disk.back() = OutputFile{out.current_path, 0, 0};
    } else {
        out.on_disk.push_back(OutputFile{out.current_path, 0, 0});
    }
    out.on_disk_current = out.on_disk.size() - 1;
}

void WriterIo::close_file(Writer::Output& out) {
    complete_pending();
    write_trailer(out);
    // O_DIRECT wrote the last page padded: cut the file to its length.
    const bool regular = is_regular(out.fd);
    if (options_.direct_io && !out.failed && regular &&
        ::ftruncate(out.fd, static_cast<off_t>(out.offset)) != 0) {
        fail(out, "cannot set the file's final length", errno);
    }
    if (out.ahead.write_behind && !out.failed && regular) {
        writer_parts::finish_writeback(out.fd, out.ahead.kicked);
    }
    if (::close(out.fd) != 0 && !out.failed) {
        out.failed = true;
        out.error = fmt::format("close failed: {}", std::strerror(errno));
    }
    out.fd = -1;
    if (!out.on_disk.empty()) {
        out.on_disk[out.on_disk_current].bytes = out.offset;
    }
    if (options_.index && regular) {
        write_index(out);
    }
    out.closed_bytes += out.offset;
    out.offset = 0;
}

// The output's last bytes in this file (Writer::Trailer), written after its
// last whole record; a failed write cuts them off again (fail()).
void WriterIo::write_trailer(Writer::Output& out) {
    if (!out.trailer || out.failed || out.on_disk.empty()) {
        return;
    }
    std::vector<std::uint8_t> bytes;
    try {
        bytes = out.trailer({out.on_disk[out.on_disk_current].packets, out.written_records});
    } catch (const std::exception& e) {
        out.failed = true;
        out.error = fmt::format("cannot make the file's last block: {}", e.what());
        return;
    }
    if (bytes.empty()) {
        return;
    }
    const Piece p{bytes.data(), bytes.size(), nullptr};
    if (const int err = write_pieces(out, {&p, 1}, p.len)) {
        fail(out, "write failed", err);
    }
}

void Writer::set_ordered(OutputId output, std::uint32_t window) {
    output->ordered_window = window;  // (read by the disk thread at each close)
}

// The sidecar index of the file just closed: what it holds now (a write
// error cut it back to its last whole record, whose bytes the checksum
// covers: write_pieces).
void WriterIo::write_index(Writer::Output& out) {
    FileIndex idx;
    const auto slash = out.current_path.find_last_of('/');
    idx.file = slash == std::string::npos ? out.current_path : out.current_path.substr(slash + 1);
    idx.format = std::string(to_string(out.format));
    idx.version = IBVCAP_VERSION;
    idx.run = options_.run_id;
    idx.group = out.group;
    idx.antenna = out.antenna;
    idx.bytes = out.offset;
    idx.frames = out.on_disk.empty() ? 0 : out.on_disk[out.on_disk_current].packets;
    idx.checksum = out.checksum.digest();
    idx.ordered_window = out.ordered_window;
    if (out.failed) {
        idx.stopped = out.error;
    } else if (out.abandoned) {
        idx.stopped = "abandoned: records still queued were not written (a second Ctrl-C)";
    }
    if (out.ahead.helper != nullptr && !options_.rotation.active()) {
        // The output's only file: its index is the helper's to write, while
        // this thread goes on with the other outputs (writer_ahead.hpp).
        out.ahead.helper->write_index(out, std::move(idx), out.current_path);
        return;
    }
    if (const int err = write_file_index(out.current_path, idx)) {
        if (out.index_failures++ == 0) {
            out.index_error = fmt::format("cannot write the index {}: {}",
                                          file_index_path(out.current_path), std::strerror(err));
        }
    }
}

// Copies every device piece into `dst` positions given by `place` in one
// batch per device; host pieces are left to the caller.
template <class Place>
void WriterIo::copy_device_pieces(std::span<const Piece> pieces, Place place) {
    for (std::size_t i = 0; i < pieces.size();) {
        const DeviceMemory* device = pieces[i].device;
        if (device == nullptr) {
            ++i;
            continue;
        }
        lane_.copies.clear();
        for (; i < pieces.size(); ++i) {
            if (pieces[i].device == nullptr) {
                continue;
            }
            if (pieces[i].device != device) {
                break;
            }
            lane_.copies.push_back({place(i), pieces[i].ptr, pieces[i].len});
        }
        // Every piece was completed by the NIC before it reached this
        // buffer: one flush makes them all visible (DeviceMemory).
        lane_.pin_staging(*device);
        device->flush_nic_writes();
        device->copy_to_host(lane_.copies);
    }
    // Every device piece is in staging now and nothing reads the slots
    // again: when the buffer held no host piece, its slots go back before
    // the disk write (gpu-cuda-2.md N3), not ~2 ms later.
    if (current_ != nullptr && !current_->holds_host && release_holds_) {
        release_holds_(*current_);
    }
}

// Appends `pieces` (`bytes` in all) to the current file at out.offset;
// 0 or an errno. On success out.offset has moved past them.
// The file's checksum takes the bytes just before they are written (after
// any device copy), and is put back when the write fails.
int WriterIo::write_pieces(Writer::Output& out, std::span<const Piece> pieces, std::size_t bytes,
                           std::uint64_t records) {
    if (records == 0 || !options_.direct_io) {
        complete_pending();  // (a preamble, a trailer: in order, after it)
    }
    ensure_staging(bytes);
    lane_.checksum_before.copy_from(out.checksum);
    const int err = options_.direct_io ? write_direct(out, pieces, bytes, records)
                                       : write_buffered(out, pieces, bytes);
    if (err != 0 && err != kDeferred && !out.failed) {
        out.checksum.copy_from(lane_.checksum_before);
    }
    if (err == 0 && records > 0 && out.ahead.write_behind) {
        writer_parts::start_writeback(out.fd, out.ahead.kicked, out.offset);
    }
    return err;
}

void WriterIo::ensure_staging(std::size_t bytes) {
    const std::size_t need = bytes + 2 * kPage;
    if (lane_.staging_bytes < need) {
        lane_.unpin(lane_.staging.get());
        lane_.staging.reset(page_alloc(need));
        lane_.staging_bytes = need;
    }
}

int WriterIo::write_buffered(Writer::Output& out, std::span<const Piece> pieces,
                             std::size_t bytes) {
    if (pieces.size() == 1 && pieces[0].device == nullptr) {
        out.checksum.update(pieces[0].ptr, pieces[0].len);
        if (const int err = pwrite_all(out.fd, pieces[0].ptr, pieces[0].len, out.offset)) {
            return err;
        }
        out.offset += bytes;
        return 0;
    }
    // Device pieces go through the bounce buffer (one batch); the rest is
    // written in place by the kernel.
    std::size_t bounce = 0;
    lane_.iov.resize(pieces.size());
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        if (pieces[i].device != nullptr) {
            lane_.iov[i] = {lane_.staging.get() + bounce, pieces[i].len};
            bounce += pieces[i].len;
        } else {
            lane_.iov[i] = {const_cast<std::uint8_t*>(pieces[i].ptr), pieces[i].len};
        }
    }
    if (bounce > 0) {
        copy_device_pieces(pieces, [&](std::size_t i) { return lane_.iov[i].iov_base; });
    }
    for (const iovec& v : lane_.iov) {  // before pwritev_all moves them
        out.checksum.update(v.iov_base, v.iov_len);
    }
    if (const int err = pwritev_all(out.fd, lane_.iov.data(), lane_.iov.size(), out.offset)) {
        return err;
    }
    out.offset += bytes;
    return 0;
}

int WriterIo::write_direct(Writer::Output& out, std::span<const Piece> pieces, std::size_t bytes,
                           std::uint64_t records) {
    if (!out.carry) {
        out.carry.reset(page_alloc(kPage));
    }
    std::uint8_t* staging = lane_.staging.get();
    const std::uint64_t base = out.offset - out.carry_len;  // page-aligned
    std::memcpy(staging, out.carry.get(), out.carry_len);
    std::size_t pos = out.carry_len;
    lane_.iov.resize(pieces.size());  // reused as the positions of device pieces
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        lane_.iov[i].iov_base = staging + pos;
        if (pieces[i].device == nullptr) {
            std::memcpy(staging + pos, pieces[i].ptr, pieces[i].len);
        }
        pos += pieces[i].len;
    }
    copy_device_pieces(pieces, [&](std::size_t i) { return lane_.iov[i].iov_base; });
    out.checksum.update(staging + out.carry_len, pos - out.carry_len);
    const std::size_t padded = (pos + kPage - 1) / kPage * kPage;
    std::memset(staging + pos, 0, padded - pos);
    // Written behind: a buffer's records (the two staging buffers take
    // turns; each is pinned with the device at its first device copy, so
    // GPU payload keeps write-behind too).
    const bool behind = records > 0;
    if (!behind) {
        complete_pending();
        if (out.failed) {
            return 0;  // its last buffer's write failed: this one is not written
        }
        if (const int err = pwrite_direct_all(out.fd, staging, padded, base)) {
            return err;
        }
    }
    const std::uint64_t offset_before = out.offset;
    out.offset += bytes;
    const std::uint64_t new_base = out.offset / kPage * kPage;
    out.carry_len = static_cast<std::size_t>(out.offset - new_base);
    std::memcpy(out.carry.get(), staging + (new_base - base), out.carry_len);
    if (!behind) {
        return 0;
    }
    // The last write first (a failure of this output's last buffer fails
    // this one too: complete_pending put its offset and checksum back).
    complete_pending();
    if (out.failed) {
        return 0;  // counted as not written by write_buffer
    }
    if (!async_) {
        async_ = std::make_unique<writer_parts::AsyncPwrite>();
    }
    pending_ = Pending{&out, records, bytes, offset_before};
    pending_checksum_before_.copy_from(lane_.checksum_before);
    async_->issue(out.fd, staging, padded, base);
    // The next gather goes into the other staging buffer.
    std::swap(lane_.staging, other_staging_);
    std::swap(lane_.staging_bytes, other_staging_bytes_);
    return kDeferred;
}

}  // namespace ibvcap
