// Synthetic CODIF, VDIF or VTP traffic for tests, demos and benchmarks.
//
// Streams are (group, antenna, thread); every stream walks frame slots
// 0..frames-1 in step, interleaved in the order group, antenna, thread: one
// frame of each stream in turn, or with `burst` N, N consecutive slots of one
// stream, then N of the next (the order only: the frames and the ground truth
// are the same for every N). Each
// slot is sent as is, or (chosen by a seeded hash, so a run is reproducible)
// skipped, sent twice, or swapped with the next slot. The first and last slots
// of a stream are always sent as is, so every injected fault is observable.
// Independently of that fate, a slot's frame may be marked invalid (the
// header's invalid bit, the payload generated as always). The ground truth
// says per stream what was sent and what was injected.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "formats/codif.hpp"
#include "formats/stream_header.hpp"
#include "lib/core/netaddr.hpp"

namespace ibvcap {

// The VDIF settings of a generator whose format is vdif or vtp (VDIF
// specification 1.1.1; docs/formats.md section 6). The CODIF settings
// `period`, `frames_per_period` and `layout` are not used: a VDIF frame
// number counts frames within one second.
struct VdifGeneratorConfig {
    // The frame rate: frame numbers run 0 .. frames_per_second - 1 within each
    // second, then the seconds go up by one. At most 2^24 (the frame number is
    // 24 bits).
    std::uint64_t frames_per_second = 1000;
    // The station id of each antenna, in the order of `antennas`; empty:
    // default_station(antenna index).
    std::vector<std::uint16_t> stations;
    bool legacy = false;   // 16-byte legacy headers (no extended user data)
    std::uint8_t edv = 0;  // extended data version of standard headers, 0-4

    // Antenna i's default station id: the two-letter code 'A' + i / 26,
    // 'A' + i % 26 ("AA", "AB", ... "AZ", "BA", ...), first letter in the
    // high byte, as DiFX's createVDIFHeader packs a station code
    // (difx libraries/vdifio/src/vdifio.c: stationid[0] << 8 | stationid[1]).
    static std::uint16_t default_station(std::size_t antenna_index);
};

struct GeneratorConfig {
    // codif: a CODIF frame per datagram; vdif: a VDIF frame; vtp: a 64-bit
    // little-endian packet sequence number, then a VDIF frame.
    StreamFormat format = StreamFormat::codif;
    std::vector<std::uint32_t> antennas;  // source IPv4s, host byte order
    std::vector<Endpoint> groups;
    std::uint16_t threads = 1;    // threads per antenna: ids 0 .. threads-1 (VDIF: at most 1024)
    std::uint64_t frames = 1000;  // frame slots per stream
    CodifLayout layout = CodifLayout::v2;
    std::uint32_t payload_bytes = 8192;  // after the header; a multiple of 8
    std::uint16_t nchan = 16;            // VDIF: a power of two
    std::uint8_t nbits = 8;              // VDIF: 1-32
    bool complex = true;
    std::uint16_t period = 1;                // seconds (CODIF)
    std::uint64_t frames_per_period = 1000;  // CODIF
    VdifGeneratorConfig vdif;                // format vdif or vtp
    std::uint8_t epoch = 52;  // half-years since 2000: 52 = 2026-01-01 (VDIF: at most 63)
    std::uint32_t start_seconds = 0;
    std::uint64_t start_frame = 0;  // absolute frame offset of slot 0
    double loss = 0;                // probability per slot
    double duplicate = 0;           // probability per slot
    double reorder = 0;             // probability per slot
    // Probability per slot that its frame is sent with the header's invalid
    // bit set. Drawn apart from the fates above, but a slot sent twice is
    // never invalid (so `invalid` counts frames and datagrams alike), nor is
    // a stream's first or last slot.
    double invalid = 0;
    std::uint64_t seed = 1;
    // Slots of one stream sent in a row before the next stream's (gen
    // --burst): 1 is round-robin over the streams, slot by slot.
    std::uint64_t burst = 1;
    int vlan_id = -1;  // < 0: untagged
    std::uint16_t src_port = 50000;

    // Throws std::invalid_argument naming the first inconsistent setting.
    void validate() const;
    void validate_vdif_settings() const;  // validate()'s VDIF part
    std::uint64_t samples_per_frame() const;
    // The CODIF header's blocklength: the smallest number of 8-byte words that
    // holds a whole number of complete samples (docs/formats.md, section 6).
    std::uint16_t blocklength() const;
    std::uint64_t frame_bytes() const;  // whole Ethernet frame
    bool is_vdif() const { return format != StreamFormat::codif; }
    // Datagram bytes before the payload: the CODIF header (64), or the VTP
    // sequence number (8, vtp only) and the VDIF header (32, legacy 16).
    std::uint32_t head_bytes() const;
    // The frames' (period, frames per period): CODIF's, or (1, VDIF frames
    // per second).
    StreamTiming timing() const;
    // The station id in the frames of antenna `antenna_index`: VDIF the
    // configured or default station, CODIF the antenna index.
    std::uint16_t station(std::size_t antenna_index) const;
};

struct StreamTruth {
    Endpoint group;
    std::uint32_t antenna = 0;
    std::uint16_t thread = 0;
    std::uint16_t station = 0;  // the header's station id (GeneratorConfig::station)
    std::uint64_t slots = 0;
    std::uint64_t sent = 0;        // distinct frames sent
    std::uint64_t skipped = 0;     // frames never sent: the reader's "missing"
    std::uint64_t duplicated = 0;  // frames sent twice: "duplicates"
    std::uint64_t reordered = 0;   // frames sent after their successor: "out_of_order"
    std::uint64_t invalid = 0;     // distinct frames sent with the invalid bit (each sent once)
    std::uint64_t packets() const { return sent + duplicated; }
};

struct GeneratedFrame {
    Bytes bytes;  // valid until the next call of next()
    std::uint64_t timestamp_ns = 0;
    std::size_t stream = 0;
};

class Generator {
  public:
    explicit Generator(GeneratorConfig config);

    // The next frame, or false when every stream has walked all its slots (or
    // the run was ended early and the last planned frame was returned).
    bool next(GeneratedFrame& out);

    // True between slots (with a burst, between bursts of slots): every
    // frame of the slots planned so far has been
    // returned by next(), so truth() (which counts a slot's fates when the
    // slot is planned) describes exactly the frames returned. A swap may still
    // be open (slot i+1 returned in slot i's place, slot i not yet).
    bool at_slot_boundary() const { return queue_.empty(); }
    // End the run at this slot boundary; the first call must come at one
    // (std::logic_error otherwise). An open swap is completed: next() returns
    // the displaced frames, then false. The truth is cut to what next()
    // returned: per stream, `slots` ends at the last frame sent, so trailing
    // skipped slots (which no receiver could observe) are not counted as
    // missing. Returns true when it cut the run short; false when every slot
    // had been planned (the truth is that of the whole run) or the run had
    // already been ended.
    bool end_early();
    bool ended_early() const { return ended_early_; }

    const GeneratorConfig& config() const { return config_; }
    const std::vector<StreamTruth>& truth() const { return truth_; }
    // Known up front (the fates are precomputed per slot); after end_early(),
    // the packets of the slots actually planned.
    std::uint64_t total_packets() const;
    nlohmann::json truth_json() const;

    // UNIX time (ns) of the start of a CODIF or VDIF reference epoch
    // (half-years since 2000).
    static std::uint64_t epoch_unix_ns(std::uint8_t epoch);

  private:
    enum class Fate : std::uint8_t { send, skip, twice, swap };
    struct Planned {
        std::size_t stream;
        std::uint64_t slot;
        bool invalid;
    };
    Fate fate(std::size_t stream, std::uint64_t slot) const;
    bool drawn_invalid(std::size_t stream, std::uint64_t slot) const;
    // Queue a frame that is sent once, drawing whether it is invalid.
    void queue_once(std::size_t stream, std::uint64_t slot);
    void plan_slot();
    void build(const Planned& frame);

    GeneratorConfig config_;
    StreamTiming timing_;
    std::vector<StreamTruth> truth_;
    std::vector<std::uint8_t> pending_swap_;  // per stream: slot i+1 was sent in i's place
    std::vector<std::uint64_t> covered_;      // per stream: 1 + the highest slot queued
    bool ended_ = false;                      // end_early() was called
    bool ended_early_ = false;                // ... and cut the run short
    std::uint64_t slot_ = 0;
    std::deque<Planned> queue_;  // to send
    std::vector<std::uint8_t> buffer_;
    std::vector<std::uint16_t> ip_ids_;
    std::uint64_t epoch_ns_ = 0;
    std::array<std::uint32_t, 4> vdif_extended_{};  // the VDIF extended user data of every frame
};

}  // namespace ibvcap
