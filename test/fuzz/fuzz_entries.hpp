// The fuzz entry points, one per target file. Each returns 0 for every input
// and reports a broken invariant through FUZZ_CHECK (fuzz_common.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

// fuzz_codif.cpp: formats/codif.hpp on one header.
int ibvcap_fuzz_codif(const std::uint8_t* data, std::size_t size);
// fuzz_packet.cpp: formats/packet.hpp parse_udp_frame on one (possibly split) frame.
int ibvcap_fuzz_packet(const std::uint8_t* data, std::size_t size);
// fuzz_demux.cpp: lib/demux/demux.hpp Demux::on_frame on a sequence of frames.
int ibvcap_fuzz_demux(const std::uint8_t* data, std::size_t size);
// fuzz_window.cpp: the same with a frame window (--start-at, --stop-at).
int ibvcap_fuzz_window(const std::uint8_t* data, std::size_t size);
// fuzz_pcap_file.cpp: lib/sources/pcap_file.hpp on the input as a capture file.
int ibvcap_fuzz_pcap_file(const std::uint8_t* data, std::size_t size);

// A libFuzzer program (IBVCAP_FUZZ_MAIN) gets its LLVMFuzzerTestOneInput from
// this macro, placed after the entry's definition in each target file.
#if defined(IBVCAP_FUZZ_MAIN)
#define IBVCAP_FUZZ_TARGET(entry)                                                       \
    extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) { \
        return entry(data, size);                                                       \
    }
#else
#define IBVCAP_FUZZ_TARGET(entry)
#endif
