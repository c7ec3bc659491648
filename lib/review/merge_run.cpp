// `ibvcap merge` as a command (lib/review/merge.hpp, run_merge): the request
// checked, the reports read and merged, the merged report written, and the
// summary printed.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "lib/core/usage_error.hpp"
#include "lib/ledger/expected.hpp"
#include "lib/ledger/report.hpp"
#include "lib/review/merge.hpp"
#include "lib/review/merge_parts.hpp"
#include "lib/review/run_page.hpp"
#include "lib/run/common.hpp"
#include "lib/run/run_paths.hpp"

namespace ibvcap {

namespace {

using nlohmann::json;

// At most this many streams seen twice are named on the console (the
// report's merged.duplicate_streams has them all).
constexpr std::size_t kDuplicatesShown = 5;

std::uint64_t count_of(const json& object, const char* key) {
    const auto it = object.find(key);
    return it != object.end() && merge_parts::is_count(*it) ? it->get<std::uint64_t>() : 0;
}

std::string text_of(const json& object, const char* key) {
    const auto it = object.find(key);
    return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The merge's files before anything is read: no output is an input (a host's
// report, the site's manifest) or the other output, --overwrite or not
// (run_path_collision: usage, exit 2); the --report not an existing file
// unless --overwrite (exit 1: the file may be a host's report left off the
// list); each writable (exit 1).
void check_merge_paths(const MergeRequest& request) {
    std::vector<RunPath> paths;
    for (const auto& in : request.inputs) {
        paths.push_back({"", in, PathRole::input, "one of the reports to merge", "report"});
    }
    if (!request.expect_path.empty()) {
        paths.push_back({"--expect", request.expect_path, PathRole::input, "the --expect manifest",
                         "manifest"});
    }
    if (!request.report_path.empty()) {
        paths.push_back(
            {"--report", request.report_path, PathRole::output, "the --report file", "report"});
    }
    if (!request.html_path.empty()) {
        paths.push_back({"--html", request.html_path, PathRole::output, "the --html page", "page"});
    }
    if (const std::string usage = run_path_collision(paths); !usage.empty()) {
        throw UsageError(usage);
    }
    const std::string& path = request.report_path;
    if (!path.empty() && path != "-") {
        struct stat st {};
        if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && !request.overwrite) {
            throw std::runtime_error(fmt::format(
                "--report {} exists (a host's report left off the list?): give another path, or "
                "--overwrite to replace it",
                path));
        }
        check_report_path(path);
    }
    if (!request.html_path.empty()) {
        if (const std::string usage = check_run_page_path(request.html_path); !usage.empty()) {
            throw UsageError(usage);
        }
    }
}

void print_expected(std::FILE* out, const json& e) {
    fmt::print(out, "  expected streams ({}): {} expected, {} seen by a host\n",
               text_of(e, "manifest"), count_of(e, "streams_expected"), count_of(e, "as_expected"));
    for (std::size_t i = 0; i < kExpectProblemCount; ++i) {
        const auto p = static_cast<ExpectProblem>(i);
        const std::uint64_t n = count_of(e["problems"], std::string(to_string(p)).c_str());
        if (n == 0) {
            continue;
        }
        std::string some;
        std::size_t shown = 0;
        for (const json& s : e["streams"]) {
            if (text_of(s, "state") != to_string(p)) {
                continue;
            }
            if (shown++ == 3) {
                some += ", ...";
                break;
            }
            some += fmt::format("{}{} {} thread {}", some.empty() ? "" : ", ", text_of(s, "group"),
                                text_of(s, "antenna"), count_of(s, "thread"));
        }
        fmt::print(out, "    {} {}: {} stream{} ({}): {}\n", is_loss(p) ? "LOSS" : "note",
                   to_string(p), n, n == 1 ? "" : "s", some,
                   is_loss(p) ? std::string("no host saw it: ") + std::string(hint(p))
                              : std::string(hint(p)));
    }
}

}  // namespace

void print_merge_summary(std::FILE* out, const json& merged, bool hosts_table) {
    const json& hosts = merged["hosts"];
    fmt::print(out, "ibvcap merge: {} report{} from {}\n", hosts.size(),
               hosts.size() == 1 ? "" : "s", text_of(merged, "source"));
    if (hosts_table) {
        for (const json& h : hosts) {
            const std::string when =
                h["window"].is_object()
                    ? fmt::format("{} to {} ({})", text_of(h["window"], "from"),
                                  text_of(h["window"], "to"), text_of(h["window"], "basis"))
                    : std::string("time not known");
            // The name, and the file unless the name has it already.
            const std::string name = text_of(h, "name");
            const std::string path = text_of(h, "path");
            const std::string file = std::filesystem::path(path).filename().string();
            const bool named = name == file || name.find("(" + file + ")") != std::string::npos;
            fmt::print(out, "  {}{}: {} run {}, ibvcap {}, {}\n", name,
                       named ? std::string() : " (" + path + ")",
                       h["command"].is_string() ? text_of(h, "command") : "a run",
                       h["run_id"].is_string() ? text_of(h, "run_id") : "(no run_id)",
                       h["version"].is_string() ? text_of(h, "version") : "version not known",
                       when);
            std::vector<std::string> groups;
            for (const json& g : h["groups"]) {
                groups.push_back(g.get<std::string>());
            }
            fmt::print(
                out,
                "    {}: {} packets, {} missing, {} streams ({} seen by another host); "
                "groups {}\n",
                text_of(h, "verdict"), count_of(h, "packets"), count_of(h, "missing"),
                count_of(h, "streams"), count_of(h, "streams_shared"),
                groups.empty() ? std::string("none") : fmt::format("{}", fmt::join(groups, " ")));
        }
    }
    const json& m = merged["merged"];
    std::size_t shown = 0;
    for (const json& d : m["duplicate_streams"]) {
        if (shown++ == kDuplicatesShown) {
            fmt::print(out, "  ... and {} more streams seen twice (merged.duplicate_streams)\n",
                       m["duplicate_streams"].size() - kDuplicatesShown);
            break;
        }
        fmt::print(out, "  seen twice: {} by {}: counted once, from {}\n", text_of(d, "stream"),
                   fmt::join(d["seen_by"].get<std::vector<std::string>>(), ", "),
                   text_of(d, "counted_from"));
    }
    const json& t = merged["totals"];
    fmt::print(out,
               "  total: {} packets, {} stream frames in {} streams, {} non-stream   missing {}, "
               "duplicates {}, out of order {}   malformed {}, NIC drops {}, not written {}\n",
               count_of(t, "packets"), count_of(t, "codif"), merged["streams"].size(),
               count_of(t, "non_codif"), count_of(t, "missing"), count_of(t, "duplicates"),
               count_of(t, "out_of_order"), count_of(t, "malformed"), count_of(t, "nic_drops"),
               count_of(t, "write_drops"));
    if (merged.contains("expected")) {
        print_expected(out, merged["expected"]);
    }
    for (const json& n : m["notes"]) {
        fmt::print(out, "  note: {}\n", n.get<std::string>());
    }
    if (text_of(merged, "verdict") == "zero-loss") {
        fmt::print(out, "verdict: zero-loss (every host zero-loss{})\n",
                   merged.contains("expected") ? ", every expected stream seen" : "");
    } else {
        fmt::print(out, "verdict: loss: {}\n",
                   fmt::join(merged["loss_reasons"].get<std::vector<std::string>>(), "; "));
    }
    std::fflush(out);
}

int run_merge(const MergeRequest& request) {
    if (request.inputs.empty()) {
        throw UsageError(
            "give the hosts' reports: ibvcap merge R1.json R2.json ... --report OBS.json");
    }
    if (request.inputs.size() > kMaxMergeInputs) {
        throw UsageError(
            fmt::format("{} reports: at most {} at once", request.inputs.size(), kMaxMergeInputs));
    }
    for (std::size_t i = 0; i < request.inputs.size(); ++i) {
        for (std::size_t j = 0; j < i; ++j) {
            std::error_code ec;
            if (request.inputs[i] == request.inputs[j] ||
                std::filesystem::equivalent(request.inputs[i], request.inputs[j], ec)) {
                throw UsageError(
                    fmt::format("{} and {} are the same file: give each host's "
                                "report once",
                                request.inputs[j], request.inputs[i]));
            }
        }
    }
    check_merge_paths(request);
    std::optional<ExpectManifest> expect;
    if (!request.expect_path.empty()) {
        try {
            expect = load_expect_manifest(request.expect_path);
        } catch (const ExpectManifestError& e) {
            throw UsageError(e.what());
        }
    }
    std::vector<MergeInput> inputs;
    inputs.reserve(request.inputs.size());
    for (const auto& path : request.inputs) {
        inputs.push_back(load_merge_input(path));
    }
    check_distinct_inputs(inputs);
    const json merged = merge_by_scan(inputs, expect);
    if (merged.contains("scans") && !request.html_path.empty()) {
        throw UsageError(fmt::format(
            "--html draws one scan's merge, and these reports hold {} scans: give the reports of "
            "one scan (their window's --scan)",
            merged["scans"].size()));
    }
    if (!request.report_path.empty()) {
        write_report(request.report_path, merged, request.reader_wait);
    }
    if (!request.html_path.empty()) {
        write_run_page(request.html_path, merged, nullptr, request.reader_wait);
    }
    std::FILE* out = request.report_path == "-" ? stderr : stdout;
    if (merged.contains("scans")) {
        // One summary per scan, then the scans' verdict.
        for (const json& scan : merged["scans"]) {
            fmt::print(out, "== scan {} ({} reports)\n",
                       scan["scan"].is_null() ? std::string("(no window)")
                                              : scan["scan"].get<std::string>(),
                       scan["reports"].size());
            print_merge_summary(out, scan["merged"], !request.quiet);
        }
        fmt::print(out, "ibvcap merge: {} scans, verdict: {}\n", merged["scans"].size(),
                   merged["verdict"].get<std::string>());
    } else {
        print_merge_summary(out, merged, !request.quiet);
    }
    return merge_exit_code(merged);
}

}  // namespace ibvcap
