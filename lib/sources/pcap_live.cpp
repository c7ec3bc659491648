#include "lib/sources/pcap_live.hpp"

#include <fmt/format.h>
#include <pcap/pcap.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <memory>
#include <stdexcept>
#include <system_error>

#include "lib/host/nic_counters.hpp"
#include "lib/run/stats_line.hpp"

namespace ibvcap {

namespace {

constexpr int kSnaplen = 262144;  // libpcap's MAXIMUM_SNAPLEN: never cut a frame
// The packet buffer timeout (pcap(3PCAP)). With TPACKET_V3 it becomes the
// ring's block retire timeout: a partly filled block is handed over at the
// latest this long after its first frame.
constexpr int kBufferTimeoutMs = 50;
// How long one wait for the ring may last: bounds how late the loop sees the
// stop flag, the duration and the 1 Hz counter tick when nothing arrives.
constexpr int kWaitMs = 20;

struct PcapCloser {
    void operator()(pcap_t* p) const { pcap_close(p); }
};
using PcapHandle = std::unique_ptr<pcap_t, PcapCloser>;

// What the frame callback needs; lives on the capture thread's stack.
struct DispatchContext {
    Demux* demux = nullptr;
    pcap_t* pcap = nullptr;
    std::uint64_t frames = 0;
    std::uint64_t bytes = 0;        // their wire lengths (the stats line's Gb/s)
    std::uint64_t ns_per_unit = 1;  // ts.tv_usec is in ns (nano precision) or us
    std::string error;              // an exception from the demux (a limit, memory)
};

// pcap_handler: one frame straight from the ring into the demux. No
// allocation: the frame is a view of the ring block, released when
// pcap_dispatch moves past it.
void on_packet(u_char* user, const pcap_pkthdr* header, const u_char* bytes) {
    auto* ctx = reinterpret_cast<DispatchContext*>(user);
    Frame frame;
    frame.head = Bytes(bytes, header->caplen);
    frame.wire_bytes = header->len;
    frame.timestamp_ns = static_cast<std::uint64_t>(header->ts.tv_sec) * 1'000'000'000u +
                         static_cast<std::uint64_t>(header->ts.tv_usec) * ctx->ns_per_unit;
    // Exceptions must not unwind through libpcap's C frames: keep the first,
    // stop the dispatch, and end the run with it.
    try {
        ctx->demux->on_frame(frame);
        ++ctx->frames;
        ctx->bytes += header->len;
    } catch (const std::exception& e) {
        if (ctx->error.empty()) {
            ctx->error = e.what();
        }
        pcap_breakloop(ctx->pcap);
    }
}

// libpcap keeps its statistics as running totals in 32-bit u_int. Read once a
// second, the differences modulo 2^32 add up to a 64-bit total that survives
// the wrap (4.3 G packets: under an hour at 1.5 Mpps).
struct StatCounter {
    std::uint32_t last = 0;
    std::uint64_t total = 0;
    void baseline(u_int value) { last = static_cast<std::uint32_t>(value); }
    void update(u_int value) {
        const auto v = static_cast<std::uint32_t>(value);
        total += static_cast<std::uint32_t>(v - last);
        last = v;
    }
};

struct PcapStats {
    StatCounter recv, drop, ifdrop;
    bool read(pcap_t* p, bool first) {
        pcap_stat s{};
        if (pcap_stats(p, &s) != 0) {
            return false;
        }
        if (first) {
            recv.baseline(s.ps_recv);
            drop.baseline(s.ps_drop);
            ifdrop.baseline(s.ps_ifdrop);
        } else {
            recv.update(s.ps_recv);
            drop.update(s.ps_drop);
            ifdrop.update(s.ps_ifdrop);
        }
        return true;
    }
};

std::string self_path() {
    std::error_code ec;
    const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::string("ibvcap") : path.string();
}

// pcap_activate's errors as one line naming the fix (pcap_activate(3PCAP)).
std::string activate_error(int status, const std::string& interface, pcap_t* p) {
    switch (status) {
        case PCAP_ERROR_PERM_DENIED:
            return fmt::format(
                "no permission to capture on {}: run as root or `sudo setcap "
                "cap_net_raw,cap_net_admin=ep {}`",
                interface, self_path());
        case PCAP_ERROR_NO_SUCH_DEVICE:
            return fmt::format("no interface named {} (see ip link)", interface);
        case PCAP_ERROR_IFACE_NOT_UP:
            return fmt::format("interface {0} is down (ip link set {0} up)", interface);
        case PCAP_ERROR:  // pcap_geterr() holds the message
            return fmt::format("cannot capture on {}: {}", interface, pcap_geterr(p));
        default:
            return fmt::format("cannot capture on {}: {}", interface, pcap_statustostr(status));
    }
}

void check_setting(int rc, const char* what, const std::string& interface) {
    if (rc != 0) {
        throw std::runtime_error(fmt::format("cannot set the {} of the capture on {}: {}", what,
                                             interface, pcap_statustostr(rc)));
    }
}

// "(dst host G and dst port P) or ..." wrapped as "udp and (...)", then the
// antennas.
std::string filter_body(const std::vector<Endpoint>& groups,
                        const std::vector<std::uint32_t>& antennas) {
    std::string x = "udp";
    if (!groups.empty()) {
        x += " and (";
        for (std::size_t i = 0; i < groups.size(); ++i) {
            x += fmt::format("{}(dst host {} and dst port {})", i == 0 ? "" : " or ",
                             format_ipv4(groups[i].ip), groups[i].port);
        }
        x += ")";
    }
    if (!antennas.empty()) {
        x += " and (";
        for (std::size_t i = 0; i < antennas.size(); ++i) {
            x += fmt::format("{}src host {}", i == 0 ? "" : " or ", format_ipv4(antennas[i]));
        }
        x += ")";
    }
    return x;
}

}  // namespace

std::string pcap_filter(const std::vector<Endpoint>& groups,
                        const std::vector<std::uint32_t>& antennas) {
    // pcap-filter(7): "the first vlan keyword encountered in an expression
    // changes the decoding offsets for the remainder of the expression", so the
    // untagged alternative comes first and the tagged one last. On Linux,
    // libpcap also matches tags the NIC stripped into the packet's metadata
    // (and puts them back into the frame it hands over), so the demux sees the
    // tag either way. Frames with two tags pass neither alternative.
    const std::string x = filter_body(groups, antennas);
    return fmt::format("({}) or (vlan and {})", x, x);
}

RunOutcome run_pcap_capture(const PcapCaptureRequest& request, const MembershipFactory& memberships,
                            const std::atomic<bool>& stop) {
    RunOutcome outcome;
    outcome.info.command = "capture";
    outcome.info.source = "pcap";
    outcome.info.input = request.interface;
    const std::string& ifname = request.interface;

    if (request.buffer_bytes == 0 || request.buffer_bytes > static_cast<std::size_t>(INT_MAX)) {
        throw std::invalid_argument(
            fmt::format("pcap buffer of {} bytes: must be 1 to {}", request.buffer_bytes, INT_MAX));
    }
    if (!request.demux.formats.empty()) {
        prepare_output_dir(request.demux.output_dir);
    }

    char errbuf[PCAP_ERRBUF_SIZE] = {};
    PcapHandle handle(pcap_create(ifname.c_str(), errbuf));
    if (!handle) {
        throw std::runtime_error(fmt::format("cannot capture on {}: {}", ifname, errbuf));
    }
    pcap_t* p = handle.get();
    check_setting(pcap_set_snaplen(p, kSnaplen), "snapshot length", ifname);
    // Not promiscuous: the IGMP joins make the NIC accept the groups'
    // multicast MACs, which is all we want. (It also means libpcap leaves
    // ps_ifdrop at 0 on Linux, see below.)
    check_setting(pcap_set_promisc(p, 0), "promiscuous mode", ifname);
    check_setting(pcap_set_buffer_size(p, static_cast<int>(request.buffer_bytes)), "buffer size",
                  ifname);
    check_setting(pcap_set_timeout(p, kBufferTimeoutMs), "packet buffer timeout", ifname);
    // Immediate mode off: pcap_set_immediate_mode(3PCAP) says that on Linux
    // since libpcap 1.5 captures are "by default, not in immediate mode", so
    // frames are delivered a bufferful at a time. libpcap's Linux backend
    // (pcap-linux.c, setup_mmapped) then uses a TPACKET_V3 ring: variable-size
    // frames packed into blocks the kernel hands over when full or when the
    // packet buffer timeout retires them; immediate mode would fall back to
    // TPACKET_V2, one wakeup per frame.
    check_setting(pcap_set_immediate_mode(p, 0), "immediate mode", ifname);
    // Nanosecond timestamps (pcap-tstamp(7)); if refused, microseconds are
    // scaled below.
    (void)pcap_set_tstamp_precision(p, PCAP_TSTAMP_PRECISION_NANO);

    const int status = pcap_activate(p);
    if (status < 0) {
        throw std::runtime_error(activate_error(status, ifname, p));
    }
    if (status > 0) {
        outcome.ledger.add_note(fmt::format("libpcap on {}: {}{}{}", ifname,
                                            pcap_statustostr(status),
                                            *pcap_geterr(p) != '\0' ? ": " : "", pcap_geterr(p)));
    }
    const int link = pcap_datalink(p);
    if (link != DLT_EN10MB) {
        const char* name = pcap_datalink_val_to_name(link);
        throw std::runtime_error(fmt::format(
            "cannot capture on {}: link type {} ({}) is not Ethernet; choose an Ethernet interface",
            ifname, link, name != nullptr ? name : "unknown"));
    }

    const std::string filter = pcap_filter(request.demux.groups, request.demux.antennas);
    bpf_program program{};
    if (pcap_compile(p, &program, filter.c_str(), 1, PCAP_NETMASK_UNKNOWN) != 0) {
        throw std::runtime_error(
            fmt::format("cannot compile the capture filter \"{}\": {}", filter, pcap_geterr(p)));
    }
    const int set = pcap_setfilter(p, &program);
    pcap_freecode(&program);
    if (set != 0) {
        throw std::runtime_error(
            fmt::format("cannot set the capture filter on {}: {}", ifname, pcap_geterr(p)));
    }
    // Non-blocking, with our own poll() below: with TPACKET_V3 on a current
    // kernel libpcap blocks in poll() without a timeout and relies on the
    // kernel's block retire timer, which does not fire for an empty block, so
    // a blocking pcap_dispatch on a silent interface never returns (the
    // caveat in pcap(3PCAP) about the packet buffer timeout; seen on lo).
    if (pcap_setnonblock(p, 1, errbuf) != 0) {
        throw std::runtime_error(
            fmt::format("cannot make the capture on {} non-blocking: {}", ifname, errbuf));
    }
    const int fd = pcap_get_selectable_fd(p);

    // pcap_stats(3PCAP) on Linux (pcap-linux.c, pcap_stats_linux) comes from
    // the packet socket's PACKET_STATISTICS:
    //   ps_recv   frames that passed the filter, including those then dropped
    //             for want of ring space and those still in the ring, not yet
    //             read: what the kernel offered us. Not a drop. On lo the
    //             kernel counts each frame twice (its outgoing and its incoming
    //             copy; libpcap discards the outgoing one), so there it is
    //             twice the frames seen.
    //   ps_drop   frames that passed the filter but found the ring full:
    //             lost before ibvcap saw them. A drop.
    //   ps_ifdrop the growth of /sys/class/net/IF/statistics/rx_missed_errors +
    //             rx_fifo_errors, which libpcap reads only in promiscuous mode;
    //             without it (as here) it stays 0. Reported as a drop for what
    //             it is; the same sysfs counters are read below as net/*.
    // Taken from here, after the filter is in place, so frames the socket saw
    // before the filter do not count.
    // (If this first read fails, the totals count from the activation.)
    PcapStats stats;
    if (!stats.read(p, true)) {
        outcome.ledger.add_note(
            fmt::format("libpcap statistics cannot be read on {}: {}", ifname, pcap_geterr(p)));
    }

    // Counters first, so that everything the joins bring in is in the window.
    std::unique_ptr<NicCounters> counters;
    if (request.nic_counters) {
        counters = std::make_unique<NicCounters>(request.sysfs_root, "", 0, ifname);
        counters->snapshot_start();
    }

    // The joins, once the filter is in place: the ring keeps what they bring
    // in until the loop below reads it.
    std::vector<std::unique_ptr<GroupMembership>> joined;
    if (memberships) {
        for (const auto& group : request.demux.groups) {
            joined.push_back(memberships(group));
        }
    }

    Faults local_faults;
    Writer::Options writer_options = request.writer;
    if (writer_options.faults == nullptr) {
        writer_options.faults = &local_faults;
    }
    const Faults& faults = *writer_options.faults;
    const auto writer = make_run_writer(request.demux, writer_options, /*live=*/true);
    Demux demux(request.demux, outcome.ledger, writer.get());
    if (request.observer) {
        demux.set_observer(request.observer);
    }
    if (request.blocks != nullptr) {
        demux.add_observer(request.blocks->observer());
    }

    DispatchContext ctx;
    ctx.demux = &demux;
    ctx.pcap = p;
    ctx.ns_per_unit = pcap_get_tstamp_precision(p) == PCAP_TSTAMP_PRECISION_NANO ? 1 : 1000;

    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    // 0, negative or NaN: no limit; capped at ~30 years so the cast cannot overflow.
    const double limit_s = request.duration_s > 0 ? std::min(request.duration_s, 1e9) : 0.0;
    const auto deadline =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit_s));
    auto last_tick = start;
    // The live stats line: built in the 1 Hz tick below, between two
    // dispatches (this loop is the capture thread, so it is kept to a few
    // additions and one short write a second). Drops are what this thread
    // knows live: libpcap's ps_drop + ps_ifdrop and the netdev's drop
    // counters. The writers' drops are known only when they finish (the
    // summary has them), so they are not in the line.
    StatsTicker ticker(request.stats);
    const auto take_stats = [&] {
        StatsSnapshot s;
        stamp_now(s);
        s.packets = ctx.frames;
        s.bytes = ctx.bytes;
        s.drops =
            stats.drop.total + stats.ifdrop.total + (counters ? nic_drops_so_far(*counters) : 0);
        if (writer) {
            s.writer_backlog_bytes = writer->backlog_bytes();
        }
        return s;
    };
    if (ticker.enabled()) {
        ticker.tick(take_stats());  // the baseline
    }
    std::string error;
    for (;;) {
        if (stop.load(std::memory_order_relaxed)) {
            outcome.info.interrupted = true;
            break;
        }
        if (faults.raised()) {
            break;  // a worker thread failed: stop as after a device fault
        }
        const auto now = Clock::now();
        if (limit_s > 0 && now >= deadline) {
            break;
        }
        if (now - last_tick >= std::chrono::seconds(1)) {
            // Once a second, between blocks: the sysfs counters (their
            // growth is accumulated read by read) and libpcap's 32-bit totals.
            last_tick = now;
            if (counters) {
                counters->snapshot();
            }
            (void)stats.read(p, false);  // a failed read leaves the totals as they were
            if (ticker.enabled()) {
                ticker.tick(take_stats());
            }
        }
        if (request.count > 0 && ctx.frames >= request.count) {
            break;
        }
        // With a count, ask for no more than are left, so the run stops at
        // exactly `count` frames (libpcap keeps the rest of the block).
        const int budget =
            request.count > 0
                ? static_cast<int>(std::min<std::uint64_t>(request.count - ctx.frames, INT_MAX))
                : -1;
        const int n = pcap_dispatch(p, budget, on_packet, reinterpret_cast<u_char*>(&ctx));
        if (!ctx.error.empty()) {
            error = fmt::format("capture on {} stopped: {}", ifname, ctx.error);
            break;
        }
        if (n == PCAP_ERROR) {
            error = fmt::format("capture on {} failed after {} frames: {}", ifname, ctx.frames,
                                pcap_geterr(p));
            break;
        }
        if (n > 0) {
            continue;
        }
        // Nothing ready: wait for the kernel to hand over a block (full, or
        // retired by the packet buffer timeout), or for an error on the socket.
        int wait_ms = kWaitMs;
        if (limit_s > 0) {
            const auto left =
                std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
            wait_ms = static_cast<int>(std::clamp<decltype(left)>(left, 0, kWaitMs));
        }
        pollfd pfd{fd, POLLIN, 0};
        (void)::poll(&pfd, 1, wait_ms);  // EINTR (a stop signal): the loop looks at the flag
    }

    // Leave the groups, then read what the kernel still holds: a TPACKET_V3
    // block is handed over when it fills or when the packet buffer timeout
    // retires it, so keep reading a little past that timeout. Frames still
    // queued at the end would otherwise be counted by ps_recv and by nothing
    // else. A count limit stays exact.
    joined.clear();
    if (error.empty() && !(request.count > 0 && ctx.frames >= request.count)) {
        const auto drain_until = Clock::now() + std::chrono::milliseconds(3 * kBufferTimeoutMs);
        while (Clock::now() < drain_until && ctx.error.empty() &&
               !(request.count > 0 && ctx.frames >= request.count)) {
            const int budget =
                request.count > 0
                    ? static_cast<int>(std::min<std::uint64_t>(request.count - ctx.frames, INT_MAX))
                    : -1;
            const int n = pcap_dispatch(p, budget, on_packet, reinterpret_cast<u_char*>(&ctx));
            if (n < 0) {
                break;
            }
            if (n == 0) {
                pollfd pfd{fd, POLLIN, 0};
                (void)::poll(&pfd, 1, 10);
            }
        }
    }
    if (!stats.read(p, false)) {
        outcome.ledger.add_note(fmt::format(
            "libpcap statistics cannot be read on {} at the end (the counts are from the last "
            "second): {}",
            ifname, pcap_geterr(p)));
    }
    outcome.ledger.add_source_counter({"pcap/ps_recv", stats.recv.total, false});
    outcome.ledger.add_source_counter({"pcap/ps_drop", stats.drop.total, true});
    outcome.ledger.add_source_counter({"pcap/ps_ifdrop", stats.ifdrop.total, true});
    if (counters) {
        counters->snapshot();
        for (const auto& name : counters->missing()) {
            outcome.ledger.add_note(
                fmt::format("{}: drop counter {} cannot be read", ifname, name));
        }
        for (auto& c : counters->to_source_counters(ifname + "/")) {
            outcome.ledger.add_source_counter(std::move(c));
        }
    }
    if (writer) {
        writer->finish();
        outcome.ledger.set_outputs(writer->stats());
    }
    if (request.blocks != nullptr) {
        request.blocks->flush();  // the producer has stopped: hand out the open blocks
    }
    if (!error.empty()) {
        outcome.info.error = error;
        outcome.ledger.set_incomplete(error);
    }
    outcome.info.duration_s = std::chrono::duration<double>(Clock::now() - start).count();
    outcome.exit_code = exit_code_for(outcome.ledger, outcome.info);
    apply_faults(faults, outcome);
    return outcome;
}

}  // namespace ibvcap
