#include "lib/run/scan_queue.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "lib/core/utc.hpp"
#include "lib/run/run_lanes.hpp"

namespace ibvcap {

RunSettings scan_cut(const RunSettings& settings, const Scan& scan) {
    RunSettings cut = settings;
    cut.scans.clear();
    cut.scan_done = nullptr;
    cut.demux.window = scan.window;
    cut.scan_name = scan.name;
    cut.outputs.output_dir =
        (std::filesystem::path(settings.outputs.output_dir) / scan.name).string();
    return cut;
}

RunSettings idle_cut(const RunSettings& settings) {
    RunSettings cut = settings;
    cut.scans.clear();
    cut.scan_done = nullptr;
    cut.demux.window.reset();
    cut.scan_name.clear();
    cut.outputs.formats.clear();  // no writer, no file
    cut.observer = nullptr;       // (-v's lines are the scans' frames)
    return cut;
}

ScanQueue::ScanQueue(const RunSettings& settings, std::string input_file)
    : settings_(settings), input_file_(std::move(input_file)) {}

void ScanQueue::hold(const Scan& scan) {
    if (settings_.outputs.formats.empty() || locks_.count(scan.name) > 0) {
        return;
    }
    const RunSettings cut = scan_cut(settings_, scan);
    prepare_output_dir(cut.outputs.output_dir);
    // A scan's directory is made as the capture is then (root, before a
    // --user drop, or a scan admitted later): it goes to whoever owns -o DIR,
    // which a capture that drops to a user must be able to write already.
    struct stat parent {};
    if (::geteuid() == 0 && ::stat(settings_.outputs.output_dir.c_str(), &parent) == 0 &&
        parent.st_uid != 0 &&
        ::chown(cut.outputs.output_dir.c_str(), parent.st_uid, parent.st_gid) != 0) {
        throw std::runtime_error(fmt::format("cannot give {} to the owner of {}: {}",
                                             cut.outputs.output_dir, settings_.outputs.output_dir,
                                             std::strerror(errno)));
    }
    OutputDirLock lock(cut.outputs.output_dir);
    // Every name the scan may write, checked now: the disk threads never
    // find an earlier capture's file in their way.
    claim_outputs(cut.outputs, input_file_, settings_.writer.direct_io);
    locks_.emplace(scan.name, std::move(lock));
}

void ScanQueue::let_go(const std::string& name) {
    const auto it = locks_.find(name);
    if (it == locks_.end()) {
        return;
    }
    locks_.erase(it);
    std::error_code ec;  // (removed only while empty: nothing was written)
    std::filesystem::remove(std::filesystem::path(settings_.outputs.output_dir) / name, ec);
}

void ScanQueue::admit(const std::vector<Scan>& scans) {
    for (const Scan& s : scans) {
        hold(s);
        to_come_.push_back(s);
    }
}

Scan ScanQueue::pop() {
    Scan s = std::move(to_come_.front());
    to_come_.pop_front();
    used_.insert(s.name);
    return s;
}

bool ScanQueue::used(const std::string& name) const {
    return used_.count(name) > 0 || std::any_of(to_come_.begin(), to_come_.end(),
                                                [&](const Scan& s) { return s.name == name; });
}

void ScanQueue::push_front(const Scan& scan) {
    if (used(scan.name)) {
        throw std::runtime_error(fmt::format(
            "scan {} was recorded or is scheduled in this capture: give another name", scan.name));
    }
    hold(scan);
    to_come_.push_front(scan);
}

std::string ScanQueue::replace(const std::vector<Scan>& scans, std::int64_t after_ns) {
    std::vector<Scan> keep;
    std::vector<std::string> dropped;
    for (const Scan& s : scans) {
        if (used_.count(s.name) > 0) {
            continue;  // recorded, or under way
        }
        if (s.window.start_ns < after_ns) {
            dropped.push_back(s.name);
            continue;
        }
        keep.push_back(s);
    }
    // The new scans' directories first: a refusal changes nothing.
    std::vector<std::string> held;
    try {
        for (const Scan& s : keep) {
            if (locks_.count(s.name) == 0) {
                hold(s);
                held.push_back(s.name);
            }
        }
    } catch (...) {
        for (const std::string& name : held) {
            let_go(name);
        }
        throw;
    }
    for (const Scan& s : to_come_) {
        if (std::none_of(keep.begin(), keep.end(),
                         [&](const Scan& k) { return k.name == s.name; })) {
            let_go(s.name);
        }
    }
    to_come_.assign(keep.begin(), keep.end());
    std::string said = fmt::format("{} scan{} to come", keep.size(), keep.size() == 1 ? "" : "s");
    if (!keep.empty()) {
        said += fmt::format(", the next {} at {}", keep.front().name,
                            format_utc_instant(keep.front().window.start_ns));
    }
    if (!dropped.empty()) {
        std::string names;
        for (const std::string& n : dropped) {
            names += (names.empty() ? "" : ", ") + n;
        }
        said += fmt::format(
            "; left out, as they start before the scan under way can end and close: {}", names);
    }
    return said;
}

std::int64_t scan_after_ns(const Scan* under_way, std::int64_t now_ns, double grace_s) {
    if (under_way == nullptr || !under_way->window.has_stop()) {
        return now_ns;
    }
    return under_way->window.stop_ns + static_cast<std::int64_t>((grace_s + kScanSetUpS) * 1e9);
}

bool ScanQueue::due(std::int64_t now_ns, bool control) const {
    if (to_come_.empty()) {
        return false;
    }
    const Scan& next = to_come_.front();
    return !control || next.line == 0 ||
           next.window.start_ns - now_ns <= static_cast<std::int64_t>(kScanSetUpS * 1e9);
}

std::string ScanQueue::reload(const std::function<std::vector<Scan>()>& read,
                              std::int64_t after_ns) {
    try {
        return fmt::format("the schedule was read again: {}", replace(read(), after_ns));
    } catch (const std::exception& e) {
        return fmt::format(
            "the schedule was not read again: {}; the scans to come are as they were", e.what());
    }
}

std::string answer_request(std::string_view request, ControlState& state, ScanQueue& queue) {
    const auto now_ns = static_cast<std::int64_t>(wall_clock_ns());
    std::vector<std::string> words;
    for (std::size_t at = 0; at < request.size();) {
        const auto end = std::min(request.find(' ', at), request.size());
        if (end > at) {
            words.emplace_back(request.substr(at, end - at));
        }
        at = end + 1;
    }
    const auto when = [](std::int64_t ns) {
        return ns == FrameWindow::kOpen ? std::string("its stop request") : format_utc_instant(ns);
    };
    const std::string next = queue.empty()
                                 ? std::string()
                                 : fmt::format("; next {} at {}", queue.front().name,
                                               format_utc_instant(queue.front().window.start_ns));
    if (words.size() == 1 && words[0] == "status") {
        return state.under_way != nullptr
                   ? fmt::format("ok scan {} from {} to {}, {} frames captured{}",
                                 state.under_way->name,
                                 format_utc_instant(state.under_way->window.start_ns),
                                 when(state.under_way->window.stop_ns), state.frames, next)
                   : fmt::format("ok idle, {} frames captured{}", state.frames,
                                 next.empty() ? "; no scan to come" : next);
    }
    if (words.size() == 1 && words[0] == "next") {
        return queue.empty() ? std::string("ok none")
                             : fmt::format("ok {} {} {}", queue.front().name,
                                           format_utc_instant(queue.front().window.start_ns),
                                           when(queue.front().window.stop_ns));
    }
    if (words.size() == 1 && words[0] == "stop") {
        if (state.under_way == nullptr || state.stop_requested) {
            return "error: no scan is under way";
        }
        state.stop_requested = true;
        return fmt::format("ok stopping {}: its report follows once its files are closed",
                           state.under_way->name);
    }
    if (!words.empty() && words[0] == "start" && (words.size() == 2 || words.size() == 3)) {
        if (state.under_way != nullptr) {
            return fmt::format("error: scan {} is under way: stop it first", state.under_way->name);
        }
        if (!valid_scan_name(words[1])) {
            return fmt::format(
                "error: bad scan name '{}': 1 to 64 letters, digits, '.', "
                "'_' or '-', not starting with '.'",
                words[1]);
        }
        Scan scan;
        scan.name = words[1];
        scan.window.start_ns = static_cast<std::int64_t>(now_ns);
        if (words.size() == 3) {
            const auto stop_ns = parse_utc_instant(words[2]);
            if (!stop_ns || *stop_ns <= scan.window.start_ns) {
                return fmt::format(
                    "error: bad STOP '{}': a UTC time after now ({}), as "
                    "2026-11-29T10:00:00Z",
                    words[2], format_utc_instant(scan.window.start_ns));
            }
            scan.window.stop_ns = *stop_ns;
        }
        if (!queue.empty()) {
            // (No stop: it would run into the scheduled scan.)
            const std::int64_t need = scan.window.has_stop()
                                          ? scan_after_ns(&scan, now_ns, state.grace_s)
                                          : FrameWindow::kOpen;
            if (need > queue.front().window.start_ns) {
                return fmt::format(
                    "error: scan {} is scheduled at {}: give a STOP at least {:g} s before it",
                    queue.front().name, format_utc_instant(queue.front().window.start_ns),
                    state.grace_s + kScanSetUpS);
            }
        }
        try {
            queue.push_front(scan);
        } catch (const std::exception& e) {
            return fmt::format("error: {}", e.what());
        }
        return fmt::format("ok starting {} at {} until {}", scan.name,
                           format_utc_instant(scan.window.start_ns), when(scan.window.stop_ns));
    }
    return "error: unknown request; ask status, next, start NAME [STOP] or stop";
}

}  // namespace ibvcap
