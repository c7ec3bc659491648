#include "lib/sinks/file_sinks.hpp"

#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <regex>
#include <stdexcept>

#include "formats/pcapng.hpp"

namespace ibvcap {

namespace {
constexpr std::size_t format_slot(OutputFormat f) {
    return f == OutputFormat::raw ? 0 : f == OutputFormat::codif ? 1 : 2;
}
bool wants(const OutputOptions& options, OutputFormat f) {
    return std::find(options.formats.begin(), options.formats.end(), f) != options.formats.end();
}
}  // namespace

std::string output_path(const OutputOptions& options, OutputFormat format, const Endpoint& group,
                        std::uint32_t antenna) {
    return fmt::format("{}/{}_{}_{}_{}.{}", options.output_dir, options.prefix,
                       format_ipv4(group.ip), group.port, format_ipv4(antenna),
                       file_extension(format));
}

std::string run_output_path(const OutputOptions& options, OutputFormat format) {
    return fmt::format("{}/{}.{}", options.output_dir, options.prefix, file_extension(format));
}

namespace {
// `streams`: for a per-antenna name, also whether its stream is one of
// options.groups and options.antennas (each when given).
bool match_output_name(const OutputOptions& options, const std::string& name, bool streams) {
    std::string prefix;
    for (const char c : options.prefix) {
        if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) {
            prefix += '\\';
        }
        prefix += c;
    }
    // A device's lane prefix (lib/sources/verbs/source.cpp lane_prefix) and
    // a rotated file's index.
    const std::string lane = "(_[A-Za-z0-9_.-]+p[0-9]+)?";
    const std::string rotated = "(\\.[0-9]{6})?";
    const std::string ip = "[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}";
    for (const auto f : options.formats) {
        const std::string ext = std::string(file_extension(f));
        // and the file's sidecar index (FILE.idx.json: lib/sinks/file_index.hpp)
        const std::string index = "(\\.idx\\.json)?";
        const std::string pattern = !per_antenna(f) ? prefix + lane + rotated + "\\." + ext + index
                                                    : prefix + lane + "_(" + ip + ")_([0-9]+)_(" +
                                                          ip + ")" + rotated + "\\." + ext + index;
        std::smatch m;
        if (!std::regex_match(name, m, std::regex(pattern))) {
            continue;
        }
        if (!streams || !per_antenna(f)) {
            return true;
        }
        // Compared as output_path() writes them (groups 2, 3 and 4 of the
        // pattern; 1 is the lane prefix).
        const auto named = [](const auto& list, const std::string& text, const auto& show) {
            return list.empty() || std::any_of(list.begin(), list.end(),
                                               [&](const auto& x) { return show(x) == text; });
        };
        const bool group_ok = named(options.groups, m[2].str() + ':' + m[3].str(),
                                    [](const Endpoint& g) { return g.to_string(); });
        const bool antenna_ok =
            named(options.antennas, m[4].str(), [](std::uint32_t a) { return format_ipv4(a); });
        if (group_ok && antenna_ok) {
            return true;
        }
    }
    return false;
}
}  // namespace

bool is_output_name(const OutputOptions& options, const std::string& name) {
    return match_output_name(options, name, false);
}

bool is_run_output_name(const OutputOptions& options, const std::string& name) {
    return match_output_name(options, name, true);
}

PcapFileSink::PcapFileSink(const OutputOptions& options, Writer& writer)
    : writer_(writer),
      output_(writer.add_output(OutputFormat::pcap, run_output_path(options, OutputFormat::pcap),
                                "", "", pcap_file_header(kPcapSnaplen, options.pcap_link_type))),
      headers_only_(options.pcap_headers_only) {}

void PcapFileSink::on_frame(const SinkFrame& f, SinkRoute /*route*/) {
    if (!pcap_time_fits(f.frame.timestamp_ns)) {
        writer_.refuse(output_,
                       "their time stamps are at or after 2106-02-07 06:28:16 UTC (2^32 s), which "
                       "the 32-bit seconds of a pcap record cannot hold; write -F raw or codif");
        return;
    }
    const std::uint64_t captured = f.frame.captured_bytes();
    std::uint64_t keep = captured;
    if (headers_only_ && f.packet != nullptr) {
        keep = std::min<std::uint64_t>(captured, f.packet->payload_offset + kStreamHeaderMaxBytes);
    }
    const auto record = pcap_record_header(f.frame.timestamp_ns, static_cast<std::uint32_t>(keep),
                                           f.frame.wire_bytes);
    writer_.write_frame(output_, record, f.frame, 0, static_cast<std::size_t>(keep));
}

namespace {

// The section header's host description: the CPU (/proc/cpuinfo's first
// "model name", proc(5)) and the machine (uname -m) as shb_hardware, the
// kernel (uname -srv) as shb_os, "captured on HOST" as its comment.
pcapng::SectionInfo this_host() {
    pcapng::SectionInfo info;
    utsname u{};
    const bool have_uname = ::uname(&u) == 0;
    std::string cpu;
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; cpu.empty() && std::getline(cpuinfo, line);) {
        if (line.rfind("model name", 0) == 0) {
            if (const auto colon = line.find(':'); colon != std::string::npos) {
                const auto value = line.find_first_not_of(" \t", colon + 1);
                cpu = value == std::string::npos ? "" : line.substr(value);
            }
        }
    }
    const std::string machine = have_uname ? u.machine : "";
    info.hardware = cpu.empty() ? machine : machine.empty() ? cpu : cpu + " (" + machine + ")";
    if (have_uname) {
        info.os = fmt::format("{} {} {}", u.sysname, u.release, u.version);
    }
    info.application = "ibvcap " IBVCAP_VERSION;
    char host[256] = {};
    if (::gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0') {
        info.comment = fmt::format("captured on {}", host);
    }
    return info;
}

std::uint64_t wall_clock_ns() {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
}

// The statistics block that ends a pcapng file: the run's counts as last
// published, this output's records, and the times (docs/formats.md, "pcapng").
std::vector<std::uint8_t> statistics_block(const PcapngFileSink::State& state,
                                           const Writer::ClosingFile& file) {
    const InterfaceCounts c = state.counts.get();
    const bool any = state.any.load(std::memory_order_acquire);
    pcapng::InterfaceStatistics s;
    s.start_ns = c.start_ns;
    s.end_ns = c.end_ns;
    if (!s.start_ns && any) {
        s.start_ns = state.first_ns.load(std::memory_order_relaxed);
    }
    if (!s.end_ns && any) {
        s.end_ns = state.last_ns.load(std::memory_order_relaxed);
    }
    s.timestamp_ns = s.end_ns.value_or(wall_clock_ns());
    s.ifrecv = c.ifrecv;
    s.ifdrop = c.ifdrop;
    s.filteraccept = c.filteraccept;
    s.osdrop = c.osdrop;
    s.usrdeliv = file.output_records;
    s.comment = fmt::format(
        "ibvcap: counts from the start of the run to the close of this file, which holds {} "
        "of the {} frames written to this output",
        file.records, file.output_records);
    return pcapng::interface_statistics(s);
}

std::vector<std::uint8_t> pcapng_preamble(const OutputOptions& options, std::uint32_t snaplen) {
    std::vector<std::uint8_t> bytes = pcapng::section_header(this_host());
    pcapng::InterfaceInfo i;
    i.link_type = static_cast<std::uint16_t>(options.pcap_link_type);
    i.snaplen = snaplen;
    i.name = options.interface_name;
    i.description = options.interface_description;
    const auto idb = pcapng::interface_description(i);
    bytes.insert(bytes.end(), idb.begin(), idb.end());
    return bytes;
}

}  // namespace

PcapngFileSink::PcapngFileSink(const OutputOptions& options, Writer& writer)
    : state_(std::make_shared<State>()),
      writer_(writer),
      headers_only_(options.pcap_headers_only),
      snaplen_(options.pcap_headers_only ? kPcapngHeadersSnaplen : kPcapSnaplen) {
    const auto preamble = pcapng_preamble(options, snaplen_);
    output_ =
        writer.add_output(OutputFormat::pcapng, run_output_path(options, OutputFormat::pcapng), "",
                          "", preamble, [state = state_](const Writer::ClosingFile& file) {
                              return statistics_block(*state, file);
                          });
}

void PcapngFileSink::on_frame(const SinkFrame& f, SinkRoute /*route*/) {
    const std::uint64_t ts = f.frame.timestamp_ns;
    if (!state_->any.load(std::memory_order_relaxed)) {
        state_->first_ns.store(ts, std::memory_order_relaxed);
        state_->any.store(true, std::memory_order_release);
    }
    state_->last_ns.store(ts, std::memory_order_relaxed);
    std::uint64_t keep = std::min<std::uint64_t>(f.frame.captured_bytes(), snaplen_);
    if (headers_only_ && f.packet != nullptr) {
        keep = std::min<std::uint64_t>(keep, f.packet->payload_offset + kStreamHeaderMaxBytes);
    }
    const auto captured = static_cast<std::uint32_t>(keep);
    const auto header = pcapng::epb_header(0, ts, captured, f.frame.wire_bytes);
    const auto trailer = pcapng::epb_trailer(captured);
    writer_.write_frame(output_, header, f.frame, 0, captured, trailer.view());
}

StreamFileSink::StreamFileSink(const OutputOptions& options, Writer& writer)
    : options_(options), writer_(writer) {
    for (const auto f : {OutputFormat::raw, OutputFormat::codif, OutputFormat::codifhdr}) {
        formats_[format_slot(f)] = wants(options_, f);
    }
}

SinkRoute StreamFileSink::open_stream(const StreamStats& s) {
    return route_for(s.group, s.antenna);
}

// One set of files per (group, antenna): the antenna's CODIF threads share
// them, in arrival order.
StreamFileSink::Route* StreamFileSink::route_for(const Endpoint& group, std::uint32_t antenna) {
    // The whole group address, port and antenna: a key packed into 64 bits
    // kept 16 bits of the group, and groups differing only in their first
    // octets shared files (issue 25).
    auto& slot = routes_[{group.ip, group.port, antenna}];
    if (!slot) {
        slot = std::make_unique<Route>();
        for (const auto f : {OutputFormat::raw, OutputFormat::codif, OutputFormat::codifhdr}) {
            if (formats_[format_slot(f)]) {
                slot->outputs[format_slot(f)] =
                    writer_.add_output(f, output_path(options_, f, group, antenna),
                                       group.to_string(), format_ipv4(antenna));
            }
        }
    }
    return slot.get();
}

void StreamFileSink::on_frame(const SinkFrame& f, SinkRoute route) {
    // The writer holds the frame's receive slot when the source allows it
    // (the zero-copy hand-off) and copies otherwise.
    const auto& r = *static_cast<const Route*>(route);
    const UdpPacket& packet = *f.packet;
    if (!f.payload_captured()) {
        // Cut after the CODIF header by the capture: the header is all there
        // is, so only codifhdr gets a record (the ledger expects none in raw
        // and codif: Ledger::reconciles).
        if (r.outputs[2] != nullptr) {
            writer_.write_frame(r.outputs[2], {}, f.frame, packet.payload_offset,
                                f.header->head_bytes());
        }
        return;
    }
    if (r.outputs[0] != nullptr) {
        writer_.write_frame(r.outputs[0], {}, f.frame, 0,
                            static_cast<std::size_t>(f.frame.captured_bytes()));
    }
    if (r.outputs[1] != nullptr) {
        writer_.write_frame(r.outputs[1], {}, f.frame, packet.payload_offset, packet.payload_bytes);
    }
    if (r.outputs[2] != nullptr) {
        writer_.write_frame(r.outputs[2], {}, f.frame, packet.payload_offset,
                            f.header->head_bytes());
    }
}

void FileSinks::plan_streams(std::span<const std::pair<Endpoint, std::uint32_t>> streams) {
    if (streams_) {
        for (const auto& [group, antenna] : streams) {
            streams_->plan(group, antenna);
        }
    }
}

FileSinks::FileSinks(const OutputOptions& options, Writer* writer) {
    if (options.formats.empty()) {
        return;
    }
    if (writer == nullptr) {
        throw std::invalid_argument("FileSinks: output formats given without a writer");
    }
    if (wants(options, OutputFormat::pcap)) {
        pcap_ = std::make_unique<PcapFileSink>(options, *writer);
        entries_.push_back({pcap_.get(), SinkScope::every_frame});
    }
    if (wants(options, OutputFormat::pcapng)) {
        pcapng_ = std::make_unique<PcapngFileSink>(options, *writer);
        entries_.push_back({pcapng_.get(), SinkScope::every_frame});
    }
    if (std::any_of(options.formats.begin(), options.formats.end(), per_antenna)) {
        streams_ = std::make_unique<StreamFileSink>(options, *writer);
        entries_.push_back({streams_.get(), SinkScope::streams});
    }
}

}  // namespace ibvcap
