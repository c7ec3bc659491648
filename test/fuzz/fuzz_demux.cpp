// Fuzz target: the whole per-frame path (lib/demux/demux.hpp Demux::on_frame with a
// Ledger and no writer): packet parsing, CODIF decoding and validation, stream
// assignment, sequence tracking, and lib/core/frame.hpp gather/slice on frames that
// arrive in two pieces.
//
// Input: [0] config (bit 0: a GROUP:PORT list of one, LE32 address + LE16 port
// follow; bit 1: an --antenna list of one, LE32 address follows; bits 2-7: the
// group, antenna and stream limits, see small_demux_options). Then frames, each
// a 6-byte chunk header and up to `length` bytes:
//   LE16 length, LE16 split, flags, delta
//   flags bit 0: the frame arrives as head = the first min(split, length)
//                bytes and tail = the rest (the verbs header/payload split)
//   flags bit 1: wire length = captured + delta (a snaplen-truncated capture)
//   flags bit 2: wire length = captured - min(delta, captured) (when bit 1 is clear)
// Each piece is copied to a buffer of exactly its size so that AddressSanitizer
// catches a read past it.
//
// Checks: every frame is counted exactly once (packets == codif + malformed +
// non_codif), the ledger reconciles, and every CODIF frame the demux accepts is
// consistent with its bytes and its stream (fuzz_demux_check.hpp).
#include <cstdint>
#include <vector>

#include "fuzz_common.hpp"
#include "fuzz_demux_check.hpp"
#include "fuzz_entries.hpp"

namespace {
constexpr std::size_t kMaxFrames = 1024;
}  // namespace

int ibvcap_fuzz_demux(const std::uint8_t* data, std::size_t size) {
    using ibvcap::Bytes;
    ibvcap::fuzz::Reader in(data, size);
    const std::uint8_t config = in.u8();
    ibvcap::DemuxOptions options = ibvcap::fuzz::small_demux_options(config);
    if ((config & 1u) != 0) {
        const std::uint32_t ip = in.u32();
        const std::uint16_t port = in.u16();
        options.groups.push_back(ibvcap::Endpoint{ip, port});
    }
    if ((config & 2u) != 0) {
        options.antennas.push_back(in.u32());
    }
    ibvcap::fuzz::DemuxCheck check(std::move(options));

    for (std::size_t n = 0; n < kMaxFrames && in.remaining() > 0; ++n) {
        const std::uint16_t length = in.u16();
        const std::uint16_t split = in.u16();
        const std::uint8_t flags = in.u8();
        const std::uint8_t delta = in.u8();
        const Bytes bytes = in.take(length);
        const std::size_t head_size =
            (flags & 1u) != 0 && split < bytes.size() ? std::size_t{split} : bytes.size();
        const auto cut = bytes.begin() + static_cast<std::ptrdiff_t>(head_size);
        const std::vector<std::uint8_t> head(bytes.begin(), cut);
        const std::vector<std::uint8_t> tail(cut, bytes.end());

        ibvcap::Frame frame;
        frame.head = Bytes(head.data(), head.size());
        frame.tail = Bytes(tail.data(), tail.size());
        const auto captured = static_cast<std::uint32_t>(bytes.size());
        if ((flags & 2u) != 0) {
            frame.wire_bytes = captured + delta;
        } else if ((flags & 4u) != 0) {
            frame.wire_bytes = captured - (delta < captured ? delta : captured);
        } else {
            frame.wire_bytes = captured;
        }
        frame.timestamp_ns = 1'000'000'000u * n;
        check.feed(frame);
    }
    check.check_ledger();
    return 0;
}

IBVCAP_FUZZ_TARGET(ibvcap_fuzz_demux)
