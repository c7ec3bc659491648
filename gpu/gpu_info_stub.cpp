#include "gpu/gpu_info.hpp"

namespace ibvcap::gpu {

bool built_with_cuda() {
    return false;
}

std::string describe() {
    return "built without CUDA (rebuild with -DIBVCAP_CUDA=ON on a host with the CUDA toolkit)";
}

}  // namespace ibvcap::gpu
