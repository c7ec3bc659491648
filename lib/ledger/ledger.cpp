#include "lib/ledger/ledger.hpp"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <unordered_map>

namespace ibvcap {

const std::array<std::string_view, kReasonCount> detail::kReasonNames = {
    "not_ipv4",
    "not_udp",
    "other_destination",
    "unlisted_source",
    "not_codif",
    "not_vdif",
    "before_window",
    "after_window",
    "truncated_capture",
    "truncated_ethernet",
    "too_many_vlans",
    "truncated_ipv4",
    "bad_ip_version",
    "bad_ip_header_length",
    "bad_ip_total_length",
    "ip_fragment",
    "truncated_udp",
    "bad_udp_length",
    "headers_split",
    "codif_zero_field",
    "codif_bad_length",
    "codif_bad_samples",
    "codif_frame_beyond_period",
    "codif_no_frames_per_period",
    "vdif_zero_length",
    "vdif_bad_length",
    "vdif_frame_beyond_rate",
    "layout_changed",
    "frame_length_changed",
    "epoch_changed",
    "stream_params_changed",
    "too_many_streams",
};

std::string format_utc_time(std::int64_t time_ns) {
    std::int64_t s = time_ns / 1'000'000'000;
    std::int64_t ns = time_ns % 1'000'000'000;
    if (ns < 0) {
        ns += 1'000'000'000;
        --s;
    }
    const auto t = static_cast<time_t>(s);
    struct tm utc {};
    if (::gmtime_r(&t, &utc) == nullptr) {
        return fmt::format("{} ns", time_ns);
    }
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z", utc.tm_year + 1900,
                       utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, ns / 1000);
}

std::string_view to_string(LossCause cause) {
    switch (cause) {
        case LossCause::none:
            return "none";
        case LossCause::port_discards:
            return "port_discards";
        case LossCause::receive_queue:
            return "receive_queue";
        case LossCause::ring_hold_limit:
            return "ring_hold_limit";
        case LossCause::completion_errors:
            return "completion_errors";
        case LossCause::port_down:
            return "port_down";
        case LossCause::gpu_xid:
            return "gpu_xid";
        case LossCause::kernel:
            return "kernel";
        case LossCause::writer:
            return "writer";
        case LossCause::consumer:
            return "consumer";
        case LossCause::upstream:
            return "upstream";
        case LossCause::count_:
            break;
    }
    return "unknown";
}

std::string_view to_string(Reason reason) {
    const auto i = static_cast<std::size_t>(reason);
    return i < detail::kReasonNames.size() ? detail::kReasonNames[i] : "unknown";
}

bool is_malformed(Reason reason) {
    return reason >= Reason::truncated_capture;
}

Reason reason_for(PacketError error) {
    switch (error) {
        case PacketError::not_ipv4:
            return Reason::not_ipv4;
        case PacketError::not_udp:
            return Reason::not_udp;
        case PacketError::truncated_ethernet:
            return Reason::truncated_ethernet;
        case PacketError::too_many_vlans:
            return Reason::too_many_vlans;
        case PacketError::truncated_ipv4:
            return Reason::truncated_ipv4;
        case PacketError::bad_ip_version:
            return Reason::bad_ip_version;
        case PacketError::bad_ip_header_length:
            return Reason::bad_ip_header_length;
        case PacketError::bad_ip_total_length:
            return Reason::bad_ip_total_length;
        case PacketError::ip_fragment:
            return Reason::ip_fragment;
        case PacketError::truncated_udp:
            return Reason::truncated_udp;
        case PacketError::bad_udp_length:
            return Reason::bad_udp_length;
        case PacketError::headers_split:
            return Reason::headers_split;
        case PacketError::none:
            break;
    }
    return Reason::truncated_ethernet;  // unreachable for error != none
}

Reason reason_for(CodifError error) {
    switch (error) {
        case CodifError::zero_nchan:
        case CodifError::zero_nbits:
        case CodifError::zero_period:
        case CodifError::zero_framelength:
            return Reason::codif_zero_field;
        case CodifError::short_buffer:
        case CodifError::length_mismatch:
            return Reason::codif_bad_length;
        case CodifError::samples_not_integral:
            return Reason::codif_bad_samples;
        case CodifError::frame_beyond_period:
            return Reason::codif_frame_beyond_period;
        case CodifError::bad_sync:
        case CodifError::none:
            break;
    }
    return Reason::not_codif;
}

// Each format's names for a decoder's refusal: the one table that knows them
// (the demux hands over the error and the group's format).
Reason reason_for(StreamError error, StreamFormat format) {
    const bool codif = format == StreamFormat::codif;
    switch (error) {
        case StreamError::not_a_frame:
            return codif ? Reason::not_codif : Reason::not_vdif;
        case StreamError::zero_field:
            return codif ? Reason::codif_zero_field : Reason::vdif_zero_length;
        case StreamError::bad_length:
            return codif ? Reason::codif_bad_length : Reason::vdif_bad_length;
        case StreamError::bad_samples:
            return Reason::codif_bad_samples;
        case StreamError::frame_beyond_period:
            return codif ? Reason::codif_frame_beyond_period : Reason::vdif_frame_beyond_rate;
        case StreamError::no_frames_per_period:
            return Reason::codif_no_frames_per_period;
        case StreamError::none:
            break;
    }
    return codif ? Reason::not_codif : Reason::not_vdif;
}

void Ledger::rebase_source_counters(std::span<const SourceCounter> at_start) {
    for (SourceCounter& c : source_counters_) {
        for (const SourceCounter& base : at_start) {
            if (base.name == c.name) {
                c.value -= std::min(c.value, base.value);
                break;
            }
        }
    }
}

void Ledger::merge(const Ledger& other) {
    if (!merged_) {
        // This ledger's own outputs are judged now, before frames from others arrive.
        merged_disagreement_ = outputs_.empty() ? std::string() : disagreement();
        merged_ = true;
    }
    if (merged_disagreement_.empty()) {
        merged_disagreement_ = other.disagreement();
    }
    packets_ += other.packets_;
    bytes_ += other.bytes_;
    bad_wire_length_ += other.bad_wire_length_;
    outside_window_ += other.outside_window_;
    wc_errors_ += other.wc_errors_;
    payload_mismatches_ += other.payload_mismatches_;
    block_misses_ += other.block_misses_;
    for (std::size_t i = 0; i < kReasonCount; ++i) {
        reasons_[i] += other.reasons_[i];
    }
    streams_.insert(streams_.end(), other.streams_.begin(), other.streams_.end());
    outputs_.insert(outputs_.end(), other.outputs_.begin(), other.outputs_.end());
    rings_.insert(rings_.end(), other.rings_.begin(), other.rings_.end());
    if (output_formats_.empty()) {
        output_formats_ = other.output_formats_;
    }
    source_counters_.insert(source_counters_.end(), other.source_counters_.begin(),
                            other.source_counters_.end());
    notes_.insert(notes_.end(), other.notes_.begin(), other.notes_.end());
    gpu_xids_.insert(gpu_xids_.end(), other.gpu_xids_.begin(), other.gpu_xids_.end());
    gpu_xids_lost_ += other.gpu_xids_lost_;
    for (const auto& a : other.group_arrivals_) {
        note_group_arrival(a.group, a.first_ns);
    }
    if (incomplete_.empty()) {
        incomplete_ = other.incomplete_;
    }
}

void Ledger::note_group_arrival(const Endpoint& group, std::uint64_t ns) {
    for (auto& a : group_arrivals_) {
        if (a.group == group) {
            a.first_ns = std::min(a.first_ns, ns);
            return;
        }
    }
    group_arrivals_.push_back({group, ns});
}

void Ledger::set_output_formats(std::vector<OutputFormat> formats) {
    output_formats_ = std::move(formats);
    std::uint64_t streams = 0;
    for (const auto& s : streams_) {
        streams += unwritten(s) > 0 ? std::uint64_t{1} : std::uint64_t{0};
    }
    if (streams > 0) {
        add_note(fmt::format(
            "{} stream{} captured but written to no file: no format asked for takes {} (the "
            "report's \"unwritten\" per stream)",
            streams, streams == 1 ? "" : "s", streams == 1 ? "it" : "them"));
    }
}

std::uint64_t Ledger::unwritten(const StreamStats& s) const {
    if (output_formats_.empty() ||
        std::any_of(output_formats_.begin(), output_formats_.end(),
                    [&](OutputFormat f) { return takes_stream(f, s.format); })) {
        return 0;
    }
    return s.packets();
}

Totals Ledger::totals() const {
    Totals t;
    t.packets = packets_;
    t.bytes = bytes_;
    t.bad_wire_length = bad_wire_length_;
    t.outside_window = outside_window_;
    for (const auto& s : streams_) {
        t.codif += s.packets();
        t.missing += s.sequence.missing();
        t.duplicates += s.sequence.duplicates();
        t.out_of_order += s.sequence.out_of_order();
        t.too_late += s.sequence.too_late();
        t.implausible += s.sequence.implausible();
        t.restarts += s.sequence.restarts();
        t.invalid += s.invalid;
        t.payload_absent += s.payload_absent;
    }
    for (std::size_t i = 0; i < kReasonCount; ++i) {
        (is_malformed(static_cast<Reason>(i)) ? t.malformed : t.non_codif) += reasons_[i];
    }
    for (const auto& c : source_counters_) {
        if (c.is_drop) {
            t.nic_drops += c.value;
        }
    }
    t.wc_errors = wc_errors_;
    t.payload_mismatches = payload_mismatches_;
    t.block_misses = block_misses_;
    for (const auto& o : outputs_) {
        t.written += o.packets;
        t.write_drops += o.dropped;
        t.fills += o.ordered.fills;
        t.ordered_too_late += o.ordered.too_late + o.ordered.unheld;
    }
    for (const auto& r : rings_) {
        t.consumer_drops += r.consumer;
        t.ring_unwritten += r.unwritten + r.ordered.unheld + r.ordered.too_late;
    }
    return t;
}

std::string Ledger::disagreement() const {
    const Totals t = totals();
    if (t.packets != t.codif + t.malformed + t.non_codif) {
        return fmt::format(
            "the source delivered {} frames but {} were classified ({} stream frames, {} "
            "malformed, {} non-stream)",
            t.packets, t.codif + t.malformed + t.non_codif, t.codif, t.malformed, t.non_codif);
    }
    for (const auto& s : streams_) {
        if (!s.sequence.reconciles()) {
            const SequenceTracker& q = s.sequence;
            return fmt::format(
                "stream {} {} thread {}: {} frames received ({} duplicates, {} implausible) and "
                "{} missing do not fill its span of frames {} to {}",
                s.group.to_string(), format_ipv4(s.antenna), s.thread, q.received(), q.duplicates(),
                q.implausible(), q.missing(), q.lowest(), q.newest());
        }
    }
    if (merged_) {
        return merged_disagreement_;
    }
    // Each output must account for every record routed to it: per-run outputs
    // (pcap) see every frame, per-antenna outputs every frame of their streams.
    // The streams' frames per (group, antenna), named as the outputs name
    // them, once: thousands of outputs times thousands of streams took
    // seconds of formatting at the end of a run.
    struct Frames {
        std::uint64_t packets = 0;
        std::uint64_t payload_absent = 0;
    };
    // (A per-stream output, -F vdif, by its station and thread as well.)
    std::unordered_map<std::string, Frames> by_antenna;
    const auto stream_key = [](const std::string& antenna_key, std::int32_t station,
                               std::int32_t thread) {
        return fmt::format("{} {}/{}", antenna_key, station, thread);
    };
    // (A codif file of one of several stations from one address, by its
    // station: {antenna} {station}/-1.)
    const bool per_stream = std::any_of(outputs_.begin(), outputs_.end(), [](const OutputStats& o) {
        return o.thread >= 0 || o.station >= 0;
    });
    if (!outputs_.empty()) {
        by_antenna.reserve(streams_.size() * (per_stream ? 2 : 1));
        for (const auto& s : streams_) {
            const std::string key = s.group.to_string() + ' ' + format_ipv4(s.antenna);
            for (Frames* f :
                 {&by_antenna[key],
                  per_stream ? &by_antenna[stream_key(key, s.station, s.thread)] : nullptr,
                  per_stream && s.format == StreamFormat::codif
                      ? &by_antenna[stream_key(key, s.station, -1)]
                      : nullptr}) {
                if (f != nullptr) {
                    f->packets += s.packets();
                    f->payload_absent += s.payload_absent;
                }
            }
        }
    }
    for (const auto& o : outputs_) {
        std::uint64_t expected = 0;
        const std::string key = o.group + ' ' + o.antenna;
        if (o.antenna.empty()) {
            expected = t.packets - std::min(t.packets, t.outside_window);
        } else if (const auto it = by_antenna.find(
                       o.thread < 0 && o.station < 0 ? key : stream_key(key, o.station, o.thread));
                   it != by_antenna.end()) {
            // A frame captured without its payload has no raw or codif
            // record; its header is in codifhdr.
            const bool whole_frames = o.format != "codifhdr";
            expected = it->second.packets - (whole_frames ? it->second.payload_absent : 0);
        }
        // An ordered output holds its frames less those it left out, plus
        // its fills (lib/sinks/reorder.hpp).
        const OrderedCounts& q = o.ordered;
        if (o.packets + o.dropped + q.left_out() != expected + q.fills) {
            const std::string ordered =
                q.window == 0
                    ? std::string()
                    : fmt::format(" ({} of them fills, {} frames left out)", q.fills, q.left_out());
            return fmt::format(
                "{} holds {} records{} and {} were not written, but {} {} {}", o.path, o.packets,
                ordered, o.dropped, expected,
                o.antenna.empty() ? "frames were captured"
                                  : fmt::format("frames of {} from antenna {} were captured",
                                                o.group.empty() ? "its group" : o.group, o.antenna),
                o.packets + o.dropped + q.left_out() > expected + q.fills
                    ? "(records of another stream, or counted twice)"
                    : "(records neither written nor counted)");
        }
    }
    return {};
}

std::vector<std::string> Ledger::loss_reasons() const {
    const Totals t = totals();
    std::vector<std::string> why;
    if (t.codif == 0) {
        why.emplace_back("no stream frames were received");
    }
    if (t.missing > 0) {
        why.push_back(fmt::format("{} frames missing from the stream sequences", t.missing));
        // A frame window: which of them lie at its edges (streams that
        // started after its start, or stopped before its end).
        std::uint64_t late = 0;
        std::uint64_t late_frames = 0;
        std::uint64_t early = 0;
        std::uint64_t early_frames = 0;
        for (const auto& s : streams_) {
            if (s.window_head_missing > 0) {
                ++late;
                late_frames += s.window_head_missing;
            }
            if (s.window_tail_missing > 0) {
                ++early;
                early_frames += s.window_tail_missing;
            }
        }
        if (late > 0) {
            why.push_back(fmt::format(
                "{} stream{} started after the window's start: {} of the missing frames lie "
                "before {} first frame in it",
                late, late == 1 ? "" : "s", late_frames, late == 1 ? "its" : "their"));
        }
        if (early > 0) {
            why.push_back(fmt::format(
                "{} stream{} stopped before the window's end: {} of the missing frames lie after "
                "{} last frame in it",
                early, early == 1 ? "" : "s", early_frames, early == 1 ? "its" : "their"));
        }
    }
    // The VTP sequence numbers: a witness of their own, whatever the headers say.
    std::uint64_t psn_missing = 0;
    for (const auto& s : streams_) {
        psn_missing += s.psn_missing;
    }
    if (psn_missing > 0) {
        why.push_back(
            fmt::format("{} datagrams missing from the VTP packet sequence numbers", psn_missing));
    }
    if (t.too_late > 0) {
        why.push_back(fmt::format("{} frames arrived too late to classify", t.too_late));
    }
    if (t.implausible > 0) {
        why.push_back(
            fmt::format("{} frames with implausible headers (too far from their stream to place)",
                        t.implausible));
    }
    if (t.restarts > 0) {
        // The largest jump, by size, says how far a stream moved.
        std::int64_t jump = 0;
        for (const auto& s : streams_) {
            const std::int64_t j = s.sequence.last_restart_jump();
            if (s.sequence.restarts() > 0 && (j < 0 ? -j : j) >= (jump < 0 ? -jump : jump)) {
                jump = j;
            }
        }
        why.push_back(fmt::format(
            "{} stream restart{}: the position jumped by {} frames{}{}", t.restarts,
            t.restarts == 1 ? "" : "s", jump, t.restarts == 1 ? "" : " (the largest jump)",
            jump < 0 ? " (backwards: a sender numbered its frames again, its clock stepped back; "
                       "they are in the files in arrival order, with the times their headers say)"
                     : ""));
    }
    for (const auto& s : streams_) {
        // A rate given for a stream whose frames never reached it: every
        // second's numbers past them counted missing.
        if (const std::int64_t highest = s.given_rate_unreached(); highest >= 0) {
            why.push_back(fmt::format(
                "stream {} {} station {} thread {}: no frame numbered past {} in {} seconds, but "
                "--vdif-frames-per-second is {}: if it sends {} frames a second, give that, or "
                "leave the option out to learn the rate (its missing count assumes {})",
                s.group.to_string(), format_ipv4(s.antenna), s.station, s.thread, highest,
                s.last.seconds - s.first.seconds + 1, s.timing.frames_per_period, highest + 1,
                s.timing.frames_per_period));
        }
    }
    if (t.malformed > 0) {
        why.push_back(fmt::format("{} malformed frames", t.malformed));
    }
    if (t.nic_drops > 0) {
        why.push_back(fmt::format("{} frames dropped before capture (NIC/kernel)", t.nic_drops));
    }
    if (t.wc_errors > 0) {
        why.push_back(fmt::format("{} work-completion errors", t.wc_errors));
    }
    if (t.payload_mismatches > 0) {
        why.push_back(fmt::format("{} payload bytes differ from the generator's pattern",
                                  t.payload_mismatches));
    }
    if (t.write_drops > 0) {
        why.push_back(fmt::format("{} records not written{}{}", t.write_drops,
                                  write_drops_why_.empty() ? "" : ": ", write_drops_why_));
    }
    if (t.consumer_drops > 0) {
        std::string keys;
        for (const auto& r : rings_) {
            if (r.consumer > 0) {
                keys += fmt::format("{}{} ({})", keys.empty() ? "" : ", ", r.key, r.consumer);
            }
        }
        why.push_back(fmt::format(
            "{} frames the pipeline did not get: PSRDADA ring {} was full (its reader was behind; "
            "each is a fill record in the ring, at its time)",
            t.consumer_drops, keys));
    }
    for (const auto& r : rings_) {
        if (!r.error.empty()) {
            why.push_back(
                fmt::format("{} frames not in PSRDADA ring {}: {}", r.unwritten, r.key, r.error));
        } else if (r.unwritten + r.ordered.unheld + r.ordered.too_late > 0) {
            why.push_back(fmt::format(
                "{} frames not in PSRDADA ring {} (too late for its window, or not copied)",
                r.unwritten + r.ordered.unheld + r.ordered.too_late, r.key));
        }
    }
    if (!output_formats_.empty()) {
        // Streams no format asked for takes, per stream format: how many
        // frames, and what would have taken them.
        for (const StreamFormat f : {StreamFormat::codif, StreamFormat::vdif, StreamFormat::vtp}) {
            std::uint64_t frames = 0;
            std::uint64_t streams = 0;
            for (const auto& s : streams_) {
                if (s.format == f && unwritten(s) > 0) {
                    frames += unwritten(s);
                    ++streams;
                }
            }
            if (frames == 0) {
                continue;
            }
            std::string asked;
            for (const OutputFormat o : output_formats_) {
                asked += (asked.empty() ? "-F " : ",") + std::string(to_string(o));
            }
            why.push_back(fmt::format(
                "{} frames of {} {} stream{} are in no file: {} takes none of them (add {})",
                frames, streams, to_string(f), streams == 1 ? "" : "s", asked,
                f == StreamFormat::codif ? "-F codif, raw, pcap or pcapng"
                                         : "-F vdif, raw, pcap or pcapng"));
        }
    }
    if (t.ordered_too_late > 0) {
        why.push_back(fmt::format(
            "{} frames left out of the ordered files: later than the reorder window, or not "
            "copied into it (a fill frame is in their place; a larger --ordered-window keeps "
            "late ones)",
            t.ordered_too_late));
    }
    if (t.block_misses > 0) {
        why.push_back(fmt::format("{} frames are in no block of the block rings", t.block_misses));
    }
    for (const auto& x : gpu_xids_) {
        if (x.capture_gpu) {
            why.push_back(fmt::format("GPU {} reported Xid {}: {} at {}", x.device, x.code,
                                      x.message, format_utc_time(x.time_ns)));
        }
    }
    if (gpu_xids_lost_ > 0) {
        why.push_back(fmt::format(
            "{} GPU XID events were lost by the trace buffer (any could be the capture GPU's)",
            gpu_xids_lost_));
    }
    for (const auto& o : outputs_) {
        if (!o.error.empty()) {
            why.push_back(fmt::format("{}: {}", o.path, o.error));
        }
    }
    for (std::size_t i = 0; i < kExpectProblemCount; ++i) {
        const auto problem = static_cast<ExpectProblem>(i);
        if (const auto n = expected_.count(problem); n > 0 && is_loss(problem)) {
            why.push_back(
                fmt::format("{} expected stream{}: {}", n, n == 1 ? "" : "s", to_string(problem)));
        }
    }
    if (!incomplete_.empty()) {
        why.push_back("the run ended early: " + incomplete_);
    }
    if (const std::string where = disagreement(); !where.empty()) {
        why.push_back("the counts do not reconcile: " + where);
    }
    return why;
}

bool Ledger::zero_loss() const {
    return loss_reasons().empty();
}

}  // namespace ibvcap
