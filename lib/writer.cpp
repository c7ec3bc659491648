#include "lib/writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <system_error>

namespace ibvcap {

struct Writer::Buffer {
    std::uint8_t* data = nullptr;
    std::size_t capacity = 0;
    std::size_t used = 0;
    std::uint64_t records = 0;
    Output* output = nullptr;  // nullptr: the end-of-stream marker
    bool close_after = false;

    explicit Buffer(std::size_t bytes) : capacity(bytes) {
        // Page-aligned so the same buffers serve O_DIRECT writes.
        // aligned_alloc needs a size that is a multiple of the alignment.
        data = static_cast<std::uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
        if (data == nullptr) {
            throw std::bad_alloc();
        }
    }
    ~Buffer() { std::free(data); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
};

struct Writer::Output {
    // Set by the producer before any buffer for it is queued.
    OutputFormat format{};
    std::string path;
    std::string group;
    std::string antenna;
    std::vector<std::uint8_t> preamble;
    // Producer side.
    Buffer* current = nullptr;
    std::uint64_t dropped_by_producer = 0;
    // Writer-thread side; read by the producer only after the thread is joined.
    int fd = -1;
    bool failed = false;
    std::uint64_t offset = 0;  // file bytes written, all whole records
    std::uint64_t written_records = 0;
    std::uint64_t dropped_by_writer = 0;
    std::string error;
};

Writer::Writer(const Options& options)
    : options_(options),
      full_(options.buffers + options.max_outputs + 1),
      free_(options.buffers + options.max_outputs + 1) {
    if (options_.buffers < 2 || options_.buffer_bytes < 65536 + kPcapRecordHeaderBytes) {
        throw std::invalid_argument("writer needs at least 2 buffers of 64 KiB");
    }
    pool_.reserve(options_.buffers + options_.max_outputs);
    for (std::size_t i = 0; i < options_.buffers; ++i) {
        pool_.push_back(std::make_unique<Buffer>(options_.buffer_bytes));
        free_.enqueue(pool_.back().get());
    }
    thread_ = std::thread([this] { run(); });
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
    pool_.push_back(std::make_unique<Buffer>(options_.buffer_bytes));
    free_.enqueue(pool_.back().get());
    Output& out = outputs_.emplace_back();
    out.format = format;
    out.path = std::move(path);
    out.group = std::move(group);
    out.antenna = std::move(antenna);
    out.preamble.assign(preamble.begin(), preamble.end());
    return &out;
}

Writer::Buffer* Writer::take_free_buffer() {
    Buffer* buffer = nullptr;
    if (free_.try_dequeue(buffer)) {
        return buffer;
    }
    if (!options_.block_when_full) {
        return nullptr;
    }
    free_.wait_dequeue(buffer);
    return buffer;
}

void Writer::submit(Output& out) {
    Buffer* buffer = out.current;
    out.current = nullptr;
    buffer->output = &out;
    backlog_.fetch_add(buffer->used, std::memory_order_relaxed);
    full_.enqueue(buffer);  // capacity covers the whole pool: never allocates
}

void Writer::write(OutputId output, std::span<const Bytes> pieces) {
    Output& out = *output;
    std::size_t bytes = 0;
    for (const auto& p : pieces) {
        bytes += p.size();
    }
    if (out.current != nullptr && out.current->used + bytes > out.current->capacity) {
        submit(out);
    }
    if (out.current == nullptr) {
        out.current = take_free_buffer();
        if (out.current == nullptr || bytes > out.current->capacity) {
            if (out.current != nullptr) {
                free_.enqueue(out.current);
                out.current = nullptr;
            }
            ++out.dropped_by_producer;
            return;
        }
        out.current->used = 0;
        out.current->records = 0;
        out.current->close_after = false;
    }
    Buffer& b = *out.current;
    for (const auto& p : pieces) {
        if (!p.empty()) {
            std::memcpy(b.data + b.used, p.data(), p.size());
            b.used += p.size();
        }
    }
    ++b.records;
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
        free_.wait_dequeue(buffer);
        buffer->used = 0;
        buffer->records = 0;
        buffer->close_after = true;
        out->current = buffer;
        submit(*out);
    }
    full_.enqueue(nullptr);
    thread_.join();
}

void Writer::run() {
    for (;;) {
        Buffer* buffer = nullptr;
        full_.wait_dequeue(buffer);
        if (buffer == nullptr) {
            return;
        }
        const std::size_t used = buffer->used;
        write_buffer(*buffer);
        backlog_.fetch_sub(used, std::memory_order_relaxed);
        free_.enqueue(buffer);
    }
}

namespace {
// Write all of `bytes` at `offset`; returns 0 or an errno value.
int pwrite_all(int fd, const std::uint8_t* bytes, std::size_t size, std::uint64_t offset) {
    while (size > 0) {
        const ssize_t n = ::pwrite(fd, bytes, size, static_cast<off_t>(offset));
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno;
        }
        if (n == 0) {
            return ENOSPC;
        }
        bytes += n;
        size -= static_cast<std::size_t>(n);
        offset += static_cast<std::uint64_t>(n);
    }
    return 0;
}
}  // namespace

void Writer::write_buffer(Buffer& buffer) {
    Output& out = *buffer.output;
    if (options_.abandon != nullptr && options_.abandon->load(std::memory_order_relaxed)) {
        // Asked to stop at once: not written, counted. The file is still
        // created with its header and closed below, so it is valid.
        out.dropped_by_writer += buffer.records;
        buffer.records = 0;
        buffer.used = 0;
    }
    auto fail = [&out](const std::string& what, int err) {
        out.failed = true;
        out.error = what + ": " + std::strerror(err);
        // Cut any partial record: the file holds whole records only. Only a
        // regular file can be cut (a FIFO or device has nothing to cut back).
        struct stat st {};
        if (out.fd >= 0 && ::fstat(out.fd, &st) == 0 && S_ISREG(st.st_mode) &&
            ::ftruncate(out.fd, static_cast<off_t>(out.offset)) != 0) {
            out.error += " (and could not cut the file back to its last whole record)";
        }
    };
    if (!out.failed && out.fd < 0) {
        out.fd = ::open(out.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (out.fd < 0) {
            out.failed = true;
            out.error = std::string("cannot create file: ") + std::strerror(errno);
        } else if (!out.preamble.empty()) {
            if (const int err = pwrite_all(out.fd, out.preamble.data(), out.preamble.size(), 0)) {
                // Without its header the file is not valid in its format: remove
                // it, but only a regular file (never a device node or a FIFO).
                fail("write failed", err);
                struct stat st {};
                const bool regular = ::fstat(out.fd, &st) == 0 && S_ISREG(st.st_mode);
                ::close(out.fd);
                out.fd = -1;
                if (regular && ::unlink(out.path.c_str()) == 0) {
                    out.error += " (file removed: its header could not be written)";
                }
            } else {
                out.offset = out.preamble.size();
            }
        }
    }
    if (!out.failed && buffer.records > 0) {
        // (A buffer of empty records writes nothing but still counts them.)
        if (const int err = pwrite_all(out.fd, buffer.data, buffer.used, out.offset)) {
            fail("write failed", err);
        } else {
            out.offset += buffer.used;
            out.written_records += buffer.records;
        }
    }
    if (out.failed) {
        out.dropped_by_writer += buffer.records;
    }
    if (buffer.close_after && out.fd >= 0) {
        if (::close(out.fd) != 0 && !out.failed) {
            out.failed = true;
            out.error = std::string("close failed: ") + std::strerror(errno);
        }
        out.fd = -1;
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
        s.bytes = out.offset;
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
