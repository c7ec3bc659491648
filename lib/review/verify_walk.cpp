// `ibvcap verify`'s walks of one output file (lib/review/verify_walk.hpp).
#include "lib/review/verify_walk.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstring>

#include "formats/codif.hpp"
#include "formats/vdif.hpp"
#include "lib/sources/pcap_file.hpp"

namespace ibvcap::verify_parts {

Wrapper::Wrapper(Endpoint group, std::uint32_t antenna) {
    spec_.dst_ip = group.ip;
    spec_.dst_port = group.port;
    spec_.src_ip = antenna;
    spec_.src_port = group.port;
}

Frame Wrapper::frame(Bytes bytes, std::uint64_t frame_bytes) {
    scratch_.resize(kPlainUdpPayloadOffset + bytes.size());
    const std::size_t h =
        build_udp_headers(spec_, static_cast<std::uint32_t>(frame_bytes), MutableBytes(scratch_));
    std::memcpy(scratch_.data() + h, bytes.data(), bytes.size());
    Frame f;
    f.head = Bytes(scratch_.data(), h + bytes.size());
    f.wire_bytes = static_cast<std::uint32_t>(h + frame_bytes);
    return f;
}

namespace {
// The largest CODIF frame a UDP/IPv4 datagram carries (65535 - 20 - 8).
constexpr std::uint64_t kMaxDatagram = 65507;

}  // namespace

Walk walk_codif(Bytes file, bool headers_only, Wrapper& wrap, Demux& demux) {
    Walk w;
    std::size_t at = 0;
    while (at < file.size()) {
        const Bytes rest = file.subspan(at);
        CodifHeader h;
        if (rest.size() < kCodifHeaderBytes) {
            w.error = fmt::format("truncated: {} bytes at byte {} are not a whole CODIF header",
                                  rest.size(), at);
            return w;
        }
        if (const CodifError e = decode_codif(rest.first(kCodifHeaderBytes), h);
            e != CodifError::none) {
            w.error = fmt::format("record {} at byte {} is not a CODIF header ({})", w.frames + 1,
                                  at, to_string(e));
            return w;
        }
        // The header's own frame length (CodifHeader::frame_bytes, whatever
        // the layout), never trusted past the file or a datagram.
        const std::uint64_t frame_bytes = h.frame_bytes();
        if (frame_bytes > kMaxDatagram) {
            w.error = fmt::format(
                "record {} at byte {}: frame length {} is more than a UDP "
                "datagram carries",
                w.frames + 1, at, frame_bytes);
            return w;
        }
        const std::uint64_t held = headers_only ? kCodifHeaderBytes : frame_bytes;
        if (held > rest.size()) {
            w.error = fmt::format("truncated: the last frame at byte {} has {} of its {} bytes", at,
                                  rest.size(), held);
            return w;
        }
        demux.on_frame(wrap.frame(rest.first(held), frame_bytes));
        ++w.frames;
        at += held;
    }
    return w;
}

// vdif: VDIF frames back to back (formats/output.hpp), each as long as its
// header's frame length says, fed to a demux that reads its group as VDIF.
Walk walk_vdif(Bytes file, Wrapper& wrap, Demux& demux) {
    Walk w;
    std::size_t at = 0;
    while (at < file.size()) {
        const Bytes rest = file.subspan(at);
        VdifHeader h;
        if (const VdifError e = decode_vdif(rest, h); e != VdifError::none) {
            w.error = fmt::format(
                "truncated or damaged: record {} at byte {} is not a VDIF "
                "header ({})",
                w.frames + 1, at, to_string(e));
            return w;
        }
        const std::uint64_t frame_bytes = h.frame_bytes();
        if (frame_bytes <= h.header_bytes() || frame_bytes > kMaxDatagram) {
            w.error = fmt::format("record {} at byte {}: frame length {} is not a VDIF frame's",
                                  w.frames + 1, at, frame_bytes);
            return w;
        }
        if (frame_bytes > rest.size()) {
            w.error = fmt::format("truncated: the last frame at byte {} has {} of its {} bytes", at,
                                  rest.size(), frame_bytes);
            return w;
        }
        demux.on_frame(wrap.frame(rest.first(frame_bytes), frame_bytes));
        ++w.frames;
        at += frame_bytes;
    }
    return w;
}

// raw: whole Ethernet frames back to back, no record lengths (formats/output.hpp):
// each frame's length is its headers' (IPv4 total length; the parser checks the
// UDP length against it), which holds for the stream frames the raw files get.
Walk walk_raw(Bytes file, Demux& demux) {
    Walk w;
    std::size_t at = 0;
    while (at < file.size()) {
        const Bytes rest = file.subspan(at);
        UdpPacket p;
        if (const PacketError e = parse_udp_frame(rest, rest.size(), p); e != PacketError::none) {
            w.error = fmt::format(
                "{} at byte {} (record {}): {}",
                e == PacketError::bad_ip_total_length || e == PacketError::truncated_udp ||
                        e == PacketError::truncated_ipv4 || e == PacketError::truncated_ethernet
                    ? "truncated or damaged"
                    : "damaged",
                at, w.frames + 1, to_string(e));
            return w;
        }
        const std::size_t len = std::size_t{p.payload_offset} + p.payload_bytes;
        Frame f;
        f.head = rest.first(len);
        f.wire_bytes = static_cast<std::uint32_t>(len);
        demux.on_frame(f);
        ++w.frames;
        at += len;
    }
    return w;
}

Walk walk_pcap(const std::string& path, Demux& demux) {
    Walk w;
    try {
        PcapFileSource source(path);
        const std::atomic<bool> stop{false};
        const auto r = source.run(demux, 0, stop);
        w.frames = r.frames;
        if (!r.error.empty()) {
            w.error = r.error;
        }
    } catch (const std::exception& e) {
        w.error = e.what();
    }
    return w;
}

}  // namespace ibvcap::verify_parts
