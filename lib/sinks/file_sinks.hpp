// The files a run writes, as sinks (lib/sinks/sink.hpp): the run's pcap file
// (every frame, as on the wire) and the per-antenna raw, codif and codifhdr
// files (docs/formats.md, "Output files"). Naming the files is theirs; the
// bytes go through a Writer (lib/sinks/writer.hpp), which owns the disk.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/output.hpp"
#include "lib/netaddr.hpp"
#include "lib/sinks/sink.hpp"
#include "lib/sinks/writer.hpp"

namespace ibvcap {

struct OutputOptions {
    std::vector<OutputFormat> formats;  // what to write; pcap is one file per run
    std::string output_dir = ".";
    std::string prefix = "ibvcap";
    bool pcap_headers_only = false;  // --pcap-snaplen headers: records end after the CODIF header
    // The pcap file's link type (LINKTYPE_*): the frames' own, which is the
    // input file's for ibvcap read.
    std::uint32_t pcap_link_type = kPcapLinkTypeEthernet;
    bool overwrite = false;  // --overwrite: an earlier run's files of the same names are removed
};

// The file a per-antenna output gets, and the run's own (pcap) file.
std::string output_path(const OutputOptions& options, OutputFormat format, const Endpoint& group,
                        std::uint32_t antenna);
std::string run_output_path(const OutputOptions& options, OutputFormat format);
// Whether `name` (a file name, no directory) is one these options make in
// output_dir: {prefix}.pcap or {prefix}_{group}_{port}_{antenna}.{ext} of a
// format asked for, with or without a device's lane prefix
// (`_mlx5_0p1`) and a rotation index (`.000003`), and their sidecar indexes
// (`.idx.json`).
bool is_output_name(const OutputOptions& options, const std::string& name);

// Every frame into the run's pcap file. --pcap-snaplen headers: a UDP frame
// is cut after its CODIF header (the original length is kept, as tcpdump -s
// does); others go whole. A frame whose time does not fit a pcap record
// (2^32 s and later) is not written but counted, and fails the output
// (Writer::refuse).
class PcapFileSink final : public FrameSink {
  public:
    PcapFileSink(const OutputOptions& options, Writer& writer);
    void on_frame(const SinkFrame& f, SinkRoute route) override;

  private:
    Writer& writer_;
    Writer::OutputId output_;
    bool headers_only_;
};

// The frames of each (group, antenna) into its raw, codif and codifhdr files,
// opened with the antenna's first stream.
class StreamFileSink final : public FrameSink {
  public:
    StreamFileSink(const OutputOptions& options, Writer& writer);
    SinkRoute open_stream(const StreamStats& stream) override;
    void on_frame(const SinkFrame& f, SinkRoute route) override;

  private:
    struct Route {
        Writer::OutputId outputs[3] = {nullptr, nullptr, nullptr};  // raw, codif, codifhdr
    };
    OutputOptions options_;
    Writer& writer_;
    bool formats_[3] = {false, false, false};
    std::unordered_map<std::uint64_t, std::unique_ptr<Route>> routes_;  // (group ip:port, antenna)
};

// The file sinks `options` asks for, in the order they go to the demux
// (pcap first, so its records keep the source's order whatever the others do).
class FileSinks {
  public:
    // `writer` may be null only when `options.formats` is empty.
    FileSinks(const OutputOptions& options, Writer* writer);
    const std::vector<SinkEntry>& entries() const { return entries_; }

  private:
    std::unique_ptr<PcapFileSink> pcap_;
    std::unique_ptr<StreamFileSink> streams_;
    std::vector<SinkEntry> entries_;
};

}  // namespace ibvcap
