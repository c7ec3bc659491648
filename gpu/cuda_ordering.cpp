// Write ordering: making the NIC's GPUDirect RDMA writes visible to the GPU
// copies and kernels that read payload slots (SlotReader::flush_nic_writes).
#include "gpu/cuda_detail.hpp"

namespace ibvcap::gpu::detail {

SlotReader::SlotReader(int gpu) : gpu_(gpu) {
    select_gpu(gpu);
    // As the start-up line says (describe_rdma_write_ordering): flushed
    // when the ordering is below owner and the GPU can flush; a GPU that
    // cannot is only warned about (a flush would fail every batch).
    flush_ =
        needs_rdma_write_flush(
            runtime_attribute_value(gpu, cudaDevAttrGPUDirectRDMAWritesOrdering).value_or(0)) &&
        can_flush_rdma_writes(
            runtime_attribute_value(gpu, cudaDevAttrGPUDirectRDMAFlushWritesOptions).value_or(0));
    max_pitch_ =
        static_cast<std::size_t>(runtime_attribute_value(gpu, cudaDevAttrMaxPitch).value_or(0));
    address_range_ = driver_entry<PFN_cuMemGetAddressRange_v3020>("cuMemGetAddressRange", 3020);
}
void SlotReader::flush_nic_writes() const {
    if (!flush_) {
        return;
    }
    sticky_.run([&] {
        check(cudaSetDevice(gpu_), "cudaSetDevice");
        check(cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice,
                                                 cudaFlushGPUDirectRDMAWritesToOwner),
              "cudaDeviceFlushGPUDirectRDMAWrites");
    });
}

}  // namespace ibvcap::gpu::detail
