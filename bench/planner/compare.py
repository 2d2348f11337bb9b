#!/usr/bin/python3
"""Compares AUTO between two `bench_planner --csv` files (say, two commits
run back to back on the same machine): per mode and n, the geometric mean
of the plan-time ratio (new / old) and how many configurations keep their
lock-step efficiency within 1e-4.

Usage: bench/planner/compare.py OLD.csv NEW.csv
"""
import csv
import math
import sys


def load(path):
    rows = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["algo"] == "auto" and r["status"] == "ok":
                rows[(r["workload"], r["n"], r["dp"], r["cap"], r["mode"])] = r
    return rows


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip())
    old, new = load(sys.argv[1]), load(sys.argv[2])
    keys = sorted(set(old) & set(new))
    if not keys:
        sys.exit("no AUTO configuration is in both files")
    print("| mode | n | configs | time new/old (geo mean) | eff within 1e-4 | eff change (sum) |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode in sorted({k[4] for k in keys}):
        for n in sorted({k[1] for k in keys}, key=int):
            ks = [k for k in keys if k[4] == mode and k[1] == n]
            if not ks:
                continue
            ratio = math.exp(
                sum(math.log(float(new[k]["time_ms"]) / float(old[k]["time_ms"])) for k in ks)
                / len(ks))
            same = sum(abs(float(new[k]["lockstep_eff"]) - float(old[k]["lockstep_eff"])) < 1e-4
                       for k in ks)
            delta = sum(float(new[k]["lockstep_eff"]) - float(old[k]["lockstep_eff"]) for k in ks)
            print(f"| {mode} | {n} | {len(ks)} | {ratio:.3f} | {same} of {len(ks)} | {delta:+.5f} |")


if __name__ == "__main__":
    main()
