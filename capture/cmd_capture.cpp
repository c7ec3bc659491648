// ibvcap capture: live capture through the verbs engine (mlx5 raw-packet QPs),
// or through libpcap (--source pcap) on any interface.
#include <fmt/format.h>
#include <sched.h>

#include <cstdio>
#include <map>
#include <memory>
#include <tuple>

#include "capture/cli.hpp"
#include "gpu/gpu.hpp"
#include "lib/host/devices.hpp"
#include "lib/run/verbs_capture.hpp"
#include "lib/sinks/block_consumer.hpp"
#include "lib/sources/igmp.hpp"
#include "lib/sources/pcap_live.hpp"

namespace ibvcap::cli {

namespace {

// argv with `OPTION N` (N all digits) rewritten as `OPTION=N`.
std::vector<std::string> join_optional_value(int argc, char** argv, std::string_view option) {
    std::vector<std::string> out;
    for (int i = 0; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == option && i + 1 < argc) {
            const std::string_view next = argv[i + 1];
            if (!next.empty() && next.find_first_not_of("0123456789") == std::string_view::npos) {
                out.push_back(std::string(a) + "=" + std::string(next));
                ++i;
                continue;
            }
        }
        out.emplace_back(a);
    }
    return out;
}

// The GPU payload path (--gpu): block rings per antenna in GPU memory, fed by
// the demux, and a consumer that takes each block (and with --gpu-verify
// checks the generator's pattern on the GPU). --gpu-standin runs the same path
// with the rings in host memory and the check on the CPU: for tests, and for
// hosts without a GPU that want the block ring's accounting.
struct GpuPath {
    // What ended the copy thread, the consumer or a disk thread (first, so
    // that it outlives them all); the run watches it (lib/fault.hpp).
    Faults faults;
    std::unique_ptr<PayloadMemory> payload;  // receive payload slots (verbs source)
    std::unique_ptr<BlockSink> sink;
    std::unique_ptr<BlockConsumer> consumer;
    std::string mode;
};

std::unique_ptr<GpuPath> make_gpu_path(const cxxopts::ParseResult& args, const std::string& nic) {
    const bool standin = args.count("gpu-standin") > 0;
    const bool gpu = args.count("gpu") > 0 || args.count("save-gpu") > 0;
    if (standin && gpu) {
        throw UsageError("--gpu-standin replaces the GPU: give it or --gpu, not both");
    }
    if (!gpu && !standin) {
        for (const char* name :
             {"gpu-verify", "frames-per-block", "gpu-blocks", "block-threads", "cuda-dev"}) {
            if (args.count(name)) {
                throw UsageError(fmt::format("--{} needs the GPU payload path: add --gpu", name));
            }
        }
        return nullptr;
    }
    const int id = args.count("gpu") ? args["gpu"].as<int>() : args["cuda-dev"].as<int>();
    auto path = std::make_unique<GpuPath>();
    BlockSinkOptions bo;
    bo.ring.frames_per_block = args["frames-per-block"].as<std::uint32_t>();
    bo.ring.blocks = args["gpu-blocks"].as<std::uint32_t>();
    bo.ring.threads = args["block-threads"].as<std::uint16_t>();
    if (bo.ring.frames_per_block == 0 || bo.ring.blocks < 2 || bo.ring.threads == 0) {
        throw UsageError(
            "--frames-per-block and --block-threads must be at least 1, "
            "--gpu-blocks at least 2");
    }
    BlockCheck check;
    if (standin) {
        path->mode = "block rings in host memory (--gpu-standin)";
        auto payload = std::make_unique<StandinDevicePayloadMemory>();
        // Its block memory logs into the payload stand-in's log: both are
        // "the GPU" (lib/device_calls.hpp).
        bo.memory = [log = &payload->log()] { return make_host_block_memory(log); };
        path->payload = std::move(payload);
        if (args.count("gpu-verify")) {
            check = check_block_on_host;
        }
    } else {
        const gpu::GpuInfo info = gpu::probe_gpu(id, nic);  // one line naming the fix
        fmt::print("{}\n", gpu::format_gpu_info(info));
        path->mode = fmt::format("block rings on GPU {}", id);
        path->payload = gpu::make_gpu_payload_memory(id);
        bo.memory = [id] { return gpu::make_device_block_memory(id); };
        if (args.count("gpu-verify")) {
            // One scratch per ring shape (frames per block, threads, payload
            // bytes), used only on the consumer thread. Rings are per (group,
            // antenna) and one antenna's rings in two groups can differ in
            // payload size, so the antenna alone is no key; verify_pattern is
            // synchronous, so rings of one shape can share a scratch.
            using Shape = std::tuple<std::uint32_t, std::uint16_t, std::uint32_t>;
            auto scratch = std::make_shared<std::map<Shape, gpu::KernelScratch>>();
            check = [id, scratch](const Block& b, const BlockRingOptions& o, std::uint32_t ant) {
                const Shape shape{o.frames_per_block, o.threads, o.payload_bytes};
                auto it = scratch->find(shape);
                if (it == scratch->end()) {
                    it = scratch->try_emplace(shape, id, o).first;
                }
                return gpu::verify_pattern(b, o, ant, it->second);
            };
        }
    }
    bo.faults = &path->faults;
    path->sink = std::make_unique<BlockSink>(bo);
    path->consumer = std::make_unique<BlockConsumer>(*path->sink, check, &path->faults);
    return path;
}

// After the run: the consumer takes what the flushed rings hold; the block
// accounting and any pattern mismatch join the ledger.
void finish_gpu_path(GpuPath* path, RunOutcome& outcome, bool verify) {
    if (path == nullptr) {
        return;
    }
    path->consumer->finish();
    path->sink->report_to(outcome.ledger);
    if (path->payload && outcome.info.source == "verbs") {
        outcome.ledger.add_note(path->payload->describe());  // which mode ran, and why
    }
    outcome.ledger.add_note(fmt::format("{}: {} blocks consumed{}", path->mode,
                                        path->consumer->blocks(),
                                        verify ? fmt::format(", {} payload bytes off the "
                                                             "generator's pattern",
                                                             path->consumer->mismatched_bytes())
                                               : std::string()));
    if (const std::uint64_t n = path->consumer->unchecked(); n > 0) {
        outcome.ledger.add_note(fmt::format(
            "{} blocks were taken but not checked: a check failed and no further GPU work was "
            "issued",
            n));
    }
    outcome.ledger.add_payload_mismatches(path->consumer->mismatched_bytes());
    outcome.exit_code = exit_code_for(outcome.ledger, outcome.info);
    apply_faults(path->faults, outcome);  // the consumer ran on after the capture
}

// --source pcap: one interface, libpcap's ring, the kernel's IGMP joins.
int capture_pcap(const cxxopts::ParseResult& args, const CommonOptions& common,
                 const DemuxOptions& demux, const std::vector<std::string>& interfaces) {
    // Options that only mean something to the verbs engine.
    for (const char* name : {"hw-demux", "no-split", "vlan-tags", "ring-depth", "num-blocks", "cpu",
                             "no-flow-counters", "poll-batch", "repost-batch", "max-frame"}) {
        if (args.count(name)) {
            throw UsageError(fmt::format("--{} applies to --source verbs only", name));
        }
    }
    if (interfaces.size() != 1) {
        throw UsageError(
            fmt::format("--source pcap captures on one interface; {} -i given", interfaces.size()));
    }
    const NetInterface nif = resolve_interface(interfaces.front());
    PcapCaptureRequest request;
    request.writer = common.writer;
    request.writer.abandon = &urgent_flag();
    request.interface = nif.name;
    request.interface_ipv4 = nif.ipv4.front();  // resolve_interface guarantees one
    request.demux = demux;
    request.count = common.count;
    request.duration_s = args["duration"].as<double>();
    request.sysfs_root = args["sysfs-root"].as<std::string>();
    request.stats = common.quiet ? nullptr : stderr;  // the live stats line
    if (common.verbose) {
        request.observer = print_frame;
    }
    const MembershipFactory join = [&request](const Endpoint& group) {
        return kernel_membership(group, request.interface, request.interface_ipv4);
    };
    const auto gpu_path = make_gpu_path(args, nif.name);
    request.blocks = gpu_path ? gpu_path->sink.get() : nullptr;
    if (gpu_path) {
        request.writer.faults = &gpu_path->faults;
    }
    install_stop_handler();
    RunOutcome outcome = run_pcap_capture(request, join, stop_flag());
    finish_gpu_path(gpu_path.get(), outcome, args.count("gpu-verify") > 0);
    return finish_run(outcome, common.report_path, common.quiet);
}

}  // namespace

int cmd_capture(int argc, char** argv) {
    cxxopts::Options options(
        "ibvcap capture",
        "Capture CODIF multicast streams through mlx5 raw-packet QPs, or libpcap (--source pcap).");
    options.positional_help("GROUP:PORT...");
    // clang-format off
    options.add_options()
        ("i,interface", "netdev name or IPv4 address of an mlx5 port (repeatable: one poll thread per device; one only with --source pcap)", cxxopts::value<std::vector<std::string>>(), "IF")
        ("source", "verbs (mlx5 raw-packet QPs) or pcap (any NIC, through libpcap)", cxxopts::value<std::string>()->default_value("verbs"), "SOURCE")
        ("hw-demux", "one QP and flow rule per (group, antenna): the NIC demultiplexes by source IP")
        ("duration", "stop after SECONDS", cxxopts::value<double>()->default_value("0"), "SECONDS")
        ("ring-depth", "receive work requests per QP", cxxopts::value<std::uint32_t>()->default_value("4096"), "N")
        ("poll-batch", "completions per poll", cxxopts::value<std::uint32_t>()->default_value("64"), "N")
        ("repost-batch", "receive WRs re-posted together", cxxopts::value<std::uint32_t>()->default_value("32"), "N")
        ("no-split", "one SGE per frame in host memory instead of the header/payload split")
        ("vlan-tags", "VLAN tags on the wire (sizes the header SGE)", cxxopts::value<std::uint32_t>()->default_value("0"), "N")
        ("max-frame", "largest Ethernet frame expected, bytes (MTU 9000 + header + two VLAN tags)", cxxopts::value<std::uint32_t>()->default_value("9022"), "BYTES")
        ("cpu", "pin the poll thread of the i-th -i interface to the i-th CPU (repeatable)", cxxopts::value<std::vector<int>>(), "CPU")
        ("no-flow-counters", "create the flow rules without a count action (for devices that refuse it)")
        ("num-devices", "prototype alias: the number of -i interfaces given", cxxopts::value<unsigned>(), "N")
        ("num-multicast-groups", "prototype alias: the number of GROUP:PORT given", cxxopts::value<unsigned>(), "N")
        ("num-antennas", "prototype alias: the most antennas to expect", cxxopts::value<unsigned>(), "N")
        ("num-blocks", "prototype alias of --ring-depth", cxxopts::value<std::uint32_t>(), "N")
        ("sysfs-root", "where sysfs is (tests)", cxxopts::value<std::string>()->default_value("/sys"), "DIR")
        ("gpu", "GPU payload path on GPU ID: per-antenna block rings in GPU memory (--gpu=ID; default 0)", cxxopts::value<int>()->implicit_value("0"), "ID")
        ("save-gpu", "prototype alias of --gpu, with the GPU from --cuda-dev")
        ("cuda-dev", "the GPU for --save-gpu", cxxopts::value<int>()->default_value("0"), "ID")
        ("gpu-verify", "check every block against the generator's payload pattern; mismatches are loss")
        ("gpu-standin", "the GPU payload path with the block rings in host memory (tests, GPU-less hosts)")
        ("frames-per-block", "frame times per block of the block rings", cxxopts::value<std::uint32_t>()->default_value("256"), "N")
        ("gpu-blocks", "blocks per antenna ring", cxxopts::value<std::uint32_t>()->default_value("16"), "N")
        ("block-threads", "CODIF threads per antenna in a block", cxxopts::value<std::uint16_t>()->default_value("2"), "N");
    // clang-format on
    add_common_options(options, "GROUP:PORT to capture");
    // DESIGN §6 spells it `--gpu [ID]`: cxxopts takes an optional value only
    // as --gpu=ID, so a GPU number right after --gpu is joined to it.
    std::vector<std::string> joined = join_optional_value(argc, argv, "--gpu");
    std::vector<char*> argv2;
    for (auto& a : joined) {
        argv2.push_back(a.data());
    }
    const auto args = parse(options, static_cast<int>(argv2.size()), argv2.data());
    if (args.count("help")) {
        fmt::print("{}", options.help());
        return kExitZeroLoss;
    }
    if (!args.count("groups")) {
        throw UsageError("give at least one GROUP:PORT to capture, e.g. 239.17.0.1:36001");
    }
    const CommonOptions common = read_common_options(args);
    CaptureRequest request;
    request.writer = common.writer;
    request.writer.abandon = &urgent_flag();
    request.demux = common.demux;
    request.engine.groups = common.demux.groups;
    request.engine.antennas = common.demux.antennas;
    const std::string source = args["source"].as<std::string>();
    if (source != "verbs" && source != "pcap") {
        throw UsageError(fmt::format("unknown --source '{}' (valid: verbs, pcap)", source));
    }
    const auto interfaces = args.count("interface")
                                ? args["interface"].as<std::vector<std::string>>()
                                : std::vector<std::string>{};
    if (interfaces.empty()) {
        throw UsageError("-i IF is required (the netdev name or IPv4 address to capture on)");
    }
    if (args.count("num-devices") && args["num-devices"].as<unsigned>() != interfaces.size()) {
        throw UsageError(fmt::format("--num-devices {} but {} -i interfaces given",
                                     args["num-devices"].as<unsigned>(), interfaces.size()));
    }
    if (args.count("num-multicast-groups") &&
        args["num-multicast-groups"].as<unsigned>() != request.engine.groups.size()) {
        throw UsageError(fmt::format("--num-multicast-groups {} but {} GROUP:PORT given",
                                     args["num-multicast-groups"].as<unsigned>(),
                                     request.engine.groups.size()));
    }
    if (args.count("num-antennas")) {
        const unsigned n = args["num-antennas"].as<unsigned>();
        if (n == 0 || (!request.demux.antennas.empty() && n != request.demux.antennas.size())) {
            throw UsageError(fmt::format("--num-antennas {} disagrees with the {} --antenna given",
                                         n, request.demux.antennas.size()));
        }
        request.demux.max_antennas = n;
    }
    if (source == "pcap") {
        return capture_pcap(args, common, request.demux, interfaces);
    }
    request.engine.hw_demux = args.count("hw-demux") > 0;
    if (request.engine.hw_demux && request.engine.antennas.empty()) {
        throw UsageError("--hw-demux needs the antennas: give each with --antenna IP");
    }
    request.engine.flow_counters = args.count("no-flow-counters") == 0;
    request.engine.split = args.count("no-split") == 0;
    if (args.count("cpu")) {
        request.cpus = args["cpu"].as<std::vector<int>>();
        if (request.cpus.size() > interfaces.size()) {
            throw UsageError(fmt::format("{} --cpu given for {} -i interfaces", request.cpus.size(),
                                         interfaces.size()));
        }
        for (const int c : request.cpus) {
            if (c < 0 || c >= CPU_SETSIZE) {
                throw UsageError(fmt::format("--cpu {} is not a CPU number", c));
            }
        }
    }
    request.engine.vlan_tags = args["vlan-tags"].as<std::uint32_t>();
    request.engine.max_frame_bytes = args["max-frame"].as<std::uint32_t>();
    request.engine.ring_depth = args.count("num-blocks") ? args["num-blocks"].as<std::uint32_t>()
                                                         : args["ring-depth"].as<std::uint32_t>();
    request.engine.poll_batch = args["poll-batch"].as<std::uint32_t>();
    request.engine.repost_batch = args["repost-batch"].as<std::uint32_t>();
    if (request.engine.vlan_tags > 2) {
        throw UsageError("--vlan-tags must be 0, 1 or 2");
    }
    if (request.engine.max_frame_bytes < 128 || request.engine.max_frame_bytes > 65535) {
        throw UsageError("--max-frame must be 128-65535 bytes");
    }
    if (request.engine.poll_batch == 0 || request.engine.repost_batch == 0 ||
        request.engine.ring_depth < 16) {
        throw UsageError("--poll-batch and --repost-batch must be at least 1, --ring-depth 16");
    }
    request.count = common.count;
    request.duration_s = args["duration"].as<double>();
    request.sysfs_root = args["sysfs-root"].as<std::string>();
    request.stats = common.quiet ? nullptr : stderr;  // the live stats line
    if (common.verbose) {
        request.observer = print_frame;
    }

    auto provider = verbs::make_ibv_provider();
    for (const auto& i : interfaces) {
        request.targets.push_back(verbs_target(*provider, i));
    }
    install_stop_handler();
    const auto gpu_path = make_gpu_path(args, request.targets.front().device);
    request.blocks = gpu_path ? gpu_path->sink.get() : nullptr;
    request.payload = gpu_path ? gpu_path->payload.get() : nullptr;
    if (gpu_path) {
        request.writer.faults = &gpu_path->faults;
    }
    RunOutcome outcome = run_verbs_capture(request, *provider, kernel_memberships(), stop_flag());
    finish_gpu_path(gpu_path.get(), outcome, args.count("gpu-verify") > 0);
    return finish_run(outcome, common.report_path, common.quiet);
}

}  // namespace ibvcap::cli
