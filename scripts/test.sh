#!/usr/bin/env bash
# The README's test command: install dependencies, check formatting, build with
# warnings as errors, run the whole suite, then run it again under
# AddressSanitizer + UBSan. Any failure stops it with a non-zero exit code.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

echo "== clang-format check"
mapfile -t sources < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')
clang-format --dry-run --Werror "${sources[@]}"

echo "== build (warnings are errors)"
BUILD_DIR=build bash scripts/build.sh -DIBVCAP_WERROR=ON
echo "== tests"
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600

if [ "${IBVCAP_SKIP_SANITIZERS:-0}" = 1 ]; then
  echo "== sanitizer pass NOT run: IBVCAP_SKIP_SANITIZERS=1" >&2
else
  echo "== build and tests under AddressSanitizer + UBSan"
  BUILD_DIR=build-asan bash scripts/build.sh -DIBVCAP_WERROR=ON -DIBVCAP_SANITIZE=ON \
    -DIBVCAP_CUDA=OFF -DIBVCAP_BUILD_BENCH=OFF
  # The package test (label package) builds and installs the package once, in the pass above.
  ctest --test-dir build-asan --output-on-failure -j"$(nproc)" --timeout 900 -LE package
fi
