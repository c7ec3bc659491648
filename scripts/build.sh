#!/usr/bin/env bash
# Configure and build ibvcap into $BUILD_DIR (default build/). Extra arguments go
# to cmake's configure step, e.g. scripts/build.sh -DIBVCAP_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build "$build_dir" -j"$(nproc)"
