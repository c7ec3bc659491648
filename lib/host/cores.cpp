// lib/host/cores.hpp.
#include "lib/host/cores.hpp"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <iterator>

namespace ibvcap {

std::vector<int> allowed_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    std::vector<int> cpus;
    if (::sched_getaffinity(0, sizeof(set), &set) != 0) {
        return cpus;
    }
    for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(static_cast<unsigned>(c), &set)) {
            cpus.push_back(c);
        }
    }
    return cpus;
}

std::optional<std::string> shared_core(const std::vector<int>& poll, const std::vector<int>& disk,
                                       const std::vector<int>& allowed) {
    const auto effective = [&](const std::vector<int>& given) {
        std::vector<int> s = given.empty() ? allowed : given;
        std::sort(s.begin(), s.end());
        s.erase(std::unique(s.begin(), s.end()), s.end());
        return s;
    };
    const std::vector<int> p = effective(poll);
    const std::vector<int> d = effective(disk);
    std::vector<int> all;
    std::set_union(p.begin(), p.end(), d.begin(), d.end(), std::back_inserter(all));
    if (all.size() != 1) {
        return std::nullopt;  // (none known: nothing to say)
    }
    const char* why = poll.empty() && disk.empty() ? "the process's CPU affinity allows no other"
                      : poll.empty()               ? "--disk-cpu, and the process's CPU affinity"
                      : disk.empty()               ? "--cpu, and the process's CPU affinity"
                                                   : "--cpu and --disk-cpu";
    return fmt::format(
        "the poll thread, the disk threads and the buffer stock share CPU {} ({}): nothing is "
        "dropped for it below --writer-memory, but that one core must receive, demultiplex and "
        "copy every record into the page cache",
        all.front(), why);
}

std::string shared_core_note(const std::vector<int>& poll, const std::vector<int>& disk) {
    const auto words = shared_core(poll, disk, allowed_cpus());
    return words ? fmt::format("{}; {}", *words, kSharedCoreFix) : std::string();
}

}  // namespace ibvcap
