// Shared pieces of the fuzz targets (docs/architecture.md, "Nothing from the wire is trusted" and
// "Testing": fuzz targets for everything that parses bytes from outside).
//
// Each target is a named entry `int ibvcap_fuzz_X(const uint8_t*, size_t)`
// (fuzz_entries.hpp). Built as a libFuzzer program (IBVCAP_FUZZ_MAIN defined,
// see CMakeLists.txt) the file also defines LLVMFuzzerTestOneInput and a failed
// FUZZ_CHECK prints the condition and traps, which libFuzzer reports as a crash
// and saves the input. Built into the GoogleTest replay program
// (test_fuzz_replay), a failed FUZZ_CHECK is recorded instead and the replay
// test turns it into a test failure naming the check and the input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "formats/bytes.hpp"

namespace ibvcap::fuzz {

#if defined(IBVCAP_FUZZ_MAIN)
[[noreturn]] inline void check_failed(const char* condition, const char* file, int line) {
    std::fprintf(stderr, "FUZZ_CHECK failed: %s (%s:%d)\n", condition, file, line);
    std::fflush(stderr);
    __builtin_trap();
}
#else
// The first failed check since the last take_failure(); empty when none.
inline std::string& failure() {
    static std::string first;
    return first;
}
inline void check_failed(const char* condition, const char* file, int line) {
    if (failure().empty()) {
        failure() = std::string("FUZZ_CHECK failed: ") + condition + " (" + file + ":" +
                    std::to_string(line) + ")";
    }
}
inline std::string take_failure() {
    std::string f;
    f.swap(failure());
    return f;
}
#endif

// Consumes the fuzz input from the front; reads past the end give zeros, so
// every input, however short, is a valid sequence of fields.
class Reader {
  public:
    Reader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

    std::size_t remaining() const { return size_ - at_; }
    std::uint8_t u8() { return at_ < size_ ? data_[at_++] : std::uint8_t{0}; }
    std::uint16_t u16() {
        const std::uint16_t lo = u8();
        return static_cast<std::uint16_t>(lo | (u8() << 8));
    }
    std::uint32_t u32() {
        const std::uint32_t lo = u16();
        return lo | (std::uint32_t{u16()} << 16);
    }
    std::uint64_t u64() {
        const std::uint64_t lo = u32();
        return lo | (std::uint64_t{u32()} << 32);
    }
    // Up to `n` bytes (fewer at the end of the input).
    Bytes take(std::size_t n) {
        const std::size_t k = n < remaining() ? n : remaining();
        const Bytes b(data_ + at_, k);
        at_ += k;
        return b;
    }
    Bytes rest() { return take(remaining()); }

  private:
    const std::uint8_t* data_;
    std::size_t size_;
    std::size_t at_ = 0;
};

}  // namespace ibvcap::fuzz

#define FUZZ_CHECK(cond)                                             \
    do {                                                             \
        if (!(cond)) {                                               \
            ::ibvcap::fuzz::check_failed(#cond, __FILE__, __LINE__); \
        }                                                            \
    } while (false)
