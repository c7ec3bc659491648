// Internal to lib/host/doctor*.cpp: the helpers the checks share (one
// translation unit per group of checks keeps each file short).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "lib/host/devices.hpp"
#include "lib/host/doctor.hpp"

namespace ibvcap::doctor::detail {

namespace fs = std::filesystem;

// The buffer the pcap source asks libpcap for: PcapLiveOptions::buffer_bytes
// (lib/sources/pcap_live.hpp; host/ may not include sources/, so the figure
// is repeated here and test_doctor checks that the two agree).
inline constexpr std::uint64_t kPcapBufferBytes = std::uint64_t{256} << 20;
// The engine's slot alignment (lib/sources/verbs/engine_internal.hpp, kSlotAlign).
inline constexpr std::uint64_t kSlotAlign = 64;
// Below this much free space on -o a capture is refused a PASS; below the
// second it is a WARN. At 1 GB/s (8 Gb/s of CODIF) 64 GiB is about a minute.
inline constexpr std::uint64_t kDiskFailBytes = std::uint64_t{1} << 30;
inline constexpr std::uint64_t kDiskWarnBytes = std::uint64_t{64} << 30;

inline Check make(Status status, std::string name, std::string subject, std::string found,
                  std::string fix = {}) {
    return Check{status, std::move(name), std::move(subject), std::move(found),
                 status == Status::pass ? std::string() : std::move(fix)};
}

inline std::string mib(std::uint64_t bytes) {
    return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

inline std::string gib(std::uint64_t bytes) {
    return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1 << 30));
}

inline std::optional<long> parse_long(std::string_view text) {
    long value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) {
        return std::nullopt;
    }
    return value;
}

inline std::optional<long> read_long(const fs::path& path) {
    const auto text = read_sysfs_file(path);
    return text ? parse_long(*text) : std::nullopt;
}

inline bool path_exists(const fs::path& path) {
    std::error_code ec;
    return fs::exists(path, ec);
}

// The names in a directory, sorted; empty when it is missing.
inline std::vector<std::string> entries(const fs::path& dir) {
    std::vector<std::string> names;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        names.push_back(it->path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
}

inline std::string join(const std::vector<std::string>& parts, std::string_view sep = ", ") {
    std::string out;
    for (const auto& p : parts) {
        if (!out.empty()) {
            out += sep;
        }
        out += p;
    }
    return out;
}

inline std::string label(const Target& t) {
    if (!t.netdev.empty()) {
        return t.netdev;
    }
    if (!t.rdma_device.empty()) {
        return fmt::format("{}:{}", t.rdma_device, t.port);
    }
    return t.given;
}

// The sysfs directory of the PCI function behind a target (a link).
inline fs::path device_dir(const Options& o, const Target& t) {
    if (!t.rdma_device.empty()) {
        return o.sysfs_root / "class/infiniband" / t.rdma_device / "device";
    }
    return o.sysfs_root / "class/net" / t.netdev / "device";
}

}  // namespace ibvcap::doctor::detail
