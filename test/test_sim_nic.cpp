// The simulated NIC (test/sim/sim_nic.hpp): verbs semantics the capture engine
// relies on, checked exactly.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "formats/packet.hpp"
#include "test/frames.hpp"
#include "test/sim/sim_nic.hpp"

namespace ibvcap {
namespace {

using sim::SimConfig;
using sim::SimHardware;
using sim::SimProvider;
using verbs::Completion;
using verbs::EventKind;
using verbs::FlowMatch;
using verbs::QpState;
using verbs::RecvRequest;
using verbs::Sge;
using verbs::TimestampFormat;
using verbs::WcStatus;

constexpr std::uint32_t kGroup = 0xEF110001;       // 239.17.0.1
constexpr std::uint32_t kGroup2 = 0xEF110002;      // 239.17.0.2
constexpr std::uint32_t kGroupAlias = 0xEF910001;  // 239.145.0.1: same MAC as kGroup
constexpr std::uint16_t kPort = 36001;
constexpr std::uint32_t kSrcA = 0x0A00000B;  // 10.0.0.11
constexpr std::uint32_t kSrcB = 0x0A00000C;  // 10.0.0.12
constexpr std::uint8_t kSentinel = 0xEE;

// Ethernet + IPv4 + UDP to group:port with `payload` patterned bytes.
std::vector<std::uint8_t> udp_frame(std::uint32_t src, std::uint32_t group, std::uint16_t port,
                                    std::size_t payload, int vlan = -1, std::uint8_t seed = 1) {
    UdpHeaderSpec spec;
    spec.src_ip = src;
    spec.dst_ip = group;
    spec.src_port = 5000;
    spec.dst_port = port;
    spec.vlan_id = vlan;
    std::vector<std::uint8_t> f = test::udp_frame(spec, payload);
    const std::size_t off = f.size() - payload;
    for (std::size_t i = 0; i < payload; ++i) {
        f[off + i] = static_cast<std::uint8_t>(seed + i * 7);
    }
    return f;
}

// A frame of exactly `total` bytes (>= 42).
std::vector<std::uint8_t> frame_of_size(std::size_t total, std::uint32_t src = kSrcA,
                                        std::uint32_t group = kGroup) {
    return udp_frame(src, group, kPort, total - kPlainUdpPayloadOffset);
}

FlowMatch match_for(std::uint32_t group, std::uint16_t port, std::uint32_t src = 0) {
    FlowMatch m;
    multicast_mac(group, m.dst_mac.data());
    m.dst_ip = group;
    m.src_ip = src;
    m.dst_port = port;
    return m;
}

// The errno of the std::system_error `f` throws; 0 when it throws nothing.
int error_of(const std::function<void()>& f, std::string* what = nullptr) {
    try {
        f();
    } catch (const std::system_error& e) {
        if (what != nullptr) {
            *what = e.what();
        }
        return e.code().value();
    }
    return 0;
}

// One device, one memory arena registered, one CQ, one QP, one flow for
// kGroup:kPort. Members are declared in creation order, so they are destroyed
// in the order verbs requires.
class SimNic : public ::testing::Test {
  protected:
    void SetUp() override { build(SimConfig{}); }

    void build(const SimConfig& cfg, std::uint32_t cq_depth = 64, std::uint32_t qp_depth = 16,
               std::uint32_t max_sge = 2) {
        flow.reset();
        qp.reset();
        cq.reset();
        mr.reset();
        dev.reset();
        provider = std::make_unique<SimProvider>();
        hw = provider->add(cfg);
        dev = provider->open(cfg.name, cfg.port);
        mem.assign(1 << 16, kSentinel);
        mr = dev->register_memory(mem.data(), mem.size());
        cq = dev->create_cq(
            cq_depth,
            cfg.completion_timestamps ? TimestampFormat::device_ticks : TimestampFormat::none,
            true);
        qp = dev->create_qp(*cq, qp_depth, max_sge);
        flow = qp->create_flow(match_for(kGroup, kPort), true);
    }

    void TearDown() override {
        flow.reset();
        qp.reset();
        cq.reset();
        mr.reset();
        dev.reset();
        if (hw) {
            EXPECT_EQ(hw->ordering_violations(), 0u);
        }
    }

    Sge sge(std::size_t off, std::uint32_t len) const {
        return Sge{reinterpret_cast<std::uint64_t>(mem.data() + off), len, mr->lkey()};
    }
    RecvRequest wr1(std::uint64_t id, std::size_t off, std::uint32_t len) const {
        RecvRequest r;
        r.wr_id = id;
        r.sge[0] = sge(off, len);
        r.num_sge = 1;
        return r;
    }
    RecvRequest wr2(std::uint64_t id, std::size_t off0, std::uint32_t len0, std::size_t off1,
                    std::uint32_t len1) const {
        RecvRequest r;
        r.wr_id = id;
        r.sge[0] = sge(off0, len0);
        r.sge[1] = sge(off1, len1);
        r.num_sge = 2;
        return r;
    }
    // `n` single-SGE WRs, wr_id first.., 2 KiB slots from the arena's start.
    void post_slots(std::size_t n, std::uint64_t first = 0) {
        std::vector<RecvRequest> wrs;
        for (std::size_t i = 0; i < n; ++i) {
            wrs.push_back(wr1(first + i, (first + i) * 2048 % mem.size(), 2048));
        }
        qp->post_recv(wrs);
    }
    void ready() {
        qp->modify(QpState::init);
        qp->modify(QpState::rtr);
    }
    std::vector<Completion> drain(verbs::CompletionQueue& q) {
        std::vector<Completion> all;
        std::array<Completion, 16> batch{};
        for (;;) {
            const std::size_t n = q.poll(batch);
            all.insert(all.end(), batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(n));
            if (n == 0) {
                return all;
            }
        }
    }
    std::vector<Completion> drain() { return drain(*cq); }
    void deliver(const std::vector<std::uint8_t>& f, std::uint64_t ticks = 1000) {
        hw->deliver(f, ticks);
    }

    std::unique_ptr<SimProvider> provider;
    std::shared_ptr<SimHardware> hw;
    std::unique_ptr<verbs::Device> dev;
    std::vector<std::uint8_t> mem;
    std::unique_ptr<verbs::MemoryRegion> mr;
    std::unique_ptr<verbs::CompletionQueue> cq;
    std::unique_ptr<verbs::QueuePair> qp;
    std::unique_ptr<verbs::Flow> flow;
};

// --- the seam's free functions ------------------------------------------------

TEST(VerbsCommon, NamesAndErrorStates) {
    EXPECT_STREQ(verbs::to_string(WcStatus::success), "success");
    EXPECT_STREQ(verbs::to_string(WcStatus::loc_len_err), "loc_len_err");
    EXPECT_STREQ(verbs::to_string(WcStatus::loc_qp_op_err), "loc_qp_op_err");
    EXPECT_STREQ(verbs::to_string(WcStatus::loc_prot_err), "loc_prot_err");
    EXPECT_STREQ(verbs::to_string(WcStatus::wr_flush_err), "wr_flush_err");
    EXPECT_STREQ(verbs::to_string(WcStatus::other), "other");
    EXPECT_FALSE(verbs::qp_in_error(WcStatus::success));
    EXPECT_FALSE(verbs::qp_in_error(WcStatus::loc_len_err));
    EXPECT_TRUE(verbs::qp_in_error(WcStatus::loc_qp_op_err));
    EXPECT_TRUE(verbs::qp_in_error(WcStatus::loc_prot_err));
    EXPECT_TRUE(verbs::qp_in_error(WcStatus::wr_flush_err));
    EXPECT_TRUE(verbs::qp_in_error(WcStatus::other));
    EXPECT_STREQ(verbs::to_string(QpState::reset), "reset");
    EXPECT_STREQ(verbs::to_string(QpState::init), "init");
    EXPECT_STREQ(verbs::to_string(QpState::rtr), "rtr");
    EXPECT_STREQ(verbs::to_string(QpState::error), "error");
    EXPECT_STREQ(verbs::to_string(EventKind::port_active), "port_active");
    EXPECT_STREQ(verbs::to_string(EventKind::port_error), "port_error");
    EXPECT_STREQ(verbs::to_string(EventKind::qp_fatal), "qp_fatal");
    EXPECT_STREQ(verbs::to_string(EventKind::cq_error), "cq_error");
    EXPECT_STREQ(verbs::to_string(EventKind::device_fatal), "device_fatal");
    EXPECT_STREQ(verbs::to_string(EventKind::other), "other");
}

// --- devices and object creation -------------------------------------------------

TEST(SimProviderTest, ListsOpensAndRefusesUnknownDevices) {
    SimProvider p;
    SimConfig a;
    a.name = "sim_a";
    a.max_qp_wr = 1234;
    a.max_cqe = 5678;
    a.max_sge = 3;
    a.clock_khz = 156250;
    SimConfig b;
    b.name = "sim_b";
    b.port = 2;
    b.completion_timestamps = false;
    b.flow_counters = false;
    p.add(a);
    p.add(b);
    EXPECT_EQ(p.device_names(), (std::vector<std::string>{"sim_a", "sim_b"}));
    EXPECT_EQ(error_of([&] { p.add(a); }), EEXIST);

    std::string what;
    EXPECT_EQ(error_of([&] { p.open("mlx5_9", 1); }, &what), ENODEV);
    EXPECT_NE(what.find("mlx5_9"), std::string::npos) << what;
    EXPECT_EQ(error_of([&] { p.open("sim_b", 1); }), EINVAL);  // sim_b has port 2 only

    auto da = p.open("sim_a", 1);
    const auto& ca = da->caps();
    EXPECT_EQ(ca.name, "sim_a");
    EXPECT_EQ(ca.port, 1);
    EXPECT_EQ(ca.max_qp_wr, 1234u);
    EXPECT_EQ(ca.max_cqe, 5678u);
    EXPECT_EQ(ca.max_sge, 3u);
    EXPECT_TRUE(ca.raw_packet_qp);
    EXPECT_TRUE(ca.flow_steering);
    EXPECT_TRUE(ca.completion_timestamps);
    EXPECT_TRUE(ca.flow_counters);
    EXPECT_EQ(ca.hca_core_clock_khz, 156250u);
    auto db = p.open("sim_b", 2);
    EXPECT_EQ(db->caps().port, 2);
    EXPECT_FALSE(db->caps().completion_timestamps);
    EXPECT_FALSE(db->caps().flow_counters);
    EXPECT_EQ(db->caps().hca_core_clock_khz, 0u);
}

// The sizes mlx5 gives its queues (rdma-core providers/mlx5/verbs.c
// create_cq, mlx5_calc_rq_size), which ibv_create_cq/ibv_create_qp report
// back; and the limits a ConnectX-6 reports.
TEST(SimProviderTest, QueuesGetTheSizesMlx5GivesAndTheLimitsAreReported) {
    SimProvider p;
    SimConfig cfg;
    cfg.max_sge = 4;
    auto hw = p.add(cfg);
    auto dev = p.open(cfg.name, cfg.port);
    const auto& caps = dev->caps();
    EXPECT_EQ(caps.max_qp, 131072u);
    EXPECT_EQ(caps.max_cq, 16777216u);
    EXPECT_EQ(caps.max_mr, 16777216u);
    EXPECT_EQ(caps.max_pd, 8388608u);
    EXPECT_EQ(caps.max_mr_size, ~std::uint64_t{0});
    for (const auto& [asked, made] : std::vector<std::pair<std::uint32_t, std::uint32_t>>{
             {1, 1}, {2, 3}, {3, 3}, {4, 7}, {64, 127}, {127, 127}, {128, 255}}) {
        EXPECT_EQ(dev->create_cq(asked, TimestampFormat::none, false)->depth(), made) << asked;
    }
    auto cq = dev->create_cq(64, TimestampFormat::none, false);
    struct Case {
        std::uint32_t depth, sge, made_depth, made_sge;
    };
    for (const Case c : {Case{16, 2, 16, 2}, Case{100, 2, 128, 2}, Case{1, 1, 4, 1},
                         Case{1, 2, 2, 2}, Case{5, 3, 8, 4}}) {
        auto qp = dev->create_qp(*cq, c.depth, c.sge);
        EXPECT_EQ(qp->recv_depth(), c.made_depth) << c.depth << "x" << c.sge;
        EXPECT_EQ(qp->recv_sge(), c.made_sge) << c.depth << "x" << c.sge;
    }
    // The QP takes as many WRs as it reports.
    std::vector<std::uint8_t> mem(4096);
    auto mr = dev->register_memory(mem.data(), mem.size());
    auto qp = dev->create_qp(*cq, 5, 1);
    ASSERT_EQ(qp->recv_depth(), 8u);
    std::vector<RecvRequest> wrs(8);
    for (std::size_t i = 0; i < wrs.size(); ++i) {
        wrs[i].wr_id = i;
        wrs[i].sge[0] = {reinterpret_cast<std::uint64_t>(mem.data()), 64, mr->lkey()};
    }
    qp->modify(QpState::init);
    EXPECT_NO_THROW(qp->post_recv(wrs));
    EXPECT_EQ(error_of([&] { qp->post_recv(std::span(wrs).first(1)); }), ENOMEM);
}

TEST(SimProviderTest, CreationLimitsAndMissingCapabilities) {
    SimProvider p;
    SimConfig cfg;
    cfg.max_cqe = 100;
    cfg.max_qp_wr = 50;
    cfg.max_sge = 2;
    auto hw = p.add(cfg);
    auto dev = p.open(cfg.name, cfg.port);
    std::vector<std::uint8_t> mem(4096);

    std::string what;
    EXPECT_EQ(error_of([&] { dev->register_dmabuf(3, 0, 4096, 0); }, &what), EOPNOTSUPP);
    EXPECT_NE(what.find("simulated NIC has no dma-buf"), std::string::npos) << what;
    EXPECT_EQ(error_of([&] { dev->register_memory(mem.data(), 0); }), EINVAL);

    EXPECT_EQ(error_of([&] { dev->create_cq(101, TimestampFormat::none, false); }), EINVAL);
    EXPECT_EQ(error_of([&] { dev->create_cq(0, TimestampFormat::none, false); }), EINVAL);
    auto cq = dev->create_cq(100, TimestampFormat::none, false);
    EXPECT_EQ(error_of([&] { dev->create_qp(*cq, 51, 1); }), EINVAL);
    EXPECT_EQ(error_of([&] { dev->create_qp(*cq, 50, 3); }), EINVAL);
    EXPECT_EQ(error_of([&] { dev->create_qp(*cq, 0, 1); }), EINVAL);
    {
        auto mr1 = dev->register_memory(mem.data(), 2048);
        auto mr2 = dev->register_memory(mem.data() + 2048, 2048);
        EXPECT_NE(mr1->lkey(), mr2->lkey());
        auto qp = dev->create_qp(*cq, 50, 2);
        EXPECT_EQ(qp->state(), QpState::reset);
        EXPECT_EQ(hw->qps(), 1u);
    }
    EXPECT_EQ(hw->qps(), 0u);

    SimConfig noraw;
    noraw.name = "noraw";
    noraw.raw_packet_qp = false;
    noraw.flow_steering = false;
    p.add(noraw);
    auto dev2 = p.open("noraw", 1);
    auto cq2 = dev2->create_cq(8, TimestampFormat::none, false);
    EXPECT_EQ(error_of([&] { dev2->create_qp(*cq2, 8, 1); }, &what), EPERM);
    EXPECT_NE(what.find("cap_net_raw"), std::string::npos) << what;
    // A CQ of another device is refused.
    EXPECT_EQ(error_of([&] { dev->create_qp(*cq2, 8, 1); }), EINVAL);

    SimConfig nosteer;
    nosteer.name = "nosteer";
    nosteer.flow_steering = false;
    p.add(nosteer);
    auto dev3 = p.open("nosteer", 1);
    auto cq3 = dev3->create_cq(8, TimestampFormat::none, false);
    auto qp3 = dev3->create_qp(*cq3, 8, 1);
    EXPECT_EQ(error_of([&] { qp3->create_flow(match_for(kGroup, kPort), false); }), EOPNOTSUPP);
    EXPECT_EQ(hw->ordering_violations(), 0u);
}

// --- the QP state machine ----------------------------------------------------------

TEST_F(SimNic, ModifyFollowsTheVerbsStateMachine) {
    struct Row {
        std::vector<QpState> path;  // from RESET
        QpState to;
        bool allowed;
    };
    using S = QpState;
    const std::vector<Row> rows = {
        {{}, S::init, true},
        {{}, S::rtr, false},
        {{}, S::reset, true},
        {{}, S::error, true},
        {{S::init}, S::rtr, true},
        {{S::init}, S::init, false},
        {{S::init}, S::reset, true},
        {{S::init}, S::error, true},
        {{S::init, S::rtr}, S::init, false},
        {{S::init, S::rtr}, S::rtr, false},
        {{S::init, S::rtr}, S::reset, true},
        {{S::init, S::rtr}, S::error, true},
        {{S::error}, S::init, false},
        {{S::error}, S::rtr, false},
        {{S::error}, S::reset, true},
        {{S::error}, S::error, true},
    };
    for (const Row& row : rows) {
        qp->modify(S::reset);
        for (S s : row.path) {
            qp->modify(s);
        }
        const S from = qp->state();
        const int err = error_of([&] { qp->modify(row.to); });
        EXPECT_EQ(err, row.allowed ? 0 : EINVAL)
            << verbs::to_string(from) << " -> " << verbs::to_string(row.to);
        EXPECT_EQ(qp->state(), row.allowed ? row.to : from);
    }
}

TEST_F(SimNic, ModifyToErrorFlushesAndToResetDiscards) {
    ready();
    post_slots(3);
    qp->modify(QpState::error);
    const auto wcs = drain();
    ASSERT_EQ(wcs.size(), 3u);
    for (std::size_t i = 0; i < wcs.size(); ++i) {
        EXPECT_EQ(wcs[i].wr_id, i);
        EXPECT_EQ(wcs[i].status, WcStatus::wr_flush_err);
        EXPECT_EQ(wcs[i].byte_len, 0u);
        EXPECT_FALSE(wcs[i].has_timestamp);
    }
    // Asked for, not a fault: no async event.
    EXPECT_EQ(dev->wait_event(std::chrono::milliseconds(0)), std::nullopt);

    qp->modify(QpState::reset);
    qp->modify(QpState::init);
    post_slots(3);
    qp->modify(QpState::rtr);
    qp->modify(QpState::reset);
    EXPECT_EQ(hw->posted_wrs(qp->qp_num()), 0u);
    EXPECT_TRUE(drain().empty());
    EXPECT_EQ(hw->counters().completions, 3u);
}

TEST_F(SimNic, PostRecvRulesInResetDepthAndSgeCount) {
    std::string what;
    EXPECT_EQ(error_of([&] { post_slots(1); }), EINVAL);  // RESET
    EXPECT_EQ(hw->posted_wrs(qp->qp_num()), 0u);

    qp->modify(QpState::init);
    RecvRequest none = wr1(100, 0, 64);
    none.num_sge = 0;
    RecvRequest three = wr1(101, 0, 64);
    three.num_sge = 3;
    EXPECT_EQ(error_of([&] { qp->post_recv(std::span(&none, 1)); }), EINVAL);
    EXPECT_EQ(error_of([&] { qp->post_recv(std::span(&three, 1)); }), EINVAL);

    // WRs before a bad one are posted; the bad one and those after are not.
    const std::vector<RecvRequest> batch = {wr1(0, 0, 64), wr1(1, 64, 64), none, wr1(3, 192, 64)};
    EXPECT_EQ(error_of([&] { qp->post_recv(batch); }), EINVAL);
    EXPECT_EQ(hw->posted_wrs(qp->qp_num()), 2u);

    // Depth 16: 14 more fit, the 15th is refused with ENOMEM and named.
    std::vector<RecvRequest> more;
    for (std::uint64_t i = 0; i < 16; ++i) {
        more.push_back(wr1(1000 + i, 256 + i * 64, 64));
    }
    EXPECT_EQ(error_of([&] { qp->post_recv(more); }, &what), ENOMEM);
    EXPECT_NE(what.find("1014"), std::string::npos) << what;
    EXPECT_EQ(hw->posted_wrs(qp->qp_num()), 16u);
    EXPECT_EQ(error_of([&] { post_slots(1, 20); }), ENOMEM);
    EXPECT_TRUE(drain().empty());
}

TEST(SimNicSge, TwoSgesOnAOneSgeQpAreRefused) {
    SimProvider p;
    p.add(SimConfig{});
    auto dev = p.open("sim_mlx5_0", 1);
    std::vector<std::uint8_t> mem(256);
    auto mr = dev->register_memory(mem.data(), mem.size());
    auto cq = dev->create_cq(4, TimestampFormat::none, false);
    auto qp = dev->create_qp(*cq, 4, 1);
    qp->modify(QpState::init);
    RecvRequest r;
    r.sge[0] = {reinterpret_cast<std::uint64_t>(mem.data()), 128, mr->lkey()};
    r.sge[1] = {reinterpret_cast<std::uint64_t>(mem.data() + 128), 128, mr->lkey()};
    r.num_sge = 2;
    EXPECT_EQ(error_of([&] { qp->post_recv(std::span(&r, 1)); }), EINVAL);
    r.num_sge = 1;
    EXPECT_EQ(error_of([&] { qp->post_recv(std::span(&r, 1)); }), 0);
}

// --- receive: scatter, lengths, drops -------------------------------------------

TEST_F(SimNic, Sge0IsFilledCompletelyBeforeSge1) {
    constexpr std::size_t kOff0 = 0;
    constexpr std::size_t kOff1 = 1024;
    constexpr std::uint32_t kLen0 = 64;
    constexpr std::uint32_t kLen1 = 4096;
    for (const std::size_t size : {std::size_t{50}, std::size_t{64}, std::size_t{1000}}) {
        SCOPED_TRACE("frame of " + std::to_string(size) + " bytes");
        std::fill(mem.begin(), mem.end(), kSentinel);
        qp->modify(QpState::reset);
        qp->modify(QpState::init);
        const RecvRequest r = wr2(7, kOff0, kLen0, kOff1, kLen1);
        qp->post_recv(std::span(&r, 1));
        qp->modify(QpState::rtr);
        const auto f = frame_of_size(size);
        ASSERT_EQ(f.size(), size);
        deliver(f);
        const auto wcs = drain();
        ASSERT_EQ(wcs.size(), 1u);
        EXPECT_EQ(wcs[0].status, WcStatus::success);
        EXPECT_EQ(wcs[0].wr_id, 7u);
        EXPECT_EQ(wcs[0].byte_len, size);
        EXPECT_EQ(wcs[0].qp_num, 0u);  // the flow tag, not the QP (test/sim/sim_nic.hpp)

        const std::size_t in0 = std::min<std::size_t>(size, kLen0);
        const std::size_t in1 = size - in0;
        EXPECT_EQ(std::memcmp(mem.data() + kOff0, f.data(), in0), 0);
        for (std::size_t i = in0; i < kLen0; ++i) {
            ASSERT_EQ(mem[kOff0 + i], kSentinel) << "SGE0 byte " << i << " written";
        }
        EXPECT_EQ(std::memcmp(mem.data() + kOff1, f.data() + in0, in1), 0);
        for (std::size_t i = in1; i < kLen1; ++i) {
            ASSERT_EQ(mem[kOff1 + i], kSentinel) << "SGE1 byte " << i << " written";
        }
        // Nothing between or around the SGEs was touched.
        for (std::size_t i = kLen0; i < kOff1; ++i) {
            ASSERT_EQ(mem[i], kSentinel);
        }
    }
}

TEST_F(SimNic, FrameLargerThanTheSgesCompletesWithLocLenErr) {
    qp->modify(QpState::init);
    const std::vector<RecvRequest> wrs = {wr2(1, 0, 64, 1024, 64), wr2(2, 2048, 64, 4096, 64),
                                          wr1(3, 8192, 100)};
    qp->post_recv(wrs);
    qp->modify(QpState::rtr);
    deliver(frame_of_size(129));  // one byte too many for 64 + 64
    deliver(frame_of_size(128));  // exactly fits
    deliver(frame_of_size(101));  // one byte too many for a single 100-byte SGE
    const auto wcs = drain();
    ASSERT_EQ(wcs.size(), 3u);
    EXPECT_EQ(wcs[0].wr_id, 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::loc_len_err);
    EXPECT_EQ(wcs[0].byte_len, 0u);
    EXPECT_EQ(wcs[1].wr_id, 2u);
    EXPECT_EQ(wcs[1].status, WcStatus::success);
    EXPECT_EQ(wcs[1].byte_len, 128u);
    EXPECT_EQ(wcs[2].wr_id, 3u);
    EXPECT_EQ(wcs[2].status, WcStatus::loc_len_err);
    // The QP keeps receiving.
    EXPECT_EQ(qp->state(), QpState::rtr);
    EXPECT_EQ(hw->posted_wrs(qp->qp_num()), 0u);
    post_slots(1, 9);
    deliver(frame_of_size(200));
    const auto again = drain();
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].status, WcStatus::success);
    EXPECT_EQ(again[0].wr_id, 9u);
    const auto c = hw->counters();
    EXPECT_EQ(c.steered, 4u);
    EXPECT_EQ(c.completions, 4u);
    EXPECT_EQ(c.out_of_buffer, 0u);
}

TEST_F(SimNic, NoPostedWrOrQpNotReadyCountsOutOfBuffer) {
    const auto f = frame_of_size(300);
    deliver(f);  // RESET
    qp->modify(QpState::init);
    post_slots(2);
    deliver(f);  // INIT, WRs posted: still not receiving
    deliver(f);
    EXPECT_EQ(hw->posted_wrs(qp->qp_num()), 2u);
    qp->modify(QpState::rtr);
    deliver(f);
    deliver(f);
    deliver(f);  // RTR, nothing left posted
    const auto c = hw->counters();
    EXPECT_EQ(c.rx_frames, 6u);
    EXPECT_EQ(c.steered, 6u);
    EXPECT_EQ(c.out_of_buffer, 4u);
    EXPECT_EQ(c.completions, 2u);
    EXPECT_EQ(c.unmatched, 0u);
    EXPECT_EQ(drain().size(), 2u);
    EXPECT_EQ(flow->matched_packets(), std::optional<std::uint64_t>{6});
}

TEST_F(SimNic, FramesNoRuleMatchesAreUnmatched) {
    ready();
    post_slots(8);
    auto wrong_mac = frame_of_size(100);
    wrong_mac[5] ^= 0x01;
    auto arp = frame_of_size(100);
    arp[12] = 0x08;
    arp[13] = 0x06;
    const auto right = frame_of_size(100);
    const std::vector<std::uint8_t> truncated(right.begin(), right.begin() + 30);
    const std::vector<std::vector<std::uint8_t>> frames = {
        udp_frame(kSrcA, kGroup, kPort + 1, 64),   // wrong UDP port
        udp_frame(kSrcA, kGroup2, kPort, 64),      // another group (IP and MAC)
        udp_frame(kSrcA, kGroupAlias, kPort, 64),  // same MAC, other IP
        wrong_mac,                                 // right IP, wrong MAC
        arp,                                       // not IPv4
        truncated,                                 // malformed
    };
    for (const auto& f : frames) {
        deliver(f);
    }
    auto c = hw->counters();
    EXPECT_EQ(c.rx_frames, frames.size());
    EXPECT_EQ(c.unmatched, frames.size());
    EXPECT_EQ(c.steered, 0u);
    EXPECT_EQ(c.out_of_buffer, 0u);
    EXPECT_EQ(hw->posted_wrs(qp->qp_num()), 8u);
    EXPECT_TRUE(drain().empty());
    EXPECT_EQ(flow->matched_packets(), std::optional<std::uint64_t>{0});

    deliver(right);
    c = hw->counters();
    EXPECT_EQ(c.steered, 1u);
    EXPECT_EQ(drain().size(), 1u);
}

TEST_F(SimNic, VlanTaggedFramesAreSteeredWhole) {
    ready();
    post_slots(1);
    const auto f = udp_frame(kSrcA, kGroup, kPort, 100, 42);
    ASSERT_EQ(f.size(), 46u + 100u);
    deliver(f);
    const auto wcs = drain();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].byte_len, f.size());
    EXPECT_EQ(std::memcmp(mem.data(), f.data(), f.size()), 0);
}

TEST_F(SimNic, SourceIpRuleWinsOverGroupRule) {
    // `qp` holds the group rule (created first); qp_ant gets the antenna rule.
    auto qp_ant = dev->create_qp(*cq, 16, 2);
    auto ant_flow = qp_ant->create_flow(match_for(kGroup, kPort, kSrcB), true);
    ready();
    qp_ant->modify(QpState::init);
    qp_ant->modify(QpState::rtr);
    post_slots(4);
    std::vector<RecvRequest> ant_wrs = {wr1(100, 20000, 2048), wr1(101, 24000, 2048)};
    qp_ant->post_recv(ant_wrs);

    deliver(udp_frame(kSrcB, kGroup, kPort, 64));
    deliver(udp_frame(kSrcA, kGroup, kPort, 64));
    deliver(udp_frame(kSrcB, kGroup, kPort, 64));
    const auto wcs = drain();
    // Which QP took each frame shows in the wr_id alone (its WRs' ids).
    ASSERT_EQ(wcs.size(), 3u);
    EXPECT_EQ(wcs[0].wr_id, 100u);
    EXPECT_EQ(wcs[1].wr_id, 0u);
    EXPECT_EQ(wcs[2].wr_id, 101u);
    EXPECT_EQ(ant_flow->matched_packets(), std::optional<std::uint64_t>{2});
    EXPECT_EQ(flow->matched_packets(), std::optional<std::uint64_t>{1});

    // Two rules of the same match are one entry with both destinations
    // (mlx5 fs_core.c add_rule_fg, verbs-mlx5-3.md R6): each QP takes a copy,
    // the first created first.
    auto qp_late = dev->create_qp(*cq, 16, 2);
    auto late_flow = qp_late->create_flow(match_for(kGroup, kPort), true);
    qp_late->modify(QpState::init);
    qp_late->modify(QpState::rtr);
    const std::vector<RecvRequest> late = {wr1(200, 30000, 2048), wr1(201, 34000, 2048)};
    qp_late->post_recv(late);
    deliver(udp_frame(kSrcA, kGroup, kPort, 64));
    const auto more = drain();
    ASSERT_EQ(more.size(), 2u);
    EXPECT_EQ(more[0].wr_id, 1u);    // qp's next WR
    EXPECT_EQ(more[1].wr_id, 200u);  // and qp_late's
    EXPECT_EQ(late_flow->matched_packets(), std::optional<std::uint64_t>{1});
    // Once the first rule is gone, the later one matches.
    flow.reset();
    deliver(udp_frame(kSrcA, kGroup, kPort, 64));
    const auto last = drain();
    ASSERT_EQ(last.size(), 1u);
    EXPECT_EQ(last[0].wr_id, 201u);  // qp_late's WR
    EXPECT_EQ(hw->flows(), 2u);
    late_flow.reset();
    ant_flow.reset();
    qp_late.reset();
    qp_ant.reset();
}

TEST_F(SimNic, FlowCountersCountMatchedPackets) {
    auto uncounted = qp->create_flow(match_for(kGroup2, kPort), false);
    ready();
    post_slots(2);
    for (int i = 0; i < 3; ++i) {
        deliver(frame_of_size(100));  // 2 received, 1 out_of_buffer: all matched
    }
    deliver(udp_frame(kSrcA, kGroup2, kPort, 64));
    deliver(udp_frame(kSrcA, kGroup, kPort + 5, 64));  // unmatched
    EXPECT_EQ(flow->matched_packets(), std::optional<std::uint64_t>{3});
    EXPECT_EQ(uncounted->matched_packets(), std::nullopt);
    EXPECT_EQ(hw->flow_counter_total(), 3u);
    EXPECT_EQ(hw->counters().steered, 4u);
    uncounted.reset();
    flow.reset();
    EXPECT_EQ(hw->flows(), 0u);
    EXPECT_EQ(hw->flow_counter_total(), 3u);  // counts of destroyed rules are kept
    deliver(frame_of_size(100));
    EXPECT_EQ(hw->counters().unmatched, 2u);  // the rule is gone
}

// Many rules on one QP (issue 44): each its own entry steering to the QP,
// each completion carrying its rule's tag in the qpn bits, and the flow tag
// read only from a CQ made to read it (IBV_WC_EX_WITH_FLOW_TAG).
TEST_F(SimNic, ManyTaggedRulesSteerToOneQpAndTheirTagsComeBack) {
    flow.reset();  // the fixture's untagged rule: the tags below are new entries
    std::vector<std::unique_ptr<verbs::Flow>> rules;
    for (std::uint32_t g = 0; g < 4; ++g) {
        FlowMatch m = match_for(kGroup + g, kPort);
        m.tag = 100 + g;
        rules.push_back(qp->create_flow(m, true));
    }
    ready();
    post_slots(4);
    for (std::uint32_t g : {2u, 0u, 3u, 1u}) {
        deliver(udp_frame(kSrcA, kGroup + g, kPort, 64));
    }
    const auto wcs = drain();
    ASSERT_EQ(wcs.size(), 4u);
    const std::uint32_t want[] = {102, 100, 103, 101};
    for (std::size_t i = 0; i < wcs.size(); ++i) {
        EXPECT_EQ(wcs[i].flow_tag, want[i]);
        EXPECT_EQ(wcs[i].qp_num, want[i]);  // the same CQE bits
    }
    EXPECT_EQ(hw->flows(), 4u);
    rules.clear();
}

TEST_F(SimNic, AFlowTagIsReadOnlyFromACqThatAskedForIt) {
    flow.reset();
    qp.reset();
    cq = dev->create_cq(64, TimestampFormat::none, false);
    qp = dev->create_qp(*cq, 16, 2);
    FlowMatch m = match_for(kGroup, kPort);
    m.tag = 7;
    flow = qp->create_flow(m, true);
    ready();
    post_slots(1);
    deliver(frame_of_size(100));
    const auto wcs = drain();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].flow_tag, 0u);
    EXPECT_EQ(wcs[0].qp_num, 7u);  // what ibv_poll_cq's qp_num would hold
}

// The kernel's checks (mlx5 fs.c parse_flow_attr, fs_core.c
// check_conflicting_ftes, get_flow_table): a tag of 2^24 or more is EINVAL; a
// rule of a match whose entry exists with another tag (or none) is EEXIST,
// one with the same tag joins it; past the table's entries, ENOSPC.
TEST_F(SimNic, TagsAndTheFlowTableHaveTheKernelsLimits) {
    FlowMatch m = match_for(kGroup2, kPort);
    m.tag = 1u << 24;
    EXPECT_EQ(error_of([&] { qp->create_flow(m, false); }), EINVAL);
    m.tag = 5;
    std::string what;
    // The fixture's kGroup rule made its entry untagged.
    FlowMatch same = match_for(kGroup, kPort);
    same.tag = 5;
    EXPECT_EQ(error_of([&] { qp->create_flow(same, false); }, &what), EEXIST);
    EXPECT_NE(what.find("already exists with different flow tag"), std::string::npos) << what;
    same.tag = 0;  // an untagged rule joins any entry
    auto joined = qp->create_flow(same, false);
    auto tagged = qp->create_flow(m, false);
    auto again = qp->create_flow(m, false);  // the same tag: joins
    m.tag = 6;
    EXPECT_EQ(error_of([&] { qp->create_flow(m, false); }), EEXIST);
    EXPECT_EQ(hw->flows(), 4u);
    again.reset();
    tagged.reset();
    joined.reset();

    SimConfig small;
    small.flow_table_entries = 3;
    build(small);  // one entry used by the fixture's rule
    auto two = qp->create_flow(match_for(kGroup2, kPort), false);
    auto three = qp->create_flow(match_for(kGroup2, kPort + 1), false);
    auto shared = qp->create_flow(match_for(kGroup2, kPort + 1), false);  // no new entry
    EXPECT_EQ(error_of([&] { qp->create_flow(match_for(kGroup2, kPort + 2), false); }, &what),
              ENOSPC);
    EXPECT_NE(what.find("3 entries"), std::string::npos) << what;
    shared.reset();
    three.reset();
    two.reset();
}

TEST_F(SimNic, CounterRuleNeedsFlowCounters) {
    SimConfig cfg;
    cfg.flow_counters = false;
    flow.reset();
    qp.reset();
    cq.reset();
    mr.reset();
    dev.reset();
    provider = std::make_unique<SimProvider>();
    hw = provider->add(cfg);
    dev = provider->open(cfg.name, cfg.port);
    cq = dev->create_cq(4, TimestampFormat::none, false);
    qp = dev->create_qp(*cq, 4, 1);
    std::string what;
    EXPECT_EQ(error_of([&] { qp->create_flow(match_for(kGroup, kPort), true); }, &what),
              EOPNOTSUPP);
    EXPECT_EQ(hw->flows(), 0u);
    flow = qp->create_flow(match_for(kGroup, kPort), false);
    EXPECT_EQ(flow->matched_packets(), std::nullopt);
    EXPECT_EQ(hw->flows(), 1u);
}

// --- errors and faults -------------------------------------------------------------

TEST_F(SimNic, BadLkeyCompletesWithLocProtErrAndFlushesTheRest) {
    qp->modify(QpState::init);
    RecvRequest bad = wr1(0, 0, 2048);
    bad.sge[0].lkey = mr->lkey() + 999;
    const std::vector<RecvRequest> wrs = {bad, wr1(1, 2048, 2048), wr1(2, 4096, 2048)};
    qp->post_recv(wrs);
    qp->modify(QpState::rtr);
    deliver(frame_of_size(200));
    const auto wcs = drain();
    ASSERT_EQ(wcs.size(), 3u);
    EXPECT_EQ(wcs[0].wr_id, 0u);
    EXPECT_EQ(wcs[0].status, WcStatus::loc_prot_err);
    EXPECT_EQ(wcs[1].wr_id, 1u);
    EXPECT_EQ(wcs[1].status, WcStatus::wr_flush_err);
    EXPECT_EQ(wcs[2].wr_id, 2u);
    EXPECT_EQ(wcs[2].status, WcStatus::wr_flush_err);
    for (const auto& wc : wcs) {
        EXPECT_EQ(wc.qp_num, qp->qp_num());
    }
    EXPECT_EQ(qp->state(), QpState::error);
    EXPECT_EQ(hw->posted_wrs(qp->qp_num()), 0u);
    EXPECT_TRUE(
        std::all_of(mem.begin(), mem.begin() + 8192, [](auto b) { return b == kSentinel; }));
    // Further frames find no WR; WRs posted now are flushed at once.
    deliver(frame_of_size(200));
    EXPECT_EQ(hw->counters().out_of_buffer, 1u);
    post_slots(2, 10);
    const auto flushed = drain();
    ASSERT_EQ(flushed.size(), 2u);
    EXPECT_EQ(flushed[0].wr_id, 10u);
    EXPECT_EQ(flushed[0].status, WcStatus::wr_flush_err);
    EXPECT_EQ(flushed[1].wr_id, 11u);
    // No async event: the completion reported it.
    EXPECT_EQ(dev->wait_event(std::chrono::milliseconds(0)), std::nullopt);
}

TEST_F(SimNic, SgeOutsideItsRegionOrInAnotherPdIsAProtectionError) {
    // A second SGE that runs past the end of the region.
    qp->modify(QpState::init);
    const RecvRequest past = wr2(5, 0, 64, mem.size() - 100, 200);
    qp->post_recv(std::span(&past, 1));
    qp->modify(QpState::rtr);
    deliver(frame_of_size(100));
    auto wcs = drain();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::loc_prot_err);
    EXPECT_EQ(qp->state(), QpState::error);

    // A region registered through another device handle (another protection
    // domain) of the same NIC.
    auto dev2 = provider->open(hw->config().name, hw->config().port);
    std::vector<std::uint8_t> other(4096, kSentinel);
    auto mr2 = dev2->register_memory(other.data(), other.size());
    qp->modify(QpState::reset);
    qp->modify(QpState::init);
    RecvRequest foreign;
    foreign.wr_id = 6;
    foreign.sge[0] = {reinterpret_cast<std::uint64_t>(other.data()), 4096, mr2->lkey()};
    qp->post_recv(std::span(&foreign, 1));
    qp->modify(QpState::rtr);
    deliver(frame_of_size(100));
    wcs = drain();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].wr_id, 6u);
    EXPECT_EQ(wcs[0].status, WcStatus::loc_prot_err);
    EXPECT_TRUE(std::all_of(other.begin(), other.end(), [](auto b) { return b == kSentinel; }));

    // A deregistered region.
    qp->modify(QpState::reset);
    qp->modify(QpState::init);
    auto mr3 = dev->register_memory(other.data(), other.size());
    foreign.wr_id = 7;
    foreign.sge[0].lkey = mr3->lkey();
    qp->post_recv(std::span(&foreign, 1));
    qp->modify(QpState::rtr);
    mr3.reset();
    deliver(frame_of_size(100));
    wcs = drain();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::loc_prot_err);
    mr2.reset();
}

TEST_F(SimNic, InjectedQpErrorFlushesEverythingAndRaisesQpFatal) {
    ready();
    post_slots(5);
    hw->inject_qp_error(qp->qp_num());
    EXPECT_EQ(qp->state(), QpState::error);
    EXPECT_EQ(hw->posted_wrs(qp->qp_num()), 0u);
    const auto wcs = drain();
    ASSERT_EQ(wcs.size(), 5u);
    for (std::size_t i = 0; i < wcs.size(); ++i) {
        EXPECT_EQ(wcs[i].wr_id, i);
        EXPECT_EQ(wcs[i].status, WcStatus::wr_flush_err);
        EXPECT_EQ(wcs[i].qp_num, qp->qp_num());
        EXPECT_TRUE(verbs::qp_in_error(wcs[i].status));
    }
    const auto ev = dev->wait_event(std::chrono::milliseconds(100));
    ASSERT_TRUE(ev.has_value());
    EXPECT_EQ(ev->kind, EventKind::qp_fatal);
    EXPECT_EQ(ev->qp_num, qp->qp_num());
    EXPECT_EQ(ev->name, "IBV_EVENT_QP_FATAL");
    EXPECT_EQ(dev->wait_event(std::chrono::milliseconds(0)), std::nullopt);
    EXPECT_THROW(hw->inject_qp_error(qp->qp_num() + 1000), std::out_of_range);
}

TEST_F(SimNic, RecoveryResetInitPostRtrReceivesAgain) {
    ready();
    post_slots(3);
    deliver(frame_of_size(100));
    hw->inject_qp_error(qp->qp_num());
    EXPECT_EQ(drain().size(), 3u);  // 1 success + 2 flushed
    // RESET discards WRs without completions (here: the ones posted in error
    // were flushed at once; post some in INIT and reset again).
    qp->modify(QpState::reset);
    qp->modify(QpState::init);
    post_slots(4, 10);
    qp->modify(QpState::reset);
    EXPECT_EQ(hw->posted_wrs(qp->qp_num()), 0u);
    EXPECT_TRUE(drain().empty());
    // The recovery sequence of docs/architecture.md, "QP error recovery".
    qp->modify(QpState::init);
    post_slots(2, 20);
    qp->modify(QpState::rtr);
    const auto f = frame_of_size(300);
    deliver(f);
    const auto wcs = drain();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].wr_id, 20u);
    EXPECT_EQ(wcs[0].status, WcStatus::success);
    EXPECT_EQ(wcs[0].byte_len, 300u);
    EXPECT_EQ(std::memcmp(mem.data() + 20 * 2048, f.data(), f.size()), 0);
    EXPECT_EQ(hw->posted_wrs(qp->qp_num()), 1u);
}

TEST_F(SimNic, FullCqLosesCompletionsAndRaisesCqError) {
    build(SimConfig{}, 3, 8);  // mlx5 makes a CQ of 3 entries exactly 3 (2^2 - 1)
    EXPECT_EQ(cq->depth(), 3u);
    ready();
    post_slots(8);
    for (int i = 0; i < 6; ++i) {
        deliver(frame_of_size(100));
    }
    auto c = hw->counters();
    EXPECT_EQ(c.completions, 3u);
    EXPECT_EQ(c.cq_overruns, 3u);
    const auto ev = dev->wait_event(std::chrono::milliseconds(100));
    ASSERT_TRUE(ev.has_value());
    EXPECT_EQ(ev->kind, EventKind::cq_error);
    EXPECT_EQ(dev->wait_event(std::chrono::milliseconds(0)), std::nullopt);  // one per overrun
    const auto wcs = drain();
    ASSERT_EQ(wcs.size(), 3u);
    for (std::size_t i = 0; i < wcs.size(); ++i) {
        EXPECT_EQ(wcs[i].wr_id, i);  // FIFO; WRs 3 to 5 were consumed, their completions lost
    }
    deliver(frame_of_size(100));
    deliver(frame_of_size(100));
    const auto rest = drain();
    ASSERT_EQ(rest.size(), 2u);
    EXPECT_EQ(rest[0].wr_id, 6u);
    EXPECT_EQ(rest[1].wr_id, 7u);
    EXPECT_EQ(dev->wait_event(std::chrono::milliseconds(0)), std::nullopt);
    c = hw->counters();
    EXPECT_EQ(c.completions + c.cq_overruns, c.steered);
}

TEST_F(SimNic, PortDownLosesFramesAndRaisesEvents) {
    ready();
    post_slots(4);
    hw->set_port_up(false);
    auto ev = dev->wait_event(std::chrono::milliseconds(100));
    ASSERT_TRUE(ev.has_value());
    EXPECT_EQ(ev->kind, EventKind::port_error);
    EXPECT_EQ(ev->port, 1);
    EXPECT_EQ(ev->name, "IBV_EVENT_PORT_ERR");
    for (int i = 0; i < 3; ++i) {
        deliver(frame_of_size(100));
    }
    auto c = hw->counters();
    EXPECT_EQ(c.link_down_lost, 3u);
    EXPECT_EQ(c.rx_frames, 0u);
    EXPECT_EQ(c.steered, 0u);
    EXPECT_EQ(hw->posted_wrs(qp->qp_num()), 4u);
    hw->set_port_up(false);  // no change, no event
    EXPECT_EQ(dev->wait_event(std::chrono::milliseconds(0)), std::nullopt);
    hw->set_port_up(true);
    ev = dev->wait_event(std::chrono::milliseconds(100));
    ASSERT_TRUE(ev.has_value());
    EXPECT_EQ(ev->kind, EventKind::port_active);
    EXPECT_EQ(ev->port, 1);
    deliver(frame_of_size(100));
    EXPECT_EQ(drain().size(), 1u);
    c = hw->counters();
    EXPECT_EQ(c.rx_frames, 1u);
    EXPECT_EQ(c.link_down_lost, 3u);
}

TEST_F(SimNic, WaitEventWaitsAndWakesAcrossThreads) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(dev->wait_event(std::chrono::milliseconds(30)), std::nullopt);
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(30));

    std::thread t([this] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        hw->set_port_up(false);
    });
    const auto t1 = std::chrono::steady_clock::now();
    const auto ev = dev->wait_event(std::chrono::seconds(10));
    t.join();
    ASSERT_TRUE(ev.has_value());
    EXPECT_EQ(ev->kind, EventKind::port_error);
    EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::seconds(5));
}

TEST_F(SimNic, DeviceFatalFlushesEverythingAndRefusesNewObjects) {
    ready();
    post_slots(3);
    auto dev2 = provider->open(hw->config().name, hw->config().port);  // sees the event too
    hw->raise_device_fatal();
    EXPECT_EQ(qp->state(), QpState::error);
    const auto wcs = drain();
    ASSERT_EQ(wcs.size(), 3u);
    for (const auto& wc : wcs) {
        EXPECT_EQ(wc.status, WcStatus::wr_flush_err);
    }
    for (auto* d : {dev.get(), dev2.get()}) {
        const auto ev = d->wait_event(std::chrono::milliseconds(100));
        ASSERT_TRUE(ev.has_value());
        EXPECT_EQ(ev->kind, EventKind::device_fatal);
        EXPECT_EQ(ev->name, "IBV_EVENT_DEVICE_FATAL");
    }
    EXPECT_EQ(error_of([&] { dev->create_cq(4, TimestampFormat::none, false); }), EIO);
    EXPECT_EQ(error_of([&] { dev->create_qp(*cq, 4, 1); }), EIO);
    EXPECT_EQ(error_of([&] { dev->register_memory(mem.data(), 64); }), EIO);
    EXPECT_EQ(error_of([&] { qp->create_flow(match_for(kGroup2, kPort), false); }), EIO);
    // Teardown transitions still succeed; bringing the QP back up does not.
    EXPECT_EQ(error_of([&] { qp->modify(QpState::reset); }), 0);
    EXPECT_EQ(error_of([&] { qp->modify(QpState::init); }), EIO);
    deliver(frame_of_size(100));
    EXPECT_EQ(hw->counters().link_down_lost, 1u);
    EXPECT_EQ(hw->counters().rx_frames, 0u);
}

TEST_F(SimNic, CorruptNextWrIdAffectsExactlyOneCompletion) {
    ready();
    post_slots(3);
    hw->corrupt_next_wr_id(0xDEADBEEFull);
    deliver(frame_of_size(100));
    deliver(frame_of_size(100));
    deliver(frame_of_size(100));
    const auto wcs = drain();
    ASSERT_EQ(wcs.size(), 3u);
    EXPECT_EQ(wcs[0].wr_id, 0xDEADBEEFull);
    EXPECT_EQ(wcs[0].status, WcStatus::success);
    EXPECT_EQ(wcs[1].wr_id, 1u);
    EXPECT_EQ(wcs[2].wr_id, 2u);
}

TEST_F(SimNic, TimestampsAndClockPairAreConsistent) {
    SimConfig cfg;
    cfg.clock_khz = 156250;  // ConnectX-5 style 156.25 MHz
    cfg.host_time_base_ns = 1'000'000'000ull;
    build(cfg);
    auto pair = dev->clock_pair();
    ASSERT_TRUE(pair.has_value());
    EXPECT_EQ(pair->first, 0u);
    EXPECT_EQ(pair->second, 1'000'000'000ull);
    ready();
    post_slots(2);
    deliver(frame_of_size(100), 1000);
    deliver(frame_of_size(100), 2500);
    const auto wcs = drain();
    ASSERT_EQ(wcs.size(), 2u);
    EXPECT_TRUE(wcs[0].has_timestamp);
    EXPECT_EQ(wcs[0].hw_timestamp, 1000u);
    EXPECT_EQ(wcs[1].hw_timestamp, 3500u);
    pair = dev->clock_pair();
    ASSERT_TRUE(pair.has_value());
    EXPECT_EQ(pair->first, 3500u);
    EXPECT_EQ(pair->second, 1'000'000'000ull + 22'400u);  // 3500 ticks at 156.25 MHz
    EXPECT_EQ(dev->caps().hca_core_clock_khz, 156250u);

    // Far along the clock, the conversion neither overflows nor drifts.
    deliver(frame_of_size(100), 1'000'000'000'000'000ull);  // dropped, but the clock runs
    pair = dev->clock_pair();
    ASSERT_TRUE(pair.has_value());
    __extension__ using u128 = unsigned __int128;
    const auto expect_ns = static_cast<std::uint64_t>(u128{pair->first} * 1'000'000u / 156250u);
    EXPECT_EQ(pair->second, 1'000'000'000ull + expect_ns);
}

TEST_F(SimNic, WithoutTimestampsThereIsNoClock) {
    SimConfig cfg;
    cfg.completion_timestamps = false;
    build(cfg);
    EXPECT_EQ(dev->clock_pair(), std::nullopt);
    ready();
    post_slots(1);
    deliver(frame_of_size(100));
    const auto wcs = drain();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_FALSE(wcs[0].has_timestamp);
    EXPECT_EQ(wcs[0].hw_timestamp, 0u);
}

// --- several devices, teardown order, sysfs -----------------------------------------

TEST(SimNicDevices, TwoDevicesAreIndependent) {
    SimProvider p;
    SimConfig c0;
    c0.name = "sim_mlx5_0";
    SimConfig c1;
    c1.name = "sim_mlx5_1";
    auto hw0 = p.add(c0);
    auto hw1 = p.add(c1);
    {
        auto d0 = p.open("sim_mlx5_0", 1);
        auto d1 = p.open("sim_mlx5_1", 1);
        std::vector<std::uint8_t> m0(8192, kSentinel);
        std::vector<std::uint8_t> m1(8192, kSentinel);
        auto mr0 = d0->register_memory(m0.data(), m0.size());
        auto mr1 = d1->register_memory(m1.data(), m1.size());
        auto cq0 = d0->create_cq(16, TimestampFormat::none, false);
        auto cq1 = d1->create_cq(16, TimestampFormat::none, false);
        auto qp0 = d0->create_qp(*cq0, 8, 1);
        auto qp1 = d1->create_qp(*cq1, 8, 1);
        auto f0 = qp0->create_flow(match_for(kGroup, kPort), true);
        auto f1 = qp1->create_flow(match_for(kGroup, kPort), true);
        for (auto* q : {qp0.get(), qp1.get()}) {
            q->modify(QpState::init);
            q->modify(QpState::rtr);
        }
        RecvRequest r0;
        r0.wr_id = 1;
        r0.sge[0] = {reinterpret_cast<std::uint64_t>(m0.data()), 4096, mr0->lkey()};
        qp0->post_recv(std::span(&r0, 1));
        // A WR on device 1 naming device 0's memory: a protection error there.
        RecvRequest wrong = r0;
        wrong.wr_id = 2;
        RecvRequest r1;
        r1.wr_id = 3;
        r1.sge[0] = {reinterpret_cast<std::uint64_t>(m1.data()), 4096, mr1->lkey()};

        hw0->deliver(frame_of_size(500));
        hw1->set_port_up(false);
        EXPECT_EQ(hw0->counters().rx_frames, 1u);
        EXPECT_EQ(hw1->counters().rx_frames, 0u);
        EXPECT_EQ(f0->matched_packets(), std::optional<std::uint64_t>{1});
        EXPECT_EQ(f1->matched_packets(), std::optional<std::uint64_t>{0});
        std::array<Completion, 4> out{};
        EXPECT_EQ(cq0->poll(out), 1u);
        EXPECT_EQ(out[0].wr_id, 1u);
        EXPECT_EQ(cq1->poll(out), 0u);
        EXPECT_EQ(d0->wait_event(std::chrono::milliseconds(0)), std::nullopt);
        const auto ev = d1->wait_event(std::chrono::milliseconds(100));
        ASSERT_TRUE(ev.has_value());
        EXPECT_EQ(ev->kind, EventKind::port_error);
        hw1->set_port_up(true);
        EXPECT_EQ(d1->wait_event(std::chrono::milliseconds(100))->kind, EventKind::port_active);

        qp1->post_recv(std::span(&wrong, 1));
        qp1->post_recv(std::span(&r1, 1));
        hw1->deliver(frame_of_size(500));
        ASSERT_EQ(cq1->poll(out), 2u);
        EXPECT_EQ(out[0].wr_id, 2u);
        EXPECT_EQ(out[0].status, WcStatus::loc_prot_err);
        EXPECT_EQ(out[1].wr_id, 3u);
        EXPECT_EQ(out[1].status, WcStatus::wr_flush_err);
        EXPECT_EQ(qp0->state(), QpState::rtr);
        hw0->raise_device_fatal();
        EXPECT_EQ(qp1->state(), QpState::error);
        EXPECT_NO_THROW(d1->create_cq(4, TimestampFormat::none, false));
        EXPECT_EQ(error_of([&] { d0->create_cq(4, TimestampFormat::none, false); }), EIO);
    }
    EXPECT_EQ(hw0->ordering_violations(), 0u);
    EXPECT_EQ(hw1->ordering_violations(), 0u);
}

TEST(SimNicTeardown, OrderingViolationsAreCounted) {
    SimProvider p;
    auto hw = p.add(SimConfig{});
    std::vector<std::uint8_t> mem(4096);
    auto dev = p.open("sim_mlx5_0", 1);
    auto mr = dev->register_memory(mem.data(), mem.size());
    auto cq = dev->create_cq(8, TimestampFormat::none, false);
    auto qp = dev->create_qp(*cq, 8, 1);
    auto flow = qp->create_flow(match_for(kGroup, kPort), true);
    // In order: no violation.
    flow.reset();
    qp.reset();
    EXPECT_EQ(hw->ordering_violations(), 0u);

    // A QP destroyed while its flow is alive (ibv_destroy_qp: EBUSY).
    qp = dev->create_qp(*cq, 8, 1);
    flow = qp->create_flow(match_for(kGroup, kPort), true);
    qp.reset();
    EXPECT_EQ(hw->ordering_violations(), 1u);
    EXPECT_EQ(hw->flows(), 1u);
    hw->deliver(frame_of_size(100));  // the orphaned rule still matches; nothing receives
    EXPECT_EQ(hw->counters().out_of_buffer, 1u);
    EXPECT_EQ(flow->matched_packets(), std::optional<std::uint64_t>{1});
    flow.reset();
    EXPECT_EQ(hw->flows(), 0u);
    EXPECT_EQ(hw->ordering_violations(), 1u);

    // A CQ destroyed while a QP uses it.
    qp = dev->create_qp(*cq, 8, 1);
    cq.reset();
    EXPECT_EQ(hw->ordering_violations(), 2u);
    qp.reset();
    EXPECT_EQ(hw->ordering_violations(), 2u);

    // The device handle closed while a memory region is registered.
    dev.reset();
    EXPECT_EQ(hw->ordering_violations(), 3u);
    mr.reset();
    EXPECT_EQ(hw->ordering_violations(), 3u);
}

TEST_F(SimNic, WritesSysfsCountersLikeMlx5) {
    ready();
    deliver(frame_of_size(100));
    deliver(frame_of_size(100));
    deliver(frame_of_size(100));
    const test::TempDir dir;
    hw->write_sysfs(dir.path());
    const auto port = dir.path() / "sim_mlx5_0" / "ports" / "1";
    const auto read = [](const std::filesystem::path& p) {
        const auto bytes = test::read_file(p);
        return std::string(bytes.begin(), bytes.end());
    };
    EXPECT_EQ(read(port / "hw_counters" / "out_of_buffer"), "3\n");
    EXPECT_EQ(read(port / "state"), "4: ACTIVE\n");
    hw->set_port_up(false);
    deliver(frame_of_size(100));
    hw->write_sysfs(dir.path());
    EXPECT_EQ(read(port / "hw_counters" / "out_of_buffer"), "3\n");
    EXPECT_EQ(read(port / "state"), "1: DOWN\n");
}

// --- concurrency ---------------------------------------------------------------------

TEST(SimNicThreads, DeliverAndPollOnTwoThreadsLoseNothing) {
    constexpr std::size_t kFrames = 100'000;
    constexpr std::uint32_t kSlots = 256;
    constexpr std::uint32_t kSlotBytes = 128;
    SimProvider p;
    auto hw = p.add(SimConfig{});
    auto dev = p.open("sim_mlx5_0", 1);
    std::vector<std::uint8_t> mem(std::size_t{kSlots} * kSlotBytes);
    auto mr = dev->register_memory(mem.data(), mem.size());
    auto cq = dev->create_cq(1024, TimestampFormat::none, false);
    auto qp = dev->create_qp(*cq, kSlots, 1);
    auto flow = qp->create_flow(match_for(kGroup, kPort), true);
    const auto slot_wr = [&](std::uint64_t i) {
        RecvRequest r;
        r.wr_id = i;
        r.sge[0] = {reinterpret_cast<std::uint64_t>(mem.data() + i * kSlotBytes), kSlotBytes,
                    mr->lkey()};
        return r;
    };
    qp->modify(QpState::init);
    std::vector<RecvRequest> all;
    for (std::uint64_t i = 0; i < kSlots; ++i) {
        all.push_back(slot_wr(i));
    }
    qp->post_recv(all);
    qp->modify(QpState::rtr);

    std::atomic<bool> done{false};
    const std::uint32_t qp_num = qp->qp_num();
    std::thread wire([&] {
        auto f = frame_of_size(100);
        const std::size_t seq_at = kPlainUdpPayloadOffset;
        for (std::uint64_t i = 0; i < kFrames; ++i) {
            for (std::size_t b = 0; b < 8; ++b) {
                f[seq_at + b] = static_cast<std::uint8_t>(i >> (8 * b));
            }
            // Pace the wire a little so most frames find a WR; the rest
            // count as out_of_buffer, which is fine: both paths are checked.
            for (int spin = 0; spin < 100 && hw->posted_wrs(qp_num) == 0; ++spin) {
                std::this_thread::yield();
            }
            hw->deliver(f);
        }
        done.store(true, std::memory_order_release);
    });

    std::uint64_t received = 0;
    std::uint64_t bad = 0;
    std::uint64_t last_seq = 0;
    bool have_seq = false;
    std::array<Completion, 64> out{};
    for (;;) {
        const bool finished = done.load(std::memory_order_acquire);
        const std::size_t n = cq->poll(out);
        for (std::size_t i = 0; i < n; ++i) {
            const Completion& wc = out[i];
            if (wc.status != WcStatus::success || wc.byte_len != 100 || wc.wr_id >= kSlots) {
                ++bad;
                continue;
            }
            const std::uint8_t* s = mem.data() + wc.wr_id * kSlotBytes + kPlainUdpPayloadOffset;
            std::uint64_t seq = 0;
            for (std::size_t b = 0; b < 8; ++b) {
                seq |= std::uint64_t{s[b]} << (8 * b);
            }
            if (have_seq && seq <= last_seq) {
                ++bad;  // frames arrive in wire order
            }
            last_seq = seq;
            have_seq = true;
            ++received;
            const RecvRequest r = slot_wr(wc.wr_id);
            qp->post_recv(std::span(&r, 1));
        }
        if (n == 0 && finished) {
            break;
        }
    }
    wire.join();
    const auto c = hw->counters();
    EXPECT_EQ(bad, 0u);
    EXPECT_EQ(c.rx_frames, kFrames);
    EXPECT_EQ(c.steered, kFrames);
    EXPECT_EQ(c.completions, received);
    EXPECT_EQ(c.cq_overruns, 0u);
    EXPECT_EQ(received + c.out_of_buffer, c.steered);
    EXPECT_GT(received, 0u);
    EXPECT_EQ(flow->matched_packets(), std::optional<std::uint64_t>{kFrames});
    flow.reset();
    qp.reset();
    cq.reset();
    mr.reset();
    dev.reset();
    EXPECT_EQ(hw->ordering_violations(), 0u);
}

// --- mlx5 as it really behaves (test/sim/sim_nic.hpp cites each source) ------------------

// rdma-core providers/mlx5/cq.c: mlx5_cq_read_wc_qp_num and mlx5_cq_read_flow_tag
// read the same sop_drop_qpn bits, so a successful raw-packet receive reports
// the flow tag (0 for verbs rules) where a QP number would be; an error CQE
// carries the QP number (mlx5dv.h mlx5_err_cqe).
TEST_F(SimNic, ACompletionCarriesTheFlowTagNotTheQpNumber) {
    ASSERT_NE(qp->qp_num(), 0u);
    qp->modify(QpState::init);
    const std::vector<RecvRequest> wrs = {wr1(1, 0, 2048), wr1(2, 2048, 64), wr1(3, 4096, 2048)};
    qp->post_recv(wrs);
    qp->modify(QpState::rtr);
    deliver(frame_of_size(200));  // success
    deliver(frame_of_size(200));  // LOC_LEN_ERR: an error CQE
    qp->modify(QpState::error);   // flushes WR 3
    const auto wcs = drain();
    ASSERT_EQ(wcs.size(), 3u);
    EXPECT_EQ(wcs[0].status, WcStatus::success);
    EXPECT_EQ(wcs[0].qp_num, 0u);
    EXPECT_EQ(wcs[1].status, WcStatus::loc_len_err);
    EXPECT_EQ(wcs[1].qp_num, qp->qp_num());
    EXPECT_EQ(wcs[2].status, WcStatus::wr_flush_err);
    EXPECT_EQ(wcs[2].qp_num, qp->qp_num());
    EXPECT_EQ(wcs[0].wr_id, 1u);
    EXPECT_EQ(wcs[1].wr_id, 2u);
    EXPECT_EQ(wcs[2].wr_id, 3u);
}

// rdma-core providers/mlx5/qp.c mlx5_post_recv skips an SGE of length 0
// (`if (!length) continue`): the NIC never sees it, so its lkey and address
// are never checked and the frame lands in the next SGE.
TEST_F(SimNic, AZeroLengthSgeIsSkippedNotCheckedNorWritten) {
    qp->modify(QpState::init);
    RecvRequest r = wr2(5, 0, 0, 4096, 2048);
    r.sge[0].lkey = 0xdead;  // no such region: harmless, the SGE is skipped
    r.sge[0].addr = 0;
    qp->post_recv(std::span(&r, 1));
    qp->modify(QpState::rtr);
    const auto f = frame_of_size(300);
    deliver(f);
    const auto wcs = drain();
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::success);
    EXPECT_EQ(wcs[0].byte_len, 300u);
    EXPECT_EQ(std::memcmp(mem.data() + 4096, f.data(), f.size()), 0);
    EXPECT_EQ(qp->state(), QpState::rtr);
}

// rdma-core providers/mlx5/verbs.c: a QP moved to RESET has its completions
// cleaned out of the CQ (mlx5_cq_clean); the other QPs' stay, in order.
TEST_F(SimNic, ResetRemovesTheQueuesCompletionsFromTheSharedCq) {
    for (const bool clean : {true, false}) {
        SCOPED_TRACE(clean ? "mlx5 (cleans)" : "a provider that does not clean");
        SimConfig cfg;
        cfg.cq_clean_on_reset = clean;
        build(cfg);
        auto other = dev->create_qp(*cq, 16, 2);
        auto other_flow = other->create_flow(match_for(kGroup + 1, kPort), false);
        ready();
        other->modify(QpState::init);
        other->modify(QpState::rtr);
        post_slots(3);
        const std::vector<RecvRequest> o = {wr1(100, 20000, 2048), wr1(101, 24000, 2048)};
        other->post_recv(o);
        deliver(udp_frame(kSrcA, kGroup, kPort, 64));
        deliver(udp_frame(kSrcA, kGroup + 1, kPort, 64));
        deliver(udp_frame(kSrcA, kGroup, kPort, 64));
        deliver(udp_frame(kSrcA, kGroup + 1, kPort, 64));
        qp->modify(QpState::reset);
        const auto wcs = drain();
        std::vector<std::uint64_t> ids;
        for (const auto& wc : wcs) {
            ids.push_back(wc.wr_id);
        }
        const std::vector<std::uint64_t> expected =
            clean ? std::vector<std::uint64_t>{100, 101}
                  : std::vector<std::uint64_t>{0, 100, 1, 101};
        EXPECT_EQ(ids, expected);
        other_flow.reset();
        other.reset();
    }
}

// Two rules of the same match on one device are one flow-table entry with
// both destinations: mlx5's fs_core.c add_rule_fg finds the FTE of that
// match value and adds the second rule's destination to it (check_
// conflicting_ftes lets FWD_DEST and COUNT merge), so each QP gets a copy of
// every frame, and each rule's counter counts it (verbs-mlx5-3.md R6: a QinQ
// pair captured every frame twice on a real host, once in the sim).
TEST(SimNicRules, IdenticalRulesAreOneEntryThatFeedsEveryDestination) {
    SimProvider p;
    auto hw = p.add({});
    SimConfig cfg;
    auto dev = p.open(cfg.name, cfg.port);
    auto cq = dev->create_cq(16, TimestampFormat::none, false);
    std::vector<std::uint8_t> mem(2 * 4096);
    auto mr = dev->register_memory(mem.data(), mem.size());
    std::vector<std::unique_ptr<verbs::QueuePair>> qps;
    std::vector<std::unique_ptr<verbs::Flow>> flows;
    for (std::uint64_t i = 0; i < 2; ++i) {
        qps.push_back(dev->create_qp(*cq, 4, 1));
        flows.push_back(qps.back()->create_flow(match_for(kGroup, kPort), true));
        qps.back()->modify(QpState::init);
        const RecvRequest r{
            i, {Sge{reinterpret_cast<std::uint64_t>(mem.data() + i * 4096), 4096, mr->lkey()}}, 1};
        qps.back()->post_recv(std::span(&r, 1));
        qps.back()->modify(QpState::rtr);
    }
    hw->deliver(frame_of_size(100), 10);
    std::array<Completion, 4> wc{};
    ASSERT_EQ(cq->poll(wc), 2u) << "one copy per destination";
    EXPECT_EQ(wc[0].wr_id, 0u);
    EXPECT_EQ(wc[1].wr_id, 1u);
    EXPECT_EQ(flows[0]->matched_packets(), 1u);
    EXPECT_EQ(flows[1]->matched_packets(), 1u);
    EXPECT_EQ(hw->counters().steered, 1u);
    flows.clear();
    qps.clear();
}

// The timestamp formats as mlx5 takes them. Kernel drivers/infiniband/hw/mlx5/
// qp.c get_ts_format refuses a QP whose CQ asked for raw (free-running)
// timestamps on a device without that format, and a real-time CQ's QP on one
// without real time; rdma-core providers/mlx5/verbs.c create_cq makes a
// wall-clock-only CQ real-time where the device has it, and otherwise converts
// free-running ticks (mlx5/cq.c mlx5_cq_fill_pfns).
TEST(SimNicTimestamps, EachClockModeTakesTheFormatsMlx5Takes) {
    using TF = TimestampFormat;
    struct Row {
        const char* mode;
        bool fr;
        bool rt;
        TF asked;
        bool cq_ok;
        bool qp_ok;
    };
    const Row rows[] = {
        {"free-running", true, false, TF::device_ticks, true, true},
        {"free-running", true, false, TF::wallclock_ns, true, true},
        {"free-running", true, false, TF::none, true, true},
        {"real-time", false, true, TF::device_ticks, true, false},  // the CX-6 Dx/7 case
        {"real-time", false, true, TF::wallclock_ns, true, true},
        {"real-time", false, true, TF::none, true, true},
        {"both", true, true, TF::device_ticks, true, true},
        {"both", true, true, TF::wallclock_ns, true, true},
        {"neither", false, false, TF::device_ticks, true, false},
        {"neither", false, false, TF::wallclock_ns, false, false},
        {"neither", false, false, TF::none, true, true},
    };
    for (const Row& row : rows) {
        SCOPED_TRACE(std::string(row.mode) + ", asked " + verbs::to_string(row.asked));
        SimProvider p;
        SimConfig cfg;
        cfg.ts_free_running = row.fr;
        cfg.ts_real_time = row.rt;
        cfg.clock_khz = 1'000'000;
        cfg.host_time_base_ns = 5'000'000'000ull;
        auto hw = p.add(cfg);
        auto dev = p.open(cfg.name, cfg.port);
        std::unique_ptr<verbs::CompletionQueue> cq;
        const int cq_err = error_of([&] { cq = dev->create_cq(8, row.asked, false); });
        EXPECT_EQ(cq_err, row.cq_ok ? 0 : EOPNOTSUPP);
        if (!cq) {
            continue;
        }
        EXPECT_EQ(cq->timestamps(), row.asked);
        std::unique_ptr<verbs::QueuePair> qp;
        const int qp_err = error_of([&] { qp = dev->create_qp(*cq, 4, 1); });
        EXPECT_EQ(qp_err, row.qp_ok ? 0 : EOPNOTSUPP);
        if (!qp) {
            continue;
        }
        std::vector<std::uint8_t> mem(4096);
        auto mr = dev->register_memory(mem.data(), mem.size());
        auto flow = qp->create_flow(match_for(kGroup, kPort), false);
        qp->modify(QpState::init);
        const RecvRequest r{
            7, {Sge{reinterpret_cast<std::uint64_t>(mem.data()), 4096, mr->lkey()}}, 1};
        qp->post_recv(std::span(&r, 1));
        qp->modify(QpState::rtr);
        hw->deliver(frame_of_size(100), 2500);
        std::array<Completion, 2> wc{};
        ASSERT_EQ(cq->poll(wc), 1u);
        switch (row.asked) {
            case TF::device_ticks:
                EXPECT_TRUE(wc[0].has_timestamp);
                EXPECT_EQ(wc[0].hw_timestamp, 2500u);
                break;
            case TF::wallclock_ns:
                EXPECT_TRUE(wc[0].has_timestamp);
                // 1 GHz: 2500 ns past the base. A device with the real-time
                // format says so (mlx5dv_query_device) and its CQE field is
                // seconds << 32 | ns (verbs-mlx5-3.md R1); without it the
                // provider's clock-info conversion gives plain ns.
                EXPECT_EQ(dev->caps().real_time_ts, row.rt);
                EXPECT_EQ(wc[0].hw_timestamp, row.rt ? (5ull << 32 | 2500u) : 5'000'002'500ull);
                break;
            case TF::none:
                EXPECT_FALSE(wc[0].has_timestamp);
                break;
        }
        flow.reset();
        qp.reset();
        mr.reset();
        cq.reset();
        EXPECT_EQ(hw->ordering_violations(), 0u);
    }
}

// rdma-core providers/mlx5/verbs.c mlx5_attach_counters_point_flow only records
// the attach in user space: a device can pass the probe (create + attach) and
// still refuse the counted rule at ibv_create_flow.
TEST(SimNicCounters, ACountedRuleCanBeRefusedAfterTheProbeSaidYes) {
    SimProvider p;
    SimConfig cfg;
    cfg.counted_rule_limit = 1;
    p.add(cfg);
    auto dev = p.open(cfg.name, cfg.port);
    EXPECT_TRUE(dev->caps().flow_counters);
    auto cq = dev->create_cq(8, TimestampFormat::none, false);
    auto qp = dev->create_qp(*cq, 4, 1);
    auto first = qp->create_flow(match_for(kGroup, kPort), true);
    EXPECT_EQ(first->matched_packets(), std::optional<std::uint64_t>{0});
    EXPECT_EQ(error_of([&] { qp->create_flow(match_for(kGroup + 1, kPort), true); }), EOPNOTSUPP);
    auto plain = qp->create_flow(match_for(kGroup + 1, kPort), false);
    EXPECT_EQ(plain->matched_packets(), std::nullopt);
    // The grant comes back when the counted rule goes.
    first.reset();
    auto again = qp->create_flow(match_for(kGroup + 2, kPort), true);
    EXPECT_TRUE(again->matched_packets().has_value());
}

// ibv_get_async_event(3): port events are per port, and every context of the
// device gets those of all its ports.
TEST_F(SimNic, PortEventsOfAnotherPortReachEveryHandleNamingThatPort) {
    hw->raise_port_event(2, false);
    const auto ev = dev->wait_event(std::chrono::milliseconds(100));
    ASSERT_TRUE(ev.has_value());
    EXPECT_EQ(ev->kind, EventKind::port_error);
    EXPECT_EQ(ev->port, 2u);
    hw->raise_port_event(2, true);
    const auto up = dev->wait_event(std::chrono::milliseconds(100));
    ASSERT_TRUE(up.has_value());
    EXPECT_EQ(up->kind, EventKind::port_active);
    EXPECT_EQ(up->port, 2u);
}

}  // namespace
}  // namespace ibvcap
