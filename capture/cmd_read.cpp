// ibvcap read -r FILE: a pcap/pcapng through the same demux, ledger and writers
// as a live capture.
#include <fmt/format.h>

#include "capture/cli.hpp"
#include "lib/run/console.hpp"
#include "lib/run/read.hpp"

namespace ibvcap::cli {

int cmd_read(int argc, char** argv) {
    cxxopts::Options options("ibvcap read",
                             "Read a pcap/pcapng capture through the demultiplexer, "
                             "loss ledger and writers.");
    options.positional_help("[GROUP:PORT...]");
    options.add_options()("r,read", "pcap or pcapng file to read", cxxopts::value<std::string>(),
                          "FILE");
    add_common_options(
        options,
        "only these GROUP:PORT[@SOURCE,...][/FORMAT] destinations (FORMAT: codif, vdif, vtp)");
    const auto args = parse(options, argc, argv);
    if (args.count("help")) {
        fmt::print("{}", options.help());
        return kExitZeroLoss;
    }
    if (!args.count("read")) {
        throw UsageError("-r FILE is required (the pcap or pcapng file to read)");
    }
    const CommonOptions common = read_common_options(args, args["read"].as<std::string>());
    ReadRequest request;
    request.writer = common.writer;
    request.writer.abandon = &urgent_flag();
    request.file = args["read"].as<std::string>();
    request.count = common.count;
    request.metrics_path = common.metrics_path;
    request.metrics_interval_s = common.metrics_interval_s;
    request.demux = common.demux;
    request.outputs = common.outputs;
    request.expect = common.expect;
    request.expect_options = common.expect_options;
    request.window_grace_s = common.window_grace_s;
    request.scan_name = common.scan_name;
    if (common.verbose) {
        request.observer = print_frame;
    }
    request.counts_request = &counts_flag();
    request.stop_signal = &stop_signal();
    request.notices = &stderr_console();  // "stopping: writing 120.0 MiB; ..."
    // The rings attached and locked before anything is read: a missing
    // one stops the command with nothing lost.
    std::unique_ptr<DadaSink> dada;
    if (common.dada) {
        DadaOptions o = *common.dada;
        o.device_opener = gpu::dada_ring_opener();  // a dada_db -g ring: the CUDA build's
        dada = std::make_unique<DadaSink>(o);
        request.dada = dada.get();
    }
    install_stop_handler();
    RunOutcome outcome = run_read(request, stop_flag());
    outcome.info.frame_lines_dropped = stdout_console().dropped();
    return finish_run(outcome, common);
}

}  // namespace ibvcap::cli
