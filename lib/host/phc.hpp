// A netdev's PTP hardware clock (PHC, /dev/ptpN) read against the host's
// CLOCK_REALTIME (docs/operations.md, "Time"). On mlx5 the PHC is the clock
// the completion timestamps are in: the real-time clock a ConnectX-6 Dx/7
// stamps wall-clock CQEs with, or the driver's timecounter over the
// free-running clock that the clock-info page converts ticks with (kernel
// drivers/net/ethernet/mellanox/mlx5/core/lib/clock.c; rdma-core
// providers/mlx5/cq.c, mlx5dv_ts_to_ns). The driver sets it from
// ktime_get_real once, at load (mlx5_init_timer_clock); after that only a PTP
// daemon moves it, and ptp4l makes it run TAI (UTC + 37 s).
//
// A seam (PhcClock) so that the engine's clock (lib/sources/verbs/nic_clock.hpp)
// is tested against a model (test/sim/sim_phc.hpp). The real one is compiled in
// CI but reachable only on a host with a PHC: the development machine has none.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ibvcap {

// One bracketed read: CLOCK_REALTIME, the PHC, CLOCK_REALTIME, in ns (one
// row of struct ptp_sys_offset_extended, linux/ptp_clock.h).
struct PhcSample {
    std::int64_t host_before_ns = 0;
    std::int64_t phc_ns = 0;
    std::int64_t host_after_ns = 0;
    std::int64_t width() const { return host_after_ns - host_before_ns; }
};

// The sample with the narrowest bracket (the least disturbed read: the PHC
// was latched somewhere inside it, so its midpoint is within width/2 of the
// host time of the latch). Samples whose bracket runs backwards (the host
// clock was stepped between the reads) are skipped; nullopt when none is left.
std::optional<PhcSample> narrowest(std::span<const PhcSample> samples);

// What is known about a PHC besides its time.
struct PhcInfo {
    int index = -1;  // N of /dev/ptpN
    // The frequency adjustment a daemon dialled, in ppb (clock_adjtime on the
    // PHC with modes 0: the kernel's ptp_clock_adjtime answers with
    // ptp->dialed_frequency, drivers/ptp/ptp_clock.c); nullopt when it cannot
    // be read (older kernels want the PHC open for writing).
    std::optional<double> frequency_ppb;
    // PTP daemons running on the host (a heuristic: their names in
    // /proc/*/comm; one of them may discipline another clock, or this one).
    std::vector<std::string> daemons;
    // TAI − UTC in s: the kernel's (adjtimex's tai, set by ptp4l/chrony),
    // else 37 (IERS Bulletin C: 37 s since 2017-01-01).
    int tai_utc_s = 37;
};

class PhcClock {
  public:
    virtual ~PhcClock() = default;
    // Fills `out` with up to out.size() bracketed reads of one measurement
    // (taken back to back) and returns how many; 0 when the PHC could not be
    // read (error() says why). Makes no allocation; one ioctl on a PHC.
    virtual std::size_t sample(std::span<PhcSample> out) = 0;
    virtual PhcInfo info() = 0;
    virtual std::string error() const = 0;
};

// The netdev's PHC: ETHTOOL_GET_TS_INFO's phc_index (linux/ethtool.h), then
// /dev/ptpN opened read-only; read with PTP_SYS_OFFSET_EXTENDED, else
// PTP_SYS_OFFSET, else clock_gettime(FD_TO_CLOCKID(fd)) between two
// CLOCK_REALTIME reads (drivers/ptp/ptp_chardev.c). nullptr when the netdev
// has none, with `why` saying so (one clause).
std::unique_ptr<PhcClock> open_netdev_phc(const std::string& netdev, std::string& why,
                                          const std::filesystem::path& proc_root = "/proc");
// A PTP clock device by its path (`index` the N of ptpN, for the lines);
// nullptr with `why` when it cannot be opened. Permission refused (EACCES,
// EPERM: /dev/ptpN is root's only where udev leaves the kernel's mode) names
// the fix: the package's udev rule gives the group ibvcap-ptp read access
// (docs/operations.md, "The PTP clock for the service"; verbs-mlx5-3.md R3).
std::unique_ptr<PhcClock> open_phc_device(const std::filesystem::path& path, int index,
                                          std::string& why,
                                          const std::filesystem::path& proc_root = "/proc");
// The group the package's udev rule gives /dev/ptp* to (debian/ibvcap.udev).
inline constexpr const char* kPtpGroup = "ibvcap-ptp";

// PTP daemons whose names are in <proc_root>/*/comm: ptp4l, phc2sys,
// timemaster, chronyd, ts2phc (sorted, each once). A heuristic: a running
// daemon need not discipline this PHC.
std::vector<std::string> ptp_daemons(const std::filesystem::path& proc_root);

// TAI − UTC from the kernel (adjtimex's tai field), else 37.
int kernel_tai_utc_s();

// A PHC − UTC offset (ns) within 100 ms of TAI − UTC: the PHC runs TAI (100 ms
// leaves room for a host clock kept by NTP rather than from the PHC).
bool offset_is_tai(std::int64_t offset_ns, int tai_utc_s);

}  // namespace ibvcap
