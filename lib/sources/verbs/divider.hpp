// Exact signed division by a divisor fixed at setup, with a multiply instead
// of a divide per call: the completion-timestamp conversion (ticks x 10^6 /
// the device clock's kHz) runs once per frame, and a 64-bit idiv was the
// largest single cost in the engine's handle() under perf (issue 18).
//
// The quotient is C++'s `x / d` exactly (truncated toward zero): for
// |x| < 2^64 and r = floor(2^64 / d), q = floor(|x| r / 2^64) is either
// floor(|x| / d) or one less (|x| r / 2^64 > |x| / d - 1), so one
// correction step makes it exact (Granlund and Montgomery, "Division by
// invariant integers using multiplication", PLDI 1994, the estimate-and-
// correct form). test_engine_checks' Divider.* compare it with `/` on
// boundaries and random values.
#pragma once

#include <cstdint>

namespace ibvcap {

// GCC's and Clang's 128-bit integer: one widening multiply (x86-64 MUL,
// AArch64 UMULH). __extension__: not ISO C++, said so on purpose (-pedantic).
__extension__ using Uint128 = unsigned __int128;

class Divider {
  public:
    Divider() = default;
    // d >= 2 uses the reciprocal; d of 0 or 1 divides by 1 (0 is never a
    // clock rate: the caller only converts when the device gave one).
    explicit Divider(std::uint64_t d)
        : d_(d < 1 ? 1 : d),
          reciprocal_(d_ < 2 ? 0 : static_cast<std::uint64_t>(~std::uint64_t{0} / d_)) {}

    std::int64_t divide(std::int64_t x) const {
        const bool negative = x < 0;
        // |x| as unsigned (INT64_MIN included).
        const std::uint64_t a =
            negative ? ~static_cast<std::uint64_t>(x) + 1 : static_cast<std::uint64_t>(x);
        const std::uint64_t q = divide_unsigned(a);
        // Negated as unsigned, then converted (modular in C++20): no
        // signed overflow even for INT64_MIN / 1.
        return static_cast<std::int64_t>(negative ? ~q + 1 : q);
    }

    std::uint64_t divide_unsigned(std::uint64_t a) const {
        if (d_ == 1) {
            return a;
        }
        // The reciprocal floor((2^64 - 1) / d) is floor(2^64 / d) unless d
        // divides 2^64 (a power of two), where it is one less: the estimate
        // is then still at most one short, and the correction covers it.
        std::uint64_t q = static_cast<std::uint64_t>((static_cast<Uint128>(a) * reciprocal_) >> 64);
        if (a - q * d_ >= d_) {
            ++q;
        }
        return q;
    }

  private:
    std::uint64_t d_ = 1;
    std::uint64_t reciprocal_ = 0;
};

}  // namespace ibvcap
