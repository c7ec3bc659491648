#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "gpu/gpu_info.hpp"
#include "gpu/gpu_logic.hpp"

namespace ibvcap::gpu {

bool built_with_cuda() {
    return true;
}

std::string describe() {
    int runtime = 0;
    int driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    const std::string versions =
        fmt::format("CUDA runtime {}.{}, driver {}", runtime / 1000, (runtime % 1000) / 10,
                    driver == 0 ? std::string("not loaded")
                                : fmt::format("{}.{}", driver / 1000, (driver % 1000) / 10));
    if (err != cudaSuccess) {
        const std::string mismatch = driver_mismatch_message(driver, runtime);
        return fmt::format("{}: no usable GPU ({}){}", versions, cudaGetErrorString(err),
                           mismatch.empty() ? std::string() : ": " + mismatch);
    }
    std::string gpus;
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) {
            gpus += fmt::format("{}GPU {}: {}", i == 0 ? "" : ", ", i, prop.name);
        }
    }
    return fmt::format("{}: {}", versions, gpus);
}

}  // namespace ibvcap::gpu
