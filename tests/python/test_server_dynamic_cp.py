"""Dynamic context parallelism through the real server on loopback: the
plan's rules checked from the response bytes alone (every index once, every
GPU of a slot in one group, aligned groups, the per-GPU cap, cu_seqlens and
the local shards), both algorithms, determinism, and every refused field
(INVALID_ARGUMENT naming field and value; FAILED_PRECONDITION naming the
sequence that fits no group)."""

import random

import grpc
import pytest

import server_harness as h

st = h.stubs()
pb = st.packd_pb2


@pytest.fixture(scope="module")
def server():
    s = h.start("--drain-delay", "0")
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def planner(server):
    ch = server.channel()
    yield st.packd_pb2_grpc.PlannerStub(ch)
    ch.close()


def dcp_request(lengths, dp, cp=1, tp=1, cap=8192, sizes=0, min_size=0, algo=0, cp_algo=0,
                **cost):
    req = pb.PlanRequest(lengths=list(lengths))
    req.parallel.dp = dp
    req.parallel.cp = cp
    req.parallel.tp = tp
    req.parallel.cp_algo = cp_algo
    req.parallel.dynamic_cp.SetInParent()
    req.parallel.dynamic_cp.sizes = sizes
    req.parallel.dynamic_cp.min_size = min_size
    req.parallel.dynamic_cp.algo = algo
    req.batching.max_tokens = cap
    for k, v in cost.items():
        setattr(req.cost, k, v)
    return req


def round_up(x, m):
    return (x + m - 1) // m * m


def check(resp, req):
    """Every rule of a dynamic-CP plan, from the answer and the request."""
    lengths = list(req.lengths)
    pool = req.parallel.dp * max(req.parallel.cp, 1)
    tp = max(req.parallel.tp, 1)
    cap = req.batching.max_tokens
    pow2 = req.parallel.dynamic_cp.sizes == 0
    zigzag = req.parallel.cp_algo == 0
    plan = resp.dynamic_cp
    assert not resp.ranks and resp.plan_id
    assert plan.pool == pool and plan.cap_violations == 0
    assert len(plan.slots) >= plan.slots_lower_bound >= 1
    assert plan.step_cost >= plan.step_cost_lower_bound * (1 - 1e-9)
    seen = []
    for slot in plan.slots:
        assert len(slot.gpus) == pool
        owner = [None] * pool
        for gi, g in enumerate(slot.groups):
            c = g.size
            if pow2:
                assert (c & (c - 1)) == 0 or c == pool
                assert g.first_gpu % c == 0 or c == pool
            align = (2 * c * tp if zigzag else c * tp) if c > 1 else 1
            assert g.align == align
            for x in range(g.first_gpu, g.first_gpu + c):
                assert owner[x] is None
                owner[x] = gi
                gpu = slot.gpus[x]
                assert (gpu.group, gpu.size, gpu.rank_in_group) == (gi, c, x - g.first_gpu)
                assert gpu.shard_tokens == g.padded_tokens // c
            assert g.cu_seqlens[0] == 0 and g.cu_seqlens_padded[0] == 0
            for k, i in enumerate(g.seqs):
                assert g.cu_seqlens[k + 1] - g.cu_seqlens[k] == lengths[i]
                assert g.cu_seqlens_padded[k + 1] - g.cu_seqlens_padded[k] == round_up(
                    lengths[i], align)
            assert list(g.local_cu_seqlens_padded) == [v // c for v in g.cu_seqlens_padded]
            assert g.padded_tokens == g.cu_seqlens_padded[-1] <= c * cap
            seen.extend(g.seqs)
        idle = sum(o is None for o in owner)
        assert all(slot.gpus[x].group == 2**32 - 1 for x in range(pool) if owner[x] is None)
        assert idle == 0 or plan.idle_gpu_slots > 0
    assert sorted(seen) == list(range(len(lengths)))


@pytest.mark.parametrize("algo", [0, 1])
@pytest.mark.parametrize("seed", range(4))
def test_random_batches_keep_every_rule(planner, algo, seed):
    rng = random.Random(seed)
    n = rng.choice([8, 64, 300])
    dp, cp = rng.choice([(2, 4), (4, 2), (8, 1), (16, 1)])
    lengths = [rng.choice([rng.randint(100, 4000), rng.randint(4000, 60000)]) for _ in range(n)]
    req = dcp_request(lengths, dp, cp, tp=rng.choice([1, 2]), cap=8192, algo=algo,
                      cp_algo=rng.choice([0, 1]), sizes=rng.choice([0, 1]),
                      cp_token=rng.choice([0.0, 0.25]))
    resp = planner.Plan(req, timeout=30)
    check(resp, req)
    again = planner.Plan(req, timeout=30)
    resp.dynamic_cp.plan_time_us = again.dynamic_cp.plan_time_us = 0
    assert again.SerializeToString() == resp.SerializeToString()


def test_short_sequences_stop_paying_for_cp(planner):
    """One long sequence needs a group of 8; the short ones run on one GPU
    each once CP costs something."""
    lengths = [60000] + [2000] * 63
    req = dcp_request(lengths, dp=2, cp=4, cap=8192, cp_token=0.25)
    resp = planner.Plan(req, timeout=30)
    check(resp, req)
    sizes = {}
    for slot in resp.dynamic_cp.slots:
        for g in slot.groups:
            for i in g.seqs:
                sizes[i] = g.size
    assert sizes[0] >= 8
    assert sum(1 for i in range(1, 64) if sizes[i] == 1) > 48


@pytest.mark.parametrize("field,value,fragment", [
    ("dp", 0, "parallel.dp: 0"),
    ("max_tokens", 0, "batching.max_tokens: 0"),
    ("sizes", 9, "parallel.dynamic_cp.sizes: 9"),
    ("min_size", 3, "parallel.dynamic_cp.min_size: 3"),
    ("algo", 4, "parallel.dynamic_cp.algo: 4"),
    ("cp_token", -1.0, "cost.cp_token: -1"),
    ("mode", 1, "batching.mode: 1"),
    ("pp", 2, "parallel.pp: 2"),
    ("mini_batches", 2, "batching.mini_batches: 2"),
])
def test_bad_fields_are_invalid_argument(planner, field, value, fragment):
    req = dcp_request([100, 200, 300], dp=4, cap=1024)
    target = {"dp": req.parallel, "pp": req.parallel, "max_tokens": req.batching,
              "mode": req.batching, "mini_batches": req.batching, "cp_token": req.cost,
              "sizes": req.parallel.dynamic_cp, "min_size": req.parallel.dynamic_cp,
              "algo": req.parallel.dynamic_cp}[field]
    setattr(target, field, value)
    with pytest.raises(grpc.RpcError) as e:
        planner.Plan(req, timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert fragment in e.value.details()


def test_sequence_in_no_group_is_failed_precondition(planner):
    req = dcp_request([100, 9000, 40000], dp=4, cap=8192)
    with pytest.raises(grpc.RpcError) as e:
        planner.Plan(req, timeout=10)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "lengths[2]: 40000" in e.value.details()


def test_fixed_cp_plans_unchanged(planner):
    """Without parallel.dynamic_cp the answer is the fixed-CP plan."""
    req = h.plan_request([100, 200, 3000, 50], dp=2, max_tokens=4096)
    resp = planner.Plan(req, timeout=10)
    assert len(resp.ranks) == 2 and not resp.HasField("dynamic_cp")


def test_embedded_library_plans_the_same(planner):
    """libpackd.so (Client.local, packctl --local) routes dynamic CP to the
    same planner and encoder as the server: byte-identical answers but for
    the plan time."""
    import sys
    sys.path.insert(0, str(h.REPO / "client" / "python"))
    from packd import _embedded

    lib = _embedded.Library(_embedded.find_library(h.BUILD / "server" / "libpackd.so"))
    rng = random.Random(3)
    lengths = [rng.randint(100, 30000) for _ in range(200)]
    req = dcp_request(lengths, dp=4, cp=4, cap=8192, cp_token=0.25)
    local = pb.PlanResponse.FromString(lib.plan_bytes(req.SerializeToString()))
    remote = planner.Plan(req, timeout=30)
    check(local, req)
    local.dynamic_cp.plan_time_us = remote.dynamic_cp.plan_time_us = 0
    assert local.dynamic_cp == remote.dynamic_cp


def test_plan_bytes_limit_refuses_before_planning():
    """--max-plan-bytes: a dynamic-CP answer of at least 4 bytes per GPU and
    slot over the limit is RESOURCE_EXHAUSTED naming the figures."""
    s = h.start("--drain-delay", "0", "--max-plan-bytes", "4000")
    try:
        ch = s.channel()
        stub = st.packd_pb2_grpc.PlannerStub(ch)
        req = dcp_request([60000] * 64, dp=1024, cap=8192)
        with pytest.raises(grpc.RpcError) as e:
            stub.Plan(req, timeout=30)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "1024 GPUs x at least 1 slots need at least 4096 bytes" in e.value.details()
        ok = stub.Plan(dcp_request([60000] * 4, dp=8, cap=8192), timeout=30)
        check(ok, dcp_request([60000] * 4, dp=8, cap=8192))
        ch.close()
    finally:
        assert s.stop() == 0, s.log()
