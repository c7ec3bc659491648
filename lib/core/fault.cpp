#include "lib/core/fault.hpp"

#include <fmt/format.h>

namespace ibvcap {

void Faults::report(std::string_view where, std::string_view what) noexcept {
    try {
        const std::lock_guard lock(mu_);
        messages_.push_back(fmt::format("{}: {}", where, what));
    } catch (...) {
        // Out of memory while reporting: the flag below still stops the run.
    }
    raised_.store(true, std::memory_order_release);
}

std::string Faults::summary() const {
    const std::lock_guard lock(mu_);
    if (messages_.empty()) {
        return raised_.load() ? "a worker thread failed" : "";
    }
    if (messages_.size() == 1) {
        return messages_.front();
    }
    return fmt::format("{} (and {} more)", messages_.front(), messages_.size() - 1);
}

std::vector<std::string> Faults::all() const {
    const std::lock_guard lock(mu_);
    return messages_;
}

}  // namespace ibvcap
