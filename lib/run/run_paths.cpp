#include "lib/run/run_paths.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <system_error>

#include "lib/run/common.hpp"

namespace ibvcap {

namespace fs = std::filesystem;

namespace {

// One file as the kernel knows it: an existing one by device and inode (name
// empty), one not there yet by its directory's device and inode and its name
// (or, when that directory is not there either, by the absolute path alone).
struct FileKey {
    dev_t dev = 0;
    ino_t ino = 0;
    std::string name;
    bool operator==(const FileKey&) const = default;
};

FileKey new_file_key(const fs::path& path) {
    const std::string name = path.filename().string();
    const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
    struct stat st {};
    if (!name.empty() && name != "." && name != ".." && ::stat(dir.c_str(), &st) == 0) {
        return {st.st_dev, st.st_ino, name};
    }
    std::error_code ec;
    return {0, 0, fs::absolute(path, ec).lexically_normal().string()};
}

struct Resolved {
    bool console = false;  // standard output or input, no file
    bool skip = false;     // a directory or character device: never one of the run's files
    bool special = false;  // a FIFO, socket or block device: compared between outputs only
    std::vector<FileKey> keys;
    std::vector<fs::path> names;  // the names it is written under (is_run_file)
};

Resolved resolve(const RunPath& p) {
    Resolved r;
    if (p.path.empty() || p.path == "-") {
        r.console = true;
        return r;
    }
    r.names.emplace_back(p.path);
    struct stat st {};
    if (::stat(p.path.c_str(), &st) == 0) {
        r.skip = S_ISDIR(st.st_mode) || S_ISCHR(st.st_mode);
        r.special = !S_ISREG(st.st_mode);
        r.keys.push_back({st.st_dev, st.st_ino, {}});
        std::error_code ec;
        if (const fs::path real = fs::canonical(p.path, ec); !ec) {
            r.names.push_back(real);  // a link's target
        }
        return r;
    }
    // Not there yet: its name, and for a dangling link each name along the
    // link (a writer that opens it makes the target; one that renames over
    // it replaces the link).
    r.keys.push_back(new_file_key(p.path));
    fs::path at = p.path;
    for (int hop = 0; hop < 40; ++hop) {
        struct stat lst {};
        std::error_code ec;
        if (::lstat(at.c_str(), &lst) != 0 || !S_ISLNK(lst.st_mode)) {
            break;
        }
        const fs::path target = fs::read_symlink(at, ec);
        if (ec) {
            break;
        }
        at = target.is_absolute() ? target : at.parent_path() / target;
        r.keys.push_back(new_file_key(at));
        r.names.push_back(at);
    }
    return r;
}

std::string shown(const RunPath& p) {
    if (p.option.empty()) {
        return p.path;
    }
    return p.path.empty() ? p.option : p.option + " " + p.path;
}

bool share_a_key(const Resolved& a, const Resolved& b) {
    return std::any_of(a.keys.begin(), a.keys.end(), [&b](const FileKey& k) {
        return std::find(b.keys.begin(), b.keys.end(), k) != b.keys.end();
    });
}

}  // namespace

std::string run_path_collision(const std::vector<RunPath>& paths, const OutputOptions& outputs) {
    std::vector<Resolved> resolved;
    resolved.reserve(paths.size());
    for (const RunPath& p : paths) {
        resolved.push_back(resolve(p));
    }
    for (std::size_t j = 0; j < paths.size(); ++j) {
        const RunPath& b = paths[j];
        const Resolved& rb = resolved[j];
        const bool b_out = b.role == PathRole::output;
        if (!rb.console && !rb.skip) {
            for (const fs::path& name : rb.names) {
                if (!is_run_file(outputs, name)) {
                    continue;
                }
                return b_out ? fmt::format(
                                   "{} is a file this run writes in its -o directory {}; give "
                                   "the {} another path",
                                   shown(b), outputs.output_dir, b.noun)
                             : fmt::format(
                                   "{} is {} and a file this run writes in its -o directory {}; "
                                   "choose another -o DIR or --prefix",
                                   shown(b), b.what, outputs.output_dir);
            }
        }
        for (std::size_t i = 0; i < j; ++i) {
            const RunPath& a = paths[i];
            const Resolved& ra = resolved[i];
            const bool a_out = a.role == PathRole::output;
            if (!a_out && !b_out) {
                continue;  // two inputs: merge names them itself
            }
            if (ra.console || rb.console) {
                if (a_out && b_out && ra.console && rb.console) {
                    return fmt::format(
                        "{} and {} both write to standard output; give the {} a file path",
                        shown(a), shown(b), b.noun);
                }
                continue;  // stdin is no file; stdout is none of the named files
            }
            if (ra.skip || rb.skip || ((ra.special || rb.special) && !(a_out && b_out))) {
                continue;
            }
            if (!share_a_key(ra, rb)) {
                continue;
            }
            // Named: the output to move, and what it would replace.
            const RunPath& moved = b_out ? b : a;
            const RunPath& kept = b_out ? a : b;
            return fmt::format("{} is {} ({}); give the {} another path", shown(moved), kept.what,
                               kept.path, moved.noun);
        }
    }
    return {};
}

bool is_run_file(const OutputOptions& outputs, const fs::path& path) {
    if (outputs.formats.empty()) {
        return false;
    }
    const fs::path dir = path.has_parent_path() ? path.parent_path() : ".";
    struct stat dir_st {};
    struct stat out_st {};
    if (::stat(dir.c_str(), &dir_st) != 0 || ::stat(outputs.output_dir.c_str(), &out_st) != 0 ||
        dir_st.st_dev != out_st.st_dev || dir_st.st_ino != out_st.st_ino) {
        return false;
    }
    const std::string name = path.filename().string();
    return name == kOutputLockName || is_output_name(outputs, name);
}

}  // namespace ibvcap
