// The libibverbs provider's per-queue objects (lib/sources/verbs/seam.hpp):
// the completion queue the engine polls, the raw-packet queue pairs it posts
// receive WRs to and moves through their states, and the flow rules (with
// their counters) that steer frames to them. Polling and posting allocate
// nothing. The device and provider that make them are in ibv.cpp.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "lib/core/netaddr.hpp"
#include "lib/sources/verbs/ibv_logic.hpp"
#include "lib/sources/verbs/ibv_objects.hpp"
#include "lib/sources/verbs/seam.hpp"

namespace ibvcap::verbs::ibv_objects {

namespace {

using namespace ibv_logic;

// CQ completions are read through a stack array of this many ibv_wc when the
// device has no extended CQ.
constexpr std::size_t kPollChunk = 64;

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
    IbvCompletionQueue(std::shared_ptr<CqHandle> handle, TimestampFormat timestamps, bool flow_tags)
        : handle_(std::move(handle)), timestamps_(timestamps), flow_tags_(flow_tags) {}

    TimestampFormat timestamps() const override { return timestamps_; }
    std::uint64_t lost_completions() const override { return lost_; }
    // The provider's actual size (mlx5: the depth asked for + 1, rounded up
    // to a power of two, − 1; rdma-core providers/mlx5/verbs.c create_cq).
    std::uint32_t depth() const override {
        return static_cast<std::uint32_t>(std::max(handle_->cq->cqe, 0));
    }

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
        return handle_->cq_ex != nullptr && !plain_ ? poll_extended(out) : poll_plain(out);
    }

  private:
    std::size_t poll_extended(std::span<Completion> out) {
        ibv_cq_ex* cq = handle_->cq_ex;
        ibv_poll_cq_attr attr{};
        int rc = ibv_start_poll(cq, &attr);
        // No ibv_end_poll after a failed ibv_start_poll (ibv_create_cq_ex(3)).
        switch (classify_start_poll(rc, timestamps_)) {
            case PollStart::ready:
                break;
            case PollStart::empty:
            case PollStart::retry:
                return 0;
            case PollStart::no_clock:
                // A wall-clock CQ polls the clock-info page with every batch,
                // also in real-time mode, and the page is not mapped (rdma-core
                // providers/mlx5/cq.c mlx5_start_poll, mlx5.c
                // _mlx5dv_get_clock_info: EINVAL). The completion it found is
                // consumed (cons_index is given back for EBUSY only). The same
                // CQ is polled on with ibv_poll_cq, which reads no clock
                // (mlx5_poll_cq), so the run goes on without timestamps: the
                // engine sees timestamps() change and stamps host time.
                // Nothing more is polled now: before rdma-core v55 the
                // consumed completion left its QP's receive tail behind, so
                // the next completions of that QP name the WR before theirs,
                // and the engine resets the CQ's QPs first (DeviceCaps::
                // provider_release; verbs-mlx5-3.md R5).
                ++lost_;
                plain_ = true;
                timestamps_ = TimestampFormat::none;
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
            if (flow_tags_) {
                c.flow_tag = ibv_wc_read_flow_tag(cq);
            }
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
                    // The same CQE bits as ibv_wc_read_flow_tag on mlx5
                    // (providers/mlx5/cq.c: qp_num and the flow tag are both
                    // sop_drop_qpn's low 24 bits).
                    if (flow_tags_) {
                        c.flow_tag = w.qp_num & 0xffffffU;
                    }
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
    bool flow_tags_ = false;  // made with IBV_WC_EX_WITH_FLOW_TAG
    int pending_error_ = 0;
    bool plain_ = false;      // polled with ibv_poll_cq after PollStart::no_clock
    std::uint64_t lost_ = 0;  // completions a failed ibv_start_poll consumed
};

// A raw-packet QP (IBV_QPT_RAW_PACKET) owned through QpHandle. Its state is
// the one modify() last set: a QP the device moves to the error state on its
// own (an error completion, IBV_EVENT_QP_FATAL) still reads as before until
// modify() is called; the engine learns of those transitions from completions
// and events (docs/architecture.md, "QP error recovery"). ibv_query_qp would say, but it is a
// kernel round trip; it is used only to resynchronise after a failed ibv_modify_qp.
class IbvQueuePair final : public QueuePair {
  public:
    explicit IbvQueuePair(std::shared_ptr<QpHandle> handle) : handle_(std::move(handle)) {}

    std::uint32_t qp_num() const override { return handle_->qp->qp_num; }
    QpState state() const override { return state_; }
    std::uint32_t recv_depth() const override { return handle_->recv_depth; }
    std::uint32_t recv_sge() const override { return handle_->recv_sge; }

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

}  // namespace

std::unique_ptr<CompletionQueue> make_completion_queue(std::shared_ptr<CqHandle> handle,
                                                       TimestampFormat timestamps, bool flow_tags) {
    return std::make_unique<IbvCompletionQueue>(std::move(handle), timestamps, flow_tags);
}

std::shared_ptr<CqHandle> cq_handle(CompletionQueue& cq) {
    auto* ours = dynamic_cast<IbvCompletionQueue*>(&cq);
    return ours == nullptr ? nullptr : ours->handle();
}

std::unique_ptr<QueuePair> make_queue_pair(std::shared_ptr<QpHandle> handle) {
    return std::make_unique<IbvQueuePair>(std::move(handle));
}

}  // namespace ibvcap::verbs::ibv_objects
