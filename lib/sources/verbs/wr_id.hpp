// The two 64-bit ids the verbs engine hands out and takes back, encoded and
// decoded only here: the receive work request's wr_id (posted to the NIC and
// returned in its completion) and a frame lease's token (handed to consumers
// with a held frame and returned through SlotOwner::release from any thread).
//
// Decoding checks nothing: a decoded value is whatever the 64 bits say. Both
// come from outside the engine (the NIC, other threads), so the engine range-
// checks every field (QP index against its QPs, generation against the QP's
// ring, slot against the ring depth and the slot's state) before using it.
#pragma once

#include <cstdint>
#include <limits>

namespace ibvcap {

// wr_id = QP index (16 bits) | ring generation (16 bits) | slot (32 bits).
// The generation is bumped by each recovery of a QP, so completions of the
// ring before it are told apart from the new ring's.
struct WrId {
    static constexpr unsigned kSlotBits = 32;
    static constexpr unsigned kGenerationBits = 16;
    static constexpr unsigned kQpBits = 16;
    static constexpr unsigned kGenerationShift = kSlotBits;
    static constexpr unsigned kQpShift = kSlotBits + kGenerationBits;

    std::uint16_t qp = 0;  // the QP's index in its engine
    std::uint16_t generation = 0;
    std::uint32_t slot = 0;  // the slot in the QP's receive ring

    constexpr std::uint64_t encode() const {
        return (std::uint64_t{qp} << kQpShift) | (std::uint64_t{generation} << kGenerationShift) |
               std::uint64_t{slot};
    }
    static constexpr WrId decode(std::uint64_t raw) {
        return WrId{static_cast<std::uint16_t>(raw >> kQpShift),
                    static_cast<std::uint16_t>(raw >> kGenerationShift),
                    static_cast<std::uint32_t>(raw)};
    }
    friend constexpr bool operator==(const WrId&, const WrId&) = default;
};

static_assert(WrId::kQpBits + WrId::kGenerationBits + WrId::kSlotBits == 64);
static_assert(std::numeric_limits<decltype(WrId::qp)>::digits == WrId::kQpBits);
static_assert(std::numeric_limits<decltype(WrId::generation)>::digits == WrId::kGenerationBits);
static_assert(std::numeric_limits<decltype(WrId::slot)>::digits == WrId::kSlotBits);
// The layout itself, pinned: fields in their places, none spilling into another.
static_assert(WrId{0x1234, 0x5678, 0x9abcdef0}.encode() == 0x1234'5678'9abc'def0ull);
static_assert(WrId::decode(0x1234'5678'9abc'def0ull) == WrId{0x1234, 0x5678, 0x9abcdef0});
static_assert(WrId::decode(WrId{0xffff, 0, 0}.encode()) == WrId{0xffff, 0, 0});
static_assert(WrId::decode(WrId{0, 0xffff, 0}.encode()) == WrId{0, 0xffff, 0});
static_assert(WrId::decode(WrId{0, 0, 0xffffffffu}.encode()) == WrId{0, 0, 0xffffffffu});
static_assert(WrId::decode(~std::uint64_t{0}).encode() == ~std::uint64_t{0});

// A frame lease's token = QP index (upper 32 bits) | slot (lower 32 bits).
// The QP field is wider than the wr_id's; the engine never hands out an index
// beyond 16 bits, and a released token claiming one fails its range check.
struct LeaseToken {
    static constexpr unsigned kSlotBits = 32;
    static constexpr unsigned kQpBits = 32;
    static constexpr unsigned kQpShift = kSlotBits;

    // The top bit of the QP field: a block ring's hold (Holder::ring), which
    // counts against the rings' share. QP indexes use the low WrId::kQpBits.
    static constexpr std::uint32_t kRingHolder = std::uint32_t{1} << 31;

    std::uint32_t qp = 0;
    std::uint32_t slot = 0;

    constexpr std::uint64_t encode() const {
        return (std::uint64_t{qp} << kQpShift) | std::uint64_t{slot};
    }
    static constexpr LeaseToken decode(std::uint64_t raw) {
        return LeaseToken{static_cast<std::uint32_t>(raw >> kQpShift),
                          static_cast<std::uint32_t>(raw)};
    }
    friend constexpr bool operator==(const LeaseToken&, const LeaseToken&) = default;
};

static_assert(LeaseToken::kQpBits + LeaseToken::kSlotBits == 64);
static_assert(std::numeric_limits<decltype(LeaseToken::qp)>::digits == LeaseToken::kQpBits);
static_assert(std::numeric_limits<decltype(LeaseToken::slot)>::digits == LeaseToken::kSlotBits);
// Every QP index and slot a wr_id names fits a token, below the ring bit.
static_assert(LeaseToken::kQpBits >= WrId::kQpBits && LeaseToken::kSlotBits >= WrId::kSlotBits);
static_assert(WrId::kQpBits < LeaseToken::kQpBits);
static_assert(LeaseToken{0x1234'5678, 0x9abc'def0}.encode() == 0x1234'5678'9abc'def0ull);
static_assert(LeaseToken::decode(0x1234'5678'9abc'def0ull) == LeaseToken{0x1234'5678, 0x9abc'def0});
static_assert(LeaseToken::decode(~std::uint64_t{0}).encode() == ~std::uint64_t{0});

}  // namespace ibvcap
