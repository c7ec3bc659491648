// The host side of the example consumer kernels (gpu.hpp, "The example
// consumer"; the kernels are in kernels.cu).
#include <cstring>
#include <stdexcept>

#include "gpu/cuda_common.hpp"

namespace ibvcap::gpu {

using namespace detail;

struct KernelScratch::Impl {
    int gpu = 0;
    detail::BlockShape shape;
    std::size_t words = 0;  // of the presence bitmap
    DevicePtr present;      // words × u64
    DevicePtr sums;         // threads × u64 power sums, then one u64 mismatch count
    DevicePtr power;        // threads × float
    PinnedPtr host_present;
    PinnedPtr host_result;  // one u64 count, then threads × float
    EventPtr staged;        // the bitmap copy has left host_present
    bool staged_pending = false;

    void check_shape(const Block& block, const BlockRingOptions& options) const {
        if (options.frames_per_block != shape.frames || options.threads != shape.threads ||
            options.payload_bytes != shape.payload_bytes || block.present.size() != words ||
            block.data == nullptr) {
            throw std::invalid_argument(
                "GPU kernels: the block, its ring options and the scratch buffers differ in shape");
        }
    }

    // Copies the block's presence bitmap to the device, in stream order.
    void stage_bitmap(const Block& block, cudaStream_t stream) {
        check(cudaSetDevice(gpu), "cudaSetDevice");
        if (staged_pending) {
            check(cudaEventSynchronize(staged.get()), "cudaEventSynchronize (bitmap staging)");
            staged_pending = false;
        }
        std::memcpy(host_present.get(), block.present.data(), words * sizeof(std::uint64_t));
        check(cudaMemcpyAsync(present.get(), host_present.get(), words * sizeof(std::uint64_t),
                              cudaMemcpyHostToDevice, stream),
              "cudaMemcpyAsync (presence bitmap)");
        check(cudaEventRecord(staged.get(), stream), "cudaEventRecord");
        staged_pending = true;
    }

    unsigned long long* sums_at(std::size_t i) const {
        return static_cast<unsigned long long*>(sums.get()) + i;
    }
};

KernelScratch::KernelScratch(int gpu, const BlockRingOptions& options)
    : impl_(std::make_unique<Impl>()) {
    const std::uint64_t slots = std::uint64_t{options.frames_per_block} * options.threads;
    if (slots == 0 || slots > 0x7fffffffu || options.payload_bytes == 0) {
        throw std::invalid_argument(
            "GPU kernels: frames per block × threads must be 1 to 2^31-1 and payload bytes at "
            "least 1");
    }
    select_gpu(gpu);
    Impl& s = *impl_;
    s.gpu = gpu;
    s.shape = detail::BlockShape{options.frames_per_block, options.threads, options.payload_bytes};
    s.words = static_cast<std::size_t>((slots + 63) / 64);
    s.present = device_alloc(gpu, s.words * sizeof(std::uint64_t), "presence bitmap");
    s.sums = device_alloc(gpu, (std::size_t{options.threads} + 1) * sizeof(std::uint64_t),
                          "kernel sums");
    s.power = device_alloc(gpu, std::size_t{options.threads} * sizeof(float), "power");
    s.host_present = pinned_alloc(s.words * sizeof(std::uint64_t), "presence bitmap");
    s.host_result = pinned_alloc(
        sizeof(std::uint64_t) + std::size_t{options.threads} * sizeof(float), "kernel results");
    s.staged = make_event();
}

KernelScratch::~KernelScratch() {
    if (impl_) {
        cudaSetDevice(impl_->gpu);
        if (impl_->staged_pending) {
            cudaEventSynchronize(impl_->staged.get());
        }
    }
}

float* KernelScratch::device_power() {
    return static_cast<float*>(impl_->power.get());
}

std::vector<float> KernelScratch::power_to_host(Stream stream) {
    Impl& s = *impl_;
    check(cudaSetDevice(s.gpu), "cudaSetDevice");
    auto* out = reinterpret_cast<float*>(bytes_of(s.host_result) + sizeof(std::uint64_t));
    check(cudaMemcpyAsync(out, s.power.get(), std::size_t{s.shape.threads} * sizeof(float),
                          cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync (power)");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (power)");
    return std::vector<float>(out, out + s.shape.threads);
}

void zero_missing_and_power(const Block& block, const BlockRingOptions& options,
                            KernelScratch& scratch, float* device_power_out, Stream stream) {
    KernelScratch::Impl& s = scratch.impl();
    s.check_shape(block, options);
    s.stage_bitmap(block, stream);
    check(detail::launch_zero_missing_and_power(
              block.data, static_cast<const std::uint64_t*>(s.present.get()), s.shape, s.sums_at(0),
              device_power_out != nullptr ? device_power_out : scratch.device_power(), stream),
          "zero_missing_and_power kernel launch");
}

std::uint64_t verify_pattern(const Block& block, const BlockRingOptions& options,
                             std::uint32_t antenna, KernelScratch& scratch, Stream stream) {
    KernelScratch::Impl& s = scratch.impl();
    s.check_shape(block, options);
    s.stage_bitmap(block, stream);
    unsigned long long* bad = s.sums_at(s.shape.threads);
    check(detail::launch_verify_pattern(block.data,
                                        static_cast<const std::uint64_t*>(s.present.get()), s.shape,
                                        block.first_index, antenna, bad, stream),
          "verify_pattern kernel launch");
    auto* host = static_cast<unsigned long long*>(s.host_result.get());
    check(cudaMemcpyAsync(host, bad, sizeof(*host), cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync (mismatch count)");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (verify_pattern)");
    return *host;
}

}  // namespace ibvcap::gpu
