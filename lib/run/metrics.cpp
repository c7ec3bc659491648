#include "lib/run/metrics.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "lib/core/netaddr.hpp"
#include "lib/ledger/report.hpp"
#include "lib/run/common.hpp"

namespace ibvcap {

namespace {

using Labels = std::vector<std::pair<std::string_view, std::string>>;

// One metric family: its HELP and TYPE lines and its series, each with the
// run label first when there is one. Series with the same labels are one
// series (their values summed), as the format requires each to appear once.
class Family {
  public:
    Family(std::string_view name, std::string_view type, std::string_view help,
           const std::string& run)
        : name_(name), type_(type), help_(help) {
        if (!run.empty()) {
            run_ = fmt::format("run=\"{}\"", escape_label_value(run));
        }
    }

    void add(const Labels& labels, std::uint64_t value) {
        std::string key = run_.empty() ? "" : "{" + run_;
        for (const auto& [name, v] : labels) {
            key += key.empty() ? "{" : ",";
            key += fmt::format("{}=\"{}\"", name, escape_label_value(v));
        }
        if (!key.empty()) {
            key += "}";
        }
        if (const auto it = index_.find(key); it != index_.end()) {
            series_[it->second].second += value;
            return;
        }
        index_.emplace(key, series_.size());
        series_.emplace_back(std::move(key), value);
    }
    void add_number(double value) { number_ = value; }

    void print(std::string& out) const {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name_, help_, name_, type_);
        if (number_) {
            out += fmt::format("{}{} {}\n", name_, run_.empty() ? "" : "{" + run_ + "}", *number_);
        }
        for (const auto& [labels, value] : series_) {
            out += fmt::format("{}{} {}\n", name_, labels, value);
        }
    }

  private:
    std::string_view name_;
    std::string_view type_;
    std::string_view help_;
    std::string run_;  // run="..." or empty
    std::optional<double> number_;
    std::vector<std::pair<std::string, std::uint64_t>> series_;
    std::unordered_map<std::string, std::size_t> index_;
};

// Causes whose witnesses the verdict counts as loss by themselves (the
// ledger's wc_errors, write_drops, consumer_drops; an XID on the capture's GPU).
bool verdict_cause(LossCause c) {
    return c == LossCause::completion_errors || c == LossCause::writer ||
           c == LossCause::consumer || c == LossCause::gpu_xid;
}

}  // namespace

std::string run_label(const std::string& metrics_path) {
    std::string name = std::filesystem::path(metrics_path).filename().string();
    if (name.size() > 5 && name.ends_with(".prom")) {
        name.resize(name.size() - 5);
    }
    return name;
}

std::string escape_label_value(std::string_view value) {
    std::string out;
    out.reserve(value.size());
    for (const char c : value) {
        switch (c) {
            case '\\':
                out += "\\\\";
                break;
            case '"':
                out += "\\\"";
                break;
            case '\n':
                out += "\\n";
                break;
            default:
                out += c;
        }
    }
    return out;
}

bool loss_so_far(const MetricsInput& in) {
    for (const auto& s : in.streams) {
        if (s.missing + s.too_late + s.implausible + s.restarts > 0) {
            return true;
        }
    }
    for (std::size_t r = 0; r < kReasonCount; ++r) {
        if (is_malformed(static_cast<Reason>(r)) && in.reasons[r] > 0) {
            return true;
        }
    }
    for (const auto& w : in.witnesses) {
        if (w.value > 0 && (w.is_drop || verdict_cause(w.cause))) {
            return true;
        }
    }
    for (const auto lost : in.lost_by_cause) {
        if (lost > 0) {
            return true;
        }
    }
    return false;
}

std::string format_metrics(const MetricsInput& in) {
    std::string out;
    const auto gauge = [&out, &in](std::string_view name, std::string_view help, double value) {
        Family f(name, "gauge", help, in.run);
        f.add_number(value);
        f.print(out);
    };
    gauge("ibvcap_up", "1 while the run goes on, 0 in the file written at its end.", in.up ? 1 : 0);
    gauge("ibvcap_zero_loss",
          "1 while no frame was lost so far (the final file: the verdict is zero-loss), 0 once "
          "one was.",
          in.zero_loss ? 1 : 0);
    gauge("ibvcap_start_time_seconds", "When the run started, seconds since the epoch.",
          in.start_time_s);
    gauge("ibvcap_last_update_time_seconds", "When this file was written, seconds since the epoch.",
          in.update_time_s);
    gauge("ibvcap_duration_seconds", "Seconds since the run started.", in.duration_s);
    {
        Family f("ibvcap_run_info", "gauge",
                 "The run: command, source and input (the interface or the file). Always 1.",
                 in.run);
        f.add({{"command", in.command}, {"source", in.source}, {"input", in.input}}, 1);
        f.print(out);
    }
    {
        Family f("ibvcap_packets_total", "counter",
                 "Frames the source delivered to ibvcap, every kind.", in.run);
        f.add({}, in.packets);
        f.print(out);
    }
    {
        Family f("ibvcap_bytes_total", "counter", "Wire bytes of the frames the source delivered.",
                 in.run);
        f.add({}, in.bytes);
        f.print(out);
    }
    {
        Family f("ibvcap_rejected_frames_total", "counter",
                 "Frames that are not frames of a stream, by reason; class malformed "
                 "makes the verdict loss, non_codif does not.",
                 in.run);
        for (std::size_t r = 0; r < kReasonCount; ++r) {
            const auto reason = static_cast<Reason>(r);
            f.add({{"reason", std::string(to_string(reason))},
                   {"class", is_malformed(reason) ? "malformed" : "non_codif"}},
                  in.reasons[r]);
        }
        f.print(out);
    }
    // Per stream, one family per count of the ledger (docs/formats.md, section 2).
    struct StreamCount {
        std::string_view name;
        std::string_view help;
        std::uint64_t LiveStream::*field;
    };
    static constexpr StreamCount kStreamCounts[] = {
        {"ibvcap_stream_packets_total", "Frames of the stream received, duplicates included.",
         &LiveStream::packets},
        {"ibvcap_stream_bytes_total", "Wire bytes of the stream's frames.", &LiveStream::bytes},
        {"ibvcap_stream_missing_frames_total", "Frames of the stream that never arrived (gaps).",
         &LiveStream::missing},
        {"ibvcap_stream_duplicate_frames_total", "Frames of the stream received more than once.",
         &LiveStream::duplicates},
        {"ibvcap_stream_out_of_order_frames_total",
         "Frames of the stream that arrived after a later one (they fill a gap).",
         &LiveStream::out_of_order},
        {"ibvcap_stream_too_late_frames_total",
         "Frames of the stream that arrived too late to place.", &LiveStream::too_late},
        {"ibvcap_stream_implausible_frames_total",
         "Frames of the stream too far from it to place (a corrupt header).",
         &LiveStream::implausible},
        {"ibvcap_stream_restarts_total", "Times the stream was re-synchronised at a new position.",
         &LiveStream::restarts},
    };
    for (const auto& c : kStreamCounts) {
        Family f(c.name, "counter", c.help, in.run);
        for (const auto& s : in.streams) {
            f.add({{"group", s.group.to_string()},
                   {"antenna", format_ipv4(s.antenna)},
                   {"thread", std::to_string(s.thread)}},
                  s.*c.field);
        }
        f.print(out);
    }
    {
        Family f("ibvcap_witness_total", "counter",
                 "The witnesses' growth since the run started: NIC, port and kernel counters, "
                 "completion errors, recoveries, port events, writer drops. name is where it "
                 "was read, cause the loss its growth stands for, drop true for counts of "
                 "frames lost before ibvcap.",
                 in.run);
        for (const auto& w : in.witnesses) {
            f.add({{"name", w.name},
                   {"cause", std::string(to_string(w.cause))},
                   {"drop", w.is_drop ? "true" : "false"}},
                  w.value);
        }
        f.print(out);
    }
    {
        Family f("ibvcap_lost_frames_total", "counter",
                 "Frames lost, by cause: missing frames by the witness that moved when their "
                 "gap opened (upstream when none did), records not written (writer), and frames "
                 "a PSRDADA ring had no room for (consumer).",
                 in.run);
        for (std::size_t c = 0; c < kLossCauseCount; ++c) {
            const auto cause = static_cast<LossCause>(c);
            if (cause != LossCause::none) {
                f.add({{"cause", std::string(to_string(cause))}}, in.lost_by_cause[c]);
            }
        }
        f.print(out);
    }
    if (in.writer_backlog_bytes) {
        gauge("ibvcap_writer_backlog_bytes", "Bytes queued for the disk, not yet written.",
              double(*in.writer_backlog_bytes));
    }
    if (in.writer_bound_bytes && *in.writer_bound_bytes > 0) {
        gauge("ibvcap_writer_memory_bound_bytes",
              "The writers' memory bound (--writer-memory as used, summed over the writers): at "
              "it a live capture drops records.",
              double(*in.writer_bound_bytes));
    }
    if (in.slots_held) {
        gauge("ibvcap_held_slots",
              "Receive slots held by the writers and the block rings (zero-copy), not yet "
              "given back to the receive queue.",
              double(*in.slots_held));
    }
    {
        Family f("ibvcap_metrics_write_failures_total", "counter",
                 "Writes of this file that failed before this one.", in.run);
        f.add({}, in.write_failures);
        f.print(out);
    }
    return out;
}

void check_metrics_path(const std::string& path) {
    const auto fail = [&path](const std::string& why) {
        return std::runtime_error(
            fmt::format("--metrics-file {}: {}; give another path with --metrics-file", path, why));
    };
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path target = fs::weakly_canonical(path, ec);
    if (ec) {
        throw fail(ec.message());
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        throw fail(S_ISDIR(st.st_mode)
                       ? "it is a directory (give a file name in it, e.g. " + path + "/ibvcap.prom)"
                       : std::string("it is not a regular file (a FIFO, device or socket is never "
                                     "replaced)"));
    }
    fs::path dir = target.parent_path();
    if (dir.empty()) {
        dir = ".";
    }
    struct stat dir_st {};
    if (::stat(dir.c_str(), &dir_st) != 0 || !S_ISDIR(dir_st.st_mode)) {
        throw fail(fmt::format("directory {} does not exist", dir.string()));
    }
    if (const std::string why = cannot_create_in(dir); !why.empty()) {
        throw fail(why);
    }
}

MetricsFile::MetricsFile(std::string path, double interval_s, std::string command, Console* notices)
    : path_(std::move(path)),
      interval_(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(std::min(interval_s, 1e9)))),
      command_(std::move(command)),
      notices_(notices) {}

bool MetricsFile::due(Clock::time_point now) const {
    return !last_write_ || now - *last_write_ >= interval_;
}

void MetricsFile::write(std::string_view text, Clock::time_point now) {
    last_write_ = now;
    const int err = replace_file(path_, text, false);
    if (err == 0) {
        ++writes_;
        return;
    }
    ++failures_;
    if (notices_ == nullptr || (last_notice_ && now - *last_notice_ < std::chrono::minutes(1))) {
        return;
    }
    last_notice_ = now;
    const std::uint64_t since = failures_ - failures_said_;
    failures_said_ = failures_;
    notices_->try_write(fmt::format(
        "ibvcap {}: cannot write metrics file {}: {}{} (the capture goes on; said at most once "
        "a minute)\n",
        command_, path_,
        err == EEXIST ? "it is not a regular file now, not replaced" : std::strerror(err),
        since > 1 ? fmt::format("; {} failures since the last notice", since) : ""));
}

}  // namespace ibvcap
