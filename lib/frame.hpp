// One received Ethernet frame as the sources hand it to the demultiplexer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "formats/bytes.hpp"

namespace ibvcap {

// A frame may sit in two pieces: with the verbs header/payload split, `head` is
// SGE0 (host memory: Ethernet..CODIF header) and `tail` is SGE1 (the payload).
// Contiguous sources (pcap) leave `tail` empty.
struct Frame {
    Bytes head;
    Bytes tail;
    std::uint32_t wire_bytes = 0;    // length on the wire (>= captured when truncated)
    std::uint64_t timestamp_ns = 0;  // UNIX time in nanoseconds

    std::uint64_t captured_bytes() const { return head.size() + tail.size(); }

    // Copy `out.size()` bytes starting at `offset` across both pieces. The caller
    // has checked offset + out.size() <= captured_bytes().
    void gather(std::size_t offset, MutableBytes out) const {
        std::size_t done = 0;
        if (offset < head.size()) {
            done = std::min(out.size(), head.size() - offset);
            std::memcpy(out.data(), head.data() + offset, done);
        }
        if (done < out.size()) {
            const std::size_t tail_offset = offset + done - head.size();
            std::memcpy(out.data() + done, tail.data() + tail_offset, out.size() - done);
        }
    }

    // The pieces covering [offset, offset + len) of the frame: up to two spans.
    // The caller has checked the range lies within captured_bytes().
    void slice(std::size_t offset, std::size_t len, Bytes& first, Bytes& second) const {
        if (offset >= head.size()) {
            first = tail.subspan(offset - head.size(), len);
            second = {};
            return;
        }
        const std::size_t in_head = std::min(len, head.size() - offset);
        first = head.subspan(offset, in_head);
        second = tail.subspan(0, len - in_head);
    }
};

}  // namespace ibvcap
