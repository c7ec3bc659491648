// Copies: the block rings' memory on the GPU (DeviceBlockMemory: staged
// host-to-device copies and one gather kernel per batch) and the writers'
// reads of payload slots (SlotReader::copy_to_host).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "gpu/cuda_common.hpp"

namespace ibvcap::gpu {

namespace detail {

namespace {

// ---- block ring memory --------------------------------------------------------

class DeviceBlockMemory final : public BlockMemory {
  public:
    explicit DeviceBlockMemory(int gpu) : gpu_(gpu) {
        select_gpu(gpu);
        // The highest priority: the gather must not queue behind a consumer's
        // kernels, or the copy thread's holds outlast their budget
        // (gpu-cuda-2.md N2b).
        stream_ = make_priority_stream();
        for (auto& chunk : chunks_) {
            chunk.host = pinned_alloc(kChunkBytes, "block ring staging");
            chunk.done = make_event();
        }
        gather_host_ = mapped_alloc(kGatherCopies * sizeof(detail::GatherCopy),
                                    "block ring gather list", gather_device_);
        gather_.reserve(kGatherCopies);
    }
    ~DeviceBlockMemory() override {
        cudaSetDevice(gpu_);
        cudaStreamSynchronize(stream_.get());  // copies in flight still read the chunks
    }
    DeviceBlockMemory(const DeviceBlockMemory&) = delete;
    DeviceBlockMemory& operator=(const DeviceBlockMemory&) = delete;

    std::uint8_t* allocate(std::size_t bytes) override {
        check(cudaSetDevice(gpu_), "cudaSetDevice");
        DevicePtr p = device_alloc(gpu_, bytes, "ring block");
        // Zeroed on the copy stream and waited for: a plain cudaMemset (legacy
        // stream) would not be ordered before copies on this non-blocking
        // stream, and a consumer may touch the block on a stream of its own.
        check(cudaMemsetAsync(p.get(), 0, bytes, stream_.get()), "cudaMemsetAsync of a ring block");
        check(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize (ring block zeroing)");
        blocks_.push_back(std::move(p));
        block_ranges_.add(blocks_.back().get(), bytes);
        return static_cast<std::uint8_t*>(blocks_.back().get());
    }

    void copy_in(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) override {
        while (bytes > 0) {
            Chunk* chunk = &chunks_[current_];
            if (chunk->used == kChunkBytes) {
                chunk = &next_chunk();
            }
            const std::size_t n = std::min(bytes, kChunkBytes - chunk->used);
            std::uint8_t* stage = bytes_of(chunk->host) + chunk->used;
            std::memcpy(stage, src, n);
            // Adjacent in both, in the same block: one copy. Never across
            // blocks: two cudaMalloc blocks may be adjacent, and one copy over
            // both fails (gpu_logic.hpp, AddressRange).
            if (!pending_.extend(dst, stage, n)) {
                issue();
                pending_ = PendingCopy{dst, stage, n, block_ranges_.range_of(dst)};
            }
            chunk->used += n;
            if (pending_.bytes >= kIssueBytes) {
                issue();  // start the DMA while the rest of the block fills
            }
            dst += n;
            src += n;
            bytes -= n;
        }
    }

    // A held slot of the staging payload memory (page-locked and mapped) is
    // read in place by the batch's gather; any other host memory is staged.
    void copy_in_held(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) override {
        if (const std::uint8_t* mapped = mapped_ranges().device_address(src, bytes)) {
            queue_gather(dst, mapped, bytes);
        } else {
            copy_in(dst, src, bytes);
        }
    }

    // Device to device (payload slots in GPU memory): queued for the
    // batch's one gather kernel.
    void copy_in_device(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes,
                        const DeviceMemory& from) override {
        if (std::find(sources_.begin(), sources_.end(), &from) == sources_.end()) {
            sources_.push_back(&from);
        }
        queue_gather(dst, src, bytes);
    }

    void synchronize() override {
        issue();
        issue_gather();
        if (issued_) {
            check(cudaStreamSynchronize(stream_.get()),
                  "cudaStreamSynchronize (ring block copies)");
            issued_ = false;
        }
        for (auto& chunk : chunks_) {
            chunk.used = 0;
            chunk.in_flight = false;
        }
    }

    bool host_visible() const override { return false; }
    std::string describe() const override {
        return fmt::format(
            "GPU {} device memory (one gather kernel per batch; {} x {} MiB pinned staging for "
            "the rest)",
            gpu_, kChunks, kChunkBytes >> 20);
    }

  private:
    static constexpr std::size_t kChunks = 4;
    static constexpr std::size_t kChunkBytes = std::size_t{4} << 20;
    static constexpr std::size_t kIssueBytes = std::size_t{1} << 20;  // larger runs go at once
    // Copies one gather takes; more in one batch issue a gather and wait for
    // it before the list is refilled.
    static constexpr std::size_t kGatherCopies = 4096;
    static_assert(kGatherCopies <= detail::kMaxGatherCopies);

    struct Chunk {
        PinnedPtr host;
        EventPtr done;  // recorded after the last copy that reads this chunk
        std::size_t used = 0;
        bool in_flight = false;
    };
    void issue() {
        if (pending_.bytes == 0) {
            return;
        }
        check(cudaSetDevice(gpu_), "cudaSetDevice");
        check(cudaMemcpyAsync(pending_.dst, pending_.src, pending_.bytes, cudaMemcpyHostToDevice,
                              stream_.get()),
              "cudaMemcpyAsync (host to ring block)");
        pending_ = PendingCopy{};
        issued_ = true;
    }

    void queue_gather(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) {
        if (gather_.size() == kGatherCopies) {
            issue_gather();
            check(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize (gather list)");
        }
        gather_.push_back(detail::GatherCopy{dst, src, bytes});
    }

    // The queued copies as one kernel: the list goes to the mapped pinned
    // buffer the kernel reads (free: the last gather was waited for).
    void issue_gather() {
        if (gather_.empty()) {
            return;
        }
        // GPUDirect RDMA: the payload slots' completions were seen before
        // they were queued; make the NIC's writes visible to the kernel.
        // A MemOps flush goes on this stream, the one the gather runs on.
        for (const DeviceMemory* from : sources_) {
            if (const auto* reader = dynamic_cast<const SlotReader*>(from)) {
                reader->flush_nic_writes_on(stream_.get());
            } else {
                from->flush_nic_writes();
            }
        }
        sources_.clear();
        check(cudaSetDevice(gpu_), "cudaSetDevice");
        std::memcpy(gather_host_.get(), gather_.data(), gather_.size() * sizeof(gather_[0]));
        check(detail::launch_gather(reinterpret_cast<const detail::GatherCopy*>(gather_device_),
                                    static_cast<std::uint32_t>(gather_.size()), stream_.get()),
              "gather kernel (payload slots to ring blocks)");
        gather_.clear();
        issued_ = true;
    }

    // Hands the current chunk to the stream and moves to the next one, waiting
    // until the copies that still read it have finished.
    Chunk& next_chunk() {
        issue();
        Chunk& done = chunks_[current_];
        check(cudaEventRecord(done.done.get(), stream_.get()), "cudaEventRecord");
        done.in_flight = true;
        current_ = (current_ + 1) % kChunks;
        Chunk& next = chunks_[current_];
        if (next.in_flight) {
            check(cudaEventSynchronize(next.done.get()), "cudaEventSynchronize (staging)");
            next.in_flight = false;
        }
        next.used = 0;
        return next;
    }

    int gpu_;
    StreamPtr stream_;  // destroyed last
    std::array<Chunk, kChunks> chunks_;
    std::size_t current_ = 0;
    PendingCopy pending_;
    PinnedPtr gather_host_;
    std::uint8_t* gather_device_ = nullptr;
    std::vector<detail::GatherCopy> gather_;
    std::vector<const DeviceMemory*> sources_;  // device memories the queued gather reads
    bool issued_ = false;                       // copies issued since the last wait
    std::vector<DevicePtr> blocks_;
    AllocationMap block_ranges_;  // blocks_' address ranges
};

}  // namespace

// ---- the writers' reads -----------------------------------------------------------

void SlotAllocations::add(const void* begin, std::size_t bytes) {
    const std::lock_guard lock(mu_);
    map_.add(begin, bytes);
}

void SlotAllocations::remove(const void* begin) {
    const std::lock_guard lock(mu_);
    map_.remove(begin);
}

AddressRange SlotAllocations::range_of(const void* p) const {
    AddressRange r;
    {
        const std::lock_guard lock(mu_);
        r = map_.range_of(p);
    }
    const AddressRange none;
    if (r.begin == none.begin && r.end == none.end) {
        // Not an allocation of ours: bound the copy to itself (no merging),
        // as merging needs a known bound.
        const auto a = reinterpret_cast<std::uintptr_t>(p);
        return AddressRange{a, a};
    }
    return r;
}

static_assert(kSlotReadGatherCopies <= kMaxGatherCopies);

SlotReader::SlotReader(int gpu) : gpu_(gpu) {
    select_gpu(gpu);
    flush_ = flush_path(gpu);
    max_pitch_ =
        static_cast<std::size_t>(runtime_attribute_value(gpu, cudaDevAttrMaxPitch).value_or(0));
}

void SlotReader::copy_to_host(std::span<const Copy> copies) const {
    if (copies.empty()) {
        sticky_.check();
        return;
    }
    sticky_.run([&] {
        check(cudaSetDevice(gpu_), "cudaSetDevice");
        ThreadState& t = thread_state();
        if (const auto into = mapped_destination(copies)) {
            gather(t, *into, copies);
        } else {
            strided(t, copies);
        }
        check(cudaStreamSynchronize(t.stream.get()), "cudaStreamSynchronize (payload slots)");
    });
}

// The gather kernel writes the host pieces through the buffer's device
// address (mapped, page-locked): gather_launches(copies) launches on this
// thread's stream, the list in a mapped buffer of this thread's own, refilled
// only after the launch that read it has been waited for.
void SlotReader::gather(ThreadState& t, const Pinned& into, std::span<const Copy> copies) const {
    if (!t.list) {
        std::uint8_t* device = nullptr;
        t.list = mapped_alloc(kSlotReadGatherCopies * sizeof(GatherCopy), "slot read gather list",
                              device);
        t.list_device = reinterpret_cast<GatherCopy*>(device);
    }
    auto* list = static_cast<GatherCopy*>(t.list.get());
    std::size_t n = 0;
    const auto launch = [&] {
        check(launch_gather(t.list_device, static_cast<std::uint32_t>(n), t.stream.get()),
              "gather kernel (payload slots to the writer)");
        copy_calls_.fetch_add(1, std::memory_order_relaxed);
        n = 0;
    };
    for (const Copy& c : copies) {
        if (n == kSlotReadGatherCopies) {
            launch();
            check(cudaStreamSynchronize(t.stream.get()), "cudaStreamSynchronize (gather list)");
        }
        const auto* dst = static_cast<const std::uint8_t*>(c.dst);
        list[n++] = GatherCopy{into.device + (dst - into.host), c.src, c.bytes};
    }
    launch();
}

// Strided copies, each inside one allocation of payload slots (two regions'
// cudaMalloc allocations may be adjacent: AddressRange); the bounds come
// from the payload memory's own list of its allocations.
void SlotReader::strided(ThreadState& t, std::span<const Copy> copies) const {
    const RangeOf slots = [this](const void* p) { return allocations_->range_of(p); };
    for (const StridedCopy& r : plan_strided_copies(copies, max_pitch_, slots)) {
        check(cudaMemcpy2DAsync(r.dst, r.dst_pitch, r.src, r.src_pitch, r.width, r.rows,
                                cudaMemcpyDeviceToHost, t.stream.get()),
              "cudaMemcpy2DAsync (payload slots to the writer)");
        copy_calls_.fetch_add(1, std::memory_order_relaxed);
    }
}

std::optional<SlotReader::Pinned> SlotReader::mapped_destination(
    std::span<const Copy> copies) const {
    const auto* first = static_cast<const std::uint8_t*>(copies.front().dst);
    std::optional<Pinned> found;
    {
        const std::lock_guard lock(mu_);
        for (const Pinned& p : pinned_) {
            if (p.device != nullptr && first >= p.host && first < p.host + p.bytes) {
                found = p;
                break;
            }
        }
    }
    if (!found) {
        return std::nullopt;
    }
    for (const Copy& c : copies) {
        const auto* dst = static_cast<const std::uint8_t*>(c.dst);
        if (dst < found->host || c.bytes > found->bytes ||
            static_cast<std::size_t>(dst - found->host) > found->bytes - c.bytes) {
            return std::nullopt;
        }
    }
    return found;
}

bool SlotReader::pin_host_buffer(void* buffer, std::size_t bytes) const {
    if (sticky_.failed()) {
        return false;
    }
    // Not fatal: a buffer that cannot be page-locked (RLIMIT_MEMLOCK, an
    // old driver) is still copied into, through the driver's staging.
    // This runs on a disk thread: registered memory belongs to the calling
    // thread's device (cuda_runtime_api.h, cudaHostRegister), which is device
    // 0 until a thread sets another (gpu-cuda-2.md N4).
    if (cudaSetDevice(gpu_) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    // Mapped: the gather kernel writes into it; portable: any context may
    // use it (cuda_runtime_api.h, cudaHostRegister).
    if (cudaHostRegister(buffer, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped) !=
        cudaSuccess) {
        cudaGetLastError();  // (clears the error: it is not sticky)
        return false;
    }
    void* device = nullptr;
    if (cudaHostGetDevicePointer(&device, buffer, 0) != cudaSuccess) {
        cudaGetLastError();  // pinned all the same: strided copies land by DMA
        device = nullptr;
    }
    const std::lock_guard lock(mu_);
    pinned_.push_back(Pinned{static_cast<const std::uint8_t*>(buffer), bytes,
                             static_cast<std::uint8_t*>(device)});
    return true;
}

void SlotReader::unpin_host_buffer(void* buffer) const {
    {
        const std::lock_guard lock(mu_);
        std::erase_if(pinned_, [&](const Pinned& p) { return p.host == buffer; });
    }
    if (cudaSetDevice(gpu_) != cudaSuccess) {  // as pin_host_buffer
        cudaGetLastError();
    }
    if (cudaHostUnregister(buffer) != cudaSuccess) {
        cudaGetLastError();  // it was never registered (pin_host_buffer failed)
    }
}

SlotReader::ThreadState& SlotReader::thread_state() const {
    const auto self = std::this_thread::get_id();
    const std::lock_guard lock(mu_);
    for (const auto& t : threads_) {
        if (t->id == self) {
            return *t;
        }
    }
    auto t = std::make_unique<ThreadState>();
    t->id = self;
    t->stream = make_stream();
    threads_.push_back(std::move(t));
    return *threads_.back();
}

}  // namespace detail

std::uint64_t device_copy_calls(const DeviceMemory& memory) {
    const auto* reader = dynamic_cast<const detail::SlotReader*>(&memory);
    return reader != nullptr ? reader->copy_calls() : 0;
}

std::unique_ptr<BlockMemory> make_device_block_memory(int gpu) {
    return std::make_unique<detail::DeviceBlockMemory>(gpu);
}

}  // namespace ibvcap::gpu
