// The libibverbs implementation of the verbs seam (lib/sources/verbs/seam.hpp,
// docs/architecture.md, "The verbs seam"): raw-packet queue pairs on NVIDIA/Mellanox mlx5 NICs
// (ConnectX-4 or later), steered by exact-match flow rules, receiving into registered host memory
// or dma-buf GPU memory, polled through an extended completion queue.
//
// This file holds the device context, memory regions, the Device and the
// Provider; the completion queues, queue pairs and flow rules are in
// ibv_queues.cpp, the handles both share in ibv_objects.hpp, and the pure
// translations (statuses, attributes, flow-rule layout, error hints) in
// ibv_logic.cpp.
//
// Exercising it on a real mlx5 host (this file cannot be tested without one;
// test/test_verbs_ibv.cpp covers everything that does not need a device):
//   ibv_devinfo -v            the device (mlx5_0), its ports: link_layer must be
//                             Ethernet and state PORT_ACTIVE; max_qp_wr,
//                             max_cqe, max_sge are the limits checked here
//   ibvcap devices            the RDMA devices and, per device, the DeviceCaps
//                             this provider reports (docs/formats.md, "Command line")
//   raw-packet QPs and flow rules need CAP_NET_RAW: run as root, or
//     sudo setcap cap_net_raw=ep /path/to/ibvcap     (lost on NFS mounts)
//   receive rings are pinned memory: ulimit -l unlimited (or a large memlock
//     limit in /etc/security/limits.conf)
//   ibvcap capture -i <netdev or IPv4> GROUP:PORT...  (--source verbs is the
//     default); the raw QPs' drops are in
//     /sys/class/infiniband/<dev>/ports/<port>/hw_counters/out_of_buffer
//     (ethtool's rx_out_of_buffer counts the kernel's rings, not ours)
//
// Ownership (RAII, std::unique_ptr with a deleter per verbs type). A Context
// holds the ibv_context and its protection domain; the Device and every object
// made from it (CQ, QP, flow rule, memory region) hold a shared_ptr to it, so
// the PD is deallocated and the context closed only after the last of them.
// A QP also holds its CQ, and a flow rule its QP, through shared handles: the
// owners are meant to destroy flows before QPs and QPs before their CQ
// (lib/sources/verbs/seam.hpp), and if they do not, the verbs objects still go in a legal
// order (ibv_destroy_cq fails while a QP uses the CQ, ibv_destroy_qp while a
// rule steers to it). Destroy calls in deleters cannot report failure; their
// result is ignored.
//
// Threads: libibverbs makes each verb thread-safe per object (post_recv locks
// the receive queue). The CQ is created single-threaded where the provider
// takes the flag (IBV_CREATE_CQ_ATTR_SINGLE_THREADED: mlx5 then polls without
// its CQ spinlock), so exactly one thread at a time may poll it: the engine's
// poll thread, or after it has stopped the thread that drains. The objects
// here add no locking: one thread drives a QP's modify()/state().

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <poll.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "lib/core/netaddr.hpp"
#include "lib/sources/verbs/ibv_logic.hpp"
#include "lib/sources/verbs/ibv_objects.hpp"
#include "lib/sources/verbs/seam.hpp"

namespace ibvcap::verbs {

namespace ibv_objects {

std::string exe_path() {
    std::error_code ec;
    const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::string{} : path.string();
}

}  // namespace ibv_objects

// --- The provider -------------------------------------------------------------

namespace {

using namespace ibv_logic;
using namespace ibv_objects;

// Owns one ibv_mr (ibv_dereg_mr), then drops its Context reference (the PD).
class IbvMemoryRegion final : public MemoryRegion {
  public:
    IbvMemoryRegion(std::shared_ptr<Context> context, MrPtr mr)
        : context_(std::move(context)), mr_(std::move(mr)) {}
    std::uint32_t lkey() const override { return mr_->lkey; }

  private:
    std::shared_ptr<Context> context_;
    MrPtr mr_;  // released first
};

class IbvDevice final : public Device {
  public:
    IbvDevice(std::shared_ptr<Context> context, DeviceCaps caps)
        : context_(std::move(context)), caps_(std::move(caps)) {}

    const DeviceCaps& caps() const override { return caps_; }

    std::unique_ptr<MemoryRegion> register_memory(void* addr, std::size_t length) override {
        // An int, not the enumerator: the ibv_reg_mr macro ANDs the access
        // flags with an enumerator of another enum type, which C++20
        // deprecates (clang: -Wdeprecated-enum-enum-conversion).
        // With an optional flag in it the macro calls ibv_reg_mr_iova2
        // (IBVERBS_1.8), which lets libibverbs drop what the device lacks.
        constexpr int access = kMrAccess;
        errno = 0;
        MrPtr mr(ibv_reg_mr(context_->pd(), addr, length, access));
        if (!mr) {
            const int err = null_errno();
            throw verbs_error(
                err, fmt::format("ibv_reg_mr ({} bytes at {} on {})", length, addr, caps_.name),
                error_hint(Call::reg_mr, err, {}));
        }
        return std::make_unique<IbvMemoryRegion>(context_, std::move(mr));
    }

    std::unique_ptr<MemoryRegion> register_dmabuf(int fd, std::uint64_t offset, std::size_t length,
                                                  std::uint64_t iova) override {
        const RegDmabufMrFn reg = reg_dmabuf_mr_symbol();
        if (reg == nullptr) {
            throw verbs_error(ENOSYS, fmt::format("ibv_reg_dmabuf_mr ({})", caps_.name),
                              error_hint(Call::reg_dmabuf_mr, ENOSYS, {}));
        }
        errno = 0;
        MrPtr mr(reg(context_->pd(), offset, length, iova, fd, kMrAccess));
        if (!mr) {
            const int err = null_errno();
            throw verbs_error(err,
                              fmt::format("ibv_reg_dmabuf_mr (fd {}, {} bytes at offset {}, iova "
                                          "{:#x} on {})",
                                          fd, length, offset, iova, caps_.name),
                              error_hint(Call::reg_dmabuf_mr, err, {}));
        }
        return std::make_unique<IbvMemoryRegion>(context_, std::move(mr));
    }

    std::unique_ptr<CompletionQueue> create_cq(std::uint32_t depth, TimestampFormat timestamps,
                                               bool flow_tags) override {
        const std::string what =
            fmt::format("ibv_create_cq_ex ({} entries on {}, timestamps {}{})", depth, caps_.name,
                        to_string(timestamps), flow_tags ? ", flow tags" : "");
        if (depth == 0 || depth > caps_.max_cqe) {
            throw verbs_error(
                EINVAL, what,
                fmt::format("the depth must be 1 to {} (the device's max_cqe)", caps_.max_cqe));
        }
        auto handle = std::make_shared<CqHandle>();
        handle->context = context_;
        int err = 0;
        // Single-threaded first; a provider that does not know the flag
        // refuses it (EINVAL, or EOPNOTSUPP), and the CQ is made without it.
        for (const bool single_threaded : {true, false}) {
            ibv_cq_init_attr_ex attr = cq_init_attr(depth, timestamps, single_threaded, flow_tags);
            errno = 0;
            if (ibv_cq_ex* cq_ex = ibv_create_cq_ex(context_->get(), &attr)) {
                handle->cq.reset(ibv_cq_ex_to_cq(cq_ex));
                handle->cq_ex = cq_ex;
                return make_completion_queue(std::move(handle), timestamps, flow_tags);
            }
            err = null_errno();
            if (!(err == EINVAL || unsupported(err))) {
                break;
            }
        }
        if (timestamps != TimestampFormat::none || !(err == EOPNOTSUPP || err == ENOSYS)) {
            // EOPNOTSUPP/ENOTSUP for a timestamp format: the engine tries the next one.
            throw verbs_error(err, what, error_hint(Call::create_cq, err, {}));
        }
        // No extended CQs: a plain one, without completion timestamps.
        errno = 0;
        handle->cq.reset(
            ibv_create_cq(context_->get(), static_cast<int>(depth), nullptr, nullptr, 0));
        if (!handle->cq) {
            err = null_errno();
            throw verbs_error(err,
                              fmt::format("ibv_create_cq ({} entries on {})", depth, caps_.name),
                              error_hint(Call::create_cq, err, {}));
        }
        // Its completions' qp_num field is the flow tag (poll_plain).
        return make_completion_queue(std::move(handle), TimestampFormat::none, flow_tags);
    }

    std::unique_ptr<QueuePair> create_qp(CompletionQueue& cq, std::uint32_t depth,
                                         std::uint32_t max_sge) override {
        const std::string what =
            fmt::format("ibv_create_qp (raw packet on {} port {}, {} receive WRs of {} SGEs)",
                        caps_.name, caps_.port, depth, max_sge);
        std::shared_ptr<CqHandle> ours = cq_handle(cq);
        if (ours == nullptr || ours->context != context_) {
            throw verbs_error(EINVAL, what, "the completion queue was not made by this device");
        }
        if (depth == 0 || depth > caps_.max_qp_wr) {
            throw verbs_error(
                EINVAL, what,
                fmt::format("the depth must be 1 to {} (the device's max_qp_wr)", caps_.max_qp_wr));
        }
        if (max_sge == 0 || max_sge > 2 || max_sge > caps_.max_sge) {
            throw verbs_error(EINVAL, what,
                              fmt::format("max_sge must be 1 or 2, and at most {} (the device's "
                                          "max_sge)",
                                          caps_.max_sge));
        }
        ibv_qp_init_attr attr = raw_qp_init_attr(ours->cq.get(), depth, max_sge);
        errno = 0;
        QpPtr qp(ibv_create_qp(context_->pd(), &attr));
        if (!qp) {
            const int err = null_errno();
            throw verbs_error(err, what, error_hint(Call::create_qp, err, exe_path()));
        }
        auto handle = std::make_shared<QpHandle>();
        handle->context = context_;
        handle->cq = std::move(ours);
        handle->qp = std::move(qp);
        // ibv_create_qp(3) wrote the actual sizes back (rdma-core
        // providers/mlx5/verbs.c create_qp: cap.max_recv_wr = rq.max_post,
        // cap.max_recv_sge = rq.max_gs).
        handle->recv_depth = attr.cap.max_recv_wr;
        handle->recv_sge = attr.cap.max_recv_sge;
        return make_queue_pair(std::move(handle));
    }

    std::optional<AsyncEvent> wait_event(std::chrono::milliseconds timeout) override {
        ibv_context* context = context_->get();
        pollfd pfd{};
        pfd.fd = context->async_fd;
        pfd.events = POLLIN;
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        for (;;) {
            const int rc = ::poll(&pfd, 1, poll_timeout_ms(timeout));
            if (rc > 0) {
                break;
            }
            if (rc == 0) {
                return std::nullopt;
            }
            const int err = errno;
            if (err != EINTR) {
                throw verbs_error(err, fmt::format("poll (async events of {})", caps_.name));
            }
            timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
        }
        ibv_async_event event{};
        errno = 0;
        if (ibv_get_async_event(context, &event) != 0) {
            const int err = null_errno();
            if (err == EAGAIN || err == EWOULDBLOCK) {
                return std::nullopt;  // another reader took it
            }
            throw verbs_error(err, fmt::format("ibv_get_async_event ({})", caps_.name));
        }
        // Every event must be acknowledged, or destroying its QP/CQ blocks
        // (ibv_get_async_event(3)); read it first, the QP pointer included.
        struct Ack {
            ibv_async_event* event;
            ~Ack() { ibv_ack_async_event(event); }
        } ack{&event};
        return map_event(event);
    }

    std::optional<std::pair<std::uint64_t, std::uint64_t>> clock_pair() override {
        const auto s = clock_sample();
        if (!s) {
            return std::nullopt;
        }
        return std::pair{s->ticks, static_cast<std::uint64_t>(
                                       midpoint_ns(static_cast<std::uint64_t>(s->host_before_ns),
                                                   static_cast<std::uint64_t>(s->host_after_ns)))};
    }

    std::optional<verbs::ClockSample> clock_sample() override {
        ibv_values_ex values{};
        values.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
        timespec before{};
        timespec after{};
        ::clock_gettime(CLOCK_REALTIME, &before);
        errno = 0;
        const int rc = ibv_query_rt_values_ex(context_->get(), &values);
        ::clock_gettime(CLOCK_REALTIME, &after);
        if (rc != 0) {
            const int err = error_code(rc);
            if (unsupported(err)) {
                return std::nullopt;
            }
            throw verbs_error(err, fmt::format("ibv_query_rt_values_ex ({})", caps_.name));
        }
        if ((values.comp_mask & IBV_VALUES_MASK_RAW_CLOCK) == 0) {
            return std::nullopt;
        }
        return verbs::ClockSample{raw_clock_ticks(values.raw_clock),
                                  static_cast<std::int64_t>(timespec_ns(before)),
                                  static_cast<std::int64_t>(timespec_ns(after))};
    }

  private:
    std::shared_ptr<Context> context_;
    DeviceCaps caps_;
};

// Whether flow rules can carry a packet counter: create a counters object and
// attach a packet counter statically, then destroy it. A failure of either
// step means "no" (EOPNOTSUPP/ENOTSUP where the device lacks them).
bool probe_flow_counters(ibv_context* context) {
    ibv_counters_init_attr init{};
    errno = 0;
    CountersPtr counters(ibv_create_counters(context, &init));
    if (!counters) {
        return false;
    }
    ibv_counter_attach_attr attach{};
    attach.counter_desc = IBV_COUNTER_PACKETS;
    attach.index = 0;
    return ibv_attach_counters_point_flow(counters.get(), &attach, nullptr) == 0;
}

// ibv_get_device_list(3), its failure thrown, except on a kernel without
// RDMA support (ENOSYS): no devices, so a null list and `count` 0.
// What only mlx5's direct-verbs interface tells (verbs-mlx5-3.md R1, R5):
// whether wall-clock completion timestamps are the real-time clock's raw
// seconds << 32 | nanoseconds (mlx5dv_query_device(3),
// MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS), and which rdma-core release the
// provider is (its real file name). libmlx5 is looked up among the libraries
// already loaded (RTLD_NOLOAD: libibverbs loaded it for an mlx5 device, as
// libibverbs/libmlx5-rdmav34.so, soname libmlx5.so.1), not linked: ibvcap
// then needs no mlx5 library where there is no mlx5 device, and asks the very
// copy that drives the device.
void query_mlx5(ibv_context* context, DeviceCaps& caps) {
    using IsSupported = bool (*)(ibv_device*);
    using QueryDevice = int (*)(ibv_context*, mlx5dv_context*);
    void* const lib =
        context == nullptr ? nullptr : dlopen("libmlx5.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (lib == nullptr) {
        return;  // not an mlx5 device (its provider is another library)
    }
    const auto is_supported = reinterpret_cast<IsSupported>(dlsym(lib, "mlx5dv_is_supported"));
    void* const query_symbol = dlsym(lib, "mlx5dv_query_device");
    const auto query = reinterpret_cast<QueryDevice>(query_symbol);
    if (is_supported != nullptr && query != nullptr && is_supported(context->device)) {
        mlx5dv_context dv{};
        dv.comp_mask = 0;
        if (query(context, &dv) == 0) {
            caps.real_time_ts = (dv.flags & MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS) != 0;
        }
        Dl_info info{};
        if (dladdr(query_symbol, &info) != 0 && info.dli_fname != nullptr) {
            std::error_code ec;
            const auto real = std::filesystem::canonical(info.dli_fname, ec);
            caps.provider_release =
                provider_release_of(ec ? std::string(info.dli_fname) : real.string());
        }
    }
    dlclose(lib);  // the NOLOAD reference only; libibverbs keeps its own
}

DeviceListPtr device_list(int& count) {
    count = 0;
    errno = 0;
    DeviceListPtr list(ibv_get_device_list(&count));
    if (!list) {
        const int err = null_errno();
        if (err != ENOSYS) {
            throw verbs_error(err, "ibv_get_device_list",
                              error_hint(Call::get_device_list, err, {}));
        }
        count = 0;
    }
    return list;
}

class IbvProvider final : public Provider {
  public:
    // Every device libibverbs can open. A kernel without RDMA support
    // (ibv_get_device_list fails with ENOSYS) has none: the list is empty.
    std::vector<std::string> device_names() override {
        std::vector<std::string> names;
        int count = 0;
        const DeviceListPtr list = device_list(count);
        for (int i = 0; i < count; ++i) {
            names.emplace_back(ibv_get_device_name(list.get()[i]));
        }
        return names;
    }

    std::unique_ptr<Device> open(const std::string& name, std::uint8_t port) override {
        int count = 0;
        DeviceListPtr list = device_list(count);
        if (!list) {
            throw verbs_error(ENODEV,
                              fmt::format("ibv_get_device_list: no RDMA device \"{}\"", name),
                              error_hint(Call::get_device_list, ENOSYS, {}));
        }
        ibv_device* device = nullptr;
        std::vector<std::string> present;
        for (int i = 0; i < count; ++i) {
            ibv_device* candidate = list.get()[i];
            present.emplace_back(ibv_get_device_name(candidate));
            if (present.back() == name) {
                device = candidate;
            }
        }
        if (device == nullptr) {
            throw verbs_error(ENODEV, missing_device_message(name, present));
        }

        errno = 0;
        ContextPtr opened(ibv_open_device(device));
        if (!opened) {
            const int err = null_errno();
            throw verbs_error(err, fmt::format("ibv_open_device ({})", name),
                              error_hint(Call::open_device, err, {}));
        }
        list.reset();  // ibv_get_device_list(3): an opened device outlives the list

        const int fd = opened->async_fd;
        const int flags = ::fcntl(fd, F_GETFL);
        if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
            const int err = errno;
            throw verbs_error(err, fmt::format("fcntl (O_NONBLOCK on the async fd of {})", name));
        }
        auto context = std::make_shared<Context>(std::move(opened), name, port);

        errno = 0;
        PdPtr pd(ibv_alloc_pd(context->get()));
        if (!pd) {
            throw verbs_error(null_errno(), fmt::format("ibv_alloc_pd ({})", name));
        }
        context->set_pd(std::move(pd));

        ibv_device_attr_ex attr{};
        errno = 0;
        int rc = ibv_query_device_ex(context->get(), nullptr, &attr);
        if (rc != 0) {
            throw verbs_error(error_code(rc), fmt::format("ibv_query_device_ex ({})", name));
        }
        const unsigned ports = attr.orig_attr.phys_port_cnt;
        if (port == 0 || port > ports) {
            throw verbs_error(EINVAL, fmt::format("ibv_query_port ({} port {})", name, port),
                              fmt::format("{} has port{} 1{}", name, ports == 1 ? "" : "s",
                                          ports == 1 ? "" : fmt::format(" to {}", ports)));
        }
        ibv_port_attr port_attr{};
        errno = 0;
        rc = ibv_query_port(context->get(), port, &port_attr);
        if (rc != 0) {
            throw verbs_error(error_code(rc),
                              fmt::format("ibv_query_port ({} port {})", name, port));
        }

        DeviceCaps caps;
        caps.name = name;
        caps.port = port;
        caps.max_qp_wr = static_cast<std::uint32_t>(std::max(attr.orig_attr.max_qp_wr, 0));
        caps.max_cqe = static_cast<std::uint32_t>(std::max(attr.orig_attr.max_cqe, 0));
        caps.max_sge = static_cast<std::uint32_t>(std::max(attr.orig_attr.max_sge, 0));
        caps.max_qp = static_cast<std::uint32_t>(std::max(attr.orig_attr.max_qp, 0));
        caps.max_cq = static_cast<std::uint32_t>(std::max(attr.orig_attr.max_cq, 0));
        caps.max_mr = static_cast<std::uint32_t>(std::max(attr.orig_attr.max_mr, 0));
        caps.max_pd = static_cast<std::uint32_t>(std::max(attr.orig_attr.max_pd, 0));
        caps.max_mr_size = attr.orig_attr.max_mr_size;
        caps.raw_packet_qp = port_attr.link_layer == IBV_LINK_LAYER_ETHERNET;
        caps.flow_steering =
            (attr.orig_attr.device_cap_flags & IBV_DEVICE_MANAGED_FLOW_STEERING) != 0;
        caps.completion_timestamps = attr.completion_timestamp_mask != 0;
        caps.hca_core_clock_khz = attr.hca_core_clock;
        caps.flow_counters = probe_flow_counters(context->get());
        query_mlx5(context->get(), caps);
        return std::make_unique<IbvDevice>(std::move(context), std::move(caps));
    }
};

}  // namespace

std::unique_ptr<Provider> make_ibv_provider() {
    return std::make_unique<IbvProvider>();
}

}  // namespace ibvcap::verbs
