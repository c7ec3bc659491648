#include "lib/ledger/report.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>

#include "lib/core/frame.hpp"
#include "lib/core/utc.hpp"

namespace ibvcap {

namespace {
// Where a stream's frames per period came from (lib/demux/rate.hpp).
nlohmann::json rate_json(const StreamStats& s) {
    switch (s.rate) {
        case StreamStats::Rate::header:
            return "header";
        case StreamStats::Rate::given:
            return "given";
        case StreamStats::Rate::learning:
            return "not learned";
        case StreamStats::Rate::learned:
            return s.rate_confirmed ? "learned, confirmed" : "learned, not confirmed";
    }
    return "header";
}
}  // namespace

namespace {
nlohmann::json position(const FramePosition& p) {
    return {{"seconds", p.seconds}, {"frame", p.frame}};
}

nlohmann::json resources_json(const ResourceAccount& account) {
    nlohmann::json devices = nlohmann::json::array();
    for (const DeviceResources& d : account.devices) {
        nlohmann::json limits = nlohmann::json::object();
        for (const auto& [name, value] : d.limits) {
            limits[name] = value;
        }
        nlohmann::json cqs = nlohmann::json::array();
        for (const CqRecord& c : d.cqs) {
            cqs.push_back({{"depth_requested", c.depth_requested},
                           {"depth", c.depth},
                           {"timestamps", c.timestamps}});
        }
        nlohmann::json qps = nlohmann::json::array();
        for (const QpRecord& q : d.qps) {
            qps.push_back({{"qp_num", q.qp_num},
                           {"stream", q.stream},
                           {"recv_depth_requested", q.recv_depth_requested},
                           {"recv_depth", q.recv_depth},
                           {"sge_requested", q.sge_requested},
                           {"sge", q.sge}});
        }
        nlohmann::json mrs = nlohmann::json::array();
        for (const MrRecord& m : d.mrs) {
            mrs.push_back(
                {{"use", m.use}, {"kind", m.kind}, {"bytes", m.bytes}, {"qp_num", m.qp_num}});
        }
        nlohmann::json flows = nlohmann::json::array();
        for (const FlowRecord& f : d.flows) {
            flows.push_back(
                {{"group", f.group},
                 {"port", f.port},
                 {"source", f.source.empty() ? nlohmann::json() : nlohmann::json(f.source)},
                 {"qp_num", f.qp_num},
                 {"counter", f.counter},
                 {"tag", f.tag == 0 ? nlohmann::json() : nlohmann::json(f.tag)}});
        }
        devices.push_back({{"device", d.device},
                           {"port", d.port},
                           {"protection_domains", d.protection_domains},
                           {"limits", std::move(limits)},
                           {"cqs", std::move(cqs)},
                           {"qps", std::move(qps)},
                           {"mrs", std::move(mrs)},
                           {"flows", std::move(flows)}});
    }
    return {{"devices", std::move(devices)},
            {"registered_bytes", account.registered_bytes},
            {"memory_locked_bytes", account.memory_locked_bytes},
            {"memlock_limit_bytes", account.memlock_limit_bytes
                                        ? nlohmann::json(*account.memlock_limit_bytes)
                                        : nlohmann::json()},
            {"cap_ipc_lock", account.cap_ipc_lock}};
}
}  // namespace

namespace {

// docs/observability.md, "The timeline and a cause for every gap".
void add_timeline(nlohmann::json& j, const Timeline& timeline) {
    nlohmann::json seconds = nlohmann::json::array();
    for (const auto& s : timeline.seconds()) {
        nlohmann::json counters = nlohmann::json::object();
        for (const auto& [name, growth] : s.counters) {
            counters[name] = growth;
        }
        seconds.push_back({{"t", s.t},
                           {"packets", s.packets},
                           {"bytes", s.bytes},
                           {"missing", s.missing},
                           {"filled", s.filled},
                           {"backlog", s.backlog},
                           {"counters", counters}});
    }
    j["timeline"] = seconds;
    nlohmann::json gaps = nlohmann::json::array();
    for (const auto& g : timeline.gaps()) {
        gaps.push_back({{"t", g.t},
                        {"stream", g.stream},
                        {"missing", g.missing},
                        {"cause", to_string(g.cause)},
                        {"witnesses", g.witnesses}});
    }
    j["gaps"] = gaps;
    j["gaps_not_listed"] = timeline.gaps_not_listed();
    j["presence"] = presence_json(timeline.presence());
    nlohmann::json by_cause = nlohmann::json::object();
    const auto lost = timeline.lost_by_cause();
    for (std::size_t c = 0; c < kLossCauseCount; ++c) {
        if (static_cast<LossCause>(c) != LossCause::none) {
            by_cause[std::string(to_string(static_cast<LossCause>(c)))] = lost[c];
        }
    }
    j["lost_by_cause"] = by_cause;
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
    if (!run.run_id.empty()) {
        j["run_id"] = run.run_id;
    }
    add_provenance(j, ledger, run);
    if (!run.stopped_by.empty()) {
        j["stopped_by"] = run.stopped_by;
    }
    if (!run.error.empty()) {
        j["error"] = run.error;
    }
    // "codif" and "non_codif" keep their first names for the reports' readers:
    // the frames of every stream, CODIF, VDIF or VTP alike, and the frames of
    // none that are not damaged.
    j["totals"] = {{"packets", t.packets},
                   {"bytes", t.bytes},
                   {"codif", t.codif},
                   {"missing", t.missing},
                   {"duplicates", t.duplicates},
                   {"out_of_order", t.out_of_order},
                   {"too_late", t.too_late},
                   {"implausible", t.implausible},
                   {"restarts", t.restarts},
                   {"invalid", t.invalid},
                   {"payload_absent", t.payload_absent},
                   {"malformed", t.malformed},
                   {"non_codif", t.non_codif},
                   {"nic_drops", t.nic_drops},
                   {"wc_errors", t.wc_errors},
                   {"written", t.written},
                   {"write_drops", t.write_drops},
                   {"fills", t.fills},
                   {"ordered_too_late", t.ordered_too_late},
                   {"payload_mismatches", t.payload_mismatches},
                   {"block_misses", t.block_misses},
                   {"consumer_drops", t.consumer_drops},
                   {"ring_unwritten", t.ring_unwritten},
                   {"bad_wire_length", t.bad_wire_length},
                   {"outside_window", t.outside_window}};
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
        nlohmann::json entry = {{"name", c.name}, {"value", c.value}, {"drop", c.is_drop}};
        if (c.cause != LossCause::none) {
            entry["cause"] = to_string(c.cause);
        }
        counters.push_back(std::move(entry));
    }
    j["source_counters"] = counters;
    nlohmann::json streams = nlohmann::json::array();
    for (const auto& s : ledger.streams()) {
        nlohmann::json e = {{"group", s.group.to_string()},
                            {"antenna", format_ipv4(s.antenna)},
                            {"thread", s.thread},
                            {"station", s.station},
                            {"format", to_string(s.format)},
                            {"layout", layout_name(s.format, s.layout)},
                            {"epoch", s.epoch},
                            {"period", s.timing.period},
                            {"frames_per_period", s.timing.frames_per_period},
                            {"packets", s.packets()},
                            {"bytes", s.bytes},
                            {"missing", s.sequence.missing()},
                            {"duplicates", s.sequence.duplicates()},
                            {"out_of_order", s.sequence.out_of_order()},
                            {"too_late", s.sequence.too_late()},
                            {"implausible", s.sequence.implausible()},
                            {"restarts", s.sequence.restarts()},
                            {"last_restart_jump", s.sequence.last_restart_jump()},
                            {"invalid", s.invalid},
                            {"payload_absent", s.payload_absent},
                            {"first", position(s.first)},
                            {"last", position(s.last)}};
        e["rate"] = rate_json(s);
        if (s.rate_raises > 0) {
            // A learned rate raised before a whole second confirmed it: from
            // what the first second gave, how often (lib/demux/rate.hpp).
            e["rate_revised"] = {{"first_learned", s.rate_first_learned},
                                 {"raises", s.rate_raises}};
        }
        if (s.rate_outliers > 0) {
            e["rate_outliers"] = s.rate_outliers;
        }
        e["unwritten"] = ledger.unwritten(s);
        if (run.window) {
            // The window's edges in the stream's frames, and what is missing
            // at each (both among `missing`).
            e["window"] = {
                {"first", position(s.window_first)},
                {"last", run.window->has_stop() ? position(s.window_last) : nlohmann::json()},
                {"missing_before_first", s.window_head_missing},
                {"missing_after_last", s.window_tail_missing}};
        }
        if (s.psn_packets != 0) {
            // The VTP sequence numbers' own count of the packets lost.
            e["psn"] = {{"packets", s.psn_packets},
                        {"missing", s.psn_missing},
                        {"duplicates", s.psn_duplicates}};
        }
        streams.push_back(std::move(e));
    }
    j["streams"] = streams;
    if (run.window) {
        const WindowInfo& w = *run.window;
        j["window"] = {{"scan", w.scan.empty() ? nlohmann::json() : nlohmann::json(w.scan)},
                       {"start", w.has_start() ? nlohmann::json(format_utc_instant(w.start_ns))
                                               : nlohmann::json()},
                       {"stop", w.has_stop() ? nlohmann::json(format_utc_instant(w.stop_ns))
                                             : nlohmann::json()},
                       {"grace_s", w.grace_s},
                       {"started_late_s", w.started_late_s},
                       {"saw_end", w.saw_end}};
    }
    if (ledger.expectations().active) {
        j["expected"] = expected_json(ledger.expectations());
    }
    nlohmann::json outputs = nlohmann::json::array();
    for (const auto& o : ledger.outputs()) {
        nlohmann::json e = {{"path", o.path},       {"format", o.format},   {"group", o.group},
                            {"antenna", o.antenna}, {"packets", o.packets}, {"bytes", o.bytes},
                            {"dropped", o.dropped}, {"files", o.files}};
        nlohmann::json on_disk = nlohmann::json::array();
        for (const auto& f : o.on_disk) {
            on_disk.push_back({{"path", f.path}, {"packets", f.packets}, {"bytes", f.bytes}});
        }
        e["on_disk"] = std::move(on_disk);
        e["overwritten"] = o.overwritten;
        if (o.thread >= 0) {
            e["station"] = o.station;
            e["thread"] = o.thread;
        } else if (o.station >= 0) {
            e["station"] = o.station;  // one of several CODIF stations' codif files
        }
        const OrderedCounts& q = o.ordered;
        e["ordered"] = q.window == 0
                           ? nlohmann::json()
                           : nlohmann::json{{"window", q.window},         {"fills", q.fills},
                                            {"duplicates", q.duplicates}, {"too_late", q.too_late},
                                            {"unheld", q.unheld},         {"restarts", q.restarts}};
        if (!o.error.empty()) {
            e["error"] = o.error;
        }
        outputs.push_back(std::move(e));
    }
    j["outputs"] = outputs;
    if (!ledger.rings().empty()) {
        // docs/formats.md, "PSRDADA rings".
        nlohmann::json rings = nlohmann::json::array();
        for (const auto& r : ledger.rings()) {
            nlohmann::json e = {{"key", r.key},
                                {"stream", r.stream},
                                {"format", r.format},
                                {"payload_bytes", r.payload_bytes},
                                {"block_bytes", r.block_bytes},
                                {"blocks", r.blocks},
                                {"header_block_bytes", r.header_block_bytes},
                                {"readers", r.readers},
                                {"readers_attached", r.readers_attached},
                                {"frames", r.frames},
                                {"fills", r.fills},
                                {"consumer", r.consumer},
                                {"owed_at_end", r.owed_at_end},
                                {"unwritten", r.unwritten},
                                {"duplicates", r.ordered.duplicates},
                                {"too_late", r.ordered.too_late},
                                {"unheld", r.ordered.unheld},
                                {"restarts", r.ordered.restarts},
                                {"bytes", r.bytes},
                                {"end_of_data", r.end_of_data}};
            if (!r.error.empty()) {
                e["error"] = r.error;
            }
            rings.push_back(std::move(e));
        }
        j["rings"] = std::move(rings);
    }
    nlohmann::json polling = nlohmann::json::array();
    for (const auto& p : run.polling) {
        polling.push_back({{"device", p.device},
                           {"polls", p.polls},
                           {"busy_waits", p.busy_waits},
                           {"frames", p.frames},
                           {"cpu", p.cpu}});
    }
    j["polling"] = polling;
    j["clocks"] = clocks_json(run.clocks);
    j["watchdog_alarms"] = run.watchdog_alarms;
    if (run.resources) {
        j["resources"] = resources_json(*run.resources);
    }
    if (run.privileges) {
        const PrivilegeState& p = *run.privileges;
        nlohmann::json after = nlohmann::json::object();
        for (const auto& [set, value] : p.after) {
            after[set] = value;
        }
        j["privileges"] = {{"dropped", p.dropped}, {"no_new_privs", p.no_new_privs},
                           {"kept", p.kept},       {"user", p.user},
                           {"uid", p.uid},         {"gid", p.gid},
                           {"threads", p.threads}, {"after", after}};
    }
    if (run.writer_memory) {
        const WriterMemory& m = *run.writer_memory;
        j["writer_memory"] = {{"bound_bytes", m.bound_bytes},
                              {"peak_bytes", m.peak_bytes},
                              {"buffer_bytes", m.buffer_bytes},
                              {"buffers", m.buffers},
                              {"backlog_peak_bytes", m.backlog_peak_bytes},
                              {"backlog_peak_share", m.backlog_peak_share},
                              {"drops_at_bound", m.drops_at_bound},
                              {"drops_below_bound", m.drops_below_bound},
                              {"made_ahead_peak_bytes", m.made_ahead_peak_bytes},
                              {"made_ahead_rule", m.made_ahead_rule},
                              {"producer_faulted_buffers", m.producer_faulted_buffers}};
        if (m.requested_bytes > 0) {
            j["writer_memory"]["requested_bytes"] = m.requested_bytes;
        }
    }
    j["lines_not_printed"] = {{"stats", run.stats_lines_dropped},
                              {"frames", run.frame_lines_dropped}};
    nlohmann::json xids = nlohmann::json::array();
    for (const auto& x : ledger.gpu_xids()) {
        xids.push_back({{"time", format_utc_time(x.time_ns)},
                        {"time_ns", x.time_ns},
                        {"device", x.device},
                        {"code", x.code},
                        {"message", x.message},
                        {"capture_gpu", x.capture_gpu}});
    }
    j["gpu_xids"] = xids;
    j["notes"] = ledger.notes();
    if (!run.metrics_path.empty()) {
        j["metrics_file"] = {{"path", run.metrics_path},
                             {"writes", run.metrics_writes},
                             {"failures", run.metrics_write_failures}};
    }
    add_timeline(j, run.timeline);
    j["groups"] = groups_json(ledger, run.mcast);
    j["igmp"] = igmp_json(run.mcast);
    return j;
}

namespace {

[[noreturn]] void report_error(int err, const std::string& path) {
    if (err == ECANCELED) {
        throw ReaderWaitGivenUp(fmt::format(
            "cannot write report {}: no reader took it before the stop (Ctrl-C while it waited "
            "for one); the summary above has the counts",
            path));
    }
    throw std::system_error(err, std::generic_category(), "cannot write report " + path);
}

// 0 or an errno value.
int write_all(int fd, std::string_view text) {
    std::size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return n < 0 ? errno : ENOSPC;
        }
        done += static_cast<std::size_t>(n);
    }
    return 0;
}

}  // namespace

void write_report(const std::string& path, const nlohmann::json& report, const ReaderWait& wait) {
    const std::string text = report.dump(2) + "\n";
    if (path == "-") {
        if (const int err = write_all(STDOUT_FILENO, text)) {
            report_error(err, "to stdout");
        }
        return;
    }
    struct stat st {};
    const bool exists = ::stat(path.c_str(), &st) == 0;
    if (exists && !S_ISREG(st.st_mode)) {
        // A device, FIFO or socket (/dev/stdout, a pipe to a collector):
        // written into, never replaced.
        if (const int err = write_into(path, text, wait)) {
            report_error(err, path);
        }
        return;
    }
    // A regular file, or a new one: replaced in one step, made durable.
    if (const int err = replace_file(path, text, true)) {
        report_error(err, path);
    }
}

int replace_file(const std::string& path, std::string_view text, bool durable) {
    // A uniquely named file in the same directory, then renamed over the
    // target in one step (a symbolic link's target, not the link). Readers
    // see the old file or the new one, never a part.
    struct stat st {};
    const bool exists = ::stat(path.c_str(), &st) == 0;
    if (exists && !S_ISREG(st.st_mode)) {
        return EEXIST;  // a directory, device, FIFO or socket is never replaced
    }
    std::error_code ec;
    const std::filesystem::path target =
        exists ? std::filesystem::canonical(path, ec) : std::filesystem::path(path);
    if (ec) {
        return ec.value();
    }
    std::filesystem::path dir = target.parent_path();
    if (dir.empty()) {
        dir = ".";
    }
    std::string tmp = (dir / ("." + target.filename().string() + ".XXXXXX")).string();
    const int fd = ::mkstemp(tmp.data());
    if (fd < 0) {
        return errno;
    }
    mode_t mode = 0;
    if (exists) {
        mode = st.st_mode & 07777;  // an existing file keeps its mode
    } else {
        const mode_t mask = ::umask(0);
        ::umask(mask);
        mode = 0666 & ~mask;
    }
    int err = write_all(fd, text);
    if (err == 0 && ::fchmod(fd, mode) != 0) {
        err = errno;
    }
    if (err == 0 && durable && ::fsync(fd) != 0) {
        err = errno;
    }
    if (::close(fd) != 0 && err == 0) {
        err = errno;
    }
    if (err == 0 && ::rename(tmp.c_str(), target.c_str()) != 0) {
        err = errno;
    }
    if (err != 0) {
        ::unlink(tmp.c_str());
        return err;
    }
    if (durable) {
        // The rename itself made durable.
        if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
            ::fsync(dfd);
            ::close(dfd);
        }
    }
    return 0;
}

}  // namespace ibvcap
