// The run's summary on the console (print_summary, lib/ledger/report.hpp):
// what an operator reads at the end of a run, made from the same ledger and
// run information as the JSON report (report.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "lib/core/frame.hpp"
#include "lib/ledger/report.hpp"

namespace ibvcap {

std::string stopped_by_text(const std::string& stopped_by) {
    static constexpr std::pair<std::string_view, std::string_view> kWords[] = {
        {"sigint", "Ctrl-C (SIGINT)"},
        {"sighup", "SIGHUP (the terminal or session went away)"},
        {"sigpipe", "a closed stdout or stderr (SIGPIPE)"},
        {"count", "-c (--count)"},
        {"duration", "--duration"},
        {"window_end", "the window's end (--stop-at and --window-grace)"},
        {"control", "a stop request on the control socket (ibvcap ctl)"},
        {"end_of_input", "the end of the input"},
        {"error", "an error"},
    };
    for (const auto& [key, words] : kWords) {
        if (stopped_by == key) {
            return std::string(words);
        }
    }
    std::string name = stopped_by;  // another signal: "sigterm" -> "SIGTERM"
    if (name.starts_with("sig")) {
        for (auto& c : name) {
            c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        }
    }
    return name;
}

void print_summary(std::FILE* out, const Ledger& ledger, const RunInfo& run, bool streams_table) {
    const Totals t = ledger.totals();
    const double avg =
        t.packets > 0 ? static_cast<double>(t.bytes) / static_cast<double>(t.packets) : 0.0;
    // An interrupted run says so, and by what: a run ended after 0.4 s by a
    // closed pipe is not presented like a complete one.
    fmt::print(out, "ibvcap {}: {} from {}{}\n", run.command, run.source, run.input,
               !run.interrupted ? std::string()
               : run.stopped_by.empty()
                   ? std::string(" (interrupted)")
                   : fmt::format(" (interrupted by {} after {:.3f} s: what came later was not "
                                 "captured)",
                                 stopped_by_text(run.stopped_by), run.duration_s));
    fmt::print(out, "  total bytes:   {}\n  total packets: {}   average bytes per packet: {:.1f}\n",
               t.bytes, t.packets, avg);
    if (run.duration_s > 0) {
        fmt::print(out, "  duration: {:.3f} s   {:.0f} packets/s   {:.3f} Gb/s\n", run.duration_s,
                   static_cast<double>(t.packets) / run.duration_s,
                   static_cast<double>(t.bytes) * 8e-9 / run.duration_s);
    }
    fmt::print(out,
               "  stream frames: {} in {} streams   mismatches: {} (missing {}, duplicates {}, "
               "out of order {})\n",
               t.codif, ledger.streams().size(), t.missing + t.duplicates + t.out_of_order,
               t.missing, t.duplicates, t.out_of_order);
    if (t.bad_wire_length > 0) {
        fmt::print(out,
                   "  damaged record lengths: {} (a length on the wire under the bytes "
                   "captured or over {}: counted at the captured length)\n",
                   t.bad_wire_length, kMaxWireBytes);
    }
    if (t.implausible > 0 || t.restarts > 0) {
        fmt::print(out, "  implausible headers: {}   stream restarts: {}\n", t.implausible,
                   t.restarts);
        for (const auto& s : ledger.streams()) {
            if (s.sequence.restarts() > 0) {
                fmt::print(out, "    {} {} thread {}: restarted {} times, last jump {} frames\n",
                           s.group.to_string(), format_ipv4(s.antenna), s.thread,
                           s.sequence.restarts(), s.sequence.last_restart_jump());
            }
        }
    }
    if (t.payload_absent > 0) {
        fmt::print(out,
                   "  stream frames without payload (cut after the header by the capture): {}\n",
                   t.payload_absent);
    }
    fmt::print(out, "  malformed: {}   non-stream: {}   NIC drops: {}   WC errors: {}\n",
               t.malformed, t.non_codif, t.nic_drops, t.wc_errors);
    for (std::size_t i = 0; i < kReasonCount; ++i) {
        const auto r = static_cast<Reason>(i);
        if (const auto n = ledger.reason_count(r); n > 0) {
            fmt::print(out, "    {} {}: {}\n", is_malformed(r) ? "malformed" : "non-stream",
                       to_string(r), n);
        }
    }
    // The report has every counter; the summary those that moved, and the drops.
    for (const auto& c : ledger.source_counters()) {
        if (c.value > 0 || c.is_drop) {
            fmt::print(out, "    counter {}: {}{}\n", c.name, c.value, c.is_drop ? " (drop)" : "");
        }
    }
    for (const auto& p : run.polling) {
        const double polls = static_cast<double>(p.polls);
        const double frames = static_cast<double>(p.frames);
        fmt::print(out,
                   "  poll {}{}: {} polls, busy waits {} ({:.1f}%), polls per packet {:.2f}, "
                   "packets per poll {:.2f}\n",
                   p.device, p.cpu >= 0 ? fmt::format(" (cpu {})", p.cpu) : std::string(), p.polls,
                   p.busy_waits,
                   polls > 0 ? 100.0 * static_cast<double>(p.busy_waits) / polls : 0.0,
                   frames > 0 ? polls / frames : 0.0, polls > 0 ? frames / polls : 0.0);
    }
    for (const auto& c : run.clocks) {
        fmt::print(out, "  {}\n", clock_summary(c));
    }
    {
        const auto lost = run.timeline.lost_by_cause();
        std::string line;
        for (std::size_t c = 0; c < kLossCauseCount; ++c) {
            if (lost[c] > 0) {
                const auto cause = static_cast<LossCause>(c);
                line +=
                    fmt::format("{}{} {}{}", line.empty() ? "" : ", ", to_string(cause), lost[c],
                                cause == LossCause::writer     ? " (not written)"
                                : cause == LossCause::consumer ? " (a PSRDADA ring was full)"
                                                               : "");
            }
        }
        if (!line.empty()) {
            fmt::print(out, "  lost by cause: {}\n", line);
        }
    }
    if (run.privileges) {
        fmt::print(out, "  privileges: {} after setup; running as {} (uid {})\n",
                   run.privileges->dropped ? "every capability dropped" : "capabilities KEPT",
                   run.privileges->user, run.privileges->uid);
    }
    if (run.watchdog_alarms > 0) {
        fmt::print(out, "  watchdog: {} alarms (a stream silent while the NIC counted arrivals)\n",
                   run.watchdog_alarms);
    }
    if (run.stats_lines_dropped > 0 || run.frame_lines_dropped > 0) {
        fmt::print(out,
                   "  not printed: {} stats lines, {} -v lines (stderr or stdout was blocked or "
                   "closed; the capture did not wait for it)\n",
                   run.stats_lines_dropped, run.frame_lines_dropped);
    }
    for (const auto& r : ledger.rings()) {
        // docs/operations.md, "Feeding a PSRDADA pipeline".
        fmt::print(
            out,
            "  PSRDADA ring {}: {}: {} frames, {} fills, {} the pipeline did not get "
            "(ring full){}, {:.1f} MiB; {} of {} readers attached at the end; {}{}\n",
            r.key, r.stream.empty() ? "no stream came" : r.stream, r.frames, r.fills, r.consumer,
            r.owed_at_end > 0 ? fmt::format(", {} fill records still owed", r.owed_at_end) : "",
            double(r.bytes) / double(1 << 20), r.readers_attached, r.readers,
            r.end_of_data ? "end of data marked" : "END OF DATA NOT MARKED",
            r.error.empty() ? "" : "; FAILED: " + r.error);
    }
    if (!ledger.outputs().empty()) {
        fmt::print(out, "  written: {} records to {} files   not written: {}\n", t.written,
                   ledger.outputs().size(), t.write_drops);
        OrderedCounts q;
        for (const auto& o : ledger.outputs()) {
            q.window = std::max(q.window, o.ordered.window);
            q.duplicates += o.ordered.duplicates;
            q.restarts += o.ordered.restarts;
        }
        if (q.window > 0) {
            fmt::print(out,
                       "  ordered (window {} frames): {} fill frames written, {} duplicates "
                       "written once, {} frames left out, {} restarts\n",
                       q.window, t.fills, q.duplicates, t.ordered_too_late, q.restarts);
        }
        for (const auto& o : ledger.outputs()) {
            if (!o.error.empty()) {
                fmt::print(out, "    FAILED {}: {}\n", o.path, o.error);
            }
        }
    }
    if (streams_table && !ledger.streams().empty()) {
        fmt::print(out, "  {:<22} {:<15} {:>6} {:>10} {:>8} {:>6} {:>6} {:>18} {:>18}\n", "group",
                   "antenna", "thread", "packets", "missing", "dup", "ooo", "first (s:frame)",
                   "last (s:frame)");
        for (const auto& s : ledger.streams()) {
            fmt::print(out, "  {:<22} {:<15} {:>6} {:>10} {:>8} {:>6} {:>6} {:>18} {:>18}\n",
                       s.group.to_string(), format_ipv4(s.antenna), s.thread, s.packets(),
                       s.sequence.missing(), s.sequence.duplicates(), s.sequence.out_of_order(),
                       fmt::format("{}:{}", s.first.seconds, s.first.frame),
                       fmt::format("{}:{}", s.last.seconds, s.last.frame));
        }
    }
    if (const ExpectResults& e = ledger.expectations(); e.active) {
        // One line per problem kind, with its count, a few of its streams and a hint.
        const std::uint64_t expected = e.expected_count();
        std::uint64_t ok = 0;
        for (const auto& s : e.streams) {
            ok += s.expected && s.problems.empty() ? 1u : 0u;
        }
        fmt::print(out, "  expected streams ({}): {} expected, {} as expected\n", e.manifest,
                   expected, ok);
        for (std::size_t i = 0; i < kExpectProblemCount; ++i) {
            const auto p = static_cast<ExpectProblem>(i);
            const std::uint64_t n = e.count(p);
            if (n == 0) {
                continue;
            }
            std::string some;
            std::uint64_t shown = 0;
            for (const auto& s : e.streams) {
                if (std::find(s.problems.begin(), s.problems.end(), p) == s.problems.end()) {
                    continue;
                }
                if (shown++ == 3) {
                    some += ", ...";
                    break;
                }
                some += fmt::format(
                    "{}{} {} thread {}", some.empty() ? "" : ", ", s.group.to_string(),
                    s.antenna ? format_ipv4(*s.antenna) : std::string("(antenna)"), s.thread);
            }
            fmt::print(out, "    {} {}: {} stream{} ({}): {}\n", is_loss(p) ? "LOSS" : "note",
                       to_string(p), n, n == 1 ? "" : "s", some, hint(p));
        }
    }
    print_multicast_path(out, ledger, run.mcast);
    for (const auto& note : ledger.notes()) {
        fmt::print(out, "  note: {}\n", note);
    }
    if (ledger.zero_loss()) {
        fmt::print(out, "verdict: zero-loss (counts reconcile)\n");
    } else {
        fmt::print(out, "verdict: loss: {}\n", fmt::join(ledger.loss_reasons(), "; "));
    }
    std::fflush(out);
}

}  // namespace ibvcap
