#include "lib/traffic/generator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>

#include "formats/packet.hpp"
#include "lib/traffic/pattern.hpp"

namespace ibvcap {

namespace {
std::uint64_t mix(std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
double unit(std::uint64_t bits) {
    return static_cast<double>(bits >> 11) * 0x1.0p-53;
}
}  // namespace

std::uint64_t GeneratorConfig::samples_per_frame() const {
    const std::uint64_t bits_per_sample = std::uint64_t{nchan} * nbits * (complex ? 2u : 1u);
    return bits_per_sample == 0 ? 0 : std::uint64_t{payload_bytes} * 8 / bits_per_sample;
}

// DiFX's CODIF generator computes the sample block this way
// (difx/difx libraries/vdifio/utils/generateVDIF.c: start at 64 bits, add 64
// until a whole number of complete samples fits, divide by 64), which is
// lcm(64, bits per complete sample) / 64 = bits / gcd(bits, 64); readers take
// it in those units (david-macmahon/CODIF.jl, getntime: 8 * blocklength bytes
// per block, payload / 8 / blocklength blocks per frame). validate()
// requires the payload to hold whole samples in whole 8-byte words, so the
// block divides the payload and fits the 16-bit field (payload < 64 KiB).
std::uint16_t GeneratorConfig::blocklength() const {
    const std::uint64_t bits_per_sample = std::uint64_t{nchan} * nbits * (complex ? 2u : 1u);
    if (bits_per_sample == 0) {
        return 0;
    }
    const std::uint64_t words = bits_per_sample / std::gcd(bits_per_sample, std::uint64_t{64});
    return words > 0xFFFF ? 0 : static_cast<std::uint16_t>(words);
}

std::uint64_t GeneratorConfig::frame_bytes() const {
    return (vlan_id >= 0 ? 46u : 42u) + kCodifHeaderBytes + payload_bytes;
}

void GeneratorConfig::validate() const {
    auto bad = [](const std::string& why) { throw std::invalid_argument(why); };
    if (antennas.empty())
        bad("at least one antenna source address is needed");
    if (groups.empty())
        bad("at least one GROUP:PORT is needed");
    if (threads == 0)
        bad("--threads must be at least 1");
    if (frames == 0)
        bad("--count must be at least 1");
    if (burst == 0)
        bad("--burst must be at least 1 (1: one frame of each stream in turn)");
    if (payload_bytes == 0 || payload_bytes % 8 != 0)
        bad(fmt::format("--payload {} must be a positive multiple of 8 bytes", payload_bytes));
    if (frame_bytes() - 14 - (vlan_id >= 0 ? 4 : 0) > 65535)
        bad(fmt::format("--payload {} does not fit in one IPv4 datagram", payload_bytes));
    if (nchan == 0 || nbits == 0)
        bad("--nchan and --nbits must be at least 1");
    if (period == 0)
        bad("--period must be at least 1 second");
    if (frames_per_period == 0)
        bad("--frames-per-period must be at least 1");
    const std::uint64_t bits_per_sample = std::uint64_t{nchan} * nbits * (complex ? 2u : 1u);
    if ((std::uint64_t{payload_bytes} * 8) % bits_per_sample != 0)
        bad(
            fmt::format("a {}-byte payload does not hold a whole number of {}-channel {}-bit {} "
                        "samples",
                        payload_bytes, nchan, nbits, complex ? "complex" : "real"));
    if (frames_per_period > kCodifMaxFramesPerPeriod)
        bad("--frames-per-period must be at most 2^31");
    for (const double p : {loss, duplicate, reorder})
        if (!(p >= 0 && p <= 1))
            bad("--loss, --duplicate and --reorder are probabilities in [0, 1]");
    if (loss + duplicate + reorder > 1)
        bad("--loss + --duplicate + --reorder must not exceed 1");
    if (vlan_id > 4094)
        bad("--vlan must be 0-4094");
    if (start_seconds % period != 0)
        bad(fmt::format("--start-seconds {} must be a multiple of --period {}", start_seconds,
                        period));
    // The last frame's seconds must fit the header's seconds field.
    const std::uint64_t last_seconds = std::uint64_t{start_seconds} + (start_frame + frames - 1) /
                                                                          frames_per_period *
                                                                          std::uint64_t{period};
    if (layout == CodifLayout::v2 && last_seconds > 0xFFFFFFFFull)
        bad("the run's seconds pass 2^32, which the CODIF seconds field cannot hold");
    if (layout == CodifLayout::draft) {
        if (last_seconds >= (1ull << 30))
            bad("the run's seconds pass 2^30, which the draft layout's seconds field cannot hold");
        if (nbits > 31)
            bad("the draft layout holds --nbits up to 31");
        if (epoch > 63)
            bad("the draft layout holds --epoch up to 63");
        if (frames_per_period * samples_per_frame() > 0xFFFFFFFFull)
            bad("total samples per period do not fit the draft layout's 32-bit field");
    }
}

std::uint64_t Generator::epoch_unix_ns(std::uint8_t epoch) {
    using namespace std::chrono;
    const year_month_day ymd{year{2000 + epoch / 2}, month{epoch % 2 == 0 ? 1u : 7u}, day{1}};
    const auto secs = sys_days{ymd}.time_since_epoch();
    return static_cast<std::uint64_t>(duration_cast<nanoseconds>(secs).count());
}

Generator::Generator(GeneratorConfig config) : config_(std::move(config)) {
    config_.validate();
    timing_.period = config_.period;
    timing_.frames_per_period = config_.frames_per_period;
    epoch_ns_ = epoch_unix_ns(config_.epoch);
    for (const auto& g : config_.groups) {
        for (const auto a : config_.antennas) {
            for (std::uint16_t t = 0; t < config_.threads; ++t) {
                StreamTruth s;
                s.group = g;
                s.antenna = a;
                s.thread = t;
                s.slots = config_.frames;
                truth_.push_back(s);
            }
        }
    }
    pending_swap_.assign(truth_.size(), 0);
    covered_.assign(truth_.size(), 0);
    ip_ids_.assign(config_.antennas.size(), 0);
    buffer_.resize(config_.frame_bytes());
}

Generator::Fate Generator::fate(std::size_t stream, std::uint64_t slot) const {
    if (slot == 0 || slot + 1 >= config_.frames) {
        return Fate::send;
    }
    const double r = unit(mix(config_.seed ^ mix(stream + 1) ^ mix(slot ^ 0x5bd1e995ull)));
    if (r < config_.loss)
        return Fate::skip;
    if (r < config_.loss + config_.duplicate)
        return Fate::twice;
    // A swap sends slot+1 now and slot next; slot+1 must not be the last slot.
    if (r < config_.loss + config_.duplicate + config_.reorder && slot + 2 < config_.frames)
        return Fate::swap;
    return Fate::send;
}

std::uint64_t Generator::total_packets() const {
    std::uint64_t n = 0;
    if (ended_early_) {
        for (const auto& t : truth_) {
            n += t.packets();
        }
        return n;
    }
    for (std::size_t s = 0; s < truth_.size(); ++s) {
        for (std::uint64_t slot = 0; slot < config_.frames; ++slot) {
            switch (fate(s, slot)) {
                case Fate::skip:
                    break;
                case Fate::twice:
                    n += 2;
                    break;
                case Fate::swap:
                    n += 2;
                    ++slot;
                    break;
                case Fate::send:
                    n += 1;
                    break;
            }
        }
    }
    return n;
}

// Plans the next `burst` slots (fewer at the end): stream by stream, each
// stream's slots in order, so that a stream's frames leave in a row.
void Generator::plan_slot() {
    const std::uint64_t first = slot_;
    const std::uint64_t end = std::min(config_.frames, first + config_.burst);
    slot_ = end;
    for (std::size_t s = 0; s < truth_.size(); ++s) {
        StreamTruth& t = truth_[s];
        for (std::uint64_t slot = first; slot < end; ++slot) {
            if (pending_swap_[s]) {
                pending_swap_[s] = 0;
                queue_.emplace_back(s, slot - 1);
                ++t.sent;
                continue;
            }
            switch (fate(s, slot)) {
                case Fate::skip:
                    ++t.skipped;
                    break;
                case Fate::twice:
                    queue_.emplace_back(s, slot);
                    queue_.emplace_back(s, slot);
                    ++t.sent;
                    ++t.duplicated;
                    covered_[s] = slot + 1;
                    break;
                case Fate::swap:
                    queue_.emplace_back(s, slot + 1);
                    pending_swap_[s] = 1;
                    ++t.sent;
                    ++t.reordered;
                    covered_[s] = slot + 2;
                    break;
                case Fate::send:
                    queue_.emplace_back(s, slot);
                    ++t.sent;
                    covered_[s] = slot + 1;
                    break;
            }
        }
    }
}

bool Generator::end_early() {
    if (ended_) {
        return false;
    }
    if (!at_slot_boundary()) {
        throw std::logic_error("Generator::end_early called between the frames of a slot");
    }
    ended_ = true;
    if (slot_ >= config_.frames) {
        return false;
    }
    ended_early_ = true;
    for (std::size_t s = 0; s < truth_.size(); ++s) {
        StreamTruth& t = truth_[s];
        std::uint64_t planned = slot_;
        if (pending_swap_[s]) {
            // What plan_slot() would do for this stream at the next slot: send
            // the displaced frame; that slot's own frame was already sent.
            pending_swap_[s] = 0;
            queue_.emplace_back(s, slot_ - 1);
            ++t.sent;
            ++planned;
        }
        // Every planned slot past the last one queued was skipped: a receiver
        // cannot tell those from slots never planned, so neither does the truth.
        t.skipped -= planned - covered_[s];
        t.slots = covered_[s];
    }
    return true;
}

void Generator::build(std::size_t stream, std::uint64_t slot) {
    const StreamTruth& t = truth_[stream];
    const std::uint64_t absolute = config_.start_frame + slot;
    const std::uint64_t first_period = config_.start_seconds / config_.period;
    const std::uint64_t periods = first_period + absolute / config_.frames_per_period;
    const auto seconds = static_cast<std::uint32_t>(periods * config_.period);
    const auto frame = static_cast<std::uint32_t>(absolute % config_.frames_per_period);

    const std::size_t group_index = stream / (config_.antennas.size() * config_.threads);
    const std::size_t antenna_index = (stream / config_.threads) % config_.antennas.size();

    UdpHeaderSpec spec;
    spec.src_mac[0] = 0x02;
    spec.src_mac[1] = 0x00;
    store_be32(spec.src_mac + 2, t.antenna);
    spec.src_ip = t.antenna;
    spec.dst_ip = t.group.ip;
    spec.src_port = config_.src_port;
    spec.dst_port = t.group.port;
    spec.vlan_id = config_.vlan_id;
    spec.ip_id = ip_ids_[antenna_index]++;
    const auto udp_payload = static_cast<std::uint32_t>(kCodifHeaderBytes + config_.payload_bytes);
    const std::size_t offset = build_udp_headers(spec, udp_payload, buffer_);

    CodifHeader h;
    h.layout = config_.layout;
    h.frame = frame;
    h.seconds = seconds;
    h.epoch = config_.epoch;
    h.nbits = config_.nbits;
    h.complex = config_.complex;
    h.version = 1;
    h.period = config_.period;
    h.threadid = t.thread;
    h.groupid = static_cast<std::uint16_t>(group_index);
    h.stationid = static_cast<std::uint16_t>(antenna_index);
    h.nchan = config_.nchan;
    h.blocklength = config_.blocklength();
    h.framelength8 = config_.payload_bytes / 8;
    h.totalsamples = config_.frames_per_period * config_.samples_per_frame();
    encode_codif(h, MutableBytes(buffer_).subspan(offset, kCodifHeaderBytes));
    const std::uint64_t key = pattern_key(t.antenna, t.thread, timing_.index(seconds, frame));
    fill_pattern(key, MutableBytes(buffer_).subspan(offset + kCodifHeaderBytes));
}

bool Generator::next(GeneratedFrame& out) {
    while (queue_.empty()) {
        if (ended_ || slot_ >= config_.frames) {
            return false;
        }
        plan_slot();
    }
    const auto [stream, slot] = queue_.front();
    queue_.pop_front();
    build(stream, slot);
    const std::uint64_t absolute = config_.start_frame + slot;
    const std::uint64_t period_ns = std::uint64_t{config_.period} * 1'000'000'000u;
    out.bytes = buffer_;
    out.stream = stream;
    out.timestamp_ns =
        epoch_ns_ + (config_.start_seconds / config_.period) * period_ns +
        (absolute / config_.frames_per_period) * period_ns +
        (absolute % config_.frames_per_period) * period_ns / config_.frames_per_period;
    return true;
}

nlohmann::json Generator::truth_json() const {
    auto position = [this](std::uint64_t slot) {
        const std::uint64_t absolute = config_.start_frame + slot;
        const std::uint64_t periods =
            config_.start_seconds / config_.period + absolute / config_.frames_per_period;
        return nlohmann::json{{"seconds", periods * config_.period},
                              {"frame", absolute % config_.frames_per_period}};
    };
    nlohmann::json streams = nlohmann::json::array();
    std::uint64_t packets = 0, missing = 0, duplicates = 0, reordered = 0;
    for (const auto& t : truth_) {
        streams.push_back({{"group", t.group.to_string()},
                           {"antenna", format_ipv4(t.antenna)},
                           {"thread", t.thread},
                           {"slots", t.slots},
                           {"sent", t.sent},
                           {"packets", t.packets()},
                           {"missing", t.skipped},
                           {"duplicates", t.duplicated},
                           {"out_of_order", t.reordered},
                           // A run ended before its first slot has no frames.
                           {"first", t.slots == 0 ? nlohmann::json() : position(0)},
                           {"last", t.slots == 0 ? nlohmann::json() : position(t.slots - 1)}});
        packets += t.packets();
        missing += t.skipped;
        duplicates += t.duplicated;
        reordered += t.reordered;
    }
    return {{"totals",
             {{"packets", packets},
              {"missing", missing},
              {"duplicates", duplicates},
              {"out_of_order", reordered},
              {"frame_bytes", config_.frame_bytes()}}},
            {"streams", streams}};
}

}  // namespace ibvcap
