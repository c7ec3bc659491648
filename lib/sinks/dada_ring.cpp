// PSRDADA rings, the writer's side (lib/sinks/dada_ring.hpp; each step names
// the psrdada function whose behaviour it follows).
#include "lib/sinks/dada_ring.hpp"

#include <fmt/format.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <sys/shm.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace ibvcap {

namespace {
// src/ipcbuf.c, the writer's process states.
enum class WriterState { writer, writing, wchange };

std::string errno_text(int err) {
    return std::strerror(err);
}

// shmget + shmat of an existing segment (src/ipcutil.c, ipc_alloc without
// IPC_CREAT). Nullptr and errno set when there is none.
void* attach_segment(key_t key, int& id) {
    id = shmget(key, 0, 0);
    if (id < 0) {
        return nullptr;
    }
    void* at = shmat(id, nullptr, 0);
    if (at == reinterpret_cast<void*>(-1)) {
        return nullptr;
    }
    return at;
}
}  // namespace

std::optional<key_t> parse_dada_key(std::string_view text) {
    if (text.starts_with("0x") || text.starts_with("0X")) {
        text.remove_prefix(2);
    }
    std::uint32_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, 16);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v == 0 ||
        v > 0x7fffffffu) {
        return std::nullopt;
    }
    return static_cast<key_t>(v);
}

std::string dada_key_name(key_t key) {
    return fmt::format("{:x}", static_cast<std::uint32_t>(key));
}

int dada_semop(int set, unsigned short num, short op, short flags) {
    sembuf b{};
    b.sem_num = num;
    b.sem_op = op;
    b.sem_flg = flags;
    for (;;) {
        if (semop(set, &b, 1) == 0) {
            return 0;
        }
        if (errno != EINTR) {
            return errno;
        }
    }
}

DadaBuffer::DadaBuffer(key_t key) : key_(key) {
    // src/ipcbuf.c ipcsync_get: the sync segment, then count[nbufs], then
    // shmkey[nbufs].
    void* at = attach_segment(key, syncid_);
    if (at == nullptr) {
        const int err = errno;
        if (err == ENOENT) {
            throw DadaError(fmt::format(
                "no PSRDADA ring at key {} (segment 0x{:08x}): create it with dada_db -k {}",
                dada_key_name(key), static_cast<std::uint32_t>(key), dada_key_name(key)));
        }
        throw DadaError(fmt::format("PSRDADA ring at key {}: cannot attach its segment: {}{}",
                                    dada_key_name(key), errno_text(err),
                                    err == EACCES ? " (run as the user that made it, or make it "
                                                    "with dada_db's default 0666 permissions)"
                                                  : ""));
    }
    sync_ = static_cast<DadaSync*>(at);
    shmid_ds ds{};
    if (shmctl(syncid_, IPC_STAT, &ds) != 0 || ds.shm_segsz < sizeof(DadaSync)) {
        throw DadaError(fmt::format("the segment at key {} is not a PSRDADA ring (too small)",
                                    dada_key_name(key)));
    }
    nbufs_ = sync_->nbufs;
    bufsz_ = sync_->bufsz;
    readers_ = sync_->n_readers;
    // Nothing in shared memory is trusted: another program could own the key.
    if (nbufs_ == 0 || bufsz_ == 0 || readers_ == 0 || readers_ > kDadaReaders ||
        ds.shm_segsz < sizeof(DadaSync) + nbufs_ + sizeof(key_t) * nbufs_) {
        throw DadaError(fmt::format(
            "the segment at key {} is not a PSRDADA ring ({} blocks of {} bytes, {} readers)",
            dada_key_name(key), nbufs_, bufsz_, readers_));
    }
    count_ = reinterpret_cast<char*>(sync_ + 1);
    semid_connect_ = semget(sync_->semkey_connect, dada_sem::connect_count, 0);
    if (semid_connect_ < 0) {
        throw DadaError(fmt::format("PSRDADA ring at key {}: its semaphores are missing: {}",
                                    dada_key_name(key), errno_text(errno)));
    }
    for (unsigned r = 0; r < readers_; ++r) {
        const int id = semget(sync_->semkey_data[r], dada_sem::data_count, 0);
        if (id < 0) {
            throw DadaError(
                fmt::format("PSRDADA ring at key {}: reader {}'s semaphores are missing: {}",
                            dada_key_name(key), r, errno_text(errno)));
        }
        semid_data_.push_back(id);
    }
    const auto* keys = reinterpret_cast<const std::uint8_t*>(count_ + nbufs_);
    const bool device = sync_->on_device_id >= 0;
    for (std::uint64_t i = 0; i < nbufs_; ++i) {
        key_t k = 0;
        std::memcpy(&k, keys + i * sizeof(key_t), sizeof k);  // unaligned in psrdada's layout
        int id = -1;
        void* seg = attach_segment(k, id);
        if (seg == nullptr) {
            throw DadaError(fmt::format("PSRDADA ring at key {}: block {} (key 0x{:08x}): {}",
                                        dada_key_name(key), i, static_cast<std::uint32_t>(k),
                                        errno_text(errno)));
        }
        segments_.push_back(static_cast<std::uint8_t*>(seg));
        shmid_ds bs{};
        // A GPU ring's block segment holds the 64-byte cudaIpcMemHandle_t
        // (src/ipcutil_cuda.cu, ipc_alloc_cuda).
        const std::size_t need = device ? 64 : bufsz_;
        if (shmctl(id, IPC_STAT, &bs) != 0 || bs.shm_segsz < need) {
            throw DadaError(fmt::format(
                "PSRDADA ring at key {}: block {} is smaller than the ring says ({} bytes)",
                dada_key_name(key), i, need));
        }
    }
}

DadaBuffer::~DadaBuffer() {
    for (auto* s : segments_) {
        shmdt(s);
    }
    if (sync_ != nullptr) {
        shmdt(sync_);
    }
}

int DadaBuffer::value(int set, unsigned short num) const {
    return semctl(set, num, GETVAL);
}

// ---------------------------------------------------------------------------

namespace {
// One ipcbuf as its writer (src/ipcbuf.c): the steps the header ring and the
// data ring share. Every wait of psrdada's is IPC_NOWAIT here.
struct Side {
    DadaBuffer& buf;
    WriterState state = WriterState::writer;
    std::uint64_t xfer = 0;

    // ipcbuf_lock_write.
    int lock() {
        if (const int err =
                dada_semop(buf.connect_set(), dada_sem::write, -1, IPC_NOWAIT | SEM_UNDO)) {
            return err;
        }
        state = buf.sync().w_state == 0 ? WriterState::wchange : WriterState::writing;
        xfer = buf.sync().w_xfer % kDadaXfers;
        return 0;
    }
    // ipcbuf_unlock_write, after ipcio_close's repositioning of the write
    // counts past the last end of data.
    int unlock() {
        DadaSync& s = buf.sync();
        if (s.w_xfer > 0) {
            s.w_buf_curr = s.e_buf[(s.w_xfer - 1) % kDadaXfers] + 1;
            s.w_buf_next = s.w_buf_curr;
        }
        return dada_semop(buf.connect_set(), dada_sem::write, 1, SEM_UNDO);
    }
    // One step on every reader's semaphore `num`, all or none: a decrement
    // is taken only when every reader's value allows it (only the writer
    // decrements these, so a value seen cannot drop before the semop).
    int all_readers(unsigned short num, short op) {
        if (op < 0) {
            for (unsigned r = 0; r < buf.readers(); ++r) {
                const int v = buf.value(buf.data_set(r), num);
                if (v < 0) {
                    return errno;
                }
                if (v < -op) {
                    return EAGAIN;
                }
            }
        }
        for (unsigned r = 0; r < buf.readers(); ++r) {
            if (const int err = dada_semop(buf.data_set(r), num, op, IPC_NOWAIT)) {
                return err;
            }
        }
        return 0;
    }
    // ipcbuf_enable_sod(w_buf_curr, 0), as get_next_write calls it.
    int start_of_data() {
        DadaSync& s = buf.sync();
        if (const int err = all_readers(dada_sem::sodack, -1)) {
            return err;
        }
        xfer = s.w_xfer % kDadaXfers;
        s.s_buf[xfer] = s.w_buf_curr;
        s.s_byte[xfer] = 0;
        if (s.w_buf_curr == 0) {
            s.eod[xfer] = 0;
        }
        state = WriterState::writing;
        s.w_state = kDadaWriting;
        return 0;  // no block written before the start: FULL gains nothing
    }
    // ipcbuf_get_next_write: the next block, once every reader cleared it.
    int next(std::uint64_t& bufnum) {
        if (state == WriterState::wchange) {
            if (const int err = start_of_data()) {
                return err;
            }
        }
        DadaSync& s = buf.sync();
        bufnum = s.w_buf_next % buf.blocks();
        while (buf.count(bufnum) > 0) {
            if (const int err = all_readers(dada_sem::clear, -1)) {
                return err;
            }
            --buf.count(bufnum);
        }
        ++s.w_buf_next;
        return 0;
    }
    // ipcbuf_mark_filled (with the end of data when `eod`, as
    // ipcbuf_enable_eod then mark_filled do).
    int mark_filled(std::uint64_t nbytes, bool eod) {
        DadaSync& s = buf.sync();
        if (eod) {
            if (const int err = all_readers(dada_sem::eodack, -1)) {
                return err;
            }
            s.e_buf[xfer] = s.w_buf_curr;
            s.e_byte[xfer] = nbytes;
            s.eod[xfer] = 1;
            ++s.w_xfer;
            xfer = s.w_xfer % kDadaXfers;
            state = WriterState::writer;
            s.w_state = 0;
        }
        const std::uint64_t bufnum = s.w_buf_curr % buf.blocks();
        ++buf.count(bufnum);
        ++s.w_buf_curr;
        return all_readers(dada_sem::full, 1);
    }
};

std::string gone_or(int err, const std::string& what) {
    if (err == EIDRM || err == EINVAL) {
        return "its semaphores were removed during the run (dada_db -d?)";
    }
    return what + ": " + errno_text(err);
}
}  // namespace

DadaRingWriter::DadaRingWriter(key_t key) : data_(key), header_(key + 1) {
    if (data_.on_device() != header_.on_device() && header_.on_device()) {
        throw DadaError(
            fmt::format("PSRDADA ring at key {}: its header ring is on a GPU", dada_key_name(key)));
    }
    Side h{header_};
    if (const int err = h.lock()) {
        throw DadaError(
            err == EAGAIN
                ? fmt::format("PSRDADA ring {} already has a writer: stop it (or choose another "
                              "key) and start the capture again",
                              dada_key_name(key))
                : fmt::format("PSRDADA ring {}: cannot lock its header ring: {}",
                              dada_key_name(key), errno_text(err)));
    }
    header_locked_ = true;
    Side d{data_};
    if (const int err = d.lock()) {
        h.unlock();
        header_locked_ = false;
        throw DadaError(
            err == EAGAIN
                ? fmt::format("PSRDADA ring {} already has a writer on its data ring: stop it "
                              "and start the capture again",
                              dada_key_name(key))
                : fmt::format("PSRDADA ring {}: cannot lock its data ring: {}", dada_key_name(key),
                              errno_text(err)));
    }
    data_locked_ = true;
    // A transfer a writer left open (it died after its start of data):
    // psrdada's next writer goes on in it (ipcbuf_lock_write: WRITING), and
    // so does this one.
    started_ = data_.sync().w_state != 0;
}

DadaRingWriter::~DadaRingWriter() {
    end();
}

unsigned DadaRingWriter::readers_attached() const {
    unsigned n = 0;
    for (unsigned r = 0; r < data_.readers(); ++r) {
        // READER_CONN is 1 while reader r's place is free (ipcbuf_create),
        // 0 while a reader holds it (ipcbuf_lock_read).
        if (data_.value(data_.data_set(r), dada_sem::reader_conn) == 0) {
            ++n;
        }
    }
    return n;
}

void DadaRingWriter::fail(const std::string& what, int err) {
    if (error_.empty()) {
        error_ = fmt::format("PSRDADA ring {}: {}", dada_key_name(key()), gone_or(err, what));
    }
}

void DadaRingWriter::write_header(std::string_view text) {
    Side h{header_};
    h.state = header_.sync().w_state == 0 ? WriterState::wchange : WriterState::writing;
    h.xfer = header_.sync().w_xfer % kDadaXfers;
    if (text.size() >= header_.block_bytes()) {
        throw DadaError(
            fmt::format("PSRDADA ring {}: the header ({} bytes) does not fit its "
                        "header block ({} bytes): make the ring with dada_db -a {}",
                        dada_key_name(key()), text.size(), header_.block_bytes(),
                        text.size() + 1 < 4096 ? 4096 : text.size() + 1));
    }
    if (header_.on_device()) {
        throw DadaError(
            fmt::format("PSRDADA ring {}: its header ring is on a GPU", dada_key_name(key())));
    }
    std::uint64_t bufnum = 0;
    if (const int err = h.next(bufnum)) {
        throw DadaError(fmt::format(
            "PSRDADA ring {}: {}", dada_key_name(key()),
            err == EAGAIN ? std::string("its header ring is full: its reader has not taken the "
                                        "last observation's header")
                          : gone_or(err, "cannot take a header block")));
    }
    std::uint8_t* block = header_.segment(bufnum);
    std::memset(block, 0, header_.block_bytes());
    std::memcpy(block, text.data(), text.size());
    // dada_client.c: the header block is marked filled whole (no end of
    // data on the header ring).
    if (const int err = h.mark_filled(header_.block_bytes(), false)) {
        throw DadaError(fmt::format("PSRDADA ring {}: {}", dada_key_name(key()),
                                    gone_or(err, "cannot mark the header filled")));
    }
}

bool DadaRingWriter::take_next(std::uint64_t& bufnum) {
    Side d{data_};
    d.state = !started_ ? WriterState::wchange : WriterState::writing;
    d.xfer = data_.sync().w_xfer % kDadaXfers;
    const int err = d.next(bufnum);
    // The start of data is raised once per transfer, whether or not a block
    // came with it (raising it again would take a reader's SODACK again).
    started_ = started_ || d.state == WriterState::writing;
    if (err == 0) {
        return true;
    }
    if (err == EAGAIN) {
        // SODACK (a reader 8 transfers behind) before the start: retried with
        // the next record; CLEAR: the ring is full.
        return false;
    }
    fail("cannot take the next block", err);
    return false;
}

bool DadaRingWriter::mark_filled(std::uint64_t nbytes, bool end_of_data) {
    if (before_mark_) {
        before_mark_();
    }
    Side d{data_};
    d.state = WriterState::writing;
    d.xfer = data_.sync().w_xfer % kDadaXfers;
    if (const int err = d.mark_filled(nbytes, end_of_data)) {
        fail(end_of_data ? "cannot mark the end of data" : "cannot mark a block filled", err);
        return false;
    }
    return true;
}

DadaRingWriter::Room DadaRingWriter::reserve(std::size_t bytes, std::uint64_t& block,
                                             std::size_t& at) {
    if (failed() || ended_) {
        return Room::failed;
    }
    if (have_block_ && block_bytes_ + bytes <= data_.block_bytes()) {
        block = block_;
        at = block_bytes_;
        block_bytes_ += bytes;
        bytes_total_ += bytes;
        return Room::ok;
    }
    // The next block first, then the full one marked: the block being
    // written always exists, so end() never waits (dada_ring.hpp).
    std::uint64_t next = 0;
    if (!take_next(next)) {
        return failed() ? Room::failed : Room::full;
    }
    if (have_block_ && !mark_filled(block_bytes_, false)) {
        return Room::failed;
    }
    have_block_ = true;
    block_ = next;
    block_bytes_ = bytes;
    bytes_total_ += bytes;
    block = block_;
    at = 0;
    return Room::ok;
}

void DadaRingWriter::end_transfer() {
    if (have_block_ && !failed()) {
        // ipcio_close: enable_eod, then mark_filled(bytes) ends the transfer.
        eod_marked_ = mark_filled(block_bytes_, true);
        if (eod_marked_) {
            ++transfers_;
        }
        open_transfer_ = !eod_marked_;
    } else {
        // A start of data raised with no block taken (the ring full from the
        // transfer's first record), or a failed ring: the transfer stays open.
        open_transfer_ = started_ || have_block_;
    }
    have_block_ = false;
    block_bytes_ = 0;
    started_ = false;
}

void DadaRingWriter::end() {
    if (ended_) {
        return;
    }
    end_transfer();
    ended_ = true;
    // A transfer started (SOD raised) with no block taken: a reader waits on
    // it; psrdada cannot end a transfer without a block, so the start
    // stands, unended, as when a psrdada writer dies (documented).
    if (data_locked_) {
        Side d{data_};
        if (const int err = d.unlock(); err != 0 && !failed()) {
            fail("cannot unlock the data ring", err);
        }
        data_locked_ = false;
    }
    if (header_locked_) {
        Side h{header_};
        h.unlock();
        header_locked_ = false;
    }
}

}  // namespace ibvcap
