#!/usr/bin/env python3
"""The plan-quality gate: a pinned set of planning cases whose step cost,
micro-batch counts and lock-step efficiency are recorded in
bench/quality/record.json, and a check that no change of the planner makes
any of them worse.

Why: the planner's heuristics interact, and a change that helps one shape
of batch can quietly cost another (a plan with a higher step cost or one
more micro-batch per rank is still a valid plan, so no property test
notices). Every case here is planned with the embedded planner
(``packd.Client.local()``, the same ``pk_plan_bytes`` path as the server and
``packctl plan --local``) and compared with its record:

- a step cost more than ``--tolerance`` (default 0.01 %) above the record,
  or more micro-batches per rank or in the plan than the record, fails;
- lower figures are improvements: the run says so and
  ``--update`` writes them into the record;
- ``--update`` refuses to write while any case is worse, unless
  ``--accept-worse`` is given (a deliberate trade, to be explained in the
  commit that records it).

The cases are the real traces of bench/workloads/ (sampled with fixed
seeds, the Wikipedia lengths truncated to the cap as a pretraining packer
does) and synthetic RL rollouts (prompts uniform in [64, 1024], responses
log-normal around 1500 tokens, at most 16384 tokens a sequence, fixed seeds, GRPO groups of
8 where asked), and the examples of docs/packctl.md and README.md as
packctl builds them, in PACKED and PADDED mode, several DP sizes, CP, token caps,
``max_seqs`` and mini-batch counts. Each case is deterministic: the same
build plans it to the same plan id.

Usage (from the repository root, after building):

    PACKD_BUILD_DIR=build /usr/bin/python3 bench/quality/run.py            # check
    PACKD_BUILD_DIR=build /usr/bin/python3 bench/quality/run.py --update   # record improvements

Exit status: 0 when no case is worse, 1 when one is, 2 for a usage error
or a case that could not be planned.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
RECORD = REPO / "bench" / "quality" / "record.json"
WORKLOADS = REPO / "bench" / "workloads"
DEFAULT_TOLERANCE = 1e-4  # 0.01 % of the step cost.


def read_trace(name: str):
    """lengths and loss tokens (None for one-column files) of a trace in
    bench/workloads/ (docs/packctl.md: TOTAL or PROMPT RESPONSE per line)."""
    rows = []
    with open(WORKLOADS / name) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if line:
                rows.append([int(v) for v in line])
    if all(len(r) == 2 for r in rows):
        a = np.array(rows, dtype=np.int64)
        return a.sum(axis=1), a[:, 1].copy()
    return np.array([r[0] for r in rows], dtype=np.int64), None


_TRACES: dict = {}


def trace_sample(name: str, n: int, seed: int):
    """n sequences of a trace chosen without replacement with a fixed seed,
    in their input order."""
    if name not in _TRACES:
        _TRACES[name] = read_trace(name)
    lengths, loss = _TRACES[name]
    idx = np.sort(np.random.default_rng(seed).choice(lengths.size, size=n, replace=False))
    return lengths[idx], (None if loss is None else loss[idx])


def rollout(n: int, seed: int):
    """An RL rollout batch: prompt U[64, 1024] + response lognormal(ln 1500,
    1), the response cut so that a sequence holds at most 16384 tokens (the
    generation limit); the loss tokens are the response."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(64, 1025, size=n)
    resp = np.minimum(rng.lognormal(np.log(1500), 1.0, size=n).astype(np.int64), 16384 - prompt)
    return prompt + resp, resp


def cases() -> list[dict]:
    """The pinned cases: name, where the lengths come from, and the plan
    keywords. Changing a case changes what its record means: give the
    changed case a new name."""
    out = []
    traces = {"conv": "azure_conv_2023.txt", "code": "azure_code_2023.txt", "wiki": "wikipedia_doc_lengths.txt"}
    trace_configs = [
        ("packed-dp8-16k", 512, dict(dp=8, max_tokens=16384)),
        ("packed-dp32-32k-mb4", 4096, dict(dp=32, max_tokens=32768, mini_batches=4)),
        ("padded-dp8-16k-r64-mb2", 512, dict(dp=8, max_tokens=16384, mode="padded", round=64, mini_batches=2)),
        ("packed-dp8-16k-seqs16", 1024, dict(dp=8, max_tokens=16384, max_seqs=16)),
        ("packed-dp4-cp2-8k", 1024, dict(dp=4, cp=2, max_tokens=8192)),
        ("packed-dp1-8k", 256, dict(dp=1, max_tokens=8192)),
        ("padded-dp16-32k-seqs24", 2048, dict(dp=16, max_tokens=32768, mode="padded", max_seqs=24)),
    ]
    for short, trace in traces.items():
        for cname, n, kw in trace_configs:
            out.append(dict(name=f"{short}-{cname}", source=dict(trace=trace, n=n, seed=1), plan=kw))
    rollout_configs = [
        ("packed-dp8-16k-mb2", 1024, dict(dp=8, max_tokens=16384, mini_batches=2)),
        ("padded-dp8-32k-r128", 1024, dict(dp=8, max_tokens=32768, mode="padded", round=128)),
        ("packed-dp64-32k-mb4", 8192, dict(dp=64, max_tokens=32768, mini_batches=4)),
        ("packed-dp8-16k-groups", 512, dict(dp=8, max_tokens=16384, groups_on_rank=True)),
        ("packed-dp16-24k-seqs8", 2048, dict(dp=16, max_tokens=24576, max_seqs=8)),
        ("padded-dp4-16k-seqs32-mb2", 1024, dict(dp=4, max_tokens=16384, mode="padded", max_seqs=32, mini_batches=2)),
    ]
    for seed in (1, 2, 3):
        for cname, n, kw in rollout_configs:
            out.append(dict(name=f"rollout{seed}-{cname}", source=dict(rollout=n, seed=seed), plan=kw))
    # The examples of docs/packctl.md, built by packctl itself (its --sample
    # draws another sample than trace_sample does), so that the documented
    # plans cannot get worse unnoticed either.
    docs_examples = [
        ("packctl-doc-packed-dp8-16k", "--dp 8 --max-tokens 16384 --sample 512 --seed 1"),
        ("packctl-doc-padded-dp8-16k-r64-mb2",
         "--dp 8 --max-tokens 16384 --mode padded --round 64 --mini-batches 2 --sample 512 --seed 1"),
        ("packctl-readme-packed-dp8-cp2-16k", "--sample 4096 --seed 1 --dp 8 --cp 2 --max-tokens 16384"),
    ]
    for cname, flags in docs_examples:
        out.append(dict(name=cname, source=dict(packctl=flags.split() + ["bench/workloads/azure_conv_2023.txt"]), plan={}))
    return out


def packctl_request(args: list):
    """The PlanRequest ``packctl plan --dry-run ARGS`` builds."""
    import subprocess
    import tempfile

    packctl = Path(os.environ["PACKD_BUILD_DIR"]) / "client" / "c" / "packctl"
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "req.bin"
        res = subprocess.run([str(packctl), "plan", "--dry-run", "--save-request", str(req), *args],
                             cwd=REPO, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"packctl plan --dry-run {' '.join(args)}: {res.stderr.strip()}")
        from packd import _stubs

        return _stubs.pb2().PlanRequest.FromString(req.read_bytes())


def inputs(case: dict):
    src, kw = case["source"], dict(case["plan"])
    if "trace" in src:
        lengths, loss = trace_sample(src["trace"], src["n"], src["seed"])
        if loss is None:  # Documents longer than the cap are truncated to it.
            lengths = np.minimum(lengths, kw["max_tokens"] * kw.get("cp", 1))
    else:
        lengths, loss = rollout(src["rollout"], src["seed"])
    groups = np.arange(lengths.size) // 8 if kw.get("groups_on_rank") else None
    return lengths, loss, groups, kw


def plan_case(client, case: dict) -> dict:
    if "packctl" in case["source"]:
        plan = client.plan_request(packctl_request(case["source"]["packctl"]))
    else:
        lengths, loss, groups, kw = inputs(case)
        plan = client.plan(lengths, loss_tokens=loss, groups=groups, **kw)
    s = plan.stats
    return dict(
        step_cost=s.step_cost,
        micro_batches_per_rank=s.micro_batches_per_rank,
        micro_batches=s.plan_micros,
        lockstep_efficiency=s.lockstep_efficiency,
        step_cost_lower_bound=s.step_cost_lower_bound,
        plan_id=plan.plan_id,
    )


def compare(record: dict, got: dict, tolerance: float) -> tuple[list, list, list]:
    """(worse, better, missing) case names of got against record."""
    worse, better, missing = [], [], []
    for name, g in got.items():
        r = record.get(name)
        if r is None:
            missing.append(name)
            continue
        step_limit = r["step_cost"] * (1 + tolerance)
        if (g["step_cost"] > step_limit or g["micro_batches_per_rank"] > r["micro_batches_per_rank"]
                or g["micro_batches"] > r["micro_batches"]):
            worse.append(name)
        elif (g["step_cost"] < r["step_cost"] * (1 - 1e-12) or g["micro_batches_per_rank"] < r["micro_batches_per_rank"]
              or g["micro_batches"] < r["micro_batches"]):
            better.append(name)
    return worse, better, missing


def table(record: dict, got: dict, worse, better) -> str:
    head = f"{'case':44} {'step cost':>13} {'recorded':>13} {'change':>9} {'mb/rank':>8} {'mbs':>6} {'eff':>8}  verdict"
    lines = [head, "-" * len(head)]
    for name, g in got.items():
        r = record.get(name)
        if r is None:
            lines.append(f"{name:44} {g['step_cost']:13.1f} {'-':>13} {'-':>9} {g['micro_batches_per_rank']:8d} "
                         f"{g['micro_batches']:6d} {g['lockstep_efficiency']:8.5f}  NEW")
            continue
        change = (g["step_cost"] / r["step_cost"] - 1) * 100 if r["step_cost"] else 0.0
        mb = f"{g['micro_batches_per_rank']}" + ("" if g["micro_batches_per_rank"] == r["micro_batches_per_rank"]
                                                 else f"/{r['micro_batches_per_rank']}")
        mbs = f"{g['micro_batches']}" + ("" if g["micro_batches"] == r["micro_batches"] else f"/{r['micro_batches']}")
        verdict = "WORSE" if name in worse else "better" if name in better else "same"
        lines.append(f"{name:44} {g['step_cost']:13.1f} {r['step_cost']:13.1f} {change:+8.4f}% {mb:>8} {mbs:>6} "
                     f"{g['lockstep_efficiency']:8.5f}  {verdict}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--update", action="store_true", help="write the figures into the record (no case may be worse)")
    ap.add_argument("--accept-worse", action="store_true", help="with --update: write even if some case is worse")
    ap.add_argument("--record", default=str(RECORD), help="the record file (default bench/quality/record.json)")
    ap.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                    help="relative step-cost rise that still passes (default 1e-4, 0.01 %%)")
    ap.add_argument("--only", default="", help="run only the cases whose name contains this text")
    args = ap.parse_args(argv)
    if args.tolerance < 0:
        print(f"run.py: --tolerance: must be >= 0, got {args.tolerance}", file=sys.stderr)
        return 2

    sys.path.insert(0, str(REPO / "client" / "python"))
    import packd

    os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))
    client = packd.Client.local()
    record_path = Path(args.record)
    record = json.loads(record_path.read_text())["cases"] if record_path.exists() else {}

    got = {}
    started = time.monotonic()
    for case in cases():
        if args.only and args.only not in case["name"]:
            continue
        try:
            got[case["name"]] = plan_case(client, case)
        except packd.PlanError as exc:
            print(f"run.py: case {case['name']}: {exc}", file=sys.stderr)
            return 2
    elapsed = time.monotonic() - started

    worse, better, missing = compare(record, got, args.tolerance)
    print(table(record, got, worse, better))
    print(f"\n{len(got)} cases planned in {elapsed:.1f} s; {len(worse)} worse, {len(better)} better, "
          f"{len(missing)} not in the record (tolerance {args.tolerance:g} of the step cost)")

    if args.update:
        if worse and not args.accept_worse:
            print(f"run.py: not updating: {len(worse)} case(s) worse: {', '.join(worse)} "
                  "(--accept-worse writes them anyway)", file=sys.stderr)
            return 1
        merged = dict(record)
        merged.update(got)
        record_path.write_text(json.dumps({"tolerance": DEFAULT_TOLERANCE, "cases": merged}, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(got)} cases to {record_path}")
        return 0
    if worse:
        print(f"\nrun.py: plan quality got worse in {len(worse)} case(s): {', '.join(worse)}.\n"
              "A step cost above the record by more than the tolerance or one more micro-batch is a\n"
              "regression of the planner; if the trade is deliberate, record it with\n"
              "  PACKD_BUILD_DIR=build /usr/bin/python3 bench/quality/run.py --update --accept-worse",
              file=sys.stderr)
        return 1
    if missing:
        print("run.py: cases without a record: run with --update to record them", file=sys.stderr)
        return 1
    if better:
        print("improvements: record them with PACKD_BUILD_DIR=build /usr/bin/python3 bench/quality/run.py --update")
    return 0


if __name__ == "__main__":
    sys.exit(main())
