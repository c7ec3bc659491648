// The libpcap live source: its BPF filter (compiled on a dead handle and run
// on hand-built frames), and real captures on the loopback interface fed by a
// UDP socket, bounded in packets and time. The error paths that need a
// missing capability or a disappearing interface run in a forked child (its
// own capabilities, its own network namespace), so the host is left alone.
//
// CI runs this as root; without CAP_NET_RAW the live tests are skipped.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <pcap/pcap.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "frames.hpp"
#include "lib/run/pcap_capture.hpp"
#include "lib/sources/pcap_live.hpp"
#include "lib/traffic/generator.hpp"
#include "pcapng_reader.hpp"

namespace ibvcap {
namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t kLoopback = (127u << 24) | 1u;                    // 127.0.0.1
constexpr std::uint32_t kLiveGroup1 = (239u << 24) | (255u << 16) | 71u;  // 239.255.0.71
constexpr std::uint32_t kLiveGroup2 = (239u << 24) | (255u << 16) | 72u;  // 239.255.0.72
// A port of this process's own, so that test programs running side by side on
// one host (ctest -j, two build trees) never count each other's datagrams.
const std::uint16_t kLivePort = static_cast<std::uint16_t>(40000 + ::getpid() % 20000);

// ---------------------------------------------------------------- the filter

TEST(PcapFilter, OneGroup) {
    EXPECT_EQ(pcap_filter({Endpoint{test::kGroup1, 36001}}, {}),
              "(udp and ((dst host 239.17.0.1 and dst port 36001))) or "
              "(vlan and udp and ((dst host 239.17.0.1 and dst port 36001)))");
}

TEST(PcapFilter, TwoGroups) {
    EXPECT_EQ(pcap_filter({Endpoint{test::kGroup1, 36001}, Endpoint{test::kGroup2, 36002}}, {}),
              "(udp and ((dst host 239.17.0.1 and dst port 36001) or (dst host 239.17.0.2 and "
              "dst port 36002))) or (vlan and udp and ((dst host 239.17.0.1 and dst port 36001) "
              "or (dst host 239.17.0.2 and dst port 36002)))");
}

TEST(PcapFilter, OneGroupOneAntenna) {
    EXPECT_EQ(pcap_filter({Endpoint{test::kGroup1, 36001}}, {test::kAntenna1}),
              "(udp and ((dst host 239.17.0.1 and dst port 36001)) and (src host 10.0.0.11)) or "
              "(vlan and udp and ((dst host 239.17.0.1 and dst port 36001)) and (src host "
              "10.0.0.11))");
}

TEST(PcapFilter, TwoGroupsTwoAntennas) {
    EXPECT_EQ(pcap_filter({Endpoint{test::kGroup1, 36001}, Endpoint{test::kGroup2, 36002}},
                          {test::kAntenna1, test::kAntenna2}),
              "(udp and ((dst host 239.17.0.1 and dst port 36001) or (dst host 239.17.0.2 and "
              "dst port 36002)) and (src host 10.0.0.11 or src host 10.0.0.12)) or (vlan and udp "
              "and ((dst host 239.17.0.1 and dst port 36001) or (dst host 239.17.0.2 and dst port "
              "36002)) and (src host 10.0.0.11 or src host 10.0.0.12))");
}

TEST(PcapFilter, NoGroupsIsEveryUdpDestination) {
    EXPECT_EQ(pcap_filter({}, {}), "(udp) or (vlan and udp)");
}

// A compiled filter on a dead Ethernet handle, as the live capture compiles it.
class CompiledFilter {
  public:
    explicit CompiledFilter(const std::string& text) {
        dead_ = pcap_open_dead(DLT_EN10MB, 262144);
        if (dead_ == nullptr) {
            throw std::runtime_error("pcap_open_dead failed");
        }
        if (pcap_compile(dead_, &program_, text.c_str(), 1, PCAP_NETMASK_UNKNOWN) != 0) {
            error_ = pcap_geterr(dead_);
        }
    }
    ~CompiledFilter() {
        if (error_.empty()) {
            pcap_freecode(&program_);
        }
        pcap_close(dead_);
    }
    CompiledFilter(const CompiledFilter&) = delete;
    CompiledFilter& operator=(const CompiledFilter&) = delete;

    const std::string& error() const { return error_; }
    bool matches(const std::vector<std::uint8_t>& frame) const {
        pcap_pkthdr header{};
        header.caplen = static_cast<bpf_u_int32>(frame.size());
        header.len = header.caplen;
        return pcap_offline_filter(&program_, &header, frame.data()) != 0;
    }

  private:
    pcap_t* dead_ = nullptr;
    bpf_program program_{};
    std::string error_;
};

TEST(PcapFilter, CompilesAndSelectsTheRightFrames) {
    const CompiledFilter f(pcap_filter(
        {Endpoint{test::kGroup1, 36001}, Endpoint{test::kGroup2, 36002}}, {test::kAntenna1}));
    ASSERT_EQ(f.error(), "");
    const auto h = test::make_header(100, 0);
    using test::make_frame;
    EXPECT_TRUE(f.matches(make_frame(test::kAntenna1, test::kGroup1, 36001, h)));
    EXPECT_TRUE(f.matches(make_frame(test::kAntenna1, test::kGroup2, 36002, h)));
    EXPECT_TRUE(f.matches(make_frame(test::kAntenna1, test::kGroup1, 36001, h, 7)))
        << "one VLAN tag";
    EXPECT_FALSE(f.matches(make_frame(test::kAntenna1, test::kGroup1, 36002, h)))
        << "group 1 on group 2's port";
    EXPECT_FALSE(f.matches(make_frame(test::kAntenna1, test::kGroup1, 36009, h))) << "another port";
    EXPECT_FALSE(f.matches(make_frame(test::kAntenna1, test::kGroup1 + 5, 36001, h)))
        << "another group";
    EXPECT_FALSE(f.matches(make_frame(test::kAntenna2, test::kGroup1, 36001, h)))
        << "an unlisted antenna";
    EXPECT_FALSE(f.matches(make_frame(test::kAntenna2, test::kGroup1, 36001, h, 7)))
        << "an unlisted antenna behind a VLAN tag";
    EXPECT_FALSE(f.matches(make_frame(test::kAntenna1, test::kGroup1, 36009, h, 7)))
        << "another port behind a VLAN tag";
    auto arp = make_frame(test::kAntenna1, test::kGroup1, 36001, h);
    arp[12] = 0x08;
    arp[13] = 0x06;
    EXPECT_FALSE(f.matches(arp)) << "not IPv4";
    auto tcp = make_frame(test::kAntenna1, test::kGroup1, 36001, h);
    tcp[23] = 6;
    EXPECT_FALSE(f.matches(tcp)) << "not UDP";
}

TEST(PcapFilter, WithoutAntennasAnySourceMatches) {
    const CompiledFilter f(pcap_filter({Endpoint{test::kGroup1, 36001}}, {}));
    ASSERT_EQ(f.error(), "");
    const auto h = test::make_header(100, 0);
    EXPECT_TRUE(f.matches(test::make_frame(test::kAntenna2, test::kGroup1, 36001, h)));
    EXPECT_TRUE(f.matches(test::make_frame((192u << 24) | 1u, test::kGroup1, 36001, h, 100)));
    EXPECT_FALSE(f.matches(test::make_frame(test::kAntenna2, test::kGroup2, 36001, h)));
}

// ------------------------------------------------------------ live captures

bool can_capture() {
    char errbuf[PCAP_ERRBUF_SIZE] = {};
    pcap_t* p = pcap_create("lo", errbuf);
    if (p == nullptr) {
        return false;
    }
    const int status = pcap_activate(p);
    pcap_close(p);
    return status >= 0;
}

#define SKIP_UNLESS_CAPTURE_ALLOWED()                                                    \
    do {                                                                                 \
        if (!can_capture()) {                                                            \
            IBVCAP_SKIP_UNLESS_CI("no permission to capture on lo (needs CAP_NET_RAW)"); \
        }                                                                                \
    } while (false)

// Records the joins; tells the sender when the capture is ready for traffic
// (the joins come after the filter is in place).
struct FakeMemberships {
    struct Membership : GroupMembership {
        explicit Membership(std::atomic<int>& held) : held_(held) { ++held_; }
        ~Membership() override { --held_; }
        void rejoin() override {}
        std::atomic<int>& held_;
    };
    std::mutex mutex;
    std::vector<Endpoint> joined;
    std::atomic<int> held{0};
    std::atomic<std::size_t> joins{0};

    MembershipFactory factory() {
        return [this](const Endpoint& group) {
            std::lock_guard lock(mutex);
            joined.push_back(group);
            auto m = std::make_unique<Membership>(held);
            ++joins;
            return m;
        };
    }
    // Wait until `n` groups are joined (false after 5 s).
    bool wait_joined(std::size_t n) const {
        const auto until = std::chrono::steady_clock::now() + 5s;
        while (joins.load() < n) {
            if (std::chrono::steady_clock::now() > until) {
                return false;
            }
            std::this_thread::sleep_for(1ms);
        }
        return true;
    }
};

// A UDP socket that sends multicast out of the interface with `address`.
class MulticastSender {
  public:
    explicit MulticastSender(std::uint32_t address) {
        fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd_ < 0) {
            throw std::runtime_error("socket failed");
        }
        in_addr a{};
        a.s_addr = htonl(address);
        const unsigned char loop = 1;
        const unsigned char ttl = 1;
        if (::setsockopt(fd_, IPPROTO_IP, IP_MULTICAST_IF, &a, sizeof a) != 0 ||
            ::setsockopt(fd_, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof loop) != 0 ||
            ::setsockopt(fd_, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof ttl) != 0) {
            ::close(fd_);
            throw std::runtime_error("setsockopt failed");
        }
    }
    ~MulticastSender() { ::close(fd_); }
    MulticastSender(const MulticastSender&) = delete;
    MulticastSender& operator=(const MulticastSender&) = delete;

    bool send(const Endpoint& to, Bytes payload) {
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_port = htons(to.port);
        sa.sin_addr.s_addr = htonl(to.ip);
        const ssize_t n = ::sendto(fd_, payload.data(), payload.size(), 0,
                                   reinterpret_cast<const sockaddr*>(&sa), sizeof sa);
        return n == static_cast<ssize_t>(payload.size());
    }

  private:
    int fd_ = -1;
};

GeneratorConfig live_config(std::uint32_t antenna, std::uint64_t frames) {
    GeneratorConfig c;
    c.antennas = {antenna};
    c.groups = {Endpoint{kLiveGroup1, kLivePort}, Endpoint{kLiveGroup2, kLivePort}};
    c.threads = 2;
    c.frames = frames;
    return c;
}

// Send every frame of the generator as a datagram (its UDP payload: the bytes
// from offset 42); the expected .codif file contents, by group.
struct Sent {
    std::uint64_t datagrams = 0;
    std::map<std::string, std::vector<std::uint8_t>> codif;  // by group
};
Sent send_generated(const GeneratorConfig& config, std::uint32_t if_address) {
    Sent sent;
    MulticastSender sender(if_address);
    Generator gen(config);
    GeneratedFrame f;
    while (gen.next(f)) {
        const Endpoint& group = gen.truth()[f.stream].group;
        const Bytes payload = f.bytes.subspan(42);
        if (!sender.send(group, payload)) {
            break;
        }
        ++sent.datagrams;
        auto& c = sent.codif[group.to_string()];
        c.insert(c.end(), payload.begin(), payload.end());
    }
    return sent;
}

const SourceCounter* find_counter(const Ledger& ledger, const std::string& name) {
    for (const auto& c : ledger.source_counters()) {
        if (c.name == name) {
            return &c;
        }
    }
    return nullptr;
}

PcapCaptureRequest loopback_request() {
    PcapCaptureRequest r;
    r.interface = "lo";
    r.interface_ipv4 = kLoopback;
    r.demux.groups = {Endpoint{kLiveGroup1, kLivePort}, Endpoint{kLiveGroup2, kLivePort}};
    r.buffer_bytes = std::size_t{16} << 20;
    r.duration_s = 5;  // the bound if something goes wrong
    return r;
}

TEST(PcapLive, CapturesMulticastOnLoopbackUntilTheCount) {
    SKIP_UNLESS_CAPTURE_ALLOWED();
    test::TempDir dir;
    const GeneratorConfig config = live_config(kLoopback, 50);  // 2 groups x 2 threads x 50
    const std::uint64_t k = 200;

    PcapCaptureRequest request = loopback_request();
    request.count = k;
    request.outputs.formats = {OutputFormat::codif, OutputFormat::pcapng};
    request.outputs.output_dir = dir.path().string();
    std::mutex seen_mutex;
    std::vector<std::uint8_t> first_header;
    std::uint64_t first_ns = 0;
    request.observer = [&](const Frame& frame, const UdpPacket&, const StreamHeader&,
                           const StreamStats&) {
        std::lock_guard lock(seen_mutex);
        if (first_header.empty()) {
            first_header.assign(frame.head.begin(), frame.head.begin() + 14);
            first_ns = frame.timestamp_ns;
        }
    };

    FakeMemberships memberships;
    Sent sent;
    std::thread sender([&] {
        if (memberships.wait_joined(2)) {
            sent = send_generated(config, kLoopback);
        }
    });
    const std::atomic<bool> stop{false};
    const auto wall_before = std::chrono::system_clock::now();
    const RunOutcome out = run_pcap_capture(request, memberships.factory(), stop);
    sender.join();

    ASSERT_EQ(sent.datagrams, k);
    EXPECT_EQ(out.info.source, "pcap");
    EXPECT_EQ(out.info.command, "capture");
    EXPECT_EQ(out.info.input, "lo");
    EXPECT_EQ(out.info.error, "");
    EXPECT_FALSE(out.info.interrupted);
    EXPECT_LT(out.info.duration_s, 4.0) << "stopped by the duration bound, not the count";

    const Totals t = out.ledger.totals();
    EXPECT_EQ(t.packets, k);
    EXPECT_EQ(t.codif, k);
    EXPECT_EQ(t.missing, 0u);
    EXPECT_EQ(t.duplicates, 0u);
    EXPECT_EQ(t.malformed, 0u);
    EXPECT_EQ(t.non_codif, 0u);
    ASSERT_EQ(out.ledger.streams().size(), 4u);
    for (const auto& s : out.ledger.streams()) {
        EXPECT_EQ(s.packets(), 50u) << s.group.to_string() << " thread " << s.thread;
        EXPECT_EQ(s.antenna, kLoopback);
    }
    EXPECT_TRUE(out.ledger.zero_loss()) << ::testing::PrintToString(out.ledger.loss_reasons());
    EXPECT_EQ(out.exit_code, kExitZeroLoss);

    // libpcap's counters: present, the ring never overflowed.
    for (const char* name : {"pcap/ps_recv", "pcap/ps_drop", "pcap/ps_ifdrop"}) {
        EXPECT_NE(find_counter(out.ledger, name), nullptr) << name;
    }
    ASSERT_NE(find_counter(out.ledger, "pcap/ps_drop"), nullptr);
    EXPECT_TRUE(find_counter(out.ledger, "pcap/ps_drop")->is_drop);
    EXPECT_EQ(find_counter(out.ledger, "pcap/ps_drop")->value, 0u);
    EXPECT_TRUE(find_counter(out.ledger, "pcap/ps_ifdrop")->is_drop);
    EXPECT_FALSE(find_counter(out.ledger, "pcap/ps_recv")->is_drop);
    EXPECT_GE(find_counter(out.ledger, "pcap/ps_recv")->value, k);
    EXPECT_NE(find_counter(out.ledger, "lo/net/rx_dropped"), nullptr) << "sysfs counters of lo";

    // Joined each group once, left them all by the end.
    EXPECT_EQ(memberships.joined.size(), 2u);
    EXPECT_EQ(memberships.held.load(), 0);

    // Linux "lo" is DLT_EN10MB with a fake Ethernet header: zero MACs, IPv4.
    ASSERT_EQ(first_header.size(), 14u);
    for (std::size_t i = 0; i < 12; ++i) {
        EXPECT_EQ(first_header[i], 0) << "MAC byte " << i;
    }
    EXPECT_EQ(first_header[12], 0x08);
    EXPECT_EQ(first_header[13], 0x00);
    // Nanosecond wall-clock timestamps.
    const auto wall_ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(wall_before.time_since_epoch())
            .count());
    EXPECT_GE(first_ns + 1'000'000'000u, wall_ns);
    EXPECT_LE(first_ns, wall_ns + 10'000'000'000u);

    // The pcapng's statistics block: libpcap's counts and the run's
    // (docs/formats.md, "pcapng"), read with the specification's layout.
    const auto blocks =
        test::parse_ok(test::read_file(dir.path() / "ibvcap.pcapng"));  // the run's own
    ASSERT_FALSE(blocks.empty());
    const test::Block& isb = blocks.back();
    ASSERT_EQ(isb.type, pcapng::kInterfaceStatisticsBlock);
    EXPECT_EQ(isb.u64(pcapng::kIsbIfRecv), k);
    EXPECT_EQ(isb.u64(pcapng::kIsbUsrDeliv), k);
    EXPECT_EQ(isb.u64(pcapng::kIsbFilterAccept), find_counter(out.ledger, "pcap/ps_recv")->value);
    EXPECT_EQ(isb.u64(pcapng::kIsbIfDrop), t.nic_drops);
    EXPECT_EQ(isb.u64(pcapng::kIsbOsDrop), find_counter(out.ledger, "pcap/ps_drop")->value +
                                               find_counter(out.ledger, "pcap/ps_ifdrop")->value);
    EXPECT_GE(isb.time(pcapng::kIsbStartTime) + 1'000'000'000u, wall_ns);
    EXPECT_GE(isb.time(pcapng::kIsbEndTime), isb.time(pcapng::kIsbStartTime));
    const auto idbs = test::of_type(blocks, pcapng::kInterfaceDescriptionBlock);
    ASSERT_EQ(idbs.size(), 1u);
    EXPECT_EQ(idbs[0]->text(pcapng::kIfName), "lo");

    // The .codif files hold exactly the datagrams sent, in order.
    ASSERT_EQ(out.ledger.outputs().size(), 3u);
    for (const auto& o : out.ledger.outputs()) {
        if (o.format == "pcapng") {
            EXPECT_EQ(o.packets, k);
            continue;
        }
        EXPECT_EQ(o.packets, 100u) << o.path;
        EXPECT_EQ(o.dropped, 0u) << o.path;
        EXPECT_TRUE(test::read_file(o.path) == sent.codif[o.group]) << o.path;
    }
}

TEST(PcapLive, StopFlagEndsTheRun) {
    SKIP_UNLESS_CAPTURE_ALLOWED();
    PcapCaptureRequest request = loopback_request();
    std::atomic<bool> stop{false};
    std::thread stopper([&] {
        std::this_thread::sleep_for(200ms);
        stop = true;
    });
    const auto t0 = std::chrono::steady_clock::now();
    const RunOutcome out = run_pcap_capture(request, {}, stop);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stopper.join();
    EXPECT_TRUE(out.info.interrupted);
    EXPECT_EQ(out.info.error, "");
    EXPECT_LT(took, 2.0);
    EXPECT_GE(out.info.duration_s, 0.15);
    EXPECT_EQ(out.ledger.totals().codif, 0u);
    const auto why = out.ledger.loss_reasons();
    ASSERT_FALSE(why.empty());
    EXPECT_EQ(why.front(), "no stream frames were received");
    EXPECT_EQ(out.exit_code, kExitLoss);
}

TEST(PcapLive, DurationEndsTheRunOnASilentInterface) {
    SKIP_UNLESS_CAPTURE_ALLOWED();
    PcapCaptureRequest request = loopback_request();
    request.duration_s = 0.3;
    const std::atomic<bool> stop{false};
    const RunOutcome out = run_pcap_capture(request, {}, stop);
    EXPECT_FALSE(out.info.interrupted);
    EXPECT_GE(out.info.duration_s, 0.29);
    EXPECT_LT(out.info.duration_s, 1.0);
    EXPECT_EQ(out.exit_code, kExitLoss);
}

TEST(PcapLive, NoSuchInterfaceIsOneLineNamingTheFix) {
    SKIP_UNLESS_CAPTURE_ALLOWED();
    PcapCaptureRequest request = loopback_request();
    request.interface = "ibvcapnone0";
    FakeMemberships memberships;
    const std::atomic<bool> stop{false};
    try {
        (void)run_pcap_capture(request, memberships.factory(), stop);
        FAIL() << "expected an error";
    } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "no interface named ibvcapnone0 (see ip link)");
    }
    EXPECT_EQ(memberships.joins.load(), 0u) << "nothing joined";
}

TEST(PcapLive, AFailedJoinStopsTheStartAndLeavesTheOthers) {
    SKIP_UNLESS_CAPTURE_ALLOWED();
    test::TempDir dir;
    PcapCaptureRequest request = loopback_request();
    request.outputs.formats = {OutputFormat::pcap};
    request.outputs.output_dir = (dir.path() / "out").string();
    std::atomic<int> held{0};
    const MembershipFactory factory = [&](const Endpoint& g) -> std::unique_ptr<GroupMembership> {
        if (g.ip == kLiveGroup2) {
            throw std::runtime_error("cannot join 239.255.0.72");
        }
        return std::make_unique<FakeMemberships::Membership>(held);
    };
    const std::atomic<bool> stop{false};
    EXPECT_THROW((void)run_pcap_capture(request, factory, stop), std::runtime_error);
    EXPECT_EQ(held.load(), 0) << "the first group was left again";
    EXPECT_TRUE(std::filesystem::is_empty(dir.path() / "out")) << "no output file was created";
}

// Runs `body` in a forked child (alarm-bounded) and returns what it wrote.
struct ChildResult {
    int status = -1;
    std::string text;
};
ChildResult in_child(const std::function<std::string()>& body, unsigned seconds = 10) {
    int pipefd[2];
    if (::pipe(pipefd) != 0) {
        return {};
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::close(pipefd[0]);
        ::alarm(seconds);
        std::string text;
        try {
            text = body();
        } catch (const std::exception& e) {
            text = std::string("exception: ") + e.what();
        }
        const char* p = text.data();
        std::size_t left = text.size();
        while (left > 0) {
            const ssize_t n = ::write(pipefd[1], p, left);
            if (n <= 0) {
                break;
            }
            p += n;
            left -= static_cast<std::size_t>(n);
        }
        ::_exit(0);
    }
    ::close(pipefd[1]);
    ChildResult r;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(pipefd[0], buf, sizeof buf);
        if (n <= 0) {
            break;
        }
        r.text.append(buf, static_cast<std::size_t>(n));
    }
    ::close(pipefd[0]);
    ::waitpid(pid, &r.status, 0);
    return r;
}

bool drop_cap_net_raw() {
    __user_cap_header_struct header{};
    header.version = _LINUX_CAPABILITY_VERSION_3;
    header.pid = 0;
    __user_cap_data_struct data[2] = {};
    if (::syscall(SYS_capget, &header, data) != 0) {
        return false;
    }
    const std::uint32_t bit = std::uint32_t{1} << (CAP_NET_RAW % 32);
    data[CAP_NET_RAW / 32].effective &= ~bit;
    data[CAP_NET_RAW / 32].permitted &= ~bit;
    return ::syscall(SYS_capset, &header, data) == 0;
}

TEST(PcapLive, WithoutCapNetRawTheErrorNamesSetcap) {
    SKIP_UNLESS_CAPTURE_ALLOWED();
    const ChildResult r = in_child([] {
        if (!drop_cap_net_raw()) {
            return std::string("skip: capset failed");
        }
        PcapCaptureRequest request = loopback_request();
        const std::atomic<bool> stop{false};
        try {
            (void)run_pcap_capture(request, {}, stop);
            return std::string("no error");
        } catch (const std::runtime_error& e) {
            return std::string(e.what());
        }
    });
    ASSERT_TRUE(WIFEXITED(r.status)) << r.status;
    if (r.text.rfind("skip:", 0) == 0) {
        IBVCAP_SKIP_UNLESS_CI(r.text);
    }
    EXPECT_EQ(r.text.rfind("no permission to capture on lo: run as root or `sudo setcap "
                           "cap_net_raw=ep /",
                           0),
              0u)
        << r.text;
    EXPECT_NE(r.text.find("test_pcap_live`"), std::string::npos) << r.text;
}

// In a child with its own network namespace: a veth pair; capturing on its
// down end is refused, then traffic is captured on the up end until the pair
// is deleted, which ends the run with an error and keeps what was captured.
TEST(PcapLive, InterfaceDownRefusedInterfaceGoneEndsTheRun) {
    SKIP_UNLESS_CAPTURE_ALLOWED();
    const ChildResult r = in_child([] {
        if (::unshare(CLONE_NEWNET) != 0) {
            return std::string("skip: unshare(CLONE_NEWNET) failed");
        }
        if (std::system("ip link add ibvt0 type veth peer name ibvt1 >/dev/null 2>&1") != 0) {
            return std::string("skip: cannot create a veth pair");
        }
        std::string report;
        const std::atomic<bool> stop{false};
        PcapCaptureRequest request;
        request.interface = "ibvt1";
        request.demux.groups = {Endpoint{kLiveGroup1, kLivePort}, Endpoint{kLiveGroup2, kLivePort}};
        request.buffer_bytes = std::size_t{16} << 20;
        request.duration_s = 5;
        try {
            (void)run_pcap_capture(request, {}, stop);
            report += "down: no error\n";
        } catch (const std::runtime_error& e) {
            report += std::string("down: ") + e.what() + "\n";
        }
        // MTU 9000, as on the telescope network: 8256-byte datagrams unfragmented.
        if (std::system("ip addr add 10.99.0.1/24 dev ibvt0 && ip link set ibvt0 mtu 9000 up && "
                        "ip link set ibvt1 mtu 9000 up") != 0) {
            return std::string("skip: cannot configure the veth pair");
        }
        const std::uint32_t address = (10u << 24) | (99u << 16) | 1u;
        FakeMemberships memberships;
        Sent sent;
        std::thread sender([&] {
            if (memberships.wait_joined(2)) {
                sent = send_generated(live_config(address, 5), address);  // 20 datagrams
                std::this_thread::sleep_for(300ms);  // > the 50 ms block retire timeout
                (void)std::system("ip link del ibvt0");
            }
        });
        const RunOutcome out = run_pcap_capture(request, memberships.factory(), stop);
        sender.join();
        report += "sent: " + std::to_string(sent.datagrams) + "\n";
        report += "codif: " + std::to_string(out.ledger.totals().codif) + "\n";
        report += "error: " + out.info.error + "\n";
        report += "exit: " + std::to_string(out.exit_code) + "\n";
        report += "duration<4: " + std::to_string(out.info.duration_s < 4.0) + "\n";
        for (const auto& why : out.ledger.loss_reasons()) {
            report += "why: " + why + "\n";
        }
        return report;
    });
    ASSERT_TRUE(WIFEXITED(r.status)) << r.status;
    if (r.text.rfind("skip:", 0) == 0) {
        IBVCAP_SKIP_UNLESS_CI(r.text);
    }
    EXPECT_NE(r.text.find("down: interface ibvt1 is down (ip link set ibvt1 up)\n"),
              std::string::npos)
        << r.text;
    EXPECT_NE(r.text.find("sent: 20\n"), std::string::npos) << r.text;
    EXPECT_NE(r.text.find("codif: 20\n"), std::string::npos) << r.text;
    EXPECT_NE(r.text.find("error: capture on ibvt1 failed after 20 frames: "), std::string::npos)
        << r.text;
    EXPECT_NE(r.text.find("exit: 1\n"), std::string::npos) << r.text;
    EXPECT_NE(r.text.find("duration<4: 1\n"), std::string::npos) << r.text;
    EXPECT_NE(r.text.find("why: the run ended early: capture on ibvt1 failed"), std::string::npos)
        << r.text;
}

}  // namespace
}  // namespace ibvcap
