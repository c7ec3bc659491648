#include "lib/ledger/live.hpp"

namespace ibvcap {

std::uint64_t LiveView::missing() const {
    std::uint64_t n = 0;
    for (const auto& s : streams) {
        n += s.missing;
    }
    return n;
}

void LiveView::copy_from(const Ledger& ledger) {
    packets = ledger.packets();
    bytes = ledger.bytes();
    for (std::size_t i = 0; i < kReasonCount; ++i) {
        reasons[i] = ledger.reason_count(static_cast<Reason>(i));
    }
    // The streams' vector only grows (a stream is never removed), so a copy
    // reuses the room of the last one: no allocation once it has grown.
    const auto& from = ledger.streams();
    streams.resize(from.size());
    for (std::size_t i = 0; i < from.size(); ++i) {
        const StreamStats& s = from[i];
        LiveStream& d = streams[i];
        d.group = s.group;
        d.antenna = s.antenna;
        d.thread = s.thread;
        d.packets = s.sequence.received();
        d.bytes = s.bytes;
        d.missing = s.sequence.missing();
        d.duplicates = s.sequence.duplicates();
        d.out_of_order = s.sequence.out_of_order();
        d.too_late = s.sequence.too_late();
        d.implausible = s.sequence.implausible();
        d.restarts = s.sequence.restarts();
    }
    ++copies;
}

void LiveView::add(const LiveView& other) {
    packets += other.packets;
    bytes += other.bytes;
    for (std::size_t i = 0; i < kReasonCount; ++i) {
        reasons[i] += other.reasons[i];
    }
    streams.insert(streams.end(), other.streams.begin(), other.streams.end());
    copies += other.copies;
}

void LivePublisher::publish(const Ledger& ledger) {
    const std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) {
        return;  // a reader has it: the request stays for the next look
    }
    view_.copy_from(ledger);
    wanted_.store(false, std::memory_order_relaxed);
}

LiveView LivePublisher::read() const {
    const std::lock_guard lock(mu_);
    return view_;
}

}  // namespace ibvcap
