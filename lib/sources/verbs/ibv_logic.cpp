// The pure half of the libibverbs provider, declared in
// lib/sources/verbs/ibv_logic.hpp: status and event mapping, the flow-rule
// layout, the receive-WR chain, CQ and QP attributes and transitions, error
// hints and clock arithmetic. Nothing here opens a device, so all of it is
// unit tested on hosts without RDMA hardware (test/test_verbs_ibv.cpp).
#include "lib/sources/verbs/ibv_logic.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "lib/core/netaddr.hpp"
#include "lib/sources/verbs/seam.hpp"

namespace ibvcap::verbs {

// --- Pure helpers (lib/sources/verbs/ibv_logic.hpp) ----------------------------------

namespace ibv_logic {

// The flow rule must be one contiguous run of attr + specs (libibverbs walks
// the specs by their size fields), each spec naturally aligned.
static_assert(sizeof(ibv_flow_attr) == 20);
static_assert(offsetof(FlowRule, attr) == 4);
static_assert(offsetof(FlowRule, eth) == offsetof(FlowRule, attr) + sizeof(ibv_flow_attr));
static_assert(offsetof(FlowRule, ipv4) == offsetof(FlowRule, eth) + sizeof(ibv_flow_spec_eth));
static_assert(offsetof(FlowRule, udp) == offsetof(FlowRule, ipv4) + sizeof(ibv_flow_spec_ipv4));
static_assert(offsetof(FlowRule, count) == offsetof(FlowRule, udp) + sizeof(ibv_flow_spec_tcp_udp));
static_assert(offsetof(FlowRule, count) % alignof(ibv_flow_spec_counter_action) == 0);
static_assert(offsetof(FlowRule, lone_tag) == offsetof(FlowRule, count));
static_assert(offsetof(FlowRule, tag) ==
              offsetof(FlowRule, count) + sizeof(ibv_flow_spec_counter_action));
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

}  // namespace

bool unsupported(int err) {
    return err == EOPNOTSUPP || err == ENOTSUP || err == ENOSYS;
}

bool valid_request(const RecvRequest& request) {
    return request.num_sge == 1 || request.num_sge == 2;
}

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
    const bool tagged = match.tag != 0;
    rule.attr.size = static_cast<std::uint16_t>(
        sizeof(ibv_flow_attr) + sizeof(ibv_flow_spec_eth) + sizeof(ibv_flow_spec_ipv4) +
        sizeof(ibv_flow_spec_tcp_udp) + (counted ? sizeof(ibv_flow_spec_counter_action) : 0) +
        (tagged ? sizeof(ibv_flow_spec_action_tag) : 0));
    rule.attr.priority = 0;
    rule.attr.num_of_specs = static_cast<std::uint8_t>(3 + (counted ? 1 : 0) + (tagged ? 1 : 0));
    rule.attr.port = port;
    rule.attr.flags = 0;

    rule.eth.type = IBV_FLOW_SPEC_ETH;
    rule.eth.size = static_cast<std::uint16_t>(sizeof(ibv_flow_spec_eth));
    std::copy(match.dst_mac.begin(), match.dst_mac.end(), std::begin(rule.eth.val.dst_mac));
    std::fill(std::begin(rule.eth.mask.dst_mac), std::end(rule.eth.mask.dst_mac),
              std::uint8_t{0xff});
    if (match.match_vlan) {
        // The VLAN id only (mask 0x0fff): no priority or CFI criterion
        // (kernel fs.c parse_flow_attr takes first_prio from mask >> 13 and
        // first_cfi from mask >> 12).
        rule.eth.val.vlan_tag = to_network16(match.vlan_id & 0x0fffU);
        rule.eth.mask.vlan_tag = to_network16(0x0fffU);
    }

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
    if (tagged) {
        ibv_flow_spec_action_tag& tag = counted ? rule.tag : rule.lone_tag;
        tag.type = IBV_FLOW_SPEC_ACTION_TAG;
        tag.size = static_cast<std::uint16_t>(sizeof(ibv_flow_spec_action_tag));
        tag.tag_id = match.tag;
    }
    return rule;
}

const ibv_flow_spec_action_tag* FlowRule::tag_spec() const {
    if (tag.type == IBV_FLOW_SPEC_ACTION_TAG) {
        return &tag;
    }
    if (lone_tag.type == IBV_FLOW_SPEC_ACTION_TAG) {
        return &lone_tag;
    }
    return nullptr;
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
                                 bool single_threaded, bool flow_tags) {
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
    if (flow_tags) {
        attr.wc_flags |= IBV_WC_EX_WITH_FLOW_TAG;
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

PollStart classify_start_poll(int rc, TimestampFormat timestamps) {
    switch (rc) {
        case 0:
            return PollStart::ready;
        case ENOENT:
            return PollStart::empty;
        case EBUSY:
            return PollStart::retry;
        case EINVAL:
            return timestamps == TimestampFormat::wallclock_ns ? PollStart::no_clock
                                                               : PollStart::error;
        default:
            return PollStart::error;
    }
}

std::uint32_t provider_release_of(std::string_view real_path) {
    // The last path component, then the fourth and fifth dot-separated
    // fields after ".so.": 1 . ABI . MAJOR . MINOR.
    const std::size_t slash = real_path.rfind('/');
    std::string_view name =
        slash == std::string_view::npos ? real_path : real_path.substr(slash + 1);
    const std::size_t so = name.find(".so.");
    if (so == std::string_view::npos) {
        return 0;
    }
    std::string_view rest = name.substr(so + 4);
    std::vector<std::uint32_t> fields;
    while (!rest.empty() && fields.size() < 5) {
        const std::size_t dot = rest.find('.');
        const std::string_view field = rest.substr(0, dot);
        std::uint32_t v = 0;
        if (field.empty() || field.size() > 6 ||
            !std::all_of(field.begin(), field.end(), [](char c) { return c >= '0' && c <= '9'; })) {
            return 0;
        }
        for (const char c : field) {
            v = v * 10 + static_cast<std::uint32_t>(c - '0');
        }
        fields.push_back(v);
        rest = dot == std::string_view::npos ? std::string_view{} : rest.substr(dot + 1);
    }
    // 1.ABI.MAJOR[.MINOR]: the release is the third field.
    return fields.size() >= 3 && fields[0] == 1 ? fields[2] : 0;
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
            if (err == ENOSPC) {
                // kernel drivers/infiniband/hw/mlx5/fs.c get_flow_table: one
                // table of MLX5_FS_MAX_ENTRIES (2^16) for every verbs
                // multicast rule of the device; fs_core.c add_rule_fg: ENOSPC.
                return "the device's flow table is full (65,536 verbs multicast rules, shared by "
                       "every capture on the device): capture fewer groups, or antennas with "
                       "--hw-demux (a rule each), or stop the other captures on this device";
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

}  // namespace ibv_logic

}  // namespace ibvcap::verbs
