// JSON an operator gives ibvcap (a run's report to `report`, `merge` and
// `verify --report`, an --expect manifest, a file's index): read with a size
// limit whatever it is (a regular file, a pipe, a FIFO, /dev/stdin), and
// parsed with a bound on how deep arrays and objects nest. nlohmann's parser
// keeps its own stack, but the library's copy, comparison and dump of a value
// recurse once per level: a 400 KB report nested 200,000 arrays deep ended
// `ibvcap report` with SIGSEGV.
#pragma once

#include <cstdint>
#include <istream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <streambuf>
#include <string>
#include <string_view>

namespace ibvcap {

// The deepest nesting accepted: a run's report nests 6 levels, a manifest 4.
inline constexpr int kMaxJsonDepth = 128;
// The largest report read (merge, report, verify --report): a run's report
// with a timeline of days is tens of MB.
inline constexpr std::uint64_t kMaxReportBytes = std::uint64_t{1} << 30;

// Thrown by parse_json for a text nested deeper than kMaxJsonDepth; what():
// "nested deeper than 128 levels".
class JsonTooDeep : public std::runtime_error {
  public:
    JsonTooDeep();
};

// nlohmann::json::parse with the depth bound (its parser callback, which is
// given the depth of each value: json.nlohmann.me, "parser_callback_t").
// Throws nlohmann::json::parse_error as parse() does, or JsonTooDeep.
nlohmann::json parse_json(std::string_view text);
nlohmann::json parse_json(std::istream& in);

// A file read through a std::istream that ends after `limit` bytes, as at the
// end of the file, whatever the file is: bytes are counted as they are read,
// so a pipe that never ends costs no more than a file of `limit` bytes.
class BoundedInput {
  public:
    // Opens `path` for reading (O_RDONLY; a FIFO's open waits for a writer,
    // as open(2) does); error() says why it could not.
    BoundedInput(const std::string& path, std::uint64_t limit);
    ~BoundedInput();
    BoundedInput(const BoundedInput&) = delete;
    BoundedInput& operator=(const BoundedInput&) = delete;

    // 0, or the errno of the open that failed.
    int error() const { return open_error_; }
    std::istream& stream() { return stream_; }
    // After reading: whether the file had more than `limit` bytes (the stream
    // ended at the limit), and the errno of a read that failed (0: none).
    bool over_limit() const;
    int read_error() const;

  private:
    class Buf;
    std::unique_ptr<Buf> buf_;
    int open_error_ = 0;
    std::istream stream_;
};

}  // namespace ibvcap
