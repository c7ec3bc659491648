// ibvcap doctor: the capture interface's sysctls, --source pcap's buffer and -o
// (lib/host/doctor.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "lib/host/doctor.hpp"
#include "lib/host/doctor_common.hpp"

namespace ibvcap::doctor {

namespace fs = std::filesystem;
using namespace detail;

// ---- the capture interface --------------------------------------------------

std::optional<Check> check_phc(const Options& o, const HostCalls& calls, const Target& t) {
    if (!calls.open_phc) {
        return std::nullopt;
    }
    std::string why;
    const std::unique_ptr<PhcClock> phc = calls.open_phc(t.netdev, why);
    if (!phc) {
        return make(Status::warn, "ptp clock", t.netdev, why,
                    "wall-clock frame times will be the NIC's own clock, not measured against "
                    "CLOCK_REALTIME (see ethtool -T " +
                        t.netdev + "), or capture with --timestamps nic knowingly");
    }
    const PhcInfo info = phc->info();
    std::array<PhcSample, 9> samples{};
    const std::size_t n = phc->sample(samples);
    const auto best = narrowest(std::span<const PhcSample>(samples.data(), n));
    if (!best) {
        return make(Status::warn, "ptp clock", t.netdev,
                    fmt::format("/dev/ptp{} cannot be read: {}", info.index,
                                n == 0 ? phc->error() : "every bracket ran backwards"),
                    "frame times will not be measured; check the PHC's permissions and driver");
    }
    const std::int64_t offset =
        best->phc_ns - (best->host_before_ns + (best->host_after_ns - best->host_before_ns) / 2);
    const bool tai = offset_is_tai(offset, info.tai_utc_s);
    // The daemons from the procfs root (a heuristic: a daemon may keep
    // another clock); an adjusted frequency says someone disciplines it.
    const std::vector<std::string> daemons = ptp_daemons(o.procfs_root);
    const bool adjusted = info.frequency_ppb && *info.frequency_ppb != 0;
    std::string discipline;
    if (!daemons.empty()) {
        discipline = "PTP daemons running: " + join(daemons);
    } else if (adjusted) {
        discipline = "no PTP daemon running, but the frequency was adjusted";
    } else {
        discipline = "no PTP daemon running: it drifts from where the driver set it at load";
    }
    if (info.frequency_ppb) {
        discipline += fmt::format(" (frequency {:+.1f} ppb)", *info.frequency_ppb);
    }
    const std::string found = fmt::format(
        "/dev/ptp{}: PHC − CLOCK_REALTIME {:+.9f} s (± {} ns){}; {}; capture converts frame times "
        "to UTC by it each second",
        info.index, static_cast<double>(offset) / 1e9, best->width() / 2,
        tai ? fmt::format(", TAI (UTC + {} s)", info.tai_utc_s) : std::string(), discipline);
    return make(Status::pass, "ptp clock", t.netdev, found);
}

Check check_ptp_device(const fs::path& path) {
    std::string why;
    const std::unique_ptr<PhcClock> phc = open_phc_device(path, -1, why);
    if (!phc) {
        return make(Status::fail, "ptp clock", path.string(), why,
                    "frame times cannot be measured against UTC by this user");
    }
    std::array<PhcSample, 9> samples{};
    const std::size_t n = phc->sample(samples);
    const auto best = narrowest(std::span<const PhcSample>(samples.data(), n));
    if (!best) {
        return make(Status::warn, "ptp clock", path.string(),
                    fmt::format("opened, but not read: {}",
                                n == 0 ? phc->error() : "every bracket ran backwards"),
                    "is it a PTP clock? (ls /sys/class/ptp)");
    }
    return make(Status::pass, "ptp clock", path.string(),
                fmt::format("readable: PHC − CLOCK_REALTIME {:+.9f} s",
                            static_cast<double>(
                                best->phc_ns - (best->host_before_ns +
                                                (best->host_after_ns - best->host_before_ns) / 2)) /
                                1e9));
}

Check check_rp_filter(const Options& o, const Target& t) {
    // Documentation/networking/ip-sysctl.rst, rp_filter: "The max value from
    // conf/{all,interface}/rp_filter is used when doing source validation on the
    // {interface}." Multicast is validated too (net/ipv4/route.c,
    // ip_mc_validate_source → fib_validate_source), IGMP queries included: a
    // router's query dropped here means no reports, and the switch stops sending.
    const fs::path conf = o.procfs_root / "sys/net/ipv4/conf";
    const auto all = read_long(conf / "all/rp_filter");
    const auto dev = read_long(conf / t.netdev / "rp_filter");
    if (!all || !dev) {
        return make(
            Status::warn, "rp_filter", t.netdev,
            fmt::format("unreadable ({})",
                        (!all ? conf / "all/rp_filter" : conf / t.netdev / "rp_filter").string()),
            "check sysctl net.ipv4.conf.all.rp_filter");
    }
    const long value = std::max(*all, *dev);
    const std::string what =
        fmt::format("{} (the larger of all={} and {}={})", value, *all, t.netdev, *dev);
    if (value == 0) {
        return make(Status::pass, "rp_filter", t.netdev, what + ": no reverse-path filtering");
    }
    return make(
        Status::warn, "rp_filter", t.netdev,
        what + (value == 1 ? ": strict: multicast (IGMP queries included) from a source not "
                             "routed back through " +
                                 t.netdev + " is dropped by the kernel"
                           : ": loose: multicast from a source with no route at all is "
                             "dropped by the kernel"),
        fmt::format("sysctl -w net.ipv4.conf.all.rp_filter=0 "
                    "net.ipv4.conf.{}.rp_filter=0, or route the senders' subnet via {}",
                    t.netdev, t.netdev));
}

std::optional<Check> check_vlan(const Options& o, const Target& t) {
    const VlanChain chain =
        vlan_chain(read_vlan_table(o.procfs_root / "net/vlan/config"), t.netdev);
    const std::vector<std::uint16_t>& ids = chain.ids;
    const std::string& real = chain.real;
    if (ids.empty()) {
        return std::nullopt;
    }
    const std::string tags = format_vlan_ids(ids);
    if (t.rdma_device.empty()) {
        return make(
            Status::pass, "vlan", t.netdev,
            fmt::format("VLAN {} on {}; no RDMA port drives it (--source pcap only)", tags, real),
            "");
    }
    return make(Status::pass, "vlan", t.netdev,
                fmt::format("VLAN {} on {}, {} port {}: joins go out tagged on {}; {}", tags, real,
                            t.rdma_device, t.port, t.netdev,
                            ids.size() == 1
                                ? fmt::format("the rules match VLAN {} and the header slot takes "
                                              "its tag",
                                              tags)
                                : std::string("stacked tags: the header slot takes them all, the "
                                              "rules match the group only")),
                "");
}

Check check_igmp(const Options& o, const Target& t) {
    // Documentation/networking/ip-sysctl.rst, force_igmp_version: 0 and 3 answer
    // the querier's version, 2 answers v2 and v3 queries with v2 reports, 1
    // answers everything with v1 reports. The kernel honours all/ and the
    // interface's value (net/ipv4/igmp.c, IGMP_V1_SEEN / IGMP_V2_SEEN).
    const fs::path conf = o.procfs_root / "sys/net/ipv4/conf";
    const auto all = read_long(conf / "all/force_igmp_version");
    const auto dev = read_long(conf / t.netdev / "force_igmp_version");
    if (!all || !dev) {
        return make(Status::warn, "igmp", t.netdev, "force_igmp_version unreadable",
                    "check sysctl net.ipv4.conf." + t.netdev + ".force_igmp_version");
    }
    const std::string what = fmt::format("force_igmp_version all={} {}={}", *all, t.netdev, *dev);
    if (*all == 1 || *dev == 1) {
        return make(Status::warn, "igmp", t.netdev,
                    what +
                        ": IGMPv1 reports (no leave messages; queriers of v2 and v3 treat the "
                        "host as v1)",
                    fmt::format("sysctl -w net.ipv4.conf.all.force_igmp_version=0 "
                                "net.ipv4.conf.{}.force_igmp_version=0",
                                t.netdev));
    }
    if (*all == 2 || *dev == 2) {
        return make(Status::pass, "igmp", t.netdev,
                    what +
                        ": IGMPv2 reports (ibvcap's any-source joins work with v2 and v3 "
                        "queriers)");
    }
    return make(Status::pass, "igmp", t.netdev, what + ": the querier's version");
}

Check check_loopback(const Options& o, const Target& t) {
    // MLNX_OFED's mlx5 (mlnx-ofa_kernel: drivers/net/ethernet/mellanox/mlx5/core/en_sysfs.c)
    // adds class/net/<IF>/settings/force_local_lb_disable when the device has the
    // disable_local_lb_mc/uc capability; it reads "Force local loopback disable
    // is ON|OFF". The inbox mlx5 has no such file: it turns local loopback on
    // and off itself (mlx5_nic_vport_update_local_lb), so it is unknown here.
    const fs::path file = o.sysfs_root / "class/net" / t.netdev / "settings/force_local_lb_disable";
    const auto text = read_sysfs_file(file);
    if (!text) {
        return make(Status::warn, "multicast loopback", t.netdev,
                    fmt::format("unknown: no {} (MLNX_OFED's mlx5 adds it; the inbox driver "
                                "decides loopback itself): multicast sent from this host may not "
                                "reach a capture on the same port",
                                file.string()),
                    "if a sender runs on this host, test it: ibvcap gen --send -i " + t.netdev +
                        " while capturing on it");
    }
    if (text->ends_with("OFF")) {
        return make(Status::pass, "multicast loopback", t.netdev,
                    "allowed (force_local_lb_disable OFF)");
    }
    if (text->ends_with("ON")) {
        return make(
            Status::warn, "multicast loopback", t.netdev,
            "disabled (force_local_lb_disable ON): multicast sent from this host through " +
                t.netdev + " does not reach a capture on the same port",
            fmt::format("echo 0 > {} (if a sender on this host must be captured)", file.string()));
    }
    return make(Status::warn, "multicast loopback", t.netdev,
                fmt::format("unknown: {} reads '{}'", file.string(), *text),
                "cat the file: it should say ON or OFF");
}

// ---- --source pcap ------------------------------------------------------------

Check check_pcap_buffer(const Options& o, const HostCalls& calls) {
    const std::string version = calls.pcap_version ? calls.pcap_version() : "";
    const auto rmem = read_long(o.procfs_root / "sys/net/core/rmem_max");
    const std::string rmem_text = rmem ? mib(static_cast<std::uint64_t>(*rmem)) : "unreadable";
    // libpcap's Linux capture is memory-mapped (pcap-linux.c: setup_mmapped →
    // create_ring): the buffer size sizes the PACKET_RX_RING, and SO_RCVBUF is
    // not set, so net.core.rmem_max does not cap it. A libpcap without
    // TPACKET falls back to SO_RCVBUF, which rmem_max caps.
    if (version.find("TPACKET") != std::string::npos) {
        return make(Status::pass, "pcap buffer", "",
                    fmt::format("rmem_max {} does not limit it: {} sizes its memory-mapped ring "
                                "with the {} the pcap source asks for, not SO_RCVBUF",
                                rmem_text, version, mib(kPcapBufferBytes)));
    }
    const std::string fix = fmt::format("sysctl -w net.core.rmem_max={}", kPcapBufferBytes);
    if (!rmem) {
        return make(Status::warn, "pcap buffer", "",
                    fmt::format("{}; rmem_max unreadable", version.empty() ? "libpcap" : version),
                    fix);
    }
    if (static_cast<std::uint64_t>(*rmem) >= kPcapBufferBytes) {
        return make(Status::pass, "pcap buffer", "",
                    fmt::format("rmem_max {} ≥ the {} the pcap source asks for", rmem_text,
                                mib(kPcapBufferBytes)));
    }
    return make(
        Status::warn, "pcap buffer", "",
        fmt::format("rmem_max {} < the {} the pcap source asks for, and {} uses "
                    "SO_RCVBUF: the kernel caps the buffer",
                    rmem_text, mib(kPcapBufferBytes), version.empty() ? "libpcap" : version),
        fix);
}

// ---- -o ---------------------------------------------------------------------

namespace {

// -o, or its nearest existing ancestor when the capture would create it.
struct OutputDir {
    fs::path dir;
    std::string note;   // " (DIR does not exist: checked ANCESTOR)"
    std::string error;  // a component that is not a directory
};

OutputDir output_dir(const Options& o) {
    OutputDir out;
    std::error_code ec;
    fs::path p = fs::absolute(o.output_dir, ec);
    if (ec) {
        p = o.output_dir;
    }
    fs::path probe = p;
    while (!fs::exists(probe, ec) && probe.has_parent_path() && probe != probe.parent_path()) {
        probe = probe.parent_path();
    }
    if (!fs::is_directory(probe, ec)) {
        out.error = fmt::format("{} is not a directory", probe.string());
        return out;
    }
    out.dir = probe;
    if (probe != p) {
        out.note = fmt::format(" ({} does not exist yet: a capture creates it; checked {})",
                               p.string(), probe.string());
    }
    return out;
}

}  // namespace

Check check_disk_space(const Options& o, const HostCalls& calls) {
    const std::string subject = o.output_dir.string();
    const OutputDir d = output_dir(o);
    if (!d.error.empty()) {
        return make(Status::fail, "disk space", subject, d.error, "give -o a directory");
    }
    std::string error;
    const auto space = calls.disk_space(d.dir, error);
    if (!space) {
        return make(Status::fail, "disk space", subject,
                    fmt::format("statvfs {}: {}", d.dir.string(), error),
                    "give -o a directory on a mounted filesystem");
    }
    if (space->read_only) {
        return make(Status::fail, "disk space", subject,
                    fmt::format("{} is on a read-only filesystem{}", d.dir.string(), d.note),
                    "give -o a writable directory");
    }
    const HostCalls::DirProbe probe = calls.dir_probe(d.dir);
    if (!probe.write_error.empty()) {
        return make(
            Status::fail, "disk space", subject,
            fmt::format("cannot write in {}: {}{}", d.dir.string(), probe.write_error, d.note),
            "give -o a directory this user can write (or fix its permissions)");
    }
    // At 1 GB/s: 8 Gb/s of CODIF, a busy single-port capture.
    const std::string what =
        fmt::format("{} free of {} (about {} min at 1 GB/s){}", gib(space->free_bytes),
                    gib(space->total_bytes), space->free_bytes / 1'000'000'000 / 60, d.note);
    if (space->free_bytes < kDiskFailBytes) {
        return make(Status::fail, "disk space", subject, what,
                    "free space on that filesystem or give -o another one");
    }
    if (space->free_bytes < kDiskWarnBytes) {
        return make(Status::warn, "disk space", subject, what,
                    "free space or give -o a larger filesystem (-W with -G or -C keeps a ring "
                    "of files)");
    }
    return make(Status::pass, "disk space", subject, what);
}

Check check_direct_io(const Options& o, const HostCalls& calls) {
    const std::string subject = o.output_dir.string();
    const OutputDir d = output_dir(o);
    if (!d.error.empty()) {
        return make(Status::warn, "o_direct", subject, "not tried: " + d.error,
                    "give -o a directory");
    }
    const HostCalls::DirProbe probe = calls.dir_probe(d.dir);
    if (!probe.write_error.empty()) {
        return make(
            Status::warn, "o_direct", subject,
            fmt::format("not tried: cannot write in {}: {}", d.dir.string(), probe.write_error),
            "see disk space");
    }
    if (probe.direct_error.empty()) {
        return make(Status::pass, "o_direct", subject,
                    fmt::format("a 4 KiB O_DIRECT write works in {}{}", d.dir.string(), d.note));
    }
    return make(Status::warn, "o_direct", subject,
                fmt::format("{} in {}: --direct-io would fail there{}", probe.direct_error,
                            d.dir.string(), d.note),
                "leave --direct-io off for this directory, or give -o a filesystem that supports "
                "O_DIRECT (ext4, XFS)");
}

}  // namespace ibvcap::doctor
