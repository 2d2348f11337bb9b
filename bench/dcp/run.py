#!/usr/bin/python3
"""Dynamic context parallelism: packd's dynamic-CP AUTO against packd's fixed
CP, packd's cap-respecting reproduction of Megatron-Core's balanced
scheduler, and Megatron-Core's own scheduler, on the same batches, priced with
the same cost (README.md in this folder).

Usage:
  PACKD_BUILD_DIR=build [MEGATRON_CORE_DIR=DIR] /usr/bin/python3 bench/dcp/run.py [--quick]
  PACKD_BUILD_DIR=build /usr/bin/python3 bench/dcp/run.py --time-only  # the plan-time lines alone

MEGATRON_CORE_DIR is a directory holding megatron/core/pipeline_parallel/
hybrid_cp_schedule.py (an unpacked megatron-core wheel or a Megatron-LM
checkout); its BalancedCPScheduler is loaded from that file alone (its
module imports two Megatron modules that the scheduler class does not use;
they are stubbed so that the file loads without the rest of Megatron-Core,
which needs a newer torch). Without it the Megatron-Core columns are empty.
"""
import importlib.util
import json
import math
import os
import random
import subprocess
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("PACKD_BUILD_DIR", "build")
TOOL = os.path.join(ROOT, BUILD, "bench", "dcp", "bench_dcp")

# Cost models (per GPU, in units of one token's linear cost):
# - default: packd's default, linear 1, quadratic 1/24576, no CP term;
# - cp: the same plus cp_token 0.25 per token x (c - 1) / c and cp_group 100
#   per group x (c - 1). Derivation (README.md): an MoE model with 3 B
#   active parameters (Qwen3-30B-A3B, the model of verl's dynamic-CP
#   figures) costs about 18 GFLOP of linear work per token, 45 us at 400
#   TFLOP/s; ring attention moves each token's keys and values (2 KB per
#   layer in bf16 with 4 KV heads of 128, 48 layers, forward and backward:
#   about 290 KB) to the other c - 1 ranks, 6-12 us per token at 25-50 GB/s
#   between nodes, exposed when shards are short: 0.13-0.26 of the linear
#   cost; each of the c - 1 ring steps costs a launch and a synchronisation
#   per layer and pass (about 30 us x 48 x 3 = 4.3 ms, 100 tokens' worth).
COSTS = {
    "default": (1.0, 1.0 / 24576, 0.0, 0.0, 0.0, 0.0),
    "cp": (1.0, 1.0 / 24576, 0.0, 0.0, 0.25, 100.0),
}


def load_lines(name, cap_total):
    out = []
    with open(os.path.join(ROOT, "bench", "workloads", name)) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            total = sum(int(p) for p in parts)
            if 1 <= total <= cap_total:
                out.append(total)
    return out


AUTO_RUNS = 3


def long_tail(rng, n):
    """RL rollouts with a long tail: prompt U[256, 2048) + a log-normal
    response (median 6,000, sigma 1.0) capped at 62,000 tokens, 6 % of the
    responses truncated at the cap: lengths 1K-64K."""
    out = []
    for _ in range(n):
        resp = rng.lognormvariate(math.log(6000), 1.0)
        if resp > 62000 or rng.random() < 0.06:
            resp = 62000
        out.append(max(1024, rng.randrange(256, 2048) + int(resp)))
    return out


class Megatron:
    """Megatron-Core's BalancedCPScheduler, loaded from its own file."""

    def __init__(self, root):
        for name in ("megatron", "megatron.core", "megatron.core.parallel_state",
                     "megatron.core.rerun_state_machine"):
            sys.modules.setdefault(name, types.ModuleType(name))
        sys.modules["megatron.core"].parallel_state = sys.modules["megatron.core.parallel_state"]
        sys.modules["megatron.core.rerun_state_machine"].RerunDataIterator = object
        path = os.path.join(root, "megatron", "core", "pipeline_parallel", "hybrid_cp_schedule.py")
        spec = importlib.util.spec_from_file_location("mcore_hybrid_cp_schedule", path)
        self.mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.mod)

    def schedule(self, lengths, pool, cap):
        class Group:
            def size(self):
                return pool

        sched = self.mod.BalancedCPScheduler(max_seq_len_per_rank=cap, dp_cp_group=Group())
        t0 = time.perf_counter()
        _, ids = sched.get_groups_and_subsamples(list(enumerate(lengths)), None)
        elapsed = time.perf_counter() - t0
        # GPUs of a slot with the same sample list form one group.
        groups = []
        for slot, per_gpu in enumerate(ids):
            seen = {}
            for gpu_list in per_gpu:
                if gpu_list:
                    key = tuple(gpu_list)
                    seen[key] = seen.get(key, 0) + 1
            for key, size in seen.items():
                groups.append((slot, size, key))
        return groups, elapsed


def run_tool(lines):
    proc = subprocess.run([TOOL], input="\n".join(lines) + "\n", capture_output=True, text=True,
                          check=True)
    return [json.loads(l) for l in proc.stdout.splitlines()]


def header(kind, dp, cp, cap, cost):
    return f"{kind} {dp} {cp} 1 {cap} " + " ".join(repr(c) for c in cost)


def fixed_cp(lengths, cap):
    cp = 1
    while max(lengths) > cp * cap - 2 * cp:
        cp *= 2
    return cp


def case(rng, mc, workload, pool, n, cap, batches, cost_name):
    cost = COSTS[cost_name]
    rows = {k: [] for k in ("auto", "megatron_repro", "fixed", "megatron")}
    for _ in range(batches):
        lengths = workload(rng, n)
        cp = min(fixed_cp(lengths, cap), pool)
        dp = pool // cp
        lens = " ".join(map(str, lengths))
        lines = [f"plan auto {pool} 1 1 {cap} " + " ".join(repr(c) for c in cost) + " | " + lens,
                 f"plan megatron {pool} 1 1 {cap} " + " ".join(repr(c) for c in cost) + " | " + lens,
                 f"plan fixed {dp} {cp} 1 {cap} " + " ".join(repr(c) for c in cost) + " | " + lens]
        if mc is not None:
            groups, elapsed = mc.schedule(lengths, pool, cap)
            g = ";".join(f"{s} {size} " + ",".join(map(str, ids)) for s, size, ids in groups)
            lines.append(f"score {pool} 1 1 {cap} " + " ".join(repr(c) for c in cost) + " | " +
                         lens + " | " + g)
        # AUTO's plan time is the least of AUTO_RUNS runs of the same plan
        # (deterministic): the spread between runs is the shared machine's.
        out = run_tool(lines + [lines[0]] * (AUTO_RUNS - 1))
        for r in out:
            if r["status"] != "ok":
                raise SystemExit(f"{workload.__name__} pool {pool} n {n}: {r['message']}")
        again = [out[0]] + out[len(lines):]
        assert all(r["step"] == out[0]["step"] for r in again)
        out = out[:len(lines)]
        rows["auto"].append(dict(out[0], time_us=min(r["time_us"] for r in again)))
        rows["megatron_repro"].append(out[1])
        rows["fixed"].append(dict(out[2], cp=cp))
        if mc is not None:
            out[3]["time_us"] = elapsed * 1e6
            rows["megatron"].append(out[3])
    return rows


def workloads():
    conv = load_lines("azure_conv_2023.txt", 1 << 30)
    code = load_lines("azure_code_2023.txt", 1 << 30)
    wiki = load_lines("wikipedia_doc_lengths.txt", 65536)

    def draw(pool_list):
        def f(rng, n):
            return [rng.choice(pool_list) for _ in range(n)]
        return f

    w = {"azure_conv": (draw(conv), 4096), "azure_code": (draw(code), 4096),
         "wikipedia_64k": (draw(wiki), 8192), "long_tail_rl": (long_tail, 8192)}
    for name, (f, _) in w.items():
        f.__name__ = name
    return w


def plan_times(quick):
    """Plan time at the issue's sizes, on long-tail batches under the cp
    cost."""
    for pool, n in ([(64, 4096)] if quick else [(64, 4096), (256, 65536)]):
        rng = random.Random(f"time/{pool}/{n}")
        lengths = long_tail(rng, n)
        line = (f"plan auto {pool} 1 1 8192 " + " ".join(repr(c) for c in COSTS["cp"]) + " | " +
                " ".join(map(str, lengths)))
        # The least of five runs: the planner is deterministic, so the spread
        # is the machine's (other processes), not the plan's.
        outs = run_tool([line] * 5)
        out = min(outs, key=lambda r: r["time_us"])
        # AUTO's fixed-CP candidate is packd's fixed-CP AUTO on the same
        # batch: its time alone, the same way.
        cp = min(fixed_cp(lengths, 8192), pool)
        fixed = (f"plan fixed {pool // cp} {cp} 1 8192 " + " ".join(repr(c) for c in COSTS["cp"]) +
                 " | " + " ".join(map(str, lengths)))
        fixed_us = min(r["time_us"] for r in run_tool([fixed] * 5))
        load = os.getloadavg()[0]
        print(f"plan time, {n} sequences on {pool} GPUs: {out['time_us'] / 1000:.1f} ms, least of "
              f"5 (load average {load:.1f} on {os.cpu_count()} CPUs; step / bound "
              f"{out['step'] / out['bound']:.4f}, {out['slots']} slots; fixed-CP AUTO alone at "
              f"CP {cp}: {fixed_us / 1000:.1f} ms)")


def main():
    quick = "--quick" in sys.argv
    if "--time-only" in sys.argv:
        plan_times(quick)
        return
    mc_dir = os.environ.get("MEGATRON_CORE_DIR")
    mc = Megatron(mc_dir) if mc_dir else None
    shapes = [(8, 32), (16, 128), (64, 512), (64, 4096), (256, 4096)]
    if quick:
        shapes = [(8, 32), (16, 128), (64, 512)]
    batches = 2 if quick else 4
    print("| cost | workload | GPUs | n | cap | fixed CP | packd dyn step | / bound | "
          "/ fixed CP | / Megatron repro | / Megatron (cap kept in) | Megatron over cap "
          "(groups, worst tokens/GPU) | slots dyn / fixed / repro / Megatron | "
          "cap violations dyn | plan ms dyn (max of least of 3) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    worst = {"bound": 0, "fixed_lt": 0, "repro": 0, "mc_kept": 0}
    for cost_name in COSTS:
        for wname, (wl, cap) in workloads().items():
            for pool, n in shapes:
                rng = random.Random(f"{cost_name}/{wname}/{pool}/{n}")
                rows = case(rng, mc, wl, pool, n, cap, batches, cost_name)
                a, r, f, m = rows["auto"], rows["megatron_repro"], rows["fixed"], rows["megatron"]
                gap = max(x["step"] / x["bound"] for x in a)
                vs_f = sum(x["step"] for x in a) / sum(x["step"] for x in f)
                vs_r = sum(x["step"] for x in a) / sum(x["step"] for x in r)
                kept = [(x, y) for x, y in zip(a, m) if y["cap_violations"] == 0]
                if not m:
                    vs_m = "–"
                elif kept:
                    vs_m = (f"{sum(x['step'] for x, _ in kept) / sum(y['step'] for _, y in kept):.3f}"
                            f" ({len(kept)} of {len(a)})")
                else:
                    vs_m = f"– (0 of {len(a)})"
                vs_all = (sum(x["step"] for x in a) / sum(y["step"] for y in m)) if m else None
                over = (f"{sum(y['cap_violations'] for y in m)}, {max(y['max_gpu_tokens'] for y in m)}"
                        if m else "–")
                slots = "{:.1f} / {:.1f} / {:.1f} / {}".format(
                    sum(x["slots"] for x in a) / len(a), sum(x["slots"] for x in f) / len(f),
                    sum(x["slots"] for x in r) / len(r),
                    f"{sum(x['slots'] for x in m) / len(m):.1f}" if m else "–")
                print(f"| {cost_name} | {wname} | {pool} | {n} | {cap} | "
                      f"{f[0]['cp']} | {sum(x['step'] for x in a) / len(a):.4g} | {gap:.4f} | "
                      f"{vs_f:.3f} | {vs_r:.3f} | {vs_m} | {over} | {slots} | "
                      f"{sum(x['cap_violations'] for x in a)} | "
                      f"{max(x['time_us'] for x in a) / 1000:.1f} |", flush=True)
                worst["bound"] = max(worst["bound"], gap)
                worst["repro"] = max(worst["repro"], vs_r)
                if wname == "long_tail_rl" and cost_name == "cp":
                    worst["fixed_lt"] = max(worst["fixed_lt"], vs_f)
                if kept:
                    worst["mc_kept"] = max(worst["mc_kept"], float(vs_m.split()[0]))
                for x, y in zip(r, m):
                    if y["cap_violations"] == 0:
                        worst["kept"] = worst.get("kept", 0) + 1
                        worst["same"] = worst.get("same", 0) + (
                            abs(x["step"] - y["step"]) <= 1e-9 * y["step"])
                if vs_all is not None:
                    worst["mc_all"] = max(worst.get("mc_all", 0), vs_all)
    print()
    print(f"worst step / bound: {worst['bound']:.4f}; worst dyn / Megatron repro: "
          f"{worst['repro']:.3f}; worst dyn / fixed CP on long_tail_rl under cp: "
          f"{worst['fixed_lt']:.3f}; worst dyn / Megatron where it keeps the cap: "
          f"{worst['mc_kept']:.3f}; worst dyn / Megatron on all batches (it over the cap): "
          f"{worst.get('mc_all', 0):.3f}")
    print(f"the reproduction's step equals Megatron-Core's on {worst.get('same', 0)} of the "
          f"{worst.get('kept', 0)} batches where Megatron-Core keeps the cap")
    plan_times(quick)


if __name__ == "__main__":
    main()
