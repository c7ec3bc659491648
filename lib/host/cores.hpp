// Which cores a capture's threads may run on, and whether the poll thread
// and the writers' threads (the disk threads and the buffer stock,
// lib/sinks/writer_memory.hpp) end up on one core between them (issue 39):
// `taskset -c 1 ibvcap capture ...`, or --cpu and --disk-cpu naming the same
// CPU. The writer drops nothing for it below --writer-memory (the poll
// thread carves its own buffers when the stock gets no CPU), but one core
// then receives, demultiplexes and copies every record into the page cache,
// which the operator should know before the run, not after: doctor says it,
// and a capture says it at its start and in its report's notes.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ibvcap {

// The CPUs this process may run on (sched_getaffinity(2)), ascending; empty
// when it cannot be read.
std::vector<int> allowed_cpus();

// The words for a shared core, or nullopt when the threads can run on two
// CPUs or more. `poll`: --cpu (empty: the poll thread runs wherever the
// process may); `disk`: --disk-cpu (empty: likewise); `allowed`: the
// process's CPUs (allowed_cpus()).
std::optional<std::string> shared_core(const std::vector<int>& poll, const std::vector<int>& disk,
                                       const std::vector<int>& allowed);

// The fix, for doctor's line and the note.
inline constexpr const char* kSharedCoreFix =
    "give the writers a CPU of their own: --disk-cpu N with N outside --cpu, and a CPU affinity "
    "(taskset -c, CPUAffinity=) that includes both";

// For a run: the words and the fix as one note, or "" (shared_core with
// this process's CPUs).
std::string shared_core_note(const std::vector<int>& poll, const std::vector<int>& disk);

}  // namespace ibvcap
