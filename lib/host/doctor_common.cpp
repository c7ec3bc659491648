// What the groups of doctor's checks share (lib/host/doctor_common.hpp).
#include "lib/host/doctor_common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <system_error>

namespace ibvcap::doctor::detail {

Check make(Status status, std::string name, std::string subject, std::string found,
           std::string fix) {
    return Check{status, std::move(name), std::move(subject), std::move(found),
                 status == Status::pass ? std::string() : std::move(fix)};
}

std::string mib(std::uint64_t bytes) {
    return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

std::string gib(std::uint64_t bytes) {
    return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1 << 30));
}

std::optional<long> parse_long(std::string_view text) {
    long value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) {
        return std::nullopt;
    }
    return value;
}

std::optional<long> read_long(const fs::path& path) {
    const auto text = read_sysfs_file(path);
    return text ? parse_long(*text) : std::nullopt;
}

bool path_exists(const fs::path& path) {
    std::error_code ec;
    return fs::exists(path, ec);
}

std::vector<std::string> entries(const fs::path& dir) {
    std::vector<std::string> names;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        names.push_back(it->path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
    std::string out;
    for (const auto& p : parts) {
        if (!out.empty()) {
            out += sep;
        }
        out += p;
    }
    return out;
}

std::string label(const Target& t) {
    if (!t.netdev.empty()) {
        return t.netdev;
    }
    if (!t.rdma_device.empty()) {
        return fmt::format("{}:{}", t.rdma_device, t.port);
    }
    return t.given;
}

fs::path device_dir(const Options& o, const Target& t) {
    if (!t.rdma_device.empty()) {
        return o.sysfs_root / "class/infiniband" / t.rdma_device / "device";
    }
    return o.sysfs_root / "class/net" / t.netdev / "device";
}

}  // namespace ibvcap::doctor::detail
