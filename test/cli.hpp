// Running the real binary from a test (test_cli*.cpp): a shell command line
// in a test's directory, its exit code and output.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "frames.hpp"

namespace ibvcap::test {

struct Result {
    int code = -1;
    std::string out;
    std::string err;
};

inline std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Run a shell command line in `dir`, capturing its exit code and output.
inline Result sh(const TempDir& dir, const std::string& command) {
    const std::string line = "cd '" + dir.path().string() + "' && " + command + " >" +
                             (dir / "stdout") + " 2>" + (dir / "stderr");
    const int status = std::system(line.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(dir / "stdout");
    r.err = slurp(dir / "stderr");
    return r;
}

inline Result ibvcap(const TempDir& dir, const std::string& args) {
    return sh(dir, std::string(IBVCAP_BINARY) + " " + args);
}

}  // namespace ibvcap::test
