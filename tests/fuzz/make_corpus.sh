#!/usr/bin/env bash
# Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/
# (committed; run again after a wire or format change). plan_bytes seeds are
# real PlanRequest bytes saved by packctl (--dry-run --save-request), so the
# build at $PACKD_BUILD_DIR (default build/) must have packctl.
set -euo pipefail
cd "$(dirname "$0")/../.."
PACKCTL=${PACKD_BUILD_DIR:-build}/client/c/packctl
C=tests/fuzz/corpus
mkdir -p $C/fuzz_plan_bytes $C/fuzz_packctl_input $C/fuzz_http $C/fuzz_gpu_layout

# Lengths files and manifests: also the inputs of the plan_bytes seeds.
printf '812\n4096\n133\n2900\n' >$C/fuzz_packctl_input/totals.txt
printf '# prompt response\n100 700\n96 4000\n\n33 100   # comment\n400 2500\n17\n' \
  >$C/fuzz_packctl_input/pairs.txt
cat >$C/fuzz_packctl_input/manifest.json <<'JSON'
{"job": "grpo-step-7",
 "lengths": [812, 4096, 133, 2900],
 "lossTokens": [700, 3900, 100, 2500],
 "groups": [1, 1, 2, 2],
 "parallel": {"dp": 2, "cp": 2, "cpAlgo": "zigzag"},
 "batching": {"maxTokens": "8192", "miniBatches": 1, "keepGroups": true},
 "seed": 7}
JSON
cat >$C/fuzz_packctl_input/manifest_full.json <<'JSON'
{"lengths": ["5", 0, 4294967295], "loss_tokens": [1, 0, 2], "groups": ["18446744073709551615", 0, 1],
 "parallel": {"dp": 1, "tp": 2, "cp": 4, "pp": 2, "vpp": 2, "cp_algo": "CP_ALGO_ULYSSES",
              "sequence_parallel": true, "num_heads": 8, "microbatch_group": 2},
 "batching": {"mini_batches": 2, "shuffle": false, "dp_balance": "kk", "equal_count": true,
              "mode": "padded", "max_tokens": 4096, "max_seqs": 3, "micro_batch_size": 1,
              "min_micro_batches": 2, "round": 8, "micro_algo": 3, "order": "heavy_middle",
              "groups_on_rank": null},
 "cost": {"linear": 1.5, "quadratic": 1e-5, "per_sequence": 0, "perMicroBatch": 2},
 "layout": {"align": 16, "padMultiple": 8, "total_multiple": 2, "fixed_shape": true},
 "seed": "42"}
JSON

P=$C/fuzz_plan_bytes
L=$C/fuzz_packctl_input
"$PACKCTL" plan --dry-run --dp 2 --cp 2 --max-tokens 8192 --save-request $P/zigzag.bin $L/totals.txt >/dev/null
"$PACKCTL" plan --dry-run --save-request $P/manifest.bin $L/manifest.json >/dev/null
"$PACKCTL" plan --dry-run --dp 2 --mode padded --round 8 --max-tokens 6000 --micro-algo ffd \
  --save-request $P/padded.bin $L/pairs.txt >/dev/null
"$PACKCTL" plan --dry-run --dp 2 --pp 2 --vpp 2 --tp 2 --cp 2 --cp-algo ulysses --num-heads 8 \
  --sequence-parallel --mini-batches 2 --shuffle --seed 3 --max-tokens 9000 --group-size 2 \
  --keep-groups --save-request $P/pipeline.bin $L/pairs.txt >/dev/null
"$PACKCTL" plan --dry-run --dp 1 --mode padded --micro-algo shared_cuts --max-tokens 9000 \
  --save-request $P/shared_cuts.bin $L/totals.txt >/dev/null
"$PACKCTL" plan --dry-run --dp 2 --mode fixed --micro-batch-size 1 --align 16 --pad-multiple 8 \
  --total-multiple 32 --fixed-shape --per-sequence 3 --per-micro-batch 10 \
  --save-request $P/fixed.bin $L/totals.txt >/dev/null

# HTTP: the first byte is the read size - 1.
H=$C/fuzz_http
printf '\377GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n' >$H/get.txt
printf '\000GET /readyz?probe=1 HTTP/1.0\r\n\r\n' >$H/byte_by_byte.txt
printf '\007HEAD /healthz HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n' >$H/head.txt
printf '\377POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nab' >$H/post.txt
printf '\377GET /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n' >$H/chunked.txt
printf '\377THIS IS NOT HTTP\r\n\r\n' >$H/garbage.txt

# GPU layout: header (batch, seqlen/4, n, cp, algo, field, elem, flags), then
# per sequence row, slot (2 bytes), length (2 bytes), then per row start and
# length (2 bytes each).
G=$C/fuzz_gpu_layout
printf '\004\040\002\002\000\000\002\000\000\000\010\000\006\001\000\014\000\011\000\000\000\006\000\000\000\011\000\000\000\000\000\000\000\000' >$G/zigzag.bin
printf '\003\020\003\001\000\001\003\004\002\000\004\000\003\000\000\000\002\000\002\001\000\010\000\010' >$G/labels.bin
printf '\010\100\001\004\001\004\001\000\005\000\100\000\060' >$G/ulysses.bin
echo "corpus written under $C"
