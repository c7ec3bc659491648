// The GPU payload path in a build without CUDA: every entry point that needs
// a GPU throws the one-line "built without CUDA" error; gpu_available() is
// false. The pure logic (gpu_logic.cpp) is the same as in the CUDA build.
#include <stdexcept>

#include "gpu/gpu.hpp"
#include "gpu/gpu_logic.hpp"

namespace ibvcap::gpu {

namespace {
[[noreturn]] void built_without_cuda() {
    throw std::runtime_error(std::string(kBuiltWithoutCudaMessage));
}
}  // namespace

bool gpu_available() {
    return false;
}

GpuInfo probe_gpu(int /*id*/, const std::string& /*nic*/,
                  const std::filesystem::path& /*sysfs_root*/) {
    built_without_cuda();
}

std::unique_ptr<BlockMemory> make_device_block_memory(int /*gpu*/) {
    built_without_cuda();
}

std::unique_ptr<PayloadMemory> make_gpu_payload_memory(int /*gpu*/, Mode /*preferred*/,
                                                       const std::filesystem::path& /*root*/) {
    built_without_cuda();
}

std::unique_ptr<IpcBlocks> make_ipc_blocks(int /*gpu*/, std::size_t /*count*/,
                                           std::size_t /*bytes*/) {
    built_without_cuda();
}

DadaDeviceOpener dada_ring_opener() {
    return [](int, const std::vector<const std::uint8_t*>&, std::uint64_t) -> DadaDeviceBlocks {
        built_without_cuda();
    };
}

std::uint64_t device_copy_calls(const DeviceMemory& /*memory*/) {
    built_without_cuda();
}

void copy_to_host(void* /*host_dst*/, const void* /*device_src*/, std::size_t /*bytes*/) {
    built_without_cuda();
}

void copy_to_device(void* /*device_dst*/, const void* /*host_src*/, std::size_t /*bytes*/) {
    built_without_cuda();
}

struct KernelScratch::Impl {};

KernelScratch::KernelScratch(int /*gpu*/, const BlockRingOptions& /*options*/) {
    built_without_cuda();
}

KernelScratch::~KernelScratch() = default;

float* KernelScratch::device_power() {
    built_without_cuda();
}

std::vector<float> KernelScratch::power_to_host(Stream /*stream*/) {
    built_without_cuda();
}

void zero_missing_and_power(const Block& /*block*/, const BlockRingOptions& /*options*/,
                            KernelScratch& /*scratch*/, float* /*device_power_out*/,
                            Stream /*stream*/) {
    built_without_cuda();
}

std::uint64_t verify_pattern(const Block& /*block*/, const BlockRingOptions& /*options*/,
                             std::uint32_t /*antenna*/, KernelScratch& /*scratch*/,
                             Stream /*stream*/) {
    built_without_cuda();
}

}  // namespace ibvcap::gpu
