#include "lib/sources/pcap_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <iterator>
#include <stdexcept>
#include <string_view>

#include "formats/bytes.hpp"

namespace ibvcap {

namespace {

// libpcap's limit for Ethernet captures (MAXIMUM_SNAPLEN in pcap-int.h).
constexpr std::uint32_t kMaxSnaplen = 262144;
constexpr std::size_t kFileHeaderBytes = 24;
constexpr std::size_t kRecordHeaderBytes = 16;

// The link types read (lib/sources/pcap_file.hpp), by the DLT_ value
// libpcap's pcap_datalink() gives, with the LINKTYPE_ value a file header
// holds (pcap/dlt.h; https://www.tcpdump.org/linktypes.html: DLT_RAW is 12
// here and LINKTYPE_RAW 101 in files).
struct KnownLink {
    int dlt;
    LinkType link;
    std::uint32_t linktype;
};
constexpr KnownLink kKnownLinks[] = {
    {DLT_EN10MB, LinkType::ethernet, 1},         {DLT_LINUX_SLL, LinkType::linux_sll, 113},
    {DLT_LINUX_SLL2, LinkType::linux_sll2, 276}, {DLT_RAW, LinkType::raw_ip, 101},
    {DLT_IPV4, LinkType::raw_ip, 228},
};

// libpcap's 64-bit seconds; a 32-bit time_t would wrap pcapng times inside it.
static_assert(sizeof(time_t) >= 8, "pcapng time stamps need a 64-bit time_t");

// UNIX seconds + nanoseconds as 64-bit nanoseconds; false when they do not
// fit (before 1970, or after 2554-07-21): never wrapped.
bool timestamp_ns(std::int64_t seconds, std::int64_t nanoseconds, std::uint64_t& out) {
    return seconds >= 0 && nanoseconds >= 0 &&
           !__builtin_mul_overflow(static_cast<std::uint64_t>(seconds), 1'000'000'000u, &out) &&
           !__builtin_add_overflow(out, static_cast<std::uint64_t>(nanoseconds), &out);
}

}  // namespace

PcapFileSource::PcapFileSource(const std::string& path, bool mapped) : path_(path) {
    char errbuf[PCAP_ERRBUF_SIZE] = {};
    // Nanosecond precision: libpcap scales microsecond files up, so timestamps
    // of either kind arrive in nanoseconds.
    pcap_ =
        pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, errbuf);
    if (pcap_ == nullptr) {
        // libpcap's savefile.c says "PATH: strerror" when the file cannot be
        // opened, and "unknown file format" when it is neither pcap nor pcapng.
        std::string_view why = errbuf;
        if (why.ends_with(std::strerror(EINTR))) {
            // A stop signal (Ctrl-C, SIGTERM: install_stop_handler, without
            // SA_RESTART) ended the wait for the first bytes of a pipe, FIFO
            // or stdin: a clean stop with a report, not an error (run(),
            // with no pcap_).
            return;
        }
        if (why.starts_with(path) && why.substr(path.size()).starts_with(": ")) {
            why.remove_prefix(path.size() + 2);
        }
        throw std::runtime_error(fmt::format("cannot read {}: {}", path,
                                             why == "unknown file format"
                                                 ? "not a pcap or pcapng file (unknown file format)"
                                                 : std::string(why)));
    }
    const int link = pcap_datalink(pcap_);
    const auto link_entry = std::find_if(std::begin(kKnownLinks), std::end(kKnownLinks),
                                         [link](const KnownLink& k) { return k.dlt == link; });
    if (link_entry == std::end(kKnownLinks)) {
        const char* name = pcap_datalink_val_to_name(link);
        pcap_close(pcap_);
        pcap_ = nullptr;
        throw std::runtime_error(fmt::format(
            "cannot read {}: link type {} ({}) is not one ibvcap reads: Ethernet, Linux cooked "
            "(LINUX_SLL, LINUX_SLL2: tcpdump -i any) or raw IPv4 (RAW, IPV4)",
            path, link, name != nullptr ? name : "unknown"));
    }
    link_ = link_entry->link;
    pcap_link_type_ = link_entry->linktype;
    // libpcap gives pcapng files their major version 1, classic pcap 2.
    classic_ = pcap_major_version(pcap_) == 2;
    if (!mapped) {
        return;
    }
    // libpcap accepted the file; map it when it is a classic pcap file.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return;  // libpcap reads it
    }
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        static_cast<std::uint64_t>(st.st_size) >= kFileHeaderBytes) {
        const auto bytes = static_cast<std::size_t>(st.st_size);
        // (Guarded: another program may shrink the file while it is read.)
        auto guard = std::make_unique<GuardedMap>(fd, bytes);
        fd = -1;  // the guard's now
        if (guard->data() != nullptr) {
            const std::uint8_t* base = guard->data();
            void* p = const_cast<std::uint8_t*>(base);
            const std::uint32_t magic = load_le32(base);
            const bool swapped = magic == 0xd4c3b2a1u || magic == 0x4d3cb2a1u;
            const auto u16 = [&](std::size_t at) {
                return swapped ? static_cast<unsigned>(base[at] << 8 | base[at + 1])
                               : static_cast<unsigned>(base[at + 1] << 8 | base[at]);
            };
            // Version 2.4 only: older files swap the length fields, which
            // libpcap sorts out; they stay with libpcap.
            const bool known = (magic == 0xa1b2c3d4u || magic == 0xa1b23c4du || swapped) &&
                               u16(4) == 2 && u16(6) == 4;
            if (known) {
                ::madvise(p, bytes, MADV_SEQUENTIAL);
                ::madvise(p, bytes, MADV_WILLNEED);
                guard_ = std::move(guard);
                swapped_ = swapped;
                nanoseconds_ = magic == 0xa1b23c4du || magic == 0x4d3cb2a1u;
                // The snapshot length libpcap derived from the header (it
                // decides truncation and the wording of errors).
                snapshot_ = static_cast<std::uint32_t>(std::max(pcap_snapshot(pcap_), 0));
            }
            // (Not a version it maps: the guard unmaps and closes as it goes.)
        }
    }
    if (fd >= 0) {
        ::close(fd);
    }
}

PcapFileSource::~PcapFileSource() {
    if (pcap_ != nullptr) {
        pcap_close(pcap_);
    }
}

PcapFileSource::Result PcapFileSource::run_mapped(Demux& demux, std::uint64_t max_frames,
                                                  const std::atomic<bool>& stop) {
    Result result;
    auto field = [this](const std::uint8_t* p) { return swapped_ ? load_be32(p) : load_le32(p); };
    const std::uint8_t* const map = guard_->data();
    const std::size_t map_bytes = guard_->size();
    std::size_t at = kFileHeaderBytes;
    std::size_t checked = at;
    FrameLease lease{.owner = guard_.get(), .allowed = true, .ring_allowed = true};
    for (;;) {
        if (stop.load(std::memory_order_relaxed) ||
            (max_frames != 0 && result.frames >= max_frames)) {
            return result;
        }
        const std::size_t left = map_bytes - at;
        if (left == 0) {
            result.complete = true;
            return result;
        }
        // Nothing in the file is trusted: every length is checked against the
        // limit and against what is left, with libpcap's messages.
        if (left < kRecordHeaderBytes) {
            result.error = fmt::format(
                "{}: truncated dump file; tried to read {} header bytes, only got {} (after {} "
                "frames)",
                path_, kRecordHeaderBytes, left, result.frames);
            return result;
        }
        const std::uint8_t* h = map + at;
        const std::uint32_t caplen = field(h + 8);
        if (caplen > kMaxSnaplen) {
            result.error = caplen > snapshot_
                               ? fmt::format(
                                     "{}: invalid packet capture length {}, bigger than snaplen of "
                                     "{} (after {} frames)",
                                     path_, caplen, snapshot_, result.frames)
                               : fmt::format(
                                     "{}: invalid packet capture length {}, bigger than maximum of "
                                     "{} (after {} frames)",
                                     path_, caplen, kMaxSnaplen, result.frames);
            return result;
        }
        // libpcap reads the first min(caplen, snapshot) bytes, then discards
        // the rest; a short file fails at whichever read comes up short.
        const std::size_t body = left - kRecordHeaderBytes;
        const std::uint32_t first = std::min(caplen, snapshot_);
        if (body < first || body < caplen) {
            result.error = fmt::format(
                "{}: truncated dump file; tried to read {} captured bytes, only got {} (after "
                "{} frames)",
                path_, body < first ? first : caplen, body, result.frames);
            return result;
        }
        Frame frame;
        // A record longer than the file's snapshot length: its first
        // snapshot bytes are the frame, the rest is skipped (as libpcap does).
        frame.head = Bytes(h + kRecordHeaderBytes, std::min(caplen, snapshot_));
        frame.wire_bytes = field(h + 12);
        frame.link = link_;
        // 32-bit seconds and fraction: always fits in 64-bit nanoseconds.
        const std::uint64_t frac = field(h + 4);
        frame.timestamp_ns =
            std::uint64_t{field(h)} * 1'000'000'000u + (nanoseconds_ ? frac : frac * 1000u);
        lease.holds = 0;
        lease.ring_holds = 0;
        frame.lease = &lease;
        // The record's last byte, read before the record is delivered: the
        // file shrinks from its end, so when it reads, the whole record is
        // still the file's; when it lies past a new end the guard notes the
        // change and it reads zero (guarded_map.hpp), and no record of zeros
        // is delivered.
        static_cast<void>(
            *static_cast<const volatile std::uint8_t*>(h + kRecordHeaderBytes + caplen - 1));
        if (!guard_->shrunk()) {
            demux.on_frame(frame);
            at += kRecordHeaderBytes + caplen;
            ++result.frames;
        }
        // The file shrank under the mapping (guarded_map.hpp): found by the
        // SIGBUS guard at a read past its new end, or by asking the file now
        // and then.
        if (at - checked >= kShrinkCheckBytes) {
            checked = at;
            guard_->check();
        }
        if (const auto shrunk = guard_->shrunk()) {
            result.error = fmt::format(
                "{} shrank while it was read: {} bytes now, {} when the run opened it (another "
                "program truncated or rewrote it); the run stops after {} frames{}: read a copy "
                "that nothing writes to",
                path_, *shrunk, map_bytes, result.frames,
                at > *shrunk ? fmt::format("; of the records read past byte {} ({} bytes), those "
                                           "not yet written when their bytes went are not "
                                           "written",
                                           *shrunk, at - *shrunk)
                             : std::string());
            return result;
        }
    }
}

bool PcapFileSource::step(std::uint64_t limit, std::chrono::milliseconds /*max_wait*/,
                          const std::atomic<bool>& stop) {
    const Result r = run(*demux_, limit, stop);
    frames_ += r.frames;
    error_ = r.error;
    return !r.complete && r.error.empty();
}

void PcapFileSource::report(std::span<const SourceLane> lanes, RunInfo& info) {
    if (!error_.empty()) {
        info.error = error_;
        lanes.front().ledger->set_incomplete(error_);
    }
}

PcapFileSource::Result PcapFileSource::run(Demux& demux, std::uint64_t max_frames,
                                           const std::atomic<bool>& stop) {
    if (guard_ != nullptr) {
        return run_mapped(demux, max_frames, stop);
    }
    Result result;
    if (pcap_ == nullptr) {  // (interrupted while it opened: nothing was read)
        if (!stop.load(std::memory_order_relaxed)) {
            result.error = fmt::format("{}: interrupted before its first bytes arrived", path_);
        }
        return result;
    }
    for (;;) {
        if (stop.load(std::memory_order_relaxed) ||
            (max_frames != 0 && result.frames >= max_frames)) {
            return result;
        }
        pcap_pkthdr* header = nullptr;
        const u_char* data = nullptr;
        const int rc = pcap_next_ex(pcap_, &header, &data);
        if (rc == PCAP_ERROR_BREAK) {  // -2: end of file
            result.complete = true;
            return result;
        }
        if (rc != 1 && stop.load(std::memory_order_relaxed)) {
            // Interrupted while libpcap waited on a pipe, FIFO or stdin: the
            // signal ended its read (EINTR), which is a stop, not a read error.
            // A record it had only partly read was never delivered.
            return result;
        }
        if (rc != 1) {
            result.error =
                fmt::format("{}: {} (after {} frames)", path_, pcap_geterr(pcap_), result.frames);
            return result;
        }
        Frame frame;
        frame.head = Bytes(data, header->caplen);
        frame.wire_bytes = header->len;
        frame.link = link_;
        if (classic_) {
            // A classic pcap record's seconds are unsigned 32 bits, which
            // libpcap (sf-pcap.c) reads as a signed 32-bit field and widens:
            // undone here, so 2038 and later read as the mapped path reads
            // them (a fraction field of 2^31 or more, damaged anyway, is
            // taken as nanoseconds). Always fits in 64-bit nanoseconds.
            const auto frac = header->ts.tv_usec;  // ns here
            frame.timestamp_ns =
                std::uint64_t{static_cast<std::uint32_t>(header->ts.tv_sec)} * 1'000'000'000u +
                (frac >= 0 ? static_cast<std::uint64_t>(frac)
                           : std::uint64_t{static_cast<std::uint32_t>(frac)});
        } else if (!timestamp_ns(header->ts.tv_sec, header->ts.tv_usec, frame.timestamp_ns)) {
            // pcapng holds 64-bit times, which libpcap (sf-pcapng.c) hands
            // over in a 64-bit time_t: carried exactly, or refused.
            result.error = fmt::format(
                "{}: frame {} has time stamp {}.{:09} s, outside what ibvcap carries (UNIX time "
                "from 1970 to 2554 in nanoseconds); the file is damaged or its clock was wrong "
                "(after {} frames)",
                path_, result.frames + 1, static_cast<std::int64_t>(header->ts.tv_sec),
                static_cast<std::int64_t>(header->ts.tv_usec), result.frames);
            return result;
        }
        demux.on_frame(frame);
        ++result.frames;
    }
}

}  // namespace ibvcap
