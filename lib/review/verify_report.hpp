// The report as `ibvcap verify` reads it (lib/review/verify.hpp): its
// outputs, their files and the streams, read from a report that is not
// trusted, and where each file it names is now (where the run wrote it, or
// beside the report when the capture was shipped with it). Defined in
// verify_report.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "lib/ledger/ledger.hpp"

namespace ibvcap::verify_parts {

// One output of the report, as verify needs it.
struct ReportFile {
    std::string path;
    std::uint64_t packets = 0;
    std::uint64_t bytes = 0;
};
struct ReportOutput {
    std::string path;
    std::string format;
    std::string group;
    std::string antenna;
    std::uint64_t dropped = 0;
    std::uint64_t overwritten = 0;
    std::vector<ReportFile> on_disk;
    OrderedCounts ordered;      // --ordered (window 0: arrival order)
    std::int64_t station = -1;  // a vdif output's stream
    std::int64_t thread = -1;
};
struct ReportStream {
    std::string group;
    std::string antenna;
    std::uint64_t thread = 0;
    std::uint64_t station = 0;
    std::string format;  // "codif", "vdif", "vtp"
    std::uint64_t frames_per_period = 0;
    std::uint64_t packets = 0;
    std::uint64_t payload_absent = 0;
    std::uint64_t missing = 0;
    FramePosition first;
    FramePosition last;
};
struct Report {
    std::filesystem::path dir;
    std::string run_id;  // (empty: a report older than it)
    // The run's working directory, which the outputs' relative paths are
    // relative to (empty: a report older than it).
    std::filesystem::path cwd;
    std::vector<ReportOutput> outputs;
    std::vector<ReportStream> streams;
};

// The report at `path`; throws std::runtime_error with one line naming the
// file and the part that is not what a run writes.
Report load_report(const std::string& path);

// Whether the capture was shipped with its report: any file the report names
// is beside the report (and is not the run's file). Then every file is looked
// for there only, so that one deleted after shipping is missing, not found
// again at the run's path.
bool shipped(const Report& report);

// Where a file the report names is now: beside the report (`beside`, the
// value of shipped()), else where the run wrote it (a relative path is
// relative to the run's working directory, the report's cwd).
std::string locate(const Report& report, bool beside, const std::string& named);

bool same_file(const std::string& a, const std::string& b);

}  // namespace ibvcap::verify_parts
