// What the ledger says about the streams a run expected (--expect,
// --expect-antennas/--expect-threads): the verdict on each expected stream,
// present or not, and on each stream that came unexpected
// (docs/formats.md, "Expected streams"). lib/ledger/expect.hpp makes it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lib/core/netaddr.hpp"

namespace ibvcap {

// Why an expected stream is not as expected. Every problem but `unexpected`
// makes the verdict loss (test/test_verdict.cpp, ExpectProblemTable, writes
// each one's class out).
enum class ExpectProblem : std::uint8_t {
    group_never_seen,  // no expected stream of the group arrived
    antenna_missing,   // the group's other antennas arrived; none of this one's streams
    thread_missing,    // the antenna's other threads arrived; not this one
    late_start,        // first frame more than the grace after the join
    stopped_early,     // last frame more than the grace before the run's end
    wrong_rate,        // frames per second off the expected by more than the tolerance
    unexpected,        // arrived, but the manifest does not name it (not loss)
    count_
};
inline constexpr std::size_t kExpectProblemCount = static_cast<std::size_t>(ExpectProblem::count_);
std::string_view to_string(ExpectProblem problem);
bool is_loss(ExpectProblem problem);
// One line for the operator: what to look at.
std::string_view hint(ExpectProblem problem);

struct ExpectedStreamResult {
    Endpoint group;
    // Empty for a stream the shorthand expects from an antenna that never
    // came (whatever its address would have been).
    std::optional<std::uint32_t> antenna;
    std::uint16_t thread = 0;
    bool expected = true;                 // false: arrived, not in the manifest
    std::vector<ExpectProblem> problems;  // empty: as expected
    std::uint64_t packets = 0;
    // Seconds from the join to its first frame, and from its last frame to
    // the run's end (absent when it never arrived).
    std::optional<double> first_after_join_s;
    std::optional<double> last_before_end_s;
    std::optional<double> frames_per_second;  // measured (absent: its life was too short)
    std::optional<double> expected_frames_per_second;
};

struct ExpectResults {
    bool active = false;
    std::string manifest;  // the file, or "--expect-antennas N --expect-threads M"
    double grace_s = 0;
    double rate_tolerance = 0;
    std::string clock;  // "host" (live: ibvcap's clock) or "file" (read: the frames' times)
    // The expected streams in the manifest's order, then the unexpected ones.
    std::vector<ExpectedStreamResult> streams;

    // Streams with `problem` among their problems.
    std::uint64_t count(ExpectProblem problem) const;
    std::uint64_t expected_count() const;
};

}  // namespace ibvcap
