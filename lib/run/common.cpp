#include "lib/run/common.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

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

std::unique_ptr<Writer> make_run_writer(const OutputOptions& outputs, Writer::Options options,
                                        bool live) {
    if (outputs.formats.empty()) {
        return nullptr;
    }
    options.block_when_full = !live;
    if (options.direct_io) {
        check_direct_io(outputs.output_dir);
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

}  // namespace ibvcap
