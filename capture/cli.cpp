#include "capture/cli.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "lib/review/run_page.hpp"
#include "lib/run/console.hpp"
#include "lib/run/metrics.hpp"
#include "lib/run/run_paths.hpp"

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

void parse_value(const std::string& text, std::vector<GroupArgument>& value) {
    value.push_back(GroupArgument{text});
}

std::vector<std::string> group_arguments(const cxxopts::ParseResult& args) {
    std::vector<std::string> texts;
    if (args.count("groups")) {
        for (const auto& g : args["groups"].as<std::vector<GroupArgument>>()) {
            texts.push_back(g.text);
        }
    }
    return texts;
}

std::vector<Endpoint> parse_groups(const std::vector<std::string>& arguments,
                                   std::vector<SourceFilter>* sources,
                                   std::vector<std::optional<StreamFormat>>* formats) {
    std::vector<std::string_view> texts;
    for (const auto& a : arguments) {
        try {
            for (const std::string_view t : split_group_list(a)) {
                texts.push_back(t);
            }
        } catch (const std::invalid_argument& e) {
            throw UsageError(e.what());
        }
    }
    std::vector<Endpoint> groups;
    for (const std::string_view text : texts) {
        // GROUP:PORT[@SOURCE,...][/FORMAT]: VDIF has no sync word, so how a
        // group's datagrams are read is the operator's to say (docs/formats.md,
        // "Stream formats").
        std::string_view t = text;
        std::optional<StreamFormat> format;
        if (const auto slash = t.rfind('/'); slash != std::string_view::npos) {
            const std::string_view name = t.substr(slash + 1);
            format = parse_stream_format(name);
            if (!format) {
                throw UsageError(fmt::format(
                    "'{}': unknown stream format '{}' after the / (valid: codif, vdif, vtp)", text,
                    name));
            }
            if (formats == nullptr) {
                throw UsageError(fmt::format(
                    "'{}': a /FORMAT applies to capture and read (gen takes --vdif or --vtp)",
                    text));
            }
            t = t.substr(0, slash);
        }
        std::pair<Endpoint, std::vector<std::uint32_t>> parsed;
        try {
            parsed = parse_group_and_sources(t);
        } catch (const std::invalid_argument& e) {
            throw UsageError(e.what());
        }
        auto& [group, from] = parsed;
        if (!from.empty() && sources == nullptr) {
            throw UsageError(fmt::format(
                "'{}': a source applies to capture and read (gen sends from its --antennas)", t));
        }
        const bool seen = std::find(groups.begin(), groups.end(), group) != groups.end();
        if (sources != nullptr && (seen || !from.empty())) {
            // One group given twice must name its sources the same way: any
            // source and some sources cannot both hold for one join.
            const auto* had = sources_for(*sources, group);
            if (seen && (had == nullptr) != from.empty()) {
                throw UsageError(
                    fmt::format("{} is given both with and without sources; give it once, as "
                                "GROUP:PORT@SOURCE[,SOURCE...] or as GROUP:PORT",
                                group.to_string()));
            }
            if (had == nullptr && !from.empty()) {
                sources->push_back(SourceFilter{group, from});
            } else if (had != nullptr) {
                for (auto& f : *sources) {
                    if (f.group == group) {
                        for (const auto ip : from) {
                            if (std::find(f.sources.begin(), f.sources.end(), ip) ==
                                f.sources.end()) {
                                f.sources.push_back(ip);
                            }
                        }
                    }
                }
            }
        }
        if (!seen) {
            groups.push_back(group);
            if (formats != nullptr) {
                formats->push_back(format);
            }
        } else if (formats != nullptr && format) {
            const auto at = static_cast<std::size_t>(
                std::find(groups.begin(), groups.end(), group) - groups.begin());
            auto& had = (*formats)[at];
            if (had && *had != *format) {
                throw UsageError(fmt::format(
                    "{} is given as both /{} and /{}: a group's datagrams are of one format",
                    group.to_string(), to_string(*had), to_string(*format)));
            }
            had = format;
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

std::string_view valid_range(std::string_view name) {
    // Every numeric option of capture, read and gen, by its long name.
    struct Range {
        std::string_view name;
        std::string_view valid;
    };
    static constexpr Range kRanges[] = {
        {"duration", "a number of seconds greater than 0"},
        {"metrics-interval", "a number of seconds greater than 0"},
        {"count", "a whole number, 1 or more"},
        {"rotate-seconds", "a whole number of seconds, 1 or more"},
        {"file-size", "1 to 1099511 (million bytes)"},
        {"file-count", "1 to 4294967295 (files)"},
        {"disk-threads", "1 to 64"},
        {"ordered-window", "1 to 8192 (frames)"},
        {"disk-cpu", "CPU numbers 0 or more, comma-separated"},
        {"cpu", "a CPU number, 0 or more"},
        {"ring-depth", "16 to 4294967295"},
        {"num-blocks", "16 to 4294967295"},
        {"poll-batch", "1 to 4294967295"},
        {"repost-batch", "1 to 4294967295"},
        {"vlan-tags", "0, 1 or 2"},
        {"max-frame", "128 to 65535 (bytes)"},
        {"num-devices", "the number of -i given"},
        {"num-multicast-groups", "the number of GROUP:PORT given"},
        {"num-antennas", "1 or more"},
        {"gpu", "a GPU number, 0 or more"},
        {"cuda-dev", "a GPU number, 0 or more"},
        {"frames-per-block", "1 to 4294967295"},
        {"gpu-blocks", "2 to 4294967295"},
        {"block-threads", "1 to 65535"},
        {"rate", "packets per second, 0 or more (0: as fast as possible)"},
        {"ttl", "0 to 255"},
        {"antennas", "1 to 200"},
        {"threads", "1 to 65535"},
        {"burst", "a whole number of frame slots, 1 or more"},
        {"payload", "a multiple of 8 bytes"},
        {"nchan", "1 to 65535"},
        {"nbits", "1 to 32"},
        {"period", "1 to 65535 (seconds)"},
        {"frames-per-period", "1 or more"},
        {"epoch", "0 to 63"},
        {"start-seconds", "0 to 4294967295"},
        {"start-frame", "a whole number, 0 or more"},
        {"loss", "a probability, 0 to 1"},
        {"duplicate", "a probability, 0 to 1"},
        {"reorder", "a probability, 0 to 1"},
        {"invalid", "a probability, 0 to 1"},
        {"vdif-frames-per-second", "1 to 16777216"},
        {"vdif-edv", "0 to 4"},
        {"seed", "a whole number, 0 or more"},
        {"vlan", "0 to 4094"},
        {"expect-antennas", "1 to 1024"},
        {"expect-threads", "1 to 65536 (threads 0..M-1)"},
        {"expect-grace", "a number of seconds, 0 or more"},
        {"expect-rate-tolerance", "a fraction greater than 0 (0.05: 5%)"},
    };
    for (const auto& r : kRanges) {
        if (r.name == name) {
            return r.valid;
        }
    }
    return {};
}

namespace {

// The text between cxxopts' quotes in one of its messages ("Argument ‘-5’
// failed to parse").
std::string quoted(const std::string& message) {
    for (const auto& [open, close] : {std::pair{"\u2018", "\u2019"}, std::pair{"'", "'"}}) {
        const auto a = message.find(open);
        const auto b = message.rfind(close);
        if (a != std::string::npos && b != std::string::npos && b > a) {
            const auto start = a + std::string_view(open).size();
            return message.substr(start, b - start);
        }
    }
    return {};
}

// "-c (--count)" or "--duration" for an option given as `-c`, `--count` or
// `duration`, with its long name; empty when `options` has no such option.
std::pair<std::string, std::string> option_names(const cxxopts::Options& options,
                                                 std::string_view given) {
    while (!given.empty() && given.front() == '-') {
        given.remove_prefix(1);
    }
    for (const auto& o : options.group_help("").options) {
        const bool is_long = std::find(o.l.begin(), o.l.end(), given) != o.l.end();
        if ((o.s == given || is_long) && !o.l.empty()) {
            return {o.s.empty() ? "--" + o.l.front() : "-" + o.s + " (--" + o.l.front() + ")",
                    o.l.front()};
        }
    }
    return {};
}

// The option `value` was given to on this command line (`-c -5`,
// `--count=-5`, `-c-5`); empty when it cannot be told.
std::string option_of_value(int argc, char** argv, const std::string& value) {
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == value && i > 1 && argv[i - 1][0] == '-') {
            return argv[i - 1];
        }
        if (a.starts_with("--") && a.ends_with("=" + value)) {
            return std::string(a.substr(0, a.size() - value.size() - 1));
        }
        if (a.size() > 2 && a[0] == '-' && a[1] != '-' && a.substr(2) == value) {
            return std::string(a.substr(0, 2));
        }
    }
    return {};
}

// tcpdump's options and ibvcap's own from the wrong subcommand, with where
// to look instead; empty when there is no pointer to give.
std::string pointer_for(std::string_view program, std::string_view option) {
    const bool gen = program.ends_with(" gen");
    const bool capture = program.ends_with(" capture");
    if (option == "w" && !gen) {
        return "-w: ibvcap writes one file per stream, not one file: give -F pcap -o DIR "
               "(--prefix NAME names the files)";
    }
    if ((option == "s" || option == "snaplen") && !gen) {
        return fmt::format(
            "-{}{}: the pcap output's snapshot length is --pcap-snaplen full|headers",
            option.size() > 1 ? "-" : "", option);
    }
    if (option == "B" || option == "buffer-size") {
        return capture ? "-B: the receive ring is --ring-depth N (receive work requests per QP, "
                         "--source verbs; --source pcap uses a 256 MiB kernel buffer)"
                       : fmt::format("-B: ibvcap {} has no capture buffer to size",
                                     gen ? "gen" : "read");
    }
    if (option == "r" && capture) {
        return "-r: to read a capture file, use ibvcap read -r FILE";
    }
    if (option == "i" && program.ends_with(" read")) {
        return "-i: to capture from an interface, use ibvcap capture -i IF";
    }
    return {};
}

bool parse_only = false;

// --parse-only: the groups as the command reads them, then nothing more.
void end_parse_only(const cxxopts::Options& options, const cxxopts::ParseResult& args) {
    const auto& all = options.group_help("").options;
    if (std::any_of(all.begin(), all.end(), [](const auto& o) {
            return std::find(o.l.begin(), o.l.end(), "groups") != o.l.end();
        })) {
        std::vector<SourceFilter> sources;
        std::vector<std::optional<StreamFormat>> formats;
        const bool gen = options.program().ends_with(" gen");
        parse_groups(group_arguments(args), gen ? nullptr : &sources, gen ? nullptr : &formats);
    }
    throw ParseOnly{};
}

}  // namespace

void set_parse_only() {
    parse_only = true;
}

cxxopts::ParseResult parse(cxxopts::Options& options, int argc, char** argv) {
    try {
        auto args = options.parse(argc, argv);
        if (parse_only) {
            end_parse_only(options, args);
        }
        return args;
    } catch (const cxxopts::exceptions::incorrect_argument_type& e) {
        // cxxopts names the value, not the option: name both, and the range.
        const std::string value = quoted(e.what());
        const auto [shown, name] = option_names(options, option_of_value(argc, argv, value));
        if (shown.empty()) {
            throw UsageError(e.what());
        }
        const std::string_view valid = valid_range(name);
        throw UsageError(fmt::format("bad {} '{}'{}{}", shown, value,
                                     valid.empty() ? "" : ": expected ", valid));
    } catch (const cxxopts::exceptions::no_such_option& e) {
        // cxxopts says "Option ‘x’ does not exist": say it as typed, and
        // where the valid ones are.
        const std::string given = quoted(e.what());
        const std::string hint = pointer_for(options.program(), given);
        throw UsageError(hint.empty()
                             ? fmt::format("unknown option {}{} (see '{} --help')",
                                           given.size() == 1 ? "-" : "--", given, options.program())
                             : "unknown option " + hint);
    } catch (const cxxopts::exceptions::missing_argument& e) {
        const std::string given = quoted(e.what());
        const std::string shown = option_names(options, given).first;
        throw UsageError(fmt::format("{} needs a value (see '{} --help')",
                                     shown.empty() ? given : shown, options.program()));
    } catch (const cxxopts::exceptions::invalid_option_syntax& e) {
        throw UsageError(fmt::format("unknown option {} (see '{} --help')", quoted(e.what()),
                                     options.program()));
    } catch (const cxxopts::exceptions::exception& e) {
        throw UsageError(fmt::format("{} (see '{} --help')", e.what(), options.program()));
    }
}

std::size_t parse_memory_size(const std::string& text) {
    std::size_t digits = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
        ++digits;
    }
    std::string unit = text.substr(digits);
    for (auto& ch : unit) {
        ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    }
    if (unit.ends_with("IB")) {
        unit.resize(unit.size() - 2);
    } else if (unit.size() > 1 && unit.ends_with("B")) {
        unit.resize(unit.size() - 1);
    }
    const int shift = unit.empty()  ? 0
                      : unit == "K" ? 10
                      : unit == "M" ? 20
                      : unit == "G" ? 30
                      : unit == "T" ? 40
                                    : -1;
    std::uint64_t value = 0;
    bool ok = digits > 0 && digits <= 15 && shift >= 0;
    if (ok) {
        value = std::stoull(text.substr(0, digits));
        ok = value > 0 && value <= (std::uint64_t{1} << (50 - shift));
    }
    if (!ok) {
        throw UsageError(fmt::format(
            "bad --writer-memory '{}': expected a size such as 1G, 512M or 600MiB (K, M, G, T: "
            "binary units; a plain number is bytes)",
            text));
    }
    return static_cast<std::size_t>(value << shift);
}

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

void check_positive(const cxxopts::ParseResult& args, const char* name, double value,
                    const char* shown, const char* otherwise) {
    if (args.count(name) && !(std::isfinite(value) && value > 0)) {
        throw UsageError(
            fmt::format("bad {} {}: expected {} ({})", shown, value, valid_range(name), otherwise));
    }
}

void add_common_options(cxxopts::Options& options, const char* groups_help) {
    // clang-format off
    options.add_options()
        ("antenna", "antenna source IPv4 (repeatable; default: every source is an antenna)", cxxopts::value<std::vector<std::string>>(), "IP")
        ("o,output-dir", "directory for output files", cxxopts::value<std::string>()->default_value("."), "DIR")
        ("F,format", "output format: raw, codif, codifhdr, vdif, pcap, pcapng (repeatable)", cxxopts::value<std::vector<std::string>>(), "FORMAT")
        ("ordered", "codif and vdif files in sequence order per stream, a fill frame (invalid bit set) in place of each frame that never came (docs/formats.md)")
        ("ordered-window", "with --ordered: frames a stream waits for a missing one (held in host memory, FRAMES x the frame length per stream)", cxxopts::value<std::uint32_t>()->default_value(std::to_string(kDefaultOrderedWindow)), "FRAMES")
        ("prefix", "output file name prefix (no / or ..)", cxxopts::value<std::string>()->default_value("ibvcap"), "NAME")
        ("overwrite", "replace an earlier run's output files of the same names (and its rotated set)")
        ("pcap-snaplen", "pcap and pcapng records: full frames, or headers (up to the end of the CODIF header; original length kept)", cxxopts::value<std::string>()->default_value("full"), "full|headers")
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
        ("expect", "the streams the run must see: a JSON manifest of groups, antennas and CODIF threads (docs/operations.md); one that never arrives, starts late, stops early or runs at the wrong rate makes the verdict loss", cxxopts::value<std::string>(), "FILE")
        ("expect-antennas", "expect N antennas (whatever their addresses) on every group", cxxopts::value<std::uint64_t>(), "N")
        ("expect-threads", "with --expect-antennas: CODIF threads 0..M-1 from each antenna", cxxopts::value<std::uint64_t>(), "M")
        ("expect-grace", "with --expect*: how long after the join a stream may start, and before the end stop", cxxopts::value<double>()->default_value("2"), "SECONDS")
        ("expect-rate-tolerance", "with --expect*: how far a stream's frames per second may be off the expected, as a fraction", cxxopts::value<double>()->default_value("0.05"), "FRACTION")
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
    if (args.count("ordered") == 0) {
        if (args.count("ordered-window")) {
            throw UsageError("--ordered-window applies only with --ordered: add --ordered");
        }
        return;
    }
    const auto& f = c.outputs.formats;
    if (std::find(f.begin(), f.end(), OutputFormat::codif) == f.end() &&
        std::find(f.begin(), f.end(), OutputFormat::vdif) == f.end()) {
        throw UsageError("--ordered orders the codif and vdif files: add -F codif or -F vdif");
    }
    const std::uint32_t window = args["ordered-window"].as<std::uint32_t>();
    if (window < 1 || window > kMaxOrderedWindow) {
        throw UsageError(fmt::format(
            "bad --ordered-window {}: expected {} (a frame later than the sequence tracker's "
            "8192 is too late for the ledger too)",
            window, valid_range("ordered-window")));
    }
    c.outputs.ordered_window = window;
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
    c.outputs.groups = c.demux.groups;
    c.outputs.antennas = c.demux.antennas;
    const std::string snaplen = args["pcap-snaplen"].as<std::string>();
    if (snaplen != "full" && snaplen != "headers") {
        throw UsageError(
            fmt::format("unknown --pcap-snaplen '{}' (valid: full, headers)", snaplen));
    }
    c.outputs.pcap_headers_only = snaplen == "headers";
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
    check_run_files(args, input_file, c);
    read_expect_options(args, c);
    c.quiet = args.count("quiet") > 0;
    return c;
}

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

// How long the end of a run waits for a blocked stdout or stderr to take the
// summary and the error lines: a pipe nobody reads delays the exit by this
// much, never forever (the report file has everything).
constexpr std::chrono::seconds kEndPatience{2};

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

namespace {
std::atomic<bool> g_stop{false};
// The signal that stopped the run (the first one): the report's stopped_by.
// (A lock-free atomic: safe to store from a signal handler.)
std::atomic<int> g_stop_signal{0};
void note_stop_signal(int sig) {
    int none = 0;
    g_stop_signal.compare_exchange_strong(none, sig);
}

std::atomic<bool> g_urgent{false};
// Every stop signal so far: a wait for a FIFO's reader ends at the next one.
std::atomic<unsigned> g_signals{0};

// First interrupt: finish cleanly. Second: stop at once; the writers drop
// what is queued but finish the write in progress, so files hold whole
// records (exiting here could cut a write in the middle of a record). Third:
// end the process on the spot.
extern "C" void on_stop_signal(int sig) {
    note_stop_signal(sig);
    g_signals.fetch_add(1);
    if (!g_stop.exchange(true)) {
        return;
    }
    if (!g_urgent.exchange(true)) {
        return;
    }
    std::_Exit(130);
}

// SIGHUP (the terminal or ssh session went away) and SIGPIPE (stdout or
// stderr lost its reader, e.g. `| head -1`): a clean stop, as the first
// Ctrl-C. They never escalate: every later write to a closed pipe raises
// SIGPIPE again, and that must not abandon the queued records.
extern "C" void on_end_signal(int sig) {
    note_stop_signal(sig);
    g_signals.fetch_add(1);
    g_stop.store(true);
}

// SIGUSR1: print the counts so far and go on (tcpdump's use of it).
std::atomic<bool> g_counts{false};
extern "C" void on_counts_signal(int) {
    g_counts.store(true);
}
}  // namespace

void install_stop_handler() {
    // No SA_RESTART: a read blocked on a pipe or FIFO (`read -r -`) returns
    // EINTR, so the run sees the stop at once.
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    struct sigaction end {};
    end.sa_handler = on_end_signal;
    sigemptyset(&end.sa_mask);
    sigaction(SIGHUP, &end, nullptr);
    sigaction(SIGPIPE, &end, nullptr);
    // Every other signal whose default ends the process (signal(7): Term or
    // Core, less the faults of the program itself, SIGSEGV, SIGBUS, SIGFPE,
    // SIGILL, SIGTRAP, SIGABRT, SIGSYS) ends the run as SIGTERM does, with
    // its files and report: a stray `kill -USR2` or an alarm must not lose a
    // capture.
    for (const int sig :
         {SIGQUIT, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGSTKFLT}) {
        sigaction(sig, &sa, nullptr);
    }
    for (int sig = SIGRTMIN; sig <= SIGRTMAX; ++sig) {
        sigaction(sig, &sa, nullptr);
    }
    struct sigaction counts {};
    counts.sa_handler = on_counts_signal;
    counts.sa_flags = SA_RESTART;  // (it stops nothing: blocked reads go on)
    sigemptyset(&counts.sa_mask);
    sigaction(SIGUSR1, &counts, nullptr);
    // A file past RLIMIT_FSIZE: the write fails with EFBIG and that output
    // fails naming it (the others go on), instead of the process ending.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGXFSZ, &ignore, nullptr);
    // The non-blocking stdout and stderr, made now: stdio's buffered stdout
    // is flushed before the run rather than from a capture thread.
    stdout_console();
    stderr_console();
}

const std::atomic<bool>& stop_flag() {
    return g_stop;
}

const std::atomic<int>& stop_signal() {
    return g_stop_signal;
}

ReaderWait reader_wait(const std::string& command) {
    ReaderWait wait;
    wait.give_up = [seen = g_signals.load()] { return g_signals.load() != seen; };
    wait.notice = [command](const std::string& path) {
        stderr_console().write_within(
            fmt::format("ibvcap {}: {}\n", command, reader_wait_text(path)), kEndPatience);
    };
    return wait;
}

const std::atomic<bool>& urgent_flag() {
    return g_urgent;
}

std::atomic<bool>& counts_flag() {
    return g_counts;
}

}  // namespace ibvcap::cli
