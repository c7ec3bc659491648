#include "lib/demux/demux.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <stdexcept>

#include "lib/core/probes.hpp"
#include "lib/demux/rate.hpp"
#include "lib/ledger/expect.hpp"

namespace ibvcap {

Demux::Demux(DemuxOptions options, Ledger& ledger) : options_(std::move(options)), ledger_(ledger) {
    groups_ = options_.groups;
    group_sources_.resize(options_.groups.size());
    for (std::size_t i = 0; i < options_.groups.size(); ++i) {
        if (const auto* from = sources_for(options_.sources, options_.groups[i])) {
            group_sources_[i] = *from;
        }
    }
    group_seen_.assign(std::max(options_.groups.size(), options_.max_groups), 0);
    for (const auto ip : options_.antennas) {
        antenna_index(ip);
    }
    antenna_lookup_.reserve(options_.max_antennas);
    ledger_.streams().reserve(options_.max_streams);
    known_.reserve(options_.max_streams);
    known_table_.assign(64, KnownSlot{});
    windows_on_ = options_.window.has_value();
    if (options_.groups.empty()) {
        uniform_format_ = options_.any_group_format;
    } else {
        const auto format = [&](std::size_t i) {
            return i < options_.group_formats.size() ? options_.group_formats[i]
                                                     : StreamFormat::codif;
        };
        uniform_format_ = format(0);
        for (std::size_t i = 1; i < options_.groups.size(); ++i) {
            if (format(i) != *uniform_format_) {
                uniform_format_.reset();
                break;
            }
        }
    }
}

void Demux::add_sink(FrameSink& sink, SinkScope scope) {
    if (!ledger_.streams().empty()) {
        throw std::logic_error("Demux: sinks are added before the first stream");
    }
    (scope == SinkScope::every_frame ? every_frame_sinks_ : stream_sinks_).push_back(&sink);
}

void Demux::add_sinks(std::span<const SinkEntry> sinks) {
    for (const auto& e : sinks) {
        add_sink(*e.sink, e.scope);
    }
}

void Demux::add_observer(FrameObserver observer) {
    observers_.push_back(std::make_unique<ObserverSink>(std::move(observer)));
    add_sink(*observers_.back());
}

namespace {
std::size_t known_hash(std::uint32_t dst_ip, std::uint16_t dst_port, std::uint32_t src_ip,
                       std::uint32_t key) {
    // One multiply (Fibonacci hashing); the table index takes the high bits.
    // The key's halves (VDIF: station, thread) both reach the low bits.
    const std::uint64_t x =
        (std::uint64_t{src_ip} << 32 | (dst_ip ^ (std::uint32_t{dst_port} << 16))) ^
        (key ^ (key >> 16) ^ (std::uint64_t{key} << 40));
    return static_cast<std::size_t>((x * 0x9e3779b97f4a7c15ull) >> 32);
}
}  // namespace

std::uint32_t Demux::find_stream(const UdpPacket& p, std::uint32_t key) const {
    const std::size_t mask = known_table_.size() - 1;
    for (std::size_t i = known_hash(p.dst_ip, p.dst_port, p.src_ip, key) & mask;;
         i = (i + 1) & mask) {
        const KnownSlot& slot = known_table_[i];
        if (slot.stream_plus1 == 0) {
            return 0;
        }
        if (slot.dst_ip == p.dst_ip && slot.src_ip == p.src_ip && slot.dst_port == p.dst_port &&
            slot.key == key) {
            return slot.stream_plus1;
        }
    }
}

void Demux::add_known(const UdpPacket& p, const StreamHeader& h, std::size_t stream) {
    if (stream >= options_.max_streams || find_stream(p, h.key) != 0) {
        return;
    }
    if (known_.size() <= stream) {
        known_.resize(stream + 1);  // registration time (reserved to max_streams)
    }
    Known& k = known_[stream];
    k.params = h.params;
    k.params2 = h.params2;
    k.frame_bytes = h.frame_bytes;
    k.period = h.period;
    k.layout = h.layout;
    k.epoch = h.epoch;
    k.frames_per_period = ledger_.streams()[stream].timing.frames_per_period;
    ++known_count_;
    if (2 * known_count_ > known_table_.size()) {
        // Registration time (a new stream), never per frame: rebuild doubled.
        std::vector<KnownSlot> old(known_table_.size() * 2);
        old.swap(known_table_);
        for (const KnownSlot& o : old) {
            if (o.stream_plus1 != 0) {
                place_known(o);
            }
        }
    }
    place_known(
        KnownSlot{p.dst_ip, p.src_ip, h.key, p.dst_port, static_cast<std::uint32_t>(stream + 1)});
}

void Demux::place_known(const KnownSlot& slot) {
    const std::size_t mask = known_table_.size() - 1;
    std::size_t i = known_hash(slot.dst_ip, slot.dst_port, slot.src_ip, slot.key) & mask;
    while (known_table_[i].stream_plus1 != 0) {
        i = (i + 1) & mask;
    }
    known_table_[i] = slot;
}

int Demux::group_index(std::uint32_t ip, std::uint16_t port) {
    for (std::size_t i = 0; i < groups_.size(); ++i) {
        if (groups_[i].ip == ip && groups_[i].port == port) {
            return static_cast<int>(i);
        }
    }
    if (!options_.groups.empty()) {
        return -1;
    }
    if (groups_.size() >= options_.max_groups) {
        return -2;
    }
    groups_.push_back(Endpoint{ip, port});
    return static_cast<int>(groups_.size() - 1);
}

bool Demux::may_be_for_a_group(const Frame& frame) const {
    const Ipv4Destination d = peek_ipv4_destination(frame.head, frame.captured_bytes(), frame.link);
    if (!d.has_ip) {
        return true;  // who it was for cannot be read: it may have been ours
    }
    for (const Endpoint& g : options_.groups) {
        if (g.ip == d.ip && (!d.has_port || g.port == d.port)) {
            return true;
        }
    }
    return false;
}

int Demux::antenna_index(std::uint32_t ip) {
    if (const auto it = antenna_lookup_.find(ip); it != antenna_lookup_.end()) {
        return it->second;
    }
    if (!options_.antennas.empty() && antennas_.size() >= options_.antennas.size()) {
        return -1;  // the list is registered in the constructor: this one is not in it
    }
    if (antennas_.size() >= options_.max_antennas) {
        return -2;
    }
    antennas_.push_back(ip);
    const int index = static_cast<int>(antennas_.size() - 1);
    antenna_lookup_.emplace(ip, index);
    return index;
}

StreamStats* Demux::stream(int group, int antenna, const StreamHeader& header,
                           std::uint64_t timestamp_ns, bool& created) {
    const auto key = std::make_tuple(group, antenna, header.key);
    created = false;
    auto& streams = ledger_.streams();
    if (const auto it = stream_lookup_.find(key); it != stream_lookup_.end()) {
        return &streams[it->second];
    }
    if (streams.size() >= options_.max_streams) {
        return nullptr;
    }
    created = true;
    StreamStats& s = streams.emplace_back();
    s.group = groups_[static_cast<std::size_t>(group)];
    s.antenna = antennas_[static_cast<std::size_t>(antenna)];
    s.thread = header.thread;
    s.station = header.station;
    s.key = header.key;
    s.format = header.format;
    s.layout = header.layout;
    s.epoch = header.epoch;
    s.timing.period = header.period;
    if (header.frames_per_period != 0) {
        s.timing.frames_per_period = header.frames_per_period;
        s.rate = StreamStats::Rate::header;
    } else if (options_.vdif_frames_per_second != 0) {
        s.timing.frames_per_period = options_.vdif_frames_per_second;
        s.rate = StreamStats::Rate::given;
        start_given(s);  // lib/demux/rate.hpp
    } else {
        start_learning(s, options_.min_plausible_jump);
    }
    if (s.rate != StreamStats::Rate::learning) {
        s.sequence.set_plausible_jump(
            std::max(std::uint64_t{options_.plausible_periods} * s.timing.frames_per_period,
                     options_.min_plausible_jump));
    }
    s.frame_bytes = header.frame_bytes;
    if (header.has_psn) {
        // The stream's VTP sequence numbers get a tracker of their own
        // (registration time: allocates once).
        psn_trackers_.resize(streams.size());
        psn_trackers_.back() = std::make_unique<SequenceTracker>();
        psn_trackers_.back()->set_plausible_jump(options_.min_plausible_jump * 16);
    }
    if (options_.window) {
        // The window in the stream's own indices, once (lib/demux/window.hpp).
        StreamWindow w;
        if (s.rate == StreamStats::Rate::learning) {
            // Its indices move when the rate is learned; its seconds do not.
            // An edge inside a second falls on the next (the CLI asks for
            // the rate when an edge is not a whole second).
            const WindowIndices sec = window_indices(*options_.window, s.epoch, 1, 1);
            w.lo = sec.lo;
            w.hi = sec.hi;
            w.by_seconds = true;
        } else {
            const WindowIndices idx = window_indices(*options_.window, s.epoch, s.timing.period,
                                                     s.timing.frames_per_period);
            w.lo = idx.lo;
            w.hi = idx.hi;
        }
        windows_.resize(streams.size());
        windows_.back() = w;
    }
    s.first_arrival_ns = timestamp_ns;
    s.last_arrival_ns = timestamp_ns;
    s.registered_ns = expect_clock_ns();
    stream_lookup_.emplace(key, streams.size() - 1);
    // Each stream sink opens what it needs for the new stream (its files,
    // its ring) now, once; the frames bring back what it returned.
    for (FrameSink* sink : stream_sinks_) {
        stream_routes_.push_back(sink->open_stream(s));
    }
    return &s;
}

void Demux::on_frame(const Frame& frame) {
    // Nothing from the wire is trusted: a length on the wire under what was
    // captured or past any link's is a damaged record header (a pcap
    // orig_len of 0xFFFFFFFF made a 3.3 MB file 4.3 GB). Counted, and the
    // frame goes on at its captured length, in the totals and in every
    // record written of it.
    if (frame.wire_bytes < frame.captured_bytes() || frame.wire_bytes > kMaxWireBytes)
        [[unlikely]] {
        Frame repaired = frame;
        repaired.wire_bytes = static_cast<std::uint32_t>(frame.captured_bytes());
        ledger_.count_bad_wire_length();
        deliver(repaired);
        return;
    }
    deliver(frame);
}

void Demux::deliver(const Frame& frame) {
    UdpPacket packet;
    if (windows_on_) [[unlikely]] {
        // With a window the sinks of every frame (pcap, pcapng) get what
        // lies in it: a stream's frame by its own time, once classified;
        // any other frame by its arrival (it has no time of its own).
        window_fate_ = WindowFate::not_a_stream_frame;
        const bool parsed = accept_frame(frame, packet);
        const FrameWindow& w = *options_.window;
        const auto arrival = static_cast<std::int64_t>(frame.timestamp_ns);
        if (window_fate_ == WindowFate::inside || (window_fate_ == WindowFate::not_a_stream_frame &&
                                                   arrival >= w.start_ns && arrival < w.stop_ns)) {
            const SinkFrame f{frame, parsed ? &packet : nullptr, nullptr, nullptr};
            for (FrameSink* sink : every_frame_sinks_) {
                sink->on_frame(f, nullptr);
            }
        } else {
            ledger_.count_outside_window();
        }
        return;
    }
    accept_frame(frame, packet);
}

bool Demux::accept_frame(const Frame& frame, UdpPacket& packet) {
    const std::uint64_t captured = frame.captured_bytes();
    ledger_.count_frame(frame.wire_bytes);
    PacketError perr = parse_udp_frame(frame.head, captured, packet, frame.link);
    // A frame the capture cut after its stream header (ibvcap's own
    // --pcap-snaplen headers, tcpdump -s): its headers agree with its length
    // on the wire, so it is a stream frame whose payload was not captured.
    bool payload_absent = false;
    if (perr != PacketError::none && captured < frame.wire_bytes && frame.tail.empty()) {
        UdpPacket cut;
        if (parse_udp_frame(frame.head, frame.wire_bytes, cut, frame.link) == PacketError::none &&
            cut.payload_offset + min_header_bytes(format_of(cut)) <= captured) {
            packet = cut;
            perr = PacketError::none;
            payload_absent = true;
        }
    }
    if (!every_frame_sinks_.empty() && !windows_on_) {
        const SinkFrame f{frame, perr == PacketError::none ? &packet : nullptr, nullptr, nullptr};
        for (FrameSink* sink : every_frame_sinks_) {
            sink->on_frame(f, nullptr);
        }
    }
    if (perr != PacketError::none) {
        // A frame cut short by the capture length is reported as such, not as
        // whatever header the cut happened to fall in.
        Reason reason = is_malformed(perr) && captured < frame.wire_bytes
                            ? Reason::truncated_capture
                            : reason_for(perr);
        // With named groups, a damaged frame that was not addressed to one of
        // them is someone else's traffic (docs/formats.md §3).
        if (is_malformed(reason) && !options_.groups.empty() && !may_be_for_a_group(frame)) {
            reason = Reason::other_destination;
        }
        ledger_.count_reason(reason);
        return false;
    }
    // The fast path: a known stream with unchanged parameters. Everything the
    // slow path would check is implied by the stream's first frame, except
    // the per-frame fields compared here (length, frame number).
    const StreamFormat format = format_of(packet);
    StreamHeader header;
    StreamError derr = StreamError::not_a_frame;
    // The datagram's first bytes, where every format's header lies.
    const std::size_t available = captured > packet.payload_offset
                                      ? static_cast<std::size_t>(captured - packet.payload_offset)
                                      : 0;
    const std::size_t head_bytes =
        std::min({std::size_t{packet.payload_bytes}, kStreamHeaderMaxBytes, available});
    std::array<std::uint8_t, kStreamHeaderMaxBytes> raw_header;
    Bytes head;
    if (head_bytes > 0) {
        // Read in place when the header lies in the first piece (every
        // contiguous frame, and a split one whose header slot was sized for
        // it); gathered across the two pieces otherwise.
        if (std::size_t{packet.payload_offset} + head_bytes <= frame.head.size()) {
            head = frame.head.subspan(packet.payload_offset, head_bytes);
        } else if (frame.gather(packet.payload_offset, std::span(raw_header.data(), head_bytes))) {
            head = Bytes(raw_header.data(), head_bytes);
        } else {
            // The header runs into the payload slot, and that is GPU
            // memory: a VLAN tag or IP options the header slot was not sized
            // for (the engine's split_misaligned count and note name
            // --vlan-tags).
            ledger_.count_reason(Reason::headers_split);
            return true;
        }
        derr = decode_stream_header(format, head, header);
        if (derr == StreamError::none) {
            if (const std::uint32_t known = find_stream(packet, header.key); known != 0) {
                const Known& k = known_[known - 1];
                if (k.same_parameters(header) &&
                    header.frame_bytes + header.prefix_bytes == packet.payload_bytes &&
                    header.frame < k.frames_per_period) {
                    accept(known - 1, frame, packet, header, payload_absent);
                    return true;
                }
            }
        }
    }
    // Filters first, then the format's checks, and only then register the group
    // and antenna: a stray UDP sender must not use up the limits.
    if (!options_.groups.empty()) {
        const int named = group_index(packet.dst_ip, packet.dst_port);
        if (named < 0) {
            ledger_.count_reason(Reason::other_destination);
            return true;
        }
        // A frame to the group from a source its source-specific join does
        // not name: another sender's (the network forwards it only where
        // something joined it any-source, or on a shared segment).
        const auto& from = group_sources_[static_cast<std::size_t>(named)];
        if (!from.empty() && std::find(from.begin(), from.end(), packet.src_ip) == from.end()) {
            ledger_.count_reason(Reason::unlisted_source);
            return true;
        }
        // A frame to the group, of its format or not (a known stream's frames, on the
        // fast path above, come after its first, which passed here).
        note_group(named, frame);
    }
    if (!options_.antennas.empty() && antenna_index(packet.src_ip) < 0) {
        ledger_.count_reason(Reason::unlisted_source);
        return true;
    }
    if (derr != StreamError::none) {
        ledger_.count_reason(reason_for(derr, format));
        return true;
    }
    if (const StreamError verr = check_stream_header(head, packet.payload_bytes, header);
        verr != StreamError::none) {
        ledger_.count_reason(reason_for(verr, format));
        return true;
    }
    const int group = group_index(packet.dst_ip, packet.dst_port);
    note_group(group, frame);  // every UDP destination is a group: its first frame
    const int antenna = antenna_index(packet.src_ip);
    if (group < 0 || antenna < 0) {
        ledger_.count_reason(Reason::too_many_streams);
        return true;
    }
    bool created = false;
    StreamStats* s = stream(group, antenna, header, frame.timestamp_ns, created);
    if (s == nullptr) {
        ledger_.count_reason(Reason::too_many_streams);
        return true;
    }
    const auto index = static_cast<std::size_t>(s - ledger_.streams().data());
    if (created) {
        add_known(packet, header, index);
    } else if (const auto reason = mismatch(*s, index, header)) {
        ledger_.count_reason(*reason);
        return true;
    }
    accept(index, frame, packet, header, payload_absent);
    return true;
}

std::optional<Reason> Demux::mismatch(const StreamStats& s, std::size_t index,
                                      const StreamHeader& h) const {
    if (h.layout != s.layout) {
        return Reason::layout_changed;
    }
    if (h.frame_bytes != s.frame_bytes) {
        return Reason::frame_length_changed;
    }
    if (h.epoch != s.epoch) {
        return Reason::epoch_changed;
    }
    const bool params_differ = index < known_.size() && (known_[index].params != h.params ||
                                                         known_[index].params2 != h.params2);
    if (h.period != s.timing.period || params_differ ||
        (h.frames_per_period != 0 && h.frames_per_period != s.timing.frames_per_period)) {
        return Reason::stream_params_changed;
    }
    if (h.frame >= s.timing.frames_per_period && !s.rate_watch) {
        // A header that gives its rate was checked against it already; this
        // is a VDIF frame number past the rate given or confirmed. (A watched
        // rate's watch decides: a learned one not yet confirmed is raised.)
        return reason_for(StreamError::frame_beyond_period, s.format);
    }
    return std::nullopt;
}

namespace {
// The ibvcap:frame verdict of a frame the tracker classified as `kind`
// (lib/core/probes.hpp). Of a late frame: whether it shrank `missing` (filled a
// gap), and whether it was more than the window behind the newest (the
// tracker's too_late branch; a late frame never moves the newest).
std::uint8_t probe_verdict(SequenceTracker::Kind kind, bool filled, bool beyond_window) {
    using K = SequenceTracker::Kind;
    switch (kind) {
        case K::first:
            return probe::first;
        case K::in_order:
            return probe::in_order;
        case K::gap:
            return probe::gap;
        case K::duplicate:
            return probe::duplicate;
        case K::late:
            return filled ? probe::late_fill
                          : (beyond_window ? probe::too_late : probe::before_start);
        case K::implausible:
            return probe::implausible;
        case K::restart:
            return probe::restart;
    }
    return probe::implausible;  // unreachable
}
}  // namespace

void Demux::accept(std::size_t stream, const Frame& frame, const UdpPacket& packet,
                   const StreamHeader& header, bool payload_absent) {
    StreamStats& s = ledger_.streams()[stream];
    if (s.rate_watch) [[unlikely]] {
        // A VDIF stream learning its rate, or confirming it (lib/demux/rate.hpp).
        if (!watch_rate(s, header.seconds, header.frame, options_.plausible_periods,
                        options_.min_plausible_jump)) {
            ledger_.count_reason(reason_for(StreamError::frame_beyond_period, s.format));
            return;
        }
        // The fast path takes a frame below the stream's rate: it must follow
        // every change of it.
        if (stream < known_.size()) {
            known_[stream].frames_per_period = s.timing.frames_per_period;
        }
    }
    const std::uint64_t index = s.timing.index(header.seconds, header.frame);
    if (windows_on_) [[unlikely]] {
        if (!in_window(stream, s, header, index)) {
            return;
        }
    }
    if (header.has_psn && stream < psn_trackers_.size() && psn_trackers_[stream]) {
        note_psn(s, *psn_trackers_[stream], header.psn);
    }
    // The probes (docs/observability.md, "USDT probes") fire where the
    // tracker has just counted: a gap is what `missing` grew by (a gap ahead,
    // frames before a new start, the frames a restart's run skipped); a late
    // frame that filled a missing one is the only thing that shrinks it.
    // `missing` before the tracker is read only while a tracer listens
    // (lib/core/probes.hpp): untraced, a load of each semaphore and a branch.
    const bool traced = IBVCAP_PROBE_ENABLED(frame) || IBVCAP_PROBE_ENABLED(gap);
    std::uint64_t missing_before = 0;
    if (traced) [[unlikely]] {
        missing_before = s.sequence.missing();
    }
    const auto kind = s.sequence.observe(index);
    if (s.rate_watch && s.rate == StreamStats::Rate::learning) [[unlikely]] {
        placed_while_learning(s, header.seconds, header.frame,
                              kind != SequenceTracker::Kind::implausible);
    }
    if (traced) [[unlikely]] {
        const std::uint64_t missing_after = s.sequence.missing();
        if (missing_after > missing_before) {
            IBVCAP_PROBE6(gap, s.antenna, s.group.ip, s.group.port, s.thread,
                          missing_after - missing_before, index);
        }
        IBVCAP_PROBE6(frame, s.antenna, s.group.ip, s.group.port, s.thread,
                      probe_verdict(kind, missing_after < missing_before,
                                    s.sequence.newest() - index >= SequenceTracker::kWindow),
                      index);
    }
    s.bytes += frame.wire_bytes;
    s.last_arrival_ns = frame.timestamp_ns;  // one store: the expected streams' last arrival
    if (payload_absent) {
        ++s.payload_absent;
    }
    if (header.invalid) {
        ++s.invalid;
    }
    if (kind == SequenceTracker::Kind::restart) {
        // A new segment: its lowest frame is the run's first, which came
        // earlier; its position follows from the index.
        s.timing.position(s.sequence.lowest(), s.first.seconds, s.first.frame);
    }
    if (kind != SequenceTracker::Kind::implausible) {
        if (index == s.sequence.newest()) {
            s.last = {header.seconds, header.frame};
        }
        if (index == s.sequence.lowest() && kind != SequenceTracker::Kind::duplicate) {
            s.first = {header.seconds, header.frame};
        }
        if (windows_on_) [[unlikely]] {
            // The tracker's lowest is the window's start, which may never
            // come: the stream's first is its lowest frame received (a
            // division only when that changes).
            StreamWindow& w = windows_[stream];
            if (const std::uint64_t first = s.sequence.first_received(); first != w.first_index) {
                w.first_index = first;
                s.timing.position(first, s.first.seconds, s.first.frame);
            }
        }
    }
    if (!stream_sinks_.empty()) {
        const SinkFrame f{frame, &packet, &header, &s};
        const SinkRoute* routes = &stream_routes_[stream * stream_sinks_.size()];
        for (std::size_t i = 0; i < stream_sinks_.size(); ++i) {
            stream_sinks_[i]->on_frame(f, routes[i]);
        }
    }
}

bool Demux::in_window(std::size_t stream, StreamStats& s, const StreamHeader& h,
                      std::uint64_t index) {
    StreamWindow& w = windows_[stream];
    const std::uint64_t at = w.by_seconds ? h.seconds : index;
    if (at < w.lo || at >= w.hi) {
        ledger_.count_reason(at < w.lo ? Reason::before_window : Reason::after_window);
        window_fate_ = WindowFate::outside;
        return false;
    }
    window_fate_ = WindowFate::inside;
    if (!s.sequence.started()) [[unlikely]] {
        // The stream's span starts at the window's first frame, whether or
        // not it comes: the frames before this one are missing.
        s.sequence.anchor(w.by_seconds ? s.timing.index(static_cast<std::uint32_t>(w.lo), 0)
                                       : w.lo);
    }
    return true;
}

void Demux::close_window(bool saw_end) {
    auto& streams = ledger_.streams();
    for (std::size_t i = 0; i < streams.size() && i < windows_.size(); ++i) {
        StreamStats& s = streams[i];
        const StreamWindow& w = windows_[i];
        // By now a learned rate is the stream's: the edges as its indices.
        const auto index_of = [&](std::uint64_t edge) {
            return w.by_seconds
                       ? s.timing.index(
                             static_cast<std::uint32_t>(std::min<std::uint64_t>(edge, UINT32_MAX)),
                             0)
                       : edge;
        };
        const std::uint64_t lo = index_of(w.lo);
        const bool open = w.hi == std::numeric_limits<std::uint64_t>::max();
        const std::uint64_t hi = open ? w.hi : index_of(w.hi);
        if (s.sequence.anchored() && s.sequence.received() > s.sequence.implausible()) {
            s.window_head_missing = s.sequence.first_received() - lo;
        }
        s.timing.position(lo, s.window_first.seconds, s.window_first.frame);
        if (!open && hi > lo) {
            s.timing.position(hi - 1, s.window_last.seconds, s.window_last.frame);
        }
        if (!saw_end || open || hi <= lo) {
            continue;
        }
        if (!s.sequence.started()) {
            s.sequence.anchor(lo);
        }
        const std::uint64_t before = s.sequence.missing();
        s.sequence.extend_to(hi - 1);
        if (s.sequence.received() > s.sequence.implausible()) {
            s.window_tail_missing = s.sequence.missing() - before;
        } else {
            s.window_head_missing = s.sequence.missing() - before;  // none of the window's came
        }
    }
}

}  // namespace ibvcap
