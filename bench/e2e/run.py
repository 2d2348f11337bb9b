#!/usr/bin/env python3
"""Measured lock-step step time of packd AUTO against the peers' algorithms
on a real torch model (tests/e2e/tiny_model.py, fp32, CPU).

For every workload and DP size the bench plans one global batch with packd
AUTO and with the compatibility modes that reproduce verl, MindSpeed-RL,
NeMo-RL, slime and ROLL (all under the same hard token cap), times the
forward + backward of every distinct micro-batch of every plan on the model,
and adds up the lock-step step time

    step = sum over micro-batch slots j of max over DP ranks r of t(j, r)

that a synchronous data-parallel step takes when every rank runs its j-th
micro-batch in the same slot (gradient accumulation, PP or the DP
all-reduce keep the ranks in step). A micro-batch's time depends only on
the multiset of its slot lengths (the aligned lengths in PACKED mode; in
PADDED mode every row is a slot of the micro-batch's width, padding
included, as the padded batch runs), so each distinct multiset is timed once,
``repeats`` times in a shuffled order over all plans, and the median is used
wherever it occurs.

Times are the process's CPU time (``time.process_time``) of one
single-threaded forward + backward, normalised to the machine's median
speed by a reference micro-batch timed between measurements (see
``measure``): the development machine's 2 cores are shared, and even the CPU
time of the same work swings by tens of percent there.

Two step estimates: ``Σmax`` sums the max over ranks of the median times
(noise in the times only ever raises a max, so in expectation it is at or
above the true step); ``split`` chooses each slot's costliest rank on half
of the repeats and reads its time from the other half (in expectation at or
below the true step, and below it by no more than the slot's own
imbalance).

Predicted step: the plan's cost model (``stats.step_cost``: the sum over
slots of the costliest micro-batch, cost = L + L^2/24576 per slot by
default) times one factor fitted by least squares to all measured
micro-batches; also with the quadratic term from the model's FLOP count.

    bench/e2e/run.py               # full run (the README table; about 25 min on 2 shared cores)
    bench/e2e/run.py --quick       # one configuration, two repeats (about a minute)
    bench/e2e/run.py --smoke       # a tiny model and batch (seconds; tests/e2e runs it)
    bench/e2e/run.py --timings t.jsonl   # every measured micro-batch as a JSON line
    bench/e2e/run.py --quick --installed # with the installed wheel, not the checkout
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
# The packd under test: the checkout's client/python with the libraries of
# $PACKD_BUILD_DIR (default build/), or with --installed the package
# installed in this Python (the wheel of scripts/build-wheel.sh, with its
# own libraries), as on a trainer machine. Decided before packd is imported.
INSTALLED = "--installed" in sys.argv[1:]
for _p in ([] if INSTALLED else [str(REPO / "client" / "python")]) + [str(REPO / "tests" / "e2e")]:
    if _p not in sys.path:
        sys.path.insert(0, _p)
if not INSTALLED:
    os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import packd  # noqa: E402
from tiny_model import Config, TinyDecoder, varlen_attention  # noqa: E402

DEFAULT_QUADRATIC = 1.0 / 24576  # the planner's default cost: L + L^2/24576


# ---- Settings -----------------------------------------------------------


@dataclass
class Setting:
    model: Config
    max_len: int  # longest sequence (prompt + response)
    cap: int  # max_tokens of every plan
    runs: list  # (workload, dp, sequences per DP rank)
    repeats: int
    spike: float = 0.15  # share of responses cut at the length limit
    real_cap: int = 8192  # the real lists are scaled by max_len / real_cap
    round: int = 8  # ROLL's sequence_length_round (PADDED width multiple)
    device_line: str = ""  # the device, attention kernel and equality check of a CUDA run


def setting(mode: str) -> Setting:
    """Sizes: hidden 64 puts the model's attention/linear crossover (FLOPs)
    at L = 384, and sequences of up to 256 tokens give the longest sequence
    the share of quadratic cost a 16384-token sequence has under the default
    cost (256/384 = 16384/24576); the cap equals the longest sequence, as in
    bench/planner's 16384-token cap."""
    if mode == "gpu":
        # A bf16 decoder sized for one GPU: 4 layers of hidden 2048 under a
        # 16384-token cap, the scale bench/planner plans at.
        model = Config(vocab=32768, hidden=2048, heads=16, layers=4, mlp=5632, dtype="bfloat16", seed=0)
        return Setting(model, max_len=16384, cap=16384, real_cap=8192,
                       runs=[("rollout", 8, 32), ("azure-code", 8, 32)], repeats=3, round=128)
    if mode == "gpu-quick":
        model = Config(vocab=32768, hidden=1024, heads=8, layers=2, mlp=2816, dtype="bfloat16", seed=0)
        return Setting(model, max_len=16384, cap=16384, runs=[("rollout", 8, 16)], repeats=2, round=128)
    if mode == "smoke":
        return Setting(Config(vocab=32, hidden=16, heads=2, layers=1, mlp=32, dtype="float32", seed=0),
                       max_len=64, cap=64, runs=[("rollout", 2, 6)], repeats=1, round=4)
    model = Config(vocab=256, hidden=64, heads=4, layers=2, mlp=128, dtype="float32", seed=0)
    if mode == "quick":
        return Setting(model, max_len=256, cap=256, runs=[("rollout", 8, 32)], repeats=2)
    return Setting(model, max_len=256, cap=256,
                   runs=[("rollout", 8, 48), ("rollout", 64, 24), ("azure-code", 8, 96), ("azure-code", 64, 24)],
                   repeats=3)


def model_quadratic(cfg: Config, causal_only: bool = False) -> float:
    """The quadratic coefficient of the cost (with linear 1) from the model's
    FLOP count: per token the projections, MLP and LM head; per (query, key)
    pair QK^T and PV over the full square (the attention here computes the
    whole L x L score matrix and masks it)."""
    d, m, v, n = cfg.hidden, cfg.mlp, cfg.vocab, cfg.layers
    per_token = n * 2 * (d * 3 * d + d * d + d * 2 * m + m * d) + 2 * d * v
    per_pair = n * 2 * 2 * d
    if causal_only:  # flash-style kernels skip the masked half of the square
        per_pair /= 2
    return per_pair / per_token


# ---- Workloads ----------------------------------------------------------------


def rollout(rng, n: int, max_len: int, spike: float):
    """RL rollout lengths shaped like bench/planner's rollout workload scaled
    from 16384 to max_len tokens: prompt U[max_len/64, max_len/16],
    response log-normal (median 1500/16384 of max_len, sigma 1) cut at the
    response limit (max_len - max_len/16), and a share ``spike`` of the
    responses at the limit (generations stopped by it)."""
    lo, hi = max(1, max_len // 64), max(2, max_len // 16)
    p = rng.integers(lo, hi + 1, size=n)
    limit = max_len - hi
    r = np.ceil(rng.lognormal(np.log(max_len * 1500 / 16384), 1.0, size=n)).astype(np.int64)
    r = np.minimum(r, limit)
    r[rng.random(n) < spike] = limit
    return p + r, r


def real_list(rng, name: str, n: int, max_len: int, real_cap: int):
    """A real length list sampled with replacement: pairs whose total is
    above ``real_cap`` are dropped, the rest scaled by max_len / real_cap
    (rounded up, at least one prompt token), so the batch has the list's
    shape relative to the cap."""
    path = REPO / "bench" / "workloads" / {"azure-conv": "azure_conv_2023.txt", "azure-code": "azure_code_2023.txt",
                                           "wikipedia": "wikipedia_doc_lengths.txt"}[name]
    rows = [ln.split() for ln in path.read_text().splitlines() if ln.strip()]
    if len(rows[0]) == 2:
        pr = np.array([[int(a), int(b)] for a, b in rows], dtype=np.int64)
    else:  # documents: every token is a loss token
        tot = np.array([int(a[0]) for a in rows], dtype=np.int64)
        pr = np.stack([np.ones_like(tot), np.maximum(tot - 1, 0)], axis=1)
    pr = pr[pr.sum(axis=1) <= real_cap]
    pick = pr[rng.integers(0, len(pr), size=n)]
    scale = max_len / real_cap
    p = np.maximum(1, np.ceil(pick[:, 0] * scale)).astype(np.int64)
    r = np.ceil(pick[:, 1] * scale).astype(np.int64)
    over = p + r - max_len
    r = np.where(over > 0, r - over, r)
    return p + r, r


def workload(name: str, rng, n: int, s: Setting):
    if name == "rollout":
        return rollout(rng, n, s.max_len, s.spike)
    return real_list(rng, name, n, s.max_len, s.real_cap)


# ---- Algorithms -------------------------------------------------------------


def algorithms(s: Setting, quadratic_model: float):
    """(name, plan keywords). The compatibility modes are the pairs packd
    documents as reproducing each trainer; all keep the cap hard."""
    return [
        ("packd auto", {}),
        ("packd auto, model cost", {"linear": 1.0, "quadratic": quadratic_model}),
        ("verl", {"dp_balance": "kk_equal", "micro_algo": "kk_count", "order": "heavy_middle", "equal_count": True}),
        ("MindSpeed-RL", {"dp_balance": "lpt_equal", "micro_algo": "lpt_cap", "equal_count": True}),
        ("NeMo-RL", {"dp_balance": "none", "micro_algo": "mffd"}),
        ("slime (approx.)", {"dp_balance": "none", "micro_algo": "ffd"}),
        ("ROLL", {"dp_balance": "sorted_stride", "micro_algo": "next_fit", "mode": "padded", "round": s.round}),
    ]


def slots(mb) -> tuple:
    """The micro-batch as the model runs it: slot lengths, sorted (the key
    of the timing cache)."""
    return tuple(sorted((int(x) for x in np.diff(mb.cu_seqlens_padded)), reverse=True))


def cost(key, quadratic: float) -> float:
    return float(sum(L + quadratic * L * L for L in key))


# ---- Timing ---------------------------------------------------------------------


class Timer:
    def __init__(self, cfg: Config, seed: int):
        self.model = TinyDecoder(cfg)
        self.vocab = cfg.vocab
        self.gen = torch.Generator().manual_seed(seed)

    def inputs(self, key):
        cu = [0]
        for L in key:
            cu.append(cu[-1] + L)
        t = cu[-1]
        ids = torch.randint(0, self.vocab, (t,), generator=self.gen)
        tgt = torch.randint(0, self.vocab, (t,), generator=self.gen)
        pos = torch.cat([torch.arange(L) for L in key]) if key else torch.zeros(0, dtype=torch.int64)
        return ids, tgt, pos, cu

    def run(self, inp) -> float:
        ids, tgt, pos, cu = inp
        self.model.zero_grad(set_to_none=True)
        t0 = time.process_time()
        logits = self.model(ids, pos, lambda q, k, v: varlen_attention(q, k, v, cu))
        F.cross_entropy(logits, tgt, reduction="sum").backward()
        return time.process_time() - t0


REFERENCE = (64,)  # the micro-batch timed between measurements to follow the machine's speed


def measure(timer: Timer, keys, repeats: int, seed: int, log):
    """CPU seconds of every key, one entry per repeat, normalised to the
    machine's median speed; also the raw times.

    Each repeat walks all keys in a new shuffled order. Between any two
    measurements the fixed REFERENCE micro-batch is timed, and a key's time
    is divided by the mean of the reference times just before and after it
    over their median over the whole run. On the shared development machine
    the CPU time of the same single-threaded work swings by tens of percent
    within seconds (other processes' cache and memory traffic, virtual
    CPUs); the speed a few milliseconds around a measurement is the best
    estimate of the speed during it (a longer window of references
    normalised worse)."""
    keys = sorted(keys)
    if getattr(timer, "stable", False):
        return measure_stable(timer, keys, repeats, seed, log)
    inputs = {k: timer.inputs(k) for k in keys}
    # A timer whose keys are not plain length tuples (bench/e2e/ring.py's
    # shard keys) names its own reference and the tokens of a key.
    ref = timer.inputs(getattr(timer, "reference", REFERENCE))
    for k in sorted(keys, key=getattr(timer, "work", sum))[:2]:  # warm-up: allocator, lazy init
        timer.run(inputs[k])
    raw = {k: [] for k in keys}
    speed = {k: [] for k in keys}
    refs = []
    rnd = random.Random(seed)
    t_start = time.perf_counter()
    prev = timer.run(ref)
    refs.append(prev)
    for rep in range(repeats):
        order = list(keys)
        rnd.shuffle(order)
        for i, k in enumerate(order):
            t = timer.run(inputs[k])
            nxt = timer.run(ref)
            refs.append(nxt)
            raw[k].append(t)
            speed[k].append(0.5 * (prev + nxt))
            prev = nxt
            if log and (i + 1) % 200 == 0:
                log(f"  repeat {rep + 1}/{repeats}: {i + 1}/{len(order)} micro-batches, "
                    f"{time.perf_counter() - t_start:.0f} s")
    # Every call on the same timer is normalised to the speed of its first
    # call, so that the times of a later phase (run on a machine that may
    # be busier or idler by then) are in the same units as the first's.
    base = getattr(timer, "reference_base", None)
    if base is None:
        base = timer.reference_base = statistics.median(refs)
    norm = {k: [t * base / sp for t, sp in zip(raw[k], speed[k])] for k in keys}
    return norm, raw


def measure_stable(timer, keys, repeats: int, seed: int, log):
    """measure() for a timer whose times need no normalisation (CUDA
    events on a device of one's own): every key ``repeats`` times in a new
    shuffled order per repeat, inputs made just before their first use (a
    GPU does not hold every padded batch of a run at once)."""
    rnd = random.Random(seed)
    # Warm-up: one untimed pass over every key. The first run of a shape
    # pays for the allocator's growth and the kernels' first launches (up
    # to twice the time of later runs on an H100), which a median of few
    # repeats would keep.
    warm = list(keys)
    rnd.shuffle(warm)
    for k in warm:
        timer.run(timer.inputs(k))
    raw = {k: [] for k in keys}
    t_start = time.perf_counter()
    for rep in range(repeats):
        order = list(keys)
        rnd.shuffle(order)
        for i, k in enumerate(order):
            raw[k].append(timer.run(timer.inputs(k)))
            if log and (i + 1) % 200 == 0:
                log(f"  repeat {rep + 1}/{repeats}: {i + 1}/{len(order)} micro-batches, "
                    f"{time.perf_counter() - t_start:.0f} s")
    return raw, raw


def spread(times: dict) -> float:
    """Median over keys of (max - min) / median of the repeats."""
    v = [(max(t) - min(t)) / statistics.median(t) for t in times.values() if len(t) > 1]
    return statistics.median(v) if v else float("nan")


def lockstep_split(grid, a: dict, b: dict) -> float:
    """The lock-step step with the noise of the max removed: a slot's
    costliest rank is chosen on one half of the repeats (a) and its time
    read from the other half (b), and the other way round, averaged.
    Summing the max of noisy times over ranks (the plain estimate) adds the
    noise's upper tail once per slot, more for plans whose ranks run
    different micro-batches than for plans whose ranks run the same shapes
    (timed once, so their noise does not grow with the max); choosing and
    reading on independent halves cannot gain from the noise."""
    total = 0.0
    for col in grid:
        total += 0.5 * (b[max(col, key=a.__getitem__)] + a[max(col, key=b.__getitem__)])
    return total


# ---- Plans and step times -----------------------------------------------------


@dataclass
class Row:
    workload: str
    dp: int
    algo: str
    micro_per_rank: int
    grid: list  # grid[j][r] = slot key
    step_cost_stat: float
    planned_eff: float
    measured: float = 0.0  # sum over slots of the max over ranks of the median times
    split: float = 0.0  # the same with the costliest rank chosen and timed on separate repeats
    pred_default: float = 0.0
    pred_model: float = 0.0
    busy: float = 0.0  # sum of all micro-batch times / dp


def plan_rows(client, s: Setting, name: str, dp: int, lengths, loss_tokens, qmodel: float, algos=None):
    rows = []
    for algo, kw in (algos if algos is not None else algorithms(s, qmodel)):
        plan = client.plan(lengths, loss_tokens=loss_tokens, dp=dp, max_tokens=s.cap, **kw)
        m = plan.stats.micro_batches_per_rank
        grid = [[None] * dp for _ in range(m)]
        for r in range(dp):
            mbs = plan[r].micro_batches
            assert len(mbs) == m, "every rank runs the same number of micro-batches"
            for j, mb in enumerate(mbs):
                assert mb.padded_tokens <= s.cap, f"{algo}: micro-batch over the cap: {mb}"
                grid[j][r] = slots(mb)
        assert plan.stats.cap_violations == 0
        if "quadratic" not in kw and "cost" not in kw:  # the slots are what the planner costed
            mine = lockstep(grid, lambda k: cost(k, DEFAULT_QUADRATIC))
            assert abs(mine - plan.stats.step_cost) <= 1e-9 * mine, (algo, mine, plan.stats.step_cost)
        rows.append(Row(name, dp, algo, m, grid, plan.stats.step_cost, plan.stats.lockstep_efficiency))
    return rows


def lockstep(grid, f) -> float:
    return float(sum(max(f(k) for k in col) for col in grid))


def fit_factor(times: dict, quadratic: float):
    """Least-squares t = a * cost (through the origin) and the relative RMS
    error of the per-micro-batch prediction."""
    ks = [k for k in times if k]
    c = np.array([cost(k, quadratic) for k in ks])
    t = np.array([times[k] for k in ks])
    a = float((c * t).sum() / (c * c).sum())
    rel = float(np.sqrt(np.mean(((a * c - t) / t) ** 2)))
    return a, rel


# ---- Main ---------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="one configuration (rollout, DP 8), two repeats")
    g.add_argument("--smoke", action="store_true", help="a tiny model and batch, for the test suite")
    g.add_argument("--gpu", action="store_true", help="a bf16 model sized for one GPU under a 16384-token cap "
                   "(with --device cuda; bench/e2e/gpu.sh runs it)")
    g.add_argument("--gpu-quick", action="store_true", help="a smaller GPU run (one configuration, two repeats)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda: the model, packd.gpu's packing and "
                    "the CUDA-event timing run there")
    ap.add_argument("--timings", metavar="FILE", help='write every measured micro-batch as a JSON line '
                    '{"lengths": [...], "seconds": t} (lengths: the slots it ran; seconds: median CPU time)')
    ap.add_argument("--out", metavar="FILE", help="also write the tables (markdown) to FILE")
    ap.add_argument("--repeats", type=int, help="timed runs per distinct micro-batch (median)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cap", type=int, help="max_tokens of every plan (default: the mode's)")
    ap.add_argument("--max-len", type=int, help="longest sequence (default: the mode's)")
    ap.add_argument("--runs", help="WORKLOAD:DP:SEQUENCES_PER_RANK,... instead of the mode's "
                    "(workloads: rollout, azure-conv, azure-code, wikipedia)")
    ap.add_argument("--installed", action="store_true", help="use the packd installed in this Python (a wheel) "
                    "instead of the checkout's client/python and build/")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: stable per-core timing)")
    ap.add_argument("--no-calibrate", action="store_true",
                    help="skip the second phase: packd AUTO planned with a cost fitted (packd.calibrate) to the "
                    "first phase's timings, then timed")
    args = ap.parse_args(argv)

    mode = ("smoke" if args.smoke else "quick" if args.quick else "gpu" if args.gpu
            else "gpu-quick" if args.gpu_quick else "full")
    s = setting(mode)
    if args.repeats:
        s.repeats = args.repeats
    if args.cap:
        s.cap = args.cap
    if args.max_len:
        s.max_len = args.max_len
    if args.runs:
        s.runs = [(w, int(d), int(n)) for w, d, n in (x.split(":") for x in args.runs.split(","))]
    torch.set_num_threads(args.threads)
    cuda = args.device.startswith("cuda") or mode.startswith("gpu")
    qmodel = model_quadratic(s.model, causal_only=cuda)
    client = packd.Client.local()
    log = (lambda msg: print(msg, file=sys.stderr, flush=True))
    log(f"packd {packd.__version__} from {Path(packd.__file__).parent}: {client!r}")
    command = "bench/e2e/run.py " + " ".join(argv if argv is not None else sys.argv[1:])
    t_begin = time.perf_counter()

    rows = []
    for name, dp, per_rank in s.runs:
        rng = np.random.default_rng([args.seed, dp, sum(map(ord, name))])
        lengths, loss_tokens = workload(name, rng, per_rank * dp, s)
        rows += plan_rows(client, s, name, dp, lengths, loss_tokens, qmodel)
        log(f"{name} dp {dp}: {lengths.size} sequences, {int(lengths.sum())} tokens, mean {lengths.mean():.0f}, "
            f"p50 {int(np.median(lengths))}, max {int(lengths.max())}, responses at their longest "
            f"{float((loss_tokens == loss_tokens.max()).mean()):.0%}")
    keys = {k for row in rows for col in row.grid for k in col}
    log(f"{len(keys)} distinct micro-batches, {s.repeats} repeat(s)")
    check = None
    if cuda:
        from cuda_timer import CudaTimer, attention_kind, check_packed_equals_padded, device_name

        device = args.device if args.device.startswith("cuda") else "cuda"
        check = check_packed_equals_padded(s.model, device)
        log(f"packed == padded on {device}: {check}")
        timer = CudaTimer(s.model, args.seed, device)
        s.device_line = f"{device_name(device)}; attention: {attention_kind()}; packed == padded check (fp32): {check}"
    else:
        timer = Timer(s.model, args.seed)
    runs, raw_runs = measure(timer, keys, s.repeats, args.seed, log)
    calibration = None
    if not args.no_calibrate:
        # Phase two: fit the cost model to phase one's timings, plan packd
        # AUTO with it and time the micro-batches phase one has not seen.
        records = [{"lengths": list(k), "seconds": statistics.median(v)} for k, v in runs.items() if k]
        calibration = packd.calibrate(records)
        log(f"calibrated on {calibration.samples} micro-batches: {calibration.cost}, r2 {calibration.r2:.4f}, "
            f"MAPE {calibration.mape:.1%}")
        extra = []
        for name, dp, per_rank in s.runs:
            rng = np.random.default_rng([args.seed, dp, sum(map(ord, name))])
            lengths, loss_tokens = workload(name, rng, per_rank * dp, s)
            extra += plan_rows(client, s, name, dp, lengths, loss_tokens, qmodel,
                               [("packd auto, calibrated", {"cost": calibration})])
        new = {k for row in extra for col in row.grid for k in col} - keys
        log(f"{len(new)} more distinct micro-batches for the calibrated plans")
        if new:
            more, more_raw = measure(timer, new, s.repeats, args.seed + 1, log)
            runs.update(more)
            raw_runs.update(more_raw)
        keys |= new
        merged = []
        for row in rows:  # each calibrated row after its configuration's packd rows
            merged.append(row)
            if row.algo == "packd auto, model cost":
                merged += [x for x in extra if (x.workload, x.dp) == (row.workload, row.dp)]
        rows = merged
    times = {k: statistics.median(v) for k, v in runs.items()}
    half_a = {k: statistics.median(v[0::2]) for k, v in runs.items()}
    half_b = {k: statistics.median(v[1::2] or v) for k, v in runs.items()}
    for d in (times, half_a, half_b):
        d[()] = 0.0  # an empty micro-batch (none in these plans) costs nothing

    a_def, err_def = fit_factor(times, DEFAULT_QUADRATIC)
    a_mod, err_mod = fit_factor(times, qmodel)
    for row in rows:
        row.measured = lockstep(row.grid, times.__getitem__)
        row.split = lockstep_split(row.grid, half_a, half_b)
        row.pred_default = a_def * lockstep(row.grid, lambda k: cost(k, DEFAULT_QUADRATIC))
        row.pred_model = a_mod * lockstep(row.grid, lambda k: cost(k, qmodel))
        row.busy = sum(times[k] for col in row.grid for k in col) / row.dp

    if args.timings:
        with open(args.timings, "w") as f:
            for k in sorted(keys, key=lambda k: (sum(k), k)):
                if k:
                    f.write(json.dumps({"lengths": list(k), "seconds": round(times[k], 6)}) + "\n")

    out = report(rows, s, qmodel, (a_def, err_def), (a_mod, err_mod), command, mode, len(keys),
                 time.perf_counter() - t_begin, (spread(raw_runs), spread(runs)), calibration)
    print(out)
    if args.out:
        Path(args.out).write_text(out + "\n")
    return 0


def report(rows, s: Setting, qmodel, fit_def, fit_mod, command, mode, nkeys, seconds, spread, calibration=None) -> str:
    c = s.model
    lines = [
        f"command: `{command.strip()}` ({mode}; {seconds:.0f} s wall)",
        "",
    ] + ([s.device_line, ""] if s.device_line else []) + [
        f"model: {c.layers} layers, hidden {c.hidden}, {c.heads} heads, SwiGLU {c.mlp}, vocab {c.vocab}, {c.dtype}; "
        f"cap {s.cap} tokens, sequences up to {s.max_len}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s); {nkeys} distinct micro-batches, median of {s.repeats} "
        f"(median spread between repeats, (max - min) / median: {spread[0]:.1%} raw, {spread[1]:.1%} "
        f"normalised to the machine's speed)",
        f"cost fits (t = a * cost per micro-batch, least squares): default L + L^2/24576: relative RMS error "
        f"{fit_def[1]:.1%}; model FLOPs L + L^2/{1 / qmodel:.0f}: {fit_mod[1]:.1%}",
    ]
    if calibration is not None:
        c2 = calibration.cost
        lines.append(
            f"calibrated (packd.calibrate on the first phase's {calibration.samples} micro-batches): "
            f"per_micro_batch {c2.per_micro_batch:.3g} s, per_sequence {c2.per_sequence:.3g} s, linear "
            f"{c2.linear:.3g} s/token, quadratic {c2.quadratic:.3g} s/token^2 (L + L^2/"
            f"{(c2.linear / c2.quadratic) if c2.quadratic else float('inf'):.0f}); r2 {calibration.r2:.4f}, "
            f"MAPE {calibration.mape:.1%} per micro-batch")
    lines += [
        "",
        "| workload | DP | algorithm | µb/rank | measured Σmax (s) | vs auto | measured split (s) | vs auto | "
        "busy/step | planned eff | predicted, default cost (s) | measured/predicted | "
        "predicted, model cost (s) | measured/predicted |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    summary = []
    for (name, dp) in dict.fromkeys((r.workload, r.dp) for r in rows):
        grp = [r for r in rows if (r.workload, r.dp) == (name, dp)]
        auto = grp[0]
        for r in grp:
            lines.append(
                f"| {name} | {dp} | {r.algo} | {r.micro_per_rank} | {r.measured:.4g} | {r.measured / auto.measured:.3f} | "
                f"{r.split:.4g} | {r.split / auto.split:.3f} | {r.busy / r.split:.3f} | {r.planned_eff:.3f} | "
                f"{r.pred_default:.4g} | {r.split / r.pred_default:.3f} | {r.pred_model:.4g} | "
                f"{r.split / r.pred_model:.3f} |")
        peers = [r for r in grp if not r.algo.startswith("packd")]

        def vs_best(f):
            best = min(peers, key=f)
            return f"{f(auto) / f(best):.3f}x ({best.algo})"

        summary.append(
            f"- {name}, DP {dp}: packd auto against the best peer: measured {vs_best(lambda r: r.measured)}, "
            f"split {vs_best(lambda r: r.split)}; predicted, default cost {vs_best(lambda r: r.pred_default)}, "
            f"model cost {vs_best(lambda r: r.pred_model)}")
    lines += [
        "",
        "Σmax: sum over slots of the max over ranks of the median times; split: the same with each slot's "
        "costliest rank chosen on half of the repeats and timed on the other half (no gain from noise); "
        "busy/step: the mean rank's busy time over the split step (measured lock-step efficiency); "
        "planned eff: the plan's own lockstep_efficiency (its cost model); measured/predicted: split over "
        "predicted.",
        "",
    ] + summary
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
