// ibvcap merge R1.json R2.json ... [--expect SITE.json] [--report OBS.json]:
// one verdict for an observation captured by several hosts (lib/review/merge.hpp).
#include <fmt/format.h>

#include "capture/cli.hpp"
#include "lib/review/merge.hpp"

namespace ibvcap::cli {

int cmd_merge(int argc, char** argv) {
    cxxopts::Options options(
        "ibvcap merge",
        "One verdict for an observation captured by several hosts: their run reports "
        "(capture --report, read --report) merged into one, with the same keys, a table of the "
        "hosts and what the merge found (streams seen by two hosts, counted once; runs that do "
        "not overlap in time; different versions). Reports of windows (--scan, --start-at) are "
        "grouped by scan: one verdict per scan, and the schedule's.");
    options.positional_help("REPORT.json...");
    // clang-format off
    options.add_options()
        ("expect", "the site's manifest (the format capture --expect takes): an expected stream "
                   "that no host saw is loss", cxxopts::value<std::string>(), "SITE.json")
        ("report", "write the merged report here (- for stdout; the summary then goes to stderr)",
         cxxopts::value<std::string>(), "FILE")
        ("overwrite", "replace an existing --report file")
        ("html", "write the run page of the merged report to PAGE (ibvcap report --html): the "
                 "verdict, each host, each stream's presence over the observation",
         cxxopts::value<std::string>(), "PAGE")
        ("q,quiet", "no per-host lines: the totals, the notes and the verdict")
        ("h,help", "this help")
        ("reports", "reports", cxxopts::value<std::vector<std::string>>());
    // clang-format on
    options.parse_positional({"reports"});
    const auto args = parse(options, argc, argv);
    if (args.count("help")) {
        fmt::print("{}", options.help());
        return kExitZeroLoss;
    }
    MergeRequest request;
    if (args.count("reports")) {
        request.inputs = args["reports"].as<std::vector<std::string>>();
    }
    request.expect_path = option_or<std::string>(args, "expect", "");
    request.report_path = option_or<std::string>(args, "report", "");
    request.html_path = option_or<std::string>(args, "html", "");
    if (args.count("html") && request.html_path.empty()) {
        throw UsageError("--html needs a file name, e.g. obs.html");
    }
    request.overwrite = args.count("overwrite") != 0;
    request.quiet = args.count("quiet") != 0;
    if (args.count("expect") && request.expect_path.empty()) {
        throw UsageError("--expect needs the manifest's path");
    }
    if (args.count("report") && request.report_path.empty()) {
        throw UsageError("--report needs a path (- for stdout)");
    }
    if (request.overwrite && request.report_path.empty()) {
        throw UsageError("--overwrite replaces the --report file: give --report FILE");
    }
    request.reader_wait = reader_wait("merge");
    return run_merge(request);
}

}  // namespace ibvcap::cli
