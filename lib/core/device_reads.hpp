// How the GPU build reads one batch of payload slots into host memory (a
// writer buffer's device pieces: DeviceMemory::copy_to_host), shared by the
// CUDA code (gpu/) and the host stand-in (lib/sources/verbs/payload_memory),
// which logs the calls this plan names, so the tests count what a GPU host
// would issue (gpu-cuda-2.md N1).
//
// A buffer whose host memory is page-locked and mapped into the GPU's
// address space (DeviceMemory::pin_host_buffer: cudaHostRegister with
// cudaHostRegisterMapped) is filled by the gather kernel (gpu/kernels.cu):
// one launch per kSlotReadGatherCopies copies, whatever the layout of the
// slots, instead of one cudaMemcpy2DAsync per run of evenly spaced slots
// (about one per 1.7 frames with per-antenna files from a shared QP).
#pragma once

#include <cstddef>

namespace ibvcap {

// Copies one gather launch takes (its list, 24 bytes a copy, sits in a
// mapped page-locked buffer of the reading thread): a 4 MiB O_DIRECT buffer
// holds about 508 frames of 8 KiB.
inline constexpr std::size_t kSlotReadGatherCopies = 4096;

// Copy calls (kernel launches) for `copies` copies into mapped memory.
constexpr std::size_t gather_launches(std::size_t copies) {
    return (copies + kSlotReadGatherCopies - 1) / kSlotReadGatherCopies;
}

}  // namespace ibvcap
