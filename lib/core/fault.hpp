// What ended a worker thread. Every thread a run starts besides the poll
// thread (the writers' disk threads, the block sink's copy thread, the block
// consumer) catches any exception in its body and reports it here instead of
// letting it escape, which would call std::terminate and end the process with
// no report and unfinished files ([thread.thread.constr]). The run loops
// watch raised() and stop the run as a device fault stops it: the producers
// stop, the files are finished, held slots are released, the report is
// written, and the exit code is 1 (lib/run/common.hpp apply_faults).
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace ibvcap {

class Faults {
  public:
    // Any thread; never throws. `where` names the thread ("disk thread 0"),
    // `what` the exception's message.
    void report(std::string_view where, std::string_view what) noexcept;
    bool raised() const noexcept { return raised_.load(std::memory_order_acquire); }
    // "disk thread 0: cannot copy payload out of GPU memory: ..." (the first
    // reported), with "(and N more)" when others followed; "" when none.
    std::string summary() const;
    std::vector<std::string> all() const;

  private:
    mutable std::mutex mu_;
    std::vector<std::string> messages_;
    std::atomic<bool> raised_{false};
};

}  // namespace ibvcap
