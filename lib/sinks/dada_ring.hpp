// PSRDADA ring buffers (docs/formats.md, "PSRDADA rings"): the writer's side
// of the protocol, implemented from the psrdada sources' facts, not linked
// (psrdada is not packaged for Debian). Facts taken from
// GReX-Telescope/psrdada (a CMake copy of the SourceForge sources):
//   src/ipcbuf.h      the ipcsync_t layout, the semaphore numbers
//   src/ipcbuf.c      create (the keys of the pieces, the semaphores'
//                     starting values), lock_write, get_next_write,
//                     enable_sod, mark_filled (end of data), unlock_write
//   src/ipcio.c       ipcio_close: end of data on the block being written,
//                     then w_buf_curr = e_buf + 1
//   src/dada_hdu.c    the data ring at KEY, the header ring at KEY + 1
//   src/ipcutil_cuda.cu  a GPU ring's block segment holds a
//                     cudaIpcMemHandle_t, not the data
//
// A ring is one ipcbuf: a System V segment at its key holding the ipcsync_t,
// then a count byte per block (readers still to clear it) and the blocks'
// segment keys; one segment per block; a semaphore set of two at
// semkey_connect (IPCBUF_WRITE, IPCBUF_READ: who may lock) and one of five
// per reader (SODACK, EODACK, FULL, CLEAR, READER_CONN). The writer fills
// blocks in order; a block filled before is reused only once every reader
// has cleared it (its CLEAR taken once per reader).
//
// What ibvcap does differently, and why: it never waits. psrdada's writer
// blocks on CLEAR (a full ring) and on SODACK/EODACK (readers 8 transfers
// behind); here each of those is a semop with IPC_NOWAIT, and "no room" is
// the answer: the frame is the consumer's loss, counted (lib/ledger,
// LossCause::consumer). The lock is taken the same way: a ring that already
// has a writer is refused, not waited for. The next block is taken before
// the full one is marked filled, so that the block being written always
// exists and end of data can always be marked without waiting (psrdada's
// ipcio marks first, and at a close on a block boundary opens one more
// block, waiting for it). Every lock is taken with SEM_UNDO, as psrdada's:
// a capture that dies leaves the ring unlocked.
//
// Not on a per-packet path: a semop when a block fills (one per
// block_bytes), never per frame.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ibvcap {

// A ring that cannot be used: one line naming the key, the cause and the fix.
struct DadaError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// psrdada's limits (src/ipcbuf.h).
inline constexpr unsigned kDadaXfers = 8;    // IPCBUF_XFERS
inline constexpr unsigned kDadaReaders = 8;  // IPCBUF_READERS
// The semaphores (src/ipcbuf.h).
namespace dada_sem {
inline constexpr unsigned short write = 0, read = 1;  // the connect set
inline constexpr unsigned short sodack = 0, eodack = 1, full = 2, clear = 3, reader_conn = 4;
inline constexpr int connect_count = 2, data_count = 5;
}  // namespace dada_sem
// The key step between a ring's pieces (src/ipcbuf.c, key_increment).
inline constexpr key_t kDadaKeyIncrement = 0x00010000;

// src/ipcbuf.h's ipcsync_t, field for field: it lives in shared memory, so
// its layout is the contract (checked below for the x86-64 and aarch64 ABI).
struct DadaSync {
    key_t semkey_connect;
    key_t semkey_data[kDadaReaders];
    std::uint64_t nbufs;
    std::uint64_t bufsz;
    std::uint64_t w_buf_next;
    std::uint64_t w_buf_curr;
    int w_state;
    std::uint64_t w_xfer;
    std::uint64_t r_bufs[kDadaReaders];
    int r_states[kDadaReaders];
    std::uint64_t r_xfers[kDadaReaders];
    unsigned n_readers;
    std::uint64_t s_buf[kDadaXfers];
    std::uint64_t s_byte[kDadaXfers];
    char eod[kDadaXfers];
    std::uint64_t e_buf[kDadaXfers];
    std::uint64_t e_byte[kDadaXfers];
    int on_device_id;
};
static_assert(sizeof(key_t) == 4);
static_assert(offsetof(DadaSync, nbufs) == 40);
static_assert(offsetof(DadaSync, w_state) == 72);
static_assert(offsetof(DadaSync, w_xfer) == 80);
static_assert(offsetof(DadaSync, r_states) == 152);
static_assert(offsetof(DadaSync, n_readers) == 248);
static_assert(offsetof(DadaSync, eod) == 384);
static_assert(offsetof(DadaSync, e_byte) == 456);
static_assert(offsetof(DadaSync, on_device_id) == 520);
static_assert(sizeof(DadaSync) == 528);
// The writer's w_state while a transfer is open (src/ipcbuf.c IPCBUF_WRITING).
inline constexpr int kDadaWriting = 3;

// "dada", "0xdada", "DADA": the hex key dada_db -k takes. Nullopt when it is
// not one (or is 0, IPC_PRIVATE).
std::optional<key_t> parse_dada_key(std::string_view text);
std::string dada_key_name(key_t key);  // "dada"

// One ring attached (the sync segment, the block segments, the semaphores):
// the pieces the writer and a reader both need. Shared by the tests' reader.
class DadaBuffer {
  public:
    // Throws DadaError: no ring at the key, or one that is not a psrdada ring.
    explicit DadaBuffer(key_t key);
    ~DadaBuffer();
    DadaBuffer(const DadaBuffer&) = delete;
    DadaBuffer& operator=(const DadaBuffer&) = delete;

    key_t key() const { return key_; }
    DadaSync& sync() { return *sync_; }
    const DadaSync& sync() const { return *sync_; }
    std::uint64_t blocks() const { return nbufs_; }
    std::uint64_t block_bytes() const { return bufsz_; }
    unsigned readers() const { return readers_; }
    bool on_device() const { return sync_->on_device_id >= 0; }
    // Readers still to clear block i (src/ipcbuf.c, id->count).
    char& count(std::uint64_t i) { return count_[i]; }
    // Block i's segment: its data (a host ring), or the cudaIpcMemHandle_t
    // of its device memory (a GPU ring, 64 bytes).
    std::uint8_t* segment(std::uint64_t i) { return segments_[i]; }
    int connect_set() const { return semid_connect_; }
    int data_set(unsigned reader) const { return semid_data_[reader]; }
    // A semaphore's value; -1 when the set is gone (the ring was destroyed).
    int value(int set, unsigned short num) const;

  private:
    key_t key_;
    int syncid_ = -1;
    DadaSync* sync_ = nullptr;
    char* count_ = nullptr;
    std::uint64_t nbufs_ = 0;
    std::uint64_t bufsz_ = 0;
    unsigned readers_ = 0;
    int semid_connect_ = -1;
    std::vector<int> semid_data_;
    std::vector<std::uint8_t*> segments_;
};

// A semop on one semaphore; 0, or the errno (EAGAIN: it would have waited;
// EIDRM or EINVAL: the ring's semaphores were removed). Retries EINTR.
int dada_semop(int set, unsigned short num, short op, short flags);

// The writer of one ring. Records are fixed-size (a stream's payload);
// the ring's blocks must hold a whole number of them.
class DadaRingWriter {
  public:
    // Attach to the data ring at `key` and the header ring at key + 1
    // (dada_hdu.c) and lock both as their writer, without waiting. Throws
    // DadaError (no ring, a ring with a writer already).
    explicit DadaRingWriter(key_t key);
    ~DadaRingWriter();  // end(), then detach
    DadaRingWriter(const DadaRingWriter&) = delete;
    DadaRingWriter& operator=(const DadaRingWriter&) = delete;

    key_t key() const { return data_.key(); }
    DadaBuffer& data() { return data_; }
    const DadaBuffer& data() const { return data_; }
    std::uint64_t header_block_bytes() const { return header_.block_bytes(); }
    // Readers locked on the data ring now (READER_CONN taken), of readers().
    unsigned readers_attached() const;

    // The observation's header, in one header block (zero-padded): dada_hdu
    // readers take the block's first HDR_SIZE bytes. Throws DadaError (the
    // header ring is full: its reader is behind; or it was destroyed).
    void write_header(std::string_view text);

    enum class Room : std::uint8_t { ok, full, failed };
    // Room for `bytes` more (the record size, a divisor of block_bytes()):
    // `at` is where they go in the block being written (block memory: a
    // device pointer's offset for a GPU ring). full: no block free (the
    // reader is behind); failed: the ring is unusable (error()).
    Room reserve(std::size_t bytes, std::uint64_t& block, std::size_t& at);
    // End of data on the block being written: the transfer ends and the
    // next reserve() starts another (a new header goes first). Never throws.
    void end_transfer();
    // end_transfer(), then unlock. Idempotent;
    // never throws. With nothing written, no transfer was started: only the
    // locks are given back.
    void end();
    bool failed() const { return !error_.empty(); }
    const std::string& error() const { return error_; }
    // Called before each block is marked filled (a GPU ring's placer waits
    // there for the copies into it to land).
    void set_before_mark(std::function<void()> f) { before_mark_ = std::move(f); }
    // Whether every transfer that was started was ended.
    bool ended_with_eod() const { return !open_transfer_; }
    std::uint64_t transfers() const { return transfers_; }
    std::uint64_t bytes_written() const { return bytes_total_; }

  private:
    bool take_next(std::uint64_t& bufnum);
    bool mark_filled(std::uint64_t nbytes, bool end_of_data);
    void fail(const std::string& what, int err);

    DadaBuffer data_;
    DadaBuffer header_;
    bool data_locked_ = false;
    bool header_locked_ = false;
    bool started_ = false;  // start of data raised
    bool have_block_ = false;
    std::uint64_t block_ = 0;        // the block being written (its number in the ring)
    std::uint64_t block_bytes_ = 0;  // bytes in it
    std::uint64_t bytes_total_ = 0;
    bool ended_ = false;
    bool eod_marked_ = false;
    bool open_transfer_ = false;   // the last transfer ended without its end of data
    std::uint64_t transfers_ = 0;  // transfers ended
    std::function<void()> before_mark_;
    std::string error_;
};

}  // namespace ibvcap
