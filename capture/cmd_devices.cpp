// ibvcap devices: RDMA devices, their ports and netdevs, IPv4, link state and
// what the verbs layer says each device can do.
#include <fmt/format.h>

#include "capture/cli.hpp"
#include "lib/host/devices.hpp"
#include "lib/sources/verbs/source.hpp"

namespace ibvcap::cli {

int cmd_devices(int argc, char** argv) {
    cxxopts::Options options("ibvcap devices",
                             "List RDMA devices, network interfaces and capabilities.");
    options.add_options()("sysfs-root", "where sysfs is (tests)",
                          cxxopts::value<std::string>()->default_value("/sys"), "DIR")(
        "v,verbose", "also each device's limits, one per line")("h,help", "this help");
    const auto args = parse(options, argc, argv);
    if (args.count("help")) {
        fmt::print("{}", options.help());
        return kExitZeroLoss;
    }
    const HostDescription host =
        describe_host(read_interface_addresses(), args["sysfs-root"].as<std::string>());
    auto provider = verbs::make_ibv_provider();
    const bool limits = args.count("verbose") > 0;
    fmt::print("{}", format_devices(host, [&](const std::string& device) {
                   std::uint8_t port = 1;
                   for (const auto& p : host.ports) {
                       if (p.device == device) {
                           port = p.port;
                           break;
                       }
                   }
                   return device_capability_lines(*provider, device, port, limits);
               }));
    return kExitZeroLoss;
}

}  // namespace ibvcap::cli
