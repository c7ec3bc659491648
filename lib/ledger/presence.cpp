#include "lib/ledger/presence.hpp"

#include <algorithm>
#include <limits>

#include "lib/ledger/timeline.hpp"

namespace ibvcap {

namespace {
std::uint32_t saturating_add(std::uint32_t a, std::uint64_t b) {
    constexpr std::uint64_t top = std::numeric_limits<std::uint32_t>::max();
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(top, std::uint64_t{a} + b));
}
}  // namespace

void Presence::begin_window(double t, double started_at_unix) {
    if (windows_ == 0) {
        started_at_ = started_at_unix;
    }
    if (windows_ / windows_per_bin_ >= kMaxBins) {
        halve();
    }
    const std::size_t bin = windows_ / windows_per_bin_;
    if (bin_ends_.size() <= bin) {
        bin_ends_.resize(bin + 1, t);
    }
    bin_ends_[bin] = t;
    ++windows_;
}

// Pairs of bins merge into one: the run outgrew kMaxBins bins.
void Presence::halve() {
    const auto merge = [](auto& v, auto&& combine) {
        const std::size_t n = (v.size() + 1) / 2;
        for (std::size_t i = 0; i < n; ++i) {
            v[i] = 2 * i + 1 < v.size() ? combine(v[2 * i], v[2 * i + 1]) : v[2 * i];
        }
        v.resize(n);
    };
    merge(bin_ends_, [](double, double later) { return later; });
    for (Row& r : rows_) {
        merge(r.cells, [](const Cell& a, const Cell& b) {
            return Cell{saturating_add(a.present, b.present), saturating_add(a.missing, b.missing),
                        static_cast<std::uint16_t>(a.causes | b.causes)};
        });
    }
    windows_per_bin_ *= 2;
}

Presence::Cell& Presence::cell(Row& row) {
    const std::size_t bin = bin_ends_.empty() ? 0 : bin_ends_.size() - 1;
    if (row.cells.size() <= bin) {
        row.cells.resize(bin + 1);
    }
    return row.cells[bin];
}

std::size_t Presence::add_row(const LiveStream& s) {
    Row row;
    row.stream = stream_label(s);
    row.group = s.group;
    row.antenna = s.antenna;
    row.thread = s.thread;
    rows_.push_back(std::move(row));
    return rows_.size() - 1;
}

void Presence::stream(std::size_t index, const LiveStream& s, std::uint64_t opened, LossCause cause,
                      std::uint64_t taken_back) {
    Row& row = rows_[index];
    // A copy may lag the one before by a poll batch: counts never go back.
    const std::uint64_t packets = std::max(s.packets, row.last_packets);
    const std::uint64_t duplicates = std::max(s.duplicates, row.last_duplicates);
    const std::uint64_t grown = packets - row.last_packets;
    const std::uint64_t grown_duplicates = duplicates - row.last_duplicates;
    const std::uint64_t present = grown - std::min(grown, grown_duplicates);
    row.last_packets = packets;
    row.last_duplicates = duplicates;
    if (present == 0 && opened == 0 && taken_back == 0) {
        return;  // a silent window leaves the row's cells as they are
    }
    Cell& now = cell(row);
    now.present = saturating_add(now.present, present);
    row.present += present;
    if (opened > 0) {
        now.missing = saturating_add(now.missing, opened);
        now.causes = static_cast<std::uint16_t>(now.causes | (1U << static_cast<unsigned>(cause)));
        row.missing += opened;
    }
    // Late frames fill the stream's newest gaps first (Timeline::take_back).
    std::uint64_t back = std::min(taken_back, row.missing);
    row.missing -= back;
    for (std::size_t i = row.cells.size(); i-- > 0 && back > 0;) {
        Cell& c = row.cells[i];
        const std::uint32_t k =
            static_cast<std::uint32_t>(std::min<std::uint64_t>(c.missing, back));
        c.missing -= k;
        back -= k;
        if (c.missing == 0) {
            c.causes = 0;
        }
    }
}

}  // namespace ibvcap

namespace ibvcap {

nlohmann::json presence_json(const Presence& presence) {
    nlohmann::json streams = nlohmann::json::array();
    for (const Presence::Row& r : presence.rows()) {
        nlohmann::json active = nlohmann::json::array();
        nlohmann::json cells = nlohmann::json::array();
        std::size_t from = 0;
        bool open = false;
        for (std::size_t b = 0; b <= r.cells.size(); ++b) {
            const bool on =
                b < r.cells.size() && (r.cells[b].present > 0 || r.cells[b].missing > 0);
            if (on && !open) {
                from = b;
            } else if (!on && open) {
                active.push_back({from, b - 1});
            }
            open = on;
            if (on && r.cells[b].missing > 0) {
                nlohmann::json causes = nlohmann::json::array();
                for (std::size_t c = 0; c < kLossCauseCount; ++c) {
                    if ((static_cast<unsigned>(r.cells[b].causes) >> c) & 1U) {
                        causes.push_back(to_string(static_cast<LossCause>(c)));
                    }
                }
                cells.push_back({b, r.cells[b].present, r.cells[b].missing, std::move(causes)});
            }
        }
        streams.push_back({{"stream", r.stream},
                           {"group", r.group.to_string()},
                           {"antenna", format_ipv4(r.antenna)},
                           {"thread", r.thread},
                           {"present", r.present},
                           {"missing", r.missing},
                           {"active", std::move(active)},
                           {"cells", std::move(cells)}});
    }
    return {{"started_at", presence.started_at()},
            {"windows_per_bin", presence.windows_per_bin()},
            {"bin_s", presence.windows_per_bin()},
            {"bins", presence.bin_ends().size()},
            {"t", presence.bin_ends()},
            {"streams", std::move(streams)}};
}

}  // namespace ibvcap
