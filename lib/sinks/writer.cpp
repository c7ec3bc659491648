#include "lib/sinks/writer.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <system_error>

namespace ibvcap {

namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kPressureFlushHolds =
    32;  // O_DIRECT alignment (covers 512-byte sector devices)

std::uint8_t* page_alloc(std::size_t bytes) {
    // aligned_alloc needs a size that is a multiple of the alignment.
    auto* p =
        static_cast<std::uint8_t*>(std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage));
    if (p == nullptr) {
        throw std::bad_alloc();
    }
    return p;
}

struct FreeDeleter {
    void operator()(std::uint8_t* p) const { std::free(p); }
};
using PageBuffer = std::unique_ptr<std::uint8_t[], FreeDeleter>;

// One piece of a record: bytes in the buffer itself, in host memory the
// writer holds (a receive slot), or in device memory (read via `device`).
struct Piece {
    const std::uint8_t* ptr = nullptr;
    std::size_t len = 0;
    const DeviceMemory* device = nullptr;
};

// pwritev of every iovec (advancing through partial writes); 0 or an errno.
int pwritev_all(int fd, iovec* iov, std::size_t count, std::uint64_t offset) {
    for (;;) {
        while (count > 0 && iov->iov_len == 0) {  // nothing to write there
            ++iov;
            --count;
        }
        if (count == 0) {
            return 0;
        }
        const int chunk = static_cast<int>(std::min<std::size_t>(count, IOV_MAX));
        const ssize_t n = ::pwritev(fd, iov, chunk, static_cast<off_t>(offset));
        if (n < 0) {
            if (errno == EINTR) {
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

struct Writer::Buffer {
    PageBuffer data;  // page-aligned: also an O_DIRECT source
    std::size_t capacity = 0;
    std::size_t used = 0;   // bytes copied into `data`
    std::size_t bytes = 0;  // record bytes in all pieces (copied and held)
    std::uint64_t records = 0;
    Output* output = nullptr;  // nullptr: the end-of-stream marker
    bool close_after = false;
    bool rotate_before = false;
    std::vector<Piece> pieces;
    // Held frames: released (grouped by owner) once the buffer is written.
    std::vector<SlotOwner*> owners;
    std::vector<std::uint64_t> tokens;

    Buffer(std::size_t bytes_, std::size_t max_holds) : data(page_alloc(bytes_)), capacity(bytes_) {
        pieces.reserve(max_holds * 3 + 8);
        owners.reserve(max_holds);
        tokens.reserve(max_holds);
    }
    void reset() {
        used = 0;
        bytes = 0;
        records = 0;
        close_after = false;
        rotate_before = false;
        pieces.clear();
        owners.clear();
        tokens.clear();
    }
    bool room(std::size_t record_bytes, std::size_t record_pieces, std::size_t max_holds) const {
        return bytes + record_bytes <= capacity &&
               pieces.size() + record_pieces <= pieces.capacity() && tokens.size() < max_holds;
    }
    void append_copy(Bytes b) {
        if (b.empty()) {
            return;
        }
        std::uint8_t* dst = data.get() + used;
        std::memcpy(dst, b.data(), b.size());
        if (!pieces.empty() && pieces.back().device == nullptr &&
            pieces.back().ptr + pieces.back().len == dst) {
            pieces.back().len += b.size();  // contiguous with the last copied bytes
        } else {
            pieces.push_back({dst, b.size(), nullptr});
        }
        used += b.size();
        bytes += b.size();
    }
    void append_held(Bytes b, const DeviceMemory* device) {
        if (!b.empty()) {
            pieces.push_back({b.data(), b.size(), device});
            bytes += b.size();
        }
    }
};

struct Writer::Lane {
    std::vector<std::unique_ptr<Buffer>> pool;
    moodycamel::BlockingReaderWriterQueue<Buffer*> full;
    moodycamel::BlockingReaderWriterQueue<Buffer*> free;
    std::thread thread;
    // The disk thread's own: O_DIRECT gathering and the device bounce.
    PageBuffer staging;
    std::size_t staging_bytes = 0;
    std::vector<iovec> iov;
    std::vector<DeviceMemory::Copy> copies;
    // Device memories `staging` is pinned with (DeviceMemory::pin_host_buffer),
    // so device copies land in it by DMA; unpinned before it is freed.
    std::vector<const DeviceMemory*> pinned_by;

    explicit Lane(std::size_t queue_capacity) : full(queue_capacity), free(queue_capacity) {}
    ~Lane() { unpin_staging(); }
    Lane(const Lane&) = delete;
    Lane& operator=(const Lane&) = delete;

    void pin_staging(const DeviceMemory& device) {
        if (staging && std::find(pinned_by.begin(), pinned_by.end(), &device) == pinned_by.end()) {
            device.pin_host_buffer(staging.get(), staging_bytes);  // best effort
            pinned_by.push_back(&device);
        }
    }
    void unpin_staging() {
        for (const DeviceMemory* d : pinned_by) {
            d->unpin_host_buffer(staging.get());
        }
        pinned_by.clear();
    }
};

struct Writer::Output {
    // Set by the producer before any buffer for it is queued.
    OutputFormat format{};
    std::string path;
    std::string group;
    std::string antenna;
    std::vector<std::uint8_t> preamble;
    Lane* lane = nullptr;
    // Producer side.
    Buffer* current = nullptr;
    std::uint64_t dropped_by_producer = 0;
    std::uint64_t file_bytes = 0;  // rotation: bytes the current file will hold
    std::uint64_t file_records = 0;
    std::uint64_t file_period = 0;
    bool rotate_pending = false;
    bool in_holding = false;  // listed in Writer::holding_
    // Disk-thread side; read by the producer only after the thread is joined.
    int fd = -1;
    bool failed = false;
    std::uint64_t offset = 0;        // bytes in the current file, all whole records
    std::uint64_t closed_bytes = 0;  // bytes in files already closed
    std::uint64_t written_records = 0;
    std::uint64_t dropped_by_writer = 0;
    std::uint64_t file_index = 0;
    std::uint64_t files = 0;  // files opened
    std::string current_path;
    std::string error;
    PageBuffer carry;  // O_DIRECT: the bytes of the last, partial page
    std::size_t carry_len = 0;
};

// The disk thread's work on one output; a friend in all but name.
class WriterIo {
  public:
    WriterIo(const Writer::Options& options, Writer::Lane& lane) : options_(options), lane_(lane) {}

    void write_buffer(Writer::Buffer& buffer, Writer::Output& out) {
        if (options_.abandon != nullptr && options_.abandon->load(std::memory_order_relaxed)) {
            // Asked to stop at once: not written, counted. The file is still
            // created with its header and closed below, so it is valid.
            out.dropped_by_writer += buffer.records;
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
        if (!out.failed && buffer.records > 0) {
            // (A buffer of empty records writes nothing but still counts them.)
            if (const int err = write_pieces(out, buffer.pieces, buffer.bytes)) {
                fail(out, "write failed", err);
            } else {
                out.written_records += buffer.records;
            }
        }
        if (out.failed) {
            out.dropped_by_writer += buffer.records;
        }
        if (buffer.close_after && out.fd >= 0) {
            close_file(out);
        }
    }

    // An exception escaped write_buffer: the output fails with its cause and
    // this buffer's records are counted as not written.
    void fail_on_exception(Writer::Buffer& buffer, Writer::Output& out, const char* what) {
        if (!out.failed) {
            out.failed = true;
            out.error = fmt::format("write failed: {}", what);
        }
        out.dropped_by_writer += buffer.records;
        buffer.records = 0;
        if (buffer.close_after && out.fd >= 0) {
            close_file(out);
        }
    }

  private:
    std::string file_path(const Writer::Output& out) const {
        const Writer::Rotation& r = options_.rotation;
        if (!r.active()) {
            return out.path;
        }
        return Writer::rotated_path(out.path,
                                    r.files > 0 ? out.file_index % r.files : out.file_index);
    }

    void fail(Writer::Output& out, const std::string& what, int err) {
        out.failed = true;
        out.error = fmt::format("{}: {}", what, std::strerror(err));
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

    void open_file(Writer::Output& out) {
        out.current_path = file_path(out);
        int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
        if (options_.direct_io) {
            flags |= O_DIRECT;
        }
        out.fd = ::open(out.current_path.c_str(), flags, 0644);
        if (out.fd < 0) {
            out.failed = true;
            out.error = fmt::format("cannot create file: {}", std::strerror(errno));
            if (errno == EINVAL && options_.direct_io) {
                out.error += " (this filesystem does not support O_DIRECT: drop --direct-io)";
            }
            return;
        }
        ++out.files;
        out.offset = 0;
        out.carry_len = 0;
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
            }
        }
    }

    void close_file(Writer::Output& out) {
        // O_DIRECT wrote the last page padded: cut the file to its length.
        if (options_.direct_io && !out.failed && is_regular(out.fd) &&
            ::ftruncate(out.fd, static_cast<off_t>(out.offset)) != 0) {
            fail(out, "cannot set the file's final length", errno);
        }
        if (::close(out.fd) != 0 && !out.failed) {
            out.failed = true;
            out.error = fmt::format("close failed: {}", std::strerror(errno));
        }
        out.fd = -1;
        out.closed_bytes += out.offset;
        out.offset = 0;
    }

    // Copies every device piece into `dst` positions given by `place` in one
    // batch per device; host pieces are left to the caller.
    template <class Place>
    void copy_device_pieces(std::span<const Piece> pieces, Place place) {
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
    }

    // Appends `pieces` (`bytes` in all) to the current file at out.offset;
    // 0 or an errno. On success out.offset has moved past them.
    int write_pieces(Writer::Output& out, std::span<const Piece> pieces, std::size_t bytes) {
        ensure_staging(bytes);
        return options_.direct_io ? write_direct(out, pieces, bytes)
                                  : write_buffered(out, pieces, bytes);
    }

    void ensure_staging(std::size_t bytes) {
        const std::size_t need = bytes + 2 * kPage;
        if (lane_.staging_bytes < need) {
            lane_.unpin_staging();
            lane_.staging.reset(page_alloc(need));
            lane_.staging_bytes = need;
        }
    }

    int write_buffered(Writer::Output& out, std::span<const Piece> pieces, std::size_t bytes) {
        if (pieces.size() == 1 && pieces[0].device == nullptr) {
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
        if (const int err = pwritev_all(out.fd, lane_.iov.data(), lane_.iov.size(), out.offset)) {
            return err;
        }
        out.offset += bytes;
        return 0;
    }

    int write_direct(Writer::Output& out, std::span<const Piece> pieces, std::size_t bytes) {
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
        const std::size_t padded = (pos + kPage - 1) / kPage * kPage;
        std::memset(staging + pos, 0, padded - pos);
        if (const int err = pwrite_direct_all(out.fd, staging, padded, base)) {
            return err;
        }
        out.offset += bytes;
        const std::uint64_t new_base = out.offset / kPage * kPage;
        out.carry_len = static_cast<std::size_t>(out.offset - new_base);
        std::memcpy(out.carry.get(), staging + (new_base - base), out.carry_len);
        return 0;
    }

    const Writer::Options& options_;
    Writer::Lane& lane_;
};

std::string Writer::rotated_path(const std::string& path, std::uint64_t index) {
    const auto slash = path.find_last_of('/');
    const auto dot = path.find_last_of('.');
    if (dot == std::string::npos || (slash != std::string::npos && dot < slash) ||
        dot == (slash == std::string::npos ? 0 : slash + 1)) {
        return fmt::format("{}.{:06}", path, index);
    }
    return fmt::format("{}.{:06}{}", path.substr(0, dot), index, path.substr(dot));
}

Writer::Writer(const Options& options) : options_(options) {
    if (options_.threads == 0) {
        options_.threads = 1;
    }
    if (options_.buffer_bytes == 0) {
        options_.buffer_bytes = options_.direct_io ? std::size_t{4} << 20 : std::size_t{512} << 10;
    }
    if (options_.buffers == 0) {
        options_.buffers = std::max<std::size_t>((std::size_t{256} << 20) / options_.buffer_bytes,
                                                 2 * options_.threads);
    }
    if (options_.buffers < 2 * options_.threads ||
        options_.buffer_bytes < 65536 + kPcapRecordHeaderBytes) {
        throw std::invalid_argument("writer needs at least 2 buffers of 64 KiB per disk thread");
    }
    if (options_.max_pieces == 0) {
        options_.max_pieces = 1;
    }
    const std::size_t per_lane = options_.buffers / options_.threads;
    for (unsigned t = 0; t < options_.threads; ++t) {
        auto lane = std::make_unique<Lane>(per_lane + options_.max_outputs + 1);
        lane->pool.reserve(per_lane + options_.max_outputs);
        for (std::size_t i = 0; i < per_lane; ++i) {
            lane->pool.push_back(
                std::make_unique<Buffer>(options_.buffer_bytes, options_.max_pieces));
            lane->free.enqueue(lane->pool.back().get());
        }
        lanes_.push_back(std::move(lane));
    }
    for (unsigned t = 0; t < options_.threads; ++t) {
        Lane* lane = lanes_[t].get();
        lane->thread = std::thread([this, lane, t] {
            WriterIo io(options_, *lane);
            for (;;) {
                Buffer* buffer = nullptr;
                lane->full.wait_dequeue(buffer);
                if (buffer == nullptr) {
                    return;
                }
                try {
                    io.write_buffer(*buffer, *buffer->output);
                } catch (const std::exception& e) {
                    // Nothing of this buffer reached the file (device copies
                    // come before the write): the file keeps whole records.
                    io.fail_on_exception(*buffer, *buffer->output, e.what());
                    if (options_.faults != nullptr) {
                        options_.faults->report(fmt::format("disk thread {}", t), e.what());
                    }
                }
                // Written, failed or abandoned: the held frames go back now.
                for (std::size_t i = 0; i < buffer->tokens.size();) {
                    std::size_t j = i + 1;
                    while (j < buffer->tokens.size() && buffer->owners[j] == buffer->owners[i]) {
                        ++j;
                    }
                    buffer->owners[i]->release(
                        std::span<const std::uint64_t>(buffer->tokens.data() + i, j - i));
                    i = j;
                }
                held_.fetch_sub(buffer->tokens.size(), std::memory_order_relaxed);
                backlog_.fetch_sub(buffer->bytes, std::memory_order_relaxed);
                buffer->reset();
                lane->free.enqueue(buffer);
            }
        });
    }
    if (!options_.cpus.empty()) {
        for (unsigned t = 0; t < options_.threads; ++t) {
            const int cpu = options_.cpus[t % options_.cpus.size()];
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(static_cast<unsigned>(cpu), &set);
            if (const int err =
                    pthread_setaffinity_np(lanes_[t]->thread.native_handle(), sizeof(set), &set)) {
                finish();
                throw std::runtime_error(
                    fmt::format("cannot pin a disk thread to cpu {}: {} (see --disk-cpu)", cpu,
                                std::strerror(err)));
            }
        }
    }
}

Writer::~Writer() {
    if (!finished_) {
        finish();
    }
}

Writer::OutputId Writer::add_output(OutputFormat format, std::string path, std::string group,
                                    std::string antenna, Bytes preamble) {
    if (outputs_.size() >= options_.max_outputs) {
        throw std::length_error("too many output files (raise the writer's max_outputs)");
    }
    Lane& lane = *lanes_[outputs_.size() % lanes_.size()];
    lane.pool.push_back(std::make_unique<Buffer>(options_.buffer_bytes, options_.max_pieces));
    lane.free.enqueue(lane.pool.back().get());
    holding_.reserve(options_.max_outputs);
    Output& out = outputs_.emplace_back();
    out.format = format;
    out.path = std::move(path);
    out.group = std::move(group);
    out.antenna = std::move(antenna);
    out.preamble.assign(preamble.begin(), preamble.end());
    out.lane = &lane;
    out.file_bytes = out.preamble.size();
    return &out;
}

Writer::Buffer* Writer::take_free_buffer(Lane& lane) {
    Buffer* buffer = nullptr;
    if (lane.free.try_dequeue(buffer)) {
        return buffer;
    }
    if (!options_.block_when_full) {
        return nullptr;
    }
    lane.free.wait_dequeue(buffer);
    return buffer;
}

void Writer::submit(Output& out) {
    Buffer* buffer = out.current;
    out.current = nullptr;
    if (out.in_holding) {
        // Rare (a buffer filled while holding frames): keep the list exact.
        out.in_holding = false;
        holding_.erase(std::find(holding_.begin(), holding_.end(), &out));
    }
    buffer->output = &out;
    backlog_.fetch_add(buffer->bytes, std::memory_order_relaxed);
    out.lane->full.enqueue(buffer);  // capacity covers the whole pool: never allocates
}

bool Writer::begin_record(Output& out, std::size_t bytes, std::size_t pieces,
                          std::uint64_t timestamp_ns) {
    const Rotation& r = options_.rotation;
    if (r.seconds > 0 || r.bytes > 0) {
        const std::uint64_t period =
            r.seconds > 0 ? timestamp_ns / (r.seconds * 1'000'000'000ull) : 0;
        if (out.file_records > 0 && ((r.seconds > 0 && period != out.file_period) ||
                                     (r.bytes > 0 && out.file_bytes + bytes > r.bytes))) {
            out.rotate_pending = true;
            if (out.current != nullptr) {
                submit(out);
            }
            out.file_bytes = out.preamble.size();
            out.file_records = 0;
        }
        if (out.file_records == 0) {
            out.file_period = period;
        }
    }
    if (out.current != nullptr && !out.current->room(bytes, pieces, options_.max_pieces)) {
        submit(out);
    }
    if (out.current == nullptr) {
        Buffer* b = take_free_buffer(*out.lane);
        if (b == nullptr || bytes > b->capacity) {
            if (b != nullptr) {
                out.lane->free.enqueue(b);
            }
            ++out.dropped_by_producer;
            return false;
        }
        b->reset();
        b->rotate_before = out.rotate_pending;
        out.rotate_pending = false;
        out.current = b;
    }
    out.file_bytes += bytes;
    ++out.file_records;
    ++out.current->records;
    return true;
}

void Writer::write(OutputId output, std::span<const Bytes> pieces, std::uint64_t timestamp_ns) {
    std::size_t bytes = 0;
    for (const auto& p : pieces) {
        bytes += p.size();
    }
    if (!begin_record(*output, bytes, 1, timestamp_ns)) {
        return;
    }
    Buffer& b = *output->current;
    for (const auto& p : pieces) {
        b.append_copy(p);
    }
}

void Writer::write_frame(OutputId output, Bytes prefix, const Frame& frame, std::size_t offset,
                         std::size_t len) {
    Output& out = *output;
    Bytes first;
    Bytes second;
    frame.slice(offset, len, first, second);
    const DeviceMemory* first_device = offset >= frame.head.size() ? frame.tail_device : nullptr;
    const DeviceMemory* second_device = frame.tail_device;
    const bool touches_device = (first_device != nullptr && !first.empty()) ||
                                (second_device != nullptr && !second.empty());
    if (touches_device && frame.lease != nullptr && !holding_.empty() &&
        (!frame.lease->allowed || frame.lease->pressure)) {
        // GPU payload must be held, and the source is short of posted slots:
        // send the partly filled buffers that hold frames, so they are
        // written and released (under mere pressure only those holding a
        // fair number, so that buffers stay large). Host payload needs no
        // such haste: when it cannot be held it is copied.
        flush_held(frame.lease->allowed ? kPressureFlushHolds : 1);
    }
    const bool can_hold = frame.lease != nullptr && frame.lease->allowed;
    if (touches_device && !can_hold) {
        // GPU memory is never read on the poll thread: without a hold the
        // record cannot be written. Counted, like a full queue.
        ++out.dropped_by_producer;
        return;
    }
    const bool hold = can_hold && (touches_device || len >= options_.min_hold_bytes);
    if (!begin_record(out, prefix.size() + len, 3, frame.timestamp_ns)) {
        return;
    }
    Buffer& b = *out.current;
    b.append_copy(prefix);
    if (hold && frame.hold()) {
        b.owners.push_back(frame.lease->owner);
        b.tokens.push_back(frame.lease->token);
        held_.fetch_add(1, std::memory_order_relaxed);
        if (!out.in_holding) {
            out.in_holding = true;
            holding_.push_back(&out);
        }
        b.append_held(first, first_device);
        b.append_held(second, second_device);
    } else {
        b.append_copy(first);
        b.append_copy(second);
    }
}

void Writer::flush_held(std::size_t min_holds) {
    for (std::size_t i = 0; i < holding_.size();) {
        Output& out = *holding_[i];
        if (out.current == nullptr || out.current->tokens.size() >= min_holds) {
            holding_[i] = holding_.back();
            holding_.pop_back();
            out.in_holding = false;
            if (out.current != nullptr) {
                submit(out);
            }
        } else {
            ++i;
        }
    }
}

void Writer::finish() {
    if (finished_) {
        return;
    }
    finished_ = true;
    // Every output gets a last buffer marked close_after, even an empty one,
    // so that its file exists (with its preamble) and is closed in order.
    // First hand over the partial buffers, so that every buffer is free or on
    // its way back before the outputs without one wait for a free one.
    std::vector<Output*> need_buffer;
    for (auto& out : outputs_) {
        if (out.current != nullptr) {
            out.current->close_after = true;
            submit(out);
        } else {
            need_buffer.push_back(&out);
        }
    }
    for (Output* out : need_buffer) {
        Buffer* buffer = nullptr;
        out->lane->free.wait_dequeue(buffer);
        buffer->reset();
        buffer->close_after = true;
        out->current = buffer;
        submit(*out);
    }
    for (auto& lane : lanes_) {
        lane->full.enqueue(nullptr);
    }
    for (auto& lane : lanes_) {
        if (lane->thread.joinable()) {
            lane->thread.join();
        }
    }
}

std::vector<OutputStats> Writer::stats() const {
    std::vector<OutputStats> result;
    result.reserve(outputs_.size());
    for (const auto& out : outputs_) {
        OutputStats s;
        s.path = out.path;
        s.format = std::string(to_string(out.format));
        s.group = out.group;
        s.antenna = out.antenna;
        s.packets = out.written_records;
        s.bytes = out.closed_bytes + out.offset;
        s.files = out.files;
        s.dropped = out.dropped_by_producer + out.dropped_by_writer;
        s.error = out.error;
        result.push_back(std::move(s));
    }
    return result;
}

bool Writer::any_failed() const {
    for (const auto& out : outputs_) {
        if (out.failed || out.dropped_by_producer > 0) {
            return true;
        }
    }
    return false;
}

}  // namespace ibvcap
