#include "lib/sources/verbs/engine.hpp"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "formats/codif.hpp"
#include "formats/packet.hpp"
#include "lib/sources/verbs/wr_id.hpp"

namespace ibvcap {

namespace {

constexpr std::uint32_t kSlotAlign = 64;

std::uint32_t round_up(std::uint32_t v, std::uint32_t to) {
    return (v + to - 1) / to * to;
}

// Every slot of a ring fits the wr_id's and the lease token's slot field.
static_assert(std::numeric_limits<decltype(EngineOptions::ring_depth)>::digits <= WrId::kSlotBits);

std::uint64_t realtime_ns() {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

// Where the UDP payload starts, read from the few header bytes that decide it
// (EtherType/VLAN tags and IHL); 0 when the head is too short to say.
std::size_t quick_udp_payload_offset(Bytes head) {
    std::size_t off = 12;
    for (int tag = 0; tag <= 2; ++tag) {
        if (head.size() < off + 2) {
            return 0;
        }
        const std::uint16_t type = load_be16(head.data() + off);
        if (type != kEtherTypeVlan && type != kEtherTypeQinQ) {
            break;
        }
        off += kVlanTagBytes;
    }
    off += 2;
    if (head.size() <= off) {
        return 0;
    }
    return off + std::size_t{4} * (head[off] & 0x0fu) + kUdpHeaderBytes;
}

class HostPayloadMemory final : public PayloadMemory {
  public:
    Region allocate(verbs::Device& device, std::size_t bytes) override {
        void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
        if (p == nullptr) {
            throw std::bad_alloc();
        }
        std::shared_ptr<void> owner(p, std::free);
        std::memset(p, 0, bytes);  // touch the pages before the NIC writes them
        Region r;
        r.mr = device.register_memory(p, bytes);
        r.nic_address = reinterpret_cast<std::uintptr_t>(p);
        r.host_view = static_cast<std::uint8_t*>(p);
        r.owner = std::move(owner);
        return r;
    }
    std::string describe() const override { return "host memory"; }
};

}  // namespace

std::unique_ptr<PayloadMemory> make_host_payload_memory() {
    return std::make_unique<HostPayloadMemory>();
}

std::uint32_t max_payload_bytes(const EngineOptions& options) {
    constexpr auto kHeaders =
        static_cast<std::uint32_t>(kPlainUdpPayloadOffset + kCodifHeaderBytes);
    return options.max_frame_bytes > kHeaders ? options.max_frame_bytes - kHeaders : 0;
}

PayloadMemory::Region StandinDevicePayloadMemory::allocate(verbs::Device& device,
                                                           std::size_t bytes) {
    Region r = HostPayloadMemory().allocate(device, bytes);
    r.device_view = r.host_view;
    r.host_view = nullptr;
    r.device = this;
    return r;
}

std::string StandinDevicePayloadMemory::describe() const {
    return "host memory standing in for GPU memory (read only through batched copies)";
}

void StandinDevicePayloadMemory::flush_nic_writes() const {
    sticky_.run([&] {
        log_.record(DeviceCallLog::Call::flush);
        log_.flushed();
    });
}

// Host memory needs no page-locking here; the call is logged as the GPU
// build's cudaHostRegister / cudaHostUnregister would be.
bool StandinDevicePayloadMemory::pin_host_buffer(void*, std::size_t) const {
    log_.record(DeviceCallLog::Call::pin);
    return true;
}

void StandinDevicePayloadMemory::unpin_host_buffer(void*) const {
    log_.record(DeviceCallLog::Call::pin);
}

void StandinDevicePayloadMemory::copy_to_host(std::span<const Copy> copies) const {
    sticky_.run([&] {
        if (batches_.load(std::memory_order_relaxed) >= fail_after_) {
            after_fault_.fetch_add(1, std::memory_order_relaxed);
            throw std::runtime_error(
                "cudaMemcpy2DAsync: an illegal memory access was "
                "encountered (injected)");
        }
        std::uint64_t bytes = 0;
        for (const auto& c : copies) {
            bytes += c.bytes;
        }
        // One batch is one call in the GPU build (plan_strided_copies, or a
        // gather kernel for the block rings) and one stream synchronize.
        log_.record(DeviceCallLog::Call::copy, copies.size(), bytes);
        log_.record(DeviceCallLog::Call::synchronize);
        log_.read();
        batches_.fetch_add(1, std::memory_order_relaxed);
        copies_.fetch_add(copies.size(), std::memory_order_relaxed);
        for (const auto& c : copies) {
            std::memcpy(c.dst, c.src, c.bytes);
        }
    });
}

// Tokens released by consumer threads, taken by the poll thread. The poll
// thread only try_locks (it never waits); both vectors are reserved for every
// slot a run can hold, and swapped, so the poll thread never allocates.
class VerbsEngine::Releases final : public SlotOwner {
  public:
    explicit Releases(std::size_t capacity) { pending_.reserve(capacity); }
    void release(std::span<const std::uint64_t> tokens) override {
        const std::lock_guard lock(mu_);
        pending_.insert(pending_.end(), tokens.begin(), tokens.end());
        has_.store(true, std::memory_order_release);
    }
    // Poll thread: swaps the pending tokens into `out` (empty on entry).
    bool take(std::vector<std::uint64_t>& out) {
        if (!has_.load(std::memory_order_acquire)) {
            return false;
        }
        const std::unique_lock lock(mu_, std::try_to_lock);
        if (!lock.owns_lock()) {
            return false;  // a consumer is appending: next poll
        }
        out.swap(pending_);
        has_.store(false, std::memory_order_relaxed);
        return true;
    }

  private:
    std::mutex mu_;
    std::vector<std::uint64_t> pending_;
    std::atomic<bool> has_{false};
};

struct VerbsEngine::Qp {
    std::uint16_t index = 0;  // the QP field of its wr_ids and lease tokens
    Endpoint group;
    std::uint32_t antenna = 0;  // 0: any source
    std::string label;
    std::uint32_t depth = 0;
    decltype(WrId::generation) generation = 0;  // bumped by each recovery; part of every wr_id
    PayloadMemory::Region payload;              // outlives the QP (declared before it)
    std::unique_ptr<verbs::QueuePair> qp;
    std::vector<std::unique_ptr<verbs::Flow>> flows;  // destroyed before the QP
    std::vector<std::uint8_t> outstanding;            // per slot: posted, not completed
    std::vector<std::uint16_t> held;                  // per slot: consumers holding it
    std::uint32_t held_count = 0;                     // slots with held > 0
    std::uint32_t outstanding_count = 0;
    std::vector<verbs::RecvRequest> reposts;
    bool needs_recovery = false;
    std::chrono::steady_clock::time_point error_since{};
    std::uint64_t delivered = 0;  // completions of frames the NIC steered here
    std::atomic<std::uint64_t> delivered_published{0};  // for the watchdog's thread
    std::uint64_t watch_matched = 0;  // the watchdog's last reading (its thread only)
    std::uint64_t watch_delivered = 0;
};

VerbsEngine::VerbsEngine(verbs::Device& device, EngineOptions options, Demux& demux, Ledger& ledger,
                         PayloadMemory& payload, MembershipFactory memberships)
    : device_(device),
      options_(std::move(options)),
      demux_(demux),
      ledger_(ledger),
      payload_(payload),
      membership_factory_(std::move(memberships)) {
    const verbs::DeviceCaps& caps = device_.caps();
    if (options_.groups.empty()) {
        throw std::invalid_argument("no GROUP:PORT to capture");
    }
    if (!caps.raw_packet_qp) {
        throw std::invalid_argument(fmt::format(
            "{} port {} is not an Ethernet port with raw-packet QPs", caps.name, caps.port));
    }
    if (!caps.flow_steering) {
        throw std::invalid_argument(
            fmt::format("{} has no managed flow steering, which exact multicast rules need; use "
                        "--source pcap on this host",
                        caps.name));
    }
    if (options_.hw_demux && options_.antennas.empty()) {
        throw std::invalid_argument("--hw-demux needs the antennas listed with --antenna");
    }
    if (options_.split && caps.max_sge < 2) {
        ledger_.add_note(
            fmt::format("{} takes one SGE per receive: header/payload split off", caps.name));
        options_.split = false;
    }

    // The plan: one QP per group, or per (group, antenna) with hardware demux.
    std::vector<std::pair<Endpoint, std::uint32_t>> plan;
    for (const auto& g : options_.groups) {
        if (options_.hw_demux) {
            for (const auto a : options_.antennas) {
                plan.emplace_back(g, a);
            }
        } else {
            plan.emplace_back(g, 0);
        }
    }

    // Clamp the ring to what the device takes, and the CQ to its entries.
    std::uint32_t depth = std::max<std::uint32_t>(options_.ring_depth, 16);
    if (caps.max_qp_wr > 0 && depth > caps.max_qp_wr) {
        ledger_.add_note(fmt::format("ring depth {} clamped to {} (max_qp_wr of {})", depth,
                                     caps.max_qp_wr, caps.name));
        depth = caps.max_qp_wr;
    }
    if (caps.max_cqe > 0 && std::uint64_t{depth} * plan.size() > caps.max_cqe) {
        const auto clamped = static_cast<std::uint32_t>(caps.max_cqe / plan.size());
        ledger_.add_note(
            fmt::format("ring depth {} clamped to {} so {} QPs fit one CQ of {} "
                        "entries (max_cqe of {})",
                        depth, clamped, plan.size(), caps.max_cqe, caps.name));
        depth = clamped;
    }
    options_.ring_depth = depth;

    header_bytes_ = static_cast<std::uint32_t>(kPlainUdpPayloadOffset + kCodifHeaderBytes +
                                               kVlanTagBytes * options_.vlan_tags);
    if (options_.split) {
        header_stride_ = round_up(header_bytes_, kSlotAlign);
        payload_bytes_ = options_.max_frame_bytes > header_bytes_
                             ? options_.max_frame_bytes - header_bytes_
                             : kSlotAlign;
    } else {
        payload_bytes_ = options_.max_frame_bytes;
    }
    const std::uint32_t payload_stride = round_up(payload_bytes_, kSlotAlign);

    if (options_.split) {
        const std::size_t arena = std::size_t{header_stride_} * depth * plan.size();
        void* p = std::aligned_alloc(4096, (arena + 4095) / 4096 * 4096);
        if (p == nullptr) {
            throw std::bad_alloc();
        }
        header_arena_ = {static_cast<std::uint8_t*>(p), std::free};
        std::memset(p, 0, arena);
        header_mr_ = device_.register_memory(p, arena);
    }

    if (plan.size() > std::numeric_limits<decltype(WrId::qp)>::max()) {
        throw std::invalid_argument("more than 65535 queue pairs on one device");
    }
    for (std::size_t i = 0; i < plan.size(); ++i) {
        auto q = std::make_unique<Qp>();
        q->index = static_cast<std::uint16_t>(i);
        q->group = plan[i].first;
        q->antenna = plan[i].second;
        q->label = plan[i].second == 0
                       ? q->group.to_string()
                       : fmt::format("{}/{}", q->group.to_string(), format_ipv4(plan[i].second));
        q->depth = depth;
        q->payload = payload_.allocate(device_, std::size_t{payload_stride} * depth);
        if (q->payload.host_view == nullptr &&
            (q->payload.device == nullptr || q->payload.device_view == nullptr)) {
            throw std::invalid_argument("payload memory gives neither a host nor a device view");
        }
        if (q->payload.host_view == nullptr && !options_.split) {
            throw std::invalid_argument(
                "payload in GPU memory needs the header/payload split (drop --no-split)");
        }
        q->outstanding.assign(depth, 0);
        q->held.assign(depth, 0);
        q->reposts.reserve(depth);
        qps_.push_back(std::move(q));
    }
    create_queues(static_cast<std::uint32_t>(depth * plan.size()));
    batch_.resize(std::max<std::uint32_t>(options_.poll_batch, 1));
    hold_limit_ = options_.hold_limit > 0 ? std::min(options_.hold_limit, depth) : depth / 2;
    // Each slot may be held by several consumers (one per output format and
    // the block rings), each releasing its own token.
    const std::size_t tokens = std::size_t{depth} * qps_.size() * 8;
    releases_ = std::make_unique<Releases>(tokens);
    released_.reserve(tokens);
}

void VerbsEngine::create_queues(std::uint32_t cq_depth) {
    using verbs::TimestampFormat;
    const verbs::DeviceCaps& caps = device_.caps();
    // Device ticks need the tick rate and a clock pair to be converted.
    std::optional<std::pair<std::uint64_t, std::uint64_t>> pair;
    if (caps.completion_timestamps && caps.hca_core_clock_khz > 0) {
        pair = device_.clock_pair();
    }
    std::vector<TimestampFormat> formats;
    if (pair) {
        formats.push_back(TimestampFormat::device_ticks);
    }
    if (caps.completion_timestamps) {
        formats.push_back(TimestampFormat::wallclock_ns);
    }
    formats.push_back(TimestampFormat::none);
    // Which format a device takes is known only when its queues are made: a
    // ConnectX-6 Dx/7 running its real-time clock refuses a QP on a CQ that
    // asked for free-running ticks (kernel drivers/infiniband/hw/mlx5/qp.c
    // get_ts_format: EOPNOTSUPP). Each refusal moves to the next format.
    std::string refused;
    for (const TimestampFormat format : formats) {
        try {
            cq_ = device_.create_cq(cq_depth, format);
            for (auto& q : qps_) {
                q->qp = device_.create_qp(*cq_, q->depth, options_.split ? 2u : 1u);
            }
            timestamps_ = format;
            break;
        } catch (const std::system_error& e) {
            const int err = e.code().value();
            const bool unsupported = err == EOPNOTSUPP || err == ENOTSUP || err == ENOSYS;
            if (format == TimestampFormat::none || !unsupported) {
                throw;
            }
            refused += fmt::format("{}{} ({})", refused.empty() ? "" : "; ",
                                   verbs::to_string(format), e.what());
            for (auto& q : qps_) {
                q->qp.reset();
            }
            cq_.reset();
        }
    }
    switch (timestamps_) {
        case TimestampFormat::device_ticks:
            clock_khz_ = caps.hca_core_clock_khz;
            clock_ticks0_ = pair->first;
            clock_ns0_ = pair->second;
            last_clock_sync_ = std::chrono::steady_clock::now();
            ledger_.add_note(fmt::format(
                "timestamps: {} completion timestamps (free-running device clock, converted to "
                "CLOCK_REALTIME and resynced each second)",
                caps.name));
            break;
        case TimestampFormat::wallclock_ns:
            ledger_.add_note(
                fmt::format("timestamps: {} completion timestamps in wall-clock ns (the device's "
                            "real-time clock, or its free-running one converted by the driver); "
                            "device ticks refused: {}",
                            caps.name, refused));
            break;
        case TimestampFormat::none:
            ledger_.add_note(fmt::format(
                "timestamps: CLOCK_REALTIME when each batch is polled ({} gives no completion "
                "timestamps{}{})",
                caps.name, refused.empty() ? "" : "; refused: ", refused));
            break;
    }
}

VerbsEngine::~VerbsEngine() {
    try {
        stop();
    } catch (...) {
        // A destructor must not throw; stop() already recorded what it could.
    }
}

std::size_t VerbsEngine::queue_pairs() const {
    return qps_.size();
}

std::uint8_t* VerbsEngine::header_slot(const Qp& q, std::uint64_t slot) const {
    return header_arena_.get() + (std::size_t{q.index} * q.depth + slot) * header_stride_;
}

std::uint64_t VerbsEngine::payload_offset(std::uint64_t slot) const {
    return slot * round_up(payload_bytes_, kSlotAlign);
}

verbs::RecvRequest VerbsEngine::request_for(const Qp& q, std::uint64_t slot) const {
    verbs::RecvRequest r;
    r.wr_id = WrId{q.index, q.generation, static_cast<std::uint32_t>(slot)}.encode();
    const verbs::Sge payload{q.payload.nic_address + payload_offset(slot), payload_bytes_,
                             q.payload.mr->lkey()};
    if (options_.split) {
        r.sge[0] = {reinterpret_cast<std::uintptr_t>(header_slot(q, slot)), header_bytes_,
                    header_mr_->lkey()};
        r.sge[1] = payload;
        r.num_sge = 2;
    } else {
        r.sge[0] = payload;
        r.num_sge = 1;
    }
    return r;
}

std::optional<std::uint64_t> VerbsEngine::rule_matches(Qp& q) {
    std::optional<std::uint64_t> matched;
    for (auto& f : q.flows) {
        if (const auto n = f->matched_packets()) {
            matched = matched.value_or(0) + *n;
        }
    }
    return matched;
}

void VerbsEngine::post_all(Qp& q) {
    // Every slot but those a consumer holds (they are posted on release).
    q.reposts.clear();
    std::fill(q.outstanding.begin(), q.outstanding.end(), std::uint8_t{0});
    for (std::uint32_t slot = 0; slot < q.depth; ++slot) {
        if (q.held[slot] == 0) {
            q.reposts.push_back(request_for(q, slot));
            q.outstanding[slot] = 1;
        }
    }
    q.qp->post_recv(q.reposts);
    q.outstanding_count = static_cast<std::uint32_t>(q.reposts.size());
    q.reposts.clear();
}

void VerbsEngine::take_releases() {
    if (!releases_->take(released_)) {
        return;
    }
    for (const std::uint64_t token : released_) {
        // Tokens come back from other threads: checked like any wr_id.
        const auto [qi, slot] = LeaseToken::decode(token);
        if (qi >= qps_.size() || slot >= qps_[qi]->depth || qps_[qi]->held[slot] == 0) {
            ++stats_.bad_release;
            continue;
        }
        Qp& q = *qps_[qi];
        if (--q.held[slot] == 0) {
            --q.held_count;
            --held_total_;
            // Into the next batch; a QP awaiting recovery posts it in post_all.
            if (!q.needs_recovery) {
                q.reposts.push_back(request_for(q, slot));
            }
        }
    }
    released_.clear();
}

void VerbsEngine::start() {
    if (started_) {
        return;
    }
    started_ = true;
    // 1. Every receive WR posted and every QP ready before any rule steers
    //    traffic to it (DESIGN §4.2).
    for (auto& q : qps_) {
        q->qp->modify(verbs::QpState::init);
        post_all(*q);
        q->qp->modify(verbs::QpState::rtr);
    }
    // 2. The flow rules.
    const bool counters = options_.flow_counters && device_.caps().flow_counters;
    if (options_.flow_counters && !counters) {
        ledger_.add_note(
            fmt::format("{} has no flow counters: per-group NIC drop counts are not "
                        "available (out_of_buffer still counts every drop)",
                        device_.caps().name));
    }
    bool counting = counters;
    for (auto& q : qps_) {
        verbs::FlowMatch m;
        multicast_mac(q->group.ip, m.dst_mac.data());
        m.dst_ip = q->group.ip;
        m.src_ip = q->antenna;
        m.dst_port = q->group.port;
        q->flows.push_back(create_flow(*q, m, counting));
    }
    // 3. The IGMP joins, one per group, held for the run.
    if (membership_factory_) {
        for (const auto& g : options_.groups) {
            memberships_.push_back(membership_factory_(g));
        }
    }
}

std::unique_ptr<verbs::Flow> VerbsEngine::create_flow(Qp& q, const verbs::FlowMatch& match,
                                                      bool& counters) {
    if (!counters) {
        if (stats_.uncounted_rules > 0) {
            ++stats_.uncounted_rules;
        }
        return q.qp->create_flow(match, false);
    }
    try {
        return q.qp->create_flow(match, true);
    } catch (const std::system_error& e) {
        // Whether the device grants a flow counter is known only now: the
        // probe's attach is bookkeeping in user space (rdma-core
        // providers/mlx5/verbs.c mlx5_attach_counters_point_flow). The rule
        // is made without it, and so are the rest; a rule that fails again
        // fails the run with its own error.
        auto flow = q.qp->create_flow(match, false);
        counters = false;
        ++stats_.uncounted_rules;
        ledger_.add_note(fmt::format(
            "{} refused a counted flow rule for {} ({}): this and later rules have no counter, "
            "so their per-group NIC drop counts are not available (out_of_buffer still counts "
            "every drop)",
            device_.caps().name, q.label, e.what()));
        return flow;
    }
}

void VerbsEngine::flush_reposts(Qp& q) {
    if (q.reposts.empty() || q.needs_recovery) {
        return;
    }
    q.qp->post_recv(q.reposts);
    for (const auto& r : q.reposts) {
        q.outstanding[WrId::decode(r.wr_id).slot] = 1;
    }
    q.outstanding_count += static_cast<std::uint32_t>(q.reposts.size());
    q.reposts.clear();
}

void VerbsEngine::recover(Qp& q) {
    // DESIGN §4.6: drained (or timed out), then RESET → INIT → re-post → RTR.
    q.qp->modify(verbs::QpState::reset);  // discards whatever is still posted
    // Completions of the old ring still in the CQ (a drain that timed out)
    // carry the old generation and are told apart from the new ring's.
    ++q.generation;
    q.qp->modify(verbs::QpState::init);
    post_all(q);
    q.qp->modify(verbs::QpState::rtr);
    q.needs_recovery = false;
    ++stats_.recoveries;
}

std::uint64_t VerbsEngine::timestamp_ns(const verbs::Completion& c) {
    if (!c.has_timestamp) {
        return batch_realtime_ns_;
    }
    if (timestamps_ == verbs::TimestampFormat::wallclock_ns) {
        return c.hw_timestamp;
    }
    // Resynced once a second, so the tick delta times 10^6 stays far from overflow.
    const auto delta = static_cast<std::int64_t>(c.hw_timestamp - clock_ticks0_);
    const std::int64_t ns = delta * 1'000'000 / static_cast<std::int64_t>(clock_khz_);
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(clock_ns0_) + ns);
}

void VerbsEngine::resync_clock() {
    if (timestamps_ != verbs::TimestampFormat::device_ticks) {
        return;
    }
    if (const auto pair = device_.clock_pair()) {
        clock_ticks0_ = pair->first;
        clock_ns0_ = pair->second;
    }
    last_clock_sync_ = std::chrono::steady_clock::now();
}

void VerbsEngine::handle(const verbs::Completion& c) {
    ++stats_.completions;
    const auto status_index = static_cast<std::size_t>(c.status);
    if (status_index < std::size(stats_.wc_by_status)) {
        ++stats_.wc_by_status[status_index];
    }
    // Nothing from a completion is trusted (DESIGN §4.3): the wr_id must name a
    // QP and a slot that is posted. The wr_id is all there is to go by: the
    // completion's qpn field holds the flow tag on an mlx5 raw-packet QP, not
    // the QP (lib/sources/verbs/seam.hpp, Completion::qp_num).
    const WrId id = WrId::decode(c.wr_id);
    const std::uint32_t slot = id.slot;
    if (id.qp >= qps_.size()) {
        ++stats_.bad_wr_id;
        return;
    }
    Qp& q = *qps_[id.qp];
    if (id.generation != q.generation && slot < q.depth) {
        // From the ring before a recovery: its slot has been re-posted since,
        // so a frame it carried may be overwritten. Dropped, and counted.
        ++stats_.stale_completions;
        if (c.status == verbs::WcStatus::success) {
            ++stats_.stale_frames;
        }
        return;
    }
    if (slot >= q.depth || q.outstanding[slot] == 0) {
        ++stats_.bad_wr_id;
        return;
    }
    q.outstanding[slot] = 0;
    --q.outstanding_count;

    auto repost = [&] {
        q.reposts.push_back(request_for(q, slot));
        if (q.reposts.size() >= options_.repost_batch) {
            flush_reposts(q);
        }
    };

    switch (c.status) {
        case verbs::WcStatus::success: {
            ++q.delivered;
            const std::uint32_t capacity =
                options_.split ? header_bytes_ + payload_bytes_ : payload_bytes_;
            if (c.byte_len > capacity || c.byte_len == 0) {
                ++stats_.bad_byte_len;
                repost();
                return;
            }
            Frame f;
            if (options_.split) {
                const std::uint32_t in_head = std::min(c.byte_len, header_bytes_);
                f.head = Bytes(header_slot(q, slot), in_head);
                if (q.payload.host_view != nullptr) {
                    f.tail =
                        Bytes(q.payload.host_view + payload_offset(slot), c.byte_len - in_head);
                } else {
                    // GPU memory: never read here; consumers hold the slot and
                    // copy on their own threads (Frame::tail_device).
                    f.tail =
                        Bytes(q.payload.device_view + payload_offset(slot), c.byte_len - in_head);
                    f.tail_device = q.payload.device;
                }
                if (!f.tail.empty() &&
                    quick_udp_payload_offset(f.head) + kCodifHeaderBytes != header_bytes_) {
                    // A VLAN tag or IP options the ring was not sized for: the
                    // payload in SGE1 is shifted. Parsed correctly all the same.
                    ++stats_.split_misaligned;
                }
            } else {
                f.head = Bytes(q.payload.host_view + payload_offset(slot), c.byte_len);
            }
            f.wire_bytes = c.byte_len;
            f.timestamp_ns = timestamp_ns(c);
            ++stats_.frames;
            bytes_ += c.byte_len;
            FrameLease lease;
            if (options_.zero_copy) {
                lease.owner = releases_.get();
                lease.token = LeaseToken{q.index, slot}.encode();
                lease.allowed = q.held_count < hold_limit_;
                lease.pressure = q.held_count >= hold_limit_ / 2;
                stats_.hold_refused += lease.allowed ? 0 : 1;
                f.lease = &lease;
            }
            demux_.on_frame(f);
            if (lease.holds > 0) {
                q.held[slot] =
                    static_cast<std::uint16_t>(std::min<std::uint32_t>(lease.holds, 0xffff));
                ++q.held_count;
                ++held_total_;
                ++stats_.held;
                return;
            }
            repost();
            return;
        }
        case verbs::WcStatus::loc_len_err:
            // Larger than the slot: the frame is lost, the WR is consumed and
            // the QP stays ready (DESIGN §4.6).
            ++q.delivered;
            repost();
            return;
        case verbs::WcStatus::wr_flush_err:
        case verbs::WcStatus::loc_prot_err:
        case verbs::WcStatus::loc_qp_op_err:
        case verbs::WcStatus::other:
            if (!q.needs_recovery) {
                q.needs_recovery = true;
                q.error_since = std::chrono::steady_clock::now();
            }
            return;
    }
}

std::size_t VerbsEngine::poll_once() {
    ++stats_.polls;
    take_releases();
    const std::size_t n = cq_->poll(batch_);
    if (n == 0) {
        ++stats_.empty_polls;
    } else {
        if (timestamps_ == verbs::TimestampFormat::none) {
            batch_realtime_ns_ = realtime_ns();
        }
        for (std::size_t i = 0; i < n; ++i) {
            if (i + 1 < n) {
                // The next frame's headers: the demux reads them first. (Only
                // an address inside a ring is computed; prefetch never faults.)
                const WrId next = WrId::decode(batch_[i + 1].wr_id);
                if (next.qp < qps_.size() && next.slot < qps_[next.qp]->depth) {
                    const Qp& nq = *qps_[next.qp];
                    const std::uint64_t slot = next.slot;
                    if (options_.split) {
                        __builtin_prefetch(header_slot(nq, slot));
                    } else if (nq.payload.host_view != nullptr) {
                        __builtin_prefetch(nq.payload.host_view + payload_offset(slot));
                    }
                }
            }
            handle(batch_[i]);
        }
        published_.store(stats_.frames, std::memory_order_relaxed);
        bytes_published_.store(bytes_, std::memory_order_relaxed);
        for (auto& q : qps_) {
            q->delivered_published.store(q->delivered, std::memory_order_relaxed);
        }
    }
    held_published_.store(held_total_, std::memory_order_relaxed);
    for (auto& q : qps_) {
        if (q->needs_recovery) {
            if (q->outstanding_count == 0 ||
                std::chrono::steady_clock::now() - q->error_since >= options_.drain_timeout) {
                recover(*q);
            }
        } else {
            flush_reposts(*q);
        }
    }
    return n;
}

void VerbsEngine::handle_event(const verbs::AsyncEvent& event) {
    const bool port_event =
        event.kind == verbs::EventKind::port_error || event.kind == verbs::EventKind::port_active;
    if (port_event && event.port != 0 && event.port != device_.caps().port) {
        // Every context of a device gets the events of all its ports
        // (ibv_get_async_event(3)); another port's link is not ours.
        ++stats_.other_port_events;
        return;
    }
    switch (event.kind) {
        case verbs::EventKind::port_error:
            ++stats_.port_down_events;
            ledger_.add_note(fmt::format("{} port {} went down ({})", device_.caps().name,
                                         event.port, event.name));
            return;
        case verbs::EventKind::port_active:
            for (auto& m : memberships_) {
                m->rejoin();
                ++stats_.rejoins;
            }
            ledger_.add_note(fmt::format("{} port {} came back up; {} groups re-joined",
                                         device_.caps().name, event.port, memberships_.size()));
            return;
        case verbs::EventKind::qp_fatal:
            // WQ_FATAL names a work queue, not a QP, and arrives with qp_num 0:
            // then every QP of the device is recovered.
            for (auto& q : qps_) {
                if ((event.qp_num == 0 || q->qp->qp_num() == event.qp_num) && !q->needs_recovery) {
                    q->needs_recovery = true;
                    q->error_since = std::chrono::steady_clock::now();
                    q->qp->modify(verbs::QpState::error);  // make sure every WR flushes
                }
            }
            return;
        case verbs::EventKind::cq_error:
        case verbs::EventKind::device_fatal:
            stats_.device_fatal = true;
            ledger_.set_incomplete(fmt::format("{}: {}", device_.caps().name, event.name));
            return;
        case verbs::EventKind::other:
            return;
    }
}

void VerbsEngine::drain() {
    while (auto event = device_.wait_event(std::chrono::milliseconds(0))) {
        handle_event(*event);
    }
    while (poll_once() > 0) {
    }
}

void VerbsEngine::run(const std::atomic<bool>& stop) {
    std::uint64_t idle = 0;
    std::uint32_t iteration = 0;
    while (!stop.load(std::memory_order_relaxed) && !stats_.device_fatal) {
        idle = poll_once() == 0 ? idle + 1 : 0;
        if (++iteration % 1024 == 0) {
            while (auto event = device_.wait_event(std::chrono::milliseconds(0))) {
                handle_event(*event);
            }
            if (std::chrono::steady_clock::now() - last_clock_sync_ >= std::chrono::seconds(1)) {
                resync_clock();
            }
        }
        if (idle > 100000) {
            std::this_thread::yield();  // nothing for a while: let the other core breathe
        }
    }
}

void VerbsEngine::stop() {
    if (stopped_ || !started_) {
        stopped_ = true;
        return;
    }
    stopped_ = true;
    // Leave the groups first (the switch stops forwarding), last joined first.
    while (!memberships_.empty()) {
        memberships_.pop_back();
    }
    if (!stats_.device_fatal) {
        drain();
    }
    // The rules' counters die with them: read them now, against what was
    // delivered by now. Frames steered after this read and before the rules
    // go are caught by the second drain, so `undelivered` counts only drops.
    final_flow_counters_ = read_flow_counters();
    for (auto& q : qps_) {
        q->flows.clear();  // rules before their QPs (DESIGN §4.2)
    }
    if (!stats_.device_fatal) {
        drain();
    }
}

std::vector<SourceCounter> VerbsEngine::flow_counters() {
    return stopped_ ? final_flow_counters_ : read_flow_counters();
}

std::vector<std::string> VerbsEngine::watchdog() {
    std::vector<std::string> alarms;
    for (auto& q : qps_) {
        const auto counted = rule_matches(*q);
        if (!counted) {
            continue;  // without rule counters the NIC's side cannot be seen
        }
        const std::uint64_t matched = *counted;
        const std::uint64_t delivered = q->delivered_published.load(std::memory_order_relaxed);
        if (matched > q->watch_matched && delivered == q->watch_delivered) {
            alarms.push_back(fmt::format(
                "{} on {}: the NIC steered {} frames to it since the last check but none were "
                "delivered (ring starved or queue stuck; see out_of_buffer)",
                q->label, device_.caps().name, matched - q->watch_matched));
        }
        q->watch_matched = matched;
        q->watch_delivered = delivered;
    }
    return alarms;
}

std::vector<std::uint32_t> VerbsEngine::qp_numbers() const {
    std::vector<std::uint32_t> out;
    for (const auto& q : qps_) {
        out.push_back(q->qp->qp_num());
    }
    return out;
}

std::vector<SourceCounter> VerbsEngine::read_flow_counters() {
    std::vector<SourceCounter> out;
    stats_.flow_matched = 0;
    for (auto& q : qps_) {
        if (const auto counted = rule_matches(*q)) {
            const std::uint64_t matched = *counted;
            stats_.flow_matched += matched;
            const std::string& dev = device_.caps().name;
            out.push_back(
                SourceCounter{fmt::format("{}/flow/{}/matched", dev, q->label), matched, false});
            out.push_back(SourceCounter{fmt::format("{}/flow/{}/undelivered", dev, q->label),
                                        matched > q->delivered ? matched - q->delivered : 0,
                                        false});
        }
    }
    return out;
}

void VerbsEngine::report_to(Ledger& ledger) const {
    using verbs::WcStatus;
    auto count = [&](WcStatus s) { return stats_.wc_by_status[static_cast<std::size_t>(s)]; };
    // Each of these is a frame lost between the NIC and us.
    ledger.add_wc_errors(count(WcStatus::loc_len_err) + count(WcStatus::loc_prot_err) +
                         count(WcStatus::loc_qp_op_err) + count(WcStatus::other) +
                         stats_.bad_wr_id + stats_.bad_byte_len + stats_.stale_frames);
    const std::string dev = device_.caps().name;
    for (const auto s : {WcStatus::loc_len_err, WcStatus::loc_prot_err, WcStatus::loc_qp_op_err,
                         WcStatus::wr_flush_err, WcStatus::other}) {
        if (count(s) > 0) {
            ledger.add_source_counter(
                {fmt::format("{}/wc/{}", dev, verbs::to_string(s)), count(s), false});
        }
    }
    if (stats_.bad_wr_id > 0) {
        ledger.add_source_counter({dev + "/wc/bad_wr_id", stats_.bad_wr_id, false});
    }
    if (stats_.bad_byte_len > 0) {
        ledger.add_source_counter({dev + "/wc/bad_byte_len", stats_.bad_byte_len, false});
    }
    if (stats_.stale_completions > 0) {
        ledger.add_source_counter({dev + "/wc/stale", stats_.stale_completions, false});
    }
    if (stats_.recoveries > 0) {
        ledger.add_source_counter({dev + "/qp_recoveries", stats_.recoveries, false});
    }
    if (stats_.split_misaligned > 0) {
        ledger.add_source_counter({dev + "/split_misaligned", stats_.split_misaligned, false});
        ledger.add_note(fmt::format(
            "{}: {} frames had headers that did not end where the header slot ends (a VLAN tag "
            "or IP options the ring was sized without; it expects {} VLAN tags){}: restart with "
            "--vlan-tags N for N tags on the wire",
            dev, stats_.split_misaligned, options_.vlan_tags,
            std::any_of(qps_.begin(), qps_.end(),
                        [](const auto& q) { return q->payload.host_view == nullptr; })
                ? "; with payload in GPU memory their CODIF header is not "
                  "read on the poll thread and they are counted as "
                  "headers_split (loss)"
                : ""));
    }
    if (stats_.other_port_events > 0) {
        ledger.add_source_counter({dev + "/other_port_events", stats_.other_port_events, false});
    }
    if (stats_.uncounted_rules > 0) {
        ledger.add_source_counter({dev + "/uncounted_rules", stats_.uncounted_rules, false});
    }
    if (options_.zero_copy) {
        // How the hand-off went: frames written from their slots, and frames
        // copied because the holders had hold_limit slots of a ring.
        ledger.add_source_counter({dev + "/zero_copy/held", stats_.held, false});
        ledger.add_source_counter({dev + "/zero_copy/limit_reached", stats_.hold_refused, false});
    }
    if (stats_.bad_release > 0) {
        ledger.add_source_counter({dev + "/zero_copy/bad_release", stats_.bad_release, false});
    }
}

}  // namespace ibvcap
