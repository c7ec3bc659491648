#include "lib/traffic/generator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>

#include "formats/packet.hpp"
#include "formats/vdif.hpp"
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

// The sync word of the VDIF extensions EDV 1, 3 and 4 (word 5), and EDV 2's
// 20-bit one (word 4 bits 4-23); difx libraries/vdifio/src/vdifio.h,
// vdif_edv1_header .. vdif_edv4_header.
constexpr std::uint32_t kVdifEdvSync = 0xACABFEEDu;
constexpr std::uint32_t kVdifEdv2Sync = 0xA5EA5u;

// Word 4's sample rate field of EDV 1 and 3: bits 0-22 the rate, bit 23 its
// unit (1 MHz, else kHz). As DiFX's vdif_edv3_header says ("internal complex
// sample rate; double for real value output"), the field is the per-channel
// rate of complex samples, half the rate of real ones; MHz when whole, else
// kHz when whole, else 0 (unknown).
std::uint32_t vdif_sample_rate_field(const GeneratorConfig& c) {
    const std::uint64_t per_second = c.vdif.frames_per_second * c.samples_per_frame();
    if (!c.complex && per_second % 2 != 0) {
        return 0;
    }
    const std::uint64_t rate = c.complex ? per_second : per_second / 2;
    constexpr std::uint64_t kField = std::uint64_t{1} << 23;
    if (rate % 1'000'000 == 0 && rate / 1'000'000 < kField) {
        return static_cast<std::uint32_t>(rate / 1'000'000) | 1u << 23;
    }
    if (rate % 1'000 == 0 && rate / 1'000 < kField) {
        return static_cast<std::uint32_t>(rate / 1'000);
    }
    return 0;
}

// The extended user data of a standard header (VdifHeader::extended: word
// 4's low 24 bits, words 5-7), per EDV; the fields the generator has no
// value for are 0.
//   EDV 1 (NICT): sample rate, sync; words 6-7 the DAS id (0).
//   EDV 2 (ALMA): word 4 the 20-bit sync above polarisation and BL
//     quadrant/correlator bits (0); the PIC status and ALMA's own 64-bit
//     sequence number (0).
//   EDV 3 (VLBA RDBE): sample rate, sync; tuning word, DBE unit, IF,
//     subband, sideband, revision and personality (0).
//   EDV 4 (multiplexed, a validity mask): word 4 bits 16-23 the mask length,
//     nchan up to 64 (it must equal or divide nchan); sync; words 6-7 the
//     mask, every channel valid.
std::array<std::uint32_t, 4> vdif_extended_words(const GeneratorConfig& c) {
    if (c.vdif.legacy) {
        return {};
    }
    switch (c.vdif.edv) {
        case 1:
        case 3:
            return {vdif_sample_rate_field(c), kVdifEdvSync, 0, 0};
        case 2:
            return {kVdifEdv2Sync << 4, 0, 0, 0};
        case 4: {
            const std::uint32_t mask_bits = std::min<std::uint32_t>(c.nchan, 64);
            const std::uint64_t mask =
                mask_bits == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << mask_bits) - 1;
            return {mask_bits << 16, kVdifEdvSync, static_cast<std::uint32_t>(mask),
                    static_cast<std::uint32_t>(mask >> 32)};
        }
        default:
            return {};
    }
}
}  // namespace

std::uint16_t VdifGeneratorConfig::default_station(std::size_t antenna_index) {
    const auto first = static_cast<std::uint16_t>('A' + antenna_index / 26 % 26);
    const auto second = static_cast<std::uint16_t>('A' + antenna_index % 26);
    return static_cast<std::uint16_t>(first << 8 | second);
}

std::uint32_t GeneratorConfig::head_bytes() const {
    switch (format) {
        case StreamFormat::codif:
            break;
        case StreamFormat::vdif:
            return static_cast<std::uint32_t>(vdif.legacy ? kVdifLegacyHeaderBytes
                                                          : kVdifHeaderBytes);
        case StreamFormat::vtp:
            return static_cast<std::uint32_t>(
                kVtpPsnBytes + (vdif.legacy ? kVdifLegacyHeaderBytes : kVdifHeaderBytes));
    }
    return static_cast<std::uint32_t>(kCodifHeaderBytes);
}

StreamTiming GeneratorConfig::timing() const {
    if (is_vdif()) {
        return StreamTiming{1, vdif.frames_per_second};
    }
    return StreamTiming{period, frames_per_period};
}

std::uint16_t GeneratorConfig::station(std::size_t antenna_index) const {
    if (!is_vdif()) {
        return static_cast<std::uint16_t>(antenna_index);
    }
    return antenna_index < vdif.stations.size()
               ? vdif.stations[antenna_index]
               : VdifGeneratorConfig::default_station(antenna_index);
}

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
    return (vlan_id >= 0 ? 46u : 42u) + std::uint64_t{head_bytes()} + payload_bytes;
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
    if (is_vdif()) {
        validate_vdif_settings();
    } else {
        if (period == 0)
            bad("--period must be at least 1 second");
        if (frames_per_period == 0)
            bad("--frames-per-period must be at least 1");
        if (frames_per_period > kCodifMaxFramesPerPeriod)
            bad("--frames-per-period must be at most 2^31");
    }
    const std::uint64_t bits_per_sample = std::uint64_t{nchan} * nbits * (complex ? 2u : 1u);
    if ((std::uint64_t{payload_bytes} * 8) % bits_per_sample != 0)
        bad(
            fmt::format("a {}-byte payload does not hold a whole number of {}-channel {}-bit {} "
                        "samples",
                        payload_bytes, nchan, nbits, complex ? "complex" : "real"));
    for (const double p : {loss, duplicate, reorder})
        if (!(p >= 0 && p <= 1))
            bad("--loss, --duplicate and --reorder are probabilities in [0, 1]");
    if (loss + duplicate + reorder > 1)
        bad("--loss + --duplicate + --reorder must not exceed 1");
    if (!(invalid >= 0 && invalid <= 1))
        bad("--invalid is a probability in [0, 1]");
    if (vlan_id > 4094)
        bad("--vlan must be 0-4094");
    const StreamTiming t = timing();
    if (start_seconds % t.period != 0)
        bad(fmt::format("--start-seconds {} must be a multiple of --period {}", start_seconds,
                        t.period));
    // The last frame's seconds must fit the header's seconds field.
    const std::uint64_t last_seconds = std::uint64_t{start_seconds} + (start_frame + frames - 1) /
                                                                          t.frames_per_period *
                                                                          std::uint64_t{t.period};
    if (is_vdif()) {
        if (last_seconds >= (1ull << 30))
            bad(fmt::format(
                "the run's seconds reach {}, past 2^30 - 1, which the VDIF seconds field "
                "cannot hold: lower --start-seconds",
                last_seconds));
        return;
    }
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

// The VDIF header's limits (formats/vdif.hpp), each message naming the fix.
void GeneratorConfig::validate_vdif_settings() const {
    auto bad = [](const std::string& why) { throw std::invalid_argument(why); };
    if (vdif.frames_per_second == 0)
        bad("--vdif-frames-per-second must be at least 1");
    if (vdif.frames_per_second > kVdifMaxFramesPerSecond)
        bad(fmt::format(
            "--vdif-frames-per-second {} is over 2^24 (16777216), the most a VDIF frame number "
            "(24 bits) counts in a second: lower it, or make frames longer (--payload)",
            vdif.frames_per_second));
    if (period != 1)
        bad(fmt::format(
            "--period {} is CODIF's: a VDIF frame number counts frames within one second (leave "
            "--period out; the frame rate is --vdif-frames-per-second)",
            period));
    if (threads > 1024)
        bad(fmt::format(
            "--threads {}: VDIF thread ids are 10 bits, so at most 1024 threads per antenna",
            threads));
    if (!std::has_single_bit(nchan)) {
        const unsigned below = std::bit_floor(unsigned{nchan});
        bad(fmt::format(
            "--nchan {} is not a power of two, which VDIF needs (its header holds log2 of the "
            "channels): use {} or {}",
            nchan, below, below * 2));
    }
    if (nbits > 32)
        bad(fmt::format("--nbits {}: VDIF holds 1 to 32 bits per sample", nbits));
    if (epoch > 63)
        bad(fmt::format("--epoch {}: the VDIF reference epoch is 6 bits, 0 to 63", epoch));
    if (vdif.edv > 4)
        bad(fmt::format(
            "--vdif-edv {} is not one the generator fills: 0 (none), 1 (NICT), 2 (ALMA), 3 "
            "(VLBA), 4 (validity mask)",
            vdif.edv));
    if (vdif.legacy && vdif.edv != 0)
        bad(
            fmt::format("a legacy VDIF header has no extended data: leave out --vdif-edv {} or "
                        "--vdif-legacy",
                        vdif.edv));
    if (!vdif.stations.empty() && vdif.stations.size() != antennas.size())
        bad(fmt::format(
            "{} --vdif-station given for {} antennas: give one per antenna, or none for the "
            "defaults (AA, AB, ...)",
            vdif.stations.size(), antennas.size()));
}

std::uint64_t Generator::epoch_unix_ns(std::uint8_t epoch) {
    return static_cast<std::uint64_t>(reference_epoch_unix_s(epoch)) * 1'000'000'000ull;
}

Generator::Generator(GeneratorConfig config) : config_(std::move(config)) {
    config_.validate();
    timing_ = config_.timing();
    epoch_ns_ = epoch_unix_ns(config_.epoch);
    vdif_extended_ = vdif_extended_words(config_);
    for (const auto& g : config_.groups) {
        for (std::size_t ai = 0; ai < config_.antennas.size(); ++ai) {
            for (std::uint16_t t = 0; t < config_.threads; ++t) {
                StreamTruth s;
                s.group = g;
                s.antenna = config_.antennas[ai];
                s.thread = t;
                s.station = config_.station(ai);
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

// Drawn apart from fate() (another hash of the seed, stream and slot), so
// that --invalid changes no other fault.
bool Generator::drawn_invalid(std::size_t stream, std::uint64_t slot) const {
    if (!(config_.invalid > 0) || slot == 0 || slot + 1 >= config_.frames) {
        return false;
    }
    const double r =
        unit(mix(config_.seed ^ 0x1A5A11D0F1A95ull ^ mix(stream + 1) ^ mix(slot ^ 0xC2B2AE35ull)));
    return r < config_.invalid;
}

void Generator::queue_once(std::size_t stream, std::uint64_t slot) {
    const bool invalid = drawn_invalid(stream, slot);
    queue_.push_back({stream, slot, invalid});
    StreamTruth& t = truth_[stream];
    ++t.sent;
    t.invalid += invalid ? 1 : 0;
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
                queue_once(s, slot - 1);
                continue;
            }
            switch (fate(s, slot)) {
                case Fate::skip:
                    ++t.skipped;
                    break;
                case Fate::twice:
                    // Never invalid: the truth's `invalid` counts frames and
                    // datagrams alike.
                    queue_.push_back({s, slot, false});
                    queue_.push_back({s, slot, false});
                    ++t.sent;
                    ++t.duplicated;
                    covered_[s] = slot + 1;
                    break;
                case Fate::swap:
                    queue_once(s, slot + 1);
                    pending_swap_[s] = 1;
                    ++t.reordered;
                    covered_[s] = slot + 2;
                    break;
                case Fate::send:
                    queue_once(s, slot);
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
            queue_once(s, slot_ - 1);
            ++planned;
        }
        // Every planned slot past the last one queued was skipped: a receiver
        // cannot tell those from slots never planned, so neither does the truth.
        t.skipped -= planned - covered_[s];
        t.slots = covered_[s];
    }
    return true;
}

void Generator::build(const Planned& planned) {
    const StreamTruth& t = truth_[planned.stream];
    const std::uint64_t absolute = config_.start_frame + planned.slot;
    const std::uint64_t first_period = config_.start_seconds / timing_.period;
    const std::uint64_t periods = first_period + absolute / timing_.frames_per_period;
    const auto seconds = static_cast<std::uint32_t>(periods * timing_.period);
    const auto frame = static_cast<std::uint32_t>(absolute % timing_.frames_per_period);

    const std::size_t group_index = planned.stream / (config_.antennas.size() * config_.threads);
    const std::size_t antenna_index = (planned.stream / config_.threads) % config_.antennas.size();

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
    const std::uint32_t head = config_.head_bytes();
    const std::size_t offset = build_udp_headers(spec, head + config_.payload_bytes, buffer_);
    const MutableBytes datagram = MutableBytes(buffer_).subspan(offset);

    if (config_.is_vdif()) {
        std::size_t at = 0;
        if (config_.format == StreamFormat::vtp) {
            // The VTP packet sequence number. jive5ab's udps sender
            // (github.com/jive-vlbi/jive5ab src/tthreadfns.h, udpswriter)
            // puts a 64-bit number, host order (little-endian on its x86
            // hosts), before each datagram's data, starts it at a random
            // value and adds one per datagram it sends; its readers count
            // lost and out-of-order datagrams per sender from the numbers
            // (src/threadfns/per_sender.cc, per_sender_type::handle_seqnr).
            // Here the number starts at 0 per stream and is the slot: what
            // the stream's sender numbered its datagrams, the injected
            // faults acting after it as a network would. A skipped slot
            // leaves a gap, a duplicate repeats its number (the same bytes),
            // a swap swaps two; without faults it counts the stream's
            // datagrams sent.
            store_le64(datagram.data(), planned.slot);
            at = kVtpPsnBytes;
        }
        VdifHeader h;
        h.invalid = planned.invalid;
        h.legacy = config_.vdif.legacy;
        h.seconds = seconds;
        h.frame = frame;
        h.epoch = config_.epoch;
        h.framelength8 = (head - static_cast<std::uint32_t>(at) + config_.payload_bytes) / 8;
        h.log2_nchan = static_cast<std::uint8_t>(std::countr_zero(unsigned{config_.nchan}));
        h.version = 0;  // VDIF 1.1.1 (DiFX's createVDIFHeader: VDIF_VERSION 0)
        h.station = t.station;
        h.thread = t.thread;
        h.nbits = config_.nbits;
        h.complex = config_.complex;
        h.edv = config_.vdif.legacy ? 0 : config_.vdif.edv;
        h.extended = vdif_extended_;
        encode_vdif(h, datagram.subspan(at, h.header_bytes()));
    } else {
        CodifHeader h;
        h.layout = config_.layout;
        h.frame = frame;
        h.seconds = seconds;
        h.epoch = config_.epoch;
        h.nbits = config_.nbits;
        h.complex = config_.complex;
        h.invalid = planned.invalid;
        h.version = 1;
        h.period = config_.period;
        h.threadid = t.thread;
        h.groupid = static_cast<std::uint16_t>(group_index);
        h.stationid = t.station;
        h.nchan = config_.nchan;
        h.blocklength = config_.blocklength();
        h.framelength8 = config_.payload_bytes / 8;
        h.totalsamples = config_.frames_per_period * config_.samples_per_frame();
        encode_codif(h, datagram.first(kCodifHeaderBytes));
    }
    const std::uint64_t key = pattern_key(t.antenna, t.thread, timing_.index(seconds, frame));
    fill_pattern(key, datagram.subspan(head));
}

bool Generator::next(GeneratedFrame& out) {
    while (queue_.empty()) {
        if (ended_ || slot_ >= config_.frames) {
            return false;
        }
        plan_slot();
    }
    const Planned planned = queue_.front();
    queue_.pop_front();
    build(planned);
    const std::uint64_t absolute = config_.start_frame + planned.slot;
    const std::uint64_t fpp = timing_.frames_per_period;
    const std::uint64_t period_ns = std::uint64_t{timing_.period} * 1'000'000'000u;
    out.bytes = buffer_;
    out.stream = planned.stream;
    out.timestamp_ns = epoch_ns_ + (config_.start_seconds / timing_.period) * period_ns +
                       (absolute / fpp) * period_ns + (absolute % fpp) * period_ns / fpp;
    return true;
}

nlohmann::json Generator::truth_json() const {
    auto position = [this](std::uint64_t slot) {
        const std::uint64_t absolute = config_.start_frame + slot;
        const std::uint64_t periods =
            config_.start_seconds / timing_.period + absolute / timing_.frames_per_period;
        return nlohmann::json{{"seconds", periods * timing_.period},
                              {"frame", absolute % timing_.frames_per_period}};
    };
    nlohmann::json streams = nlohmann::json::array();
    std::uint64_t packets = 0, missing = 0, duplicates = 0, reordered = 0, invalid = 0;
    const std::string_view format = to_string(config_.format);
    for (const auto& t : truth_) {
        streams.push_back({{"format", format},
                           {"group", t.group.to_string()},
                           {"antenna", format_ipv4(t.antenna)},
                           {"station", t.station},
                           {"thread", t.thread},
                           {"slots", t.slots},
                           {"sent", t.sent},
                           {"packets", t.packets()},
                           {"missing", t.skipped},
                           {"duplicates", t.duplicated},
                           {"out_of_order", t.reordered},
                           {"invalid", t.invalid},
                           // A run ended before its first slot has no frames.
                           {"first", t.slots == 0 ? nlohmann::json() : position(0)},
                           {"last", t.slots == 0 ? nlohmann::json() : position(t.slots - 1)}});
        packets += t.packets();
        missing += t.skipped;
        duplicates += t.duplicated;
        reordered += t.reordered;
        invalid += t.invalid;
    }
    return {{"totals",
             {{"packets", packets},
              {"missing", missing},
              {"duplicates", duplicates},
              {"out_of_order", reordered},
              {"invalid", invalid},
              {"format", format},
              {"frame_bytes", config_.frame_bytes()}}},
            {"streams", streams}};
}

}  // namespace ibvcap
