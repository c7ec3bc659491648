// A file mapping whose SIGBUS (the file shrank under it) ends a run cleanly
// instead of the process: guarded_map.hpp.
#include "lib/sources/guarded_map.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <limits>
#include <mutex>

namespace ibvcap {

namespace {

constexpr std::size_t kWhole = std::numeric_limits<std::size_t>::max();

// What the handler knows of each guarded mapping: lock-free atomics only,
// read in a signal handler. A run has one mapped input; tests a few.
struct Slot {
    std::atomic<bool> taken{false};
    std::atomic<std::uintptr_t> base{0};  // set last: 0 while not guarded
    std::atomic<std::size_t> bytes{0};
    std::atomic<int> fd{-1};
    std::atomic<std::size_t> shrunk_to{kWhole};
};
std::array<Slot, 8> slots;
struct sigaction previous {};
std::size_t page_bytes = 4096;
std::once_flag installed;

// Notes the file's new size.
void note(Slot& s, std::size_t size) {
    std::size_t was = s.shrunk_to.load(std::memory_order_relaxed);
    while (size < was && !s.shrunk_to.compare_exchange_weak(was, size, std::memory_order_release)) {
    }
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
    const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
    for (Slot& s : slots) {
        const std::uintptr_t base = s.base.load(std::memory_order_acquire);
        const std::size_t bytes = s.bytes.load(std::memory_order_relaxed);
        if (base == 0 || addr < base || addr >= base + bytes) {
            continue;
        }
        // Zero pages from the faulting page to the end (async-signal-safe:
        // system calls and atomics only). Not from the new end: pages before
        // the fault may hold frames a writer still has to write, and its
        // pwritev of a page that is gone fails (EFAULT: the output is cut
        // back to its last whole record) rather than writing zeros.
        const std::size_t from = (addr - base) / page_bytes * page_bytes;
        ::mmap(reinterpret_cast<void*>(base + from), bytes - from, PROT_READ,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        struct stat st {};
        std::size_t size = from;
        if (::fstat(s.fd.load(std::memory_order_relaxed), &st) == 0 && st.st_size >= 0 &&
            static_cast<std::size_t>(st.st_size) < size) {
            size = static_cast<std::size_t>(st.st_size);
        }
        note(s, size);
        return;  // the access is made again, and reads zeros
    }
    // Not a guarded mapping's: whatever was there before us, else the default.
    if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
        previous.sa_sigaction(sig, info, context);
        return;
    }
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN &&
        previous.sa_handler != nullptr) {
        previous.sa_handler(sig);
        return;
    }
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigemptyset(&dfl.sa_mask);
    ::sigaction(SIGBUS, &dfl, nullptr);
    if (info->si_code <= 0) {
        ::raise(SIGBUS);  // sent, not a fault: nothing would raise it again
    }
    // A fault: the access is made again and now ends the process.
}

void install() {
    const long page = ::sysconf(_SC_PAGESIZE);
    page_bytes = page > 0 ? static_cast<std::size_t>(page) : 4096;
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    ::sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &previous);
}

}  // namespace

GuardedMap::GuardedMap(int fd, std::size_t bytes) : fd_(fd) {
    void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
        return;
    }
    data_ = static_cast<const std::uint8_t*>(p);
    bytes_ = bytes;
    std::call_once(installed, install);
    for (std::size_t i = 0; i < slots.size(); ++i) {
        Slot& s = slots[i];
        bool free = false;
        if (!s.taken.compare_exchange_strong(free, true, std::memory_order_acq_rel)) {
            continue;
        }
        // (The base last: the handler never sees it without its size and fd.)
        s.bytes.store(bytes, std::memory_order_relaxed);
        s.fd.store(fd, std::memory_order_relaxed);
        s.shrunk_to.store(kWhole, std::memory_order_relaxed);
        s.base.store(reinterpret_cast<std::uintptr_t>(p), std::memory_order_release);
        slot_ = static_cast<int>(i);
        return;
    }
    // Every slot taken: mapped, unguarded (a SIGBUS ends the process, as
    // without the guard). A run maps one input.
}

GuardedMap::~GuardedMap() {
    if (slot_ >= 0) {
        Slot& s = slots[static_cast<std::size_t>(slot_)];
        s.base.store(0, std::memory_order_release);
        s.taken.store(false, std::memory_order_release);
    }
    if (data_ != nullptr) {
        ::munmap(const_cast<std::uint8_t*>(data_), bytes_);
    }
    if (fd_ >= 0) {
        ::close(fd_);
    }
}

std::optional<std::size_t> GuardedMap::shrunk() const {
    if (slot_ < 0) {
        return std::nullopt;
    }
    const std::size_t to =
        slots[static_cast<std::size_t>(slot_)].shrunk_to.load(std::memory_order_acquire);
    return to == kWhole ? std::nullopt : std::optional<std::size_t>(to);
}

void GuardedMap::check() {
    struct stat st {};
    if (slot_ >= 0 && ::fstat(fd_, &st) == 0 && st.st_size >= 0 &&
        static_cast<std::size_t>(st.st_size) < bytes_) {
        note(slots[static_cast<std::size_t>(slot_)], static_cast<std::size_t>(st.st_size));
    }
}

}  // namespace ibvcap
