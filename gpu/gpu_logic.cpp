#include "gpu/gpu_logic.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <limits>
#include <stdexcept>
#include <system_error>

namespace ibvcap::gpu {

namespace fs = std::filesystem;

const char* to_string(Mode mode) {
    switch (mode) {
        case Mode::dmabuf:
            return "dma-buf";
        case Mode::peermem:
            return "nvidia-peermem";
        case Mode::staging:
            return "staging";
    }
    return "?";
}

// ---- sizes -----------------------------------------------------------------

std::optional<std::size_t> round_up(std::size_t bytes, std::size_t to) {
    if (to == 0 || (to & (to - 1)) != 0) {
        return std::nullopt;
    }
    if (bytes > std::numeric_limits<std::size_t>::max() - (to - 1)) {
        return std::nullopt;
    }
    return (bytes + (to - 1)) & ~(to - 1);
}

std::optional<std::size_t> aligned_offset(std::uintptr_t base, std::size_t allocated,
                                          std::size_t needed, std::size_t align) {
    if (align == 0 || (align & (align - 1)) != 0) {
        return std::nullopt;
    }
    const std::size_t offset = (align - base % align) % align;
    if (offset > allocated || allocated - offset < needed) {
        return std::nullopt;
    }
    return offset;
}

// ---- PCI topology ----------------------------------------------------------

namespace {

std::optional<unsigned> parse_hex(std::string_view text, std::size_t min_digits,
                                  std::size_t max_digits) {
    if (text.size() < min_digits || text.size() > max_digits) {
        return std::nullopt;
    }
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
    if (ec != std::errc() || end != text.data() + text.size()) {
        return std::nullopt;
    }
    return value;
}

bool starts_with_host_bridge(std::string_view name) {
    // "pci0000:00" (domain 4+ hex digits, bus 2)
    if (name.substr(0, 3) != "pci") {
        return false;
    }
    const std::string_view rest = name.substr(3);
    const auto colon = rest.find(':');
    return colon != std::string_view::npos && parse_hex(rest.substr(0, colon), 4, 8).has_value() &&
           parse_hex(rest.substr(colon + 1), 2, 2).has_value();
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
    std::string out;
    for (std::size_t i = 0; i < parts.size(); ++i) {
        if (i > 0) {
            out += sep;
        }
        out += parts[i];
    }
    return out;
}

std::size_t common_bridges(const PciLocation& a, const PciLocation& b) {
    std::size_t n = 0;
    while (n < a.bridges.size() && n < b.bridges.size() && a.bridges[n] == b.bridges[n]) {
        ++n;
    }
    return n;
}

}  // namespace

std::optional<std::string> normalize_pci_address(std::string_view text) {
    // [domain:]bus:device.function, hex; the domain is 4 digits in sysfs (more
    // for VMD domains), 8 in CUDA's and nvidia-smi's spelling.
    const auto dot = text.rfind('.');
    if (dot == std::string_view::npos) {
        return std::nullopt;
    }
    const auto function = parse_hex(text.substr(dot + 1), 1, 1);
    const std::string_view head = text.substr(0, dot);
    const auto last_colon = head.rfind(':');
    if (!function || *function > 7 || last_colon == std::string_view::npos) {
        return std::nullopt;
    }
    const auto device = parse_hex(head.substr(last_colon + 1), 2, 2);
    const std::string_view front = head.substr(0, last_colon);
    const auto colon = front.rfind(':');
    const auto bus =
        parse_hex(colon == std::string_view::npos ? front : front.substr(colon + 1), 2, 2);
    std::optional<unsigned> domain = 0u;
    if (colon != std::string_view::npos) {
        domain = parse_hex(front.substr(0, colon), 1, 8);
    }
    if (!device || *device > 0x1f || !bus || !domain) {
        return std::nullopt;
    }
    return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", *domain, *bus, *device, *function);
}

std::optional<PciLocation> parse_pci_path(const fs::path& canonical) {
    PciLocation loc;
    std::vector<std::string> chain;
    bool in_tree = false;
    for (const auto& part : canonical) {
        const std::string name = part.string();
        if (!in_tree) {
            if (starts_with_host_bridge(name)) {
                loc.host_bridge = name;
                in_tree = true;
            }
            continue;
        }
        const auto address = normalize_pci_address(name);
        // Only the full sysfs spelling names a PCI function here.
        if (!address || *address != name) {
            break;
        }
        chain.push_back(*address);
    }
    if (chain.empty()) {
        return std::nullopt;
    }
    loc.address = chain.back();
    chain.pop_back();
    loc.bridges = std::move(chain);
    return loc;
}

std::optional<PciLocation> locate_pci_function(const fs::path& sysfs_root, std::string_view what) {
    if (what.empty()) {
        return std::nullopt;
    }
    std::vector<fs::path> candidates;
    if (const auto address = normalize_pci_address(what)) {
        candidates.push_back(sysfs_root / "bus/pci/devices" / *address);
    } else if (what.find('/') != std::string_view::npos) {
        candidates.emplace_back(what);
    } else {
        candidates.push_back(sysfs_root / "class/infiniband" / what / "device");
        candidates.push_back(sysfs_root / "class/net" / what / "device");
    }
    for (const auto& candidate : candidates) {
        std::error_code ec;
        const fs::path canonical = fs::canonical(candidate, ec);
        if (ec) {
            continue;
        }
        auto loc = parse_pci_path(canonical);
        if (!loc) {
            continue;
        }
        if (const auto numa = read_sysfs_file(canonical / "numa_node")) {
            int node = -1;
            const auto [end, err] =
                std::from_chars(numa->data(), numa->data() + numa->size(), node);
            if (err == std::errc() && end == numa->data() + numa->size()) {
                loc->numa_node = node < 0 ? -1 : node;
            }
        }
        return loc;
    }
    return std::nullopt;
}

PciRelation relate(const PciLocation& gpu, const PciLocation& nic) {
    if (!gpu.host_bridge.empty() && gpu.host_bridge == nic.host_bridge) {
        const std::size_t common = common_bridges(gpu, nic);
        if (common >= 2) {
            return PciRelation::same_switch;
        }
        return common == 1 ? PciRelation::same_root_port : PciRelation::same_host_bridge;
    }
    if (gpu.numa_node >= 0 && nic.numa_node >= 0) {
        return gpu.numa_node == nic.numa_node ? PciRelation::same_numa_node
                                              : PciRelation::different_numa_nodes;
    }
    return PciRelation::unknown;
}

std::string describe_relation(const PciLocation& gpu, const PciLocation& nic) {
    switch (relate(gpu, nic)) {
        case PciRelation::same_switch:
            return fmt::format(
                "GPU {} and NIC {} share a PCIe switch (below {}): the best path for GPUDirect "
                "RDMA (nvidia-smi topo: PIX/PXB)",
                gpu.address, nic.address, gpu.bridges[common_bridges(gpu, nic) - 1]);
        case PciRelation::same_root_port:
            return fmt::format(
                "GPU {} and NIC {} share PCIe root port {} and no switch below it: a good path "
                "for GPUDirect RDMA (nvidia-smi topo: PXB)",
                gpu.address, nic.address, gpu.bridges.front());
        case PciRelation::same_host_bridge:
            return fmt::format(
                "GPU {} and NIC {} share host bridge {} but no PCIe switch: peer-to-peer traffic "
                "passes the CPU's root complex, which often limits GPUDirect RDMA (nvidia-smi "
                "topo: PHB)",
                gpu.address, nic.address, gpu.host_bridge);
        case PciRelation::same_numa_node:
            return fmt::format(
                "GPU {} and NIC {} are on NUMA node {} under different host bridges ({}, {}): "
                "peer-to-peer traffic crosses the CPU and GPUDirect RDMA is often slow on this "
                "path (nvidia-smi topo: NODE)",
                gpu.address, nic.address, gpu.numa_node, gpu.host_bridge, nic.host_bridge);
        case PciRelation::different_numa_nodes:
            return fmt::format(
                "GPU {} is on NUMA node {}, NIC {} on node {}: GPUDirect RDMA crosses the "
                "inter-socket link, slow or unsupported on most hosts; use a GPU on node {} "
                "(nvidia-smi topo: SYS)",
                gpu.address, gpu.numa_node, nic.address, nic.numa_node, nic.numa_node);
        case PciRelation::unknown:
            break;
    }
    return fmt::format(
        "GPU {} and NIC {} are under different host bridges ({}, {}) and the kernel reports no "
        "NUMA nodes: check nvidia-smi topo -m",
        gpu.address, nic.address, gpu.host_bridge, nic.host_bridge);
}

std::string nic_relation(const fs::path& sysfs_root, std::string_view gpu_address,
                         std::string_view nic) {
    if (nic.empty()) {
        return {};
    }
    const auto gpu = locate_pci_function(sysfs_root, gpu_address);
    if (!gpu) {
        return fmt::format("GPU {} not found under {}: the PCIe path to the NIC is unknown",
                           gpu_address, (sysfs_root / "bus/pci/devices").string());
    }
    const auto dev = locate_pci_function(sysfs_root, nic);
    if (!dev) {
        return fmt::format(
            "NIC {} not found under {} (give a PCI address, an RDMA device or a netdev): the "
            "PCIe path to the GPU is unknown",
            nic, sysfs_root.string());
    }
    return describe_relation(*gpu, *dev);
}

// ---- modules ---------------------------------------------------------------

bool peermem_loaded(const fs::path& sysfs_root) {
    std::error_code ec;
    return fs::exists(sysfs_root / "module/nvidia_peermem", ec) ||
           fs::exists(sysfs_root / "module/nv_peer_mem", ec);
}

// ---- payload memory modes -------------------------------------------------

std::optional<std::string> ordering_refusal(Mode mode, const RdmaWriteOrdering& ordering) {
    if (mode == Mode::staging || !ordering.refusal) {
        return std::nullopt;
    }
    return fmt::format("{} refused: {}", to_string(mode), *ordering.refusal);
}

ModeChoice choose_mode(Mode preferred, const ModeAttempt& attempt) {
    ModeChoice choice;
    for (const Mode mode : {Mode::dmabuf, Mode::peermem, Mode::staging}) {
        if (static_cast<int>(mode) < static_cast<int>(preferred)) {
            choice.refused.push_back(
                fmt::format("{} not tried ({} asked for)", to_string(mode), to_string(preferred)));
            continue;
        }
        const auto why = attempt(mode);
        if (!why) {
            choice.mode = mode;
            return choice;
        }
        choice.refused.push_back(*why);
    }
    throw std::runtime_error(
        fmt::format("GPU payload memory: no mode worked: {}", join(choice.refused, "; ")));
}

std::string describe_choice(const ModeChoice& choice) {
    std::string text;
    switch (choice.mode) {
        case Mode::dmabuf:
            text = "dma-buf: the NIC writes payload into GPU memory (GPUDirect RDMA)";
            break;
        case Mode::peermem:
            text = "nvidia-peermem: the NIC writes payload into GPU memory (GPUDirect RDMA)";
            break;
        case Mode::staging:
            text =
                "staging: payload lands in pinned host memory and is copied to the GPU (no "
                "GPUDirect RDMA)";
            break;
    }
    if (!choice.refused.empty()) {
        text += ": ";
        text += join(choice.refused, "; ");
    }
    return text;
}

// ---- messages --------------------------------------------------------------

std::string no_gpu_message(int id, std::string_view cuda_error, std::string_view fix) {
    if (!fix.empty()) {
        return fmt::format(
            "--gpu {}: no usable GPU (CUDA: {}): {}; or run without --gpu to keep payload in host "
            "memory",
            id, cuda_error, fix);
    }
    return fmt::format(
        "--gpu {}: no usable GPU (CUDA: {}); run without --gpu to keep payload in host memory", id,
        cuda_error);
}

std::string gpu_id_message(int id, int count) {
    if (count <= 0) {
        return no_gpu_message(id, "no CUDA-capable device is detected");
    }
    return fmt::format("--gpu {}: this host has {} GPU{} (ids 0 to {})", id, count,
                       count == 1 ? "" : "s", count - 1);
}

std::string format_gpu_info(const GpuInfo& info) {
    std::string text = fmt::format(
        "GPU {}: {} (PCI {}, NUMA node {}); GPUDirect RDMA: {}; dma-buf: {}; nvidia-peermem: {}",
        info.id, info.name, info.pci_bus_id,
        info.numa_node < 0 ? std::string("none") : std::to_string(info.numa_node),
        info.gpudirect_rdma ? "yes" : "no", info.dmabuf ? "yes" : "no",
        info.peermem_loaded ? "loaded" : "not loaded");
    text +=
        fmt::format("\nGPU {} platform: CUDA driver {}, runtime {}; BAR1 {}; IOMMU: {}", info.id,
                    info.driver_version == 0 ? std::string("not loaded")
                                             : cuda_version_text(info.driver_version),
                    cuda_version_text(info.runtime_version),
                    info.bar1_bytes == 0 ? std::string("unknown") : size_text(info.bar1_bytes),
                    describe_iommu(info.iommu));
    text += "\n";
    text +=
        describe_rdma_write_ordering(info.rdma_writes_ordering, info.rdma_flush_options, info.c2c);
    if (!info.nic_relation.empty()) {
        text += "\nGPU-NIC path: ";
        text += info.nic_relation;
    }
    return text;
}

void AllocationMap::add(const void* begin, std::size_t bytes) {
    const auto b = reinterpret_cast<std::uintptr_t>(begin);
    const AddressRange range{b, bytes > std::numeric_limits<std::uintptr_t>::max() - b
                                    ? std::numeric_limits<std::uintptr_t>::max()
                                    : b + bytes};
    sorted_.insert(std::upper_bound(sorted_.begin(), sorted_.end(), range,
                                    [](const AddressRange& x, const AddressRange& y) {
                                        return x.begin < y.begin;
                                    }),
                   range);
}

void AllocationMap::remove(const void* begin) {
    const auto b = reinterpret_cast<std::uintptr_t>(begin);
    std::erase_if(sorted_, [b](const AddressRange& r) { return r.begin == b; });
}

AddressRange AllocationMap::range_of(const void* p) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    auto it = std::upper_bound(sorted_.begin(), sorted_.end(), a,
                               [](std::uintptr_t x, const AddressRange& r) { return x < r.begin; });
    if (it == sorted_.begin()) {
        return {};
    }
    --it;
    return a < it->end ? *it : AddressRange{};
}

std::vector<StridedCopy> plan_strided_copies(std::span<const DeviceMemory::Copy> copies,
                                             std::size_t max_pitch, const RangeOf& src_range,
                                             const RangeOf& dst_range) {
    if (max_pitch == 0) {
        max_pitch = std::numeric_limits<std::size_t>::max();
    }
    std::vector<StridedCopy> runs;
    // The allocations holding the last run's first copy (its rows must stay in them).
    AddressRange src_bound;
    AddressRange dst_bound;
    const auto add = [&](std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) {
        if (!runs.empty() && src_bound.holds(src, bytes) && dst_bound.holds(dst, bytes)) {
            StridedCopy& r = runs.back();
            if (r.width == bytes) {
                // Pitches must be forward and at least the width (no overlap).
                const auto next_dst = reinterpret_cast<std::uintptr_t>(dst);
                const auto next_src = reinterpret_cast<std::uintptr_t>(src);
                const auto last_dst =
                    reinterpret_cast<std::uintptr_t>(r.dst) + (r.rows - 1) * r.dst_pitch;
                const auto last_src =
                    reinterpret_cast<std::uintptr_t>(r.src) + (r.rows - 1) * r.src_pitch;
                if (next_dst >= last_dst + r.width && next_src >= last_src + r.width) {
                    const std::size_t dp = next_dst - last_dst;
                    const std::size_t sp = next_src - last_src;
                    if (r.rows == 1 && dp <= max_pitch && sp <= max_pitch) {
                        r.dst_pitch = dp;
                        r.src_pitch = sp;
                        ++r.rows;
                        return;
                    }
                    if (dp == r.dst_pitch && sp == r.src_pitch) {
                        ++r.rows;
                        return;
                    }
                }
            }
        }
        runs.push_back(StridedCopy{dst, src, bytes, 1, bytes, bytes});
        src_bound = src_range ? src_range(src) : AddressRange{};
        dst_bound = dst_range ? dst_range(dst) : AddressRange{};
    };
    for (const auto& c : copies) {
        auto* dst = static_cast<std::uint8_t*>(c.dst);
        const auto* src = static_cast<const std::uint8_t*>(c.src);
        // A row wider than the largest pitch goes in pieces (pitch >= width).
        for (std::size_t done = 0; done < c.bytes;) {
            const std::size_t n = std::min(c.bytes - done, max_pitch);
            add(dst + done, src + done, n);
            done += n;
        }
    }
    return runs;
}

}  // namespace ibvcap::gpu
