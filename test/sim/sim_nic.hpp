// A simulated mlx5 NIC behind the verbs seam (docs/architecture.md, "The verbs seam"). It models
// mlx5 as rdma-core's provider (providers/mlx5/) and the kernel's mlx5_ib driver
// (drivers/infiniband/hw/mlx5/) behave, not as ibvcap would like them to; each behaviour names the
// file that shows it (docs/operations.md, "What the engine relies on", lists them with what the
// acceptance run checks):
//   * a frame is steered to the QP whose flow rule matches it exactly
//     (destination MAC, IPv4 destination, optional IPv4 source, UDP port);
//     frames no rule matches go to the kernel and are only counted
//     (kernel mlx5/fs.c: NORMAL rules in the bypass namespace);
//   * the QP's oldest posted receive WR takes the frame: the data segments
//     are filled in order, SGE0 completely before SGE1, and a zero-length SGE
//     is skipped, never written nor checked (rdma-core mlx5/qp.c
//     mlx5_post_recv: `if (!length) continue`); the completion reports
//     byte_len (mlx5/cq.c: byte_cnt);
//   * many rules may steer to one QP: each is its own flow-table entry whose
//     destination is the QP's TIR (kernel mlx5/fs.c create_flow_rule: the raw
//     QP's rq.tirn), so a shared QP costs one entry per rule, as a QP per
//     rule does; the table every verbs multicast rule shares holds 2^16
//     entries (SimConfig::flow_table_entries);
//   * a rule may carry a flow tag (below 2^24, kernel mlx5/fs.c
//     parse_flow_attr), which its completions carry; a tag unlike that of
//     an entry of the same match is refused with EEXIST (fs_core.c
//     check_conflicting_ftes);
//   * what a completion carries in its qpn field: on success the flow tag,
//     0 for verbs rules without a tag action (mlx5/cq.c mlx5_cq_read_wc_qp_num and
//     mlx5_cq_read_flow_tag read the same sop_drop_qpn bits; kernel
//     include/linux/mlx5/fs.h MLX5_FS_DEFAULT_FLOW_TAG 0); on an error
//     completion the QP's number (mlx5dv.h mlx5_err_cqe s_wqe_opcode_qpn).
//     The QP is found from the wr_id alone;
//   * a frame larger than the posted SGEs completes with LOC_LEN_ERR: the WR
//     is consumed and the QP stays ready (rdma-core mlx5/cq.c maps
//     LOCAL_LENGTH_ERR to IBV_WC_LOC_LEN_ERR; kernel commit 187a9830c921
//     "the RQ is not actually in ERR state");
//   * an SGE outside the memory region of its lkey completes with
//     LOC_PROT_ERR and moves the QP to the error state;
//   * no posted WR: the frame is dropped and counted in out_of_buffer
//     (kernel mlx5/counters.c basic_q_cnts; the raw QP's RQ is bound to the
//     port's counter set at RESET→INIT in mlx5/qp.c);
//   * a QP that is not in RTR receives nothing (frames count as
//     out_of_buffer): rdma-core mlx5/qp.c rings the receive doorbell of a
//     raw-packet QP only from RTR on;
//   * a QP in the error state flushes its posted WRs with WR_FLUSH_ERR and
//     every WR posted later (kernel mlx5/qp.c create_raw_packet_qp_rq sets
//     flush_in_error_en); RESET discards posted WRs without completions and
//     removes the QP's completions still in the CQ (rdma-core mlx5/verbs.c
//     mlx5_modify_qp → mlx5_cq_clean), unless SimConfig says otherwise;
//   * completion timestamps in the format the CQ asked for, refused where the
//     device's clock mode lacks it (see SimConfig::ts_free_running);
//   * a counted flow rule may be refused at creation even though counters
//     can be created and attached (rdma-core mlx5/verbs.c
//     mlx5_attach_counters_point_flow is bookkeeping in user space only);
//   * queues get the sizes mlx5 gives them, at least those asked for: a CQ
//     rounded to a power of two less one, a receive queue to a power of two
//     (rdma-core providers/mlx5/verbs.c create_cq, mlx5_calc_rq_size);
//   * a full CQ overruns: the completion is lost and a cq_error event raised
//     (kernel mlx5/cq.c mlx5_ib_cq_event turns the firmware's
//     MLX5_EVENT_TYPE_CQ_ERROR into IB_EVENT_CQ_ERR for the CQ's owner);
//   * faults are injected from outside: QP error, port down/up (also of a
//     port the capture does not use), device fatal, a corrupted wr_id; each
//     raises the async event real hardware raises. Port and device events
//     reach every open device handle, QP and CQ events only the handle that
//     made the object (kernel drivers/infiniband/core/uverbs_main.c:
//     ib_uverbs_init_async_event_file registers ib_uverbs_event_handler for
//     each open file, which takes the device's unaffiliated events;
//     ib_uverbs_qp_event_handler and ib_uverbs_cq_event_handler queue on the
//     object's own file). A frame
//     sent while the link is down never arrives, and is counted by no
//     counter of the port (link_down_lost is the simulation's own).
// Thread-safe: the wire side (deliver, faults) may run on another thread than
// the engine's poll loop.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "formats/bytes.hpp"
#include "lib/host/phc.hpp"
#include "lib/sources/verbs/seam.hpp"

namespace ibvcap::sim {

struct SimConfig {
    std::string name = "sim_mlx5_0";
    std::uint8_t port = 1;
    std::string netdev = "sim0";
    std::uint32_t max_qp_wr = 32768;
    std::uint32_t max_cqe = 4194303;
    std::uint32_t max_sge = 30;
    // The other limits ibv_query_device reports, as a ConnectX-6 does
    // (`ibv_devinfo -vv`, firmware 20.37; kernel drivers/infiniband/hw/mlx5/
    // main.c mlx5_ib_query_device: max_mr_size = ~0, the rest 1 << the
    // firmware's log_max_qp, log_max_cq, log_max_mkey, log_max_pd).
    std::uint32_t max_qp = 131072;
    std::uint32_t max_cq = 16777216;
    std::uint32_t max_mr = 16777216;
    std::uint32_t max_pd = 8388608;
    std::uint64_t max_mr_size = ~std::uint64_t{0};
    bool raw_packet_qp = true;
    bool flow_steering = true;
    bool completion_timestamps = true;  // the device advertises them (ibv_query_device_ex)
    // The timestamp formats the device's queues take, as mlx5 firmware sets
    // them (kernel drivers/infiniband/hw/mlx5/qp.c get_ts_format, from the
    // rq_ts_format capability): free-running only (the default, ConnectX-4/5),
    // real-time only (ConnectX-6 Dx/7 with the real-time clock enabled), or
    // both. A CQ asking for device ticks is accepted, then the QP refused
    // with EOPNOTSUPP when the device has no free-running format; a CQ asking
    // for wall-clock ns gets the real-time format where there is one, else a
    // conversion of free-running ticks through the kernel's clock-info page
    // (rdma-core providers/mlx5/verbs.c create_cq, mlx5/cq.c
    // mlx5_cq_fill_pfns), else EOPNOTSUPP.
    bool ts_free_running = true;
    bool ts_real_time = false;
    // Whether the kernel mapped its clock-info page for the context (it does
    // not where the device reports no clock frequency). Without it a
    // wall-clock CQ converting free-running ticks is refused at create
    // (rdma-core providers/mlx5/cq.c mlx5_cq_fill_pfns: EOPNOTSUPP), and a
    // real-time one is made but every ibv_start_poll that finds a completion
    // fails with EINVAL, the completion consumed (cq.c mlx5_start_poll with
    // clock_update; mlx5.c _mlx5dv_get_clock_info: `if (!ci) return EINVAL`;
    // cons_index is given back for EBUSY only). verbs-mlx5-2.md N3.
    bool clock_info_page = true;
    // The rdma-core release the simulated provider behaves as
    // (DeviceCaps::provider_release): before 55 a completion consumed by the
    // failed start_poll above leaves its QP's receive tail behind, and every
    // later completion of that QP carries the previous WR's wr_id until the
    // QP is reset (verbs-mlx5-3.md R5; Debian 12 ships 44).
    std::uint32_t provider_release = 56;
    // What mlx5dv_query_device says of the real-time format, where it is not
    // what the queues do (a driver that reports one format and a NIC that
    // writes another): tests of the engine's check of the first stamp. By
    // default the truth: completion_timestamps && ts_real_time.
    std::optional<bool> reports_real_time_ts;
    bool flow_counters = true;  // counters can be created and attached (the probe)
    // How many counted flow rules the device grants before it refuses one at
    // ibv_create_flow (EOPNOTSUPP); 0 refuses every counted rule.
    std::uint32_t counted_rule_limit = 0xffffffffu;
    // The flow-table entries every verbs multicast rule of the device shares
    // (kernel drivers/infiniband/hw/mlx5/fs.c: one auto-grouped table of
    // MLX5_FS_MAX_ENTRIES = 2^16 at MLX5_IB_FLOW_MCAST_PRIO); rules of one
    // match share an entry. The next distinct match is refused with ENOSPC.
    std::uint32_t flow_table_entries = 65536;
    // RESET removes the QP's completions still in the CQ, as mlx5 does. A
    // provider that did not would leave completions of the old ring behind,
    // which the engine's ring generation tells apart (tests only).
    bool cq_clean_on_reset = true;
    std::uint64_t clock_khz = 1'000'000;  // 1 GHz: one tick per nanosecond
    std::uint64_t host_time_base_ns = 1'767'225'600'000'000'000ull;  // 2026-01-01
    // The NIC's clocks against the host's (docs/operations.md, "Time"; the
    // model of test/sim/sim_phc.hpp). Time starts at host_time_base_ns with
    // device clock 0, when the driver loads; CLOCK_REALTIME is true UTC.
    //   * The oscillator runs fast by drift_ppb: the device clock counts
    //     clock_khz × (1 + drift) ticks per true second, which is what makes
    //     a conversion at the nominal hca_core_clock drift.
    //   * The PHC (the wall-clock CQEs' time; the clock-info page's
    //     conversion in free-running mode, rdma-core mlx5/cq.c
    //     mlx5dv_ts_to_ns) is set to the host's time + phc_offset_ns at load
    //     (kernel mlx5/core/lib/clock.c mlx5_init_timer_clock:
    //     ktime_get_real, once) and counts the oscillator at its nominal
    //     rate, so it drifts with it; ptp4l makes it run TAI (offset 37 s).
    //   * phc_disciplined: a daemon dialled the PHC's frequency to cancel the
    //     drift (mlx5_ptp_adjfine), so it runs at the true rate and its
    //     dialled frequency is −drift_ppb.
    //   * phc_read_ns: what one bracketed read costs: the PHC (or the device
    //     clock, for ibv_query_rt_values_ex) is latched somewhere inside a
    //     bracket this wide (a PCIe read: mlx5_ptp_gettimex reads the timer
    //     between ptp_read_system_prets and _postts); every seventh read of a
    //     PTP_SYS_OFFSET_EXTENDED batch is disturbed and ten times as wide.
    // The defaults (0) are the simulation before the model: PHC = host time.
    std::int64_t drift_ppb = 0;
    std::int64_t phc_offset_ns = 0;
    bool phc_disciplined = false;
    std::uint32_t phc_read_ns = 0;
    // Benchmarks only (bench/bench_engine.cpp): the bytes of SGE1 and later are
    // not written, as when the payload slot is in GPU memory, whose DMA costs
    // the NIC, not the CPU. Completions are unchanged (byte_len is the whole
    // frame); the payload slots keep whatever they held.
    bool skip_payload_dma = false;
    // Benchmarks only: every line the NIC writes (the SGEs it fills, the
    // CQE) is flushed from this CPU's caches (clflush) after the write, so
    // the engine finds it in memory, as after a real NIC's DMA without DDIO;
    // and so are the lines of the wire frame the simulation read to match
    // and copy it, which a real NIC takes off the wire. The simulated NIC
    // runs on the poll core, so without this its work sits in (and evicts
    // from) that core's L1/L2, which a real NIC's never does (bench_engine,
    // BM_EngineGroups/.../dma:1, BM_EngineStreams). What it still leaves
    // there is its own bookkeeping (rules, rings: a few KiB).
    bool dma_leaves_cache = false;
};

// Counters the simulated NIC keeps, as an mlx5 port would show them under
// /sys/class/infiniband/<dev>/ports/<port>/hw_counters and ethtool -S.
struct SimCounters {
    std::uint64_t rx_frames = 0;       // frames that arrived at the port while up
    std::uint64_t steered = 0;         // matched a flow rule
    std::uint64_t unmatched = 0;       // no rule matched: to the kernel
    std::uint64_t out_of_buffer = 0;   // matched, but no WR posted / QP not ready
    std::uint64_t link_down_lost = 0;  // sent while the port was down (never arrived)
    std::uint64_t cq_overruns = 0;     // completions lost to a full CQ
    std::uint64_t completions = 0;     // completions of any status
    // The simulation's own: calls to post_recv, whatever their WR count. Each
    // is one lock and one "doorbell" here, as on mlx5 (see post_recv in
    // test/sim/sim_nic.cpp), so the engine's re-post cost is per call.
    std::uint64_t post_recv_calls = 0;
};

class SimHardware;

// Lists and opens simulated devices. Tests keep the shared_ptr<SimHardware>
// to play the wire and inject faults while the engine uses the Device.
class SimProvider : public verbs::Provider {
  public:
    std::shared_ptr<SimHardware> add(SimConfig config);
    std::vector<std::string> device_names() override;
    std::unique_ptr<verbs::Device> open(const std::string& name, std::uint8_t port) override;

  private:
    std::vector<std::shared_ptr<SimHardware>> devices_;
};

class SimHardware {
  public:
    explicit SimHardware(SimConfig config);
    ~SimHardware();
    SimHardware(const SimHardware&) = delete;
    SimHardware& operator=(const SimHardware&) = delete;

    const SimConfig& config() const { return config_; }

    // The wire: one Ethernet frame arrives at the port. Its completion
    // timestamp is the device clock, which advances `ticks` per frame.
    void deliver(Bytes frame, std::uint64_t ticks = 1000);

    // Faults.
    void inject_qp_error(std::uint32_t qp_num);  // QP → error, flush, qp_fatal event
    void set_port_up(bool up);                   // port_error / port_active events
    // A port event for another port of the device (a dual-port HCA): it
    // reaches every open handle, as every ibv_context gets port events.
    void raise_port_event(std::uint8_t port, bool up);
    // QPs → error (every WR flushed) and the device_fatal event. The kernel
    // dispatches that event from a work item (drivers/infiniband/hw/mlx5/
    // main.c: mlx5_ib_event queues mlx5_ib_handle_event on mlx5_ib_event_wq),
    // so a poll loop may see the flushes first: with `announce` false the
    // event waits for announce_device_fatal().
    // The flushes are the harsher of the two things hardware may do: for a
    // user-space QP mlx5 makes no flush completions of its own after an
    // internal error (main.c mlx5_ib_handle_internal_error only runs the
    // completion handlers of kernel consumers, whose mlx5_ib_poll_cq then
    // makes software flushes; rdma-core's mlx5_async_event only sets
    // MLX5_CTX_FLAGS_FATAL_STATE), so on a real device the CQ holds what the
    // hardware wrote before it stopped, flushes or none. The engine must take
    // either; the simulation gives the case that exercises recovery.
    void raise_device_fatal(bool announce = true);
    void announce_device_fatal();
    void corrupt_next_wr_id(std::uint64_t wr_id);  // the next completion carries it
    // The next frame that reaches a posted WR completes with `status` instead:
    // the WR is consumed, byte_len is 0 (ibv_poll_cq(3): of an error
    // completion only wr_id, status, qp_num and vendor_err are valid), and a
    // status that puts the QP in error (verbs::qp_in_error) does so, flushing
    // the rest of its WRs. mlx5 reports these from an error CQE's syndrome
    // (rdma-core providers/mlx5/cq.c mlx5_handle_error_cqe: LOCAL_QP_OP_ERR,
    // LOCAL_PROT_ERR, ..., any other syndrome as IBV_WC_GENERAL_ERR).
    void fail_next_frame(verbs::WcStatus status);
    // The next successful completion reports `byte_len` instead of the
    // frame's length: a length the engine must not trust (docs/architecture.md,
    // "Nothing from the wire is trusted").
    void corrupt_next_byte_len(std::uint32_t byte_len);
    // The next successful completion carries flow tag `tag` instead of its
    // rule's (a tag another process's rule of the same match set, or a
    // corrupted one): the engine must range-check it.
    void corrupt_next_flow_tag(std::uint32_t tag);
    // The next `frames` steered frames find no receive WR posted, as when the
    // poll thread falls behind: each is dropped and counted in out_of_buffer
    // ("the number of times the receive queue had no software buffers
    // allocated for the adapter's incoming traffic": the kernel's
    // Documentation/networking/device_drivers/ethernet/mellanox/mlx5/
    // counters.rst).
    void withhold_buffers(std::uint64_t frames);
    // The wire in time with the poll loop: `hook` runs after every poll of a
    // CQ of this device, told whether the poll found nothing, and may
    // deliver(). It plays what a real port does between two polls: a frame
    // steered (its rule counted) just after a poll found the CQ empty, or a
    // switch that goes on forwarding after the leave (RFC 2236 §8.8/§8.9,
    // RFC 3376 §8.8: snooping keeps a group for its last-member queries).
    // Set before the engine polls; null removes it.
    void on_poll(std::function<void(bool empty)> hook);

    SimCounters counters() const;
    // Packets matched by the rules that carry a counter, summed.
    std::uint64_t flow_counter_total() const;
    std::size_t posted_wrs(std::uint32_t qp_num) const;  // WRs waiting on a QP
    // The fewest WRs posted on any QP (0 without QPs): a test's wire waits for
    // this to be non-zero to play a lossless sender, whatever the scheduler does.
    std::size_t min_posted_wrs() const;
    std::size_t flows() const;  // rules alive
    std::size_t qps() const;    // QPs alive
    // Objects destroyed out of order, which verbs refuses with EBUSY: a QP
    // with flows still attached, a CQ with QPs still attached, a device
    // handle with memory regions, CQs or QPs still alive.
    std::size_t ordering_violations() const;
    // Completions polled with a previous WR's wr_id (SimConfig::
    // provider_release before 55, after a clock-page failure).
    std::uint64_t shifted_wr_ids() const;

    // Write hw_counters files the way mlx5 lays them out:
    // root/<name>/ports/<port>/hw_counters/{out_of_buffer,...} and
    // root/<name>/ports/<port>/state; for the counters reader's tests.
    void write_sysfs(const std::filesystem::path& root) const;

    // The clock model (SimConfig::drift_ppb): time passes with no frame.
    void advance_clock(std::uint64_t ticks);
    std::uint64_t clock_ticks() const;
    // True UTC (the host's CLOCK_REALTIME) when the device clock read
    // `ticks`, and the PHC then (ns since the epoch).
    std::int64_t host_time_ns(std::uint64_t ticks) const;
    std::int64_t phc_time_ns(std::uint64_t ticks) const;
    // One PTP_SYS_OFFSET_EXTENDED of the PHC now: out.size() reads back to
    // back (each starts phc_read_ns after the last), each (host before, PHC,
    // host after) with the PHC latched inside (SimConfig::phc_read_ns).
    // Fails (0) after fail_phc_reads(). test/sim/sim_phc.hpp wraps it.
    std::size_t read_phc(std::span<PhcSample> out);
    void fail_phc_reads(std::uint64_t reads);

    // Used by the Device handle (test/sim/sim_nic.cpp); not for tests.
    struct State;
    State& state() { return *state_; }

  private:
    SimConfig config_;
    std::unique_ptr<State> state_;
};

}  // namespace ibvcap::sim
