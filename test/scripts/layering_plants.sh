#!/usr/bin/env bash
# layering.sh can fail: each rule it keeps is broken once in a copy of the
# source tree, and the check must name that file and exit 1; the unbroken
# copy must pass. A rule whose plant is not caught is a failure of this test.
#
# Usage: layering_plants.sh REPO_ROOT
set -euo pipefail

root=${1:?usage: layering_plants.sh REPO_ROOT}
check="$root/test/scripts/layering.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

passed=0
failed=0

fresh() {
    rm -rf "$work/tree"
    mkdir -p "$work/tree"
    cp -r "$root/formats" "$root/lib" "$root/gpu" "$root/capture" "$work/tree/"
}

# judge NAME OK OUT: one line for the check, OUT indented under a failure.
judge() {
    if (($2)); then
        echo "ok: $1"
        passed=$((passed + 1))
    else
        echo "FAIL: $1:"
        while IFS= read -r l; do echo "    $l"; done <<<"$3"
        failed=$((failed + 1))
    fi
}

# expect_caught NAME WHAT_THE_LINE_NAMES: layering.sh on the planted tree
# exits 1 and one of its lines names WHAT_THE_LINE_NAMES.
expect_caught() {
    local out rc=0
    out=$(bash "$check" "$work/tree" 2>&1) || rc=$?
    local ok=0
    ((rc == 1)) && grep -qF -- "$2" <<<"$out" && ok=1
    judge "$1 (exit $rc; a line naming '$2')" "$ok" "$out"
}

fresh
rc=0
out=$(bash "$check" "$work/tree" 2>&1) || rc=$?
judge "the tree as committed passes" "$((rc == 0))" "$out"

fresh
echo '#include "lib/review/verify.hpp"' >>"$work/tree/lib/run/stats_line.cpp"
expect_caught "run/ includes review/" "lib/run/stats_line.cpp"

fresh
echo '#include "lib/ledger/ledger.hpp"' >>"$work/tree/lib/core/fault.cpp"
expect_caught "core/ includes ledger/" "lib/core/fault.cpp"

fresh
echo '#include "lib/sources/source.hpp"' >>"$work/tree/lib/sinks/reorder.cpp"
expect_caught "sinks/ includes sources/ (upward)" "lib/sinks/reorder.cpp"

fresh
echo '#include "gpu/gpu.hpp"' >>"$work/tree/lib/review/merge.cpp"
expect_caught "review/ includes gpu/" "lib/review/merge.cpp"

fresh
echo '#include "capture/cli.hpp"' >>"$work/tree/lib/run/common.cpp"
expect_caught "lib/ includes capture/" "lib/run/common.cpp"

fresh
echo '#pragma once' >"$work/tree/lib/loose.hpp"
expect_caught "a file at lib/'s top" "lib/loose.hpp"

fresh
echo '#pragma once' >"$work/tree/lib/sinks/writer_detail.hpp"
expect_caught "a _detail header" "lib/sinks/writer_detail.hpp"

fresh
mkdir -p "$work/tree/lib/newroom"
echo '#include "lib/core/fault.hpp"' >"$work/tree/lib/newroom/thing.cpp"
expect_caught "a room layering.sh does not know" "lib/newroom/"

fresh
for _ in $(seq 701); do echo '// line'; done >"$work/tree/capture/long.cpp"
expect_caught "a capture/ file over 700 lines" "capture/long.cpp: 701 lines"

echo "$passed passed, $failed failed"
((failed == 0))
