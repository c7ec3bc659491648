// ibvcap verify [--report REPORT.json] FILE...: re-check a run's output files
// against their sidecar indexes and the run's report (lib/review/verify.hpp).
#include <fmt/format.h>

#include "capture/cli.hpp"
#include "lib/review/verify.hpp"

namespace ibvcap::cli {

int cmd_verify(int argc, char** argv) {
    cxxopts::Options options("ibvcap verify",
                             "Check that a run's output files hold what their indexes "
                             "(FILE.idx.json) and the run's report claim: size, checksum, "
                             "frames, and each stream's frames, missing, first and last.");
    options.positional_help("[FILE...]");
    options.add_options()("report",
                          "the run's report (--report of the run); without FILE, "
                          "every file it lists",
                          cxxopts::value<std::string>(), "REPORT.json")(
        "files", "files", cxxopts::value<std::vector<std::string>>())("h,help", "this help");
    options.parse_positional({"files"});
    const auto args = parse(options, argc, argv);
    if (args.count("help")) {
        fmt::print("{}", options.help());
        return kExitZeroLoss;
    }
    VerifyRequest request;
    if (args.count("files")) {
        request.files = args["files"].as<std::vector<std::string>>();
    }
    if (args.count("report")) {
        request.report_path = args["report"].as<std::string>();
    }
    if (request.files.empty() && request.report_path.empty()) {
        throw UsageError("give the files to check, or --report REPORT.json (its files)");
    }
    const VerifyOutcome outcome = run_verify(request);
    std::size_t bad = 0;
    for (const auto& f : outcome.files) {
        if (!f.not_verifiable.empty() && f.ok()) {
            fmt::print("SKIP {}\n", f.not_verifiable);
            continue;
        }
        if (f.ok()) {
            fmt::print("OK {}: {} frames, {} bytes{}\n", f.path, f.frames, f.bytes,
                       f.stopped.empty()
                           ? std::string()
                           : fmt::format(" (the run stopped it early: {})", f.stopped));
            continue;
        }
        ++bad;
        fmt::print("FAIL {}: {}\n", f.path, f.differences.front());
        for (std::size_t i = 1; i < f.differences.size(); ++i) {
            fmt::print("  also: {}\n", f.differences[i]);
        }
    }
    for (const auto& d : outcome.differences) {
        fmt::print("FAIL {}\n", d);
    }
    // A FIFO, device or socket output is neither a pass nor a failure.
    const std::size_t streams = outcome.not_verifiable();
    const std::size_t checked = outcome.files.size() - streams;
    fmt::print("verify: {} of {} files hold what was claimed{}{}\n", checked - bad, checked,
               outcome.streams_checked > 0
                   ? fmt::format(", {} streams checked against the report", outcome.streams_checked)
                   : std::string(),
               streams > 0
                   ? fmt::format(", {} not verifiable (written as a stream, not a file)", streams)
                   : std::string());
    return outcome.ok() ? kExitZeroLoss : kExitLoss;
}

}  // namespace ibvcap::cli
