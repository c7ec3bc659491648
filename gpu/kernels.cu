// The example consumer kernels: zero-fill of absent slots with per-thread
// power, and the generator's payload pattern checked on the GPU. One CUDA
// block per slot (frame time f, thread t) of a ring block; slot s is
// at byte s * payload_bytes and its presence is bit s of the bitmap (see
// gpu/gpu.hpp for the layout and the sample format).
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/kernels.hpp"
#include "gpu/pattern_constants.hpp"

namespace ibvcap::gpu::detail {

namespace {

constexpr unsigned kBlockThreads = 256;
constexpr unsigned kWarps = kBlockThreads / 32;
constexpr std::uint64_t kMaxSlots = 0x7fffffffu;  // gridDim.x limit

__device__ bool present_bit(const std::uint64_t* present, std::uint64_t bit) {
    return ((present[bit / 64] >> (bit % 64)) & 1u) != 0;
}

__device__ unsigned long long warp_sum(unsigned long long value) {
    for (unsigned offset = 16; offset > 0; offset /= 2) {
        value += __shfl_down_sync(0xffffffffu, value, offset);
    }
    return value;
}

// The sum of `value` over the CUDA block, valid in thread 0. Every thread of
// the block must call it.
__device__ unsigned long long block_sum(unsigned long long value) {
    __shared__ unsigned long long warp_sums[kWarps];
    const unsigned lane = threadIdx.x % 32;
    const unsigned warp = threadIdx.x / 32;
    value = warp_sum(value);
    if (lane == 0) {
        warp_sums[warp] = value;
    }
    __syncthreads();
    value = threadIdx.x < kWarps ? warp_sums[threadIdx.x] : 0ull;
    if (warp == 0) {
        value = warp_sum(value);
    }
    return value;
}

// Sum of squares of the four signed bytes of `w` (dp4a: signed 8-bit dot product).
__device__ int square_sum4(unsigned w) {
    const int v = static_cast<int>(w);
    return __dp4a(v, v, 0);
}

__global__ void __launch_bounds__(kBlockThreads)
    zero_and_power_kernel(std::uint8_t* data, const std::uint64_t* present, BlockShape shape,
                          unsigned long long* sums) {
    const std::uint64_t slot = blockIdx.x;
    std::uint8_t* p = data + slot * shape.payload_bytes;
    const bool vectors =
        reinterpret_cast<std::uintptr_t>(p) % 16 == 0 && shape.payload_bytes % 16 == 0;
    if (!present_bit(present, slot)) {  // uniform across the CUDA block
        if (vectors) {
            uint4* q = reinterpret_cast<uint4*>(p);
            for (unsigned i = threadIdx.x; i < shape.payload_bytes / 16; i += blockDim.x) {
                q[i] = make_uint4(0, 0, 0, 0);
            }
        } else {
            for (unsigned i = threadIdx.x; i < shape.payload_bytes; i += blockDim.x) {
                p[i] = 0;
            }
        }
        return;
    }
    unsigned long long acc = 0;
    if (vectors) {
        const uint4* q = reinterpret_cast<const uint4*>(p);
        for (unsigned i = threadIdx.x; i < shape.payload_bytes / 16; i += blockDim.x) {
            const uint4 v = q[i];
            acc += static_cast<unsigned long long>(square_sum4(v.x) + square_sum4(v.y) +
                                                   square_sum4(v.z) + square_sum4(v.w));
        }
    } else {
        for (unsigned i = threadIdx.x; i < shape.payload_bytes; i += blockDim.x) {
            const int v = static_cast<std::int8_t>(p[i]);
            acc += static_cast<unsigned long long>(v * v);
        }
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0 && acc != 0) {
        atomicAdd(&sums[slot % shape.threads], acc);
    }
}

__global__ void power_to_float_kernel(const unsigned long long* sums, float* power,
                                      std::uint32_t threads) {
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < threads) {
        power[t] = static_cast<float>(sums[t]);
    }
}

__global__ void __launch_bounds__(kBlockThreads)
    verify_kernel(const std::uint8_t* data, const std::uint64_t* present, BlockShape shape,
                  std::uint64_t first_index, std::uint32_t antenna, unsigned long long* bad) {
    const std::uint64_t slot = blockIdx.x;
    if (!present_bit(present, slot)) {  // uniform across the CUDA block
        return;
    }
    const std::uint64_t frame_time = slot / shape.threads;
    const auto thread = static_cast<std::uint32_t>(slot % shape.threads);
    const std::uint64_t key = pattern::key(antenna, thread, first_index + frame_time);
    const std::uint8_t* p = data + slot * shape.payload_bytes;
    const unsigned words = shape.payload_bytes / 8;
    const bool aligned = reinterpret_cast<std::uintptr_t>(p) % 8 == 0;
    unsigned long long count = 0;
    for (unsigned i = threadIdx.x; i < words; i += blockDim.x) {
        std::uint64_t got = 0;
        if (aligned) {
            got = reinterpret_cast<const std::uint64_t*>(p)[i];  // little-endian, as on the wire
        } else {
            for (unsigned b = 0; b < 8; ++b) {
                got |= std::uint64_t{p[8 * i + b]} << (8 * b);
            }
        }
        count += pattern::nonzero_bytes(got ^ pattern::word(key, i));
    }
    if (threadIdx.x == 0) {  // a trailing partial word: the low bytes of word `words`
        const std::uint64_t w = pattern::word(key, words);
        for (unsigned j = words * 8; j < shape.payload_bytes; ++j) {
            count += p[j] != static_cast<std::uint8_t>(w >> (8 * (j - words * 8))) ? 1u : 0u;
        }
    }
    count = block_sum(count);
    if (threadIdx.x == 0 && count != 0) {
        atomicAdd(bad, count);
    }
}

// The block's threads copy `bytes` from src to dst, whose addresses agree
// modulo sizeof(Word): the bytes up to dst's first Word boundary, then whole
// Words, then the bytes left over. Any length and alignment works; only the
// width of the accesses depends on them. (dst may be mapped host memory:
// every access is a plain load or store, in Words or bytes.)
template <class Word>
__device__ void copy_in_words(unsigned char* dst, const unsigned char* src, std::uint64_t bytes) {
    constexpr std::uint64_t kWord = sizeof(Word);
    const std::uint64_t misaligned = reinterpret_cast<std::uintptr_t>(dst) % kWord;
    const std::uint64_t to_boundary = misaligned == 0 ? 0 : kWord - misaligned;
    const std::uint64_t head = to_boundary < bytes ? to_boundary : bytes;
    for (std::uint64_t b = threadIdx.x; b < head; b += blockDim.x) {
        dst[b] = src[b];
    }
    const std::uint64_t words = (bytes - head) / kWord;
    auto* d = reinterpret_cast<Word*>(dst + head);
    const auto* s = reinterpret_cast<const Word*>(src + head);
    for (std::uint64_t w = threadIdx.x; w < words; w += blockDim.x) {
        d[w] = s[w];
    }
    for (std::uint64_t b = head + words * kWord + threadIdx.x; b < bytes; b += blockDim.x) {
        dst[b] = src[b];
    }
}

// One CUDA block per copy: the block's threads stride through it, in the
// widest words (16, 8, 4 bytes) both ends can share, else in bytes.
__global__ void __launch_bounds__(kBlockThreads)
    gather_kernel(const GatherCopy* copies, std::uint32_t count) {
    if (blockIdx.x >= count) {
        return;
    }
    const GatherCopy c = copies[blockIdx.x];
    auto* dst = static_cast<unsigned char*>(c.dst);
    const auto* src = static_cast<const unsigned char*>(c.src);
    const std::uintptr_t apart =
        reinterpret_cast<std::uintptr_t>(dst) ^ reinterpret_cast<std::uintptr_t>(src);
    if ((apart & 15u) == 0) {
        copy_in_words<uint4>(dst, src, c.bytes);
    } else if ((apart & 7u) == 0) {
        copy_in_words<uint2>(dst, src, c.bytes);
    } else if ((apart & 3u) == 0) {
        copy_in_words<unsigned int>(dst, src, c.bytes);
    } else {
        copy_in_words<unsigned char>(dst, src, c.bytes);
    }
}

bool valid(const BlockShape& shape) {
    const std::uint64_t slots = std::uint64_t{shape.frames} * shape.threads;
    return slots != 0 && slots <= kMaxSlots && shape.payload_bytes != 0;
}

}  // namespace

cudaError_t launch_zero_missing_and_power(std::uint8_t* data, const std::uint64_t* present,
                                          BlockShape shape, unsigned long long* sums, float* power,
                                          cudaStream_t stream) {
    if (!valid(shape)) {
        return cudaErrorInvalidValue;
    }
    const auto slots = static_cast<unsigned>(std::uint64_t{shape.frames} * shape.threads);
    cudaError_t err =
        cudaMemsetAsync(sums, 0, std::size_t{shape.threads} * sizeof(unsigned long long), stream);
    if (err != cudaSuccess) {
        return err;
    }
    zero_and_power_kernel<<<slots, kBlockThreads, 0, stream>>>(data, present, shape, sums);
    if ((err = cudaGetLastError()) != cudaSuccess) {
        return err;
    }
    power_to_float_kernel<<<(shape.threads + 255) / 256, 256, 0, stream>>>(sums, power,
                                                                           shape.threads);
    return cudaGetLastError();
}

cudaError_t launch_verify_pattern(const std::uint8_t* data, const std::uint64_t* present,
                                  BlockShape shape, std::uint64_t first_index,
                                  std::uint32_t antenna, unsigned long long* bad,
                                  cudaStream_t stream) {
    if (!valid(shape)) {
        return cudaErrorInvalidValue;
    }
    const auto slots = static_cast<unsigned>(std::uint64_t{shape.frames} * shape.threads);
    const cudaError_t err = cudaMemsetAsync(bad, 0, sizeof(unsigned long long), stream);
    if (err != cudaSuccess) {
        return err;
    }
    verify_kernel<<<slots, kBlockThreads, 0, stream>>>(data, present, shape, first_index, antenna,
                                                       bad);
    return cudaGetLastError();
}

cudaError_t launch_gather(const GatherCopy* copies, std::uint32_t count, cudaStream_t stream) {
    if (count == 0) {
        return cudaSuccess;
    }
    if (count > kMaxGatherCopies) {
        return cudaErrorInvalidValue;
    }
    gather_kernel<<<count, kBlockThreads, 0, stream>>>(copies, count);
    return cudaGetLastError();
}

}  // namespace ibvcap::gpu::detail
