#!/usr/bin/python3
"""Where the gap between packd's dynamic-CP step and its proven bound lies,
on the bench's worst cases: the same batches as run.py (same seeds), and
for each batch the step of pk_dcp_plan (AUTO), the library's bound, two of
its terms recomputed here from the formula of pk_dcp.h: the work bound
(every sequence's least pool work, with its share of the cp_group terms,
over the pool) and the tall-slot bound (the slots of the longest sequences
hold at most pool x cap tokens, so the work they cannot take needs other
slots; server/planner/dcp/cost.c), and packd's fixed-CP step as run.py
plans it, with the bound over it: how far below fixed CP any plan could
go (per case, the sums over its batches: the least "/ fixed CP" of run.py
any plan could reach). A step far above a bound that the terms agree on points at the plan; a
bound that only the work term sets points at the bound.

Usage:
  PACKD_BUILD_DIR=build /usr/bin/python3 bench/dcp/gap.py [COST/WORKLOAD/GPUS/N ...]
"""
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402

WORST = ["default/wikipedia_64k/64/512", "default/azure_conv/8/32", "cp/wikipedia_64k/256/4096",
         "cp/wikipedia_64k/64/512", "cp/wikipedia_64k/16/128", "cp/long_tail_rl/8/32",
         "cp/long_tail_rl/64/4096"]


def sizes_of(pool):
    out, c = [], 1
    while c <= pool:
        out.append(c)
        c *= 2
    if out[-1] != pool:
        out.append(pool)
    return out


def terms(lengths, pool, cap, cost):
    """The work bound and the tall-slot bound (tp 1, zigzag, power-of-two
    sizes, as run.py plans), per pk_dcp.h's cost."""
    lin, quad, seq, micro, cp_token, cp_group = cost

    def aligned(c, n):
        a = 1 if c == 1 else 2 * c
        return -(-n // a) * a

    def per_gpu(c, n):
        a = aligned(c, n)
        return seq + (lin * a + quad * a * a) / c + cp_token * a * (c - 1) / c

    items = []
    for n in lengths:
        cs = [c for c in sizes_of(pool) if aligned(c, n) <= c * cap]
        tokens = min(aligned(c, n) for c in cs)
        # The share of the cp_group terms of the smallest group it may use.
        work = min(c * per_gpu(c, n) for c in cs) + cp_group * (cs[0] - 1) * tokens / cap
        height = min(micro + cp_group * (c - 1) + per_gpu(c, n) for c in cs)
        items.append((n, work, tokens, height))
    total = sum(x[1] for x in items)
    slots = max(1, math.ceil(sum(x[2] for x in items) / (pool * cap)))
    dense = sorted(items, key=lambda x: -x[1] / x[2])

    def densest(tokens):
        got = 0.0
        for _, w, t, _ in dense:
            if t <= tokens:
                got += w
                tokens -= t
            else:
                return got + w * tokens / t
        return got

    longest = sorted(items, key=lambda x: -x[0])[:32]
    tall, tokens = 0.0, 0
    for q in range(len(longest)):
        tokens += longest[q][2]
        rmin = max(1, math.ceil(tokens / (pool * cap)))
        best = math.inf
        for r in range(rmin, q + 2):
            lows = sum(x[3] for x in longest[q + 2 - r:q + 1]) if r >= 2 else 0.0
            rest = max(slots - r, 0) * micro
            best = min(best, longest[0][3] + lows + rest +
                       max(total - densest(r * pool * cap), 0) / pool)
        if best < math.inf:
            tall = max(tall, best)
    return slots * micro + total / pool, tall


def main():
    cases = [a for a in sys.argv[1:] if "/" in a] or WORST
    work = run.workloads()
    print("| case | batch | packd step | bound | step / bound | work bound | tall-slot bound | "
          "fixed CP step | bound / fixed CP |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in cases:
        cost_name, wname, pool, n = name.split("/")
        pool, n = int(pool), int(n)
        wl, cap = work[wname]
        cost = run.COSTS[cost_name]
        # The same draws as run.py's case(): one seed per case, batches in turn.
        rng = random.Random(f"{cost_name}/{wname}/{pool}/{n}")
        sums = [0.0, 0.0, 0.0]  # Steps, bounds and fixed-CP steps of the four batches.
        for b in range(4):
            lengths = wl(rng, n)
            cp = min(run.fixed_cp(lengths, cap), pool)
            head = f"{cap} " + " ".join(repr(c) for c in cost) + " | " + " ".join(map(str, lengths))
            out, fixed = run.run_tool([f"plan auto {pool} 1 1 " + head,
                                       f"plan fixed {pool // cp} {cp} 1 " + head])
            by_work, tall = terms(lengths, pool, cap, cost)
            print(f"| {name} | {b} | {out['step']:.0f} | {out['bound']:.0f} | "
                  f"{out['step'] / out['bound']:.4f} | {by_work:.0f} | {tall:.0f} | "
                  f"{fixed['step']:.0f} | {out['bound'] / fixed['step']:.3f} |", flush=True)
            for x, v in enumerate((out["step"], out["bound"], fixed["step"])):
                sums[x] += v
        # The case as run.py sums it: no plan's summed step is below the
        # summed bound, so sum(bound) / sum(fixed) is the least "/ fixed CP"
        # any plan could have.
        print(f"| {name} | all | {sums[0]:.0f} | {sums[1]:.0f} | {sums[0] / sums[1]:.4f} | | | "
              f"{sums[2]:.0f} | {sums[1] / sums[2]:.3f} |", flush=True)


if __name__ == "__main__":
    main()
