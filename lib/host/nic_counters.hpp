// NIC drop counters from sysfs (docs/architecture.md, "Every frame counted once"): frames the NIC
// or the kernel driver lost before they reached ibvcap. Read at the start of a run, periodically,
// and at the end; the deltas go into the ledger.
//
// Counters read:
//   <root>/class/infiniband/<dev>/ports/<port>/hw_counters/*   → "hw_counters/<file>"
//       (mlx5: out_of_buffer, out_of_sequence, packet_seq_err, ...); of these
//       only out_of_buffer is a drop for a raw-packet QP: a frame matched the
//       flow rule while no receive WR was posted.
//   <root>/class/net/<netdev>/statistics/{rx_dropped, rx_missed_errors,
//       rx_fifo_errors, rx_over_errors, rx_crc_errors, rx_errors} → "net/<file>";
//       drops: rx_missed_errors, rx_fifo_errors, rx_over_errors, rx_crc_errors.
//
// Not drops, on purpose:
//   net/rx_dropped — Linux also counts frames the kernel did not want (unknown
//       protocol, unknown VLAN, inactive bond slave, no socket/handler, ...),
//       so it grows on a healthy link with unrelated traffic. Treating it as a
//       capture drop would report loss where there was none; it is shown for
//       diagnosis only.
//   net/rx_errors — the sum of the rx_*_errors above (and more); counting it as
//       a drop would count the same frames twice.
// What the net/ counters mean on mlx5 (mlx5e_get_stats): rx_crc_errors is
// the port's FCS error count; rx_missed_errors (kernels from 2024; rx_dropped
// before that) is the netdev's own rx_out_of_buffer, i.e. the kernel's receive
// rings, not a raw QP's. rx_discards_phy (port buffer overflow) is an ethtool
// statistic that sysfs does not expose at all; reading it needs the ethtool
// ioctl (ETHTOOL_GSTATS), which this class does not do.
//
// A value lower than the previous read is a 32-bit wrap when the previous
// value was in the top half of the 32-bit range (mlx5 q counters such as
// out_of_buffer are 32-bit in hardware): the growth is 2^32 - previous + new.
// Any other decrease is a reset (driver reload, device reset): the growth is
// the new value. Growth is accumulated read by read (the capture reads once a
// second), so only a counter that wraps twice between reads is misread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "lib/ledger/ledger.hpp"

namespace ibvcap {

// Not synchronised: snapshot() and the readers belong to one thread (the
// engine's housekeeping thread, never the poll loop: each hw_counters read is a
// firmware command).
class NicCounters {
  public:
    struct Delta {
        std::string name;         // "hw_counters/out_of_buffer", "net/rx_missed_errors", ...
        std::uint64_t start = 0;  // raw value at snapshot_start()
        std::uint64_t now = 0;    // raw value at the last successful read
        std::uint64_t delta = 0;  // growth over the run, resets accounted for
        bool is_drop = false;
    };

    // `netdev` may be empty (an InfiniBand port without IPoIB): then only
    // hw_counters are read. Reads nothing until snapshot_start().
    NicCounters(std::filesystem::path sysfs_root, std::string device, std::uint8_t port,
                std::string netdev);

    // Find the counter files and take their first values; counters read
    // before are forgotten. Files that cannot be read are skipped.
    void snapshot_start();
    // Read every counter found at the start again (calls snapshot_start() if
    // it was never called). A counter that cannot be read this time keeps its
    // last value; a drop counter that does is listed in missing().
    void snapshot();

    // Every counter read at the start, in a stable order (hw_counters first,
    // then net), with its growth since the start.
    std::vector<Delta> deltas() const;
    // Drop counters that could not be read (at the start, or at some later
    // snapshot): their deltas are unknown. Sorted, no repeats.
    std::vector<std::string> missing() const;
    // deltas() as ledger source counters (value = delta). With several ports
    // in one run, a prefix such as "mlx5_0/1/" keeps the names apart.
    std::vector<SourceCounter> to_source_counters(std::string_view name_prefix = {}) const;

    const std::string& device() const { return device_; }
    std::uint8_t port() const { return port_; }
    const std::string& netdev() const { return netdev_; }

  private:
    struct Counter {
        std::string name;
        std::filesystem::path path;
        bool is_drop = false;
        std::uint64_t start = 0;
        std::uint64_t last = 0;  // raw value at the last successful read
        std::uint64_t delta = 0;
    };

    void note_missing(const std::string& name);

    std::filesystem::path root_;
    std::string device_;
    std::uint8_t port_;
    std::string netdev_;
    bool started_ = false;
    std::vector<Counter> counters_;
    std::vector<std::string> missing_;
};

// The growth of the NIC and netdev drop counters read so far (the ones the
// report counts as drops), for the stats line's `drops`. Call it on the
// thread that calls counters.snapshot().
std::uint64_t nic_drops_so_far(const NicCounters& counters);

}  // namespace ibvcap
