// The files a run names on its command line, compared before it starts: no
// output of the run is another of its outputs or one of its inputs, however
// the paths are spelled (docs/formats.md, "Command line"). Every command
// that writes a file calls run_path_collision with all it names.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "lib/sinks/file_sinks.hpp"

namespace ibvcap {

enum class PathRole { input, output };

struct RunPath {
    std::string option;  // as on the command line: "--report", "-r"; empty for a positional
    // The path as given. "-" is standard output (an output) or standard input
    // (an input), never a file; an output with an empty path writes to
    // standard output without naming it (-v's frame lines).
    std::string path;
    PathRole role = PathRole::output;
    std::string what;  // in a message, what it is: "the --report file", "the input file"
    std::string noun;  // in the fix, what gets another path: "report", "page"
};

// The first collision among `paths`, as one usage line (exit 2) naming both
// and the fix; empty when there is none. A collision is: two outputs that are
// one file, or both standard output; an output that is an input; a path that
// is one of the files this run writes in `outputs`' -o directory (its lock,
// its outputs' names: is_run_file), an input's included. Files, not strings,
// are compared: one that exists by st_dev and st_ino (links followed), one
// that does not yet by its directory's st_dev and st_ino and its name (a
// dangling link also by its target's). A directory is left to each path's
// own check; a character device (a terminal, /dev/null) is no file to
// replace. Two inputs may be one file (merge says so itself).
std::string run_path_collision(const std::vector<RunPath>& paths,
                               const OutputOptions& outputs = {});

// Whether `path` is one of the files this run writes in its output directory
// (the lock or an output's name, rotated and index files included): its
// directory is outputs.output_dir (the same inode) and its name is theirs.
bool is_run_file(const OutputOptions& outputs, const std::filesystem::path& path);

}  // namespace ibvcap
