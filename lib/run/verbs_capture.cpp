#include "lib/run/verbs_capture.hpp"

#include "lib/run/run_loop.hpp"

namespace ibvcap {

RunOutcome run_verbs_capture(const CaptureRequest& request, verbs::Provider& provider,
                             const TargetMembershipFactory& memberships,
                             const std::atomic<bool>& stop) {
    VerbsSource source(request, provider, memberships);
    return run_source(source, request, stop);
}

}  // namespace ibvcap
