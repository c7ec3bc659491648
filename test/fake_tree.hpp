// A fake sysfs/procfs tree in a fresh directory under /tmp, removed
// afterwards: files hold what the kernel writes there (text plus a newline).
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>

namespace ibvcap::test {

class FakeTree {
  public:
    explicit FakeTree(const std::string& name) {
        std::string templ = "/tmp/ibvcap_" + name + "_XXXXXX";
        if (::mkdtemp(templ.data()) == nullptr) {
            throw std::system_error(errno, std::generic_category(), "mkdtemp");
        }
        root_ = templ;
    }
    ~FakeTree() {
        std::error_code ec;
        std::filesystem::remove_all(root_, ec);
    }
    FakeTree(const FakeTree&) = delete;
    FakeTree& operator=(const FakeTree&) = delete;

    const std::filesystem::path& root() const { return root_; }

    // `relative` under the root ("class/net/eth0/mtu"): `text` plus a newline,
    // as sysfs writes it, parent directories created.
    void write(const std::filesystem::path& relative, const std::string& text) const {
        const std::filesystem::path path = root_ / relative;
        std::filesystem::create_directories(path.parent_path());
        std::ofstream out(path, std::ios::trunc);
        out << text << "\n";
        if (!out) {
            throw std::runtime_error("cannot write " + path.string());
        }
    }
    void mkdir(const std::filesystem::path& relative) const {
        std::filesystem::create_directories(root_ / relative);
    }
    void remove(const std::filesystem::path& relative) const {
        std::filesystem::remove_all(root_ / relative);
    }

  private:
    std::filesystem::path root_;
};

}  // namespace ibvcap::test
