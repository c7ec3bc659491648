// What every run shares: exit codes, the outcome, the checks made before a
// run starts, the writer for its outputs and the verdict.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "lib/fault.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/ledger/report.hpp"
#include "lib/sinks/file_sinks.hpp"
#include "lib/sinks/writer.hpp"

namespace ibvcap {

// docs/formats.md, "Exit codes".
enum ExitCode : int { kExitZeroLoss = 0, kExitError = 1, kExitUsage = 2, kExitLoss = 3 };

// Make sure `dir` exists (created when missing) and that a file can be
// created in it. Throws std::runtime_error with a one-line message otherwise,
// so a run fails before it captures anything.
void prepare_output_dir(const std::string& dir);

struct RunOutcome {
    Ledger ledger;
    RunInfo info;
    int exit_code = kExitError;
};

// Check that the report can be written (its directory exists and takes a
// file), so a run fails before it starts rather than after it ends. Throws
// std::runtime_error with a one-line message.
void prepare_report_path(const std::string& path);

// --direct-io: check that files in `dir` can be opened with O_DIRECT. Throws
// std::runtime_error with one line naming the fix.
void check_direct_io(const std::string& dir);

// The writer for a run's outputs, or null when the run writes none. A live
// source never waits for the disk (a full queue is a counted drop); a file
// source does.
std::unique_ptr<Writer> make_run_writer(const OutputOptions& outputs, Writer::Options options,
                                        bool live);

// 0 zero-loss, 3 loss, 1 when the run or an output failed.
int exit_code_for(const Ledger& ledger, const RunInfo& info);

// A worker thread failed (lib/fault.hpp): the run is an error (exit 1) and
// its ledger incomplete, with the cause, as after a device fault. Nothing
// when none did. Call when the run's threads have stopped.
void apply_faults(const Faults& faults, RunOutcome& outcome);

}  // namespace ibvcap
