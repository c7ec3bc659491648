#include "lib/sinks/file_sinks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <regex>
#include <stdexcept>

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

bool is_output_name(const OutputOptions& options, const std::string& name) {
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
        const std::string pattern =
            f == OutputFormat::pcap
                ? prefix + lane + rotated + "\\." + ext + index
                : prefix + lane + "_" + ip + "_[0-9]+_" + ip + rotated + "\\." + ext + index;
        if (std::regex_match(name, std::regex(pattern))) {
            return true;
        }
    }
    return false;
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
        keep = std::min<std::uint64_t>(captured, f.packet->payload_offset + kCodifHeaderBytes);
    }
    const auto record = pcap_record_header(f.frame.timestamp_ns, static_cast<std::uint32_t>(keep),
                                           f.frame.wire_bytes);
    writer_.write_frame(output_, record, f.frame, 0, static_cast<std::size_t>(keep));
}

StreamFileSink::StreamFileSink(const OutputOptions& options, Writer& writer)
    : options_(options), writer_(writer) {
    for (const auto f : {OutputFormat::raw, OutputFormat::codif, OutputFormat::codifhdr}) {
        formats_[format_slot(f)] = wants(options_, f);
    }
}

SinkRoute StreamFileSink::open_stream(const StreamStats& s) {
    // One set of files per (group, antenna): the antenna's CODIF threads
    // share them, in arrival order.
    const std::uint64_t key =
        (std::uint64_t{s.group.ip} << 48 ^ std::uint64_t{s.group.port} << 32) | s.antenna;
    auto& slot = routes_[key];
    if (!slot) {
        slot = std::make_unique<Route>();
        for (const auto f : {OutputFormat::raw, OutputFormat::codif, OutputFormat::codifhdr}) {
            if (formats_[format_slot(f)]) {
                slot->outputs[format_slot(f)] =
                    writer_.add_output(f, output_path(options_, f, s.group, s.antenna),
                                       s.group.to_string(), format_ipv4(s.antenna));
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
                                kCodifHeaderBytes);
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
        writer_.write_frame(r.outputs[2], {}, f.frame, packet.payload_offset, kCodifHeaderBytes);
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
    if (wants(options, OutputFormat::raw) || wants(options, OutputFormat::codif) ||
        wants(options, OutputFormat::codifhdr)) {
        streams_ = std::make_unique<StreamFileSink>(options, *writer);
        entries_.push_back({streams_.get(), SinkScope::streams});
    }
}

}  // namespace ibvcap
