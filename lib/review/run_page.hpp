// The run page: one self-contained HTML file that draws a run's report
// (docs/observability.md, "The run page"). `ibvcap report RUN.json --html
// PAGE`, and `--html PAGE` on capture, read and merge.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "lib/review/verify.hpp"
#include "lib/run/common.hpp"

namespace ibvcap {

// The page's text: the template (lib/review/run_page.html, built into the
// binary) with the report in it. Left out of the copy the page carries:
// `timeline` (its windows are summed per presence bin into `page_series`:
// t, packets, bytes, missing, and the backlog's peak), and `gaps` (the
// presence map's cells hold them per bin). `verify`, when given, is
// `page_verify`. Nothing in the page fetches anything.
std::string run_page_html(const nlohmann::json& report, const VerifyOutcome* verify = nullptr);

// Writes the page to `path` as the report is written (replace_file: a
// temporary file renamed over it; a FIFO or device written into, its reader
// waited for as `wait` says). Throws std::system_error naming the path
// (ReaderWaitGivenUp when the wait was given up).
void write_run_page(const std::string& path, const nlohmann::json& report,
                    const VerifyOutcome* verify = nullptr, const ReaderWait& wait = {});

// Whether `path` is missing, a FIFO or device (written into), or a page this
// function wrote (its first 200 bytes name it): a run page may be replaced,
// any other file is the operator's and is never overwritten by surprise.
// Never blocks: nothing but a regular file is read.
bool may_write_run_page(const std::string& path);

// --html PAGE, checked before the run as the report's path is
// (check_report_path), once run_path_collision (lib/run/run_paths.hpp) has
// found it none of the run's other files: returns a usage problem (exit 2)
// for an empty name or "-", or a file there that is not a run page; throws
// std::runtime_error (exit 1) when it cannot be written.
std::string check_run_page_path(const std::string& page);

// The per-bin series the page draws, from the report's timeline and its
// presence bins (windows_per_bin windows to a bin; one bin per window
// without presence).
nlohmann::json page_series(const nlohmann::json& report);

}  // namespace ibvcap
