#include "lib/run/run_sampler.hpp"

#include "lib/run/run_window.hpp"

namespace ibvcap {

void SecondSampler::begin(Clock::time_point start, std::vector<SourceCounter> base,
                          std::size_t lanes) {
    start_ = start;
    base_ = std::move(base);
    views_.assign(lanes, LiveView{});
    pending_ = Pending{};
}

void SecondSampler::sample(Timeline& into, Clock::time_point at,
                           std::vector<SourceCounter> witnesses, const RunLanes& lanes) {
    witnesses_ = less_counters(std::move(witnesses), base_);  // the scan's share
    into.sample(std::chrono::duration<double>(at - start_).count(), views_, witnesses_,
                sum_writers(lanes, &Writer::backlog_bytes).value_or(0));
}

bool SecondSampler::ask(Timeline& into, Clock::time_point now, const RunLanes& lanes,
                        std::vector<SourceCounter> witnesses, bool demux_on_loop_thread) {
    if (demux_on_loop_thread) {
        for (std::size_t i = 0; i < lanes.size(); ++i) {
            views_[i].copy_from(lanes[i]->ledger);
        }
        sample(into, now, std::move(witnesses), lanes);
        return true;
    }
    const bool sampled = pending_.open;
    if (pending_.open) {  // the last copies never came: sample what there is
        sample(into, pending_.at, std::move(pending_.witnesses), lanes);
    }
    pending_.open = true;
    pending_.at = now;
    pending_.witnesses = std::move(witnesses);
    pending_.copies.assign(lanes.size(), 0);
    for (std::size_t i = 0; i < lanes.size(); ++i) {
        pending_.copies[i] = views_[i].copies;
        lanes[i]->live.request();
    }
    return sampled;
}

bool SecondSampler::collect(Timeline& into, Clock::time_point now, const RunLanes& lanes) {
    if (!pending_.open) {
        return false;
    }
    bool all = true;
    for (std::size_t i = 0; i < lanes.size(); ++i) {
        if (views_[i].copies == pending_.copies[i]) {
            LiveView v = lanes[i]->live.read();
            if (v.copies != pending_.copies[i]) {
                views_[i] = std::move(v);
            } else {
                all = false;
            }
        }
    }
    if (!all && now - pending_.at < copy_wait_) {
        return false;
    }
    sample(into, pending_.at, std::move(pending_.witnesses), lanes);
    pending_.open = false;
    return true;
}

void SecondSampler::close(Timeline& into, Clock::time_point now, const RunLanes& lanes,
                          std::vector<SourceCounter> witnesses) {
    if (pending_.open) {
        sample(into, pending_.at, std::move(pending_.witnesses), lanes);
        pending_.open = false;
    }
    for (std::size_t i = 0; i < lanes.size(); ++i) {
        views_[i].copy_from(lanes[i]->ledger);
    }
    sample(into, now, std::move(witnesses), lanes);
}

}  // namespace ibvcap
