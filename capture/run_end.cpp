// How a read or capture ends on the terminal and on disk: -v's frame lines,
// the summary, the report and the run page, and the exit code
// (docs/formats.md, "Exit codes").
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "capture/cli.hpp"
#include "lib/review/run_page.hpp"
#include "lib/run/console.hpp"
#include "lib/run/metrics.hpp"

namespace ibvcap::cli {

void print_frame(const Frame& frame, const UdpPacket& p, const StreamHeader& h,
                 const StreamStats&) {
    // Formatted on the stack and written only if stdout takes it at once: a
    // blocked stdout drops (and counts) the line rather than stall the demux.
    char line[256];
    char src[16];
    char dst[16];
    const auto ip = [](char* out, std::uint32_t a) {
        *fmt::format_to_n(out, 15, "{}.{}.{}.{}", a >> 24, (a >> 16) & 0xff, (a >> 8) & 0xff,
                          a & 0xff)
             .out = '\0';
        return out;
    };
    const auto r = fmt::format_to_n(
        line, sizeof line, "{}.{:09} {}:{} > {}:{} {} {} station {} thread {} {}:{} {} bytes{}\n",
        frame.timestamp_ns / 1'000'000'000u, frame.timestamp_ns % 1'000'000'000u, ip(src, p.src_ip),
        p.src_port, ip(dst, p.dst_ip), p.dst_port, to_string(h.format),
        layout_name(h.format, h.layout), h.station, h.thread, h.seconds, h.frame, h.payload_bytes(),
        h.invalid ? " invalid" : "");
    stdout_console().try_write(std::string_view(line, std::min(r.size, sizeof line)));
}

namespace {

void say(const std::string& line) {
    stderr_console().write_within(line, kEndPatience);
}

void summary(const RunOutcome& outcome, bool quiet, bool to_stderr) {
    char* text = nullptr;
    std::size_t size = 0;
    std::FILE* mem = open_memstream(&text, &size);
    if (mem == nullptr) {
        return;
    }
    print_summary(mem, outcome.ledger, outcome.info, !quiet);
    std::fclose(mem);
    (to_stderr ? stderr_console() : stdout_console())
        .write_within(std::string_view(text, size), kEndPatience);
    std::free(text);
}

// The report and the run page, from one JSON; a failure is one line each.
// Returns 0 when both were written, 130 when a signal ended the wait for a
// FIFO's reader (reader_wait), else 1.
int write_run_files(const RunOutcome& outcome, const CommonOptions& common) {
    if (common.report_path.empty() && common.html_path.empty()) {
        return 0;
    }
    int code = 0;
    const nlohmann::json report = report_json(outcome.ledger, outcome.info);
    for (const auto& [path, page] :
         {std::pair{common.report_path, false}, std::pair{common.html_path, true}}) {
        if (path.empty()) {
            continue;
        }
        try {
            const ReaderWait wait = reader_wait(outcome.info.command);
            if (page) {
                write_run_page(path, report, nullptr, wait);
            } else {
                write_report(path, report, wait);
            }
        } catch (const ReaderWaitGivenUp& e) {
            say(fmt::format("ibvcap {}: {}\n", outcome.info.command, e.what()));
            code = 130;
        } catch (const std::exception& e) {
            say(fmt::format("ibvcap {}: {}\n", outcome.info.command, e.what()));
            code = code == 0 ? 1 : code;
        }
    }
    return code;
}

}  // namespace

int finish_run(RunOutcome& outcome, const CommonOptions& common) {
    const bool quiet = common.quiet;
    // With --report - stdout is the JSON alone; the summary goes to stderr.
    const bool to_stderr = common.report_path == "-";
    // A signal after the loop ended (while the writers drained) is the
    // run's too: the report says it as the exit code does.
    const bool urgent = urgent_flag().load();
    note_late_stop(outcome.info, stop_flag().load(), stop_signal().load());
    if (urgent) {
        // Stopped at once: the counts are true, the queued records are
        // counted as not written, and 130 says how the run ended.
        summary(outcome, quiet, to_stderr);
        write_run_files(outcome, common);
        say(
            fmt::format("ibvcap {}: stopped at once on a second interrupt; queued records were "
                        "not written, every file holds whole records\n",
                        outcome.info.command));
        return 130;
    }
    // The summary first: if the report cannot be written, the ledger is still
    // on the terminal.
    summary(outcome, quiet, to_stderr);
    int code = outcome.exit_code;
    if (const int written = write_run_files(outcome, common); written != 0) {
        code = written == 130 ? 130 : kExitError;
    }
    if (!outcome.info.error.empty()) {
        say(fmt::format("ibvcap {}: {}\n", outcome.info.command, outcome.info.error));
    }
    // One line per cause: a full disk fails every output the same way, and
    // the per-output detail is in the summary and the report.
    struct Cause {
        const OutputStats* first;  // the first output that failed so
        std::size_t others;        // the outputs after it with the same error
    };
    std::vector<Cause> causes;
    for (const auto& o : outcome.ledger.outputs()) {
        if (o.error.empty()) {
            continue;
        }
        const auto it = std::find_if(causes.begin(), causes.end(),
                                     [&](const Cause& c) { return c.first->error == o.error; });
        if (it == causes.end()) {
            causes.push_back({&o, 0});
        } else {
            ++it->others;
        }
    }
    for (const Cause& c : causes) {
        say(fmt::format("ibvcap {}: {}{}: {}\n", outcome.info.command, c.first->path,
                        c.others == 0 ? std::string()
                                      : fmt::format(" (and {} other output{})", c.others,
                                                    c.others == 1 ? "" : "s"),
                        c.first->error));
    }
    // Ctrl-C ended the wait for a FIFO output's reader: what was meant for
    // it was not written, as after a second Ctrl-C.
    const auto& outs = outcome.ledger.outputs();
    return std::any_of(outs.begin(), outs.end(), [](const auto& o) { return o.stopped_waiting; })
               ? 130
               : code;
}

}  // namespace ibvcap::cli
