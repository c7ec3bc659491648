// Unit tests for the writer's work ahead and behind of the disk threads
// (lib/sinks/writer_ahead.hpp): files created when their output is added,
// and indexes written by the helper thread.
// The rest of the writer is test_writer.cpp's.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "formats/output.hpp"
#include "lib/sinks/file_index.hpp"
#include "lib/sinks/writer.hpp"
#include "lib/sinks/writer_ahead.hpp"

namespace ibvcap {
namespace {

namespace fs = std::filesystem;
using ByteVec = std::vector<std::uint8_t>;
using namespace std::chrono_literals;

class TempDir {
  public:
    TempDir() {
        std::string pattern = (fs::temp_directory_path() / "ibvcap-writer-io-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) {
            throw std::runtime_error("mkdtemp failed");
        }
        path_ = pattern;
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string file(const std::string& name) const { return (path_ / name).string(); }
    const fs::path& path() const { return path_; }

  private:
    fs::path path_;
};

ByteVec read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in.good()) << "cannot open " << path;
    return ByteVec(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_record(Writer& w, Writer::OutputId out, const ByteVec& bytes) {
    const std::array<Bytes, 1> pieces{Bytes(bytes)};
    w.write(out, pieces);
}

Writer::Options small_options(std::size_t buffers = 4) {
    Writer::Options o;
    o.buffer_bytes = 128 * 1024;
    o.buffers = buffers;
    o.max_outputs = 512;
    return o;
}

// Waits up to `limit` for `done`.
template <class Done>
bool eventually(Done done, std::chrono::milliseconds limit = 5000ms) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!done()) {
        if (std::chrono::steady_clock::now() > end) {
            return false;
        }
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

void expect_index_matches(const std::string& path, std::uint64_t frames) {
    std::string error;
    const auto idx = read_file_index(path, error);
    ASSERT_TRUE(idx.has_value()) << path << ": " << error;
    const ByteVec bytes = read_file(path);
    EXPECT_EQ(idx->bytes, bytes.size()) << path;
    EXPECT_EQ(idx->frames, frames) << path;
    EXPECT_EQ(idx->checksum, XXH3_64bits(bytes.data(), bytes.size())) << path;
    EXPECT_EQ(idx->stopped, "") << path;
}

// ---------------------------------------------------------------------------
// Files made ahead

// Every output's file exists, with nothing in it, before any record of it
// arrives: the disk threads never create a file on a buffer's path when the
// helper got there first.
TEST(WriterAhead, FilesExistBeforeTheirFirstRecord) {
    TempDir dir;
    constexpr int kOutputs = 200;
    Writer w(small_options());
    std::vector<Writer::OutputId> outs;
    for (int i = 0; i < kOutputs; ++i) {
        outs.push_back(
            w.add_output(OutputFormat::raw, dir.file("f" + std::to_string(i) + ".raw"), "", ""));
    }
    EXPECT_TRUE(eventually([&] {
        for (int i = 0; i < kOutputs; ++i) {
            if (!fs::exists(dir.file("f" + std::to_string(i) + ".raw"))) {
                return false;
            }
        }
        return true;
    })) << "the outputs' files were not created ahead of their records";
    const ByteVec record(1000, 0x5a);
    for (int r = 0; r < 300; ++r) {
        for (int i = 0; i < kOutputs; i += 7) {
            write_record(w, outs[static_cast<std::size_t>(i)], record);
        }
    }
    w.finish();
    EXPECT_FALSE(w.any_failed());
    for (int i = 0; i < kOutputs; ++i) {
        const std::string path = dir.file("f" + std::to_string(i) + ".raw");
        const std::uint64_t frames = i % 7 == 0 ? 300 : 0;
        EXPECT_EQ(fs::file_size(path), frames * record.size()) << path;
        expect_index_matches(path, frames);
    }
}

// A FIFO is left to its disk thread (its open waits for a reader): the
// helper goes on with the files after it.
TEST(WriterAhead, AFifoDoesNotHoldUpTheFilesAfterIt) {
    TempDir dir;
    const std::string fifo = dir.file("a.fifo");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    Writer w(small_options());
    w.add_output(OutputFormat::raw, fifo, "", "");
    const auto b = w.add_output(OutputFormat::raw, dir.file("b.raw"), "", "");
    EXPECT_TRUE(eventually([&] { return fs::exists(dir.file("b.raw")); }))
        << "a FIFO first in line held up the next output's file";
    EXPECT_TRUE(fs::is_fifo(fifo));
    write_record(w, b, ByteVec(100, 1));
    // The disk thread opens the FIFO at the end: give it a reader.
    std::thread reader([&] {
        const int fd = ::open(fifo.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ::close(fd);
        }
    });
    w.finish();
    reader.join();
    EXPECT_EQ(fs::file_size(dir.file("b.raw")), 100u);
    EXPECT_TRUE(fs::is_fifo(fifo));
}

// Rotation: the first file is made ahead under its rotated name; the later
// ones only when their first record comes (a -W ring's oldest file is not
// overwritten early), and every file is indexed.
TEST(WriterAhead, ARotatingOutputHasOnlyItsFirstFileMadeAhead) {
    TempDir dir;
    Writer::Options o = small_options();
    o.rotation.bytes = 10000;
    o.rotation.files = 3;
    Writer w(o);
    const auto out = w.add_output(OutputFormat::raw, dir.file("r.raw"), "", "");
    EXPECT_TRUE(eventually([&] { return fs::exists(dir.file("r.000000.raw")); }));
    EXPECT_FALSE(fs::exists(dir.file("r.raw")));
    EXPECT_FALSE(fs::exists(dir.file("r.000001.raw")));
    for (int i = 0; i < 25; ++i) {  // 1000 bytes each: files of 10 records, 5 in the last
        write_record(w, out, ByteVec(1000, static_cast<std::uint8_t>(i)));
    }
    w.finish();
    EXPECT_FALSE(w.any_failed()) << w.stats()[0].error;
    expect_index_matches(dir.file("r.000000.raw"), 10);
    expect_index_matches(dir.file("r.000001.raw"), 10);
    expect_index_matches(dir.file("r.000002.raw"), 5);
}

// The helper's indexes are all on disk, and right, when finish() returns,
// also for outputs that never had a record.
TEST(WriterAhead, IndexesWrittenBehindAreAllThereAtFinish) {
    TempDir dir;
    constexpr int kOutputs = 300;
    std::vector<std::uint64_t> frames(kOutputs, 0);
    {
        Writer w(small_options());
        std::vector<Writer::OutputId> outs;
        for (int i = 0; i < kOutputs; ++i) {
            outs.push_back(w.add_output(OutputFormat::codif,
                                        dir.file("c" + std::to_string(i) + ".codif"),
                                        "239.1.1.1:4000", "10.0.0.1"));
        }
        for (int r = 0; r < 2000; ++r) {
            const auto i = static_cast<std::size_t>((r * 7919) % (kOutputs - 1));
            write_record(w, outs[i], ByteVec(100 + i, static_cast<std::uint8_t>(r)));
            ++frames[i];
        }
        w.finish();
        EXPECT_FALSE(w.any_failed());
    }
    for (int i = 0; i < kOutputs; ++i) {
        expect_index_matches(dir.file("c" + std::to_string(i) + ".codif"),
                             frames[static_cast<std::size_t>(i)]);
    }
}

}  // namespace
}  // namespace ibvcap
