#include "lib/ledger/json_input.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cerrno>

namespace ibvcap {

JsonTooDeep::JsonTooDeep()
    : std::runtime_error(fmt::format("nested deeper than {} levels", kMaxJsonDepth)) {}

namespace {
// The parser callback (nlohmann::json::parser_callback_t): `depth` is the
// number of arrays and objects around the value; an array or object that
// starts at kMaxJsonDepth would be one level more. Throwing here ends the
// parse (the exception leaves json::parse; what was built is freed).
bool bound_depth(int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    if (depth >= kMaxJsonDepth && (event == nlohmann::json::parse_event_t::array_start ||
                                   event == nlohmann::json::parse_event_t::object_start)) {
        throw JsonTooDeep();
    }
    return true;
}
}  // namespace

nlohmann::json parse_json(std::string_view text) {
    return nlohmann::json::parse(text, bound_depth);
}

nlohmann::json parse_json(std::istream& in) {
    return nlohmann::json::parse(in, bound_depth);
}

class BoundedInput::Buf : public std::streambuf {
  public:
    Buf(int fd, std::uint64_t limit) : fd_(fd), limit_(limit) {}
    ~Buf() override {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    Buf(const Buf&) = delete;
    Buf& operator=(const Buf&) = delete;

    bool over = false;
    int read_error = 0;

  protected:
    int_type underflow() override {
        if (gptr() < egptr()) {
            return traits_type::to_int_type(*gptr());
        }
        if (fd_ < 0 || over || read_error != 0) {
            return traits_type::eof();
        }
        ssize_t n = 0;
        do {
            n = ::read(fd_, buffer_.data(), buffer_.size());
        } while (n < 0 && errno == EINTR);
        if (n < 0) {
            read_error = errno;
            return traits_type::eof();
        }
        if (n == 0) {
            return traits_type::eof();
        }
        const auto got = static_cast<std::uint64_t>(n);
        if (got > limit_ - std::min(limit_, total_)) {
            over = true;  // past the limit: ends here, whatever is left
            return traits_type::eof();
        }
        total_ += got;
        setg(buffer_.data(), buffer_.data(), buffer_.data() + n);
        return traits_type::to_int_type(*gptr());
    }

  private:
    int fd_;
    std::uint64_t limit_;
    std::uint64_t total_ = 0;
    std::array<char, 65536> buffer_{};
};

BoundedInput::BoundedInput(const std::string& path, std::uint64_t limit) : stream_(nullptr) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        open_error_ = errno;
    }
    buf_ = std::make_unique<Buf>(fd, limit);
    stream_.rdbuf(buf_.get());
}

BoundedInput::~BoundedInput() = default;

bool BoundedInput::over_limit() const {
    return buf_->over;
}

int BoundedInput::read_error() const {
    return buf_->read_error;
}

}  // namespace ibvcap
