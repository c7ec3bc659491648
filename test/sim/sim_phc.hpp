// A model of a netdev's PTP hardware clock (lib/host/phc.hpp, PhcClock) on the
// simulated NIC: its time, drift, offset, discipline and read cost are the
// SimHardware clock model's (test/sim/sim_nic.hpp, SimConfig::drift_ppb and
// what follows). The host facts the real reader finds are given here:
//   * daemons: what the real one reads from /proc/*/comm (ptp4l, phc2sys...);
//   * the dialled frequency: −drift_ppb when disciplined, else 0 (the kernel's
//     ptp_clock_adjtime answers modes 0 with ptp->dialed_frequency,
//     drivers/ptp/ptp_clock.c, which the driver's adjfine last set);
//   * TAI − UTC: 37 s (the kernel's adjtimex tai field under ptp4l).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lib/host/phc.hpp"
#include "test/sim/sim_nic.hpp"

namespace ibvcap::sim {

class SimPhc final : public PhcClock {
  public:
    explicit SimPhc(std::shared_ptr<SimHardware> nic, std::vector<std::string> daemons = {},
                    int index = 0)
        : nic_(std::move(nic)), daemons_(std::move(daemons)), index_(index) {}

    std::size_t sample(std::span<PhcSample> out) override {
        const std::size_t n = nic_->read_phc(out);
        if (n == 0) {
            error_ = "/dev/ptp" + std::to_string(index_) +
                     ": PTP_SYS_OFFSET_EXTENDED: Input/output error";
        }
        return n;
    }
    PhcInfo info() override {
        PhcInfo i;
        i.index = index_;
        i.frequency_ppb =
            nic_->config().phc_disciplined ? -static_cast<double>(nic_->config().drift_ppb) : 0.0;
        i.daemons = daemons_;
        i.tai_utc_s = 37;
        return i;
    }
    std::string error() const override { return error_; }

  private:
    std::shared_ptr<SimHardware> nic_;
    std::vector<std::string> daemons_;
    int index_;
    std::string error_;
};

}  // namespace ibvcap::sim
