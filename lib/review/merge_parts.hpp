// What the parts of `ibvcap merge` (lib/review/merge*.cpp) share: reading
// counts and times out of a report that is not trusted.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lib/ledger/expect.hpp"
#include "lib/review/merge.hpp"

namespace ibvcap::merge_parts {

using nlohmann::json;

// A count as a report writes it: a whole number from 0 to kMaxMergeCount.
bool is_count(const json& v);

// `object[key]` as a count; `absent` when the key is not there. Throws
// std::runtime_error naming `path` and `where`/key when it is there and not
// a count, or when it is required and missing.
std::uint64_t count_at(const json& object, std::string_view key, const std::string& path,
                       const std::string& where, std::optional<std::uint64_t> absent = 0);

// a + b; throws std::runtime_error when the sum passes kMaxMergeCount (one of
// the reports holds a damaged count).
std::uint64_t add_counts(std::uint64_t a, std::uint64_t b, std::string_view what);

// "2026-11-24T07:15:58.271685Z" (format_utc_time's form, fraction optional)
// as ns since 1970; nullopt for anything else (a year after 2200 too).
std::optional<std::int64_t> parse_utc(std::string_view text);
// `object[key]` as a time: nullopt when absent or null; throws when it is
// there and is not a time.
std::optional<std::int64_t> time_at(const json& object, std::string_view key,
                                    const std::string& path, const std::string& where);

// `object[key]` as a string, or `absent` when missing or not a string.
std::string text_at(const json& object, std::string_view key, const std::string& absent = {});

// "239.17.0.1:36001 10.0.0.11 thread 0", as the report's gaps name a stream.
std::string stream_label(const json& stream);

// The one-line error for a report that is not what a run writes.
[[noreturn]] void not_a_report(const std::string& path, const std::string& where,
                               const std::string& what);

// A whole-number key of `object` (0 when absent or not one: for reports
// already checked).
std::uint64_t count_of(const json& object, const char* key);
// A time key of a checked report (nullopt when absent or null).
std::optional<std::int64_t> time_of(const json& report, const char* key);
json time_json(const std::optional<std::int64_t>& ns);
std::int64_t seconds_to_ns(double s);

// One input as the merge sees it.
struct Host {
    std::string label;
    const MergeInput* input = nullptr;
    std::optional<std::int64_t> started_ns;
    // The span its frames came in, for the overlap: a live capture's run
    // (started_at + duration_s, the host's clock), a read's frames (the
    // file's clock); `basis` says which.
    std::optional<std::int64_t> from_ns;
    std::optional<std::int64_t> to_ns;
    std::string basis;
    const json& report() const { return input->report; }
};

// A stream of the merged report: keyed by (group, antenna, thread, station,
// format) and, for a stream a host's report lists more than once (two -i
// lanes that both received it), its occurrence in that report.
struct MergedStream {
    std::size_t host = 0;  // whose counts are taken
    const json* stream = nullptr;
    std::vector<std::size_t> seen_by;
    std::vector<std::pair<std::size_t, const json*>> copies;  // every host's, in input order
};

// What the merge found (lib/review/merge_found.cpp): the expected streams
// against the site's manifest, the streams seen twice, the runs that do not
// overlap (`pairs`: how many, listed or not), the notes, one host's entry of
// `hosts`.
json merge_expected(const ExpectManifest& manifest, const std::vector<Host>& hosts,
                    const std::vector<MergedStream>& streams);
json duplicates_json(const std::vector<Host>& hosts, const std::vector<MergedStream>& streams);
json not_overlapping_json(const std::vector<Host>& hosts, std::uint64_t& pairs);
std::vector<std::string> merge_notes(const std::vector<Host>& hosts, const json& merged,
                                     std::uint64_t pairs);
json host_entry(const Host& h, const std::vector<MergedStream>& streams, std::size_t index);

// Windowed runs (lib/review/merge_scans.cpp): whether every host wrote the
// same window (the one most of them wrote: a host that wrote another, or
// none, is a loss reason naming it), and whether the streams two hosts both
// captured have the same first and last frames (a note when not). The
// merged report's "window"; null when no host had one.
json window_agreement(const std::vector<Host>& hosts, const std::vector<MergedStream>& streams,
                      std::vector<std::string>& reasons, std::vector<std::string>& notes);

}  // namespace ibvcap::merge_parts
