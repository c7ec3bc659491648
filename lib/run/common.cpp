#include "lib/run/common.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <utility>

namespace ibvcap {

namespace {
// The -o directories this process made (the first missing ancestor and the
// directory itself), so that a run that fails before it starts leaves none
// of them behind empty (remove_unused_output_dirs).
std::mutex g_made_mu;
std::vector<std::pair<std::filesystem::path, std::filesystem::path>> g_made;
}  // namespace

void prepare_output_dir(const std::string& dir) {
    std::error_code ec;
    const std::filesystem::path leaf = std::filesystem::absolute(dir, ec).lexically_normal();
    std::filesystem::path top;  // the first directory this call makes
    for (std::filesystem::path p = leaf; !ec && !p.empty() && !std::filesystem::exists(p, ec);
         p = p.parent_path()) {
        top = p;
        if (p == p.parent_path()) {
            break;
        }
    }
    ec.clear();
    std::filesystem::create_directories(dir, ec);
    if (!ec && !top.empty()) {
        const std::lock_guard lock(g_made_mu);
        g_made.emplace_back(top, leaf);
    }
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

void remove_unused_output_dirs() {
    const std::lock_guard lock(g_made_mu);
    for (const auto& [top, leaf] : g_made) {
        // From the directory up to the first one made: each only if empty
        // (rmdir fails on anything with a file in it).
        for (std::filesystem::path p = leaf;; p = p.parent_path()) {
            if (::rmdir(p.c_str()) != 0 || p == top || p == p.parent_path()) {
                break;
            }
        }
    }
    g_made.clear();
}

OutputDirLock::OutputDirLock(const std::string& dir) : path_(dir + "/" + kOutputLockName) {
    for (int attempt = 0; attempt < 10; ++attempt) {
        const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) {
            throw std::runtime_error(
                fmt::format("cannot lock output directory {}: {}: {}; choose "
                            "another with -o DIR",
                            dir, path_, std::strerror(errno)));
        }
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int err = errno;
            char text[32] = {};
            const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
            ::close(fd);
            const long pid = n > 0 ? std::strtol(text, nullptr, 10) : 0;
            if (err == EWOULDBLOCK) {
                throw std::runtime_error(fmt::format(
                    "output directory {} is in use by another ibvcap run{}; wait for it to end, "
                    "or choose another with -o DIR",
                    dir, pid > 0 ? fmt::format(" (PID {})", pid) : std::string()));
            }
            throw std::runtime_error(
                fmt::format("cannot lock output directory {}: {}; choose "
                            "another with -o DIR",
                            dir, std::strerror(err)));
        }
        // The holder before us may have removed the file between our open
        // and our lock: a lock on a removed file holds nothing, so again.
        struct stat held {};
        struct stat named {};
        if (::fstat(fd, &held) == 0 && ::stat(path_.c_str(), &named) == 0 &&
            held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
            const std::string pid = fmt::format("{}\n", ::getpid());
            if (::ftruncate(fd, 0) != 0 ||
                ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
                // The PID is only for the message of a second run.
            }
            fd_ = fd;
            return;
        }
        ::close(fd);
    }
    throw std::runtime_error(fmt::format(
        "cannot lock output directory {}: its lock file keeps changing; choose another with -o DIR",
        dir));
}

OutputDirLock::~OutputDirLock() {
    release();
}

OutputDirLock::OutputDirLock(OutputDirLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

OutputDirLock& OutputDirLock::operator=(OutputDirLock&& other) noexcept {
    if (this != &other) {
        release();
        fd_ = std::exchange(other.fd_, -1);
        path_ = std::move(other.path_);
    }
    return *this;
}

void OutputDirLock::release() {
    if (fd_ >= 0) {
        // Removed while still held, so no other run can hold it meanwhile;
        // a run that opened it before sees the removal and tries again.
        ::unlink(path_.c_str());
        ::close(fd_);
        fd_ = -1;
    }
}

namespace {
// The entries of the -o directory named as this run may write
// (is_run_output_name): another group's or antenna's files are not in its way.
std::vector<std::filesystem::directory_entry> run_named_entries(const OutputOptions& options) {
    std::vector<std::filesystem::directory_entry> named;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(options.output_dir, ec)) {
        if (is_run_output_name(options, entry.path().filename().string())) {
            named.push_back(entry);
        }
    }
    return named;
}
}  // namespace

std::vector<std::string> existing_outputs(const OutputOptions& options) {
    std::vector<std::string> found;
    for (const auto& entry : run_named_entries(options)) {
        std::error_code sec;
        const auto status = entry.symlink_status(sec);
        if (!sec &&
            (std::filesystem::is_regular_file(status) || std::filesystem::is_symlink(status))) {
            found.push_back(entry.path().string());
        }
    }
    std::sort(found.begin(), found.end());
    return found;
}

void claim_outputs(const OutputOptions& options, const std::string& input_file, bool direct_io) {
    if (direct_io) {
        // A FIFO or device with an output's name is written into in order
        // (docs/formats.md); --direct-io writes whole pages at offsets and
        // pads the last, which neither can take.
        for (const auto& entry : run_named_entries(options)) {
            std::error_code sec;
            const auto status = entry.status(sec);
            if (!sec && std::filesystem::exists(status) &&
                !std::filesystem::is_regular_file(status) &&
                !std::filesystem::is_directory(status)) {
                throw std::runtime_error(fmt::format(
                    "{} is a {}, which --direct-io cannot write (it writes whole pages at "
                    "offsets): drop --direct-io, or choose another -o DIR or --prefix",
                    entry.path().string(),
                    std::filesystem::is_fifo(status) ? "FIFO" : "device or socket"));
            }
        }
    }
    const std::vector<std::string> found = existing_outputs(options);
    if (found.empty()) {
        return;
    }
    struct stat input {};
    const bool have_input = !input_file.empty() && ::stat(input_file.c_str(), &input) == 0;
    for (const auto& path : found) {
        struct stat st {};
        if (have_input && ::stat(path.c_str(), &st) == 0 && st.st_dev == input.st_dev &&
            st.st_ino == input.st_ino) {
            throw std::runtime_error(fmt::format(
                "{} is the input file and an output of this run; choose another -o DIR or "
                "--prefix",
                path));
        }
    }
    if (!options.overwrite) {
        throw std::runtime_error(fmt::format(
            "{} exists{}: an earlier run's output; add --overwrite to replace {}, or choose "
            "another -o DIR or --prefix",
            found.front(),
            found.size() > 1 ? fmt::format(" (and {} more of this run's names)", found.size() - 1)
                             : std::string(),
            found.size() > 1 ? "them" : "it"));
    }
    for (const auto& path : found) {
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
            throw std::runtime_error(
                fmt::format("--overwrite: cannot remove {}: {}", path, std::strerror(errno)));
        }
    }
}

void check_report_path(const std::string& path, std::string_view option) {
    if (path == "-") {
        return;
    }
    const std::string_view noun = option == "--report" ? "report" : "run page";
    const auto fail = [&](const std::string& why) {
        return std::runtime_error(fmt::format("cannot write {} {}: {}; choose another path with {}",
                                              noun, path, why, option));
    };
    struct stat st {};
    const bool exists = ::stat(path.c_str(), &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) {
        std::string in = path;
        while (in.size() > 1 && in.back() == '/') {
            in.pop_back();
        }
        throw fail(fmt::format("it is a directory (give a file name in it, e.g. {}/{})", in,
                               option == "--report" ? "report.json" : "run.html"));
    }
    if (exists && !S_ISREG(st.st_mode)) {
        // A device, FIFO or socket: written in place at the end.
        if (::access(path.c_str(), W_OK) != 0) {
            throw fail(std::strerror(errno));
        }
        return;
    }
    // A regular file (through any links) or a new one: its directory must
    // take the temporary file that is renamed over it.
    std::error_code ec;
    const std::filesystem::path target =
        exists ? std::filesystem::canonical(path, ec) : std::filesystem::path(path);
    if (ec) {
        throw fail(ec.message());
    }
    std::filesystem::path dir = target.parent_path();
    if (dir.empty()) {
        dir = ".";
    }
    struct stat dir_st {};
    if (::stat(dir.c_str(), &dir_st) != 0) {
        throw fail(fmt::format("directory {}: {}", dir.string(), std::strerror(errno)));
    }
    if (const std::string why = cannot_create_in(dir); !why.empty()) {
        throw fail(why);
    }
}

std::string cannot_create_in(const std::filesystem::path& dir) {
    std::string probe = (dir / ".ibvcap-probe-XXXXXX").string();
    const int fd = ::mkstemp(probe.data());
    if (fd < 0) {
        return fmt::format("cannot create a file in {}: {}", dir.string(), std::strerror(errno));
    }
    ::close(fd);
    ::unlink(probe.c_str());
    return {};
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

WriterMemoryCap cap_writer_memory(std::size_t requested, const std::string& meminfo) {
    WriterMemoryCap cap{requested, {}};
    std::ifstream in(meminfo);
    std::uint64_t available_kib = 0;
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("MemAvailable:", 0) == 0) {
            available_kib = std::strtoull(line.c_str() + 13, nullptr, 10);
            break;
        }
    }
    if (requested == 0 || available_kib == 0) {
        return cap;  // no bound, or nothing known to cap it with
    }
    const std::uint64_t most = available_kib / 4 * 3 * 1024;
    if (requested > most) {
        cap.bytes = static_cast<std::size_t>(most);
        cap.note = fmt::format(
            "--writer-memory {:.1f} GiB is more than this host can give its writers ({:.1f} GiB "
            "available, MemAvailable in {}): capped at {:.1f} GiB, three quarters of it",
            static_cast<double>(requested) / (1 << 30),
            static_cast<double>(available_kib) / (1 << 20), meminfo,
            static_cast<double>(most) / (1 << 30));
    }
    return cap;
}

// Which bound was reached, and the option that raises it; or that the
// stock fell behind with room left (not the operator's doing: said, so that
// it is seen).
std::string writer_drops_cause(const WriterMemory& m) {
    std::string why;
    if (m.drops_at_bound > 0) {
        why = fmt::format(
            "{} of them because the writers' memory was at its bound, --writer-memory {} MiB "
            "(backlog up to {} MiB): the disk was slower than the capture for longer than the "
            "bound absorbs; raise --writer-memory, or write to a faster disk",
            m.drops_at_bound, m.bound_bytes >> 20, m.backlog_peak_bytes >> 20);
    }
    if (m.drops_below_bound > 0) {
        why += fmt::format(
            "{}{} of them with the writers' memory under its bound (--writer-memory {} MiB, "
            "backlog up to {} MiB): {}",
            why.empty() ? "" : "; ", m.drops_below_bound, m.bound_bytes >> 20,
            m.backlog_peak_bytes >> 20,
            m.starved ? "the host had no more memory to give; lower --writer-memory to what it "
                        "has free, or free memory"
                      : "the writers' reserved address space ran out, which their arena's "
                        "size rules out: a bug, report it with this report");
    }
    return why;
}

void add_writer_memory(WriterMemory& total, const Writer::Memory& m) {
    total.peak_bytes += m.peak;
    total.buffers += m.buffers;
    total.buffer_bytes = std::min<std::uint64_t>(total.buffer_bytes, m.buffer_bytes);
    total.backlog_peak_bytes += m.backlog_peak;
    total.drops_at_bound += m.drops_at_bound;
    total.drops_below_bound += m.drops_below_bound;
    total.starved = total.starved || m.starved;
    if (m.ahead_peak >= total.made_ahead_peak_bytes) {
        total.made_ahead_rule = m.ahead_rule;  // (the largest writer's)
    }
    total.made_ahead_peak_bytes += m.ahead_peak;
    total.producer_faulted_buffers += m.producer_faulted;
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

void wait_for_readers(ReaderWait& wait, const std::atomic<bool>& stop, Console* notices,
                      const std::string& command) {
    if (!wait.give_up) {
        wait.give_up = [&stop] { return stop.load(std::memory_order_relaxed); };
    }
    if (!wait.notice && notices != nullptr) {
        wait.notice = [notices, command](const std::string& path) {
            notices->write_within(fmt::format("ibvcap {}: {}\n", command, reader_wait_text(path)),
                                  std::chrono::seconds(1));
        };
    }
}

void note_late_stop(RunInfo& info, bool stopped, int sig) {
    if (!stopped || info.interrupted) {
        return;
    }
    info.interrupted = true;
    if (info.stopped_by != "error") {
        info.stopped_by = signal_name(sig);
    }
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

// 16 hex digits from getrandom(2): the run's identity in its report and its
// files' indexes (RunInfo::run_id). (Without entropy yet, early at boot, the
// clock and the process id stand in: unique enough to tell two runs apart.)
std::string new_run_id() {
    std::uint64_t id = 0;
    if (::getrandom(&id, sizeof id, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof id)) {
        id = static_cast<std::uint64_t>(
                 std::chrono::system_clock::now().time_since_epoch().count()) ^
             (static_cast<std::uint64_t>(::getpid()) << 48);
    }
    return fmt::format("{:016x}", id);
}

// The signal's name in the report: "sigint", "sigterm", "sigrtmin+3".
std::string signal_name(int sig) {
    if (sig <= 0) {
        return "signal";
    }
    const char* abbrev = ::sigabbrev_np(sig);  // glibc 2.32; "INT", null for a real-time one
    std::string name = abbrev != nullptr ? abbrev
                       : sig >= SIGRTMIN ? fmt::format("RTMIN+{}", sig - SIGRTMIN)
                                         : fmt::format("{}", sig);
    for (auto& c : name) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return "sig" + name;
}

}  // namespace ibvcap
