#include "lib/run/verbs_capture.hpp"

#include "lib/run/run_loop.hpp"

namespace ibvcap {

RunOutcome run_verbs_capture(const CaptureRequest& request, verbs::Provider& provider,
                             const TargetMembershipFactory& memberships,
                             const std::atomic<bool>& stop) {
    VerbsSourceOptions options;
    options.targets = request.targets;
    options.engine = request.engine;
    options.sysfs_root = request.sysfs_root;
    options.nic_counters = request.nic_counters;
    options.cpus = request.cpus;
    options.watchdog = request.watchdog;
    options.payload = request.payload;
    VerbsSource source(std::move(options), provider, memberships);
    return run_source(source, request, stop);
}

}  // namespace ibvcap
