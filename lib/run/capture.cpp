#include "lib/run/capture.hpp"

#include <fmt/format.h>

#include <memory>

#include "lib/host/devices.hpp"
#include "lib/host/phc.hpp"
#include "lib/host/privileges.hpp"
#include "lib/run/pcap_capture.hpp"
#include "lib/run/verbs_capture.hpp"
#include "lib/sources/igmp_query.hpp"

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
    // The multicast path (lib/sources/igmp_query.hpp): each join with its
    // time, and a querier listener per interface from before the joins to
    // the end. Declared first: the memberships record into the log.
    JoinLog joins;
    std::vector<std::unique_ptr<QuerierListener>> listeners;
    const auto listen_on = [&listeners](const std::string& interface) {
        for (const auto& l : listeners) {
            if (l->interface() == interface) {
                return;
            }
        }
        listeners.push_back(std::make_unique<QuerierListener>(interface));
        listeners.back()->start();
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
        const MembershipFactory join = joins.wrap(
            [&r, &request](const Endpoint& group) {
                return kernel_membership(group, r.interface, r.interface_ipv4,
                                         sources_for(request.demux.sources, group));
            },
            r.interface);
        listen_on(r.interface);
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
        r.engine.sources = request.demux.sources;
        r.sysfs_root = request.sysfs_root;
        r.cpus = request.cpus;
        r.poll_cpus = request.cpus;
        r.phc = [](const CaptureTarget& t, std::string& why) -> std::shared_ptr<PhcClock> {
            return open_netdev_phc(t.netdev, why);
        };
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
        for (const auto& t : r.targets) {
            listen_on(t.netdev);
        }
        const TargetMembershipFactory join = [&joins,
                                              kernel = kernel_memberships(request.demux.sources)](
                                                 const CaptureTarget& t, const Endpoint& g) {
            return joins.record(kernel(t, g), g, t.netdev);
        };
        outcome = run_verbs_capture(r, *provider, join, stop);
    }
    outcome.info.mcast.live = true;
    outcome.info.mcast.sources = request.demux.sources;
    outcome.info.mcast.joins = joins.joins();
    for (auto& l : listeners) {
        outcome.info.mcast.queriers.push_back(l->finish());
    }
    if (gpu) {
        gpu->finish(outcome);
    }
    return outcome;
}

}  // namespace ibvcap
