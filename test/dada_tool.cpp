// The e2e tests' stand-in for psrdada's tools (psrdada is not in Debian):
// makes and removes a ring as dada_db does, reads one transfer as
// dada_dbdisk does, stalling as a slow pipeline would, and compares what it
// read with an ordered file. Built from test/dada_rings.hpp, which is written
// from psrdada's facts independently of ibvcap's writer.
//
//   dada_tool create KEY BLOCKS BLOCK_BYTES    (it stays, as dada_db's)
//   dada_tool destroy KEY                      (as dada_db -d)
//   dada_tool read KEY OUT [AFTER_BLOCKS STALL_MS]
//   dada_tool compare RING_DATA ORDERED_FILE HEADER_BYTES PAYLOAD_BYTES
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "dada_rings.hpp"
#include "formats/fill_frame.hpp"

namespace {

std::vector<std::uint8_t> slurp(const char* path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

int usage() {
    std::fprintf(
        stderr,
        "usage: dada_tool create KEY BLOCKS BLOCK_BYTES | destroy KEY | read KEY OUT [AFTER_BLOCKS "
        "STALL_MS] | compare RING_DATA ORDERED_FILE HEADER_BYTES PAYLOAD_BYTES\n");
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace ibvcap;
    if (argc < 2) {
        return usage();
    }
    const std::string cmd = argv[1];
    if (cmd == "create" && argc == 5) {
        const auto key = parse_dada_key(argv[2]);
        if (!key) {
            return usage();
        }
        test::MadeRing ring(*key, std::strtoull(argv[3], nullptr, 10),
                            std::strtoull(argv[4], nullptr, 10));
        ring.keep();
        std::printf("created\n");
        return 0;
    }
    if (cmd == "destroy" && argc == 3) {
        const auto key = parse_dada_key(argv[2]);
        return key && test::destroy_ring(*key) ? 0 : 1;
    }
    if (cmd == "read" && (argc == 4 || argc == 6)) {
        const auto key = parse_dada_key(argv[2]);
        if (!key) {
            return usage();
        }
        const long after = argc == 6 ? std::strtol(argv[4], nullptr, 10) : -1;
        const long stall_ms = argc == 6 ? std::strtol(argv[5], nullptr, 10) : 0;
        test::RingReader header(*key + 1);
        test::RingReader data(*key);
        if (!header.lock() || !data.lock()) {
            std::fprintf(stderr, "dada_tool: no reader place free\n");
            return 1;
        }
        std::printf("reading\n");
        std::fflush(stdout);
        std::uint64_t bytes = 0;
        const std::uint8_t* h = header.next(bytes, 60000);
        if (h == nullptr) {
            std::fprintf(stderr, "dada_tool: no header came\n");
            return 1;
        }
        std::ofstream(std::string(argv[3]) + ".hdr", std::ios::binary)
            .write(reinterpret_cast<const char*>(h),
                   static_cast<std::streamsize>(strnlen(reinterpret_cast<const char*>(h), bytes)));
        header.clear();
        std::ofstream out(argv[3], std::ios::binary);
        long blocks = 0;
        bool ended = false;
        while (const std::uint8_t* d = data.next(bytes, 30000)) {
            out.write(reinterpret_cast<const char*>(d), static_cast<std::streamsize>(bytes));
            ended = data.clear();
            if (++blocks == after) {
                // A pipeline that stops for a while: the ring fills behind it.
                std::this_thread::sleep_for(std::chrono::milliseconds(stall_ms));
            }
            if (ended) {
                break;
            }
        }
        std::printf("blocks %ld ended %d\n", blocks, ended ? 1 : 0);
        return ended ? 0 : 1;
    }
    if (cmd == "compare" && argc == 6) {
        const auto ring = slurp(argv[2]);
        const auto file = slurp(argv[3]);
        const std::size_t header = std::strtoull(argv[4], nullptr, 10);
        const std::size_t payload = std::strtoull(argv[5], nullptr, 10);
        std::vector<std::uint8_t> fill(payload);
        fill_payload(fill);
        const std::size_t records = ring.size() / payload;
        const std::size_t ordered = file.size() / (header + payload);
        std::size_t same = 0, fills = 0, consumer_fills = 0, other = 0;
        for (std::size_t i = 0; i < records; ++i) {
            const std::uint8_t* r = ring.data() + i * payload;
            const bool ring_fill = std::equal(r, r + payload, fill.begin());
            if (i >= ordered) {
                ++other;
                continue;
            }
            const std::uint8_t* o = file.data() + i * (header + payload) + header;
            if (std::equal(r, r + payload, o)) {
                (ring_fill ? fills : same) += 1;
            } else if (ring_fill) {
                ++consumer_fills;  // the frame is in the file, a fill in the ring
            } else {
                ++other;
            }
        }
        std::printf("records %zu ordered %zu same %zu fills %zu consumer_fills %zu other %zu\n",
                    records, ordered, same, fills, consumer_fills, other);
        return 0;
    }
    return usage();
}
