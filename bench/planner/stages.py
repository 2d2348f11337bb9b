#!/usr/bin/python3
"""What each AUTO stage pays, from a `bench_planner --trace FILE` run.

Per stage (a candidate packer or an improver, names as in
server/planner/auto/auto.h): the configurations where it ran, those where it
won (lowered the step cost by more than 0.01 % of it: an improver against
the packing it was given; a PADDED candidate or the second column packer
against the best packing before it), how often a packer that ran first
was the one kept, its largest and mean gain where it won, and its time
(sum over the configurations, and the largest; wall-clock, read by the
planner around each stage).

Usage: bench/planner/stages.py TRACE.csv
"""
import csv
import sys
from collections import defaultdict

NOISE = 1e-4  # 0.01 % of the step cost.


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip())
    rows = list(csv.DictReader(open(sys.argv[1], newline="")))
    ran = defaultdict(set)
    won = defaultdict(list)
    kept = defaultdict(int)
    us = defaultdict(float)
    us_max = defaultdict(float)
    winners = defaultdict(int)
    configs = set()
    for r in rows:
        key = (r["workload"], r["n"], r["dp"], r["cap"], r["mode"])
        configs.add((key, r["winner"]))
        name = r["stage"]
        if name == "candidates":
            continue
        stage = (r["mode"], name)
        before, after = float(r["before"]), float(r["after"])
        t = float(r["us"])
        ran[stage].add(key)
        us[stage] += t
        us_max[stage] = max(us_max[stage], t)
        if before > 0 and after > 0 and after < before * (1 - NOISE):
            won[stage].append((before - after) / before)
        elif before == 0 and r["winner"] == name:
            kept[stage] += 1
    for key, winner in configs:
        winners[(key[4], winner)] += 1
    print("| mode | stage | ran in | kept (first packer) | won in | gain max | gain mean (won) | "
          "time sum ms | time max ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for stage in sorted(ran):
        g = won[stage]
        print("| %s | %s | %d | %s | %d | %s | %s | %.2f | %.3f |" % (
            stage[0], stage[1], len(ran[stage]), kept[stage] or "-", len(g),
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
