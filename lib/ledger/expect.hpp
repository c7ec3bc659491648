// Expected streams (docs/formats.md, "Expected streams"; docs/operations.md,
// "Telling ibvcap what to expect"): the manifest an operator writes
// (--expect FILE, or the shorthand --expect-antennas N --expect-threads M),
// and its evaluation against the ledger's streams at the end of a run.
//
// A stream is what the demux keys a stream by (lib/demux/demux.hpp): the
// group (GROUP:PORT), the antenna (source IPv4) and the thread id (CODIF's or
// VDIF's).
// Nothing here runs on the poll thread: the evaluation reads the per-stream
// figures the demux keeps (first and last arrival, the sequence counts) once
// the run has stopped.
#pragma once

#include <time.h>

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "lib/core/netaddr.hpp"
#include "lib/ledger/expected.hpp"
#include "lib/ledger/ledger.hpp"

namespace ibvcap {

// A manifest that cannot be used: one line naming the file, the position
// (a JSON pointer, or line:column for a syntax error) and the fix.
struct ExpectManifestError : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

struct ExpectedAntenna {
    std::uint32_t ip = 0;
    std::vector<std::uint16_t> threads;  // thread ids, ascending, distinct
    // The rate, when the manifest gives one (else the stream's: a CODIF
    // header's frames per period / period, a VDIF stream's given or learned).
    std::optional<double> frames_per_second;
    std::optional<std::uint64_t> frames_per_period;
};

struct ExpectedGroup {
    Endpoint group;
    std::vector<ExpectedAntenna> antennas;
};

struct ExpectManifest {
    std::string name;  // the file, or the shorthand's options
    std::vector<ExpectedGroup> groups;
    // The shorthand: `antennas` antennas whatever their addresses, threads
    // 0..threads-1 each, on every group of the run (groups is empty).
    bool shorthand = false;
    std::uint32_t antennas = 0;
    std::uint32_t threads = 0;

    std::size_t stream_count() const;
};

// Limits on what a manifest may ask for (a manifest is not trusted either).
inline constexpr std::size_t kMaxManifestBytes = std::size_t{1} << 20;
inline constexpr std::size_t kMaxExpectedGroups = 256;     // DemuxOptions::max_groups
inline constexpr std::size_t kMaxExpectedAntennas = 1024;  // DemuxOptions::max_antennas
inline constexpr std::size_t kMaxExpectedStreams = 65536;  // DemuxOptions::max_streams

// Parses a manifest's text; `name` is the file it came from (for messages).
// Throws ExpectManifestError.
ExpectManifest parse_expect_manifest(std::string_view text, const std::string& name);
// Reads and parses FILE. Throws ExpectManifestError (a file that cannot be
// read is named with its errno's text, too).
ExpectManifest load_expect_manifest(const std::string& path);
// --expect-antennas N --expect-threads M. Throws ExpectManifestError when
// either is 0 or too large.
ExpectManifest expect_shorthand(std::uint64_t antennas, std::uint64_t threads);

struct ExpectOptions {
    // How long after the join a stream may start, and before the end stop,
    // without being late (--expect-grace).
    double grace_s = 2.0;
    // How far a stream's measured frames per second may be off the expected
    // rate, as a fraction of it (--expect-rate-tolerance).
    double rate_tolerance = 0.05;
    // A stream whose frames span less time than this is not rated (too few
    // frames to tell its rate from its first and last arrival's jitter).
    double min_rated_life_s = 0.5;
};

// The host clock the live evaluation reads (CLOCK_MONOTONIC ns): the demux
// stamps a new stream with it, the run loop its join and its end.
inline std::int64_t expect_clock_ns() {
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    return std::int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

// When the run joined and ended, and which clock the streams' first
// arrivals are read in.
struct ExpectTimes {
    // true (live capture): join and end are CLOCK_MONOTONIC ns, and a stream
    // arrived when the demux registered it (StreamStats::registered_ns);
    // its last arrival is that plus the span of its frame timestamps.
    // false (read): the frames' own timestamps; the join is the first stream
    // frame of the file, the end its last (join_ns and end_ns are ignored).
    bool host_clock = true;
    std::int64_t join_ns = 0;
    std::int64_t end_ns = 0;
};

// `run_groups`: the GROUP:PORT the run named (empty: every destination was a
// group; the shorthand then applies to the groups that arrived).
ExpectResults evaluate_expectations(const ExpectManifest& manifest, const ExpectOptions& options,
                                    std::span<const StreamStats> streams,
                                    std::span<const Endpoint> run_groups, const ExpectTimes& times);

// A manifest group the run does not capture (the run named its groups and
// this one is not among them): it could never arrive. Empty when none.
std::string manifest_group_not_captured(const ExpectManifest& manifest,
                                        std::span<const Endpoint> run_groups);

}  // namespace ibvcap
