// `ibvcap capture`, whole: what the CLI fills from its options and hands to
// one function. It resolves the interfaces, wires the GPU payload path when
// asked, runs the chosen source through the run loop and finishes the GPU
// path, so the CLI only parses and prints.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "lib/demux/demux.hpp"
#include "lib/run/common.hpp"
#include "lib/run/gpu_path.hpp"
#include "lib/run/run_loop.hpp"
#include "lib/sinks/file_sinks.hpp"
#include "lib/sinks/writer.hpp"
#include "lib/sources/verbs/engine.hpp"

namespace ibvcap {

// What every run takes (RunSettings; -c is "at least N" with verbs, exactly
// N with pcap; `blocks` is set here, from `gpu`), and the capture's own.
struct LiveCaptureRequest : RunSettings {
    enum class Source { verbs, pcap };
    Source source = Source::verbs;
    std::vector<std::string> interfaces;  // -i: netdev names or IPv4 addresses
    std::filesystem::path sysfs_root = "/sys";
    GpuRequest gpu;  // --gpu, --gpu-standin
    // Least privilege (docs/operations.md, "Capabilities"): once the source
    // has started, every capability is dropped on every thread; with `user`
    // (--user NAME) the process becomes that user first. `writable_dirs`: the
    // directories the run still writes into afterwards (outputs, report,
    // metrics file), checked right after the drop.
    std::string user;
    std::vector<std::filesystem::path> writable_dirs;
    // --source verbs only.
    EngineOptions engine;  // groups and antennas are taken from `demux`
    std::vector<int> cpus;
    // --source pcap only.
    std::size_t pcap_buffer_bytes = std::size_t{256} << 20;
};

// Throws std::runtime_error (one line naming the fix) when the capture cannot
// start: a --user this process cannot become, no RDMA device, an interface without an address, a
// GPU that cannot be used, and what the sources throw.
RunOutcome run_capture(const LiveCaptureRequest& request, const std::atomic<bool>& stop);

}  // namespace ibvcap
