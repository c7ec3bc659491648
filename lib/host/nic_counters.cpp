#include "lib/host/nic_counters.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>
#include <string_view>
#include <utility>

#include "lib/host/devices.hpp"

namespace ibvcap {

namespace fs = std::filesystem;

namespace {

// hw_counters files that are drops for a raw-packet QP.
constexpr std::array<std::string_view, 1> kHwDrops = {"out_of_buffer"};
// hw_counters files that are settings, not counters (mlx5: how long a read is
// cached, in milliseconds).
constexpr std::array<std::string_view, 1> kHwNotCounters = {"lifespan"};

struct NetStat {
    std::string_view file;
    bool is_drop;
};
// rx_dropped is NOT a drop: Linux also bumps it for frames the kernel did not
// want (unknown protocol or VLAN, inactive bond slave, ...), so it grows on a
// healthy link. rx_errors is the sum of the error counters, not a drop of its
// own (it would count the same frames twice).
constexpr std::array<NetStat, 6> kNetStats = {{
    {"rx_dropped", false},
    {"rx_missed_errors", true},
    {"rx_fifo_errors", true},
    {"rx_over_errors", true},
    {"rx_crc_errors", true},
    {"rx_errors", false},
}};

template <std::size_t N>
bool contains(const std::array<std::string_view, N>& list, std::string_view name) {
    return std::find(list.begin(), list.end(), name) != list.end();
}

std::optional<std::uint64_t> read_counter(const fs::path& path) {
    const auto text = read_sysfs_file(path);
    if (!text || text->empty()) {
        return std::nullopt;
    }
    std::uint64_t value = 0;
    const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
    if (ec != std::errc{} || end != text->data() + text->size()) {
        return std::nullopt;
    }
    return value;
}

}  // namespace

NicCounters::NicCounters(fs::path sysfs_root, std::string device, std::uint8_t port,
                         std::string netdev)
    : root_(std::move(sysfs_root)),
      device_(std::move(device)),
      port_(port),
      netdev_(std::move(netdev)) {}

void NicCounters::note_missing(const std::string& name) {
    const auto it = std::lower_bound(missing_.begin(), missing_.end(), name);
    if (it == missing_.end() || *it != name) {
        missing_.insert(it, name);
    }
}

void NicCounters::snapshot_start() {
    started_ = true;
    counters_.clear();
    missing_.clear();

    std::vector<Counter> candidates;
    if (!device_.empty()) {
        const fs::path hw_dir = root_ / "class" / "infiniband" / device_ / "ports" /
                                std::to_string(port_) / "hw_counters";
        std::vector<std::string> files;
        std::error_code ec;
        fs::directory_iterator it(hw_dir, ec);
        for (const fs::directory_iterator end; !ec && it != end; it.increment(ec)) {
            files.push_back(it->path().filename().string());
        }
        std::sort(files.begin(), files.end());
        for (const auto& file : files) {
            if (!contains(kHwNotCounters, file)) {
                candidates.push_back(
                    {"hw_counters/" + file, hw_dir / file, contains(kHwDrops, file), 0, 0, 0});
            }
        }
        // A drop counter the device should have but does not show is missing.
        for (const auto drop : kHwDrops) {
            if (std::find(files.begin(), files.end(), drop) == files.end()) {
                note_missing("hw_counters/" + std::string(drop));
            }
        }
    }
    if (!netdev_.empty()) {
        const fs::path stats_dir = root_ / "class" / "net" / netdev_ / "statistics";
        for (const auto& stat : kNetStats) {
            candidates.push_back(
                {"net/" + std::string(stat.file), stats_dir / stat.file, stat.is_drop, 0, 0, 0});
        }
    }
    for (auto& counter : candidates) {
        if (const auto value = read_counter(counter.path)) {
            counter.start = *value;
            counter.last = *value;
            counters_.push_back(std::move(counter));
        } else if (counter.is_drop) {
            note_missing(counter.name);
        }
    }
}

void NicCounters::snapshot() {
    if (!started_) {
        snapshot_start();
        return;
    }
    for (auto& counter : counters_) {
        const auto value = read_counter(counter.path);
        if (!value) {
            if (counter.is_drop) {
                note_missing(counter.name);
            }
            continue;
        }
        // A decrease from the top half of the 32-bit range is a 32-bit hardware
        // counter wrapping (mlx5 queue counters such as out_of_buffer are 32
        // bits): the growth is what was left to 2^32 plus the new value. Any
        // other decrease is a reset (driver reload): the growth is the new value.
        // Read once a second, a counter would have to wrap twice in a second to
        // be misread.
        constexpr std::uint64_t k32 = std::uint64_t{1} << 32;
        if (*value >= counter.last) {
            counter.delta += *value - counter.last;
        } else if (counter.last < k32 && counter.last >= k32 / 2 && *value < k32) {
            counter.delta += k32 - counter.last + *value;
        } else {
            counter.delta += *value;
        }
        counter.last = *value;
    }
}

std::vector<NicCounters::Delta> NicCounters::deltas() const {
    std::vector<Delta> result;
    result.reserve(counters_.size());
    for (const auto& counter : counters_) {
        result.push_back(
            {counter.name, counter.start, counter.last, counter.delta, counter.is_drop});
    }
    return result;
}

std::vector<std::string> NicCounters::missing() const {
    return missing_;
}

std::vector<SourceCounter> NicCounters::to_source_counters(std::string_view name_prefix) const {
    std::vector<SourceCounter> result;
    result.reserve(counters_.size());
    for (const auto& counter : counters_) {
        result.push_back({std::string(name_prefix) + counter.name, counter.delta, counter.is_drop});
    }
    return result;
}

std::uint64_t nic_drops_so_far(const NicCounters& counters) {
    std::uint64_t n = 0;
    for (const auto& d : counters.deltas()) {
        n += d.is_drop ? d.delta : 0;
    }
    return n;
}

}  // namespace ibvcap
