// The ASCII header ibvcap writes into a PSRDADA header ring (docs/formats.md,
// "PSRDADA rings"): what dspsr and heimdall need, derived from the stream's
// own first frame header and from options, plus ibvcap's own keys.
//
// Format (psrdada src/ascii_header.c, ascii_header_set): one "KEY value"
// line per key, the key left-aligned in 12 columns; a key is found where it
// starts a line. The header is NUL-terminated and zero-padded to the header
// block; HDR_SIZE is the header block's size (dada_hdu.c takes the block's
// first HDR_SIZE bytes).
//
// Time: UTC_START is the whole second the first record's period starts at,
// OBS_OFFSET the bytes from it to the first record (its frame number in the
// period × the payload bytes), BYTES_PER_SECOND the payload bytes a second
// carries; so any byte's time is UTC_START + (OBS_OFFSET + position) /
// BYTES_PER_SECOND, which ibvcap keeps true (a frame that never came, or that
// the ring had no room for, is a fill record at its place).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "formats/stream_header.hpp"

namespace ibvcap {

struct DadaHeaderInput {
    StreamHeader first;             // the stream's first frame header (format, epoch, params)
    StreamTiming timing;            // the stream's position arithmetic
    bool rate_known = true;         // false: a VDIF stream still learning its rate
    std::uint64_t first_index = 0;  // the first record's index (StreamTiming::index)
    std::uint64_t payload_bytes = 0;
    std::uint64_t header_block_bytes = 4096;
    std::string stream;  // the stream's label
    std::string run_id;
    std::string key;             // the data ring's key
    std::uint64_t transfer = 0;  // 0 for the run's first transfer into the ring
    // --dada-header KEY=VALUE: added, or replacing ibvcap's own value.
    std::vector<std::pair<std::string, std::string>> extra;
};

// The header text (no padding): throws std::invalid_argument when the
// stream's parameters give no sample layout (0 bits or channels).
std::string dada_header(const DadaHeaderInput& in);

// A header key ibvcap accepts in --dada-header: upper-case letters, digits
// and '_', 1 to 32 characters, none that ibvcap sets itself. The reason
// when it is not one (empty: it is).
std::string dada_header_key_problem(const std::string& key);

// The value of `key` in a header text (a line that starts with it); empty
// when absent. For the tests and `ibvcap` tools that read a ring's header.
std::string dada_header_value(const std::string& header, const std::string& key);

}  // namespace ibvcap
