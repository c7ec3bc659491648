// cxxopts turned into ibvcap's usage errors: a value that does not parse
// names its option and its valid range, tcpdump's options get a pointer to
// ibvcap's own, and --parse-only (for the documentation's examples) stops
// after the parse. Shared by every command's option table.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "capture/cli.hpp"

namespace ibvcap::cli {

std::string_view valid_range(std::string_view name) {
    // Every numeric option of capture, read and gen, by its long name.
    struct Range {
        std::string_view name;
        std::string_view valid;
    };
    static constexpr Range kRanges[] = {
        {"duration", "a number of seconds greater than 0"},
        {"metrics-interval", "a number of seconds greater than 0"},
        {"window-grace", "a number of seconds, 0 or more"},
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
        {"queues", "1 to 65535"},
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

void check_positive(const cxxopts::ParseResult& args, const char* name, double value,
                    const char* shown, const char* otherwise) {
    if (args.count(name) && !(std::isfinite(value) && value > 0)) {
        throw UsageError(
            fmt::format("bad {} {}: expected {} ({})", shown, value, valid_range(name), otherwise));
    }
}

}  // namespace ibvcap::cli
