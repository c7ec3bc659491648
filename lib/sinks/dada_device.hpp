// A GPU ring's blocks (psrdada's dada_db -g): each block segment holds the
// 64-byte cudaIpcMemHandle_t of the block's device memory, not the data
// (psrdada src/ipcutil_cuda.cu, ipc_alloc_cuda; sync->on_device_id the GPU).
// Opening them is the one device call of the DADA path outside the copies:
// the GPU build opens the handles with cudaIpcOpenMemHandle (gpu/,
// cuda_dada_opener); the stand-in (tests, --gpu-standin) reads a handle of
// its own making that names a System V segment holding the block, so a
// reader in another process sees the bytes, as a GPU ring's would.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "lib/core/device_calls.hpp"
#include "lib/sinks/block_ring.hpp"

namespace ibvcap {

struct DadaDeviceBlocks {
    std::vector<std::uint8_t*> blocks;    // device pointers, one per ring block
    std::unique_ptr<BlockMemory> memory;  // copies into them
    std::function<void()> close;          // gives the blocks back (at the end)
};

// Opens a ring's blocks on GPU `device` from the handles in its block
// segments. Throws DadaError (one line: the key is the caller's).
using DadaDeviceOpener = std::function<DadaDeviceBlocks(
    int device, const std::vector<const std::uint8_t*>& handles, std::uint64_t block_bytes)>;

// The stand-in's handle: this magic (NUL included), then the key_t of the
// segment that holds the block.
inline constexpr char kDadaStandinMagic[] = "IBVCAP-STANDIN";

// The stand-in's opener; `log` (may be null) records the device calls the
// GPU build would make (lib/core/device_calls.hpp).
DadaDeviceOpener standin_dada_opener(DeviceCallLog* log);

}  // namespace ibvcap
