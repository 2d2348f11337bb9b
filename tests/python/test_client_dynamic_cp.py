"""packd.Client.plan(..., dynamic_cp=...) in both modes: the request the
keywords build, the DynamicCpPlan views (per slot and per GPU) against the
rules of a dynamic-CP plan, the same plan from the server and the embedded
library, and bad values refused by name."""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

import packd  # noqa: E402
from packd import _request  # noqa: E402
from packd.testing import ServerProcess  # noqa: E402


@pytest.fixture(scope="module")
def local():
    return packd.Client.local()


@pytest.fixture(scope="module")
def remote():
    with ServerProcess() as srv:
        with packd.Client(srv.target) as client:
            yield client


def lengths(n=300, seed=0):
    rng = np.random.default_rng(seed)
    short = rng.integers(200, 6000, size=n)
    long = rng.integers(8000, 60000, size=n)
    return np.where(rng.random(n) < 0.15, long, short)


def test_keywords_build_the_request():
    req = _request.build([5, 6], dp=2, cp=4, dynamic_cp=True, cp_token=0.25)
    assert req.parallel.HasField("dynamic_cp") and req.cost.cp_token == 0.25
    req = _request.build([5, 6], dp=2, dynamic_cp=dict(sizes="any", min_size=2, algo="megatron"))
    d = req.parallel.dynamic_cp
    assert (d.sizes, d.min_size, d.algo) == (1, 2, 1)
    assert not _request.build([5, 6], dp=2, dynamic_cp=False).parallel.HasField("dynamic_cp")
    with pytest.raises(packd.InvalidArgument, match="parallel.dynamic_cp: unknown field 'size'"):
        _request.build([5], dp=1, dynamic_cp=dict(size=2))
    with pytest.raises(packd.InvalidArgument, match="parallel.dynamic_cp.sizes: unknown value"):
        _request.build([5], dp=1, dynamic_cp=dict(sizes="odd"))


def check_views(plan, lens, cap):
    assert isinstance(plan, packd.DynamicCpPlan)
    assert plan.cap_violations == 0 and plan.idle_gpu_slots == 0
    assert plan.step_cost >= plan.step_cost_lower_bound
    seen = []
    for slot in plan.slots:
        for grp in slot.groups:
            seen.extend(grp.seqs)
    assert sorted(seen) == list(range(len(lens)))
    for g in range(plan.pool):
        steps = plan.gpu(g)
        assert len(steps) == len(plan)
        for st in steps:
            assert st.first_gpu <= g < st.first_gpu + st.size
            assert st.rank_in_group == g - st.first_gpu
            assert np.all(np.diff(st.cu_seqlens) == lens[st.seqs])
            assert st.cu_seqlens_padded[-1] <= st.size * cap
            assert np.array_equal(st.local_cu_seqlens_padded, st.cu_seqlens_padded // st.size)
            assert st.shard_tokens == st.cu_seqlens_padded[-1] // st.size
            assert not st.seqs.flags.writeable


@pytest.mark.parametrize("mode", ["local", "remote"])
def test_plan_and_views(mode, local, remote):
    client = local if mode == "local" else remote
    lens = lengths()
    plan = client.plan(lens, dp=4, cp=2, max_tokens=8192, dynamic_cp=True, cp_token=0.25,
                       cp_group=100)
    check_views(plan, lens, 8192)
    assert max(max(s) for s in plan.group_sizes()) >= 8  # the longest need the pool
    assert min(min(s) for s in plan.group_sizes()) == 1  # the short ones run without CP


@pytest.mark.parametrize("algo", ["megatron", "megatron_packing"])
def test_both_modes_plan_the_same(local, remote, algo):
    lens = lengths(seed=1)
    kw = dict(dp=8, cp=2, max_tokens=8192, dynamic_cp=dict(algo=algo))
    a, b = local.plan(lens, **kw), remote.plan(lens, **kw)
    assert a.group_sizes() == b.group_sizes()
    assert [list(g.seqs) for s in a.slots for g in s.groups] == \
        [list(g.seqs) for s in b.slots for g in s.groups]


def test_errors_name_the_field(local):
    with pytest.raises(packd.FailedPrecondition, match=r"lengths\[1\]: 70000"):
        local.plan([10, 70000], dp=2, cp=2, max_tokens=8192, dynamic_cp=True)
    with pytest.raises(packd.InvalidArgument, match="batching.mode"):
        local.plan([10, 20], dp=2, max_tokens=8192, dynamic_cp=True, mode="padded")
    with pytest.raises(packd.InvalidArgument, match="cost.cp_group: -1"):
        local.plan([10, 20], dp=2, max_tokens=8192, dynamic_cp=True, cp_group=-1)
