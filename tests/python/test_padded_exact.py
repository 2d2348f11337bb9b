"""bench/planner/padded_exact.py: its program's optimum equals a brute force
over every PADDED plan of tiny batches (any rows in any micro-batch of any
rank), its bound never exceeds a plan the planner made, and the command
line reports the plan, the printed bound and the proven one."""

import importlib.util
import itertools
import os
import random
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("PACKD_BUILD_DIR", REPO / "build"))
PACKCTL = BUILD / "client" / "c" / "packctl"
SCRIPT = REPO / "bench" / "planner" / "padded_exact.py"

spec = importlib.util.spec_from_file_location("padded_exact", SCRIPT)
padded_exact = importlib.util.module_from_spec(spec)
spec.loader.exec_module(padded_exact)

QUAD = 1.0 / 24576


def brute_force_step(width, dp, m, cap):
    """The least step cost over every assignment of the rows to the m x dp
    micro-batches (empty ones allowed): sum over columns of the costliest
    micro-batch, a micro-batch costing rows x c(its widest row)."""
    slots = m * dp
    best = float("inf")
    for assign in itertools.product(range(slots), repeat=len(width)):
        rows = [0] * slots
        widest = [0] * slots
        for w, q in zip(width, assign):
            rows[q] += 1
            widest[q] = max(widest[q], w)
        if any(r * w > cap for r, w in zip(rows, widest)):
            continue
        step = sum(max(rows[q] * (widest[q] + QUAD * widest[q] ** 2)
                       for q in range(j * dp, (j + 1) * dp)) for j in range(m))
        best = min(best, step)
    return best


@pytest.mark.parametrize("model", ["runs", "classes"])
@pytest.mark.parametrize("seed", range(4))
def test_optimum_equals_brute_force(seed, model):
    rng = random.Random(seed)
    cap = 4096
    width = [128 * rng.randint(1, 16) for _ in range(7)]
    dp, m = 2, 2
    truth = brute_force_step(width, dp, m, cap)
    solver = padded_exact.solve if model == "runs" else padded_exact.solve_classes
    r = solver(width, dp, m, cap, time_limit=60)
    assert r["optimal"]
    assert r["best"] == pytest.approx(truth, rel=1e-9)
    assert r["dual"] == pytest.approx(truth, rel=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_models_agree(seed):
    """Beyond brute force's reach (20 rows, 2 ranks, 3 micro-batches each),
    both models prove the same optimum; with max_seqs too."""
    rng = random.Random(100 + seed)
    width = [256 * rng.randint(1, 12) for _ in range(20)]
    for max_seqs in (0, 5):
        runs = padded_exact.solve(width, 2, 3, 12288, max_seqs=max_seqs, time_limit=120)
        classes = padded_exact.solve_classes(width, 2, 3, 12288, max_seqs=max_seqs, time_limit=120)
        assert runs["optimal"] and classes["optimal"]
        assert classes["best"] == pytest.approx(runs["best"], rel=1e-9)


def test_command_line_against_the_planner(tmp_path):
    """The proven bound lies between the planner's printed bound (up to the
    grid) and the planner's own plan; the tool says so in its output."""
    assert PACKCTL.is_file(), f"packctl not built at {PACKCTL}"
    rng = random.Random(7)
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("".join(f"{rng.randint(100, 3000)}\n" for _ in range(48)))
    out = subprocess.run(["/usr/bin/python3", str(SCRIPT), str(lengths), "--dp", "4",
                          "--max-tokens", "8192", "--time-limit", "60", "--packctl", str(PACKCTL)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "plan step cost" in text and "proven lower bound" in text and "Optimal" in text
    plan = float(text.split("plan step cost (packctl AUTO)")[1].split()[0])
    printed = float(text.split("planner's printed lower bound")[1].split()[0])
    proven = float(text.split("proven lower bound")[1].split(")")[1].split()[0])
    assert printed / 1.003 <= proven <= plan * (1 + 1e-9)


def test_bad_grid_is_an_error(tmp_path):
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("100\n200\n")
    out = subprocess.run(["/usr/bin/python3", str(SCRIPT), str(lengths), "--dp", "1",
                          "--max-tokens", "1024", "--grid", "1"], capture_output=True, text=True)
    assert out.returncode != 0 and "--grid 1.0: must be > 1" in out.stderr


def run_eight_rows(tmp_path, *flags):
    """The command line on eight rows, DP 2, cap 4096, with extra flags;
    returns its output (the run must succeed)."""
    assert PACKCTL.is_file(), f"packctl not built at {PACKCTL}"
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("".join(f"{x}\n" for x in [3000, 2900, 1200, 1100, 1000, 500, 400, 300]))
    out = subprocess.run(["/usr/bin/python3", str(SCRIPT), str(lengths), "--dp", "2",
                          "--max-tokens", "4096", "--time-limit", "60", "--packctl", str(PACKCTL),
                          *flags], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_command_line_classes_model(tmp_path):
    """--model classes reaches solve_classes from the command line, and its
    proven bound lies at or below the planner's plan."""
    text = run_eight_rows(tmp_path, "--model", "classes")
    assert "model: classes" in text and "Optimal" in text
    plan = float(text.split("plan step cost (packctl AUTO)")[1].split()[0])
    proven = float(text.split("proven lower bound")[1].split(")")[1].split()[0])
    assert proven <= plan * (1 + 1e-9)


@pytest.mark.parametrize("model", ["runs", "classes"])
@pytest.mark.parametrize("seed", range(3))
def test_relaxations_bound_the_optimum(seed, model):
    """The relaxations prove bounds in order: lp <= counts <= the program's
    optimum (= the brute force's), and find no plan."""
    rng = random.Random(200 + seed)
    width = [128 * rng.randint(1, 16) for _ in range(7)]
    truth = brute_force_step(width, 2, 2, 4096)
    solver = padded_exact.solve if model == "runs" else padded_exact.solve_classes
    lp = solver(width, 2, 2, 4096, time_limit=60, relax="lp")
    counts = solver(width, 2, 2, 4096, time_limit=60, relax="counts")
    assert lp["best"] is None and counts["best"] is None
    assert lp["dual"] <= counts["dual"] * (1 + 1e-9)
    assert counts["dual"] <= truth * (1 + 1e-9)
    # Nothing is free: with 7 rows on 4 micro-batches, the LP's fractions
    # undercut the whole-row optimum.
    assert lp["dual"] < truth


def test_unknown_relaxation_is_an_error():
    with pytest.raises(ValueError, match="relax 'half'"):
        padded_exact.solve([128, 256], 1, 1, 1024, relax="half")


def test_plan_efficiency():
    """Two ranks, costs dealt in tiers: columns 10 and 4, mean per rank 12."""
    assert padded_exact.plan_efficiency([10, 8, 4, 2], 2) == pytest.approx(12 / 14)
    assert padded_exact.plan_efficiency([0, 0], 2) == 1.0


def test_command_line_relaxation(tmp_path):
    """--relax counts prints the relaxation's bound, at or below the plan,
    and no best plan; the plan's own efficiency is printed too."""
    text = run_eight_rows(tmp_path, "--relax", "counts")
    assert "relax: counts" in text and "best plan found" not in text
    assert "lock-step efficiency" in text
    plan = float(text.split("plan step cost (packctl AUTO)")[1].split()[0])
    bound = float(text.split("counts relaxation's bound")[1].split(")")[1].split()[0])
    assert 0 < bound <= plan * (1 + 1e-9)
