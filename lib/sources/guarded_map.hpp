// A read-only mapping of an input file that another process may shrink while
// ibvcap reads it (`truncate -s 30000000 m.pcap` beside `ibvcap read -r
// m.pcap`). The kernel then raises SIGBUS at the first access to a page of
// the mapping wholly past the file's new end (mmap(2), "Errors": "SIGBUS:
// attempted access to a page of the buffer that lies beyond the end of the
// mapped file"), which killed the run with no report. A system call that
// reads such a page (a writer's pwritev of a held frame) fails with EFAULT
// instead.
//
// Under the guard a SIGBUS inside a guarded mapping does not kill: the
// handler puts zero pages (an anonymous, read-only mapping, MAP_FIXED) over
// the mapping from the faulting page to its end and notes the file's new
// size (fstat, which signal-safety(7) lists); the faulting access is made
// again and reads zeros. The reader touches each record's last byte before
// it delivers the record (the file shrinks from its end, so a record whose
// last byte reads is whole) and checks shrunk() then, so a record of zeros
// is never delivered; it ends the run with an error that names the change.
// Pages between the new end and the fault are left as the kernel has them:
// a writer's pwritev of a frame held there fails with EFAULT and its output
// is cut back to its last whole record, instead of writing zeros.
// A SIGBUS anywhere else keeps its default action (the process ends).
//
// Hand-written: no Debian library guards a file mapping against truncation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "lib/core/frame.hpp"

namespace ibvcap {

// Also the owner of the frames lent from the mapping (FrameLease): they need
// no release (the mapping outlives the writers), and are intact while the
// file has not shrunk under them.
class GuardedMap final : public SlotOwner {
  public:
    // Maps `bytes` of `fd` (read-only, private) and guards the mapping; the
    // fd is kept (the handler asks it for the file's size) and closed with
    // the mapping. Empty (data() null) when mmap fails.
    GuardedMap(int fd, std::size_t bytes);
    ~GuardedMap() override;
    GuardedMap(const GuardedMap&) = delete;
    GuardedMap& operator=(const GuardedMap&) = delete;

    const std::uint8_t* data() const { return data_; }
    std::size_t size() const { return bytes_; }
    // The file's size once it was found smaller than the mapping (by the
    // handler, or by check()); unset while it is whole. Any thread.
    std::optional<std::size_t> shrunk() const;
    // Asks the file for its size now, and notes it when smaller than the
    // mapping (shrunk()).
    void check();

    // SlotOwner: nothing to release. Intact: [p, p + len) is outside the
    // mapping, or inside and before the file's end as noted (shrunk()).
    void release(std::span<const std::uint64_t> /*tokens*/) override {}
    bool intact(const std::uint8_t* p, std::size_t len) const override {
        if (p < data_ || p >= data_ + bytes_) {
            return true;
        }
        const auto to = shrunk();
        return !to || static_cast<std::size_t>(p - data_) + len <= *to;
    }

  private:
    const std::uint8_t* data_ = nullptr;
    std::size_t bytes_ = 0;
    int fd_ = -1;
    int slot_ = -1;  // in the handler's table
};

}  // namespace ibvcap
