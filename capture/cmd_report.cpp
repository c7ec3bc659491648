// ibvcap report RUN.json --html PAGE.html [--verify]: the run page of a
// report written earlier (lib/review/run_page.hpp), optionally with verify's
// word on the run's files.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "capture/cli.hpp"
#include "lib/review/merge.hpp"
#include "lib/review/run_page.hpp"
#include "lib/review/verify.hpp"
#include "lib/run/run_paths.hpp"

namespace ibvcap::cli {

int cmd_report(int argc, char** argv) {
    cxxopts::Options options("ibvcap report",
                             "Draw a run's report (capture, read or merge --report) as one "
                             "self-contained HTML page: the verdict, loss by cause, each "
                             "stream's presence over time, rates, witnesses and outputs.");
    options.positional_help("REPORT.json");
    options.add_options()("html", "write the run page to PAGE", cxxopts::value<std::string>(),
                          "PAGE")("verify",
                                  "check the files the report lists first, as ibvcap verify "
                                  "does, and show the result on the page")(
        "report", "the report", cxxopts::value<std::string>())("h,help", "this help");
    options.parse_positional({"report"});
    const auto args = parse(options, argc, argv);
    if (args.count("help")) {
        fmt::print("{}", options.help());
        return kExitZeroLoss;
    }
    if (!args.count("report")) {
        throw UsageError("give the report to draw: ibvcap report RUN.json --html RUN.html");
    }
    if (!args.count("html")) {
        throw UsageError("--html PAGE is required (where the page is written)");
    }
    const std::string report_path = args["report"].as<std::string>();
    const std::string page = args["html"].as<std::string>();
    // The report is this command's input: the page may not be it.
    if (const std::string problem =
            run_path_collision({{"", report_path, PathRole::input, "the report to draw", "report"},
                                {"--html", page, PathRole::output, "the --html page", "page"}});
        !problem.empty()) {
        throw UsageError(problem);
    }
    if (const std::string problem = check_run_page_path(page); !problem.empty()) {
        throw UsageError(problem);
    }
    const nlohmann::json report =
        read_report_file(report_path, "give a report written with --report");
    if (!report.is_object() || !report.contains("verdict") || !report.contains("totals")) {
        throw std::runtime_error(fmt::format(
            "{} is not an ibvcap report (no verdict or totals); give a report written with "
            "--report",
            report_path));
    }
    VerifyOutcome verified;
    const bool verify = args.count("verify") > 0;
    if (verify) {
        verified = run_verify(VerifyRequest{{}, report_path});
    }
    write_run_page(page, report, verify ? &verified : nullptr, reader_wait("report"));
    fmt::print("ibvcap report: the run page of {} is {}{}\n", report_path, page,
               verify ? fmt::format(" (verify: {})", verified.ok() ? "every file holds what was "
                                                                     "claimed"
                                                                   : "differences, shown on it")
                      : std::string());
    // As `ibvcap verify` exits: 3 when a file does not hold what was claimed.
    return verify && !verified.ok() ? kExitLoss : kExitZeroLoss;
}

}  // namespace ibvcap::cli
