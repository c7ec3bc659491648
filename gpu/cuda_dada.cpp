// A GPU PSRDADA ring's blocks, opened from their CUDA IPC handles
// (lib/sinks/dada_device.hpp; psrdada src/ipcutil_cuda.cu, ipc_alloc_cuda:
// each block segment holds the cudaIpcMemHandle_t of the block's device
// memory, made on the ring's GPU by dada_db -g). The copies into the blocks
// go through a DeviceBlockMemory on that GPU (gpu/cuda_copies.cpp): device
// to device for GPU payload, staged for host bytes.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstring>

#include "gpu/cuda_common.hpp"
#include "gpu/gpu.hpp"
#include "lib/sinks/dada_ring.hpp"

namespace ibvcap::gpu {

static_assert(sizeof(cudaIpcMemHandle_t) == 64, "psrdada's block segments hold 64 bytes");

DadaDeviceOpener dada_ring_opener() {
    return [](int device, const std::vector<const std::uint8_t*>& handles,
              std::uint64_t /*block_bytes*/) {
        detail::check(cudaSetDevice(device), "cudaSetDevice (the ring's GPU)");
        std::vector<void*> opened;
        const auto close_all = [device](const std::vector<void*>& blocks) {
            cudaSetDevice(device);
            for (void* p : blocks) {
                cudaIpcCloseMemHandle(p);
            }
        };
        for (const std::uint8_t* h : handles) {
            cudaIpcMemHandle_t handle{};
            std::memcpy(&handle, h, sizeof handle);
            void* p = nullptr;
            // The same flag as psrdada's readers (ipc_alloc_cuda).
            const cudaError_t err =
                cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess);
            if (err != cudaSuccess) {
                close_all(opened);
                throw DadaError(fmt::format(
                    "its blocks on GPU {} cannot be opened (cudaIpcOpenMemHandle: {}): the ring's "
                    "maker must still run, on this host",
                    device, cudaGetErrorString(err)));
            }
            opened.push_back(p);
        }
        DadaDeviceBlocks out;
        for (void* p : opened) {
            out.blocks.push_back(static_cast<std::uint8_t*>(p));
        }
        out.memory = make_device_block_memory(device);
        out.close = [close_all, opened] { close_all(opened); };
        return out;
    };
}

namespace {
class CudaIpcBlocks final : public IpcBlocks {
  public:
    CudaIpcBlocks(int gpu, std::size_t count, std::size_t bytes) : gpu_(gpu) {
        detail::check(cudaSetDevice(gpu), "cudaSetDevice");
        for (std::size_t i = 0; i < count; ++i) {
            void* p = nullptr;
            detail::check(cudaMalloc(&p, bytes), "cudaMalloc (a ring block)");
            blocks_.push_back(p);
            detail::check(cudaMemset(p, 0, bytes), "cudaMemset");
            cudaIpcMemHandle_t h{};
            detail::check(cudaIpcGetMemHandle(&h, p), "cudaIpcGetMemHandle");
            handles_.emplace_back(reinterpret_cast<const std::uint8_t*>(&h),
                                  reinterpret_cast<const std::uint8_t*>(&h) + sizeof h);
        }
    }
    ~CudaIpcBlocks() override {
        cudaSetDevice(gpu_);
        for (void* p : blocks_) {
            cudaFree(p);
        }
    }
    const std::uint8_t* handle(std::size_t block) const override {
        return handles_.at(block).data();
    }
    void read(std::size_t block, std::size_t offset, void* host, std::size_t bytes) const override {
        detail::check(cudaSetDevice(gpu_), "cudaSetDevice");
        detail::check(cudaMemcpy(host, static_cast<const std::uint8_t*>(blocks_.at(block)) + offset,
                                 bytes, cudaMemcpyDeviceToHost),
                      "cudaMemcpy (a ring block to the host)");
    }

  private:
    int gpu_;
    std::vector<void*> blocks_;
    std::vector<std::vector<std::uint8_t>> handles_;
};
}  // namespace

std::unique_ptr<IpcBlocks> make_ipc_blocks(int gpu, std::size_t count, std::size_t bytes) {
    return std::make_unique<CudaIpcBlocks>(gpu, count, bytes);
}

}  // namespace ibvcap::gpu
