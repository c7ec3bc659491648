#include "lib/review/verify.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "formats/codif.hpp"
#include "formats/output.hpp"
#include "lib/core/netaddr.hpp"
#include "lib/demux/demux.hpp"
#include "lib/ledger/json_input.hpp"
#include "lib/ledger/json_text.hpp"
#include "lib/ledger/ledger.hpp"
#include "lib/review/verify_report.hpp"
#include "lib/review/verify_walk.hpp"
#include "lib/sinks/file_index.hpp"

namespace ibvcap {

namespace fs = std::filesystem;
using verify_parts::load_report;
using verify_parts::locate;
using verify_parts::Report;
using verify_parts::ReportFile;
using verify_parts::ReportOutput;
using verify_parts::ReportStream;
using verify_parts::same_file;
using verify_parts::shipped;
using verify_parts::Walk;
using verify_parts::Wrapper;

bool VerifyOutcome::ok() const {
    if (!differences.empty()) {
        return false;
    }
    for (const auto& f : files) {
        if (!f.ok()) {
            return false;
        }
    }
    return true;
}

std::size_t VerifyOutcome::not_verifiable() const {
    return static_cast<std::size_t>(
        std::count_if(files.begin(), files.end(),
                      [](const VerifiedFile& f) { return !f.not_verifiable.empty() && f.ok(); }));
}

namespace {

// A file mapped read-only (nothing mapped for an empty file).
class Mapped {
  public:
    explicit Mapped(const std::string& path) {
        fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        struct stat st {};
        if (fd_ < 0 || ::fstat(fd_, &st) != 0) {
            throw std::runtime_error(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
        }
        if (!S_ISREG(st.st_mode)) {
            // (mmap of a directory fails with ENODEV: "No such device".)
            ::close(fd_);
            fd_ = -1;
            throw std::runtime_error(fmt::format(
                "cannot read {}: {}; give an output file of the run", path,
                S_ISDIR(st.st_mode) ? "it is a directory" : "it is not a regular file"));
        }
        size_ = static_cast<std::size_t>(st.st_size);
        if (size_ > 0) {
            void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
            if (p == MAP_FAILED) {
                throw std::runtime_error(
                    fmt::format("cannot map {}: {}", path, std::strerror(errno)));
            }
            data_ = static_cast<const std::uint8_t*>(p);
        }
    }
    ~Mapped() {
        if (data_ != nullptr) {
            ::munmap(const_cast<std::uint8_t*>(data_), size_);
        }
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    Mapped(const Mapped&) = delete;
    Mapped& operator=(const Mapped&) = delete;
    Bytes bytes() const { return {data_, size_}; }

  private:
    int fd_ = -1;
    const std::uint8_t* data_ = nullptr;
    std::size_t size_ = 0;
};

// The format a file's name says (its last extension), else its first bytes.
std::string format_of(const std::string& path, Bytes head) {
    std::string ext = fs::path(path).extension().string();
    if (!ext.empty()) {
        ext.erase(0, 1);
    }
    if (ext == "pcapng" || parse_output_format(ext).has_value()) {
        return ext;
    }
    if (head.size() >= 4) {
        const std::uint32_t magic = load_le32(head.data());
        if (magic == 0x0A0D0D0Au) {  // pcapng section header block (wiretap/pcapng.c)
            return "pcapng";
        }
        if (magic == kPcapMagicNanoseconds || magic == 0xa1b2c3d4u || magic == 0xd4c3b2a1u ||
            magic == 0x4d3cb2a1u) {
            return "pcap";
        }
    }
    if (head.size() >= kCodifHeaderBytes && detect_codif_layout(head.first(kCodifHeaderBytes))) {
        return "codif";
    }
    return {};
}

std::string stream_name(const std::string& group, const std::string& antenna,
                        std::uint64_t thread) {
    return fmt::format("stream {} {} thread {}", group, antenna, thread);
}

// "a FIFO", "a device", "a socket": what `path` is when it is none of a
// regular file, a directory or nothing; else empty.
std::string stream_kind(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        return {};
    }
    if (S_ISFIFO(st.st_mode)) {
        return "a FIFO";
    }
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
        return "a device";
    }
    if (S_ISSOCK(st.st_mode)) {
        return "a socket";
    }
    return {};
}

// One file: its index, its walk, its ledger (into `demux`). Returns whether
// the walk read every byte of the file as whole records (so that `demux`
// has all of them).
bool check_file(VerifiedFile& v, const std::optional<ReportFile>& claimed, Endpoint group,
                std::uint32_t antenna, Demux& demux, std::string_view report_run = {}) {
    std::error_code ec;
    if (!fs::exists(v.path, ec)) {
        v.differences.push_back("missing");
        return false;
    }
    // A FIFO, device or socket output was written as a stream to whoever
    // read it: nothing of it is on disk, and opening it would wait for a
    // writer (a FIFO) or read something else (a device).
    if (const std::string kind = stream_kind(v.path); !kind.empty()) {
        v.not_verifiable =
            fmt::format("{} is {}: written as a stream, nothing to verify on disk", v.path, kind);
        return false;
    }
    const Mapped map(v.path);
    const Bytes bytes = map.bytes();
    v.bytes = bytes.size();
    std::string index_error;
    const auto idx = read_file_index(v.path, index_error);
    v.format = idx ? idx->format : format_of(v.path, bytes);
    if (idx) {
        v.stopped = idx->stopped;
    }
    if (idx) {
        if (bytes.size() < idx->bytes) {
            v.differences.push_back(
                fmt::format("truncated: {} bytes, index says {}", bytes.size(), idx->bytes));
        } else if (bytes.size() > idx->bytes) {
            v.differences.push_back(
                fmt::format("grown: {} bytes, index says {}", bytes.size(), idx->bytes));
        } else if (const std::uint64_t sum = XXH3_64bits(bytes.data(), bytes.size());
                   sum != idx->checksum) {
            v.differences.push_back(fmt::format(
                "edited after the run: checksum differs ({} {}, index says {})", kFileIndexChecksum,
                format_checksum(sum), format_checksum(idx->checksum)));
        }
        if (!idx->group.empty()) {
            try {
                group = parse_group(idx->group, false);
            } catch (const std::exception&) {
            }
        }
        if (const auto a = parse_ipv4(idx->antenna)) {
            antenna = *a;
        }
    } else {
        v.differences.push_back(fmt::format("index {}: {}", file_index_path(v.path), index_error));
    }
    // The file's index names the run that wrote it: a report of another run
    // (the same names, perhaps the same counts) is not this file's.
    if (idx && !report_run.empty() && !idx->run.empty() && report_run != idx->run) {
        v.differences.push_back(
            fmt::format("written by run {}, but the report is of run {}: a report of another run",
                        idx->run, report_run));
    }
    if (claimed && bytes.size() != claimed->bytes) {
        v.differences.push_back(
            fmt::format("{} bytes but report says {}", bytes.size(), claimed->bytes));
    }
    Walk w;
    Wrapper wrap(group, antenna);
    if (v.format == "codif" || v.format == "codifhdr") {
        w = verify_parts::walk_codif(bytes, v.format == "codifhdr", wrap, demux);
    } else if (v.format == "vdif") {
        w = verify_parts::walk_vdif(bytes, wrap, demux);
    } else if (v.format == "raw") {
        w = verify_parts::walk_raw(bytes, demux);
    } else if (v.format == "pcap" || v.format == "pcapng") {
        w = verify_parts::walk_pcap(v.path, demux);
    } else {
        v.differences.push_back(
            "format unknown (name it .raw, .codif, .codifhdr, .vdif, .pcap or "
            ".pcapng, or keep its index beside it)");
        return false;
    }
    v.frames = w.frames;
    if (!w.error.empty()) {
        v.differences.push_back(w.error);
    }
    if (idx && w.frames != idx->frames) {
        v.differences.push_back(fmt::format("frames {} but index says {}", w.frames, idx->frames));
    }
    if (claimed && w.frames != claimed->packets) {
        v.differences.push_back(
            fmt::format("frames {} but report says {}", w.frames, claimed->packets));
    }
    return w.error.empty();
}

Endpoint group_or_zero(const std::string& text) {
    try {
        return text.empty() ? Endpoint{} : parse_group(text, false);
    } catch (const std::exception&) {
        return {};
    }
}

// An ordered output's rebuilt streams (--ordered): each one's frames are in
// strict sequence, every gap a fill frame (unless a run restarted), and it
// spans the report's first to last frame when nothing was left out. Its
// frame counts are not the report's per stream (fills added, frames left
// out): the output's records are checked against the report's in
// check_file.
void compare_ordered_stream(const std::string& name, const ReportOutput& out, const StreamStats& s,
                            const ReportStream& rs, std::vector<std::string>& differences) {
    const SequenceTracker& q = s.sequence;
    if (q.duplicates() > 0 || q.out_of_order() > 0) {
        differences.push_back(
            fmt::format("{}: not in sequence in an ordered file ({} duplicates, {} out of order)",
                        name, q.duplicates(), q.out_of_order()));
    }
    if (out.ordered.restarts == 0 && q.missing() > 0) {
        differences.push_back(
            fmt::format("{}: {} frames missing from an ordered file (each should be a fill frame)",
                        name, q.missing()));
    }
    if (out.ordered.restarts == 0 && out.ordered.left_out() == 0 &&
        (s.first.seconds != rs.first.seconds || s.first.frame != rs.first.frame ||
         s.last.seconds != rs.last.seconds || s.last.frame != rs.last.frame)) {
        differences.push_back(
            fmt::format("{}: frames {}:{} to {}:{} but report says {}:{} to {}:{}", name,
                        s.first.seconds, s.first.frame, s.last.seconds, s.last.frame,
                        rs.first.seconds, rs.first.frame, rs.last.seconds, rs.last.frame));
    }
}

// The rebuilt streams of one output against the report's.
void compare_streams(const ReportOutput& out, const Ledger& ledger, const Report& report,
                     std::vector<std::string>& differences, std::uint64_t& checked) {
    const bool per_antenna = !out.group.empty();
    for (const ReportStream& rs : report.streams) {
        if (per_antenna && (rs.group != out.group || rs.antenna != out.antenna)) {
            continue;
        }
        // A vdif output holds one stream: its station and thread.
        if (out.thread >= 0 && (rs.thread != static_cast<std::uint64_t>(out.thread) ||
                                rs.station != static_cast<std::uint64_t>(out.station))) {
            continue;
        }
        const std::string name = stream_name(rs.group, rs.antenna, rs.thread);
        const StreamStats* found = nullptr;
        for (const StreamStats& s : ledger.streams()) {
            if (s.group.to_string() == rs.group && format_ipv4(s.antenna) == rs.antenna &&
                s.thread == rs.thread && s.station == rs.station) {
                found = &s;
            }
        }
        // raw, codif and vdif files hold only the frames captured with their payload.
        const std::uint64_t expected =
            out.format == "raw" || out.format == "codif" || out.format == "vdif"
                ? rs.packets - rs.payload_absent
                : rs.packets;
        ++checked;
        if (found == nullptr) {
            if (expected > 0) {
                differences.push_back(fmt::format("{}: in the report ({} frames) but not in {}",
                                                  name, expected, out.path));
            }
            continue;
        }
        if (out.ordered.window > 0) {
            compare_ordered_stream(name, out, *found, rs, differences);
            continue;
        }
        const std::uint64_t frames = found->packets();
        if (frames != expected) {
            differences.push_back(
                fmt::format("{}: frames {} but report says {}", name, frames, expected));
        }
        if (found->sequence.missing() != rs.missing) {
            differences.push_back(fmt::format("{}: missing {} but report says {}", name,
                                              found->sequence.missing(), rs.missing));
        }
        if (expected == rs.packets) {  // first and last: only when every frame is there
            if (found->first.seconds != rs.first.seconds || found->first.frame != rs.first.frame) {
                differences.push_back(fmt::format("{}: first {}:{} but report says {}:{}", name,
                                                  found->first.seconds, found->first.frame,
                                                  rs.first.seconds, rs.first.frame));
            }
            if (found->last.seconds != rs.last.seconds || found->last.frame != rs.last.frame) {
                differences.push_back(fmt::format("{}: last {}:{} but report says {}:{}", name,
                                                  found->last.seconds, found->last.frame,
                                                  rs.last.seconds, rs.last.frame));
            }
        }
    }
}

// A run-wide output (pcap, pcapng) holds every stream as captured, each in
// its group's format: its groups are named as the report's streams give
// them, each read in its stream's format (a VDIF or VTP group as VDIF or
// VTP, not as CODIF), and a rate every VDIF stream shares is given (streams
// of different rates learn theirs from the file, as the run did).
void run_wide_demux_options(const Report& report, DemuxOptions& o) {
    std::optional<std::uint64_t> rate;
    bool one_rate = true;
    for (const ReportStream& rs : report.streams) {
        const auto f = parse_stream_format(rs.format);
        Endpoint g;
        try {
            g = parse_group(rs.group, false);
        } catch (const std::exception&) {
            continue;  // (not a group this demux can name: left to the report's check)
        }
        if (!f) {
            continue;
        }
        if (std::find(o.groups.begin(), o.groups.end(), g) == o.groups.end()) {
            o.groups.push_back(g);
            o.group_formats.push_back(*f);
        }
        if (*f != StreamFormat::codif) {
            one_rate = one_rate && (!rate || *rate == rs.frames_per_period);
            rate = rs.frames_per_period;
        }
    }
    if (one_rate && rate) {
        o.vdif_frames_per_second = *rate;
    }
}

// How the demux that rebuilds a per-antenna output's ledger reads its frames:
// as the report's streams of the output were read (their format and rate:
// a VDIF file is read as VDIF at its stream's rate), or, with no report, as
// its format says (a vdif file as VDIF, its rate learned).
DemuxOptions demux_options(const std::string& format, const ReportOutput* out,
                           const Report* report) {
    DemuxOptions o;
    if (format == "vdif") {
        o.any_group_format = StreamFormat::vdif;
    }
    if (out == nullptr || report == nullptr) {
        return o;
    }
    if (out->group.empty()) {
        run_wide_demux_options(*report, o);
        return o;
    }
    for (const ReportStream& rs : report->streams) {
        if (rs.group != out->group || rs.antenna != out->antenna ||
            (out->thread >= 0 && (rs.thread != static_cast<std::uint64_t>(out->thread) ||
                                  rs.station != static_cast<std::uint64_t>(out->station)))) {
            continue;
        }
        if (const auto f = parse_stream_format(rs.format); f && *f != StreamFormat::codif) {
            // (A vdif file's frames have no VTP sequence number: read as VDIF.)
            o.any_group_format = format == "vdif" ? StreamFormat::vdif : *f;
            o.vdif_frames_per_second = rs.frames_per_period;
        }
    }
    return o;
}

// The format a file names itself by, before it is read: its index's, or its
// name's extension.
std::string format_hint(const std::string& path) {
    std::string error;
    if (const auto idx = read_file_index(path, error)) {
        return idx->format;
    }
    std::string ext = fs::path(path).extension().string();
    return ext.empty() ? ext : ext.substr(1);
}

}  // namespace

VerifyOutcome run_verify(const VerifyRequest& request) {
    VerifyOutcome outcome;
    std::optional<Report> report;
    bool beside = false;
    if (!request.report_path.empty()) {
        report = load_report(request.report_path);
        beside = shipped(*report);
    }
    std::vector<bool> listed(request.files.size(), false);  // named in the report
    if (report) {
        for (const ReportOutput& out : report->outputs) {
            // The output's files: those asked for (all of them when no file
            // was named), checked together in one ledger.
            Ledger ledger;
            Demux demux(demux_options(out.format, &out, &*report), ledger);
            // Every file of the output is checked and read whole: the
            // ledger rebuilt from them is the output's (an edit that left
            // whole records is still compared, stream by stream).
            bool whole = true;
            const Endpoint group = group_or_zero(out.group);
            const std::uint32_t antenna = parse_ipv4(out.antenna).value_or(0);
            const std::size_t first_file = outcome.files.size();
            for (const ReportFile& f : out.on_disk) {
                const std::string path = locate(*report, beside, f.path);
                bool wanted = request.files.empty();
                for (std::size_t i = 0; i < request.files.size(); ++i) {
                    if (request.files[i] == f.path || request.files[i] == path ||
                        same_file(request.files[i], path)) {
                        listed[i] = true;
                        wanted = true;
                    }
                }
                if (!wanted) {
                    whole = false;
                    continue;
                }
                VerifiedFile v;
                v.path = path;
                v.listed_as = f.path;
                whole = check_file(v, f, group, antenna, demux, report->run_id) && whole;
                if (!v.differences.empty() && v.differences.front() == "missing" && !beside &&
                    report->cwd.empty() && fs::path(f.path).is_relative()) {
                    // (A report of an ibvcap before the report's cwd.)
                    v.differences.front() = fmt::format(
                        "missing: {} is relative to the run's directory, which the report (of "
                        "an older ibvcap) does not give: verify from that directory",
                        f.path);
                }
                outcome.files.push_back(std::move(v));
            }
            if (whole && out.dropped == 0 && out.overwritten == 0 &&
                outcome.files.size() > first_file) {
                std::vector<std::string> diffs;
                compare_streams(out, ledger, *report, diffs, outcome.streams_checked);
                // Told on the output's first file's line.
                auto& d = outcome.files[first_file].differences;
                d.insert(d.end(), diffs.begin(), diffs.end());
            }
        }
    }
    for (std::size_t i = 0; i < request.files.size(); ++i) {
        if (listed[i]) {
            continue;
        }
        Ledger ledger;
        Demux demux(demux_options(format_hint(request.files[i]), nullptr, nullptr), ledger);
        VerifiedFile v;
        v.path = request.files[i];
        check_file(v, std::nullopt, Endpoint{}, 0, demux);
        if (report) {
            // Whatever else is wrong with it, first: it is not this run's.
            v.differences.insert(
                v.differences.begin(),
                fmt::format("not an output of the report's run: {} lists no such file",
                            request.report_path));
        }
        outcome.files.push_back(std::move(v));
    }
    return outcome;
}

}  // namespace ibvcap
