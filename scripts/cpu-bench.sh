#!/usr/bin/env bash
# The CPU sections of bench/run.sh (1, 2 and 2b) on a lent server, in under
# five minutes: the cache behaviour of a real server's cores (larger L2, a
# slower, larger L3), which this project's 2-core VM cannot show
# (docs/performance.md, "The same programs on a 16-core host").
#
#   scripts/cpu-bench.sh [--build DIR] [--reps N]
#       builds DIR (default build-bench, Release) if needed and runs there;
#   scripts/cpu-bench.sh --from DIR [--reps N]
#       runs the programs of a bundle made by scripts/gpu-check.sh --bundle
#       DIR (a host that cannot build: no development packages, no network).
#
# Needs only bash and awk (no jq, no python). Prints one "cpu-bench:" line
# per figure, each ratio measured side by side in this run, with the goal
# bench/run.sh judges it by, and the machine (CPU model, cores, caches).
# Exit 0 when every program ran and every ledger check inside them passed
# (a benchmark that finds a wrong ledger reports an error: exit 1); a missed
# goal is not a failure, as in bench/run.sh.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/.." 2>/dev/null && pwd)
BUILD=build-bench
FROM=""
REPS=3
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --from) FROM=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--reps N] | --from DIR [--reps N]" >&2; exit 2 ;;
  esac
done
say() { printf 'cpu-bench: %s\n' "$*"; }

if [ -n "$FROM" ]; then
  FROM=$(cd "$FROM" && pwd)
  export LD_LIBRARY_PATH="$FROM/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  bin() { echo "$FROM/bin/$1"; }
else
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DIBVCAP_BUILD_BENCH=ON \
      >"$BUILD.configure.log" 2>&1 || { say "FAIL configure (see $BUILD.configure.log)"; exit 1; }
  fi
  cmake --build "$BUILD" -j"$(nproc)" --target bench_demux bench_engine bench_pipeline \
    >"$BUILD.build.log" 2>&1 || { say "FAIL build (see $BUILD.build.log)"; exit 1; }
  bin() { echo "$BUILD/bench/$1"; }
fi

cache() { cat "/sys/devices/system/cpu/cpu0/cache/index$1/size" 2>/dev/null || echo "?"; }
say "machine: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), $(nproc) cores," \
  "L2 $(cache 2), L3 $(cache 3); load $(cut -d' ' -f1-3 /proc/loadavg)"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
FAILED=0
# run PROGRAM FILTER: the console output (one line per repetition) in $out/PROGRAM.
run() {
  local prog=$1 filter=$2
  if ! "$(bin "$prog")" --benchmark_filter="$filter" --benchmark_min_time=0.3 \
    --benchmark_repetitions="$REPS" --benchmark_report_aggregates_only=false \
    >>"$out/$prog" 2>&1; then
    say "FAIL $prog ($filter): $(tail -3 "$out/$prog" | tr '\n' ' ')"
    FAILED=1
  fi
  if grep -q 'ERROR OCCURRED' "$out/$prog"; then
    say "FAIL $prog: $(grep -m1 'ERROR OCCURRED' "$out/$prog")"
    FAILED=1
  fi
}
# best PROGRAM NAME-PREFIX COUNTER max|min: the best repetition's counter, in
# plain units (the k/M/G suffix and a trailing /s or ns undone).
best() {
  awk -v p="$2" -v c="$3" -v how="$4" '
    index($1, p) == 1 && $1 !~ /_(mean|median|stddev|cv)$/ {
      for (i = 2; i <= NF; i++) if (index($i, c "=") == 1) {
        v = substr($i, length(c) + 2); sub(/\/s$/, "", v); m = 1
        if (v ~ /ns$/) { sub(/ns$/, "", v); m = 1e-9 } else if (v ~ /us$/) { sub(/us$/, "", v); m = 1e-6 }
        else if (v ~ /n$/) { sub(/n$/, "", v); m = 1e-9 } else if (v ~ /u$/) { sub(/u$/, "", v); m = 1e-6 }
        else if (v ~ /k$/) { sub(/k$/, "", v); m = 1e3 } else if (v ~ /M$/) { sub(/M$/, "", v); m = 1e6 }
        else if (v ~ /G$/) { sub(/G$/, "", v); m = 1e9 }
        x = v * m
        if (n == 0 || (how == "max" ? x > b : x < b)) b = x
        n++
      }
    }
    END { if (n) printf "%.6g", b; else print "nan" }' "$out/$1"
}
calc() { awk "BEGIN { printf \"${2:-%.2f}\", $1 }"; }
judge() { awk -v r="$1" -v g="$2" 'BEGIN { print (r + 0 >= g + 0) ? "PASS" : "MISS" }'; }

t0=$(date +%s)
run bench_demux 'BM_DemuxSplit|BM_DemuxStreams/'
run bench_engine 'BM_Engine/split:1|BM_EngineGroups|BM_EngineStreams/.*/dma:1|BM_Devices'
run bench_pipeline 'BM_Pipeline/layout:0'

d24=$(best bench_demux BM_DemuxStreams/streams:24/ ns_per_packet min)
d2400=$(best bench_demux BM_DemuxStreams/streams:2400/ ns_per_packet min)
say "demux split: $(calc "$(best bench_demux BM_DemuxSplit ns_per_packet min) * 1e9" %.1f) ns/frame (goal <= 25)"
x=$(calc "$d2400 / $d24")
say "demux 2,400 vs 24 streams: ${x}x ($(calc "$d2400 * 1e9" %.1f) vs $(calc "$d24 * 1e9" %.1f) ns; goal <= 1.25: $(judge "$(calc "1.25 / $x")" 1))"
say "engine split: $(calc "$(best bench_engine BM_Engine/split:1 items_per_second max) / 1e6") Mpps (goal >= 20)"
for d in 0 1; do
  g1=$(best bench_engine "BM_EngineGroups/groups:1/queues:0/dma:$d/" items_per_second max)
  g64=$(best bench_engine "BM_EngineGroups/groups:64/queues:0/dma:$d/" items_per_second max)
  q64=$(best bench_engine "BM_EngineGroups/groups:64/queues:64/dma:$d/" items_per_second max)
  r=$(calc "$g64 / $g1")
  say "engine 64 groups vs 1, dma:$d: ${r}x on one QP ($(calc "$g64 / 1e6") vs $(calc "$g1 / 1e6") Mpps; goal >= 0.95: $(judge "$r" 0.95)); a QP per group $(calc "$q64 / $g1")x"
done
s24=$(best bench_engine BM_EngineStreams/streams:24/dma:1/ items_per_second max)
s2400=$(best bench_engine BM_EngineStreams/streams:2400/dma:1/ items_per_second max)
x=$(calc "$s24 / $s2400")
say "engine 2,400 vs 24 streams, dma:1: ${x}x the time per frame (goal <= 1.25: $(judge "$(calc "1.25 / $x")" 1))"
dev1=$(best bench_engine BM_Devices/devices:1/ items_per_second max)
dev2=$(best bench_engine BM_Devices/devices:2/ items_per_second max)
say "two devices vs one, own cores: $(calc "$dev2 / $dev1")x (goal >= 1.6)"
p=$(best bench_pipeline BM_Pipeline/layout:0 items_per_second max)
say "headers-only pipeline, one core: $(calc "$p / 1e6") Mpps = $(calc "$p / 6.01e6")x a 400 GbE port (goal >= 1)"
say "took $(($(date +%s) - t0)) s"
if [ "$FAILED" = 0 ]; then say "all ran"; else say "FAILED"; fi
exit "$FAILED"
