// `ibvcap merge`: one verdict for an observation captured by several hosts,
// each of which captured some of its groups or antennas (docs/formats.md,
// "The merged report"). The inputs are the hosts' run reports (`capture
// --report`, `read --report`); the result has every key a run's report has,
// so whatever reads a report reads it, plus `hosts` (one entry per input)
// and `merged` (what the merge found: streams seen twice, runs that do not
// overlap, versions).
//
// Nothing in an input is trusted: each is checked for the shape and the
// counts a run writes (a count is a whole number, and its totals add up to
// its streams), and a report that fails is named with the cause and the fix.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lib/core/fifo.hpp"
#include "lib/ledger/expect.hpp"
#include "lib/ledger/json_input.hpp"

namespace ibvcap {

// One input: a run's report and the file it came from.
struct MergeInput {
    std::string path;
    nlohmann::json report;
};

// The largest report file merge reads, and the largest count it takes (2^53:
// a run at 10^7 frames a second takes 28 years to count that far; anything
// larger is a damaged number).
inline constexpr std::uint64_t kMaxMergeReportBytes = kMaxReportBytes;
inline constexpr std::uint64_t kMaxMergeCount = std::uint64_t{1} << 53;
inline constexpr std::size_t kMaxMergeInputs = 4096;

// Reads `path` and checks it as a run's report (check_run_report). Throws
// std::runtime_error, one line naming the file, the cause and the fix: a
// missing or unreadable file, a directory, not JSON, not an ibvcap report.
MergeInput load_merge_input(const std::string& path);
// The JSON of a report file, read with the checks every reader of one needs:
// not missing, not a directory, not larger than a report can be
// (kMaxMergeReportBytes: a file, a pipe or a FIFO alike, counted as it is
// read), JSON nested no deeper than kMaxJsonDepth (lib/ledger/json_input.hpp).
// Throws std::runtime_error, one line naming `path` and ending with `fix`.
// (ibvcap merge, and ibvcap report.) `limit`: tests reach it with less.
nlohmann::json read_report_file(const std::string& path, const std::string& fix,
                                std::uint64_t limit = kMaxMergeReportBytes);

// Throws std::runtime_error when `report` is not a run's report as ibvcap
// writes it: a missing key of the contract, a key of the wrong type, a count
// that is not a whole number from 0 to kMaxMergeCount, totals that do not add
// up to the streams, outputs or counters they sum, or a merged report.
void check_run_report(const nlohmann::json& report, const std::string& path);

// Throws UsageError (exit 2) when two inputs are the same report: the same
// file, the same run_id, or the same text.
void check_distinct_inputs(const std::vector<MergeInput>& inputs);

// The merged report (docs/formats.md, "The merged report"). `expect`: the
// site's manifest; an expected stream that no host saw is loss. The inputs
// must have passed check_run_report.
nlohmann::json merge_reports(const std::vector<MergeInput>& inputs,
                             const std::optional<ExpectManifest>& expect);

// By scan (issue 45): the inputs grouped by their window's scan (its --scan
// name, else its [start, stop); runs without a window are one more group),
// each group merged on its own (merge_reports). One group: that merge, as
// merge_reports gives it. Several: {"command", "version", "scans": [{"scan",
// "verdict", "reports", "merged"}], "verdict", "loss_reasons"}, the verdict
// loss when any scan's is (lib/review/merge_scans.cpp).
nlohmann::json merge_by_scan(const std::vector<MergeInput>& inputs,
                             const std::optional<ExpectManifest>& expect);
// A report's scan, as merge_by_scan groups it: its window's scan name, else
// "[START, STOP)"; empty for a run without a window.
std::string scan_key(const nlohmann::json& report);

// The presence rows of every host on one time axis: the largest bin_s, the
// earliest started_at; each host's bins re-indexed and coarsened (cells
// summed, causes united, active spans joined). `hosts`: each host's label
// and its report's `presence` (nullptr: none). Null when no host has one; a
// presence that cannot be used is left out with a line in `notes`.
nlohmann::json merge_presence(
    const std::vector<std::pair<std::string, const nlohmann::json*>>& hosts,
    std::vector<std::string>& notes);

// 0 zero-loss, 3 loss (docs/formats.md, "Exit codes").
int merge_exit_code(const nlohmann::json& merged);

// The console summary: two lines per host (`hosts_table`: off with -q), the
// streams seen twice, the totals, the expected streams, the notes and the
// verdict.
void print_merge_summary(std::FILE* out, const nlohmann::json& merged, bool hosts_table = true);

struct MergeRequest {
    std::vector<std::string> inputs;  // the hosts' reports
    std::string expect_path;          // --expect (empty: none)
    std::string report_path;          // --report ("-": stdout; empty: none)
    std::string html_path;            // --html: the run page of the merged report (empty: none)
    bool overwrite = false;           // --overwrite: replace an existing --report file
    bool quiet = false;               // -q: no per-host lines
    ReaderWait reader_wait;           // a FIFO's reader, for --report and --html
};

// The whole command: checks the request (UsageError for a mistake on the
// command line, std::runtime_error for a file), merges, writes the report,
// prints the summary (to stderr when the report goes to stdout). Returns the
// exit code.
int run_merge(const MergeRequest& request);

}  // namespace ibvcap
