#include "lib/run/gen.hpp"

#include <fmt/format.h>

#include <array>
#include <stdexcept>

#include "formats/output.hpp"
#include "lib/sinks/writer.hpp"

namespace ibvcap {

std::uint64_t write_generated_pcap(Generator& generator, const std::string& path,
                                   const std::atomic<bool>* stop) {
    Writer::Options wopts;
    wopts.buffers = 8;
    wopts.block_when_full = true;
    const bool to_stdout = path == "-";
    // (Standard output by its /dev name: the writer opens outputs by path.
    // No index beside it: "/dev/stdout.idx.json" is no place for one.)
    wopts.index = !to_stdout;
    Writer writer(wopts);
    const auto header = pcap_file_header();
    const auto out =
        writer.add_output(OutputFormat::pcap, to_stdout ? "/dev/stdout" : path, "", "", header);
    GeneratedFrame f;
    std::uint64_t n = 0;
    for (;;) {
        if (stop != nullptr && stop->load(std::memory_order_relaxed) &&
            generator.at_slot_boundary()) {
            generator.end_early();  // no-op once ended; an open swap's frames still come
        }
        if (!generator.next(f)) {
            break;
        }
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
