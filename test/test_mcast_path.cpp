// The multicast path (lib/sources/igmp_query.hpp, lib/ledger/mcast_path.hpp):
// the IGMP query parser and the packet socket's BPF filter on crafted
// packets (libpcap's own interpreter, bpf_filter(3PCAP), runs the filter as
// the kernel would), the listener's counts, the demux noting each group's
// first frame, and the report's and summary's lines about groups never seen.
//
// Query layouts: RFC 2236 §2 (v1/v2: 8 octets; v1 has Max Resp Time 0) and
// RFC 3376 §4.1 (v3: 12 octets + 4 per source); what the kernel takes for a
// query of each version: net/ipv4/igmp.c, igmp_heard_query (length 8, code
// 0 or not; 9 to 11 ignored; v3's source list must be all there) and
// igmp_rcv (a bad checksum is dropped). A querier sends general queries to
// 224.0.0.1 with TTL 1 and the Router Alert option (RFC 2236 §2, RFC 3376 §4).
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <pcap/pcap.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "frames.hpp"
#include "igmp_packets.hpp"
#include "lib/demux/demux.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/ledger/mcast_path.hpp"
#include "lib/ledger/report.hpp"
#include "lib/sources/igmp_query.hpp"

namespace ibvcap {
namespace {

using namespace igmp_packets;
constexpr std::uint32_t kQuerier = (10u << 24) | 254u;             // 10.0.0.254
constexpr std::uint32_t kGroup = (239u << 24) | (17u << 16) | 1u;  // 239.17.0.1

bool filter_accepts(const std::vector<std::uint8_t>& packet) {
    static const std::vector<sock_filter> program = igmp_query_filter();
    return bpf_filter(reinterpret_cast<const bpf_insn*>(program.data()), packet.data(),
                      static_cast<u_int>(packet.size()), static_cast<u_int>(packet.size())) != 0;
}

TEST(IgmpQuery, V2GeneralQuery) {
    const auto p = ipv4(kQuerier, kAllHosts, query_v2(0));
    IgmpQuery q;
    ASSERT_EQ(parse_igmp_query(p, q), IgmpParse::query);
    EXPECT_EQ(q.version, 2);
    EXPECT_EQ(q.source, kQuerier);
    EXPECT_EQ(q.destination, kAllHosts);
    EXPECT_EQ(q.group, 0u);
    EXPECT_EQ(q.max_resp_code, 100);
    EXPECT_TRUE(filter_accepts(p));
}

TEST(IgmpQuery, V1QueryHasNoMaxRespTime) {
    const auto p = ipv4(kQuerier, kAllHosts, query_v2(0, 0));
    IgmpQuery q;
    ASSERT_EQ(parse_igmp_query(p, q), IgmpParse::query);
    EXPECT_EQ(q.version, 1);
    EXPECT_TRUE(filter_accepts(p));
}

TEST(IgmpQuery, V2GroupSpecificQuery) {
    const auto p = ipv4(kQuerier, kGroup, query_v2(kGroup, 10));
    IgmpQuery q;
    ASSERT_EQ(parse_igmp_query(p, q), IgmpParse::query);
    EXPECT_EQ(q.version, 2);
    EXPECT_EQ(q.group, kGroup);
    EXPECT_EQ(q.destination, kGroup);
    EXPECT_TRUE(filter_accepts(p));
}

TEST(IgmpQuery, V3GeneralAndGroupAndSourceSpecific) {
    IgmpQuery q;
    const auto general = ipv4(kQuerier, kAllHosts, query_v3(0));
    ASSERT_EQ(parse_igmp_query(general, q), IgmpParse::query);
    EXPECT_EQ(q.version, 3);
    EXPECT_EQ(q.group, 0u);
    EXPECT_EQ(q.sources, 0);
    EXPECT_TRUE(filter_accepts(general));
    const auto specific = ipv4(kQuerier, kGroup, query_v3(kGroup, {0x0a00000b, 0x0a00000c}));
    ASSERT_EQ(parse_igmp_query(specific, q), IgmpParse::query);
    EXPECT_EQ(q.version, 3);
    EXPECT_EQ(q.group, kGroup);
    EXPECT_EQ(q.sources, 2);
    EXPECT_TRUE(filter_accepts(specific));
}

TEST(IgmpQuery, ReportsAndLeavesAreNotQueries) {
    IgmpQuery q;
    for (const int type : {0x12, 0x16, 0x17, 0x22}) {  // v1/v2 report, leave, v3 report
        const auto p =
            ipv4(0x0a000001, kGroup, igmp_message(static_cast<std::uint8_t>(type), kGroup));
        EXPECT_EQ(parse_igmp_query(p, q), IgmpParse::not_query) << type;
        EXPECT_FALSE(filter_accepts(p)) << type;
    }
}

TEST(IgmpQuery, OtherProtocolsAndFragmentsAreNotQueries) {
    IgmpQuery q;
    // UDP whose first payload byte happens to be 0x11.
    const auto udp = ipv4(kQuerier, kAllHosts, query_v2(0), 17);
    EXPECT_EQ(parse_igmp_query(udp, q), IgmpParse::not_query);
    EXPECT_FALSE(filter_accepts(udp));
    // A later fragment of an IGMP datagram.
    auto frag = ipv4(kQuerier, kAllHosts, query_v2(0));
    frag[6] = 0x00;
    frag[7] = 0x10;  // fragment offset 16 (x 8 octets)
    EXPECT_EQ(parse_igmp_query(frag, q), IgmpParse::not_query);
    EXPECT_FALSE(filter_accepts(frag));
    // Not IPv4 at all (an IPv6 version nibble), and too short for a header.
    auto v6 = ipv4(kQuerier, kAllHosts, query_v2(0));
    v6[0] = 0x66;
    EXPECT_EQ(parse_igmp_query(v6, q), IgmpParse::not_query);
    EXPECT_FALSE(filter_accepts(v6));
    const std::vector<std::uint8_t> tiny(12, 0x45);
    EXPECT_EQ(parse_igmp_query(tiny, q), IgmpParse::not_query);
}

TEST(IgmpQuery, TruncatedAndBadQueriesAreMalformed) {
    IgmpQuery q;
    // The IPv4 total length says more than was received.
    auto cut = ipv4(kQuerier, kAllHosts, query_v3(0));
    cut.resize(cut.size() - 3);
    EXPECT_EQ(parse_igmp_query(cut, q), IgmpParse::malformed);
    // v3 claiming 3 sources with room for 1.
    auto short_sources = query_v3(kGroup, {1});
    put16(short_sources, 10, 3);
    EXPECT_EQ(parse_igmp_query(ipv4(kQuerier, kGroup, short_sources), q), IgmpParse::malformed);
    // 10 octets: neither v2 nor v3 (the kernel ignores it).
    auto ten = query_v2(0);
    ten.resize(10);
    EXPECT_EQ(parse_igmp_query(ipv4(kQuerier, kAllHosts, ten), q), IgmpParse::malformed);
    // 4 octets: cut inside the message.
    auto four = query_v2(0);
    four.resize(4);
    EXPECT_EQ(parse_igmp_query(ipv4(kQuerier, kAllHosts, four), q), IgmpParse::malformed);
    // A wrong checksum.
    EXPECT_EQ(parse_igmp_query(ipv4(kQuerier, kAllHosts, query_v2(0), 2, true), q),
              IgmpParse::malformed);
    // A damaged IPv4 header.
    auto hdr = ipv4(kQuerier, kAllHosts, query_v2(0));
    hdr[8] = 2;  // TTL changed after the header checksum
    EXPECT_EQ(parse_igmp_query(hdr, q), IgmpParse::malformed);
    // Total length shorter than the header.
    auto tl = ipv4(kQuerier, kAllHosts, query_v2(0));
    put16(tl, 2, 16);
    EXPECT_EQ(parse_igmp_query(tl, q), IgmpParse::malformed);
}

TEST(QuerierListener, CountsWhatItHears) {
    QuerierListener l("ibvcap-no-such-if0");  // never opens: on_packet only
    l.on_packet(ipv4(0x0a000001, kGroup, igmp_message(0x16, kGroup)), 1);
    l.on_packet(ipv4(kQuerier, kAllHosts, query_v2(0)), 2);
    l.on_packet(ipv4(kQuerier + 1, kGroup, query_v3(kGroup)), 3);
    l.on_packet(ipv4(kQuerier, kAllHosts, query_v2(0), 2, true), 4);
    const QuerierWatch w = l.finish();
    EXPECT_EQ(w.state, QuerierWatch::State::heard);
    EXPECT_EQ(w.queries, 2u);
    EXPECT_EQ(w.general_queries, 1u);
    EXPECT_EQ(w.group_queries, 1u);
    EXPECT_EQ(w.malformed, 1u);
    EXPECT_EQ(w.last_querier, kQuerier + 1);
    EXPECT_EQ(w.last_version, 3);
    EXPECT_EQ(w.last_query_ns, 3);
}

TEST(QuerierListener, AnInterfaceThatIsNotThereIsUnknownNotAFailure) {
    QuerierListener l("ibvcap-no-such-if0");
    l.start();
    const QuerierWatch w = l.finish();
    EXPECT_EQ(w.state, QuerierWatch::State::unknown);
    EXPECT_NE(w.why.find("no interface named ibvcap-no-such-if0"), std::string::npos) << w.why;
}

// In a forked child (its own capabilities; the parent keeps its own): the
// listener on lo with CAP_NET_RAW dropped, and with it. What the child found
// comes back through a pipe. (test_pcap_live.cpp drops the capability the
// same way, for libpcap's own error.)
std::string listener_on_lo_in_child(bool drop_raw) {
    int fds[2];
    if (::pipe(fds) != 0) {
        return "pipe failed";
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::close(fds[0]);
        ::alarm(10);
        std::string text;
        if (drop_raw) {
            __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
            __user_cap_data_struct data[2] = {};
            const std::uint32_t bit = std::uint32_t{1} << (CAP_NET_RAW % 32);
            if (::syscall(SYS_capget, &header, data) == 0) {
                data[CAP_NET_RAW / 32].effective &= ~bit;
                data[CAP_NET_RAW / 32].permitted &= ~bit;
            }
            if (::syscall(SYS_capset, &header, data) != 0) {
                text = "capset failed";
            }
        }
        if (text.empty()) {
            QuerierListener l("lo");
            l.start();
            const QuerierWatch w = l.finish();
            text = std::string(w.state == QuerierWatch::State::unknown     ? "unknown: "
                               : w.state == QuerierWatch::State::not_heard ? "not heard: "
                                                                           : "heard: ") +
                   w.why;
        }
        (void)!::write(fds[1], text.data(), text.size());
        ::_exit(0);
    }
    ::close(fds[1]);
    std::string out;
    char buf[512];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) {
        out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return out;
}

// CI runs as root: the socket opens, and without CAP_NET_RAW the watch is
// "unknown" with the reason instead of a failed run. Without root here, the
// first half cannot hold, and the test fails saying so (never skips).
TEST(QuerierListener, WithoutCapNetRawTheQuerierIsUnknownAndSaysWhy) {
    ASSERT_EQ(listener_on_lo_in_child(false), "not heard: ")
        << "the packet socket on lo did not open: this test runs as root (CAP_NET_RAW)";
    EXPECT_EQ(listener_on_lo_in_child(true),
              "unknown: no CAP_NET_RAW to open a packet socket on lo (run as root or give ibvcap "
              "cap_net_raw)");
}

Frame frame_at(const std::vector<std::uint8_t>& bytes, std::uint64_t ns) {
    Frame f;
    f.head = Bytes(bytes.data(), bytes.size());
    f.wire_bytes = static_cast<std::uint32_t>(bytes.size());
    f.timestamp_ns = ns;
    return f;
}

TEST(GroupArrival, TheDemuxNotesEachGroupsFirstFrameOnce) {
    using namespace test;
    Ledger ledger;
    DemuxOptions o;
    o.groups = {{kGroup1, 36001}, {kGroup2, 36001}, {kGroup1, 36002}};
    Demux demux(o, ledger);
    const auto a = make_frame(kAntenna1, kGroup1, 36001, make_header(100, 0));
    const auto b = make_frame(kAntenna1, kGroup1, 36001, make_header(100, 1));
    demux.on_frame(frame_at(a, 5'000));
    demux.on_frame(frame_at(b, 6'000));
    // Not CODIF (no sync word), but addressed to the second group: seen.
    auto junk = make_frame(kAntenna2, kGroup2, 36001, make_header(100, 0));
    for (std::size_t i = 42; i < 42 + kCodifHeaderBytes; ++i) {
        junk[i] ^= 0xff;  // the whole CODIF header, its sync word with it
    }
    demux.on_frame(frame_at(junk, 7'000));
    // A frame to no group asked for is not.
    demux.on_frame(frame_at(make_frame(kAntenna1, kGroup2, 36009, make_header(100, 0)), 8'000));
    const auto& arrivals = ledger.group_arrivals();
    ASSERT_EQ(arrivals.size(), 2u);
    EXPECT_EQ(arrivals[0].group, (Endpoint{kGroup1, 36001}));
    EXPECT_EQ(arrivals[0].first_ns, 5'000u);
    EXPECT_EQ(arrivals[1].group, (Endpoint{kGroup2, 36001}));
    EXPECT_EQ(arrivals[1].first_ns, 7'000u);
    // Merged lanes keep the earliest.
    Ledger other;
    other.note_group_arrival({kGroup1, 36001}, 4'000);
    ledger.merge(other);
    EXPECT_EQ(ledger.group_arrivals()[0].first_ns, 4'000u);
}

TEST(GroupArrival, WithoutNamedGroupsEveryCodifDestinationIsNoted) {
    using namespace test;
    Ledger ledger;
    Demux demux({}, ledger);
    demux.on_frame(frame_at(make_frame(kAntenna1, kGroup2, 36001, make_header(1, 0)), 9));
    ASSERT_EQ(ledger.group_arrivals().size(), 1u);
    EXPECT_EQ(ledger.group_arrivals()[0].first_ns, 9u);
}

// A capture that joined two groups; one was seen 1.5 ms after its join.
struct JoinedRun {
    Ledger ledger;
    MulticastPath path;
    explicit JoinedRun(QuerierWatch::State state) {
        path.live = true;
        path.joins = {{{kGroup, 36001}, "eth1", 1'700'000'000'000'000'000, 0},
                      {{kGroup + 1, 36001}, "eth1", 1'700'000'000'100'000'000, 0}};
        ledger.note_group_arrival({kGroup, 36001}, 1'700'000'000'001'500'000);
        QuerierWatch w;
        w.interface = "eth1";
        w.state = state;
        w.listened_s = 12;
        if (state == QuerierWatch::State::heard) {
            w.queries = 3;
            w.general_queries = 3;
            w.last_querier = kQuerier;
            w.last_version = 2;
            w.last_query_ns = 1'700'000'001'000'000'000;
        }
        if (state == QuerierWatch::State::unknown) {
            w.why = "no CAP_NET_RAW to open a packet socket on eth1";
        }
        path.queriers.push_back(w);
    }
};

TEST(MulticastPathReport, GroupsListJoinFirstFrameAndTheDelay) {
    JoinedRun r(QuerierWatch::State::not_heard);
    const auto g = groups_json(r.ledger, r.path);
    ASSERT_EQ(g.size(), 2u);
    EXPECT_EQ(g[0]["group"], "239.17.0.1:36001");
    EXPECT_EQ(g[0]["port"], 36001);
    EXPECT_EQ(g[0]["interface"], "eth1");
    EXPECT_EQ(g[0]["seen"], true);
    EXPECT_DOUBLE_EQ(g[0]["join_to_first_ms"].get<double>(), 1.5);
    EXPECT_EQ(g[0]["joined_at"], "2023-11-14T22:13:20.000000Z");
    EXPECT_EQ(g[0]["first_frame_at"], "2023-11-14T22:13:20.001500Z");
    EXPECT_EQ(g[1]["seen"], false);
    EXPECT_TRUE(g[1]["first_frame_at"].is_null());
    EXPECT_TRUE(g[1]["join_to_first_ms"].is_null());
}

TEST(MulticastPathReport, NeverSeenWithoutAQuerierNamesTheSwitch) {
    JoinedRun r(QuerierWatch::State::not_heard);
    const auto lines = never_seen_lines(r.ledger, r.path);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find("joined 239.17.0.2:36001 on eth1 at"), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find("no IGMP querier was heard on eth1"), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find("enable an IGMP snooping querier on the VLAN"), std::string::npos)
        << lines[0];
    const auto igmp = igmp_json(r.path);
    EXPECT_EQ(igmp[0]["querier"], "not heard");
    EXPECT_EQ(igmp[0]["querier_heard"], false);
    EXPECT_TRUE(igmp[0]["last_querier"].is_null());
}

TEST(MulticastPathReport, NeverSeenWithAQuerierPointsAtTheSender) {
    JoinedRun r(QuerierWatch::State::heard);
    const auto lines = never_seen_lines(r.ledger, r.path);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find("an IGMP querier was heard on eth1 (10.0.0.254, IGMPv2)"),
              std::string::npos)
        << lines[0];
    EXPECT_NE(lines[0].find("check the sender"), std::string::npos) << lines[0];
    EXPECT_EQ(lines[0].find("no IGMP querier"), std::string::npos) << lines[0];
    const auto igmp = igmp_json(r.path);
    EXPECT_EQ(igmp[0]["querier"], "heard");
    EXPECT_EQ(igmp[0]["last_querier"], "10.0.0.254");
    EXPECT_EQ(igmp[0]["last_version"], 2);
}

TEST(MulticastPathReport, UnknownQuerierNeverClaimsThereIsNone) {
    JoinedRun r(QuerierWatch::State::unknown);
    const auto lines = never_seen_lines(r.ledger, r.path);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find("is unknown (no CAP_NET_RAW"), std::string::npos) << lines[0];
    EXPECT_EQ(lines[0].find("no IGMP querier was heard"), std::string::npos) << lines[0];
    const auto igmp = igmp_json(r.path);
    EXPECT_EQ(igmp[0]["querier"], "unknown");
    EXPECT_TRUE(igmp[0]["querier_heard"].is_null());
}

TEST(MulticastPathReport, ANeverSeenGroupDoesNotChangeTheVerdict) {
    JoinedRun r(QuerierWatch::State::not_heard);
    // The first group's frames, so that the verdict has CODIF to judge.
    Demux demux({}, r.ledger);
    for (std::uint32_t f = 0; f < 3; ++f) {
        const auto bytes =
            test::make_frame(test::kAntenna1, kGroup, 36001, test::make_header(1, f));
        demux.on_frame(frame_at(bytes, 1'700'000'000'002'000'000));
    }
    RunInfo info;
    info.mcast = r.path;
    const auto j = report_json(r.ledger, info);
    EXPECT_EQ(j["verdict"], "zero-loss");
    EXPECT_EQ(j["groups"].size(), 2u);
    EXPECT_EQ(j["igmp"].size(), 1u);
}

TEST(MulticastPathReport, ReadListsFileGroupsAndNamedOnesAndNoQuerier) {
    Ledger ledger;
    ledger.note_group_arrival({kGroup, 36001}, 1'000'000);
    MulticastPath path;
    path.named_groups = {{kGroup, 36001}, {kGroup + 1, 36001}};
    const auto g = groups_json(ledger, path);
    ASSERT_EQ(g.size(), 2u);
    EXPECT_EQ(g[0]["seen"], true);
    EXPECT_TRUE(g[0]["joined_at"].is_null());
    EXPECT_TRUE(g[0]["join_to_first_ms"].is_null());
    EXPECT_EQ(g[1]["seen"], false);
    const auto lines = never_seen_lines(ledger, path);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find("never seen in the file"), std::string::npos) << lines[0];
    EXPECT_EQ(igmp_json(path)[0]["querier"], "not applicable");
}

}  // namespace
}  // namespace ibvcap
