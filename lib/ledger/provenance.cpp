// The report's provenance (lib/ledger/report.hpp, add_provenance): which
// host and version wrote it, when the run started and the span of its
// frames' times, so that `ibvcap merge` can tell runs apart and see whether
// they overlap (docs/formats.md, "The report"); and the directory it ran in,
// against which `ibvcap verify` resolves the outputs' relative paths.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "lib/ledger/report.hpp"

namespace ibvcap {

void add_provenance(nlohmann::json& j, const Ledger& ledger, const RunInfo& run) {
    j["version"] = IBVCAP_VERSION;
    char host[256] = {};
    if (::gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0') {
        j["host"] = host;
    }
    // The outputs' paths are as the run was given them (-o out: out/...):
    // relative to this directory.
    std::error_code ec;
    if (const auto cwd = std::filesystem::current_path(ec); !ec) {
        j["cwd"] = cwd.string();
    }
    const auto at = [](std::uint64_t ns) {
        return ns == 0 || ns > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
                   ? nlohmann::json()
                   : nlohmann::json(format_utc_time(static_cast<std::int64_t>(ns)));
    };
    if (run.started_ns > 0) {
        j["started_at"] = at(run.started_ns);
    }
    std::uint64_t first = 0;
    std::uint64_t last = 0;
    for (const auto& s : ledger.streams()) {
        if (s.packets() == 0 || s.first_arrival_ns == 0) {
            continue;
        }
        first = first == 0 ? s.first_arrival_ns : std::min(first, s.first_arrival_ns);
        last = std::max({last, s.first_arrival_ns, s.last_arrival_ns});
    }
    j["first_frame_at"] = at(first);
    j["last_frame_at"] = at(last);
}

}  // namespace ibvcap
