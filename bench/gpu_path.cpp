// The GPU payload path's two readers, measured on their own at the highest
// rate this host drives them (issue 27; scripts/gpu-check.sh runs it):
//
//   * writers: a writer buffer's device pieces copied to the host by the
//     payload memory's DeviceMemory (gpu/cuda_copies.cpp SlotReader), in the
//     layout that costs the most calls: per-antenna files from one shared
//     QP, so each buffer takes every 8th receive slot (gpu-cuda-2.md N1);
//   * rings: the block rings' batches (BlockRing::place of held device slots,
//     one synchronize_copies per 256 frames: the block sink's copy thread),
//     into ring blocks of make_device_block_memory, a consumer releasing
//     them as they come.
//
// With a GPU (and a build with CUDA) the payload slots are GPU memory of
// make_gpu_payload_memory (nvidia-peermem mode: the simulated NIC registers
// any address; nothing is received into it, the slots are filled once with
// the generator's payloads by cudaMemcpy) and the rings are GPU memory.
// Without one the same loops run on the host stand-in
// (StandinDevicePayloadMemory, make_host_block_memory with its call log) and
// print the same lines, marked "stand-in". Every line is measured in this
// run; the payload of every frame read is checked against the generator's
// pattern (on the host for the writers' buffers, on the GPU by
// verify_pattern for the rings' blocks). Exit 1 when a byte is off or the
// GPU path could not be set up.
//
//   bench/gpu_path [--gpu ID] [--seconds S]
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gpu/gpu.hpp"
#include "lib/core/device_calls.hpp"
#include "lib/sinks/block_ring.hpp"
#include "lib/sources/verbs/payload_memory.hpp"
#include "lib/traffic/pattern.hpp"
#include "test/sim/sim_nic.hpp"

namespace {

using namespace ibvcap;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr std::size_t kSlots = 4096;       // the default --ring-depth
constexpr std::size_t kPayload = 8192;     // CODIF payload
constexpr std::size_t kSlotStride = 8960;  // --max-frame 9022 - 106, rounded to 64 B
constexpr std::uint32_t kAntennas = 8;     // in one QP: per-antenna files interleave
constexpr std::uint16_t kThreads = 2;      // CODIF threads per antenna
constexpr std::size_t kStreams = kAntennas * kThreads;
constexpr std::size_t kPerStream = kSlots / kStreams;  // frames of one stream per pass
constexpr std::size_t kBufferFrames = 508;             // a 4 MiB buffer of 8 KiB records
constexpr std::size_t kBatch = 256;                    // the block sink's batch

// Frame i of a pass sits in slot i: stream i % 16, index pass * kPerStream + i / 16.
std::uint32_t antenna_of(std::size_t slot) {
    return 0x0a000000u + 11u + static_cast<std::uint32_t>(slot % kStreams / kThreads);
}
std::uint16_t thread_of(std::size_t slot) {
    return static_cast<std::uint16_t>(slot % kThreads);
}
std::uint64_t index_of(std::size_t slot, std::uint64_t pass) {
    return pass * kPerStream + slot / kStreams;
}

struct Line {
    std::string what;
    double frames_per_s = 0;
    double calls_per_1000 = 0;
    std::uint64_t frames = 0;
    std::uint64_t bytes_off = 0;
    std::string note;
};

void print(const Line& l, std::string_view where) {
    fmt::print(
        "gpu-check: {:<8} {:>12.0f} frames/s  {:>7.2f} copy calls per 1,000 frames  "
        "{:>9} frames  {} payload bytes off the pattern  ({}{})\n",
        l.what, l.frames_per_s, l.calls_per_1000, l.frames, l.bytes_off, where, l.note);
}

struct Memory {
    std::string where;  // "GPU 0 (...)" or "stand-in"
    bool gpu = false;
    sim::SimProvider provider;
    std::unique_ptr<verbs::Device> device;
    std::unique_ptr<PayloadMemory> payload;
    StandinDevicePayloadMemory* standin = nullptr;
    PayloadMemory::Region region;
    fs::path sysfs;
    DeviceCallLog ring_log;

    ~Memory() {
        if (!sysfs.empty()) {
            std::error_code ec;
            fs::remove_all(sysfs, ec);
        }
    }
    std::uint8_t* slot(std::size_t i) const { return region.device_view + i * kSlotStride; }
    std::uint64_t copy_calls() const {
        return gpu ? gpu::device_copy_calls(*region.device)
                   : standin->log().calls(DeviceCallLog::Call::copy);
    }
};

// Sets up the payload slots, filled with pass 0's payloads. Returns false
// with the reason printed when --gpu was asked for and cannot run.
bool set_up(Memory& m, int gpu_id) {
    sim::SimConfig config;
    m.provider.add(config);
    m.device = m.provider.open(config.name, config.port);
    std::vector<std::uint8_t> image(kSlots * kSlotStride);
    for (std::size_t i = 0; i < kSlots; ++i) {
        fill_pattern(pattern_key(antenna_of(i), thread_of(i), index_of(i, 0)),
                     MutableBytes(image.data() + i * kSlotStride, kPayload));
    }
    if (gpu_id >= 0) {
        // nvidia-peermem "loaded" in a private sysfs: the simulated NIC
        // registers the GPU memory (test/test_gpu.cpp, PeermemHost).
        m.sysfs = fs::temp_directory_path() / fmt::format("ibvcap-gpu-check-{}", ::getpid());
        fs::create_directories(m.sysfs / "module" / "nvidia_peermem");
        m.payload = gpu::make_gpu_payload_memory(gpu_id, gpu::Mode::peermem, m.sysfs);
        m.region = m.payload->allocate(*m.device, kSlots * kSlotStride);
        if (m.region.device == nullptr) {
            fmt::print("gpu-check: FAIL payload memory is not GPU memory here: {}\n",
                       m.payload->describe());
            return false;
        }
        gpu::copy_to_device(m.region.device_view, image.data(), image.size());
        m.gpu = true;
        m.where = fmt::format("GPU {}, {}", gpu_id, m.payload->describe());
    } else {
        auto standin = std::make_unique<StandinDevicePayloadMemory>();
        m.standin = standin.get();
        m.payload = std::move(standin);
        m.region = m.payload->allocate(*m.device, kSlots * kSlotStride);
        std::memcpy(m.region.device_view, image.data(), image.size());
        m.where = "stand-in: host memory, calls counted as the GPU build makes them";
    }
    return true;
}

// Per-antenna files from one QP: antenna a's buffer takes slots a*2, a*2+1,
// a*2+16, ... (every 8th pair), 508 at a time, into one pinned 4 MiB buffer.
Line writers(Memory& m, double seconds) {
    const DeviceMemory& dev = *m.region.device;
    std::vector<std::uint8_t> buffer(kBufferFrames * kPayload + 4096);
    auto* staging = reinterpret_cast<std::uint8_t*>(
        (reinterpret_cast<std::uintptr_t>(buffer.data()) + 4095) / 4096 * 4096);
    const bool pinned = dev.pin_host_buffer(staging, kBufferFrames * kPayload);
    std::vector<std::vector<std::size_t>> per_antenna(kAntennas);
    for (std::size_t i = 0; i < kSlots; ++i) {
        per_antenna[i % kStreams / kThreads].push_back(i);
    }
    Line l;
    l.what = "writers";
    std::vector<DeviceMemory::Copy> copies;
    copies.reserve(kBufferFrames);
    const std::uint64_t calls_before = m.copy_calls();
    const auto start = Clock::now();
    const auto end = start + std::chrono::duration<double>(seconds);
    bool checked = false;
    while (Clock::now() < end || !checked) {
        for (std::uint32_t a = 0; a < kAntennas; ++a) {
            const auto& slots = per_antenna[a];
            for (std::size_t at = 0; at < slots.size(); at += kBufferFrames) {
                copies.clear();
                const std::size_t n = std::min(kBufferFrames, slots.size() - at);
                for (std::size_t j = 0; j < n; ++j) {
                    copies.push_back({staging + j * kPayload, m.slot(slots[at + j]), kPayload});
                }
                dev.flush_nic_writes();
                dev.copy_to_host(copies);
                l.frames += n;
                if (!checked) {  // the first pass, every frame (pass 0's payloads)
                    for (std::size_t j = 0; j < n; ++j) {
                        const std::size_t s = slots[at + j];
                        l.bytes_off +=
                            check_pattern(pattern_key(antenna_of(s), thread_of(s), index_of(s, 0)),
                                          Bytes(staging + j * kPayload, kPayload));
                    }
                }
            }
        }
        checked = true;
    }
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    l.frames_per_s = double(l.frames) / took;
    l.calls_per_1000 = 1000.0 * double(m.copy_calls() - calls_before) / double(l.frames);
    l.note = pinned ? "; staging pinned and mapped" : "; staging NOT pinned: strided copies";
    if (pinned) {
        dev.unpin_host_buffer(staging);
    }
    return l;
}

// The block sink's copy thread, without its queue: batches of 256 held
// device slots placed into 8 rings (one per antenna) and one wait per
// batch; a consumer thread per run checks and releases the blocks.
Line rings(Memory& m, int gpu_id, double seconds) {
    DeviceCallLog log;
    std::unique_ptr<BlockMemory> memory =
        m.gpu ? gpu::make_device_block_memory(gpu_id) : make_host_block_memory(&log);
    BlockRingOptions o;
    o.frames_per_block = 64;
    o.threads = kThreads;
    o.payload_bytes = kPayload;
    o.blocks = 16;
    o.lateness = 4;
    o.batched = true;
    const CodifTiming timing{1, 1'000'000};
    std::vector<std::unique_ptr<BlockRing>> rings;
    for (std::uint32_t a = 0; a < kAntennas; ++a) {
        rings.push_back(std::make_unique<BlockRing>(o, *memory, timing));
    }
    std::unique_ptr<gpu::KernelScratch> scratch;
    if (m.gpu) {
        scratch = std::make_unique<gpu::KernelScratch>(gpu_id, o);
    }
    std::atomic<std::uint64_t> off{0};
    std::atomic<std::uint64_t> checked_blocks{0};
    std::atomic<bool> done{false};
    std::vector<std::uint8_t> host_block;
    // The consumer: every block of the first 64 frame times of each ring is
    // checked against the pattern (on the GPU with a GPU); later ones only
    // released, so the check does not set the rate.
    std::thread consumer([&] {
        std::vector<bool> first(kAntennas, true);
        for (;;) {
            bool any = false;
            for (std::uint32_t a = 0; a < kAntennas; ++a) {
                const Block* b = rings[a]->acquire(std::chrono::milliseconds(0));
                if (b == nullptr) {
                    continue;
                }
                any = true;
                if (first[a]) {
                    first[a] = false;
                    const std::uint32_t antenna = 0x0a000000u + 11u + a;
                    if (m.gpu) {
                        off += gpu::verify_pattern(*b, o, antenna, *scratch);
                    } else {
                        const std::size_t bytes =
                            std::size_t{o.frames_per_block} * kThreads * kPayload;
                        host_block.assign(b->data, b->data + bytes);
                        for (std::uint32_t f = 0; f < o.frames_per_block; ++f) {
                            for (std::uint16_t t = 0; t < kThreads; ++t) {
                                if (b->has(f, t, kThreads)) {
                                    off += check_pattern(
                                        pattern_key(antenna, t, b->first_index + f),
                                        Bytes(host_block.data() + (f * kThreads + t) * kPayload,
                                              kPayload));
                                }
                            }
                        }
                    }
                    ++checked_blocks;
                }
                rings[a]->release(b);
            }
            if (!any) {
                if (done.load()) {
                    return;
                }
                std::this_thread::yield();
            }
        }
    });
    Line l;
    l.what = "rings";
    const std::uint64_t calls_before = m.copy_calls() + log.calls(DeviceCallLog::Call::copy);
    const auto start = Clock::now();
    const auto end = start + std::chrono::duration<double>(seconds);
    std::uint64_t pass = 0;
    std::size_t in_batch = 0;
    std::uint64_t full = 0;
    std::uint64_t batches = 1;  // (the last, partial one)
    while (Clock::now() < end || pass == 0) {
        // The slots hold pass 0's payloads; later passes re-place the same
        // bytes under later frame indexes (only the first block is checked).
        for (std::size_t i = 0; i < kSlots; ++i) {
            const std::size_t a = i % kStreams / kThreads;
            rings[a]->place(thread_of(i), index_of(i, pass), Bytes(m.slot(i), kPayload),
                            m.region.device, /*held=*/true);
            if (++in_batch == kBatch) {
                ++batches;
                m.region.device->flush_nic_writes();
                for (auto& r : rings) {
                    r->synchronize_copies();
                }
                in_batch = 0;
            }
        }
        ++pass;
    }
    for (auto& r : rings) {
        r->synchronize_copies();
        r->flush();
    }
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    done = true;
    consumer.join();
    for (auto& r : rings) {
        const BlockRingStats s = r->stats();
        l.frames += s.placed;
        full += s.ring_full;
    }
    l.frames_per_s = double(l.frames) / took;
    // Copy calls: the stand-in logs them; DeviceBlockMemory launches one
    // gather per batch (issue_gather), which its reader does not count, so
    // the GPU line gives the batches, an upper bound of its launches.
    const std::uint64_t calls =
        m.gpu ? batches : log.calls(DeviceCallLog::Call::copy) + m.copy_calls() - calls_before;
    l.calls_per_1000 = 1000.0 * double(calls) / double(std::max<std::uint64_t>(l.frames, 1));
    l.bytes_off = off.load();
    l.note = fmt::format("; {} blocks checked, {} frames found the ring full",
                         checked_blocks.load(), full);
    return l;
}

}  // namespace

int main(int argc, char** argv) {
    int gpu_id = -1;
    double seconds = 3;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "--gpu" && i + 1 < argc) {
            gpu_id = std::atoi(argv[++i]);
        } else if (a == "--seconds" && i + 1 < argc) {
            seconds = std::atof(argv[++i]);
        } else {
            fmt::print(stderr, "usage: gpu_path [--gpu ID] [--seconds S]\n");
            return 2;
        }
    }
    if (gpu_id >= 0 && !gpu::gpu_available()) {
        fmt::print("gpu-check: FAIL --gpu {}: no GPU here (or built without CUDA)\n", gpu_id);
        return 1;
    }
    try {
        Memory m;
        if (!set_up(m, gpu_id)) {
            return 1;
        }
        fmt::print("gpu-check: payload slots: {}\n", m.where);
        const Line w = writers(m, seconds);
        print(w, m.gpu ? "GPU" : "stand-in");
        const Line r = rings(m, gpu_id, seconds);
        print(r, m.gpu ? "GPU" : "stand-in");
        const bool ok = w.bytes_off == 0 && r.bytes_off == 0 && w.frames > 0 && r.frames > 0;
        fmt::print("gpu-check: pattern check {}\n", ok ? "PASS (0 bytes off)" : "FAIL");
        return ok ? 0 : 1;
    } catch (const std::exception& e) {
        fmt::print("gpu-check: FAIL {}\n", e.what());
        return 1;
    }
}
