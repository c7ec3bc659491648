#include "lib/host/nic_counters.hpp"

#include <fmt/format.h>

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
    LossCause cause;
};
// rx_dropped is NOT a drop: Linux also bumps it for frames the kernel did not
// want (unknown protocol or VLAN, inactive bond slave, ...), so it grows on a
// healthy link. rx_errors is the sum of the error counters, not a drop of its
// own (it would count the same frames twice).
// rx_missed_errors, rx_fifo_errors and rx_over_errors are the netdev's receive
// rings and FIFO (the kernel's path); rx_crc_errors is the port's FCS count
// (mlx5e_get_stats: a_frame_check_sequence_errors, en_main.c).
constexpr std::array<NetStat, 6> kNetStats = {{
    {"rx_dropped", false, LossCause::none},
    {"rx_missed_errors", true, LossCause::kernel},
    {"rx_fifo_errors", true, LossCause::kernel},
    {"rx_over_errors", true, LossCause::kernel},
    {"rx_crc_errors", true, LossCause::port_discards},
    {"rx_errors", false, LossCause::none},
}};

// The ethtool statistics kept (mlx5's names, drivers/net/ethernet/mellanox/
// mlx5/core/en_stats.c; what each means: nic_counters.hpp and
// Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst).
struct EthtoolStat {
    std::string_view name;
    EthtoolStatClass what;
};
constexpr std::array<EthtoolStat, 18> kEthtoolStats = {{
    // pport_2863_stats_desc: if_in_discards, the port buffer overflowed.
    {"rx_discards_phy", {true, LossCause::port_discards}},
    // pport_802_3_stats_desc: FCS, length and coding errors at the port.
    {"rx_crc_errors_phy", {false, LossCause::port_discards}},
    {"rx_in_range_len_errors_phy", {false, LossCause::port_discards}},
    {"rx_out_of_range_len_phy", {false, LossCause::port_discards}},
    {"rx_oversize_pkts_phy", {false, LossCause::port_discards}},
    {"rx_symbol_err_phy", {false, LossCause::port_discards}},
    // pport_2819_stats_desc.
    {"rx_undersize_pkts_phy", {false, LossCause::port_discards}},
    {"rx_fragments_phy", {false, LossCause::port_discards}},
    {"rx_jabbers_phy", {false, LossCause::port_discards}},
    // pport_phy_statistical_stats_desc: symbol errors FEC did not correct.
    {"rx_pcs_symbol_err_phy", {false, LossCause::port_discards}},
    // pcie_perf_stats_desc64: dropped for a full PCIe buffer.
    {"outbound_pci_buffer_overflow", {false, LossCause::port_discards}},
    // The phy group's link_down_events.
    {"link_down_events_phy", {false, LossCause::port_down}},
    // Diagnostic.
    {"rx_packets_phy", {false, LossCause::none}},
    {"rx_buffer_passed_thres_phy", {false, LossCause::none}},  // port buffer > 85% full
    {"tx_pause_ctrl_phy", {false, LossCause::none}},           // the NIC asked for a pause
    {"rx_steer_missed_packets", {false, LossCause::none}},     // matched no flow rule
    {"dev_internal_queue_oob", {false, LossCause::none}},
    {"rx_if_down_packets", {false, LossCause::none}},
}};

// "rx_prio<p>_<suffix>", p one or more digits.
bool is_prio_stat(std::string_view name, std::string_view suffix) {
    constexpr std::string_view kPrefix = "rx_prio";
    if (!name.starts_with(kPrefix) || !name.ends_with(suffix) ||
        name.size() <= kPrefix.size() + suffix.size()) {
        return false;
    }
    const std::string_view digits =
        name.substr(kPrefix.size(), name.size() - kPrefix.size() - suffix.size());
    return std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

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

std::optional<EthtoolStatClass> classify_ethtool_stat(std::string_view name, bool rdma_path) {
    for (const auto& stat : kEthtoolStats) {
        if (stat.name == name) {
            return stat.what;
        }
    }
    // pport_per_prio_traffic_stats_desc (rx_prio%d_discards) and the per-TC
    // groups (rx_prio%d_buf_discard, rx_prio%d_cong_discard): witnesses, not
    // drops (they may be inside rx_discards_phy).
    if (is_prio_stat(name, "_discards") || is_prio_stat(name, "_buf_discard") ||
        is_prio_stat(name, "_cong_discard")) {
        return EthtoolStatClass{false, LossCause::port_discards};
    }
    // q_stats_desc: the netdev's own receive queues. Never a drop: with an
    // RDMA device the raw-packet QPs do not use them; without one (the kernel
    // capture path) net/rx_missed_errors is the same count and is the drop.
    if (name == "rx_out_of_buffer") {
        return EthtoolStatClass{false, rdma_path ? LossCause::none : LossCause::kernel};
    }
    return std::nullopt;
}

NicCounters::NicCounters(fs::path sysfs_root, std::string device, std::uint8_t port,
                         std::string netdev, std::shared_ptr<EthtoolStatsReader> ethtool)
    : root_(std::move(sysfs_root)),
      device_(std::move(device)),
      port_(port),
      netdev_(std::move(netdev)),
      ethtool_(std::move(ethtool)) {
    if (!ethtool_ && !netdev_.empty()) {
        ethtool_ = std::make_shared<IoctlEthtoolStats>();
    }
}

void NicCounters::add_note(std::string note) {
    if (std::find(notes_.begin(), notes_.end(), note) == notes_.end()) {
        notes_.push_back(std::move(note));
    }
}

void NicCounters::start_ethtool(std::vector<Counter>& out) {
    ethtool_count_ = 0;
    std::vector<std::string> names;
    if (const int err = ethtool_->names(netdev_, names)) {
        add_note(fmt::format("ethtool statistics of {}: not available ({})", netdev_,
                             ethtool_error_text(err)));
        return;
    }
    std::vector<Counter> found;
    bool port_drop = false;
    for (std::size_t i = 0; i < names.size(); ++i) {
        if (const auto what = classify_ethtool_stat(names[i], !device_.empty())) {
            Counter c;
            c.name = "ethtool/" + names[i];
            c.is_drop = what->is_drop;
            c.cause = what->cause;
            c.ethtool = true;
            c.index = i;
            found.push_back(std::move(c));
            port_drop = port_drop || (what->is_drop && what->cause == LossCause::port_discards);
        }
    }
    if (!port_drop) {
        add_note(fmt::format(
            "ethtool statistics of {}: no port discard counter (rx_discards_phy) among its {}; "
            "drops at the port cannot be told apart",
            netdev_, names.size()));
    }
    if (const int err = ethtool_->values(netdev_, names.size(), ethtool_values_)) {
        add_note(fmt::format("ethtool statistics of {}: not available ({})", netdev_,
                             ethtool_error_text(err)));
        for (const auto& c : found) {
            if (c.is_drop) {
                note_missing(c.name);
            }
        }
        return;
    }
    ethtool_count_ = names.size();
    for (auto& c : found) {
        c.start = ethtool_values_[c.index];
        c.last = c.start;
        out.push_back(std::move(c));
    }
}

bool NicCounters::remap_ethtool() {
    // The driver's set changed (channels, PFC, a reload): find each kept
    // name again; one that is gone can no longer be read.
    std::vector<std::string> names;
    if (const int err = ethtool_->names(netdev_, names)) {
        ethtool_failed(err);
        return false;
    }
    ethtool_count_ = names.size();
    for (auto& c : counters_) {
        if (!c.ethtool) {
            continue;
        }
        const std::string_view stat =
            std::string_view(c.name).substr(std::string_view("ethtool/").size());
        const auto it = std::find(names.begin(), names.end(), stat);
        c.index = it == names.end() ? kNoIndex : static_cast<std::size_t>(it - names.begin());
    }
    return true;
}

void NicCounters::ethtool_failed(int error) {
    add_note(fmt::format("ethtool statistics of {}: a read failed ({})", netdev_,
                         ethtool_error_text(error)));
    for (const auto& c : counters_) {
        if (c.ethtool && c.is_drop) {
            note_missing(c.name);
        }
    }
}

void NicCounters::read_ethtool() {
    int err = ethtool_->values(netdev_, ethtool_count_, ethtool_values_);
    if (err == EthtoolStatsReader::kSetChanged) {
        if (!remap_ethtool()) {
            return;
        }
        err = ethtool_->values(netdev_, ethtool_count_, ethtool_values_);
    }
    if (err != 0) {
        ethtool_failed(err);
        return;
    }
    for (auto& c : counters_) {
        if (!c.ethtool) {
            continue;
        }
        if (c.index == kNoIndex || c.index >= ethtool_values_.size()) {
            if (c.is_drop) {
                note_missing(c.name);
            }
            continue;
        }
        // 64-bit values: a decrease is a reset (driver reload), never a wrap.
        const std::uint64_t value = ethtool_values_[c.index];
        c.delta += value >= c.last ? value - c.last : value;
        c.last = value;
    }
}

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
    notes_.clear();
    ethtool_count_ = 0;

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
                Counter c;
                c.name = "hw_counters/" + file;
                c.path = hw_dir / file;
                c.is_drop = contains(kHwDrops, file);
                // A frame matched the rule while no receive WR was posted.
                c.cause = c.is_drop ? LossCause::receive_queue : LossCause::none;
                candidates.push_back(std::move(c));
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
            Counter c;
            c.name = "net/" + std::string(stat.file);
            c.path = stats_dir / stat.file;
            c.is_drop = stat.is_drop;
            c.cause = stat.cause;
            candidates.push_back(std::move(c));
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
    if (!netdev_.empty() && ethtool_) {
        start_ethtool(counters_);
    }
}

void NicCounters::snapshot() {
    if (!started_) {
        snapshot_start();
        return;
    }
    for (auto& counter : counters_) {
        if (counter.ethtool) {
            continue;
        }
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
    if (ethtool_count_ > 0) {
        read_ethtool();
    }
}

std::vector<NicCounters::Delta> NicCounters::deltas() const {
    std::vector<Delta> result;
    result.reserve(counters_.size());
    for (const auto& counter : counters_) {
        result.push_back({counter.name, counter.start, counter.last, counter.delta, counter.is_drop,
                          counter.cause});
    }
    return result;
}

std::vector<std::string> NicCounters::missing() const {
    return missing_;
}

std::vector<std::string> NicCounters::notes() const {
    return notes_;
}

std::vector<SourceCounter> NicCounters::to_source_counters(std::string_view name_prefix) const {
    std::vector<SourceCounter> result;
    result.reserve(counters_.size());
    for (const auto& counter : counters_) {
        result.push_back({std::string(name_prefix) + counter.name, counter.delta, counter.is_drop,
                          counter.cause});
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
