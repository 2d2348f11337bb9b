#!/usr/bin/env bash
# On a GPU machine: the measured step-time comparison of bench/e2e/run.py on
# CUDA (a bf16 decoder, inputs packed by packd.gpu's CUDA backend, torch's
# varlen attention, CUDA-event timing through packd.timing, then a cost
# fitted with packd.calibrate and packd AUTO planned and timed again).
#
# The machine needs nvcc, PyTorch with CUDA, numpy and protobuf (Python);
# not our Debian packages. The planner library comes from PACKD_LIB, or
# from a folder made on a Debian machine with `bench/e2e/gpu.sh --stage DIR`
# (libpackd.so with the two libraries it links, libprotobuf-c and
# libxxhash, and the generated Python stubs), carried to the GPU machine.
#
#   bench/e2e/gpu.sh --stage build-e2e-carry       # on the Debian machine
#   bench/e2e/gpu.sh [--quick] [RESULTS_DIR]        # on the GPU machine
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}

if [ "${1:-}" = --stage ]; then
  dir=${2:?usage: gpu.sh --stage DIR}
  build=${PACKD_BUILD_DIR:-build}
  mkdir -p "$dir"
  cp -L "$build/server/libpackd.so" "$dir/"
  for dep in libprotobuf-c.so.1 libxxhash.so.0; do
    cp -L "$(ldd "$build/server/libpackd.so" | awk -v d="$dep" '$1 == d {print $3}')" "$dir/"
  done
  # The stubs are generated into the source tree on first import.
  PACKD_BUILD_DIR=$build /usr/bin/python3 -c 'import packd._stubs' 2>/dev/null ||
    PYTHONPATH=client/python PACKD_BUILD_DIR=$build /usr/bin/python3 -c 'import packd._stubs'
  echo "staged $(ls "$dir" | tr '\n' ' ')in $dir; carry it and client/python/packd/_proto"
  exit 0
fi

mode=--gpu
if [ "${1:-}" = --quick ]; then
  mode=--gpu-quick
  shift
fi
out=${1:-bench/e2e/gpu-results}
mkdir -p "$out"
carry=${PACKD_CARRY:-build-e2e-carry}
if [ -z "${PACKD_LIB:-}" ] && [ -f "$carry/libpackd.so" ]; then
  export PACKD_LIB=$PWD/$carry/libpackd.so
  export LD_LIBRARY_PATH=$PWD/$carry${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
log=$out/log.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$log"
"$PY" -c 'import torch, numpy, google.protobuf as p; print("torch", torch.__version__, "numpy",
numpy.__version__, "protobuf", p.__version__)' | tee -a "$log"

if [ ! -f build-gpu-e2e/libpackd_gpu.so ]; then
  echo "== build libpackd_gpu.so (gpu/build.sh)"
  BUILD_DIR=build-gpu-e2e bash gpu/build.sh >> "$log" 2>&1 || {
    tail -30 "$log"
    exit 1
  }
  echo "== CUDA tests of the GPU agent"
  if ./build-gpu-e2e/test_gpu_cuda >> "$log" 2>&1; then echo "test_gpu_cuda: ok"; else
    tail -20 "$log"
    echo "test_gpu_cuda: FAILED"
  fi
fi
export PACKD_GPU_LIB=$PWD/build-gpu-e2e/libpackd_gpu.so

echo "== bench/e2e/run.py $mode --device cuda"
"$PY" bench/e2e/run.py "$mode" --device cuda --timings "$out/timings.jsonl" --out "$out/table.md" 2>&1 | tee -a "$log"
