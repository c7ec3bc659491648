// The PSRDADA header (lib/sinks/dada_header.hpp).
#include "lib/sinks/dada_header.hpp"

#include <fmt/format.h>
#include <time.h>

#include <cctype>
#include <stdexcept>

#include "formats/fill_frame.hpp"
#include "formats/stream_header.hpp"

namespace ibvcap {

namespace {
struct Samples {
    std::uint32_t nbit = 0;
    std::uint32_t ndim = 1;
    std::uint32_t nchan = 0;
};

// The sample layout from the first header's packed parameters
// (formats/stream_decode.hpp: CODIF nchan | nbits << 16 | complex << 24;
// VDIF log2 nchan | nbits << 8 | complex << 16).
Samples samples_of(const StreamHeader& h) {
    Samples s;
    if (h.format == StreamFormat::codif) {
        s.nchan = static_cast<std::uint32_t>(h.params & 0xFFFF);
        s.nbit = static_cast<std::uint32_t>((h.params >> 16) & 0xFF);
        s.ndim = ((h.params >> 24) & 1) ? 2 : 1;
    } else {
        s.nchan = 1u << (h.params & 0x1F);
        s.nbit = static_cast<std::uint32_t>((h.params >> 8) & 0xFF);
        s.ndim = ((h.params >> 16) & 1) ? 2 : 1;
    }
    return s;
}

void line(std::string& out, std::string_view key, std::string_view value) {
    out += fmt::format("{:<12} {}\n", key, value);
}
}  // namespace

std::string dada_header_key_problem(const std::string& key) {
    if (key.empty() || key.size() > 32) {
        return "a header key is 1 to 32 characters";
    }
    for (const char c : key) {
        if (!(std::isupper(static_cast<unsigned char>(c)) ||
              std::isdigit(static_cast<unsigned char>(c)) || c == '_')) {
            return "a header key is upper-case letters, digits and '_' (as FREQ, BW, SOURCE)";
        }
    }
    if (key == "HDR_SIZE" || key == "HDR_VERSION" || key == "UTC_START" || key == "OBS_OFFSET" ||
        key.starts_with("IBVCAP_")) {
        return "ibvcap sets " + key + " itself from the stream";
    }
    return {};
}

std::string dada_header(const DadaHeaderInput& in) {
    const Samples s = samples_of(in.first);
    if (s.nbit == 0 || s.nchan == 0 || in.payload_bytes == 0) {
        throw std::invalid_argument(
            fmt::format("stream {}: its frame header gives no sample layout ({} bits, {} channels)",
                        in.stream, s.nbit, s.nchan));
    }
    std::uint32_t seconds = 0;
    std::uint32_t frame = 0;
    in.timing.position(in.first_index, seconds, frame);
    const std::int64_t utc = reference_epoch_unix_s(in.first.epoch) + seconds;
    tm t{};
    const time_t tt = static_cast<time_t>(utc);
    gmtime_r(&tt, &t);
    const std::uint32_t period = in.timing.period == 0 ? 1 : in.timing.period;

    // ibvcap's values, replaced by --dada-header where it gives one.
    std::vector<std::pair<std::string, std::string>> keys = {
        {"HDR_VERSION", "1.0"},
        {"HDR_SIZE", std::to_string(in.header_block_bytes)},
        {"INSTRUMENT", "ibvcap"},
        {"UTC_START", fmt::format("{:04}-{:02}-{:02}-{:02}:{:02}:{:02}", t.tm_year + 1900,
                                  t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)},
        {"OBS_OFFSET", std::to_string(std::uint64_t{frame} * in.payload_bytes)},
        {"NBIT", std::to_string(s.nbit)},
        {"NDIM", std::to_string(s.ndim)},
        {"NCHAN", std::to_string(s.nchan)},
        {"NPOL", "1"},
        {"RESOLUTION", std::to_string(in.payload_bytes)},
    };
    if (in.rate_known && in.timing.frames_per_period > 0) {
        const double frames_per_second =
            static_cast<double>(in.timing.frames_per_period) / static_cast<double>(period);
        const double bits_per_sample = double(s.nbit) * s.ndim * s.nchan;
        const double samples_per_frame = double(in.payload_bytes) * 8.0 / bits_per_sample;
        keys.emplace_back("BYTES_PER_SECOND",
                          fmt::format("{}", static_cast<std::uint64_t>(frames_per_second *
                                                                       double(in.payload_bytes))));
        keys.emplace_back("TSAMP",
                          fmt::format("{:.12g}", 1e6 / (samples_per_frame * frames_per_second)));
    }
    for (const auto& [k, v] : in.extra) {
        bool replaced = false;
        for (auto& [key, value] : keys) {
            if (key == k) {
                value = v;
                replaced = true;
            }
        }
        if (!replaced) {
            keys.emplace_back(k, v);
        }
    }
    std::string out;
    for (const auto& [k, v] : keys) {
        line(out, k, v);
    }
    // ibvcap's own: where the data came from, and how to read a missing frame.
    line(out, "IBVCAP_STREAM", in.stream);
    line(out, "IBVCAP_FORMAT", to_string(in.first.format));
    line(out, "IBVCAP_LAYOUT", layout_name(in.first.format, in.first.layout));
    line(out, "IBVCAP_FRAME_BYTES", std::to_string(in.first.frame_bytes));
    line(out, "IBVCAP_PAYLOAD_BYTES", std::to_string(in.payload_bytes));
    line(out, "IBVCAP_FIRST_FRAME", fmt::format("{} {}", seconds, frame));
    line(out, "IBVCAP_FRAMES_PER_PERIOD",
         in.rate_known ? std::to_string(in.timing.frames_per_period) : "unknown");
    line(out, "IBVCAP_PERIOD", std::to_string(period));
    line(out, "IBVCAP_FILL", fmt::format("0x{:08x}", kFillPattern));
    line(out, "IBVCAP_RUN_ID", in.run_id.empty() ? "none" : in.run_id);
    line(out, "IBVCAP_KEY", in.key);
    line(out, "IBVCAP_TRANSFER", std::to_string(in.transfer));
    return out;
}

std::string dada_header_value(const std::string& header, const std::string& key) {
    std::size_t at = 0;
    while (at < header.size()) {
        const std::size_t end = header.find('\n', at);
        const std::string_view l(header.data() + at,
                                 (end == std::string::npos ? header.size() : end) - at);
        if (l.starts_with(key) && l.size() > key.size() &&
            (l[key.size()] == ' ' || l[key.size()] == '\t')) {
            std::string_view v = l.substr(key.size());
            while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) {
                v.remove_prefix(1);
            }
            while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r')) {
                v.remove_suffix(1);
            }
            return std::string(v);
        }
        if (end == std::string::npos) {
            break;
        }
        at = end + 1;
    }
    return {};
}

}  // namespace ibvcap
