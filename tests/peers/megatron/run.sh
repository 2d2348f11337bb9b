#!/usr/bin/env bash
# The Megatron-Core peer tests, in the peers' venv (tests/peers/env.sh makes
# it; PEER_PY names another python):
#   1. test_registry.py: packd.megatron in the real Megatron-Core (the
#      release: patch() refuses it; Megatron-LM main and its dev branch:
#      registry, the schedulers as Megatron builds them, and packd against
#      Megatron's own DpBalancedScheduler and, on dev,
#      DefaultDynamicCPScheduler on random batches);
#   2. test_dcp_packing.py: packd's megatron_packing algorithm against
#      Megatron-LM dev's DefaultDynamicCPScheduler on random batches (the
#      same groups where Megatron's keep the cap; dev trees only);
#   3. test_dcp_pipeline.py: Megatron-LM's wrap_data_iterator under dynamic
#      CP (default_dynamic_cp) on 8 and 4 gloo ranks, Megatron's scheduler
#      and packd's on the same batches (Megatron-LM trees that have it);
#   4. with MEGATRON_LM_SRC set, Megatron-LM's own tests of data_schedule
#      (tests/unit_tests/test_sequence_packing.py), run from that tree once
#      as they are and then RUNS times (default 1) with packd's schedulers
#      in place of Megatron's (packd_megatron_plugin). Its tests that need
#      CUDA or a distributed world are deselected here (run_gpu.sh runs
#      test_wrap_dataloader on a GPU machine): the reroute test over
#      NCCL, test_get_batch_on_this_rank_for_sequence_packing and
#      test_wrap_dataloader (Megatron's test utilities start NCCL ranks).
# PACKD_BUILD_DIR: a packd build with server/libpackd.so (default: build).
#
# Megatron-LM main needs Python >= 3.12: PACKD_PEER_PYTHON=python3.12 makes
# the venv with it.
# Megatron-LM main or its dev branch (which has dynamic CP's
# default_dynamic_cp), outside the repository (a clone, or any snapshot):
#   git clone https://github.com/NVIDIA/Megatron-LM DIR2            # main
#   git clone -b dev https://github.com/NVIDIA/Megatron-LM DIR3     # dev
# then MEGATRON_LM_SRC=DIR2 or DIR3.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
PY="${PEER_PY:-$(bash "$HERE/../env.sh")/bin/python}"
export PACKD_BUILD_DIR="${PACKD_BUILD_DIR:-$REPO/build}"

# -rP shows the Megatron/packd comparison test_dcp_pipeline.py prints.
"$PY" -m pytest -q -p no:cacheprovider -rP "$HERE"

if [ -n "${MEGATRON_LM_SRC:-}" ]; then
  cd "$MEGATRON_LM_SRC"
  export PYTHONPATH="$HERE:$MEGATRON_LM_SRC${PYTHONPATH:+:$PYTHONPATH}"
  # Megatron-LM's conftest needs its CI's packages (click and more); its
  # hooks only set NCCL variables and a flag these tests do not read. Its
  # pytest options (-x, -s, durations) are dropped so that every test runs.
  args=(-q -p no:cacheprovider --noconftest -o addopts= -rs tests/unit_tests/test_sequence_packing.py
    -k "not test_scheduler_reroute_dp_all_gather_distributed and not test_get_batch_on_this_rank_for_sequence_packing and not test_wrap_dataloader")
  echo "== Megatron-LM's own tests in $MEGATRON_LM_SRC, Megatron's schedulers" >&2
  "$PY" -m pytest "${args[@]}"
  for run in $(seq "${RUNS:-1}"); do
    echo "== Megatron-LM's own tests in $MEGATRON_LM_SRC, packd's schedulers, run $run" >&2
    "$PY" -m pytest -p packd_megatron_plugin "${args[@]}"
  done
fi
