// Test helpers: hand-built CODIF frames and temporary directories.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "formats/codif.hpp"
#include "formats/packet.hpp"
#include "formats/vdif.hpp"
#include "lib/core/frame.hpp"
#include "lib/traffic/pattern.hpp"

namespace ibvcap::test {

inline CodifHeader make_header(std::uint32_t seconds, std::uint32_t frame, std::uint16_t thread = 0,
                               CodifLayout layout = CodifLayout::v2) {
    CodifHeader h;
    h.layout = layout;
    h.seconds = seconds;
    h.frame = frame;
    h.epoch = 52;
    h.nbits = 8;
    h.complex = true;
    h.period = 1;
    h.threadid = thread;
    h.nchan = 16;
    h.framelength8 = 8192 / 8;
    h.totalsamples = 1000 * 256;  // 1000 frames per period of 256 samples
    h.version = 1;
    return h;
}

// Ethernet (+ the spec's VLAN tag) + IPv4 + UDP headers for a datagram of
// `udp_payload` bytes, which follow them zeroed: the UDP payload is the
// frame's last `udp_payload` bytes.
inline std::vector<std::uint8_t> udp_frame(const UdpHeaderSpec& spec, std::size_t udp_payload) {
    std::vector<std::uint8_t> f(kPlainUdpPayloadOffset + kVlanTagBytes + udp_payload);
    const std::size_t off = build_udp_headers(spec, static_cast<std::uint32_t>(udp_payload), f);
    f.resize(off + udp_payload);
    return f;
}

// Ethernet + IPv4 + UDP + CODIF header + patterned payload.
inline std::vector<std::uint8_t> make_frame(std::uint32_t src, std::uint32_t group,
                                            std::uint16_t port, const CodifHeader& h,
                                            int vlan = -1) {
    UdpHeaderSpec spec;
    spec.src_ip = src;
    spec.dst_ip = group;
    spec.src_port = 5000;
    spec.dst_port = port;
    spec.vlan_id = vlan;
    const std::size_t payload = static_cast<std::size_t>(h.payload_bytes());
    std::vector<std::uint8_t> f = udp_frame(spec, kCodifHeaderBytes + payload);
    const std::size_t off = f.size() - kCodifHeaderBytes - payload;
    encode_codif(h, MutableBytes(f).subspan(off, kCodifHeaderBytes));
    const CodifTiming timing{h.period, codif_frames_per_period(h)};
    fill_pattern(pattern_key(src, h.threadid, timing.index(h.seconds, h.frame)),
                 MutableBytes(f).subspan(off + kCodifHeaderBytes));
    return f;
}

inline VdifHeader make_vdif_header(std::uint32_t seconds, std::uint32_t frame,
                                   std::uint16_t thread = 0, std::uint16_t station = 0x4142,
                                   bool legacy = false) {
    VdifHeader h;
    h.legacy = legacy;
    h.seconds = seconds;
    h.frame = frame;
    h.epoch = 52;
    h.log2_nchan = 3;
    h.nbits = 2;
    h.thread = thread;
    h.station = station;
    h.framelength8 = static_cast<std::uint32_t>((h.header_bytes() + 8000) / 8);
    return h;
}

// Ethernet + IPv4 + UDP (+ a VTP sequence number when `psn` >= 0) + VDIF
// header + patterned payload; `datagram` > 0 overrides the UDP payload length.
inline std::vector<std::uint8_t> make_vdif_frame(std::uint32_t src, std::uint32_t group,
                                                 std::uint16_t port, const VdifHeader& h,
                                                 std::int64_t psn = -1, std::size_t datagram = 0) {
    UdpHeaderSpec spec;
    spec.src_ip = src;
    spec.dst_ip = group;
    spec.src_port = 5000;
    spec.dst_port = port;
    const std::size_t prefix = psn >= 0 ? kVtpPsnBytes : 0;
    const std::size_t bytes =
        datagram > 0 ? datagram : prefix + static_cast<std::size_t>(h.frame_bytes());
    std::vector<std::uint8_t> f = udp_frame(spec, bytes);
    const std::size_t off = f.size() - bytes;
    if (psn >= 0) {
        store_le64(&f[off], static_cast<std::uint64_t>(psn));
    }
    if (bytes >= prefix + h.header_bytes()) {
        encode_vdif(h, MutableBytes(f).subspan(off + prefix, h.header_bytes()));
        fill_pattern(pattern_key(src, h.thread, std::uint64_t{h.seconds} << 24 | h.frame),
                     MutableBytes(f).subspan(off + prefix + h.header_bytes()));
    }
    return f;
}

// A frame captured whole, at time `ts` (ns).
inline Frame whole(const std::vector<std::uint8_t>& bytes, std::uint64_t ts = 1) {
    Frame f;
    f.head = bytes;
    f.wire_bytes = static_cast<std::uint32_t>(bytes.size());
    f.timestamp_ns = ts;
    return f;
}

inline std::vector<std::uint8_t> read_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A fresh directory under `base` (/tmp), removed with everything in it at
// scope exit.
class TempDir {
  public:
    explicit TempDir(const std::string& base = "/tmp") {
        std::string tmpl = base + "/ibvcap-test.XXXXXX";
        if (::mkdtemp(tmpl.data()) == nullptr) {
            throw std::runtime_error("mkdtemp failed");
        }
        path_ = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }
    std::string operator/(const std::string& name) const { return (path_ / name).string(); }
    std::string file(const std::string& name) const { return *this / name; }

  private:
    std::filesystem::path path_;
};

// A file size limit (RLIMIT_FSIZE, with SIGXFSZ ignored so that a write past
// it fails with EFBIG), as on a full disk; both restored at scope exit.
class FileSizeLimit {
  public:
    explicit FileSizeLimit(rlim_t bytes) {
        ::getrlimit(RLIMIT_FSIZE, &old_);
        old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
        rlimit l = old_;
        l.rlim_cur = bytes;
        ok_ = ::setrlimit(RLIMIT_FSIZE, &l) == 0;
    }
    ~FileSizeLimit() {
        ::setrlimit(RLIMIT_FSIZE, &old_);
        std::signal(SIGXFSZ, old_handler_);
    }
    FileSizeLimit(const FileSizeLimit&) = delete;
    FileSizeLimit& operator=(const FileSizeLimit&) = delete;
    bool ok() const { return ok_; }

  private:
    rlimit old_{};
    void (*old_handler_)(int) = nullptr;
    bool ok_ = false;
};

// The reader of a FIFO that a test's writer output is, on a thread of its
// own: start() opens the read end (which lets the writer's open() return)
// and reads everything until the writer closes it. A writer writes into a
// FIFO in order (docs/formats.md), so a FIFO stalls a disk thread only in
// open() until start() is called.
class FifoReader {
  public:
    explicit FifoReader(std::string path) : path_(std::move(path)) {}
    ~FifoReader() { join(); }
    FifoReader(const FifoReader&) = delete;
    FifoReader& operator=(const FifoReader&) = delete;
    void start() {
        if (thread_.joinable()) {
            return;
        }
        thread_ = std::thread([this] {
            const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
            char buf[65536];
            for (ssize_t n; fd >= 0 && (n = ::read(fd, buf, sizeof buf)) > 0;) {
                bytes_ += static_cast<std::uint64_t>(n);
            }
            if (fd >= 0) {
                ::close(fd);
            }
        });
    }
    // Waits for the writer's close; the bytes read.
    std::uint64_t join() {
        if (thread_.joinable()) {
            thread_.join();
        }
        return bytes_;
    }

  private:
    std::string path_;
    std::thread thread_;
    std::uint64_t bytes_ = 0;
};

// A latch on a writer's disk thread: a FIFO output named `path` in `dir`.
// The disk thread opening it blocks in open() until a reader comes
// (fifo(7)), so everything queued behind that output waits, as behind a
// stalled disk; open() lets it go (the reader takes whatever is written).
struct FifoLatch {
    std::string path;
    std::unique_ptr<FifoReader> reader;
    explicit FifoLatch(const std::filesystem::path& dir) : path(dir / "latch.fifo") {
        if (::mkfifo(path.c_str(), 0600) != 0) {
            throw std::runtime_error("mkfifo failed");
        }
        reader = std::make_unique<FifoReader>(path);
    }
    FifoLatch(const FifoLatch&) = delete;
    FifoLatch& operator=(const FifoLatch&) = delete;
    void open() { reader->start(); }
};

// What a receiver observes of one stream, from the frames alone: an
// independent reference model of the ledger's sequence counts.
struct Observed {
    std::vector<std::uint64_t> slots;  // in arrival order
    std::uint64_t distinct = 0, duplicates = 0, out_of_order = 0, missing = 0;
    void finish() {
        std::set<std::uint64_t> seen;
        std::uint64_t newest = 0;
        for (const auto s : slots) {
            if (!seen.insert(s).second) {
                ++duplicates;
                continue;
            }
            if (seen.size() > 1 && s < newest) {
                ++out_of_order;
            }
            newest = std::max(newest, s);
        }
        distinct = seen.size();
        missing = seen.empty() ? 0 : *seen.rbegin() - *seen.begin() + 1 - distinct;
    }
};

inline constexpr std::uint32_t kAntenna1 = (10u << 24) | 11u;              // 10.0.0.11
inline constexpr std::uint32_t kAntenna2 = (10u << 24) | 12u;              // 10.0.0.12
inline constexpr std::uint32_t kGroup1 = (239u << 24) | (17u << 16) | 1u;  // 239.17.0.1
inline constexpr std::uint32_t kGroup2 = (239u << 24) | (17u << 16) | 2u;  // 239.17.0.2

}  // namespace ibvcap::test

// A test that cannot run here (no permission, no device) skips with the reason
// on a developer's machine, but fails under CI (CI=true), which runs as root
// and must never pass by skipping.
#define IBVCAP_SKIP_UNLESS_CI(reason)                            \
    do {                                                         \
        if (std::getenv("CI") != nullptr) {                      \
            GTEST_FAIL() << "cannot run under CI: " << (reason); \
        }                                                        \
        GTEST_SKIP() << (reason);                                \
    } while (false)
