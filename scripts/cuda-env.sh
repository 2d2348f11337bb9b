# Sourced, not run: the CUDA toolkit and NCCL that the GPU agent's CUDA
# backend is compiled with, on machines without /usr/local/cuda.
#
#   . scripts/cuda-env.sh            # exports CUDA_HOME and NCCL_ROOT when found
#   pk_cuda_install                  # (scripts/bootstrap.sh) installs the pins
#
# A machine with a toolkit of its own (CUDA_HOME set, or
# /usr/local/cuda/bin/nvcc) keeps it and is left alone. Otherwise nvcc,
# the CUDA runtime (headers and libcudart_static.a) and NCCL come from
# NVIDIA's PyPI wheels, at the versions pinned below, in a virtual
# environment outside the repository:
#   $PACKD_CUDA_PREFIX, default ${XDG_CACHE_HOME:-$HOME/.cache}/packd/cuda-<hash of the pins>
# whose nvidia/cu13 folder is laid out like a toolkit (bin/nvcc, include,
# lib) and whose nvidia/nccl folder holds include/nccl.h and lib/libnccl.so.2.
# CMake (gpu/CMakeLists.txt) finds nvcc through CUDA_HOME and NCCL through
# NCCL_ROOT; gpu/build.sh reads the same two variables.

# The pins. CUDA 13.5 compiles sm_90 (CMAKE_CUDA_ARCHITECTURES, gpu/build.sh
# ARCH) and runs on drivers of the CUDA 13 series; NCCL's cu13 build matches.
PK_CUDA_PINS=(
  nvidia-cuda-nvcc==13.5.37
  nvidia-cuda-runtime==13.5.37
  nvidia-cuda-crt==13.5.37
  nvidia-nvvm==13.5.37
  # libcu++'s <nv/target>, which cuda_fp16.h (included by nccl.h) needs.
  nvidia-cuda-cccl==13.3.5.0.6
  nvidia-nccl-cu13==2.32.3
)
# The folder is named by the pins, so that changing them installs anew.
PK_CUDA_PREFIX=${PACKD_CUDA_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/packd/cuda-$(printf '%s\n' "${PK_CUDA_PINS[@]}" | sha256sum | cut -c1-12)}

# The site-packages folder of the prefix's venv, or nothing.
pk_cuda_site() {
  local site
  for site in "$PK_CUDA_PREFIX"/lib/python3*/site-packages; do
    if [ -f "$PK_CUDA_PREFIX/.complete" ] && [ -x "$site/nvidia/cu13/bin/nvcc" ]; then
      echo "$site"
      return 0
    fi
  done
  return 1
}

# Installs the pins into the prefix unless a toolkit is already there or on
# the machine. The prefix counts as installed only once its .complete mark
# is written, after the last step, so an interrupted install is made again.
pk_cuda_install() {
  if pk_cuda_site >/dev/null; then
    echo "cuda: the pinned toolkit is in $PK_CUDA_PREFIX"
    return 0
  fi
  if [ -n "${CUDA_HOME:-}" ] || [ -x /usr/local/cuda/bin/nvcc ]; then
    echo "cuda: using the toolkit at ${CUDA_HOME:-/usr/local/cuda}"
    return 0
  fi
  local t0 site
  t0=$(date +%s)
  rm -rf "$PK_CUDA_PREFIX"
  mkdir -p "$(dirname "$PK_CUDA_PREFIX")"
  /usr/bin/python3 -m venv "$PK_CUDA_PREFIX"
  "$PK_CUDA_PREFIX/bin/pip" install -q --disable-pip-version-check --no-cache-dir "${PK_CUDA_PINS[@]}"
  # FindCUDAToolkit looks for libcudart.so by its link name; the wheel has
  # only the run-time name (a -dev package would add the link).
  for site in "$PK_CUDA_PREFIX"/lib/python3*/site-packages; do
    ln -sfn libcudart.so.13 "$site/nvidia/cu13/lib/libcudart.so"
  done
  touch "$PK_CUDA_PREFIX/.complete"
  echo "cuda: installed ${PK_CUDA_PINS[*]} into $PK_CUDA_PREFIX in $(($(date +%s) - t0))s"
}

# Exports CUDA_HOME and NCCL_ROOT for the pinned toolkit when the machine has
# no toolkit of its own and the prefix is installed; a no-op otherwise.
pk_cuda_env() {
  local site
  if [ -n "${CUDA_HOME:-}" ] || [ -x /usr/local/cuda/bin/nvcc ]; then return 0; fi
  site=$(pk_cuda_site) || return 0
  export CUDA_HOME="$site/nvidia/cu13"
  if [ -z "${NCCL_ROOT:-}" ] && [ -f "$site/nvidia/nccl/include/nccl.h" ]; then
    export NCCL_ROOT="$site/nvidia/nccl"
  fi
}
pk_cuda_env
