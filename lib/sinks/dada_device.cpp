// The stand-in's GPU ring blocks (lib/sinks/dada_device.hpp).
#include "lib/sinks/dada_device.hpp"

#include <fmt/format.h>
#include <sys/ipc.h>
#include <sys/shm.h>

#include <cerrno>
#include <cstring>

#include "lib/sinks/dada_ring.hpp"

namespace ibvcap {

DadaDeviceOpener standin_dada_opener(DeviceCallLog* log) {
    return [log](int /*device*/, const std::vector<const std::uint8_t*>& handles,
                 std::uint64_t block_bytes) {
        DadaDeviceBlocks out;
        std::vector<void*> attached;
        for (const std::uint8_t* h : handles) {
            key_t key = 0;
            if (std::memcmp(h, kDadaStandinMagic, sizeof kDadaStandinMagic) != 0) {
                for (void* a : attached) {
                    shmdt(a);
                }
                throw DadaError(
                    "its GPU blocks' handles are not the stand-in's (a ring made by dada_db -g "
                    "needs the CUDA build and a GPU, not --gpu-standin)");
            }
            std::memcpy(&key, h + sizeof kDadaStandinMagic, sizeof key);
            const int id = shmget(key, 0, 0);
            void* at = id < 0 ? reinterpret_cast<void*>(-1) : shmat(id, nullptr, 0);
            shmid_ds ds{};
            if (at == reinterpret_cast<void*>(-1) || shmctl(id, IPC_STAT, &ds) != 0 ||
                ds.shm_segsz < block_bytes) {
                const int err = errno;
                for (void* a : attached) {
                    shmdt(a);
                }
                throw DadaError(
                    fmt::format("its stand-in GPU block (key 0x{:08x}) cannot be "
                                "opened: {}",
                                static_cast<std::uint32_t>(key), std::strerror(err)));
            }
            attached.push_back(at);
            out.blocks.push_back(static_cast<std::uint8_t*>(at));
        }
        out.memory = make_host_block_memory(log);
        out.close = [attached] {
            for (void* a : attached) {
                shmdt(a);
            }
        };
        return out;
    };
}

}  // namespace ibvcap
