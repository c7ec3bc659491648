#include "lib/run/gpu_path.hpp"

#include <fmt/format.h>

#include <map>
#include <tuple>

#include "gpu/gpu.hpp"
#include "gpu/gpu_logic.hpp"

namespace ibvcap {

GpuPath::GpuPath(const GpuRequest& request, const std::string& nic)
    : verify_(request.verify), tracefs_root_(request.tracefs_root), info_(request.info) {
    BlockSinkOptions bo;
    bo.ring = request.ring;
    BlockCheck check;
    if (request.mode == GpuRequest::Mode::standin) {
        mode_ = "block rings in host memory (--gpu-standin)";
        if (!request.standin_pci.empty()) {
            const auto address = gpu::normalize_pci_address(request.standin_pci);
            if (!address) {
                throw std::invalid_argument(fmt::format(
                    "bad stand-in GPU PCI address '{}': expected DOMAIN:BUS:DEVICE.FUNCTION, e.g. "
                    "0000:3b:00.0",
                    request.standin_pci));
            }
            pci_address_ = *address;
        }
        auto payload = std::make_unique<StandinDevicePayloadMemory>();
        // Its block memory logs into the payload stand-in's log: both are
        // "the GPU" (lib/core/device_calls.hpp).
        bo.memory = [log = &payload->log()] { return make_host_block_memory(log); };
        payload_ = std::move(payload);
        if (request.verify) {
            check = check_block_on_host;
        }
    } else {
        const int id = request.device;
        const gpu::GpuInfo info = gpu::probe_gpu(id, nic);  // one line naming the fix
        if (request.info != nullptr) {
            fmt::print(request.info, "{}\n", gpu::format_gpu_info(info));
            std::fflush(request.info);  // before the run: its lines go out without stdio
        }
        mode_ = fmt::format("block rings on GPU {}", id);
        pci_address_ = info.pci_bus_id;  // sysfs spelling, as the tracepoint's pci_name()
        payload_ = gpu::make_gpu_payload_memory(id);
        bo.memory = [id] { return gpu::make_device_block_memory(id); };
        if (request.verify) {
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
    bo.faults = &faults_;
    sink_ = std::make_unique<BlockSink>(bo);
    consumer_ = std::make_unique<BlockConsumer>(*sink_, check, &faults_);
}

void GpuPath::finish(RunOutcome& outcome) {
    consumer_->finish();
    sink_->report_to(outcome.ledger);
    if (payload_ && outcome.info.source == "verbs") {
        outcome.ledger.add_note(payload_->describe());  // which mode ran, and why
    }
    outcome.ledger.add_note(
        fmt::format("{}: {} blocks consumed{}", mode_, consumer_->blocks(),
                    verify_ ? fmt::format(", {} payload bytes off the generator's pattern",
                                          consumer_->mismatched_bytes())
                            : std::string()));
    if (const std::uint64_t n = consumer_->unchecked(); n > 0) {
        outcome.ledger.add_note(fmt::format(
            "{} blocks were taken but not checked: a check failed and no further GPU work was "
            "issued",
            n));
    }
    outcome.ledger.add_payload_mismatches(consumer_->mismatched_bytes());
    report_xids(outcome.ledger);  // the GPU's work is done: the watch ends here
    outcome.exit_code = exit_code_for(outcome.ledger, outcome.info);
    apply_faults(faults_, outcome);  // the consumer ran on after the capture
}

void GpuPath::watch_xids(RunSettings& settings) {
    xids_ = std::make_unique<XidWatch>(XidWatch::Options{tracefs_root_, pci_address_});
    if (!xids_->start()) {
        if (info_ != nullptr) {
            fmt::print(info_, "GPU XID witness absent: {}\n", xids_->absent());
            std::fflush(info_);
        }
        return;
    }
    settings.witnesses.emplace_back([w = xids_.get()] {
        return std::vector<SourceCounter>{
            {"gpu/xid", w->on_capture_gpu(), false, LossCause::gpu_xid}};
    });
}

void GpuPath::report_xids(Ledger& ledger) {
    if (!xids_) {
        return;
    }
    xids_->stop();
    if (!xids_->absent().empty()) {
        ledger.add_note("GPU XID witness absent: " + xids_->absent());
        return;
    }
    const std::vector<GpuXid> events = xids_->events();
    const std::string gpu = pci_address_.empty() ? "the capture's GPU (no PCI address known)"
                                                 : "the capture's GPU " + pci_address_;
    ledger.add_note(
        fmt::format("GPU XID witness: nvidia:nvidia_dev_xid watched for the run ({} output): {} "
                    "XID{}, {} on {}",
                    xids_->output_form(), events.size(), events.size() == 1 ? "" : "s",
                    xids_->on_capture_gpu(), gpu));
    for (const auto& x : events) {
        if (!x.capture_gpu) {
            ledger.add_note(fmt::format("GPU {} (not the capture's) reported Xid {}: {} at {}",
                                        x.device, x.code, x.message, format_utc_time(x.time_ns)));
        }
        ledger.add_gpu_xid(x);
    }
    ledger.add_gpu_xids_lost(xids_->lost());
    if (const std::string f = xids_->failure(); !f.empty()) {
        ledger.add_note("GPU XID witness: " + f);
    }
}

}  // namespace ibvcap
