// The GPU payload path of a capture (--gpu, --gpu-standin; docs/gpu.md):
// block rings per (group, antenna) in GPU memory, fed by the demux through
// the block sink, and a consumer that takes each block (with --gpu-verify it
// checks the generator's pattern on the GPU). --gpu-standin runs the same
// path with the rings in host memory and the check on the CPU: for tests,
// and for hosts without a GPU that want the block ring's accounting.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "lib/core/fault.hpp"
#include "lib/host/xid_watch.hpp"
#include "lib/run/common.hpp"
#include "lib/run/run_loop.hpp"
#include "lib/sinks/block_consumer.hpp"
#include "lib/sinks/block_sink.hpp"
#include "lib/sources/verbs/engine.hpp"

namespace ibvcap {

struct GpuRequest {
    enum class Mode { none, standin, device };
    Mode mode = Mode::none;
    int device = 0;             // the CUDA device (Mode::device)
    bool verify = false;        // --gpu-verify
    BlockRingOptions ring;      // frames per block, blocks, threads (payload bytes: per stream)
    std::FILE* info = nullptr;  // where the GPU's description line goes (null: nowhere)
    // The GPU XID witness (lib/host/xid_watch.hpp). Mode::standin has no PCI
    // address of its own: tests give it one here ("0000:3b:00.0"; empty: none).
    std::string standin_pci;
    std::filesystem::path tracefs_root;  // where tracefs is; empty: the usual places
};

class GpuPath {
  public:
    // Probes the GPU (Mode::device: throws one line naming the fix when it
    // cannot be used, with `nic` for the PCIe topology check) and makes the
    // payload memory, the block sink and the consumer.
    GpuPath(const GpuRequest& request, const std::string& nic);

    // What ended the copy thread, the consumer or a disk thread; the run
    // watches it (lib/core/fault.hpp). Give it to the run's writer.
    Faults& faults() { return faults_; }
    PayloadMemory* payload() { return payload_.get(); }
    BlockSink* sink() { return sink_.get(); }

    // Before the source starts: watches the GPU's XIDs (nvidia:nvidia_dev_xid,
    // docs/observability.md) and adds their count on the capture's GPU to the
    // run's witnesses as "gpu/xid". A watch that cannot start is noted at
    // finish() ("GPU XID witness absent: ...") and the run goes on.
    void watch_xids(RunSettings& settings);

    // After the run: the consumer takes what the flushed rings hold; the
    // block accounting and any pattern mismatch join the ledger, the XID
    // watch stops and its XIDs join it too (one on the capture's GPU is
    // loss), and the exit code is judged again.
    void finish(RunOutcome& outcome);

  private:
    Faults faults_;  // first, so that it outlives everything that reports to it
    std::unique_ptr<PayloadMemory> payload_;  // receive payload slots (verbs source)
    std::unique_ptr<BlockSink> sink_;
    std::unique_ptr<BlockConsumer> consumer_;
    std::string mode_;
    bool verify_ = false;
    std::string pci_address_;  // the capture's GPU, pci_name spelling; empty: unknown
    std::filesystem::path tracefs_root_;
    std::FILE* info_ = nullptr;
    std::unique_ptr<XidWatch> xids_;

    void report_xids(Ledger& ledger);
};

}  // namespace ibvcap
