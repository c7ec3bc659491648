// The tests' own side of a PSRDADA ring: making one as dada_db does and
// reading it as dada_dbdisk does, written from psrdada's facts (src/ipcbuf.c
// ipcbuf_create_work, ipcbuf_lock_read, ipcbuf_get_next_read_work,
// ipcbuf_mark_cleared, ipcbuf_unlock_read; src/dada_hdu.c: data ring at
// KEY, header ring at KEY + 1; GReX-Telescope/psrdada), independently of
// lib/sinks/dada_ring.cpp's writer but for the attach (DadaBuffer, which
// only maps what is there). psrdada's own dada_db and dada_dbdisk were run
// against the capture by hand (docs/operations.md).
#pragma once

#include <sys/ipc.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <time.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "lib/sinks/dada_device.hpp"
#include "lib/sinks/dada_ring.hpp"

namespace ibvcap::test {

// Writes block b's 64-byte handle of a GPU ring (the CUDA IPC handle, or
// the stand-in's).
using HandleMaker = std::function<void(std::uint64_t block, std::uint8_t* handle)>;

// One ipcbuf made as ipcbuf_create_work makes it: host blocks, or with
// `standin_gpu` a GPU ring of the stand-in's (each block segment holds a
// handle, lib/sinks/dada_device.hpp, naming a segment that holds the block,
// as a dada_db -g ring's holds a cudaIpcMemHandle_t), or with `handles` a
// GPU ring whose handles it writes (a real one: gpu::make_ipc_blocks).
class MadeBuffer {
  public:
    MadeBuffer(key_t key, std::uint64_t nbufs, std::uint64_t bufsz, unsigned readers,
               bool standin_gpu = false, const HandleMaker& handles = {})
        : key_(key) {
        const bool gpu = standin_gpu || static_cast<bool>(handles);
        const int flag = 0666 | IPC_CREAT | IPC_EXCL;
        const std::size_t size = sizeof(DadaSync) + nbufs + sizeof(key_t) * nbufs;
        syncid_ = shmget(key, size, flag);
        if (syncid_ < 0) {
            throw std::runtime_error("shmget sync: " + std::string(std::strerror(errno)));
        }
        auto* sync = static_cast<DadaSync*>(shmat(syncid_, nullptr, 0));
        auto* count = reinterpret_cast<char*>(sync + 1);
        auto* keys = reinterpret_cast<std::uint8_t*>(count + nbufs);
        sync->nbufs = nbufs;
        sync->bufsz = bufsz;
        sync->n_readers = readers;
        sync->on_device_id = gpu ? 0 : -1;
        for (unsigned x = 0; x < kDadaXfers; ++x) {
            sync->s_buf[x] = sync->s_byte[x] = sync->e_buf[x] = sync->e_byte[x] = 0;
            sync->eod[x] = 1;
        }
        key_t k = key + kDadaKeyIncrement;
        sync->semkey_connect = k;
        for (unsigned r = 0; r < kDadaReaders; ++r) {
            k += kDadaKeyIncrement;
            sync->semkey_data[r] = k;
        }
        for (std::uint64_t b = 0; b < nbufs; ++b) {
            count[b] = 0;
            k += kDadaKeyIncrement;
            std::memcpy(keys + b * sizeof(key_t), &k, sizeof k);
            const int id = shmget(k, gpu ? 64 : bufsz, flag);
            if (id < 0) {
                throw std::runtime_error("shmget block: " + std::string(std::strerror(errno)));
            }
            shm_.push_back(id);
            if (standin_gpu) {
                const key_t backing = key + kDadaKeyIncrement * static_cast<key_t>(40 + b);
                shm_.push_back(shmget(backing, bufsz, flag));
                auto* handle = static_cast<std::uint8_t*>(shmat(id, nullptr, 0));
                std::memcpy(handle, kDadaStandinMagic, sizeof kDadaStandinMagic);
                std::memcpy(handle + sizeof kDadaStandinMagic, &backing, sizeof backing);
                shmdt(handle);
            } else if (handles) {
                auto* handle = static_cast<std::uint8_t*>(shmat(id, nullptr, 0));
                handles(b, handle);
                shmdt(handle);
            }
        }
        sync->w_buf_curr = sync->w_buf_next = sync->w_xfer = 0;
        sync->w_state = 0;
        semid_connect_ = semget(sync->semkey_connect, dada_sem::connect_count, flag);
        for (unsigned r = 0; r < readers; ++r) {
            semid_data_.push_back(semget(sync->semkey_data[r], dada_sem::data_count, flag));
        }
        // Ready for one writer and `readers` readers; SODACK and EODACK at
        // IPCBUF_XFERS; each reader's place free.
        dada_semop(semid_connect_, dada_sem::write, 1, 0);
        dada_semop(semid_connect_, dada_sem::read, static_cast<short>(readers), 0);
        for (const int id : semid_data_) {
            dada_semop(id, dada_sem::sodack, kDadaXfers, 0);
            dada_semop(id, dada_sem::eodack, kDadaXfers, 0);
            dada_semop(id, dada_sem::reader_conn, 1, 0);
        }
        shmdt(sync);
    }
    ~MadeBuffer() { destroy(); }
    // Leave it for another process (as dada_db does): the destructor then
    // removes nothing.
    void keep() {
        semid_connect_ = syncid_ = -1;
        semid_data_.clear();
        shm_.clear();
    }
    MadeBuffer(const MadeBuffer&) = delete;
    MadeBuffer& operator=(const MadeBuffer&) = delete;
    // As dada_db -d: the semaphores and segments removed (attached ones
    // stay mapped until detached).
    void destroy() {
        if (semid_connect_ >= 0) {
            semctl(semid_connect_, 0, IPC_RMID);
            semid_connect_ = -1;
        }
        for (int& id : semid_data_) {
            if (id >= 0) {
                semctl(id, 0, IPC_RMID);
                id = -1;
            }
        }
        for (int& id : shm_) {
            if (id >= 0) {
                shmctl(id, IPC_RMID, nullptr);
                id = -1;
            }
        }
        if (syncid_ >= 0) {
            shmctl(syncid_, IPC_RMID, nullptr);
            syncid_ = -1;
        }
    }

  private:
    key_t key_;
    int syncid_ = -1;
    int semid_connect_ = -1;
    std::vector<int> semid_data_;
    std::vector<int> shm_;
};

// As dada_db -d: the ring at `key` and its header ring at key + 1 removed,
// found by their keys (psrdada src/ipcbuf.c, ipcbuf_destroy). False when
// there is none.
inline bool destroy_ring(key_t key) {
    bool any = false;
    for (const key_t k : {key, key + 1}) {
        std::vector<key_t> blocks;
        int sets[1 + kDadaReaders];
        int nsets = 0;
        {
            try {
                DadaBuffer b(k);
                const DadaSync& s = b.sync();
                sets[nsets++] = b.connect_set();
                for (unsigned r = 0; r < b.readers(); ++r) {
                    sets[nsets++] = b.data_set(r);
                }
                for (std::uint64_t i = 0; i < b.blocks(); ++i) {
                    key_t bk = 0;
                    std::memcpy(&bk,
                                reinterpret_cast<const std::uint8_t*>(&s + 1) + b.blocks() +
                                    i * sizeof(key_t),
                                sizeof bk);
                    blocks.push_back(bk);
                    if (b.on_device()) {
                        key_t backing = 0;  // the stand-in's GPU block
                        std::memcpy(&backing, b.segment(i) + sizeof kDadaStandinMagic,
                                    sizeof backing);
                        blocks.push_back(backing);
                    }
                }
            } catch (const DadaError&) {
                continue;
            }
        }
        any = true;
        for (int i = 0; i < nsets; ++i) {
            semctl(sets[i], 0, IPC_RMID);
        }
        for (const key_t bk : blocks) {
            const int id = shmget(bk, 0, 0);
            if (id >= 0) {
                shmctl(id, IPC_RMID, nullptr);
            }
        }
        const int id = shmget(k, 0, 0);
        if (id >= 0) {
            shmctl(id, IPC_RMID, nullptr);
        }
    }
    return any;
}

// A data ring at `key` and its header ring at key + 1, as dada_db makes them
// (8 header blocks of `header_bytes`).
struct MadeRing {
    MadeRing(key_t key, std::uint64_t blocks, std::uint64_t block_bytes, unsigned readers = 1,
             std::uint64_t header_bytes = 4096, bool standin_gpu = false,
             const HandleMaker& handles = {})
        : data(key, blocks, block_bytes, readers, standin_gpu, handles),
          header(key + 1, 8, header_bytes, readers) {}
    void destroy() {
        data.destroy();
        header.destroy();
    }
    void keep() {
        data.keep();
        header.keep();
    }
    MadeBuffer data;
    MadeBuffer header;
};

// Copies `bytes` at `offset` of GPU block `block` to `host` (a reader on the GPU).
using DeviceRead = std::function<void(std::uint64_t block, std::uint64_t offset, std::uint8_t* host,
                                      std::uint64_t bytes)>;

// A reader of one ipcbuf (psrdada's reader states: READER 5, READING 6, RSTOP 7).
class RingReader {
  public:
    explicit RingReader(key_t key, DeviceRead device_read = {})
        : buf_(key), device_read_(std::move(device_read)) {
        if (buf_.on_device() && !device_read_) {
            // The stand-in's GPU blocks, as a reader on the GPU would open them.
            for (std::uint64_t b = 0; b < buf_.blocks(); ++b) {
                key_t k = 0;
                std::memcpy(&k, buf_.segment(b) + sizeof kDadaStandinMagic, sizeof k);
                device_.push_back(static_cast<std::uint8_t*>(shmat(shmget(k, 0, 0), nullptr, 0)));
            }
        }
    }
    // ipcbuf_lock_read (without waiting): false when no reader place is free.
    bool lock() {
        if (dada_semop(buf_.connect_set(), dada_sem::read, -1, IPC_NOWAIT | SEM_UNDO) != 0) {
            return false;
        }
        for (unsigned r = 0; r < buf_.readers(); ++r) {
            if (dada_semop(buf_.data_set(r), dada_sem::reader_conn, -1, IPC_NOWAIT | SEM_UNDO) ==
                0) {
                iread_ = static_cast<int>(r);
                state_ = buf_.sync().r_states[r] == 0 ? 5 : 6;
                xfer_ = buf_.sync().r_xfers[r] % kDadaXfers;
                return true;
            }
        }
        dada_semop(buf_.connect_set(), dada_sem::read, 1, SEM_UNDO);
        return false;
    }
    // ipcbuf_get_next_read_work, waiting at most `timeout_ms` for a full
    // block: nullptr at the end of the transfer or when none came.
    const std::uint8_t* next(std::uint64_t& bytes, int timeout_ms = 5000) {
        if (state_ == 7) {
            return nullptr;
        }
        DadaSync& s = buf_.sync();
        const unsigned r = static_cast<unsigned>(iread_);
        sembuf b{dada_sem::full, -1, 0};
        timespec t{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
        if (semtimedop(buf_.data_set(r), &b, 1, &t) != 0) {
            return nullptr;
        }
        std::uint64_t start_byte = 0;
        if (state_ == 5) {
            xfer_ = s.r_xfers[r] % kDadaXfers;
            state_ = 6;
            s.r_states[r] = 6;
            s.r_bufs[r] = s.s_buf[xfer_];
            start_byte = s.s_byte[xfer_];
            dada_semop(buf_.data_set(r), dada_sem::sodack, 1, 0);
        }
        const std::uint64_t bufnum = s.r_bufs[r] % buf_.blocks();
        bytes = (s.eod[xfer_] && s.r_bufs[r] == s.e_buf[xfer_]) ? s.e_byte[xfer_] - start_byte
                                                                : buf_.block_bytes() - start_byte;
        return (buf_.on_device() ? device_[bufnum] : buf_.segment(bufnum)) + start_byte;
    }
    // ipcbuf_mark_cleared; true when that block ended the transfer.
    bool clear() {
        DadaSync& s = buf_.sync();
        const unsigned r = static_cast<unsigned>(iread_);
        dada_semop(buf_.data_set(r), dada_sem::clear, 1, 0);
        if (s.eod[xfer_] && s.r_bufs[r] == s.e_buf[xfer_]) {
            state_ = 7;
            s.r_states[r] = 0;
            ++s.r_xfers[r];
            xfer_ = s.r_xfers[r] % kDadaXfers;
            dada_semop(buf_.data_set(r), dada_sem::eodack, 1, 0);
            return true;
        }
        ++s.r_bufs[r];
        return false;
    }
    // ipcbuf_reset for a reader at the end of a transfer: ready for the next.
    void next_transfer() {
        if (state_ == 7) {
            state_ = 5;
        }
    }
    // ipcbuf_unlock_read.
    void unlock() {
        if (iread_ < 0) {
            return;
        }
        dada_semop(buf_.data_set(static_cast<unsigned>(iread_)), dada_sem::reader_conn, 1,
                   SEM_UNDO);
        dada_semop(buf_.connect_set(), dada_sem::read, 1, SEM_UNDO);
        iread_ = -1;
    }
    ~RingReader() {
        unlock();
        for (auto* d : device_) {
            shmdt(d);
        }
    }
    DadaBuffer& buffer() { return buf_; }

  private:
    DadaBuffer buf_;
    DeviceRead device_read_;
    std::vector<std::uint8_t> copy_;     // a GPU block read to the host
    std::vector<std::uint8_t*> device_;  // a stand-in GPU ring's blocks
    int iread_ = -1;
    int state_ = 0;
    std::uint64_t xfer_ = 0;
};

// dada_dbdisk's reading of one transfer: the header (HDR_SIZE bytes of the
// header block), then the data to the end of data.
struct ReadTransfer {
    std::string header;
    std::vector<std::uint8_t> data;
    bool ended = false;  // the end of data was seen
};
inline ReadTransfer read_transfer(RingReader& header, RingReader& data, int timeout_ms = 5000) {
    ReadTransfer out;
    std::uint64_t bytes = 0;
    if (const std::uint8_t* h = header.next(bytes, timeout_ms)) {
        out.header.assign(reinterpret_cast<const char*>(h),
                          strnlen(reinterpret_cast<const char*>(h), bytes));
        header.clear();
    } else {
        return out;
    }
    for (;;) {
        const std::uint8_t* d = data.next(bytes, timeout_ms);
        if (d == nullptr) {
            return out;
        }
        out.data.insert(out.data.end(), d, d + bytes);
        if (data.clear()) {
            out.ended = true;
            data.next_transfer();
            return out;
        }
    }
}

// A reader of a ring (its header ring and data ring) on a thread of its own,
// reading one transfer as dada_dbdisk does, from the start of the test.
class BackgroundReader {
  public:
    explicit BackgroundReader(key_t key, int timeout_ms = 5000, DeviceRead device_read = {})
        : header_(key + 1), data_(key, std::move(device_read)) {
        locked_ = header_.lock() && data_.lock();
        if (locked_) {
            thread_ = std::thread(
                [this, timeout_ms] { got_ = read_transfer(header_, data_, timeout_ms); });
        }
    }
    ~BackgroundReader() { join(); }
    BackgroundReader(const BackgroundReader&) = delete;
    BackgroundReader& operator=(const BackgroundReader&) = delete;
    bool locked() const { return locked_; }
    // What it read, once the transfer ended (or none came in time).
    const ReadTransfer& join() {
        if (thread_.joinable()) {
            thread_.join();
        }
        return got_;
    }
    void unlock() {
        join();
        header_.unlock();
        data_.unlock();
    }

  private:
    RingReader header_;
    RingReader data_;
    bool locked_ = false;
    ReadTransfer got_;
    std::thread thread_;
};

}  // namespace ibvcap::test
