// Internal to the libibverbs provider (ibv.cpp: context, memory regions,
// device and provider; ibv_queues.cpp: completion queues, queue pairs and
// flow rules): the RAII handles they share, and how each file makes the
// other's objects. The ownership rules are in ibv.cpp's opening comment.
// Nothing outside those two files includes this header.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "lib/sources/verbs/seam.hpp"

namespace ibvcap::verbs::ibv_objects {

// Calls the verbs destroy function `Destroy` on a non-null object. Failures
// cannot be reported from a destructor and are ignored.
template <auto Destroy>
struct Destroyer {
    template <class T>
    void operator()(T* object) const noexcept {
        static_cast<void>(Destroy(object));
    }
};

using ContextPtr = std::unique_ptr<ibv_context, Destroyer<&ibv_close_device>>;
using PdPtr = std::unique_ptr<ibv_pd, Destroyer<&ibv_dealloc_pd>>;
using CqPtr = std::unique_ptr<ibv_cq, Destroyer<&ibv_destroy_cq>>;
using QpPtr = std::unique_ptr<ibv_qp, Destroyer<&ibv_destroy_qp>>;
using MrPtr = std::unique_ptr<ibv_mr, Destroyer<&ibv_dereg_mr>>;
using FlowPtr = std::unique_ptr<ibv_flow, Destroyer<&ibv_destroy_flow>>;
using CountersPtr = std::unique_ptr<ibv_counters, Destroyer<&ibv_destroy_counters>>;
using DeviceListPtr = std::unique_ptr<ibv_device*, Destroyer<&ibv_free_device_list>>;

// Owns the device context and its protection domain: ibv_dealloc_pd, then
// ibv_close_device, when the last holder lets go. The context's async_fd is
// non-blocking (set at open) so that wait_event() can poll(2) it.
class Context {
  public:
    Context(ContextPtr context, std::string name, std::uint8_t port)
        : context_(std::move(context)), name_(std::move(name)), port_(port) {}
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    ibv_context* get() const { return context_.get(); }
    ibv_pd* pd() const { return pd_.get(); }
    void set_pd(PdPtr pd) { pd_ = std::move(pd); }
    const std::string& name() const { return name_; }
    std::uint8_t port() const { return port_; }

  private:
    ContextPtr context_;
    PdPtr pd_;  // declared after context_: released before the context is closed
    std::string name_;
    std::uint8_t port_;
};

// A CQ shared by the CompletionQueue object and the QPs that use it; the
// ibv_cq is destroyed (ibv_destroy_cq) after the last of them, then the
// Context reference is dropped.
struct CqHandle {
    std::shared_ptr<Context> context;
    CqPtr cq;                    // released before `context`
    ibv_cq_ex* cq_ex = nullptr;  // the same object, when made by ibv_create_cq_ex
};

// A QP shared by the QueuePair object and its flow rules: ibv_destroy_qp
// after the last rule is gone, then the CQ and Context references drop.
struct QpHandle {
    std::shared_ptr<Context> context;
    std::shared_ptr<CqHandle> cq;
    QpPtr qp;                      // released before `cq` and `context`
    std::uint32_t recv_depth = 0;  // the actual sizes ibv_create_qp wrote back
    std::uint32_t recv_sge = 0;
};

// The running program (for the setcap command line of an error hint); "" when
// /proc/self/exe cannot be read.
std::string exe_path();

// A CompletionQueue over `handle`, whose completions carry `timestamps` and,
// with `flow_tags`, their flow tags.
std::unique_ptr<CompletionQueue> make_completion_queue(std::shared_ptr<CqHandle> handle,
                                                       TimestampFormat timestamps, bool flow_tags);
// The handle of a CQ made by make_completion_queue; null for any other
// CompletionQueue (one of another provider).
std::shared_ptr<CqHandle> cq_handle(CompletionQueue& cq);
// A QueuePair over `handle`, in the RESET state.
std::unique_ptr<QueuePair> make_queue_pair(std::shared_ptr<QpHandle> handle);

}  // namespace ibvcap::verbs::ibv_objects
