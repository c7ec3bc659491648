// A simulated mlx5 NIC behind the verbs seam (DESIGN §5), faithful to the
// verbs semantics the engine relies on:
//   * a frame is steered to the QP whose flow rule matches it exactly
//     (destination MAC, IPv4 destination, optional IPv4 source, UDP port);
//     frames no rule matches go to the kernel and are only counted;
//   * the QP's oldest posted receive WR takes the frame: SGE0 is filled
//     completely before SGE1; the completion reports byte_len;
//   * a frame larger than the posted SGEs completes with LOC_LEN_ERR (the WR
//     is consumed, nothing useful is written);
//   * an SGE outside the memory region of its lkey completes with
//     LOC_PROT_ERR and moves the QP to the error state;
//   * no posted WR: the frame is dropped and counted in out_of_buffer;
//   * a QP that is not in RTR receives nothing (frames count as
//     out_of_buffer, as on mlx5 where the rule still matches);
//   * a QP in the error state flushes its posted WRs with WR_FLUSH_ERR and
//     every WR posted later; RESET discards posted WRs without completions;
//   * a full CQ overruns: the completion is lost and a cq_error event raised;
//   * faults are injected from outside: QP error, port down/up, device fatal,
//     a corrupted wr_id; each raises the async event real hardware raises.
// Thread-safe: the wire side (deliver, faults) may run on another thread than
// the engine's poll loop.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "formats/bytes.hpp"
#include "lib/verbs.hpp"

namespace ibvcap::sim {

struct SimConfig {
    std::string name = "sim_mlx5_0";
    std::uint8_t port = 1;
    std::string netdev = "sim0";
    std::uint32_t max_qp_wr = 32768;
    std::uint32_t max_cqe = 4194303;
    std::uint32_t max_sge = 30;
    bool raw_packet_qp = true;
    bool flow_steering = true;
    bool completion_timestamps = true;
    bool flow_counters = true;
    std::uint64_t clock_khz = 1'000'000;  // 1 GHz: one tick per nanosecond
    std::uint64_t host_time_base_ns = 1'767'225'600'000'000'000ull;  // 2026-01-01
    // Benchmarks only (bench/bench_engine.cpp): the bytes of SGE1 and later are
    // not written, as when the payload slot is in GPU memory, whose DMA costs
    // the NIC, not the CPU. Completions are unchanged (byte_len is the whole
    // frame); the payload slots keep whatever they held.
    bool skip_payload_dma = false;
};

// Counters the simulated NIC keeps, as an mlx5 port would show them under
// /sys/class/infiniband/<dev>/ports/<port>/hw_counters and ethtool -S.
struct SimCounters {
    std::uint64_t rx_frames = 0;       // frames that arrived at the port while up
    std::uint64_t steered = 0;         // matched a flow rule
    std::uint64_t unmatched = 0;       // no rule matched: to the kernel
    std::uint64_t out_of_buffer = 0;   // matched, but no WR posted / QP not ready
    std::uint64_t link_down_lost = 0;  // sent while the port was down (never arrived)
    std::uint64_t cq_overruns = 0;     // completions lost to a full CQ
    std::uint64_t completions = 0;     // completions of any status
};

class SimHardware;

// Lists and opens simulated devices. Tests keep the shared_ptr<SimHardware>
// to play the wire and inject faults while the engine uses the Device.
class SimProvider : public verbs::Provider {
  public:
    std::shared_ptr<SimHardware> add(SimConfig config);
    std::vector<std::string> device_names() override;
    std::unique_ptr<verbs::Device> open(const std::string& name, std::uint8_t port) override;

  private:
    std::vector<std::shared_ptr<SimHardware>> devices_;
};

class SimHardware {
  public:
    explicit SimHardware(SimConfig config);
    ~SimHardware();
    SimHardware(const SimHardware&) = delete;
    SimHardware& operator=(const SimHardware&) = delete;

    const SimConfig& config() const { return config_; }

    // The wire: one Ethernet frame arrives at the port. Its completion
    // timestamp is the device clock, which advances `ticks` per frame.
    void deliver(Bytes frame, std::uint64_t ticks = 1000);

    // Faults.
    void inject_qp_error(std::uint32_t qp_num);    // QP → error, flush, qp_fatal event
    void set_port_up(bool up);                     // port_error / port_active events
    void raise_device_fatal();                     // device_fatal event; QPs → error
    void corrupt_next_wr_id(std::uint64_t wr_id);  // the next completion carries it

    SimCounters counters() const;
    // Packets matched by the rules that carry a counter, summed.
    std::uint64_t flow_counter_total() const;
    std::size_t posted_wrs(std::uint32_t qp_num) const;  // WRs waiting on a QP
    // The fewest WRs posted on any QP (0 without QPs): a test's wire waits for
    // this to be non-zero to play a lossless sender, whatever the scheduler does.
    std::size_t min_posted_wrs() const;
    std::size_t flows() const;  // rules alive
    std::size_t qps() const;    // QPs alive
    // Objects destroyed out of order, which verbs refuses with EBUSY: a QP
    // with flows still attached, a CQ with QPs still attached, a device
    // handle with memory regions, CQs or QPs still alive.
    std::size_t ordering_violations() const;

    // Write hw_counters files the way mlx5 lays them out:
    // root/<name>/ports/<port>/hw_counters/{out_of_buffer,...} and
    // root/<name>/ports/<port>/state; for the counters reader's tests.
    void write_sysfs(const std::filesystem::path& root) const;

    // Used by the Device handle (lib/sim_nic.cpp); not for tests.
    struct State;
    State& state() { return *state_; }

  private:
    SimConfig config_;
    std::unique_ptr<State> state_;
};

}  // namespace ibvcap::sim
