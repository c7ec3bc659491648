// A lane's ledger as another thread may read it while the run goes on: the
// timeline and the metrics file (docs/observability.md) read the counts once
// a second from the run loop's thread, while a verbs poll thread owns the
// ledger and writes it with plain stores.
//
// The owner copies the counts into the view when asked (publish), off the
// per-packet path: the verbs engine looks every 1024 polls, where it also reads
// its device events. The copy is made under a mutex taken with try_lock, so
// the owner never waits for a reader: a copy it cannot make now is made at
// its next look. The reader takes the last copy made.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "lib/ledger/ledger.hpp"

namespace ibvcap {

struct LiveStream {
    Endpoint group;
    std::uint32_t antenna = 0;
    std::uint16_t thread = 0;
    std::uint64_t packets = 0;
    std::uint64_t bytes = 0;
    std::uint64_t missing = 0;
    std::uint64_t duplicates = 0;
    std::uint64_t out_of_order = 0;
    std::uint64_t too_late = 0;
    std::uint64_t implausible = 0;
    std::uint64_t restarts = 0;
};

struct LiveView {
    std::uint64_t packets = 0;  // frames the source delivered to this lane
    std::uint64_t bytes = 0;
    std::array<std::uint64_t, kReasonCount> reasons{};
    std::vector<LiveStream> streams;  // in the ledger's order (first seen first)
    std::uint64_t copies = 0;         // how many copies were made (0: none yet)

    // Totals over the streams.
    std::uint64_t missing() const;
    // Fill from a ledger (the owner's thread, or after the run).
    void copy_from(const Ledger& ledger);
    // Add another lane's view (streams of different lanes are different).
    void add(const LiveView& other);
};

class LivePublisher {
  public:
    // Reader: ask for a fresh copy at the owner's next look.
    void request() { wanted_.store(true, std::memory_order_relaxed); }
    // Owner: whether a copy was asked for (cheap: one relaxed load).
    bool wanted() const { return wanted_.load(std::memory_order_relaxed); }
    // Owner: copy the ledger's counts, unless a reader holds the view now
    // (then the request stays and the next look copies).
    void publish(const Ledger& ledger);
    // Reader: the last copy made (copies == 0 when none was yet).
    LiveView read() const;

  private:
    mutable std::mutex mu_;
    LiveView view_;
    std::atomic<bool> wanted_{false};
};

}  // namespace ibvcap
