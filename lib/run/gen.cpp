#include "lib/run/gen.hpp"

#include <fmt/format.h>

#include <array>
#include <stdexcept>

#include "formats/output.hpp"
#include "lib/sinks/writer.hpp"

namespace ibvcap {

std::uint64_t write_generated_pcap(Generator& generator, const std::string& path) {
    Writer::Options wopts;
    wopts.buffers = 8;
    wopts.block_when_full = true;
    Writer writer(wopts);
    const auto header = pcap_file_header();
    const auto out = writer.add_output(OutputFormat::pcap, path, "", "", header);
    GeneratedFrame f;
    std::uint64_t n = 0;
    while (generator.next(f)) {
        const auto size = static_cast<std::uint32_t>(f.bytes.size());
        const auto record = pcap_record_header(f.timestamp_ns, size, size);
        const std::array<Bytes, 2> pieces = {Bytes(record), f.bytes};
        writer.write(out, pieces);
        ++n;
    }
    writer.finish();
    const auto stats = writer.stats();
    if (!stats.front().error.empty()) {
        throw std::runtime_error(fmt::format("cannot write {}: {}", path, stats.front().error));
    }
    return n;
}

}  // namespace ibvcap
