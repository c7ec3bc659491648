#include "lib/run/gen.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "formats/output.hpp"
#include "lib/core/fifo.hpp"
#include "lib/run/console.hpp"
#include "lib/sinks/writer.hpp"

namespace ibvcap {

namespace {
struct FdCloser {
    int fd;
    ~FdCloser() {
        if (fd >= 0) {
            ::close(fd);
        }
    }
};
}  // namespace

std::uint64_t write_generated_pcap(Generator& generator, const std::string& path,
                                   const std::atomic<bool>* stop, bool* stopped_waiting) {
    Writer::Options wopts;
    wopts.buffers = 8;
    wopts.block_when_full = true;
    const bool to_stdout = path == "-";
    // A FIFO: its reader is waited for before anything is generated (said
    // after a second; Ctrl-C ends the wait), so that a stop then leaves a
    // truth of no frames, which is what the FIFO got.
    wopts.reader_wait.give_up = [stop] {
        return stop != nullptr && stop->load(std::memory_order_relaxed);
    };
    wopts.reader_wait.notice = [](const std::string& fifo) {
        stderr_console().write_within(fmt::format("ibvcap gen: {}\n", reader_wait_text(fifo)),
                                      std::chrono::seconds(1));
    };
    int held = -1;  // the FIFO open until the writer has it open too
    struct stat st {};
    if (!to_stdout && ::stat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode)) {
        held = open_for_writing(path, O_WRONLY | O_CLOEXEC, wopts.reader_wait);
        if (held == -ECANCELED) {
            generator.end_early();
            if (stopped_waiting != nullptr) {
                *stopped_waiting = true;
            }
            return 0;
        }
        if (held < 0) {
            throw std::runtime_error(
                fmt::format("cannot write {}: {}", path, std::strerror(-held)));
        }
    }
    const FdCloser close_held{held};
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
    if (stats.front().stopped_waiting && stopped_waiting != nullptr) {
        *stopped_waiting = true;  // (a reader that left before the writer's open)
    }
    if (!stats.front().error.empty()) {
        throw std::runtime_error(fmt::format("cannot write {}: {}", path, stats.front().error));
    }
    return n;
}

}  // namespace ibvcap
