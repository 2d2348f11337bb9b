#!/usr/bin/env bash
# On a GPU machine: build gpu/ (CMake when present, else gpu/build.sh), run
# the CUDA tests (also under compute-sanitizer when it exists), the torch
# binding tests (when pytest exists) and the benchmark. Every step runs even
# when an earlier one failed (a failed test must not hide the others); the
# script prints one line per step at the end and exits non-zero when any
# step failed. The table goes to stdout and to
# bench/gpu/results-<device>.md; copy it into RESULTS.md.
#
#   bash bench/gpu/run.sh            # full shapes
#   QUICK=1 bash bench/gpu/run.sh    # small shapes
#   BUILD_DIR=dir bash bench/gpu/run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
BUILD_DIR=${BUILD_DIR:-build-gpu-bench}
SUMMARY=()
FAILED=0

# step NAME COMMAND...: runs the command, records "NAME: ok" or the exit code.
step() {
  local name=$1
  shift
  echo "== $name"
  "$@"
  local rc=$?
  if [ $rc -eq 0 ]; then
    SUMMARY+=("$name: ok")
  else
    SUMMARY+=("$name: FAILED (exit $rc)")
    FAILED=1
  fi
  return $rc
}

if [ -z "${NCCL_ROOT:-}" ]; then
  # NCCL from the nvidia-nccl wheel: <site-packages>/nvidia/.../include/nccl.h
  hdr=$("$PY" -c 'import glob,site,sys
for r in site.getsitepackages()+[site.getusersitepackages()]+sys.path:
    h=glob.glob(r+"/nvidia/**/include/nccl.h",recursive=True)
    if h: print(h[0]); break' 2>/dev/null || true)
  if [ -n "$hdr" ]; then NCCL_ROOT=$(cd "$(dirname "$hdr")/.." && pwd); export NCCL_ROOT; fi
fi
echo "NCCL_ROOT=${NCCL_ROOT:-<toolkit default>}"

build_cmake() {
  local extra=()
  if [ -n "${NCCL_ROOT:-}" ]; then extra+=(-DPK_GPU_NCCL_ROOT="$NCCL_ROOT"); fi
  cmake -S gpu -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DPK_GPU_BUILD_TESTS=ON "${extra[@]}" &&
    cmake --build "$BUILD_DIR" -j "$(nproc)"
}

if command -v cmake >/dev/null 2>&1 && [ "${NO_CMAKE:-0}" != 1 ]; then
  step build build_cmake
  LIB="$BUILD_DIR/libpackd_gpu.so"
  TEST="$BUILD_DIR/tests/test_gpu_cuda"
else
  step build env BUILD_DIR="$BUILD_DIR" bash gpu/build.sh
  LIB="$BUILD_DIR/libpackd_gpu.so"
  TEST="$BUILD_DIR/test_gpu_cuda"
fi

if [ -x "$TEST" ]; then
  step "CUDA tests" "$TEST"
  if command -v compute-sanitizer >/dev/null 2>&1; then
    # API errors are not reported: NCCL 2.28's communicator set-up probes
    # kernel images with cudaFuncGetAttributes and gets (and handles)
    # cudaErrorNoKernelImageForDevice for architectures it lacks, which
    # memcheck would count as errors. packd's own CUDA calls are checked by
    # the test itself (every return code; a failure fails the test).
    step "compute-sanitizer memcheck" compute-sanitizer --tool memcheck --report-api-errors no \
      --leak-check full --error-exitcode 1 "$TEST"
    step "compute-sanitizer racecheck" compute-sanitizer --tool racecheck --error-exitcode 1 "$TEST"
  else
    SUMMARY+=("compute-sanitizer: not found, skipped")
  fi
fi

if [ -f "$LIB" ] && "$PY" -c "import pytest, torch" 2>/dev/null; then
  step "torch binding tests" env PACKD_GPU_LIB="$PWD/$LIB" "$PY" -m pytest -q \
    tests/python/test_gpu_torch.py tests/python/test_gpu_binding.py
else
  SUMMARY+=("torch binding tests: pytest, torch or the library missing, skipped")
fi

if [ -f "$LIB" ]; then
  dev=$("$PY" -c "import torch; print(torch.cuda.get_device_name().replace(' ', '_'))")
  args=()
  if [ "${QUICK:-0}" = 1 ]; then args+=(--quick); fi
  step benchmark env PACKD_GPU_LIB="$PWD/$LIB" "$PY" bench/gpu/bench_gpu.py "${args[@]}" \
    --out "bench/gpu/results-$dev.md"
fi

echo "== summary"
printf '%s\n' "${SUMMARY[@]}"
exit $FAILED
