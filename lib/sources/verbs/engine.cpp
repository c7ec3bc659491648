// The verbs engine (lib/sources/verbs/engine.hpp) outside its poll loop: the
// plan (CQ, QPs, rings, memory) built from the options and the device's
// limits, the start and stop orders, asynchronous events, the watchdog, the
// rules' counters and the ledger entries. The poll loop, the per-packet
// path, is in engine_poll.cpp.
#include "lib/sources/verbs/engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>
#include <system_error>

#include "formats/codif.hpp"
#include "formats/packet.hpp"
#include "lib/core/probes.hpp"
#include "lib/core/usage_error.hpp"
#include "lib/host/devices.hpp"
#include "lib/sources/verbs/engine_ring.hpp"
#include "lib/sources/verbs/wr_id.hpp"

namespace ibvcap {

std::uint32_t max_payload_bytes(const EngineOptions& options) {
    constexpr auto kHeaders =
        static_cast<std::uint32_t>(kPlainUdpPayloadOffset + kCodifHeaderBytes);
    return options.max_frame_bytes > kHeaders ? options.max_frame_bytes - kHeaders : 0;
}

VerbsEngine::VerbsEngine(verbs::Device& device, EngineOptions options, Demux& demux, Ledger& ledger,
                         PayloadMemory& payload, MembershipFactory memberships)
    : device_(device),
      options_(std::move(options)),
      demux_(&demux),
      ledger_(&ledger),
      payload_(payload),
      membership_factory_(std::move(memberships)) {
    const verbs::DeviceCaps& caps = device_.caps();
    resources_.device = caps.name;
    resources_.port = caps.port;
    resources_.protection_domains = 1;  // the provider's, made when it opened the device
    resources_.limits = verbs::device_limits(caps);
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
        ledger_->add_note(
            fmt::format("{} takes one SGE per receive: header/payload split off", caps.name));
        options_.split = false;
    }

    // The plan (engine_rules.cpp), and the QPs its entries are dealt to.
    plan_entries();
    std::size_t queues = options_.queues == 0 ? 1 : options_.queues;
    if (queues > entries_.size()) {
        if (options_.queues > 0) {
            ledger_->add_note(
                fmt::format("--queues {}: {} has {} rule entries, so {} queues (one per entry)",
                            queues, caps.name, entries_.size(), entries_.size()));
        }
        queues = entries_.size();
    }
    // Clamp the ring to what the device takes, and the CQ to its entries.
    std::uint32_t depth = std::max<std::uint32_t>(options_.ring_depth, 16);
    if (caps.max_qp_wr > 0 && depth > caps.max_qp_wr) {
        ledger_->add_note(fmt::format("ring depth {} clamped to {} (max_qp_wr of {})", depth,
                                      caps.max_qp_wr, caps.name));
        depth = caps.max_qp_wr;
    }
    if (caps.max_cqe > 0 && std::uint64_t{depth} * queues > caps.max_cqe) {
        const auto clamped = static_cast<std::uint32_t>(caps.max_cqe / queues);
        ledger_->add_note(
            fmt::format("ring depth {} clamped to {} so {} QPs fit one CQ of {} "
                        "entries (max_cqe of {})",
                        depth, clamped, queues, caps.max_cqe, caps.name));
        depth = clamped;
    }
    options_.ring_depth = depth;
    if (!options_.vlan_ids.empty() || options_.vlan_tags_given) {
        const std::string ids = format_vlan_ids(options_.vlan_ids);
        ledger_->add_note(fmt::format(
            "vlan: {} expects {} tag(s) on the wire ({}); {}", caps.name, options_.vlan_tags,
            options_.vlan_tags_given ? "--vlan-tags" : "from the netdev",
            options_.vlan_ids.empty()       ? "the netdev is untagged"
            : options_.vlan_ids.size() == 1 ? fmt::format("the rules match VLAN {}", ids)
                                            : fmt::format("stacked VLANs {}: the rules match "
                                                          "the group, not the tags",
                                                          ids)));
    }

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
        const std::size_t arena = std::size_t{header_stride_} * depth * queues;
        void* p = std::aligned_alloc(4096, (arena + 4095) / 4096 * 4096);
        if (p == nullptr) {
            throw std::bad_alloc();
        }
        header_arena_ = {static_cast<std::uint8_t*>(p), std::free};
        std::memset(p, 0, arena);
        header_mr_ = device_.register_memory(p, arena);
        resources_.mrs.push_back(MrRecord{"headers", "host", arena, 0});
    }

    if (queues > std::numeric_limits<decltype(WrId::qp)>::max()) {
        throw std::invalid_argument("more than 65535 queue pairs on one device");
    }
    const std::string kind = options_.hw_demux ? "group/antenna entries" : "groups";
    for (std::size_t i = 0; i < queues; ++i) {
        auto q = std::make_unique<Qp>();
        q->index = static_cast<std::uint16_t>(i);
        qps_.push_back(std::move(q));
    }
    for (std::size_t e = 0; e < entries_.size(); ++e) {
        // In order, in blocks: entry e to QP e * queues / entries.
        const std::size_t qi = e * queues / entries_.size();
        entries_[e].qp = static_cast<std::uint16_t>(qi);
        qps_[qi]->entries.push_back(static_cast<std::uint32_t>(e));
    }
    entry_qp_.resize(entries_.size());
    entry_delivered_ = std::make_unique<std::atomic<std::uint64_t>[]>(entries_.size());
    bool shared = false;
    for (auto& q : qps_) {
        const auto n = q->entries.size();
        q->tagged = n > 1;
        shared = shared || q->tagged;
        q->label = n == 1 ? entries_[q->entries.front()].label
                          : fmt::format("queue {} ({} {})", q->index, n, kind);
        for (const std::uint32_t e : q->entries) {
            entry_qp_[e] = q->index;
            // Tags only where a QP is shared: index + 1 (0 is "no tag").
            entries_[e].tag = q->tagged ? e + 1 : 0;
        }
    }
    for (auto& qp_ptr : qps_) {
        Qp* q = qp_ptr.get();
        q->depth = depth;
        q->payload = payload_.allocate(device_, std::size_t{payload_stride} * depth);
        if (q->payload.registered_bytes == 0) {
            q->payload.registered_bytes = std::uint64_t{payload_stride} * depth;
        }
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
        q->ring_held.assign(depth, 0);
        q->reposts.reserve(depth);
        q->low_water = depth / 2;
    }
    create_queues(static_cast<std::uint32_t>(depth * queues), shared);
    const std::uint32_t sge = options_.split ? 2u : 1u;
    resources_.cqs.push_back(CqRecord{static_cast<std::uint32_t>(depth * queues), cq_->depth(),
                                      verbs::to_string(timestamps_)});
    for (const auto& q : qps_) {
        const std::uint32_t num = q->qp->qp_num();
        resources_.qps.push_back(
            QpRecord{num, q->label, q->depth, q->qp->recv_depth(), sge, q->qp->recv_sge()});
        resources_.mrs.push_back(
            MrRecord{"payload", q->payload.kind, q->payload.registered_bytes, num});
    }
    batch_.resize(std::max<std::uint32_t>(options_.poll_batch, 1));
    touched_.reserve(qps_.size());
    hold_limit_ = options_.hold_limit > 0 ? std::min(options_.hold_limit, depth) : depth / 2;
    ring_hold_limit_ = options_.ring_hold_limit > 0 ? std::min(options_.ring_hold_limit, depth)
                                                    : std::max<std::uint32_t>(depth / 4, 1);
    // Each slot may be held by several consumers (one per output format and
    // the block rings), each releasing its own token.
    const std::size_t tokens = std::size_t{depth} * qps_.size() * 8;
    releases_ = std::make_unique<Releases>(tokens);
    released_.reserve(tokens);
}

void VerbsEngine::create_queues(std::uint32_t cq_depth, bool flow_tags) {
    using verbs::TimestampFormat;
    const verbs::DeviceCaps& caps = device_.caps();
    // Device ticks need the tick rate and a clock pair to be converted.
    std::optional<std::pair<std::uint64_t, std::uint64_t>> pair;
    if (caps.completion_timestamps && caps.hca_core_clock_khz > 0) {
        pair = device_.clock_pair();
    }
    std::vector<TimestampFormat> formats;
    // --timestamps host: no completion timestamps at all.
    const bool stamps = options_.frame_time != FrameTime::host;
    if (pair && stamps) {
        formats.push_back(TimestampFormat::device_ticks);
    }
    if (caps.completion_timestamps && stamps) {
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
            cq_ = device_.create_cq(cq_depth, format, flow_tags);
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
            ledger_->add_note(clock_.setup(device_, timestamps_, options_.frame_time, options_.phc,
                                           options_.phc_missing));
            last_clock_sync_ = std::chrono::steady_clock::now();
            break;
        case TimestampFormat::wallclock_ns: {
            const bool unmeasured = options_.frame_time == FrameTime::utc && !options_.phc;
            if (unmeasured && options_.frame_time_given) {
                throw std::runtime_error(fmt::format(
                    "--timestamps utc: {} stamps frames with its PHC's wall clock, and the PHC "
                    "cannot be read ({}), so frame times would stay the NIC's own (TAI under "
                    "ptp4l); give the capture the PHC, or choose --timestamps nic or host",
                    caps.name, options_.phc_missing));
            }
            if (unmeasured) {
                // Once, at setup: the default could not be had.
                std::fprintf(stderr,
                             "ibvcap capture: warning: frame times are %s's own clock, not UTC: "
                             "%s\n",
                             caps.name.c_str(),
                             options_.phc_missing.empty() ? "no PHC was looked for"
                                                          : options_.phc_missing.c_str());
            }
            ledger_->add_note(fmt::format("{}; device ticks refused: {}",
                                          clock_.setup(device_, timestamps_, options_.frame_time,
                                                       options_.phc, options_.phc_missing),
                                          refused));
            last_clock_sync_ = std::chrono::steady_clock::now();
            break;
        }
        case TimestampFormat::none:
            clock_.setup(device_, timestamps_, options_.frame_time, options_.phc,
                         options_.phc_missing);
            ledger_->add_note(
                fmt::format("timestamps: CLOCK_REALTIME when each batch is polled ({}{}{})",
                            stamps ? fmt::format("{} gives no completion timestamps", caps.name)
                                   : std::string("--timestamps host"),
                            refused.empty() ? "" : "; refused: ", refused));
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

void VerbsEngine::start() {
    if (started_) {
        return;
    }
    started_ = true;
    // 1. Every receive WR posted and every QP ready before any rule steers
    //    traffic to it (docs/architecture.md, "Setup and teardown order").
    for (auto& q : qps_) {
        q->qp->modify(verbs::QpState::init);
        post_all(*q);
        q->qp->modify(verbs::QpState::rtr);
    }
    // 2. The flow rules.
    const bool counters = options_.flow_counters && device_.caps().flow_counters;
    if (options_.flow_counters && !counters) {
        ledger_->add_note(
            fmt::format("{} has no flow counters: per-group NIC drop counts are not "
                        "available (out_of_buffer still counts every drop)",
                        device_.caps().name));
    }
    create_rules(counters);
    // 3. The IGMP joins, one per group, held for the run.
    if (membership_factory_) {
        for (const auto& g : options_.groups) {
            memberships_.push_back(membership_factory_(g));
        }
    }
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
            ledger_->add_note(fmt::format("{} port {} went down ({})", device_.caps().name,
                                          event.port, event.name));
            return;
        case verbs::EventKind::port_active:
            for (auto& m : memberships_) {
                m->rejoin();
                ++stats_.rejoins;
            }
            ledger_->add_note(fmt::format("{} port {} came back up; {} groups re-joined",
                                          device_.caps().name, event.port, memberships_.size()));
            return;
        case verbs::EventKind::qp_fatal:
            // WQ_FATAL names a work queue, not a QP, and arrives with qp_num 0:
            // then every QP of the device is recovered.
            for (auto& q : qps_) {
                if ((event.qp_num == 0 || q->qp->qp_num() == event.qp_num) && !q->needs_recovery) {
                    q->needs_recovery = true;
                    IBVCAP_PROBE2(recovery_start, q->index, std::uint8_t{0xff});
                    q->error_since = std::chrono::steady_clock::now();
                    q->qp->modify(verbs::QpState::error);  // make sure every WR flushes
                    touch(*q);
                }
            }
            return;
        case verbs::EventKind::cq_error:
        case verbs::EventKind::device_fatal:
            stats_.device_fatal = true;
            fatal_seen_.store(true, std::memory_order_relaxed);
            ledger_->set_incomplete(fmt::format("{}: {}", device_.caps().name, event.name));
            return;
        case verbs::EventKind::other:
            return;
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
    // Each drain waits for a quiet CQ, within a bound (EngineOptions::
    // stop_quiet, stop_drain_bound; verbs-mlx5-2.md N5).
    const auto drain_for_stop = [this](const char* when) {
        if (!drain_until_quiet(options_.stop_quiet, options_.stop_drain_bound)) {
            ledger_->add_note(fmt::format(
                "{}: the stop's drain {} ended at its bound of {} ms with frames still "
                "arriving (the switch still forwards the groups after the leave); frames "
                "after that were not captured",
                device_.caps().name, when, options_.stop_drain_bound.count()));
        }
    };
    if (!stats_.device_fatal) {
        drain_for_stop("before the rules went");
    }
    // The rules' counters die with them: read them now. `undelivered` is
    // what they matched less what was delivered once the second drain has
    // taken what was still in flight at the read. A frame matched after the
    // read and delivered by that drain could hide one drop of the last
    // microseconds; counting it as undelivered would report a drop that did
    // not happen.
    // A device in internal error refuses the read (the firmware answers
    // QUERY_FLOW_COUNTER with -EIO, drivers/net/ethernet/mellanox/mlx5/core/
    // cmd.c mlx5_internal_err_ret_value): it is not tried, so the run's error
    // stays the device's own (verbs-mlx5-2.md N4).
    std::vector<std::optional<std::uint64_t>> matches;
    if (stats_.device_fatal) {
        ledger_->add_note(fmt::format(
            "{}: the flow rules' counters were not read after the fatal error (the firmware "
            "refuses commands then): no per-group undelivered counts",
            device_.caps().name));
    } else {
        matches = read_rule_matches();
    }
    for (auto& e : entries_) {
        // Rules before their QPs (docs/architecture.md, "Setup and teardown order").
        e.flows.clear();
    }
    if (!stats_.device_fatal) {
        drain_for_stop("after the rules went");
        final_flow_counters_ = counters_for(matches);
    }
    publish_witnesses();  // the drains' completions too
}

std::vector<SourceCounter> VerbsEngine::flow_counters() {
    return stopped_ ? final_flow_counters_ : read_flow_counters();
}

std::vector<std::uint32_t> VerbsEngine::qp_numbers() const {
    std::vector<std::uint32_t> out;
    for (const auto& q : qps_) {
        out.push_back(q->qp->qp_num());
    }
    return out;
}

std::uint64_t VerbsEngine::wc_errors() const {
    using verbs::WcStatus;
    auto count = [&](WcStatus s) { return stats_.wc_by_status[static_cast<std::size_t>(s)]; };
    // Each of these is a frame lost between the NIC and us, counted once: a
    // completion in error by its status, whatever its wr_id names.
    return count(WcStatus::loc_len_err) + count(WcStatus::loc_prot_err) +
           count(WcStatus::loc_qp_op_err) + count(WcStatus::other) + stats_.bad_wr_id_frames +
           stats_.bad_byte_len + stats_.stale_frames + stats_.clock_lost_completions;
}

void VerbsEngine::publish_witnesses() {
    auto& w = witnesses_published_;
    w.wc_errors.store(wc_errors(), std::memory_order_relaxed);
    w.recoveries.store(stats_.recoveries, std::memory_order_relaxed);
    w.port_down.store(stats_.port_down_events, std::memory_order_relaxed);
    w.hold_limit.store(stats_.hold_refused, std::memory_order_relaxed);
}

std::vector<SourceCounter> VerbsEngine::witnesses(const std::string& prefix) const {
    const auto& w = witnesses_published_;
    return {
        {prefix + "wc_errors", w.wc_errors.load(std::memory_order_relaxed), false,
         LossCause::completion_errors},
        {prefix + "qp_recoveries", w.recoveries.load(std::memory_order_relaxed), false,
         LossCause::completion_errors},
        {prefix + "port_down_events", w.port_down.load(std::memory_order_relaxed), false,
         LossCause::port_down},
        {prefix + "zero_copy/limit_reached", w.hold_limit.load(std::memory_order_relaxed), false,
         LossCause::ring_hold_limit},
    };
}

void VerbsEngine::report_to(Ledger& ledger) const {
    using verbs::WcStatus;
    auto count = [&](WcStatus s) { return stats_.wc_by_status[static_cast<std::size_t>(s)]; };
    ledger.add_wc_errors(wc_errors());
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
    if (stats_.clock_lost_completions > 0) {
        ledger.add_source_counter(
            {dev + "/wc/clock_unreadable", stats_.clock_lost_completions, false});
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
                ? "; with payload in GPU memory their stream header is not "
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
    if (stats_.untagged_rules > 0) {
        ledger.add_source_counter({dev + "/untagged_rules", stats_.untagged_rules, false});
    }
    if (stats_.unattributed > 0) {
        ledger.add_source_counter({dev + "/unattributed", stats_.unattributed, false});
    }
    for (const auto& q : qps_) {
        if (q->recoveries > 0 && q->entries.size() > 1) {
            ledger.add_note(recovery_note(*q));
        }
    }
    if (options_.zero_copy) {
        // How the hand-off went: frames written from their slots, and frames
        // copied because the holders had hold_limit slots of a ring.
        ledger.add_source_counter({dev + "/zero_copy/held", stats_.held, false});
        ledger.add_source_counter({dev + "/zero_copy/limit_reached", stats_.hold_refused, false});
        ledger.add_source_counter({dev + "/zero_copy/ring_limit_reached", stats_.ring_hold_refused,
                                   false, LossCause::ring_hold_limit});
    }
    if (stats_.bad_release > 0) {
        ledger.add_source_counter({dev + "/zero_copy/bad_release", stats_.bad_release, false});
    }
}

}  // namespace ibvcap
