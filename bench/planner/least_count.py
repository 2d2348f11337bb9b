#!/usr/bin/python3
"""How often AUTO plans more micro-batches than ceil(sum / cap) on the small,
tightly filled batches verl's own unit test draws (20 to 25 sequences with
lengths uniform in [50, 90], cap 300, DP 1), and, for each such batch,
whether a packing at ceil(sum / cap) exists at all (HiGHS, from
python3-scipy, solves the bin-packing program exactly; without scipy the
column says "?").

Usage: PACKD_BUILD_DIR=build bench/planner/least_count.py [--batches 300]
       [--seed 1]
Prints one line per batch above ceil(sum / cap) and a summary line.
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


def packing_exists(lengths, bins, cap):
    """True / False when HiGHS decides whether `lengths` fit `bins` bins of
    `cap`; None without scipy or when it runs out of time."""
    try:
        from scipy.optimize import Bounds, LinearConstraint, milp
    except ImportError:
        return None
    n = len(lengths)
    rows, lo, hi = [], [], []
    for i in range(n):  # every sequence in exactly one bin
        r = np.zeros(n * bins)
        r[i * bins : (i + 1) * bins] = 1
        rows.append(r), lo.append(1), hi.append(1)
    for b in range(bins):  # every bin under the cap
        r = np.zeros(n * bins)
        r[b::bins] = lengths
        rows.append(r), lo.append(0), hi.append(cap)
    res = milp(np.zeros(n * bins), constraints=LinearConstraint(np.array(rows), lo, hi),
               integrality=np.ones(n * bins), bounds=Bounds(0, 1), options={"time_limit": 60})
    return {0: True, 2: False}.get(res.status)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cap", type=int, default=300)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    client = packd.Client.local()
    above = missed = 0
    for t in range(args.batches):
        lengths = rng.integers(50, 91, size=int(rng.integers(20, 26)))
        plan = client.plan(lengths, dp=1, max_tokens=args.cap)
        least = -(-int(lengths.sum()) // args.cap)
        if len(plan[0]) == least:
            continue
        above += 1
        exists = packing_exists(lengths, least, args.cap)
        missed += exists is True
        print(f"batch {t}: {lengths.size} sequences, {int(lengths.sum())} tokens: planned {len(plan[0])}, "
              f"ceil {least}, bound {plan.stats.micro_batches_lower_bound}, a packing at ceil exists: "
              f"{'?' if exists is None else exists}")
    print(f"{above} of {args.batches} batches above ceil(sum/cap); {missed} of them have a packing at it")


if __name__ == "__main__":
    main()
