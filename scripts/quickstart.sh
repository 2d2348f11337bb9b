#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install dependencies, build,
# start the packd server on 127.0.0.1, plan a sample of a real workload
# through it with packctl, and stop the server cleanly (SIGTERM drain).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"

PORT=${PACKD_PORT:-50051}
METRICS=${PACKD_METRICS_PORT:-9464}
build/server/packd --listen "127.0.0.1:$PORT" --metrics-listen "127.0.0.1:$METRICS" \
  --grace-period 5 --drain-delay 0 &
PID=$!
trap 'kill -TERM $PID 2>/dev/null || true' EXIT
build/client/c/packctl health --server "127.0.0.1:$PORT" --wait 10
build/client/c/packctl plan --server "127.0.0.1:$PORT" \
  bench/workloads/azure_conv_2023.txt --sample 4096 --seed 1 \
  --dp 8 --cp 2 --max-tokens 16384 --mini-batches 2 --format summary
kill -TERM $PID
trap - EXIT
wait $PID
echo "quickstart: server drained and exited with status $?"
