// ibvcap ctl SOCKET REQUEST...: one request to a running capture's control
// socket (capture --control SOCKET; lib/run/control.hpp), its reply printed.
#include <fmt/format.h>

#include "capture/cli.hpp"
#include "lib/run/control.hpp"

namespace ibvcap::cli {

int cmd_ctl(int argc, char** argv) {
    cxxopts::Options options(
        "ibvcap ctl",
        "Ask a running capture (capture --control SOCKET) on its control socket, and print "
        "its reply. REQUEST is one of: status (what is under way and what comes next); next "
        "(the next scan); start NAME [STOP] (a scan from now, into -o DIR/NAME, to STOP, a UTC "
        "time, or until a stop request); stop (the scan under way ends now; its report follows "
        "once its files are closed). Exit code 0 for an 'ok' reply, 1 for an error.");
    options.positional_help("SOCKET REQUEST...");
    options.add_options()("timeout", "seconds to wait for the reply",
                          cxxopts::value<double>()->default_value("30"), "S")(
        "socket", "the capture's control socket", cxxopts::value<std::string>())(
        "request", "the request's words", cxxopts::value<std::vector<std::string>>())("h,help",
                                                                                      "this help");
    options.parse_positional({"socket", "request"});
    const auto args = parse(options, argc, argv);
    if (args.count("help")) {
        fmt::print("{}", options.help());
        return kExitZeroLoss;
    }
    if (!args.count("socket") || !args.count("request")) {
        throw UsageError(
            "give the socket and a request: ibvcap ctl /run/ibvcap/ctl status (or next, start "
            "NAME [STOP], stop)");
    }
    const double timeout = args["timeout"].as<double>();
    if (!(timeout > 0 && timeout <= 3600)) {
        throw UsageError(fmt::format("bad --timeout {}: expected 0 to 3600 seconds", timeout));
    }
    std::string request;
    for (const std::string& word : args["request"].as<std::vector<std::string>>()) {
        if (word.find_first_of(" \n\r") != std::string::npos || word.empty()) {
            throw UsageError(
                fmt::format("bad request word '{}': words hold no space or newline", word));
        }
        request += (request.empty() ? "" : " ") + word;
    }
    const std::string reply =
        control_request(args["socket"].as<std::string>(), request,
                        std::chrono::milliseconds(static_cast<std::int64_t>(timeout * 1000)));
    fmt::print("{}\n", reply);
    return reply.starts_with("ok") ? kExitZeroLoss : kExitError;
}

}  // namespace ibvcap::cli
