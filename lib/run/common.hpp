// What every run shares: exit codes, the outcome, the checks made before a
// run starts, the writer for its outputs and the verdict.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "lib/core/fault.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/ledger/report.hpp"
#include "lib/run/console.hpp"
#include "lib/sinks/file_sinks.hpp"
#include "lib/sinks/writer.hpp"

namespace ibvcap {

// docs/formats.md, "Exit codes".
enum ExitCode : int { kExitZeroLoss = 0, kExitError = 1, kExitUsage = 2, kExitLoss = 3 };

// Make sure `dir` exists (created when missing) and that a file can be
// created in it. Throws std::runtime_error with a one-line message otherwise,
// so a run fails before it captures anything.
void prepare_output_dir(const std::string& dir);
// The directories prepare_output_dir made, removed where they are still
// empty: a run that fails before it starts (no device, a refused option)
// leaves no empty -o directory behind. Called on every error exit.
void remove_unused_output_dirs();

// A run's identity: 16 hex digits from getrandom(2) (RunInfo::run_id).
std::string new_run_id();
// A stop signal as the report's stopped_by names it: "sigint", "sigterm",
// "sigrtmin+3"; "signal" for 0 (not known).
std::string signal_name(int sig);

struct RunOutcome {
    Ledger ledger;
    RunInfo info;
    int exit_code = kExitError;
    // A capture of several scans (RunSettings::scans): the frames that came
    // while no scan was under way (with --control), and the scans to come
    // when it ended.
    std::uint64_t idle_frames = 0;
    std::vector<std::string> scans_not_recorded;
};

// The file in an output directory that holds the run's lock.
inline constexpr const char* kOutputLockName = ".ibvcap.lock";

// One run's hold on its output directory: an exclusive flock(2) on
// DIR/.ibvcap.lock, which holds the run's PID. A second run into the same
// directory fails at once. Released (and the file removed) by the destructor.
class OutputDirLock {
  public:
    OutputDirLock() = default;
    // Throws std::runtime_error with one line naming the holder's PID.
    explicit OutputDirLock(const std::string& dir);
    ~OutputDirLock();
    OutputDirLock(OutputDirLock&& other) noexcept;
    OutputDirLock& operator=(OutputDirLock&& other) noexcept;
    OutputDirLock(const OutputDirLock&) = delete;
    OutputDirLock& operator=(const OutputDirLock&) = delete;

  private:
    void release();
    int fd_ = -1;
    std::string path_;
};

// The files in options.output_dir that this run's outputs would write over:
// regular files and symbolic links named as its outputs, rotated sets
// (STEM.NNNNNN.EXT) included. A FIFO or device node of such a name is
// written into, as before, and not listed.
std::vector<std::string> existing_outputs(const OutputOptions& options);

// Before a run, with the directory locked: without options.overwrite, any
// existing output is an error (std::runtime_error, one line naming
// --overwrite); with it they are removed, so no file of an earlier run is
// mistaken for part of this one. `input_file` (read -r) is never removed:
// naming it as an output is an error.
void claim_outputs(const OutputOptions& options, const std::string& input_file,
                   bool direct_io = false);

// --report PATH, checked before the run starts, once run_path_collision
// (lib/run/run_paths.hpp) has found it none of the run's other files: throws
// std::runtime_error (exit 1) when the path cannot be written (a directory, a
// missing or unwritable directory). `-` is stdout. `option`: the option that
// named the path ("--report", "--html": the run page is checked as the
// report is).
void check_report_path(const std::string& path, std::string_view option = "--report");

// For a file the run writes besides its outputs (--report, --metrics-file),
// checked before the run: whether a new file can be made in `dir` (one is
// made and removed: empty when it can, else "cannot create a file in DIR:
// REASON").
std::string cannot_create_in(const std::filesystem::path& dir);

// --direct-io: check that files in `dir` can be opened with O_DIRECT. Throws
// std::runtime_error with one line naming the fix.
void check_direct_io(const std::string& dir);

// --writer-memory against what this host can give: three quarters of the
// memory the kernel says is available (MemAvailable in `meminfo`, proc(5)),
// leaving the rest to the receive rings, the page cache and the host. The
// writers' buffers are not locked (no mlock), so RLIMIT_MEMLOCK does not
// bound them. `bytes` is the bound to use; `note`, when it was capped, the
// line that says so.
struct WriterMemoryCap {
    std::size_t bytes = 0;
    std::string note;
};
WriterMemoryCap cap_writer_memory(std::size_t requested,
                                  const std::string& meminfo = "/proc/meminfo");
// Why the writers dropped records for want of a buffer (memory.drops_at_bound,
// drops_below_bound), with the option or action that helps; empty when they
// dropped none. Appended to the verdict's "N records not written".
std::string writer_drops_cause(const WriterMemory& memory);
// One writer's memory (at its finish) added to the run's total.
void add_writer_memory(WriterMemory& total, const Writer::Memory& m);

// The writer for a run's outputs, or null when the run writes none. A live
// source never waits for the disk (a full queue is a counted drop); a file
// source does.

std::unique_ptr<Writer> make_run_writer(const OutputOptions& outputs, Writer::Options options,
                                        bool live);

// A run's outputs that are FIFOs with no reader yet (Writer::Options::
// reader_wait), unless already set: the wait is said on `notices` ("ibvcap
// COMMAND: waiting for a reader of PATH ..."), and ends when `stop` is set.
void wait_for_readers(ReaderWait& wait, const std::atomic<bool>& stop, Console* notices,
                      const std::string& command);

// A stop signal `sig` (0: none) that came after the run's loop had ended (as
// the writers drained, or the summary was written): the run is recorded as
// interrupted by it, as the exit code (130 after a second one) says; an
// earlier stopped_by "error" stays.
void note_late_stop(RunInfo& info, bool stopped, int sig);

// 0 zero-loss, 3 loss, 1 when the run or an output failed.
int exit_code_for(const Ledger& ledger, const RunInfo& info);

// A worker thread failed (lib/core/fault.hpp): the run is an error (exit 1) and
// its ledger incomplete, with the cause, as after a device fault. Nothing
// when none did. Call when the run's threads have stopped.
void apply_faults(const Faults& faults, RunOutcome& outcome);

}  // namespace ibvcap
