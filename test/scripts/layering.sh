#!/usr/bin/env bash
# The layering of the code (docs/architecture.md, "Layout"): every
# #include "..." in formats/, lib/, gpu/ and capture/ runs downward only.
#
#   formats/      the wire and file formats: nothing of lib/, gpu/, capture/,
#                 test/ (or bench/)
#   lib/          the data path, one folder per stage; never capture/ (the CLI)
#                 nor test/ (the simulated NIC is test/sim, a test double) nor
#                 bench/; gpu/ only from lib/run/ (the run wiring may reach the
#                 GPU path). No source file at lib/'s top: each is in a room.
#                 Inside lib/, arrows only downward:
#     core/       formats/, core/   (the words every stage shares)
#     ledger/     core/, formats/, ledger/
#     host/       core/, formats/, ledger/, host/
#     traffic/    core/, formats/, traffic/
#     sinks/      core/, formats/, ledger/, sinks/, and lib/traffic/pattern.hpp
#     demux/      core/, formats/, ledger/, sinks/, demux/
#     sources/    core/, formats/, ledger/, host/, demux/, sinks/, sources/
#     run/        anything in lib/ but review/, formats/, gpu/
#     review/     anything in lib/, formats/ (what reads a finished run: it
#                 shares run/'s exit codes and path checks); not gpu/
#   gpu/, capture/  nothing of test/ or bench/ (product code); gpu/ nothing of
#                 capture/
#
# And no file in lib/, formats/, gpu/ or capture/ is over 700 lines, and none
# is a "_detail" header (a file's private parts moved out to bring it under the
# limit: cut where the meaning divides instead, docs/architecture.md).
#
# Usage: layering.sh [REPO_ROOT]   (default: the repository this script is in)
# Prints each violation on a line of its own, then a summary; exits 1 if there
# is any, 2 on a usage error, 0 otherwise.
set -euo pipefail

root=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"}
if [[ ! -d "$root/formats" || ! -d "$root/lib" ]]; then
    echo "layering.sh: $root has no formats/ and lib/: give the repository root" >&2
    exit 2
fi
cd "$root"

readonly max_lines=700
violations=0
includes=0

violation() {
    echo "$1"
    violations=$((violations + 1))
}

# The stage a repository path belongs to; empty for a header from outside the
# project (a quoted third-party include).
stage_of() {
    local path=$1
    case "$path" in
    formats/*) echo "formats/" ;;
    lib/*/*)
        local rest=${path#lib/}
        echo "lib/${rest%%/*}/"
        ;;
    lib/*) echo "lib/ top" ;;
    gpu/*) echo "gpu/" ;;
    capture/*) echo "capture/" ;;
    test/*) echo "test/" ;;
    bench/*) echo "bench/" ;;
    *) echo "" ;;
    esac
}

# 0 if a file of stage $1 may include $3 (of stage $2).
allowed() {
    local from=$1 to=$2 target=$3
    [[ -z "$to" ]] && return 0 # not the project's
    case "$from" in
    formats/)
        [[ "$to" == "formats/" ]]
        return
        ;;
    gpu/)
        [[ "$to" != "capture/" && "$to" != "test/" && "$to" != "bench/" ]]
        return
        ;;
    capture/)
        [[ "$to" != "test/" && "$to" != "bench/" ]]
        return
        ;;
    esac
    # lib/: never the CLI, the tests or the benchmarks; the GPU path only from
    # the run wiring.
    case "$to" in
    capture/ | test/ | bench/) return 1 ;;
    gpu/)
        [[ "$from" == "lib/run/" ]]
        return
        ;;
    formats/) return 0 ;;
    esac
    local may
    case "$from" in
    lib/core/) may="lib/core/" ;;
    lib/ledger/) may="lib/core/|lib/ledger/" ;;
    lib/host/) may="lib/core/|lib/ledger/|lib/host/" ;;
    lib/traffic/) may="lib/core/|lib/traffic/" ;;
    lib/sinks/)
        # The block consumer checks the payload pattern the generator writes
        # (--check-pattern): the pattern is a pure function of the frame
        # position, shared by both ends, and nothing else of traffic/ is used.
        [[ "$target" == "lib/traffic/pattern.hpp" ]] && return 0
        may="lib/core/|lib/ledger/|lib/sinks/"
        ;;
    lib/demux/) may="lib/core/|lib/ledger/|lib/sinks/|lib/demux/" ;;
    lib/sources/) may="lib/core/|lib/ledger/|lib/host/|lib/demux/|lib/sinks/|lib/sources/" ;;
    lib/run/)
        [[ "$to" != "lib/review/" ]]
        return
        ;;
    lib/review/) return 0 ;;
    *) return 1 ;; # a new folder: give it its place above
    esac
    [[ "|$may|" == *"|$to|"* ]]
}

known_lib_stage() {
    case "$1" in
    lib/core/ | lib/ledger/ | lib/host/ | lib/traffic/ | lib/sinks/ | lib/demux/ | lib/sources/ | lib/run/ | lib/review/) return 0 ;;
    *) return 1 ;;
    esac
}

dirs=(formats lib)
for d in gpu capture; do
    [[ -d "$d" ]] && dirs+=("$d")
done

unknown_reported=""
while IFS= read -r hit; do
    file=${hit%%:*}
    rest=${hit#*:}
    line=${rest%%:*}
    text=${rest#*:}
    target=${text#*\"}
    target=${target%%\"*}
    # A path relative to the including file's folder, where one exists there.
    dir=$(dirname "$file")
    if [[ "$target" != */* || ! -e "$target" ]] && [[ -e "$dir/$target" ]]; then
        target=$(realpath -m --relative-to=. "$dir/$target")
    fi
    includes=$((includes + 1))
    from=$(stage_of "$file")
    to=$(stage_of "$target")
    if [[ "$from" == lib/* ]] && ! known_lib_stage "$from"; then
        if [[ "|$unknown_reported|" != *"|$from|"* ]]; then
            violation "$file: $from is not a stage layering.sh knows: give it its place in the order"
            unknown_reported+="|$from"
        fi
        continue
    fi
    if ! allowed "$from" "$to" "$target"; then
        violation "$file:$line includes $target: $from may not include $to"
    fi
done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' \
    --include='*.h' --include='*.hpp' --include='*.cuh' --include='*.c' \
    --include='*.cc' --include='*.cpp' --include='*.cu' "${dirs[@]}" | sort -t: -k1,1 -k2,2n)

files=0
while IFS= read -r -d '' file; do
    files=$((files + 1))
    n=$(wc -l <"$file")
    if ((n > max_lines)); then
        violation "$file: $n lines (over $max_lines): cut it where its meaning divides"
    fi
    case "$file" in
    *_detail.*)
        violation "$file: a _detail header: name the part it holds and put its code in a .cpp"
        ;;
    lib/*/*) ;;
    lib/*) violation "$file: at lib/'s top: give it a room (core/ for what every stage shares)" ;;
    esac
done < <(find lib formats gpu capture -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.cuh' \
    -o -name '*.c' -o -name '*.cc' -o -name '*.cpp' -o -name '*.cu' \) -print0 | sort -z)

if ((violations > 0)); then
    echo "layering: $violations violation(s) ($includes includes, $files source files)"
    exit 1
fi
echo "layering: ok ($includes includes, $files source files)"
