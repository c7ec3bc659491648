// VLAN netdevs over rtnetlink (lib/host/vlan_links.hpp).
#include "lib/host/vlan_links.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

namespace ibvcap {

namespace {

// One attribute: its type (the NLA_F_* flags masked off) and payload.
struct Attr {
    unsigned type = 0;
    std::span<const std::byte> data;
};

// The attributes packed in `bytes` (RTA_ALIGN'd, each rta_len covering its
// header): those whose length runs past what is left end the walk.
std::vector<Attr> attributes(std::span<const std::byte> bytes) {
    std::vector<Attr> out;
    while (bytes.size() >= sizeof(rtattr)) {
        rtattr a{};
        std::memcpy(&a, bytes.data(), sizeof a);
        if (a.rta_len < sizeof(rtattr) || a.rta_len > bytes.size()) {
            break;
        }
        out.push_back({static_cast<unsigned>(a.rta_type & NLA_TYPE_MASK),
                       bytes.subspan(RTA_LENGTH(0), a.rta_len - RTA_LENGTH(0))});
        const std::size_t step = RTA_ALIGN(a.rta_len);
        if (step >= bytes.size()) {
            break;
        }
        bytes = bytes.subspan(step);
    }
    return out;
}

template <typename T>
std::optional<T> scalar(std::span<const std::byte> data) {
    if (data.size() < sizeof(T)) {
        return std::nullopt;
    }
    T v{};
    std::memcpy(&v, data.data(), sizeof v);
    return v;
}

std::string text(std::span<const std::byte> data) {
    std::string s(reinterpret_cast<const char*>(data.data()), data.size());
    const auto nul = s.find('\0');
    if (nul != std::string::npos) {
        s.resize(nul);
    }
    return s;
}

void parse_linkinfo(std::span<const std::byte> info, LinkRecord& r) {
    std::span<const std::byte> data;
    for (const Attr& a : attributes(info)) {
        if (a.type == IFLA_INFO_KIND) {
            r.vlan = text(a.data) == "vlan";
        } else if (a.type == IFLA_INFO_DATA) {
            data = a.data;
        }
    }
    if (!r.vlan) {
        return;
    }
    for (const Attr& a : attributes(data)) {
        if (a.type == IFLA_VLAN_ID) {
            if (const auto id = scalar<std::uint16_t>(a.data); id && *id <= 4095) {
                r.vlan_id = *id;
            } else {
                r.vlan = false;  // an id no VLAN has: not trusted
            }
        } else if (a.type == IFLA_VLAN_PROTOCOL) {
            if (const auto p = scalar<std::uint16_t>(a.data)) {
                r.vlan_protocol = ntohs(*p);  // __be16 (vlan_fill_info: nla_put_be16)
            }
        }
    }
}

}  // namespace

std::vector<LinkRecord> parse_link_dump(std::span<const std::byte> reply) {
    std::vector<LinkRecord> links;
    while (reply.size() >= sizeof(nlmsghdr)) {
        nlmsghdr h{};
        std::memcpy(&h, reply.data(), sizeof h);
        if (h.nlmsg_len < sizeof(nlmsghdr) || h.nlmsg_len > reply.size()) {
            break;
        }
        if (h.nlmsg_type == NLMSG_DONE || h.nlmsg_type == NLMSG_ERROR) {
            break;
        }
        const auto body = reply.subspan(NLMSG_HDRLEN, h.nlmsg_len - NLMSG_HDRLEN);
        if (h.nlmsg_type == RTM_NEWLINK && body.size() >= NLMSG_ALIGN(sizeof(ifinfomsg))) {
            ifinfomsg ifi{};
            std::memcpy(&ifi, body.data(), sizeof ifi);
            LinkRecord r;
            r.index = ifi.ifi_index;
            bool vlan_seen = false;
            for (const Attr& a : attributes(body.subspan(NLMSG_ALIGN(sizeof(ifinfomsg))))) {
                if (a.type == IFLA_IFNAME) {
                    r.name = text(a.data);
                } else if (a.type == IFLA_LINK) {
                    r.lower = scalar<std::int32_t>(a.data).value_or(0);
                } else if (a.type == IFLA_LINKINFO) {
                    parse_linkinfo(a.data, r);
                    vlan_seen = r.vlan;
                }
            }
            r.vlan = vlan_seen;
            if (r.index > 0 && !r.name.empty() && r.name.size() < 16) {
                links.push_back(std::move(r));
            }
        }
        const std::size_t step = NLMSG_ALIGN(h.nlmsg_len);
        if (step >= reply.size()) {
            break;
        }
        reply = reply.subspan(step);
    }
    return links;
}

VlanTable vlan_table_of(const std::vector<LinkRecord>& links) {
    std::map<int, std::string> names;
    for (const auto& l : links) {
        names[l.index] = l.name;
    }
    VlanTable table;
    for (const auto& l : links) {
        if (!l.vlan || l.lower == l.index) {
            continue;
        }
        const auto lower = names.find(l.lower);
        if (lower != names.end()) {
            table[l.name] = {l.vlan_id, lower->second};
        }
    }
    return table;
}

std::optional<std::vector<LinkRecord>> dump_links(std::string& why) {
    const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) {
        why = fmt::format("rtnetlink socket: {}", std::strerror(errno));
        return std::nullopt;
    }
    struct {
        nlmsghdr h;
        ifinfomsg ifi;
    } request{};
    request.h.nlmsg_len = NLMSG_LENGTH(sizeof(ifinfomsg));
    request.h.nlmsg_type = RTM_GETLINK;
    request.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    request.h.nlmsg_seq = 1;
    request.ifi.ifi_family = AF_UNSPEC;
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (::sendto(fd, &request, request.h.nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel),
                 sizeof kernel) < 0) {
        why = fmt::format("rtnetlink RTM_GETLINK: {}", std::strerror(errno));
        ::close(fd);
        return std::nullopt;
    }
    std::vector<LinkRecord> links;
    std::vector<std::byte> buffer(64 * 1024);
    // A dump ends with NLMSG_DONE; bounded by reads so a kernel that never
    // says so cannot hold the start-up.
    for (int reads = 0; reads < 4096; ++reads) {
        const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            why = fmt::format("rtnetlink recv: {}", std::strerror(errno));
            ::close(fd);
            return std::nullopt;
        }
        const std::span<const std::byte> got(buffer.data(), static_cast<std::size_t>(n));
        auto part = parse_link_dump(got);
        links.insert(links.end(), part.begin(), part.end());
        // The last message of the buffer says whether the dump is over.
        bool done = n == 0;
        for (std::size_t off = 0; off + sizeof(nlmsghdr) <= got.size();) {
            nlmsghdr h{};
            std::memcpy(&h, got.data() + off, sizeof h);
            if (h.nlmsg_type == NLMSG_DONE || h.nlmsg_type == NLMSG_ERROR) {
                done = true;
                break;
            }
            if (h.nlmsg_len < sizeof(nlmsghdr)) {
                done = true;
                break;
            }
            off += NLMSG_ALIGN(h.nlmsg_len);
        }
        if (done) {
            ::close(fd);
            return links;
        }
    }
    ::close(fd);
    why = "rtnetlink: the link dump did not end";
    return std::nullopt;
}

}  // namespace ibvcap
