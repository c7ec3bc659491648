// Fuzz target: the offline source (lib/sources/pcap_file.hpp) on the input as a
// pcap or pcapng file, read into a Demux with a Ledger and no writer. Classic
// pcap is read from a mapping by ibvcap's own record walk, and then once more
// through libpcap: both must agree (frames, end, error message, CODIF count).
//
// The input is written to an anonymous file (memfd_create, or an unlinked file
// in /tmp where memfd is not available) that PcapFileSource opens by its
// /proc/self/fd path. Opening may throw std::runtime_error (not a capture, not
// Ethernet): that is the documented way to refuse a file. Nothing else may go
// wrong: no crash, no out-of-bounds access, no UB, and the ledger counts every
// delivered frame exactly once and reconciles (fuzz_demux_check.hpp).
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "fuzz_common.hpp"
#include "fuzz_demux_check.hpp"
#include "fuzz_entries.hpp"
#include "lib/sources/pcap_file.hpp"

namespace {

constexpr std::uint64_t kMaxFrames = std::uint64_t{1} << 16;

// One anonymous file for the whole process, rewritten for every input.
class ScratchFile {
  public:
    ScratchFile() {
        fd_ = ::memfd_create("ibvcap-fuzz-pcap", 0);
        if (fd_ < 0) {
            char name[] = "/tmp/ibvcap-fuzz-pcap.XXXXXX";
            fd_ = ::mkstemp(name);
            if (fd_ >= 0) {
                ::unlink(name);
            }
        }
        if (fd_ < 0) {
            throw std::runtime_error("fuzz_pcap_file: cannot create a scratch file");
        }
        path_ = "/proc/self/fd/" + std::to_string(fd_);
    }
    ~ScratchFile() { ::close(fd_); }
    ScratchFile(const ScratchFile&) = delete;
    ScratchFile& operator=(const ScratchFile&) = delete;

    const std::string& write(const std::uint8_t* data, std::size_t size) {
        if (::ftruncate(fd_, 0) != 0) {
            throw std::runtime_error("fuzz_pcap_file: ftruncate failed");
        }
        std::size_t done = 0;
        while (done < size) {
            const ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
            if (n <= 0) {
                throw std::runtime_error("fuzz_pcap_file: write failed");
            }
            done += static_cast<std::size_t>(n);
        }
        return path_;
    }

  private:
    int fd_ = -1;
    std::string path_;
};

}  // namespace

int ibvcap_fuzz_pcap_file(const std::uint8_t* data, std::size_t size) {
    static ScratchFile scratch;
    const std::string& path = scratch.write(data, size);

    ibvcap::DemuxOptions options;
    options.max_groups = 4;
    options.max_antennas = 4;
    options.max_streams = 16;
    ibvcap::fuzz::DemuxCheck check(std::move(options));
    std::unique_ptr<ibvcap::PcapFileSource> source;
    try {
        source = std::make_unique<ibvcap::PcapFileSource>(path);
    } catch (const std::runtime_error&) {
        // Refused at open: the documented outcome for a file that is not an
        // Ethernet capture. Nothing was delivered.
    }
    if (source != nullptr) {
        const std::atomic<bool> stop{false};
        const ibvcap::PcapFileSource::Result r = source->run(check.demux(), kMaxFrames, stop);
        check.delivered(r.frames, 0);
        FUZZ_CHECK(r.frames <= kMaxFrames);
        // Stopped by exactly one of: the end of the file, a read error, the frame limit.
        if (r.frames < kMaxFrames) {
            FUZZ_CHECK(r.complete == r.error.empty());
        }
        if (source->is_mapped()) {
            // Differential: libpcap itself reads the same file to the same end,
            // with the same number of frames and the same message.
            ibvcap::DemuxOptions again;
            again.max_groups = 4;
            again.max_antennas = 4;
            again.max_streams = 16;
            ibvcap::fuzz::DemuxCheck lib_check(std::move(again));
            ibvcap::PcapFileSource lib(path, /*mapped=*/false);
            const ibvcap::PcapFileSource::Result l = lib.run(lib_check.demux(), kMaxFrames, stop);
            FUZZ_CHECK(l.frames == r.frames);
            FUZZ_CHECK(l.complete == r.complete);
            FUZZ_CHECK(l.error == r.error);
            FUZZ_CHECK(lib_check.ledger().totals().codif == check.ledger().totals().codif);
        }
    }
    check.check_ledger(/*check_bytes=*/false);
    return 0;
}

IBVCAP_FUZZ_TARGET(ibvcap_fuzz_pcap_file)
