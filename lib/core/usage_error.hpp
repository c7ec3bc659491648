// A mistake in what the operator asked for: exit code 2 and one line that
// names it and the fix (docs/formats.md, "Exit codes"). Thrown by the command
// line's parser (capture/cli.hpp) and by the layers below it where the mistake
// only shows once names are resolved (two -i naming one device port).
#pragma once

#include <stdexcept>

namespace ibvcap {

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace ibvcap
