// The GPU as a witness (docs/observability.md, "GPU errors as a witness
// (XID)"): the NVIDIA driver's XID reports, read from the kernel tracepoint
// nvidia:nvidia_dev_xid through tracefs while a capture writes into GPU memory.
//
// The tracepoint, as NVIDIA's open kernel module defines it
// (open-gpu-kernel-modules, kernel-open/nvidia/nv-tracepoint.h; fired from
// nv_report_error() in kernel-open/nvidia/nv-report-err.c for every XID the
// driver reports, before any user-space queue):
//
//   TRACE_EVENT(nvidia_dev_xid,
//       TP_PROTO(const struct pci_dev *pdev, uint32_t error_code, const char *msg),
//       TP_STRUCT__entry(__string(dev, pci_name(pdev))    -> __data_loc char[] dev
//                        __field (u32, error_code)        -> u32 error_code
//                        __string(msg, msg))              -> __data_loc char[] msg
//       TP_printk("Xid (PCI:%s): %u, %s", dev, error_code, msg))
//
// `dev` is pci_name(): "%04x:%02x:%02x.%d" (drivers/pci/probe.c,
// pci_setup_device), the name under /sys/bus/pci/devices.
//
// Not NVML: nvmlEventSetWait's queue has a fixed size, drops a burst's
// overflow without saying so and sees nothing before it is registered, so the
// first XID of a burst (the root cause) is the one most likely missed. The
// tracepoint fires synchronously in the driver's reporting path.
//
// How it is watched: a private trace instance (<tracefs>/instances/
// ibvcap-<pid>-<n>, so no other tracing user is disturbed and none disturbs
// it) with only this event enabled, its clock set to "boot" (CLOCK_BOOTTIME,
// converted to CLOCK_REALTIME), overwrite off (a burst keeps its first
// events, the root cause, and loses its last ones, which trace_pipe reports
// as "[LOST N EVENTS]"), buffer_percent 0 (some kernels' trace_poll in
// kernel/trace/trace.c passes it to ring_buffer_poll_wait, so poll would wait
// for that share of the buffer to fill), and the "fields" option where the
// kernel has it (kernel/trace/trace_output.c print_fields: every field as
// name=value, the same for the driver's event and a test's uprobe stand-in). Its trace_pipe is read
// on a thread of its own, non-blocking and polled, so stop() returns promptly. The instance is
// removed at stop(), on every error path and by the destructor.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "lib/ledger/ledger.hpp"

namespace ibvcap {

// One nvidia_dev_xid line of trace_pipe, parsed.
struct XidLine {
    std::int64_t trace_ns = -1;  // the trace timestamp in ns; -1: none could be read
    std::string device;
    std::uint32_t code = 0;
    std::string message;
};

// Parses one trace_pipe line (without its newline) of the nvidia_dev_xid
// event in any of the forms it takes: the driver's TP_printk
// "Xid (PCI:<dev>): <code>, <msg>"; the "fields" option's
// "dev=<dev> error_code=0x4f (79) msg=<msg>" (fields in format order or,
// on the first kernels with that option, reversed; other fields skipped);
// and name="value" as a uprobe stand-in's print format writes it. `fields` are the event's field
// names from its format file (empty: dev, error_code, msg). nullopt: not an
// nvidia_dev_xid line, or one without a device and a code.
std::optional<XidLine> parse_xid_line(std::string_view line,
                                      const std::vector<std::string>& fields = {});

// "CPU:3 [LOST 12 EVENTS]" (kernel/trace/trace.c, print_trace_line) → 12.
std::optional<std::uint64_t> parse_lost_line(std::string_view line);

// The field names of an event's format file, in order, common_* left out.
std::vector<std::string> format_fields(std::string_view format_text);

class XidWatch {
  public:
    struct Options {
        // Where tracefs is mounted; empty: /sys/kernel/tracing, else
        // /sys/kernel/debug/tracing.
        std::filesystem::path tracefs_root;
        // The capture's GPU (pci_name spelling, "0000:3b:00.0"): its XIDs are
        // counted by on_capture_gpu() and marked capture_gpu. Empty: none.
        std::string capture_device;
    };

    explicit XidWatch(Options options);
    ~XidWatch();
    XidWatch(const XidWatch&) = delete;
    XidWatch& operator=(const XidWatch&) = delete;

    // Starts watching. false: the tracepoint cannot be watched; absent() says
    // why in one line, and nothing is left behind in tracefs.
    bool start();
    // Reads what the kernel still holds, stops the reader thread and removes
    // the instance. Idempotent; the destructor calls it.
    void stop();

    bool watching() const { return reader_.joinable(); }
    const std::string& absent() const { return absent_; }
    // Set when the reader failed during the run (the watch ended early).
    std::string failure() const;

    // Thread-safe: the XIDs seen so far, in the order the kernel gave them.
    std::vector<GpuXid> events() const;
    // Thread-safe, lock-free: XIDs seen so far on the capture's GPU.
    std::uint64_t on_capture_gpu() const { return on_capture_gpu_.load(std::memory_order_relaxed); }
    // Thread-safe: events the trace buffer lost (its "[LOST N EVENTS]" lines).
    std::uint64_t lost() const { return lost_.load(std::memory_order_relaxed); }

    // The instance directory (empty unless watching) and the form its lines
    // take ("fields" or "print format"): for tests and the report's notes.
    const std::filesystem::path& instance() const { return instance_; }
    const std::string& output_form() const { return form_; }

  private:
    bool fail_start(std::string why);
    void remove_instance();
    void read_loop();
    void drain(std::string& pending);
    void take_line(std::string_view line);

    Options options_;
    std::filesystem::path root_;
    std::filesystem::path instance_;
    std::string form_;
    std::string absent_;
    std::vector<std::string> fields_;
    bool boot_clock_ = false;  // the instance's trace_clock is "boot"
    int pipe_fd_ = -1;
    int stop_fd_ = -1;  // an eventfd: written by stop()
    std::thread reader_;
    mutable std::mutex mutex_;  // guards events_ and failure_
    std::vector<GpuXid> events_;
    std::string failure_;
    std::atomic<std::uint64_t> on_capture_gpu_{0};
    std::atomic<std::uint64_t> lost_{0};
};

}  // namespace ibvcap
