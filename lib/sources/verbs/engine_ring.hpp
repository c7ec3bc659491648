// What the verbs engine's two files share (engine.cpp: the plan, start,
// stop, events and reports; engine_poll.cpp: the poll loop): a QP's receive
// ring and its bookkeeping, the mailbox through which consumers release the
// slots they hold, and the slot geometry both files compute.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "lib/sources/verbs/engine.hpp"
#include "lib/sources/verbs/wr_id.hpp"

namespace ibvcap {

inline constexpr std::uint32_t kSlotAlign = 64;

constexpr std::uint32_t round_up(std::uint32_t v, std::uint32_t to) {
    return (v + to - 1) / to * to;
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

// Every slot of a ring fits the wr_id's and the lease token's slot field.
static_assert(std::numeric_limits<decltype(EngineOptions::ring_depth)>::digits <= WrId::kSlotBits);

// One entry of the plan: a group, or a group and one antenna with hw_demux,
// and the rules that steer its frames to its QP (one per source a
// source-specific group names, else one).
struct VerbsEngine::Entry {
    Endpoint group;
    std::uint32_t antenna = 0;  // 0: any source
    std::string label;          // "239.17.0.1:36001" or "239.17.0.1:36001/10.0.0.11"
    std::uint16_t qp = 0;       // index into qps_
    std::uint32_t tag = 0;      // its rules' flow tag (index + 1) on a shared QP; 0: none
    std::vector<std::unique_ptr<verbs::Flow>> flows;
    std::uint64_t watch_matched = 0;  // the watchdog's last reading (its thread only)
    std::uint64_t watch_delivered = 0;
};

struct VerbsEngine::Qp {
    std::uint16_t index = 0;             // the QP field of its wr_ids and lease tokens
    std::vector<std::uint32_t> entries;  // indices into entries_, in order
    // Its rules carry flow tags and its CQ reads them: each frame's entry is
    // known (engine_poll.cpp). False for a QP of one entry (nothing to tell
    // apart) and for one whose tag the device refused.
    bool tagged = false;
    std::uint64_t unattributed = 0;  // frames whose tag named none of its entries
    std::uint64_t recoveries = 0;
    std::string label;  // its entry's label, or "queue N (M groups)"

    std::uint32_t depth = 0;
    decltype(WrId::generation) generation = 0;  // bumped by each recovery; part of every wr_id
    PayloadMemory::Region payload;              // outlives the QP (declared before it)
    std::unique_ptr<verbs::QueuePair> qp;
    std::vector<std::uint8_t> outstanding;  // per slot: posted, not completed
    std::vector<std::uint16_t> held;        // per slot: consumers holding it
    std::vector<std::uint8_t> ring_held;    // per slot: of them, the block rings
    std::uint32_t held_count = 0;           // slots with held > 0
    std::uint32_t writer_held_count = 0;    // slots a writer holds (its share)
    std::uint32_t ring_held_count = 0;      // slots the rings hold (their share)
    std::uint32_t outstanding_count = 0;
    std::uint32_t header_lkey = 0;   // the header MR's key, read in post_all
    std::uint32_t payload_lkey = 0;  // the payload MR's key, read in post_all
    std::vector<verbs::RecvRequest> reposts;
    // Below this many posted WRs the QP's re-posts wait for no batch: half
    // the ring (VerbsEngine::repost_due in engine_poll.cpp).
    std::uint32_t low_water = 0;
    bool needs_recovery = false;
    bool touched = false;  // in VerbsEngine::touched_ (engine.hpp)
    std::chrono::steady_clock::time_point error_since{};
    std::uint64_t delivered = 0;  // completions of frames the NIC steered here
    std::atomic<std::uint64_t> delivered_published{0};  // for the watchdog's thread
    std::atomic<std::uint64_t> unattributed_published{0};
    std::uint64_t watch_matched = 0;  // the watchdog's last reading (its thread only)
    std::uint64_t watch_delivered = 0;
};

inline void VerbsEngine::touch(Qp& q) {
    if (!q.touched) {
        q.touched = true;
        touched_.push_back(&q);
    }
}

}  // namespace ibvcap
