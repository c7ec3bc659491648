// The verbs seam (docs/architecture.md, "The verbs seam"): the narrow interface the capture engine
// is written against. Two implementations exist:
//   * lib/sources/verbs/ibv.cpp — libibverbs on real hardware (mlx5 raw-packet QPs);
//   * test/sim/sim_nic.cpp   — a simulated NIC, faithful to verbs semantics, for
//                         tests and benchmarks on hosts without RDMA devices.
// The engine (lib/sources/verbs/engine.cpp) is the same code in both cases.
//
// Objects are owned by std::unique_ptr and destroyed in reverse order of
// creation by their owners: flows before their QP, QPs before their CQ, memory
// regions before the device. Errors are thrown as std::system_error whose
// message names the verbs call and, where one is known, the fix.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace ibvcap::verbs {

// One scatter/gather element: `length` bytes at `addr`, registered under `lkey`.
struct Sge {
    std::uint64_t addr = 0;
    std::uint32_t length = 0;
    std::uint32_t lkey = 0;
};

// A receive work request with one or two SGEs. With two, the NIC fills SGE0
// completely before it writes SGE1 (the header/payload split).
struct RecvRequest {
    std::uint64_t wr_id = 0;
    std::array<Sge, 2> sge{};
    std::uint8_t num_sge = 1;
};

enum class WcStatus : std::uint8_t {
    success,
    loc_len_err,    // the packet was larger than the posted SGEs; WR consumed
    loc_qp_op_err,  // QP-level error: the QP is in error
    loc_prot_err,   // an SGE does not match its memory region: the QP is in error
    wr_flush_err,   // the QP is in error and flushed this WR
    other,
};
const char* to_string(WcStatus status);
// True when the status means the QP moved to the error state
// (docs/architecture.md, "QP error recovery").
bool qp_in_error(WcStatus status);

// What a completion's timestamp means (the CQ's TimestampFormat):
//   device_ticks — the NIC's free-running counter, converted by the engine
//                  with hca_core_clock and a clock pair resynced each second;
//   wallclock_ns — what ibv_wc_read_completion_wallclock_ns returns: on a
//                  device without the real-time format, nanoseconds since
//                  the Unix epoch, converted by the provider from
//                  free-running ticks through the kernel's clock-info page;
//                  on one with it (DeviceCaps::real_time_ts), the raw CQE
//                  field, seconds << 32 | nanoseconds, which the engine
//                  decodes (verbs-mlx5-3.md R1);
//   none         — no hardware timestamp: the engine stamps CLOCK_REALTIME
//                  when it polls.
enum class TimestampFormat : std::uint8_t { none, device_ticks, wallclock_ns };
const char* to_string(TimestampFormat format);

struct Completion {
    std::uint64_t wr_id = 0;  // the only field that says which QP and slot (see qp_num)
    WcStatus status = WcStatus::success;
    std::uint32_t vendor_err = 0;
    std::uint32_t byte_len = 0;  // valid for success only
    // The CQE's 24-bit qpn field as the provider reports it, for diagnostics
    // only. It does NOT identify the QP of a raw-packet receive: on mlx5 a
    // successful receive carries the flow tag there (rdma-core
    // providers/mlx5/cq.c: mlx5_cq_read_wc_qp_num and mlx5_cq_read_flow_tag
    // read the same sop_drop_qpn bits; verbs flow rules carry tag 0, kernel
    // include/linux/mlx5/fs.h MLX5_FS_DEFAULT_FLOW_TAG). The extended CQ of
    // lib/sources/verbs/ibv.cpp does not even ask for it (0 there).
    std::uint32_t qp_num = 0;
    // The flow tag of the rule that steered a successful receive (24 bits;
    // 0: the rule had none), when the CQ was made with flow_tags: the
    // hardware's word for which group a frame of a shared QP came by
    // (rdma-core providers/mlx5/cq.c mlx5_cq_read_flow_tag: sop_drop_qpn &
    // MLX5_FLOW_TAG_MASK). Like everything from the wire, range-checked.
    std::uint32_t flow_tag = 0;
    std::uint64_t hw_timestamp = 0;  // in the CQ's TimestampFormat, when has_timestamp
    bool has_timestamp = false;
};

// An exact match on a UDP multicast stream (docs/architecture.md, "The data path"): Ethernet
// destination (01:00:5e + low 23 bits of the group), IPv4 destination /32, optionally IPv4 source
// /32 (one antenna, --hw-demux), UDP destination port.
struct FlowMatch {
    std::array<std::uint8_t, 6> dst_mac{};
    std::uint32_t dst_ip = 0;  // host byte order
    std::uint32_t src_ip = 0;  // host byte order; 0 = any source
    std::uint16_t dst_port = 0;
    // With match_vlan, only frames whose outer tag is an 802.1Q (C-VLAN) tag
    // of this id (kernel drivers/infiniband/hw/mlx5/fs.c parse_flow_attr: an
    // ETH spec's vlan_tag mask sets cvlan_tag and first_vid). Without it the
    // rule matches tagged and untagged frames alike (no VLAN criterion).
    bool match_vlan = false;
    std::uint16_t vlan_id = 0;
    // Not a match: the rule's flow tag action (ibv_flow_spec_action_tag),
    // which every completion of a frame it steers carries (Completion::
    // flow_tag). 0: no tag action. The kernel takes tags below 2^24 (mlx5
    // fs.c parse_flow_attr: EINVAL otherwise), and refuses a tag on a rule
    // whose match an existing entry has with another tag (fs_core.c
    // check_conflicting_ftes: EEXIST).
    std::uint32_t tag = 0;
};

enum class QpState : std::uint8_t { reset, init, rtr, error };
const char* to_string(QpState state);

enum class EventKind : std::uint8_t {
    port_active,
    port_error,
    qp_fatal,  // IBV_EVENT_QP_FATAL, WQ_FATAL, QP_REQ_ERR, QP_ACCESS_ERR
    cq_error,
    device_fatal,
    other,
};
const char* to_string(EventKind kind);

struct AsyncEvent {
    EventKind kind = EventKind::other;
    std::uint32_t qp_num = 0;  // for qp_fatal
    std::uint8_t port = 0;     // for port_active / port_error
    std::string name;          // the verbs event name, for the log
};

struct DeviceCaps {
    std::string name;  // "mlx5_0"
    std::uint8_t port = 1;
    std::uint32_t max_qp_wr = 0;
    std::uint32_t max_cqe = 0;
    std::uint32_t max_sge = 0;
    // Further limits of ibv_query_device(3), for the report's resource
    // accounting and `ibvcap devices -v` (0: not reported).
    std::uint32_t max_qp = 0;
    std::uint32_t max_cq = 0;
    std::uint32_t max_mr = 0;
    std::uint32_t max_pd = 0;
    std::uint64_t max_mr_size = 0;  // bytes one memory region may cover
    bool raw_packet_qp = false;     // link layer Ethernet and raw-packet QPs supported
    bool flow_steering = false;     // IBV_DEVICE_MANAGED_FLOW_STEERING
    bool completion_timestamps = false;
    std::uint64_t hca_core_clock_khz = 0;  // tick rate of completion timestamps
    // Wall-clock completion timestamps are the real-time clock's raw CQE
    // field, seconds << 32 | nanoseconds, not nanoseconds: mlx5dv_query_device
    // reports MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS (the kernel's
    // set_ucontext_resp sets it where the SQ, RQ and QP take the real-time
    // format), and then rdma-core's read_completion_wallclock_ns is the raw
    // field (providers/mlx5/cq.c mlx5_cq_fill_pfns; commit 0c40d5351). The
    // engine decodes it (lib/sources/verbs/nic_clock.hpp, real_time_to_ns).
    bool real_time_ts = false;
    // The rdma-core release of the provider library in use (55 for v55.0), 0
    // when it cannot be told. Before v55 (commit 7e8db6fbd) a completion the
    // provider consumed without parsing (ibv_start_poll: EINVAL on the
    // clock-info page) leaves the receive queue's tail behind, and every later
    // completion of that QP carries the previous WR's wr_id (mlx5/cq.c
    // handle_responder_lazy: wq->wrid[wq->tail]); verbs-mlx5-3.md R5.
    std::uint32_t provider_release = 0;
    bool flow_counters = false;  // ibv_create_counters + count action
};

// The device's limits as (name, value), always in this order: max_qp,
// max_qp_wr, max_sge, max_cq, max_cqe, max_mr, max_mr_size, max_pd. The names
// are those of struct ibv_device_attr.
std::vector<std::pair<std::string, std::uint64_t>> device_limits(const DeviceCaps& caps);

class Flow {
  public:
    virtual ~Flow() = default;
    // Packets the rule matched, when the rule carries a counter.
    virtual std::optional<std::uint64_t> matched_packets() = 0;
};

class MemoryRegion {
  public:
    virtual ~MemoryRegion() = default;
    virtual std::uint32_t lkey() const = 0;
};

class CompletionQueue {
  public:
    virtual ~CompletionQueue() = default;
    // Up to out.size() completions; returns how many (>= 0). Throws on a CQ
    // error. A transient "try again" from the provider (mlx5: EBUSY while the
    // kernel updates the clock-info page, ibv_create_cq_ex(3)) returns 0.
    virtual std::size_t poll(std::span<Completion> out) = 0;
    // What the timestamps of its completions mean. A wall-clock CQ whose
    // clock the provider cannot read while polling (mlx5: no clock-info page,
    // ibv_start_poll fails with EINVAL) goes on without timestamps: from then
    // on this says none (verbs-mlx5-2.md N3).
    virtual TimestampFormat timestamps() const = 0;
    // Completions the provider consumed without returning them (the failed
    // ibv_start_poll above takes the completion it found): frames lost.
    virtual std::uint64_t lost_completions() const = 0;
    // The entries the CQ has: at least the depth asked for (ibv_create_cq(3):
    // "the cqe attribute in the returned CQ" is the actual size).
    virtual std::uint32_t depth() const = 0;
};

class QueuePair {
  public:
    virtual ~QueuePair() = default;
    virtual std::uint32_t qp_num() const = 0;
    virtual QpState state() const = 0;
    // The receive WRs and SGEs per WR the QP takes, as the device made it: at
    // least what was asked for (ibv_create_qp(3) updates the cap struct
    // "with the actual QP values").
    virtual std::uint32_t recv_depth() const = 0;
    virtual std::uint32_t recv_sge() const = 0;
    // RESET → INIT → RTR, or → RESET / → ERROR. Throws std::system_error.
    virtual void modify(QpState to) = 0;
    // Post receive WRs; throws std::system_error (ENOMEM: the receive queue is
    // full) naming the first WR that was not posted.
    virtual void post_recv(std::span<const RecvRequest> requests) = 0;
    // Steer matching packets to this QP. Throws std::system_error.
    virtual std::unique_ptr<Flow> create_flow(const FlowMatch& match, bool with_counter) = 0;
};

// One reading of the device clock (ticks) between two CLOCK_REALTIME reads (ns).
struct ClockSample {
    std::uint64_t ticks = 0;
    std::int64_t host_before_ns = 0;
    std::int64_t host_after_ns = 0;
};

class Device {
  public:
    virtual ~Device() = default;
    virtual const DeviceCaps& caps() const = 0;
    // Register host memory for local write (the NIC's DMA target), with PCIe
    // relaxed ordering where the device and kernel allow it.
    virtual std::unique_ptr<MemoryRegion> register_memory(void* addr, std::size_t length) = 0;
    // Register a dma-buf (GPU memory exported by the CUDA driver) at `iova`.
    // Throws std::system_error(ENOSYS) when libibverbs is too old to have
    // ibv_reg_dmabuf_mr (rdma-core < 34): callers fall back, saying why.
    virtual std::unique_ptr<MemoryRegion> register_dmabuf(int fd, std::uint64_t offset,
                                                          std::size_t length,
                                                          std::uint64_t iova) = 0;
    // A CQ whose completions carry timestamps in `timestamps`, and, with
    // `flow_tags`, each receive's flow tag (IBV_WC_EX_WITH_FLOW_TAG). Throws
    // std::system_error with EOPNOTSUPP/ENOTSUP when the device cannot give
    // that format here; note that mlx5 may accept the CQ and refuse the QP
    // instead (create_qp), since the format is checked against the device's
    // clock mode when the queue is made.
    virtual std::unique_ptr<CompletionQueue> create_cq(std::uint32_t depth,
                                                       TimestampFormat timestamps,
                                                       bool flow_tags) = 0;
    // A receive-only raw-packet QP (no send queue) on `cq`. Throws
    // std::system_error; EOPNOTSUPP when the device's timestamp format does
    // not match the one `cq` asked for (kernel drivers/infiniband/hw/mlx5/qp.c:
    // get_ts_format).
    virtual std::unique_ptr<QueuePair> create_qp(CompletionQueue& cq, std::uint32_t depth,
                                                 std::uint32_t max_sge) = 0;
    // The next asynchronous event, waiting at most `timeout`.
    virtual std::optional<AsyncEvent> wait_event(std::chrono::milliseconds timeout) = 0;
    // The device clock now, in ticks, and the host time (ns) it corresponds to;
    // nullopt when the device cannot say.
    virtual std::optional<std::pair<std::uint64_t, std::uint64_t>> clock_pair() = 0;
    // The same reading with the CLOCK_REALTIME reads that bracket it: the
    // device clock was read somewhere between the two, so the midpoint is
    // within half the width of the host time of the read. The default has
    // no bracket (clock_pair's host time at both ends, width 0: unknown).
    virtual std::optional<ClockSample> clock_sample() {
        const auto pair = clock_pair();
        if (!pair) {
            return std::nullopt;
        }
        const auto host = static_cast<std::int64_t>(pair->second);
        return ClockSample{pair->first, host, host};
    }
};

// What lists and opens devices: libibverbs, or the simulated NIC.
class Provider {
  public:
    virtual ~Provider() = default;
    virtual std::vector<std::string> device_names() = 0;
    virtual std::unique_ptr<Device> open(const std::string& name, std::uint8_t port) = 0;
};

// The libibverbs provider (lib/sources/verbs/ibv.cpp).
std::unique_ptr<Provider> make_ibv_provider();

}  // namespace ibvcap::verbs
