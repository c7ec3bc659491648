// What the GPU side of this build can do. The GPU payload path (GPUDirect
// buffers, block ring) builds on this; without CUDA the stub says so.
#pragma once

#include <string>

namespace ibvcap::gpu {

bool built_with_cuda();
// One line: the CUDA runtime and driver versions and the GPUs seen, or why
// there are none ("built without CUDA", "no CUDA driver").
std::string describe();

}  // namespace ibvcap::gpu
