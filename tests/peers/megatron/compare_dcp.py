"""packd's dynamic-CP schedule against Megatron-LM's DefaultDynamicCPScheduler
(its dev branch) on seeded random batches: both schedulers as Megatron's
``wrap_data_iterator`` builds them, every schedule priced with packd's
default cost (per GPU of a group of c: the sum of (a + a^2 / 24576) / c over
its samples' lengths a aligned to 2c; a micro-batch costs its costliest
GPU; the step is the sum over micro-batches).

Prints, over the batches where Megatron's schedule keeps the per-GPU cap
(aligned as above), how often packd needs fewer, as many or more
micro-batches, and the range and quartiles of packd's step over Megatron's;
then the batches where packd's step is the higher. A measurement, not a
test: nothing is asserted.

Run: ``MEGATRON_LM_SRC=<Megatron-LM dev tree> PACKD_BUILD_DIR=build
<peer venv>/bin/python tests/peers/megatron/compare_dcp.py [batches] [seed]``
(defaults 300 and 1).
"""

import os
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))
if os.environ.get("MEGATRON_LM_SRC"):
    sys.path.insert(0, os.environ["MEGATRON_LM_SRC"])

import packd  # noqa: E402
import packd.megatron  # noqa: E402
from megatron.core.datasets import data_schedule as ds  # noqa: E402


def aligned(a: int, c: int) -> int:
    return a if c == 1 else -(-a // (2 * c)) * 2 * c


def price(groups, lengths, pool):
    """(step, the largest aligned tokens on one GPU) of a schedule."""
    step, widest = 0.0, 0.0
    for row in groups:
        worst, j = 0.0, 0
        while j < pool:
            k = j
            while k < pool and row[k] == row[j]:
                k += 1
            c = k - j
            a = [aligned(lengths[s], c) for s in row[j]]
            worst = max(worst, sum(x + x * x / 24576 for x in a) / c)
            widest = max(widest, sum(a) / c)
            j = k
        step += worst
    return step, widest


def draw(rng):
    """One batch: a layout, a per-GPU cap and lengths, three in ten drawn
    up to half the pool's capacity, the others up to twice the cap."""
    dp, cp = rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 4])
    if dp * cp < 2:
        cp = 2
    cap = rng.choice([1024, 2048, 4096, 8192])
    n = rng.randint(8, 128)
    top = cap * dp * cp // 32 if rng.random() < 0.3 else cap // 8
    lengths = [min(16 * rng.randint(1 if top > cap // 8 else 8, top), cap * dp * cp) for _ in range(n)]
    return dp, cp, cap, lengths


def main():
    batches = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    client = packd.Client.local()
    fewer = same = more = over = refused = 0
    ratios, slower = [], []
    for _ in range(batches):
        dp, cp, cap, lengths = draw(rng)
        pool, pairs = dp * cp, list(enumerate(lengths))
        try:
            theirs = ds.DefaultDynamicCPScheduler(cap, cp, dp, None, max_num_seqs=None).get_groups_and_subsamples(pairs)
        except AssertionError:
            refused += 1
            continue
        ours = packd.megatron.BalancedCPScheduler(cap, cp, dp, None, max_num_seqs=None, client=client)
        ours = ours.get_groups_and_subsamples(pairs)
        t_step, t_widest = price(theirs, lengths, pool)
        o_step, _ = price(ours, lengths, pool)
        if t_widest > cap:
            over += 1
            continue
        fewer += len(ours) < len(theirs)
        same += len(ours) == len(theirs)
        more += len(ours) > len(theirs)
        ratios.append(o_step / t_step)
        if o_step > t_step * (1 + 1e-9):
            slower.append((dp, cp, cap, len(lengths), len(ours), len(theirs), o_step / t_step))
    ratios.sort()
    q = [ratios[int(f * (len(ratios) - 1))] for f in (0, 0.25, 0.5, 0.75, 1)]
    print(f"{batches} batches: Megatron refused {refused}, put a GPU over the cap in {over}; on the other {len(ratios)}:")
    print(f"  micro-batches: packd fewer {fewer}, as many {same}, more {more}")
    print("  packd step / Megatron step: min %.3f, quartiles %.3f %.3f %.3f, max %.3f" % tuple(q))
    print(f"  packd's step higher in {len(slower)}:")
    for dp, cp, cap, n, mo, mt, r in slower:
        print(f"    dp {dp} cp {cp} cap {cap}, {n} samples: micro-batches packd {mo} Megatron {mt}, step ratio {r:.3f}")


if __name__ == "__main__":
    main()
