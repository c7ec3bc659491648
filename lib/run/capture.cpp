#include "lib/run/capture.hpp"

#include <fmt/format.h>

#include <memory>

#include "lib/host/devices.hpp"
#include "lib/host/privileges.hpp"
#include "lib/run/pcap_capture.hpp"
#include "lib/run/verbs_capture.hpp"

namespace ibvcap {

RunOutcome run_capture(const LiveCaptureRequest& request, const std::atomic<bool>& stop) {
    // Declared before the GPU path, so that the device outlives its memory.
    std::unique_ptr<verbs::Provider> provider;
    std::unique_ptr<GpuPath> gpu;
    const auto make_gpu = [&](const std::string& nic) {
        if (request.gpu.mode != GpuRequest::Mode::none) {
            gpu = std::make_unique<GpuPath>(request.gpu, nic);
        }
    };
    // Checked before anything is set up: a capture that could not become
    // --user never starts.
    std::optional<RunUser> user;
    if (!request.user.empty()) {
        user = resolve_run_user(request.user);
    }
    const auto drop = [user, dirs = request.writable_dirs](RunInfo& info) {
        info.privileges = drop_privileges(user, dirs);
    };
    RunOutcome outcome;
    if (request.source == LiveCaptureRequest::Source::pcap) {
        if (request.interfaces.size() != 1) {
            throw std::invalid_argument(fmt::format(
                "--source pcap captures on one interface; {} -i given", request.interfaces.size()));
        }
        const NetInterface nif = resolve_interface(request.interfaces.front());
        PcapCaptureRequest r;
        static_cast<RunSettings&>(r) = request;
        r.after_start = drop;
        r.interface = nif.name;
        r.interface_ipv4 = nif.ipv4.front();  // resolve_interface guarantees one
        r.buffer_bytes = request.pcap_buffer_bytes;
        r.sysfs_root = request.sysfs_root;
        const MembershipFactory join = [&r](const Endpoint& group) {
            return kernel_membership(group, r.interface, r.interface_ipv4);
        };
        make_gpu(nif.name);
        if (gpu) {
            r.blocks = gpu->sink();
            r.writer.faults = &gpu->faults();
            gpu->watch_xids(r);  // before the source starts
        }
        outcome = run_pcap_capture(r, join, stop);
    } else {
        CaptureRequest r;
        static_cast<RunSettings&>(r) = request;
        r.after_start = drop;
        r.engine = request.engine;
        r.engine.groups = request.demux.groups;
        r.engine.antennas = request.demux.antennas;
        r.sysfs_root = request.sysfs_root;
        r.cpus = request.cpus;
        provider = verbs::make_ibv_provider();
        for (const auto& i : request.interfaces) {
            r.targets.push_back(verbs_target(*provider, i));
        }
        if (r.targets.empty()) {
            throw std::runtime_error("no device to capture on");
        }
        make_gpu(r.targets.front().device);
        if (gpu) {
            r.blocks = gpu->sink();
            r.payload = gpu->payload();
            r.writer.faults = &gpu->faults();
            gpu->watch_xids(r);  // before the source starts
        }
        outcome = run_verbs_capture(r, *provider, kernel_memberships(), stop);
    }
    if (gpu) {
        gpu->finish(outcome);
    }
    return outcome;
}

}  // namespace ibvcap
