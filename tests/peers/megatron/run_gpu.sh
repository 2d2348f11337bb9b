#!/usr/bin/env bash
# The Megatron-Core peer checks that need CUDA, for a machine with a GPU
# (run.sh runs the others):
#   1. gpu_wrap_data_iterator.py: Megatron's whole packing pipeline with
#      Megatron's and packd's schedule on one NCCL rank;
#   2. Megatron-LM's own test_wrap_dataloader (8 NCCL ranks; 5 cases on
#      main, 9 on the dev branch, 4 of them default_dynamic_cp) with
#      packd's schedulers in place of Megatron's (packd_megatron_plugin),
#      RUNS times (default 1; its lengths are random). With fewer than 8
#      GPUs the ranks share them: each rank gets its own NCCL_HOSTID, so
#      NCCL treats the ranks as separate hosts (sockets on loopback) instead
#      of refusing two ranks on one GPU.
# PEER_PY: python with torch (CUDA), grpcio and protobuf; MEGATRON_LM_SRC: a
# Megatron-LM tree with the scheduler registry and its tests/;
# PACKD_BUILD_DIR: a packd build with server/libpackd.so (default: build).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
PY="${PEER_PY:-python3}"
SRC="${MEGATRON_LM_SRC:?set MEGATRON_LM_SRC to a Megatron-LM source tree}"
export PACKD_BUILD_DIR="${PACKD_BUILD_DIR:-$REPO/build}" PYTHONUNBUFFERED=1

MEGATRON_LM_SRC="$SRC" "$PY" "$HERE/gpu_wrap_data_iterator.py"

cd "$SRC"
export PYTHONPATH="$HERE:$SRC${PYTHONPATH:+:$PYTHONPATH}"
export WORLD_SIZE=8 MASTER_ADDR=127.0.0.1 NCCL_SOCKET_IFNAME=lo NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
logs="$(mktemp -d)"
rc=0
for run in $(seq "${RUNS:-1}"); do
  export MASTER_PORT=$((29600 + run))
  pids=()
  for r in 0 1 2 3 4 5 6 7; do
    RANK=$r LOCAL_RANK=$r NCCL_HOSTID=host$r timeout 300 "$PY" -m pytest -q -p no:cacheprovider --noconftest \
      -p packd_megatron_plugin tests/unit_tests/test_sequence_packing.py -k test_wrap_dataloader \
      > "$logs/run$run.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  echo "run $run: $(grep -h -E '^[0-9]+ (passed|failed)' "$logs"/run$run.rank*.log | sort | uniq -c | tr -s ' ')"
  grep -h "^packd: " "$logs/run$run.rank0.log"
done
[ "$rc" = 0 ] || echo "some rank failed; logs in $logs"
exit "$rc"
