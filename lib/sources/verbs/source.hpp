// The verbs source: one VerbsEngine (lib/sources/verbs/engine.hpp) and one
// poll thread per device, each delivering into its own lane (demux, ledger,
// writer), merged by the run loop at the end. The run loop's thread does the
// once-a-second housekeeping (NIC counters, the watchdog), never a poll
// thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lib/sources/igmp.hpp"
#include "lib/sources/source.hpp"
#include "lib/sources/verbs/engine.hpp"
#include "lib/sources/verbs/seam.hpp"

namespace ibvcap {

struct CaptureTarget {
    std::string device;  // RDMA device, "mlx5_0"
    std::uint8_t port = 1;
    std::string netdev;      // its network interface (for the IGMP joins and counters)
    std::uint32_t ipv4 = 0;  // the interface's address (host byte order)
    // A VLAN netdev's tags, outermost first (NetInterface::vlan_ids): the
    // joins go out on it tagged, and the engine sizes and matches for them.
    std::vector<std::uint16_t> vlan_ids;
};

// Makes the IGMP membership for a group on a target (production: a kernel
// socket on target.netdev; tests: a recording fake).
using TargetMembershipFactory =
    std::function<std::unique_ptr<GroupMembership>(const CaptureTarget&, const Endpoint&)>;
// Kernel joins on the target's netdev; source-specific for the groups
// `sources` names (GROUP:PORT@SOURCE).
TargetMembershipFactory kernel_memberships(std::vector<SourceFilter> sources = {});

// The `ibvcap devices` lines for one RDMA device: what the verbs layer says
// it can do, or why it cannot be opened. `limits` (devices -v) adds one line
// per device limit, "NAME: VALUE", in verbs::device_limits' order.
std::vector<std::string> device_capability_lines(verbs::Provider& provider,
                                                 const std::string& device, std::uint8_t port,
                                                 bool limits = false);

// The report's resource account of `devices` (what the engines created), with
// the bytes registered and locked and this process's RLIMIT_MEMLOCK and
// CAP_IPC_LOCK.
ResourceAccount resource_account(const std::vector<DeviceResources>& devices);

// -i for the verbs source: the interface's RDMA device and port. Throws
// std::runtime_error (one line, naming the fix) when the host has no RDMA
// device or the interface is not driven by one.
CaptureTarget verbs_target(verbs::Provider& provider, const std::string& interface);

struct VerbsSourceOptions {
    std::vector<CaptureTarget> targets;
    EngineOptions engine;
    std::filesystem::path sysfs_root = "/sys";
    bool nic_counters = true;  // read hw_counters and netdev statistics
    std::vector<int> cpus;     // pin poll thread i to cpus[i] (empty: no pinning)
    bool watchdog = true;      // once a second: streams silent while the NIC counts
    // Where payload slots live (--gpu: GPU memory or pinned staging; the
    // stand-in with --gpu-standin). Null: host memory.
    PayloadMemory* payload = nullptr;
    // Opens a target's PTP hardware clock for the engine's clock (production:
    // open_netdev_phc on its netdev, lib/host/phc.hpp); null, or a null
    // result with `why` set: frame times without one (docs/operations.md, "Time").
    std::function<std::shared_ptr<PhcClock>(const CaptureTarget&, std::string& why)> phc;
};

class VerbsSource final : public Source {
  public:
    // Opens every target's device. Throws (one line, with the fix) when one
    // cannot be opened.
    VerbsSource(VerbsSourceOptions options, verbs::Provider& provider,
                TargetMembershipFactory memberships);
    ~VerbsSource() override;

    std::string kind() const override { return "verbs"; }
    std::string input() const override;
    bool live() const override { return true; }
    bool lends_frames() const override { return true; }
    bool lends_device_memory() const override;
    std::size_t lanes() const override;
    // Several devices: each one's files are prefixed with its name.
    std::string lane_prefix(std::size_t lane) const override;
    void connect(std::span<const SourceLane> lanes) override;
    // Each poll thread takes its new lane between batches
    // (VerbsEngine::reconnect); returns once every one has.
    bool can_reconnect() const override { return true; }
    void reconnect(std::span<const SourceLane> lanes) override;
    BlockPlan block_plan() const override;
    void start() override;
    // The poll threads deliver; the step only waits (at most 2 ms) and says
    // whether a poll thread has ended (a device fault). -c is "at least N".
    bool step(std::uint64_t limit, std::chrono::milliseconds max_wait,
              const std::atomic<bool>& stop) override;
    std::uint64_t frames() const override;
    void tick(RunInfo& info) override;
    SourceFigures figures() const override;
    // Per device (names prefixed "mlx5_0/"): the NIC and netdev counters read
    // in tick(), and the engine's published witnesses.
    std::vector<SourceCounter> witnesses() const override;
    bool demux_on_loop_thread() const override { return false; }
    void stop(std::optional<std::uint64_t> remaining) override;
    void report(std::span<const SourceLane> lanes, RunInfo& info) override;

  private:
    struct Part;
    VerbsSourceOptions options_;
    TargetMembershipFactory memberships_;
    // Declared before the parts so that it outlives their memory regions.
    std::unique_ptr<PayloadMemory> host_memory_;
    std::vector<std::unique_ptr<Part>> parts_;
    std::atomic<bool> halt_{false};
};

}  // namespace ibvcap
