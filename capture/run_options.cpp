// The option table that read and capture share (the outputs, their files,
// the report, the run page, the metrics file, --expect) and what it means
// for a run: CommonOptions, checked before the run opens anything. Each
// command adds its own options beside these (cmd_read.cpp, cmd_capture.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "capture/cli.hpp"
#include "lib/review/run_page.hpp"
#include "lib/run/metrics.hpp"
#include "lib/run/run_paths.hpp"
#include "lib/sinks/dada_header.hpp"

namespace ibvcap::cli {

std::string writer_memory_problem(const Writer::Options& writer, std::size_t lanes) {
    Writer::Options per_lane = writer;
    per_lane.memory_bytes /= std::max<std::size_t>(lanes, 1);
    const std::size_t least = Writer::min_memory_bytes(per_lane);
    if (least == 0 || per_lane.memory_bytes >= least) {
        return {};
    }
    const std::size_t need_mib = (least * std::max<std::size_t>(lanes, 1) + (1 << 20) - 1) >> 20;
    return fmt::format(
        "--writer-memory {} is too small: up to {} output files{} need a buffer of at least "
        "{} KiB each, with {} disk thread{}{}; give --writer-memory {}M or more",
        Writer::memory_text(writer.memory_bytes), per_lane.max_outputs,
        lanes > 1 ? fmt::format(" per interface ({} -i)", lanes) : std::string(),
        Writer::kMinBufferBytes >> 10, per_lane.threads, per_lane.threads == 1 ? "" : "s",
        per_lane.direct_io ? " and --direct-io" : "", need_mib);
}

void add_common_options(cxxopts::Options& options, const char* groups_help) {
    // clang-format off
    options.add_options()
        ("antenna", "antenna source IPv4 (repeatable; default: every source is an antenna)", cxxopts::value<std::vector<std::string>>(), "IP")
        ("o,output-dir", "directory for output files", cxxopts::value<std::string>()->default_value("."), "DIR")
        ("F,format", "output format: raw, codif, codifhdr, vdif, pcap, pcapng (repeatable)", cxxopts::value<std::vector<std::string>>(), "FORMAT")
        ("ordered", "codif and vdif files in sequence order per stream, a fill frame (invalid bit set) in place of each frame that never came (docs/formats.md)")
        ("ordered-window", "with --ordered: frames a stream waits for a missing one (held in host memory, FRAMES x the frame length per stream)", cxxopts::value<std::uint32_t>()->default_value(std::to_string(kDefaultOrderedWindow)), "FRAMES")
        ("dada", "write a stream's payload, in time order with fill records for frames that never came, into the PSRDADA ring made by dada_db -k KEY (repeatable, or KEY,KEY...; KEY@ANTENNA[/THREAD] picks the stream; docs/operations.md)", cxxopts::value<std::vector<std::string>>(), "KEY[@ANTENNA[/THREAD]]")
        ("dada-header", "with --dada: a KEY=VALUE line for every ring's header, added or replacing ibvcap's (FREQ, BW, SOURCE, TELESCOPE, NPOL...; repeatable)", cxxopts::value<std::vector<std::string>>(), "KEY=VALUE")
        ("prefix", "output file name prefix (no / or ..)", cxxopts::value<std::string>()->default_value("ibvcap"), "NAME")
        ("overwrite", "replace an earlier run's output files of the same names (and its rotated set)")
        ("pcap-snaplen", "pcap and pcapng records: full frames, or headers (each UDP frame up to 64 bytes into its payload: a CODIF header, a VDIF or VTP header; original length kept)", cxxopts::value<std::string>()->default_value("full"), "full|headers")
        ("direct-io", "write output files with O_DIRECT (bypass the page cache; the filesystem must support it)")
        ("disk-threads", "writer threads; outputs are spread over them", cxxopts::value<unsigned>()->default_value("1"), "N")
        ("disk-cpu", "pin writer thread i to the i-th CPU of LIST (comma-separated)", cxxopts::value<std::vector<int>>(), "LIST")
        ("writer-memory", "bound on the writers' buffers together (K, M, G: binary units; default 1G, with capture 1G per -i); per-output buffers shrink as outputs are added (docs/performance.md)", cxxopts::value<std::string>()->default_value("1G"), "SIZE")
        ("G,rotate-seconds", "start a new file of each output when a record's time enters a new period of SECONDS (tcpdump -G)", cxxopts::value<std::uint64_t>(), "SECONDS")
        ("C,file-size", "start a new file of each output before it passes MB million bytes (tcpdump -C)", cxxopts::value<std::uint64_t>(), "MB")
        ("W,file-count", "with -G or -C: keep N files per output, overwriting the oldest (a ring buffer)", cxxopts::value<std::uint32_t>(), "N")
        ("c,count", "stop after N frames", cxxopts::value<std::uint64_t>(), "N")
        ("report", "write the ledger as JSON to FILE (- for stdout)", cxxopts::value<std::string>(), "FILE")
        ("html", "write the run page to PAGE: one self-contained HTML file that draws the report (verdict, loss by cause, presence of every stream over time, rates, witnesses, outputs); opens offline in any browser", cxxopts::value<std::string>(), "PAGE")
        ("metrics-file", "write the run's counters in the Prometheus text format to PATH, replaced atomically every --metrics-interval seconds and at the end (for node_exporter's textfile collector, which reads *.prom files)", cxxopts::value<std::string>(), "PATH")
        ("metrics-interval", "seconds between rewrites of --metrics-file (taken at the once-a-second tick)", cxxopts::value<double>()->default_value("10"), "SECONDS")
        ("expect", "the streams the run must see: a JSON manifest of groups, antennas and threads (docs/operations.md); one that never arrives, starts late, stops early or runs at the wrong rate makes the verdict loss", cxxopts::value<std::string>(), "FILE")
        ("expect-antennas", "expect N antennas (whatever their addresses) on every group", cxxopts::value<std::uint64_t>(), "N")
        ("expect-threads", "with --expect-antennas: threads 0..M-1 from each antenna", cxxopts::value<std::uint64_t>(), "M")
        ("expect-grace", "with --expect*: how long after the join a stream may start, and before the end stop", cxxopts::value<double>()->default_value("2"), "SECONDS")
        ("expect-rate-tolerance", "with --expect*: how far a stream's frames per second may be off the expected, as a fraction", cxxopts::value<double>()->default_value("0.05"), "FRACTION")
        ("start-at", "write only the frames whose own time (the CODIF or VDIF header's) is at or after UTC: 2026-11-29T10:00:00Z or 2026y333d10h00m00s (VEX); earlier frames are counted, not written, and a stream's span starts there", cxxopts::value<std::string>(), "UTC")
        ("stop-at", "write only the frames whose own time is before UTC; a capture stops once it is past (and --window-grace): a stream's span ends there", cxxopts::value<std::string>(), "UTC")
        ("window-grace", "with --stop-at: how long a capture waits after it for late frames of the window", cxxopts::value<double>()->default_value("2"), "SECONDS")
        ("scan", "with --start-at or --stop-at: the window's name (a schedule's scan, no0042), in the report; ibvcap merge gives each scan's verdict over the hosts. With --schedule: the scan to take, or next (the one under way, else the next to come)", cxxopts::value<std::string>(), "NAME")
        ("schedule", "a site's schedule, one line per scan (NAME START STOP [groups=...] [formats=...]; docs/operations.md): with --scan, the run takes that scan's window, groups and formats, writes into -o DIR/NAME, and {scan} in --report, --html and --metrics-file is NAME; without (capture), one capture set up once records every scan to come, each into -o DIR/NAME with its own report (DIR/NAME/report.json, or --report with {scan}), and SIGHUP reads the file again", cxxopts::value<std::string>(), "FILE")
        ("q,quiet", "no per-stream table and no live stats line: the totals, notes and verdict only")
        ("stream-format", "how datagrams to a group without its own /FORMAT are read: codif, vdif (a VDIF frame per datagram) or vtp (the VDIF Transport Protocol: a 64-bit sequence number, then a VDIF frame)", cxxopts::value<std::string>()->default_value("codif"), "FORMAT")
        ("vdif-frames-per-second", "VDIF frames per second of every VDIF stream (default: each stream's is learned from its first whole second, and the report says so)", cxxopts::value<std::uint64_t>(), "N")
        ("v,verbose", "one line per stream frame")
        ("h,help", "this help")
        ("groups", groups_help, cxxopts::value<std::vector<GroupArgument>>());
    // clang-format on
    options.parse_positional({"groups"});
}

namespace {

// --expect and its shorthand (lib/ledger/expect.hpp); a manifest that cannot
// be used is a usage error naming the file, the position and the fix.
void read_expect_options(const cxxopts::ParseResult& args, CommonOptions& c) {
    const bool file = args.count("expect") > 0;
    const bool antennas = args.count("expect-antennas") > 0;
    const bool threads = args.count("expect-threads") > 0;
    if (file && (antennas || threads)) {
        throw UsageError(
            "--expect FILE and --expect-antennas/--expect-threads exclude each other: give the "
            "manifest, or the shorthand");
    }
    if (antennas != threads) {
        throw UsageError(
            "--expect-antennas N and --expect-threads M go together (N antennas, threads "
            "0..M-1 each)");
    }
    if (!file && !antennas) {
        for (const char* name : {"expect-grace", "expect-rate-tolerance"}) {
            if (args.count(name)) {
                throw UsageError(fmt::format(
                    "--{} applies only with --expect FILE or --expect-antennas N", name));
            }
        }
        return;
    }
    const double grace = args["expect-grace"].as<double>();
    if (!std::isfinite(grace) || grace < 0 || grace > 1e6) {
        throw UsageError(
            fmt::format("bad --expect-grace {}: expected {}", grace, valid_range("expect-grace")));
    }
    const double tolerance = args["expect-rate-tolerance"].as<double>();
    if (!std::isfinite(tolerance) || tolerance <= 0 || tolerance > 1e6) {
        throw UsageError(fmt::format("bad --expect-rate-tolerance {}: expected {}", tolerance,
                                     valid_range("expect-rate-tolerance")));
    }
    c.expect_options.grace_s = grace;
    c.expect_options.rate_tolerance = tolerance;
    try {
        c.expect = file ? load_expect_manifest(args["expect"].as<std::string>())
                        : expect_shorthand(args["expect-antennas"].as<std::uint64_t>(),
                                           args["expect-threads"].as<std::uint64_t>());
    } catch (const ExpectManifestError& e) {
        throw UsageError(e.what());
    }
    if (const std::string problem = manifest_group_not_captured(*c.expect, c.demux.groups);
        !problem.empty()) {
        throw UsageError(problem);
    }
}

// How the per-stream files are written: the groups' formats (a VDIF group
// gets no codif file made ahead), and --ordered and --ordered-window
// (docs/formats.md, "Ordered files and fill frames"): only with a file they
// order, the window within its range.
void read_stream_file_options(const cxxopts::ParseResult& args, CommonOptions& c) {
    c.outputs.group_formats = c.demux.group_formats;
    c.outputs.any_group_format = c.demux.any_group_format;
    const std::uint32_t window = args["ordered-window"].as<std::uint32_t>();
    if (window < 1 || window > kMaxOrderedWindow) {
        throw UsageError(fmt::format(
            "bad --ordered-window {}: expected {} (a frame later than the sequence tracker's "
            "8192 is too late for the ledger too)",
            window, valid_range("ordered-window")));
    }
    if (c.dada) {
        c.dada->window = window;  // the rings' reorder window too
    }
    if (args.count("ordered") == 0) {
        if (args.count("ordered-window") && !c.dada) {
            throw UsageError(
                "--ordered-window applies only with --ordered or --dada: add --ordered");
        }
        return;
    }
    const auto& f = c.outputs.formats;
    if (std::find(f.begin(), f.end(), OutputFormat::codif) == f.end() &&
        std::find(f.begin(), f.end(), OutputFormat::vdif) == f.end()) {
        throw UsageError("--ordered orders the codif and vdif files: add -F codif or -F vdif");
    }
    c.outputs.ordered_window = window;
}

// --dada and --dada-header (docs/operations.md, "Feeding a PSRDADA
// pipeline"): the rings are attached later, by the command.
void read_dada_options(const cxxopts::ParseResult& args, CommonOptions& c) {
    if (args.count("dada") == 0) {
        if (args.count("dada-header")) {
            throw UsageError("--dada-header applies only with --dada: add --dada KEY");
        }
        return;
    }
    DadaOptions d;
    try {
        for (const std::string& list : args["dada"].as<std::vector<std::string>>()) {
            std::size_t at = 0;
            for (;;) {
                const std::size_t comma = list.find(',', at);
                d.targets.push_back(parse_dada_target(list.substr(at, comma - at)));
                if (comma == std::string::npos) {
                    break;
                }
                at = comma + 1;
            }
        }
    } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
    }
    if (args.count("dada-header")) {
        for (const std::string& kv : args["dada-header"].as<std::vector<std::string>>()) {
            const auto eq = kv.find('=');
            const std::string key = kv.substr(0, eq);
            if (eq == std::string::npos) {
                throw UsageError(
                    fmt::format("bad --dada-header '{}': expected KEY=VALUE (e.g. FREQ=1400)", kv));
            }
            if (const std::string why = dada_header_key_problem(key); !why.empty()) {
                throw UsageError(fmt::format("bad --dada-header '{}': {}", kv, why));
            }
            const std::string value = kv.substr(eq + 1);
            if (value.empty() || value.find_first_of("\n\r") != std::string::npos) {
                throw UsageError(fmt::format(
                    "bad --dada-header '{}': the value must be one non-empty line", kv));
            }
            d.header.emplace_back(key, value);
        }
    }
    c.dada = std::move(d);
}

// The files the run names, before it starts: none is another of them or an
// input (run_path_collision: a usage error), and each can be written (exit
// 1). The -o directory is made first: a report in it before it exists is
// fine, and its outputs' names are known to be its.
void check_run_files(const cxxopts::ParseResult& args, const std::string& input_file,
                     const CommonOptions& c) {
    const bool named = !c.report_path.empty() || !c.html_path.empty() || !c.metrics_path.empty();
    if (named && !c.outputs.formats.empty()) {
        prepare_output_dir(c.outputs.output_dir);
    }
    std::vector<RunPath> paths;
    if (!input_file.empty()) {
        paths.push_back({"-r", input_file, PathRole::input, "the input file", "input"});
    }
    if (args.count("expect")) {
        paths.push_back({"--expect", args["expect"].as<std::string>(), PathRole::input,
                         "the --expect manifest", "manifest"});
    }
    if (c.verbose) {  // its frame lines, on standard output
        paths.push_back({"-v", "", PathRole::output, "the frame lines of -v", "frame lines"});
    }
    if (!c.report_path.empty()) {
        paths.push_back(
            {"--report", c.report_path, PathRole::output, "the --report file", "report"});
    }
    if (!c.html_path.empty()) {
        paths.push_back({"--html", c.html_path, PathRole::output, "the --html page", "page"});
    }
    if (!c.metrics_path.empty()) {
        // (replaced as a file: "-" is one in the current directory)
        paths.push_back({"--metrics-file", c.metrics_path == "-" ? "./-" : c.metrics_path,
                         PathRole::output, "the --metrics-file file", "metrics file"});
    }
    if (const std::string problem = run_path_collision(paths, c.outputs); !problem.empty()) {
        throw UsageError(problem);
    }
    if (!c.report_path.empty()) {
        check_report_path(c.report_path);
    }
    if (!c.html_path.empty()) {
        if (const std::string problem = check_run_page_path(c.html_path); !problem.empty()) {
            throw UsageError(problem);
        }
    }
    if (!c.metrics_path.empty()) {
        check_metrics_path(c.metrics_path);
    }
}

}  // namespace

namespace {

// One capture of several scans: each scan's --report and --html come from
// {scan} in the path, checked as the first scan's (its name in place);
// the metrics file is the capture's own.
void check_scans_run_files(const cxxopts::ParseResult& args, const CommonOptions& c) {
    const auto has_scan = [](const std::string& path) {
        return path.find("{scan}") != std::string::npos;
    };
    if (!c.html_path.empty() && !has_scan(c.html_path)) {
        throw UsageError(fmt::format(
            "--html {} with a schedule of several scans: each scan has its own page; put {{scan}} "
            "in the path (e.g. /data/{{scan}}.html)",
            c.html_path));
    }
    if (has_scan(c.metrics_path)) {
        throw UsageError(
            "--metrics-file with a schedule of several scans is the capture's one file (its run "
            "label the file's name): leave {scan} out of it");
    }
    CommonOptions first = c;
    name_paths_for_scan(c.scans.front().name, first);
    check_run_files(args, {}, first);
}

}  // namespace

CommonOptions read_common_options(const cxxopts::ParseResult& args, const std::string& input_file) {
    CommonOptions c;
    c.outputs.output_dir = args["output-dir"].as<std::string>();
    c.outputs.prefix = args["prefix"].as<std::string>();
    if (c.outputs.prefix.empty() || c.outputs.prefix.find('/') != std::string::npos ||
        c.outputs.prefix.find("..") != std::string::npos) {
        throw UsageError(fmt::format(
            "--prefix '{}': a file name prefix must be non-empty, without / or .. (files go "
            "in -o DIR)",
            c.outputs.prefix));
    }
    c.outputs.overwrite = args.count("overwrite") > 0;
    // --schedule FILE --scan NAME: the scan's window, groups and formats.
    const std::optional<Scan> scan = scheduled_scan(args);
    // --schedule FILE alone: every scan to come, in one capture.
    c.scans = scheduled_scans(args, !input_file.empty());
    if (args.count("format")) {
        c.outputs.formats = parse_formats(args["format"].as<std::vector<std::string>>());
    }
    const std::string default_format = args["stream-format"].as<std::string>();
    const auto any_format = parse_stream_format(default_format);
    if (!any_format) {
        throw UsageError(
            fmt::format("unknown --stream-format '{}' (valid: codif, vdif, vtp)", default_format));
    }
    c.demux.any_group_format = *any_format;
    if (args.count("groups")) {
        std::vector<std::optional<StreamFormat>> formats;
        c.demux.groups = parse_groups(group_arguments(args), &c.demux.sources, &formats);
        for (const auto& f : formats) {
            c.demux.group_formats.push_back(f.value_or(*any_format));
        }
    }
    if (args.count("vdif-frames-per-second")) {
        const auto fps = args["vdif-frames-per-second"].as<std::uint64_t>();
        if (fps == 0 || fps > kVdifMaxFramesPerSecond) {
            throw UsageError(fmt::format(
                "bad --vdif-frames-per-second {}: expected 1 to {} (VDIF frame numbers are 24 "
                "bits); leave it out to learn each stream's rate from its first second",
                fps, kVdifMaxFramesPerSecond));
        }
        c.demux.vdif_frames_per_second = fps;
    }
    if (args.count("antenna")) {
        c.demux.antennas =
            parse_addresses(args["antenna"].as<std::vector<std::string>>(), "--antenna");
    }
    if (scan) {
        apply_scan_lists(args, *scan, c);
    }
    c.outputs.groups = c.demux.groups;
    c.outputs.antennas = c.demux.antennas;
    const std::string snaplen = args["pcap-snaplen"].as<std::string>();
    if (snaplen != "full" && snaplen != "headers") {
        throw UsageError(
            fmt::format("unknown --pcap-snaplen '{}' (valid: full, headers)", snaplen));
    }
    c.outputs.pcap_headers_only = snaplen == "headers";
    read_dada_options(args, c);
    read_stream_file_options(args, c);
    if (const std::string problem = output_format_problem(c.outputs); !problem.empty()) {
        throw UsageError(problem);  // (-F codif for a /vdif group: files of no stream)
    }
    c.writer.direct_io = args.count("direct-io") > 0;
    c.writer.threads = args["disk-threads"].as<unsigned>();
    if (c.writer.threads == 0 || c.writer.threads > 64) {
        throw UsageError("--disk-threads takes 1 to 64");
    }
    if (args.count("disk-cpu")) {
        c.writer.cpus = args["disk-cpu"].as<std::vector<int>>();
        for (const int cpu : c.writer.cpus) {
            if (cpu < 0) {
                throw UsageError(fmt::format("--disk-cpu: bad CPU {}", cpu));
            }
        }
    }
    c.writer.memory_bytes = parse_memory_size(args["writer-memory"].as<std::string>());
    // Only the run's own files (pcap, pcapng): their number is known, so the
    // bound need not leave room for thousands of per-stream files.
    if (!c.outputs.formats.empty() &&
        std::none_of(c.outputs.formats.begin(), c.outputs.formats.end(), per_antenna)) {
        c.writer.max_outputs = std::max<std::size_t>(c.outputs.formats.size(), 1);
    }
    if (const std::string problem = writer_memory_problem(c.writer, 1); !problem.empty()) {
        throw UsageError(problem);
    }
    c.writer.rotation.seconds = option_or(args, "rotate-seconds", std::uint64_t{0});
    check_positive(args, "rotate-seconds", double(c.writer.rotation.seconds),
                   "-G (--rotate-seconds)", "leave -G out for no time rotation");
    const std::uint64_t mb = option_or(args, "file-size", std::uint64_t{0});
    check_positive(args, "file-size", double(mb), "-C (--file-size)",
                   "leave -C out for no size rotation");
    if (mb > (std::uint64_t{1} << 40) / 1'000'000) {
        throw UsageError(
            fmt::format("bad -C (--file-size) {}: expected {}", mb, valid_range("file-size")));
    }
    c.writer.rotation.bytes = mb * 1'000'000;
    c.writer.rotation.files = option_or(args, "file-count", std::uint32_t{0});
    check_positive(args, "file-count", double(c.writer.rotation.files), "-W (--file-count)",
                   "leave -W out to keep every file");
    if (c.writer.rotation.files > 0 && c.writer.rotation.seconds == 0 &&
        c.writer.rotation.bytes == 0) {
        throw UsageError("-W needs -G or -C (it counts the files they rotate through)");
    }
    c.count = option_or(args, "count", std::uint64_t{0});
    check_positive(args, "count", double(c.count), "-c (--count)",
                   "leave -c out for no frame limit");
    c.report_path = args.count("report") ? args["report"].as<std::string>() : "";
    if (args.count("report") && c.report_path.empty()) {
        throw UsageError("--report needs a file name (or - for stdout)");
    }
    if (args.count("html")) {
        c.html_path = args["html"].as<std::string>();
        if (c.html_path.empty() || c.html_path == "-") {
            throw UsageError(check_run_page_path(c.html_path));
        }
    }
    c.metrics_interval_s = args["metrics-interval"].as<double>();
    check_positive(args, "metrics-interval", c.metrics_interval_s, "--metrics-interval",
                   "leave it out for every 10 seconds");
    if (args.count("metrics-interval") && !args.count("metrics-file")) {
        throw UsageError("--metrics-interval needs --metrics-file PATH (the file it rewrites)");
    }
    if (args.count("metrics-file")) {
        c.metrics_path = args["metrics-file"].as<std::string>();
        if (c.metrics_path.empty()) {
            throw UsageError(
                "--metrics-file needs a file name, e.g. /var/lib/node_exporter/ibvcap.prom");
        }
    }
    c.verbose = args.count("verbose") > 0;
    if (scan) {
        name_paths_for_scan(scan->name, c);
    }
    if (c.scans.empty()) {
        check_run_files(args, input_file, c);
    } else {
        check_scans_run_files(args, c);
    }
    read_expect_options(args, c);
    read_window_options(args, c, scan);
    check_window_rates(c);
    c.quiet = args.count("quiet") > 0;
    return c;
}

}  // namespace ibvcap::cli
