// The writer's buffers: their layout in a chunk of the arena, their cost,
// and the changes of size the memory bound makes (lib/sinks/writer_buffer.hpp).
#include "lib/sinks/writer_buffer.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <new>

namespace ibvcap {

namespace writer_parts {

std::uint8_t* page_alloc(std::size_t bytes) {
    // aligned_alloc needs a size that is a multiple of the alignment.
    auto* p = static_cast<std::uint8_t*>(std::aligned_alloc(kPage, page_round(bytes)));
    if (p == nullptr) {
        throw std::bad_alloc();
    }
    return p;
}

std::size_t holds_for(std::size_t bytes, const Writer::Options& o) {
    return std::max<std::size_t>(
        1, std::min(o.max_pieces, bytes / std::max<std::size_t>(o.min_hold_bytes, 1)));
}

BufferLayout buffer_layout(std::size_t bytes, std::size_t holds, std::size_t lead) {
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

std::size_t buffer_cost(std::size_t bytes, const Writer::Options& o) {
    return buffer_layout(bytes, holds_for(bytes, o), (kLeads - 1) * kLeadStep).span;
}

}  // namespace writer_parts

void Writer::Buffer::lay_out(std::size_t bytes_, std::size_t holds_) {
    const writer_parts::BufferLayout l = writer_parts::buffer_layout(bytes_, holds_, lead);
    std::uint8_t* base = chunk();
    pieces.reset(reinterpret_cast<writer_parts::Piece*>(base + l.pieces_at), l.pieces);
    owners.reset(reinterpret_cast<SlotOwner**>(base + l.owners_at), l.holds);
    tokens.reset(reinterpret_cast<std::uint64_t*>(base + l.tokens_at), l.holds);
    data = base + l.data_at;
    capacity = bytes_;
    max_holds = holds_;
    span = l.span;
    reset();
}

void Writer::Buffer::trim(std::size_t size, std::size_t holds, std::size_t cost) {
    cap(size, holds);
    charged = cost;
    const std::size_t from = writer_parts::page_round(size);
    const std::size_t to = capacity / writer_parts::kPage * writer_parts::kPage;
    if (to > from) {
        ::madvise(data + from, to - from, MADV_DONTNEED);
    }
}

void Writer::Buffer::shrink(std::size_t size, std::size_t holds) {
    const std::size_t before = span;
    lay_out(size, holds);
    if (before > span) {
        ::madvise(chunk() + span, before - span, MADV_DONTNEED);
    }
}

}  // namespace ibvcap
