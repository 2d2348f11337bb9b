#!/usr/bin/env bash
# Installs every build and test dependency of packd on Debian 12 (bookworm).
# Needs root (or sudo). Safe to run again: apt-get skips what is installed.
# CUDA and NCCL are not Debian packages: a machine without a toolkit of its
# own (/usr/local/cuda or CUDA_HOME) gets nvcc, the CUDA runtime and NCCL
# from NVIDIA's PyPI wheels at pinned versions, in a folder outside the
# repository (scripts/cuda-env.sh), so that the GPU agent's CUDA backend is
# compiled everywhere; its tests skip where there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

PACKAGES=(
  # Toolchain.
  build-essential cmake pkg-config git clang-format valgrind
  # libFuzzer targets (tests/fuzz, scripts/fuzz.sh): clang-14, libFuzzer and
  # the ASan/UBSan runtimes (libclang-rt-14-dev is only a recommendation of
  # clang-14, which --no-install-recommends skips).
  clang-14 libfuzzer-14-dev libclang-rt-14-dev
  # gRPC C core, protobuf-c, libuv: the service and the C client.
  libgrpc-dev protobuf-c-compiler libprotobuf-c-dev libuv1-dev
  # zlib: the server inflates compressed requests itself (request_body.c).
  zlib1g-dev
  # Standard formats: plan ids (xxhash), JSON (jansson), HTTP (http-parser).
  libxxhash-dev libjansson-dev libhttp-parser-dev
  # The shared plan store (--plan-store): the hiredis client library, and a
  # real redis-server for tests/python/test_plan_store.py and bench/store.
  libhiredis-dev redis-server
  # Tests: cmocka for C, pytest with Debian's grpcio/protobuf/numpy for Python.
  libcmocka-dev protobuf-compiler protobuf-compiler-grpc
  python3 python3-grpcio python3-protobuf python3-pytest python3-numpy python3-scipy
  python3-prometheus-client python3-venv python3-pip python3-hypothesis
  # torch (CPU build): packd.gpu on torch tensors (tests/python/test_gpu_torch.py).
  python3-torch
  # TLS: OpenSSL's libcrypto for the server's certificate checks, token
  # digests and keyed plan ids (libgrpc-dev needs libssl-dev already), and the
  # openssl command, which tests/python/test_security.py makes certificates
  # with.
  libssl-dev openssl
  # Small tools used by the tests and scripts.
  curl procps ca-certificates
  # Containers (scripts/check-wheel.sh, scripts/verify-image.sh): podman with
  # runc, a Debian base made with debootstrap, podman-compose.
  podman runc debootstrap uidmap fuse-overlayfs slirp4netns podman-compose
)

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"

. scripts/cuda-env.sh
pk_cuda_install
echo "bootstrap: dependencies installed"
