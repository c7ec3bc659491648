#include "lib/sinks/file_index.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <new>
#include <nlohmann/json.hpp>

#include "lib/ledger/json_input.hpp"
#include "lib/ledger/json_text.hpp"
#include "lib/ledger/report.hpp"

namespace ibvcap {

std::string file_index_path(const std::string& file) {
    return file + std::string(kFileIndexSuffix);
}

std::string format_checksum(std::uint64_t checksum) {
    return fmt::format("{:016x}", checksum);
}

int write_file_index(const std::string& file, const FileIndex& index) {
    const nlohmann::json j = {
        {"ibvcap_index", kFileIndexVersion},
        {"file", index.file},
        {"format", index.format},
        {"ibvcap_version", index.version},
        {"run", index.run},
        {"group", index.group},
        {"antenna", index.antenna},
        {"bytes", index.bytes},
        {"frames", index.frames},
        {"checksum",
         {{"algorithm", kFileIndexChecksum}, {"value", format_checksum(index.checksum)}}},
        {"complete", index.stopped.empty()},
        {"stopped", index.stopped.empty() ? nlohmann::json() : nlohmann::json(index.stopped)},
        {"ordered", index.ordered_window == 0 ? nlohmann::json()
                                              : nlohmann::json{{"window", index.ordered_window}}}};
    // Not fsync'ed: the file it indexes is not either (the page cache
    // writes both back).
    return replace_file(file_index_path(file), j.dump(2) + "\n", false);
}

std::optional<FileIndex> read_file_index(const std::string& file, std::string& error) {
    const std::string path = file_index_path(file);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        error = errno == ENOENT ? "missing" : fmt::format("unreadable: {}", std::strerror(errno));
        return std::nullopt;
    }
    if (!S_ISREG(st.st_mode)) {
        // (A FIFO would wait for a writer; a device is no index.)
        error = "not a regular file";
        return std::nullopt;
    }
    // An index is a few hundred bytes: at most 1 MiB is read, and its
    // nesting is bounded (lib/ledger/json_input.hpp).
    BoundedInput in(path, std::uint64_t{1} << 20);
    if (in.error() != 0) {
        error = "unreadable";
        return std::nullopt;
    }
    try {
        const nlohmann::json j = parse_json(in.stream());
        if (in.over_limit()) {
            error = "not a valid index: more than 1 MiB";
            return std::nullopt;
        }
        if (j.value("ibvcap_index", 0) != kFileIndexVersion) {
            error = "not an ibvcap index of version 1";
            return std::nullopt;
        }
        const auto& sum = j.at("checksum");
        if (sum.at("algorithm").get<std::string>() != kFileIndexChecksum) {
            error = fmt::format("checksum algorithm {} unknown",
                                sum.at("algorithm").get<std::string>());
            return std::nullopt;
        }
        FileIndex idx;
        idx.file = j.at("file").get<std::string>();
        idx.format = j.at("format").get<std::string>();
        idx.version = j.value("ibvcap_version", std::string());
        idx.run = j.value("run", std::string());
        idx.group = j.value("group", std::string());
        idx.antenna = j.value("antenna", std::string());
        idx.bytes = j.at("bytes").get<std::uint64_t>();
        idx.frames = j.at("frames").get<std::uint64_t>();
        const std::string value = sum.at("value").get<std::string>();
        // (from_chars, not stoull: its exception's text is "stoull".)
        const auto [end, ec] =
            std::from_chars(value.data(), value.data() + value.size(), idx.checksum, 16);
        if (ec != std::errc() || end != value.data() + value.size() || value.size() != 16) {
            error = "checksum value is not 16 hex digits";
            return std::nullopt;
        }
        if (j.contains("stopped") && j["stopped"].is_string()) {
            idx.stopped = j["stopped"].get<std::string>();
        }
        if (j.contains("ordered") && j["ordered"].is_object()) {
            idx.ordered_window = j["ordered"].at("window").get<std::uint32_t>();
        }
        return idx;
    } catch (const std::exception& e) {
        error = fmt::format("not a valid index: {}", json_error_text(e));
        return std::nullopt;
    }
}

FileChecksum::FileChecksum() : state_(XXH3_createState()) {
    if (!state_) {
        throw std::bad_alloc();
    }
    reset();
}

void FileChecksum::reset() {
    XXH3_64bits_reset(state_.get());
}

}  // namespace ibvcap
