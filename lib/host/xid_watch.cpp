#include "lib/host/xid_watch.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <map>
#include <system_error>

#include "lib/host/devices.hpp"

namespace ibvcap {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kEvent = "nvidia_dev_xid";

// strerror, with the fix when it is a matter of privilege: tracefs is root's
// (fs/tracefs/inode.c: TRACEFS_DEFAULT_MODE 0700, its control files root's).
std::string errno_text(int err) {
    std::string text = std::error_code(err, std::generic_category()).message();
    if (err == EACCES || err == EPERM) {
        text += " (the XID watch needs root)";
    }
    return text;
}

// 0, or the errno of stat(2) on `p`.
int stat_error(const fs::path& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 ? 0 : errno;
}

// One write of `value` to a tracefs control file: 0 or an errno value.
int write_text(const fs::path& p, std::string_view value) {
    const int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        return errno;
    }
    ssize_t n = 0;
    do {
        n = ::write(fd, value.data(), value.size());
    } while (n < 0 && errno == EINTR);
    const int err = n < 0 ? errno : (static_cast<std::size_t>(n) == value.size() ? 0 : EIO);
    ::close(fd);
    return err;
}

std::int64_t clock_ns(clockid_t clock) {
    timespec ts{};
    ::clock_gettime(clock, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

template <typename T>
std::optional<T> parse_uint(std::string_view text, int base = 10) {
    T v{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, base);
    if (ec != std::errc() || end == text.data()) {
        return std::nullopt;
    }
    return v;
}

// "15961.740208" (seconds.fraction, as trace_pipe prints its timestamps) → ns.
std::optional<std::int64_t> parse_timestamp(std::string_view text) {
    const auto dot = text.find('.');
    const auto secs = parse_uint<std::uint64_t>(text.substr(0, dot));
    if (!secs || *secs > 9'000'000'000ULL) {
        return std::nullopt;
    }
    auto ns = static_cast<std::int64_t>(*secs) * 1'000'000'000;
    if (dot != std::string_view::npos) {
        std::string_view frac = text.substr(dot + 1);
        if (frac.empty() || frac.size() > 9 ||
            frac.find_first_not_of("0123456789") != std::string_view::npos) {
            return std::nullopt;
        }
        std::int64_t f = *parse_uint<std::int64_t>(frac);
        for (std::size_t i = frac.size(); i < 9; ++i) {
            f *= 10;
        }
        ns += f;
    }
    return ns;
}

std::string_view trim_right(std::string_view s) {
    while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r')) {
        s.remove_suffix(1);
    }
    return s;
}

// A string field: as is ("fields" option), or in the double quotes of a
// print format such as a uprobe event's `dev="%s"`.
std::string_view unquote(std::string_view s) {
    if (s.size() >= 2 && s.front() == '"' && s.back() == '"') {
        return s.substr(1, s.size() - 2);
    }
    return s;
}

// error_code as the "fields" option prints a u32, "0x4f (79)"
// (kernel/trace/trace_output.c, print_fields), or as "%u" prints it.
std::optional<std::uint32_t> parse_code(std::string_view s) {
    s = s.substr(0, s.find(' '));
    if (s.starts_with("0x")) {
        return parse_uint<std::uint32_t>(s.substr(2), 16);
    }
    return parse_uint<std::uint32_t>(s);
}

// `body` split at " name=" for the names in `order`, in that order; names a
// form does not print (a uprobe's __probe_ip, printed as "(0x...)") are
// skipped. A value runs to the next name found.
std::map<std::string, std::string_view> split_fields(std::string_view body,
                                                     const std::vector<std::string>& order) {
    struct Found {
        std::size_t at;     // where "name=" starts
        std::size_t value;  // where the value starts
        const std::string* name;
    };
    std::vector<Found> found;
    std::size_t from = 0;
    for (const auto& name : order) {
        const std::string key = name + "=";
        for (std::size_t p = body.find(key, from); p != std::string_view::npos;
             p = body.find(key, p + 1)) {
            if (p == 0 || body[p - 1] == ' ') {
                found.push_back({p, p + key.size(), &name});
                from = p + key.size();
                break;
            }
        }
    }
    std::map<std::string, std::string_view> values;
    for (std::size_t i = 0; i < found.size(); ++i) {
        const std::size_t end = i + 1 < found.size() ? found[i + 1].at : body.size();
        values[*found[i].name] = trim_right(body.substr(found[i].value, end - found[i].value));
    }
    return values;
}

bool has_xid_fields(const std::map<std::string, std::string_view>& v) {
    return v.contains("dev") && v.contains("error_code") && v.contains("msg");
}

}  // namespace

std::vector<std::string> format_fields(std::string_view format_text) {
    // "\tfield:__data_loc char[] dev;\toffset:16;\tsize:4;\tsigned:1;"
    std::vector<std::string> names;
    std::size_t p = 0;
    while ((p = format_text.find("field:", p)) != std::string_view::npos) {
        p += 6;
        const auto semi = format_text.find(';', p);
        if (semi == std::string_view::npos) {
            break;
        }
        std::string_view decl = format_text.substr(p, semi - p);
        if (decl.ends_with(']')) {
            decl = decl.substr(0, decl.rfind('['));  // "char comm[16]"; not "char[] dev"
        }
        const auto space = decl.rfind(' ');
        std::string_view name = space == std::string_view::npos ? decl : decl.substr(space + 1);
        if (!name.empty() && !name.starts_with("common_")) {
            names.emplace_back(name);
        }
        p = semi;
    }
    return names;
}

std::optional<std::uint64_t> parse_lost_line(std::string_view line) {
    static constexpr std::string_view kLost = "[LOST ";
    const auto at = line.find(kLost);
    if (!line.starts_with("CPU:") || at == std::string_view::npos) {
        return std::nullopt;
    }
    const std::string_view rest = line.substr(at + kLost.size());
    if (rest.find(" EVENTS]") == std::string_view::npos) {
        return std::nullopt;
    }
    return parse_uint<std::uint64_t>(rest.substr(0, rest.find(' ')));
}

std::optional<XidLine> parse_xid_line(std::string_view line,
                                      const std::vector<std::string>& fields) {
    static const std::vector<std::string> kDefaultFields = {"dev", "error_code", "msg"};
    const auto& order = fields.empty() ? kDefaultFields : fields;
    // "<comm>-<pid> [<cpu>] <flags> <secs>.<usecs>: nvidia_dev_xid: <body>"
    // (kernel/trace/trace_output.c, trace_print_context and print_trace_fmt).
    static constexpr std::string_view kMarker = ": nvidia_dev_xid:";
    const auto m = line.find(kMarker);
    if (m == std::string_view::npos) {
        return std::nullopt;
    }
    XidLine x;
    const auto space = line.rfind(' ', m);
    const std::size_t ts_at = space == std::string_view::npos ? 0 : space + 1;
    x.trace_ns = parse_timestamp(line.substr(ts_at, m - ts_at)).value_or(-1);
    std::string_view body = trim_right(line.substr(m + kMarker.size()));
    if (body.starts_with(' ')) {
        body.remove_prefix(1);
    }
    // The driver's own format: TP_printk("Xid (PCI:%s): %u, %s", ...).
    static constexpr std::string_view kPrintk = "Xid (PCI:";
    if (body.starts_with(kPrintk)) {
        body.remove_prefix(kPrintk.size());
        const auto close = body.find("): ");
        if (close == std::string_view::npos) {
            return std::nullopt;
        }
        x.device = body.substr(0, close);
        body.remove_prefix(close + 3);
        const auto comma = body.find(", ");
        const auto code = parse_uint<std::uint32_t>(body.substr(0, comma));
        if (!code || x.device.empty()) {
            return std::nullopt;
        }
        x.code = *code;
        x.message = comma == std::string_view::npos ? "" : body.substr(comma + 2);
        return x;
    }
    // name=value: the "fields" option, or a stand-in's print format. Fields
    // come in format order, or reversed (the "fields" option's first kernels).
    auto values = split_fields(body, order);
    if (!has_xid_fields(values)) {
        const std::vector<std::string> reversed(order.rbegin(), order.rend());
        values = split_fields(body, reversed);
        if (!has_xid_fields(values)) {
            return std::nullopt;
        }
    }
    const auto code = parse_code(values["error_code"]);
    x.device = unquote(values["dev"]);
    if (!code || x.device.empty()) {
        return std::nullopt;
    }
    x.code = *code;
    x.message = unquote(values["msg"]);
    return x;
}

XidWatch::XidWatch(Options options) : options_(std::move(options)) {}

XidWatch::~XidWatch() {
    stop();
}

std::string XidWatch::failure() const {
    std::lock_guard lock(mutex_);
    return failure_;
}

std::vector<GpuXid> XidWatch::events() const {
    std::lock_guard lock(mutex_);
    return events_;
}

bool XidWatch::fail_start(std::string why) {
    if (pipe_fd_ >= 0) {
        ::close(pipe_fd_);
        pipe_fd_ = -1;
    }
    if (stop_fd_ >= 0) {
        ::close(stop_fd_);
        stop_fd_ = -1;
    }
    remove_instance();
    absent_ = std::move(why);
    return false;
}

void XidWatch::remove_instance() {
    if (instance_.empty()) {
        return;
    }
    (void)write_text(instance_ / "events/nvidia" / kEvent / "enable", "0");
    if (::rmdir(instance_.c_str()) != 0) {
        const int err = errno;
        std::lock_guard lock(mutex_);
        if (failure_.empty()) {
            failure_ = fmt::format("could not remove the trace instance {}: {} (rmdir it by hand)",
                                   instance_.string(), errno_text(err));
        }
    }
    instance_.clear();
}

bool XidWatch::start() {
    if (watching()) {
        return true;
    }
    absent_.clear();
    const auto tracefs_error = [](const fs::path& root, int err) {
        return err == ENOENT
                   ? fmt::format("no tracefs at {} (mount it: mount -t tracefs nodev {})",
                                 root.string(), root.string())
                   : fmt::format("cannot read tracefs at {}: {}", root.string(), errno_text(err));
    };
    if (options_.tracefs_root.empty()) {
        // The usual mount point, then the one under debugfs (older systems).
        const fs::path usual = "/sys/kernel/tracing";
        const fs::path debug = "/sys/kernel/debug/tracing";
        const int usual_err = stat_error(usual / "events");
        if (usual_err == 0) {
            root_ = usual;
        } else if (stat_error(debug / "events") == 0) {
            root_ = debug;
        } else if (usual_err != ENOENT) {
            return fail_start(tracefs_error(usual, usual_err));
        } else {
            return fail_start(
                fmt::format("no tracefs at {} or {} (mount it: mount -t tracefs nodev {})",
                            usual.string(), debug.string(), usual.string()));
        }
    } else {
        root_ = options_.tracefs_root;
        if (const int err = stat_error(root_ / "events")) {
            return fail_start(tracefs_error(root_, err));
        }
    }
    const fs::path event = root_ / "events/nvidia" / kEvent;
    if (const int err = stat_error(event)) {
        return fail_start(
            err == ENOENT
                ? fmt::format("no tracepoint nvidia:nvidia_dev_xid in {} (the NVIDIA kernel "
                              "module is not loaded, or its version has no such tracepoint)",
                              (root_ / "events").string())
                : fmt::format("cannot read {}: {}", event.string(), errno_text(err)));
    }
    fields_ = format_fields(read_sysfs_file(event / "format").value_or(""));

    // Instances of earlier runs that died before removing theirs.
    const fs::path instances = root_ / "instances";
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(instances, ec)) {
        const std::string name = entry.path().filename().string();
        int pid = 0;
        unsigned n = 0;
        if (std::sscanf(name.c_str(), "ibvcap-%d-%u", &pid, &n) == 2 && pid > 0 &&
            pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) {
            (void)write_text(entry.path() / "events/nvidia" / kEvent / "enable", "0");
            (void)::rmdir(entry.path().c_str());
        }
    }

    static std::atomic<unsigned> next{0};
    for (int attempt = 0;; ++attempt) {
        const fs::path dir = instances / fmt::format("ibvcap-{}-{}", ::getpid(), next++);
        if (::mkdir(dir.c_str(), 0750) == 0) {
            instance_ = dir;
            break;
        }
        if (errno != EEXIST || attempt == 100) {
            return fail_start(fmt::format("cannot create a trace instance {}: {}", dir.string(),
                                          errno_text(errno)));
        }
    }
    // Best effort: each has a documented fallback (docs/observability.md).
    (void)write_text(instance_ / "options/overwrite", "0");
    (void)write_text(instance_ / "buffer_size_kb", "128");
    (void)write_text(instance_ / "buffer_percent", "0");
    boot_clock_ = write_text(instance_ / "trace_clock", "boot") == 0;
    form_ = write_text(instance_ / "options/fields", "1") == 0 ? "fields" : "print format";

    if (const int err = write_text(instance_ / "events/nvidia" / kEvent / "enable", "1")) {
        return fail_start(fmt::format("cannot enable nvidia:nvidia_dev_xid in {}: {}",
                                      instance_.string(), errno_text(err)));
    }
    pipe_fd_ = ::open((instance_ / "trace_pipe").c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (pipe_fd_ < 0) {
        return fail_start(fmt::format("cannot open {}: {}", (instance_ / "trace_pipe").string(),
                                      errno_text(errno)));
    }
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (stop_fd_ < 0) {
        return fail_start(fmt::format("eventfd: {}", errno_text(errno)));
    }
    try {
        reader_ = std::thread([this] { read_loop(); });
    } catch (const std::system_error& e) {
        return fail_start(fmt::format("cannot start the XID reader thread: {}", e.what()));
    }
    return true;
}

void XidWatch::stop() {
    if (reader_.joinable()) {
        const std::uint64_t one = 1;
        (void)!::write(stop_fd_, &one, sizeof one);
        reader_.join();
    }
    if (pipe_fd_ >= 0) {
        ::close(pipe_fd_);  // before the rmdir: an open trace_pipe keeps the instance busy
        pipe_fd_ = -1;
    }
    if (stop_fd_ >= 0) {
        ::close(stop_fd_);
        stop_fd_ = -1;
    }
    remove_instance();
}

void XidWatch::read_loop() {
    std::string pending;
    for (;;) {
        std::array<pollfd, 2> fds{{{pipe_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}}};
        // The timeout is a safety net only: poll wakes at the first event.
        const int n = ::poll(fds.data(), fds.size(), 200);
        if (n < 0 && errno != EINTR) {
            std::lock_guard lock(mutex_);
            failure_ = fmt::format("polling trace_pipe failed: {}", errno_text(errno));
            return;
        }
        const bool stopping = n > 0 && (fds[1].revents & POLLIN) != 0;
        drain(pending);  // after a stop too: what the kernel holds is read first
        if (stopping || !failure().empty()) {
            return;
        }
    }
}

void XidWatch::drain(std::string& pending) {
    std::array<char, 65536> buf{};
    for (;;) {
        const ssize_t n = ::read(pipe_fd_, buf.data(), buf.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && errno != EAGAIN) {
            std::lock_guard lock(mutex_);
            failure_ = fmt::format("reading trace_pipe failed: {}", errno_text(errno));
            return;
        }
        if (n <= 0) {
            return;  // nothing more now
        }
        pending.append(buf.data(), static_cast<std::size_t>(n));
        std::size_t start = 0;
        for (std::size_t nl = pending.find('\n'); nl != std::string::npos;
             nl = pending.find('\n', start)) {
            take_line(std::string_view(pending).substr(start, nl - start));
            start = nl + 1;
        }
        pending.erase(0, start);
    }
}

void XidWatch::take_line(std::string_view line) {
    if (const auto lost = parse_lost_line(line)) {
        lost_.fetch_add(*lost, std::memory_order_relaxed);
        return;
    }
    const auto x = parse_xid_line(line, fields_);
    if (!x) {
        return;
    }
    GpuXid g;
    // The instance's clock is CLOCK_BOOTTIME: moved to CLOCK_REALTIME by the
    // offset between the two now. Otherwise the time the line was read.
    g.time_ns = boot_clock_ && x->trace_ns >= 0
                    ? x->trace_ns + (clock_ns(CLOCK_REALTIME) - clock_ns(CLOCK_BOOTTIME))
                    : clock_ns(CLOCK_REALTIME);
    g.device = x->device;
    g.code = x->code;
    g.message = x->message;
    g.capture_gpu = !options_.capture_device.empty() && g.device == options_.capture_device;
    std::lock_guard lock(mutex_);
    if (g.capture_gpu) {
        on_capture_gpu_.fetch_add(1, std::memory_order_relaxed);
    }
    events_.push_back(std::move(g));
}

}  // namespace ibvcap
