// The sidecar index of an output file (docs/formats.md, "The sidecar index"):
// FILE.idx.json, written by the disk thread when it closes FILE (every
// rotated file too, and a file a write error or an abandon stopped early),
// saying what FILE holds: its format, its byte size, its record count and a
// checksum of all its bytes, which the disk thread computes as it writes
// them. `ibvcap verify` (lib/review/verify.hpp) reads it back and compares.
//
// The checksum is XXH3-64 (libxxhash, Debian's libxxhash-dev): the fastest
// of the Debian libraries' whole-file checksums (zlib's crc32 and OpenSSL's
// SHA-256 are several times slower per byte), so that the disk threads keep
// up at line rate. It detects accidental change (truncation, a flipped bit,
// an edit); it is not a defence against someone who means to forge a file.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace ibvcap {

inline constexpr std::string_view kFileIndexSuffix = ".idx.json";
inline constexpr std::string_view kFileIndexChecksum = "xxh3-64";
inline constexpr int kFileIndexVersion = 1;

struct FileIndex {
    std::string file;     // the indexed file's name (no directory)
    std::string format;   // "raw", "codif", "codifhdr", "pcap"
    std::string version;  // ibvcap's
    std::string group;    // "GROUP:PORT" of a per-antenna file; empty for the run's pcap
    std::string antenna;  // "A.B.C.D" of a per-antenna file; empty for the run's pcap
    std::uint64_t bytes = 0;
    std::uint64_t frames = 0;  // records
    std::uint64_t checksum = 0;
    // The run that wrote it (RunInfo::run_id; empty from a library caller or
    // an index older than the field): `verify --report` compares it with
    // the report's, so that a report of another run is never taken for
    // this file's.
    std::string run;
    // Empty: the file was closed normally. Otherwise why it stopped early
    // (a write error, an abandon); it still holds exactly what is indexed.
    std::string stopped;
    // --ordered: each stream's frames are in sequence order through a reorder
    // window of this many frames, with fill frames where frames never came
    // (docs/formats.md, "Ordered files and fill frames"); 0: arrival order.
    std::uint32_t ordered_window = 0;
};

// The index's path for a file: FILE.idx.json.
std::string file_index_path(const std::string& file);
// Writes `index` as JSON to file_index_path(file) in one step (a temporary
// file renamed over it). 0 or an errno value.
int write_file_index(const std::string& file, const FileIndex& index);
// Reads FILE.idx.json. nullopt, with `error` set, when it is absent
// (error "missing"), unreadable or not an index of this schema.
std::optional<FileIndex> read_file_index(const std::string& file, std::string& error);
std::string format_checksum(std::uint64_t checksum);  // 16 hex digits

// A running XXH3-64 over a file's bytes.
class FileChecksum {
  public:
    FileChecksum();
    void reset();
    // Off: update() does nothing (a file that gets no index: Writer::Options
    // ::index off, or not a regular file, whose digest nobody reads). The
    // hash reads every byte written, a disk thread's largest cost after the
    // write itself (bench_pipeline: at 1.2 Mpps of 8 KiB frames one thread
    // could not keep up), so it is paid only where the index needs it.
    void enable(bool on) { enabled_ = on; }
    void update(const void* data, std::size_t bytes) {
        if (enabled_) {
            XXH3_64bits_update(state_.get(), data, bytes);
        }
    }
    std::uint64_t digest() const { return XXH3_64bits_digest(state_.get()); }
    // Copies the state (undoing updates whose bytes did not reach the file).
    void copy_from(const FileChecksum& other) { XXH3_copyState(state_.get(), other.state_.get()); }

  private:
    struct Free {
        void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
    };
    std::unique_ptr<XXH3_state_t, Free> state_;
    bool enabled_ = true;
};

}  // namespace ibvcap
