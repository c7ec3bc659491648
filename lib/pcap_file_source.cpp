#include "lib/pcap_file_source.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace ibvcap {

PcapFileSource::PcapFileSource(const std::string& path) : path_(path) {
    char errbuf[PCAP_ERRBUF_SIZE] = {};
    // Nanosecond precision: libpcap scales microsecond files up, so timestamps
    // of either kind arrive in nanoseconds.
    pcap_ =
        pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, errbuf);
    if (pcap_ == nullptr) {
        throw std::runtime_error(fmt::format("cannot read {}: {}", path, errbuf));
    }
    const int link = pcap_datalink(pcap_);
    if (link != DLT_EN10MB) {
        const char* name = pcap_datalink_val_to_name(link);
        pcap_close(pcap_);
        pcap_ = nullptr;
        throw std::runtime_error(fmt::format(
            "cannot read {}: link type {} ({}) is not Ethernet; capture with tcpdump -i "
            "<interface> rather than -i any",
            path, link, name != nullptr ? name : "unknown"));
    }
}

PcapFileSource::~PcapFileSource() {
    if (pcap_ != nullptr) {
        pcap_close(pcap_);
    }
}

PcapFileSource::Result PcapFileSource::run(Demux& demux, std::uint64_t max_frames,
                                           const std::atomic<bool>& stop) {
    Result result;
    for (;;) {
        if (stop.load(std::memory_order_relaxed) ||
            (max_frames != 0 && result.frames >= max_frames)) {
            return result;
        }
        pcap_pkthdr* header = nullptr;
        const u_char* data = nullptr;
        const int rc = pcap_next_ex(pcap_, &header, &data);
        if (rc == PCAP_ERROR_BREAK) {  // -2: end of file
            result.complete = true;
            return result;
        }
        if (rc != 1) {
            result.error =
                fmt::format("{}: {} (after {} frames)", path_, pcap_geterr(pcap_), result.frames);
            return result;
        }
        Frame frame;
        frame.head = Bytes(data, header->caplen);
        frame.wire_bytes = header->len;
        frame.timestamp_ns = static_cast<std::uint64_t>(header->ts.tv_sec) * 1'000'000'000u +
                             static_cast<std::uint64_t>(header->ts.tv_usec);  // ns here
        demux.on_frame(frame);
        ++result.frames;
    }
}

}  // namespace ibvcap
