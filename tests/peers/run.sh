#!/usr/bin/env bash
# The peer tests. Makes or reuses the pinned venv (env.sh; it fails, and so
# does this, when the package registry cannot be reached), then runs:
#  1. tests/peers: packd against the peers' releases from the registry
#     (verl's engine and trainer code, patch() on every release, verl's
#     distributed test replayed). This is what CI runs.
#  2. Where PACKD_VERL_SRC or PACKD_ROLL_SRC names a peer's source tree (a
#     snapshot of its repository: the registries do not carry its tests),
#     the peer's own tests of the functions packd replaces, with packd's
#     patch() applied before they import (hook/), PACKD_PEER_RUNS times
#     (default 1; their batches are random).
# PACKD_BUILD_DIR: the build whose libpackd.so the tests plan with (build/).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
venv=$(bash tests/peers/env.sh)
py="$venv/bin/python"
export PACKD_BUILD_DIR=${PACKD_BUILD_DIR:-$repo/build}
echo "peer venv: $venv" >&2
"$py" -m pytest -q -p no:cacheprovider tests/peers

# One peer's own tests, with its tree first on the path and packd patched.
own_tests() {
  local peer=$1 src=$2
  shift 2
  local i
  for i in $(seq "${PACKD_PEER_RUNS:-1}"); do
    echo "== $peer's own tests in $src, run $i" >&2
    (cd "$src" && PYTHONPATH="$repo/tests/peers/hook:$repo/client/python:$src" PACKD_PEER_PATCH=$peer \
      "$py" -m pytest -p no:cacheprovider -p packd_peer_plugin "$@")
  done
}

if [ -n "${PACKD_VERL_SRC:-}" ]; then
  # test_seqlen_balancing_distributed_params needs two GPUs (one process per
  # device, NCCL); elsewhere test_verl_replay.py stands for it.
  gpus=$("$py" -c 'import torch; print(torch.cuda.device_count())')
  deselect=()
  if [ "$gpus" -lt 2 ]; then
    echo "verl's test_seqlen_balancing_distributed_params needs 2 GPUs ($gpus here): not run" >&2
    deselect=(--deselect tests/utils/test_seqlen_balancing.py::test_seqlen_balancing_distributed_params)
  fi
  own_tests verl "$PACKD_VERL_SRC" tests/utils/test_seqlen_balancing.py \
    tests/utils/test_prepare_micro_batches_with_group_size.py tests/utils/test_dynamic_cp_scheduler.py "${deselect[@]}"
fi
if [ -n "${PACKD_ROLL_SRC:-}" ]; then
  own_tests roll "$PACKD_ROLL_SRC" tests/utils/test_dynamic_batching.py tests/utils/test_sequence_packing.py \
    tests/utils/test_functionals.py
fi
