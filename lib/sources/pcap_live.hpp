// The libpcap live source (docs/architecture.md, "The data path"): any NIC on any host, for hosts
// without an mlx5 port (`ibvcap capture --source pcap`). The kernel copies the frames that pass a
// BPF filter for the requested GROUP:PORTs into a memory-mapped TPACKET_V3 ring; the run loop's
// thread takes them out block by block into the same demux, ledger and sinks as the verbs source.
//
// Drops are counted where they can happen: the kernel ring overflowing
// (pcap_stats ps_drop), the interface or driver (ps_ifdrop, and the netdev's
// sysfs drop counters read once a second), and the writers (drop mode, as for
// every live source).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "lib/core/netaddr.hpp"
#include "lib/sources/igmp.hpp"
#include "lib/sources/source.hpp"

namespace ibvcap {

// The BPF filter for the groups and antennas:
//   X = "udp and ((dst host G1 and dst port P1) or (dst host G2 and dst port P2) ...)
//        [and (src host A1 or src host A2 ...)]"
// and the same behind one VLAN tag: "(X) or (vlan and X)". No groups: every
// UDP destination ("udp"); no antennas: any source.
std::string pcap_filter(const std::vector<Endpoint>& groups,
                        const std::vector<std::uint32_t>& antennas);

struct PcapLiveOptions {
    std::string interface;  // netdev name (resolved by the caller)
    std::vector<Endpoint> groups;
    std::vector<std::uint32_t> antennas;
    std::size_t buffer_bytes = std::size_t{256} << 20;  // kernel ring (TPACKET_V3), <= INT_MAX
    std::filesystem::path sysfs_root = "/sys";
    bool nic_counters = true;  // read <sysfs_root>/class/net/<interface>/statistics
};

class PcapLiveSource final : public Source {
  public:
    // Opens and activates the capture with its filter in place. Throws
    // std::runtime_error (one line naming the fix) when it cannot: no
    // permission, no such interface, interface down, not Ethernet, a filter
    // libpcap refuses. The groups are joined through `memberships` (each
    // held for the run; an empty factory joins nothing) at arm(), once the
    // filter is in place and before any output exists, so nothing the joins
    // bring in is missed; a failed join throws what the factory throws.
    PcapLiveSource(PcapLiveOptions options, MembershipFactory memberships);
    ~PcapLiveSource() override;
    PcapLiveSource(const PcapLiveSource&) = delete;
    PcapLiveSource& operator=(const PcapLiveSource&) = delete;

    std::string kind() const override { return "pcap"; }
    std::string input() const override { return options_.interface; }
    bool live() const override { return true; }
    void arm() override;
    void connect(std::span<const SourceLane> lanes) override;
    // The demux runs in step(), on the loop's thread: pointers between steps.
    bool can_reconnect() const override { return true; }
    void reconnect(std::span<const SourceLane> lanes) override;
    void start() override {}
    // One pcap_dispatch (at most `limit` frames, so a count stays exact), or
    // a wait of at most `max_wait` for the kernel to hand over a block.
    bool step(std::uint64_t limit, std::chrono::milliseconds max_wait,
              const std::atomic<bool>& stop) override;
    std::uint64_t frames() const override;
    void tick(RunInfo& info) override;
    SourceFigures figures() const override;
    // libpcap's counters and the interface's drop counters (read in tick()).
    std::vector<SourceCounter> witnesses() const override;
    // Leaves the groups, then reads what the kernel still holds.
    void stop(std::optional<std::uint64_t> remaining) override;
    void report(std::span<const SourceLane> lanes, RunInfo& info) override;

  private:
    std::vector<SourceCounter> kernel_counters() const;

    struct State;
    PcapLiveOptions options_;
    MembershipFactory memberships_;
    std::unique_ptr<State> state_;
};

}  // namespace ibvcap
