// The libibverbs implementation of the verbs seam (lib/sources/verbs/seam.hpp, DESIGN §5):
// raw-packet queue pairs on NVIDIA/Mellanox mlx5 NICs (ConnectX-4 or later),
// steered by exact-match flow rules, receiving into registered host memory or
// dma-buf GPU memory, polled through an extended completion queue.
//
// Exercising it on a real mlx5 host (this file cannot be tested without one;
// test/test_verbs_ibv.cpp covers everything that does not need a device):
//   ibv_devinfo -v            the device (mlx5_0), its ports: link_layer must be
//                             Ethernet and state PORT_ACTIVE; max_qp_wr,
//                             max_cqe, max_sge are the limits checked here
//   ibvcap devices            the RDMA devices and, per device, the DeviceCaps
//                             this provider reports (DESIGN §6)
//   raw-packet QPs and flow rules need CAP_NET_RAW: run as root, or
//     sudo setcap cap_net_raw=ep /path/to/ibvcap     (lost on NFS mounts)
//   receive rings are pinned memory: ulimit -l unlimited (or a large memlock
//     limit in /etc/security/limits.conf)
//   ibvcap capture -i <netdev or IPv4> GROUP:PORT...  (--source verbs is the
//     default); the raw QPs' drops are in
//     /sys/class/infiniband/<dev>/ports/<port>/hw_counters/out_of_buffer
//     (ethtool's rx_out_of_buffer counts the kernel's rings, not ours)
//
// Ownership (RAII, std::unique_ptr with a deleter per verbs type). A Context
// holds the ibv_context and its protection domain; the Device and every object
// made from it (CQ, QP, flow rule, memory region) hold a shared_ptr to it, so
// the PD is deallocated and the context closed only after the last of them.
// A QP also holds its CQ, and a flow rule its QP, through shared handles: the
// owners are meant to destroy flows before QPs and QPs before their CQ
// (lib/sources/verbs/seam.hpp), and if they do not, the verbs objects still go in a legal
// order (ibv_destroy_cq fails while a QP uses the CQ, ibv_destroy_qp while a
// rule steers to it). Destroy calls in deleters cannot report failure; their
// result is ignored.
//
// Threads: libibverbs makes each verb thread-safe per object (post_recv locks
// the receive queue). The CQ is created single-threaded where the provider
// takes the flag (IBV_CREATE_CQ_ATTR_SINGLE_THREADED: mlx5 then polls without
// its CQ spinlock), so exactly one thread at a time may poll it: the engine's
// poll thread, or after it has stopped the thread that drains. The objects
// here add no locking: one thread drives a QP's modify()/state().

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <infiniband/verbs.h>
#include <poll.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "lib/netaddr.hpp"
#include "lib/sources/verbs/ibv_detail.hpp"
#include "lib/sources/verbs/seam.hpp"

namespace ibvcap::verbs {

// --- Pure helpers (lib/sources/verbs/ibv_detail.hpp) ----------------------------------

namespace ibv_detail {

// The flow rule must be one contiguous run of attr + specs (libibverbs walks
// the specs by their size fields), each spec naturally aligned.
static_assert(sizeof(ibv_flow_attr) == 20);
static_assert(offsetof(FlowRule, attr) == 4);
static_assert(offsetof(FlowRule, eth) == offsetof(FlowRule, attr) + sizeof(ibv_flow_attr));
static_assert(offsetof(FlowRule, ipv4) == offsetof(FlowRule, eth) + sizeof(ibv_flow_spec_eth));
static_assert(offsetof(FlowRule, udp) == offsetof(FlowRule, ipv4) + sizeof(ibv_flow_spec_ipv4));
static_assert(offsetof(FlowRule, count) == offsetof(FlowRule, udp) + sizeof(ibv_flow_spec_tcp_udp));
static_assert(offsetof(FlowRule, count) % alignof(ibv_flow_spec_counter_action) == 0);
static_assert(offsetof(FlowRule, eth) % alignof(ibv_flow_spec_eth) == 0);
static_assert(offsetof(FlowRule, ipv4) % alignof(ibv_flow_spec_ipv4) == 0);
static_assert(offsetof(FlowRule, udp) % alignof(ibv_flow_spec_tcp_udp) == 0);

namespace {

// Host to network byte order, as the bytes ibv_create_flow(3) expects.
std::uint32_t to_network32(std::uint32_t host) {
    const std::array<std::uint8_t, 4> bytes{
        static_cast<std::uint8_t>(host >> 24), static_cast<std::uint8_t>(host >> 16),
        static_cast<std::uint8_t>(host >> 8), static_cast<std::uint8_t>(host)};
    std::uint32_t out = 0;
    std::memcpy(&out, bytes.data(), sizeof out);
    return out;
}

std::uint16_t to_network16(std::uint16_t host) {
    const std::array<std::uint8_t, 2> bytes{static_cast<std::uint8_t>(host >> 8),
                                            static_cast<std::uint8_t>(host)};
    std::uint16_t out = 0;
    std::memcpy(&out, bytes.data(), sizeof out);
    return out;
}

bool unsupported(int err) {
    return err == EOPNOTSUPP || err == ENOTSUP || err == ENOSYS;
}

bool valid_request(const RecvRequest& request) {
    return request.num_sge == 1 || request.num_sge == 2;
}

}  // namespace

WcStatus map_wc_status(ibv_wc_status status) {
    switch (status) {
        case IBV_WC_SUCCESS:
            return WcStatus::success;
        case IBV_WC_LOC_LEN_ERR:
            return WcStatus::loc_len_err;
        case IBV_WC_LOC_QP_OP_ERR:
            return WcStatus::loc_qp_op_err;
        case IBV_WC_LOC_PROT_ERR:
            return WcStatus::loc_prot_err;
        case IBV_WC_WR_FLUSH_ERR:
            return WcStatus::wr_flush_err;
        default:
            return WcStatus::other;
    }
}

EventKind map_event_kind(ibv_event_type type) {
    switch (type) {
        case IBV_EVENT_PORT_ACTIVE:
            return EventKind::port_active;
        case IBV_EVENT_PORT_ERR:
            return EventKind::port_error;
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
        case IBV_EVENT_WQ_FATAL:
            return EventKind::qp_fatal;
        case IBV_EVENT_CQ_ERR:
            return EventKind::cq_error;
        case IBV_EVENT_DEVICE_FATAL:
            return EventKind::device_fatal;
        default:
            return EventKind::other;
    }
}

AsyncEvent map_event(const ibv_async_event& event) {
    AsyncEvent out;
    out.kind = map_event_kind(event.event_type);
    const char* name = ibv_event_type_str(event.event_type);
    out.name = name != nullptr ? name : "unknown";
    switch (event.event_type) {
        // QP-affiliated events (ibv_get_async_event(3)): element.qp is valid.
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
        case IBV_EVENT_COMM_EST:
        case IBV_EVENT_SQ_DRAINED:
        case IBV_EVENT_PATH_MIG:
        case IBV_EVENT_PATH_MIG_ERR:
        case IBV_EVENT_QP_LAST_WQE_REACHED:
            out.qp_num = event.element.qp != nullptr ? event.element.qp->qp_num : 0;
            break;
        // Port events: element.port_num is valid.
        case IBV_EVENT_PORT_ACTIVE:
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_LID_CHANGE:
        case IBV_EVENT_PKEY_CHANGE:
        case IBV_EVENT_SM_CHANGE:
        case IBV_EVENT_CLIENT_REREGISTER:
        case IBV_EVENT_GID_CHANGE:
            if (event.element.port_num > 0 && event.element.port_num <= UINT8_MAX) {
                out.port = static_cast<std::uint8_t>(event.element.port_num);
            }
            break;
        // WQ_FATAL names an ibv_wq, and ibvcap creates none: qp_num stays 0.
        // CQ, SRQ and device events carry no QP or port.
        default:
            break;
    }
    return out;
}

FlowRule build_flow_rule(const FlowMatch& match, std::uint8_t port, ibv_counters* counters) {
    FlowRule rule;
    // ibv_create_flow(3): "User must memset the spec struct with zeros".
    std::memset(&rule, 0, sizeof rule);
    const bool counted = counters != nullptr;

    rule.attr.comp_mask = 0;
    rule.attr.type = IBV_FLOW_ATTR_NORMAL;
    rule.attr.size = static_cast<std::uint16_t>(
        sizeof(ibv_flow_attr) + sizeof(ibv_flow_spec_eth) + sizeof(ibv_flow_spec_ipv4) +
        sizeof(ibv_flow_spec_tcp_udp) + (counted ? sizeof(ibv_flow_spec_counter_action) : 0));
    rule.attr.priority = 0;
    rule.attr.num_of_specs = static_cast<std::uint8_t>(counted ? 4 : 3);
    rule.attr.port = port;
    rule.attr.flags = 0;

    rule.eth.type = IBV_FLOW_SPEC_ETH;
    rule.eth.size = static_cast<std::uint16_t>(sizeof(ibv_flow_spec_eth));
    std::copy(match.dst_mac.begin(), match.dst_mac.end(), std::begin(rule.eth.val.dst_mac));
    std::fill(std::begin(rule.eth.mask.dst_mac), std::end(rule.eth.mask.dst_mac),
              std::uint8_t{0xff});

    rule.ipv4.type = IBV_FLOW_SPEC_IPV4;
    rule.ipv4.size = static_cast<std::uint16_t>(sizeof(ibv_flow_spec_ipv4));
    rule.ipv4.val.dst_ip = to_network32(match.dst_ip);
    rule.ipv4.mask.dst_ip = 0xffffffffU;
    if (match.src_ip != 0) {
        rule.ipv4.val.src_ip = to_network32(match.src_ip);
        rule.ipv4.mask.src_ip = 0xffffffffU;
    }

    rule.udp.type = IBV_FLOW_SPEC_UDP;
    rule.udp.size = static_cast<std::uint16_t>(sizeof(ibv_flow_spec_tcp_udp));
    rule.udp.val.dst_port = to_network16(match.dst_port);
    rule.udp.mask.dst_port = 0xffffU;

    if (counted) {
        rule.count.type = IBV_FLOW_SPEC_ACTION_COUNT;
        rule.count.size = static_cast<std::uint16_t>(sizeof(ibv_flow_spec_counter_action));
        rule.count.counters = counters;
    }
    return rule;
}

std::size_t build_recv_chain(std::span<const RecvRequest> requests, std::span<ibv_recv_wr> wrs,
                             std::span<ibv_sge> sges) {
    const std::size_t limit = std::min({requests.size(), wrs.size(), sges.size() / 2});
    std::size_t n = 0;
    std::size_t s = 0;
    for (; n < limit && valid_request(requests[n]); ++n) {
        const RecvRequest& request = requests[n];
        ibv_recv_wr& wr = wrs[n];
        wr.wr_id = request.wr_id;
        wr.next = nullptr;
        wr.sg_list = &sges[s];
        wr.num_sge = request.num_sge;
        for (std::size_t i = 0; i < request.num_sge; ++i) {
            sges[s].addr = request.sge[i].addr;
            sges[s].length = request.sge[i].length;
            sges[s].lkey = request.sge[i].lkey;
            ++s;
        }
        if (n > 0) {
            wrs[n - 1].next = &wr;
        }
    }
    return n;
}

ibv_cq_init_attr_ex cq_init_attr(std::uint32_t depth, TimestampFormat timestamps,
                                 bool single_threaded) {
    ibv_cq_init_attr_ex attr{};
    attr.cqe = depth;
    attr.cq_context = nullptr;
    attr.channel = nullptr;
    attr.comp_vector = 0;
    attr.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
    switch (timestamps) {
        case TimestampFormat::device_ticks:
            attr.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
            break;
        case TimestampFormat::wallclock_ns:
            attr.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
            break;
        case TimestampFormat::none:
            break;
    }
    attr.comp_mask = 0;
    if (single_threaded) {
        attr.comp_mask |= IBV_CQ_INIT_ATTR_MASK_FLAGS;
        attr.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
    }
    return attr;
}

ibv_qp_init_attr raw_qp_init_attr(ibv_cq* cq, std::uint32_t depth, std::uint32_t max_sge) {
    ibv_qp_init_attr attr{};
    attr.qp_context = nullptr;
    // libibverbs takes a send CQ for every QP type but XRC; with no send
    // queue nothing ever completes on it.
    attr.send_cq = cq;
    attr.recv_cq = cq;
    attr.srq = nullptr;
    attr.cap.max_send_wr = 0;
    attr.cap.max_send_sge = 0;
    attr.cap.max_recv_wr = depth;
    attr.cap.max_recv_sge = max_sge;
    attr.cap.max_inline_data = 0;
    attr.qp_type = IBV_QPT_RAW_PACKET;
    attr.sq_sig_all = 0;
    return attr;
}

PollStart classify_start_poll(int rc) {
    switch (rc) {
        case 0:
            return PollStart::ready;
        case ENOENT:
            return PollStart::empty;
        case EBUSY:
            return PollStart::retry;
        default:
            return PollStart::error;
    }
}

RegDmabufMrFn reg_dmabuf_mr_symbol() {
    static const RegDmabufMrFn fn =
        reinterpret_cast<RegDmabufMrFn>(dlvsym(RTLD_DEFAULT, "ibv_reg_dmabuf_mr", "IBVERBS_1.12"));
    return fn;
}

ibv_qp_state to_ibv(QpState state) {
    switch (state) {
        case QpState::reset:
            return IBV_QPS_RESET;
        case QpState::init:
            return IBV_QPS_INIT;
        case QpState::rtr:
            return IBV_QPS_RTR;
        case QpState::error:
            return IBV_QPS_ERR;
    }
    return IBV_QPS_ERR;
}

std::optional<QpState> from_ibv(ibv_qp_state state) {
    switch (state) {
        case IBV_QPS_RESET:
            return QpState::reset;
        case IBV_QPS_INIT:
            return QpState::init;
        case IBV_QPS_RTR:
            return QpState::rtr;
        case IBV_QPS_ERR:
            return QpState::error;
        default:
            return std::nullopt;
    }
}

std::optional<int> modify_mask(QpState from, QpState to) {
    switch (to) {
        case QpState::reset:
        case QpState::error:
            return IBV_QP_STATE;
        case QpState::init:
            if (from == QpState::reset) {
                return IBV_QP_STATE | IBV_QP_PORT;
            }
            return std::nullopt;
        case QpState::rtr:
            if (from == QpState::init) {
                return IBV_QP_STATE;
            }
            return std::nullopt;
    }
    return std::nullopt;
}

std::string error_hint(Call call, int err, std::string_view exe_path) {
    static constexpr std::string_view memlock =
        "cannot pin memory: raise the locked-memory limit (ulimit -l unlimited)";
    const std::string cap_net_raw = fmt::format(
        "raw-packet QPs need CAP_NET_RAW: run as root or `sudo setcap cap_net_raw=ep {}` "
        "(setcap does not survive on NFS)",
        exe_path.empty() ? std::string_view{"<path of ibvcap>"} : exe_path);
    const bool permission = err == EPERM || err == EACCES;
    switch (call) {
        case Call::get_device_list:
            if (err == ENOSYS) {
                return "the kernel has no RDMA support: load ib_uverbs and mlx5_ib "
                       "(sudo modprobe -a ib_uverbs mlx5_ib)";
            }
            break;
        case Call::open_device:
            if (permission) {
                return "no access to the device: check the permissions of /dev/infiniband/uverbs*";
            }
            break;
        case Call::create_cq:
            if (err == ENOMEM) {
                return std::string{memlock};
            }
            break;
        case Call::create_qp:
            if (permission) {
                return cap_net_raw;
            }
            if (err == ENOMEM) {
                return std::string{memlock};
            }
            if (err == EINVAL) {
                return "check the depth and SGE count against the device limits (ibv_devinfo -v: "
                       "max_qp_wr, max_sge); some kernels also report a missing CAP_NET_RAW "
                       "this way";
            }
            break;
        case Call::create_flow:
            if (permission) {
                return cap_net_raw;
            }
            if (err == EINVAL || err == ENXIO || unsupported(err)) {
                return "the device refused the flow rule: needs managed flow steering (mlx5: "
                       "check the firmware's steering mode; ConnectX-4 or later)";
            }
            break;
        case Call::create_counters:
        case Call::attach_counters:
            if (unsupported(err)) {
                return "the device cannot count the packets of a flow rule: create the rules "
                       "without counters";
            }
            break;
        case Call::reg_mr:
            if (err == EFAULT || err == ENOMEM) {
                return std::string{memlock};
            }
            break;
        case Call::reg_dmabuf_mr:
            if (err == ENOSYS) {
                return "this libibverbs has no ibv_reg_dmabuf_mr (it came with rdma-core 34): "
                       "upgrade rdma-core, or use nvidia-peermem";
            }
            if (err == ENOMEM || err == ENOSPC) {
                return "the GPU's BAR1 or the locked-memory limit is too small for the payload "
                       "ring: lower --ring-depth, or check nvidia-smi -q (BAR1 Memory Usage) "
                       "and ulimit -l";
            }
            if (err != 0) {
                return "the NIC driver or kernel lacks dma-buf support: try nvidia-peermem";
            }
            break;
    }
    return {};
}

std::system_error verbs_error(int err, std::string_view what, std::string_view hint) {
    std::string message{what};
    if (!hint.empty()) {
        message += ": ";
        message += hint;
    }
    return std::system_error(err, std::generic_category(), message);
}

int error_code(int rc) {
    if (rc > 0) {
        return rc;
    }
    return errno != 0 ? errno : EIO;
}

int null_errno() {
    return errno != 0 ? errno : EIO;
}

std::string missing_device_message(std::string_view name, const std::vector<std::string>& present) {
    if (present.empty()) {
        return fmt::format("no RDMA device \"{}\": this host has none (ibv_devinfo lists them)",
                           name);
    }
    return fmt::format("no RDMA device \"{}\": this host has {}", name, fmt::join(present, ", "));
}

std::uint64_t raw_clock_ticks(const timespec& raw_clock) {
    return static_cast<std::uint64_t>(raw_clock.tv_sec) * 1'000'000'000ULL +
           static_cast<std::uint64_t>(raw_clock.tv_nsec);
}

std::uint64_t timespec_ns(const timespec& t) {
    return raw_clock_ticks(t);
}

std::uint64_t midpoint_ns(std::uint64_t before, std::uint64_t after) {
    const std::uint64_t low = std::min(before, after);
    const std::uint64_t high = std::max(before, after);
    return low + (high - low) / 2;
}

int poll_timeout_ms(std::chrono::milliseconds timeout) {
    const auto count = timeout.count();
    if (count <= 0) {
        return 0;
    }
    if (count >= INT_MAX) {
        return INT_MAX;
    }
    return static_cast<int>(count);
}

}  // namespace ibv_detail

// --- The provider -------------------------------------------------------------

namespace {

using namespace ibv_detail;

// Calls the verbs destroy function `Destroy` on a non-null object. Failures
// cannot be reported from a destructor and are ignored.
template <auto Destroy>
struct Destroyer {
    template <class T>
    void operator()(T* object) const noexcept {
        static_cast<void>(Destroy(object));
    }
};

using ContextPtr = std::unique_ptr<ibv_context, Destroyer<&ibv_close_device>>;
using PdPtr = std::unique_ptr<ibv_pd, Destroyer<&ibv_dealloc_pd>>;
using CqPtr = std::unique_ptr<ibv_cq, Destroyer<&ibv_destroy_cq>>;
using QpPtr = std::unique_ptr<ibv_qp, Destroyer<&ibv_destroy_qp>>;
using MrPtr = std::unique_ptr<ibv_mr, Destroyer<&ibv_dereg_mr>>;
using FlowPtr = std::unique_ptr<ibv_flow, Destroyer<&ibv_destroy_flow>>;
using CountersPtr = std::unique_ptr<ibv_counters, Destroyer<&ibv_destroy_counters>>;
using DeviceListPtr = std::unique_ptr<ibv_device*, Destroyer<&ibv_free_device_list>>;

// CQ completions are read through a stack array of this many ibv_wc when the
// device has no extended CQ.
constexpr std::size_t kPollChunk = 64;

std::string exe_path() {
    std::error_code ec;
    const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::string{} : path.string();
}

const char* state_name(QpState state) {
    switch (state) {
        case QpState::reset:
            return "RESET";
        case QpState::init:
            return "INIT";
        case QpState::rtr:
            return "RTR";
        case QpState::error:
            return "ERROR";
    }
    return "?";
}

std::string describe(const FlowMatch& match) {
    std::string text = fmt::format("{:02x} {}:{}", fmt::join(match.dst_mac, ":"),
                                   format_ipv4(match.dst_ip), match.dst_port);
    if (match.src_ip != 0) {
        text += fmt::format(" from {}", format_ipv4(match.src_ip));
    }
    return text;
}

// Owns the device context and its protection domain: ibv_dealloc_pd, then
// ibv_close_device, when the last holder lets go. The context's async_fd is
// non-blocking (set at open) so that wait_event() can poll(2) it.
class Context {
  public:
    Context(ContextPtr context, std::string name, std::uint8_t port)
        : context_(std::move(context)), name_(std::move(name)), port_(port) {}
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    ibv_context* get() const { return context_.get(); }
    ibv_pd* pd() const { return pd_.get(); }
    void set_pd(PdPtr pd) { pd_ = std::move(pd); }
    const std::string& name() const { return name_; }
    std::uint8_t port() const { return port_; }

  private:
    ContextPtr context_;
    PdPtr pd_;  // declared after context_: released before the context is closed
    std::string name_;
    std::uint8_t port_;
};

// A CQ shared by the CompletionQueue object and the QPs that use it; the
// ibv_cq is destroyed (ibv_destroy_cq) after the last of them, then the
// Context reference is dropped.
struct CqHandle {
    std::shared_ptr<Context> context;
    CqPtr cq;                    // released before `context`
    ibv_cq_ex* cq_ex = nullptr;  // the same object, when made by ibv_create_cq_ex
};

// A QP shared by the QueuePair object and its flow rules: ibv_destroy_qp
// after the last rule is gone, then the CQ and Context references drop.
struct QpHandle {
    std::shared_ptr<Context> context;
    std::shared_ptr<CqHandle> cq;
    QpPtr qp;  // released before `cq` and `context`
};

// Owns one ibv_mr (ibv_dereg_mr), then drops its Context reference (the PD).
class IbvMemoryRegion final : public MemoryRegion {
  public:
    IbvMemoryRegion(std::shared_ptr<Context> context, MrPtr mr)
        : context_(std::move(context)), mr_(std::move(mr)) {}
    std::uint32_t lkey() const override { return mr_->lkey; }

  private:
    std::shared_ptr<Context> context_;
    MrPtr mr_;  // released first
};

// Owns one flow rule and, when it counts, its ibv_counters. Destruction:
// ibv_destroy_flow (which detaches the counters), then ibv_destroy_counters,
// then the QP reference drops.
class IbvFlow final : public Flow {
  public:
    IbvFlow(std::shared_ptr<QpHandle> qp, CountersPtr counters, FlowPtr flow)
        : qp_(std::move(qp)), counters_(std::move(counters)), flow_(std::move(flow)) {}

    // An exact read from the device (flags 0, not IBV_READ_COUNTERS_ATTR_PREFER_CACHED):
    // a kernel round trip, for periodic reports, not the poll path.
    std::optional<std::uint64_t> matched_packets() override {
        if (!counters_) {
            return std::nullopt;
        }
        std::uint64_t value = 0;
        errno = 0;
        const int rc = ibv_read_counters(counters_.get(), &value, 1, 0);
        if (rc != 0) {
            throw verbs_error(error_code(rc), "ibv_read_counters");
        }
        return value;
    }

  private:
    std::shared_ptr<QpHandle> qp_;
    CountersPtr counters_;  // released after the rule
    FlowPtr flow_;          // released first
};

// Owns (through CqHandle) one ibv_cq, made by ibv_create_cq_ex when the device
// has extended CQs, else by ibv_create_cq. No completion channel: the engine
// busy-polls. poll() allocates nothing.
class IbvCompletionQueue final : public CompletionQueue {
  public:
    IbvCompletionQueue(std::shared_ptr<CqHandle> handle, TimestampFormat timestamps)
        : handle_(std::move(handle)), timestamps_(timestamps) {}

    TimestampFormat timestamps() const override { return timestamps_; }

    const std::shared_ptr<CqHandle>& handle() const { return handle_; }

    std::size_t poll(std::span<Completion> out) override {
        if (pending_error_ != 0) {
            // A failure met after completions were already taken: those were
            // returned by the previous call, the failure is reported now.
            const int err = std::exchange(pending_error_, 0);
            throw verbs_error(err, "polling the completion queue",
                              "the CQ is in error (an overrun raises IBV_EVENT_CQ_ERR)");
        }
        if (out.empty()) {
            return 0;  // ibv_start_poll would consume a completion
        }
        return handle_->cq_ex != nullptr ? poll_extended(out) : poll_plain(out);
    }

  private:
    std::size_t poll_extended(std::span<Completion> out) {
        ibv_cq_ex* cq = handle_->cq_ex;
        ibv_poll_cq_attr attr{};
        int rc = ibv_start_poll(cq, &attr);
        // No ibv_end_poll after a failed ibv_start_poll (ibv_create_cq_ex(3)).
        switch (classify_start_poll(rc)) {
            case PollStart::ready:
                break;
            case PollStart::empty:
            case PollStart::retry:
                return 0;
            case PollStart::error:
                throw verbs_error(rc > 0 ? rc : EIO, "ibv_start_poll",
                                  "the CQ is in error (an overrun raises IBV_EVENT_CQ_ERR)");
        }
        std::size_t n = 0;
        for (;;) {
            out[n++] = read_current(cq);
            if (n == out.size()) {
                break;
            }
            rc = ibv_next_poll(cq);
            if (rc == ENOENT) {
                break;
            }
            if (rc != 0) {
                pending_error_ = rc > 0 ? rc : EIO;
                break;
            }
        }
        ibv_end_poll(cq);  // also after a failed ibv_next_poll
        return n;
    }

    Completion read_current(ibv_cq_ex* cq) const {
        Completion c;
        c.wr_id = cq->wr_id;
        c.status = map_wc_status(cq->status);
        // qp_num is not read: it was not asked for (IBV_WC_EX_WITH_QP_NUM),
        // and on a raw-packet QP it is the flow tag (lib/sources/verbs/seam.hpp).
        if (cq->status == IBV_WC_SUCCESS) {
            c.byte_len = ibv_wc_read_byte_len(cq);
            switch (timestamps_) {
                case TimestampFormat::device_ticks:
                    c.hw_timestamp = ibv_wc_read_completion_ts(cq);
                    c.has_timestamp = true;
                    break;
                case TimestampFormat::wallclock_ns:
                    c.hw_timestamp = ibv_wc_read_completion_wallclock_ns(cq);
                    c.has_timestamp = true;
                    break;
                case TimestampFormat::none:
                    break;
            }
        } else {
            // Only wr_id, status and vendor_err are valid (ibv_poll_cq(3)).
            c.vendor_err = ibv_wc_read_vendor_err(cq);
        }
        return c;
    }

    std::size_t poll_plain(std::span<Completion> out) {
        std::array<ibv_wc, kPollChunk> wc;
        std::size_t n = 0;
        while (n < out.size()) {
            const int want = static_cast<int>(std::min(out.size() - n, wc.size()));
            const int got = ibv_poll_cq(handle_->cq.get(), want, wc.data());
            if (got < 0) {
                if (n == 0) {
                    throw verbs_error(EIO, "ibv_poll_cq",
                                      "the CQ is in error (an overrun raises IBV_EVENT_CQ_ERR)");
                }
                pending_error_ = EIO;
                break;
            }
            for (int i = 0; i < got; ++i) {
                const ibv_wc& w = wc[static_cast<std::size_t>(i)];
                Completion c;
                c.wr_id = w.wr_id;
                c.status = map_wc_status(w.status);
                c.qp_num = w.qp_num;
                if (w.status == IBV_WC_SUCCESS) {
                    c.byte_len = w.byte_len;
                } else {
                    c.vendor_err = w.vendor_err;
                }
                out[n++] = c;
            }
            if (got < want) {
                break;
            }
        }
        return n;
    }

    std::shared_ptr<CqHandle> handle_;
    TimestampFormat timestamps_ = TimestampFormat::none;
    int pending_error_ = 0;
};

// A raw-packet QP (IBV_QPT_RAW_PACKET) owned through QpHandle. Its state is
// the one modify() last set: a QP the device moves to the error state on its
// own (an error completion, IBV_EVENT_QP_FATAL) still reads as before until
// modify() is called; the engine learns of those transitions from completions
// and events (DESIGN §4.6). ibv_query_qp would say, but it is a kernel round
// trip; it is used only to resynchronise after a failed ibv_modify_qp.
class IbvQueuePair final : public QueuePair {
  public:
    explicit IbvQueuePair(std::shared_ptr<QpHandle> handle) : handle_(std::move(handle)) {}

    std::uint32_t qp_num() const override { return handle_->qp->qp_num; }
    QpState state() const override { return state_; }

    void modify(QpState to) override {
        const auto mask = modify_mask(state_, to);
        if (!mask) {
            throw verbs_error(EINVAL, fmt::format("ibv_modify_qp (QP {:#x})", qp_num()),
                              fmt::format("verbs does not allow {} → {} (RESET → INIT → RTR; any "
                                          "state → RESET or ERROR)",
                                          state_name(state_), state_name(to)));
        }
        ibv_qp_attr attr{};
        attr.qp_state = to_ibv(to);
        attr.port_num = handle_->context->port();
        errno = 0;
        const int rc = ibv_modify_qp(handle_->qp.get(), &attr, *mask);
        if (rc != 0) {
            const int err = error_code(rc);
            const QpState from = state_;
            resynchronise();
            throw verbs_error(err, fmt::format("ibv_modify_qp (QP {:#x}, {} → {}, port {}; now {})",
                                               qp_num(), state_name(from), state_name(to),
                                               handle_->context->port(), state_name(state_)));
        }
        state_ = to;
    }

    void post_recv(std::span<const RecvRequest> requests) override {
        std::array<ibv_recv_wr, kPostChunk> wrs;
        std::array<ibv_sge, 2 * kPostChunk> sges;
        std::size_t done = 0;
        while (done < requests.size()) {
            const std::size_t n = build_recv_chain(requests.subspan(done), wrs, sges);
            if (n > 0) {
                ibv_recv_wr* bad = nullptr;
                errno = 0;
                const int rc = ibv_post_recv(handle_->qp.get(), wrs.data(), &bad);
                if (rc != 0) {
                    const int err = error_code(rc);
                    std::size_t first = 0;  // bad_wr, as an index into this chunk
                    while (first < n && &wrs[first] != bad) {
                        ++first;
                    }
                    if (first == n) {
                        first = 0;
                    }
                    throw post_error(err, requests, done + first,
                                     err == ENOMEM ? "the receive queue is full"
                                     : err == EINVAL
                                         ? "a request has more SGEs than the QP's max_sge"
                                         : "");
                }
                done += n;
            }
            if (done < requests.size() && !valid_request(requests[done])) {
                throw post_error(
                    EINVAL, requests, done,
                    fmt::format("num_sge is {}: it must be 1 or 2", requests[done].num_sge));
            }
        }
    }

    std::unique_ptr<Flow> create_flow(const FlowMatch& match, bool with_counter) override {
        ibv_context* context = handle_->context->get();
        CountersPtr counters;
        if (with_counter) {
            // ibv_attach_counters_point_flow(3): a static attach (flow = NULL)
            // before ibv_create_flow; the count action then binds it.
            ibv_counters_init_attr init{};
            errno = 0;
            counters.reset(ibv_create_counters(context, &init));
            if (!counters) {
                const int err = null_errno();
                throw verbs_error(err, "ibv_create_counters",
                                  error_hint(Call::create_counters, err, {}));
            }
            ibv_counter_attach_attr attach{};
            attach.counter_desc = IBV_COUNTER_PACKETS;
            attach.index = 0;
            errno = 0;
            const int rc = ibv_attach_counters_point_flow(counters.get(), &attach, nullptr);
            if (rc != 0) {
                const int err = error_code(rc);
                throw verbs_error(err, "ibv_attach_counters_point_flow (IBV_COUNTER_PACKETS)",
                                  error_hint(Call::attach_counters, err, {}));
            }
        }
        FlowRule rule = build_flow_rule(match, handle_->context->port(), counters.get());
        errno = 0;
        FlowPtr flow(ibv_create_flow(handle_->qp.get(), &rule.attr));
        if (!flow) {
            const int err = null_errno();
            throw verbs_error(
                err,
                fmt::format("ibv_create_flow ({} to QP {:#x} on {} port {})", describe(match),
                            qp_num(), handle_->context->name(), handle_->context->port()),
                error_hint(Call::create_flow, err, exe_path()));
        }
        return std::make_unique<IbvFlow>(handle_, std::move(counters), std::move(flow));
    }

  private:
    std::system_error post_error(int err, std::span<const RecvRequest> requests, std::size_t index,
                                 std::string_view hint) const {
        return verbs_error(err,
                           fmt::format("ibv_post_recv (QP {:#x}): wr_id {} not posted ({} of {} "
                                       "requests posted before it)",
                                       qp_num(), requests[index].wr_id, index, requests.size()),
                           hint);
    }

    void resynchronise() {
        ibv_qp_attr attr{};
        ibv_qp_init_attr init{};
        if (ibv_query_qp(handle_->qp.get(), &attr, IBV_QP_STATE, &init) == 0) {
            if (const auto state = from_ibv(attr.qp_state)) {
                state_ = *state;
            }
        }
    }

    std::shared_ptr<QpHandle> handle_;
    QpState state_ = QpState::reset;
};

class IbvDevice final : public Device {
  public:
    IbvDevice(std::shared_ptr<Context> context, DeviceCaps caps)
        : context_(std::move(context)), caps_(std::move(caps)) {}

    const DeviceCaps& caps() const override { return caps_; }

    std::unique_ptr<MemoryRegion> register_memory(void* addr, std::size_t length) override {
        // An int, not the enumerator: the ibv_reg_mr macro ANDs the access
        // flags with an enumerator of another enum type, which C++20
        // deprecates (clang: -Wdeprecated-enum-enum-conversion).
        // With an optional flag in it the macro calls ibv_reg_mr_iova2
        // (IBVERBS_1.8), which lets libibverbs drop what the device lacks.
        constexpr int access = kMrAccess;
        errno = 0;
        MrPtr mr(ibv_reg_mr(context_->pd(), addr, length, access));
        if (!mr) {
            const int err = null_errno();
            throw verbs_error(
                err, fmt::format("ibv_reg_mr ({} bytes at {} on {})", length, addr, caps_.name),
                error_hint(Call::reg_mr, err, {}));
        }
        return std::make_unique<IbvMemoryRegion>(context_, std::move(mr));
    }

    std::unique_ptr<MemoryRegion> register_dmabuf(int fd, std::uint64_t offset, std::size_t length,
                                                  std::uint64_t iova) override {
        const RegDmabufMrFn reg = reg_dmabuf_mr_symbol();
        if (reg == nullptr) {
            throw verbs_error(ENOSYS, fmt::format("ibv_reg_dmabuf_mr ({})", caps_.name),
                              error_hint(Call::reg_dmabuf_mr, ENOSYS, {}));
        }
        errno = 0;
        MrPtr mr(reg(context_->pd(), offset, length, iova, fd, kMrAccess));
        if (!mr) {
            const int err = null_errno();
            throw verbs_error(err,
                              fmt::format("ibv_reg_dmabuf_mr (fd {}, {} bytes at offset {}, iova "
                                          "{:#x} on {})",
                                          fd, length, offset, iova, caps_.name),
                              error_hint(Call::reg_dmabuf_mr, err, {}));
        }
        return std::make_unique<IbvMemoryRegion>(context_, std::move(mr));
    }

    std::unique_ptr<CompletionQueue> create_cq(std::uint32_t depth,
                                               TimestampFormat timestamps) override {
        const std::string what = fmt::format("ibv_create_cq_ex ({} entries on {}, timestamps {})",
                                             depth, caps_.name, to_string(timestamps));
        if (depth == 0 || depth > caps_.max_cqe) {
            throw verbs_error(
                EINVAL, what,
                fmt::format("the depth must be 1 to {} (the device's max_cqe)", caps_.max_cqe));
        }
        auto handle = std::make_shared<CqHandle>();
        handle->context = context_;
        int err = 0;
        // Single-threaded first; a provider that does not know the flag
        // refuses it (EINVAL, or EOPNOTSUPP), and the CQ is made without it.
        for (const bool single_threaded : {true, false}) {
            ibv_cq_init_attr_ex attr = cq_init_attr(depth, timestamps, single_threaded);
            errno = 0;
            if (ibv_cq_ex* cq_ex = ibv_create_cq_ex(context_->get(), &attr)) {
                handle->cq.reset(ibv_cq_ex_to_cq(cq_ex));
                handle->cq_ex = cq_ex;
                return std::make_unique<IbvCompletionQueue>(std::move(handle), timestamps);
            }
            err = null_errno();
            if (!(err == EINVAL || unsupported(err))) {
                break;
            }
        }
        if (timestamps != TimestampFormat::none || !(err == EOPNOTSUPP || err == ENOSYS)) {
            // EOPNOTSUPP/ENOTSUP for a timestamp format: the engine tries the next one.
            throw verbs_error(err, what, error_hint(Call::create_cq, err, {}));
        }
        // No extended CQs: a plain one, without completion timestamps.
        errno = 0;
        handle->cq.reset(
            ibv_create_cq(context_->get(), static_cast<int>(depth), nullptr, nullptr, 0));
        if (!handle->cq) {
            err = null_errno();
            throw verbs_error(err,
                              fmt::format("ibv_create_cq ({} entries on {})", depth, caps_.name),
                              error_hint(Call::create_cq, err, {}));
        }
        return std::make_unique<IbvCompletionQueue>(std::move(handle), TimestampFormat::none);
    }

    std::unique_ptr<QueuePair> create_qp(CompletionQueue& cq, std::uint32_t depth,
                                         std::uint32_t max_sge) override {
        const std::string what =
            fmt::format("ibv_create_qp (raw packet on {} port {}, {} receive WRs of {} SGEs)",
                        caps_.name, caps_.port, depth, max_sge);
        auto* ours = dynamic_cast<IbvCompletionQueue*>(&cq);
        if (ours == nullptr || ours->handle()->context != context_) {
            throw verbs_error(EINVAL, what, "the completion queue was not made by this device");
        }
        if (depth == 0 || depth > caps_.max_qp_wr) {
            throw verbs_error(
                EINVAL, what,
                fmt::format("the depth must be 1 to {} (the device's max_qp_wr)", caps_.max_qp_wr));
        }
        if (max_sge == 0 || max_sge > 2 || max_sge > caps_.max_sge) {
            throw verbs_error(EINVAL, what,
                              fmt::format("max_sge must be 1 or 2, and at most {} (the device's "
                                          "max_sge)",
                                          caps_.max_sge));
        }
        ibv_qp_init_attr attr = raw_qp_init_attr(ours->handle()->cq.get(), depth, max_sge);
        errno = 0;
        QpPtr qp(ibv_create_qp(context_->pd(), &attr));
        if (!qp) {
            const int err = null_errno();
            throw verbs_error(err, what, error_hint(Call::create_qp, err, exe_path()));
        }
        auto handle = std::make_shared<QpHandle>();
        handle->context = context_;
        handle->cq = ours->handle();
        handle->qp = std::move(qp);
        return std::make_unique<IbvQueuePair>(std::move(handle));
    }

    std::optional<AsyncEvent> wait_event(std::chrono::milliseconds timeout) override {
        ibv_context* context = context_->get();
        pollfd pfd{};
        pfd.fd = context->async_fd;
        pfd.events = POLLIN;
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        for (;;) {
            const int rc = ::poll(&pfd, 1, poll_timeout_ms(timeout));
            if (rc > 0) {
                break;
            }
            if (rc == 0) {
                return std::nullopt;
            }
            const int err = errno;
            if (err != EINTR) {
                throw verbs_error(err, fmt::format("poll (async events of {})", caps_.name));
            }
            timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
        }
        ibv_async_event event{};
        errno = 0;
        if (ibv_get_async_event(context, &event) != 0) {
            const int err = null_errno();
            if (err == EAGAIN || err == EWOULDBLOCK) {
                return std::nullopt;  // another reader took it
            }
            throw verbs_error(err, fmt::format("ibv_get_async_event ({})", caps_.name));
        }
        // Every event must be acknowledged, or destroying its QP/CQ blocks
        // (ibv_get_async_event(3)); read it first, the QP pointer included.
        struct Ack {
            ibv_async_event* event;
            ~Ack() { ibv_ack_async_event(event); }
        } ack{&event};
        return map_event(event);
    }

    std::optional<std::pair<std::uint64_t, std::uint64_t>> clock_pair() override {
        ibv_values_ex values{};
        values.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
        timespec before{};
        timespec after{};
        ::clock_gettime(CLOCK_REALTIME, &before);
        errno = 0;
        const int rc = ibv_query_rt_values_ex(context_->get(), &values);
        ::clock_gettime(CLOCK_REALTIME, &after);
        if (rc != 0) {
            const int err = error_code(rc);
            if (unsupported(err)) {
                return std::nullopt;
            }
            throw verbs_error(err, fmt::format("ibv_query_rt_values_ex ({})", caps_.name));
        }
        if ((values.comp_mask & IBV_VALUES_MASK_RAW_CLOCK) == 0) {
            return std::nullopt;
        }
        return std::pair{raw_clock_ticks(values.raw_clock),
                         midpoint_ns(timespec_ns(before), timespec_ns(after))};
    }

  private:
    std::shared_ptr<Context> context_;
    DeviceCaps caps_;
};

// Whether flow rules can carry a packet counter: create a counters object and
// attach a packet counter statically, then destroy it. A failure of either
// step means "no" (EOPNOTSUPP/ENOTSUP where the device lacks them).
bool probe_flow_counters(ibv_context* context) {
    ibv_counters_init_attr init{};
    errno = 0;
    CountersPtr counters(ibv_create_counters(context, &init));
    if (!counters) {
        return false;
    }
    ibv_counter_attach_attr attach{};
    attach.counter_desc = IBV_COUNTER_PACKETS;
    attach.index = 0;
    return ibv_attach_counters_point_flow(counters.get(), &attach, nullptr) == 0;
}

class IbvProvider final : public Provider {
  public:
    // Every device libibverbs can open. A kernel without RDMA support
    // (ibv_get_device_list fails with ENOSYS) has none: the list is empty.
    std::vector<std::string> device_names() override {
        std::vector<std::string> names;
        int count = 0;
        errno = 0;
        DeviceListPtr list(ibv_get_device_list(&count));
        if (!list) {
            const int err = null_errno();
            if (err == ENOSYS) {
                return names;
            }
            throw verbs_error(err, "ibv_get_device_list",
                              error_hint(Call::get_device_list, err, {}));
        }
        for (int i = 0; i < count; ++i) {
            names.emplace_back(ibv_get_device_name(list.get()[i]));
        }
        return names;
    }

    std::unique_ptr<Device> open(const std::string& name, std::uint8_t port) override {
        int count = 0;
        errno = 0;
        DeviceListPtr list(ibv_get_device_list(&count));
        if (!list) {
            const int err = null_errno();
            if (err == ENOSYS) {
                throw verbs_error(ENODEV,
                                  fmt::format("ibv_get_device_list: no RDMA device \"{}\"", name),
                                  error_hint(Call::get_device_list, err, {}));
            }
            throw verbs_error(err, "ibv_get_device_list",
                              error_hint(Call::get_device_list, err, {}));
        }
        ibv_device* device = nullptr;
        std::vector<std::string> present;
        for (int i = 0; i < count; ++i) {
            ibv_device* candidate = list.get()[i];
            present.emplace_back(ibv_get_device_name(candidate));
            if (present.back() == name) {
                device = candidate;
            }
        }
        if (device == nullptr) {
            throw verbs_error(ENODEV, missing_device_message(name, present));
        }

        errno = 0;
        ContextPtr opened(ibv_open_device(device));
        if (!opened) {
            const int err = null_errno();
            throw verbs_error(err, fmt::format("ibv_open_device ({})", name),
                              error_hint(Call::open_device, err, {}));
        }
        list.reset();  // ibv_get_device_list(3): an opened device outlives the list

        const int fd = opened->async_fd;
        const int flags = ::fcntl(fd, F_GETFL);
        if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
            const int err = errno;
            throw verbs_error(err, fmt::format("fcntl (O_NONBLOCK on the async fd of {})", name));
        }
        auto context = std::make_shared<Context>(std::move(opened), name, port);

        errno = 0;
        PdPtr pd(ibv_alloc_pd(context->get()));
        if (!pd) {
            throw verbs_error(null_errno(), fmt::format("ibv_alloc_pd ({})", name));
        }
        context->set_pd(std::move(pd));

        ibv_device_attr_ex attr{};
        errno = 0;
        int rc = ibv_query_device_ex(context->get(), nullptr, &attr);
        if (rc != 0) {
            throw verbs_error(error_code(rc), fmt::format("ibv_query_device_ex ({})", name));
        }
        const unsigned ports = attr.orig_attr.phys_port_cnt;
        if (port == 0 || port > ports) {
            throw verbs_error(EINVAL, fmt::format("ibv_query_port ({} port {})", name, port),
                              fmt::format("{} has port{} 1{}", name, ports == 1 ? "" : "s",
                                          ports == 1 ? "" : fmt::format(" to {}", ports)));
        }
        ibv_port_attr port_attr{};
        errno = 0;
        rc = ibv_query_port(context->get(), port, &port_attr);
        if (rc != 0) {
            throw verbs_error(error_code(rc),
                              fmt::format("ibv_query_port ({} port {})", name, port));
        }

        DeviceCaps caps;
        caps.name = name;
        caps.port = port;
        caps.max_qp_wr = static_cast<std::uint32_t>(std::max(attr.orig_attr.max_qp_wr, 0));
        caps.max_cqe = static_cast<std::uint32_t>(std::max(attr.orig_attr.max_cqe, 0));
        caps.max_sge = static_cast<std::uint32_t>(std::max(attr.orig_attr.max_sge, 0));
        caps.raw_packet_qp = port_attr.link_layer == IBV_LINK_LAYER_ETHERNET;
        caps.flow_steering =
            (attr.orig_attr.device_cap_flags & IBV_DEVICE_MANAGED_FLOW_STEERING) != 0;
        caps.completion_timestamps = attr.completion_timestamp_mask != 0;
        caps.hca_core_clock_khz = attr.hca_core_clock;
        caps.flow_counters = probe_flow_counters(context->get());
        return std::make_unique<IbvDevice>(std::move(context), std::move(caps));
    }
};

}  // namespace

std::unique_ptr<Provider> make_ibv_provider() {
    return std::make_unique<IbvProvider>();
}

}  // namespace ibvcap::verbs
