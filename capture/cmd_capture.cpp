// ibvcap capture: live capture through the verbs engine (mlx5 raw-packet QPs),
// or through libpcap (--source pcap) on any interface.
#include <fmt/format.h>
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "capture/cli.hpp"
#include "lib/run/capture.hpp"
#include "lib/run/console.hpp"

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

// The directories a capture still writes into once its privileges are
// dropped: the output directory, and those of the report, the run page and the metrics file
// when they are (or will be) regular files there ("-", a FIFO or a device is
// written in place).
std::vector<std::filesystem::path> dirs_written_later(const CommonOptions& common) {
    std::vector<std::filesystem::path> dirs;
    if (!common.outputs.formats.empty()) {
        dirs.emplace_back(common.outputs.output_dir);
    }
    for (const std::string& path : {common.report_path, common.html_path, common.metrics_path}) {
        std::error_code ec;
        if (path.empty() || path == "-" ||
            (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))) {
            continue;
        }
        const auto parent = std::filesystem::path(path).parent_path();
        dirs.push_back(parent.empty() ? std::filesystem::path(".") : parent);
    }
    return dirs;
}

// --gpu, --gpu-standin and their companions as a GpuRequest (mode none when
// neither is given).
GpuRequest gpu_request(const cxxopts::ParseResult& args) {
    const bool standin = args.count("gpu-standin") > 0;
    const bool gpu = args.count("gpu") > 0 || args.count("save-gpu") > 0;
    if (standin && gpu) {
        throw UsageError("--gpu-standin replaces the GPU: give it or --gpu, not both");
    }
    GpuRequest r;
    if (args.count("gpu-standin-pci") && !standin) {
        throw UsageError("--gpu-standin-pci gives --gpu-standin a GPU address: add --gpu-standin");
    }
    if (!gpu && !standin) {
        for (const char* name : {"gpu-verify", "frames-per-block", "gpu-blocks", "block-threads",
                                 "cuda-dev", "tracefs-root"}) {
            if (args.count(name)) {
                throw UsageError(fmt::format("--{} needs the GPU payload path: add --gpu", name));
            }
        }
        return r;
    }
    if (args.count("ordered")) {
        // The reorder window copies frames on the poll thread, which never
        // reads GPU memory (lib/core/frame.hpp, Frame::gather).
        throw UsageError(fmt::format(
            "--ordered holds each stream's frames in host memory, but {} puts the payload in "
            "GPU memory: leave out --ordered, or {}",
            standin ? "--gpu-standin" : "--gpu", standin ? "--gpu-standin" : "--gpu"));
    }
    r.mode = standin ? GpuRequest::Mode::standin : GpuRequest::Mode::device;
    r.device = args.count("gpu") ? args["gpu"].as<int>() : args["cuda-dev"].as<int>();
    if (r.device < 0) {
        throw UsageError(fmt::format("bad {} {}: expected {}",
                                     args.count("gpu") ? "--gpu" : "--cuda-dev", r.device,
                                     valid_range("gpu")));
    }
    r.verify = args.count("gpu-verify") > 0;
    r.ring.frames_per_block = args["frames-per-block"].as<std::uint32_t>();
    r.ring.blocks = args["gpu-blocks"].as<std::uint32_t>();
    r.ring.threads = args["block-threads"].as<std::uint16_t>();
    if (r.ring.frames_per_block == 0 || r.ring.blocks < 2 || r.ring.threads == 0) {
        throw UsageError(
            "--frames-per-block and --block-threads must be at least 1, "
            "--gpu-blocks at least 2");
    }
    r.info = stdout;  // the GPU's description line, before the capture starts
    if (args.count("gpu-standin-pci")) {
        r.standin_pci = args["gpu-standin-pci"].as<std::string>();
    }
    if (args.count("tracefs-root")) {
        r.tracefs_root = args["tracefs-root"].as<std::string>();
    }
    return r;
}

}  // namespace

int cmd_capture(int argc, char** argv) {
    cxxopts::Options options(
        "ibvcap capture",
        "Capture CODIF, VDIF or VTP multicast streams through mlx5 raw-packet QPs, or libpcap "
        "(--source pcap).");
    options.positional_help("GROUP:PORT[/FORMAT]...");
    // clang-format off
    options.add_options()
        ("i,interface", "netdev name or IPv4 address of an mlx5 port (repeatable: one poll thread per device; one only with --source pcap)", cxxopts::value<std::vector<std::string>>(), "IF")
        ("source", "verbs (mlx5 raw-packet QPs) or pcap (any NIC, through libpcap)", cxxopts::value<std::string>()->default_value("verbs"), "SOURCE")
        ("hw-demux", "one flow rule per (group, antenna): the NIC demultiplexes by source IP")
        ("duration", "stop after SECONDS", cxxopts::value<double>(), "SECONDS")
        ("ring-depth", "receive work requests per QP", cxxopts::value<std::uint32_t>()->default_value("4096"), "N")
        ("queues", "receive QPs per device, the groups dealt to them in blocks (default 1: every group's rules share one ring; as many as the groups: a QP per group)", cxxopts::value<std::uint32_t>(), "N")
        ("poll-batch", "completions per poll", cxxopts::value<std::uint32_t>()->default_value("64"), "N")
        ("repost-batch", "receive WRs re-posted together", cxxopts::value<std::uint32_t>()->default_value("32"), "N")
        ("no-split", "one SGE per frame in host memory instead of the header/payload split")
        ("vlan-tags", "VLAN tags on the wire (sizes the header SGE; default: the -i netdev's own, 1 for a VLAN netdev, 0 otherwise)", cxxopts::value<std::uint32_t>(), "N")
        ("max-frame", "largest Ethernet frame expected, bytes (MTU 9000 + header + two VLAN tags)", cxxopts::value<std::uint32_t>()->default_value("9022"), "BYTES")
        ("cpu", "pin the poll thread of the i-th -i interface to the i-th CPU (repeatable)", cxxopts::value<std::vector<int>>(), "CPU")
        ("no-flow-counters", "create the flow rules without a count action (for devices that refuse it)")
        ("timestamps", "frame times: utc (the NIC clock measured against CLOCK_REALTIME each second and converted, slewed), nic (the NIC's own clock as it gives it) or host (no NIC timestamps: CLOCK_REALTIME when each batch is polled)", cxxopts::value<std::string>()->default_value("utc"), "utc|nic|host")
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
        ("block-threads", "threads per antenna in a block (the streams' thread ids 0..N-1)", cxxopts::value<std::uint16_t>()->default_value("2"), "N")
        ("gpu-standin-pci", "the PCI address --gpu-standin's GPU has for the XID witness (tests)", cxxopts::value<std::string>(), "ADDR")
        ("user", "after setup, run as this user (from root; every capability is dropped either way)", cxxopts::value<std::string>(), "NAME")
        ("control", "a Unix socket (mode 0660) that takes scans as they come: ibvcap ctl SOCKET status|next|start NAME [STOP]|stop; the capture stays up between scans and after the last, writing nothing then, until it is stopped", cxxopts::value<std::string>(), "SOCKET")
        ("tracefs-root", "where tracefs is, for the GPU XID witness (default /sys/kernel/tracing, else /sys/kernel/debug/tracing)", cxxopts::value<std::string>(), "DIR");
    // clang-format on
    add_common_options(options,
                       "GROUP:PORT[@SOURCE,...][/FORMAT] to capture (FORMAT: codif, vdif, vtp)");
    // docs/formats.md, "Command line" spells it `--gpu [ID]`: cxxopts takes an optional value only
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
    LiveCaptureRequest request;
    request.writer = common.writer;
    request.writer.abandon = &urgent_flag();
    request.demux = common.demux;
    request.outputs = common.outputs;
    request.expect = common.expect;
    request.expect_options = common.expect_options;
    request.count = common.count;
    request.metrics_path = common.metrics_path;
    request.metrics_interval_s = common.metrics_interval_s;
    request.duration_s = option_or(args, "duration", 0.0);
    check_positive(args, "duration", request.duration_s, "--duration",
                   "leave it out to capture until Ctrl-C");
    request.window_grace_s = common.window_grace_s;
    request.scan_name = common.scan_name;
    if (auto& window = request.demux.window) {
        const bool has_start = window->has_start();
        if (args.count("duration")) {
            // The window's length from --start-at: the run lasts to its stop.
            if (!has_start || window->has_stop()) {
                throw UsageError(has_start ? "give --stop-at or --duration, not both"
                                           : "--duration with --stop-at: give --start-at (the "
                                             "window is --start-at plus --duration)");
            }
            window->stop_ns =
                window->start_ns + static_cast<std::int64_t>(request.duration_s * 1e9);
            request.duration_s = 0;
        }
        const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count();
        if (window->has_stop() && window->stop_ns <= now) {
            throw UsageError(fmt::format(
                "the window's stop {} is past (now {}): none of its frames can come; {}, or read "
                "a recording with ibvcap read -r FILE",
                format_utc_instant(window->stop_ns), format_utc_instant(now),
                args.count("schedule")
                    ? fmt::format("scan {} is over: give --scan next (the next to come)",
                                  request.scan_name)
                    : std::string("give a later --stop-at")));
        }
    }
    request.sysfs_root = args["sysfs-root"].as<std::string>();
    request.stats = common.quiet ? nullptr : stderr;  // the live stats line
    request.counts_request = &counts_flag();
    request.stop_signal = &stop_signal();
    request.notices = &stderr_console();  // "stopping: writing 120.0 MiB; ..."
    if (common.verbose) {
        request.observer = print_frame;
    }
    const std::string source = args["source"].as<std::string>();
    if (source != "verbs" && source != "pcap") {
        throw UsageError(fmt::format("unknown --source '{}' (valid: verbs, pcap)", source));
    }
    request.interfaces = args.count("interface") ? args["interface"].as<std::vector<std::string>>()
                                                 : std::vector<std::string>{};
    const auto& interfaces = request.interfaces;
    if (interfaces.empty()) {
        throw UsageError("-i IF is required (the netdev name or IPv4 address to capture on)");
    }
    // --writer-memory is shared by the writers of all the -i (one each);
    // left out, it is 1 GiB per -i.
    if (!args.count("writer-memory")) {
        request.writer.memory_bytes *= interfaces.size();
    }
    if (const std::string problem = writer_memory_problem(request.writer, interfaces.size());
        !problem.empty()) {
        throw UsageError(problem);
    }
    if (args.count("num-devices") && args["num-devices"].as<unsigned>() != interfaces.size()) {
        throw UsageError(fmt::format("--num-devices {} but {} -i interfaces given",
                                     args["num-devices"].as<unsigned>(), interfaces.size()));
    }
    for (const Endpoint& g : request.demux.groups) {
        if (is_source_specific(g.ip) && sources_for(request.demux.sources, g) == nullptr) {
            throw UsageError(fmt::format(
                "{0} is in the source-specific range 232.0.0.0/8 (RFC 4607): a network that "
                "routes it forwards it only to joins that name the sender; give it as "
                "{0}@SOURCE[,SOURCE...]",
                g.to_string()));
        }
    }
    if (args.count("num-multicast-groups") &&
        args["num-multicast-groups"].as<unsigned>() != request.demux.groups.size()) {
        throw UsageError(fmt::format("--num-multicast-groups {} but {} GROUP:PORT given",
                                     args["num-multicast-groups"].as<unsigned>(),
                                     request.demux.groups.size()));
    }
    if (args.count("num-antennas")) {
        const unsigned n = args["num-antennas"].as<unsigned>();
        check_positive(args, "num-antennas", n, "--num-antennas",
                       "leave it out to take every antenna that sends");
        if ((!request.demux.antennas.empty() && n != request.demux.antennas.size())) {
            throw UsageError(fmt::format("--num-antennas {} disagrees with the {} --antenna given",
                                         n, request.demux.antennas.size()));
        }
        request.demux.max_antennas = n;
    }
    const std::string timestamps = args["timestamps"].as<std::string>();
    if (timestamps != "utc" && timestamps != "nic" && timestamps != "host") {
        throw UsageError(fmt::format("--timestamps {}: give utc, nic or host", timestamps));
    }
    if (source == "pcap") {
        request.source = LiveCaptureRequest::Source::pcap;
        if (timestamps == "nic") {
            throw UsageError(
                "--timestamps nic applies to --source verbs only (libpcap gives host time)");
        }
        // Options that only mean something to the verbs engine.
        for (const char* name :
             {"hw-demux", "no-split", "vlan-tags", "ring-depth", "num-blocks", "cpu",
              "no-flow-counters", "poll-batch", "repost-batch", "max-frame", "queues"}) {
            if (args.count(name)) {
                throw UsageError(fmt::format("--{} applies to --source verbs only", name));
            }
        }
        if (interfaces.size() != 1) {
            throw UsageError(fmt::format("--source pcap captures on one interface; {} -i given",
                                         interfaces.size()));
        }
    } else {
        EngineOptions& engine = request.engine;
        engine.hw_demux = args.count("hw-demux") > 0;
        if (engine.hw_demux && request.demux.antennas.empty()) {
            throw UsageError("--hw-demux needs the antennas: give each with --antenna IP");
        }
        engine.flow_counters = args.count("no-flow-counters") == 0;
        engine.split = args.count("no-split") == 0;
        engine.frame_time_given = args.count("timestamps") > 0;
        engine.frame_time = timestamps == "nic"    ? FrameTime::nic
                            : timestamps == "host" ? FrameTime::host
                                                   : FrameTime::utc;
        if (args.count("cpu")) {
            request.cpus = args["cpu"].as<std::vector<int>>();
            if (request.cpus.size() > interfaces.size()) {
                throw UsageError(fmt::format("{} --cpu given for {} -i interfaces",
                                             request.cpus.size(), interfaces.size()));
            }
            for (const int c : request.cpus) {
                if (c < 0 || c >= CPU_SETSIZE) {
                    throw UsageError(fmt::format("--cpu {} is not a CPU number", c));
                }
            }
        }
        // Left out, each -i's own tag count (a VLAN netdev's, VerbsSource).
        engine.vlan_tags_given = args.count("vlan-tags") > 0;
        engine.vlan_tags = option_or(args, "vlan-tags", std::uint32_t{0});
        engine.max_frame_bytes = args["max-frame"].as<std::uint32_t>();
        engine.ring_depth = args.count("num-blocks") ? args["num-blocks"].as<std::uint32_t>()
                                                     : args["ring-depth"].as<std::uint32_t>();
        engine.poll_batch = args["poll-batch"].as<std::uint32_t>();
        engine.repost_batch = args["repost-batch"].as<std::uint32_t>();
        engine.queues = option_or(args, "queues", std::uint32_t{0});
        if (args.count("queues") && (engine.queues == 0 || engine.queues > 65535)) {
            throw UsageError("--queues must be 1 to 65535 (receive QPs per device)");
        }
        if (engine.vlan_tags > 2) {
            throw UsageError("--vlan-tags must be 0, 1 or 2");
        }
        if (engine.max_frame_bytes < 128 || engine.max_frame_bytes > 65535) {
            throw UsageError("--max-frame must be 128-65535 bytes");
        }
        if (engine.poll_batch == 0 || engine.repost_batch == 0 || engine.ring_depth < 16) {
            throw UsageError("--poll-batch and --repost-batch must be at least 1, --ring-depth 16");
        }
    }
    request.gpu = gpu_request(args);
    const auto& d = request.demux;
    const bool vdif = std::any_of(d.group_formats.begin(), d.group_formats.end(),
                                  [](StreamFormat f) { return f != StreamFormat::codif; }) ||
                      (d.groups.empty() && d.any_group_format != StreamFormat::codif);
    if (request.gpu.mode != GpuRequest::Mode::none && vdif && d.vdif_frames_per_second == 0) {
        // A learned rate moves a stream's indices once its first second ends
        // (lib/demux/rate.hpp); a block ring made before then would place
        // that second's frames at the provisional ones.
        throw UsageError(
            "the GPU block rings place VDIF frames by their index, which needs the frame rate "
            "from the start: add --vdif-frames-per-second N");
    }
    if (args.count("user")) {
        request.user = args["user"].as<std::string>();
        if (request.user.empty()) {
            throw UsageError("--user needs a user name");
        }
    }
    request.writable_dirs = dirs_written_later(common);
    install_stop_handler();
    // The rings attached and locked before the capture starts: a missing
    // one stops the command with nothing captured.
    std::unique_ptr<DadaSink> dada;
    if (common.dada) {
        DadaOptions o = *common.dada;
        // A GPU ring's blocks (dada_db -g): the stand-in's with --gpu-standin,
        // else the CUDA build's (the stub's says "built without CUDA").
        o.device_opener = request.gpu.mode == GpuRequest::Mode::standin
                              ? standin_dada_opener(nullptr)
                              : gpu::dada_ring_opener();
        dada = std::make_unique<DadaSink>(o);
        request.dada = dada.get();
    }
    if (!common.scans.empty() || args.count("control")) {
        CommonOptions scans = common;
        if (args.count("control")) {
            if (args.count("scan") || request.demux.window) {
                throw UsageError(
                    "--control takes scans as they come: leave out --scan, --start-at and "
                    "--stop-at (a --schedule may give the scans to come)");
            }
            scans.control_path = args["control"].as<std::string>();
        }
        return run_scans(request, scans,
                         args.count("schedule") ? args["schedule"].as<std::string>() : "");
    }
    RunOutcome outcome = run_capture(request, stop_flag());
    outcome.info.frame_lines_dropped = stdout_console().dropped();
    return finish_run(outcome, common);
}

}  // namespace ibvcap::cli
