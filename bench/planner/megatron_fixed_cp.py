#!/usr/bin/env python3
"""packd.megatron.DpBalancedScheduler against Megatron-Core's own
DpBalancedScheduler (megatron/core/datasets/data_schedule.py) on global
batches drawn from bench/workloads/*.txt.

A global batch is `n` lengths drawn from one workload file (a two-column
line counts prompt + response), each padded up to a multiple of 16 as
Megatron's packed datasets pad, and drawn again when longer than the cap of
one DP rank's micro-batch (max_seqlen_per_dp_cp_rank x cp). Both schedulers
get the same `[(id, seqlen)]` and the same (cap, cp, dp, VPP group).
Columns, as the mean over the seeds:

- `mb`: micro-batches per DP rank (the same on every rank for both);
- `max/cap`: the most tokens of one DP rank's micro-batch over the cap;
- `lock-step`: the sum over micro-batch slots of the slowest DP rank's
  cost (ranks that synchronise every micro-batch: FSDP, pipeline
  schedules), under packd's default cost L + L^2/24576 per sequence;
- `rank max`: the largest total cost of one DP rank (ranks that
  synchronise once per step, plain DDP);
- `ratio`: packd's over Megatron's, for the two step measures.

Needs Megatron-Core with the scheduler registry: run it in the peer venv
with MEGATRON_LM_SRC naming a Megatron-LM tree (tests/peers/megatron/run.sh
makes both; bench/planner/README.md has the command). Exits 1 if packd's
schedule breaks the cap or is not a valid schedule.
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))
if os.environ.get("MEGATRON_LM_SRC"):
    sys.path.insert(0, os.environ["MEGATRON_LM_SRC"])

import packd  # noqa: E402
from packd.megatron import DpBalancedScheduler  # noqa: E402

from megatron.core.datasets import data_schedule  # noqa: E402

WORKLOADS = ("azure_conv_2023", "azure_code_2023", "wikipedia_doc_lengths")
# (max_seqlen_per_dp_cp_rank, cp, dp, VPP group)
SHAPES = ((8192, 1, 8, None), (8192, 2, 8, None), (4096, 4, 4, 4), (16384, 1, 16, None))


def load(path):
    total = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if line:
                total.append(sum(int(x) for x in line))
    return np.array(total, dtype=np.int64)


def draw(rng, pool, n, cap):
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        while True:
            x = int(pool[rng.integers(pool.size)])
            x = -(-max(x, 1) // 16) * 16
            if x <= cap:
                out[i] = x
                break
    return out


def measure(groups, lengths, dp, cp):
    """(micro-batches per rank, most tokens of a rank's micro-batch,
    lock-step cost, largest rank total) of a schedule, checking that every
    id appears once."""
    cost = lengths + lengths.astype(np.float64) ** 2 / 24576.0
    seen = np.zeros(lengths.size, dtype=np.int64)
    most, lock, rank_total = 0, 0.0, np.zeros(dp)
    for row in groups:
        slot = []
        for r in range(dp):
            ids = np.asarray(row[r * cp], dtype=np.int64)
            seen[ids] += 1
            most = max(most, int(lengths[ids].sum()))
            c = float(cost[ids].sum())
            slot.append(c)
            rank_total[r] += c
        lock += max(slot)
    if not np.all(seen == 1):
        raise SystemExit("a schedule lost or repeated a sample")
    return len(groups), most, lock, float(rank_total.max())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=256, help="sequences per global batch")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--workloads", default=str(REPO / "bench" / "workloads"))
    args = ap.parse_args()
    client = packd.Client.local()
    failed = False
    print("| workload | cap/rank, cp, dp, vpp group | mb Megatron | mb packd | max/cap Megatron | max/cap packd "
          "| lock-step ratio | rank-max ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for name in WORKLOADS:
        pool = load(Path(args.workloads) / f"{name}.txt")
        for per_rank, cp, dp, group in SHAPES:
            cap = per_rank * cp
            rows = []
            for seed in range(args.seeds):
                rng = np.random.default_rng(seed)
                lengths = draw(rng, pool, args.n, cap)
                pairs = [(i, int(L)) for i, L in enumerate(lengths)]
                theirs = data_schedule.DpBalancedScheduler(per_rank, cp, dp, group).get_groups_and_subsamples(pairs)
                ours = DpBalancedScheduler(per_rank, cp, dp, group, client=client).get_groups_and_subsamples(pairs)
                t, o = measure(theirs, lengths, dp, cp), measure(ours, lengths, dp, cp)
                if o[1] > cap or o[0] % (group or 1):
                    failed = True
                rows.append((t[0], o[0], t[1] / cap, o[1] / cap, o[2] / t[2], o[3] / t[3]))
            m = np.mean(np.array(rows), axis=0)
            print(f"| {name} | {per_rank}, {cp}, {dp}, {group or '-'} | {m[0]:.1f} | {m[1]:.1f} | {m[2]:.3f} "
                  f"| {m[3]:.3f} | {m[4]:.3f} | {m[5]:.3f} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
