// Per-stream CODIF sequence tracking (docs/formats.md, "How a stream's frames are counted").
//
// Frames are numbered by their absolute index (CodifTiming::index). The
// tracker remembers which of the last kWindow indices behind the newest frame
// arrived, so a late frame that fills an earlier gap is told apart from a
// duplicate, and the missing count stays exact under reordering:
//   missing      = indices in [lowest, newest] never received
//   duplicates   = receptions of an index already received
//   out_of_order = first receptions of an index lower than one already received
// Every reception is exactly one of: new and advancing (first, in_order, gap),
// new and late, or a duplicate.
// A frame later than the window cannot be classified; it is counted in
// `too_late` (and out_of_order) and leaves `missing` unchanged, so missing may
// then overstate, never understate, the loss.
#pragma once

#include <array>
#include <cstdint>

namespace ibvcap {

class SequenceTracker {
  public:
    static constexpr std::uint64_t kWindow = 8192;  // frames; about 1 ms at 8 Mpps

    enum class Kind : std::uint8_t { first, in_order, gap, duplicate, late };

    // Record one received frame; returns how it was classified.
    Kind observe(std::uint64_t index);

    bool started() const { return started_; }
    std::uint64_t lowest() const { return lowest_; }
    std::uint64_t newest() const { return newest_; }
    std::uint64_t received() const { return received_; }
    std::uint64_t missing() const { return missing_; }
    std::uint64_t duplicates() const { return duplicates_; }
    std::uint64_t out_of_order() const { return out_of_order_; }
    std::uint64_t too_late() const { return too_late_; }

    // Distinct frames received plus missing equals the span [lowest, newest]
    // unless a frame arrived later than the window allowed to classify.
    bool reconciles() const {
        return !started_ ||
               (too_late_ > 0 || received_ - duplicates_ + missing_ == newest_ - lowest_ + 1);
    }

  private:
    bool test(std::uint64_t index) const {
        const std::uint64_t bit = index % kWindow;
        return (seen_[bit / 64] >> (bit % 64)) & 1u;
    }
    void set(std::uint64_t index) {
        const std::uint64_t bit = index % kWindow;
        seen_[bit / 64] |= std::uint64_t{1} << (bit % 64);
    }
    void clear(std::uint64_t index) {
        const std::uint64_t bit = index % kWindow;
        seen_[bit / 64] &= ~(std::uint64_t{1} << (bit % 64));
    }

    bool started_ = false;
    std::uint64_t lowest_ = 0;
    std::uint64_t newest_ = 0;
    std::uint64_t received_ = 0;
    std::uint64_t missing_ = 0;
    std::uint64_t duplicates_ = 0;
    std::uint64_t out_of_order_ = 0;
    std::uint64_t too_late_ = 0;
    std::array<std::uint64_t, kWindow / 64> seen_{};
};

}  // namespace ibvcap
