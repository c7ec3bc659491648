#include "lib/run/gpu_path.hpp"

#include <fmt/format.h>

#include <map>
#include <tuple>

#include "gpu/gpu.hpp"

namespace ibvcap {

GpuPath::GpuPath(const GpuRequest& request, const std::string& nic) : verify_(request.verify) {
    BlockSinkOptions bo;
    bo.ring = request.ring;
    BlockCheck check;
    if (request.mode == GpuRequest::Mode::standin) {
        mode_ = "block rings in host memory (--gpu-standin)";
        auto payload = std::make_unique<StandinDevicePayloadMemory>();
        // Its block memory logs into the payload stand-in's log: both are
        // "the GPU" (lib/device_calls.hpp).
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
    outcome.exit_code = exit_code_for(outcome.ledger, outcome.info);
    apply_faults(faults_, outcome);  // the consumer ran on after the capture
}

}  // namespace ibvcap
