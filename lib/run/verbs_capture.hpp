// A live capture through the verbs engine: one poll thread per device (each
// with its own demux, writer and ledger), merged into one ledger at the end.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "lib/run/common.hpp"
#include "lib/sinks/block_sink.hpp"
#include "lib/sources/verbs/engine.hpp"
#include "lib/sources/verbs/seam.hpp"

namespace ibvcap {

struct CaptureTarget {
    std::string device;  // RDMA device, "mlx5_0"
    std::uint8_t port = 1;
    std::string netdev;      // its network interface (for the IGMP joins and counters)
    std::uint32_t ipv4 = 0;  // the interface's address (host byte order)
};

struct CaptureRequest {
    std::vector<CaptureTarget> targets;
    EngineOptions engine;
    DemuxOptions demux;
    Writer::Options writer;
    std::uint64_t count = 0;  // stop after at least this many frames (0: no limit)
    double duration_s = 0;    // stop after this long (0: no limit)
    FrameObserver observer;   // -v
    std::filesystem::path sysfs_root = "/sys";
    bool nic_counters = true;     // read hw_counters and netdev statistics
    std::vector<int> cpus;        // pin poll thread i to cpus[i] (empty: no pinning)
    bool watchdog = true;         // once a second: streams silent while the NIC counts
    BlockSink* blocks = nullptr;  // the GPU payload path's block rings (--gpu; one target)
    // Where payload slots live (--gpu: GPU memory or pinned staging; the
    // stand-in with --gpu-standin). Null: host memory.
    PayloadMemory* payload = nullptr;
    std::FILE* stats = nullptr;  // the live stats line once a second (stderr; null: none, -q)
};

// Makes the IGMP membership for a group on a target (production: a kernel
// socket on target.netdev; tests: a recording fake).
using TargetMembershipFactory =
    std::function<std::unique_ptr<GroupMembership>(const CaptureTarget&, const Endpoint&)>;
TargetMembershipFactory kernel_memberships();

// The `ibvcap devices` lines for one RDMA device: what the verbs layer says
// it can do, or why it cannot be opened.
std::vector<std::string> device_capability_lines(verbs::Provider& provider,
                                                 const std::string& device, std::uint8_t port);

// -i for the verbs source: the interface's RDMA device and port. Throws
// std::runtime_error (one line, naming the fix) when the host has no RDMA
// device or the interface is not driven by one.
CaptureTarget verbs_target(verbs::Provider& provider, const std::string& interface);

// Runs until `stop`, the duration, the count, or a device fatal error. Throws
// std::runtime_error / std::system_error (one line, with the fix) when the
// capture cannot start; nothing is written then.
RunOutcome run_verbs_capture(const CaptureRequest& request, verbs::Provider& provider,
                             const TargetMembershipFactory& memberships,
                             const std::atomic<bool>& stop);

}  // namespace ibvcap
