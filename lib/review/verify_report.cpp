// The report as verify reads it, and where the files it names are now
// (lib/review/verify_report.hpp).
#include "lib/review/verify_report.hpp"

#include <fmt/format.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>

#include "lib/ledger/json_input.hpp"
#include "lib/ledger/json_text.hpp"

namespace ibvcap::verify_parts {

namespace fs = std::filesystem;

namespace {

FramePosition position_of(const nlohmann::json& j) {
    return {j.at("seconds").get<std::uint32_t>(), j.at("frame").get<std::uint32_t>()};
}

// A report that ended at the size limit, or at a read error: said so
// rather than as JSON that stops short.
void cut_short(const BoundedInput& in, const std::string& path) {
    if (in.over_limit()) {
        throw std::runtime_error(
            fmt::format("report {} is more than the {} bytes a run's report can be (give the "
                        "--report JSON of the run)",
                        path, kMaxReportBytes));
    }
    if (in.read_error() != 0) {
        throw std::runtime_error(
            fmt::format("cannot read report {}: {}", path, std::strerror(in.read_error())));
    }
}

}  // namespace

Report load_report(const std::string& path) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
        throw std::runtime_error(fmt::format(
            "cannot read report {}: it is a directory (give the --report JSON file of the run)",
            path));
    }
    // Counted as it is read (a pipe or FIFO too) and bounded in depth
    // (lib/ledger/json_input.hpp).
    BoundedInput in(path, kMaxReportBytes);
    if (in.error() != 0) {
        throw std::runtime_error(
            fmt::format("cannot read report {}: {}", path, std::strerror(in.error())));
    }
    Report r;
    r.dir = fs::path(path).parent_path();
    const char* where = "run_id";  // the part being read, for the error
    try {
        nlohmann::json j;
        try {
            j = parse_json(in.stream());
        } catch (const JsonTooDeep& e) {
            throw std::runtime_error(
                fmt::format("{}: {}: not an ibvcap report (give the --report JSON of the run)",
                            path, e.what()));
        } catch (const nlohmann::json::parse_error&) {
            cut_short(in, path);
            throw;
        }
        cut_short(in, path);
        if (!j.is_object()) {
            throw std::runtime_error(fmt::format(
                "{} is not an ibvcap report (give the --report JSON of the run): it is not a "
                "JSON object",
                path));
        }
        r.run_id = j.value("run_id", std::string());
        where = "cwd";
        r.cwd = j.value("cwd", std::string());
        where = "outputs";
        for (const auto& o : j.at("outputs")) {
            ReportOutput out;
            out.path = o.at("path").get<std::string>();
            out.format = o.at("format").get<std::string>();
            out.group = o.value("group", std::string());
            out.antenna = o.value("antenna", std::string());
            out.dropped = o.value("dropped", std::uint64_t{0});
            out.overwritten = o.value("overwritten", std::uint64_t{0});
            out.station = o.value("station", std::int64_t{-1});
            out.thread = o.value("thread", std::int64_t{-1});
            if (o.contains("ordered") && o["ordered"].is_object()) {
                const auto& q = o["ordered"];
                out.ordered.window = q.at("window").get<std::uint32_t>();
                out.ordered.fills = q.value("fills", std::uint64_t{0});
                out.ordered.duplicates = q.value("duplicates", std::uint64_t{0});
                out.ordered.too_late = q.value("too_late", std::uint64_t{0});
                out.ordered.unheld = q.value("unheld", std::uint64_t{0});
                out.ordered.restarts = q.value("restarts", std::uint64_t{0});
            }
            for (const auto& f : o.at("on_disk")) {
                out.on_disk.push_back({f.at("path").get<std::string>(),
                                       f.at("packets").get<std::uint64_t>(),
                                       f.at("bytes").get<std::uint64_t>()});
            }
            r.outputs.push_back(std::move(out));
        }
        where = "streams";
        for (const auto& s : j.at("streams")) {
            ReportStream st;
            st.group = s.at("group").get<std::string>();
            st.antenna = s.at("antenna").get<std::string>();
            st.thread = s.at("thread").get<std::uint64_t>();
            st.station = s.value("station", std::uint64_t{0});
            st.format = s.value("format", std::string("codif"));
            st.frames_per_period = s.value("frames_per_period", std::uint64_t{0});
            st.packets = s.at("packets").get<std::uint64_t>();
            st.payload_absent = s.value("payload_absent", std::uint64_t{0});
            st.missing = s.at("missing").get<std::uint64_t>();
            st.first = position_of(s.at("first"));
            st.last = position_of(s.at("last"));
            r.streams.push_back(std::move(st));
        }
    } catch (const nlohmann::json::parse_error& e) {
        throw std::runtime_error(fmt::format(
            "{} is not an ibvcap report (give the --report JSON of the run): not valid JSON: {}",
            path, json_error_text(e)));
    } catch (const nlohmann::json::exception&) {
        // (The library's own words, "cannot use at() with number", say
        // nothing to an operator: which part is wrong does.)
        throw std::runtime_error(fmt::format(
            "{} is not an ibvcap report (give the --report JSON of the run): its \"{}\" is "
            "missing or not as a report writes it",
            path, where));
    }
    return r;
}

namespace {

// Where the run wrote a file the report names: a relative path is relative
// to the run's working directory (the report's cwd), wherever verify runs.
// Named as the report names it when that is the same file from here.
std::string run_path(const Report& report, const std::string& named) {
    const fs::path p(named);
    if (p.is_absolute() || report.cwd.empty()) {
        return named;
    }
    const fs::path there = report.cwd / p;
    std::error_code ec;
    return fs::equivalent(p, there, ec) ? named : there.string();
}

}  // namespace

bool shipped(const Report& report) {
    std::error_code ec;
    for (const ReportOutput& out : report.outputs) {
        for (const ReportFile& f : out.on_disk) {
            const fs::path beside = report.dir / fs::path(f.path).filename();
            if (fs::exists(beside, ec) && !fs::equivalent(beside, run_path(report, f.path), ec)) {
                return true;
            }
        }
    }
    return false;
}

std::string locate(const Report& report, bool beside, const std::string& named) {
    if (!beside) {
        return run_path(report, named);
    }
    return (report.dir / fs::path(named).filename()).string();
}

bool same_file(const std::string& a, const std::string& b) {
    std::error_code ec;
    return fs::equivalent(a, b, ec);
}

}  // namespace ibvcap::verify_parts
