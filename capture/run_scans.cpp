// One capture of several scans (--schedule FILE with no --scan; docs/operations.md,
// "Observing a window"): the source set up once, each scan's outcome ended as a
// run of its own (its summary, report and page) as soon as its files are closed,
// and the capture's own report listing the scans.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "capture/cli.hpp"
#include "lib/host/privileges.hpp"
#include "lib/run/console.hpp"
#include "lib/run/control.hpp"
#include "lib/run/run_window.hpp"

namespace ibvcap::cli {

namespace {

struct ScanResult {
    std::string name;
    FrameWindow window;
    int exit_code = kExitError;
    bool zero_loss = false;
    std::string stopped_by;
    std::string report;  // its report's path (empty: none)
    Totals totals;
    std::vector<std::string> loss_reasons;
};

bool names_scan(const std::string& path) {
    return path.find("{scan}") != std::string::npos;
}

nlohmann::json capture_report(const std::vector<ScanResult>& done, const RunOutcome& capture) {
    using nlohmann::json;
    json scans = json::array();
    json reasons = json::array();
    std::uint64_t outside = 0;
    for (const ScanResult& r : done) {
        scans.push_back({{"scan", r.name},
                         {"start", format_utc_instant(r.window.start_ns)},
                         {"stop", r.window.has_stop() ? json(format_utc_instant(r.window.stop_ns))
                                                      : json(nullptr)},
                         {"verdict", r.zero_loss ? "zero-loss" : "loss"},
                         {"exit_code", r.exit_code},
                         {"stopped_by", r.stopped_by},
                         {"report", r.report.empty() ? json(nullptr) : json(r.report)},
                         {"packets", r.totals.packets},
                         {"missing", r.totals.missing},
                         {"outside_window", r.totals.outside_window}});
        outside += r.totals.outside_window;
        for (const std::string& why : r.loss_reasons) {
            reasons.push_back(fmt::format("scan {}: {}", r.name, why));
        }
    }
    if (!capture.info.error.empty()) {
        reasons.push_back(fmt::format("the capture ended with an error: {}", capture.info.error));
    }
    json not_recorded = json::array();
    for (const std::string& name : capture.scans_not_recorded) {
        not_recorded.push_back(name);
    }
    return {{"command", "capture"},
            {"source", capture.info.source},
            {"input", capture.info.input},
            {"stopped_by", capture.info.stopped_by},
            {"error", capture.info.error.empty() ? json(nullptr) : json(capture.info.error)},
            {"scans", scans},
            {"not_recorded", not_recorded},
            {"outside_scans", outside + capture.idle_frames},
            {"between_scans_idle", capture.idle_frames},
            {"verdict", reasons.empty() ? "zero-loss" : "loss"},
            {"loss_reasons", reasons}};
}

}  // namespace

int run_scans(LiveCaptureRequest& request, const CommonOptions& common,
              const std::string& schedule_file) {
    std::vector<ScanResult> done;
    request.scans = common.scans;
    if (!schedule_file.empty()) {
        install_reload_handler();  // SIGHUP: the schedule read again, not a stop
        request.reload_request = &reload_flag();
        request.reload_schedule = [schedule_file, grace = common.window_grace_s] {
            return reread_schedule(schedule_file, grace);
        };
    }
    // Made before the capture: a path in use or unwritable stops it now.
    std::unique_ptr<ControlSocket> control;
    if (!common.control_path.empty()) {
        control = std::make_unique<ControlSocket>(common.control_path);
        request.control = control.get();
        if (!request.user.empty()) {
            // --user: the socket is the user's (and its group's), as the
            // capture will be, so that the user's group may ask and the
            // capture can remove it at the end.
            const RunUser user = resolve_run_user(request.user);
            if (::chown(common.control_path.c_str(), user.uid, user.gid) != 0) {
                throw std::runtime_error(
                    fmt::format("control socket {}: cannot give it to --user {}: {}",
                                common.control_path, request.user, std::strerror(errno)));
            }
        }
        stderr_console().write_within(
            fmt::format("ibvcap capture: taking scans on {} (ibvcap ctl {} status)\n",
                        common.control_path, common.control_path),
            kEndPatience);
    }
    // On the run loop's thread, as each scan's files are closed: the scan is a
    // run of its own from here (its summary, report and page).
    request.scan_done = [&](RunOutcome&& outcome) {
        const std::string name = outcome.info.window ? outcome.info.window->scan : "";
        CommonOptions per = common;
        per.scans.clear();
        per.metrics_path.clear();  // (the capture's own)
        name_paths_for_scan(name, per);
        if (!names_scan(common.report_path)) {  // (that one is the capture's)
            per.report_path =
                common.outputs.formats.empty()
                    ? std::string()
                    : (std::filesystem::path(common.outputs.output_dir) / name / "report.json")
                          .string();
        }
        stderr_console().write_within(
            fmt::format("ibvcap capture: == scan {} ended ({})\n", name, outcome.info.stopped_by),
            kEndPatience);
        ScanResult r;
        r.name = name;
        if (outcome.info.window) {
            r.window.start_ns = outcome.info.window->start_ns;
            r.window.stop_ns = outcome.info.window->stop_ns;
        }
        r.zero_loss = outcome.ledger.zero_loss();
        r.loss_reasons = outcome.ledger.loss_reasons();
        r.totals = outcome.ledger.totals();
        r.stopped_by = outcome.info.stopped_by;
        r.report = per.report_path;
        r.exit_code = finish_run(outcome, per);
        done.push_back(std::move(r));
    };
    RunOutcome capture = run_capture(request, stop_flag());
    if (!capture.info.error.empty()) {
        stderr_console().write_within(fmt::format("ibvcap capture: {}\n", capture.info.error),
                                      kEndPatience);
    }
    int code = capture.exit_code;
    for (const ScanResult& r : done) {
        code = worse_exit_code(code, r.exit_code);
    }
    if (!common.report_path.empty() && !names_scan(common.report_path)) {
        try {
            write_report(common.report_path, capture_report(done, capture), reader_wait("capture"));
        } catch (const std::exception& e) {
            stderr_console().write_within(fmt::format("ibvcap capture: {}\n", e.what()),
                                          kEndPatience);
            code = worse_exit_code(code, kExitError);
        }
    }
    std::size_t lossless = 0;
    for (const ScanResult& r : done) {
        lossless += r.zero_loss ? 1 : 0;
    }
    stderr_console().write_within(
        fmt::format("ibvcap capture: {} scan{} recorded ({}), {} without loss, {} not recorded; "
                    "set up once\n",
                    done.size(), done.size() == 1 ? "" : "s", capture.info.stopped_by, lossless,
                    capture.scans_not_recorded.size()),
        kEndPatience);
    return code;
}

}  // namespace ibvcap::cli
