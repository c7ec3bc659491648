// Write ordering: making the NIC's GPUDirect RDMA writes visible to the GPU
// copies and kernels that read payload slots, as plan_rdma_write_flush
// (gpu_logic.hpp, where the header lines it relies on are cited) decides.
#include <fmt/format.h>

#include <stdexcept>

#include "gpu/cuda_common.hpp"

namespace ibvcap::gpu::detail {

// gpu_logic.hpp spells these CUDA values without the CUDA headers.
static_assert(kRdmaFlushOptionMemOps == CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_MEMOPS);
static_assert(kRdmaFlushOptionHost == CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST);

namespace {

PFN_cuStreamBatchMemOp_v11070 batch_mem_op_entry() {
    return driver_entry<PFN_cuStreamBatchMemOp_v11070>("cuStreamBatchMemOp", 11070);
}

}  // namespace

bool c2c_gpu(int gpu) {
#if defined(__aarch64__)
    constexpr bool aarch64_host = true;
#else
    constexpr bool aarch64_host = false;
#endif
    return is_c2c_platform(
        aarch64_host,
        runtime_attribute_value(gpu, cudaDevAttrHostNativeAtomicSupported).value_or(0));
}

RdmaWriteOrdering gpu_write_ordering(int gpu) {
    RdmaWriteOrdering plan = plan_rdma_write_flush(
        runtime_attribute_value(gpu, cudaDevAttrGPUDirectRDMAWritesOrdering).value_or(0),
        runtime_attribute_value(gpu, cudaDevAttrGPUDirectRDMAFlushWritesOptions).value_or(0),
        c2c_gpu(gpu));
    if (plan.flush == RdmaFlush::memops && batch_mem_op_entry() == nullptr) {
        plan = {RdmaFlush::none,
                "the GPU's only GPUDirect RDMA flush is a stream memory operation and the driver "
                "has no cuStreamBatchMemOp"};
    }
    return plan;
}

FlushPath flush_path(int gpu) {
    const RdmaWriteOrdering plan = gpu_write_ordering(gpu);
    FlushPath path;
    // Refused: no payload goes into this GPU's memory, so nothing is flushed.
    path.flush = plan.refusal ? RdmaFlush::none : plan.flush;
    if (path.flush == RdmaFlush::memops) {
        path.batch_mem_op = batch_mem_op_entry();
    }
    return path;
}

void SlotReader::flush(cudaStream_t stream) const {
    switch (flush_.flush) {
        case RdmaFlush::none:
            return;
        case RdmaFlush::host:
            check(cudaSetDevice(gpu_), "cudaSetDevice");
            check(
                cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice,
                                                   cudaFlushGPUDirectRDMAWritesToOwner),
                "cudaDeviceFlushGPUDirectRDMAWrites");
            return;
        case RdmaFlush::memops: {
            // Ordered before the later work on `stream`, the one that reads.
            check(cudaSetDevice(gpu_), "cudaSetDevice");
            CUstreamBatchMemOpParams op{};
            op.flushRemoteWrites.operation = CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
            op.flushRemoteWrites.flags = 0;  // "Must be 0" (cuda.h)
            if (const CUresult r = flush_.batch_mem_op(stream, 1, &op, 0); r != CUDA_SUCCESS) {
                throw std::runtime_error(
                    fmt::format("cuStreamBatchMemOp (CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES): {}",
                                driver_error(r)));
            }
            return;
        }
    }
}

// The writers' flush: on the calling thread's stream, the one its
// copy_to_host then reads on.
void SlotReader::flush_nic_writes() const {
    if (flush_.flush == RdmaFlush::none) {
        return;
    }
    sticky_.run([&] {
        check(cudaSetDevice(gpu_), "cudaSetDevice");
        flush(flush_.flush == RdmaFlush::memops ? thread_state().stream.get() : nullptr);
    });
}

void SlotReader::flush_nic_writes_on(cudaStream_t stream) const {
    if (flush_.flush == RdmaFlush::none) {
        return;
    }
    sticky_.run([&] { flush(stream); });
}

}  // namespace ibvcap::gpu::detail
