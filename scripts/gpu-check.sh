#!/usr/bin/env bash
# The GPU payload path's checks in one run (docs/gpu.md, "What ran on a GPU"):
#
#   scripts/gpu-check.sh [--gpu ID] [--build DIR] [--seconds S]
#       builds DIR (default build-gpu, CUDA when the toolkit is found) if
#       needed, then runs:
#         1. test_gpu (its Device.* tests, label gpu, on the GPU; skipped
#            without one) and the stand-in tests of the path (GpuStandin.*,
#            ThreadFaults.*, test_gpu_writers, test_block_sink);
#         2. bench gpu_path: frames/s through the GPU-payload writers and the
#            block rings, copy calls per 1,000 frames for each, and the
#            pattern check (on the GPU when there is one, else the stand-in,
#            printing the same lines);
#         3. the --source pcap capture over network namespaces into block
#            rings with --gpu-verify (test/e2e/gpu_standin.sh; --gpu ID on a
#            GPU), when this host can make namespaces.
#   scripts/gpu-check.sh --bundle DIR
#       makes DIR: the stripped programs, the shared libraries they need
#       from this host and this script, for a GPU host that cannot build
#       (no development packages, no network); run there as
#       DIR/gpu-check.sh --from DIR [--gpu ID]. The bundle carries the CPU
#       benchmarks too, with scripts/cpu-bench.sh: DIR/cpu-bench.sh --from DIR
#       measures the server's caches in under five minutes (issue 44).
#
# Exit 0 when every step passed, 1 otherwise; each step prints one
# "gpu-check:" line with its outcome. Under 8 minutes on one GPU.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/.." 2>/dev/null && pwd)
BUILD=build-gpu
FROM=""
BUNDLE=""
GPU=""
SECONDS_EACH=3
while [ $# -gt 0 ]; do
  case $1 in
    --gpu) GPU=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --from) FROM=$2; shift 2 ;;
    --bundle) BUNDLE=$2; shift 2 ;;
    --seconds) SECONDS_EACH=$2; shift 2 ;;
    *) echo "usage: $0 [--gpu ID] [--build DIR] [--seconds S] | --bundle DIR | --from DIR" >&2; exit 2 ;;
  esac
done

say() { printf 'gpu-check: %s\n' "$*"; }

build() {
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DIBVCAP_CUDA=AUTO \
      -DIBVCAP_BUILD_TESTS=ON -DIBVCAP_BUILD_BENCH=ON >"$BUILD.configure.log" 2>&1 ||
      { say "FAIL configure (see $BUILD.configure.log)"; exit 1; }
  fi
  cmake --build "$BUILD" -j"$(nproc)" --target test_gpu test_engine test_gpu_writers \
    test_block_sink gpu_path ibvcap bench_demux bench_engine bench_pipeline \
    >"$BUILD.build.log" 2>&1 ||
    { say "FAIL build (see $BUILD.build.log)"; exit 1; }
}

PROGRAMS=(test/test_gpu test/test_engine test/test_gpu_writers test/test_block_sink
  bench/gpu_path capture/ibvcap bench/bench_demux bench/bench_engine bench/bench_pipeline)

if [ -n "$BUNDLE" ]; then
  build
  mkdir -p "$BUNDLE/bin" "$BUNDLE/lib" "$BUNDLE/src/scripts" "$BUNDLE/src/test/e2e"
  for p in "${PROGRAMS[@]}"; do
    strip -o "$BUNDLE/bin/$(basename "$p")" "$BUILD/$p"
  done
  # Every library the programs load but the C and C++ runtimes (a GPU host's
  # own are as new or newer) and CUDA's driver (libcuda comes with the
  # host's driver; cudart is linked statically).
  for p in "${PROGRAMS[@]}"; do ldd "$BUILD/$p"; done | awk '/=> \//{print $3}' | sort -u |
    grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libcuda|libstdc\+\+|libgcc_s)\.so' |
    while read -r lib; do cp -L "$lib" "$BUNDLE/lib/"; done
  cp "$0" "$BUNDLE/gpu-check.sh"
  cp "$SRC/scripts/cpu-bench.sh" "$BUNDLE/cpu-bench.sh"
  cp "$SRC/scripts/testbed.sh" "$BUNDLE/src/scripts/"
  cp "$SRC/test/e2e/lib.sh" "$SRC/test/e2e/gpu_standin.sh" "$BUNDLE/src/test/e2e/"
  say "bundle in $BUNDLE ($(du -sh "$BUNDLE" | cut -f1)); run: $BUNDLE/gpu-check.sh --from $BUNDLE"
  exit 0
fi

if [ -n "$FROM" ]; then
  FROM=$(cd "$FROM" && pwd)
  export LD_LIBRARY_PATH="$FROM/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  bin() { echo "$FROM/bin/$(basename "$1")"; }
  E2E_SRC=$FROM/src
else
  build
  bin() { echo "$BUILD/$1"; }
  E2E_SRC=$SRC
fi

if [ -z "$GPU" ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  GPU=0
fi
FAILED=0
if [ -n "$GPU" ]; then
  say "GPU $GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader -i "$GPU" 2>&1)"
else
  say "no GPU here: the device tests skip and the bench runs on the stand-in"
fi

# 1. The tests.
run_tests() {  # NAME PROGRAM [GTEST ARGS...]
  local name=$1 prog=$2 log
  shift 2
  log=$(mktemp)
  if "$(bin "$prog")" --gtest_brief=1 "$@" >"$log" 2>&1; then
    local skipped
    skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]\+\) tests\?,.*/\1/p' "$log" | head -1)
    say "PASS $name: $(grep -E '^\[  PASSED  \]' "$log" | head -1 | sed 's/^\[  PASSED  \] //')" \
      "${skipped:+($skipped skipped)}"
  else
    say "FAIL $name"
    grep -E 'Failure|FAILED|error' "$log" | head -20
    FAILED=1
  fi
  rm -f "$log"
}
run_tests "test_gpu (Device.* on the GPU)" test/test_gpu
run_tests "GpuStandin.* and ThreadFaults.*" test/test_engine --gtest_filter='GpuStandin.*:ThreadFaults.*'
run_tests "test_gpu_writers" test/test_gpu_writers
run_tests "test_block_sink" test/test_block_sink

# 2. Frames/s, copy calls and the pattern check.
if [ -n "$GPU" ]; then
  "$(bin bench/gpu_path)" --gpu "$GPU" --seconds "$SECONDS_EACH" || FAILED=1
else
  "$(bin bench/gpu_path)" --seconds "$SECONDS_EACH" || FAILED=1
fi

# 3. The pcap source's block path, live, over network namespaces.
why=""
for c in ip jq tcpdump; do command -v "$c" >/dev/null || why="$why no $c;"; done
if [ -z "$why" ] && ! ip netns add gpucheck$$ 2>/dev/null; then
  why=" cannot make a network namespace here;"
else
  ip netns del gpucheck$$ 2>/dev/null
fi
if [ -n "$why" ]; then
  say "NOT RUN --source pcap capture into block rings:$why (runs where scripts/testbed.sh works)"
else
  GPU_FLAG=--gpu-standin
  [ -n "$GPU" ] && GPU_FLAG="--gpu $GPU"
  if IBVCAP_E2E_GPU=$GPU_FLAG bash "$E2E_SRC/test/e2e/gpu_standin.sh" "$(bin capture/ibvcap)" \
    "$E2E_SRC" >/tmp/gpu-check-e2e.log 2>&1; then
    say "PASS --source pcap capture into block rings ($GPU_FLAG --gpu-verify):" \
      "$(grep -E 'PASS' /tmp/gpu-check-e2e.log | tail -1)"
  else
    say "FAIL --source pcap capture into block rings ($GPU_FLAG): see below"
    tail -20 /tmp/gpu-check-e2e.log
    FAILED=1
  fi
fi

if [ "$FAILED" = 0 ]; then say "all passed"; else say "FAILED"; fi
exit "$FAILED"
