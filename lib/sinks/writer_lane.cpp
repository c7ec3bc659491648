// A lane's pins of its staging buffers, and the SIGPIPE every writing
// thread blocks (lib/sinks/writer_lane.hpp).
#include "lib/sinks/writer_lane.hpp"

#include <pthread.h>

#include <csignal>

namespace ibvcap {

void writer_parts::block_sigpipe_here() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

Writer::Lane::~Lane() {
    unpin(nullptr);
}

void Writer::Lane::pin_staging(const DeviceMemory& device) {
    if (!staging) {
        return;
    }
    for (const Pinned& p : pinned) {
        if (p.buffer == staging.get() && p.device == &device) {
            return;
        }
    }
    const bool ok = device.pin_host_buffer(staging.get(), staging_bytes);  // best effort
    pinned.push_back({staging.get(), &device, ok});
}

void Writer::Lane::unpin(const void* buffer) {
    for (std::size_t i = 0; i < pinned.size();) {
        if (buffer == nullptr || pinned[i].buffer == buffer) {
            if (pinned[i].ok) {
                pinned[i].device->unpin_host_buffer(const_cast<void*>(pinned[i].buffer));
            }
            pinned[i] = pinned.back();
            pinned.pop_back();
        } else {
            ++i;
        }
    }
}

}  // namespace ibvcap
