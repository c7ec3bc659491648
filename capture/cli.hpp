// Shared pieces of the ibvcap subcommands, declared here and defined by
// meaning: the GROUP:PORT list and other value lists (cli_groups.cpp); cxxopts
// turned into usage errors (cli_parse.cpp); the option table read and capture
// share, and the CommonOptions it gives (run_options.cpp); how a run ends on
// the terminal and on disk (run_end.cpp); the signals (signals.cpp). Each
// command's own option table is in its cmd_COMMAND.cpp.
#pragma once

#include <chrono>
#include <cxxopts.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "formats/output.hpp"
#include "gpu/gpu.hpp"
#include "lib/core/netaddr.hpp"
#include "lib/core/usage_error.hpp"
#include "lib/demux/demux.hpp"
#include "lib/ledger/expect.hpp"
#include "lib/run/capture.hpp"
#include "lib/run/common.hpp"
#include "lib/run/schedule.hpp"
#include "lib/sinks/dada_sink.hpp"
#include "lib/sinks/file_sinks.hpp"

namespace ibvcap::cli {

// A mistake on the command line: exit code 2, one line (lib/core/usage_error.hpp).
using ibvcap::UsageError;

std::vector<OutputFormat> parse_formats(const std::vector<std::string>& names);

// One positional GROUP:PORT argument as typed. cxxopts splits the values of a
// std::vector<std::string> option at commas, which cuts GROUP:PORT@SOURCE,
// SOURCE between its sources; the positional list is kept as these instead,
// each whole (parse_value below), and parse_groups splits them
// (split_group_list, lib/core/netaddr.hpp).
struct GroupArgument {
    std::string text;
};
// cxxopts' parse of one value of the list (found by argument-dependent
// lookup, preferred to its template that splits at commas).
void parse_value(const std::string& text, std::vector<GroupArgument>& value);
// The positional GROUP:PORT arguments as typed (none: empty).
std::vector<std::string> group_arguments(const cxxopts::ParseResult& args);
// GROUP:PORT arguments (each may list several, split_group_list), each group
// given once in the result. With `sources`,
// GROUP:PORT@SOURCE[,SOURCE...] adds the group's source filter there (a
// source-specific join; docs/operations.md, "Source-specific multicast");
// without, a source is a usage error. With `formats`, GROUP:PORT/FORMAT
// (codif, vdif, vtp) gives the group's stream format, one entry per group
// returned (nullopt: none given); without, a /FORMAT is a usage error.
std::vector<Endpoint> parse_groups(const std::vector<std::string>& texts,
                                   std::vector<SourceFilter>* sources = nullptr,
                                   std::vector<std::optional<StreamFormat>>* formats = nullptr);
std::vector<std::uint32_t> parse_addresses(const std::vector<std::string>& texts,
                                           const char* option);
// `ibvcap --parse-only CMD ...` (capture/main.cpp; for the tests): parse()
// checks every option as it does for a run, then the GROUP:PORT list as the
// command reads it (capture and read: with @SOURCE and /FORMAT; gen:
// without), and throws ParseOnly instead of returning: nothing is opened,
// made or run.
struct ParseOnly {};
void set_parse_only();
// Parse with cxxopts, turning its exceptions into UsageError: a value that
// does not parse names its option and valid_range(); tcpdump's options
// (-w, -s, -B, capture -r) get a pointer to ibvcap's own.
cxxopts::ParseResult parse(cxxopts::Options& options, int argc, char** argv);
// The valid values of a numeric option, by its long name ("count": "a whole
// number, 1 or more"); empty for an option not in the table.
std::string_view valid_range(std::string_view name);
// An option given explicitly (not its default) must be a finite number > 0;
// otherwise a UsageError names it (`shown`), its range and `otherwise` (what
// to do instead: "leave -c out for no frame limit").
// --writer-memory SIZE: bytes (K, M, G, T binary units); UsageError for a
// size it cannot read.
std::size_t parse_memory_size(const std::string& text);
// Empty, or the line saying why `writer.memory_bytes` cannot hold the
// writers of `lanes` lanes (one writer each) and what to give instead.
std::string writer_memory_problem(const Writer::Options& writer, std::size_t lanes);

void check_positive(const cxxopts::ParseResult& args, const char* name, double value,
                    const char* shown, const char* otherwise);
// An option that has no default (so that --help shows none: "default: 0"
// read as a limit of 0 for -c, -G, -C, -W and --duration), or `absent`.
template <typename T>
T option_or(const cxxopts::ParseResult& args, const char* name, T absent) {
    return args.count(name) ? args[name].as<T>() : absent;
}

// SIGINT/SIGTERM: the first sets the stop flag for a clean end; the second
// ends the process at once (files hold whole records up to the last buffer).
// SIGHUP and SIGPIPE set the stop flag only (a clean end, never escalated).
void install_stop_handler();
const std::atomic<bool>& stop_flag();
// The signal that set it first (0: none yet): RunSettings::stop_signal.
const std::atomic<int>& stop_signal();
// Set by a second interrupt: stop at once, leave queued buffers unwritten (a
// third interrupt ends the process on the spot).
const std::atomic<bool>& urgent_flag();
// Set by SIGUSR1: print the counts so far (RunSettings::counts_request).
std::atomic<bool>& counts_flag();
// A capture of a schedule's scans: SIGHUP reads the schedule again (it sets
// reload_flag) instead of stopping the run.
void install_reload_handler();
std::atomic<bool>& reload_flag();
// A wait for a FIFO's reader at the end of a run (the report, the run page):
// said once on stderr, given up at the next signal (install_stop_handler's),
// so that Ctrl-C ends it.
ReaderWait reader_wait(const std::string& command);
// How long the end of a run waits for a blocked stdout or stderr to take the
// summary and the error lines: a pipe nobody reads delays the exit by this
// much, never forever (the report file has everything).
inline constexpr std::chrono::seconds kEndPatience{2};

// Options every capturing subcommand shares (docs/formats.md, "Command line"): --antenna, -o, -F,
// --prefix, --overwrite, -c, --report, --metrics-file, --metrics-interval, -q, -v, --expect,
// --expect-antennas, --expect-threads, --expect-grace, --expect-rate-tolerance, and the
// positional GROUP:PORT list.
void add_common_options(cxxopts::Options& options, const char* groups_help);
struct CommonOptions {
    DemuxOptions demux;
    OutputOptions outputs;
    Writer::Options writer;  // --direct-io, --disk-threads, --disk-cpu, -G, -C, -W
    std::uint64_t count = 0;
    std::string report_path;
    std::string html_path;     // --html: the run page (empty: none)
    std::string metrics_path;  // --metrics-file (empty: none)
    double metrics_interval_s = 10;
    bool quiet = false;
    bool verbose = false;
    // --expect FILE, --expect-antennas N --expect-threads M (none: nothing expected).
    std::optional<ExpectManifest> expect;
    ExpectOptions expect_options;     // --expect-grace, --expect-rate-tolerance
    std::optional<DadaOptions> dada;  // --dada, --dada-header (none: no rings)
    // --start-at/--stop-at are demux.window; --window-grace.
    double window_grace_s = 2;
    std::string scan_name;  // --scan (empty: none)
    // --schedule FILE with no --scan (capture): every scan to come, in one
    // capture (capture/run_scans.cpp); empty otherwise.
    std::vector<Scan> scans;
    std::string control_path;  // --control SOCKET (capture; empty: none)
};
// The run's frame window (capture/cli_window.cpp; docs/operations.md,
// "Observing a window"). scheduled_scan: with --schedule FILE, the scan
// --scan names (or "next"), the whole file checked first (none: no
// --schedule); every problem a UsageError naming the file and line.
std::optional<Scan> scheduled_scan(const cxxopts::ParseResult& args);
// With --schedule FILE and no --scan: the scans to come (scans_to_come,
// lib/run/schedule.hpp), for one capture of them all; `reading` (read -r):
// a UsageError, as is --duration or -c. Empty without --schedule or with --scan.
std::vector<Scan> scheduled_scans(const cxxopts::ParseResult& args, bool reading);
// The scans to come of the schedule `file` read again (SIGHUP): as
// scheduled_scans checks them; a UsageError naming the line otherwise.
std::vector<Scan> reread_schedule(const std::string& file, double grace_s);
// The scan's groups= and formats= in place of the command line's (given
// both: a UsageError), and -o DIR/NAME.
void apply_scan_lists(const cxxopts::ParseResult& args, const Scan& scan, CommonOptions& c);
// {scan} in --report, --html and --metrics-file becomes the scan's name.
void name_paths_for_scan(const std::string& scan, CommonOptions& c);
// --start-at, --stop-at (or the scan's), --window-grace, --scan: demux.window.
void read_window_options(const cxxopts::ParseResult& args, CommonOptions& c,
                         const std::optional<Scan>& scan);
// An edge inside a second with VDIF groups whose rate is learned: a UsageError.
void check_window_rates(const CommonOptions& c);

// `input_file`: read's -r FILE (the report may not overwrite it), or empty.
CommonOptions read_common_options(const cxxopts::ParseResult& args,
                                  const std::string& input_file = {});

// The -v line for one stream frame.
void print_frame(const Frame& frame, const UdpPacket& packet, const StreamHeader& header,
                 const StreamStats& stream);
// End of a run: the report and the run page (when asked), the summary, one
// stderr line per error; returns the exit code.
int finish_run(RunOutcome& outcome, const CommonOptions& common);
// A capture of the schedule's scans (common.scans; capture/run_scans.cpp):
// each scan's summary, report (-o DIR/SCAN/report.json, or --report with
// {scan}) and page as it ends; the capture's own report (--report without
// {scan}) lists them. Returns the worst exit code.
// With common.control_path, its control socket takes scans as they come;
// with `schedule_file`, SIGHUP reads it again.
int run_scans(LiveCaptureRequest& request, const CommonOptions& common,
              const std::string& schedule_file);

int cmd_read(int argc, char** argv);
int cmd_ctl(int argc, char** argv);
int cmd_gen(int argc, char** argv);
int cmd_capture(int argc, char** argv);
int cmd_devices(int argc, char** argv);
int cmd_doctor(int argc, char** argv);
int cmd_verify(int argc, char** argv);
int cmd_merge(int argc, char** argv);
int cmd_report(int argc, char** argv);

}  // namespace ibvcap::cli
