// What this disk and filesystem charge for a file layout, whoever writes it:
// the floor beside which bench/run.sh section 6 puts ibvcap's 24-, 240- and
// 2,400-file throughputs (issue 24). It writes the bytes a run wrote, into as
// many files, in writes of the run's buffer size taken round-robin over the
// files (as a capture's interleaved streams fill their buffers), starts each
// file's writeback every 512 KiB and at its close as ibvcap's buffered writer
// does (lib/sinks/writer_ahead.hpp), and writes a small sidecar per file by
// a temporary file and a rename as ibvcap's indexes are (lib/sinks/
// file_index.cpp); then sync(2). Nothing is read, copied or checksummed: the
// time is the filesystem's and the disk's alone.
//
//   files_floor DIR FILES BYTES_PER_FILE WRITE_BYTES
//
// Prints the seconds taken. Written by hand: no Debian tool writes a layout
// of many files interleaved in fixed-size writes (fio writes one file per
// job, and a job per file costs a process or thread each).
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "files_floor: %s\n", what.c_str());
    std::exit(1);
}

std::size_t number(const char* s, const char* name) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(s, &end, 10);
    if (end == s || *end != '\0' || v == 0) {
        die(fmt::format("{} must be a positive number, not '{}'", name, s));
    }
    return static_cast<std::size_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 5) {
        die("usage: files_floor DIR FILES BYTES_PER_FILE WRITE_BYTES");
    }
    const std::string dir = argv[1];
    const std::size_t files = number(argv[2], "FILES");
    const std::size_t per_file = number(argv[3], "BYTES_PER_FILE");
    const std::size_t chunk = number(argv[4], "WRITE_BYTES");
    constexpr std::size_t kWriteBehind = std::size_t{512} << 10;
    const std::vector<char> bytes(chunk, '\x5a');
    const std::string sidecar(300, ' ');  // about an index's size
    std::vector<int> fds(files, -1);
    std::vector<std::size_t> pending(files, 0);
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < files; ++i) {
        const std::string path = fmt::format("{}/f{}.codif", dir, i);
        fds[i] = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fds[i] < 0) {
            die(fmt::format("cannot create {}", path));
        }
    }
    for (std::size_t off = 0; off < per_file; off += chunk) {
        const std::size_t n = std::min(chunk, per_file - off);
        for (std::size_t i = 0; i < files; ++i) {
            if (::write(fds[i], bytes.data(), n) != static_cast<ssize_t>(n)) {
                die(fmt::format("cannot write f{}", i));
            }
            pending[i] += n;
            if (pending[i] >= kWriteBehind) {
                ::sync_file_range(fds[i], 0, 0, SYNC_FILE_RANGE_WRITE);
                pending[i] = 0;
            }
        }
    }
    for (std::size_t i = 0; i < files; ++i) {
        ::sync_file_range(fds[i], 0, 0, SYNC_FILE_RANGE_WRITE);
        ::close(fds[i]);
        const std::string tmp = fmt::format("{}/f{}.codif.idx.json.tmp", dir, i);
        const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 || ::write(fd, sidecar.data(), sidecar.size()) < 0 || ::close(fd) != 0 ||
            ::rename(tmp.c_str(), fmt::format("{}/f{}.codif.idx.json", dir, i).c_str()) != 0) {
            die(fmt::format("cannot write the sidecar of f{}", i));
        }
    }
    ::sync();
    std::printf("%.6f\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return 0;
}
