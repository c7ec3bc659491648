// The verbs engine's poll loop (lib/sources/verbs/engine.hpp): completions
// polled from the CQ, each one checked against the rings (its wr_id, ring
// generation and byte_len are not trusted), frames handed to the demux with
// their leases, slots re-posted in batches or when their holders release
// them, and QPs in error recovered. This is the per-packet path: it
// allocates nothing. Setting up, starting, stopping, events and reports are
// in engine.cpp.
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "formats/codif.hpp"
#include "formats/packet.hpp"
#include "lib/core/probes.hpp"
#include "lib/sources/verbs/engine.hpp"
#include "lib/sources/verbs/engine_ring.hpp"
#include "lib/sources/verbs/wr_id.hpp"

namespace ibvcap {

namespace {

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

}  // namespace

std::uint8_t* VerbsEngine::header_slot(const Qp& q, std::uint64_t slot) const {
    return header_arena_.get() + (std::size_t{q.index} * q.depth + slot) * header_stride_;
}

void VerbsEngine::prefetch_slot(const verbs::Completion& c) const {
    const WrId id = WrId::decode(c.wr_id);
    if (id.qp >= qps_.size() || id.slot >= qps_[id.qp]->depth) {
        return;
    }
    const Qp& q = *qps_[id.qp];
    // Only an address inside a ring is computed; a prefetch never faults.
    const std::uint8_t* at = nullptr;
    if (options_.split) {
        at = header_slot(q, id.slot);
    } else if (q.payload.host_view != nullptr) {
        at = q.payload.host_view + payload_offset(id.slot);
    }
    if (at != nullptr) {
        __builtin_prefetch(at);
        __builtin_prefetch(at + 64);
    }
}

std::uint64_t VerbsEngine::payload_offset(std::uint64_t slot) const {
    return slot * round_up(payload_bytes_, kSlotAlign);
}

verbs::RecvRequest VerbsEngine::request_for(const Qp& q, std::uint64_t slot) const {
    // Arithmetic only: the memory regions' keys were read once (post_all,
    // Qp::header_lkey/payload_lkey), not through their virtual lkey() per
    // WR (issue 18's profile: with request_for, 8% of the engine's share).
    // A table of ready WRs per slot was tried and dropped: at 64 QPs it is
    // 3 MB the re-post path reads cold.
    verbs::RecvRequest r;
    r.wr_id = WrId{q.index, q.generation, static_cast<std::uint32_t>(slot)}.encode();
    const verbs::Sge payload{q.payload.nic_address + payload_offset(slot), payload_bytes_,
                             q.payload_lkey};
    if (options_.split) {
        r.sge[0] = {reinterpret_cast<std::uintptr_t>(header_slot(q, slot)), header_bytes_,
                    q.header_lkey};
        r.sge[1] = payload;
        r.num_sge = 2;
    } else {
        r.sge[0] = payload;
        r.num_sge = 1;
    }
    return r;
}

void VerbsEngine::post_all(Qp& q) {
    q.payload_lkey = q.payload.mr->lkey();
    q.header_lkey = header_mr_ ? header_mr_->lkey() : 0;
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
        const auto [field, slot] = LeaseToken::decode(token);
        const bool ring = (field & LeaseToken::kRingHolder) != 0;
        const std::uint32_t qi = field & ~LeaseToken::kRingHolder;
        if (qi >= qps_.size() || slot >= qps_[qi]->depth) {
            ++stats_.bad_release;
            continue;
        }
        Qp& q = *qps_[qi];
        const std::uint32_t rings = q.ring_held[slot];
        const std::uint32_t writers = q.held[slot] - rings;
        if (ring ? rings == 0 : writers == 0) {
            ++stats_.bad_release;  // this holder class holds nothing there
            continue;
        }
        if (ring) {
            if (--q.ring_held[slot] == 0) {
                --q.ring_held_count;
            }
        } else if (writers == 1) {
            --q.writer_held_count;
        }
        if (--q.held[slot] == 0) {
            --q.held_count;
            --held_total_;
            // Into the next batch; a QP awaiting recovery posts it in post_all.
            if (!q.needs_recovery) {
                q.reposts.push_back(request_for(q, slot));
                touch(q);
            }
        }
    }
    released_.clear();
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

// When a QP's completed slots go back to the NIC (docs/architecture.md, "The
// data path"). Each post_recv is a cost per call, whatever its WR count: on
// mlx5 (rdma-core providers/mlx5/qp.c mlx5_post_recv) the receive queue's
// spinlock, then once per call a barrier and the doorbell record write
// (qp->db[MLX5_RCV_DBR]). A chain cannot span QPs (one receive queue and one
// doorbell record each), so what can be saved is calls per QP. Flushing
// every QP at the end of every poll made, with 64 QPs on one CQ and 64-
// completion polls, one call per frame (BM_EngineQps at 64 QPs: 0.72x its
// 1-QP rate). So a QP's re-posts wait, and go in one call:
//   * when repost_batch of them wait (handle(), and here for released slots);
//   * when fewer than low_water (half the ring) of its WRs are posted: a ring
//     smaller than the batch, or one its consumers hold most of, must not
//     run dry waiting for a batch, so there every slot goes back at the end
//     of its poll, as before. Above the mark what waits is less than a batch
//     (repost_batch - 1: 31 of the 4,096 default), a sliver of the headroom;
//   * when a poll finds the CQ empty (idle): everything, so a quiet ring is
//     full, and every drain (drain(), stop()'s drains) ends with the rings
//     posted;
//   * a QP awaiting recovery posts nothing here: post_all posts the ring.
// The checks are unchanged: outstanding[] is set only as a WR is posted, held
// slots join the reposts only when released, and no slot waits twice.
bool VerbsEngine::repost_due(const Qp& q, bool idle) const {
    return !q.reposts.empty() &&
           (idle || q.reposts.size() >= options_.repost_batch || q.outstanding_count < q.low_water);
}

void VerbsEngine::recover(Qp& q) {
    // docs/architecture.md, "QP error recovery": drained (or timed out), then RESET → INIT →
    // re-post → RTR.
    q.qp->modify(verbs::QpState::reset);  // discards whatever is still posted
    // Completions of the old ring still in the CQ (a drain that timed out)
    // carry the old generation and are told apart from the new ring's.
    ++q.generation;
    q.qp->modify(verbs::QpState::init);
    post_all(q);
    q.qp->modify(verbs::QpState::rtr);
    q.needs_recovery = false;
    ++stats_.recoveries;
    ++q.recoveries;
    IBVCAP_PROBE2(recovery_end, q.index, q.generation);
}

std::uint64_t VerbsEngine::timestamp_ns(const verbs::Completion& c) {
    if (!c.has_timestamp) {
        return batch_realtime_ns_;
    }
    // PHC ns or device ticks → host UTC ns (or the NIC's clock as is):
    // compares, a multiply and a shift (lib/sources/verbs/nic_clock.hpp).
    return clock_.to_host_ns(c.hw_timestamp);
}

void VerbsEngine::resync_clock() {
    // One measurement of the NIC clock against CLOCK_REALTIME: a clock pair
    // and/or a PTP_SYS_OFFSET_EXTENDED ioctl (housekeeping, once a second).
    clock_.measure();
    last_clock_sync_ = std::chrono::steady_clock::now();
}

void VerbsEngine::clock_unreadable() {
    // The CQ polls on without timestamps (seam.hpp, CompletionQueue::
    // timestamps): from this batch on frames are stamped with host time, and
    // the completions the failed poll consumed are frames lost.
    timestamps_ = verbs::TimestampFormat::none;
    clock_.stamps_from_host();
    stats_.clock_lost_completions = cq_->lost_completions();
    const std::uint32_t release = device_.caps().provider_release;
    const bool tail_behind = release < 55;
    if (tail_behind) {
        // Before rdma-core v55 the consumed completion left its QP's receive
        // tail one behind: every later completion of that QP would name the
        // WR before its own, each slot delivered with the next frame's
        // length (verbs-mlx5-3.md R5). Which QP it was is unknown, so every
        // QP of the CQ is reset now, before anything more is polled: RESET
        // puts rdma-core's indices back (verbs.c mlx5_init_qp_indices) and
        // removes the QPs' completions still in the CQ, whose frames become
        // gaps, counted by the sequences.
        const auto now = std::chrono::steady_clock::now();
        for (auto& q : qps_) {
            if (!q->needs_recovery) {
                q->needs_recovery = true;
                q->error_since = now - options_.drain_timeout;
                IBVCAP_PROBE2(recovery_start, q->index, std::uint8_t{0xfe});
            }
        }
    }
    ledger_->add_note(fmt::format(
        "timestamps: {} could not read its clock while polling (ibv_start_poll: EINVAL, the "
        "clock-info page is not mapped); after frame {} frames are stamped with CLOCK_REALTIME "
        "when each batch is polled, and {} completion(s) the failed poll consumed are lost{}",
        device_.caps().name, stats_.frames, stats_.clock_lost_completions,
        tail_behind
            ? fmt::format(
                  "; rdma-core {} (before v55) would then name each slot one completion "
                  "late, so every QP of the CQ was reset and the completions still in it "
                  "dropped (their frames are gaps)",
                  release == 0 ? std::string("of unknown release") : std::to_string(release))
            : std::string()));
}

void VerbsEngine::check_first_stamp(const verbs::Completion& c) {
    // Once (verbs-mlx5-3.md R1): a stamp decoded in a format the NIC does
    // not write makes every frame time wrong; the run stops before the
    // first frame is handed on.
    first_stamp_checked_ = true;
    std::string why = clock_.implausible(c.hw_timestamp);
    if (!why.empty()) {
        throw std::runtime_error(std::move(why));
    }
}

ClockFigures VerbsEngine::clock_figures() const {
    return clock_.figures(fmt::format("{}:{}", device_.caps().name, device_.caps().port));
}

void VerbsEngine::handle(const verbs::Completion& c) {
    ++stats_.completions;
    const auto status_index = static_cast<std::size_t>(c.status);
    if (status_index < std::size(stats_.wc_by_status)) {
        ++stats_.wc_by_status[status_index];
    }
    // Nothing from a completion is trusted
    // (docs/architecture.md, "Nothing from the wire is trusted"): the wr_id must name a QP and a
    // slot that is posted. The wr_id is all there is to go by: the completion's qpn field holds the
    // flow tag on an mlx5 raw-packet QP, not the QP (lib/sources/verbs/seam.hpp,
    // Completion::qp_num).
    const WrId id = WrId::decode(c.wr_id);
    // docs/observability.md, "USDT probes": every completion, counted by
    // status as wc_by_status is above (the QP as the wr_id names it: not yet
    // checked).
    IBVCAP_PROBE3(completion, id.qp, static_cast<std::uint8_t>(c.status), c.byte_len);
    const std::uint32_t slot = id.slot;
    // A rejected completion: the frame of a successful one is loss; one in
    // error is counted by its status already, and a flush carries no frame.
    const auto reject = [&] {
        ++stats_.bad_wr_id;
        stats_.bad_wr_id_frames += c.status == verbs::WcStatus::success ? 1 : 0;
    };
    if (id.qp >= qps_.size()) {
        reject();
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
        reject();
        return;
    }
    q.outstanding[slot] = 0;
    --q.outstanding_count;
    touch(q);

    auto repost = [&] {
        q.reposts.push_back(request_for(q, slot));
        if (q.reposts.size() >= options_.repost_batch) {
            flush_reposts(q);
        }
    };

    if (c.status == verbs::WcStatus::success) {
        ++q.delivered;
        if (q.tagged) {
            // A shared QP: the rule's flow tag names the entry (engine_rules.cpp),
            // entry index + 1, and must name one of this QP's. Tag 0 (none)
            // wraps past the end. One writer (this thread): a plain add.
            const std::uint32_t e = c.flow_tag - 1u;
            if (e < entry_qp_.size() && entry_qp_[e] == q.index) {
                auto& n = entry_delivered_[e];
                n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
            } else {
                ++q.unattributed;
                ++stats_.unattributed;
            }
        }
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
                f.tail = Bytes(q.payload.host_view + payload_offset(slot), c.byte_len - in_head);
            } else {
                // GPU memory: never read here; consumers hold the slot and
                // copy on their own threads (Frame::tail_device).
                f.tail = Bytes(q.payload.device_view + payload_offset(slot), c.byte_len - in_head);
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
        if (c.has_timestamp && !first_stamp_checked_) [[unlikely]] {
            check_first_stamp(c);
        }
        f.timestamp_ns = timestamp_ns(c);
        ++stats_.frames;
        bytes_ += c.byte_len;
        FrameLease lease;
        if (options_.zero_copy) {
            lease.owner = releases_.get();
            lease.token = LeaseToken{q.index, slot}.encode();
            lease.ring_token = LeaseToken{q.index | LeaseToken::kRingHolder, slot}.encode();
            lease.allowed = q.writer_held_count < hold_limit_;
            lease.ring_allowed = q.ring_held_count < ring_hold_limit_;
            lease.pressure = q.writer_held_count >= hold_limit_ / 2;
            stats_.hold_refused += lease.allowed ? 0 : 1;
            stats_.ring_hold_refused += lease.ring_allowed ? 0 : 1;
            f.lease = &lease;
        }
        demux_->on_frame(f);
        if (lease.holds + lease.ring_holds > 0) {
            // Bounded: one writer hold per output format, one ring hold.
            const std::uint32_t rings = std::min<std::uint32_t>(lease.ring_holds, 0xff);
            const std::uint32_t writers = std::min<std::uint32_t>(lease.holds, 0xffff - rings);
            q.held[slot] = static_cast<std::uint16_t>(writers + rings);
            q.ring_held[slot] = static_cast<std::uint8_t>(rings);
            q.writer_held_count += writers > 0 ? 1 : 0;
            q.ring_held_count += rings > 0 ? 1 : 0;
            ++q.held_count;
            ++held_total_;
            ++stats_.held;
            return;
        }
        repost();
        return;
    }
    if (!verbs::qp_in_error(c.status)) {
        // LOC_LEN_ERR, larger than the slot: the frame is lost, the WR is
        // consumed and the QP stays ready (docs/architecture.md, "QP error
        // recovery"). An error completion carries no flow tag (ibv_poll_cq(3):
        // only wr_id, status, qp_num and vendor_err), so on a shared QP the
        // frame's group is unknown: counted unattributed, which makes the
        // QP's undelivered the queue's (engine_rules.cpp, counters_for), as a
        // per-group count would take it for a drop of its group.
        ++q.delivered;
        if (q.tagged) {
            ++q.unattributed;
            ++stats_.unattributed;
        }
        repost();
        return;
    }
    if (!q.needs_recovery) {
        q.needs_recovery = true;
        IBVCAP_PROBE2(recovery_start, q.index, static_cast<std::uint8_t>(c.status));
        q.error_since = std::chrono::steady_clock::now();
    }
}

std::size_t VerbsEngine::poll_once() {
    ++stats_.polls;
    take_releases();
    const std::size_t n = cq_->poll(batch_);
    if (timestamps_ == verbs::TimestampFormat::wallclock_ns && cq_->timestamps() != timestamps_)
        [[unlikely]] {
        clock_unreadable();
    }
    if (n == 0) {
        ++stats_.empty_polls;
    } else {
        if (timestamps_ == verbs::TimestampFormat::none) {
            batch_realtime_ns_ = realtime_ns();
        }
        // The header slot kSlotAhead frames ahead, both cache lines (the
        // CODIF sync word is in the second): the demux reads them first.
        for (std::size_t i = 0; i < std::min(n, kSlotAhead); ++i) {
            prefetch_slot(batch_[i]);
        }
        for (std::size_t i = 0; i < n; ++i) {
            if (i + kSlotAhead < n) {
                prefetch_slot(batch_[i + kSlotAhead]);
            }
            handle(batch_[i]);
        }
        published_.store(stats_.frames, std::memory_order_relaxed);
        bytes_published_.store(bytes_, std::memory_order_relaxed);
    }
    held_published_.store(held_total_, std::memory_order_relaxed);
    // A QP this poll did not touch is as the last poll left it, re-posts
    // not due: only the touched ones are looked at (with 64 QPs, not 64 per
    // poll). An idle poll looks at every QP, to post what waits.
    std::size_t keep = 0;
    if (n == 0) {
        touched_.clear();
        for (auto& q : qps_) {
            if (finish_poll(*q, true)) {
                touched_.push_back(q.get());
            }
        }
    } else {
        for (Qp* q : touched_) {
            if (finish_poll(*q, false)) {
                touched_[keep++] = q;
            }
        }
        touched_.resize(keep);
    }
    return n;
}

bool VerbsEngine::finish_poll(Qp& q, bool idle) {
    q.delivered_published.store(q.delivered, std::memory_order_relaxed);
    q.unattributed_published.store(q.unattributed, std::memory_order_relaxed);
    if (q.needs_recovery) {
        if (q.outstanding_count == 0 ||
            std::chrono::steady_clock::now() - q.error_since >= options_.drain_timeout) {
            recover(q);
        }
    } else if (repost_due(q, idle)) {
        flush_reposts(q);
    }
    q.touched = q.needs_recovery;
    return q.touched;
}

void VerbsEngine::drain() {
    while (auto event = device_.wait_event(std::chrono::milliseconds(0))) {
        handle_event(*event);
    }
    while (poll_once() > 0) {
    }
}

bool VerbsEngine::drain_until_quiet(std::chrono::milliseconds quiet,
                                    std::chrono::milliseconds bound) {
    while (auto event = device_.wait_event(std::chrono::milliseconds(0))) {
        handle_event(*event);
    }
    const auto start = std::chrono::steady_clock::now();
    auto last_completion = start;
    for (;;) {
        const std::size_t n = poll_once();
        const auto now = std::chrono::steady_clock::now();
        if (n > 0) {
            last_completion = now;
        } else if (now - last_completion >= quiet) {
            return true;
        }
        if (now - start >= bound) {
            return false;
        }
        if (n == 0) {
            std::this_thread::yield();
        }
    }
}

void VerbsEngine::take_lane_swap() {
    if (const LaneSwap* s = lane_swap_.load(std::memory_order_acquire); s != nullptr) {
        demux_ = s->demux;
        ledger_ = s->ledger;
        live_ = s->live;
        lane_swap_.store(nullptr, std::memory_order_release);  // reconnect() may return now
    }
}

void VerbsEngine::reconnect(Demux& demux, Ledger& ledger, LivePublisher* live) {
    LaneSwap swap{&demux, &ledger, live};
    lane_swap_.store(&swap, std::memory_order_release);
    // The poll thread takes it at its next housekeeping (every 1024 polls, or
    // every idle poll): microseconds. When the thread is not polling (not yet
    // started, or ended), nothing else reads the pointers: set them here. A
    // thread that ended released `polling_` after its last take, so a swap
    // still pending then was never taken.
    while (lane_swap_.load(std::memory_order_acquire) != nullptr) {
        if (!polling_.load(std::memory_order_acquire)) {
            take_lane_swap();
            break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
}

void VerbsEngine::run(const std::atomic<bool>& stop) {
    polling_.store(true, std::memory_order_release);
    // Whichever way the loop ends, the witnesses other threads read are
    // those of the end, and a lane swap (reconnect) is no longer taken here.
    struct PublishAtEnd {
        VerbsEngine& e;
        ~PublishAtEnd() {
            e.publish_witnesses();
            e.polling_.store(false, std::memory_order_release);
        }
    } publish_at_end{*this};
    try {
        poll_until(stop);
    } catch (const std::exception& e) {
        // A device fatal error flushes every QP at once, and the poll loop may
        // see the flushes, and fail to recover a QP (mlx5 fails INIT2RTR with
        // -EIO once in internal error, drivers/net/ethernet/mellanox/mlx5/core/
        // cmd.c, mlx5_internal_err_ret_value), before it reads the
        // IBV_EVENT_DEVICE_FATAL that says why: the kernel dispatches it from a
        // work item (drivers/infiniband/hw/mlx5/main.c: mlx5_ib_event queues
        // mlx5_ib_handle_event on mlx5_ib_event_wq), so it may come a little
        // later or already be waiting. Either way the cause reported is the device's,
        // when it says so within a short grace; otherwise the error stands.
        const auto until = std::chrono::steady_clock::now() + kFatalEventGrace;
        while (!stats_.device_fatal) {
            const auto now = std::chrono::steady_clock::now();
            if (now >= until) {
                break;
            }
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - now);
            const auto event = device_.wait_event(left);
            if (!event) {
                break;
            }
            // Only the fatal kinds: they touch no QP and cannot throw again.
            // Any other event is moot, as the run ends with an error anyway.
            if (event->kind == verbs::EventKind::device_fatal ||
                event->kind == verbs::EventKind::cq_error) {
                handle_event(*event);
            }
        }
        if (!stats_.device_fatal) {
            throw;
        }
        ledger_->add_note(
            fmt::format("{}: after the fatal error: {}", device_.caps().name, e.what()));
    }
}

void VerbsEngine::poll_until(const std::atomic<bool>& stop) {
    constexpr std::uint64_t kIdleBeforeYield = 100000;
    std::uint64_t idle = 0;
    std::uint32_t iteration = 0;
    while (!stop.load(std::memory_order_relaxed) && !stats_.device_fatal) {
        idle = poll_once() == 0 ? idle + 1 : 0;
        // Housekeeping every 1024 polls, and on every idle poll once the
        // thread yields: a yield may give the core away for a whole time
        // slice when other threads want it, and 1024 of those would leave
        // device events and the timeline's copies seconds late.
        if (++iteration % 1024 == 0 || idle > kIdleBeforeYield) {
            while (auto event = device_.wait_event(std::chrono::milliseconds(0))) {
                handle_event(*event);
            }
            publish_witnesses();
            take_lane_swap();
            if (live_ != nullptr && live_->wanted()) {
                live_->publish(*ledger_);
            }
            if (std::chrono::steady_clock::now() - last_clock_sync_ >= std::chrono::seconds(1)) {
                resync_clock();
            }
        }
        if (idle > kIdleBeforeYield) {
            std::this_thread::yield();  // nothing for a while: let the other core breathe
        }
    }
}

}  // namespace ibvcap
