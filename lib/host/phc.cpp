// The real PHC reader (lib/host/phc.hpp). Compiled everywhere, exercised only
// on a host whose NIC has a PHC: the development machine has none, so the
// tests run the engine's clock against the model in test/sim/sim_phc.hpp.
#include "lib/host/phc.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/ethtool.h>
#include <linux/ptp_clock.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/timex.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>

namespace ibvcap {

namespace {

// linux/posix-timers.h (not exported to user space) and
// Documentation/driver-api/ptp.rst: a dynamic POSIX clock's id from its fd.
clockid_t fd_to_clockid(int fd) {
    constexpr clockid_t kClockFd = 3;
    return static_cast<clockid_t>((~static_cast<unsigned>(fd) << 3) | kClockFd);
}

std::int64_t ns_of(const ptp_clock_time& t) {
    return t.sec * 1'000'000'000 + static_cast<std::int64_t>(t.nsec);
}

std::int64_t ns_of(const timespec& t) {
    return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

std::int64_t realtime_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return ns_of(ts);
}

// ETHTOOL_GET_TS_INFO's phc_index (-1: none); -errno on failure.
int phc_index(const std::string& netdev) {
    if (netdev.empty() || netdev.size() >= IFNAMSIZ) {
        return -ENODEV;
    }
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -errno;
    }
    ethtool_ts_info info{};
    info.cmd = ETHTOOL_GET_TS_INFO;
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, netdev.data(), netdev.size());
    ifr.ifr_data = reinterpret_cast<char*>(&info);
    const int rc = ::ioctl(fd, SIOCETHTOOL, &ifr);
    const int err = errno;
    ::close(fd);
    if (rc != 0) {
        return -err;
    }
    return info.phc_index < 0 ? -1 : info.phc_index;
}

class DevPtp final : public PhcClock {
  public:
    DevPtp(int fd, int index, std::filesystem::path proc_root, std::string path)
        : fd_(fd), index_(index), proc_root_(std::move(proc_root)), path_(std::move(path)) {}
    ~DevPtp() override { ::close(fd_); }
    DevPtp(const DevPtp&) = delete;
    DevPtp& operator=(const DevPtp&) = delete;

    std::size_t sample(std::span<PhcSample> out) override {
        if (out.empty()) {
            return 0;
        }
        const unsigned n =
            static_cast<unsigned>(std::min<std::size_t>(out.size(), PTP_MAX_SAMPLES));
        // [system, phc, system] per sample (linux/ptp_clock.h; kernel
        // drivers/ptp/ptp_chardev.c: EOPNOTSUPP when the driver has no
        // gettimex64, EINVAL for n_samples > PTP_MAX_SAMPLES).
        if (method_ == Method::extended) {
            ptp_sys_offset_extended ext{};
            ext.n_samples = n;
            if (::ioctl(fd_, PTP_SYS_OFFSET_EXTENDED, &ext) == 0) {
                for (unsigned i = 0; i < n; ++i) {
                    out[i] =
                        PhcSample{ns_of(ext.ts[i][0]), ns_of(ext.ts[i][1]), ns_of(ext.ts[i][2])};
                }
                return n;
            }
            if (errno != EOPNOTSUPP && errno != ENOTTY && errno != EINVAL) {
                return failed("PTP_SYS_OFFSET_EXTENDED");
            }
            method_ = Method::basic;
        }
        if (method_ == Method::basic) {
            // Interleaved: system, phc, system, phc, ..., system (2n + 1).
            ptp_sys_offset off{};
            off.n_samples = n;
            if (::ioctl(fd_, PTP_SYS_OFFSET, &off) == 0) {
                for (unsigned i = 0; i < n; ++i) {
                    out[i] = PhcSample{ns_of(off.ts[2 * i]), ns_of(off.ts[2 * i + 1]),
                                       ns_of(off.ts[2 * i + 2])};
                }
                return n;
            }
            if (errno != EOPNOTSUPP && errno != ENOTTY && errno != EINVAL) {
                return failed("PTP_SYS_OFFSET");
            }
            method_ = Method::gettime;
        }
        const clockid_t id = fd_to_clockid(fd_);
        for (unsigned i = 0; i < n; ++i) {
            timespec phc{};
            const std::int64_t before = realtime_ns();
            const int rc = ::clock_gettime(id, &phc);
            const std::int64_t after = realtime_ns();
            if (rc != 0) {
                return failed("clock_gettime");
            }
            out[i] = PhcSample{before, ns_of(phc), after};
        }
        return n;
    }

    PhcInfo info() override {
        PhcInfo i;
        i.index = index_;
        timex tx{};
        tx.modes = 0;
        if (::clock_adjtime(fd_to_clockid(fd_), &tx) >= 0) {
            // freq: ppm with a 16-bit binary fraction (adjtimex(2)).
            i.frequency_ppb = static_cast<double>(tx.freq) * 1000.0 / 65536.0;
        }
        i.daemons = ptp_daemons(proc_root_);
        i.tai_utc_s = kernel_tai_utc_s();
        return i;
    }

    std::string error() const override { return error_; }

  private:
    enum class Method { extended, basic, gettime };
    std::size_t failed(const char* call) {
        // Once a second at most, off the per-frame path: the text may allocate.
        error_ = fmt::format("{}: {}: {}", path_, call, std::strerror(errno));
        return 0;
    }
    int fd_;
    int index_;
    std::filesystem::path proc_root_;
    std::string path_;  // as opened, for the error lines
    Method method_ = Method::extended;
    std::string error_;
};

}  // namespace

std::optional<PhcSample> narrowest(std::span<const PhcSample> samples) {
    std::optional<PhcSample> best;
    for (const PhcSample& s : samples) {
        if (s.width() < 0) {
            continue;
        }
        if (!best || s.width() < best->width()) {
            best = s;
        }
    }
    return best;
}

std::unique_ptr<PhcClock> open_netdev_phc(const std::string& netdev, std::string& why,
                                          const std::filesystem::path& proc_root) {
    const int index = phc_index(netdev);
    if (index == -1) {
        why = fmt::format("{} has no PTP hardware clock (ETHTOOL_GET_TS_INFO)", netdev);
        return nullptr;
    }
    if (index < 0) {
        why = fmt::format("ETHTOOL_GET_TS_INFO on {}: {}", netdev, std::strerror(-index));
        return nullptr;
    }
    auto phc = open_phc_device(fmt::format("/dev/ptp{}", index), index, why, proc_root);
    if (!phc) {
        why = fmt::format("{} ({}'s PHC)", why, netdev);
    }
    return phc;
}

std::unique_ptr<PhcClock> open_phc_device(const std::filesystem::path& path, int index,
                                          std::string& why,
                                          const std::filesystem::path& proc_root) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int err = errno;
        why = fmt::format("cannot open {}: {}", path.string(), std::strerror(err));
        if (err == EACCES || err == EPERM) {
            // systemd's udev left the kernel's 0600 (1e6854e1 makes it 0664
            // only now): the package's rule gives the group read access.
            why += fmt::format(
                "; add the user to the group {0} (the ibvcap package's udev rule gives /dev/ptp* "
                "to it: udevadm trigger -s ptp applies it now) or run as root",
                kPtpGroup);
        }
        return nullptr;
    }
    return std::make_unique<DevPtp>(fd, index, proc_root, path.string());
}

std::vector<std::string> ptp_daemons(const std::filesystem::path& proc_root) {
    static constexpr const char* kNames[] = {"ptp4l", "phc2sys", "timemaster", "chronyd", "ts2phc"};
    std::vector<std::string> found;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(proc_root, ec), end; !ec && it != end;
         it.increment(ec)) {
        const std::string pid = it->path().filename().string();
        if (pid.empty() ||
            !std::all_of(pid.begin(), pid.end(), [](char c) { return c >= '0' && c <= '9'; })) {
            continue;
        }
        std::ifstream in(it->path() / "comm");
        std::string comm;
        if (!std::getline(in, comm)) {
            continue;  // gone meanwhile, or not readable
        }
        for (const char* name : kNames) {
            if (comm == name && std::find(found.begin(), found.end(), comm) == found.end()) {
                found.push_back(comm);
            }
        }
    }
    std::sort(found.begin(), found.end());
    return found;
}

int kernel_tai_utc_s() {
    timex tx{};
    tx.modes = 0;
    // adjtimex(2): tai is the TAI − UTC offset ptp4l or chronyd set (ADJ_TAI);
    // 0 when nothing set it.
    if (::adjtimex(&tx) >= 0 && tx.tai > 0 && tx.tai < 1000) {
        return tx.tai;
    }
    return 37;
}

bool offset_is_tai(std::int64_t offset_ns, int tai_utc_s) {
    constexpr std::int64_t kTolerance = 100'000'000;
    const std::int64_t d = offset_ns - std::int64_t{tai_utc_s} * 1'000'000'000;
    return d > -kTolerance && d < kTolerance;
}

}  // namespace ibvcap
