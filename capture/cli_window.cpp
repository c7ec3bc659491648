// The frame window of a run (docs/operations.md, "Observing a window"):
// --start-at, --stop-at, --window-grace, --scan, or a scan of a --schedule
// file (lib/run/schedule.hpp), for capture and read alike. capture's
// --duration, relative to --start-at, is its own (cmd_capture.cpp).
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "capture/cli.hpp"

namespace ibvcap::cli {

namespace {

// Every line's groups= and formats= read as the command line reads them, so
// a schedule with one bad line is refused whole, naming the line.
void check_scan_lists(const std::vector<Scan>& scans, const std::string& file) {
    for (const Scan& s : scans) {
        try {
            if (!s.groups.empty()) {
                std::vector<SourceFilter> sources;
                std::vector<std::optional<StreamFormat>> formats;
                parse_groups(s.groups, &sources, &formats);
            }
            if (!s.formats.empty()) {
                parse_formats(s.formats);
            }
        } catch (const std::exception& e) {
            throw UsageError(fmt::format("schedule {} line {}: {}", file, s.line, e.what()));
        }
    }
}

std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// The schedule file read and every line's lists checked: refused whole.
std::vector<Scan> checked_schedule(const std::string& file) {
    std::vector<Scan> scans;
    try {
        scans = load_schedule(file);
    } catch (const std::runtime_error& e) {
        throw UsageError(e.what());
    }
    check_scan_lists(scans, file);
    return scans;
}

double window_grace(const cxxopts::ParseResult& args) {
    const double grace = args["window-grace"].as<double>();
    if (!std::isfinite(grace) || grace < 0 || grace > 1e6) {
        throw UsageError(
            fmt::format("bad --window-grace {}: expected {}", grace, valid_range("window-grace")));
    }
    return grace;
}

std::string replaced(std::string text, std::string_view what, const std::string& with) {
    for (std::size_t at = text.find(what); at != std::string::npos;
         at = text.find(what, at + with.size())) {
        text.replace(at, what.size(), with);
    }
    return text;
}

}  // namespace

std::optional<Scan> scheduled_scan(const cxxopts::ParseResult& args) {
    if (!args.count("schedule")) {
        return std::nullopt;
    }
    const std::string file = args["schedule"].as<std::string>();
    for (const char* name : {"start-at", "stop-at"}) {
        if (args.count(name)) {
            throw UsageError(fmt::format(
                "--{} with --schedule: the scan's line gives the window; leave --{} out", name,
                name));
        }
    }
    if (!args.count("scan")) {
        return std::nullopt;  // every scan to come, in one capture (scheduled_scans)
    }
    const std::vector<Scan> scans = checked_schedule(file);
    try {
        return select_scan(scans, args["scan"].as<std::string>(), now_ns(), file);
    } catch (const std::runtime_error& e) {
        throw UsageError(e.what());
    }
}

std::vector<Scan> scheduled_scans(const cxxopts::ParseResult& args, bool reading) {
    if (!args.count("schedule") || args.count("scan")) {
        return {};
    }
    const std::string file = args["schedule"].as<std::string>();
    if (reading) {
        throw UsageError(fmt::format(
            "read takes one scan of --schedule {}: give --scan NAME (each scan of a recording is "
            "a read of its own)",
            file));
    }
    for (const char* name : {"duration", "count"}) {
        if (args.count(name)) {
            throw UsageError(fmt::format(
                "--{} with --schedule: the capture ends after the schedule's last scan; leave "
                "--{} out, or take one scan with --scan NAME",
                name, name));
        }
    }
    return reread_schedule(file, window_grace(args));
}

std::vector<Scan> reread_schedule(const std::string& file, double grace_s) {
    const std::vector<Scan> scans = checked_schedule(file);
    try {
        return scans_to_come(scans, now_ns(), grace_s, file);
    } catch (const std::runtime_error& e) {
        throw UsageError(e.what());
    }
}

void apply_scan_lists(const cxxopts::ParseResult& args, const Scan& scan, CommonOptions& c) {
    if (!scan.groups.empty()) {
        if (args.count("groups")) {
            throw UsageError(fmt::format(
                "scan {} names its groups (schedule line {}): leave GROUP:PORT off the command "
                "line",
                scan.name, scan.line));
        }
        std::vector<std::optional<StreamFormat>> formats;
        c.demux.groups = parse_groups(scan.groups, &c.demux.sources, &formats);
        c.demux.group_formats.clear();
        for (const auto& f : formats) {
            c.demux.group_formats.push_back(f.value_or(c.demux.any_group_format));
        }
    }
    if (!scan.formats.empty()) {
        if (args.count("format")) {
            throw UsageError(fmt::format(
                "scan {} names its formats (schedule line {}): leave -F off the command line",
                scan.name, scan.line));
        }
        c.outputs.formats = parse_formats(scan.formats);
    }
    // Each scan in its own directory: -o DIR/SCAN.
    c.outputs.output_dir = (std::filesystem::path(c.outputs.output_dir) / scan.name).string();
}

void name_paths_for_scan(const std::string& scan, CommonOptions& c) {
    for (std::string* path : {&c.report_path, &c.html_path, &c.metrics_path}) {
        *path = replaced(*path, "{scan}", scan);
    }
}

void read_window_options(const cxxopts::ParseResult& args, CommonOptions& c,
                         const std::optional<Scan>& scan) {
    const auto instant = [&](const char* name) -> std::optional<std::int64_t> {
        if (!args.count(name)) {
            return std::nullopt;
        }
        const std::string text = args[name].as<std::string>();
        const auto ns = parse_utc_instant(text);
        if (!ns) {
            throw UsageError(fmt::format(
                "bad --{} '{}': give a UTC time as 2026-11-29T10:00:00Z (a fraction of a second "
                "may follow the seconds) or in VEX form, 2026y333d10h00m00s",
                name, text));
        }
        return ns;
    };
    if (!c.scans.empty()) {
        c.window_grace_s = window_grace(args);  // (each scan's window is the run's)
        return;
    }
    auto start = instant("start-at");
    auto stop = instant("stop-at");
    if (scan) {
        start = scan->window.start_ns;
        stop = scan->window.stop_ns;
        c.scan_name = scan->name;
    }
    if (!start && !stop) {
        for (const char* name : {"window-grace", "scan"}) {
            if (args.count(name)) {
                throw UsageError(fmt::format(
                    "--{} applies only with --start-at or --stop-at (or --schedule)", name));
            }
        }
        return;
    }
    if (!scan && args.count("scan")) {
        c.scan_name = args["scan"].as<std::string>();
        if (!valid_scan_name(c.scan_name)) {
            throw UsageError(fmt::format(
                "bad --scan '{}': a scan name is 1 to 64 letters, digits, '.', '_' or '-', not "
                "starting with '.'",
                c.scan_name));
        }
    }
    FrameWindow w;
    w.start_ns = start.value_or(FrameWindow::kNoStart);
    w.stop_ns = stop.value_or(FrameWindow::kOpen);
    if (start && stop && *stop <= *start) {
        throw UsageError(fmt::format("--stop-at {} is not after --start-at {}",
                                     format_utc_instant(*stop), format_utc_instant(*start)));
    }
    c.window_grace_s = window_grace(args);
    c.demux.window = w;
}

// A VDIF stream whose rate is learned is judged by its seconds until the
// rate is known: an edge inside a second needs the rate given.
void check_window_rates(const CommonOptions& c) {
    const auto& d = c.demux;
    if (!d.window || d.vdif_frames_per_second != 0 || whole_seconds(*d.window)) {
        return;
    }
    const bool vdif = std::any_of(d.group_formats.begin(), d.group_formats.end(),
                                  [](StreamFormat f) { return f != StreamFormat::codif; }) ||
                      (d.groups.empty() && d.any_group_format != StreamFormat::codif);
    if (vdif) {
        throw UsageError(
            "--start-at or --stop-at inside a second: a VDIF frame's time within its second "
            "needs the frame rate from the first frame: add --vdif-frames-per-second N, or give "
            "whole seconds");
    }
}

}  // namespace ibvcap::cli
