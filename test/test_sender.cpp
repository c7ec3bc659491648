// Unit tests for the live multicast sender (lib/traffic/sender.hpp) and the generator's
// early end at a slot boundary (lib/traffic/generator.hpp). Datagrams go only to the
// loopback interface, from 127.0.0.x sources (local on lo), to groups on a
// port the receiving socket was given by the kernel; every run is a few
// thousand datagrams at most. No timing is asserted: the pacing schedule is
// tested as a function.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "formats/codif.hpp"
#include "formats/packet.hpp"
#include "formats/vdif.hpp"
#include "frames.hpp"
#include "lib/core/netaddr.hpp"
#include "lib/traffic/generator.hpp"
#include "lib/traffic/sender.hpp"

namespace ibvcap {
namespace {

using test::Observed;

using ByteVec = std::vector<std::uint8_t>;

constexpr std::uint32_t ip(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
    return (std::uint32_t{a} << 24) | (std::uint32_t{b} << 16) | (std::uint32_t{c} << 8) | d;
}

// ---------------------------------------------------------------------------
// Pacing schedule

TEST(Pacing, DueTimesAreSentOverRate) {
    EXPECT_EQ(due_ns(1000, 0, 5000), 1000u);
    EXPECT_EQ(due_ns(1000, 1, 5000), 1000u + 200'000u);
    EXPECT_EQ(due_ns(0, 500, 5000), 100'000'000u);  // 500 packets at 5000 pps: 0.1 s
    EXPECT_EQ(due_ns(7, 3, 3.0), 7u + 1'000'000'000u);
    EXPECT_EQ(due_ns(0, 1, 3.0), 333'333'333u);  // rounded down
    EXPECT_EQ(due_ns(0, 2, 3.0), 666'666'666u);
    EXPECT_EQ(due_ns(0, 1, 0.5), 2'000'000'000u);
    // Ten days at 1.5 Mpps, to the nanosecond.
    const std::uint64_t ten_days = 1'500'000ull * 86'400 * 10;
    EXPECT_EQ(due_ns(0, ten_days, 1.5e6), 864'000ull * 1'000'000'000u);
    EXPECT_EQ(due_ns(5, ten_days + 3, 1.5e6), 5 + 864'000ull * 1'000'000'000u + 2000u);
    // Rate 0: as fast as possible, everything is due at once.
    EXPECT_EQ(due_ns(42, 1'000'000, 0), 42u);
}

TEST(Pacing, DueTimesNeverGoBackwards) {
    for (const double rate : {1.0, 7.0, 999.9, 5000.0, 1.5e6, 3.3e7}) {
        std::uint64_t last = 0;
        for (std::uint64_t n = 0; n < 5000; ++n) {
            const std::uint64_t due = due_ns(123, n, rate);
            ASSERT_GE(due, last) << rate << " " << n;
            last = due;
        }
    }
}

TEST(Pacing, BatchIsAtMostAMillisecondOfTraffic) {
    EXPECT_EQ(paced_batch(64, 0), 64u);         // as fast as possible: the whole batch
    EXPECT_EQ(paced_batch(64, 1.5e6), 64u);     // 1500 per ms
    EXPECT_EQ(paced_batch(64, 64'000), 64u);    // exactly 64 per ms
    EXPECT_EQ(paced_batch(64, 63'999), 63u);    // 63.999 per ms
    EXPECT_EQ(paced_batch(64, 5000), 5u);       // 5 per ms
    EXPECT_EQ(paced_batch(64, 1999), 1u);       // below 2 per ms
    EXPECT_EQ(paced_batch(64, 10), 1u);         // below 1 per ms: one at a time
    EXPECT_EQ(paced_batch(0, 0), 1u);           // at least one
    EXPECT_EQ(paced_batch(100'000, 0), 1024u);  // sendmmsg's UIO_MAXIOV
}

// ---------------------------------------------------------------------------
// Generator: ending early at a slot boundary

// The frame slot of a datagram (CODIF header + payload), from slot 0 of `c`.
std::uint64_t slot_of(const GeneratorConfig& c, Bytes datagram, CodifHeader& h) {
    EXPECT_EQ(decode_codif(datagram, h), CodifError::none);
    const CodifTiming timing{c.period, c.frames_per_period};
    return timing.index(h.seconds, h.frame) - timing.index(c.start_seconds, 0) - c.start_frame;
}

// The truth of every stream equals what a receiver of `observed` would count;
// the JSON totals agree.
void expect_truth_matches(const Generator& g, std::vector<Observed>& observed) {
    const auto& truth = g.truth();
    ASSERT_EQ(truth.size(), observed.size());
    std::uint64_t packets = 0, missing = 0, duplicates = 0, reordered = 0;
    for (std::size_t s = 0; s < truth.size(); ++s) {
        SCOPED_TRACE(s);
        Observed& o = observed[s];
        o.finish();
        const StreamTruth& t = truth[s];
        EXPECT_EQ(t.sent, o.distinct);
        EXPECT_EQ(t.skipped, o.missing);
        EXPECT_EQ(t.duplicated, o.duplicates);
        EXPECT_EQ(t.reordered, o.out_of_order);
        EXPECT_EQ(t.packets(), o.slots.size());
        if (o.slots.empty()) {
            EXPECT_EQ(t.slots, 0u);
        } else {
            EXPECT_EQ(*std::min_element(o.slots.begin(), o.slots.end()), 0u);
            EXPECT_EQ(*std::max_element(o.slots.begin(), o.slots.end()) + 1, t.slots);
        }
        EXPECT_EQ(t.sent + t.skipped, t.slots);
        packets += t.packets();
        missing += t.skipped;
        duplicates += t.duplicated;
        reordered += t.reordered;
    }
    EXPECT_EQ(g.total_packets(), packets);
    const nlohmann::json j = g.truth_json();
    EXPECT_EQ(j["totals"]["packets"], packets);
    EXPECT_EQ(j["totals"]["missing"], missing);
    EXPECT_EQ(j["totals"]["duplicates"], duplicates);
    EXPECT_EQ(j["totals"]["out_of_order"], reordered);
}

GeneratorConfig faulty_config() {
    GeneratorConfig c;
    c.antennas = {ip(10, 1, 0, 1), ip(10, 1, 0, 2)};
    c.groups = {Endpoint{ip(239, 17, 0, 1), 36001}, Endpoint{ip(239, 17, 0, 2), 36001}};
    c.threads = 2;
    c.frames = 60;
    c.payload_bytes = 64;
    c.nchan = 4;
    c.nbits = 8;
    c.frames_per_period = 7;
    c.start_seconds = 100;
    c.start_frame = 3;
    c.loss = 0.15;
    c.duplicate = 0.15;
    c.reorder = 0.25;
    c.seed = 77;
    return c;
}

TEST(GeneratorEarlyEnd, AtEveryBoundaryTheTruthIsWhatWasReturned) {
    const GeneratorConfig c = faulty_config();
    std::uint64_t cut_with_open_swaps = 0, cut_with_trailing_skips = 0;
    for (std::uint64_t cut = 0;; ++cut) {
        SCOPED_TRACE(cut);
        Generator g(c);
        std::vector<Observed> observed(g.truth().size());
        GeneratedFrame f;
        std::uint64_t boundaries = 0, after_end = 0;
        bool ended = false, cut_anything = false;
        while (true) {
            if (!ended && g.at_slot_boundary() && boundaries++ == cut) {
                cut_anything = g.end_early();
                ended = true;
                EXPECT_EQ(g.ended_early(), cut_anything);
                EXPECT_FALSE(g.end_early());  // once
            }
            if (!g.next(f)) {
                break;
            }
            after_end += ended ? 1 : 0;
            CodifHeader h;
            observed[f.stream].slots.push_back(
                slot_of(c, f.bytes.subspan(kPlainUdpPayloadOffset), h));
        }
        EXPECT_FALSE(g.next(f));
        expect_truth_matches(g, observed);
        if (!ended || !cut_anything) {
            // Cut at or past the end: the whole run, as if never cut.
            Generator whole(c);
            EXPECT_EQ(g.total_packets(), whole.total_packets());
            for (const auto& t : g.truth()) {
                EXPECT_EQ(t.slots, c.frames);
            }
            EXPECT_FALSE(g.ended_early());
            break;
        }
        // Frames returned after the cut complete open swaps: one per stream at most,
        // each the late half of a swap.
        EXPECT_LE(after_end, g.truth().size());
        cut_with_open_swaps += after_end > 0 ? 1 : 0;
        std::uint64_t longest = 0;
        for (const auto& t : g.truth()) {
            longest = std::max(longest, t.slots);
        }
        for (const auto& t : g.truth()) {
            if (t.slots + 1 < longest) {
                ++cut_with_trailing_skips;
                break;
            }
        }
        if (cut == 0) {
            EXPECT_EQ(g.total_packets(), 0u);
            const nlohmann::json j = g.truth_json();
            for (const auto& s : j["streams"]) {
                EXPECT_EQ(s["slots"], 0);
                EXPECT_TRUE(s["first"].is_null());
                EXPECT_TRUE(s["last"].is_null());
            }
        }
        ASSERT_LT(cut, c.frames + 1);
    }
    // The seed gives both cases that need care, several times each.
    EXPECT_GT(cut_with_open_swaps, 5u);
    EXPECT_GT(cut_with_trailing_skips, 5u);
}

TEST(GeneratorEarlyEnd, OnlyAtASlotBoundary) {
    GeneratorConfig c = faulty_config();
    c.loss = c.duplicate = c.reorder = 0;
    Generator g(c);
    EXPECT_TRUE(g.at_slot_boundary());
    GeneratedFrame f;
    ASSERT_TRUE(g.next(f));
    EXPECT_FALSE(g.at_slot_boundary());  // 8 streams: 7 frames of slot 0 to come
    EXPECT_THROW(g.end_early(), std::logic_error);
    for (int i = 0; i < 7; ++i) {
        ASSERT_TRUE(g.next(f));
    }
    EXPECT_TRUE(g.at_slot_boundary());
    EXPECT_TRUE(g.end_early());
    EXPECT_FALSE(g.next(f));
    for (const auto& t : g.truth()) {
        EXPECT_EQ(t.slots, 1u);
        EXPECT_EQ(t.sent, 1u);
    }
    const nlohmann::json j = g.truth_json();
    EXPECT_EQ(j["totals"]["packets"], 8);
    EXPECT_EQ(j["streams"][0]["first"], j["streams"][0]["last"]);
}

// ---------------------------------------------------------------------------
// Sending on lo

struct Datagram {
    ByteVec bytes;
    std::uint32_t source = 0;  // host byte order
    std::uint16_t source_port = 0;
    std::uint32_t destination = 0;  // the group, from IP_PKTINFO
};

// A UDP socket on a kernel-chosen port, joined to `groups` on lo, reading
// from a thread until it has `expected` datagrams (set when the sender is
// done) or nothing came for two seconds.
class Receiver {
  public:
    explicit Receiver(const std::vector<std::uint32_t>& groups) {
        fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd_ < 0) {
            throw std::runtime_error("socket");
        }
        sockaddr_in any{};
        any.sin_family = AF_INET;
        any.sin_addr.s_addr = htonl(INADDR_ANY);
        any.sin_port = 0;
        const int on = 1, off = 0, big = 32 << 20;
        // Deliver only the groups this socket joined (ip(7) IP_MULTICAST_ALL).
        ::setsockopt(fd_, IPPROTO_IP, IP_MULTICAST_ALL, &off, sizeof off);
        ::setsockopt(fd_, IPPROTO_IP, IP_PKTINFO, &on, sizeof on);
        if (::setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) != 0) {
            ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
        }
        if (::bind(fd_, reinterpret_cast<const sockaddr*>(&any), sizeof any) != 0) {
            throw std::runtime_error("bind");
        }
        socklen_t len = sizeof any;
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&any), &len);
        port_ = ntohs(any.sin_port);
        for (const std::uint32_t g : groups) {
            ip_mreq m{};
            m.imr_multiaddr.s_addr = htonl(g);
            m.imr_interface.s_addr = htonl(ip(127, 0, 0, 1));
            if (::setsockopt(fd_, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) != 0) {
                throw std::runtime_error(std::string("IP_ADD_MEMBERSHIP: ") + std::strerror(errno));
            }
        }
    }
    Receiver(const Receiver&) = delete;
    Receiver& operator=(const Receiver&) = delete;
    ~Receiver() {
        if (thread_.joinable()) {
            expected_ = 0;
            thread_.join();
        }
        ::close(fd_);
    }
    std::uint16_t port() const { return port_; }

    // Read on a thread; `on_datagram` runs there after each datagram is stored.
    template <typename F>
    void start(F on_datagram) {
        thread_ = std::thread([this, on_datagram] {
            ByteVec buffer(65536);
            int idle_ms = 0;
            while (datagrams_.size() < expected_.load() && idle_ms < 2000) {
                pollfd p{fd_, POLLIN, 0};
                if (::poll(&p, 1, 10) <= 0) {
                    idle_ms += 10;
                    continue;
                }
                idle_ms = 0;
                sockaddr_in from{};
                iovec iov{buffer.data(), buffer.size()};
                alignas(cmsghdr) unsigned char control[256];
                msghdr h{};
                h.msg_name = &from;
                h.msg_namelen = sizeof from;
                h.msg_iov = &iov;
                h.msg_iovlen = 1;
                h.msg_control = control;
                h.msg_controllen = sizeof control;
                const ssize_t n = ::recvmsg(fd_, &h, 0);
                if (n < 0) {
                    continue;
                }
                Datagram d;
                d.bytes.assign(buffer.begin(), buffer.begin() + n);
                d.source = ntohl(from.sin_addr.s_addr);
                d.source_port = ntohs(from.sin_port);
                for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
                    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
                        in_pktinfo info{};
                        std::memcpy(&info, CMSG_DATA(c), sizeof info);
                        d.destination = ntohl(info.ipi_addr.s_addr);
                    }
                }
                datagrams_.push_back(std::move(d));
                on_datagram(datagrams_.size());
            }
        });
    }
    // After the sender is done: wait for `n` datagrams (or two quiet seconds).
    const std::vector<Datagram>& finish(std::uint64_t n) {
        expected_ = n;
        thread_.join();
        return datagrams_;
    }

  private:
    int fd_ = -1;
    std::uint16_t port_ = 0;
    std::atomic<std::uint64_t> expected_{std::numeric_limits<std::uint64_t>::max()};
    std::thread thread_;
    std::vector<Datagram> datagrams_;
};

const std::uint32_t kGroupA = ip(239, 255, 71, 1);
const std::uint32_t kGroupB = ip(239, 255, 71, 2);

GeneratorConfig lo_config(std::uint16_t port) {
    GeneratorConfig c;
    c.antennas = {ip(127, 0, 0, 1), ip(127, 0, 0, 2)};  // all of 127/8 is local on lo
    c.groups = {Endpoint{kGroupA, port}, Endpoint{kGroupB, port}};
    c.threads = 2;
    c.frames = 100;
    c.payload_bytes = 1024;
    c.frames_per_period = 50;
    c.start_seconds = 10;
    c.src_port = 50123;
    return c;
}

SendOptions lo_options() {
    SendOptions o;
    o.interface = "lo";
    o.loop = true;
    return o;
}

void expect_identical(const GeneratorConfig& c, const std::vector<Datagram>& got) {
    Generator reference(c);
    GeneratedFrame f;
    std::size_t i = 0;
    for (; reference.next(f); ++i) {
        SCOPED_TRACE(i);
        ASSERT_LT(i, got.size());
        const StreamTruth& t = reference.truth()[f.stream];
        const Bytes expected = f.bytes.subspan(kPlainUdpPayloadOffset);
        ASSERT_EQ(got[i].bytes.size(), expected.size());
        ASSERT_TRUE(std::equal(expected.begin(), expected.end(), got[i].bytes.begin()));
        ASSERT_EQ(got[i].source, t.antenna);
        ASSERT_EQ(got[i].source_port, c.src_port);
        ASSERT_EQ(got[i].destination, t.group.ip);
    }
    EXPECT_EQ(i, got.size());
}

TEST(Sender, PacedDatagramsArriveByteIdenticalFromEachAntenna) {
    Receiver rx({kGroupA, kGroupB});
    GeneratorConfig c = lo_config(rx.port());
    Generator g(c);
    const std::uint64_t total = g.total_packets();
    ASSERT_EQ(total, 800u);
    rx.start([](std::size_t) {});
    SendOptions o = lo_options();
    o.rate_pps = 100'000;  // 8 ms; paced batches of 64
    const std::atomic<bool> stop{false};
    const SendResult r = send_generated(g, o, stop);
    EXPECT_EQ(r.packets, total);
    EXPECT_TRUE(r.complete);
    EXPECT_FALSE(g.ended_early());
    const auto& got = rx.finish(r.packets);
    EXPECT_EQ(got.size(), total);
    expect_identical(c, got);
}

TEST(Sender, UnpacedWithFaultsInOrder) {
    Receiver rx({kGroupA, kGroupB});
    GeneratorConfig c = lo_config(rx.port());
    c.frames = 40;
    c.loss = 0.1;
    c.duplicate = 0.1;
    c.reorder = 0.1;
    Generator g(c);
    rx.start([](std::size_t) {});
    SendOptions o = lo_options();
    o.batch = 7;  // batches that straddle slots
    const std::atomic<bool> stop{false};
    const SendResult r = send_generated(g, o, stop);
    EXPECT_TRUE(r.complete);
    EXPECT_EQ(r.packets, g.total_packets());
    const auto& got = rx.finish(r.packets);
    EXPECT_EQ(got.size(), r.packets);
    expect_identical(c, got);
}

// VDIF frames after a VTP sequence number, some marked invalid: the UDP
// payload as generated, from byte 0 (the sequence number) on.
TEST(Sender, VtpDatagramsArriveByteIdentical) {
    Receiver rx({kGroupA, kGroupB});
    GeneratorConfig c = lo_config(rx.port());
    c.format = StreamFormat::vtp;
    c.vdif.frames_per_second = 50;
    c.frames = 40;
    c.loss = 0.1;
    c.duplicate = 0.1;
    c.invalid = 0.2;
    Generator g(c);
    rx.start([](std::size_t) {});
    const std::atomic<bool> stop{false};
    const SendResult r = send_generated(g, lo_options(), stop);
    EXPECT_TRUE(r.complete);
    EXPECT_EQ(r.packets, g.total_packets());
    const auto& got = rx.finish(r.packets);
    EXPECT_EQ(got.size(), r.packets);
    expect_identical(c, got);
    std::uint64_t invalid = 0;
    for (const Datagram& d : got) {
        ASSERT_EQ(d.bytes.size(), kVtpPsnBytes + kVdifHeaderBytes + c.payload_bytes);
        VdifHeader h;
        const Bytes frame = Bytes(d.bytes).subspan(kVtpPsnBytes);
        ASSERT_EQ(decode_vdif(frame, h), VdifError::none);
        EXPECT_EQ(validate_vdif(h, frame.size()), VdifError::none);
        invalid += h.invalid ? 1 : 0;
    }
    std::uint64_t truth_invalid = 0;
    for (const auto& t : g.truth()) {
        truth_invalid += t.invalid;
    }
    EXPECT_EQ(invalid, truth_invalid);
    EXPECT_GT(invalid, 0u);
}

// Observe the received datagrams per stream, as a capture would.
std::vector<Observed> observe(const GeneratorConfig& c, const std::vector<Datagram>& got) {
    const std::size_t per_group = c.antennas.size() * c.threads;
    std::vector<Observed> observed(c.groups.size() * per_group);
    for (const Datagram& d : got) {
        CodifHeader h;
        const std::uint64_t slot = slot_of(c, d.bytes, h);
        const auto a = std::find(c.antennas.begin(), c.antennas.end(), d.source);
        const auto gr = std::find_if(c.groups.begin(), c.groups.end(),
                                     [&](const Endpoint& e) { return e.ip == d.destination; });
        EXPECT_NE(a, c.antennas.end());
        EXPECT_NE(gr, c.groups.end());
        if (a == c.antennas.end() || gr == c.groups.end()) {
            continue;
        }
        const auto stream = static_cast<std::size_t>(gr - c.groups.begin()) * per_group +
                            static_cast<std::size_t>(a - c.antennas.begin()) * c.threads +
                            h.threadid;
        observed.at(stream).slots.push_back(slot);
    }
    return observed;
}

TEST(Sender, StopEndsAtASlotBoundaryAndTheTruthMatchesWhatArrived) {
    std::atomic<bool> stop{false};  // outlives the receiving thread, which sets it
    Receiver rx({kGroupA, kGroupB});
    GeneratorConfig c = lo_config(rx.port());
    c.frames = 1000;  // 8000 packets: 0.4 s if the stop were ignored
    c.payload_bytes = 256;
    c.loss = 0.1;
    c.duplicate = 0.1;
    c.reorder = 0.2;
    Generator g(c);
    const std::uint64_t whole = g.total_packets();
    rx.start([&stop](std::size_t n) {
        if (n == 301) {
            stop = true;
        }
    });
    SendOptions o = lo_options();
    o.rate_pps = 20'000;
    const SendResult r = send_generated(g, o, stop);
    EXPECT_FALSE(r.complete);
    EXPECT_TRUE(g.ended_early());
    EXPECT_LT(r.packets, whole);
    EXPECT_GE(r.packets, 301u);
    EXPECT_EQ(r.packets, g.total_packets());
    const auto& got = rx.finish(r.packets);
    ASSERT_EQ(got.size(), r.packets);
    auto observed = observe(c, got);
    expect_truth_matches(g, observed);
    const nlohmann::json j = g.truth_json();
    const auto& t = j["totals"];
    EXPECT_EQ(t["packets"].get<std::uint64_t>(), got.size());
    // sent + duplicated == received
    std::uint64_t sent = 0, duplicated = 0;
    for (const auto& s : g.truth()) {
        sent += s.sent;
        duplicated += s.duplicated;
    }
    EXPECT_EQ(sent + duplicated, got.size());
}

TEST(Sender, DurationEndsAtASlotBoundary) {
    Receiver rx({kGroupA, kGroupB});
    GeneratorConfig c = lo_config(rx.port());
    c.frames = 500;  // 4000 packets: 2 s at this rate if the duration were ignored
    c.payload_bytes = 256;
    c.reorder = 0.3;
    Generator g(c);
    rx.start([](std::size_t) {});
    SendOptions o = lo_options();
    o.rate_pps = 2000;
    o.duration_s = 0.05;
    const std::atomic<bool> stop{false};
    const SendResult r = send_generated(g, o, stop);
    EXPECT_FALSE(r.complete);
    EXPECT_LT(r.packets, 4000u);
    EXPECT_EQ(r.packets, g.total_packets());
    const auto& got = rx.finish(r.packets);
    ASSERT_EQ(got.size(), r.packets);
    auto observed = observe(c, got);
    expect_truth_matches(g, observed);
}

TEST(Sender, StopBeforeTheFirstSlotSendsNothing) {
    Generator g(lo_config(40000));
    const std::atomic<bool> stop{true};
    const SendResult r = send_generated(g, lo_options(), stop);
    EXPECT_EQ(r.packets, 0u);
    EXPECT_FALSE(r.complete);
    EXPECT_EQ(g.total_packets(), 0u);
    EXPECT_EQ(g.truth_json()["totals"]["packets"], 0);
}

TEST(Sender, AntennaThatIsNotLocalIsRefusedBeforeAnythingIsSent) {
    GeneratorConfig c = lo_config(40000);
    c.antennas = {ip(127, 0, 0, 1), ip(192, 0, 2, 77)};  // TEST-NET-1: never this host's
    Generator g(c);
    const std::atomic<bool> stop{false};
    try {
        send_generated(g, lo_options(), stop);
        FAIL() << "a non-local antenna source was accepted";
    } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()),
                  "antenna source 192.0.2.77 is not an address of this host: add it (ip addr add "
                  "192.0.2.77/32 dev lo) or use scripts/testbed.sh");
    }
    for (const auto& t : g.truth()) {
        EXPECT_EQ(t.sent, 0u);  // nothing planned, nothing sent
    }
}

TEST(Sender, RefusesWhatItCannotSend) {
    const std::atomic<bool> stop{false};
    {
        GeneratorConfig c = lo_config(40000);
        c.vlan_id = 7;
        Generator g(c);
        EXPECT_THROW(send_generated(g, lo_options(), stop), std::invalid_argument);
    }
    Generator g(lo_config(40000));
    SendOptions o = lo_options();
    o.interface = "ibvcap-no-such-if";
    try {
        send_generated(g, o, stop);
        FAIL() << "a missing interface was accepted";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("no network interface 'ibvcap-no-such-if'"),
                  std::string::npos);
    }
    for (const double bad : {-1.0, std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN()}) {
        o = lo_options();
        o.rate_pps = bad;
        EXPECT_THROW(send_generated(g, o, stop), std::invalid_argument);
        o = lo_options();
        o.duration_s = bad;
        EXPECT_THROW(send_generated(g, o, stop), std::invalid_argument);
    }
    o = lo_options();
    o.ttl = 256;
    EXPECT_THROW(send_generated(g, o, stop), std::invalid_argument);
    o = lo_options();
    o.batch = 0;
    EXPECT_THROW(send_generated(g, o, stop), std::invalid_argument);
    for (const auto& t : g.truth()) {
        EXPECT_EQ(t.sent, 0u);
    }
}

}  // namespace
}  // namespace ibvcap
