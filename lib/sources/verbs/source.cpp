#include "lib/sources/verbs/source.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "lib/core/usage_error.hpp"
#include "lib/host/devices.hpp"
#include "lib/host/nic_counters.hpp"

namespace ibvcap {

// Everything one device needs; members in construction order, so the engine
// (QPs, flows) goes before the device it uses.
struct VerbsSource::Part {
    CaptureTarget target;
    std::unique_ptr<verbs::Device> device;
    Ledger* ledger = nullptr;
    std::unique_ptr<NicCounters> counters;
    std::vector<std::string> missing_at_start;  // noted by start()
    std::unique_ptr<VerbsEngine> engine;
    std::thread thread;
    int cpu = -1;
    std::atomic<bool> done{false};  // the poll thread has ended
    std::string error;              // what ended the poll thread early (read after join)
};

namespace {

// Whether the process holds CAP_IPC_LOCK in its effective set (bit 14 of
// CapEff in /proc/self/status, proc(5)): then the kernel lets registrations
// pin memory past RLIMIT_MEMLOCK (drivers/infiniband/core/umem.c
// ib_umem_get: `new_pinned > lock_limit && !capable(CAP_IPC_LOCK)`).
bool has_cap_ipc_lock() {
    constexpr int kCapIpcLock = 14;  // linux/capability.h
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);) {
        if (line.rfind("CapEff:", 0) == 0) {
            try {
                return ((std::stoull(line.substr(7), nullptr, 16) >> kCapIpcLock) & 1) != 0;
            } catch (const std::exception&) {
                return false;
            }
        }
    }
    return false;
}

}  // namespace

ResourceAccount resource_account(const std::vector<DeviceResources>& devices) {
    ResourceAccount account;
    account.devices = devices;
    for (const DeviceResources& d : devices) {
        for (const MrRecord& m : d.mrs) {
            account.registered_bytes += m.bytes;
            // dma-buf and peermem regions are GPU memory: no host page is
            // pinned for them (docs/observability.md §5).
            if (m.kind == "host" || m.kind == "staging") {
                account.memory_locked_bytes += m.bytes;
            }
        }
    }
    rlimit limit{};
    if (::getrlimit(RLIMIT_MEMLOCK, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
        account.memlock_limit_bytes = limit.rlim_cur;
    }
    account.cap_ipc_lock = has_cap_ipc_lock();
    return account;
}

std::vector<std::string> device_capability_lines(verbs::Provider& provider,
                                                 const std::string& device, std::uint8_t port,
                                                 bool limits) {
    try {
        const auto dev = provider.open(device, port);
        const verbs::DeviceCaps& c = dev->caps();
        auto yes = [](bool b) { return b ? "yes" : "no"; };
        std::vector<std::string> lines = {
            fmt::format("raw-packet QP: {}   managed flow steering: {}   flow counters: {}",
                        yes(c.raw_packet_qp), yes(c.flow_steering), yes(c.flow_counters)),
            fmt::format("max_qp_wr: {}   max_cqe: {}   max_sge: {}", c.max_qp_wr, c.max_cqe,
                        c.max_sge),
            fmt::format(
                "completion timestamps: {}{}", yes(c.completion_timestamps),
                c.completion_timestamps
                    ? fmt::format(" (clock {} kHz{})", c.hca_core_clock_khz,
                                  c.real_time_ts ? "; real-time format: seconds<<32|ns" : "")
                    : std::string())};
        if (limits) {
            for (const auto& [name, value] : verbs::device_limits(c)) {
                lines.push_back(fmt::format("{}: {}", name, value));
            }
        }
        return lines;
    } catch (const std::exception& e) {
        return {fmt::format("cannot open: {}", e.what())};
    }
}

CaptureTarget verbs_target(verbs::Provider& provider, const std::string& interface) {
    if (provider.device_names().empty()) {
        throw std::runtime_error("no RDMA devices found; on this host use --source pcap");
    }
    const NetInterface nif = resolve_interface(interface);
    if (nif.rdma_device.empty()) {
        throw std::runtime_error(fmt::format(
            "interface {} is not driven by an RDMA device (see ibvcap devices); use an mlx5 "
            "interface or --source pcap",
            nif.name));
    }
    CaptureTarget t;
    t.device = nif.rdma_device;
    t.port = nif.rdma_port;
    t.netdev = nif.name;
    t.ipv4 = nif.ipv4.front();
    t.vlan_ids = nif.vlan_ids;
    return t;
}

TargetMembershipFactory kernel_memberships(std::vector<SourceFilter> sources) {
    return [sources = std::move(sources)](const CaptureTarget& target, const Endpoint& group) {
        return kernel_membership(group, target.netdev, target.ipv4, sources_for(sources, group));
    };
}

VerbsSource::VerbsSource(VerbsSourceOptions options, verbs::Provider& provider,
                         TargetMembershipFactory memberships)
    : options_(std::move(options)),
      memberships_(std::move(memberships)),
      host_memory_(make_host_payload_memory()) {
    if (options_.targets.empty()) {
        throw std::runtime_error("no device to capture on");
    }
    // Two targets on one port share its flow table. Only two netdevs with one
    // VLAN tag each, of different ids, get rules apart (the rules match the
    // VID, kernel hw/mlx5/fs.c parse_flow_attr: cvlan_tag, first_vid). Any
    // other pair overlaps: the same port twice (by two names, or a name and
    // its address) or a QinQ pair (two tags: no VID is matched, so the rules
    // are identical) installs the same rules twice, and mlx5 adds the second
    // destination to the same flow-table entry (fs_core.c add_rule_fg), so
    // every frame reaches both engines and is written twice; a parent and its
    // VLAN put their rules in two flow groups, and whichever group matches
    // first takes the frames while the other lane starves (verbs-mlx5-2.md
    // N6, verbs-mlx5-3.md R6).
    for (std::size_t i = 0; i < options_.targets.size(); ++i) {
        for (std::size_t j = 0; j < i; ++j) {
            const CaptureTarget& a = options_.targets[j];
            const CaptureTarget& b = options_.targets[i];
            if (a.device != b.device || a.port != b.port) {
                continue;
            }
            const bool apart = a.vlan_ids.size() == 1 && b.vlan_ids.size() == 1 &&
                               a.vlan_ids.front() != b.vlan_ids.front();
            if (apart) {
                continue;
            }
            const std::string na = a.netdev.empty() ? a.device : a.netdev;
            const std::string nb = b.netdev.empty() ? b.device : b.netdev;
            if (a.vlan_ids == b.vlan_ids && a.vlan_ids.size() < 2) {
                throw UsageError(fmt::format(
                    "-i {} and -i {} are the same port ({} port {}): each frame would be "
                    "captured twice; give each port once",
                    na, nb, a.device, a.port));
            }
            throw UsageError(fmt::format(
                "-i {} and -i {} share {} port {} and their flow rules overlap ({}): a frame "
                "would reach both or only one; capture the port once, or give only VLAN "
                "netdevs of one tag each, of different ids",
                na, nb, a.device, a.port,
                a.vlan_ids.size() > 1 || b.vlan_ids.size() > 1
                    ? "a netdev with two VLAN tags is matched without its ids"
                    : "an untagged netdev's rules also match its VLANs' frames"));
        }
    }
    for (const auto& target : options_.targets) {
        auto part = std::make_unique<Part>();
        part->target = target;
        part->device = provider.open(target.device, target.port);
        parts_.push_back(std::move(part));
    }
}

VerbsSource::~VerbsSource() {
    // Left by an exception while the poll threads ran: stop them (a running
    // std::thread would terminate the process).
    halt_ = true;
    halt_.notify_all();
    for (auto& p : parts_) {
        if (p->thread.joinable()) {
            p->thread.join();
        }
    }
}

// --gpu (or its stand-in) gives the payload memory; without it slots are
// host memory.
bool VerbsSource::lends_device_memory() const {
    return options_.payload != nullptr;
}

std::string VerbsSource::input() const {
    std::string input;
    for (const auto& t : options_.targets) {
        input += (input.empty() ? "" : ",") + fmt::format("{}:{}({})", t.device, t.port, t.netdev);
    }
    return input;
}

std::size_t VerbsSource::lanes() const {
    return parts_.size();
}

std::string VerbsSource::lane_prefix(std::size_t lane) const {
    if (parts_.size() < 2) {
        return {};
    }
    // Two VLANs of one port are two lanes: their files apart too.
    const CaptureTarget& t = parts_[lane]->target;
    return fmt::format("_{}p{}{}{}", t.device, t.port, t.vlan_ids.empty() ? "" : "v",
                       format_vlan_ids(t.vlan_ids));
}

void VerbsSource::connect(std::span<const SourceLane> lanes) {
    for (std::size_t i = 0; i < parts_.size(); ++i) {
        Part& part = *parts_[i];
        part.ledger = lanes[i].ledger;
        if (options_.nic_counters) {
            part.counters = std::make_unique<NicCounters>(options_.sysfs_root, part.target.device,
                                                          part.target.port, part.target.netdev);
        }
        MembershipFactory join;
        if (memberships_) {
            join = [this, target = part.target](const Endpoint& g) {
                return memberships_(target, g);
            };
        }
        EngineOptions engine = options_.engine;
        // The netdev's VLAN tags: matched by the rules, and the header slot
        // sized for them unless --vlan-tags says otherwise (an untagged
        // netdev keeps the options' count).
        engine.vlan_ids = part.target.vlan_ids;
        if (!engine.vlan_tags_given && !part.target.vlan_ids.empty()) {
            engine.vlan_tags = static_cast<std::uint32_t>(part.target.vlan_ids.size());
        }
        if (options_.phc) {
            engine.phc = options_.phc(part.target, engine.phc_missing);
        }
        part.engine = std::make_unique<VerbsEngine>(
            *part.device, engine, *lanes[i].demux, *part.ledger,
            options_.payload != nullptr ? *options_.payload : *host_memory_, join);
        part.engine->set_live(lanes[i].live);
    }
}

void VerbsSource::reconnect(std::span<const SourceLane> lanes) {
    for (std::size_t i = 0; i < parts_.size(); ++i) {
        Part& part = *parts_[i];
        part.ledger = lanes[i].ledger;
        if (part.engine) {
            part.engine->reconnect(*lanes[i].demux, *lanes[i].ledger, lanes[i].live);
        }
    }
}

Source::BlockPlan VerbsSource::block_plan() const {
    BlockPlan plan;
    for (const Endpoint& g : options_.engine.groups) {
        for (const std::uint32_t a : options_.engine.antennas) {
            plan.expected.push_back({g, a});
        }
    }
    plan.max_payload_bytes = max_payload_bytes(options_.engine);
    return plan;
}

void VerbsSource::start() {
    // Counters first, so that everything the rules steer is inside the window.
    for (auto& p : parts_) {
        if (p->counters) {
            p->counters->snapshot_start();
            p->missing_at_start = p->counters->missing();
            for (const auto& name : p->counters->missing()) {
                p->ledger->add_note(fmt::format("{}: drop counter {} cannot be read",
                                                p->device->caps().name, name));
            }
        }
    }
    for (auto& p : parts_) {
        p->engine->start();
    }
    std::size_t parts_started = 0;
    for (auto& p : parts_) {
        Part* part = p.get();
        const int cpu = parts_started < options_.cpus.size() ? options_.cpus[parts_started] : -1;
        ++parts_started;
        part->cpu = cpu;
        part->thread = std::thread([part, halt = &halt_, cpu] {
            if (cpu >= 0) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(static_cast<unsigned>(cpu), &set);
                if (const int err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set)) {
                    part->error = fmt::format("cannot pin the poll thread to cpu {}: {}", cpu,
                                              std::strerror(err));
                    part->done.store(true);
                    halt->wait(false);
                    return;
                }
            }
            try {
                part->engine->run(*halt);
            } catch (const std::exception& e) {
                part->error = e.what();
            }
            part->done.store(true);
            // Every device tears down on its own thread at once, so no device
            // waits, joined and steering but unpolled, while another drains.
            halt->wait(false);
            std::string stop_error;
            try {
                part->engine->stop();  // leave the groups, drain, destroy the rules
            } catch (const std::exception& e) {
                stop_error = e.what();
            }
            if (part->engine->stats().device_fatal && part->error.empty()) {
                // The device's fault is the run's error, whatever failed
                // after it (the engine notes that).
                part->error = fmt::format(
                    "{}: the device reported a fatal error; the capture "
                    "stopped (check dmesg and the NIC firmware)",
                    part->device->caps().name);
            }
            if (!stop_error.empty()) {
                if (part->error.empty()) {
                    part->error = stop_error;
                } else {
                    part->ledger->add_note(fmt::format("{}: while stopping: {}",
                                                       part->device->caps().name, stop_error));
                }
            }
        });
    }
}

bool VerbsSource::step(std::uint64_t /*limit*/, std::chrono::milliseconds max_wait,
                       const std::atomic<bool>& /*stop*/) {
    std::this_thread::sleep_for(std::min(max_wait, std::chrono::milliseconds(2)));
    for (const auto& p : parts_) {
        if (p->done.load()) {
            return false;
        }
    }
    return true;
}

std::uint64_t VerbsSource::frames() const {
    std::uint64_t frames = 0;
    for (const auto& p : parts_) {
        frames += p->engine->frames_published();
    }
    return frames;
}

void VerbsSource::tick(RunInfo& info) {
    // Once a second, off the poll threads: the NIC counters, and the
    // watchdog for streams that went silent while the NIC counts them.
    for (auto& p : parts_) {
        if (p->counters) {
            p->counters->snapshot();
        }
        if (options_.watchdog && !p->done.load()) {
            for (const auto& alarm : p->engine->watchdog()) {
                ++info.watchdog_alarms;
                std::fprintf(stderr, "ibvcap capture: watchdog: %s\n", alarm.c_str());
            }
        }
    }
}

SourceFigures VerbsSource::figures() const {
    // Summed over the devices, from what the poll threads publish for other
    // threads:
    //   packets  VerbsEngine::frames_published();
    //   bytes    VerbsEngine::bytes_published() (no counter in sysfs has the
    //            raw-packet QPs' bytes: the netdev's rx_bytes are the
    //            kernel's own rings; mlx5's port_rcv_data counts RoCE only);
    //   drops    the NIC and netdev drop counters read once a second
    //            (out_of_buffer, rx_missed_errors, ...). Work-completion
    //            errors and the flow rules' undelivered counts are in the
    //            engine's poll-thread state: the summary has them, the line not;
    //   slots    VerbsEngine::slots_held().
    SourceFigures f;
    std::uint64_t bytes = 0;
    std::uint64_t slots = 0;
    for (const auto& p : parts_) {
        f.packets += p->engine->frames_published();
        bytes += p->engine->bytes_published();
        slots += p->engine->slots_held();
        if (p->counters) {
            f.drops += nic_drops_so_far(*p->counters);
        }
    }
    f.bytes = bytes;
    f.slots_held = slots;
    return f;
}

std::vector<SourceCounter> VerbsSource::witnesses() const {
    std::vector<SourceCounter> out;
    for (const auto& p : parts_) {
        const std::string prefix = p->device->caps().name + "/";
        if (p->counters) {
            for (auto& c : p->counters->to_source_counters(prefix)) {
                out.push_back(std::move(c));
            }
        }
        if (!p->engine) {
            continue;
        }
        for (auto& c : p->engine->witnesses(prefix)) {
            out.push_back(std::move(c));
        }
    }
    return out;
}

void VerbsSource::stop(std::optional<std::uint64_t> /*remaining*/) {
    halt_ = true;
    halt_.notify_all();
    for (auto& p : parts_) {
        if (p->thread.joinable()) {
            p->thread.join();
        }
    }
}

void VerbsSource::report(std::span<const SourceLane> /*lanes*/, RunInfo& info) {
    std::vector<DeviceResources> resources;
    for (const auto& p : parts_) {
        if (p->engine) {
            resources.push_back(p->engine->resources());
        }
    }
    info.resources = resource_account(resources);
    for (auto& p : parts_) {
        Ledger& ledger = *p->ledger;
        if (!p->error.empty()) {
            ledger.set_incomplete(p->error);
            info.error = info.error.empty() ? p->error : info.error;
        }
        p->engine->report_to(ledger);
        const EngineStats& es = p->engine->stats();
        info.polling.push_back(
            PollFigures{fmt::format("{}:{}", p->device->caps().name, p->device->caps().port),
                        es.polls, es.empty_polls, es.frames, p->cpu});
        info.clocks.push_back(p->engine->clock_figures());
        for (auto& c : p->engine->flow_counters()) {
            ledger.add_source_counter(std::move(c));
        }
        if (p->counters) {
            p->counters->snapshot();
            // A drop counter that went away during the run (an ethtool
            // statistic gone from the driver's set).
            for (const auto& name : p->counters->missing()) {
                if (std::find(p->missing_at_start.begin(), p->missing_at_start.end(), name) ==
                    p->missing_at_start.end()) {
                    ledger.add_note(fmt::format("{}: drop counter {} cannot be read",
                                                p->device->caps().name, name));
                }
            }
            for (const auto& note : p->counters->notes()) {
                ledger.add_note(fmt::format("{}: {}", p->device->caps().name, note));
            }
            for (auto& c : p->counters->to_source_counters(p->device->caps().name + "/")) {
                ledger.add_source_counter(std::move(c));
            }
        }
    }
}

}  // namespace ibvcap
