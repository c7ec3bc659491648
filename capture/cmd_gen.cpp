// ibvcap gen: synthetic CODIF, VDIF or VTP traffic with a known ground truth.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "capture/cli.hpp"
#include "lib/host/devices.hpp"
#include "lib/run/common.hpp"
#include "lib/run/gen.hpp"
#include "lib/run/run_paths.hpp"
#include "lib/traffic/sender.hpp"

namespace ibvcap::cli {

namespace {

// A --vdif-station: two characters ("Ef": the first in the high byte, as
// DiFX packs a station code) or a number, decimal or 0x hex.
std::uint16_t parse_station(const std::string& text) {
    auto printable = [](char c) { return c > ' ' && c < 127; };
    if (text.size() == 2 && printable(text[0]) && printable(text[1]) &&
        !(std::isdigit(static_cast<unsigned char>(text[0])) &&
          std::isdigit(static_cast<unsigned char>(text[1])))) {
        return static_cast<std::uint16_t>(static_cast<unsigned char>(text[0]) << 8 |
                                          static_cast<unsigned char>(text[1]));
    }
    std::size_t used = 0;
    unsigned long value = 0;
    try {
        value = std::stoul(text, &used, 0);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != text.size() || value > 0xFFFF || text[0] == '-' || text[0] == '+') {
        throw UsageError(
            fmt::format("bad --vdif-station '{}': expected two characters (such as Ef) or a "
                        "number, 0 to 65535",
                        text));
    }
    return static_cast<std::uint16_t>(value);
}

// --vdif, --vtp and the VDIF options; CODIF's own options refused with them.
void read_stream_format(const cxxopts::ParseResult& args, GeneratorConfig& config) {
    if (args.count("vdif") && args.count("vtp")) {
        throw UsageError(
            "--vdif and --vtp exclude each other: --vtp is VDIF with a packet sequence number "
            "before each frame");
    }
    config.format = args.count("vtp")    ? StreamFormat::vtp
                    : args.count("vdif") ? StreamFormat::vdif
                                         : StreamFormat::codif;
    const bool vdif = config.is_vdif();
    for (const char* name : {"vdif-frames-per-second", "vdif-legacy", "vdif-edv", "vdif-station"}) {
        if (!vdif && args.count(name)) {  // count() leaves defaults out
            throw UsageError(fmt::format("--{} applies only with --vdif or --vtp", name));
        }
    }
    if (!vdif) {
        return;
    }
    if (args.count("frames-per-period")) {
        throw UsageError(
            "--frames-per-period is CODIF's: with --vdif or --vtp give the frame rate as "
            "--vdif-frames-per-second");
    }
    if (args.count("period")) {
        throw UsageError(
            "--period is CODIF's: a VDIF frame number counts frames within one second (leave "
            "--period out)");
    }
    if (args.count("codif-layout")) {
        throw UsageError(
            "--codif-layout is CODIF's: with --vdif or --vtp, --vdif-legacy gives 16-byte "
            "headers");
    }
    config.vdif.frames_per_second = args["vdif-frames-per-second"].as<std::uint64_t>();
    config.vdif.legacy = args.count("vdif-legacy") != 0;
    const unsigned edv = args["vdif-edv"].as<unsigned>();
    if (edv > 4) {
        throw UsageError(
            fmt::format("bad --vdif-edv {}: expected {} (0 none, 1 NICT, 2 ALMA, 3 VLBA, 4 "
                        "validity mask)",
                        edv, valid_range("vdif-edv")));
    }
    config.vdif.edv = static_cast<std::uint8_t>(edv);
    if (args.count("vdif-station")) {
        for (const auto& s : args["vdif-station"].as<std::vector<std::string>>()) {
            config.vdif.stations.push_back(parse_station(s));
        }
    }
}

// -w FILE and --truth FILE before anything is generated: never one file
// (run_path_collision: exit 2, --overwrite or not), and an existing regular
// file replaced only with --overwrite (exit 1). A FIFO or device is written
// into, as before; -w - is standard output.
void check_gen_files(const cxxopts::ParseResult& args, bool send) {
    std::vector<RunPath> paths;
    if (!send) {
        paths.push_back(
            {"-w", args["write"].as<std::string>(), PathRole::output, "the -w file", "pcap"});
    }
    if (args.count("truth")) {
        const std::string truth = args["truth"].as<std::string>();
        if (truth.empty()) {
            throw UsageError("--truth needs a file name, e.g. truth.json");
        }
        // (written as a file: "-" is one in the current directory)
        paths.push_back({"--truth", truth == "-" ? "./-" : truth, PathRole::output,
                         "the --truth file", "truth"});
    }
    if (const std::string problem = run_path_collision(paths); !problem.empty()) {
        throw UsageError(problem);
    }
    if (args.count("overwrite")) {
        return;
    }
    for (const RunPath& p : paths) {
        struct stat st {};
        if (p.path != "-" && ::stat(p.path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
            throw std::runtime_error(
                p.option == "-w"
                    ? fmt::format("{} exists; add --overwrite to replace it, or choose another "
                                  "-w FILE",
                                  p.path)
                    : fmt::format("{} {} exists; add --overwrite to replace it, or choose another "
                                  "{} FILE",
                                  p.option, p.path, p.option));
        }
    }
}

}  // namespace

int cmd_gen(int argc, char** argv) {
    cxxopts::Options options(
        "ibvcap gen",
        "Generate CODIF, VDIF or VTP multicast traffic with injected faults and a "
        "ground truth: to a pcap file (-w) or live (--send).");
    options.positional_help("[GROUP:PORT...] (default 239.17.0.1:36001)");
    // clang-format off
    options.add_options()
        ("w,write", "write the traffic to this pcap file", cxxopts::value<std::string>(), "FILE")
        ("overwrite", "replace the -w FILE and the --truth FILE if they exist")
        ("send", "send the traffic as live UDP multicast (needs -i; every antenna address must be local)")
        ("i,interface", "with --send: interface to send from (netdev name or IPv4 address)", cxxopts::value<std::string>(), "IF")
        ("rate", "with --send: packets per second (0: as fast as possible)", cxxopts::value<double>()->default_value("0"), "PPS")
        ("duration", "with --send: stop after S seconds, at a frame slot boundary", cxxopts::value<double>(), "S")
        ("ttl", "with --send: multicast TTL", cxxopts::value<int>()->default_value("1"), "N")
        ("loop", "with --send: loop the multicast back to this host (IP_MULTICAST_LOOP)")
        ("truth", "write the ground truth as JSON to FILE", cxxopts::value<std::string>(), "FILE")
        ("antenna", "antenna source IPv4 (repeatable)", cxxopts::value<std::vector<std::string>>(), "IP")
        ("antennas", "number of antennas when no --antenna is given: 10.0.0.11, .12, ...", cxxopts::value<unsigned>()->default_value("6"), "N")
        ("threads", "threads per antenna (thread ids 0..N-1; VDIF: at most 1024)", cxxopts::value<std::uint16_t>()->default_value("2"), "N")
        ("c,count", "frame slots per stream (stream = group, antenna, thread)", cxxopts::value<std::uint64_t>()->default_value("1000"), "N")
        ("burst", "send N consecutive frame slots of one stream, then N of the next (1: one frame of each stream in turn); the order only, the frames and the truth are the same", cxxopts::value<std::uint64_t>()->default_value("1"), "N")
        ("payload", "payload bytes per frame (multiple of 8)", cxxopts::value<std::uint32_t>()->default_value("8192"), "BYTES")
        ("nchan", "channels (VDIF: a power of two)", cxxopts::value<std::uint16_t>()->default_value("16"), "N")
        ("nbits", "bits per sample component", cxxopts::value<unsigned>()->default_value("8"), "N")
        ("real", "real samples (default complex)")
        ("period", "CODIF period in seconds", cxxopts::value<std::uint16_t>()->default_value("1"), "S")
        ("frames-per-period", "CODIF frames per period", cxxopts::value<std::uint64_t>()->default_value("1000"), "N")
        ("epoch", "reference epoch (half-years since 2000)", cxxopts::value<unsigned>()->default_value("52"), "E")
        ("start-seconds", "seconds of the first frame", cxxopts::value<std::uint32_t>()->default_value("0"), "S")
        ("start-frame", "absolute frame offset of the first frame", cxxopts::value<std::uint64_t>()->default_value("0"), "N")
        ("codif-layout", "CODIF header layout: v2 or draft", cxxopts::value<std::string>()->default_value("v2"), "LAYOUT")
        ("vdif", "VDIF frames instead of CODIF (VDIF 1.1.1: a 32-byte header, 16 with --vdif-legacy)")
        ("vtp", "VDIF frames, each after a 64-bit little-endian packet sequence number (VDIF Transport Protocol, jive5ab's udps)")
        ("vdif-frames-per-second", "with --vdif or --vtp: frames per second (frame numbers 0..N-1 in each second; at most 2^24)", cxxopts::value<std::uint64_t>()->default_value("1000"), "N")
        ("vdif-legacy", "with --vdif or --vtp: 16-byte legacy headers")
        ("vdif-edv", "with --vdif or --vtp: extended data version: 0 none, 1 NICT, 2 ALMA, 3 VLBA, 4 validity mask", cxxopts::value<unsigned>()->default_value("0"), "N")
        ("vdif-station", "with --vdif or --vtp: station id of each antenna, in antenna order: two characters (Ef) or a number (repeatable; default AA, AB, ...)", cxxopts::value<std::vector<std::string>>(), "ID")
        ("loss", "probability that a frame is not sent", cxxopts::value<double>()->default_value("0"), "P")
        ("duplicate", "probability that a frame is sent twice", cxxopts::value<double>()->default_value("0"), "P")
        ("reorder", "probability that a frame is sent after its successor", cxxopts::value<double>()->default_value("0"), "P")
        ("invalid", "probability that a frame is sent with its header's invalid bit set", cxxopts::value<double>()->default_value("0"), "P")
        ("seed", "seed for the injected faults", cxxopts::value<std::uint64_t>()->default_value("1"), "N")
        ("vlan", "802.1Q VLAN ID to tag frames with", cxxopts::value<int>()->default_value("-1"), "ID")
        ("q,quiet", "no summary")
        ("h,help", "this help")
        ("groups", "GROUP:PORT destinations", cxxopts::value<std::vector<GroupArgument>>());
    // clang-format on
    options.parse_positional({"groups"});
    const auto args = parse(options, argc, argv);
    if (args.count("help")) {
        fmt::print("{}", options.help());
        return kExitZeroLoss;
    }
    const bool send = args.count("send") != 0;
    if (send && args.count("write")) {
        throw UsageError(
            "-w FILE.pcap and --send exclude each other: write the traffic to a file, or send it");
    }
    if (!send && !args.count("write")) {
        throw UsageError(
            "-w FILE.pcap is required (where to write the traffic), or --send -i IF (send it as "
            "live multicast)");
    }
    if (send && args.count("overwrite") && !args.count("truth")) {
        throw UsageError("--overwrite applies only with -w FILE or --truth FILE");
    }
    if (!send) {
        for (const char* name : {"interface", "rate", "duration", "ttl", "loop"}) {
            if (args.count(name)) {  // count() leaves defaults out
                throw UsageError(fmt::format("--{} applies only with --send", name));
            }
        }
    }
    SendOptions send_options;
    if (send) {
        if (!args.count("interface")) {
            throw UsageError("--send needs -i IF (the interface to send from)");
        }
        if (args["vlan"].as<int>() >= 0) {
            throw UsageError(
                "--vlan cannot be used with --send: a UDP socket cannot tag frames (send through "
                "a VLAN netdev instead: -i IF.ID)");
        }
        send_options.rate_pps = args["rate"].as<double>();
        if (!std::isfinite(send_options.rate_pps) || send_options.rate_pps < 0) {
            throw UsageError("--rate must be a packet rate >= 0 (0: as fast as possible)");
        }
        if (args.count("duration")) {
            send_options.duration_s = args["duration"].as<double>();
            if (!std::isfinite(send_options.duration_s) || send_options.duration_s <= 0) {
                throw UsageError("--duration must be a positive number of seconds");
            }
        }
        send_options.ttl = args["ttl"].as<int>();
        if (send_options.ttl < 0 || send_options.ttl > 255) {
            throw UsageError("--ttl must be 0-255");
        }
        send_options.loop = args.count("loop") != 0;
    }

    GeneratorConfig config;
    config.groups =
        parse_groups(args.count("groups") ? group_arguments(args)
                                          : std::vector<std::string>{"239.17.0.1:36001"});
    if (args.count("antenna")) {
        config.antennas =
            parse_addresses(args["antenna"].as<std::vector<std::string>>(), "--antenna");
    } else {
        const unsigned n = args["antennas"].as<unsigned>();
        if (n == 0 || n > 200) {
            throw UsageError("--antennas must be 1-200");
        }
        for (unsigned i = 0; i < n; ++i) {
            config.antennas.push_back((10u << 24) | (11u + i));  // 10.0.0.11, ...
        }
    }
    config.threads = args["threads"].as<std::uint16_t>();
    config.frames = args["count"].as<std::uint64_t>();
    config.burst = args["burst"].as<std::uint64_t>();
    check_positive(args, "burst", double(config.burst), "--burst",
                   "leave it out for one frame of each stream in turn");
    config.payload_bytes = args["payload"].as<std::uint32_t>();
    config.nchan = args["nchan"].as<std::uint16_t>();
    const unsigned nbits = args["nbits"].as<unsigned>();
    if (nbits == 0 || nbits > 32) {
        throw UsageError("--nbits must be 1-32");
    }
    config.nbits = static_cast<std::uint8_t>(nbits);
    config.complex = args.count("real") == 0;
    read_stream_format(args, config);
    config.period = args["period"].as<std::uint16_t>();
    config.frames_per_period = args["frames-per-period"].as<std::uint64_t>();
    const unsigned epoch = args["epoch"].as<unsigned>();
    if (epoch > 63) {
        throw UsageError("--epoch must be 0-63");
    }
    config.epoch = static_cast<std::uint8_t>(epoch);
    config.start_seconds = args["start-seconds"].as<std::uint32_t>();
    config.start_frame = args["start-frame"].as<std::uint64_t>();
    const auto layout = args["codif-layout"].as<std::string>();
    if (layout == "v2") {
        config.layout = CodifLayout::v2;
    } else if (layout == "draft") {
        config.layout = CodifLayout::draft;
    } else {
        throw UsageError(fmt::format("unknown --codif-layout '{}' (valid: v2, draft)", layout));
    }
    config.loss = args["loss"].as<double>();
    config.duplicate = args["duplicate"].as<double>();
    config.reorder = args["reorder"].as<double>();
    config.invalid = args["invalid"].as<double>();
    config.seed = args["seed"].as<std::uint64_t>();
    config.vlan_id = args["vlan"].as<int>();
    if (args.count("vlan") && config.vlan_id < 0) {
        throw UsageError(
            fmt::format("bad --vlan {}: expected {} (leave it out for untagged "
                        "frames)",
                        config.vlan_id, valid_range("vlan")));
    }
    try {
        config.validate();
    } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
    }

    check_gen_files(args, send);

    Generator generator(config);
    std::string path;
    std::uint64_t packets = 0;
    bool no_reader = false;  // Ctrl-C while -w FIFO waited for its reader
    SendResult sent;
    if (send) {
        // A one-line error when the interface is missing, down or has no IPv4.
        send_options.interface = resolve_interface(args["interface"].as<std::string>()).name;
        path = send_options.interface;
        install_stop_handler();  // SIGINT: stop at the next slot boundary
        sent = send_generated(generator, send_options, stop_flag());
        packets = sent.packets;
    } else {
        path = args["write"].as<std::string>();
        // Ctrl-C or SIGTERM: stop at the next slot boundary, the file whole,
        // its index and the truth of what was written.
        install_stop_handler();
        packets = write_generated_pcap(generator, path, &stop_flag(), &no_reader);
    }
    // After an early stop the truth covers the slots actually sent.
    const auto truth = generator.truth_json();
    if (args.count("truth")) {
        const std::string truth_path = args["truth"].as<std::string>();
        std::ofstream out(truth_path);
        out << truth.dump(2) << "\n";
        if (!out.flush()) {
            throw std::runtime_error(fmt::format("cannot write {}", truth_path));
        }
    }
    // With -w - the pcap is on standard output: the summary goes to stderr.
    std::FILE* say = !send && path == "-" ? stderr : stdout;
    if (!args.count("quiet")) {
        const auto& t = truth["totals"];
        std::uint64_t frames = 0;  // slots per stream (fewer after an early stop)
        for (const auto& s : generator.truth()) {
            frames = std::max(frames, s.slots);
        }
        // The CODIF line as it always was; VDIF and invalid frames add a word.
        fmt::print(
            say,
            "ibvcap gen: {} {} packets {} {}: {} streams ({} groups x {} antennas x {} "
            "threads) x {} {}frames of {} bytes; injected missing {}, duplicates {}, out "
            "of order {}{}\n",
            send ? "sent" : "wrote", packets, send ? "on" : "to", path, generator.truth().size(),
            config.groups.size(), config.antennas.size(), config.threads, frames,
            config.format == StreamFormat::vdif  ? "VDIF "
            : config.format == StreamFormat::vtp ? "VTP "
                                                 : "",
            config.frame_bytes(), t["missing"].get<std::uint64_t>(),
            t["duplicates"].get<std::uint64_t>(), t["out_of_order"].get<std::uint64_t>(),
            config.invalid > 0 ? fmt::format(", invalid {}", t["invalid"].get<std::uint64_t>())
                               : std::string());
        if (!send && generator.ended_early()) {
            fmt::print(say, "ibvcap gen: stopped early after {} of {} frame slots\n", frames,
                       config.frames);
        }
        if (send) {
            fmt::print("ibvcap gen: sent {} packets in {:.3f} s ({:.0f} packets/s){}\n", packets,
                       sent.seconds,
                       sent.seconds > 0 ? static_cast<double>(packets) / sent.seconds : 0.0,
                       sent.complete ? ""
                                     : fmt::format("; stopped early after {} of {} frame slots",
                                                   frames, config.frames));
        }
    }
    if (no_reader) {
        fmt::print(stderr,
                   "ibvcap gen: stopped while waiting for a reader of {}: nothing was written to "
                   "it{}\n",
                   path, args.count("truth") ? " (the --truth file says so: no frames)" : "");
        return 130;
    }
    return kExitZeroLoss;
}

}  // namespace ibvcap::cli
