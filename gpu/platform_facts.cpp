// The host's facts about GPUDirect (gpu/platform_facts.hpp).
#include "gpu/platform_facts.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <string_view>
#include <system_error>
#include <vector>

namespace ibvcap::gpu {

namespace fs = std::filesystem;

namespace {

std::optional<std::uint64_t> parse_hex64(std::string_view text) {
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
        text.remove_prefix(2);
    }
    if (text.empty()) {
        return std::nullopt;
    }
    std::uint64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
    if (ec != std::errc() || end != text.data() + text.size()) {
        return std::nullopt;
    }
    return value;
}

std::vector<std::string_view> split_whitespace(std::string_view text) {
    std::vector<std::string_view> words;
    std::size_t i = 0;
    while (i < text.size()) {
        while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])) != 0) {
            ++i;
        }
        const std::size_t start = i;
        while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])) == 0) {
            ++i;
        }
        if (i > start) {
            words.push_back(text.substr(start, i - start));
        }
    }
    return words;
}

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

std::uint64_t mib_rounded_up(std::uint64_t bytes) {
    return bytes / kMiB + (bytes % kMiB != 0 ? 1 : 0);
}

}  // namespace

std::string size_text(std::uint64_t bytes) {
    if (bytes >= kGiB && bytes % kGiB == 0) {
        return fmt::format("{} GiB", bytes / kGiB);
    }
    return fmt::format("{} MiB", mib_rounded_up(bytes));
}

bool needs_rdma_write_flush(int writes_ordering) {
    return writes_ordering < kRdmaWritesOrderingOwner;
}

bool can_flush_rdma_writes(int flush_options) {
    return (flush_options & kRdmaFlushOptionHost) != 0;
}

bool is_c2c_platform(bool aarch64_host, int host_native_atomic_supported) {
    return aarch64_host && host_native_atomic_supported != 0;
}

RdmaWriteOrdering plan_rdma_write_flush(int writes_ordering, int flush_options, bool c2c) {
    if (c2c) {
        return {RdmaFlush::none,
                "the GPU reaches the CPU over NVLink-C2C, where the NIC's PCIe writes and its "
                "completions take unordered paths that CUDA cannot flush"};
    }
    if (!needs_rdma_write_flush(writes_ordering)) {
        return {RdmaFlush::none, std::nullopt};
    }
    if (can_flush_rdma_writes(flush_options)) {
        return {RdmaFlush::host, std::nullopt};
    }
    if ((flush_options & kRdmaFlushOptionMemOps) != 0) {
        return {RdmaFlush::memops, std::nullopt};
    }
    return {RdmaFlush::none,
            fmt::format("the GPU neither orders nor can flush GPUDirect RDMA writes (write "
                        "ordering {}, flush options {:#x})",
                        writes_ordering, flush_options)};
}

std::string describe_rdma_write_ordering(int writes_ordering, int flush_options, bool c2c) {
    const RdmaWriteOrdering plan = plan_rdma_write_flush(writes_ordering, flush_options, c2c);
    if (plan.refusal) {
        return fmt::format(
            "GPUDirect RDMA write ordering: {}: payload stays in host memory (staging)",
            *plan.refusal);
    }
    switch (plan.flush) {
        case RdmaFlush::host:
            return "GPUDirect RDMA write ordering: none (payload flushed with "
                   "cudaDeviceFlushGPUDirectRDMAWrites once per batch before it is read)";
        case RdmaFlush::memops:
            return "GPUDirect RDMA write ordering: none (payload flushed with "
                   "CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES on the reading stream once per batch)";
        case RdmaFlush::none:
            break;
    }
    return fmt::format("GPUDirect RDMA write ordering: {} (no flush needed)",
                       writes_ordering >= kRdmaWritesOrderingAllDevices ? "all devices" : "owner");
}

std::optional<std::uint64_t> bar_size(const fs::path& sysfs_root, const std::string& pci_address,
                                      int bar) {
    if (bar < 0 || bar > 5) {
        return std::nullopt;
    }
    const auto text = read_sysfs_file(sysfs_root / "bus/pci/devices" / pci_address / "resource");
    if (!text) {
        return std::nullopt;
    }
    std::string_view rest = *text;
    for (int line = 0; line < bar; ++line) {
        const auto newline = rest.find('\n');
        if (newline == std::string_view::npos) {
            return std::nullopt;
        }
        rest.remove_prefix(newline + 1);
    }
    const auto words = split_whitespace(rest.substr(0, rest.find('\n')));
    if (words.size() < 2) {
        return std::nullopt;
    }
    const auto start = parse_hex64(words[0]);
    const auto end = parse_hex64(words[1]);
    if (!start || !end || *start == 0 || *end < *start ||
        *end - *start == std::numeric_limits<std::uint64_t>::max()) {
        return std::nullopt;
    }
    return *end - *start + 1;
}

IommuMode iommu_mode(const fs::path& sysfs_root, const std::string& pci_address) {
    const fs::path group = sysfs_root / "bus/pci/devices" / pci_address / "iommu_group";
    if (const auto type = read_sysfs_file(group / "type")) {
        if (*type == "identity") {
            return IommuMode::passthrough;
        }
        if (*type == "DMA" || *type == "DMA-FQ") {
            return IommuMode::translated;
        }
        return IommuMode::unknown;
    }
    std::error_code ec;
    if (fs::exists(group, ec)) {
        return IommuMode::unknown;  // in a group whose type the kernel does not show
    }
    const fs::path iommus = sysfs_root / "class/iommu";
    if (!fs::is_directory(iommus, ec) || fs::is_empty(iommus, ec)) {
        return IommuMode::off;
    }
    return IommuMode::unknown;
}

const char* to_string(IommuMode mode) {
    switch (mode) {
        case IommuMode::off:
            return "off";
        case IommuMode::passthrough:
            return "passthrough (identity)";
        case IommuMode::translated:
            return "translated (DMA)";
        case IommuMode::unknown:
            return "unknown";
    }
    return "?";
}

std::string describe_iommu(IommuMode mode) {
    if (mode == IommuMode::translated) {
        return fmt::format(
            "{}: GPUDirect RDMA needs iommu=pt or the IOMMU off on most platforms (docs/gpu.md, "
            "Setting up GPUDirect RDMA)",
            to_string(mode));
    }
    return to_string(mode);
}

std::string cuda_version_text(int version) {
    return fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
}

std::string driver_mismatch_message(int driver_version, int runtime_version) {
    if (driver_version <= 0 || driver_version >= runtime_version) {
        return {};
    }
    const int runtime_major = runtime_version / 1000;
    const int driver_major = driver_version / 1000;
    std::string text = fmt::format(
        "the NVIDIA driver supports CUDA {} but ibvcap was built with the CUDA {} runtime: ",
        cuda_version_text(driver_version), cuda_version_text(runtime_version));
    if (runtime_major == 13) {
        text += "install an R580 or later driver (CUDA 13 needs R580+)";
    } else {
        text += fmt::format("install a driver that supports CUDA {}",
                            cuda_version_text(runtime_version));
    }
    if (driver_major == 12 && runtime_major > 12) {
        const int driver_minor = (driver_version % 1000) / 10;
        text += fmt::format(
            ", or rebuild ibvcap with a CUDA 12 toolkit, 12.5 or later (cmake "
            "-DCMAKE_CUDA_COMPILER=/usr/local/cuda-{}/bin/nvcc)",
            driver_minor >= 5 ? cuda_version_text(driver_version) : std::string("12.x"));
    }
    return text;
}

std::optional<std::string> bar1_shortfall(int err, std::uint64_t bar1_bytes,
                                          std::uint64_t registered_bytes) {
    if ((err != ENOMEM && err != ENOSPC && err != EFAULT) || bar1_bytes == 0) {
        return std::nullopt;
    }
    const std::string sizes =
        fmt::format("BAR1 is {} and the run registers {} MiB of GPU memory for payload",
                    size_text(bar1_bytes), mib_rounded_up(registered_bytes));
    if (registered_bytes > bar1_bytes) {
        return sizes +
               ": lower --ring-depth (payload memory is ring depth x slot size per queue pair), "
               "or use a GPU with a larger BAR1";
    }
    return sizes +
           ": if nvidia-smi -q -d MEMORY shows BAR1 Memory Usage near its total, lower "
           "--ring-depth or stop what else maps GPU memory through BAR1";
}

}  // namespace ibvcap::gpu
