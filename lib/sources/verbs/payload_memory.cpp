// The payload memories of lib/sources/verbs/payload_memory.hpp: host memory
// and the host stand-in for GPU memory.
#include "lib/sources/verbs/payload_memory.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <utility>

#include "lib/core/device_reads.hpp"

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
// build's cudaHostRegister (mapped) / cudaHostUnregister would be, and the
// buffer remembered: copies into it are gathered (lib/core/device_reads.hpp).
bool StandinDevicePayloadMemory::pin_host_buffer(void* buffer, std::size_t bytes) const {
    log_.record(DeviceCallLog::Call::pin);
    if (refuse_pins_) {
        return false;
    }
    const std::lock_guard lock(pins_mu_);
    pinned_.emplace_back(static_cast<const std::uint8_t*>(buffer), bytes);
    return true;
}

void StandinDevicePayloadMemory::unpin_host_buffer(void* buffer) const {
    log_.record(DeviceCallLog::Call::pin);
    const std::lock_guard lock(pins_mu_);
    for (auto it = pinned_.begin(); it != pinned_.end(); ++it) {
        if (it->first == buffer) {
            pinned_.erase(it);
            return;
        }
    }
}

std::size_t StandinDevicePayloadMemory::pinned_buffers() const {
    const std::lock_guard lock(pins_mu_);
    return pinned_.size();
}

bool StandinDevicePayloadMemory::lands_in_pinned(std::span<const Copy> copies) const {
    const std::lock_guard lock(pins_mu_);
    for (const auto& [base, size] : pinned_) {
        const bool all = std::all_of(copies.begin(), copies.end(), [&](const Copy& c) {
            const auto* d = static_cast<const std::uint8_t*>(c.dst);
            return d >= base && c.bytes <= size &&
                   d - base <= static_cast<std::ptrdiff_t>(size - c.bytes);
        });
        if (all) {
            return true;
        }
    }
    return false;
}

// The calls the GPU build makes for a writer's batch (gpu/ SlotReader): into
// a pinned, mapped buffer one gather launch per kSlotReadGatherCopies
// copies; otherwise strided copies, counted here as their worst case, one
// per copy.
void StandinDevicePayloadMemory::copy_to_host(std::span<const Copy> copies) const {
    read(copies, lands_in_pinned(copies) ? gather_launches(copies.size()) : copies.size());
}

void StandinDevicePayloadMemory::copy_gathered(std::span<const Copy> copies) const {
    read(copies, gather_launches(copies.size()));
}

void StandinDevicePayloadMemory::read(std::span<const Copy> copies, std::size_t calls) const {
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
        for (std::size_t i = 0; i < calls; ++i) {
            log_.record(DeviceCallLog::Call::copy, i == 0 ? copies.size() : 0, i == 0 ? bytes : 0);
        }
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
