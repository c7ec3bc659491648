#include "capture/cli.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <nlohmann/json.hpp>

namespace ibvcap::cli {

std::vector<OutputFormat> parse_formats(const std::vector<std::string>& names) {
    std::vector<OutputFormat> formats;
    for (const auto& name : names) {
        const auto f = parse_output_format(name);
        if (!f) {
            throw UsageError(
                fmt::format("unknown format '{}' (valid: {})", name, output_format_choices()));
        }
        if (std::find(formats.begin(), formats.end(), *f) == formats.end()) {
            formats.push_back(*f);
        }
    }
    return formats;
}

std::vector<Endpoint> parse_groups(const std::vector<std::string>& texts) {
    std::vector<Endpoint> groups;
    for (const auto& t : texts) {
        try {
            groups.push_back(parse_group(t));
        } catch (const std::invalid_argument& e) {
            throw UsageError(e.what());
        }
    }
    return groups;
}

std::vector<std::uint32_t> parse_addresses(const std::vector<std::string>& texts,
                                           const char* option) {
    std::vector<std::uint32_t> out;
    for (const auto& t : texts) {
        const auto ip = parse_ipv4(t);
        if (!ip) {
            throw UsageError(
                fmt::format("bad {} '{}': expected an IPv4 address such as 10.0.0.11", option, t));
        }
        out.push_back(*ip);
    }
    return out;
}

cxxopts::ParseResult parse(cxxopts::Options& options, int argc, char** argv) {
    try {
        return options.parse(argc, argv);
    } catch (const cxxopts::exceptions::exception& e) {
        throw UsageError(e.what());
    }
}

void add_common_options(cxxopts::Options& options, const char* groups_help) {
    // clang-format off
    options.add_options()
        ("antenna", "antenna source IPv4 (repeatable; default: every source is an antenna)", cxxopts::value<std::vector<std::string>>(), "IP")
        ("o,output-dir", "directory for output files", cxxopts::value<std::string>()->default_value("."), "DIR")
        ("F,format", "output format: raw, codif, codifhdr, pcap (repeatable)", cxxopts::value<std::vector<std::string>>(), "FORMAT")
        ("prefix", "output file name prefix (no / or ..)", cxxopts::value<std::string>()->default_value("ibvcap"), "NAME")
        ("overwrite", "replace an earlier run's output files of the same names (and its rotated set)")
        ("pcap-snaplen", "pcap records: full frames, or headers (up to the end of the CODIF header; original length kept)", cxxopts::value<std::string>()->default_value("full"), "full|headers")
        ("direct-io", "write output files with O_DIRECT (bypass the page cache; the filesystem must support it)")
        ("disk-threads", "writer threads; outputs are spread over them", cxxopts::value<unsigned>()->default_value("1"), "N")
        ("disk-cpu", "pin writer thread i to the i-th CPU of LIST (comma-separated)", cxxopts::value<std::vector<int>>(), "LIST")
        ("G,rotate-seconds", "start a new file of each output when a record's time enters a new period of SECONDS (tcpdump -G)", cxxopts::value<std::uint64_t>()->default_value("0"), "SECONDS")
        ("C,file-size", "start a new file of each output before it passes MB million bytes (tcpdump -C)", cxxopts::value<std::uint64_t>()->default_value("0"), "MB")
        ("W,file-count", "with -G or -C: keep N files per output, overwriting the oldest (a ring buffer)", cxxopts::value<std::uint32_t>()->default_value("0"), "N")
        ("c,count", "stop after N frames", cxxopts::value<std::uint64_t>()->default_value("0"), "N")
        ("report", "write the ledger as JSON to FILE (- for stdout)", cxxopts::value<std::string>(), "FILE")
        ("q,quiet", "final verdict only: no per-stream table, no live stats line")
        ("v,verbose", "one line per CODIF frame")
        ("h,help", "this help")
        ("groups", groups_help, cxxopts::value<std::vector<std::string>>());
    // clang-format on
    options.parse_positional({"groups"});
}

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
    if (args.count("format")) {
        c.outputs.formats = parse_formats(args["format"].as<std::vector<std::string>>());
    }
    if (args.count("groups")) {
        c.demux.groups = parse_groups(args["groups"].as<std::vector<std::string>>());
    }
    if (args.count("antenna")) {
        c.demux.antennas =
            parse_addresses(args["antenna"].as<std::vector<std::string>>(), "--antenna");
    }
    const std::string snaplen = args["pcap-snaplen"].as<std::string>();
    if (snaplen != "full" && snaplen != "headers") {
        throw UsageError(
            fmt::format("unknown --pcap-snaplen '{}' (valid: full, headers)", snaplen));
    }
    c.outputs.pcap_headers_only = snaplen == "headers";
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
    c.writer.rotation.seconds = args["rotate-seconds"].as<std::uint64_t>();
    const std::uint64_t mb = args["file-size"].as<std::uint64_t>();
    if (mb > (std::uint64_t{1} << 40) / 1'000'000) {
        throw UsageError("-C: at most 1099511 (million bytes)");
    }
    c.writer.rotation.bytes = mb * 1'000'000;
    c.writer.rotation.files = args["file-count"].as<std::uint32_t>();
    if (c.writer.rotation.files > 0 && c.writer.rotation.seconds == 0 &&
        c.writer.rotation.bytes == 0) {
        throw UsageError("-W needs -G or -C (it counts the files they rotate through)");
    }
    c.count = args["count"].as<std::uint64_t>();
    c.report_path = args.count("report") ? args["report"].as<std::string>() : "";
    if (args.count("report") && c.report_path.empty()) {
        throw UsageError("--report needs a file name (or - for stdout)");
    }
    if (!c.report_path.empty()) {
        // Fail now, not after the capture. A report in the -o directory is
        // fine before that directory exists: it is made first.
        if (!c.outputs.formats.empty()) {
            prepare_output_dir(c.outputs.output_dir);
        }
        if (const std::string problem = check_report_path(c.report_path, c.outputs, input_file);
            !problem.empty()) {
            throw UsageError(problem);
        }
    }
    c.quiet = args.count("quiet") > 0;
    c.verbose = args.count("verbose") > 0;
    return c;
}

void print_frame(const Frame& frame, const UdpPacket& p, const CodifHeader& h, const StreamStats&) {
    fmt::print("{}.{:09} {}:{} > {}:{} codif {} station {} thread {} {}:{} {} bytes{}\n",
               frame.timestamp_ns / 1'000'000'000u, frame.timestamp_ns % 1'000'000'000u,
               format_ipv4(p.src_ip), p.src_port, format_ipv4(p.dst_ip), p.dst_port,
               to_string(h.layout), h.stationid, h.threadid, h.seconds, h.frame, h.payload_bytes(),
               h.invalid ? " invalid" : "");
}

int finish_run(const RunOutcome& outcome, const std::string& report_path, bool quiet) {
    // With --report - stdout is the JSON alone; the summary goes to stderr.
    std::FILE* summary = report_path == "-" ? stderr : stdout;
    if (urgent_flag().load()) {
        // Stopped at once: the counts are true, the queued records are
        // counted as not written, and 130 says how the run ended.
        print_summary(summary, outcome.ledger, outcome.info, !quiet);
        if (!report_path.empty()) {
            try {
                write_report(report_path, report_json(outcome.ledger, outcome.info));
            } catch (const std::exception& e) {
                fmt::print(stderr, "ibvcap {}: {}\n", outcome.info.command, e.what());
            }
        }
        fmt::print(stderr,
                   "ibvcap {}: stopped at once on a second interrupt; queued records were "
                   "not written, every file holds whole records\n",
                   outcome.info.command);
        return 130;
    }
    // The summary first: if the report cannot be written, the ledger is still
    // on the terminal.
    print_summary(summary, outcome.ledger, outcome.info, !quiet);
    int code = outcome.exit_code;
    if (!report_path.empty()) {
        try {
            write_report(report_path, report_json(outcome.ledger, outcome.info));
        } catch (const std::exception& e) {
            fmt::print(stderr, "ibvcap {}: {}\n", outcome.info.command, e.what());
            code = kExitError;
        }
    }
    if (!outcome.info.error.empty()) {
        fmt::print(stderr, "ibvcap {}: {}\n", outcome.info.command, outcome.info.error);
    }
    for (const auto& o : outcome.ledger.outputs()) {
        if (!o.error.empty()) {
            fmt::print(stderr, "ibvcap {}: {}: {}\n", outcome.info.command, o.path, o.error);
        }
    }
    return code;
}

namespace {
std::atomic<bool> g_stop{false};

std::atomic<bool> g_urgent{false};

// First interrupt: finish cleanly. Second: stop at once; the writers drop
// what is queued but finish the write in progress, so files hold whole
// records (exiting here could cut a write in the middle of a record). Third:
// end the process on the spot.
extern "C" void on_stop_signal(int) {
    if (!g_stop.exchange(true)) {
        return;
    }
    if (!g_urgent.exchange(true)) {
        return;
    }
    std::_Exit(130);
}
}  // namespace

void install_stop_handler() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
}

const std::atomic<bool>& stop_flag() {
    return g_stop;
}

const std::atomic<bool>& urgent_flag() {
    return g_urgent;
}

}  // namespace ibvcap::cli
