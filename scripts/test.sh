#!/usr/bin/env bash
# Builds packd three ways and runs every test (warnings are errors in all):
#   build/          RelWithDebInfo: integration tests, Python tests, GPU host tests
#   build-asan/     AddressSanitizer + UBSan build: all C unit tests
#   build-release/  Release (-O3, what packagers build): compiled only
#   build-checked/  RelWithDebInfo with the planner's self-checks
#                   (PK_SELF_CHECK): libpackd.so and packctl, for the
#                   plan-quality gate
#   build-fuzz/     clang-14 libFuzzer build, self-checks on: every fuzz
#                   target runs PK_FUZZ_SECONDS (default 30) seconds from its
#                   corpus (scripts/fuzz.sh)
# GPU tests that need a device skip with a message when there is none. The
# CUDA backend is compiled in build/ wherever nvcc is found: the machine's
# toolkit, or the pinned one scripts/bootstrap.sh installs (scripts/cuda-env.sh).
# tests/peers runs in a pinned venv outside the repository (tests/peers/env.sh:
# made once per set of pins, from the package registry, about 13 minutes and
# a few GB the first time; reused after that).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/cuda-env.sh
JOBS=${JOBS:-$(nproc)}
PY=${PY:-/usr/bin/python3}

echo "== build (release)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPK_WERROR=ON >/dev/null
cmake --build build -j "$JOBS"

echo "== build (Release, -O3)"
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DPK_WERROR=ON -DPK_BUILD_BENCH=OFF \
  -DPK_GPU_CUDA=OFF >/dev/null
cmake --build build-release -j "$JOBS"

echo "== build (self-checked: libpackd.so and packctl for the quality gate)"
cmake -S . -B build-checked -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPK_SELF_CHECK=ON -DPK_WERROR=ON \
  -DPK_BUILD_BENCH=OFF -DPK_BUILD_TESTS=OFF -DPK_GPU_CUDA=OFF >/dev/null
cmake --build build-checked -j "$JOBS" --target packd packctl

echo "== build (asan+ubsan)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DPK_SANITIZE=ON -DPK_WERROR=ON -DPK_BUILD_BENCH=OFF \
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

echo "== hostile clients (tests/hostile: bombs, slow and idle connections, store failures)"
PACKD_BUILD_DIR="$PWD/build" "$PY" -m pytest -q tests/hostile

echo "== the documents run as written, examples and pictures up to date (tests/docs)"
# A failure shows a diff; scripts/make-docs.sh refreshes the examples.
PACKD_BUILD_DIR="$PWD/build" "$PY" -m pytest -q tests/docs

echo "== plan-quality gate (bench/quality/record.json), planner self-checks on"
PACKD_BUILD_DIR="$PWD/build-checked" "$PY" bench/quality/run.py

echo "== packed == padded on a torch model (tests/e2e)"
if [ -d tests/e2e ]; then
  PACKD_BUILD_DIR="$PWD/build" "$PY" -m pytest -q tests/e2e
fi
echo "== the trainers' own packages and tests against packd (tests/peers; the pinned venv of tests/peers/env.sh)"
# Fails, never skips, when the package registry cannot be reached.
PACKD_BUILD_DIR="$PWD/build" bash tests/peers/run.sh

echo "== libFuzzer targets, ${PK_FUZZ_SECONDS:-30}s each (PK_FUZZ_SECONDS; 0 skips)"
if [ "${PK_FUZZ_SECONDS:-30}" != 0 ]; then
  JOBS="$JOBS" scripts/fuzz.sh "${PK_FUZZ_SECONDS:-30}"
fi
echo "== all tests passed"
