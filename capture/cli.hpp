// Shared pieces of the ibvcap subcommands: usage errors, option helpers.
#pragma once

#include <cxxopts.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/output.hpp"
#include "lib/netaddr.hpp"

namespace ibvcap::cli {

// A mistake on the command line: exit code 2, one line.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::vector<OutputFormat> parse_formats(const std::vector<std::string>& names);
std::vector<Endpoint> parse_groups(const std::vector<std::string>& texts);
std::vector<std::uint32_t> parse_addresses(const std::vector<std::string>& texts,
                                           const char* option);
// Parse with cxxopts, turning its exceptions into UsageError.
cxxopts::ParseResult parse(cxxopts::Options& options, int argc, char** argv);

// SIGINT/SIGTERM: the first sets the stop flag for a clean end; the second
// ends the process at once (files hold whole records up to the last buffer).
void install_stop_handler();
const std::atomic<bool>& stop_flag();

int cmd_read(int argc, char** argv);
int cmd_gen(int argc, char** argv);

}  // namespace ibvcap::cli
