// The writer's buffers (lib/sinks/writer.hpp): a record's pieces, the
// fixed lists a buffer keeps them in, and Writer::Buffer itself, laid out in
// its own chunk of the arena (writer_memory.hpp) so that making one allocates
// nothing. The producer fills buffers (writer.cpp); the disk threads write
// them (writer_io.cpp). Include only from lib/sinks/writer*.cpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "lib/sinks/writer.hpp"

namespace ibvcap::writer_parts {

inline constexpr std::size_t kPage = 4096;  // O_DIRECT alignment (covers 512-byte sector devices)

inline constexpr std::size_t page_round(std::size_t bytes) {
    return (bytes + kPage - 1) / kPage * kPage;
}

// `bytes` rounded up to whole pages, page-aligned; throws std::bad_alloc.
std::uint8_t* page_alloc(std::size_t bytes);

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

// Held frames a buffer of `bytes` takes before it is sent: as many as
// slices of min_hold_bytes fit, at most max_pieces (the piece list is made
// for them, so it grows with the buffer, not with max_pieces alone).
std::size_t holds_for(std::size_t bytes, const Writer::Options& o);

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
BufferLayout buffer_layout(std::size_t bytes, std::size_t holds, std::size_t lead = 0);
// The leads the arena gives its buffers in turn: 0 to 31 cache lines.
inline constexpr std::size_t kLeadStep = 64;
inline constexpr std::size_t kLeads = 32;

// What a buffer of `bytes` costs in memory: its chunk of the arena, the
// Buffer, its lists and its bytes in whole pages, with the largest lead.
std::size_t buffer_cost(std::size_t bytes, const Writer::Options& o);

}  // namespace ibvcap::writer_parts

namespace ibvcap {

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
    writer_parts::FixedList<writer_parts::Piece> pieces;
    // Held frames: released (grouped by owner) once the buffer is written,
    // or, when every held piece is device memory, once the device copies
    // have landed in staging (gpu-cuda-2.md N3: nothing reads a device slot
    // after copy_to_host). `owners` stays until reset (held_intact reads it).
    writer_parts::FixedList<SlotOwner*> owners;
    writer_parts::FixedList<std::uint64_t> tokens;
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
    void lay_out(std::size_t bytes_, std::size_t holds_);
    // Parked, partly filled, and larger than the memory bound now wants:
    // takes no more than `size` bytes and `holds` frames, and gives the
    // pages past `size` back to the system (it is made smaller in place once
    // written). Its count becomes that of a buffer of `size`.
    void trim(std::size_t size, std::size_t holds, std::size_t cost);
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
    void shrink(std::size_t size, std::size_t holds);
    // Inline from here: the producer calls these for every record.
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

}  // namespace ibvcap
