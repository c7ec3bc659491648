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
#include "lib/sinks/ordered_stream.hpp"

namespace ibvcap {

static_assert(kMaxOrderedWindow == SequenceTracker::kWindow,
              "--ordered-window's limit is the sequence tracker's window");

namespace {
bool wants(const OutputOptions& options, OutputFormat f) {
    return std::find(options.formats.begin(), options.formats.end(), f) != options.formats.end();
}
}  // namespace

namespace {
// "-F codif,codifhdr": the formats asked for, as given.
std::string formats_text(const OutputOptions& options) {
    std::string text;
    for (const OutputFormat f : options.formats) {
        text += (text.empty() ? "-F " : ",") + std::string(to_string(f));
    }
    return text;
}

// The formats that would take streams of `frames`, for the fix.
std::string takers_text(StreamFormat frames) {
    return frames == StreamFormat::codif ? "-F codif, codifhdr, raw, pcap or pcapng"
                                         : "-F vdif, raw, pcap or pcapng";
}
}  // namespace

std::string output_format_problem(const OutputOptions& options) {
    if (options.formats.empty()) {
        return {};
    }
    // How the run's groups are read: each format with the first group read
    // in it (empty: no group named, every destination is read so).
    std::vector<std::pair<StreamFormat, std::string>> read;
    const auto note = [&](StreamFormat f, std::string group) {
        if (std::none_of(read.begin(), read.end(), [&](const auto& r) { return r.first == f; })) {
            read.emplace_back(f, std::move(group));
        }
    };
    if (options.groups.empty()) {
        note(options.any_group_format, {});
    }
    for (std::size_t i = 0; i < options.groups.size(); ++i) {
        note(i < options.group_formats.size() ? options.group_formats[i] : StreamFormat::codif,
             options.groups[i].to_string());
    }
    for (const auto& [frames, group] : read) {
        const bool taken = std::any_of(options.formats.begin(), options.formats.end(),
                                       [&](OutputFormat f) { return takes_stream(f, frames); });
        if (!taken) {
            const std::string_view name = to_string(frames);
            return fmt::format(
                "{} writes no file of {}: its {} frames would be captured and written nowhere; use "
                "{} for {} groups",
                formats_text(options),
                group.empty() ? fmt::format("any stream (every group is read as {})", name)
                              : fmt::format("group {} (read as {})", group, name),
                name, takers_text(frames), name);
        }
    }
    for (const OutputFormat f : options.formats) {
        if (std::none_of(read.begin(), read.end(),
                         [&](const auto& r) { return takes_stream(f, r.first); })) {
            const bool codif = holds_stream(f, StreamFormat::codif);
            std::string as;
            for (const auto& r : read) {
                as += (as.empty() ? "" : " and ") + std::string(to_string(r.first));
            }
            return fmt::format(
                "-F {} holds {} streams only, and no group of this run is read as {} (they are "
                "read as {}): its files would never be made; leave it out, or give the groups' "
                "format (GROUP:PORT/{}, --stream-format)",
                to_string(f), codif ? "CODIF" : "VDIF and VTP", codif ? "codif" : "vdif or vtp", as,
                codif ? "codif" : "vdif");
        }
    }
    return {};
}

std::string output_path(const OutputOptions& options, OutputFormat format, const Endpoint& group,
                        std::uint32_t antenna) {
    return fmt::format("{}/{}_{}_{}_{}.{}", options.output_dir, options.prefix,
                       format_ipv4(group.ip), group.port, format_ipv4(antenna),
                       file_extension(format));
}

std::string stream_output_path(const OutputOptions& options, const Endpoint& group,
                               std::uint32_t antenna, std::uint16_t station, std::uint16_t thread) {
    return fmt::format("{}/{}_{}_{}_{}_{}_{}.{}", options.output_dir, options.prefix,
                       format_ipv4(group.ip), group.port, format_ipv4(antenna), station, thread,
                       file_extension(OutputFormat::vdif));
}

std::string station_output_path(const OutputOptions& options, OutputFormat format,
                                const Endpoint& group, std::uint32_t antenna,
                                std::uint16_t station) {
    return fmt::format("{}/{}_{}_{}_{}_station{}.{}", options.output_dir, options.prefix,
                       format_ipv4(group.ip), group.port, format_ipv4(antenna), station,
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
        // (a vdif file's station and thread after the antenna; a codif or
        // codifhdr file's station when its address sent more than one)
        const std::string stream = f == OutputFormat::vdif ? "_[0-9]+_[0-9]+"
                                   : f == OutputFormat::codif || f == OutputFormat::codifhdr
                                       ? "(_station[0-9]+)?"
                                       : "";
        const std::string pattern = !per_antenna(f)
                                        ? prefix + lane + rotated + "\\." + ext + index
                                        : prefix + lane + "_(" + ip + ")_([0-9]+)_(" + ip + ")" +
                                              stream + rotated + "\\." + ext + index;
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

// What a (group, antenna) has: its raw file (any stream's frames) and, for
// CODIF streams, its codif and codifhdr files; each made when first needed.
struct StreamFileSink::Files {
    Writer::OutputId raw = nullptr;
    Writer::OutputId codif = nullptr;
    Writer::OutputId codifhdr = nullptr;
    bool made_raw = false;
    bool made_codif = false;
    // The CODIF station whose frames the plain-named codif and codifhdr files
    // hold (the first to open them), and the files of every other station
    // sent from the same address and port: {stem}_station{N}.codif
    // (docs/formats.md, "Output files").
    std::optional<std::uint16_t> first_station;
    struct Station {
        Writer::OutputId codif = nullptr;
        Writer::OutputId codifhdr = nullptr;
    };
    std::map<std::uint16_t, Station> stations;
};

// What a stream's frames go to: null where it has no such file.
struct StreamFileSink::Route {
    Writer::OutputId raw = nullptr;
    // Its frames as the format's file holds them (codif, vdif: without a
    // VTP prefix), at once or (--ordered) through its window.
    Writer::OutputId record = nullptr;
    std::unique_ptr<OrderedStream> ordered;
    Writer::OutputId header = nullptr;  // codifhdr
};

StreamFileSink::StreamFileSink(const OutputOptions& options, Writer& writer)
    : options_(options), writer_(writer) {}

StreamFileSink::~StreamFileSink() = default;

Writer::OutputId StreamFileSink::add(OutputFormat format, const std::string& path,
                                     const Endpoint& group, std::uint32_t antenna,
                                     std::int32_t station, std::int32_t thread) {
    const Writer::OutputId id =
        writer_.add_output(format, path, group.to_string(), format_ipv4(antenna));
    const bool ordered = options_.ordered_window > 0 &&
                         (format == OutputFormat::codif || format == OutputFormat::vdif);
    if (ordered) {
        writer_.set_ordered(id, options_.ordered_window);
    }
    if (ordered || thread >= 0 || station >= 0) {
        notes_[path] = {station, thread, ordered};
    }
    if (ordered) {
        ordered_paths_[id] = path;
    }
    return id;
}

// One set of files per (group, antenna): the antenna's CODIF threads share
// them, in arrival order (each thread in sequence order with --ordered).
StreamFileSink::Files& StreamFileSink::files_for(const Endpoint& group, std::uint32_t antenna,
                                                 StreamFormat format) {
    // The whole group address, port and antenna: a key packed into 64 bits
    // kept 16 bits of the group, and groups differing only in their first
    // octets shared files (issue 25).
    auto& slot = files_[{group.ip, group.port, antenna}];
    if (!slot) {
        slot = std::make_unique<Files>();
    }
    Files& f = *slot;
    const auto make = [&](OutputFormat of) {
        return wants(options_, of) && holds_stream(of, format)
                   ? add(of, output_path(options_, of, group, antenna), group, antenna)
                   : nullptr;
    };
    if (!f.made_raw) {
        f.made_raw = true;
        f.raw = make(OutputFormat::raw);
    }
    if (!f.made_codif && holds_stream(OutputFormat::codif, format)) {
        f.made_codif = true;
        f.codif = make(OutputFormat::codif);
        f.codifhdr = make(OutputFormat::codifhdr);
    }
    return f;
}

void StreamFileSink::plan(const Endpoint& group, std::uint32_t antenna) {
    StreamFormat format = options_.any_group_format;
    for (std::size_t i = 0; i < options_.groups.size(); ++i) {
        if (options_.groups[i] == group) {
            format =
                i < options_.group_formats.size() ? options_.group_formats[i] : StreamFormat::codif;
        }
    }
    files_for(group, antenna, format);
}

SinkRoute StreamFileSink::open_stream(const StreamStats& s) {
    Files& files = files_for(s.group, s.antenna, s.format);
    auto r = std::make_unique<Route>();
    r->raw = files.raw;
    r->header = files.codifhdr;
    r->record = files.codif;
    if (s.format == StreamFormat::codif && (files.codif != nullptr || files.codifhdr != nullptr)) {
        if (!files.first_station) {
            files.first_station = s.station;
        } else if (*files.first_station != s.station) {
            // A second station from one address: files of its own, and the
            // plain-named ones now say whose they are (the ledger reconciles
            // each file with its station's frames).
            auto& extra = files.stations[s.station];
            if (extra.codif == nullptr && extra.codifhdr == nullptr) {
                const auto make = [&](Writer::OutputId plain, OutputFormat of) {
                    if (plain == nullptr) {
                        return Writer::OutputId{nullptr};
                    }
                    notes_[output_path(options_, of, s.group, s.antenna)].station =
                        *files.first_station;
                    return add(of, station_output_path(options_, of, s.group, s.antenna, s.station),
                               s.group, s.antenna, s.station);
                };
                extra.codif = make(files.codif, OutputFormat::codif);
                extra.codifhdr = make(files.codifhdr, OutputFormat::codifhdr);
            }
            r->header = extra.codifhdr;
            r->record = extra.codif;
        }
    }
    if (wants(options_, OutputFormat::vdif) && holds_stream(OutputFormat::vdif, s.format)) {
        r->record = add(OutputFormat::vdif,
                        stream_output_path(options_, s.group, s.antenna, s.station, s.thread),
                        s.group, s.antenna, s.station, s.thread);
    }
    if (r->record != nullptr && options_.ordered_window > 0) {
        r->ordered =
            std::make_unique<OrderedStream>(writer_, r->record, s, options_.ordered_window);
    }
    routes_.push_back(std::move(r));
    return routes_.back().get();
}

void StreamFileSink::on_frame(const SinkFrame& f, SinkRoute route) {
    // The writer holds the frame's receive slot when the source allows it
    // (the zero-copy hand-off) and copies otherwise.
    const auto& r = *static_cast<const Route*>(route);
    const UdpPacket& packet = *f.packet;
    const StreamHeader& h = *f.header;
    if (!f.payload_captured()) {
        // Cut after the frame header by the capture: the header is all there
        // is, so only codifhdr gets a record (the ledger expects none in raw,
        // codif and vdif: Ledger::reconciles).
        if (r.header != nullptr) {
            writer_.write_frame(r.header, {}, f.frame, packet.payload_offset, h.head_bytes());
        }
        return;
    }
    if (r.raw != nullptr) {
        writer_.write_frame(r.raw, {}, f.frame, 0,
                            static_cast<std::size_t>(f.frame.captured_bytes()));
    }
    if (r.ordered) {
        r.ordered->write(f);
    } else if (r.record != nullptr) {
        writer_.write_frame(r.record, {}, f.frame, packet.payload_offset + h.prefix_bytes,
                            packet.payload_bytes - h.prefix_bytes);
    }
    if (r.header != nullptr) {
        writer_.write_frame(r.header, {}, f.frame, packet.payload_offset, h.head_bytes());
    }
}

void StreamFileSink::close() {
    for (auto& r : routes_) {
        if (r->ordered) {
            r->ordered->close();
        }
    }
}

void StreamFileSink::annotate(std::vector<OutputStats>& stats) const {
    // An ordered output's counts: its streams' windows, summed.
    std::map<Writer::OutputId, OrderedCounts> ordered;
    for (const auto& r : routes_) {
        if (r->ordered) {
            const ReorderWindow::Counts& c = r->ordered->counts();
            OrderedCounts& q = ordered[r->record];
            q.fills += c.fills;
            q.duplicates += c.duplicates;
            q.too_late += c.too_late;
            q.unheld += c.unheld;
            q.restarts += c.restarts;
        }
    }
    std::map<std::string, OrderedCounts> by_path;
    for (const auto& [id, q] : ordered) {
        by_path[ordered_paths_.at(id)] = q;
    }
    for (OutputStats& o : stats) {
        const auto note = notes_.find(o.path);
        if (note == notes_.end()) {
            continue;
        }
        o.station = note->second.station;
        o.thread = note->second.thread;
        if (note->second.ordered) {
            if (const auto q = by_path.find(o.path); q != by_path.end()) {
                o.ordered = q->second;
            }
            o.ordered.window = options_.ordered_window;
        }
    }
}

void FileSinks::plan_streams(std::span<const std::pair<Endpoint, std::uint32_t>> streams) {
    if (streams_) {
        for (const auto& [group, antenna] : streams) {
            streams_->plan(group, antenna);
        }
    }
}

void FileSinks::finish() {
    if (streams_) {
        streams_->close();
    }
    if (writer_ != nullptr) {
        writer_->finish();
    }
}

std::vector<OutputStats> FileSinks::stats() const {
    std::vector<OutputStats> stats =
        writer_ != nullptr ? writer_->stats() : std::vector<OutputStats>{};
    if (streams_) {
        streams_->annotate(stats);
    }
    return stats;
}

FileSinks::FileSinks(const OutputOptions& options, Writer* writer) : writer_(writer) {
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
