#include "lib/ledger/timeline.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace ibvcap {

std::string stream_label(const LiveStream& s) {
    return fmt::format("{} {} thread {}", s.group.to_string(), format_ipv4(s.antenna), s.thread);
}

void Timeline::sample(double t, std::span<const LiveView> lanes,
                      std::span<const SourceCounter> witnesses, std::uint64_t backlog) {
    std::uint64_t packets = 0;
    std::uint64_t bytes = 0;
    for (const auto& l : lanes) {
        packets += l.packets;
        bytes += l.bytes;
    }
    TimelineSecond second;
    second.t = t;
    second.backlog = backlog;
    // A copy may lag the one before by a poll batch; counts never go back.
    second.packets = packets - std::min(packets, last_packets_);
    second.bytes = bytes - std::min(bytes, last_bytes_);
    last_packets_ = std::max(packets, last_packets_);
    last_bytes_ = std::max(bytes, last_bytes_);
    for (const auto& w : witnesses) {
        causes_[w.name] = w.cause;
        auto& last = last_witness_[w.name];
        if (w.value > last) {
            second.counters.emplace_back(w.name, w.value - last);
            last = w.value;
        }
    }
    const std::size_t window = seconds_.size();
    seconds_.push_back(std::move(second));
    presence_.begin_window(
        t,
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
            t);
    TimelineSecond& now = seconds_.back();
    for (std::size_t lane = 0; lane < lanes.size(); ++lane) {
        const auto& streams = lanes[lane].streams;
        for (std::size_t i = 0; i < streams.size(); ++i) {
            StreamState& s = streams_[{lane, i}];
            const std::uint64_t missing = streams[i].missing;
            std::uint64_t opened = 0;
            std::uint64_t taken_back = 0;
            LossCause cause = LossCause::upstream;
            if (missing < s.missing) {
                taken_back = s.missing - missing;
                take_back(s, taken_back);  // late frames filled a gap
                now.filled += taken_back;
            } else if (missing > s.missing) {
                Gap gap;
                gap.t = t;
                gap.missing = missing - s.missing;
                attribute(gap, window);
                opened = gap.missing;
                cause = gap.cause;
                now.missing += gap.missing;
                if (gaps_.size() < max_gaps_) {
                    gap.stream = stream_label(streams[i]);
                    s.gaps.push_back(gaps_.size());
                    gaps_.push_back(std::move(gap));
                } else {
                    ++unlisted_gaps_;
                    s.unlisted[static_cast<std::size_t>(gap.cause)] += gap.missing;
                }
            }
            s.missing = missing;
            if (s.presence_row == kNoRow) {
                s.presence_row = presence_.add_row(streams[i]);
            }
            presence_.stream(s.presence_row, streams[i], opened, cause, taken_back);
        }
    }
}

void Timeline::attribute(Gap& gap, std::size_t window) const {
    // The window the gap was seen in, and the one before (the frames may
    // have been lost there: a gap shows only with the stream's next frame).
    std::array<bool, kLossCauseCount> moved{};
    const std::size_t first = window > 0 ? window - 1 : 0;
    for (std::size_t w = first; w <= window && w < seconds_.size(); ++w) {
        for (const auto& [name, growth] : seconds_[w].counters) {
            const auto it = causes_.find(name);
            if (it == causes_.end() || it->second == LossCause::none ||
                it->second == LossCause::writer || it->second == LossCause::consumer) {
                continue;  // a writer's or a ring's drops are not sequence gaps
            }
            moved[static_cast<std::size_t>(it->second)] = true;
            if (std::find(gap.witnesses.begin(), gap.witnesses.end(), name) ==
                gap.witnesses.end()) {
                gap.witnesses.push_back(name);
            }
        }
    }
    gap.cause = LossCause::upstream;
    for (const LossCause c : kCausePriority) {
        if (moved[static_cast<std::size_t>(c)]) {
            gap.cause = c;
            break;
        }
    }
}

void Timeline::take_back(StreamState& s, std::uint64_t frames) {
    for (auto& n : s.unlisted) {
        const std::uint64_t k = std::min(n, frames);
        n -= k;
        frames -= k;
    }
    while (frames > 0 && !s.gaps.empty()) {
        Gap& g = gaps_[s.gaps.back()];
        const std::uint64_t k = std::min(g.missing, frames);
        g.missing -= k;
        frames -= k;
        if (g.missing == 0) {
            s.gaps.pop_back();  // filled whole: gaps() leaves it out
        }
    }
}

std::vector<Gap> Timeline::gaps() const {
    std::vector<Gap> out;
    for (const auto& g : gaps_) {
        if (g.missing > 0) {
            out.push_back(g);
        }
    }
    return out;
}

std::array<std::uint64_t, kLossCauseCount> Timeline::lost_by_cause() const {
    std::array<std::uint64_t, kLossCauseCount> by{};
    for (const auto& g : gaps_) {
        by[static_cast<std::size_t>(g.cause)] += g.missing;
    }
    for (const auto& [key, s] : streams_) {
        for (std::size_t c = 0; c < kLossCauseCount; ++c) {
            by[c] += s.unlisted[c];
        }
    }
    by[static_cast<std::size_t>(LossCause::writer)] += write_drops_;
    by[static_cast<std::size_t>(LossCause::consumer)] += consumer_drops_;
    return by;
}

}  // namespace ibvcap
