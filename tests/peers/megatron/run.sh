#!/usr/bin/env bash
# The Megatron-Core peer tests, in the peers' venv (tests/peers/env.sh makes
# it; PEER_PY names another python):
#   1. test_registry.py: packd.megatron in the real Megatron-Core (the
#      release: patch() refuses it; Megatron-LM main: registry, the
#      scheduler as Megatron builds it, and packd against Megatron's own
#      DpBalancedScheduler on random batches);
#   2. with MEGATRON_LM_SRC set, Megatron-LM's own tests of data_schedule
#      (tests/unit_tests/test_sequence_packing.py), run from that tree with
#      packd's schedulers in place of Megatron's (packd_megatron_plugin).
#      Its tests that start 8 NCCL ranks (13 of its 15) need 8 GPUs and are
#      deselected here; the others run.
# PACKD_BUILD_DIR: a packd build with server/libpackd.so (default: build).
#
# Megatron-LM main needs Python >= 3.12: PACKD_PEER_PYTHON=python3.12 makes
# the venv with it.
# Megatron-LM main, outside the repository (a clone, or any snapshot of it):
#   git clone https://github.com/NVIDIA/Megatron-LM DIR2   # then MEGATRON_LM_SRC=DIR2
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
PY="${PEER_PY:-$(bash "$HERE/../env.sh")/bin/python}"
export PACKD_BUILD_DIR="${PACKD_BUILD_DIR:-$REPO/build}"

"$PY" -m pytest -q -p no:cacheprovider "$HERE"

if [ -n "${MEGATRON_LM_SRC:-}" ]; then
  cd "$MEGATRON_LM_SRC"
  export PYTHONPATH="$HERE:$MEGATRON_LM_SRC${PYTHONPATH:+:$PYTHONPATH}"
  # Megatron-LM's conftest needs its CI's packages (click and more); its
  # hooks only set NCCL variables and a flag these tests do not read.
  args=(-q -p no:cacheprovider --noconftest -p packd_megatron_plugin tests/unit_tests/test_sequence_packing.py)
  "$PY" -m pytest "${args[@]}" -k "not test_get_batch_on_this_rank_for_sequence_packing and not test_wrap_dataloader"
fi
