// ibvcap: zero-loss capture of CODIF, VDIF and VTP multicast streams.
// Subcommand dispatch only; every subcommand lives in its own file and calls
// into lib/.
#include <fmt/format.h>

#include <cstring>
#include <exception>
#include <string_view>

#include "capture/cli.hpp"
#include "gpu/gpu_info.hpp"
#include "lib/run/common.hpp"

namespace {

void print_usage(std::FILE* out) {
    fmt::print(out,
               "usage: ibvcap <command> [options]\n"
               "\n"
               "commands:\n"
               "  capture -i IF [options] GROUP:PORT...    live capture: mlx5 raw-packet QPs, or\n"
               "                                           any NIC with --source pcap\n"
               "  read -r FILE [options] [GROUP:PORT...]   offline: a pcap/pcapng through the\n"
               "                                           demux, loss ledger and writers\n"
               "  gen  -w FILE.pcap | --send -i IF [options] [GROUP:PORT...]\n"
               "                                           synthetic CODIF, VDIF or VTP traffic,\n"
               "                                           to a file or live multicast\n"
               "  devices                                  RDMA devices, interfaces, capabilities\n"
               "  doctor [-i IF]... [-o DIR] [--cpus LIST] [--gpu ID] [--json]\n"
               "                                           preflight of this host: PASS/WARN/FAIL\n"
               "                                           per check, with the fix\n"
               "  verify [--report REPORT.json] [FILE...]  check shipped output files against\n"
               "                                           their indexes and the run's report\n"
               "  merge R1.json R2.json... [--expect SITE.json] [--report OBS.json]\n"
               "                                           one verdict for the reports of the\n"
               "                                           hosts that captured one observation\n"
               "  report REPORT.json --html PAGE [--verify]\n"
               "                                           the run page: one offline HTML file\n"
               "                                           drawing the report\n"
               "  ctl SOCKET status|next|start NAME [STOP]|stop\n"
               "                                           ask a capture running with --control\n"
               "                                           SOCKET: its scans, one at a time\n"
               "\n"
               "'ibvcap <command> --help' lists a command's options.\n"
               "exit codes: 0 zero-loss, 3 loss detected, 1 runtime error, 2 usage error\n");
}

}  // namespace

int main(int argc, char** argv) {
    using namespace ibvcap;
    if (argc < 2) {
        print_usage(stderr);
        return kExitUsage;
    }
    // `ibvcap --parse-only CMD ARGS...` (for the tests, not in the usage):
    // CMD's command line parsed as a run would parse it, and nothing run
    // (cli::ParseOnly; test/scripts/doc_examples.sh).
    if (std::string_view(argv[1]) == "--parse-only" && argc > 2) {
        cli::set_parse_only();
        --argc;
        ++argv;
    }
    // `ibvcap capture --version` as well as `ibvcap --version`.
    for (int i = 2; i < argc; ++i) {
        if (std::string_view(argv[i]) == "--version") {
            argv[1] = argv[i];
            break;
        }
    }
    const std::string_view command = argv[1];
    try {
        if (command == "read") {
            return cli::cmd_read(argc - 1, argv + 1);
        }
        if (command == "gen") {
            return cli::cmd_gen(argc - 1, argv + 1);
        }
        if (command == "capture") {
            return cli::cmd_capture(argc - 1, argv + 1);
        }
        if (command == "devices") {
            return cli::cmd_devices(argc - 1, argv + 1);
        }
        if (command == "doctor") {
            return cli::cmd_doctor(argc - 1, argv + 1);
        }
        if (command == "verify") {
            return cli::cmd_verify(argc - 1, argv + 1);
        }
        if (command == "merge") {
            return cli::cmd_merge(argc - 1, argv + 1);
        }
        if (command == "report") {
            return cli::cmd_report(argc - 1, argv + 1);
        }
        if (command == "ctl") {
            return cli::cmd_ctl(argc - 1, argv + 1);
        }
        if (command == "-h" || command == "--help" || command == "help") {
            print_usage(stdout);
            return kExitZeroLoss;
        }
        if (command == "--version") {
            fmt::print("ibvcap {}\ngpu: {}\n", IBVCAP_VERSION, gpu::describe());
            return kExitZeroLoss;
        }
        fmt::print(stderr,
                   "ibvcap: unknown command '{}' (valid: capture, read, gen, devices, doctor, "
                   "verify, merge, report, ctl)\n",
                   command);
        return kExitUsage;
    } catch (const cli::ParseOnly&) {
        fmt::print("ibvcap {}: the command line parses (--parse-only: nothing was run)\n", command);
        return kExitZeroLoss;
    } catch (const UsageError& e) {
        fmt::print(stderr, "ibvcap {}: {}\n", command, e.what());
        remove_unused_output_dirs();
        return kExitUsage;
    } catch (const std::exception& e) {
        fmt::print(stderr, "ibvcap {}: {}\n", command, e.what());
        remove_unused_output_dirs();
        return kExitError;
    }
}
