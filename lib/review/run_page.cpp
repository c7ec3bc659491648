#include "lib/review/run_page.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include "lib/ledger/report.hpp"
#include "lib/review/run_page_template.hpp"

namespace ibvcap {

namespace {
std::uint64_t count_at(const nlohmann::json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}
}  // namespace

nlohmann::json page_series(const nlohmann::json& report) {
    nlohmann::json t = nlohmann::json::array();
    nlohmann::json packets = nlohmann::json::array();
    nlohmann::json bytes = nlohmann::json::array();
    nlohmann::json missing = nlohmann::json::array();
    nlohmann::json backlog = nlohmann::json::array();
    const auto timeline = report.find("timeline");
    if (timeline == report.end() || !timeline->is_array()) {
        return nlohmann::json();
    }
    std::size_t per_bin = 1;
    if (const auto p = report.find("presence"); p != report.end() && p->is_object()) {
        // At most 2^20 windows to a bin: a corrupted report draws few points, not none.
        per_bin = std::clamp<std::size_t>(count_at(*p, "windows_per_bin"), 1, std::size_t{1} << 20);
    }
    std::size_t i = 0;
    for (const auto& w : *timeline) {
        if (!w.is_object()) {
            continue;
        }
        if (i % per_bin == 0) {
            t.push_back(0.0);
            packets.push_back(0);
            bytes.push_back(0);
            missing.push_back(0);
            backlog.push_back(0);
        }
        ++i;
        const auto at = w.find("t");
        t.back() = at != w.end() && at->is_number() ? at->get<double>() : 0.0;
        packets.back() = packets.back().get<std::uint64_t>() + count_at(w, "packets");
        bytes.back() = bytes.back().get<std::uint64_t>() + count_at(w, "bytes");
        missing.back() = missing.back().get<std::uint64_t>() + count_at(w, "missing");
        backlog.back() = std::max(backlog.back().get<std::uint64_t>(), count_at(w, "backlog"));
    }
    return {{"windows_per_bin", per_bin},    {"t", std::move(t)},
            {"packets", std::move(packets)}, {"bytes", std::move(bytes)},
            {"missing", std::move(missing)}, {"backlog", std::move(backlog)}};
}

std::string run_page_html(const nlohmann::json& report, const VerifyOutcome* verify) {
    nlohmann::json data = report.is_object() ? report : nlohmann::json::object();
    data["page_series"] = page_series(report);
    data.erase("timeline");
    data.erase("gaps");
    if (verify != nullptr) {
        nlohmann::json files = nlohmann::json::array();
        std::size_t passed = 0;
        for (const VerifiedFile& f : verify->files) {
            // (A FIFO's is neither a pass nor a failure: as verify counts them.)
            passed += f.ok() && f.not_verifiable.empty() ? std::size_t{1} : std::size_t{0};
            // (By the path the report lists: the page finds its outputs' files by it.)
            files.push_back({{"path", f.listed_as.empty() ? f.path : f.listed_as},
                             {"read_at", f.path},
                             {"format", f.format},
                             {"ok", f.ok()},
                             {"not_verifiable", f.not_verifiable},
                             {"frames", f.frames},
                             {"bytes", f.bytes},
                             {"differences", f.differences}});
        }
        data["page_verify"] = {{"files", std::move(files)},
                               {"checked", verify->files.size() - verify->not_verifiable()},
                               {"not_verifiable", verify->not_verifiable()},
                               {"passed", passed},
                               {"differences", verify->differences},
                               {"streams_checked", verify->streams_checked},
                               {"ok", verify->ok()}};
    }
    // Inside <script type="application/json"> only "</script" (and "<!--")
    // could end it early: every <, > and & is written as its \u escape,
    // which is JSON (they occur only inside strings). Invalid UTF-8 (a
    // string from the wire) becomes U+FFFD rather than failing the page.
    std::string json = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::string escaped;
    escaped.reserve(json.size() + json.size() / 16);
    for (const char c : json) {
        switch (c) {
            case '<':
                escaped += "\\u003c";
                break;
            case '>':
                escaped += "\\u003e";
                break;
            case '&':
                escaped += "\\u0026";
                break;
            default:
                escaped += c;
        }
    }
    const std::string_view page = kRunPageTemplate;
    constexpr std::string_view slot = "/*IBVCAP_DATA*/";
    const std::size_t at = page.find(slot);
    std::string html;
    html.reserve(page.size() + escaped.size());
    html.append(page.substr(0, at));
    html.append(escaped);
    html.append(page.substr(at + slot.size()));
    return html;
}

bool may_write_run_page(const std::string& path) {
    // Opened without blocking and looked at before it is read: a FIFO's
    // open for reading would wait for a writer, and a FIFO or device is
    // written into, never replaced (as the report is).
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        struct stat st {};
        return errno == ENOENT || (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        return true;
    }
    std::string head(200, '\0');
    std::size_t got = 0;
    while (got < head.size()) {
        const ssize_t n = ::read(fd, head.data() + got, head.size() - got);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        got += static_cast<std::size_t>(n);
    }
    ::close(fd);
    head.resize(got);
    return head.find("<!-- The ibvcap run page") != std::string::npos;
}

std::string check_run_page_path(const std::string& page) {
    if (page.empty() || page == "-") {
        return "--html needs a file name, e.g. run.html (the page is written there)";
    }
    check_report_path(page, "--html");
    if (!may_write_run_page(page)) {
        return fmt::format(
            "--html {}: the file is there and is not an ibvcap run page; give the "
            "page another name, or remove it",
            page);
    }
    return {};
}

void write_run_page(const std::string& path, const nlohmann::json& report,
                    const VerifyOutcome* verify, const ReaderWait& wait) {
    const std::string html = run_page_html(report, verify);
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        // A FIFO or device: written into, never replaced (as the report).
        if (const int err = write_into(path, html, wait); err == ECANCELED) {
            throw ReaderWaitGivenUp(
                fmt::format("cannot write the run page {}: no reader took it before the stop "
                            "(Ctrl-C while it waited for one)",
                            path));
        } else if (err != 0) {
            throw std::system_error(err, std::generic_category(),
                                    fmt::format("cannot write the run page {}", path));
        }
        return;
    }
    if (const int err = replace_file(path, html, true); err != 0) {
        throw std::system_error(err, std::generic_category(),
                                fmt::format("cannot write the run page {}", path));
    }
}

}  // namespace ibvcap
