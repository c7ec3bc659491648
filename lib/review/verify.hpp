// `ibvcap verify`: re-check a run's output files after they were shipped
// (docs/formats.md, "ibvcap verify"). For each file it checks what its
// sidecar index (lib/sinks/file_index.hpp) says the file holds (size,
// checksum, record count), walks the file record by record (codif by the
// CODIF header's frame length, codifhdr in 64-byte headers, raw by each
// frame's IPv4/UDP lengths, pcap and pcapng through libpcap) and rebuilds
// the sequence ledger from the file alone with the run's own demux; with
// the run's report it also checks each output's files and record counts and,
// for an output whose files are all there and that lost nothing, every
// stream's frames, missing frames, first and last against the report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ibvcap {

struct VerifyRequest {
    std::vector<std::string> files;  // may be empty with a report: its files
    std::string report_path;         // empty: none
};

struct VerifiedFile {
    std::string path;  // where it was read (beside the report, or where the run wrote it)
    // The path as the report lists it; empty for a file the report does not list.
    std::string listed_as;
    std::string format;  // "raw", "codif", "codifhdr", "pcap", "pcapng"; empty when unknown
    std::uint64_t bytes = 0;
    std::uint64_t frames = 0;
    // The index's "stopped": the file ended early (a write error, an
    // abandon) and holds exactly what the index says.
    std::string stopped;
    // Empty: the file holds what was claimed. Otherwise every difference
    // found, the first first ("truncated: 12345 bytes, index says 20000",
    // "missing", "edited after the run: checksum differs ...").
    std::vector<std::string> differences;
    // Not empty: the output is a FIFO, device or socket, written as a stream
    // ("PATH is a FIFO: written as a stream, nothing to verify on disk"):
    // never opened, neither a pass nor a failure (ok() is true).
    std::string not_verifiable;
    bool ok() const { return differences.empty(); }
};

struct VerifyOutcome {
    std::vector<VerifiedFile> files;
    // Differences that belong to no one file (a stream no file holds).
    std::vector<std::string> differences;
    std::uint64_t streams_checked = 0;
    bool ok() const;
    // Files not verifiable (VerifiedFile::not_verifiable) and not failed.
    std::size_t not_verifiable() const;
};

// Throws std::runtime_error (one line naming the file and the cause) when
// the report cannot be read or is not an ibvcap report, or a file cannot be
// read for a reason other than its absence.
VerifyOutcome run_verify(const VerifyRequest& request);

}  // namespace ibvcap
