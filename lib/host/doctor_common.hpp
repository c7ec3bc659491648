// What the groups of `ibvcap doctor`'s checks share (doctor.cpp,
// doctor_platform.cpp, doctor_io.cpp): a check made, sizes in words, and
// reading the sysfs tree. Defined in doctor_common.cpp; include only from
// lib/host/doctor*.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lib/host/devices.hpp"
#include "lib/host/doctor.hpp"

namespace ibvcap::doctor::detail {

namespace fs = std::filesystem;

// The buffer the pcap source asks libpcap for: PcapLiveOptions::buffer_bytes
// (lib/sources/pcap_live.hpp; host/ may not include sources/, so the figure
// is repeated here and test_doctor checks that the two agree).
inline constexpr std::uint64_t kPcapBufferBytes = std::uint64_t{256} << 20;
// The engine's slot alignment (lib/sources/verbs/engine_internal.hpp, kSlotAlign).
inline constexpr std::uint64_t kSlotAlign = 64;
// Below this much free space on -o a capture is refused a PASS; below the
// second it is a WARN. At 1 GB/s (8 Gb/s of CODIF) 64 GiB is about a minute.
inline constexpr std::uint64_t kDiskFailBytes = std::uint64_t{1} << 30;
inline constexpr std::uint64_t kDiskWarnBytes = std::uint64_t{64} << 30;

Check make(Status status, std::string name, std::string subject, std::string found,
           std::string fix = {});

// "12.5 MiB", "3.0 GiB".
std::string mib(std::uint64_t bytes);
std::string gib(std::uint64_t bytes);

// A whole decimal number, all of `text`; nullopt otherwise.
std::optional<long> parse_long(std::string_view text);
// A sysfs file holding one such number; nullopt when missing or not one.
std::optional<long> read_long(const fs::path& path);

bool path_exists(const fs::path& path);

// The names in a directory, sorted; empty when it is missing.
std::vector<std::string> entries(const fs::path& dir);

std::string join(const std::vector<std::string>& parts, std::string_view sep = ", ");

// How a check names its target: the netdev, else "DEVICE:PORT", else as given.
std::string label(const Target& t);

// The sysfs directory of the PCI function behind a target (a link).
fs::path device_dir(const Options& o, const Target& t);

}  // namespace ibvcap::doctor::detail
