#!/usr/bin/python3
"""How far a PADDED plan is from the best possible one: a mixed-integer
program over the same batch, solved with HiGHS (scipy.optimize.milp).

    bench/planner/padded_exact.py LENGTHS --dp 8 --max-tokens 32768
        [--round 128] [--max-seqs N] [--time-limit 300] [--grid 1.003]
        [--model auto|runs|classes] [--relax none|counts|lp]
        [--packctl build/client/c/packctl] [--seed S]

It plans the batch with `packctl plan --local --mode padded` (AUTO), then
searches every plan with the same micro-batch count per rank (M) for the
least step cost, and prints the plan's step cost, the bound the planner
printed (stats.step_cost_lower_bound), and the program's proven lower bound
(its dual bound when the time limit stops it) and best plan. Needs
python3-scipy (apt-get install python3-scipy; not a dependency of packd).

The model. Some best PADDED plan is made of runs of the width-sorted rows,
dealt by cost in tiers of dp (the proof is at the top of
server/planner/auto_runs.c), so a plan is a choice of K = M x dp runs that
cover every row once (x_I = 1: run I is a micro-batch costing rows x
c(widest row), within the cap and max_seqs; at most K runs, which also
admits plans with empty micro-batches). Its step cost is the sum of
the column levels; the number of columns whose level reaches a value v is
at least ceil(N(v) / dp), N(v) the runs costing v or more. So with
thresholds g_0 < g_1 < ... (a geometric grid from the cheapest run's cost,
ratio --grid) and integers C_k >= N(g_k) / dp, C_k non-increasing, every
plan has step >= sum_k (g_k - g_{k-1}) C_k (g_{-1} = 0), with equality
when the run costs lie on the grid (they do where there are fewer distinct
run costs than grid points: then those are the thresholds). The program
minimises that sum: its optimum, and any dual bound HiGHS proves for it,
are lower bounds on every plan's step cost; the grid makes them at most
(grid - 1) low. The best
runs it finds are re-costed exactly (sorted, every dp-th summed).

The classes model (--model classes, the default above 1024 rows) is the
same program with counts instead of runs: rows of one padded width are
alike, so it counts micro-batches per (width class of the widest row, row
count); see solve_classes. It solves batches of any n (its size follows
the distinct widths), but HiGHS proves less within a time limit there: on
tiny batches both give the brute force's optimum
(tests/python/test_padded_exact.py).

Relaxations (--relax) show where a bound's strength comes from: "counts"
lets the micro-batch counts be fractions but keeps the column counts C_k
integers (what the column levels force: the stair), "lp" relaxes both.
Each proves a lower bound and finds no plan; lp mostly takes seconds
(0 to 142 s on the bench's PADDED misses), counts minutes (branch and
bound over the column counts). Where lp stays at the
planner's printed bound and counts reaches the program's optimum, what
lifts the least step cost above the printed bound is that the column
counts are whole numbers for every cost at once: the planner's stair
bound (server/planner/bounds_stair.c) forces them one cost at a time.
"""

import argparse
import json
import math
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def read_lengths(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if line:
                out.append(sum(int(x) for x in line))
    return out


def plan_with_packctl(args):
    cmd = [args.packctl, "plan", "--local", args.lengths, "--dp", str(args.dp), "--mode", "padded",
           "--round", str(args.round), "--max-tokens", str(args.max_tokens), "--seed", str(args.seed),
           "--format", "json"]
    if args.max_seqs:
        cmd += ["--max-seqs", str(args.max_seqs)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"padded_exact: packctl failed: {res.stderr.strip()}")
    return json.loads(res.stdout)["stats"]


def step_of(costs, dp):
    costs = sorted(costs, reverse=True)
    return sum(costs[j] for j in range(0, len(costs), dp))


def plan_efficiency(costs, dp):
    """Lock-step efficiency of a plan with these micro-batch costs dealt
    in tiers of dp (as the planner's stats): the mean cost per rank over
    the step cost."""
    step = step_of(costs, dp)
    return sum(costs) / dp / step if step > 0 else 1.0


def _thresholds(cost, grid_ratio):
    """The thresholds g_0 < g_1 < ...: the distinct costs where they are
    fewer than the geometric grid's points, else that grid; and each cost's
    bucket (the largest g_k <= cost)."""
    import numpy as np

    grid = [cost.min()]
    while grid[-1] < cost.max():
        grid.append(grid[-1] * grid_ratio)
    distinct = np.unique(cost)
    grid = distinct if len(distinct) <= len(grid) else np.array(grid)
    return grid, np.searchsorted(grid, cost, side="right") - 1


RELAXATIONS = ("none", "counts", "lp")


def _solve_program(cost, x_ub, model_rows, dp, m, grid_ratio, time_limit, relax="none"):
    """The threshold program over nx count variables x (x_i micro-batches
    of cost cost[i], at most x_ub[i]) with the model's own constraints
    (model_rows(add) adds them over columns 0 .. nx - 1): at most m x dp
    micro-batches, N_k = those costing g_k or more, C_k >= N_k / dp
    integer and non-increasing, minimise sum_k (g_k - g_{k-1}) C_k.
    relax "counts" lets the x be fractions (the C_k stay integers), "lp"
    lets every variable be a fraction: each gives a lower bound on the
    program's optimum, and so on every plan's step cost, but no plan.
    Returns (scipy result, x rounded or None, thresholds)."""
    if relax not in RELAXATIONS:
        raise ValueError(f"relax {relax!r}: must be one of {', '.join(RELAXATIONS)}")
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    grid, bucket = _thresholds(cost, grid_ratio)
    g, nx = len(grid), len(cost)
    rows, cols, vals, lo, hi = [], [], [], [], []

    def add(entries, low, high):
        for col, val in entries:
            rows.append(len(lo))
            cols.append(col)
            vals.append(val)
        lo.append(low)
        hi.append(high)

    model_rows(add)
    add([(idx, 1.0) for idx in range(nx)], 0, m * dp)
    by_bucket = [[] for _ in range(g)]
    for idx, b in enumerate(bucket):
        by_bucket[b].append((idx, -1.0))
    for k in range(g):
        add([(nx + k, 1.0)] + ([(nx + k + 1, -1.0)] if k + 1 < g else []) + by_bucket[k], 0, 0)
        add([(nx + k, 1.0), (nx + g + k, -float(dp))], -np.inf, 0)
        if k + 1 < g:
            add([(nx + g + k, 1.0), (nx + g + k + 1, -1.0)], 0, np.inf)
    nv = nx + 2 * g
    a = coo_matrix((vals, (rows, cols)), shape=(len(lo), nv)).tocsr()
    obj = np.zeros(nv)
    obj[nx + g:] = grid - np.concatenate([[0.0], grid[:-1]])
    integral = np.zeros(nv)
    if relax == "none":
        integral[:nx] = 1
    if relax != "lp":
        integral[nx + g:] = 1
    ub = np.full(nv, np.inf)
    ub[:nx] = x_ub
    ub[nx + g:] = m
    res = milp(obj, constraints=LinearConstraint(a, lo, hi), integrality=integral,
               bounds=Bounds(np.zeros(nv), ub),
               options={"time_limit": time_limit, "mip_rel_gap": 1e-5})
    x = None if res.x is None or relax != "none" else [int(round(v)) for v in res.x[:nx]]
    return res, x, grid


def _result(res, x, cost, dp, m, t0, **extra):
    dual = getattr(res, "mip_dual_bound", None)
    if res.status == 0 and (dual is None or not math.isfinite(dual)):
        dual = res.fun
    best, chosen = None, []
    if x is not None:
        for idx, count in enumerate(x):
            chosen += [float(cost[idx])] * count
        chosen.sort(reverse=True)
        best = step_of(chosen + [0.0] * (m * dp - len(chosen)), dp)
    return dict({"dual": dual if dual is not None and math.isfinite(dual) else None,
                 "best": best, "best_costs": chosen, "optimal": res.status == 0,
                 "seconds": time.time() - t0, "message": res.message}, **extra)


def _check_widths(width, cap):
    if width and max(width) > cap:
        raise ValueError(f"a row of width {max(width)} is above the cap {cap}")


def solve(width, dp, m, cap, max_seqs=0, cost_linear=1.0, cost_quadratic=1.0 / 24576,
          grid_ratio=1.003, time_limit=300.0, log=None, relax="none"):
    """The runs model for rows of the given padded widths (any order), dp
    ranks and m micro-batches per rank. Returns a dict: dual (a proven lower
    bound on every plan's step cost, None if HiGHS proved none), best (the
    step cost of the best plan found, exact, or None), best_costs (that
    plan's micro-batch costs, descending: column j is positions j x dp ..),
    optimal (HiGHS proved its optimum), runs, thresholds, seconds, message.
    relax: "none" (the program), "counts" or "lp" (_solve_program): with
    a relaxation, dual is its bound and best None."""
    import numpy as np

    _check_widths(width, cap)
    width = sorted(width, reverse=True)
    n = len(width)
    row_cost = [cost_linear * w + cost_quadratic * w * w for w in width]
    max_seqs = max_seqs or n
    runs = [(i, r, r * row_cost[i]) for i in range(n)
            for r in range(1, min(cap // width[i], max_seqs, n - i) + 1)]
    cost = np.array([c for _, _, c in runs])

    def cover_every_row(add):
        cover = [[] for _ in range(n)]
        for idx, (i, rr, _) in enumerate(runs):
            for t in range(i, i + rr):
                cover[t].append((idx, 1.0))
        for t in range(n):
            add(cover[t], 1, 1)

    if log:
        log(f"{n} rows, dp {dp}, cap {cap}, {m} micro-batches per rank; {len(runs)} candidate "
            f"runs; HiGHS for up to {time_limit:.0f} s ...")
    t0 = time.time()
    res, x, grid = _solve_program(cost, np.ones(len(runs)), cover_every_row, dp, m, grid_ratio,
                                  time_limit, relax)
    return _result(res, x, cost, dp, m, t0, runs=len(runs), thresholds=len(grid))


def solve_classes(width, dp, m, cap, max_seqs=0, cost_linear=1.0, cost_quadratic=1.0 / 24576,
                  grid_ratio=1.003, time_limit=300.0, log=None, relax="none"):
    """The same program over width classes, for any n: rows of one padded
    width are alike, so a plan is a count y(d, r) of micro-batches of r rows
    whose widest row is of class d (cost r x c(w_d), r x w_d within the cap
    and max_seqs). Such counts are some plan's exactly when every class
    heads at most as many micro-batches as it has rows, and, for every e,
    the rows of the e widest classes fit the slots of the micro-batches
    those classes head (each row may join any micro-batch headed by a row
    at least as wide: nested sets, so Hall's condition on these prefixes is
    enough for an assignment). Its size grows with the distinct widths (at
    most cap / round), not with n. Returns solve's dict (types instead of
    runs)."""
    import numpy as np

    _check_widths(width, cap)
    count = Counter(width)
    classes = sorted(count, reverse=True)
    n = len(width)
    max_seqs = max_seqs or n
    types = [(d, r, r * (cost_linear * w + cost_quadratic * w * w))
             for d, w in enumerate(classes) for r in range(1, min(cap // w, max_seqs, n) + 1)]
    cost = np.array([c for _, _, c in types])

    def heads_and_hall(add):
        by_class = [[] for _ in classes]
        for idx, (d, r, _) in enumerate(types):
            by_class[d].append((idx, float(r)))
        prefix, rows = [], 0
        for d, w in enumerate(classes):
            add([(idx, 1.0) for idx, _ in by_class[d]], 0, count[w])
            prefix += by_class[d]
            rows += count[w]
            add(list(prefix), rows, np.inf)

    if log:
        log(f"{n} rows in {len(classes)} width classes, dp {dp}, cap {cap}, {m} micro-batches per "
            f"rank; {len(types)} micro-batch types; HiGHS for up to {time_limit:.0f} s ...")
    t0 = time.time()
    res, x, grid = _solve_program(cost, np.full(len(types), np.inf), heads_and_hall, dp, m,
                                  grid_ratio, time_limit, relax)
    return _result(res, x, cost, dp, m, t0, types=len(types), thresholds=len(grid))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lengths", help="lengths file (TOTAL or PROMPT RESPONSE per line)")
    ap.add_argument("--dp", type=int, required=True)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--round", type=int, default=128)
    ap.add_argument("--max-seqs", type=int, default=0, help="0: no limit")
    ap.add_argument("--cost-linear", type=float, default=1.0)
    ap.add_argument("--cost-quadratic", type=float, default=1.0 / 24576)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=300.0, help="seconds for HiGHS")
    ap.add_argument("--grid", type=float, default=1.003, help="threshold ratio (> 1)")
    ap.add_argument("--model", choices=["auto", "runs", "classes"], default="auto",
                    help="runs: one variable per run of the width order (n up to a few "
                         "thousand); classes: counts per width class and row count (any n); "
                         "auto: runs up to 1024 rows, else classes")
    ap.add_argument("--relax", choices=list(RELAXATIONS), default="none",
                    help="none: the program; counts: micro-batch counts may be fractions "
                         "(column counts stay integers); lp: every variable may be a fraction. A "
                         "relaxation proves a (weaker) bound and finds no plan")
    ap.add_argument("--packctl", default=str(REPO / "build" / "client" / "c" / "packctl"))
    args = ap.parse_args()
    if not args.grid > 1:
        sys.exit(f"padded_exact: --grid {args.grid}: must be > 1")
    try:
        import scipy.optimize  # noqa: F401
    except ImportError as e:
        sys.exit(f"padded_exact: {e}; install python3-scipy (>= 1.9)")
    stats = plan_with_packctl(args)
    width = [(x + args.round - 1) // args.round * args.round for x in read_lengths(args.lengths)]
    model = args.model
    if model == "auto":
        model = "runs" if len(width) <= 1024 else "classes"
    solver = solve if model == "runs" else solve_classes
    try:
        r = solver(width, args.dp, int(stats["microBatchesPerRank"]), args.max_tokens, args.max_seqs,
                   args.cost_linear, args.cost_quadratic, args.grid, args.time_limit,
                   log=lambda msg: print(msg, file=sys.stderr, flush=True), relax=args.relax)
    except ValueError as e:
        sys.exit(f"padded_exact: {e}")
    plan, printed = float(stats["stepCost"]), float(stats["stepCostLowerBound"])
    print(f"plan step cost (packctl AUTO)        {plan:.1f}  (lock-step efficiency "
          f"{float(stats['lockstepEfficiency']):.4f})")
    print(f"planner's printed lower bound        {printed:.1f}  (plan / bound {plan / printed:.4f})")
    if r["dual"] is not None:
        what = "proven lower bound" if args.relax == "none" else f"{args.relax} relaxation's bound"
        print(f"{what} (HiGHS, {r['seconds']:.0f} s)".ljust(36) + f" {r['dual']:.1f}  "
              f"(plan / bound {plan / r['dual']:.4f}; bound / printed {r['dual'] / printed:.4f})")
    if r["best"] is not None:
        costs = r["best_costs"]
        print(f"best plan found by HiGHS             {r['best']:.1f}  (plan / it {plan / r['best']:.4f}; "
              f"lock-step efficiency {plan_efficiency(costs, args.dp):.4f})")
        print("its column levels                    "
              + ", ".join(f"{costs[j]:.0f}" for j in range(0, len(costs), args.dp)))
    print(f"model: {model}; relax: {args.relax}; status: {r['message']}")


if __name__ == "__main__":
    main()
