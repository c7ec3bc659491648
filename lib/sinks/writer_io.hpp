// The disk threads' side of the writer (lib/sinks/writer.hpp): WriterIo, a
// disk thread's work on one output, and AsyncPwrite, the O_DIRECT write
// issued behind the next gather. Defined in writer_io.cpp. Include only from
// lib/sinks/writer*.cpp.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>

#include "lib/sinks/writer_lane.hpp"

namespace ibvcap {

namespace writer_parts {

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

}  // namespace writer_parts

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
    ~WriterIo();
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
    using Piece = writer_parts::Piece;
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
    std::unique_ptr<writer_parts::AsyncPwrite> async_;
    Pending pending_;
    FileChecksum pending_checksum_before_;
    writer_parts::PageBuffer other_staging_;  // the one being written behind
    std::size_t other_staging_bytes_ = 0;
    std::uint64_t drops_ = 0;
};

}  // namespace ibvcap
