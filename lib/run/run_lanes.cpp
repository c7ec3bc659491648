// A run's lanes (lib/run/run_lanes.hpp) and what run_source reads across
// them: the writers' figures, the witnesses, the counts on SIGUSR1 and the
// stop's acknowledgement, the pcapng files' statistics, the streams whose
// files are made before the first frame.
#include "lib/run/run_lanes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <set>
#include <tuple>

#include "lib/run/console.hpp"

namespace ibvcap {

std::optional<std::uint64_t> sum_writers(const RunLanes& lanes,
                                         std::uint64_t (Writer::*figure)() const) {
    std::optional<std::uint64_t> sum;
    for (const auto& l : lanes) {
        if (l->writer) {
            sum = sum.value_or(0) + ((*l->writer).*figure)();
        }
    }
    return sum;
}

void acknowledge_stop(Console* out, const std::string& command, int sig, const RunLanes& lanes) {
    if (out == nullptr) {
        return;
    }
    const auto backlog = sum_writers(lanes, &Writer::backlog_bytes);
    const bool escalates = sig != SIGHUP && sig != SIGPIPE;
    std::string name = signal_name(sig).substr(3);  // "term"
    for (auto& c : name) {
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    const std::string by = sig == SIGINT || sig <= 0 ? std::string() : " (SIG" + name + ")";
    const std::string again = !escalates                 ? "Ctrl-C to"
                              : sig > 0 && sig != SIGINT ? "SIG" + name + " or Ctrl-C again to"
                                                         : "Ctrl-C again to";
    const std::string line =
        backlog ? fmt::format("ibvcap {}: stopping{}: writing {:.1f} MiB; {} abandon it\n", command,
                              by, double(*backlog) / double(1 << 20), again)
                : fmt::format("ibvcap {}: stopping{}; {} stop at once\n", command, by, again);
    out->try_write(line);
}

std::vector<SourceCounter> all_witnesses(const Source& source, const RunSettings& settings,
                                         const RunLanes& lanes) {
    std::vector<SourceCounter> out = source.witnesses();
    for (const auto& w : settings.witnesses) {
        for (auto& c : w()) {
            out.push_back(std::move(c));
        }
    }
    if (const auto dropped = sum_writers(lanes, &Writer::dropped_so_far)) {
        out.push_back({"writer/dropped", *dropped, false, LossCause::writer});
    }
    if (settings.dada != nullptr) {
        // Frames a PSRDADA ring had no room for: its reader was behind.
        out.push_back(
            {"dada/consumer", settings.dada->consumer_so_far(), false, LossCause::consumer});
    }
    return out;
}

void print_counts(const RunSettings& settings, const Source& source, const RunLanes& lanes,
                  double seconds) {
    if (settings.notices == nullptr) {
        return;
    }
    const SourceFigures f = source.figures();
    std::string witnessed;  // (the writers' drops among them: all_witnesses)
    for (const auto& w : all_witnesses(source, settings, lanes)) {
        if (w.value > 0 && w.cause != LossCause::none) {
            witnessed += fmt::format("{}{} {}", witnessed.empty() ? "" : ", ", w.name, w.value);
        }
    }
    const auto backlog = sum_writers(lanes, &Writer::backlog_bytes);
    settings.notices->try_write(fmt::format(
        "ibvcap {}: after {:.1f} s: {} frames{} received{}; {}\n", settings.command, seconds,
        f.packets, f.bytes ? fmt::format(", {} bytes", *f.bytes) : std::string(),
        backlog ? fmt::format("; writer backlog {:.1f} MiB", double(*backlog) / double(1 << 20))
                : std::string(),
        witnessed.empty() ? "no loss witnessed so far" : "witnessed: " + witnessed));
}

std::uint64_t wall_clock_ns() {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
}

std::string lane_interface(const Source& source, std::size_t lane) {
    const std::string input = source.input();
    if (source.lanes() < 2) {
        return input;
    }
    std::size_t begin = 0;
    for (std::size_t i = 0; i < lane && begin != std::string::npos; ++i) {
        begin = input.find(',', begin);
        begin = begin == std::string::npos ? begin : begin + 1;
    }
    if (begin == std::string::npos) {
        return input;
    }
    return input.substr(begin, input.find(',', begin) - begin);
}

bool lanes_write_pcapng(const RunLanes& lanes) {
    return std::any_of(lanes.begin(), lanes.end(), [](const auto& l) {
        return l->files && l->files->interface_counts() != nullptr;
    });
}

// The pcapng files' counts (interface_counts), for every lane that writes
// one: once a second from the witnesses, and once more before the writers
// close. A live run's statistics span the run's wall-clock time.
void publish_interface_counts(const RunLanes& lanes, const std::vector<LiveView>& views,
                              const Source& source, std::span<const SourceCounter> witnesses,
                              std::uint64_t start_wall_ns, bool final) {
    for (std::size_t i = 0; i < lanes.size(); ++i) {
        InterfaceCountsBox* box = lanes[i]->files ? lanes[i]->files->interface_counts() : nullptr;
        if (box == nullptr) {
            continue;
        }
        const std::string name = lanes.size() > 1 ? lane_interface(source, i) : "";
        const std::uint64_t delivered =
            final ? lanes[i]->ledger.packets() : (i < views.size() ? views[i].packets : 0);
        InterfaceCounts c = interface_counts(
            witnesses, delivered, std::string_view(name).substr(0, name.find(':')), source.live());
        if (source.live()) {
            c.start_ns = start_wall_ns;
            c.end_ns = wall_clock_ns();
        }
        box->publish(c);
    }
}

InterfaceCounts interface_counts(std::span<const SourceCounter> witnesses, std::uint64_t delivered,
                                 std::string_view device, bool live) {
    InterfaceCounts c;
    c.ifrecv = delivered;
    if (!live) {
        return c;
    }
    std::uint64_t ifdrop = 0;
    std::uint64_t osdrop = 0;
    for (const auto& w : witnesses) {
        const std::string_view name = w.name;
        if (name == "pcap/ps_recv") {
            c.filteraccept = w.value;  // pcap_stats(3PCAP): frames that passed the filter
        }
        if (!w.is_drop ||
            (!device.empty() && !(name.size() > device.size() && name.starts_with(device) &&
                                  name[device.size()] == '/'))) {
            continue;
        }
        ifdrop += w.value;
        if (w.cause == LossCause::kernel || w.cause == LossCause::receive_queue ||
            w.cause == LossCause::ring_hold_limit) {
            osdrop += w.value;
        }
    }
    c.ifdrop = ifdrop;
    c.osdrop = osdrop;
    return c;
}

std::vector<std::pair<Endpoint, std::uint32_t>> planned_streams(const RunSettings& settings,
                                                                std::size_t max_outputs,
                                                                std::string& note) {
    const auto formats = static_cast<std::size_t>(std::count_if(
        settings.outputs.formats.begin(), settings.outputs.formats.end(), per_antenna));
    std::set<std::tuple<std::uint32_t, std::uint16_t, std::uint32_t>> seen;
    std::vector<std::pair<Endpoint, std::uint32_t>> planned;
    const auto add = [&](const Endpoint& g, std::uint32_t a) {
        if (seen.emplace(g.ip, g.port, a).second) {
            planned.emplace_back(g, a);
        }
    };
    if (formats == 0) {
        return planned;
    }
    for (const Endpoint& g : settings.demux.groups) {
        for (const std::uint32_t a : settings.demux.antennas) {
            add(g, a);
        }
    }
    if (settings.expect && !settings.expect->shorthand) {
        for (const auto& g : settings.expect->groups) {
            for (const auto& a : g.antennas) {
                add(g.group, a.ip);
            }
        }
    }
    if (planned.size() * formats + settings.outputs.formats.size() > max_outputs) {
        note = fmt::format(
            "the options name {} (group, antenna) pairs, {} files with the per-antenna formats, "
            "more than the writer's {} outputs: none was made ahead, each is made at its "
            "stream's first frame",
            planned.size(), planned.size() * formats, max_outputs);
        planned.clear();
    }
    return planned;
}

}  // namespace ibvcap
