// The positional GROUP:PORT list as the commands read it (with @SOURCE and
// /FORMAT), and the other lists of values (-F formats, IPv4 addresses): what
// an argument names, or one usage line saying why it names nothing.
#include <fmt/format.h>

#include <algorithm>

#include "capture/cli.hpp"

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

}  // namespace ibvcap::cli
