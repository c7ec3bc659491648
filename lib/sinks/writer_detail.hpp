// The writer's private parts, shared by its two halves and by no one else:
// the buffers, lanes and outputs (the producer fills them in writer.cpp, the
// disk threads drain them in writer_io.cpp) and WriterIo, a disk thread's
// work on one output. Include only from lib/sinks/writer*.cpp.
#pragma once

#include <pthread.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "lib/sinks/file_index.hpp"
#include "lib/sinks/writer.hpp"
#include "lib/sinks/writer_ahead.hpp"

namespace ibvcap {

namespace writer_detail {

struct MemoryCount;  // writer_memory.hpp

// Called first by every thread that writes outputs: a FIFO output whose
// reader went away makes write() raise SIGPIPE, which the run takes as
// "stdout or stderr closed" and stops. Blocked on this thread, the signal
// stays pending here (a write's SIGPIPE goes to the thread that wrote,
// signal(7)) and the write fails with EPIPE: that output fails and the run
// goes on.
inline void block_sigpipe_here() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
}
inline constexpr std::size_t kPage = 4096;  // O_DIRECT alignment (covers 512-byte sector devices)

inline std::uint8_t* page_alloc(std::size_t bytes) {
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

}  // namespace writer_detail

namespace writer_detail {

// Held frames a buffer of `bytes` takes before it is sent: as many as
// slices of min_hold_bytes fit, at most max_pieces (the piece list is made
// for them, so it grows with the buffer, not with max_pieces alone).
inline std::size_t holds_for(std::size_t bytes, const Writer::Options& o) {
    return std::max<std::size_t>(
        1, std::min(o.max_pieces, bytes / std::max<std::size_t>(o.min_hold_bytes, 1)));
}

inline constexpr std::size_t page_round(std::size_t bytes) {
    return (bytes + kPage - 1) / kPage * kPage;
}

// A list of fixed capacity in memory it does not own (a buffer's piece and
// held-frame lists, laid out in the buffer's own chunk of the arena, so that
// making a buffer allocates nothing: writer_memory.hpp). The few calls of
// std::vector the writer uses; pushing past the capacity is the caller's
// error (Buffer::room checks it first).
template <class T>
class FixedList {
  public:
    void reset(T* at, std::size_t capacity) {
        data_ = at;
        size_ = 0;
        capacity_ = capacity;
    }
    void push_back(const T& v) { data_[size_++] = v; }
    void pop_back() { --size_; }
    void clear() { size_ = 0; }
    T& back() { return data_[size_ - 1]; }
    const T& back() const { return data_[size_ - 1]; }
    T& operator[](std::size_t i) { return data_[i]; }
    const T& operator[](std::size_t i) const { return data_[i]; }
    T* data() { return data_; }
    const T* data() const { return data_; }
    T* begin() { return data_; }
    T* end() { return data_ + size_; }
    const T* begin() const { return data_; }
    const T* end() const { return data_ + size_; }
    std::size_t size() const { return size_; }
    std::size_t capacity() const { return capacity_; }
    bool empty() const { return size_ == 0; }

  private:
    T* data_ = nullptr;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0;
};

// Where a buffer's parts lie in its chunk (Writer::Buffer::lay_out): `lead`
// bytes of nothing, the Buffer itself, its piece list and its held-frame
// lists, then its bytes from the next page on. Offsets are from the chunk's
// start. The lead (a few cache lines, different for each buffer: the
// arena's colour) keeps the buffers' headers and lists, which the producer
// touches for every record, off one cache set: chunks start on pages, so
// without it every header would sit at the same page offset. A precaution:
// the whole pipeline measured the same with and without it on the
// development VM (BM_Pipeline, within its noise).
struct BufferLayout {
    std::size_t pieces = 0;  // entries of the piece list
    std::size_t holds = 0;   // entries of each held-frame list
    std::size_t pieces_at = 0;
    std::size_t owners_at = 0;
    std::size_t tokens_at = 0;
    std::size_t data_at = 0;  // page-aligned
    std::size_t span = 0;     // the whole chunk, whole pages
};
inline BufferLayout buffer_layout(std::size_t bytes, std::size_t holds,
                                  std::size_t lead = 0);  // (below Writer::Buffer)
// The leads the arena gives its buffers in turn: 0 to 31 cache lines.
inline constexpr std::size_t kLeadStep = 64;
inline constexpr std::size_t kLeads = 32;

// What a buffer of `bytes` costs in memory: its chunk of the arena, the
// Buffer, its lists and its bytes in whole pages, with the largest lead.
inline std::size_t buffer_cost(std::size_t bytes, const Writer::Options& o) {
    return buffer_layout(bytes, holds_for(bytes, o), (kLeads - 1) * kLeadStep).span;
}

}  // namespace writer_detail

// A buffer lives in its own chunk of the writer's arena (writer_memory.hpp),
// made by placement at the chunk's start: it allocates nothing and frees
// nothing (the arena's pages go back with the arena).
struct Writer::Buffer {
    std::uint8_t* data = nullptr;  // page-aligned: also an O_DIRECT source
    std::size_t capacity = 0;
    std::size_t limit = 0;  // bytes it takes until sent: capacity, or less (the memory bound)
    std::size_t max_holds = 0;
    std::size_t charged = 0;  // its bytes in the writer's count (its chunk's span)
    std::size_t lead = 0;     // its chunk starts this many bytes before it
    std::size_t span = 0;     // its chunk: whole pages
    std::size_t used = 0;     // bytes copied into `data`
    std::size_t bytes = 0;    // record bytes in all pieces (copied and held)
    std::uint64_t records = 0;
    Output* output = nullptr;  // nullptr: the end-of-stream marker
    bool close_after = false;
    bool rotate_before = false;
    writer_detail::FixedList<writer_detail::Piece> pieces;
    // Held frames: released (grouped by owner) once the buffer is written,
    // or, when every held piece is device memory, once the device copies
    // have landed in staging (gpu-cuda-2.md N3: nothing reads a device slot
    // after copy_to_host). `owners` stays until reset (held_intact reads it).
    writer_detail::FixedList<SlotOwner*> owners;
    writer_detail::FixedList<std::uint64_t> tokens;
    bool holds_host = false;      // a held piece is host memory: kept until written
    bool holds_released = false;  // the tokens went back already

    // Made `lead_` bytes into a chunk of at least
    // buffer_layout(bytes_, holds_, lead_).span bytes.
    Buffer(std::size_t bytes_, std::size_t holds_, std::size_t lead_) : lead(lead_) {
        lay_out(bytes_, holds_);
    }
    std::uint8_t* chunk() { return reinterpret_cast<std::uint8_t*>(this) - lead; }
    // Its lists and bytes laid out in its chunk for `bytes_` and `holds_`,
    // empty. The chunk's pages stay as they are.
    void lay_out(std::size_t bytes_, std::size_t holds_) {
        const writer_detail::BufferLayout l = writer_detail::buffer_layout(bytes_, holds_, lead);
        std::uint8_t* base = chunk();
        pieces.reset(reinterpret_cast<writer_detail::Piece*>(base + l.pieces_at), l.pieces);
        owners.reset(reinterpret_cast<SlotOwner**>(base + l.owners_at), l.holds);
        tokens.reset(reinterpret_cast<std::uint64_t*>(base + l.tokens_at), l.holds);
        data = base + l.data_at;
        capacity = bytes_;
        max_holds = holds_;
        span = l.span;
        reset();
    }
    // Parked, partly filled, and larger than the memory bound now wants:
    // takes no more than `size` bytes and `holds` frames, and gives the
    // pages past `size` back to the system (it is made smaller in place once
    // written). Its count becomes that of a buffer of `size`.
    void trim(std::size_t size, std::size_t holds, std::size_t cost) {
        cap(size, holds);
        charged = cost;
        const std::size_t from = writer_detail::page_round(size);
        const std::size_t to = capacity / writer_detail::kPage * writer_detail::kPage;
        if (to > from) {
            ::madvise(data + from, to - from, MADV_DONTNEED);
        }
    }
    // Takes no more than `size` bytes and `holds` frames before it is sent;
    // its memory stays as it is (and counted) until it is written.
    void cap(std::size_t size, std::size_t holds) {
        limit = std::min(limit, size);
        max_holds = std::min(max_holds, holds);
    }
    // Made smaller, in place, once written (empty): laid out again in the
    // first pages of its chunk, and the pages past them go back to the
    // system (its span shrinks; the arena never reuses that address). The
    // pages it keeps stay faulted in, so the producer's next copies into it
    // take no page fault (making it afresh moved a page fault per page onto
    // the capture thread). Allocates nothing.
    void shrink(std::size_t size, std::size_t holds) {
        const std::size_t before = span;
        lay_out(size, holds);
        if (before > span) {
            ::madvise(chunk() + span, before - span, MADV_DONTNEED);
        }
    }
    void reset() {
        limit = capacity;
        max_holds = tokens.capacity();  // (as laid out: trim() may have lowered it)
        used = 0;
        bytes = 0;
        records = 0;
        close_after = false;
        rotate_before = false;
        pieces.clear();
        owners.clear();
        tokens.clear();
        holds_host = false;
        holds_released = false;
    }
    bool room(std::size_t record_bytes, std::size_t record_pieces) const {
        return bytes + record_bytes <= limit &&
               pieces.size() + record_pieces <= pieces.capacity() && tokens.size() < max_holds;
    }
    void append_copy(Bytes b) {
        if (b.empty()) {
            return;
        }
        std::uint8_t* dst = data + used;
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
            holds_host = holds_host || device == nullptr;
        }
    }
};

namespace writer_detail {

inline BufferLayout buffer_layout(std::size_t bytes, std::size_t holds, std::size_t lead) {
    BufferLayout l;
    l.holds = holds;
    l.pieces = holds * 4 + 8;
    l.pieces_at =
        lead + (sizeof(Writer::Buffer) + alignof(Piece) - 1) / alignof(Piece) * alignof(Piece);
    l.owners_at = l.pieces_at + l.pieces * sizeof(Piece);
    l.tokens_at = l.owners_at + l.holds * sizeof(SlotOwner*);
    l.data_at = page_round(l.tokens_at + l.holds * sizeof(std::uint64_t));
    l.span = l.data_at + page_round(bytes);
    return l;
}

}  // namespace writer_detail

struct Writer::Lane {
    // Buffers are owned by the writer's stock (writer_memory.hpp); a lane
    // only passes them around.
    moodycamel::BlockingReaderWriterQueue<Buffer*> full;
    // Filled by the disk thread only (a single-producer queue); the
    // producer keeps the free buffers it holds itself in `spare`.
    moodycamel::BlockingReaderWriterQueue<Buffer*> free;
    std::vector<Buffer*> spare;  // producer only
    // Memory bound: the size the disk thread remakes larger buffers at
    // after writing them (0: none), and the writer's count of bytes.
    std::atomic<std::size_t> target{0};
    writer_detail::MemoryCount* count = nullptr;
    std::thread thread;
    // The disk thread's own: O_DIRECT gathering and the device bounce.
    writer_detail::PageBuffer staging;
    std::size_t staging_bytes = 0;
    std::vector<iovec> iov;
    std::vector<DeviceMemory::Copy> copies;
    // The staging buffers (this lane's and the one written behind, which take
    // turns) pinned with a device (DeviceMemory::pin_host_buffer), so device
    // copies land in them by DMA (or by the gather kernel, mapped); each is
    // unpinned before it is freed. A pin that failed is remembered too (not
    // retried per batch) but not undone.
    struct Pinned {
        const void* buffer = nullptr;
        const DeviceMemory* device = nullptr;
        bool ok = false;
    };
    std::vector<Pinned> pinned;
    // A file's checksum before a write, restored when the write fails (the
    // file is cut back to its last whole record).
    FileChecksum checksum_before;

    explicit Lane(std::size_t queue_capacity) : full(queue_capacity), free(queue_capacity) {}
    ~Lane() { unpin(nullptr); }
    Lane(const Lane&) = delete;
    Lane& operator=(const Lane&) = delete;

    void pin_staging(const DeviceMemory& device) {
        if (!staging) {
            return;
        }
        for (const Pinned& p : pinned) {
            if (p.buffer == staging.get() && p.device == &device) {
                return;
            }
        }
        const bool ok = device.pin_host_buffer(staging.get(), staging_bytes);  // best effort
        pinned.push_back({staging.get(), &device, ok});
    }
    // Before `buffer` is freed (null: every buffer, at the lane's end).
    void unpin(const void* buffer) {
        for (std::size_t i = 0; i < pinned.size();) {
            if (buffer == nullptr || pinned[i].buffer == buffer) {
                if (pinned[i].ok) {
                    pinned[i].device->unpin_host_buffer(const_cast<void*>(pinned[i].buffer));
                }
                pinned[i] = pinned.back();
                pinned.pop_back();
            } else {
                ++i;
            }
        }
    }
    void unpin_staging() { unpin(staging.get()); }
};

struct Writer::Output {
    // Set by the producer before any buffer for it is queued.
    OutputFormat format{};
    std::string path;
    std::string group;
    std::string antenna;
    std::uint32_t ordered_window = 0;  // --ordered: said in the file's index
    std::vector<std::uint8_t> preamble;
    Writer::Trailer trailer;  // called by the disk thread
    Lane* lane = nullptr;
    // Producer side.
    Buffer* current = nullptr;
    std::uint64_t dropped_by_producer = 0;
    // Of those, the records refuse()d, and the first one's reason.
    std::uint64_t refused = 0;
    const char* refused_why = nullptr;
    std::uint64_t file_bytes = 0;  // rotation: bytes the current file will hold
    std::uint64_t file_records = 0;
    std::uint64_t file_period = 0;
    bool rotate_pending = false;
    bool in_holding = false;  // listed in Writer::holding_
    bool prepared = false;    // a buffer was made ahead for it (Writer::prepare)
    // Disk-thread side; read by the producer only after the thread is joined.
    int fd = -1;
    bool failed = false;
    std::uint64_t offset = 0;        // bytes in the current file, all whole records
    std::uint64_t closed_bytes = 0;  // bytes in files already closed
    std::uint64_t written_records = 0;
    std::uint64_t dropped_by_writer = 0;
    std::uint64_t file_index = 0;
    std::uint64_t files = 0;  // files opened
    // The files on disk (a ring of -W entries, reserved by add_output) and
    // the entry of the current file; records written over by the ring.
    std::vector<OutputFile> on_disk;
    std::size_t on_disk_current = 0;
    std::uint64_t overwritten = 0;
    std::string current_path;
    std::string error;
    bool stopped_waiting = false;     // a FIFO whose reader never came before the stop
    writer_detail::PageBuffer carry;  // O_DIRECT: the bytes of the last, partial page
    std::size_t carry_len = 0;
    // The sidecar index (lib/sinks/file_index.hpp): the running checksum of
    // the current file's bytes as they are written, whether records of it
    // were abandoned, and the indexes that could not be written.
    FileChecksum checksum;
    bool abandoned = false;
    std::uint64_t index_failures = 0;
    std::string index_error;  // the first one
    // Its first file made ahead, its write-behind (writer_ahead.hpp).
    writer_detail::OutputAhead ahead;
};

namespace writer_detail {

// One O_DIRECT write at a time on a thread of its own, so that the disk
// thread gathers the next buffer while the last one is written
// (writer_io.cpp).
class AsyncPwrite {
  public:
    AsyncPwrite();
    ~AsyncPwrite();
    AsyncPwrite(const AsyncPwrite&) = delete;
    AsyncPwrite& operator=(const AsyncPwrite&) = delete;
    void issue(int fd, const std::uint8_t* bytes, std::size_t size, std::uint64_t offset);
    int wait();  // 0 or an errno, of the write issued last

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool job_ = false;
    bool done_ = false;
    bool quit_ = false;
    int fd_ = -1;
    const std::uint8_t* bytes_ = nullptr;
    std::size_t size_ = 0;
    std::uint64_t offset_ = 0;
    int err_ = 0;
    std::thread thread_;
};

}  // namespace writer_detail

// The disk thread's work on one output; a friend in all but name
// (writer_io.cpp).
//
// With O_DIRECT a buffer's records are written behind: gathered into the
// staging buffer, handed to the lane's AsyncPwrite, and counted as written
// (or failed, the file cut back) when that write completes, which is waited
// for before the next buffer's write is issued, before any other write or
// close, and before the disk thread waits for work (complete_pending).
class WriterIo {
  public:
    // `release_holds`: gives a buffer's held slots back (Writer::release_holds),
    // called early for a buffer whose held pieces are all device memory.
    using ReleaseHolds = std::function<void(Writer::Buffer&)>;
    WriterIo(const Writer::Options& options, Writer::Lane& lane, ReleaseHolds release_holds = {})
        : options_(options), lane_(lane), release_holds_(std::move(release_holds)) {}
    ~WriterIo() {
        complete_pending();
        lane_.unpin(other_staging_.get());
    }
    WriterIo(const WriterIo&) = delete;
    WriterIo& operator=(const WriterIo&) = delete;

    void write_buffer(Writer::Buffer& buffer, Writer::Output& out);
    void fail_on_exception(Writer::Buffer& buffer, Writer::Output& out, const char* what);
    // The write issued last, waited for and counted (written, or the output
    // failed and its records dropped).
    void complete_pending();
    // Records this disk thread has counted as not written, all outputs.
    std::uint64_t drops() const { return drops_; }

  private:
    using Piece = writer_detail::Piece;
    static constexpr int kDeferred = -1;  // write_pieces: issued, counted when it completes
    struct Pending {
        Writer::Output* out = nullptr;
        std::uint64_t records = 0;
        std::size_t bytes = 0;
        std::uint64_t offset_before = 0;
    };
    void drop(Writer::Output& out, std::uint64_t records) {
        out.dropped_by_writer += records;
        drops_ += records;
    }

    std::string file_path(const Writer::Output& out) const;
    void fail(Writer::Output& out, const std::string& what, int err);
    // Whether every frame the buffer held is still its owner's (SlotOwner::intact).
    bool held_intact(const Writer::Buffer& buffer) const;
    void open_file(Writer::Output& out);
    void close_file(Writer::Output& out);
    void write_trailer(Writer::Output& out);
    void note_file_on_disk(Writer::Output& out);
    void write_index(Writer::Output& out);
    template <class Place>
    void copy_device_pieces(std::span<const Piece> pieces, Place place);
    // records > 0: the records of a buffer, which O_DIRECT may write
    // behind (kDeferred).
    int write_pieces(Writer::Output& out, std::span<const Piece> pieces, std::size_t bytes,
                     std::uint64_t records = 0);
    void ensure_staging(std::size_t bytes);
    int write_buffered(Writer::Output& out, std::span<const Piece> pieces, std::size_t bytes);
    int write_direct(Writer::Output& out, std::span<const Piece> pieces, std::size_t bytes,
                     std::uint64_t records);

    const Writer::Options& options_;
    Writer::Lane& lane_;
    ReleaseHolds release_holds_;
    Writer::Buffer* current_ = nullptr;  // the buffer write_buffer is writing
    std::unique_ptr<writer_detail::AsyncPwrite> async_;
    Pending pending_;
    FileChecksum pending_checksum_before_;
    writer_detail::PageBuffer other_staging_;  // the one being written behind
    std::size_t other_staging_bytes_ = 0;
    std::uint64_t drops_ = 0;
};

}  // namespace ibvcap
