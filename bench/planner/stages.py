#!/usr/bin/python3
"""What each AUTO stage pays, from a `bench_planner --trace FILE` run.

Per stage (a candidate packer or an improver, names as in
server/planner/auto/auto.h): the configurations where it ran and where it
was skipped, those where it won (lowered the step cost by more than the
bar, 0.01 % of it unless --bar says otherwise: an improver against the
packing it was given; a candidate against the best packing before it), how
often its packing was the one kept, its largest and mean gain where it won,
and its time (sum over the configurations, and the largest; wall-clock,
read by the planner around each stage). The trace holds the records of the
count reached only.

Usage: bench/planner/stages.py [--bar FRACTION] TRACE.csv
"""
import csv
import sys
from collections import defaultdict


def main():
    args = sys.argv[1:]
    bar = 1e-4
    if len(args) == 3 and args[0] == "--bar":
        bar = float(args[1])
        args = args[2:]
    if len(args) != 1:
        sys.exit(__doc__.strip())
    rows = list(csv.DictReader(open(args[0], newline="")))
    ran = defaultdict(set)
    skipped = defaultdict(set)
    won = defaultdict(list)
    kept = defaultdict(set)
    us = defaultdict(float)
    us_max = defaultdict(float)
    winners = defaultdict(int)
    configs = set()
    for r in rows:
        key = (r["workload"], r["n"], r["dp"], r["cap"], r["mode"])
        configs.add((key, r["winner"]))
        stage = (r["mode"], r["stage"])
        if r["fate"] == "skipped":
            skipped[stage].add(key)
            continue
        before, after = float(r["before"]), float(r["after"])
        t = float(r["us"])
        ran[stage].add(key)
        us[stage] += t
        us_max[stage] = max(us_max[stage], t)
        if before > 0 and after > 0 and after < before * (1 - bar):
            won[stage].append((before - after) / before)
        if r["winner"] == r["stage"]:
            kept[stage].add(key)
    for key, winner in configs:
        winners[(key[4], winner)] += 1
    print("| mode | stage | ran in | skipped in | kept in | won in (> %.2f %%) | gain max | "
          "gain mean (won) | time sum ms | time max ms |" % (100 * bar))
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for stage in sorted(set(ran) | set(skipped)):
        g = won[stage]
        print("| %s | %s | %d | %d | %s | %d | %s | %s | %.2f | %.3f |" % (
            stage[0], stage[1], len(ran[stage]), len(skipped[stage]),
            len(kept[stage]) or "-", len(g),
            "%.4f %%" % (100 * max(g)) if g else "-",
            "%.4f %%" % (100 * sum(g) / len(g)) if g else "-",
            us[stage] / 1e3, us_max[stage] / 1e3))
    print()
    print("| mode | winning candidate | configurations |")
    print("|---|---|---:|")
    for (mode, w), c in sorted(winners.items()):
        print("| %s | %s | %d |" % (mode, w, c))


if __name__ == "__main__":
    main()
