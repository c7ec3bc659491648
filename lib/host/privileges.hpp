// Least privilege at run time (docs/operations.md, "Capabilities"): once a
// live capture's sockets, QPs, flow rules and group memberships exist, the
// process gives up every capability it holds, on every thread, sets
// no_new_privs, and (with --user NAME) becomes that user.
//
// Capabilities are per thread in Linux (capset(2) changes the calling thread
// only), and the writers' disk threads exist before the verbs QPs do, so the
// drop is made on each thread of the process (see privileges.cpp).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "lib/ledger/report.hpp"

namespace ibvcap {

struct RunUser {
    std::string name;
    uid_t uid = 0;
    gid_t gid = 0;
};

// --user NAME as a user of this host. Throws std::runtime_error (one line
// naming the fix) for a user that does not exist, or when this process
// cannot become it (not root and not already that user): checked before
// anything is set up, so a capture never starts that could not drop.
RunUser resolve_run_user(const std::string& name);

// The capability sets of every thread of the process under `task_dir`
// (/proc/self/task), OR-ed together: CapEff, CapPrm, CapAmb, CapInh (proc(5)),
// and whether every thread has NoNewPrivs.
struct ThreadCapabilities {
    std::uint64_t effective = 0;
    std::uint64_t permitted = 0;
    std::uint64_t ambient = 0;
    std::uint64_t inheritable = 0;
    bool no_new_privs = true;
    std::uint32_t threads = 0;
};
ThreadCapabilities read_thread_capabilities(
    const std::filesystem::path& task_dir = "/proc/self/task");

// Becomes `user` when given (supplementary groups, group, user: glibc makes
// each on every thread), then empties every capability set and sets
// no_new_privs on every thread, then reads them back. Afterwards every
// directory in `writable_dirs` (the output directory, the report's and the
// metrics file's) must still be writable by what the process now is.
// Throws std::runtime_error (one line) when any step fails or a capability
// is left on a thread; the returned state says what was done.
PrivilegeState drop_privileges(const std::optional<RunUser>& user,
                               const std::vector<std::filesystem::path>& writable_dirs);

}  // namespace ibvcap
