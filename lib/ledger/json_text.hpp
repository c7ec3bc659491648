// An nlohmann::json exception's text as an operator reads it: without the
// library's "[json.exception.parse_error.101] " prefix (issue 25 item 9: no
// internal text reaches an operator).
#pragma once

#include <exception>
#include <string>

namespace ibvcap {

inline std::string json_error_text(const std::exception& e) {
    std::string what = e.what();
    if (what.rfind("[json.exception.", 0) == 0) {
        if (const auto end = what.find("] "); end != std::string::npos) {
            what.erase(0, end + 2);
        }
    }
    return what;
}

}  // namespace ibvcap
