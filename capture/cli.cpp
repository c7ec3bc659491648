#include "capture/cli.hpp"

#include <fmt/format.h>

#include <atomic>
#include <csignal>

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

namespace {
std::atomic<bool> g_stop{false};

extern "C" void on_stop_signal(int) {
    if (g_stop.exchange(true)) {
        std::_Exit(130);
    }
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

}  // namespace ibvcap::cli
