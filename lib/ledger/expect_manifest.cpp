// The --expect manifest (lib/ledger/expect.hpp): parsed, checked, every
// problem one line naming the file, the position and the fix.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "lib/ledger/expect.hpp"
#include "lib/ledger/json_input.hpp"
#include "lib/ledger/json_text.hpp"

namespace ibvcap {

// ---------------------------------------------------------------------------
// The manifest. JSON (nlohmann-json, already the report's library) is parsed
// here into the few shapes docs/operations.md shows; everything else is an
// error naming its position as a JSON pointer.

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& name, const std::string& where, const std::string& what) {
    throw ExpectManifestError(
        fmt::format("{}: {}: {}", name, where.empty() ? std::string("/") : where, what));
}

// What a level of the manifest passes down to the levels below it.
struct Inherited {
    std::optional<std::vector<std::uint16_t>> threads;
    std::optional<double> frames_per_second;
    std::optional<std::uint64_t> frames_per_period;
    std::optional<std::vector<json>> antennas;  // top level only
    std::string antennas_at;
};

void check_keys(const std::string& name, const std::string& where, const json& object,
                std::initializer_list<std::string_view> allowed) {
    for (auto it = object.begin(); it != object.end(); ++it) {
        if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end()) {
            std::string list;
            for (const auto a : allowed) {
                list += fmt::format("{}{}", list.empty() ? "" : ", ", a);
            }
            bad(name, where, fmt::format("unknown key \"{}\" (valid here: {})", it.key(), list));
        }
    }
}

std::vector<std::uint16_t> parse_threads(const std::string& name, const std::string& where,
                                         const json& v) {
    const std::string fix =
        "give a count M (threads 0..M-1, 1 to 65536) or a list of thread ids 0-65535";
    std::vector<std::uint16_t> out;
    if (v.is_number_unsigned() || v.is_number_integer()) {
        const auto m = v.is_number_unsigned() ? v.get<std::uint64_t>() : std::uint64_t{0};
        if (!v.is_number_unsigned() || m == 0 || m > 65536) {
            bad(name, where, fmt::format("bad thread count {}: {}", v.dump(), fix));
        }
        for (std::uint64_t t = 0; t < m; ++t) {
            out.push_back(static_cast<std::uint16_t>(t));
        }
        return out;
    }
    if (!v.is_array() || v.empty()) {
        bad(name, where, fmt::format("bad threads {}: {}", v.dump().substr(0, 40), fix));
    }
    std::set<std::uint64_t> seen;
    for (std::size_t i = 0; i < v.size(); ++i) {
        const json& t = v[i];
        const std::string at = fmt::format("{}/{}", where, i);
        if (!t.is_number_unsigned() || t.get<std::uint64_t>() > 65535) {
            bad(name, at, fmt::format("bad thread id {}: {}", t.dump().substr(0, 40), fix));
        }
        if (!seen.insert(t.get<std::uint64_t>()).second) {
            bad(name, at, fmt::format("thread {} is listed twice: list each once", t.dump()));
        }
        out.push_back(static_cast<std::uint16_t>(t.get<std::uint64_t>()));
    }
    std::sort(out.begin(), out.end());
    return out;
}

// The rate keys of one level, over what it inherits.
void parse_rate(const std::string& name, const std::string& where, const json& object,
                Inherited& level) {
    const bool fps = object.contains("frames_per_second");
    const bool fpp = object.contains("frames_per_period");
    if (fps && fpp) {
        bad(name, where,
            "both frames_per_second and frames_per_period: give one (frames_per_period uses "
            "the period of the stream's CODIF header)");
    }
    if (fps) {
        const json& v = object["frames_per_second"];
        if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0 ||
            v.get<double>() > 1e9) {
            bad(name, where + "/frames_per_second",
                fmt::format("bad rate {}: frames per second, a number > 0",
                            v.dump().substr(0, 40)));
        }
        level.frames_per_second = v.get<double>();
        level.frames_per_period.reset();
    }
    if (fpp) {
        const json& v = object["frames_per_period"];
        if (!v.is_number_unsigned() || v.get<std::uint64_t>() == 0 ||
            v.get<std::uint64_t>() > (std::uint64_t{1} << 40)) {
            bad(name, where + "/frames_per_period",
                fmt::format("bad frames_per_period {}: a whole number, 1 or more",
                            v.dump().substr(0, 40)));
        }
        level.frames_per_period = v.get<std::uint64_t>();
        level.frames_per_second.reset();
    }
}

std::uint32_t parse_ip(const std::string& name, const std::string& where, const json& v) {
    if (v.is_string()) {
        if (const auto ip = parse_ipv4(v.get<std::string>())) {
            return *ip;
        }
    }
    bad(name, where,
        fmt::format("bad antenna {}: an antenna is its source IPv4 address, e.g. \"10.0.0.11\"",
                    v.dump().substr(0, 40)));
}

ExpectedAntenna parse_antenna(const std::string& name, const std::string& where, const json& v,
                              const Inherited& up) {
    Inherited level = up;
    ExpectedAntenna a;
    if (v.is_object()) {
        check_keys(name, where, v,
                   {"ip", "threads", "frames_per_second", "frames_per_period", "comment"});
        if (!v.contains("ip")) {
            bad(name, where, "an antenna object needs \"ip\": its source IPv4 address");
        }
        a.ip = parse_ip(name, where + "/ip", v["ip"]);
        if (v.contains("threads")) {
            level.threads = parse_threads(name, where + "/threads", v["threads"]);
        }
        parse_rate(name, where, v, level);
    } else {
        a.ip = parse_ip(name, where, v);
    }
    if (!level.threads) {
        bad(name, where,
            fmt::format("no threads for antenna {}: add \"threads\": M (threads 0..M-1) here, "
                        "in its group or at the top",
                        format_ipv4(a.ip)));
    }
    a.threads = *level.threads;
    a.frames_per_second = level.frames_per_second;
    a.frames_per_period = level.frames_per_period;
    return a;
}

ExpectedGroup parse_group_entry(const std::string& name, const std::string& where, const json& v,
                                const Inherited& up) {
    Inherited level = up;
    ExpectedGroup g;
    const json* antennas = nullptr;
    std::string antennas_at;
    const auto group_of = [&](const json& text, const std::string& at) {
        if (!text.is_string()) {
            bad(name, at, "a group is \"GROUP:PORT\", e.g. \"239.17.0.1:36001\"");
        }
        try {
            return parse_group(text.get<std::string>());
        } catch (const std::invalid_argument& e) {
            bad(name, at,
                fmt::format("bad group \"{}\": {} (write GROUP:PORT, e.g. \"239.17.0.1:36001\")",
                            text.get<std::string>().substr(0, 40), e.what()));
        }
    };
    if (v.is_object()) {
        check_keys(
            name, where, v,
            {"group", "antennas", "threads", "frames_per_second", "frames_per_period", "comment"});
        if (!v.contains("group")) {
            bad(name, where, "a group object needs \"group\": \"GROUP:PORT\"");
        }
        g.group = group_of(v["group"], where + "/group");
        if (v.contains("threads")) {
            level.threads = parse_threads(name, where + "/threads", v["threads"]);
        }
        parse_rate(name, where, v, level);
        if (v.contains("antennas")) {
            antennas = &v["antennas"];
            antennas_at = where + "/antennas";
        }
    } else {
        g.group = group_of(v, where);
    }
    std::vector<json> inherited_list;
    if (antennas == nullptr) {
        if (!up.antennas) {
            bad(name, where,
                "no antennas for this group: add \"antennas\": [\"10.0.0.11\", ...] to it or at "
                "the top");
        }
        antennas_at = up.antennas_at;
    } else if (!antennas->is_array() || antennas->empty()) {
        bad(name, antennas_at, "\"antennas\" is a non-empty list of source IPv4 addresses");
    }
    const std::vector<json>& list =
        antennas != nullptr ? antennas->get_ref<const json::array_t&>() : *up.antennas;
    if (list.size() > kMaxExpectedAntennas) {
        bad(name, antennas_at,
            fmt::format("{} antennas: at most {} (the capture's antenna limit)", list.size(),
                        kMaxExpectedAntennas));
    }
    std::set<std::uint32_t> seen;
    for (std::size_t i = 0; i < list.size(); ++i) {
        const std::string at = fmt::format("{}/{}", antennas_at, i);
        ExpectedAntenna a = parse_antenna(name, at, list[i], level);
        if (!seen.insert(a.ip).second) {
            bad(name, at,
                fmt::format("antenna {} is listed twice for {}: list each once", format_ipv4(a.ip),
                            g.group.to_string()));
        }
        g.antennas.push_back(std::move(a));
    }
    return g;
}

// "line L, column C" of byte `offset` (nlohmann's parse_error::byte counts from 1).
std::string line_column(std::string_view text, std::size_t byte) {
    std::size_t line = 1;
    std::size_t column = 1;
    for (std::size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
        if (text[i] == '\n') {
            ++line;
            column = 1;
        } else {
            ++column;
        }
    }
    return fmt::format("line {}, column {}", line, column);
}

}  // namespace

ExpectManifest parse_expect_manifest(std::string_view text, const std::string& name) {
    if (text.size() > kMaxManifestBytes) {
        throw ExpectManifestError(fmt::format(
            "{}: {} bytes: a manifest is at most {} bytes (list groups, antennas and threads, "
            "not frames)",
            name, text.size(), kMaxManifestBytes));
    }
    json doc;
    try {
        doc = parse_json(text);  // nesting bounded (lib/ledger/json_input.hpp)
    } catch (const JsonTooDeep& e) {
        throw ExpectManifestError(fmt::format(
            "{}: {}: not a manifest (a JSON object with \"groups\", docs/operations.md)", name,
            e.what()));
    } catch (const json::parse_error& e) {
        // "parse error at line 3, column 5: ...": the line and column are given as ours.
        std::string what = json_error_text(e);
        if (const auto colon = what.find(": "); colon != std::string::npos) {
            what = what.substr(colon + 2);
        }
        throw ExpectManifestError(fmt::format("{}: {}: not valid JSON ({}): fix the syntax", name,
                                              line_column(text, e.byte), what));
    }
    if (!doc.is_object()) {
        bad(name, "", "a manifest is a JSON object with \"groups\" (docs/operations.md)");
    }
    check_keys(
        name, "", doc,
        {"groups", "antennas", "threads", "frames_per_second", "frames_per_period", "comment"});
    Inherited top;
    if (doc.contains("threads")) {
        top.threads = parse_threads(name, "/threads", doc["threads"]);
    }
    parse_rate(name, "", doc, top);
    if (doc.contains("antennas")) {
        const json& a = doc["antennas"];
        if (!a.is_array() || a.empty()) {
            bad(name, "/antennas", "\"antennas\" is a non-empty list of source IPv4 addresses");
        }
        top.antennas = a.get<std::vector<json>>();
        top.antennas_at = "/antennas";
    }
    if (!doc.contains("groups") || !doc["groups"].is_array() || doc["groups"].empty()) {
        bad(name, "/groups",
            "\"groups\" is a non-empty list of \"GROUP:PORT\" (or objects with \"group\")");
    }
    const json& groups = doc["groups"];
    if (groups.size() > kMaxExpectedGroups) {
        bad(name, "/groups",
            fmt::format("{} groups: at most {} (the capture's group limit)", groups.size(),
                        kMaxExpectedGroups));
    }
    ExpectManifest m;
    m.name = name;
    for (std::size_t i = 0; i < groups.size(); ++i) {
        const std::string at = fmt::format("/groups/{}", i);
        ExpectedGroup g = parse_group_entry(name, at, groups[i], top);
        for (const auto& other : m.groups) {
            if (other.group == g.group) {
                bad(name, at,
                    fmt::format("group {} is listed twice: list each once (its antennas "
                                "together)",
                                g.group.to_string()));
            }
        }
        m.groups.push_back(std::move(g));
        if (m.stream_count() > kMaxExpectedStreams) {
            bad(name, at,
                fmt::format("more than {} streams expected (the capture's stream limit)",
                            kMaxExpectedStreams));
        }
    }
    return m;
}

ExpectManifest load_expect_manifest(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw ExpectManifestError(fmt::format("{}: cannot read the manifest: {} (check --expect)",
                                              path, std::strerror(errno)));
    }
    std::string text;
    text.resize(kMaxManifestBytes + 1);
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    if (in.bad()) {
        throw ExpectManifestError(
            fmt::format("{}: cannot read the manifest (check --expect)", path));
    }
    text.resize(static_cast<std::size_t>(in.gcount()));
    return parse_expect_manifest(text, path);
}

ExpectManifest expect_shorthand(std::uint64_t antennas, std::uint64_t threads) {
    if (antennas == 0 || antennas > kMaxExpectedAntennas) {
        throw ExpectManifestError(fmt::format("bad --expect-antennas {}: expected 1 to {}",
                                              antennas, kMaxExpectedAntennas));
    }
    if (threads == 0 || threads > 65536) {
        throw ExpectManifestError(
            fmt::format("bad --expect-threads {}: expected 1 to 65536 (threads 0..M-1)", threads));
    }
    if (antennas * threads > kMaxExpectedStreams) {
        throw ExpectManifestError(
            fmt::format("--expect-antennas {} x --expect-threads {}: more than {} streams per "
                        "group (the capture's stream limit)",
                        antennas, threads, kMaxExpectedStreams));
    }
    ExpectManifest m;
    m.shorthand = true;
    m.antennas = static_cast<std::uint32_t>(antennas);
    m.threads = static_cast<std::uint32_t>(threads);
    m.name = fmt::format("--expect-antennas {} --expect-threads {}", antennas, threads);
    return m;
}

std::string manifest_group_not_captured(const ExpectManifest& manifest,
                                        std::span<const Endpoint> run_groups) {
    if (run_groups.empty()) {
        return {};
    }
    for (const auto& g : manifest.groups) {
        if (std::find(run_groups.begin(), run_groups.end(), g.group) == run_groups.end()) {
            return fmt::format(
                "{}: expects group {}, which this run does not capture: add {} to the run's "
                "GROUP:PORT list, or remove it from the manifest",
                manifest.name, g.group.to_string(), g.group.to_string());
        }
    }
    return {};
}

}  // namespace ibvcap
