// The payload memories of lib/sources/verbs/payload_memory.hpp: host memory
// and the host stand-in for GPU memory.
#include "lib/sources/verbs/payload_memory.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <utility>

namespace ibvcap {

namespace {

class HostPayloadMemory final : public PayloadMemory {
  public:
    Region allocate(verbs::Device& device, std::size_t bytes) override {
        void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
        if (p == nullptr) {
            throw std::bad_alloc();
        }
        std::shared_ptr<void> owner(p, std::free);
        std::memset(p, 0, bytes);  // touch the pages before the NIC writes them
        Region r;
        r.mr = device.register_memory(p, bytes);
        r.registered_bytes = bytes;
        r.nic_address = reinterpret_cast<std::uintptr_t>(p);
        r.host_view = static_cast<std::uint8_t*>(p);
        r.owner = std::move(owner);
        return r;
    }
    std::string describe() const override { return "host memory"; }
};

}  // namespace

std::unique_ptr<PayloadMemory> make_host_payload_memory() {
    return std::make_unique<HostPayloadMemory>();
}

PayloadMemory::Region StandinDevicePayloadMemory::allocate(verbs::Device& device,
                                                           std::size_t bytes) {
    Region r = HostPayloadMemory().allocate(device, bytes);
    r.device_view = r.host_view;
    r.host_view = nullptr;
    r.device = this;
    return r;
}

std::string StandinDevicePayloadMemory::describe() const {
    return "host memory standing in for GPU memory (read only through batched copies)";
}

void StandinDevicePayloadMemory::flush_nic_writes() const {
    sticky_.run([&] {
        log_.record(DeviceCallLog::Call::flush);
        log_.flushed();
    });
}

// Host memory needs no page-locking here; the call is logged as the GPU
// build's cudaHostRegister / cudaHostUnregister would be.
bool StandinDevicePayloadMemory::pin_host_buffer(void*, std::size_t) const {
    log_.record(DeviceCallLog::Call::pin);
    return true;
}

void StandinDevicePayloadMemory::unpin_host_buffer(void*) const {
    log_.record(DeviceCallLog::Call::pin);
}

void StandinDevicePayloadMemory::copy_to_host(std::span<const Copy> copies) const {
    sticky_.run([&] {
        if (batches_.load(std::memory_order_relaxed) >= fail_after_) {
            after_fault_.fetch_add(1, std::memory_order_relaxed);
            throw std::runtime_error(
                "cudaMemcpy2DAsync: an illegal memory access was "
                "encountered (injected)");
        }
        std::uint64_t bytes = 0;
        for (const auto& c : copies) {
            bytes += c.bytes;
        }
        // One batch is one call in the GPU build (plan_strided_copies, or a
        // gather kernel for the block rings) and one stream synchronize.
        log_.record(DeviceCallLog::Call::copy, copies.size(), bytes);
        log_.record(DeviceCallLog::Call::synchronize);
        log_.read();
        batches_.fetch_add(1, std::memory_order_relaxed);
        copies_.fetch_add(copies.size(), std::memory_order_relaxed);
        for (const auto& c : copies) {
            std::memcpy(c.dst, c.src, c.bytes);
        }
    });
}

}  // namespace ibvcap
