#!/usr/bin/python3
"""Group-aware DP balance: packd's `groups_on_rank` against Karmarkar-Karp
over group workloads with equal group counts per rank (the method of verl's
get_group_balanced_partitions, written here from its description), on
GRPO-shaped batches built from bench/workloads/*.txt.

A batch holds `prompts` groups of `size` sequences. Group g draws one line
of the workload for its prompt (the PROMPT column; a one-column file's
length, at most 4096) and every sequence of the group adds, as its
response, the total length of another line drawn independently (so
lengths are long-tailed and differ inside a group); sequences above 32768
tokens are drawn again. A sequence's workload is verl's 24576 L + L^2,
which packd's default cost (L + L^2 / 24576, CP = TP = 1) is proportional
to. Both sides give every rank prompts / dp groups; packd plans with
equal_count, max_tokens 32768, PACKED. Columns: max / min over ranks of the
rank workload and of the rank tokens, the mean over the seeds; `packd <=`
counts the seeds where packd's max rank workload is at most KK's.

Usage: PACKD_BUILD_DIR=build bench/planner/groups.py [--prompts 128]
       [--seeds 5] [--workloads DIR]
Exits 1 when packd's max rank workload is above KK's on any batch.
"""
import argparse
import heapq
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

import packd  # noqa: E402

CAP = 32768


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if line:
                rows.append([int(x) for x in line])
    prompt = np.array([r[0] if len(r) == 2 else min(r[0], 4096) for r in rows], dtype=np.int64)
    total = np.array([sum(r) for r in rows], dtype=np.int64)
    return prompt, total


def grpo_batch(rng, prompt, total, prompts, size):
    lengths = np.empty(prompts * size, dtype=np.int64)
    groups = np.repeat(np.arange(prompts, dtype=np.int64), size)
    for g in range(prompts):
        p = int(prompt[rng.integers(len(prompt))])
        for i in range(size):
            while True:
                x = p + int(total[rng.integers(len(total))])
                if x <= CAP:
                    break
            lengths[g * size + i] = x
    return lengths, groups


def kk_equal(values, k):
    """Largest differencing over `values` into k parts of len(values) / k
    values each: values sorted ascending are cut into runs of k, each run a
    partial solution with one value per part; the two partial solutions
    whose part sums are furthest apart are merged (the largest part of one
    joined with the smallest of the other, and so on) until one is left.
    Returns the part of every value."""
    n = len(values)
    assert n % k == 0
    order = sorted(range(n), key=lambda i: (values[i], i))
    heap, tick = [], 0
    for c in range(0, n, k):
        parts = [(values[i], [i]) for i in order[c:c + k]]
        parts.sort(key=lambda p: -p[0])
        heapq.heappush(heap, (-(parts[0][0] - parts[-1][0]), tick, parts))
        tick += 1
    while len(heap) > 1:
        _, _, a = heapq.heappop(heap)
        _, _, b = heapq.heappop(heap)
        merged = [(a[i][0] + b[k - 1 - i][0], a[i][1] + b[k - 1 - i][1]) for i in range(k)]
        merged.sort(key=lambda p: -p[0])
        heapq.heappush(heap, (-(merged[0][0] - merged[-1][0]), tick, merged))
        tick += 1
    part = [0] * n
    for r, (_, items) in enumerate(heap[0][2]):
        for i in items:
            part[i] = r
    return part


def spread(per_rank):
    return max(per_rank) / min(per_rank)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--workloads", default=str(REPO / "bench" / "workloads"))
    args = ap.parse_args()
    client = packd.Client.local()
    print("| workload | group size | dp | KK max/min workload | packd max/min workload "
          "| KK max/min tokens | packd max/min tokens | packd <= KK |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    worse = 0
    for path in sorted(Path(args.workloads).glob("*.txt")):
        prompt, total = load(path)
        for size in (4, 8, 16):
            for dp in (4, 8, 16):
                f = {"kw": [], "pw": [], "kt": [], "pt": []}
                ok = 0
                for seed in range(args.seeds):
                    rng = np.random.default_rng([seed, size, dp])
                    lengths, groups = grpo_batch(rng, prompt, total, args.prompts, size)
                    work = 24576 * lengths + lengths * lengths
                    gwork = np.bincount(groups, weights=work).tolist()
                    part = np.array(kk_equal(gwork, dp))[groups]
                    kw = np.bincount(part, weights=work, minlength=dp)
                    kt = np.bincount(part, weights=lengths, minlength=dp)
                    plan = client.plan(lengths, groups=groups, dp=dp, groups_on_rank=True,
                                       equal_count=True, max_tokens=CAP)
                    pw = np.array([work[r.seqs].sum() for r in plan], dtype=float)
                    pt = np.array([lengths[r.seqs].sum() for r in plan], dtype=float)
                    for r in plan:  # every group on one rank
                        assert len(np.unique(groups[r.seqs])) * size == r.seqs.size
                    f["kw"].append(spread(kw))
                    f["pw"].append(spread(pw))
                    f["kt"].append(spread(kt))
                    f["pt"].append(spread(pt))
                    if pw.max() <= kw.max() * (1 + 1e-12):
                        ok += 1
                    else:
                        worse += 1
                m = {key: float(np.mean(v)) for key, v in f.items()}
                print(f"| {path.stem} | {size} | {dp} | {m['kw']:.4f} | {m['pw']:.4f} "
                      f"| {m['kt']:.4f} | {m['pt']:.4f} | {ok} of {args.seeds} |", flush=True)
    sys.exit(1 if worse else 0)


if __name__ == "__main__":
    main()
