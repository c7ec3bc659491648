// The run report: the ledger as JSON (DESIGN §7; docs/formats.md lists every
// key) and as the human summary printed at the end of a run.
#pragma once

#include <cstdio>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "lib/ledger.hpp"

namespace ibvcap {

struct RunInfo {
    std::string command;  // "read", "capture"
    std::string source;   // "verbs", "pcap", "file"
    std::string input;    // file or interface
    double duration_s = 0;
    bool interrupted = false;
    std::string error;  // the run ended early on this error
};

nlohmann::json report_json(const Ledger& ledger, const RunInfo& run);
// Writes the JSON atomically (temporary file, then rename). Throws
// std::system_error naming the path on failure.
void write_report(const std::string& path, const nlohmann::json& report);
// `streams_table`: print one line per stream (off with -q).
void print_summary(std::FILE* out, const Ledger& ledger, const RunInfo& run, bool streams_table);

}  // namespace ibvcap
