// Free functions of the verbs seam (lib/sources/verbs/seam.hpp) shared by every provider.
#include "lib/sources/verbs/seam.hpp"

namespace ibvcap::verbs {

std::vector<std::pair<std::string, std::uint64_t>> device_limits(const DeviceCaps& caps) {
    return {{"max_qp", caps.max_qp},           {"max_qp_wr", caps.max_qp_wr},
            {"max_sge", caps.max_sge},         {"max_cq", caps.max_cq},
            {"max_cqe", caps.max_cqe},         {"max_mr", caps.max_mr},
            {"max_mr_size", caps.max_mr_size}, {"max_pd", caps.max_pd}};
}

const char* to_string(WcStatus status) {
    switch (status) {
        case WcStatus::success:
            return "success";
        case WcStatus::loc_len_err:
            return "loc_len_err";
        case WcStatus::loc_qp_op_err:
            return "loc_qp_op_err";
        case WcStatus::loc_prot_err:
            return "loc_prot_err";
        case WcStatus::wr_flush_err:
            return "wr_flush_err";
        case WcStatus::other:
            return "other";
    }
    return "unknown";
}

// Per the InfiniBand specification a completion in error moves the QP to the
// error state. LOC_LEN_ERR is the exception ibvcap relies on
// (docs/architecture.md, "QP error recovery"): on an mlx5 raw-packet QP the oversized packet
// consumes its WR and the queue keeps receiving. `other` (any status the seam does not name) is
// treated as fatal for the queue: recovering a queue that was fine costs an outage, trusting one
// that is in error loses everything after it.
bool qp_in_error(WcStatus status) {
    switch (status) {
        case WcStatus::success:
        case WcStatus::loc_len_err:
            return false;
        case WcStatus::loc_qp_op_err:
        case WcStatus::loc_prot_err:
        case WcStatus::wr_flush_err:
        case WcStatus::other:
            return true;
    }
    return true;
}

const char* to_string(QpState state) {
    switch (state) {
        case QpState::reset:
            return "reset";
        case QpState::init:
            return "init";
        case QpState::rtr:
            return "rtr";
        case QpState::error:
            return "error";
    }
    return "unknown";
}

const char* to_string(TimestampFormat format) {
    switch (format) {
        case TimestampFormat::none:
            return "none";
        case TimestampFormat::device_ticks:
            return "device_ticks";
        case TimestampFormat::wallclock_ns:
            return "wallclock_ns";
    }
    return "unknown";
}

const char* to_string(EventKind kind) {
    switch (kind) {
        case EventKind::port_active:
            return "port_active";
        case EventKind::port_error:
            return "port_error";
        case EventKind::qp_fatal:
            return "qp_fatal";
        case EventKind::cq_error:
            return "cq_error";
        case EventKind::device_fatal:
            return "device_fatal";
        case EventKind::other:
            return "other";
    }
    return "unknown";
}

}  // namespace ibvcap::verbs
