// The simulated mlx5 NIC behind the verbs seam (test/sim/sim_nic.hpp).
//
// All state of one simulated device lives in SimHardware::State under one
// mutex. The handles the engine holds (Device, MemoryRegion, CompletionQueue,
// QueuePair, Flow) keep the SimHardware alive through a shared_ptr and point at
// records inside State; destroying a handle removes its record.
//
// The per-frame path (deliver) does not allocate: CQs are rings sized at
// create_cq, receive queues are rings sized at create_qp, rules are a vector
// scanned in creation order, memory regions a hash map looked up by lkey.
#include "test/sim/sim_nic.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "formats/packet.hpp"

namespace ibvcap::sim {

using verbs::AsyncEvent;
using verbs::Completion;
using verbs::EventKind;
using verbs::FlowMatch;
using verbs::QpState;
using verbs::RecvRequest;
using verbs::Sge;
using verbs::WcStatus;

namespace {

[[noreturn]] void fail(int err, const std::string& what) {
    throw std::system_error(err, std::generic_category(), what);
}

AsyncEvent make_event(EventKind kind, std::uint32_t qp_num, std::uint8_t port, const char* name) {
    AsyncEvent ev;
    ev.kind = kind;
    ev.qp_num = qp_num;
    ev.port = port;
    ev.name = name;
    return ev;
}

}  // namespace

struct SimHardware::State {
    struct Mr {
        std::uint64_t begin = 0;
        std::uint64_t end = 0;  // one past the last byte
        std::uint64_t ctx = 0;  // the device handle (protection domain) it belongs to
    };

    struct Qp;
    struct Cq {
        std::uint64_t ctx = 0;
        verbs::TimestampFormat timestamps = verbs::TimestampFormat::none;
        bool real_time = false;        // made in the device's real-time format
        bool flow_tags = false;        // IBV_WC_EX_WITH_FLOW_TAG: completions carry the tag
        std::vector<Completion> ring;  // capacity: the depth mlx5 gives (create_cq)
        std::vector<const Qp*> from;   // per ring entry: the QP it completes (for RESET)
        std::size_t head = 0;
        std::size_t count = 0;
        std::size_t qps = 0;            // QPs attached
        bool overrun_reported = false;  // cq_error raised; cleared when poll drains
        // `count`, published for poll()'s lock-free empty check: a busy-polling
        // engine does not contend with deliver() for the mutex while idle.
        std::atomic<std::size_t> ready{0};
    };

    struct Qp {
        std::uint32_t qp_num = 0;
        std::uint64_t ctx = 0;
        Cq* cq = nullptr;  // null only after an out-of-order CQ destruction
        std::uint32_t max_sge = 0;
        QpState state = QpState::reset;
        std::vector<RecvRequest> ring;  // capacity: the depth mlx5 gives (create_qp)
        std::size_t head = 0;
        std::size_t count = 0;
        std::size_t flows = 0;  // rules steering to this QP
        // rdma-core before v55 (SimConfig::provider_release): after a
        // completion the provider consumed without parsing, the receive
        // queue's tail is one behind, and each later completion of the QP
        // carries the wr_id of the WR before it (providers/mlx5/cq.c
        // handle_responder_lazy: wq->wrid[wq->tail & (wqe_cnt - 1)]; fixed by
        // commit 7e8db6fbd, which takes the CQE's wqe_counter). RESET puts
        // the indices back (verbs.c mlx5_modify_qp → mlx5_init_qp_indices).
        bool tail_behind = false;
        std::uint64_t behind_wr_id = 0;

        void push(const RecvRequest& wr) {
            ring[(head + count) % ring.size()] = wr;
            ++count;
        }
        RecvRequest pop() {
            const RecvRequest wr = ring[head];
            head = (head + 1) % ring.size();
            --count;
            return wr;
        }
        void discard() {
            head = 0;
            count = 0;
            tail_behind = false;
        }
    };

    struct Rule {
        FlowMatch match;
        Qp* qp = nullptr;  // null only after an out-of-order QP destruction
        bool counted = false;
        std::uint64_t matched = 0;
    };

    // Same match: the kernel's fs_core.c add_rule_fg finds the flow-table
    // entry (FTE) with this match value in a group of this mask and adds the
    // new rule's destinations (and count action) to it
    // (check_conflicting_ftes lets FWD_DEST and COUNT merge): one FTE, every
    // destination gets a copy.
    static bool same_match(const FlowMatch& a, const FlowMatch& b) {
        return a.dst_mac == b.dst_mac && a.dst_ip == b.dst_ip && a.src_ip == b.src_ip &&
               a.dst_port == b.dst_port && a.match_vlan == b.match_vlan &&
               (!a.match_vlan || a.vlan_id == b.vlan_id);
    }
    // The FTE of `m`, as its first rule made it (null: none yet). Its flow
    // tag is that rule's (fs_core.c create_fte copies the flow context of
    // the rule that creates the entry; a later rule adds destinations only).
    const Rule* fte_of(const FlowMatch& m) const {
        for (const auto& r : rules) {
            if (same_match(r->match, m)) {
                return r.get();
            }
        }
        return nullptr;
    }
    // FTEs in use: distinct matches.
    std::size_t ftes() const {
        std::size_t n = 0;
        for (std::size_t i = 0; i < rules.size(); ++i) {
            n += fte_of(rules[i]->match) == rules[i].get() ? 1u : 0u;
        }
        return n;
    }

    explicit State(const SimConfig& c)
        : config(c),
          next_lkey(static_cast<std::uint32_t>((std::hash<std::string>{}(c.name) & 0xffu) << 16) |
                    0x100u) {}

    const SimConfig& config;
    mutable std::mutex mu;
    std::condition_variable cv;

    SimCounters counters;
    std::uint64_t clock = 0;  // device clock, ticks
    bool port_up = true;
    bool fatal = false;
    // SimHardware::on_poll; read without the lock by the polling thread, so
    // set only while nothing polls.
    std::function<void(bool)> poll_hook;
    std::uint64_t withheld = 0;  // withhold_buffers()
    std::optional<std::uint64_t> corrupt_wr_id;
    std::optional<WcStatus> fail_frame;             // fail_next_frame()
    std::optional<std::uint32_t> corrupt_byte_len;  // corrupt_next_byte_len()
    std::optional<std::uint32_t> corrupt_flow_tag;  // corrupt_next_flow_tag()
    std::size_t violations = 0;
    std::uint64_t retired_flow_matches = 0;  // counters of rules already destroyed

    std::uint32_t next_lkey;
    std::uint32_t next_qp_num = 0x108;
    std::uint64_t next_ctx = 1;

    std::unordered_map<std::uint32_t, Mr> mrs;  // by lkey
    std::vector<std::unique_ptr<Cq>> cqs;
    std::vector<std::unique_ptr<Qp>> qps;
    std::vector<std::unique_ptr<Rule>> rules;                // creation order
    std::map<std::uint64_t, std::deque<AsyncEvent>> events;  // per open device handle

    // --- everything below runs with `mu` held ---

    // Port and device events go to every open device handle (as every
    // ibv_context gets them); QP and CQ events to the handle that owns the object.
    void raise_to(std::uint64_t ctx, AsyncEvent ev) {
        const auto it = events.find(ctx);
        if (it != events.end()) {
            it->second.push_back(std::move(ev));
            cv.notify_all();
        }
    }
    void broadcast(const AsyncEvent& ev) {
        for (auto& entry : events) {
            entry.second.push_back(ev);
        }
        cv.notify_all();
    }

    // SimConfig::dma_leaves_cache: the lines [at, at + n) leave this CPU's
    // caches, as the lines a NIC's DMA writes (or the wire it reads) are
    // never in the poll core's.
    void leave_cache(const void* at, std::size_t n) const {
#if defined(__x86_64__)
        if (!config.dma_leaves_cache || n == 0) {
            return;
        }
        const auto begin = reinterpret_cast<std::uintptr_t>(at) & ~std::uintptr_t{63};
        const auto end = reinterpret_cast<std::uintptr_t>(at) + n;
        for (std::uintptr_t line = begin; line < end; line += 64) {
            __builtin_ia32_clflush(reinterpret_cast<const void*>(line));
        }
#else
        (void)at;
        (void)n;
#endif
    }

    void complete(Qp& qp, Completion c) {
        if (corrupt_wr_id) {
            c.wr_id = *corrupt_wr_id;
            corrupt_wr_id.reset();
        }
        Cq* cq = qp.cq;
        if (cq == nullptr) {
            ++counters.cq_overruns;  // no CQ to land in: lost
            return;
        }
        if (c.status == WcStatus::success) {
            // The flow tag of the FTE that steered it, in the qpn bits
            // (verbs rules without a tag action carry the default tag 0);
            // read as a flow tag only from a CQ that asked for it.
            c.qp_num = c.flow_tag;
            if (!cq->flow_tags) {
                c.flow_tag = 0;
            }
        } else {
            c.flow_tag = 0;
            c.qp_num = qp.qp_num;  // error CQEs carry the QP number
        }
        if (cq->count == cq->ring.size()) {
            ++counters.cq_overruns;
            if (!cq->overrun_reported) {
                cq->overrun_reported = true;
                raise_to(cq->ctx, make_event(EventKind::cq_error, 0, 0, "IBV_EVENT_CQ_ERR"));
            }
            return;
        }
        const std::size_t at = (cq->head + cq->count) % cq->ring.size();
        cq->ring[at] = c;
        leave_cache(&cq->ring[at], sizeof c);  // a CQE the NIC wrote
        cq->from[at] = &qp;
        ++cq->count;
        cq->ready.store(cq->count, std::memory_order_release);
        ++counters.completions;
    }

    void flush_one(Qp& qp, std::uint64_t wr_id) {
        Completion c;
        c.wr_id = wr_id;
        c.status = WcStatus::wr_flush_err;
        complete(qp, c);
    }

    void to_error(Qp& qp) {
        qp.state = QpState::error;
        while (qp.count > 0) {
            flush_one(qp, qp.pop().wr_id);
        }
    }

    Qp* find_qp(std::uint32_t qp_num) const {
        for (const auto& qp : qps) {
            if (qp->qp_num == qp_num) {
                return qp.get();
            }
        }
        return nullptr;
    }

    // The rule a parsed UDP frame matches: the first rule with a matching
    // source IP, else the first matching rule without one.
    // The VLAN id of a frame's outer tag when it is an 802.1Q (C-VLAN) tag,
    // ethertype 0x8100; -1 for an untagged frame or an 802.1ad (S-VLAN) one.
    static int outer_cvlan_id(Bytes frame) {
        if (frame.size() < 16 || frame[12] != 0x81 || frame[13] != 0x00) {
            return -1;
        }
        return ((frame[14] & 0x0f) << 8) | frame[15];
    }

    Rule* match(Bytes frame, const UdpPacket& pkt) const {
        Rule* any_source = nullptr;
        for (const auto& r : rules) {
            const FlowMatch& m = r->match;
            if (m.dst_ip != pkt.dst_ip || m.dst_port != pkt.dst_port ||
                std::memcmp(frame.data(), m.dst_mac.data(), m.dst_mac.size()) != 0) {
                continue;
            }
            // A rule with a VLAN id takes only frames whose outer tag is an
            // 802.1Q tag of that id (kernel drivers/infiniband/hw/mlx5/fs.c
            // parse_flow_attr: cvlan_tag and first_vid); a rule without one
            // takes tagged and untagged frames alike.
            if (m.match_vlan && outer_cvlan_id(frame) != m.vlan_id) {
                continue;
            }
            if (m.src_ip != 0) {
                if (m.src_ip == pkt.src_ip) {
                    return r.get();
                }
                continue;
            }
            if (any_source == nullptr) {
                any_source = r.get();
            }
        }
        return any_source;
    }

    // RESET: the QP's completions still in its CQ are removed, the others
    // keep their order (rdma-core providers/mlx5/verbs.c mlx5_modify_qp calls
    // mlx5_cq_clean on the receive CQ when a QP goes to RESET).
    void clean_cq(const Qp& qp) {
        Cq* cq = qp.cq;
        if (cq == nullptr || !config.cq_clean_on_reset) {
            return;
        }
        std::size_t kept = 0;
        for (std::size_t i = 0; i < cq->count; ++i) {
            const std::size_t at = (cq->head + i) % cq->ring.size();
            if (cq->from[at] == &qp) {
                continue;
            }
            const std::size_t to = (cq->head + kept) % cq->ring.size();
            cq->ring[to] = cq->ring[at];
            cq->from[to] = cq->from[at];
            ++kept;
        }
        cq->count = kept;
        cq->ready.store(kept, std::memory_order_release);
    }

    // The device clock at its nominal rate, ns since the driver loaded.
    std::int64_t nominal_ns(std::uint64_t ticks) const {
        const std::uint64_t khz = config.clock_khz;
        return static_cast<std::int64_t>((ticks / khz) * 1'000'000u +
                                         (ticks % khz) * 1'000'000u / khz);
    }
    // True time since the driver loaded: the oscillator is fast by drift_ppb.
    std::int64_t elapsed_ns(std::uint64_t ticks) const {
        __extension__ using Int128 = __int128;
        return static_cast<std::int64_t>(Int128{nominal_ns(ticks)} * 1'000'000'000 /
                                         (1'000'000'000 + config.drift_ppb));
    }
    std::int64_t host_ns(std::uint64_t ticks) const {
        return static_cast<std::int64_t>(config.host_time_base_ns) + elapsed_ns(ticks);
    }
    // The PHC at true time `elapsed` since load (SimConfig::phc_disciplined).
    std::int64_t phc_at(std::int64_t elapsed) const {
        __extension__ using Int128 = __int128;
        const std::int64_t counted =
            config.phc_disciplined
                ? elapsed
                : static_cast<std::int64_t>(Int128{elapsed} * (1'000'000'000 + config.drift_ppb) /
                                            1'000'000'000);
        return static_cast<std::int64_t>(config.host_time_base_ns) + config.phc_offset_ns + counted;
    }
    // The device clock as wall-clock ns: the PHC (what a real-time CQE or
    // the clock-info page gives).
    std::uint64_t wallclock_ns(std::uint64_t ticks) const {
        if (config.phc_disciplined) {
            return static_cast<std::uint64_t>(phc_at(elapsed_ns(ticks)));
        }
        return static_cast<std::uint64_t>(static_cast<std::int64_t>(config.host_time_base_ns) +
                                          config.phc_offset_ns + nominal_ns(ticks));
    }
    // The PHC as the real-time CQE field: seconds << 32 | nanoseconds (the
    // kernel's mlx5/core/lib/clock.h REAL_TIME_TO_NS decodes it back).
    std::uint64_t real_time_stamp(std::uint64_t ticks) const {
        const std::uint64_t ns = wallclock_ns(ticks);
        return (ns / 1'000'000'000u) << 32 | (ns % 1'000'000'000u);
    }
    std::uint64_t shifted_wr_ids = 0;  // completions given a previous WR's wr_id (pre-v55)
    // Where inside a read's bracket the clock was latched, 0..1 in 1/1024:
    // spread over the bracket, reproducibly (a counter through a hash).
    std::uint32_t latch_fraction() {
        std::uint64_t z = ++reads * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
        return static_cast<std::uint32_t>((z ^ (z >> 29)) & 1023u);
    }
    std::uint64_t reads = 0;
    std::uint64_t phc_failures = 0;  // fail_phc_reads()

    std::size_t counted_rules() const {
        std::size_t n = 0;
        for (const auto& r : rules) {
            n += r->counted ? 1u : 0u;
        }
        return n;
    }

    bool sge_ok(const Qp& qp, const Sge& sge) const {
        const auto it = mrs.find(sge.lkey);
        if (it == mrs.end() || it->second.ctx != qp.ctx) {
            return false;
        }
        const Mr& mr = it->second;
        return sge.addr >= mr.begin && sge.addr <= mr.end && sge.length <= mr.end - sge.addr;
    }

    std::size_t live_objects(std::uint64_t ctx) const {
        std::size_t n = 0;
        for (const auto& entry : mrs) {
            n += entry.second.ctx == ctx ? 1u : 0u;
        }
        for (const auto& cq : cqs) {
            n += cq->ctx == ctx ? 1u : 0u;
        }
        for (const auto& qp : qps) {
            n += qp->ctx == ctx ? 1u : 0u;
        }
        return n;
    }
};

namespace {

using State = SimHardware::State;

class SimMemoryRegion final : public verbs::MemoryRegion {
  public:
    SimMemoryRegion(std::shared_ptr<SimHardware> hw, std::uint32_t lkey)
        : hw_(std::move(hw)), lkey_(lkey) {}
    ~SimMemoryRegion() override {
        State& s = hw_->state();
        const std::lock_guard lock(s.mu);
        s.mrs.erase(lkey_);
    }
    SimMemoryRegion(const SimMemoryRegion&) = delete;
    SimMemoryRegion& operator=(const SimMemoryRegion&) = delete;

    std::uint32_t lkey() const override { return lkey_; }

  private:
    std::shared_ptr<SimHardware> hw_;
    std::uint32_t lkey_;
};

class SimCompletionQueue final : public verbs::CompletionQueue {
  public:
    SimCompletionQueue(std::shared_ptr<SimHardware> hw, State::Cq* rec)
        : hw_(std::move(hw)), rec_(rec) {}
    ~SimCompletionQueue() override {
        State& s = hw_->state();
        const std::lock_guard lock(s.mu);
        if (rec_->qps > 0) {
            ++s.violations;  // ibv_destroy_cq: EBUSY while QPs use the CQ
            for (auto& qp : s.qps) {
                if (qp->cq == rec_) {
                    qp->cq = nullptr;
                }
            }
        }
        std::erase_if(s.cqs, [this](const auto& p) { return p.get() == rec_; });
    }
    SimCompletionQueue(const SimCompletionQueue&) = delete;
    SimCompletionQueue& operator=(const SimCompletionQueue&) = delete;

    std::size_t poll(std::span<Completion> out) override {
        State& hook_state = hw_->state();
        if (hook_state.poll_hook) [[unlikely]] {
            const std::size_t n = take(out);
            hook_state.poll_hook(n == 0);
            return n;
        }
        return take(out);
    }

  private:
    std::size_t take(std::span<Completion> out) {
        if (rec_->ready.load(std::memory_order_acquire) == 0) {
            return 0;
        }
        State& s = hw_->state();
        const std::lock_guard lock(s.mu);
        if (rec_->timestamps == verbs::TimestampFormat::wallclock_ns && !s.config.clock_info_page &&
            rec_->count > 0) {
            // ibv_start_poll found a completion, then failed with EINVAL on
            // the clock-info page, the completion consumed (SimConfig::
            // clock_info_page). The engine's CQ wrapper (lib/sources/verbs/
            // ibv_queues.cpp) then polls with ibv_poll_cq, which reads no
            // clock, and says so through timestamps() and lost_completions().
            if (s.config.provider_release < 55) {
                if (State::Qp* qp = qp_of(rec_->from[rec_->head])) {
                    qp->tail_behind = true;
                    qp->behind_wr_id = rec_->ring[rec_->head].wr_id;
                }
            }
            rec_->head = (rec_->head + 1) % rec_->ring.size();
            --rec_->count;
            ++lost_;
            rec_->timestamps = verbs::TimestampFormat::none;
            for (std::size_t i = 0, at = rec_->head; i < rec_->count;
                 ++i, at = (at + 1) % rec_->ring.size()) {
                rec_->ring[at].has_timestamp = false;  // ibv_wc has no timestamp
                rec_->ring[at].hw_timestamp = 0;
            }
            rec_->ready.store(rec_->count, std::memory_order_release);
            return 0;  // as lib/sources/verbs/ibv_queues.cpp: nothing more in this poll
        }
        const std::size_t n = std::min(out.size(), rec_->count);
        for (std::size_t i = 0; i < n; ++i) {
            out[i] = rec_->ring[rec_->head];
            State::Qp* qp = qp_of(rec_->from[rec_->head]);
            if (qp != nullptr && qp->tail_behind && out[i].status == WcStatus::success) {
                std::swap(out[i].wr_id, qp->behind_wr_id);  // the previous WR's
                ++s.shifted_wr_ids;
            }
            rec_->head = (rec_->head + 1) % rec_->ring.size();
        }
        rec_->count -= n;
        rec_->ready.store(rec_->count, std::memory_order_release);
        if (n > 0) {
            rec_->overrun_reported = false;
        }
        return n;
    }

  public:
    // Changed only by poll(), on the poll thread that asks.
    verbs::TimestampFormat timestamps() const override { return rec_->timestamps; }
    std::uint64_t lost_completions() const override { return lost_; }
    std::uint32_t depth() const override { return static_cast<std::uint32_t>(rec_->ring.size()); }

    SimHardware& hardware() const { return *hw_; }
    State::Cq* record() const { return rec_; }

  private:
    std::shared_ptr<SimHardware> hw_;
    State::Cq* rec_;
    std::uint64_t lost_ = 0;  // completions consumed by a failed start_poll
    // The QP a CQ entry completes, writable (the provider's per-QP state).
    State::Qp* qp_of(const State::Qp* qp) {
        return const_cast<State::Qp*>(qp);  // NOLINT: the entries point into State's own QPs
    }
};

class SimFlow final : public verbs::Flow {
  public:
    SimFlow(std::shared_ptr<SimHardware> hw, State::Rule* rec) : hw_(std::move(hw)), rec_(rec) {}
    ~SimFlow() override {
        State& s = hw_->state();
        const std::lock_guard lock(s.mu);
        if (rec_->qp != nullptr) {
            --rec_->qp->flows;
        }
        s.retired_flow_matches += rec_->matched;
        std::erase_if(s.rules, [this](const auto& p) { return p.get() == rec_; });
    }
    SimFlow(const SimFlow&) = delete;
    SimFlow& operator=(const SimFlow&) = delete;

    std::optional<std::uint64_t> matched_packets() override {
        State& s = hw_->state();
        const std::lock_guard lock(s.mu);
        if (!rec_->counted) {
            return std::nullopt;
        }
        // ibv_read_counters reaches the firmware (QUERY_FLOW_COUNTER), which
        // mlx5_internal_err_ret_value() (drivers/net/ethernet/mellanox/mlx5/
        // core/cmd.c) answers with -EIO once the device is in internal error:
        // only the teardown commands are completed there.
        if (s.fatal) {
            fail(EIO, fmt::format("ibv_read_counters: {}: device is in a fatal error state",
                                  s.config.name));
        }
        return rec_->matched;
    }

  private:
    std::shared_ptr<SimHardware> hw_;
    State::Rule* rec_;
};

class SimQueuePair final : public verbs::QueuePair {
  public:
    SimQueuePair(std::shared_ptr<SimHardware> hw, State::Qp* rec)
        : hw_(std::move(hw)), rec_(rec), qp_num_(rec->qp_num) {}
    ~SimQueuePair() override {
        State& s = hw_->state();
        const std::lock_guard lock(s.mu);
        if (rec_->flows > 0) {
            ++s.violations;  // ibv_destroy_qp: EBUSY while flows steer to the QP
            for (auto& r : s.rules) {
                if (r->qp == rec_) {
                    r->qp = nullptr;
                }
            }
        }
        if (rec_->cq != nullptr) {
            --rec_->cq->qps;
        }
        std::erase_if(s.qps, [this](const auto& p) { return p.get() == rec_; });
    }
    SimQueuePair(const SimQueuePair&) = delete;
    SimQueuePair& operator=(const SimQueuePair&) = delete;

    std::uint32_t qp_num() const override { return qp_num_; }
    // Fixed at creation (the sizes mlx5 gives, below).
    std::uint32_t recv_depth() const override {
        return static_cast<std::uint32_t>(rec_->ring.size());
    }
    std::uint32_t recv_sge() const override { return rec_->max_sge; }

    QpState state() const override {
        State& s = hw_->state();
        const std::lock_guard lock(s.mu);
        return rec_->state;
    }

    void modify(QpState to) override {
        State& s = hw_->state();
        const std::lock_guard lock(s.mu);
        const QpState from = rec_->state;
        const bool allowed = to == QpState::reset || to == QpState::error ||
                             (from == QpState::reset && to == QpState::init) ||
                             (from == QpState::init && to == QpState::rtr);
        if (!allowed) {
            fail(EINVAL, fmt::format("ibv_modify_qp: QP {:#x} cannot go from {} to {}", qp_num_,
                                     verbs::to_string(from), verbs::to_string(to)));
        }
        // After an internal error mlx5 firmware commands fail with EIO, except
        // the teardown ones (to RESET, to ERROR) which the driver completes:
        // the kernel's drivers/net/ethernet/mellanox/mlx5/core/cmd.c,
        // mlx5_internal_err_ret_value(), answers 2RST_QP, 2ERR_QP and the
        // DESTROY_* commands with MLX5_CMD_STAT_OK and RST2INIT_QP,
        // INIT2RTR_QP and the CREATE_* commands with -EIO.
        if (s.fatal && (to == QpState::init || to == QpState::rtr)) {
            fail(EIO,
                 fmt::format("ibv_modify_qp: {}: device is in a fatal error state", s.config.name));
        }
        switch (to) {
            case QpState::reset:
                rec_->discard();
                s.clean_cq(*rec_);
                rec_->state = QpState::reset;
                break;
            case QpState::error:
                s.to_error(*rec_);
                break;
            case QpState::init:
            case QpState::rtr:
                rec_->state = to;
                break;
        }
    }

    // What a post costs is per call, as on mlx5: rdma-core providers/mlx5/
    // qp.c mlx5_post_recv takes the receive queue's spinlock, writes each
    // WR's WQE, then once per call a barrier and the doorbell record
    // (qp->db[MLX5_RCV_DBR]) before it unlocks. Here one lock of the NIC's
    // mutex per call and a copy per WR, so the benchmark (bench/
    // bench_engine.cpp) sees the same shape: fewer, larger posts are cheaper.
    void post_recv(std::span<const RecvRequest> requests) override {
        State& s = hw_->state();
        const std::lock_guard lock(s.mu);
        ++s.counters.post_recv_calls;
        for (std::size_t i = 0; i < requests.size(); ++i) {
            const RecvRequest& wr = requests[i];
            if (rec_->state == QpState::reset) {
                fail(EINVAL, fmt::format("ibv_post_recv: QP {:#x} is in RESET; WR {} (wr_id {}) "
                                         "not posted: move the QP to INIT first",
                                         qp_num_, i, wr.wr_id));
            }
            if (wr.num_sge == 0 || wr.num_sge > rec_->max_sge || wr.num_sge > wr.sge.size()) {
                fail(EINVAL,
                     fmt::format("ibv_post_recv: QP {:#x}: WR {} (wr_id {}) has {} SGEs, the "
                                 "QP takes 1 to {}",
                                 qp_num_, i, wr.wr_id, wr.num_sge,
                                 std::min<std::size_t>(rec_->max_sge, wr.sge.size())));
            }
            if (rec_->state == QpState::error) {
                s.flush_one(*rec_, wr.wr_id);  // a QP in error flushes every WR posted
                continue;
            }
            if (rec_->count == rec_->ring.size()) {
                fail(ENOMEM, fmt::format("ibv_post_recv: QP {:#x}: receive queue full ({} WRs); "
                                         "WR {} (wr_id {}) not posted",
                                         qp_num_, rec_->ring.size(), i, wr.wr_id));
            }
            rec_->push(wr);
        }
    }

    std::unique_ptr<verbs::Flow> create_flow(const FlowMatch& match, bool with_counter) override {
        State& s = hw_->state();
        const std::lock_guard lock(s.mu);
        // A new rule after a fatal error. Which firmware commands it takes is
        // fs_core's choice: CREATE_FLOW_GROUP fails with -EIO, but a rule
        // added to an existing group is one SET_FLOW_TABLE_ENTRY, which
        // mlx5_internal_err_ret_value() (mlx5/core/cmd.c) answers with OK, so
        // on hardware it may "succeed" and steer nothing. The engine creates
        // no rule after a device fatal error (the run ends), so either answer
        // is safe; the simulation refuses, the louder of the two.
        if (s.fatal) {
            fail(EIO, fmt::format("ibv_create_flow: {}: device is in a fatal error state",
                                  s.config.name));
        }
        if (!s.config.flow_steering) {
            fail(EOPNOTSUPP, fmt::format("ibv_create_flow: {} has no managed flow steering "
                                         "(IBV_DEVICE_MANAGED_FLOW_STEERING); use --source pcap",
                                         s.config.name));
        }
        if (with_counter && !s.config.flow_counters) {
            fail(EOPNOTSUPP,
                 fmt::format("ibv_create_counters: {} has no flow counters", s.config.name));
        }
        // Whether the device grants a flow counter is known only here: the
        // probe's static attach never reaches the kernel (rdma-core
        // providers/mlx5/verbs.c mlx5_attach_counters_point_flow).
        if (with_counter && s.counted_rules() >= s.config.counted_rule_limit) {
            fail(EOPNOTSUPP, fmt::format("ibv_create_flow: {} refused a rule with a count action "
                                         "({} counted rules granted)",
                                         s.config.name, s.config.counted_rule_limit));
        }
        // The tag action (kernel drivers/infiniband/hw/mlx5/fs.c
        // parse_flow_attr: a tag of 2^24 or more is EINVAL), and the entry
        // the rule joins or makes: a tag unlike the entry's is refused
        // (fs_core.c check_conflicting_ftes: EEXIST, "FTE flow tag %u already
        // exists with different flow tag %u"); a new entry needs room in the
        // table every verbs multicast rule of the device shares (fs.c
        // get_flow_table: MLX5_IB_FLOW_MCAST_PRIO, MLX5_FS_MAX_ENTRIES = 2^16
        // entries; fs_core.c add_rule_fg: ENOSPC when the groups are full).
        if (match.tag >= (1u << 24)) {
            fail(EINVAL, fmt::format("ibv_create_flow: {}: flow tag {} is not below 2^24",
                                     s.config.name, match.tag));
        }
        if (const State::Rule* fte = s.fte_of(match)) {
            if (match.tag != 0 && fte->match.tag != match.tag) {
                fail(EEXIST, fmt::format("ibv_create_flow: {}: FTE flow tag {} already exists "
                                         "with different flow tag {}",
                                         s.config.name, fte->match.tag, match.tag));
            }
        } else if (s.ftes() >= s.config.flow_table_entries) {
            fail(ENOSPC, fmt::format("ibv_create_flow: {}: the flow table's {} entries are in use",
                                     s.config.name, s.config.flow_table_entries));
        }
        auto rule = std::make_unique<State::Rule>();
        rule->match = match;
        rule->qp = rec_;
        rule->counted = with_counter;
        State::Rule* raw = rule.get();
        s.rules.push_back(std::move(rule));
        ++rec_->flows;
        return std::make_unique<SimFlow>(hw_, raw);
    }

  private:
    std::shared_ptr<SimHardware> hw_;
    State::Qp* rec_;
    std::uint32_t qp_num_;
};

// The sizes mlx5 gives the queues it makes (rdma-core providers/mlx5/verbs.c):
//   * a CQ of `depth` entries gets align_queue_size(depth + 1) CQEs, a power
//     of two, and reports one fewer (create_cq: ncqe, cqe = ncqe - 1);
//   * a receive WQE is 16 bytes (struct mlx5_wqe_data_seg) per SGE, rounded up
//     to a power of two (mlx5_calc_rcv_wqe); the receive queue has
//     roundup_pow_of_two(depth) WQEs, at least 64 bytes of them
//     (mlx5_calc_rq_size: MLX5_SEND_WQE_BB), and takes that many
//     (rq.max_post); SGEs per WR are the WQE's bytes / 16 (rq.max_gs). Both
//     come back to the caller in ibv_qp_init_attr.cap (create_qp).
std::uint32_t round_up_pow2(std::uint32_t v) {
    return v <= 1 ? 1 : std::uint32_t{1} << std::bit_width(v - 1);
}
std::uint32_t mlx5_cq_entries(std::uint32_t depth) {
    return round_up_pow2(depth + 1) - 1;
}
std::uint32_t mlx5_recv_sge(std::uint32_t max_sge) {
    return round_up_pow2(max_sge);
}
std::uint32_t mlx5_recv_depth(std::uint32_t depth, std::uint32_t max_sge) {
    constexpr std::uint32_t kDataSegBytes = 16;
    constexpr std::uint32_t kSendWqeBb = 64;
    const std::uint32_t wqe_bytes = kDataSegBytes * mlx5_recv_sge(max_sge);
    return std::max(round_up_pow2(depth) * wqe_bytes, kSendWqeBb) / wqe_bytes;
}

class SimDevice final : public verbs::Device {
  public:
    explicit SimDevice(std::shared_ptr<SimHardware> hw) : hw_(std::move(hw)) {
        const SimConfig& c = hw_->config();
        caps_.name = c.name;
        caps_.port = c.port;
        caps_.max_qp_wr = c.max_qp_wr;
        caps_.max_cqe = c.max_cqe;
        caps_.max_sge = c.max_sge;
        caps_.max_qp = c.max_qp;
        caps_.max_cq = c.max_cq;
        caps_.max_mr = c.max_mr;
        caps_.max_pd = c.max_pd;
        caps_.max_mr_size = c.max_mr_size;
        caps_.raw_packet_qp = c.raw_packet_qp;
        caps_.flow_steering = c.flow_steering;
        caps_.completion_timestamps = c.completion_timestamps;
        caps_.hca_core_clock_khz = c.completion_timestamps ? c.clock_khz : 0;
        // mlx5dv_query_device's MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS: the kernel
        // sets it where the queues take the real-time format (drivers/
        // infiniband/hw/mlx5/main.c set_ucontext_resp, rt_supported on the
        // SQ, RQ and QP formats: real-time only or both).
        caps_.real_time_ts =
            c.reports_real_time_ts.value_or(c.completion_timestamps && c.ts_real_time);
        caps_.provider_release = c.provider_release;
        caps_.flow_counters = c.flow_counters;
        State& s = hw_->state();
        const std::lock_guard lock(s.mu);
        ctx_ = s.next_ctx++;
        s.events.try_emplace(ctx_);
    }
    ~SimDevice() override {
        State& s = hw_->state();
        const std::lock_guard lock(s.mu);
        if (s.live_objects(ctx_) > 0) {
            ++s.violations;  // ibv_dealloc_pd / ibv_close_device: EBUSY
        }
        s.events.erase(ctx_);
    }
    SimDevice(const SimDevice&) = delete;
    SimDevice& operator=(const SimDevice&) = delete;

    const verbs::DeviceCaps& caps() const override { return caps_; }

    std::unique_ptr<verbs::MemoryRegion> register_memory(void* addr, std::size_t length) override {
        State& s = hw_->state();
        const std::lock_guard lock(s.mu);
        check_alive(s, "ibv_reg_mr");
        const auto begin = reinterpret_cast<std::uint64_t>(addr);
        if (addr == nullptr || length == 0 ||
            length > std::numeric_limits<std::uint64_t>::max() - begin) {
            fail(EINVAL, fmt::format("ibv_reg_mr: {}: invalid range ({} bytes at {})",
                                     s.config.name, length, addr));
        }
        const std::uint32_t lkey = s.next_lkey++;
        s.mrs[lkey] = State::Mr{begin, begin + length, ctx_};
        return std::make_unique<SimMemoryRegion>(hw_, lkey);
    }

    std::unique_ptr<verbs::MemoryRegion> register_dmabuf(int /*fd*/, std::uint64_t /*offset*/,
                                                         std::size_t /*length*/,
                                                         std::uint64_t /*iova*/) override {
        fail(EOPNOTSUPP, fmt::format("ibv_reg_dmabuf_mr: {}: the simulated NIC has no dma-buf",
                                     hw_->config().name));
    }

    std::unique_ptr<verbs::CompletionQueue> create_cq(std::uint32_t depth,
                                                      verbs::TimestampFormat ts,
                                                      bool flow_tags) override {
        State& s = hw_->state();
        const std::lock_guard lock(s.mu);
        check_alive(s, "ibv_create_cq");
        if (depth == 0 || depth > s.config.max_cqe) {
            fail(EINVAL,
                 fmt::format("ibv_create_cq: {}: {} entries asked, the device takes 1 to {}",
                             s.config.name, depth, s.config.max_cqe));
        }
        auto cq = std::make_unique<State::Cq>();
        cq->timestamps = ts;
        cq->flow_tags = flow_tags;
        if (ts != verbs::TimestampFormat::none && !s.config.completion_timestamps) {
            fail(EOPNOTSUPP,
                 fmt::format("ibv_create_cq_ex: {} has no completion timestamps", s.config.name));
        }
        if (ts == verbs::TimestampFormat::wallclock_ns) {
            // rdma-core providers/mlx5/verbs.c create_cq: wall clock without
            // raw ticks asks the kernel for a real-time CQ where the device
            // has that format; otherwise the provider converts free-running
            // ticks (mlx5/cq.c mlx5_cq_fill_pfns).
            if (s.config.ts_real_time) {
                cq->real_time = true;
            } else if (!s.config.clock_info_page) {
                fail(EOPNOTSUPP, fmt::format("ibv_create_cq_ex: {} has no clock-info page to "
                                             "convert timestamps",
                                             s.config.name));
            } else if (!s.config.ts_free_running) {
                fail(EOPNOTSUPP, fmt::format("ibv_create_cq_ex: {} has no clock to give wall-clock "
                                             "timestamps",
                                             s.config.name));
            }
        }
        cq->ctx = ctx_;
        const std::uint32_t entries = mlx5_cq_entries(depth);
        cq->ring.resize(entries);
        cq->from.resize(entries);
        State::Cq* raw = cq.get();
        s.cqs.push_back(std::move(cq));
        return std::make_unique<SimCompletionQueue>(hw_, raw);
    }

    std::unique_ptr<verbs::QueuePair> create_qp(verbs::CompletionQueue& cq, std::uint32_t depth,
                                                std::uint32_t max_sge) override {
        State& s = hw_->state();
        const std::lock_guard lock(s.mu);
        check_alive(s, "ibv_create_qp");
        if (!s.config.raw_packet_qp) {
            fail(EPERM, fmt::format("ibv_create_qp(IBV_QPT_RAW_PACKET): {}: not permitted; do "
                                    "you have CAP_NET_RAW? (setcap cap_net_raw+ep on the binary)",
                                    s.config.name));
        }
        auto* sim_cq = dynamic_cast<SimCompletionQueue*>(&cq);
        if (sim_cq == nullptr || &sim_cq->hardware() != hw_.get()) {
            fail(EINVAL,
                 fmt::format("ibv_create_qp: {}: the CQ belongs to another device", s.config.name));
        }
        if (depth == 0 || depth > s.config.max_qp_wr) {
            fail(EINVAL, fmt::format("ibv_create_qp: {}: {} receive WRs asked, the device takes "
                                     "1 to {}",
                                     s.config.name, depth, s.config.max_qp_wr));
        }
        if (max_sge == 0 || max_sge > s.config.max_sge) {
            fail(EINVAL, fmt::format("ibv_create_qp: {}: {} SGEs per WR asked, the device takes "
                                     "1 to {}",
                                     s.config.name, max_sge, s.config.max_sge));
        }
        // Kernel drivers/infiniband/hw/mlx5/qp.c get_ts_format: a CQ asking
        // for raw completion timestamps needs the free-running format, a
        // real-time CQ the real-time one; otherwise the queue is refused.
        const State::Cq& cq_rec = *sim_cq->record();
        if (cq_rec.timestamps == verbs::TimestampFormat::device_ticks &&
            !s.config.ts_free_running) {
            fail(EOPNOTSUPP, fmt::format("ibv_create_qp: {}: free-running timestamp format is not "
                                         "supported (the device runs its real-time clock)",
                                         s.config.name));
        }
        if (cq_rec.real_time && !s.config.ts_real_time) {
            fail(EOPNOTSUPP, fmt::format("ibv_create_qp: {}: real-time timestamp format is not "
                                         "supported",
                                         s.config.name));
        }
        auto qp = std::make_unique<State::Qp>();
        qp->qp_num = s.next_qp_num++ & 0xffffffu;
        qp->ctx = ctx_;
        qp->cq = sim_cq->record();
        qp->max_sge = mlx5_recv_sge(max_sge);
        qp->ring.resize(mlx5_recv_depth(depth, max_sge));
        ++qp->cq->qps;
        State::Qp* raw = qp.get();
        s.qps.push_back(std::move(qp));
        return std::make_unique<SimQueuePair>(hw_, raw);
    }

    std::optional<AsyncEvent> wait_event(std::chrono::milliseconds timeout) override {
        State& s = hw_->state();
        std::unique_lock lock(s.mu);
        std::deque<AsyncEvent>& queue = s.events[ctx_];
        if (!s.cv.wait_for(lock, timeout, [&queue] { return !queue.empty(); })) {
            return std::nullopt;
        }
        AsyncEvent ev = std::move(queue.front());
        queue.pop_front();
        return ev;
    }

    std::optional<std::pair<std::uint64_t, std::uint64_t>> clock_pair() override {
        const auto sample = clock_sample();
        if (!sample) {
            return std::nullopt;
        }
        return std::make_pair(
            sample->ticks,
            static_cast<std::uint64_t>(sample->host_before_ns +
                                       (sample->host_after_ns - sample->host_before_ns) / 2));
    }

    // ibv_query_rt_values_ex between two CLOCK_REALTIME reads (lib/sources/
    // verbs/ibv.cpp): rdma-core mlx5_query_rt_values reads the device clock
    // through the mapped hca_core_clock register, a PCIe read of
    // SimConfig::phc_read_ns, latched somewhere inside the bracket.
    std::optional<verbs::ClockSample> clock_sample() override {
        State& s = hw_->state();
        const std::lock_guard lock(s.mu);
        if (!s.config.completion_timestamps) {
            return std::nullopt;
        }
        const std::int64_t read = s.config.phc_read_ns;
        const std::int64_t before = read * s.latch_fraction() / 1024;
        const std::int64_t host = s.host_ns(s.clock);
        return verbs::ClockSample{s.clock, host - before, host + (read - before)};
    }

  private:
    static void check_alive(const State& s, const char* call) {
        if (s.fatal) {
            fail(EIO, fmt::format("{}: {}: device is in a fatal error state; reload the driver or "
                                  "reset the NIC",
                                  call, s.config.name));
        }
    }

    std::shared_ptr<SimHardware> hw_;
    verbs::DeviceCaps caps_;
    std::uint64_t ctx_ = 0;
};

}  // namespace

// --- SimProvider --------------------------------------------------------------

std::shared_ptr<SimHardware> SimProvider::add(SimConfig config) {
    for (const auto& d : devices_) {
        if (d->config().name == config.name) {
            fail(EEXIST, fmt::format("sim: device {} already exists", config.name));
        }
    }
    devices_.push_back(std::make_shared<SimHardware>(std::move(config)));
    return devices_.back();
}

std::vector<std::string> SimProvider::device_names() {
    std::vector<std::string> names;
    names.reserve(devices_.size());
    for (const auto& d : devices_) {
        names.push_back(d->config().name);
    }
    return names;
}

std::unique_ptr<verbs::Device> SimProvider::open(const std::string& name, std::uint8_t port) {
    for (const auto& d : devices_) {
        if (d->config().name == name) {
            if (port != d->config().port) {
                fail(EINVAL, fmt::format("ibv_query_port: {} has no port {} (it has port {})", name,
                                         port, d->config().port));
            }
            return std::make_unique<SimDevice>(d);
        }
    }
    fail(ENODEV, fmt::format("ibv_open_device: no RDMA device named {}", name));
}

// --- SimHardware --------------------------------------------------------------

SimHardware::SimHardware(SimConfig config)
    : config_(std::move(config)), state_(std::make_unique<State>(config_)) {
    if (config_.completion_timestamps && config_.clock_khz == 0) {
        throw std::invalid_argument("SimConfig: completion_timestamps need clock_khz > 0");
    }
}

SimHardware::~SimHardware() = default;

void SimHardware::on_poll(std::function<void(bool empty)> hook) {
    state_->poll_hook = std::move(hook);
}

void SimHardware::advance_clock(std::uint64_t ticks) {
    const std::lock_guard lock(state_->mu);
    state_->clock += ticks;
}

std::uint64_t SimHardware::clock_ticks() const {
    const std::lock_guard lock(state_->mu);
    return state_->clock;
}

std::int64_t SimHardware::host_time_ns(std::uint64_t ticks) const {
    return state_->host_ns(ticks);
}

std::int64_t SimHardware::phc_time_ns(std::uint64_t ticks) const {
    return static_cast<std::int64_t>(state_->wallclock_ns(ticks));
}

std::size_t SimHardware::read_phc(std::span<PhcSample> out) {
    State& s = *state_;
    const std::lock_guard lock(s.mu);
    if (s.phc_failures > 0) {
        --s.phc_failures;
        return 0;
    }
    const std::int64_t read = s.config.phc_read_ns;
    const std::int64_t start = s.elapsed_ns(s.clock);
    const auto base = static_cast<std::int64_t>(s.config.host_time_base_ns);
    for (std::size_t i = 0; i < out.size(); ++i) {
        const std::int64_t width = i % 7 == 3 ? 10 * read : read;  // a disturbed read
        const std::int64_t latch = start + static_cast<std::int64_t>(i) * read;
        const std::int64_t before = width * s.latch_fraction() / 1024;
        out[i] = PhcSample{base + latch - before, s.phc_at(latch), base + latch + (width - before)};
    }
    return out.size();
}

void SimHardware::fail_phc_reads(std::uint64_t reads) {
    const std::lock_guard lock(state_->mu);
    state_->phc_failures = reads;
}

namespace {

// One destination of a steered frame: a WR of the rule's QP, filled as
// mlx5 fills it, and its completion.
void deliver_to(State& s, const SimConfig& config, State::Rule* rule, Bytes frame,
                std::uint32_t tag) {
    if (rule->counted) {
        ++rule->matched;
    }
    State::Qp* qp = rule->qp;
    if (qp == nullptr || qp->state != QpState::rtr || qp->count == 0 || s.withheld > 0) {
        s.withheld -= std::min<std::uint64_t>(s.withheld, 1);
        ++s.counters.out_of_buffer;
        return;
    }
    const RecvRequest wr = qp->pop();
    Completion c;
    c.wr_id = wr.wr_id;
    c.flow_tag = tag;
    if (qp->cq != nullptr) {
        switch (qp->cq->timestamps) {
            case verbs::TimestampFormat::device_ticks:
                c.hw_timestamp = s.clock;
                c.has_timestamp = true;
                break;
            case verbs::TimestampFormat::wallclock_ns:
                // A real-time CQ gives the raw CQE field, seconds << 32 | ns
                // (rdma-core providers/mlx5/cq.c mlx5_cq_fill_pfns: its
                // read_completion_wallclock_ns is mlx5_cq_read_wc_completion_ts,
                // be64toh(cqe64->timestamp)); a free-running one the PHC's ns
                // through the clock-info page (mlx5dv_ts_to_ns).
                c.hw_timestamp =
                    qp->cq->real_time ? s.real_time_stamp(s.clock) : s.wallclock_ns(s.clock);
                c.has_timestamp = true;
                break;
            case verbs::TimestampFormat::none:
                break;
        }
    }
    if (s.fail_frame) {
        c.status = *s.fail_frame;
        s.fail_frame.reset();
        s.complete(*qp, c);
        if (verbs::qp_in_error(c.status)) {
            s.to_error(*qp);
        }
        return;
    }
    const std::size_t num_sge = std::min<std::size_t>(wr.num_sge, wr.sge.size());
    std::uint64_t room = 0;
    for (std::size_t i = 0; i < num_sge; ++i) {
        room += wr.sge[i].length;
    }
    if (frame.size() > room || frame.size() > std::numeric_limits<std::uint32_t>::max()) {
        c.status = WcStatus::loc_len_err;  // WR consumed, the QP keeps receiving
        s.complete(*qp, c);
        return;
    }
    // Every SGE the frame reaches must lie inside a memory region of its
    // lkey; a zero-length SGE was never handed to the NIC (mlx5_post_recv
    // skips it), so it is neither checked nor written.
    std::size_t left = frame.size();
    for (std::size_t i = 0; i < num_sge && left > 0; ++i) {
        if (wr.sge[i].length == 0) {
            continue;
        }
        if (!s.sge_ok(*qp, wr.sge[i])) {
            c.status = WcStatus::loc_prot_err;
            s.complete(*qp, c);
            s.to_error(*qp);
            return;
        }
        left -= std::min<std::size_t>(left, wr.sge[i].length);
    }
    // SGE0 is filled completely before SGE1.
    const std::uint8_t* src = frame.data();
    left = frame.size();
    for (std::size_t i = 0; i < num_sge && left > 0; ++i) {
        const std::size_t n = std::min<std::size_t>(left, wr.sge[i].length);
        if (n > 0 && (i == 0 || !config.skip_payload_dma)) {
            std::memcpy(reinterpret_cast<std::uint8_t*>(wr.sge[i].addr), src, n);
            s.leave_cache(reinterpret_cast<const void*>(wr.sge[i].addr), n);
        }
        src += n;
        left -= n;
    }
    c.byte_len = static_cast<std::uint32_t>(frame.size());
    if (s.corrupt_byte_len) {
        c.byte_len = *s.corrupt_byte_len;
        s.corrupt_byte_len.reset();
    }
    if (s.corrupt_flow_tag) {
        c.flow_tag = *s.corrupt_flow_tag;
        s.corrupt_flow_tag.reset();
    }
    s.complete(*qp, c);
}

}  // namespace

void SimHardware::deliver(Bytes frame, std::uint64_t ticks) {
    UdpPacket pkt;
    const bool udp = parse_udp_frame(frame, frame.size(), pkt) == PacketError::none;
    State& s = *state_;
    const std::lock_guard lock(s.mu);
    s.clock += ticks;
    if (!s.port_up || s.fatal) {
        ++s.counters.link_down_lost;
        return;
    }
    ++s.counters.rx_frames;
    State::Rule* rule = udp ? s.match(frame, pkt) : nullptr;
    if (rule == nullptr) {
        ++s.counters.unmatched;
        return;
    }
    ++s.counters.steered;
    // The wire's bytes this simulation read (the headers it matched, what it
    // copied) are not the poll core's either: a real NIC reads them off the
    // wire (SimConfig::dma_leaves_cache).
    struct LeaveWire {
        const State& s;
        Bytes frame;
        ~LeaveWire() { s.leave_cache(frame.data(), frame.size()); }
    } leave_wire{s, frame};
    // Every rule of the same match is one FTE with all their destinations
    // (same_match): each QP gets the frame, in the order the rules were made.
    const FlowMatch first = rule->match;
    const State::Rule* fte = s.fte_of(first);
    const std::uint32_t tag = fte != nullptr ? fte->match.tag : 0;
    for (const auto& r : s.rules) {
        if (State::same_match(r->match, first)) {
            deliver_to(s, config_, r.get(), frame, tag);
        }
    }
}

void SimHardware::inject_qp_error(std::uint32_t qp_num) {
    State& s = *state_;
    const std::lock_guard lock(s.mu);
    State::Qp* qp = s.find_qp(qp_num);
    if (qp == nullptr) {
        throw std::out_of_range(fmt::format("sim {}: no QP {:#x}", config_.name, qp_num));
    }
    s.to_error(*qp);
    s.raise_to(qp->ctx, make_event(EventKind::qp_fatal, qp_num, 0, "IBV_EVENT_QP_FATAL"));
}

void SimHardware::set_port_up(bool up) {
    State& s = *state_;
    const std::lock_guard lock(s.mu);
    if (s.port_up == up) {
        return;  // no state change, no event
    }
    s.port_up = up;
    s.broadcast(up ? make_event(EventKind::port_active, 0, config_.port, "IBV_EVENT_PORT_ACTIVE")
                   : make_event(EventKind::port_error, 0, config_.port, "IBV_EVENT_PORT_ERR"));
}

void SimHardware::raise_port_event(std::uint8_t port, bool up) {
    State& s = *state_;
    const std::lock_guard lock(s.mu);
    s.broadcast(up ? make_event(EventKind::port_active, 0, port, "IBV_EVENT_PORT_ACTIVE")
                   : make_event(EventKind::port_error, 0, port, "IBV_EVENT_PORT_ERR"));
}

void SimHardware::raise_device_fatal(bool announce) {
    State& s = *state_;
    {
        const std::lock_guard lock(s.mu);
        if (s.fatal) {
            return;
        }
        s.fatal = true;
        for (auto& qp : s.qps) {
            s.to_error(*qp);
        }
    }
    if (announce) {
        announce_device_fatal();
    }
}

void SimHardware::announce_device_fatal() {
    State& s = *state_;
    const std::lock_guard lock(s.mu);
    s.broadcast(make_event(EventKind::device_fatal, 0, 0, "IBV_EVENT_DEVICE_FATAL"));
}

void SimHardware::withhold_buffers(std::uint64_t frames) {
    const std::lock_guard lock(state_->mu);
    state_->withheld = frames;
}

void SimHardware::corrupt_next_wr_id(std::uint64_t wr_id) {
    const std::lock_guard lock(state_->mu);
    state_->corrupt_wr_id = wr_id;
}

void SimHardware::fail_next_frame(WcStatus status) {
    const std::lock_guard lock(state_->mu);
    state_->fail_frame = status;
}

void SimHardware::corrupt_next_byte_len(std::uint32_t byte_len) {
    const std::lock_guard lock(state_->mu);
    state_->corrupt_byte_len = byte_len;
}

void SimHardware::corrupt_next_flow_tag(std::uint32_t tag) {
    const std::lock_guard lock(state_->mu);
    state_->corrupt_flow_tag = tag;
}

SimCounters SimHardware::counters() const {
    const std::lock_guard lock(state_->mu);
    return state_->counters;
}

std::uint64_t SimHardware::flow_counter_total() const {
    const std::lock_guard lock(state_->mu);
    std::uint64_t total = state_->retired_flow_matches;
    for (const auto& r : state_->rules) {
        total += r->matched;
    }
    return total;
}

std::size_t SimHardware::posted_wrs(std::uint32_t qp_num) const {
    const std::lock_guard lock(state_->mu);
    const State::Qp* qp = state_->find_qp(qp_num);
    if (qp == nullptr) {
        throw std::out_of_range(fmt::format("sim {}: no QP {:#x}", config_.name, qp_num));
    }
    return qp->count;
}

std::size_t SimHardware::flows() const {
    const std::lock_guard lock(state_->mu);
    return state_->rules.size();
}

std::size_t SimHardware::qps() const {
    const std::lock_guard lock(state_->mu);
    return state_->qps.size();
}

std::size_t SimHardware::min_posted_wrs() const {
    const std::lock_guard lock(state_->mu);
    std::size_t least = 0;
    bool any = false;
    for (const auto& qp : state_->qps) {
        least = any ? std::min(least, qp->count) : qp->count;
        any = true;
    }
    return least;
}

std::uint64_t SimHardware::shifted_wr_ids() const {
    const std::lock_guard lock(state_->mu);
    return state_->shifted_wr_ids;
}

std::size_t SimHardware::ordering_violations() const {
    const std::lock_guard lock(state_->mu);
    return state_->violations;
}

void SimHardware::write_sysfs(const std::filesystem::path& root) const {
    std::uint64_t out_of_buffer = 0;
    bool up = false;
    {
        const std::lock_guard lock(state_->mu);
        out_of_buffer = state_->counters.out_of_buffer;
        up = state_->port_up && !state_->fatal;
    }
    const std::filesystem::path port =
        root / config_.name / "ports" / std::to_string(unsigned{config_.port});
    std::filesystem::create_directories(port / "hw_counters");
    const auto write = [](const std::filesystem::path& path, const std::string& text) {
        std::ofstream out(path, std::ios::trunc);
        out << text;
        out.flush();
        if (!out) {
            throw std::system_error(errno, std::generic_category(),
                                    "sim write_sysfs: cannot write " + path.string());
        }
    };
    write(port / "hw_counters" / "out_of_buffer", fmt::format("{}\n", out_of_buffer));
    write(port / "state", up ? "4: ACTIVE\n" : "1: DOWN\n");
}

}  // namespace ibvcap::sim
