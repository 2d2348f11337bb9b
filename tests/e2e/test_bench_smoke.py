"""bench/e2e/run.py --smoke: the timed comparison runs end to end on a tiny
model (so the bench cannot rot), prints a row per algorithm, and writes
every measured micro-batch as a JSON line {"lengths": [...], "seconds": t}."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ALGOS = ["packd auto", "packd auto, model cost", "packd auto, calibrated", "verl", "MindSpeed-RL", "NeMo-RL", "slime (approx.)", "ROLL"]


def test_bench_smoke(tmp_path):
    timings = tmp_path / "timings.jsonl"
    table = tmp_path / "table.md"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "e2e" / "run.py"), "--smoke", "--timings", str(timings),
         "--out", str(table)],
        cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| rollout | 2 |")]
    assert [ln.split(" | ")[2] for ln in rows] == ALGOS
    for ln in rows:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        assert int(cells[3]) >= 1 and float(cells[4]) > 0  # micro-batches per rank, measured step
    assert table.read_text().strip() == proc.stdout.strip()
    assert "calibrated (packd.calibrate on the first phase's" in proc.stdout and "MAPE" in proc.stdout
    lines = timings.read_text().splitlines()
    assert lines
    seen = set()
    for ln in lines:
        rec = json.loads(ln)
        assert set(rec) == {"lengths", "seconds"}
        assert rec["lengths"] and all(isinstance(x, int) and x > 0 for x in rec["lengths"])
        assert sum(rec["lengths"]) <= 128 and rec["seconds"] > 0  # the smoke cap
        key = tuple(sorted(rec["lengths"]))
        assert key not in seen, "each distinct micro-batch once"
        seen.add(key)


def test_device_timer_path_on_the_host():
    """bench/e2e/cuda_timer.py, the path `run.py --device cuda` takes, run
    on the CPU (packd.gpu's host backend packs, perf_counter times): the
    packed micro-batch equals the padded rows' run (loss and every
    gradient), and measure_stable times every key once per repeat after an
    untimed pass."""
    sys.path[:0] = [str(REPO / "bench" / "e2e"), str(REPO / "tests" / "e2e")]
    import run as bench_run
    from cuda_timer import CudaTimer, check_packed_equals_padded
    from tiny_model import Config

    cfg = Config(vocab=64, hidden=32, heads=4, layers=2, mlp=64, dtype="float32")
    check = check_packed_equals_padded(cfg, "cpu")
    assert check["sdpa loss rel err"] < 1e-6 and check["sdpa max grad rel err"] < 1e-5, check
    timer = CudaTimer(cfg, 1, "cpu")
    keys = [(30, 20), (12,), (40, 40, 3)]
    times, raw = bench_run.measure(timer, keys, 3, 1, None)
    assert times is raw and set(times) == set(keys)
    assert all(len(v) == 3 and all(t > 0 for t in v) for v in times.values())


def test_dcp_bench_smoke(tmp_path):
    """bench/e2e/dcp.py --smoke: the emulated dynamic-CP step runs end to
    end (phase one, calibration with CP terms, the calibrated plans), and
    every timed shard is a dynamic-CP timing record that packd.calibrate
    reads back into CP terms."""
    import packd

    timings = tmp_path / "dcp-timings.jsonl"
    table = tmp_path / "dcp.md"
    env = {k: v for k, v in os.environ.items() if k != "MEGATRON_CORE_DIR"}
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "e2e" / "dcp.py"), "--smoke", "--timings", str(timings),
         "--out", str(table)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| long_tail_rl | 8 |")]
    names = [ln.split(" | ")[4] for ln in rows]
    assert names[0] == "packd dynamic" and names[2] == "Megatron (packd repro)", names
    assert names[1].startswith("packd fixed CP ")
    assert {"packd dynamic, calibrated", names[1] + ", calibrated"} <= set(names[3:]), names
    for ln in rows:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        slots = [int(x) for x in cells[5].split("/")]  # one count per batch (the smoke draws 2)
        assert len(slots) == 2 and min(slots) >= 1 and float(cells[7]) > 0 and float(cells[8]) > 0
        assert float(cells[10]) >= float(cells[9]) > 0  # the worst batch's ratio to Megatron is at least the mean
    assert "attention tiles of 1 tokens" in proc.stdout  # 128 real tokens at the smoke's 1/128
    assert "with one more term, per sequence per extra ring step" in proc.stdout
    assert table.read_text().strip() == proc.stdout.strip()
    assert "cp_group" in proc.stdout and "cp_token" in proc.stdout
    records = [json.loads(ln) for ln in timings.read_text().splitlines()]
    assert records and any(r["cp"] > 1 for r in records)
    for r in records:
        assert set(r) == {"lengths", "seconds", "cp"} and r["seconds"] > 0
        c = r["cp"]
        assert c == 1 or all(a % (2 * c) == 0 for a in r["lengths"]), r  # zigzag-aligned groups
        assert sum(r["lengths"]) // c <= 64  # the smoke's per-GPU cap (8192 / 128)
    cal = packd.calibrate(timings)
    assert cal.cp and cal.samples == len(records)


class SlowingTimer:
    """A timer of bench/e2e/run.py's interface whose machine runs at a
    speed the test sets: a key of w tokens takes w * load seconds, the
    reference (64 tokens) too."""

    load = 1.0

    def inputs(self, key):
        return key

    def run(self, key) -> float:
        return sum(key) * self.load


def test_later_measurements_share_the_first_calls_units():
    """A second measure() on the same timer (the calibrated phase) is in the
    units of the first even when the machine has become slower meanwhile:
    the same work reads the same normalised time."""
    sys.path[:0] = [str(REPO / "bench" / "e2e"), str(REPO / "tests" / "e2e")]
    import run as bench_run

    timer = SlowingTimer()
    first, _ = bench_run.measure(timer, [(100,), (30, 20)], 2, 1, None)
    timer.load = 2.5
    second, raw = bench_run.measure(timer, [(100,), (7,)], 2, 2, None)
    assert raw[(100,)] == [250.0, 250.0]
    assert second[(100,)] == first[(100,)] == [100.0, 100.0]
    assert second[(7,)] == [7.0, 7.0]


@pytest.mark.parametrize("runs, message", [
    ("foo:8:3", "workload 'foo' is not one of azure_conv"),
    ("long_tail_rl:8", "'long_tail_rl:8' is not WORKLOAD:POOL:SEQUENCES"),
    ("azure_code:0:4", "'azure_code:0:4' needs at least one GPU and one sequence"),
])
def test_dcp_bench_bad_runs_exit_2_naming_the_entry(runs, message):
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "e2e" / "dcp.py"), "--runs", runs],
                          cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("option", ["--tile", "--batches", "--scale", "--repeats"])
def test_dcp_bench_counts_below_one_exit_2_naming_the_option(option):
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "e2e" / "dcp.py"), "--smoke", option, "0"],
                          cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and f"{option}: 0 (at least 1)" in proc.stderr, proc.stderr[-2000:]
