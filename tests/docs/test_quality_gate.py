"""The plan-quality gate (bench/quality/run.py): the current build plans
every pinned case no worse than bench/quality/record.json, and the gate
really fails when a plan is worse than its record (a step cost above it by
more than 0.01 %, or one more micro-batch), passes within the tolerance,
and records improvements with --update."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "bench" / "quality" / "run.py"
RECORD = REPO / "bench" / "quality" / "record.json"
ONLY = "conv-packed-dp8-16k"  # Also matches conv-packed-dp8-16k-seqs16: two cases.


def run(*args):
    env = dict(os.environ)
    env.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))
    return subprocess.run([sys.executable, str(RUN), *args], capture_output=True, text=True, env=env, timeout=300)


def tampered(tmp_path, change):
    data = json.loads(RECORD.read_text())
    for name, case in data["cases"].items():
        if ONLY in name:
            change(case)
    path = tmp_path / "record.json"
    path.write_text(json.dumps(data))
    return path


def test_every_case_is_as_good_as_its_record():
    res = run()
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 worse" in res.stdout and "0 not in the record" in res.stdout


def test_a_higher_step_cost_fails_with_a_table(tmp_path):
    def lower(case):
        case["step_cost"] /= 1.0002  # The plan is now 0.02 % above its record.

    res = run("--record", str(tampered(tmp_path, lower)), "--only", ONLY)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.count("WORSE") == 2
    assert "plan quality got worse in 2 case(s)" in res.stderr
    assert "--update --accept-worse" in res.stderr


def test_a_rise_within_the_tolerance_passes(tmp_path):
    def lower(case):
        case["step_cost"] /= 1.00005  # 0.005 % above: within 0.01 %.

    res = run("--record", str(tampered(tmp_path, lower)), "--only", ONLY)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "WORSE" not in res.stdout


def test_one_more_micro_batch_fails(tmp_path):
    def fewer(case):
        case["micro_batches_per_rank"] -= 1
        case["step_cost"] *= 2  # Cheaper now, but one micro-batch more per rank.

    res = run("--record", str(tampered(tmp_path, fewer)), "--only", ONLY)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.count("WORSE") == 2


def test_update_records_improvements_and_refuses_regressions(tmp_path):
    def higher(case):
        case["step_cost"] *= 1.01

    path = tampered(tmp_path, higher)
    res = run("--record", str(path), "--only", ONLY)
    assert res.returncode == 0, res.stdout + res.stderr
    assert sum(line.endswith(" better") for line in res.stdout.splitlines()) == 2, res.stdout
    assert "--update" in res.stdout
    res = run("--record", str(path), "--only", ONLY, "--update")
    assert res.returncode == 0, res.stdout + res.stderr
    now = json.loads(path.read_text())["cases"]
    then = json.loads(RECORD.read_text())["cases"]
    for name in now:
        assert now[name]["step_cost"] == then[name]["step_cost"], name

    def lower(case):
        case["step_cost"] /= 1.01

    path = tampered(tmp_path, lower)
    before = path.read_text()
    res = run("--record", str(path), "--only", ONLY, "--update")
    assert res.returncode == 1 and "not updating" in res.stderr
    assert path.read_text() == before


def test_bad_tolerance_is_a_usage_error():
    res = run("--tolerance", "-1")
    assert res.returncode == 2
    assert "--tolerance: must be >= 0, got -1.0" in res.stderr
