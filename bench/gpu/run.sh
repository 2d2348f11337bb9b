#!/usr/bin/env bash
# On a GPU machine: build gpu/ (CMake when present, else gpu/build.sh), run
# the CUDA tests (also under compute-sanitizer when it exists), the torch
# binding tests (when pytest exists) and the benchmark. The table goes to
# stdout and to bench/gpu/results-<device>.md; copy it into RESULTS.md.
#
#   bash bench/gpu/run.sh            # full shapes
#   QUICK=1 bash bench/gpu/run.sh    # small shapes
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
OUT=${OUT:-build-gpu-bench}

if [ -z "${NCCL_ROOT:-}" ]; then
  # NCCL from the nvidia-nccl wheel: <site-packages>/nvidia/.../include/nccl.h
  hdr=$("$PY" -c 'import glob,site,sys
for r in site.getsitepackages()+[site.getusersitepackages()]+sys.path:
    h=glob.glob(r+"/nvidia/**/include/nccl.h",recursive=True)
    if h: print(h[0]); break' 2>/dev/null || true)
  if [ -n "$hdr" ]; then NCCL_ROOT=$(cd "$(dirname "$hdr")/.." && pwd); export NCCL_ROOT; fi
fi
echo "NCCL_ROOT=${NCCL_ROOT:-<toolkit default>}"

if command -v cmake >/dev/null 2>&1 && [ "${NO_CMAKE:-0}" != 1 ]; then
  extra=()
  if [ -n "${NCCL_ROOT:-}" ]; then extra+=(-DPK_GPU_NCCL_ROOT="$NCCL_ROOT"); fi
  cmake -S gpu -B "$OUT" -DCMAKE_BUILD_TYPE=Release -DPK_GPU_BUILD_TESTS=ON "${extra[@]}"
  cmake --build "$OUT" -j "$(nproc)"
  LIB="$OUT/libpackd_gpu.so"
  TEST="$OUT/tests/test_gpu_cuda"
else
  OUT="$OUT" bash gpu/build.sh
  LIB="$OUT/libpackd_gpu.so"
  TEST="$OUT/test_gpu_cuda"
fi

echo "== CUDA tests"
"$TEST"
if command -v compute-sanitizer >/dev/null 2>&1; then
  echo "== compute-sanitizer (memcheck)"
  compute-sanitizer --tool memcheck --error-exitcode 1 "$TEST"
else
  echo "== compute-sanitizer not found; skipped"
fi

if "$PY" -c "import pytest, torch" 2>/dev/null; then
  echo "== torch binding tests"
  PACKD_GPU_LIB="$PWD/$LIB" "$PY" -m pytest -q tests/python/test_gpu_torch.py tests/python/test_gpu_binding.py
else
  echo "== pytest or torch missing; binding tests skipped"
fi

echo "== benchmark"
dev=$("$PY" -c "import torch; print(torch.cuda.get_device_name().replace(' ', '_'))")
args=()
if [ "${QUICK:-0}" = 1 ]; then args+=(--quick); fi
PACKD_GPU_LIB="$PWD/$LIB" "$PY" bench/gpu/bench_gpu.py "${args[@]}" --out "bench/gpu/results-$dev.md"
