// page_synth: a run's report and run page built by the real timeline, the
// real report and the real page writer from a synthetic run, for the runs no
// machine here can make: a gap of every cause (each witnessed by a counter of
// that cause growing in the gap's window, as the NIC's, kernel's and GPU's
// witnesses grow in a real run: lib/ledger/timeline.hpp), and a long run of
// many streams (24 h x 2,400 streams: bench/run.sh prints its size and build
// time; test/browser/run_page.sh its load time in the browser).
//
//   page_synth --streams N --windows W [--frames F] [--gap-every K] [--seed S]
//              REPORT.json PAGE.html
//
// Each stream sends F frames a window (default 1,000), counted by its own
// sequence tracker in a real ledger. Every K-th window (default 7) one stream
// (in turn) loses 1 to 40 frames; the gaps' causes cycle through every cause
// a gap can have, and the window's witness of that cause grows. A quarter of
// the streams begin a fifth into the run, and one falls silent for a tenth
// of it, so the map shows both; now and then a lost frame arrives late. The
// writers' drops (cause "writer", 17) are set at the end, in the timeline
// only (no writer ran). Prints one line: windows, streams, gaps, the
// report's and the page's bytes, and the milliseconds each step took.
#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "lib/ledger/report.hpp"
#include "lib/ledger/timeline.hpp"
#include "lib/review/run_page.hpp"

namespace {

constexpr std::array kGapCauses{
    ibvcap::LossCause::upstream,          ibvcap::LossCause::port_discards,
    ibvcap::LossCause::receive_queue,     ibvcap::LossCause::ring_hold_limit,
    ibvcap::LossCause::completion_errors, ibvcap::LossCause::port_down,
    ibvcap::LossCause::gpu_xid,           ibvcap::LossCause::kernel,
};

// The witness of each cause, named as the real ones are (lib/sources/).
const char* witness_name(ibvcap::LossCause c) {
    using ibvcap::LossCause;
    switch (c) {
        case LossCause::port_discards:
            return "mlx5_0/port1/hw_counters/rx_discards_phy";
        case LossCause::receive_queue:
            return "mlx5_0/port1/hw_counters/out_of_buffer";
        case LossCause::ring_hold_limit:
            return "ring/hold_limit_hits";
        case LossCause::completion_errors:
            return "verbs/wc_errors";
        case LossCause::port_down:
            return "mlx5_0/port1/link_downed";
        case LossCause::gpu_xid:
            return "gpu/xids";
        case LossCause::kernel:
            return "pcap/ps_drop";
        default:
            return "";
    }
}

int usage() {
    fmt::print(stderr,
               "usage: page_synth --streams N --windows W [--frames F] [--gap-every K] [--seed S] "
               "REPORT.json PAGE.html\n");
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace ibvcap;
    std::size_t streams = 48;
    std::size_t windows = 600;
    std::size_t gap_every = 7;
    std::uint64_t frames = 1000;
    unsigned seed = 1;
    std::vector<std::string> paths;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const auto value = [&]() -> std::size_t {
            if (i + 1 >= argc) {
                std::exit(usage());
            }
            return std::strtoull(argv[++i], nullptr, 10);
        };
        if (a == "--streams") {
            streams = value();
        } else if (a == "--windows") {
            windows = value();
        } else if (a == "--frames") {
            frames = value();
        } else if (a == "--gap-every") {
            gap_every = value();
        } else if (a == "--seed") {
            seed = static_cast<unsigned>(value());
        } else {
            paths.push_back(a);
        }
    }
    if (paths.size() != 2 || streams == 0 || windows == 0 || gap_every == 0 || frames < 2) {
        return usage();
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::mt19937 rng(seed);
    // The streams are the ledger's own, counted by their sequence trackers
    // frame by frame, and the timeline samples the ledger's live copy of
    // them, as the run loop does (lib/run/run_loop.cpp).
    Ledger ledger;
    for (std::size_t s = 0; s < streams; ++s) {
        StreamStats st;
        st.group = Endpoint{0xEF110001U + static_cast<std::uint32_t>(s % 2), 36001};
        st.antenna = 0x0A000000U + 11 + static_cast<std::uint32_t>((s / 2) / 4);
        st.thread = static_cast<std::uint16_t>((s / 2) % 4);
        st.key = st.thread;
        st.frame_bytes = 8256;
        ledger.streams().push_back(st);
    }
    std::vector<std::uint64_t> next(streams, 0);
    std::vector<std::vector<std::uint64_t>> skipped(streams);  // lost, for a late arrival
    std::vector<SourceCounter> witnesses;
    for (const LossCause c : kGapCauses) {
        if (c != LossCause::upstream) {
            witnesses.push_back({witness_name(c), 0, c == LossCause::port_discards, c});
        }
    }
    std::vector<LiveView> lanes(1);
    Timeline timeline(10000);
    std::size_t gaps = 0;
    const std::size_t silent_stream = streams / 3;
    const auto receive = [&](std::size_t s, std::uint64_t index) {
        StreamStats& st = ledger.streams()[s];
        st.sequence.observe(index);
        st.bytes += st.frame_bytes;
        ledger.count_frame(st.frame_bytes);
    };
    for (std::size_t w = 0; w < windows; ++w) {
        const bool gap_window = w > 0 && w % gap_every == 0;
        const std::size_t gap_stream = (w / gap_every) % streams;
        for (std::size_t s = 0; s < streams; ++s) {
            const bool late_start = s % 4 == 3 && w < windows / 5;
            const bool silent =
                s == silent_stream && w >= windows / 2 && w < windows / 2 + windows / 10;
            if (late_start || silent) {
                continue;
            }
            for (std::uint64_t f = 0; f < frames; ++f) {
                if (gap_window && s == gap_stream && f == frames / 2 && next[s] > 0) {
                    const LossCause cause = kGapCauses[(w / gap_every) % kGapCauses.size()];
                    const std::uint64_t lost = 1 + rng() % 40;
                    for (std::uint64_t k = 0; k < lost; ++k) {
                        skipped[s].push_back(next[s]++);
                    }
                    for (SourceCounter& c : witnesses) {
                        if (c.cause == cause) {
                            c.value += lost;
                        }
                    }
                    ++gaps;
                }
                receive(s, next[s]++);
            }
        }
        // Now and then a lost frame of stream 0 turns up late (taken back).
        if (w % (gap_every * 5) == 3 && !skipped[0].empty()) {
            receive(0, skipped[0].back());
            skipped[0].pop_back();
        }
        lanes[0].copy_from(ledger);
        timeline.sample(static_cast<double>(w + 1), lanes, witnesses,
                        (w % 60) * std::uint64_t{1} << 20);
    }
    timeline.set_write_drops(17);
    const auto t1 = std::chrono::steady_clock::now();
    for (const SourceCounter& c : witnesses) {
        ledger.add_source_counter(c);
    }
    RunInfo info;
    info.command = "page_synth";
    info.run_id = fmt::format("synthetic-{}", seed);
    info.duration_s = static_cast<double>(windows);
    info.timeline = std::move(timeline);
    const nlohmann::json report = report_json(ledger, info);
    write_report(paths[0], report);
    const auto t2 = std::chrono::steady_clock::now();
    write_run_page(paths[1], report);
    const auto t3 = std::chrono::steady_clock::now();
    const auto ms = [](auto a, auto b) {
        return std::chrono::duration<double, std::milli>(b - a).count();
    };
    std::ifstream page(paths[1], std::ios::binary | std::ios::ate);
    std::ifstream rep(paths[0], std::ios::binary | std::ios::ate);
    fmt::print(
        "page_synth: {} windows x {} streams, {} gaps; report {} bytes, page {} bytes; timeline "
        "{:.0f} ms, report {:.0f} ms, page {:.0f} ms\n",
        windows, streams, gaps, static_cast<long long>(rep.tellg()),
        static_cast<long long>(page.tellg()), ms(t0, t1), ms(t1, t2), ms(t2, t3));
    return 0;
}
