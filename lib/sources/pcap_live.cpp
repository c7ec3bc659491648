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
                "cap_net_raw=ep {}` (the package sets it)",
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

struct PcapLiveSource::State {
    PcapHandle handle;
    pcap_t* p = nullptr;
    int fd = -1;
    PcapStats stats;
    std::unique_ptr<NicCounters> counters;
    std::vector<std::unique_ptr<GroupMembership>> joined;
    DispatchContext ctx;
    Ledger* ledger = nullptr;
    std::vector<std::string> notes;  // before connect(): for the ledger
    std::string error;               // what ended the capture early
};

PcapLiveSource::PcapLiveSource(PcapLiveOptions options, MembershipFactory memberships)
    : options_(std::move(options)),
      memberships_(std::move(memberships)),
      state_(std::make_unique<State>()) {
    const std::string& ifname = options_.interface;
    if (options_.buffer_bytes == 0 || options_.buffer_bytes > static_cast<std::size_t>(INT_MAX)) {
        throw std::invalid_argument(fmt::format("pcap buffer of {} bytes: must be 1 to {}",
                                                options_.buffer_bytes, INT_MAX));
    }
    char errbuf[PCAP_ERRBUF_SIZE] = {};
    state_->handle.reset(pcap_create(ifname.c_str(), errbuf));
    if (!state_->handle) {
        throw std::runtime_error(fmt::format("cannot capture on {}: {}", ifname, errbuf));
    }
    pcap_t* p = state_->handle.get();
    state_->p = p;
    check_setting(pcap_set_snaplen(p, kSnaplen), "snapshot length", ifname);
    // Not promiscuous: the IGMP joins make the NIC accept the groups'
    // multicast MACs, which is all we want. (It also means libpcap leaves
    // ps_ifdrop at 0 on Linux, see below.)
    check_setting(pcap_set_promisc(p, 0), "promiscuous mode", ifname);
    check_setting(pcap_set_buffer_size(p, static_cast<int>(options_.buffer_bytes)), "buffer size",
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
        state_->notes.push_back(fmt::format("libpcap on {}: {}{}{}", ifname,
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

    const std::string filter = pcap_filter(options_.groups, options_.antennas);
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
    // Non-blocking, with our own poll() in step(): with TPACKET_V3 on a
    // current kernel libpcap blocks in poll() without a timeout and relies on
    // the kernel's block retire timer, which does not fire for an empty
    // block, so a blocking pcap_dispatch on a silent interface never returns
    // (the caveat in pcap(3PCAP) about the packet buffer timeout; seen on lo).
    if (pcap_setnonblock(p, 1, errbuf) != 0) {
        throw std::runtime_error(
            fmt::format("cannot make the capture on {} non-blocking: {}", ifname, errbuf));
    }
    state_->fd = pcap_get_selectable_fd(p);
    state_->ctx.pcap = p;
    state_->ctx.ns_per_unit = pcap_get_tstamp_precision(p) == PCAP_TSTAMP_PRECISION_NANO ? 1 : 1000;
}

PcapLiveSource::~PcapLiveSource() = default;

void PcapLiveSource::connect(std::span<const SourceLane> lanes) {
    state_->ctx.demux = lanes.front().demux;
    state_->ledger = lanes.front().ledger;
    for (auto& n : state_->notes) {
        state_->ledger->add_note(std::move(n));
    }
    state_->notes.clear();
}

void PcapLiveSource::reconnect(std::span<const SourceLane> lanes) {
    state_->ctx.demux = lanes.front().demux;
    state_->ledger = lanes.front().ledger;
}

void PcapLiveSource::arm() {
    State& st = *state_;
    const std::string& ifname = options_.interface;
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
    if (!st.stats.read(st.p, true)) {
        st.notes.push_back(
            fmt::format("libpcap statistics cannot be read on {}: {}", ifname, pcap_geterr(st.p)));
    }
    // Counters first, so that everything the joins bring in is in the window.
    if (options_.nic_counters) {
        st.counters = std::make_unique<NicCounters>(options_.sysfs_root, "", 0, ifname);
        st.counters->snapshot_start();
    }
    // The joins, once the filter is in place: the ring keeps what they bring
    // in until step() reads it, after the run has made its outputs.
    if (memberships_) {
        for (const auto& group : options_.groups) {
            st.joined.push_back(memberships_(group));
        }
    }
}

bool PcapLiveSource::step(std::uint64_t limit, std::chrono::milliseconds max_wait,
                          const std::atomic<bool>& /*stop*/) {
    State& st = *state_;
    const std::string& ifname = options_.interface;
    // With a count, ask for no more than are left, so the run stops at
    // exactly `count` frames (libpcap keeps the rest of the block).
    const int budget = limit > 0 ? static_cast<int>(std::min<std::uint64_t>(limit, INT_MAX)) : -1;
    const int n = pcap_dispatch(st.p, budget, on_packet, reinterpret_cast<u_char*>(&st.ctx));
    if (!st.ctx.error.empty()) {
        st.error = fmt::format("capture on {} stopped: {}", ifname, st.ctx.error);
        return false;
    }
    if (n == PCAP_ERROR) {
        st.error = fmt::format("capture on {} failed after {} frames: {}", ifname, st.ctx.frames,
                               pcap_geterr(st.p));
        return false;
    }
    if (n > 0) {
        return true;
    }
    // Nothing ready: wait for the kernel to hand over a block (full, or
    // retired by the packet buffer timeout), or for an error on the socket.
    pollfd pfd{st.fd, POLLIN, 0};
    (void)::poll(&pfd, 1, static_cast<int>(std::min(max_wait.count(), kWaitMs + 0L)));
    // EINTR (a stop signal): the run loop looks at the flag.
    return true;
}

std::uint64_t PcapLiveSource::frames() const {
    return state_->ctx.frames;
}

void PcapLiveSource::tick(RunInfo& /*info*/) {
    // Once a second, between blocks: the sysfs counters (their growth is
    // accumulated read by read) and libpcap's 32-bit totals.
    if (state_->counters) {
        state_->counters->snapshot();
    }
    (void)state_->stats.read(state_->p, false);  // a failed read leaves the totals as they were
}

SourceFigures PcapLiveSource::figures() const {
    // Drops are what this thread knows live: libpcap's ps_drop + ps_ifdrop
    // and the netdev's drop counters.
    const State& st = *state_;
    SourceFigures f;
    f.packets = st.ctx.frames;
    f.bytes = st.ctx.bytes;
    f.drops = st.stats.drop.total + st.stats.ifdrop.total +
              (st.counters ? nic_drops_so_far(*st.counters) : 0);
    return f;
}

void PcapLiveSource::stop(std::optional<std::uint64_t> remaining) {
    State& st = *state_;
    // Leave the groups, then read what the kernel still holds: a TPACKET_V3
    // block is handed over when it fills or when the packet buffer timeout
    // retires it, so keep reading a little past that timeout. Frames still
    // queued at the end would otherwise be counted by ps_recv and by nothing
    // else. A count limit stays exact.
    st.joined.clear();
    if (st.error.empty() && !(remaining && *remaining == 0)) {
        using Clock = std::chrono::steady_clock;
        const std::uint64_t start_frames = st.ctx.frames;
        const auto left = [&]() -> std::uint64_t {
            return remaining ? *remaining - (st.ctx.frames - start_frames) : 0;
        };
        const auto drain_until = Clock::now() + std::chrono::milliseconds(3 * kBufferTimeoutMs);
        while (Clock::now() < drain_until && st.ctx.error.empty() && !(remaining && left() == 0)) {
            const int budget =
                remaining ? static_cast<int>(std::min<std::uint64_t>(left(), INT_MAX)) : -1;
            const int n =
                pcap_dispatch(st.p, budget, on_packet, reinterpret_cast<u_char*>(&st.ctx));
            if (n < 0) {
                break;
            }
            if (n == 0) {
                pollfd pfd{st.fd, POLLIN, 0};
                (void)::poll(&pfd, 1, 10);
            }
        }
    }
    if (!st.stats.read(st.p, false)) {
        st.ledger->add_note(fmt::format(
            "libpcap statistics cannot be read on {} at the end (the counts are from the last "
            "second): {}",
            options_.interface, pcap_geterr(st.p)));
    }
}

std::vector<SourceCounter> PcapLiveSource::kernel_counters() const {
    // libpcap's totals (pcap_stats(3PCAP)): ps_drop, the socket's ring was
    // full; ps_ifdrop, the interface dropped them. Both the kernel's side.
    const State& st = *state_;
    return {
        {"pcap/ps_recv", st.stats.recv.total, false, LossCause::none},
        {"pcap/ps_drop", st.stats.drop.total, true, LossCause::kernel},
        {"pcap/ps_ifdrop", st.stats.ifdrop.total, true, LossCause::kernel},
    };
}

std::vector<SourceCounter> PcapLiveSource::witnesses() const {
    std::vector<SourceCounter> out = kernel_counters();
    if (state_->counters) {
        for (auto& c : state_->counters->to_source_counters(options_.interface + "/")) {
            out.push_back(std::move(c));
        }
    }
    return out;
}

void PcapLiveSource::report(std::span<const SourceLane> lanes, RunInfo& info) {
    State& st = *state_;
    const std::string& ifname = options_.interface;
    Ledger& ledger = *lanes.front().ledger;
    for (auto& c : kernel_counters()) {
        ledger.add_source_counter(std::move(c));
    }
    if (st.counters) {
        st.counters->snapshot();
        for (const auto& name : st.counters->missing()) {
            ledger.add_note(fmt::format("{}: drop counter {} cannot be read", ifname, name));
        }
        for (const auto& note : st.counters->notes()) {
            ledger.add_note(note);
        }
        for (auto& c : st.counters->to_source_counters(ifname + "/")) {
            ledger.add_source_counter(std::move(c));
        }
    }
    if (!st.error.empty()) {
        info.error = st.error;
        ledger.set_incomplete(st.error);
    }
}

}  // namespace ibvcap
