#!/usr/bin/env python3
"""Emulated dynamic-CP step: packd dynamic CP against packd fixed CP and
Megatron-Core's plan, every GPU's shard work timed on the CPU model
(README.md in this folder, "Dynamic CP, emulated").

For every workload and pool the bench plans the same batch three ways
(four with MEGATRON_CORE_DIR), turns each plan into slots of groups, and
times every GPU's work of every slot on the tiny model (bench/e2e/ring.py:
the linear layers on the GPU's zigzag shard, attention ring style over c
steps, forward and backward, no communication). The emulated step is

    step = sum over slots of max over the pool's GPUs of t(GPU, slot)

(an idle GPU takes 0). Then ``packd.calibrate`` fits dynamic CP's cost
terms to every timed shard (records with ``"cp": c``), packd plans the
same batches again with the fitted cost, and the new plans are timed too.

    bench/e2e/dcp.py               # the README table (about 30 minutes on 2 shared cores)
    bench/e2e/dcp.py --quick       # one workload on 8 GPUs (under a minute)
    bench/e2e/dcp.py --smoke       # a tiny model and batch (seconds; tests/e2e runs it)
    bench/e2e/dcp.py --timings t.jsonl   # every timed shard: {"lengths", "seconds", "cp"}

Lengths are bench/dcp's batches (bench/dcp/run.py's ``workloads``: the
real lists of bench/workloads and its long-tail RL generator) divided by
``scale`` and rounded up, caps likewise; the default scale 32 puts the
longest long-tail sequence (64K tokens) at 2K tokens, and the attention
tile (128 tokens, a flash kernel's) at 4. Each run draws ``batches``
batches, each from its own seed; the table gives the mean over them and
the worst batch.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run as e2e  # noqa: E402  (bench/e2e/run.py: sys.path, packd, measure, lock-step sums)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import packd  # noqa: E402
from ring import ShardTimer  # noqa: E402
from tiny_model import Config  # noqa: E402


def _load_dcp_bench():
    """bench/dcp/run.py as a module (its workloads, fixed-CP size and the
    loader of Megatron-Core's scheduler)."""
    spec = importlib.util.spec_from_file_location("bench_dcp_run", e2e.REPO / "bench" / "dcp" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


DCP = _load_dcp_bench()


REAL_TILE = 128  # tokens a side of a flash-attention tile on a GPU; the emulated tile is this / scale


@dataclass
class Setting:
    model: Config
    scale: int  # real lengths and caps are divided by this
    runs: list  # (workload, pool, sequences)
    repeats: int
    batches: int = 1  # batches drawn per run (seeded), each planned and timed
    tile: int = 0  # tokens a side of an attention tile; 0: REAL_TILE / scale

    def tile_size(self) -> int:
        return self.tile or max(1, round(REAL_TILE / self.scale))


def setting(mode: str) -> Setting:
    model = Config(vocab=256, hidden=64, heads=4, layers=2, mlp=128, dtype="float32", seed=0)
    if mode == "smoke":
        # The bench's model on a small batch: a smaller model's times hardly
        # grow with tokens (Python's overhead per operation dominates), and
        # the calibration needs them to.
        return Setting(model, scale=128, runs=[("long_tail_rl", 8, 8)], repeats=1, batches=2)
    if mode == "quick":
        return Setting(model, scale=32, runs=[("long_tail_rl", 8, 16)], repeats=2)
    return Setting(model, scale=32, repeats=3, batches=3, runs=[
        (w, pool, 4 * pool) for pool in (8, 16) for w in ("azure_conv", "azure_code", "wikipedia_64k", "long_tail_rl")])


# ---- Plans as slots of groups -------------------------------------------------


@dataclass
class Emulated:
    """A plan as the bench runs it: ``slots[j]`` lists the groups of slot
    j as (c, aligned lengths); ``grid[j]`` every busy GPU's key (c, rank in
    group, lengths)."""

    name: str
    slots: list
    cap: int
    over_cap: int = 0  # groups whose GPUs hold more than the cap
    grid: list = field(default_factory=list)
    measured: float = 0.0
    split: float = 0.0
    predicted: float = 0.0
    predicted_extra: float = 0.0  # under ExtraFit's cost

    def __post_init__(self):
        for slot in self.slots:
            col = []
            for c, lens in slot:
                if sum(lens) // c > self.cap:
                    self.over_cap += 1
                col += [(c, r, lens) for r in range(c)]
            self.grid.append(col)


def group_key(c: int, lengths) -> tuple:
    """A group's lengths as a timing key: the shard's work depends on the
    multiset only."""
    return c, tuple(sorted((int(x) for x in lengths), reverse=True))


def aligned(n: int, c: int) -> int:
    m = 2 * c if c > 1 else 1
    return -(-n // m) * m


def from_dynamic(name: str, plan, cap: int) -> Emulated:
    slots = []
    for slot in plan.slots:
        groups = []
        for g in slot.groups:
            lens = np.diff(np.asarray(g.cu_seqlens_padded, dtype=np.int64))
            assert g.size == 1 or not (lens % (2 * g.size)).any(), f"{name}: a group not aligned to 2c"
            groups.append(group_key(g.size, lens))
        slots.append(groups)
    return Emulated(name, slots, cap)


def from_fixed(name: str, plan, dp: int, cp: int, cap: int) -> Emulated:
    m = plan.stats.micro_batches_per_rank
    slots = [[] for _ in range(m)]
    for d in range(dp):
        for j, mb in enumerate(plan[d].micro_batches):
            slots[j].append(group_key(cp, np.diff(np.asarray(mb.cu_seqlens_padded, dtype=np.int64))))
    return Emulated(name, slots, cap)


def from_megatron(name: str, groups, lengths, cap: int) -> Emulated:
    """Megatron-Core's own plan, (slot, size, sample ids) per group, each
    sequence aligned to 2c as its zigzag sharding needs; kept as it is, over
    the cap or not."""
    slots = {}
    for s, size, ids in groups:
        slots.setdefault(s, []).append(group_key(size, [aligned(int(lengths[i]), size) for i in ids]))
    return Emulated(name, [slots[s] for s in sorted(slots)], cap)


def fixed_cost(cost: packd.Cost, cp: int) -> packd.Cost:
    """The fixed-CP plan's cost: the dynamic per-GPU cost at c = cp, times
    cp (bench/dcp's convention, so that fixed CP optimises what the step is
    judged by)."""
    return packd.Cost(linear=cost.linear + cost.cp_token * (cp - 1), quadratic=cost.quadratic,
                      per_sequence=cost.per_sequence * cp,
                      per_micro_batch=(cost.per_micro_batch + cost.cp_group * (cp - 1)) * cp)


@dataclass
class Case:
    workload: str
    pool: int
    batch: int  # which of the run's batches (its seed)
    lengths: np.ndarray  # scaled
    cap: int  # scaled per-GPU cap
    real_cap: int
    cp: int  # fixed CP
    plans: dict = field(default_factory=dict)  # name -> Emulated


def plan_case(client, case: Case, cost: packd.Cost, megatron=None, suffix: str = "") -> None:
    lengths, pool, cap, cp = case.lengths.tolist(), case.pool, case.cap, case.cp
    dyn = client.plan(lengths, dp=pool, cp=1, max_tokens=cap, dynamic_cp=True, cost=cost)
    case.plans["packd dynamic" + suffix] = from_dynamic("packd dynamic" + suffix, dyn, cap)
    fixed = client.plan(lengths, dp=pool // cp, cp=cp, max_tokens=cap, cost=fixed_cost(cost, cp))
    assert fixed.stats.cap_violations == 0
    case.plans["packd fixed CP" + suffix] = from_fixed("packd fixed CP" + suffix, fixed, pool // cp, cp, cap)
    rep = client.plan(lengths, dp=pool, cp=1, max_tokens=cap, dynamic_cp={"algo": "megatron"}, cost=cost)
    rep = from_dynamic("Megatron (packd repro)" + suffix, rep, cap)
    if suffix:
        # Megatron's scheduler sizes and fills groups by length alone, so
        # its plan is the same under any cost; a row only if not.
        if rep.slots != case.plans["Megatron (packd repro)"].slots:
            case.plans[rep.name] = rep
        return
    case.plans[rep.name] = rep
    if megatron is not None:
        groups, _ = megatron.schedule(lengths, pool, cap)
        case.plans["Megatron-Core"] = from_megatron("Megatron-Core", groups, case.lengths, cap)
    for e in case.plans.values():
        assert e.name == "Megatron-Core" or e.over_cap == 0, f"{e.name}: a group over the cap"


def make_cases(s: Setting, seed: int) -> list:
    workloads = DCP.workloads()
    cases = []
    for name, pool, n in s.runs:
        draw, real_cap = workloads[name]
        for b in range(s.batches):
            rng = random.Random(f"{seed}/{name}/{pool}/{n}/{b}")
            real = np.asarray(draw(rng, n), dtype=np.int64)
            lengths = np.maximum(1, -(-real // s.scale))
            cap = real_cap // s.scale
            cp = min(DCP.fixed_cp(lengths.tolist(), cap), pool)
            cases.append(Case(name, pool, b, lengths, cap, real_cap, cp))
    return cases


# ---- Main -----------------------------------------------------------------------


def parse_runs(ap, text: str) -> list:
    """--runs WORKLOAD:POOL:SEQUENCES,...; a bad entry exits 2 naming it."""
    names = DCP.workloads()
    runs = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
            ap.error(f"--runs: {item!r} is not WORKLOAD:POOL:SEQUENCES")
        if parts[0] not in names:
            ap.error(f"--runs: workload {parts[0]!r} is not one of {', '.join(names)}")
        if int(parts[1]) < 1 or int(parts[2]) < 1:
            ap.error(f"--runs: {item!r} needs at least one GPU and one sequence")
        runs.append((parts[0], int(parts[1]), int(parts[2])))
    return runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="long_tail_rl on 8 GPUs, two repeats")
    g.add_argument("--smoke", action="store_true", help="a tiny model and batch, for the test suite")
    ap.add_argument("--timings", metavar="FILE", help='write every timed shard as a JSON line '
                    '{"lengths": [...], "seconds": t, "cp": c} (the input of packctl calibrate)')
    ap.add_argument("--out", metavar="FILE", help="also write the tables (markdown) to FILE")
    ap.add_argument("--repeats", type=int, help="timed runs per distinct shard (median)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scale", type=int, help="divide the real lengths and caps by this (default: the mode's)")
    ap.add_argument("--tile", type=int, help=f"tokens a side of an attention tile (default: {REAL_TILE} / scale, "
                    "a flash kernel's tile at the emulation's scale)")
    ap.add_argument("--batches", type=int, help="batches drawn per run, seeded (default: 3 for the full run, "
                    "1 for --quick, 2 for --smoke)")
    ap.add_argument("--runs", help="WORKLOAD:POOL:SEQUENCES,... instead of the mode's (workloads: "
                    "azure_conv, azure_code, wikipedia_64k, long_tail_rl)")
    ap.add_argument("--installed", action="store_true", help="use the packd installed in this Python")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: stable per-core timing)")
    args = ap.parse_args(argv)

    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    s = setting(mode)
    for name in ("repeats", "scale", "tile", "batches"):
        v = getattr(args, name)
        if v is not None and v < 1:
            ap.error(f"--{name}: {v} (at least 1)")
    if args.repeats:
        s.repeats = args.repeats
    if args.scale:
        s.scale = args.scale
    if args.tile:
        s.tile = args.tile
    if args.batches:
        s.batches = args.batches
    if args.runs:
        s.runs = parse_runs(ap, args.runs)
    torch.set_num_threads(args.threads)
    log = (lambda msg: print(msg, file=sys.stderr, flush=True))
    client = packd.Client.local()
    log(f"packd {packd.__version__} from {Path(packd.__file__).parent}: {client!r}")
    mc_dir = os.environ.get("MEGATRON_CORE_DIR")
    megatron = DCP.Megatron(mc_dir) if mc_dir else None
    command = "bench/e2e/dcp.py " + " ".join(argv if argv is not None else sys.argv[1:])
    t_begin = time.perf_counter()

    # Phase one: what one would plan with before timing anything: the CP
    # terms bench/dcp estimates from a GPU cluster's figures (cp_token per
    # token, cp_group in tokens' worth, so divided by the scale) and the
    # model's FLOP ratio (the causal half of attention, as ring.py computes
    # it) for the quadratic term.
    qmodel = e2e.model_quadratic(s.model, causal_only=True)
    lin, _, _, _, cp_token, cp_group = DCP.COSTS["cp"]
    cost0 = packd.Cost(linear=lin, quadratic=qmodel, cp_token=cp_token, cp_group=cp_group / s.scale)
    cases = make_cases(s, args.seed)
    for case in cases:
        plan_case(client, case, cost0, megatron)
        log(f"{case.workload} pool {case.pool} batch {case.batch}: {case.lengths.size} sequences, {int(case.lengths.sum())} tokens "
            f"(scaled 1/{s.scale}), max {int(case.lengths.max())}, cap {case.cap}/GPU, fixed CP {case.cp}")
    timer = ShardTimer(s.model, args.seed, s.tile_size())
    keys = {k for c in cases for e in c.plans.values() for col in e.grid for k in col}
    log(f"{len(keys)} distinct shards, {s.repeats} repeat(s)")
    runs, raw = e2e.measure(timer, keys, s.repeats, args.seed, log)

    # Phase two: dynamic CP's cost fitted to every timed shard, packd's
    # plans again with it, their new shards timed.
    records = [{"lengths": list(k[2]), "seconds": statistics.median(v), "cp": k[0]} for k, v in runs.items()]
    cal = packd.calibrate(records)
    extra = extra_fit(records)
    log(f"calibrated on {cal.samples} shards: {cal.cost}, r2 {cal.r2:.4f}, MAPE {cal.mape:.1%}")
    for case in cases:
        plan_case(client, case, cal.cost, suffix=", calibrated")
    new = {k for c in cases for e in c.plans.values() for col in e.grid for k in col} - keys
    log(f"{len(new)} more distinct shards for the calibrated plans")
    if new:
        more, more_raw = e2e.measure(timer, new, s.repeats, args.seed + 1, log)
        runs.update(more)
        raw.update(more_raw)
    keys |= new

    times = {k: statistics.median(v) for k, v in runs.items()}
    half_a = {k: statistics.median(v[0::2]) for k, v in runs.items()}
    half_b = {k: statistics.median(v[1::2] or v) for k, v in runs.items()}
    for case in cases:
        for e in case.plans.values():
            e.measured = e2e.lockstep(e.grid, times.__getitem__)
            e.split = e2e.lockstep_split(e.grid, half_a, half_b)
            e.predicted = e2e.lockstep(e.grid, lambda k: cal.cost.predict(list(k[2]), cp=k[0]))
            e.predicted_extra = e2e.lockstep(e.grid, lambda k: extra.predict(list(k[2]), cp=k[0]))
    if args.timings:
        with open(args.timings, "w") as f:
            for k in sorted(keys, key=lambda k: (k[0], sum(k[2]), k)):
                f.write(json.dumps({"lengths": list(k[2]), "seconds": round(times[k], 6), "cp": k[0]}) + "\n")
    out = report(cases, s, cal, records, command, mode, len(keys), time.perf_counter() - t_begin,
                 (e2e.spread(raw), e2e.spread(runs)), cost0, extra)
    print(out)
    if args.out:
        Path(args.out).write_text(out + "\n")
    return 0


def _design(records) -> np.ndarray:
    """The calibration's features of every record (packd.calibrate's six:
    1, k, sum a / c, sum a^2 / c, c - 1, sum a (c - 1) / c) and one more,
    k (c - 1)."""
    rows = []
    for r in records:
        a, c = np.asarray(r["lengths"], dtype=np.float64), r["cp"]
        rows.append([1.0, a.size, a.sum() / c, (a * a).sum() / c, c - 1, a.sum() * (c - 1) / c, a.size * (c - 1)])
    return np.array(rows)


@dataclass
class ExtraFit:
    """packd's dynamic-CP cost plus a term it does not have: a cost per
    sequence per extra ring step, k (c - 1) (every step a GPU runs holds a
    query tile or more of each of the group's k sequences, however short,
    and merges its partial output). Fitted here only to say whether the
    six terms miss it; the planner cannot plan with it."""

    coef: np.ndarray  # per_micro_batch, per_sequence, linear, quadratic, cp_group, cp_token, per_sequence_step
    r2: float
    mape: float

    def predict(self, lengths, cp: int) -> float:
        return float(_design([{"lengths": lengths, "cp": cp}])[0] @ self.coef)


def extra_fit(records) -> ExtraFit:
    """Non-negative least squares on the seven features (scaled to unit
    norm, as packd.calibrate scales its six)."""
    from scipy.optimize import nnls

    x = _design(records)
    t = np.array([r["seconds"] for r in records], dtype=np.float64)
    scale = np.sqrt((x * x).sum(axis=0))
    scale[scale == 0] = 1.0  # a feature that is 0 on every record (no group above 1 GPU) keeps coefficient 0
    coef = nnls(x / scale, t)[0] / scale
    pred = x @ coef
    ss_tot = float(((t - t.mean()) ** 2).sum())
    r2 = 1 - float(((t - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else 1.0
    return ExtraFit(coef, r2, float((np.abs(pred - t) / t).mean()))


def residuals(records, cost, title: str = "measured / predicted per shard of the fit") -> list:
    """Where the fitted cost is off: the median of measured / predicted
    over the fit's shards by group size and sequence count (the cost has
    one per-sequence term for every group size)."""
    buckets = [(1, 1), (2, 3), (4, 7), (8, 1 << 30)]
    cell = {}
    for r in records:
        k = len(r["lengths"])
        b = next(i for i, (lo, hi) in enumerate(buckets) if lo <= k <= hi)
        cell.setdefault((r["cp"], b), []).append(r["seconds"] / cost.predict(r["lengths"], cp=r["cp"]))
    names = ["1 sequence", "2-3", "4-7", "8+"]
    out = [f"{title} (median, count) by group size c and sequences on the GPU:",
           "", "| c | " + " | ".join(names) + " |", "|---:|" + "---:|" * len(names)]
    for c in sorted({cc for cc, _ in cell}):
        row = [f"{statistics.median(cell[c, b]):.2f} ({len(cell[c, b])})" if (c, b) in cell else "–"
               for b in range(len(buckets))]
        out.append(f"| {c} | " + " | ".join(row) + " |")
    return out


def _ratios(group, name: str, ref: str, attr: str = "measured") -> list:
    """name's step over ref's in every batch of a run that has both."""
    return [getattr(c.plans[name], attr) / getattr(c.plans[ref], attr) for c in group
            if name in c.plans and ref in c.plans]


def _phase(name: str) -> str:
    return ", calibrated" if name.endswith(", calibrated") else ""


def report(cases, s: Setting, cal, cal_records, command, mode, nkeys, seconds, spread, cost0, extra) -> str:
    m = s.model
    c = cal.cost
    lines = [
        f"command: `{command.strip()}` ({mode}; {seconds:.0f} s wall)",
        "",
        f"model: {m.layers} layers, hidden {m.hidden}, {m.heads} heads, SwiGLU {m.mlp}, vocab {m.vocab}, "
        f"{m.dtype}; lengths and caps scaled 1/{s.scale}, attention tiles of {s.tile_size()} tokens; "
        f"{s.batches} batch(es) per run; torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s); {nkeys} distinct GPU shards, median of {s.repeats} "
        f"(median spread between repeats: {spread[0]:.1%} raw, {spread[1]:.1%} normalised)",
        f"phase one planned with L + L^2/{1 / cost0.quadratic:.0f} (the model's FLOPs), cp_token "
        f"{cost0.cp_token:.3g}, cp_group {cost0.cp_group:.3g} (bench/dcp's estimates, in scaled tokens)",
        f"calibrated (packd.calibrate on phase one's {cal.samples} shards, records with cp = c): per_micro_batch "
        f"{c.per_micro_batch:.3g} s, per_sequence {c.per_sequence:.3g} s, linear {c.linear:.3g} s/token, "
        f"quadratic {c.quadratic:.3g} s/token^2, cp_group {c.cp_group:.3g} s per group x (c-1), cp_token "
        f"{c.cp_token:.3g} s per token x (c-1)/c; r2 {cal.r2:.4f}, MAPE {cal.mape:.1%} per shard",
        "",
    ] + residuals(cal_records, c) + [
        "",
        f"with one more term, per sequence per extra ring step (k (c - 1), a term packd's cost lacks; fitted "
        f"here, not planned with): {extra.coef[6]:.3g} s, the six others per_micro_batch {extra.coef[0]:.3g}, "
        f"per_sequence {extra.coef[1]:.3g}, linear {extra.coef[2]:.3g}, quadratic {extra.coef[3]:.3g}, cp_group "
        f"{extra.coef[4]:.3g}, cp_token {extra.coef[5]:.3g}; r2 {extra.r2:.4f}, MAPE {extra.mape:.1%} per shard",
        "",
    ] + residuals(cal_records, extra, "measured / predicted with that term") + [
        "",
        "| workload | GPUs | n | cap/GPU (real) | plan | slots | group sizes | Σmax (s) | split (s) | "
        "vs Megatron | worst batch | vs fixed CP | predicted, calibrated (s) |",
        "|---|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    runs = {}
    for case in cases:
        runs.setdefault((case.workload, case.pool), []).append(case)
    summary, worst = [], {"": [], ", calibrated": []}
    mean = statistics.fmean
    for (workload, pool), group in runs.items():
        first = group[0]
        names = list(dict.fromkeys(n for case in group for n in case.plans))
        for name in names:
            have = [case for case in group if name in case.plans]
            es = [case.plans[name] for case in have]
            sizes = sorted({cc for e in es for slot in e.slots for cc, _ in slot})
            over = sum(e.over_cap for e in es)
            label = name
            if name.startswith("packd fixed CP"):
                label = name.replace("packd fixed CP", "packd fixed CP " + "/".join(
                    str(cp) for cp in dict.fromkeys(case.cp for case in have)))
            if over:
                label += f" ({over} groups over the cap)"
            if len(have) < len(group):
                label += f" ({len(have)} of {len(group)} batches)"
            meg = _ratios(have, name, "Megatron (packd repro)")
            fix = _ratios(have, name, "packd fixed CP" + _phase(name))
            lines.append(
                f"| {workload} | {pool} | {first.lengths.size} | {first.cap} ({first.real_cap}) | {label} | "
                f"{'/'.join(str(len(e.slots)) for e in es)} | {','.join(map(str, sizes))} | "
                f"{mean(e.measured for e in es):.4g} | {mean(e.split for e in es):.4g} | {mean(meg):.3f} | "
                f"{max(meg):.3f} | {mean(fix):.3f} | {mean(e.predicted for e in es):.4g} |")
        for suffix in ("", ", calibrated"):
            d = "packd dynamic" + suffix
            meg, meg_split = _ratios(group, d, "Megatron (packd repro)"), _ratios(group, d, "Megatron (packd repro)", "split")
            fix = _ratios(group, d, "packd fixed CP" + suffix)
            fix_split = _ratios(group, d, "packd fixed CP" + suffix, "split")
            worst[suffix].append((mean(meg), max(meg), workload, pool))
            pred = _ratios(group, d, "Megatron (packd repro)", "predicted")
            pred_x = _ratios(group, d, "Megatron (packd repro)", "predicted_extra")
            per = (lambda xs: ", ".join(f"{x:.3f}" for x in xs))
            summary.append(
                f"- {workload}, {pool} GPUs{suffix or ', phase one'}: packd dynamic / Megatron mean "
                f"{mean(meg):.3f} (batches {per(meg)}; split mean {mean(meg_split):.3f}), / packd fixed CP mean "
                f"{mean(fix):.3f} (batches {per(fix)}; split mean {mean(fix_split):.3f}); predicted / Megatron "
                f"{mean(pred):.3f} (calibrated cost), {mean(pred_x):.3f} (with the extra term)")
    for suffix, label in (("", "phase one"), (", calibrated", "calibrated")):
        w_mean = max(worst[suffix])
        w_batch = max(worst[suffix], key=lambda x: x[1])
        summary.append(f"- worst packd dynamic / Megatron (packd repro), {label}: mean {w_mean[0]:.3f} "
                       f"({w_mean[2]}, {w_mean[3]} GPUs); one batch {w_batch[1]:.3f} ({w_batch[2]}, "
                       f"{w_batch[3]} GPUs)")
    lines += [
        "",
        "Σmax: sum over slots of the max over the pool's GPUs of the median shard times; split: each slot's "
        "costliest GPU chosen on half of the repeats and timed on the other half; both the mean over the "
        "run's batches. vs Megatron, vs fixed CP: Σmax over Megatron (packd repro)'s and over packd fixed "
        "CP's of the same phase and batch, the mean over batches; worst batch: the largest of the batches' "
        "ratios to Megatron; slots: per batch; predicted: the calibrated cost's step of the plan (mean).",
        "",
    ] + summary
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
