// Writer threads: the producer (demux) appends records into large per-output
// buffers; full buffers travel to a disk thread through a bounded
// single-producer/single-consumer queue and come back through another.
//
// A record is bytes copied into the buffer (pcap record headers, CODIF
// headers) and, with the zero-copy hand-off, references to a frame that
// still sits in its NIC receive slot (Frame::hold()): the disk thread writes
// those bytes straight from the slot (pwritev), or gathers them into its
// aligned staging buffer for O_DIRECT, or copies them out of GPU memory in
// one batch per buffer, and then passes the slots back for re-posting. The
// poll thread never copies a payload it can hold.
//
// Several disk threads (Options::threads): each is a lane with its own pool
// of buffers and queues; outputs are spread over the lanes round-robin as
// they are added, so one output is always written by one thread, in order.
//
// Memory bound (Options::memory_bytes, --writer-memory): a ceiling on all
// buffers together, with their piece lists, and the disk threads' staging
// buffers (each output's own record, about 1.6 KiB, 5.6 with O_DIRECT, is
// left for in the plan but not counted in memory()). Nothing is allocated up
// front but the staging: the bound is reserved as address space only (the
// arena, writer_memory.hpp), and the producer carves a buffer from it itself
// whenever no written one is free, in O(1), while the memory has room. A
// thread of the writer's (the stock) faults pages in ahead of the carving,
// as much as the run's pace needs (the least pool and a buffer per output
// planned, or 40 ms of the carving's pace, at most a sixteenth of the bound
// and 256 MiB), so that the producer's copies into a new buffer seldom take
// a page fault; when the stock gets no CPU the producer takes the faults,
// never a drop. So a stalled disk is absorbed by the whole bound, and memory
// an output never needed is lent to the backlog: a buffer goes to whichever
// output needs one, and comes back free once written. An offline source,
// which waits for the disk anyway, takes no new buffer past an eighth of the
// bound in flight.
//
// Buffer size: the writer plans for a number of outputs, and sizes buffers
// so that the outputs' parked buffers (one partly filled buffer each) take
// at most two thirds of the bound left after the staging and the outputs'
// records, and at most a sixth of the whole bound (writer_memory.hpp,
// MemoryPlan: memory made for idle outputs costs time to make and is room a
// stall cannot use); when the outputs pass the plan it
// plans for a quarter more and the size shrinks (never below
// kMinBufferBytes, page-aligned): new buffers are made at the new size,
// larger ones take no more than it and are remade at it by the disk thread
// once written, and parked partial ones are trimmed to it (their pages past
// it given back) or sent. A bound too small for max_outputs buffers of the
// smallest size throws at construction (min_memory_bytes() says how much is
// needed).
//
// Without a bound, the pool is allocated up front (plus one buffer per
// output, made when the output is added).
//
// When no buffer is free and none can be made (the memory is at its bound)
// the producer either waits (offline sources: the file will still be there)
// or drops the record and counts it (live sources: a stalled producer loses
// packets at the NIC instead, silently); memory() says whether each such
// drop met the bound (drops_at_bound) or found the host refusing memory
// below it (drops_below_bound: strict overcommit, or the host out of memory).
//
// Files are created by a helper thread as their outputs are added (or by the
// disk thread, if it needs one first), so the producer never blocks on the
// filesystem (writer_ahead.hpp).
//
// A write error (disk full, I/O error) stops that output: the file is cut back
// to the last whole record so it stays valid, later records for it are counted
// as dropped, and the error is reported.
//
// O_DIRECT (Options::direct_io): every write is whole 4 KiB pages from an
// aligned buffer at an aligned offset, written behind: each lane gathers a
// buffer into one of two staging buffers while a helper thread writes the
// other, and counts the records as written when that write completes. The last partial page of each
// buffer is written padded and rewritten with the next buffer, so every record counted as written
// is on disk; the file is cut to its true length at close (and at a write error, to the last whole
// record).
//
// Rotation (tcpdump's -G, -C, -W): the producer decides, per record, that the
// record starts a new file (its timestamp entered a new period of `seconds`,
// or it would take the file past `bytes`); files are named
// STEM.NNNNNN.EXT. With `files` = W, the file index runs modulo W and the
// oldest file is overwritten (tcpdump's ring buffer; with -G tcpdump would
// stop instead, which a capture must not).
#pragma once

#include <readerwriterqueue/readerwriterqueue.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "formats/bytes.hpp"
#include "formats/output.hpp"
#include "lib/core/fault.hpp"
#include "lib/core/fifo.hpp"
#include "lib/core/frame.hpp"
#include "lib/ledger/ledger.hpp"

namespace ibvcap {

namespace writer_parts {
struct MemoryCount;
class BufferArena;
class FileAhead;
}  // namespace writer_parts

class Writer {
  public:
    struct Rotation {
        std::uint64_t seconds = 0;  // -G: a new file when a record's time enters a new period
        std::uint64_t bytes = 0;    // -C: a new file before a record would pass this size
        std::uint32_t files = 0;    // -W: keep this many, overwriting the oldest (0: all)
        bool active() const { return seconds > 0 || bytes > 0 || files > 0; }
    };
    struct Options {
        // 0: chosen for the mode. O_DIRECT: 4 MiB (large writes to the disk).
        // Buffered: 512 KiB, so that the kernel's copy into the page cache
        // still finds the buffer in the CPU cache: with 4 MiB buffers the
        // live pcap source lost frames at 80k packets/s of 8298-byte frames
        // on the development VM, with 512 KiB none at 120k.
        // With memory_bytes, the largest size: buffers shrink from it as
        // outputs are added.
        std::size_t buffer_bytes = 0;
        // The records' payload is device memory (GPU payload): 0 above
        // means 4 MiB in both modes, as each buffer's device pieces cost a
        // few CUDA calls (a flush, a gather launch, a synchronize: ~4 µs
        // each on an H100, gpu-cuda-2.md §3), and at 512 KiB (63 frames of
        // 8 KiB) those calls alone would take ~0.3 CPU-s/s at 1.5 Mpps.
        bool device_payload = false;
        // Without memory_bytes: buffers in flight, on top of one parked per
        // output (0: 256 MiB worth). With it: the least number in flight the
        // bound must leave room for (0: two per disk thread).
        std::size_t buffers = 0;
        // The bound on all the writer's memory together (--writer-memory; 0:
        // none, every buffer buffer_bytes). See "Memory bound" above.
        std::size_t memory_bytes = 0;
        std::size_t max_outputs = 4096;
        // With memory_bytes: the most bytes of buffer pages the stock keeps
        // faulted in ahead of the producer (0: a sixteenth of the bound, at
        // most 256 MiB). What it keeps follows the run below that: the least
        // pool and a buffer per output planned, or 40 ms of the carving's
        // pace (writer_memory.hpp, BufferArena).
        std::size_t stock_bytes = 0;
        bool block_when_full = true;  // false: drop and count (live sources)
        // When this becomes true (a second Ctrl-C), buffers still queued are
        // not written but counted as dropped; the write in progress finishes,
        // so every file still holds whole records. Null: never.
        const std::atomic<bool>* abandon = nullptr;
        // An output that is a FIFO with no reader yet: its disk thread waits
        // for one without blocking (lib/core/fifo.hpp), says so once through
        // reader_wait.notice, and gives the wait up when reader_wait.give_up()
        // or `abandon` says so (the first Ctrl-C: records for a FIFO nobody
        // reads can never be written): the output fails, its records are
        // counted as dropped, and its stats say stopped_waiting.
        ReaderWait reader_wait;
        bool direct_io = false;  // O_DIRECT (--direct-io)
        // FILE.idx.json beside every regular file at its close, with its
        // size, record count and checksum (lib/sinks/file_index.hpp). An
        // index that cannot be written fails the output (its records stay).
        bool index = true;
        unsigned threads = 1;              // disk threads (--disk-threads)
        std::vector<int> cpus;             // disk thread i runs on cpus[i % size] (empty: any)
        Rotation rotation;                 // -G, -C, -W
        std::string run_id;                // in every sidecar index (FileIndex::run)
        std::size_t max_pieces = 4096;     // held frames per buffer (then the buffer is sent)
        std::size_t min_hold_bytes = 512;  // smaller slices are copied, not held
        // Where a disk thread reports an exception (a device copy that
        // failed, memory exhausted): the output it was writing fails with
        // the cause, the thread goes on draining (so held slots come back),
        // and the run stops (lib/core/fault.hpp). Null: only the output fails.
        Faults* faults = nullptr;
    };
    struct Output;  // opaque to callers
    using OutputId = Output*;
    // A file of an output being closed (at a rotation or at the end).
    struct ClosingFile {
        std::uint64_t records = 0;         // records written to this file
        std::uint64_t output_records = 0;  // records written to the output, all its files
    };
    // The bytes that end each file of an output (pcapng's statistics
    // blocks), made on the disk thread just before the file is closed, also
    // after an abandon (the records dropped, the file still closed whole).
    // Not called for a file that failed. A failed write of them cuts the
    // file back to its last record.
    using Trailer = std::function<std::vector<std::uint8_t>(const ClosingFile&)>;

    // Throws std::invalid_argument for unusable options, std::runtime_error
    // (one line naming the CPU) when a disk thread cannot be pinned.
    explicit Writer(const Options& options);
    ~Writer();
    Writer(const Writer&) = delete;
    Writer& operator=(const Writer&) = delete;

    // Producer thread. `preamble` is written at the start of the file (the pcap
    // file header) and of every rotated file. The file is created even if no
    // record ever arrives. Each output adds one buffer to its lane's pool (it
    // parks a partly filled one), so this allocates: call it when a stream
    // first appears, never per record. Throws std::length_error past
    // max_outputs.
    OutputId add_output(OutputFormat format, std::string path, std::string group,
                        std::string antenna, Bytes preamble = {}, Trailer trailer = {});

    // Producer, right after add_output: the output's records are each
    // stream's frames in sequence order through a reorder window of
    // `window` frames (--ordered), which its files' indexes say.
    void set_ordered(OutputId output, std::uint32_t window);

    // Producer, before the first record (the run calls it before its
    // source starts): the outputs added so far are the ones planned, and the
    // stock faults in the pages of a buffer for each of them besides its
    // least, so that no planned output's first record takes page faults.
    // Waits until they and the outputs' first files are made, at most
    // `patience` each.
    void prepare(std::chrono::milliseconds patience = std::chrono::seconds(10));

    // Append one record made of up to four pieces, all copied. Never
    // allocates; may wait for a free buffer only in block_when_full mode.
    // `timestamp_ns` drives -G rotation (0: the record never starts a period).
    void write(OutputId output, std::span<const Bytes> pieces, std::uint64_t timestamp_ns = 0);

    // Append one record: `prefix` (copied), bytes [offset, offset + len)
    // of `frame` (the caller has checked the range), then `suffix` (copied:
    // a pcapng block's padding and length). The frame's bytes are
    // held, not copied, when the frame allows it (Frame::hold) and the slice
    // is at least min_hold_bytes; bytes in device memory that cannot be held
    // are not read on this thread: the record is dropped and counted.
    void write_frame(OutputId output, Bytes prefix, const Frame& frame, std::size_t offset,
                     std::size_t len, Bytes suffix = {});

    // A record the caller cannot write, because the output's format cannot
    // hold it: counted as dropped, and the output fails with "N records not
    // written: `why`" (`why` must outlive the writer: a literal). Never
    // allocates.
    void refuse(OutputId output, const char* why);

    // Producer thread: hand over every partial buffer, wait for the disk
    // threads to finish, close the files. Idempotent.
    void finish();

    // After finish(): what each output holds.
    std::vector<OutputStats> stats() const;
    bool any_failed() const;

    // Any thread, while the run goes on: bytes handed to the disk thread(s)
    // and not yet written (the stats line's "writer backlog").
    std::uint64_t backlog_bytes() const { return backlog_.load(std::memory_order_relaxed); }
    // Any thread: frames held by queued buffers and not yet released.
    std::uint64_t frames_held() const { return held_.load(std::memory_order_relaxed); }
    // Any thread: records dropped so far, by the producer (a full queue, a
    // refusal) or a disk thread (a failed output, an abandon). The timeline's
    // writer witness; stats() has the exact split per output at the end.
    std::uint64_t dropped_so_far() const { return dropped_.load(std::memory_order_relaxed); }
    // Any thread: the memory bound (--writer-memory as used; 0: none).
    std::uint64_t memory_bound() const { return options_.memory_bytes; }

    // The smallest buffer: a 64 KiB record and its pcap record header, in
    // whole pages (O_DIRECT).
    static constexpr std::size_t kMinBufferBytes = 69632;
    // The least memory_bytes these options can run with: max_outputs
    // outputs with kMinBufferBytes buffers, the buffers in flight, the disk
    // threads' staging. 0 when options.memory_bytes is 0 (no bound).
    static std::size_t min_memory_bytes(const Options& options);
    // A memory size as an operator writes it: "1 KiB", "68 KiB", "1 GiB",
    // "1536 bytes" (the largest binary unit it is a whole number of).
    static std::string memory_text(std::size_t bytes);
    // The writer's memory now and at its highest (buffers, their piece
    // lists, staging), and the size of the buffers being made now. Producer
    // thread, or any after finish().
    struct Memory {
        std::size_t bound = 0;  // Options::memory_bytes
        std::size_t now = 0;
        std::size_t peak = 0;
        std::size_t buffer_bytes = 0;
        std::size_t buffers = 0;              // made (allocated at some time)
        std::uint64_t backlog_peak = 0;       // the most bytes handed to the disk threads at once
        std::uint64_t drops_at_bound = 0;     // records dropped (live) with the memory at the bound
        std::uint64_t drops_below_bound = 0;  // records dropped with room left (the host refused)
        bool starved = false;                 // the host refused memory below the bound
        // The most buffer pages the stock held faulted in ahead of the
        // producer at once, and the rule that set it ("least", "rate",
        // "most": BufferArena::ahead_rule); the buffers whose pages the
        // producer faulted in itself (the stock had not reached them).
        std::size_t ahead_peak = 0;
        const char* ahead_rule = "least";
        std::size_t producer_faulted = 0;
    };
    Memory memory() const;

    // The name of file `index` of a rotated output whose base path is `path`:
    // "dir/a.codif" → "dir/a.000007.codif".
    static std::string rotated_path(const std::string& path, std::uint64_t index);

    struct Buffer;  // opaque to callers
    struct Lane;

  private:
    Buffer* try_take_buffer(Lane& lane, bool fresh = true);
    Buffer* wait_for_buffer(Lane& lane);
    bool bounded() const { return options_.memory_bytes > 0; }
    Buffer* new_buffer(Lane& lane, std::size_t bytes);
    void plan_for(std::size_t outputs);
    void want_stock();
    void submit(Output& out);
    void count_drop(Output& out, std::uint8_t why);
    bool begin_record(Output& out, std::size_t bytes, std::size_t pieces,
                      std::uint64_t timestamp_ns);
    void flush_held(std::size_t min_holds);
    void release_holds(Buffer& buffer);  // disk threads

    Options options_;
    // The bytes the writer has, and the arena every buffer is carved from
    // (with a bound, its stock faults pages in ahead): before the lanes, so
    // it outlives their threads.
    std::unique_ptr<writer_parts::MemoryCount> count_;
    std::unique_ptr<writer_parts::BufferArena> stock_;
    std::vector<std::unique_ptr<Lane>> lanes_;
    std::deque<Output> outputs_;    // stable addresses; grown by the producer only
    std::vector<Output*> holding_;  // outputs whose current buffer holds frames
    bool finished_ = false;
    std::atomic<std::uint64_t> backlog_{0};
    std::atomic<std::uint64_t> held_{0};
    std::atomic<std::uint64_t> dropped_{0};
    std::atomic<std::uint64_t> backlog_peak_{0};  // written by the producer only
    // Memory bound: the outputs planned for and the buffer size for them
    // (producer); the producer's drops for want of a buffer, by whether the
    // bound was reached.
    std::size_t planned_outputs_ = 0;
    std::size_t target_bytes_ = 0;
    std::uint64_t drops_at_bound_ = 0;
    std::uint64_t drops_below_bound_ = 0;
    int last_refusal_ = 0;      // why the arena made no buffer last (writer_parts::Refusal)
    std::size_t unserved_ = 0;  // prepared outputs that have not taken their first buffer
    // Creates files ahead and writes indexes behind (writer_ahead.hpp);
    // declared after outputs_, so stopped before they go.
    std::unique_ptr<writer_parts::FileAhead> ahead_;
};

}  // namespace ibvcap
