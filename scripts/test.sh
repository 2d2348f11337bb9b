#!/usr/bin/env bash
# Builds packd twice and runs every test:
#   build/       release build: integration tests, Python tests, GPU host tests
#   build-asan/  AddressSanitizer + UBSan build: all C unit tests
# GPU tests that need a device skip with a message when there is none.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
PY=${PY:-/usr/bin/python3}

echo "== build (release)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$JOBS"

echo "== build (asan+ubsan)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DPK_SANITIZE=ON -DPK_BUILD_BENCH=OFF \
  -DPK_GPU_CUDA=OFF >/dev/null
cmake --build build-asan -j "$JOBS"

echo "== C unit tests under ASan/UBSan"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --output-on-failure -L unit -j "$JOBS")

echo "== integration and GPU-host tests (release build)"
(cd build && ctest --output-on-failure -LE unit -j "$JOBS")

echo "== Python tests"
if [ -d tests/python ]; then
  PACKD_BUILD_DIR="$PWD/build" "$PY" -m pytest -q tests/python
fi
echo "== all tests passed"
