#include "lib/run/common.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "formats/output.hpp"
#include "lib/sources/pcap_file.hpp"

namespace ibvcap {

void prepare_output_dir(const std::string& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
        throw std::runtime_error(
            fmt::format("cannot create output directory {}: {}; choose "
                        "another with -o DIR",
                        dir, ec.message()));
    }
    // Probe by creating a file: access(2) says nothing useful for root, and
    // nothing about a full disk or a read-only mount.
    const std::string probe = fmt::format("{}/.ibvcap-probe-{}", dir, ::getpid());
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        throw std::runtime_error(
            fmt::format("cannot write in output directory {}: {}; choose another with -o DIR", dir,
                        std::strerror(errno)));
    }
    ::close(fd);
    ::unlink(probe.c_str());
}

void prepare_report_path(const std::string& path) {
    const std::string probe = path + ".tmp";
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        throw std::runtime_error(
            fmt::format("cannot write report {}: {}; choose another path "
                        "with --report",
                        path, std::strerror(errno)));
    }
    ::close(fd);
    ::unlink(probe.c_str());
}

void check_direct_io(const std::string& dir) {
    const std::string probe = dir + "/.ibvcap-direct-io-probe";
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
    if (fd < 0) {
        const int err = errno;
        throw std::runtime_error(fmt::format(
            "--direct-io: cannot open a file with O_DIRECT in {}: {}{}", dir, std::strerror(err),
            err == EINVAL ? " (this filesystem, e.g. tmpfs, has no O_DIRECT: drop --direct-io or "
                            "write to a disk filesystem)"
                          : ""));
    }
    ::close(fd);
    ::unlink(probe.c_str());
}

std::unique_ptr<Writer> make_run_writer(const DemuxOptions& demux, Writer::Options options,
                                        bool live) {
    if (demux.formats.empty()) {
        return nullptr;
    }
    options.block_when_full = !live;
    if (options.direct_io) {
        check_direct_io(demux.output_dir);
    }
    return std::make_unique<Writer>(options);
}

int exit_code_for(const Ledger& ledger, const RunInfo& info) {
    if (!info.error.empty()) {
        return kExitError;
    }
    for (const auto& o : ledger.outputs()) {
        if (!o.error.empty()) {
            return kExitError;
        }
    }
    return ledger.zero_loss() ? kExitZeroLoss : kExitLoss;
}

void apply_faults(const Faults& faults, RunOutcome& outcome) {
    if (!faults.raised()) {
        return;
    }
    const std::string why = "a worker thread failed: " + faults.summary();
    if (outcome.info.error.empty()) {
        outcome.info.error = why;
    }
    outcome.ledger.set_incomplete(why);
    outcome.exit_code = exit_code_for(outcome.ledger, outcome.info);
}

RunOutcome run_read(const ReadRequest& request, const std::atomic<bool>& stop) {
    RunOutcome outcome;
    outcome.info.command = "read";
    outcome.info.source = "file";
    outcome.info.input = request.file;

    PcapFileSource source(request.file);
    if (!request.demux.formats.empty()) {
        prepare_output_dir(request.demux.output_dir);
    }
    Faults local_faults;
    Writer::Options writer_options = request.writer;
    if (writer_options.faults == nullptr) {
        writer_options.faults = &local_faults;
    }
    const auto writer = make_run_writer(request.demux, writer_options, /*live=*/false);
    Demux demux(request.demux, outcome.ledger, writer.get());
    if (request.observer) {
        demux.set_observer(request.observer);
    }

    const auto start = std::chrono::steady_clock::now();
    const auto result = source.run(demux, request.count, stop);
    if (writer) {
        writer->finish();
        outcome.ledger.set_outputs(writer->stats());
    }
    outcome.info.duration_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    outcome.info.interrupted = stop.load();
    if (!result.error.empty()) {
        outcome.info.error = result.error;
        outcome.ledger.set_incomplete(result.error);
    }
    outcome.exit_code = exit_code_for(outcome.ledger, outcome.info);
    apply_faults(*writer_options.faults, outcome);
    return outcome;
}

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
