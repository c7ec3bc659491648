#include "lib/run/stats_line.hpp"

#include <fmt/format.h>

#include <cmath>
#include <ctime>

#include "lib/host/nic_counters.hpp"
#include "lib/run/console.hpp"

namespace ibvcap {

namespace {

// Growth from a to b; 0 when the counter went backwards (a reset, or a source
// that recounted): a rate is never negative.
std::uint64_t growth(std::uint64_t a, std::uint64_t b) {
    return b >= a ? b - a : 0;
}

std::string local_clock(std::chrono::system_clock::time_point wall) {
    const std::time_t t = std::chrono::system_clock::to_time_t(wall);
    std::tm tm{};
    if (localtime_r(&t, &tm) == nullptr) {
        return "--:--:--";
    }
    return fmt::format("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec);
}

}  // namespace

void stamp_now(StatsSnapshot& s) {
    s.time = std::chrono::steady_clock::now();
    s.wall = std::chrono::system_clock::now();
}

std::string group_thousands(std::uint64_t value) {
    const std::string digits = fmt::format("{}", value);
    std::string out;
    out.reserve(digits.size() + digits.size() / 3);
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) {
            out += ',';
        }
        out += digits[i];
    }
    return out;
}

std::string format_stats_line(const StatsSnapshot& prev, const StatsSnapshot& now) {
    const double dt = std::chrono::duration<double>(now.time - prev.time).count();
    const auto per_second = [dt](std::uint64_t n) { return dt > 0 ? double(n) / dt : 0.0; };

    const auto pps =
        static_cast<std::uint64_t>(std::llround(per_second(growth(prev.packets, now.packets))));
    std::string gbps = "-";
    if (prev.bytes && now.bytes) {
        gbps = fmt::format("{:.2f}", per_second(growth(*prev.bytes, *now.bytes)) * 8 / 1e9);
    }
    const std::string slots = now.slots_held ? group_thousands(*now.slots_held) : "-";
    const std::string backlog =
        now.writer_backlog_bytes
            ? fmt::format("{:.1f} MiB", double(*now.writer_backlog_bytes) / double(1 << 20))
            : "-";
    return fmt::format(
        "ibvcap stats: {}  {} pkt/s  {} Gb/s  drops {}  slots held {}  writer backlog {}",
        local_clock(now.wall), group_thousands(pps), gbps, group_thousands(now.drops), slots,
        backlog);
}

StatsTicker::StatsTicker(std::FILE* out) {
    if (out == nullptr) {
        return;
    }
    if (out == stdout) {
        console_ = &stdout_console();
    } else if (out == stderr) {
        console_ = &stderr_console();
    } else {
        std::fflush(out);
        own_ = std::make_unique<Console>(fileno(out));
        console_ = own_.get();
    }
}

StatsTicker::~StatsTicker() = default;

bool StatsTicker::tick(const StatsSnapshot& now) {
    if (console_ == nullptr) {
        return false;
    }
    bool printed = false;
    if (prev_.has_value()) {
        const std::string line = format_stats_line(*prev_, now) + '\n';
        printed = console_->try_write(line);
        dropped_ += printed ? 0 : 1;
    }
    prev_ = now;
    return printed;
}

}  // namespace ibvcap
