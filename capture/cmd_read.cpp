// ibvcap read -r FILE: a pcap/pcapng through the same demux, ledger and writers
// as a live capture.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "capture/cli.hpp"
#include "lib/pipeline.hpp"

namespace ibvcap::cli {

namespace {
void print_frame(const Frame& frame, const UdpPacket& p, const CodifHeader& h, const StreamStats&) {
    fmt::print("{}.{:09} {}:{} > {}:{} codif {} station {} thread {} {}:{} {} bytes{}\n",
               frame.timestamp_ns / 1'000'000'000u, frame.timestamp_ns % 1'000'000'000u,
               format_ipv4(p.src_ip), p.src_port, format_ipv4(p.dst_ip), p.dst_port,
               to_string(h.layout), h.stationid, h.threadid, h.seconds, h.frame, h.payload_bytes(),
               h.invalid ? " invalid" : "");
}
}  // namespace

int cmd_read(int argc, char** argv) {
    cxxopts::Options options("ibvcap read",
                             "Read a pcap/pcapng capture through the CODIF demultiplexer, "
                             "loss ledger and writers.");
    options.positional_help("[GROUP:PORT...]");
    // clang-format off
    options.add_options()
        ("r,read", "pcap or pcapng file to read", cxxopts::value<std::string>(), "FILE")
        ("o,output-dir", "directory for output files", cxxopts::value<std::string>()->default_value("."), "DIR")
        ("F,format", "output format: raw, codif, codifhdr, pcap (repeatable)", cxxopts::value<std::vector<std::string>>(), "FORMAT")
        ("prefix", "output file name prefix", cxxopts::value<std::string>()->default_value("ibvcap"), "NAME")
        ("antenna", "antenna source IPv4 (repeatable; default: every source is an antenna)", cxxopts::value<std::vector<std::string>>(), "IP")
        ("c,count", "stop after N frames", cxxopts::value<std::uint64_t>()->default_value("0"), "N")
        ("report", "write the ledger as JSON to FILE", cxxopts::value<std::string>(), "FILE")
        ("q,quiet", "final verdict only, no per-stream table")
        ("v,verbose", "one line per CODIF frame")
        ("h,help", "this help")
        ("groups", "only these GROUP:PORT destinations", cxxopts::value<std::vector<std::string>>());
    // clang-format on
    options.parse_positional({"groups"});
    const auto args = parse(options, argc, argv);
    if (args.count("help")) {
        fmt::print("{}", options.help());
        return kExitZeroLoss;
    }
    if (!args.count("read")) {
        throw UsageError("-r FILE is required (the pcap or pcapng file to read)");
    }

    ReadRequest request;
    request.file = args["read"].as<std::string>();
    request.count = args["count"].as<std::uint64_t>();
    request.demux.output_dir = args["output-dir"].as<std::string>();
    request.demux.prefix = args["prefix"].as<std::string>();
    if (args.count("format")) {
        request.demux.formats = parse_formats(args["format"].as<std::vector<std::string>>());
    }
    if (args.count("groups")) {
        request.demux.groups = parse_groups(args["groups"].as<std::vector<std::string>>());
    }
    if (args.count("antenna")) {
        request.demux.antennas =
            parse_addresses(args["antenna"].as<std::vector<std::string>>(), "--antenna");
    }
    if (args.count("verbose")) {
        request.observer = print_frame;
    }
    const bool quiet = args.count("quiet") > 0;
    const std::string report_path = args.count("report") ? args["report"].as<std::string>() : "";

    install_stop_handler();
    RunOutcome outcome = run_read(request, stop_flag());
    if (!report_path.empty()) {
        write_report(report_path, report_json(outcome.ledger, outcome.info));
    }
    print_summary(stdout, outcome.ledger, outcome.info, !quiet);
    if (!outcome.info.error.empty()) {
        fmt::print(stderr, "ibvcap read: {}\n", outcome.info.error);
    }
    for (const auto& o : outcome.ledger.outputs()) {
        if (!o.error.empty()) {
            fmt::print(stderr, "ibvcap read: {}: {}\n", o.path, o.error);
        }
    }
    return outcome.exit_code;
}

}  // namespace ibvcap::cli
