// NIC drop counters from sysfs and the driver's ethtool statistics (docs/architecture.md, "Every
// frame counted once"; docs/observability.md, "The NIC as a witness"): frames the NIC
// or the kernel driver lost before they reached ibvcap. Read at the start of a run, periodically,
// and at the end; the deltas go into the ledger.
//
// Counters read:
//   <root>/class/infiniband/<dev>/ports/<port>/hw_counters/*   → "hw_counters/<file>"
//       (mlx5: out_of_buffer, out_of_sequence, packet_seq_err, ...); of these
//       only out_of_buffer is a drop for a raw-packet QP: a frame matched the
//       flow rule while no receive WR was posted (cause receive_queue).
//   <root>/class/net/<netdev>/statistics/{rx_dropped, rx_missed_errors,
//       rx_fifo_errors, rx_over_errors, rx_crc_errors, rx_errors} → "net/<file>";
//       drops: rx_missed_errors, rx_fifo_errors, rx_over_errors (cause kernel: the
//       netdev's receive rings and FIFO), rx_crc_errors (cause port_discards).
//   <netdev>'s ethtool statistics → "ethtool/<name>" (below).
// Every other counter has cause none.
//
// Not drops, on purpose:
//   net/rx_dropped — Linux also counts frames the kernel did not want (unknown
//       protocol, unknown VLAN, inactive bond slave, no socket/handler, ...),
//       so it grows on a healthy link with unrelated traffic. Treating it as a
//       capture drop would report loss where there was none; it is shown for
//       diagnosis only.
//   net/rx_errors — the sum of the rx_*_errors above (and more); counting it as
//       a drop would count the same frames twice.
// What the net/ counters mean on mlx5 (mlx5e_get_stats, en_main.c):
// rx_crc_errors is the port's FCS error count (ethtool rx_crc_errors_phy);
// rx_missed_errors (kernels from 2024; rx_dropped before that) is the netdev's
// own rx_out_of_buffer, i.e. the kernel's receive rings, not a raw QP's. Since
// "net/mlx5e: Report rx_discards_phy via rx_dropped" (kernels from 2025, and
// stable backports) rx_dropped also adds the port's rx_discards_phy, so it
// stays diagnostic: the port's discards are counted once, as ethtool's.
//
// The driver's own statistics (what `ethtool -S` prints), through the ethtool
// ioctl (lib/host/ethtool_stats.hpp) → "ethtool/<name>": the names are found
// once at snapshot_start(), the values read with each snapshot() (one
// ETHTOOL_GSTATS returns them all; the indices of the names kept are picked).
// Only the names below are kept (mlx5's, drivers/net/ethernet/mellanox/mlx5/
// core/en_stats.c; their meaning from Documentation/networking/device_drivers/
// ethernet/mellanox/mlx5/counters.rst); every cause is the `cause` of the
// SourceCounter, for the timeline (docs/observability.md, section 2):
//   rx_discards_phy             drop, port_discards: RFC 2863 ifInDiscards,
//       frames the port dropped for lack of buffer (the NIC could not keep
//       up); no sysfs file has it.
//   rx_prio<p>_discards, rx_prio<p>_buf_discard, rx_prio<p>_cong_discard
//       port_discards, not drops: per-priority views of the port's discards
//       (PPCNT per-priority and per-TC groups). Whether they are inside
//       rx_discards_phy or beside it is not documented; counted as drops they
//       could count the same frames twice, so they only witness.
//   rx_crc_errors_phy, rx_symbol_err_phy, rx_pcs_symbol_err_phy,
//   rx_in_range_len_errors_phy, rx_out_of_range_len_phy, rx_oversize_pkts_phy,
//   rx_undersize_pkts_phy, rx_fragments_phy, rx_jabbers_phy,
//   outbound_pci_buffer_overflow
//       port_discards, not drops: frames dropped at the port for FCS, coding,
//       length or PCIe-buffer reasons. rx_crc_errors_phy is the very count of
//       net/rx_crc_errors (already a drop); the others overlap one another
//       (IEEE 802.3 too-long vs RFC 2819 jabbers/fragments, which are also FCS
//       errors). The sequence counts give the exact number missing; these say
//       where.
//   link_down_events_phy        port_down, not a drop.
//   rx_out_of_buffer            not a drop: the netdev's own receive queues
//       (the kernel's rings, en_stats.c q_stats_desc), which a raw-packet QP
//       does not use; cause none with an RDMA device (verbs), kernel without
//       one (--source pcap, where those rings are the capture path; net/
//       rx_missed_errors is the same count and is the drop there).
//   rx_packets_phy, rx_buffer_passed_thres_phy, tx_pause_ctrl_phy,
//   rx_steer_missed_packets, dev_internal_queue_oob, rx_if_down_packets
//       diagnostic only (cause none).
// A driver whose statistics cannot be read (lo: none; a veth has its own
// names) gets one line in notes(), never a guessed zero. ETHTOOL_GSTATS values
// are 64-bit: a decrease is a reset, never a wrap.
//
// A sysfs value lower than the previous read is a 32-bit wrap when the previous
// value was in the top half of the 32-bit range (mlx5 q counters such as
// out_of_buffer are 32-bit in hardware): the growth is 2^32 - previous + new.
// Any other decrease is a reset (driver reload, device reset): the growth is
// the new value. Growth is accumulated read by read (the capture reads once a
// second), so only a counter that wraps twice between reads is misread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lib/host/ethtool_stats.hpp"
#include "lib/ledger/ledger.hpp"

namespace ibvcap {

// What an ethtool statistic stands for (the table above).
struct EthtoolStatClass {
    bool is_drop = false;
    LossCause cause = LossCause::none;
};
// nullopt for a statistic NicCounters does not keep. `rdma_path`: the counters
// belong to an RDMA port (verbs), not to a netdev captured through the kernel.
std::optional<EthtoolStatClass> classify_ethtool_stat(std::string_view name, bool rdma_path);

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
        LossCause cause = LossCause::none;
    };

    // `netdev` may be empty (an InfiniBand port without IPoIB): then only
    // hw_counters are read. Reads nothing until snapshot_start(). `ethtool`
    // reads the netdev's driver statistics; null: the kernel's, through the
    // ioctl (they come from the running kernel whatever `sysfs_root` is).
    NicCounters(std::filesystem::path sysfs_root, std::string device, std::uint8_t port,
                std::string netdev, std::shared_ptr<EthtoolStatsReader> ethtool = nullptr);

    // Find the counter files and the ethtool statistics' names and take their
    // first values; counters read before are forgotten. Files that cannot be
    // read are skipped.
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
    // Lines for the report about what could not be read as a whole: "ethtool
    // statistics of eth0: not available (Operation not supported)", a driver
    // without a port discard counter. In order, no repeats.
    std::vector<std::string> notes() const;
    // deltas() as ledger source counters (value = delta, with is_drop and
    // cause). With several ports
    // in one run, a prefix such as "mlx5_0/1/" keeps the names apart.
    std::vector<SourceCounter> to_source_counters(std::string_view name_prefix = {}) const;

    const std::string& device() const { return device_; }
    std::uint8_t port() const { return port_; }
    const std::string& netdev() const { return netdev_; }

  private:
    static constexpr std::size_t kNoIndex = static_cast<std::size_t>(-1);

    struct Counter {
        std::string name;
        std::filesystem::path path;  // sysfs counters only
        bool is_drop = false;
        LossCause cause = LossCause::none;
        std::uint64_t start = 0;
        std::uint64_t last = 0;  // raw value at the last successful read
        std::uint64_t delta = 0;
        // ethtool statistics: the index among the driver's names (kNoIndex:
        // gone from them); sysfs counters: kNoIndex.
        bool ethtool = false;
        std::size_t index = kNoIndex;
    };

    void note_missing(const std::string& name);
    void add_note(std::string note);
    void start_ethtool(std::vector<Counter>& out);
    void read_ethtool();
    bool remap_ethtool();
    void ethtool_failed(int error);

    std::filesystem::path root_;
    std::string device_;
    std::uint8_t port_;
    std::string netdev_;
    std::shared_ptr<EthtoolStatsReader> ethtool_;
    bool started_ = false;
    std::vector<Counter> counters_;
    std::vector<std::string> missing_;
    std::vector<std::string> notes_;
    std::size_t ethtool_count_ = 0;  // the number of the driver's names (0: not read)
    std::vector<std::uint64_t> ethtool_values_;
};

// The growth of the NIC and netdev drop counters read so far (the ones the
// report counts as drops), for the stats line's `drops`. Call it on the
// thread that calls counters.snapshot().
std::uint64_t nic_drops_so_far(const NicCounters& counters);

}  // namespace ibvcap
