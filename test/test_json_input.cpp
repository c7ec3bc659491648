// JSON an operator gives (lib/ledger/json_input.hpp): the depth bound, and
// the size limit counted as a pipe is read (issue 40, item 5).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <string>
#include <thread>

#include "lib/ledger/json_input.hpp"
#include "lib/review/merge.hpp"

namespace ibvcap {
namespace {

std::string nested(int depth) {
    return std::string(static_cast<std::size_t>(depth), '[') +
           std::string(static_cast<std::size_t>(depth), ']');
}

TEST(JsonInput, NestingIsBoundedAtTheLimitNotBelowIt) {
    EXPECT_NO_THROW(parse_json(nested(kMaxJsonDepth)));
    EXPECT_THROW(parse_json(nested(kMaxJsonDepth + 1)), JsonTooDeep);
    EXPECT_THROW(parse_json(nested(200000)), JsonTooDeep);
    // Objects count as arrays do.
    std::string objects;
    for (int i = 0; i <= kMaxJsonDepth; ++i) {
        objects += "{\"a\":";
    }
    objects += "1" + std::string(static_cast<std::size_t>(kMaxJsonDepth) + 1, '}');
    EXPECT_THROW(parse_json(objects), JsonTooDeep);
    try {
        parse_json(nested(kMaxJsonDepth + 1));
    } catch (const JsonTooDeep& e) {
        EXPECT_STREQ(e.what(), "nested deeper than 128 levels");
    }
    // Syntax errors are the library's, as before.
    EXPECT_THROW(parse_json(std::string("[1,")), nlohmann::json::parse_error);
}

// `bytes` written into a pipe on a thread; the input reads it by its
// /proc/self/fd name, as `merge <(...)` reads /dev/fd/63.
struct Piped {
    int fds[2] = {-1, -1};
    std::thread feeder;
    explicit Piped(std::size_t bytes) {
        EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
        feeder = std::thread([this, bytes] {
            const std::string chunk(4096, ' ');
            for (std::size_t done = 0; done < bytes;) {
                const ssize_t n =
                    ::write(fds[1], chunk.data(), std::min(chunk.size(), bytes - done));
                if (n <= 0) {
                    break;
                }
                done += static_cast<std::size_t>(n);
            }
            ::close(fds[1]);
        });
    }
    ~Piped() {
        ::close(fds[0]);  // (a feeder blocked on a full pipe gets EPIPE)
        feeder.join();
    }
    std::string path() const { return "/proc/self/fd/" + std::to_string(fds[0]); }
};

TEST(JsonInput, APipeIsCutAtTheLimit) {
    ::signal(SIGPIPE, SIG_IGN);
    {
        Piped pipe(100000);
        BoundedInput in(pipe.path(), 100000);
        ASSERT_EQ(in.error(), 0);
        EXPECT_THROW(parse_json(in.stream()), nlohmann::json::parse_error);  // only spaces
        EXPECT_FALSE(in.over_limit());
    }
    {
        Piped pipe(100001);
        BoundedInput in(pipe.path(), 100000);
        EXPECT_THROW(parse_json(in.stream()), nlohmann::json::parse_error);
        EXPECT_TRUE(in.over_limit());
    }
    {
        // A pipe that never ends (as `yes`): read no further than the limit.
        Piped pipe(std::size_t{1} << 40);
        BoundedInput in(pipe.path(), 1 << 20);
        EXPECT_THROW(parse_json(in.stream()), nlohmann::json::parse_error);
        EXPECT_TRUE(in.over_limit());
    }
    BoundedInput missing("/nonexistent/r.json", 10);
    EXPECT_EQ(missing.error(), ENOENT);
}

// `merge <(yes)`, `merge /dev/stdin` and `report /dev/stdin` read a report
// through read_report_file: its limit (1 GiB; less here) held only for a
// regular file, and a pipe that never ended grew memory without bound.
TEST(JsonInput, AReportFromAPipeHasTheLimitOfAFile) {
    ::signal(SIGPIPE, SIG_IGN);
    Piped pipe(std::size_t{1} << 40);  // never ends, as far as the reader knows
    try {
        read_report_file(pipe.path(), "FIX", 1 << 20);
        ADD_FAILURE() << "read a pipe past the limit";
    } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()), "report " + pipe.path() +
                                             " is more than the 1048576 bytes a run's report can "
                                             "be: FIX");
    }
    // Within the limit, a report through a pipe reads as from a file.
    const std::string text = R"({"verdict": "zero-loss"})";
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    ASSERT_EQ(::write(fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ::close(fds[1]);
    EXPECT_EQ(read_report_file("/proc/self/fd/" + std::to_string(fds[0]), "FIX", 1 << 20),
              nlohmann::json::parse(text));
    ::close(fds[0]);
}

}  // namespace
}  // namespace ibvcap
