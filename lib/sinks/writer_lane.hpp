// The writer's lanes and outputs (lib/sinks/writer.hpp): a lane is one disk
// thread with its queues of buffers, its staging buffers and their pins; an
// output is one stream's file (or ring of files) through its life, the
// producer's side and the disk thread's. Include only from
// lib/sinks/writer*.cpp.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "lib/sinks/file_index.hpp"
#include "lib/sinks/writer.hpp"
#include "lib/sinks/writer_ahead.hpp"
#include "lib/sinks/writer_buffer.hpp"

namespace ibvcap {

namespace writer_parts {

struct MemoryCount;  // writer_memory.hpp

// Called first by every thread that writes outputs: a FIFO output whose
// reader went away makes write() raise SIGPIPE, which the run takes as
// "stdout or stderr closed" and stops. Blocked on this thread, the signal
// stays pending here (a write's SIGPIPE goes to the thread that wrote,
// signal(7)) and the write fails with EPIPE: that output fails and the run
// goes on.
void block_sigpipe_here();

}  // namespace writer_parts

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
    writer_parts::MemoryCount* count = nullptr;
    std::thread thread;
    // The disk thread's own: O_DIRECT gathering and the device bounce.
    writer_parts::PageBuffer staging;
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
    ~Lane();
    Lane(const Lane&) = delete;
    Lane& operator=(const Lane&) = delete;

    void pin_staging(const DeviceMemory& device);
    // Before `buffer` is freed (null: every buffer, at the lane's end).
    void unpin(const void* buffer);
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
    bool stopped_waiting = false;    // a FIFO whose reader never came before the stop
    writer_parts::PageBuffer carry;  // O_DIRECT: the bytes of the last, partial page
    std::size_t carry_len = 0;
    // The sidecar index (lib/sinks/file_index.hpp): the running checksum of
    // the current file's bytes as they are written, whether records of it
    // were abandoned, and the indexes that could not be written.
    FileChecksum checksum;
    bool abandoned = false;
    std::uint64_t index_failures = 0;
    std::string index_error;  // the first one
    // Its first file made ahead, its write-behind (writer_ahead.hpp).
    writer_parts::OutputAhead ahead;
};

}  // namespace ibvcap
