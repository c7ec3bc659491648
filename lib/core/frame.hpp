// One received frame as the sources hand it to the demultiplexer.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>

#include "formats/bytes.hpp"
#include "formats/packet.hpp"

namespace ibvcap {

// Memory the CPU cannot read directly (GPU memory written by the NIC through
// GPUDirect RDMA). Copies out of it are batched: one call per batch, so the
// GPU build can turn runs of equal-sized, evenly spaced copies (consecutive
// receive slots) into one strided copy.
class DeviceMemory {
  public:
    struct Copy {
        void* dst = nullptr;
        const void* src = nullptr;
        std::size_t bytes = 0;
    };
    virtual ~DeviceMemory() = default;
    // GPUDirect RDMA: a completion the CPU has seen does not make the NIC's
    // writes into GPU memory visible to the GPU's copy engines and kernels
    // (CUDA runtime API, cudaDeviceFlushGPUDirectRDMAWrites, and the
    // GPUDirect RDMA guide, "Synchronization and Memory Ordering"; NCCL
    // flushes after every receive below compute capability 9.0). So every
    // thread that reads payload slots calls this once per batch: after it
    // has taken the batch's frames (all completed before), before it issues
    // the batch's first read. Where the device orders the NIC's writes for
    // its own reads ("owner" or better) it issues nothing. Throws like
    // copy_to_host.
    virtual void flush_nic_writes() const = 0;
    // Device → host; returns when every copy has landed. Throws
    // std::runtime_error on a device error; after one, every later call
    // throws at once without touching the device (StickyDeviceError).
    virtual void copy_to_host(std::span<const Copy> copies) const = 0;
    // The same copies as one gather kernel (gpu/kernels.cu) whatever their
    // layout: what the block rings' copy thread issues into ring blocks in
    // device memory. The GPU build's block memory launches it itself; host
    // block memory paired with the stand-in calls this, so the stand-in logs
    // one call as a GPU would make.
    virtual void copy_gathered(std::span<const Copy> copies) const { copy_to_host(copies); }
    // A host buffer that copy_to_host will write into again and again (a
    // writer's staging buffer): the GPU build page-locks it
    // (cudaHostRegister), so copies land by DMA instead of through the
    // driver's own staging (CUDA runtime API, "API synchronization
    // behavior": copies to pageable memory are staged). Best effort: false
    // when the buffer stays pageable (copies still work). Call
    // unpin_host_buffer before the buffer is freed, on the same object.
    virtual bool pin_host_buffer(void* buffer, std::size_t bytes) const = 0;
    virtual void unpin_host_buffer(void* buffer) const = 0;
};

// A device error may leave the device unusable for the rest of the process
// (CUDA: cudaErrorIllegalAddress, cudaErrorLaunchFailure, ECC and the like
// are sticky; the CUDA runtime API reference, "Error Handling"). So once one
// call failed, no further device work is issued: every later call throws the
// first error at once. Implementations of DeviceMemory and BlockMemory run
// their device work through run().
class StickyDeviceError {
  public:
    // Throws the recorded error, if there is one.
    void check() const {
        if (failed_.load(std::memory_order_acquire)) {
            const std::lock_guard lock(mu_);
            throw std::runtime_error(message_ +
                                     " (an earlier device error; no further device "
                                     "work is issued)");
        }
    }
    // f() unless an error was recorded; an exception from f is recorded
    // (the first one) and rethrown.
    template <class F>
    void run(F&& f) const {
        check();
        try {
            f();
        } catch (const std::exception& e) {
            record(e.what());
            throw;
        }
    }
    bool failed() const { return failed_.load(std::memory_order_acquire); }

  private:
    void record(const char* what) const {
        const std::lock_guard lock(mu_);
        if (!failed_.load(std::memory_order_relaxed)) {
            message_ = what;
            failed_.store(true, std::memory_order_release);
        }
    }
    mutable std::mutex mu_;
    mutable std::string message_;
    mutable std::atomic<bool> failed_{false};
};

// The zero-copy hand-off (docs/architecture.md): a frame that still sits in a
// NIC receive slot carries a lease. A consumer that wants the bytes after
// on_frame() returns (a writer thread, the block-ring copy thread) calls
// Frame::hold() inside on_frame(); the source then does not re-post the slot
// until every holder has passed the lease's token back to release().
class SlotOwner {
  public:
    virtual ~SlotOwner() = default;
    // Any thread: the holder is done with these slots. Never blocks for long
    // (a short lock shared with the poll thread's try_lock).
    virtual void release(std::span<const std::uint64_t> tokens) = 0;
    // Any thread: whether bytes it lent (ptr, len) were still the frame's
    // when this is asked; false when they went (a mapped input file shrank:
    // lib/sources/guarded_map.hpp), so a writer that read them after may have
    // read zeros. Bytes not its own: true.
    virtual bool intact(const std::uint8_t* /*ptr*/, std::size_t /*len*/) const { return true; }
};

// Who holds a slot: the writers (disk threads) or the block rings' copy
// thread. Each has its own share of a ring's hold budget (the verbs engine,
// EngineOptions::ring_hold_share), so a copy thread that stalls (a ring made
// at a stream's first frame, a gather behind a consumer kernel) runs out of
// its own share only: the writers keep holding, and writing.
enum class Holder : std::uint8_t { writer, ring };

struct FrameLease {
    SlotOwner* owner = nullptr;
    std::uint64_t token = 0;       // what a writer passes back
    std::uint64_t ring_token = 0;  // what the block rings pass back
    std::uint32_t holds = 0;       // raised by hold(); read by the source after on_frame()
    std::uint32_t ring_holds = 0;  // raised by hold(Holder::ring)
    bool allowed = false;          // false: the writers' share is used up; copy instead
    bool ring_allowed = false;     // false: the rings' share is used up
    bool pressure = false;         // half the writers' share is used: pass slots back soon
    std::uint64_t token_of(Holder who) const { return who == Holder::ring ? ring_token : token; }
};

// The longest length on the wire a frame may claim: libpcap's largest
// snapshot length (MAXIMUM_SNAPLEN, pcap-int.h), longer than any frame of a
// link ibvcap reads (a 9,216-byte jumbo frame; an IPv4 datagram is at most
// 65,535 bytes). A pcap record header that claims more, or less than was
// captured, is damaged (lib/demux/demux.cpp, Demux::on_frame).
inline constexpr std::uint32_t kMaxWireBytes = 262144;

// A frame may sit in two pieces: with the verbs header/payload split, `head` is
// SGE0 (host memory: Ethernet..CODIF header) and `tail` is SGE1 (the payload).
// Contiguous sources (pcap) leave `tail` empty.
struct Frame {
    Bytes head;
    Bytes tail;
    std::uint32_t wire_bytes = 0;    // length on the wire (>= captured when truncated)
    std::uint64_t timestamp_ns = 0;  // UNIX time in nanoseconds
    // The header the frame starts with: Ethernet but from capture files of
    // other link types (lib/sources/pcap_file.hpp).
    LinkType link = LinkType::ethernet;
    // Non-null: `tail` is device memory, read only through this (the CPU
    // cannot dereference it). `head` is always host memory.
    const DeviceMemory* tail_device = nullptr;
    // Non-null: the frame's memory is a receive slot that may be held.
    FrameLease* lease = nullptr;

    std::uint64_t captured_bytes() const { return head.size() + tail.size(); }

    // Keep the frame's memory past on_frame(): true when the source allows it,
    // and then the caller must pass lease->token to lease->owner->release()
    // exactly once when done. False: copy what is needed now.
    // The token to pass back is lease->token_of(who).
    bool hold(Holder who = Holder::writer) const {
        if (lease == nullptr) {
            return false;
        }
        if (who == Holder::ring) {
            if (!lease->ring_allowed) {
                return false;
            }
            ++lease->ring_holds;
            return true;
        }
        if (!lease->allowed) {
            return false;
        }
        ++lease->holds;
        return true;
    }

    // Copy `out.size()` bytes starting at `offset` across both pieces. The caller
    // has checked offset + out.size() <= captured_bytes(). False, and nothing
    // read, when some of them lie in device memory (`tail_device`): the
    // thread that parses frames (the poll thread) never touches the device.
    [[nodiscard]] bool gather(std::size_t offset, MutableBytes out) const {
        std::size_t done = 0;
        if (offset < head.size()) {
            done = std::min(out.size(), head.size() - offset);
        }
        if (done < out.size() && tail_device != nullptr) {
            return false;
        }
        if (done > 0) {
            std::memcpy(out.data(), head.data() + offset, done);
        }
        if (done < out.size()) {
            const std::size_t tail_offset = offset + done - head.size();
            std::memcpy(out.data() + done, tail.data() + tail_offset, out.size() - done);
        }
        return true;
    }

    // The pieces covering [offset, offset + len) of the frame: up to two spans.
    // The caller has checked the range lies within captured_bytes().
    void slice(std::size_t offset, std::size_t len, Bytes& first, Bytes& second) const {
        if (offset >= head.size()) {
            first = tail.subspan(offset - head.size(), len);
            second = {};
            return;
        }
        const std::size_t in_head = std::min(len, head.size() - offset);
        first = head.subspan(offset, in_head);
        second = tail.subspan(0, len - in_head);
    }
};

}  // namespace ibvcap
