"""packd.Client against the real server on a loopback port, and against the
embedded planner (libpackd.so): round trips, identical results from both
modes, GetRankPlan, and JSON identical to packctl's."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

import packd  # noqa: E402
from packd.testing import ServerProcess  # noqa: E402


@pytest.fixture(scope="module")
def server():
    with ServerProcess() as srv:
        yield srv


@pytest.fixture(scope="module")
def remote(server):
    with packd.Client(server.target, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def local():
    return packd.Client.local()


def rollout_lengths(rng, n):
    """Prompt U[64, 1024] + response lognormal(ln 1500, 1) capped at 16384
    (an RL rollout: short prompts, long-tailed responses)."""
    prompt = rng.integers(64, 1025, size=n)
    resp = np.minimum(rng.lognormal(np.log(1500), 1.0, size=n).astype(np.int64), 16384)
    return prompt + resp


def same_plan(a, b):
    x, y = type(a.response)(), type(b.response)()
    x.CopyFrom(a.response)
    y.CopyFrom(b.response)
    x.stats.plan_time_us = y.stats.plan_time_us = 0  # the only figure that is a measurement
    # A server keys its plan ids with its own secret; the embedded planner
    # does not (test_plan_ids.py). The plans themselves must be identical.
    for m in (x, y):
        m.plan_id = ""
        for r in m.ranks:
            r.plan_id = ""
    return x.SerializeToString() == y.SerializeToString()


def check_plan(plan, lengths, dp, max_tokens=0, cp=1):
    n = len(lengths)
    order = plan.order()
    assert np.array_equal(np.sort(order), np.arange(n)), "every index exactly once"
    assert plan.dp == dp and plan.rank_sizes().sum() == n
    assert plan.stats.sequences == n and plan.stats.cap_violations == 0
    align = plan.stats.alignment
    per_mini = {}
    counts = set()
    for rank in plan:
        for mini in rank.mini_batches:
            counts.add((mini.mini, len(mini)))
            for mb in mini:
                assert np.array_equal(np.diff(mb.cu_seqlens), lengths[mb.seqs])
                pad = np.diff(mb.cu_seqlens_padded)
                assert np.all(pad >= lengths[mb.seqs]) and np.all(pad % align == 0)
                assert mb.cu_seqlens.dtype == np.int32 and mb.cu_seqlens_padded.dtype == np.int32
                if max_tokens:
                    assert mb.cu_seqlens_padded[-1] / cp <= max_tokens
                assert mb.tokens == int(lengths[mb.seqs].sum())
                per_mini[mini.mini] = per_mini.get(mini.mini, 0.0) + mb.loss_scale
    # Lock step: every rank runs the same number of micro-batches per mini-batch.
    assert len({c for _, c in counts}) >= 1
    for b in per_mini:
        assert len({c for m, c in counts if m == b}) == 1
        assert per_mini[b] == pytest.approx(1.0, abs=1e-9)
    # Rank views are views of order().
    off = 0
    for rank in plan:
        assert np.shares_memory(rank.seqs, order) or rank.seqs.size == 0
        assert np.array_equal(rank.seqs, order[off : off + rank.seqs.size])
        off += rank.seqs.size


def test_health(remote, local):
    assert remote.health() == "SERVING"
    assert remote.health("packd.v1.Planner") == "SERVING"
    assert local.health() == "SERVING"


@pytest.mark.parametrize("seed", range(4))
def test_plan_round_trip(remote, seed):
    rng = np.random.default_rng(seed)
    lengths = rollout_lengths(rng, 512)
    plan = remote.plan(lengths, dp=8, max_tokens=32768, mini_batches=2)
    check_plan(plan, lengths, dp=8, max_tokens=32768)
    assert plan.num_mini_batches == 2
    assert 0 < plan.lockstep_efficiency <= 1.0 and plan.dp_imbalance >= 1.0
    assert plan.figures()["micro_batches_per_rank"] == plan.stats.micro_batches_per_rank
    again = packd.Plan.from_json(plan.to_json())
    assert again.response == plan.response
    assert packd.Plan.from_bytes(plan.to_bytes()).response == plan.response


CONFIGS = [
    dict(dp=4),
    dict(dp=8, max_tokens=32768),
    dict(dp=8, cp=2, tp=2, max_tokens=16384, mini_batches=4),
    dict(dp=4, cp=4, cp_algo="ulysses", max_tokens=20000),
    dict(dp=8, dp_balance="kk_equal", equal_count=True, max_tokens=32768, micro_algo="kk_count", order="heavy_middle"),
    dict(dp=8, dp_balance="sorted_stride", mode="padded", round=128, max_tokens=32768, micro_algo="next_fit"),
    dict(dp=2, mode="fixed", micro_batch_size=4),
    dict(dp=4, pp=4, vpp=2, max_tokens=32768, linear=1.0, quadratic=0.0, pad_multiple=16),
    dict(dp=4, shuffle=True, seed=123, max_tokens=32768, mini_batches=2, max_seqs=8),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_remote_and_embedded_give_identical_plans(remote, local, cfg):
    rng = np.random.default_rng(len(str(cfg)))
    lengths = rollout_lengths(rng, 256)
    loss = rng.integers(0, lengths + 1)
    groups = np.repeat(np.arange(64), 4)
    a = remote.plan(lengths, loss_tokens=loss, groups=groups, **cfg)
    b = local.plan(lengths, loss_tokens=loss, groups=groups, **cfg)
    assert len(a.plan_id) == len(b.plan_id) == 32 and a.plan_id != b.plan_id
    assert same_plan(a, b)
    check_plan(a, lengths, dp=cfg["dp"], max_tokens=cfg.get("max_tokens", 0), cp=cfg.get("cp", 1))


def test_rank_plan_matches_the_plan(remote, local):
    rng = np.random.default_rng(5)
    lengths = rollout_lengths(rng, 300)
    for client in (remote, local):
        plan = client.plan(lengths, dp=6, max_tokens=32768, mini_batches=3)
        for r in range(plan.dp):
            rp = client.rank_plan(plan.plan_id, r)
            assert rp.plan_id == plan.plan_id and rp.dp_rank == r
            assert np.array_equal(rp.seqs, plan[r].seqs)
            assert len(rp.mini_batches) == 3
            for x, y in zip(rp.micro_batches, plan[r].micro_batches):
                assert np.array_equal(x.cu_seqlens_padded, y.cu_seqlens_padded)
                assert x.loss_scale == y.loss_scale and x.max_seqlen == y.max_seqlen


def test_deterministic_plan_ids(remote):
    lengths = np.arange(1, 200)
    a = remote.plan(lengths, dp=4, max_tokens=4096)
    b = remote.plan(lengths.tolist(), dp=4, max_tokens=4096)
    c = remote.plan(lengths, dp=4, max_tokens=4097)
    assert a.plan_id == b.plan_id != c.plan_id
    assert same_plan(a, b)


def packctl():
    path = Path(os.environ["PACKD_BUILD_DIR"]) / "client" / "c" / "packctl"
    assert path.is_file(), f"packctl not built at {path}"
    return str(path)


def run_packctl_json(tmp_path, request):
    """packctl plan --local on a binary request: (JSON text, response bytes)."""
    (tmp_path / "req.bin").write_bytes(request.SerializeToString())
    res = subprocess.run(
        [packctl(), "plan", "--local", "--request-file", str(tmp_path / "req.bin"), "--save-response",
         str(tmp_path / "resp.bin"), "--format", "json", "--out", str(tmp_path / "out.json")],
        capture_output=True, text=True,
    )
    assert res.returncode == 0, res.stderr
    return (tmp_path / "out.json").read_text(), (tmp_path / "resp.bin").read_bytes()


def test_to_json_is_identical_to_packctl(tmp_path):
    rng = np.random.default_rng(11)
    lengths = rollout_lengths(rng, 128)
    req = packd._request.build(lengths, None, None, dp=4, cp=2, max_tokens=16384, mini_batches=2)
    text, resp = run_packctl_json(tmp_path, req)
    plan = packd.Plan.from_bytes(resp)
    assert plan.to_json().strip() == text.strip()
    assert json.loads(text)["planId"] == plan.plan_id


def test_remote_plan_json_equals_packctl_local(tmp_path, remote):
    """The server's plan, printed by the client, is packctl's JSON for the
    same request except for the measured planTimeUs."""
    rng = np.random.default_rng(12)
    lengths = rollout_lengths(rng, 200)
    kw = dict(dp=8, max_tokens=32768, dp_balance="lpt", order="heavy_middle")
    text, _ = run_packctl_json(tmp_path, packd._request.build(lengths, None, None, **kw))
    plan = remote.plan(lengths, **kw)
    a, b = json.loads(plan.to_json()), json.loads(text)
    a["stats"].pop("planTimeUs", None)
    b["stats"].pop("planTimeUs", None)
    # The server keys its plan ids; packctl --local does not.
    for doc in (a, b):
        doc.pop("planId")
        for r in doc["ranks"]:
            r.pop("planId")
    assert a == b


def test_a_million_sequences(remote, local):
    """Large-message options: a 1M-sequence plan travels both ways."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 4096, size=1_000_000)
    plan = remote.plan(lengths, dp=64, max_tokens=65536)
    assert plan.num_sequences == 1_000_000
    order = plan.order()
    assert np.array_equal(np.bincount(order, minlength=lengths.size), np.ones(lengths.size, dtype=np.int64))
    assert same_plan(plan, local.plan(lengths, dp=64, max_tokens=65536))


def test_server_binary_lookup(monkeypatch, tmp_path):
    """PACKD_SERVER_BIN names the binary; PACKD_SERVER is packctl's fallback
    address and counts as the binary only when it names an existing file; a
    missing binary is a FileNotFoundError naming the variable to set."""
    from packd.testing import server_binary

    built = Path(os.environ["PACKD_BUILD_DIR"]) / "server" / "packd"
    fake = tmp_path / "packd-server"
    fake.write_text("")
    for var in ("PACKD_SERVER_BIN", "PACKD_SERVER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PACKD_SERVER", "127.0.0.1:7070")
    assert server_binary() == built
    monkeypatch.setenv("PACKD_SERVER", str(fake))
    assert server_binary() == fake
    monkeypatch.setenv("PACKD_SERVER_BIN", str(built))
    assert server_binary() == built
    monkeypatch.setenv("PACKD_SERVER_BIN", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="not found"):
        server_binary()
    monkeypatch.delenv("PACKD_SERVER_BIN")
    monkeypatch.delenv("PACKD_SERVER")
    monkeypatch.delenv("PACKD_BUILD_DIR")
    with pytest.raises(FileNotFoundError, match="PACKD_SERVER_BIN"):
        server_binary()
