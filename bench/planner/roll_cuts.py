#!/usr/bin/python3
"""ROLL's batch shape cut two ways: NEXT_FIT (ROLL's greedy) against
SHARED_CUTS (the least padded cost at the same count, by dynamic
programming), both under the sorted stride with one boundary list shared by
every rank, as packd.roll plans it.

Batches: "uniform" draws lengths uniform in [128, 8192] (the shape of ROLL's
own VPP unit test); a workload name draws whole lines (prompt + response)
of bench/workloads/NAME.txt at or under the cap. Columns, the mean over the
seeds: micro-batches per rank, padded tokens as packd pads them (every rank
to its own widest row), padded tokens as ROLL pads them (micro-batch j of
every rank to the widest row of slot j over all ranks), and the lock-step
step cost; the last line gives SHARED_CUTS's change and on how many seeds
its step was strictly lower.

Usage: PACKD_BUILD_DIR=build bench/planner/roll_cuts.py [--seeds 20]
Exits 1 when SHARED_CUTS needs more micro-batches or a higher step cost
than NEXT_FIT on any batch.
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

import packd  # noqa: E402

CONFIGS = [  # (batch, n, dp, cap, round, extra plan keywords)
    ("uniform", 256, 4, 8192, 128, {}),
    ("uniform", 256, 4, 8192, 128, {"pp": 4, "vpp": 2}),
    ("uniform", 256, 4, 32768, 128, {}),
    ("azure_conv_2023", 1024, 8, 8192, 128, {}),
    ("azure_conv_2023", 1024, 8, 16384, 128, {}),
    ("azure_conv_2023", 1024, 8, 16384, 128, {"min_micro_batches": 24}),
]


def batch(kind, rng, n, cap):
    if kind == "uniform":
        return rng.integers(128, 8193, size=n)
    rows = [line.split() for line in open(REPO / "bench" / "workloads" / f"{kind}.txt") if line.strip()]
    totals = np.array([sum(int(x) for x in r if x.isdigit()) for r in rows])
    totals = totals[(totals > 0) & (totals <= cap)]
    return rng.choice(totals, size=n)


def measure(client, lengths, dp, cap, rnd, algo, extra):
    kw = dict(extra)
    if kw.get("pp"):
        kw["microbatch_group"] = kw["pp"]
    plan = client.plan(lengths, dp=dp, mode="padded", round=rnd, max_tokens=cap, dp_balance="sorted_stride",
                       micro_algo=algo, order="original", equal_count=True, **kw)
    roll_pad = 0
    for j in range(len(plan[0])):
        width = max(int(r.micro_batches[j].padded_width) for r in plan)
        roll_pad += sum(len(r.micro_batches[j]) for r in plan) * width
    st = plan.stats
    return np.array([st.micro_batches_per_rank, st.padded_tokens, roll_pad, st.step_cost], dtype=np.float64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    args = ap.parse_args()
    client = packd.Client.local()
    ok = True
    print("| batch | n | dp | cap | extra | micro/rank | packd padded NEXT_FIT -> SHARED_CUTS | ROLL padded | step | lower on |")
    print("|---|---:|---:|---:|---|---:|---|---|---|---:|")
    for kind, n, dp, cap, rnd, extra in CONFIGS:
        tot = {"next_fit": 0.0, "shared_cuts": 0.0}
        lower = 0
        for seed in range(args.seeds):
            lengths = batch(kind, np.random.default_rng(seed), n, cap)
            r = {a: measure(client, lengths, dp, cap, rnd, a, extra) for a in tot}
            if r["shared_cuts"][0] > r["next_fit"][0] or r["shared_cuts"][3] > r["next_fit"][3] * (1 + 1e-12):
                ok = False
                print(f"  WORSE: {kind} seed {seed}: {r}", file=sys.stderr)
            lower += r["shared_cuts"][3] < r["next_fit"][3] * (1 - 1e-12)
            for a in tot:
                tot[a] = tot[a] + r[a]
        nf, sc = tot["next_fit"] / args.seeds, tot["shared_cuts"] / args.seeds
        ex = " ".join(f"{k}={v}" for k, v in extra.items()) or "-"
        print(f"| {kind} | {n} | {dp} | {cap} | {ex} | {sc[0]:.2f} | {nf[1]:,.0f} -> {sc[1]:,.0f} ({100 * (sc[1] / nf[1] - 1):+.2f} %) "
              f"| {100 * (sc[2] / nf[2] - 1):+.2f} % | {100 * (sc[3] / nf[3] - 1):+.2f} % | {lower}/{args.seeds} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
