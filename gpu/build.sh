#!/usr/bin/env bash
# Builds libpackd_gpu.so and the CUDA test without CMake, for machines that
# have a C compiler, nvcc and NCCL (e.g. from the nvidia-nccl-cu13 wheel) but
# none of our Debian packages. The CMake build (gpu/CMakeLists.txt) is the
# reference; this script compiles the same sources with the same flags.
#
#   gpu/build.sh                      # CUDA backend, NCCL if found
#   NCCL_ROOT=/path/to/nvidia/nccl gpu/build.sh
#   PK_GPU_CUDA=OFF gpu/build.sh      # host backend only
#
# Output in $BUILD_DIR (default build-gpu-sh/): libpackd_gpu.so, test_gpu_cuda.
set -euo pipefail
cd "$(dirname "$0")/.."
# CUDA_HOME and NCCL_ROOT of the pinned toolkit that scripts/bootstrap.sh
# installs on machines without /usr/local/cuda (nothing changes elsewhere).
. scripts/cuda-env.sh
BUILD_DIR=${BUILD_DIR:-build-gpu-sh}
CC=${CC:-cc}
PY=${PY:-python3}
PK_GPU_CUDA=${PK_GPU_CUDA:-ON}
ARCH=${ARCH:-90}
mkdir -p "$BUILD_DIR"
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)

CFLAGS=(-std=c11 -O2 -g -fPIC -fvisibility=hidden -D_POSIX_C_SOURCE=200809L
        -Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-unused-parameter
        -Igpu/include -Igpu/src -DPK_GPU_VERSION_STRING=\"0.1.0\")
LIBS=(-lpthread)
OBJS=()

if [ "$PK_GPU_CUDA" = ON ]; then
  # nvcc: $NVCC, else $CUDA_HOME/bin, else PATH, else /usr/local/cuda/bin
  # (the order of gpu/CMakeLists.txt's lookup).
  if [ -z "${NVCC:-}" ] && [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then
    NVCC=$CUDA_HOME/bin/nvcc
  fi
  NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  CUDA_HOME=${CUDA_HOME:-$(cd "$(dirname "$NVCC")/.." && pwd)}
  CFLAGS+=(-DPK_GPU_WITH_CUDA -isystem "$CUDA_HOME/include")
  if [ -z "${NCCL_ROOT:-}" ]; then
    # The nvidia-nccl wheel (nvidia/nccl/include/nccl.h), else the toolkit.
    hdr=$("$PY" - <<'PYEOF' 2>/dev/null || true
import glob, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
for r in roots:
    for h in glob.glob(r + "/nvidia/**/include/nccl.h", recursive=True):
        print(h)
        raise SystemExit
PYEOF
)
    if [ -n "$hdr" ]; then
      NCCL_ROOT=$(cd "$(dirname "$hdr")/.." && pwd)
    elif [ -f "$CUDA_HOME/include/nccl.h" ]; then
      NCCL_ROOT=$CUDA_HOME
    fi
  fi
  NCCL_LIB=""
  if [ -n "${NCCL_ROOT:-}" ]; then
    for d in "$NCCL_ROOT/lib" "$NCCL_ROOT/lib64"; do
      if ls "$d"/libnccl.so* >/dev/null 2>&1; then NCCL_LIB=$d; break; fi
    done
  fi
  if [ -n "$NCCL_LIB" ] && [ -f "$NCCL_ROOT/include/nccl.h" ]; then
    echo "NCCL: $NCCL_ROOT/include, $NCCL_LIB"
    CFLAGS+=(-DPK_GPU_WITH_NCCL -isystem "$NCCL_ROOT/include")
    LIBS+=(-L"$NCCL_LIB" -l:"$(cd "$NCCL_LIB" && ls libnccl.so* | sort | head -1)" -Wl,-rpath,"$NCCL_LIB")
  else
    echo "NCCL: not found (set NCCL_ROOT); the exchange API will report ENOTSUP"
  fi
  echo "nvcc: $NVCC (sm_$ARCH)"
  "$NVCC" -O2 -std=c++17 -lineinfo -gencode "arch=compute_$ARCH,code=[sm_$ARCH,compute_$ARCH]" \
    -Xcompiler -fPIC,-fvisibility=hidden -Igpu/include -Igpu/src -DPK_GPU_WITH_CUDA \
    -c gpu/src/cuda_backend.cu -o "$BUILD_DIR/cuda_backend.o"
  OBJS+=("$BUILD_DIR/cuda_backend.o")
  LIBS+=(-L"$CUDA_HOME/lib64" -L"$CUDA_HOME/lib" -lcudart_static -lrt -ldl -lstdc++)
fi

for src in error api layout host_backend exchange dcp transport_fake transport_nccl; do
  "$CC" "${CFLAGS[@]}" -c "gpu/src/$src.c" -o "$BUILD_DIR/$src.o"
  OBJS+=("$BUILD_DIR/$src.o")
done
"$CC" -shared -o "$BUILD_DIR/libpackd_gpu.so" "${OBJS[@]}" "${LIBS[@]}"
"$CC" -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -Igpu/include -Itests/gpu tests/gpu/test_cuda.c \
  -L"$BUILD_DIR" -lpackd_gpu -Wl,-rpath,"$BUILD_DIR" -o "$BUILD_DIR/test_gpu_cuda"
echo "built $BUILD_DIR/libpackd_gpu.so and $BUILD_DIR/test_gpu_cuda"
