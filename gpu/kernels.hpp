// Launchers of the example consumer kernels (gpu/kernels.cu), with plain types
// only so that nvcc compiles kernels.cu without lib/'s headers. Internal to
// gpu/: the public entry points are in gpu/gpu.hpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ibvcap::gpu::detail {

struct BlockShape {
    std::uint32_t frames = 0;         // frame times per block
    std::uint32_t threads = 0;        // threads (of each frame time)
    std::uint32_t payload_bytes = 0;  // per slot
};

// Zero-fills absent slots of `data` and adds each present slot's sum of
// squares (int8 components) to sums[thread]; then power[t] = float(sums[t]).
// `sums` is zeroed first. All pointers are device memory.
cudaError_t launch_zero_missing_and_power(std::uint8_t* data, const std::uint64_t* present,
                                          BlockShape shape, unsigned long long* sums, float* power,
                                          cudaStream_t stream);

// Adds to *bad (zeroed first) the number of bytes of present slots that
// differ from the generator's pattern for `antenna` (frame index
// first_index + f, thread t). All pointers are device memory.
cudaError_t launch_verify_pattern(const std::uint8_t* data, const std::uint64_t* present,
                                  BlockShape shape, std::uint64_t first_index,
                                  std::uint32_t antenna, unsigned long long* bad,
                                  cudaStream_t stream);

// One copy of a gather (launch_gather).
struct GatherCopy {
    void* dst = nullptr;        // device memory, or page-locked host memory (mapped)
    const void* src = nullptr;  // device memory, or page-locked host memory (mapped: UVA)
    std::uint64_t bytes = 0;
};

// Issues `count` copies (at most kMaxGatherCopies) as one kernel launch on
// `stream`, one CUDA block per copy, in the widest words (16, 8 or 4 bytes)
// whose alignment both ends share past a few leading bytes, else bytes: any
// length and alignment. `copies` must be readable by the device until the kernel
// has finished: page-locked host memory (cudaHostAlloc; under unified
// addressing a device may read it through the same pointer, CUDA runtime
// API, "Unified Addressing") or device memory.
inline constexpr std::uint32_t kMaxGatherCopies = 65535;
cudaError_t launch_gather(const GatherCopy* copies, std::uint32_t count, cudaStream_t stream);

}  // namespace ibvcap::gpu::detail
