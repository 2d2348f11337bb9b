"""Cost model calibration end to end: `packctl calibrate` (the real binary)
recovers known coefficients from synthetic timings, prints valid JSON and
SVG and refuses bad input with exit 2 and a message naming the problem;
packd.calibrate agrees with it on the same file; a calibrated Cost plans
through Client.local() with per_micro_batch x M in the step cost; and
packd.timing's records on the CPU calibrate."""

from __future__ import annotations

import json
import math
import os
import random
import re
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

import packd  # noqa: E402
from packd import calibration  # noqa: E402
from codec_helpers import run_packctl  # noqa: E402

TERMS = ("per_micro_batch", "per_sequence", "linear", "quadratic")
# 2 ms per micro-batch, 20 us per sequence, 40 ns per token and attention's
# quadratic part.
TRUTH = dict(per_micro_batch=2e-3, per_sequence=2e-5, linear=4e-8, quadratic=1.5e-12)


def synthetic(n: int, noise: float, seed: int, coef=TRUTH) -> list:
    """n micro-batches of 1..32 sequences, lengths log-uniform in
    16..16384, timed by coef with multiplicative Gaussian noise."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        lengths = [int(16 * math.exp(rng.random() * math.log(1024))) for _ in range(rng.randint(1, 32))]
        t = (coef["per_micro_batch"] + coef["per_sequence"] * len(lengths) +
             coef["linear"] * sum(lengths) + coef["quadratic"] * sum(a * a for a in lengths))
        out.append({"lengths": lengths, "seconds": t * (1 + noise * rng.gauss(0, 1))})
    return out


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def calibrate_json(path) -> dict:
    res = run_packctl("calibrate", "--format", "json", path)
    assert res.returncode == 0, res.stderr.decode()
    return json.loads(res.stdout)


def packctl_coef(doc) -> dict:
    c = doc["cost"]
    return dict(per_micro_batch=c["perMicroBatch"], per_sequence=c["perSequence"],
                linear=c["linear"], quadratic=c["quadratic"])


# ---- packctl calibrate ---------------------------------------------------


def test_packctl_recovers_exact_coefficients(tmp_path):
    doc = calibrate_json(write_jsonl(tmp_path / "t.jsonl", synthetic(300, 0, 1)))
    assert set(doc) == {"cost", "r2", "mape", "samples"}
    assert set(doc["cost"]) == {"linear", "quadratic", "perSequence", "perMicroBatch"}
    for name, got in packctl_coef(doc).items():
        assert got == pytest.approx(TRUTH[name], rel=1e-7), name
    assert doc["r2"] == pytest.approx(1, abs=1e-12)
    assert doc["mape"] < 1e-9
    assert doc["samples"] == 300


def test_packctl_recovers_noisy_coefficients(tmp_path):
    """1 % noise on 2000 micro-batches: every coefficient within 6 % (the
    quadratic part, the smallest share of most times, is the loosest)."""
    doc = calibrate_json(write_jsonl(tmp_path / "t.jsonl", synthetic(2000, 0.01, 2)))
    for name, got in packctl_coef(doc).items():
        assert got == pytest.approx(TRUTH[name], rel=0.06), name
    assert doc["r2"] > 0.99
    assert 0.005 < doc["mape"] < 0.012


def test_packctl_summary_and_its_plan_flags(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", synthetic(200, 0.01, 3))
    res = run_packctl("calibrate", path)
    assert res.returncode == 0, res.stderr.decode()
    text = res.stdout.decode()
    for needle in (*TERMS, "r2", "MAPE", "200 micro-batches"):
        assert needle in text
    flags = text.split("packctl plan flags:")[1].split()
    assert flags[0::2] == ["--per-micro-batch", "--per-sequence", "--cost-linear", "--cost-quadratic"]
    doc = calibrate_json(path)
    assert [float(v) for v in flags[1::2]] == [packctl_coef(doc)[t] for t in TERMS]
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("".join(f"{100 + 37 * i % 3000}\n" for i in range(64)))
    res = run_packctl("plan", "--local", lengths, "--dp", 2, "--max-tokens", 8192, *flags)
    assert res.returncode == 0, res.stderr.decode()


def test_packctl_svg(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", synthetic(50, 0.02, 4))
    out = tmp_path / "fit.svg"
    res = run_packctl("calibrate", "--format", "svg", "--out", out, path)
    assert res.returncode == 0 and res.stdout == b""
    root = ET.fromstring(out.read_text())
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == ns + "svg"
    points = [c for c in root.iter(ns + "circle") if c.find(ns + "title") is not None]
    assert len(points) == 50
    assert all(float(c.get("cx")) >= 96 and float(c.get("cy")) <= 104 + 440 for c in points)
    # The y = x line from the origin to the far corner, in red.
    diag = [ln for ln in root.iter(ns + "line") if ln.get("stroke") == "#d62728"
            and float(ln.get("x2")) - float(ln.get("x1")) == pytest.approx(
                float(ln.get("y1")) - float(ln.get("y2"))) and float(ln.get("x2")) > 400]
    assert len(diag) == 1
    texts = " ".join(t.text or "" for t in root.iter(ns + "text"))
    assert "measured" in texts and "predicted" in texts and "r2" in texts


def lines(*records) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


GOOD = [{"lengths": [100 * (i + 1), 7 * i + 3], "seconds": 0.01 * (i + 1)} for i in range(6)]

# (file contents, fragment of packctl's message, fragment of packd.calibrate's)
BAD_INPUTS = {
    "empty": ("", "no records", "no records"),
    "blank lines": ("\n \n", "no records", "no records"),
    "fewer records than coefficients": (lines(*GOOD[:3]), "3 records", "3 records"),
    "negative seconds": (lines(GOOD[0], {"lengths": [5], "seconds": -0.5}),
                         ":2: seconds: -0.5 is negative", ":2: seconds: -0.5 is negative"),
    "NaN seconds": (lines(GOOD[0], '{"lengths": [5], "seconds": NaN}'),
                    ":2: seconds: NaN is not a finite number", ":2: seconds: nan is not a finite number"),
    "string seconds": (lines({"lengths": [5], "seconds": "0.1"}),
                       ":1: seconds: expected a number", ":1: seconds: expected a number"),
    "missing seconds": (lines({"lengths": [5]}), ":1: seconds: missing", ":1: seconds: missing"),
    "missing lengths": (lines(GOOD[0], GOOD[1], {"seconds": 1.0}), ":3: lengths: missing",
                        ":3: lengths: missing"),
    "non-integer length": (lines({"lengths": [5, 2.5], "seconds": 1.0}),
                           ":1: lengths[1]: expected a non-negative integer, got 2.5",
                           ":1: lengths[1]: expected a non-negative integer, got 2.5"),
    "negative length": (lines({"lengths": [-5], "seconds": 1.0}), ":1: lengths[0]: -5 is negative",
                        ":1: lengths[0]: -5 is negative"),
    "string lengths": (lines({"lengths": "5", "seconds": 1.0}), ":1: lengths: expected an array",
                       ":1: lengths: expected an array"),
    "empty lengths": (lines({"lengths": [], "seconds": 1.0}), ":1: lengths: empty",
                      ":1: lengths: empty"),
    "not an object": (lines([1, 2]), ":1: expected a JSON object", ":1: expected an object"),
    "broken JSON": ('{"lengths": [1], "seconds": 1\n', ":1:", ":1: invalid JSON"),
    "one sequence each (collinear)": (
        lines(*[{"lengths": [50 + 13 * i], "seconds": 0.01 + 1e-5 * (50 + 13 * i)} for i in range(20)]),
        "do not tell per_micro_batch and per_sequence apart",
        "do not tell per_micro_batch and per_sequence apart"),
    "one length (collinear)": (
        lines(*[{"lengths": [512] * (1 + i % 5), "seconds": 0.01 * (1 + i % 5)} for i in range(20)]),
        "do not tell per_sequence, linear and quadratic apart",
        "do not tell per_sequence, linear and quadratic apart"),
    "no tokens": (lines(*[{"lengths": [0] * (1 + i % 5), "seconds": 0.01 * (1 + i % 5)} for i in range(9)]),
                  "linear and quadratic cannot be fitted", "linear and quadratic cannot be fitted"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS), ids=list(BAD_INPUTS))
def test_bad_input_exits_2_naming_the_problem(tmp_path, case):
    text, c_needle, py_needle = BAD_INPUTS[case]
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    res = run_packctl("calibrate", path)
    assert res.returncode == 2, res
    assert c_needle in res.stderr.decode(), res.stderr.decode()
    assert res.stdout == b""
    with pytest.raises(ValueError) as e:
        packd.calibrate(path)
    assert py_needle in str(e.value)


def test_missing_file_and_bad_flags_exit_2(tmp_path):
    res = run_packctl("calibrate", tmp_path / "nope.jsonl")
    assert res.returncode == 2 and b"nope.jsonl: cannot open" in res.stderr
    with pytest.raises(FileNotFoundError):
        packd.calibrate(tmp_path / "nope.jsonl")
    path = write_jsonl(tmp_path / "t.jsonl", synthetic(10, 0, 5))
    for args, needle in ((["--format", "xml"], "--format"), (["--align", "x"], "--align"),
                         (["--bogus"], "--bogus"), ([], "missing TIMINGS"),
                         (["a", "b"], "unexpected argument")):
        res = run_packctl("calibrate", *args, *([] if args in ([], ["a", "b"]) else [path]))
        assert res.returncode == 2 and needle in res.stderr.decode(), (args, res)
    res = run_packctl("calibrate", "--help")
    assert res.returncode == 0 and b"--format" in res.stdout


def test_stdin_and_align(tmp_path):
    records = synthetic(100, 0, 6)
    doc = json.loads(run_packctl("calibrate", "--format", "json", "-",
                                 stdin=lines(*records).encode()).stdout)
    assert packctl_coef(doc)["linear"] == pytest.approx(TRUTH["linear"], rel=1e-7)
    # Aligned to 64, the same times fit other coefficients, the same in
    # packctl and in Python.
    path = write_jsonl(tmp_path / "t.jsonl", records)
    res = run_packctl("calibrate", "--format", "json", "--align", 64, path)
    aligned = packctl_coef(json.loads(res.stdout))
    assert aligned != packctl_coef(doc)
    cal = packd.calibrate(path, align=64)
    for name in TERMS:
        assert getattr(cal.cost, name) == pytest.approx(aligned[name], rel=1e-6, abs=1e-18)


# ---- packd.calibrate -----------------------------------------------------


def test_python_agrees_with_packctl(tmp_path):
    records = synthetic(1000, 0.01, 7)
    path = write_jsonl(tmp_path / "t.jsonl", records)
    doc = calibrate_json(path)
    for source in (path, str(path), records, iter(records)):
        cal = packd.calibrate(source)
        assert isinstance(cal, packd.Calibration) and isinstance(cal.cost, packd.Cost)
        for name, want in packctl_coef(doc).items():
            assert getattr(cal.cost, name) == pytest.approx(want, rel=1e-6), name
        assert cal.r2 == pytest.approx(doc["r2"], rel=1e-9)
        assert cal.mape == pytest.approx(doc["mape"], rel=1e-6)
        assert cal.samples == doc["samples"] == 1000
    # packctl's document reads back as the same calibration.
    back = packd.Calibration.from_dict(doc)
    assert back.cost.to_dict() == doc["cost"] and back.to_dict() == doc
    assert "per_micro_batch" in str(cal) and "MAPE" in str(cal)


def test_own_nnls_matches_scipy(monkeypatch):
    """Without scipy, the own Lawson-Hanson solver gives scipy's answer:
    on random problems (many with coefficients held at 0) and on a fit."""
    scipy_opt = pytest.importorskip("scipy.optimize")
    rng = np.random.default_rng(8)
    for _ in range(300):
        p = int(rng.integers(1, 5))
        a = rng.normal(size=(12, p))
        b = rng.normal(size=12) * 3
        want = scipy_opt.nnls(a, b)[0]
        got = calibration._nnls(a.T @ a, a.T @ b)
        assert np.allclose(got, want, rtol=1e-7, atol=1e-9)
    records = synthetic(500, 0.01, 9)
    with_scipy = packd.calibrate(records)
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)  # import fails
    without = packd.calibrate(records)
    for name in TERMS:
        assert getattr(without.cost, name) == pytest.approx(getattr(with_scipy.cost, name), rel=1e-7)


def test_negative_fits_are_held_at_zero():
    coef = dict(TRUTH, per_micro_batch=-4e-4)
    records = [dict(r, seconds=max(r["seconds"], 0.0)) for r in synthetic(300, 0, 10, coef)]
    cal = packd.calibrate(records)
    assert cal.cost.per_micro_batch == 0
    assert all(getattr(cal.cost, n) >= 0 for n in TERMS)


def test_cost_values_are_checked():
    with pytest.raises(packd.InvalidArgument, match="cost.per_sequence"):
        packd.Cost(per_sequence=-1)
    with pytest.raises(packd.InvalidArgument, match="cost.linear"):
        packd.Cost(linear=float("nan"))
    with pytest.raises(packd.InvalidArgument, match="unknown field"):
        packd.Cost.from_dict({"perToken": 1})
    c = packd.Cost.from_dict({"perSequence": 3, "linear": 1})
    assert c == packd.Cost(linear=1, per_sequence=3)
    assert c.to_proto().per_sequence == 3
    assert packd.Cost.coerce(c.to_proto()) == c
    # The planner's defaults apply where linear and quadratic are both 0.
    assert packd.Cost(per_micro_batch=1).predict([0, 24576]) == pytest.approx(1 + 24576 + 24576)


# ---- planning with a calibrated cost ------------------------------------


@pytest.fixture(scope="module")
def local():
    return packd.Client.local()


def test_calibrated_cost_plans_with_per_micro_batch_in_the_step(local):
    cal = packd.calibrate(synthetic(400, 0.01, 11))
    lengths = np.array([64 + (i * 7919) % 6000 for i in range(512)])
    kw = dict(dp=4, max_tokens=16384)
    plan = local.plan(lengths, cost=cal, **kw)
    # The same costs without per_micro_batch: the same plan, and the step
    # cost and its proven bound M x per_micro_batch lower.
    fields = dict(cal.cost.fields(), per_micro_batch=0)
    base = local.plan(lengths, cost=packd.Cost(**fields), **kw)
    s, b = plan.response.stats, base.response.stats
    m = s.micro_batches_per_rank
    assert m == b.micro_batches_per_rank > 1
    pm = cal.cost.per_micro_batch
    assert pm > 0
    assert s.step_cost - b.step_cost == pytest.approx(m * pm, rel=1e-9)
    assert s.step_cost_lower_bound - b.step_cost_lower_bound == pytest.approx(m * pm, rel=1e-6)
    assert s.step_cost_lower_bound <= s.step_cost * (1 + 1e-12)
    assert s.total_cost - b.total_cost == pytest.approx(4 * m * pm, rel=1e-9)
    # Micro-batch costs are what the model predicts for their slots.
    for rank in plan:
        for mb in rank.micro_batches:
            assert mb.cost == pytest.approx(cal.cost.predict(mb), rel=1e-9)
    # cost= also takes the Cost, its message, a mapping and the fields.
    for cost in (cal.cost, cal.cost.to_proto(), cal.cost.to_dict(), cal.to_dict()["cost"]):
        assert local.plan(lengths, cost=cost, **kw).response.stats.step_cost == s.step_cost
    assert local.plan(lengths, **cal.cost.fields(), **kw).response.stats.step_cost == s.step_cost


def test_cost_keyword_errors(local):
    with pytest.raises(packd.InvalidArgument, match="not both"):
        local.plan([5, 6], dp=1, cost=packd.Cost(linear=1), linear=2.0)
    with pytest.raises(packd.InvalidArgument, match="cost: expected"):
        local.plan([5, 6], dp=1, cost=3)
    with pytest.raises(packd.InvalidArgument, match=r"cost.per_micro_batch: -1"):
        local.plan([5, 6], dp=1, per_micro_batch=-1)


# ---- packd.timing ---------------------------------------------------------


def work(lengths) -> None:
    """A step that grows with the micro-batch, the sequences and the tokens:
    sleeps (1 ms + 50 us a sequence + 0.5 us a token), so that the times
    stand well above the noise of a loaded machine."""
    time.sleep(1e-3 + 5e-5 * len(lengths) + 5e-7 * sum(lengths))


def test_timing_on_cpu_records_what_calibrate_accepts(tmp_path):
    rec = packd.timing.Recorder()
    rng = random.Random(12)
    for _ in range(60):
        lengths = [rng.randint(1, 4096) for _ in range(rng.randint(1, 8))]
        with rec.micro_batch(np.array(lengths)):
            work(lengths)
    with pytest.raises(RuntimeError):
        with rec.micro_batch([5]):
            raise RuntimeError("a failed step records nothing")
    assert len(rec) == 60
    records = rec.records
    assert all(set(r) == {"lengths", "seconds"} and r["seconds"] > 0 for r in records)
    assert all(isinstance(a, int) for r in records for a in r["lengths"])
    path = tmp_path / "timings.jsonl"
    assert rec.dump(path) == 60
    cal = packd.calibrate(rec)
    assert cal.samples == 60 and cal.cost.linear + cal.cost.quadratic > 0
    assert packd.calibrate(path).cost == cal.cost
    res = run_packctl("calibrate", "--format", "json", path)
    assert res.returncode == 0, res.stderr.decode()
    assert json.loads(res.stdout)["samples"] == 60
    rec.dump(path, append=True)
    assert packd.calibrate(path).samples == 120
    rec.clear()
    assert len(rec) == 0 and rec.records == []


def test_timing_takes_micro_batches(local):
    """A packd MicroBatch is timed as its slots (what the planner costs)."""
    plan = local.plan([100, 300, 5, 64], dp=1, align=16)
    mb = plan[0].micro_batches[0]
    rec = packd.timing.Recorder(device="cpu")
    with rec.micro_batch(mb):
        time.sleep(0.001)
    assert rec.records[0]["lengths"] == np.diff(mb.cu_seqlens_padded).tolist()
    assert rec.records[0]["seconds"] >= 0.001


def test_timing_takes_dynamic_cp_steps(local):
    """A dynamic-CP plan's GpuStep is timed as its group's slots with the
    group size as the record's cp (above 1 only), on the CPU and on the
    CUDA path; the records calibrate the CP terms; an idle step and a bad
    cp are refused by name."""
    lengths = [30000, 12000, 9000, 7000, 5000, 4000, 3000, 2500, 2000, 1500, 1200, 800]
    dplan = local.plan(lengths, dp=4, cp=2, max_tokens=8192, dynamic_cp=True, cp_token=0.25, cp_group=100)
    rec = packd.timing.Recorder(device="cpu")
    steps = [step for g in range(dplan.pool) for step in dplan.gpu(g) if step.group is not None]
    for step in steps:
        with rec.micro_batch(step):
            pass
    records = rec.records
    assert len(records) == len(steps)
    for step, r in zip(steps, records):
        assert r["lengths"] == np.diff(step.cu_seqlens_padded).tolist()
        assert r.get("cp", 1) == step.size and ("cp" in r) == (step.size > 1)
    assert {step.size for step in steps} == {1, 2, 4}  # the worked example's groups
    with rec.micro_batch([4096, 1024], cp=4):
        pass
    assert rec.records[-1]["cp"] == 4
    idle = packd.dcp.GpuStep(2, None, 0, 0, 5, *(np.zeros(0, np.int64),) * 4, 0)
    with pytest.raises(ValueError, match="GPU 5 is idle in slot 2"):
        with rec.micro_batch(idle):
            pass
    for bad, msg in ((0, "cp: 0 is below 1"), (2.0, "cp: expected an integer group size")):
        with pytest.raises(ValueError, match=msg):
            with rec.micro_batch([8], cp=bad):
                pass
    assert len(rec) == len(steps) + 1  # refused blocks record nothing

    rng = random.Random(5)
    fit = packd.timing.Recorder()
    for _ in range(80):  # a step of known per-GPU cost: 1 ms + 2 ms per extra GPU + tokens
        c = rng.choice([1, 2, 4, 8])
        ls = [2 * c * rng.randint(1, 200) for _ in range(rng.randint(1, 4))]
        with fit.micro_batch(ls, cp=c):
            time.sleep(1e-3 + 2e-3 * (c - 1) + 5e-6 * sum(ls) / c)
    cal = packd.calibrate(fit)
    assert cal.cp and cal.cost.cp_group > 0


class FakeEvent:
    """torch.cuda.Event's timing surface on the CPU clock, counting the
    synchronizations."""

    synced = 0

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.at = None

    def record(self, stream=None):
        self.at = time.perf_counter()

    def synchronize(self):
        FakeEvent.synced += 1

    def elapsed_time(self, end):
        return (end.at - self.at) * 1000.0


def test_timing_cuda_path_waits_only_at_read(monkeypatch):
    """device="cuda": the block is bracketed by events, synchronized only
    when the records are read (torch.cuda.Event replaced by a CPU fake, so
    that the logic runs without a GPU)."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    FakeEvent.synced = 0
    rec = packd.timing.Recorder(device="cuda:0")
    for k in (1, 2, 3):
        with rec.micro_batch(torch.tensor([100 * k] * k)):
            time.sleep(0.002)
    assert FakeEvent.synced == 0 and len(rec) == 3
    records = rec.records
    assert FakeEvent.synced == 3
    assert [r["lengths"] for r in records] == [[100], [200, 200], [300, 300, 300]]
    assert all(0.002 <= r["seconds"] < 1 for r in records)
    # A block on the CPU (named per call) is timed with the CPU clock.
    with rec.micro_batch([7], device="cpu"):
        pass
    assert FakeEvent.synced == 3 and len(rec.records) == 4
    # A CP group's size travels with the pending events.
    with rec.micro_batch(torch.tensor([64, 32]), cp=8):
        pass
    assert rec.records[-1]["cp"] == 8 and rec.records[-1]["lengths"] == [64, 32]


def test_timing_on_a_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    rec = packd.timing.Recorder()
    x = torch.randn(2048, 2048, device="cuda")
    for k in range(1, 9):
        lengths = torch.full((k,), 256 * k, device="cuda")
        with rec.micro_batch(lengths):  # CUDA tensors: CUDA events
            for _ in range(k):
                x = (x @ x).tanh()
    records = rec.records
    assert [len(r["lengths"]) for r in records] == list(range(1, 9))
    assert all(r["seconds"] > 0 for r in records)
    assert records[-1]["lengths"] == [2048] * 8


# ---- dynamic-CP terms: timings that carry the group size ----------------

CP_TERMS = TERMS + ("cp_group", "cp_token")
# TRUTH plus 0.3 ms per extra GPU of a group (ring steps) and 10 ns per
# token that leaves a GPU.
CP_TRUTH = dict(TRUTH, cp_group=3e-4, cp_token=1e-8)


def synthetic_cp(n: int, noise: float, seed: int, coef=CP_TRUTH) -> list:
    """n micro-batches as synthetic(), each on a CP group of 1, 2, 4 or 8
    GPUs ("cp"), timed per GPU by dynamic CP's cost."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        lengths = [int(16 * math.exp(rng.random() * math.log(1024))) for _ in range(rng.randint(1, 32))]
        c = rng.choice((1, 2, 4, 8))
        s, sq = sum(lengths), sum(a * a for a in lengths)
        t = (coef["per_micro_batch"] + coef["cp_group"] * (c - 1) + coef["per_sequence"] * len(lengths) +
             (coef["linear"] * s + coef["quadratic"] * sq) / c + coef["cp_token"] * s * (c - 1) / c)
        out.append({"lengths": lengths, "seconds": t * (1 + noise * rng.gauss(0, 1)), "cp": c})
    return out


def packctl_cp_coef(doc) -> dict:
    return dict(packctl_coef(doc), cp_group=doc["cost"]["cpGroup"], cp_token=doc["cost"]["cpToken"])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scale=st.tuples(*[st.integers(2, 50)] * len(CP_TRUTH)),
       seed=st.integers(0, 10**6))
def test_cp_terms_recovered_without_noise(tmp_path, scale, seed):
    """Any positive coefficients (CP_TRUTH's, each times 0.2 to 5):
    timings computed from them give them back in packctl and in Python,
    and the two agree."""
    coef = {name: v * f / 10 for (name, v), f in zip(CP_TRUTH.items(), scale)}
    records = synthetic_cp(120, 0, seed, coef)
    doc = calibrate_json(write_jsonl(tmp_path / "cp.jsonl", records))
    cal = packd.calibrate(records)
    assert cal.cp
    got = packctl_cp_coef(doc)
    for name in CP_TERMS:
        assert got[name] == pytest.approx(coef[name], rel=1e-6), name
        assert getattr(cal.cost, name) == pytest.approx(got[name], rel=1e-7), name
    assert doc["r2"] == pytest.approx(1, abs=1e-9)


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_cp_terms_recovered_with_small_noise(tmp_path, seed):
    """1 % noise on 3000 micro-batches: every coefficient within 10 %, and
    packctl and Python give the same fit of the same records."""
    records = synthetic_cp(3000, 0.01, seed)
    doc = calibrate_json(write_jsonl(tmp_path / "cp.jsonl", records))
    cal = packd.calibrate(records)
    got = packctl_cp_coef(doc)
    for name in CP_TERMS:
        assert got[name] == pytest.approx(CP_TRUTH[name], rel=0.10), name
        assert getattr(cal.cost, name) == pytest.approx(got[name], rel=1e-6), name
    assert cal.r2 == pytest.approx(doc["r2"], rel=1e-9)
    assert cal.mape == pytest.approx(doc["mape"], rel=1e-6)


def test_cp_output_only_with_cp_records(tmp_path):
    """cp 1 everywhere is today's fit and document; one record with cp > 1
    adds cpToken and cpGroup to the JSON, two rows and two plan flags to
    the summary, and the Calibration reads back."""
    records = synthetic(200, 0.01, 24)
    plain = calibrate_json(write_jsonl(tmp_path / "a.jsonl", records))
    ones = calibrate_json(write_jsonl(tmp_path / "b.jsonl", [dict(r, cp=1) for r in records]))
    assert ones == plain and set(plain["cost"]) == {"linear", "quadratic", "perSequence", "perMicroBatch"}
    assert not packd.calibrate(records).cp and "cp_token" not in str(packd.calibrate(records))
    path = write_jsonl(tmp_path / "cp.jsonl", synthetic_cp(200, 0.01, 25))
    doc = calibrate_json(path)
    assert list(doc["cost"]) == ["linear", "quadratic", "perSequence", "perMicroBatch", "cpToken", "cpGroup"]
    cal = packd.calibrate(path)
    assert cal.to_dict()["cost"].keys() == doc["cost"].keys()
    assert packd.Calibration.from_dict(doc).to_dict() == doc
    summary = run_packctl("calibrate", path).stdout.decode()
    assert "cp_group" in summary and "cp_token" in summary and "--cp-token " in summary
    assert "cp_group" in str(cal)
    # The fitted cost predicts what it was fitted to.
    rec = synthetic_cp(1, 0, 26)[0]
    want = packd.Cost(**{n: CP_TRUTH[n] for n in CP_TERMS}).predict(rec["lengths"], cp=rec["cp"])
    assert want == pytest.approx(rec["seconds"], rel=1e-12)
    # A calibrated cost carries its CP terms into a dynamic-CP request.
    from packd import _request
    req = _request.build(np.array([4096, 900, 300, 77]), None, None, cost=cal, dp=2, cp=2,
                         dynamic_cp=True, max_tokens=8192)
    assert req.cost.cp_token == cal.cost.cp_token > 0 and req.cost.cp_group == cal.cost.cp_group > 0


BAD_CP = {0: "0 is below 1", -2: "-2 is below 1", 2.5: "expected an integer group size >= 1, got 2.5",
          "4": "expected an integer group size >= 1, got", True: "expected an integer group size >= 1",
          65537: "65537 is too large", 2**40: f"{2**40} is too large"}


@pytest.mark.parametrize("value", list(BAD_CP), ids=[repr(v) for v in BAD_CP])
def test_bad_cp_is_refused_naming_the_record_and_value(tmp_path, value):
    records = synthetic_cp(10, 0, 27)
    records[3]["cp"] = value
    path = write_jsonl(tmp_path / "bad.jsonl", records)
    res = run_packctl("calibrate", path)
    assert res.returncode == 2 and res.stdout == b""
    assert f"bad.jsonl:4: cp: {BAD_CP[value]}" in res.stderr.decode(), res.stderr.decode()
    with pytest.raises(ValueError, match=f"bad.jsonl:4: cp: {re.escape(BAD_CP[value])}"):
        packd.calibrate(path)
    with pytest.raises(ValueError, match=f"^record 3: cp: {re.escape(BAD_CP[value])}"):
        packd.calibrate(records)
