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
    ibvcap::fuzz::Reader in(data, size);
    ibvcap::fuzz::DemuxCheck check(ibvcap::fuzz::read_demux_config(in));

    ibvcap::fuzz::feed_chunks(in, kMaxFrames, [&](const ibvcap::Frame& f) { check.feed(f); });
    check.check_ledger();
    return 0;
}

IBVCAP_FUZZ_TARGET(ibvcap_fuzz_demux)
