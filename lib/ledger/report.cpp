#include "lib/ledger/report.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <system_error>

namespace ibvcap {

namespace {
nlohmann::json position(const FramePosition& p) {
    return {{"seconds", p.seconds}, {"frame", p.frame}};
}
}  // namespace

nlohmann::json report_json(const Ledger& ledger, const RunInfo& run) {
    const Totals t = ledger.totals();
    nlohmann::json j;
    j["verdict"] = ledger.zero_loss() ? "zero-loss" : "loss";
    j["loss_reasons"] = ledger.loss_reasons();
    j["reconciled"] = ledger.reconciles();
    j["command"] = run.command;
    j["source"] = run.source;
    j["input"] = run.input;
    j["duration_s"] = run.duration_s;
    j["interrupted"] = run.interrupted;
    if (!run.error.empty()) {
        j["error"] = run.error;
    }
    j["totals"] = {{"packets", t.packets},
                   {"bytes", t.bytes},
                   {"codif", t.codif},
                   {"missing", t.missing},
                   {"duplicates", t.duplicates},
                   {"out_of_order", t.out_of_order},
                   {"too_late", t.too_late},
                   {"invalid", t.invalid},
                   {"malformed", t.malformed},
                   {"non_codif", t.non_codif},
                   {"nic_drops", t.nic_drops},
                   {"wc_errors", t.wc_errors},
                   {"written", t.written},
                   {"write_drops", t.write_drops},
                   {"payload_mismatches", t.payload_mismatches},
                   {"block_misses", t.block_misses}};
    nlohmann::json malformed = nlohmann::json::object();
    nlohmann::json non_codif = nlohmann::json::object();
    for (std::size_t i = 0; i < kReasonCount; ++i) {
        const auto r = static_cast<Reason>(i);
        if (const auto n = ledger.reason_count(r); n > 0) {
            (is_malformed(r) ? malformed : non_codif)[std::string(to_string(r))] = n;
        }
    }
    j["reasons"] = {{"malformed", malformed}, {"non_codif", non_codif}};
    nlohmann::json counters = nlohmann::json::array();
    for (const auto& c : ledger.source_counters()) {
        counters.push_back({{"name", c.name}, {"value", c.value}, {"drop", c.is_drop}});
    }
    j["source_counters"] = counters;
    nlohmann::json streams = nlohmann::json::array();
    for (const auto& s : ledger.streams()) {
        streams.push_back({{"group", s.group.to_string()},
                           {"antenna", format_ipv4(s.antenna)},
                           {"thread", s.thread},
                           {"station", s.station},
                           {"layout", to_string(s.layout)},
                           {"period", s.timing.period},
                           {"frames_per_period", s.timing.frames_per_period},
                           {"packets", s.packets()},
                           {"bytes", s.bytes},
                           {"missing", s.sequence.missing()},
                           {"duplicates", s.sequence.duplicates()},
                           {"out_of_order", s.sequence.out_of_order()},
                           {"too_late", s.sequence.too_late()},
                           {"invalid", s.invalid},
                           {"first", position(s.first)},
                           {"last", position(s.last)}});
    }
    j["streams"] = streams;
    nlohmann::json outputs = nlohmann::json::array();
    for (const auto& o : ledger.outputs()) {
        nlohmann::json e = {{"path", o.path},       {"format", o.format},   {"group", o.group},
                            {"antenna", o.antenna}, {"packets", o.packets}, {"bytes", o.bytes},
                            {"dropped", o.dropped}, {"files", o.files}};
        if (!o.error.empty()) {
            e["error"] = o.error;
        }
        outputs.push_back(std::move(e));
    }
    j["outputs"] = outputs;
    nlohmann::json polling = nlohmann::json::array();
    for (const auto& p : run.polling) {
        polling.push_back({{"device", p.device},
                           {"polls", p.polls},
                           {"busy_waits", p.busy_waits},
                           {"frames", p.frames},
                           {"cpu", p.cpu}});
    }
    j["polling"] = polling;
    j["watchdog_alarms"] = run.watchdog_alarms;
    j["lines_not_printed"] = {{"stats", run.stats_lines_dropped},
                              {"frames", run.frame_lines_dropped}};
    j["notes"] = ledger.notes();
    return j;
}

void write_report(const std::string& path, const nlohmann::json& report) {
    const std::string tmp = path + ".tmp";
    const std::string text = report.dump(2) + "\n";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        throw std::system_error(errno, std::generic_category(), "cannot write report " + path);
    }
    std::size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            const int err = n < 0 ? errno : ENOSPC;
            ::close(fd);
            ::unlink(tmp.c_str());
            throw std::system_error(err, std::generic_category(), "cannot write report " + path);
        }
        done += static_cast<std::size_t>(n);
    }
    if (::close(fd) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        throw std::system_error(err, std::generic_category(), "cannot write report " + path);
    }
}

void print_summary(std::FILE* out, const Ledger& ledger, const RunInfo& run, bool streams_table) {
    const Totals t = ledger.totals();
    const double avg =
        t.packets > 0 ? static_cast<double>(t.bytes) / static_cast<double>(t.packets) : 0.0;
    fmt::print(out, "ibvcap {}: {} from {}{}\n", run.command, run.source, run.input,
               run.interrupted ? " (interrupted)" : "");
    fmt::print(out, "  total bytes:   {}\n  total packets: {}   average bytes per packet: {:.1f}\n",
               t.bytes, t.packets, avg);
    if (run.duration_s > 0) {
        fmt::print(out, "  duration: {:.3f} s   {:.0f} packets/s   {:.3f} Gb/s\n", run.duration_s,
                   static_cast<double>(t.packets) / run.duration_s,
                   static_cast<double>(t.bytes) * 8e-9 / run.duration_s);
    }
    fmt::print(out,
               "  CODIF packets: {} in {} streams   mismatches: {} (missing {}, duplicates {}, "
               "out of order {})\n",
               t.codif, ledger.streams().size(), t.missing + t.duplicates + t.out_of_order,
               t.missing, t.duplicates, t.out_of_order);
    fmt::print(out, "  malformed: {}   non-CODIF: {}   NIC drops: {}   WC errors: {}\n",
               t.malformed, t.non_codif, t.nic_drops, t.wc_errors);
    for (std::size_t i = 0; i < kReasonCount; ++i) {
        const auto r = static_cast<Reason>(i);
        if (const auto n = ledger.reason_count(r); n > 0) {
            fmt::print(out, "    {} {}: {}\n", is_malformed(r) ? "malformed" : "non-CODIF",
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
    if (!ledger.outputs().empty()) {
        fmt::print(out, "  written: {} records to {} files   not written: {}\n", t.written,
                   ledger.outputs().size(), t.write_drops);
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
