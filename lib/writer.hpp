// Writer thread: the producer (demux) appends records into large per-output
// buffers; full buffers travel to the writer thread through a bounded
// single-producer/single-consumer queue and come back through another.
//
// The pool of buffers is allocated up front (plus one per output, added when the
// output is). When it is empty the producer
// either waits (offline sources: the file will still be there) or drops the
// record and counts it (live sources: a stalled producer loses packets at the
// NIC instead, silently). Files are opened by the writer thread when the first
// buffer for them arrives, so the producer never blocks on the filesystem.
//
// A write error (disk full, I/O error) stops that output: the file is cut back
// to the last whole record so it stays valid, later records for it are counted
// as dropped, and the error is reported.
#pragma once

#include <readerwriterqueue/readerwriterqueue.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "formats/bytes.hpp"
#include "formats/output.hpp"
#include "lib/ledger.hpp"

namespace ibvcap {

class Writer {
  public:
    struct Options {
        std::size_t buffer_bytes = std::size_t{4} << 20;
        std::size_t buffers = 64;  // in flight, on top of one parked per output
        std::size_t max_outputs = 4096;
        bool block_when_full = true;  // false: drop and count (live sources)
        // When this becomes true (a second Ctrl-C), buffers still queued are
        // not written but counted as dropped; the write in progress finishes,
        // so every file still holds whole records. Null: never.
        const std::atomic<bool>* abandon = nullptr;
    };
    struct Output;  // opaque to callers
    using OutputId = Output*;

    explicit Writer(const Options& options);
    ~Writer();
    Writer(const Writer&) = delete;
    Writer& operator=(const Writer&) = delete;

    // Producer thread. `preamble` is written at the start of the file (the pcap
    // file header). The file is created even if no record ever arrives. Each
    // output adds one buffer to the pool (it parks a partly filled one), so this
    // allocates: call it when a stream first appears, never per record.
    // Throws std::length_error past max_outputs.
    OutputId add_output(OutputFormat format, std::string path, std::string group,
                        std::string antenna, Bytes preamble = {});

    // Append one record made of up to four pieces. Never allocates; may wait
    // for a free buffer only in block_when_full mode.
    void write(OutputId output, std::span<const Bytes> pieces);

    // Producer thread: hand over every partial buffer, wait for the writer
    // thread to finish, close the files. Idempotent.
    void finish();

    // After finish(): what each output holds.
    std::vector<OutputStats> stats() const;
    bool any_failed() const;

    // Any thread, while the run goes on: bytes handed to the writer thread(s)
    // and not yet written (the stats line's "writer backlog").
    std::uint64_t backlog_bytes() const { return backlog_.load(std::memory_order_relaxed); }

  private:
    struct Buffer;
    Buffer* take_free_buffer();
    void submit(Output& out);
    void run();
    void write_buffer(Buffer& buffer);

    Options options_;
    std::vector<std::unique_ptr<Buffer>> pool_;
    std::deque<Output> outputs_;  // stable addresses; grown by the producer only
    moodycamel::BlockingReaderWriterQueue<Buffer*> full_;
    moodycamel::BlockingReaderWriterQueue<Buffer*> free_;
    std::thread thread_;
    bool finished_ = false;
    std::atomic<std::uint64_t> backlog_{0};
};

}  // namespace ibvcap
