// Internal to the libibverbs provider (lib/sources/verbs/ibv.cpp and
// ibv_queues.cpp): the parts that do not need a device — status and event
// mapping, the flow-rule layout, the receive-WR chain, QP transitions, error
// hints — defined in ibv_logic.cpp so that they can be unit tested on hosts
// without RDMA hardware (test/test_verbs_ibv.cpp). Nothing outside the
// provider and its test includes this header.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "lib/sources/verbs/seam.hpp"

namespace ibvcap::verbs::ibv_logic {

// --- Completions and events -------------------------------------------------

// ibv_wc_status → WcStatus: the four statuses of docs/architecture.md, "QP error recovery", keep
// their names; every other status (remote errors cannot happen on a receive-only raw-packet QP;
// GENERAL_ERR, FATAL_ERR, ...) is `other`.
WcStatus map_wc_status(ibv_wc_status status);

// ibv_event_type → EventKind. QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR and WQ_FATAL
// are all `qp_fatal`: each leaves the queue in the error state.
EventKind map_event_kind(ibv_event_type type);

// The whole event, read before it is acknowledged: qp_num from element.qp for
// QP-affiliated events; 0 for WQ_FATAL (ibvcap creates no WQs, so a WQ number
// names none of its QPs); the port for port-affiliated events; name from
// ibv_event_type_str().
AsyncEvent map_event(const ibv_async_event& event);

// --- Flow rules ---------------------------------------------------------------

// One flow rule as ibv_create_flow() takes it: the attribute header followed
// immediately by the specs. libibverbs walks the specs by their `size` fields
// (ibv_cmd_create_flow), so there must be no gap between them. ibv_flow_attr is
// 20 bytes and the specs 40, 24, 16 and 16, so from an 8-byte aligned start
// every spec would sit at 4 modulo 8, and the counter action holds a pointer.
// The leading 4-byte pad puts the attribute at offset 4 so that every spec,
// the counter action included, starts 8-byte aligned without
// __attribute__((packed)); the static_asserts in ibv_logic.cpp check the
// layout. A plain aggregate (no member initialisers) so that build_flow_rule()
// can zero it whole, padding included, as ibv_create_flow(3) asks. Pass
// &rule.attr to ibv_create_flow().
struct alignas(8) FlowRule {
    std::uint32_t lead_pad;
    ibv_flow_attr attr;
    ibv_flow_spec_eth eth;
    ibv_flow_spec_ipv4 ipv4;
    ibv_flow_spec_tcp_udp udp;
    // The actions follow the matches, each right after the one before: the
    // count action when there are counters, then the tag action when the
    // match asks for a tag (FlowMatch::tag). A tag without a count action
    // takes the count's place (lone_tag).
    union {
        ibv_flow_spec_counter_action count;
        ibv_flow_spec_action_tag lone_tag;
    };
    ibv_flow_spec_action_tag tag;  // after the count action
    // The tag action, where it is (null: none).
    const ibv_flow_spec_action_tag* tag_spec() const;
};

// The rule for `match` on `port`: type NORMAL, priority 0, no flags; Ethernet
// destination MAC with a full mask (EtherType left unmasked: for an IPv4 spec
// the mlx5 kernel driver adds the IPv4 EtherType match itself, and the UDP
// protocol match for a UDP spec); IPv4 destination /32, and source /32
// when match.src_ip != 0; UDP destination port with a full mask; and, when
// `counters` is not null, a count action naming it. Addresses and ports are
// stored in network byte order, as ibv_create_flow(3) requires. A match with
// a tag gets a tag action last (IBV_FLOW_SPEC_ACTION_TAG, tag_id = the tag).
FlowRule build_flow_rule(const FlowMatch& match, std::uint8_t port, ibv_counters* counters);

// --- Receive work requests ------------------------------------------------------

// Whether ibv_post_recv can take `request`: num_sge 1 or 2.
bool valid_request(const RecvRequest& request);

// How many receive WRs one ibv_post_recv() call carries: the WR and SGE arrays
// live on the stack (4 KiB), so posting allocates nothing.
inline constexpr std::size_t kPostChunk = 64;

// Fills wrs[0..n) and sges[0..2n) from requests[0..n), n = min(requests.size(),
// wrs.size(), sges.size() / 2), linked through `next` with the last one's next
// null; returns n. Throws std::system_error(EINVAL) naming the wr_id of a
// request whose num_sge is not 1 or 2.
std::size_t build_recv_chain(std::span<const RecvRequest> requests, std::span<ibv_recv_wr> wrs,
                             std::span<ibv_sge> sges);

// --- Completion queues, queue pairs, memory -------------------------------------

// The access flags of every memory region: local write (the NIC's DMA
// target) and PCIe relaxed ordering. Relaxed ordering is an optional flag
// (verbs.h IBV_ACCESS_OPTIONAL_FIRST): libibverbs and the kernel drop it where
// the device or platform cannot honour it, so asking never fails a
// registration (ibv_reg_mr(3)); spead2 asks for it by default.
inline constexpr int kMrAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING;

// ibv_create_cq_ex attributes for a CQ of `depth` entries whose completions
// carry `timestamps`: byte_len always; never the qpn field (on an mlx5
// raw-packet QP it is the flow tag, lib/sources/verbs/seam.hpp Completion::qp_num);
// IBV_WC_EX_WITH_COMPLETION_TIMESTAMP for device ticks (the kernel then asks
// for the free-running format), IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK
// alone for wall-clock ns (mlx5 then asks for the real-time format where the
// device has it, rdma-core providers/mlx5/verbs.c create_cq). With
// `single_threaded`, IBV_CREATE_CQ_ATTR_SINGLE_THREADED: one thread polls
// each CQ, so the provider may skip its CQ lock (mlx5: MLX5_CQ_FLAGS_SINGLE_THREADED).
// With `flow_tags`, IBV_WC_EX_WITH_FLOW_TAG (mlx5 has it:
// providers/mlx5/verbs.c CREATE_CQ_SUPPORTED_WC_FLAGS).
ibv_cq_init_attr_ex cq_init_attr(std::uint32_t depth, TimestampFormat timestamps,
                                 bool single_threaded, bool flow_tags = false);

// ibv_create_qp attributes of a receive-only raw-packet QP on `cq`: no send
// queue (max_send_wr = 0; the kernel creates the TIS and SQ of a raw-packet
// QP only when it has send WRs, drivers/infiniband/hw/mlx5/qp.c
// create_raw_packet_qp; spead2 does the same), `depth` receive WRs of
// `max_sge` SGEs.
ibv_qp_init_attr raw_qp_init_attr(ibv_cq* cq, std::uint32_t depth, std::uint32_t max_sge);

// What ibv_start_poll's return means (ibv_create_cq_ex(3)): 0 a completion
// is ready; ENOENT the CQ is empty; EBUSY, with wall-clock timestamps, the
// clock information is being updated and the poll should simply be retried
// (rdma-core providers/mlx5/cq.c mlx5_start_poll; no ibv_end_poll either
// way); EINVAL, with wall-clock timestamps, the clock-info page cannot be
// read (mlx5.c _mlx5dv_get_clock_info: not mapped), a completion was consumed
// and the CQ must be polled without its clock (verbs-mlx5-2.md N3); anything
// else is an error.
enum class PollStart : std::uint8_t { ready, empty, retry, no_clock, error };
PollStart classify_start_poll(int rc, TimestampFormat timestamps);

// The rdma-core release a provider library file belongs to, from its real
// file name: rdma-core names each provider libNAME.so.1.<ABI>.<PACKAGE_VERSION>
// (providers/mlx5/CMakeLists.txt rdma_shared_provider(mlx5 ... 1
// 1.24.${PACKAGE_VERSION}); Debian 12's is libmlx5.so.1.24.44.0), so
// "…/libmlx5.so.1.24.44.0" is 44. 0 when the name does not say (a library
// built another way): the caller then assumes the oldest behaviour.
std::uint32_t provider_release_of(std::string_view real_path);

// ibv_reg_dmabuf_mr, looked up at run time (dlvsym, version IBVERBS_1.12):
// it first shipped in rdma-core 34 (libibverbs/libibverbs.map.in), and a
// direct call would stop the binary from loading on older hosts. nullptr
// when this libibverbs lacks it.
using RegDmabufMrFn = ibv_mr* (*)(ibv_pd*, std::uint64_t, std::size_t, std::uint64_t, int, int);
RegDmabufMrFn reg_dmabuf_mr_symbol();

// --- Queue-pair state ---------------------------------------------------------

ibv_qp_state to_ibv(QpState state);
// IBV_QPS_RESET/INIT/RTR/ERR → QpState; anything else (RTS, SQD, SQE,
// UNKNOWN) → nullopt, since ibvcap never moves a QP there.
std::optional<QpState> from_ibv(ibv_qp_state state);

// The ibv_modify_qp() attribute mask for a transition of a raw-packet QP
// (ibv_modify_qp(3)): RESET → INIT needs IBV_QP_STATE | IBV_QP_PORT, INIT → RTR
// IBV_QP_STATE; any state → RESET or ERROR IBV_QP_STATE. nullopt for a
// transition verbs does not allow (RESET → RTR, RTR → INIT, ERROR → INIT, ...).
std::optional<int> modify_mask(QpState from, QpState to);

// --- Errors -------------------------------------------------------------------

// Whether `err` says the device or provider lacks a feature (EOPNOTSUPP,
// ENOTSUP, ENOSYS), as opposed to a real failure.
bool unsupported(int err);

// The verbs calls whose failures have a known fix.
enum class Call : std::uint8_t {
    get_device_list,
    open_device,
    create_cq,
    create_qp,
    create_flow,
    create_counters,
    attach_counters,
    reg_mr,
    reg_dmabuf_mr,
};

// The one-line fix for `err` from `call`, or "" when there is none to give.
// `exe_path` is the running program (for the setcap command line).
std::string error_hint(Call call, int err, std::string_view exe_path);

// The exception every failure becomes: code `err` in the generic category,
// message "<what>: <hint>" (or "<what>" without a hint); std::system_error
// appends ": <strerror>".
std::system_error verbs_error(int err, std::string_view what, std::string_view hint = {});

// The error code of a verbs call that returned `rc`: int-returning verbs
// return the errno value itself; a few return -1 (or another negative value)
// and set errno. Falls back to EIO when neither says (call with errno cleared
// before the verbs call).
int error_code(int rc);
// The errno after a verbs call that returned NULL, EIO when it was not set.
int null_errno();

// "ENODEV" message for open(): names the device asked for and those present.
std::string missing_device_message(std::string_view name, const std::vector<std::string>& present);

// --- Clocks and timeouts --------------------------------------------------------

// ibv_values_ex::raw_clock as a tick count. mlx5 (and mlx4) put the raw cycle
// count in tv_nsec with tv_sec = 0, so tv_nsec may exceed 1e9; a provider that
// normalises would split it into seconds, hence tv_sec·1e9 + tv_nsec.
std::uint64_t raw_clock_ticks(const timespec& raw_clock);
std::uint64_t timespec_ns(const timespec& t);
// The midpoint of two host readings taken around a device reading.
std::uint64_t midpoint_ns(std::uint64_t before, std::uint64_t after);

// A poll(2) timeout: negative → 0, beyond INT_MAX → INT_MAX.
int poll_timeout_ms(std::chrono::milliseconds timeout);

}  // namespace ibvcap::verbs::ibv_logic
