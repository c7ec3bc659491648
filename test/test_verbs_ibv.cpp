// The libibverbs provider (lib/sources/verbs/ibv.cpp). Hosts without RDMA devices (CI,
// most developer machines) can still check what does not need a device: the
// provider lists what is present and refuses a missing device with ENODEV,
// and the pure parts — status and event mapping, the flow-rule layout that
// ibv_create_flow() parses, the receive-WR chain, QP transitions, error hints —
// behave as the verbs man pages require.

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "lib/sources/verbs/ibv_logic.hpp"
#include "lib/sources/verbs/seam.hpp"

namespace {

using namespace ibvcap::verbs;
namespace d = ibvcap::verbs::ibv_logic;

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// --- The provider on this host ------------------------------------------------

TEST(IbvProvider, Constructs) {
    auto provider = make_ibv_provider();
    EXPECT_NE(provider, nullptr);
}

TEST(IbvProvider, DeviceNamesAreTheKernelsRdmaDevices) {
    auto provider = make_ibv_provider();
    std::vector<std::string> names;
    ASSERT_NO_THROW(names = provider->device_names());

    std::vector<std::string> expected;
    const std::filesystem::path sysfs{"/sys/class/infiniband"};
    std::error_code ec;
    if (std::filesystem::is_directory(sysfs, ec)) {
        for (const auto& entry : std::filesystem::directory_iterator(sysfs, ec)) {
            expected.push_back(entry.path().filename().string());
        }
    }
    std::sort(names.begin(), names.end());
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(names, expected);
}

TEST(IbvProvider, OpeningAMissingDeviceThrowsEnodevNamingIt) {
    auto provider = make_ibv_provider();
    try {
        provider->open("no_such_device", 1);
        FAIL() << "open() of a missing device returned";
    } catch (const std::system_error& e) {
        EXPECT_EQ(e.code().value(), ENODEV);
        EXPECT_EQ(e.code().category(), std::generic_category());
        EXPECT_TRUE(contains(e.what(), "no_such_device")) << e.what();
    }
}

// --- Work-completion status -----------------------------------------------------

TEST(WcStatusMapping, EveryStatusMapsToItsSeamValue) {
    const std::vector<std::pair<ibv_wc_status, WcStatus>> named{
        {IBV_WC_SUCCESS, WcStatus::success},
        {IBV_WC_LOC_LEN_ERR, WcStatus::loc_len_err},
        {IBV_WC_LOC_QP_OP_ERR, WcStatus::loc_qp_op_err},
        {IBV_WC_LOC_PROT_ERR, WcStatus::loc_prot_err},
        {IBV_WC_WR_FLUSH_ERR, WcStatus::wr_flush_err},
        {IBV_WC_GENERAL_ERR, WcStatus::other},
    };
    std::vector<WcStatus> reached;
    for (const auto& [status, expected] : named) {
        EXPECT_EQ(d::map_wc_status(status), expected) << ibv_wc_status_str(status);
        reached.push_back(d::map_wc_status(status));
    }
    // Every WcStatus is produced by some ibv_wc_status.
    for (const auto value : {WcStatus::success, WcStatus::loc_len_err, WcStatus::loc_qp_op_err,
                             WcStatus::loc_prot_err, WcStatus::wr_flush_err, WcStatus::other}) {
        EXPECT_NE(std::find(reached.begin(), reached.end(), value), reached.end());
    }
}

TEST(WcStatusMapping, EveryOtherVerbsStatusIsOther) {
    for (const auto status :
         {IBV_WC_LOC_EEC_OP_ERR, IBV_WC_MW_BIND_ERR, IBV_WC_BAD_RESP_ERR, IBV_WC_LOC_ACCESS_ERR,
          IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_OP_ERR, IBV_WC_RETRY_EXC_ERR,
          IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_LOC_RDD_VIOL_ERR, IBV_WC_REM_INV_RD_REQ_ERR,
          IBV_WC_REM_ABORT_ERR, IBV_WC_INV_EECN_ERR, IBV_WC_INV_EEC_STATE_ERR, IBV_WC_FATAL_ERR,
          IBV_WC_RESP_TIMEOUT_ERR, IBV_WC_GENERAL_ERR, IBV_WC_TM_ERR, IBV_WC_TM_RNDV_INCOMPLETE}) {
        EXPECT_EQ(d::map_wc_status(status), WcStatus::other) << ibv_wc_status_str(status);
    }
}

// --- Asynchronous events ----------------------------------------------------------

TEST(EventMapping, EveryEventTypeHasAKind) {
    const std::vector<std::pair<ibv_event_type, EventKind>> table{
        {IBV_EVENT_CQ_ERR, EventKind::cq_error},
        {IBV_EVENT_QP_FATAL, EventKind::qp_fatal},
        {IBV_EVENT_QP_REQ_ERR, EventKind::qp_fatal},
        {IBV_EVENT_QP_ACCESS_ERR, EventKind::qp_fatal},
        {IBV_EVENT_COMM_EST, EventKind::other},
        {IBV_EVENT_SQ_DRAINED, EventKind::other},
        {IBV_EVENT_PATH_MIG, EventKind::other},
        {IBV_EVENT_PATH_MIG_ERR, EventKind::other},
        {IBV_EVENT_DEVICE_FATAL, EventKind::device_fatal},
        {IBV_EVENT_PORT_ACTIVE, EventKind::port_active},
        {IBV_EVENT_PORT_ERR, EventKind::port_error},
        {IBV_EVENT_LID_CHANGE, EventKind::other},
        {IBV_EVENT_PKEY_CHANGE, EventKind::other},
        {IBV_EVENT_SM_CHANGE, EventKind::other},
        {IBV_EVENT_SRQ_ERR, EventKind::other},
        {IBV_EVENT_SRQ_LIMIT_REACHED, EventKind::other},
        {IBV_EVENT_QP_LAST_WQE_REACHED, EventKind::other},
        {IBV_EVENT_CLIENT_REREGISTER, EventKind::other},
        {IBV_EVENT_GID_CHANGE, EventKind::other},
        {IBV_EVENT_WQ_FATAL, EventKind::qp_fatal},
    };
    for (const auto& [type, kind] : table) {
        EXPECT_EQ(d::map_event_kind(type), kind) << ibv_event_type_str(type);
    }
}

TEST(EventMapping, QpEventsNameTheirQueuePair) {
    ibv_qp qp{};
    qp.qp_num = 0x1a2b;
    for (const auto type : {IBV_EVENT_QP_FATAL, IBV_EVENT_QP_REQ_ERR, IBV_EVENT_QP_ACCESS_ERR}) {
        ibv_async_event event{};
        event.event_type = type;
        event.element.qp = &qp;
        const AsyncEvent mapped = d::map_event(event);
        EXPECT_EQ(mapped.kind, EventKind::qp_fatal);
        EXPECT_EQ(mapped.qp_num, 0x1a2bU);
        EXPECT_EQ(mapped.port, 0);
        EXPECT_EQ(mapped.name, ibv_event_type_str(type));
        EXPECT_FALSE(mapped.name.empty());
    }
}

TEST(EventMapping, WqFatalIsQpFatalWithoutAQpNumber) {
    ibv_wq wq{};
    wq.wq_num = 77;
    ibv_async_event event{};
    event.event_type = IBV_EVENT_WQ_FATAL;
    event.element.wq = &wq;
    const AsyncEvent mapped = d::map_event(event);
    EXPECT_EQ(mapped.kind, EventKind::qp_fatal);
    EXPECT_EQ(mapped.qp_num, 0U);
}

TEST(EventMapping, PortEventsNameTheirPort) {
    for (const auto& [type, kind] : {std::pair{IBV_EVENT_PORT_ACTIVE, EventKind::port_active},
                                     std::pair{IBV_EVENT_PORT_ERR, EventKind::port_error},
                                     std::pair{IBV_EVENT_GID_CHANGE, EventKind::other}}) {
        ibv_async_event event{};
        event.event_type = type;
        event.element.port_num = 2;
        const AsyncEvent mapped = d::map_event(event);
        EXPECT_EQ(mapped.kind, kind);
        EXPECT_EQ(mapped.port, 2);
        EXPECT_EQ(mapped.qp_num, 0U);
        EXPECT_EQ(mapped.name, ibv_event_type_str(type));
    }
}

TEST(EventMapping, CqAndDeviceEvents) {
    ibv_cq cq{};
    ibv_async_event event{};
    event.event_type = IBV_EVENT_CQ_ERR;
    event.element.cq = &cq;
    EXPECT_EQ(d::map_event(event).kind, EventKind::cq_error);
    EXPECT_EQ(d::map_event(event).qp_num, 0U);

    event = ibv_async_event{};
    event.event_type = IBV_EVENT_DEVICE_FATAL;
    const AsyncEvent fatal = d::map_event(event);
    EXPECT_EQ(fatal.kind, EventKind::device_fatal);
    EXPECT_EQ(fatal.name, ibv_event_type_str(IBV_EVENT_DEVICE_FATAL));
}

// --- Flow rules -------------------------------------------------------------------

// 239.17.0.1:36001 from 10.0.0.11; MAC 01:00:5e:11:00:01.
FlowMatch sample_match(std::uint32_t src_ip) {
    FlowMatch match;
    match.dst_mac = {0x01, 0x00, 0x5e, 0x11, 0x00, 0x01};
    match.dst_ip = (239U << 24) | (17U << 16) | 1U;
    match.src_ip = src_ip;
    match.dst_port = 36001;  // 0x8ca1
    return match;
}
constexpr std::uint32_t kAntenna = (10U << 24) | 11U;

template <std::size_t N, class T>
std::array<std::uint8_t, N> bytes_of(const T& value) {
    static_assert(sizeof(T) == N);
    std::array<std::uint8_t, N> out{};
    std::memcpy(out.data(), &value, N);
    return out;
}

struct SpecHeader {
    std::uint32_t type = 0;
    std::uint16_t size = 0;
    std::size_t offset = 0;  // from the start of the ibv_flow_attr
};

// The specs as ibv_cmd_create_flow() finds them: from just after the
// ibv_flow_attr, num_of_specs times, each `size` bytes after the previous.
std::vector<SpecHeader> walk_specs(const d::FlowRule& rule) {
    const auto* base = reinterpret_cast<const unsigned char*>(&rule.attr);
    std::vector<SpecHeader> specs;
    std::size_t offset = sizeof(ibv_flow_attr);
    for (unsigned i = 0; i < rule.attr.num_of_specs; ++i) {
        SpecHeader h;
        h.offset = offset;
        std::memcpy(&h.type, base + offset, sizeof h.type);
        std::memcpy(&h.size, base + offset + offsetof(ibv_flow_spec_eth, size), sizeof h.size);
        specs.push_back(h);
        if (h.size == 0) {
            break;
        }
        offset += h.size;
    }
    return specs;
}

std::size_t walked_size(const std::vector<SpecHeader>& specs) {
    return specs.empty() ? sizeof(ibv_flow_attr) : specs.back().offset + specs.back().size;
}

TEST(FlowRule, HeaderMatchesTheRuleThatFollows) {
    const d::FlowRule rule = d::build_flow_rule(sample_match(0), 2, nullptr);
    EXPECT_EQ(rule.attr.comp_mask, 0U);
    EXPECT_EQ(rule.attr.type, IBV_FLOW_ATTR_NORMAL);
    EXPECT_EQ(rule.attr.priority, 0);
    EXPECT_EQ(rule.attr.port, 2);
    EXPECT_EQ(rule.attr.flags, 0U);
    EXPECT_EQ(rule.attr.num_of_specs, 3);
    EXPECT_EQ(rule.attr.size, sizeof(ibv_flow_attr) + sizeof(ibv_flow_spec_eth) +
                                  sizeof(ibv_flow_spec_ipv4) + sizeof(ibv_flow_spec_tcp_udp));
}

TEST(FlowRule, SpecsAreContiguousTypedAndSized) {
    const d::FlowRule rule = d::build_flow_rule(sample_match(0), 1, nullptr);
    const auto specs = walk_specs(rule);
    ASSERT_EQ(specs.size(), 3U);
    EXPECT_EQ(specs[0].type, IBV_FLOW_SPEC_ETH);
    EXPECT_EQ(specs[0].size, sizeof(ibv_flow_spec_eth));
    EXPECT_EQ(specs[1].type, IBV_FLOW_SPEC_IPV4);
    EXPECT_EQ(specs[1].size, sizeof(ibv_flow_spec_ipv4));
    EXPECT_EQ(specs[2].type, IBV_FLOW_SPEC_UDP);
    EXPECT_EQ(specs[2].size, sizeof(ibv_flow_spec_tcp_udp));
    EXPECT_EQ(walked_size(specs), rule.attr.size);
    // The walk lands on the struct members, so the typed fields are the ones parsed.
    const auto* base = reinterpret_cast<const unsigned char*>(&rule.attr);
    EXPECT_EQ(base + specs[0].offset, reinterpret_cast<const unsigned char*>(&rule.eth));
    EXPECT_EQ(base + specs[1].offset, reinterpret_cast<const unsigned char*>(&rule.ipv4));
    EXPECT_EQ(base + specs[2].offset, reinterpret_cast<const unsigned char*>(&rule.udp));
}

TEST(FlowRule, EthernetMatchesTheDestinationMacOnly) {
    const d::FlowRule rule = d::build_flow_rule(sample_match(0), 1, nullptr);
    const std::array<std::uint8_t, 6> mac{0x01, 0x00, 0x5e, 0x11, 0x00, 0x01};
    const std::array<std::uint8_t, 6> ones{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    const std::array<std::uint8_t, 6> zeros{};
    EXPECT_EQ(bytes_of<6>(rule.eth.val.dst_mac), mac);
    EXPECT_EQ(bytes_of<6>(rule.eth.mask.dst_mac), ones);
    EXPECT_EQ(bytes_of<6>(rule.eth.val.src_mac), zeros);
    EXPECT_EQ(bytes_of<6>(rule.eth.mask.src_mac), zeros);
    EXPECT_EQ(rule.eth.val.ether_type, 0);  // left unmasked
    EXPECT_EQ(rule.eth.mask.ether_type, 0);
    EXPECT_EQ(rule.eth.val.vlan_tag, 0);
    EXPECT_EQ(rule.eth.mask.vlan_tag, 0);
}

// A VLAN netdev's rule (verbs-mlx5-2.md N1): the ETH spec's vlan_tag carries
// the id in network order under a 0x0fff mask, which the kernel turns into
// cvlan_tag + first_vid with no priority or CFI criterion (drivers/infiniband/
// hw/mlx5/fs.c parse_flow_attr).
TEST(FlowRule, AVlanRuleMatchesTheVlanIdOnly) {
    auto match = sample_match(0);
    match.match_vlan = true;
    match.vlan_id = 0x123;
    const d::FlowRule rule = d::build_flow_rule(match, 1, nullptr);
    EXPECT_EQ(bytes_of<2>(rule.eth.val.vlan_tag), (std::array<std::uint8_t, 2>{0x01, 0x23}));
    EXPECT_EQ(bytes_of<2>(rule.eth.mask.vlan_tag), (std::array<std::uint8_t, 2>{0x0f, 0xff}));
    EXPECT_EQ(rule.eth.mask.ether_type, 0);
}

TEST(FlowRule, AddressesAndPortAreInNetworkByteOrder) {
    const d::FlowRule rule = d::build_flow_rule(sample_match(kAntenna), 1, nullptr);
    EXPECT_EQ(bytes_of<4>(rule.ipv4.val.dst_ip), (std::array<std::uint8_t, 4>{239, 17, 0, 1}));
    EXPECT_EQ(bytes_of<4>(rule.ipv4.val.src_ip), (std::array<std::uint8_t, 4>{10, 0, 0, 11}));
    EXPECT_EQ(bytes_of<2>(rule.udp.val.dst_port), (std::array<std::uint8_t, 2>{0x8c, 0xa1}));
}

TEST(FlowRule, AnySourceLeavesTheSourceUnmasked) {
    const d::FlowRule rule = d::build_flow_rule(sample_match(0), 1, nullptr);
    EXPECT_EQ(rule.ipv4.mask.dst_ip, 0xffffffffU);
    EXPECT_EQ(rule.ipv4.val.src_ip, 0U);
    EXPECT_EQ(rule.ipv4.mask.src_ip, 0U);
    EXPECT_EQ(rule.udp.mask.dst_port, 0xffff);
    EXPECT_EQ(rule.udp.val.src_port, 0);
    EXPECT_EQ(rule.udp.mask.src_port, 0);
}

TEST(FlowRule, OneSourceIsMatchedExactly) {
    const d::FlowRule rule = d::build_flow_rule(sample_match(kAntenna), 1, nullptr);
    EXPECT_EQ(rule.ipv4.mask.dst_ip, 0xffffffffU);
    EXPECT_EQ(rule.ipv4.mask.src_ip, 0xffffffffU);
    EXPECT_EQ(rule.attr.num_of_specs, 3);  // still one IPv4 spec
}

TEST(FlowRule, WithoutACounterThereIsNoCountAction) {
    const d::FlowRule rule = d::build_flow_rule(sample_match(kAntenna), 1, nullptr);
    EXPECT_EQ(rule.attr.num_of_specs, 3);
    EXPECT_EQ(rule.count.type, 0);
    EXPECT_EQ(rule.count.counters, nullptr);
}

TEST(FlowRule, ACounterAddsACountActionLastAndAligned) {
    ibv_counters counters{};  // only its address is used
    for (const std::uint32_t src : {0U, kAntenna}) {
        const d::FlowRule rule = d::build_flow_rule(sample_match(src), 1, &counters);
        EXPECT_EQ(rule.attr.num_of_specs, 4);
        const auto specs = walk_specs(rule);
        ASSERT_EQ(specs.size(), 4U);
        EXPECT_EQ(specs[0].type, IBV_FLOW_SPEC_ETH);
        EXPECT_EQ(specs[1].type, IBV_FLOW_SPEC_IPV4);
        EXPECT_EQ(specs[2].type, IBV_FLOW_SPEC_UDP);
        EXPECT_EQ(specs[3].type, IBV_FLOW_SPEC_ACTION_COUNT);
        EXPECT_EQ(specs[3].size, sizeof(ibv_flow_spec_counter_action));
        EXPECT_EQ(walked_size(specs), rule.attr.size);
        EXPECT_EQ(rule.count.counters, &counters);
        EXPECT_EQ(rule.ipv4.mask.src_ip, src != 0 ? 0xffffffffU : 0U);
        // Every spec starts naturally aligned (the counter action holds a pointer).
        EXPECT_EQ(
            reinterpret_cast<std::uintptr_t>(&rule.count) % alignof(ibv_flow_spec_counter_action),
            0U);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(&rule.eth) % alignof(ibv_flow_spec_eth), 0U);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(&rule.ipv4) % alignof(ibv_flow_spec_ipv4), 0U);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(&rule.udp) % alignof(ibv_flow_spec_tcp_udp), 0U);
    }
}

// A shared QP's rules carry a tag action (issue 44): last, right after the
// count action, or in its place when there is no counter.
TEST(FlowRule, ATagActionComesLastWithOrWithoutACounter) {
    ibv_counters counters{};
    FlowMatch m = sample_match(kAntenna);
    m.tag = 0x00abcdef;
    for (ibv_counters* c : {static_cast<ibv_counters*>(nullptr), &counters}) {
        const d::FlowRule rule = d::build_flow_rule(m, 1, c);
        const auto specs = walk_specs(rule);
        ASSERT_EQ(specs.size(), c != nullptr ? 5U : 4U);
        EXPECT_EQ(rule.attr.num_of_specs, specs.size());
        EXPECT_EQ(specs.back().type, IBV_FLOW_SPEC_ACTION_TAG);
        EXPECT_EQ(specs.back().size, sizeof(ibv_flow_spec_action_tag));
        EXPECT_EQ(walked_size(specs), rule.attr.size);
        const auto* base = reinterpret_cast<const unsigned char*>(&rule.attr);
        ASSERT_NE(rule.tag_spec(), nullptr);
        EXPECT_EQ(base + specs.back().offset,
                  reinterpret_cast<const unsigned char*>(rule.tag_spec()));
        EXPECT_EQ(rule.tag_spec()->tag_id, 0x00abcdefU);
        if (c != nullptr) {
            EXPECT_EQ(specs[3].type, IBV_FLOW_SPEC_ACTION_COUNT);
            EXPECT_EQ(rule.count.counters, &counters);
        }
    }
    EXPECT_EQ(d::build_flow_rule(sample_match(0), 1, &counters).tag_spec(), nullptr);
}

// --- Receive work requests --------------------------------------------------------

RecvRequest request(std::uint64_t wr_id, std::uint8_t num_sge) {
    RecvRequest r;
    r.wr_id = wr_id;
    r.num_sge = num_sge;
    r.sge[0] = Sge{0x10000 + wr_id * 128, 128, 7};
    r.sge[1] = Sge{0x900000 + wr_id * 8192, 8192, 9};
    return r;
}

TEST(RecvChain, CopiesOneAndTwoSgesAndLinksTheWrs) {
    const std::vector<RecvRequest> requests{request(10, 1), request(11, 2), request(12, 1)};
    std::array<ibv_recv_wr, 4> wrs{};
    std::array<ibv_sge, 8> sges{};
    ASSERT_EQ(d::build_recv_chain(requests, wrs, sges), 3U);

    EXPECT_EQ(wrs[0].wr_id, 10U);
    EXPECT_EQ(wrs[0].num_sge, 1);
    EXPECT_EQ(wrs[0].sg_list, &sges[0]);
    EXPECT_EQ(wrs[0].next, &wrs[1]);
    EXPECT_EQ(sges[0].addr, 0x10000U + 10 * 128);
    EXPECT_EQ(sges[0].length, 128U);
    EXPECT_EQ(sges[0].lkey, 7U);

    EXPECT_EQ(wrs[1].wr_id, 11U);
    EXPECT_EQ(wrs[1].num_sge, 2);
    EXPECT_EQ(wrs[1].sg_list, &sges[1]);
    EXPECT_EQ(wrs[1].next, &wrs[2]);
    EXPECT_EQ(sges[1].addr, 0x10000U + 11 * 128);
    EXPECT_EQ(sges[2].addr, 0x900000U + 11 * 8192);
    EXPECT_EQ(sges[2].length, 8192U);
    EXPECT_EQ(sges[2].lkey, 9U);

    EXPECT_EQ(wrs[2].wr_id, 12U);
    EXPECT_EQ(wrs[2].sg_list, &sges[3]);
    EXPECT_EQ(wrs[2].next, nullptr);
}

TEST(RecvChain, StopsAtTheChunkSize) {
    std::vector<RecvRequest> requests;
    for (std::uint64_t i = 0; i < 100; ++i) {
        requests.push_back(request(i, 2));
    }
    std::array<ibv_recv_wr, d::kPostChunk> wrs{};
    std::array<ibv_sge, 2 * d::kPostChunk> sges{};
    ASSERT_EQ(d::build_recv_chain(requests, wrs, sges), d::kPostChunk);
    EXPECT_EQ(wrs[d::kPostChunk - 1].wr_id, d::kPostChunk - 1);
    EXPECT_EQ(wrs[d::kPostChunk - 1].next, nullptr);
    const std::span<const RecvRequest> rest = std::span{requests}.subspan(d::kPostChunk);
    ASSERT_EQ(d::build_recv_chain(rest, wrs, sges), 100 - d::kPostChunk);
    EXPECT_EQ(wrs[0].wr_id, d::kPostChunk);
}

TEST(RecvChain, IsLimitedByTheSgeArray) {
    const std::vector<RecvRequest> requests{request(1, 1), request(2, 1), request(3, 1)};
    std::array<ibv_recv_wr, 8> wrs{};
    std::array<ibv_sge, 4> sges{};  // room for two WRs of two SGEs
    EXPECT_EQ(d::build_recv_chain(requests, wrs, sges), 2U);
    EXPECT_EQ(wrs[1].next, nullptr);
}

TEST(RecvChain, StopsBeforeARequestWithoutOneOrTwoSges) {
    for (const std::uint8_t bad : {std::uint8_t{0}, std::uint8_t{3}}) {
        const std::vector<RecvRequest> requests{request(1, 1), request(2, 2), request(3, bad),
                                                request(4, 1)};
        std::array<ibv_recv_wr, 8> wrs{};
        std::array<ibv_sge, 16> sges{};
        EXPECT_EQ(d::build_recv_chain(requests, wrs, sges), 2U);
        EXPECT_EQ(wrs[1].next, nullptr);
        EXPECT_EQ(d::build_recv_chain(std::span{requests}.subspan(2), wrs, sges), 0U);
    }
}

// --- Queue-pair transitions ---------------------------------------------------------

TEST(QpTransitions, RawPacketAttributeMasks) {
    const int state = IBV_QP_STATE;
    const int state_port = IBV_QP_STATE | IBV_QP_PORT;
    const std::array all{QpState::reset, QpState::init, QpState::rtr, QpState::error};
    for (const QpState from : all) {
        EXPECT_EQ(d::modify_mask(from, QpState::reset), state);
        EXPECT_EQ(d::modify_mask(from, QpState::error), state);
        EXPECT_EQ(d::modify_mask(from, QpState::init),
                  from == QpState::reset ? std::optional<int>{state_port} : std::nullopt);
        EXPECT_EQ(d::modify_mask(from, QpState::rtr),
                  from == QpState::init ? std::optional<int>{state} : std::nullopt);
    }
}

TEST(QpTransitions, StatesRoundTrip) {
    for (const QpState s : {QpState::reset, QpState::init, QpState::rtr, QpState::error}) {
        EXPECT_EQ(d::from_ibv(d::to_ibv(s)), s);
    }
    EXPECT_EQ(d::to_ibv(QpState::error), IBV_QPS_ERR);
    EXPECT_EQ(d::from_ibv(IBV_QPS_RTS), std::nullopt);
    EXPECT_EQ(d::from_ibv(IBV_QPS_SQD), std::nullopt);
}

// --- Errors -----------------------------------------------------------------------

TEST(ErrorHints, RawPacketQpWithoutCapNetRaw) {
    for (const int err : {EPERM, EACCES}) {
        const std::string hint = d::error_hint(d::Call::create_qp, err, "/opt/ibvcap/bin/ibvcap");
        EXPECT_TRUE(contains(hint, "setcap cap_net_raw=ep /opt/ibvcap/bin/ibvcap")) << hint;
        EXPECT_TRUE(contains(hint, "CAP_NET_RAW")) << hint;
        EXPECT_TRUE(contains(hint, "NFS")) << hint;
    }
    const std::string unnamed = d::error_hint(d::Call::create_qp, EPERM, "");
    EXPECT_TRUE(contains(unnamed, "setcap cap_net_raw=ep")) << unnamed;
}

TEST(ErrorHints, QpCreationLimits) {
    EXPECT_TRUE(contains(d::error_hint(d::Call::create_qp, ENOMEM, "x"), "ulimit -l unlimited"));
    EXPECT_TRUE(contains(d::error_hint(d::Call::create_qp, EINVAL, "x"), "max_qp_wr"));
    EXPECT_EQ(d::error_hint(d::Call::create_qp, EBUSY, "x"), "");
}

TEST(ErrorHints, RefusedFlowRule) {
    for (const int err : {EINVAL, ENOTSUP, EOPNOTSUPP, ENXIO}) {
        const std::string hint = d::error_hint(d::Call::create_flow, err, "x");
        EXPECT_TRUE(contains(hint, "managed flow steering")) << err;
        EXPECT_TRUE(contains(hint, "ConnectX-4 or later")) << err;
    }
    EXPECT_TRUE(contains(d::error_hint(d::Call::create_flow, EPERM, "/x/ibvcap"),
                         "setcap cap_net_raw=ep /x/ibvcap"));
    EXPECT_EQ(d::error_hint(d::Call::create_flow, ENOMEM, "x"), "");
    // The device's 2^16-entry table full (kernel mlx5 fs_core.c add_rule_fg).
    EXPECT_TRUE(contains(d::error_hint(d::Call::create_flow, ENOSPC, "x"), "flow table is full"));
}

TEST(ErrorHints, PinnedMemory) {
    for (const int err : {EFAULT, ENOMEM}) {
        EXPECT_EQ(d::error_hint(d::Call::reg_mr, err, "x"),
                  "cannot pin memory: raise the locked-memory limit (ulimit -l unlimited)");
    }
    EXPECT_EQ(d::error_hint(d::Call::reg_mr, EINVAL, "x"), "");
    EXPECT_TRUE(contains(d::error_hint(d::Call::create_cq, ENOMEM, "x"), "ulimit -l"));
}

TEST(ErrorHints, DmaBuf) {
    for (const int err : {EOPNOTSUPP, EINVAL, ENOSYS}) {
        EXPECT_TRUE(contains(d::error_hint(d::Call::reg_dmabuf_mr, err, "x"), "nvidia-peermem"));
    }
    // An old libibverbs is named as such, not as missing kernel support.
    const std::string old = d::error_hint(d::Call::reg_dmabuf_mr, ENOSYS, "x");
    EXPECT_TRUE(contains(old, "rdma-core 34")) << old;
    EXPECT_FALSE(contains(old, "kernel")) << old;
    // Out of BAR1 space is not "no dma-buf support".
    for (const int err : {ENOMEM, ENOSPC}) {
        const std::string bar = d::error_hint(d::Call::reg_dmabuf_mr, err, "x");
        EXPECT_TRUE(contains(bar, "BAR1")) << bar;
        EXPECT_FALSE(contains(bar, "lacks dma-buf")) << bar;
    }
}

// --- Queues and memory as the engine asks for them (issue: real ConnectX host) ------

TEST(CqAttributes, NeverTheQpNumberAndTheTimestampEachFormatNeeds) {
    struct Row {
        TimestampFormat format;
        std::uint64_t wanted;
        std::uint64_t unwanted;
    };
    const Row rows[] = {
        {TimestampFormat::none, 0,
         IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK},
        // Raw ticks: libibverbs then asks the kernel for the free-running format.
        {TimestampFormat::device_ticks, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
         IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK},
        // Wall clock alone: mlx5 asks for a real-time CQ where the device has
        // one (providers/mlx5/verbs.c create_cq); with raw ticks too it would not.
        {TimestampFormat::wallclock_ns, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
         IBV_WC_EX_WITH_COMPLETION_TIMESTAMP},
    };
    for (const Row& row : rows) {
        SCOPED_TRACE(to_string(row.format));
        for (const bool single : {true, false}) {
            const ibv_cq_init_attr_ex attr = d::cq_init_attr(1234, row.format, single);
            EXPECT_EQ(attr.cqe, 1234u);
            EXPECT_NE(attr.wc_flags & IBV_WC_EX_WITH_BYTE_LEN, 0u);
            // On a raw-packet QP the qpn field is the flow tag: never asked for.
            EXPECT_EQ(attr.wc_flags & IBV_WC_EX_WITH_QP_NUM, 0u);
            EXPECT_EQ(attr.wc_flags & row.wanted, row.wanted);
            EXPECT_EQ(attr.wc_flags & row.unwanted, 0u);
            EXPECT_EQ(attr.wc_flags & IBV_WC_EX_WITH_FLOW_TAG, 0u);  // only when asked
            EXPECT_NE(
                d::cq_init_attr(1234, row.format, single, true).wc_flags & IBV_WC_EX_WITH_FLOW_TAG,
                0u);
            EXPECT_EQ(attr.channel, nullptr);
            if (single) {
                EXPECT_NE(attr.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS, 0u);
                EXPECT_EQ(attr.flags,
                          static_cast<std::uint32_t>(IBV_CREATE_CQ_ATTR_SINGLE_THREADED));
            } else {
                EXPECT_EQ(attr.comp_mask, 0u);
            }
        }
    }
}

TEST(QpAttributes, ReceiveOnlyRawPacketQueueHasNoSendQueue) {
    ibv_cq* cq = reinterpret_cast<ibv_cq*>(std::uintptr_t{0x1000});
    const ibv_qp_init_attr attr = d::raw_qp_init_attr(cq, 4096, 2);
    EXPECT_EQ(attr.qp_type, IBV_QPT_RAW_PACKET);
    EXPECT_EQ(attr.cap.max_send_wr, 0u);  // no TIS/SQ (kernel mlx5/qp.c create_raw_packet_qp)
    EXPECT_EQ(attr.cap.max_send_sge, 0u);
    EXPECT_EQ(attr.cap.max_inline_data, 0u);
    EXPECT_EQ(attr.cap.max_recv_wr, 4096u);
    EXPECT_EQ(attr.cap.max_recv_sge, 2u);
    EXPECT_EQ(attr.recv_cq, cq);
    EXPECT_EQ(attr.send_cq, cq);
    EXPECT_EQ(attr.srq, nullptr);
}

TEST(MemoryRegions, LocalWriteWithRelaxedOrderingThatCanNeverFailARegistration) {
    EXPECT_NE(d::kMrAccess & IBV_ACCESS_LOCAL_WRITE, 0);
    EXPECT_NE(d::kMrAccess & IBV_ACCESS_RELAXED_ORDERING, 0);
    // Relaxed ordering is in the optional range, which libibverbs and the
    // kernel drop where unsupported instead of failing (ibv_reg_mr(3)).
    EXPECT_NE(
        static_cast<int>(IBV_ACCESS_RELAXED_ORDERING) & static_cast<int>(IBV_ACCESS_OPTIONAL_RANGE),
        0);
    // Nothing else: no remote access on a capture host.
    EXPECT_EQ(d::kMrAccess & ~(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING), 0);
}

TEST(StartPoll, EmptyAndBusyAreNotErrors) {
    using ibvcap::verbs::TimestampFormat;
    for (const auto ts :
         {TimestampFormat::none, TimestampFormat::device_ticks, TimestampFormat::wallclock_ns}) {
        EXPECT_EQ(d::classify_start_poll(0, ts), d::PollStart::ready);
        EXPECT_EQ(d::classify_start_poll(ENOENT, ts), d::PollStart::empty);
        // Wall-clock CQs: the clock information was being updated; retry.
        EXPECT_EQ(d::classify_start_poll(EBUSY, ts), d::PollStart::retry);
        for (const int err : {EIO, -1, ENOMEM}) {
            EXPECT_EQ(d::classify_start_poll(err, ts), d::PollStart::error) << err;
        }
    }
    // A wall-clock CQ whose clock-info page is not mapped (verbs-mlx5-2 N3):
    // polled on without its clock, not a CQ error.
    EXPECT_EQ(d::classify_start_poll(EINVAL, TimestampFormat::wallclock_ns),
              d::PollStart::no_clock);
    EXPECT_EQ(d::classify_start_poll(EINVAL, TimestampFormat::none), d::PollStart::error);
    EXPECT_EQ(d::classify_start_poll(EINVAL, TimestampFormat::device_ticks), d::PollStart::error);
}

TEST(DmaBufSymbol, FoundAtRunTimeUnderItsVersion) {
    // This host's libibverbs is rdma-core 34 or later: the lookup (name and
    // version IBVERBS_1.12) must find it. On an older one it returns null
    // and registration fails with ENOSYS (the hint above) instead of the
    // binary failing to load; test_cli checks the binary needs no 1.12.
    EXPECT_NE(d::reg_dmabuf_mr_symbol(), nullptr);
}

TEST(ErrorHints, NoKernelSupport) {
    const std::string hint = d::error_hint(d::Call::get_device_list, ENOSYS, "x");
    EXPECT_TRUE(contains(hint, "ib_uverbs")) << hint;
    EXPECT_TRUE(contains(hint, "mlx5_ib")) << hint;
    EXPECT_EQ(d::error_hint(d::Call::get_device_list, ENOMEM, "x"), "");
}

TEST(ErrorHints, DeviceAccessAndCounters) {
    EXPECT_TRUE(contains(d::error_hint(d::Call::open_device, EACCES, "x"), "/dev/infiniband"));
    EXPECT_FALSE(d::error_hint(d::Call::create_counters, EOPNOTSUPP, "x").empty());
    EXPECT_FALSE(d::error_hint(d::Call::attach_counters, ENOTSUP, "x").empty());
    EXPECT_EQ(d::error_hint(d::Call::attach_counters, EBUSY, "x"), "");
}

TEST(VerbsError, CarriesTheErrnoAndNamesTheCallAndFix) {
    const std::system_error e = d::verbs_error(EPERM, "ibv_create_qp", "run as root");
    EXPECT_EQ(e.code(), std::errc::operation_not_permitted);
    EXPECT_EQ(e.code().category(), std::generic_category());
    EXPECT_EQ(std::string(e.what()).rfind("ibv_create_qp: run as root: ", 0), 0U) << e.what();

    const std::system_error bare = d::verbs_error(ENOMEM, "ibv_post_recv");
    EXPECT_EQ(std::string(bare.what()).rfind("ibv_post_recv: ", 0), 0U) << bare.what();
    EXPECT_FALSE(contains(bare.what(), ": : "));
}

TEST(VerbsError, ErrorCodeFromReturnValueOrErrno) {
    EXPECT_EQ(d::error_code(ENOMEM), ENOMEM);  // verbs that return the errno value
    errno = EAGAIN;
    EXPECT_EQ(d::error_code(-1), EAGAIN);  // verbs that return -1 and set errno
    errno = 0;
    EXPECT_EQ(d::error_code(-2), EIO);  // neither says
    errno = ENODEV;
    EXPECT_EQ(d::null_errno(), ENODEV);
    errno = 0;
    EXPECT_EQ(d::null_errno(), EIO);
}

TEST(VerbsError, MissingDeviceMessageListsThePresentOnes) {
    const std::string two = d::missing_device_message("mlx5_9", {"mlx5_0", "mlx5_1"});
    EXPECT_TRUE(contains(two, "\"mlx5_9\"")) << two;
    EXPECT_TRUE(contains(two, "mlx5_0, mlx5_1")) << two;
    const std::string none = d::missing_device_message("mlx5_0", {});
    EXPECT_TRUE(contains(none, "\"mlx5_0\"")) << none;
    EXPECT_TRUE(contains(none, "none")) << none;
}

// --- Clocks and timeouts --------------------------------------------------------------

TEST(Clock, RawClockIsCyclesInNanosecondsField) {
    // mlx5: tv_sec = 0, tv_nsec = the raw cycle count (may exceed one second).
    timespec mlx5{};
    mlx5.tv_sec = 0;
    mlx5.tv_nsec = 123'456'789'012L;
    EXPECT_EQ(d::raw_clock_ticks(mlx5), 123'456'789'012ULL);
    timespec normalised{};
    normalised.tv_sec = 2;
    normalised.tv_nsec = 5;
    EXPECT_EQ(d::raw_clock_ticks(normalised), 2'000'000'005ULL);
    EXPECT_EQ(d::timespec_ns(normalised), 2'000'000'005ULL);
}

TEST(Clock, HostTimeIsTheMidpoint) {
    EXPECT_EQ(d::midpoint_ns(100, 200), 150U);
    EXPECT_EQ(d::midpoint_ns(200, 100), 150U);  // a stepped clock does not wrap
    EXPECT_EQ(d::midpoint_ns(7, 7), 7U);
    const std::uint64_t big = UINT64_MAX - 10;
    EXPECT_EQ(d::midpoint_ns(big, big + 10), big + 5);  // no overflow
}

TEST(PollTimeout, ClampsToWhatPollTakes) {
    using std::chrono::milliseconds;
    EXPECT_EQ(d::poll_timeout_ms(milliseconds{-5}), 0);
    EXPECT_EQ(d::poll_timeout_ms(milliseconds{0}), 0);
    EXPECT_EQ(d::poll_timeout_ms(milliseconds{250}), 250);
    EXPECT_EQ(d::poll_timeout_ms(milliseconds{std::int64_t{INT_MAX} + 1}), INT_MAX);
}

// rdma-core names a provider libNAME.so.1.<ABI>.<release>
// (providers/mlx5/CMakeLists.txt); the release decides whether a consumed
// completion shifts a QP's wr_ids (before v55: verbs-mlx5-3.md R5).
TEST(ProviderRelease, IsReadFromTheProvidersRealFileName) {
    EXPECT_EQ(ibv_logic::provider_release_of("/usr/lib/x86_64-linux-gnu/libmlx5.so.1.24.44.0"),
              44u);
    EXPECT_EQ(ibv_logic::provider_release_of("libmlx5.so.1.25.56.0"), 56u);
    EXPECT_EQ(ibv_logic::provider_release_of("/opt/mofed/lib/libmlx5.so.1.25.2410.1"), 2410u);
    // Names that do not say: unknown (0), which the engine takes as old.
    EXPECT_EQ(ibv_logic::provider_release_of("/usr/lib/libmlx5.so.1"), 0u);
    EXPECT_EQ(ibv_logic::provider_release_of("/usr/lib/libmlx5.so"), 0u);
    EXPECT_EQ(ibv_logic::provider_release_of("libmlx5.so.1.24.x.0"), 0u);
    EXPECT_EQ(ibv_logic::provider_release_of("libmlx5.so.2.24.44.0"), 0u);
    EXPECT_EQ(ibv_logic::provider_release_of(""), 0u);
    EXPECT_EQ(ibv_logic::provider_release_of("libmlx5.so.1.24.99999999999.0"), 0u);
}

}  // namespace
