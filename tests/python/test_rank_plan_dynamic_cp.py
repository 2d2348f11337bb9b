"""GetRankPlan of dynamic-CP plans through the real server on loopback, on
raw protobuf bytes: for random dynamic-CP requests every GPU's RankPlan is
exactly its slice of the whole plan (per slot, the plan's DcpGpu of that GPU
and the DcpGroup it is in), the GPUs' parts together hold every group once
per GPU of the group and every sequence once; a rank outside the pool is
INVALID_ARGUMENT naming dp_rank and the value; an unknown plan id NOT_FOUND;
parts that together pass --max-message-bytes refuse the Plan by name; the
Python client's rank_plan equals plan.gpu(g) in both modes; packctl
rank-plan prints a GPU's part. The plan store's copy of these parts is
tested in test_plan_store.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import server_harness as h

sys.path.insert(0, str(h.REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(h.BUILD))

import packd  # noqa: E402
from packd import dcp  # noqa: E402

st = h.stubs()
pb = st.packd_pb2
IDLE = (1 << 32) - 1
VALGRIND = os.environ.get("PACKD_VALGRIND") == "1"
EXAMPLE = [30000, 12000, 9000, 7000, 5000, 4000, 3000, 2500, 2000, 1500, 1200, 800]


@pytest.fixture(scope="module")
def server():
    s = h.start("--drain-delay", "0")
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def channel(server):
    ch = server.channel()
    yield ch
    ch.close()


def dcp_request(lengths, dp, cp=1, tp=1, cap=8192, sizes=0, min_size=0, algo=0, cp_algo=0,
                max_seqs=0, **cost):
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
    req.batching.max_seqs = max_seqs
    for k, v in cost.items():
        setattr(req.cost, k, v)
    return req


def plan(channel, req):
    return st.packd_pb2_grpc.PlannerStub(channel).Plan(req, timeout=60)


def rank_bytes(channel, plan_id, rank):
    """GetRankPlan's answer as the server's bytes (nothing parsed between)."""
    call = channel.unary_unary("/packd.v1.Planner/GetRankPlan",
                               request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=None)
    return call(pb.GetRankPlanRequest(plan_id=plan_id, dp_rank=rank), timeout=30)


def slice_of(resp, g) -> bytes:
    """GPU g's slice of a whole dynamic-CP answer, built here from the
    documented rule (not from the client's code): per slot the plan's
    DcpGpu of g and, unless g is idle, the DcpGroup it names."""
    want = pb.RankPlan(dp_rank=g, plan_id=resp.plan_id)
    want.dynamic_cp.pool = resp.dynamic_cp.pool
    for slot in resp.dynamic_cp.slots:
        s = want.dynamic_cp.slots.add()
        s.gpu.CopyFrom(slot.gpus[g])
        if slot.gpus[g].group != IDLE:
            s.group.CopyFrom(slot.groups[slot.gpus[g].group])
    return want.SerializeToString()


def check_parts(parts, lengths, pool, nslots):
    """The GPUs' parts alone (no whole plan): every group of a slot is in
    the part of each of its GPUs, the same bytes, with the right CP rank;
    the distinct groups hold every sequence exactly once."""
    seen = []
    for j in range(nslots):
        groups = {}  # first_gpu -> the group's bytes
        covered = 0
        for g, rk in enumerate(parts):
            assert rk.dp_rank == g and rk.dynamic_cp.pool == pool
            assert len(rk.dynamic_cp.slots) == nslots and not rk.mini_batches
            s = rk.dynamic_cp.slots[j]
            if s.gpu.group == IDLE:
                assert not s.HasField("group")
                continue
            grp = s.group
            assert grp.first_gpu <= g < grp.first_gpu + grp.size
            assert (s.gpu.size, s.gpu.rank_in_group) == (grp.size, g - grp.first_gpu)
            assert s.gpu.shard_tokens == grp.padded_tokens // grp.size
            blob = grp.SerializeToString()
            assert groups.setdefault(grp.first_gpu, blob) == blob
            covered += 1
        sizes = {}
        for first, blob in groups.items():
            grp = pb.DcpGroup.FromString(blob)
            sizes[first] = grp.size
            seen.extend(grp.seqs)
            for k, i in enumerate(grp.seqs):
                assert grp.cu_seqlens[k + 1] - grp.cu_seqlens[k] == lengths[i]
        assert covered == sum(sizes.values())
    assert sorted(seen) == list(range(len(lengths)))


@hs.composite
def dcp_requests(draw):
    dp, cp = draw(hs.sampled_from([(1, 1), (1, 4), (2, 2), (3, 1), (4, 2), (6, 1), (8, 1),
                                   (2, 8)]))
    pool = dp * cp
    sizes = draw(hs.sampled_from([0, 1]))
    pow2 = [c for c in (1, 2, 4, 8, 16) if c <= pool]
    min_size = draw(hs.sampled_from([0] + pow2))
    tp = draw(hs.sampled_from([1, 2]))
    cap = draw(hs.sampled_from([4096, 8192]))
    # Every sequence fits in the whole pool with its alignment.
    longest = min(60000, pool * cap - 2 * pool * tp)
    n = draw(hs.integers(1, 120))
    short = hs.integers(1, min(4000, longest))
    lengths = draw(hs.lists(hs.one_of(short, hs.integers(1, longest)), min_size=n, max_size=n))
    return dcp_request(lengths, dp, cp, tp=tp, cap=cap, sizes=sizes, min_size=min_size,
                       algo=draw(hs.sampled_from([0, 1])), cp_algo=draw(hs.sampled_from([0, 1])),
                       max_seqs=draw(hs.sampled_from([0, 0, 3])),
                       cp_token=draw(hs.sampled_from([0.0, 0.25])),
                       cp_group=draw(hs.sampled_from([0.0, 100.0])))


@settings(max_examples=6 if VALGRIND else 40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(req=dcp_requests())
def test_every_gpu_gets_its_slice_of_the_plan(channel, req):
    resp = plan(channel, req)
    pool = resp.dynamic_cp.pool
    assert pool == req.parallel.dp * max(req.parallel.cp, 1)
    got = [rank_bytes(channel, resp.plan_id, g) for g in range(pool)]
    for g in range(pool):
        assert got[g] == slice_of(resp, g), f"GPU {g}"
        # The client's own slice (the embedded mode's answer) is the same.
        assert dcp.rank_plan_message(resp, g).SerializeToString() == got[g]
    check_parts([pb.RankPlan.FromString(b) for b in got], list(req.lengths), pool,
                len(resp.dynamic_cp.slots))


def test_idle_gpus_have_no_group(channel):
    """Megatron-Core's scheduler (reproduced) on pools that are not a power
    of two can leave a GPU in no group; that GPU's part says so slot by
    slot (no group, DcpGpu.group the idle mark)."""
    tried = []
    for dp, n, length in [(7, 3, 5000), (5, 2, 5000), (7, 2, 100)]:
        req = dcp_request([length] * n, dp=dp, cap=8192, algo=1)
        resp = plan(channel, req)
        tried.append((dp, n, length, resp.dynamic_cp.idle_gpu_slots))
        if resp.dynamic_cp.idle_gpu_slots == 0:
            continue
        parts = [pb.RankPlan.FromString(rank_bytes(channel, resp.plan_id, g)) for g in range(dp)]
        idle = [(j, g) for g, rk in enumerate(parts) for j, s in enumerate(rk.dynamic_cp.slots)
                if s.gpu.group == IDLE]
        assert len(idle) == resp.dynamic_cp.idle_gpu_slots
        assert all(not parts[g].dynamic_cp.slots[j].HasField("group") for j, g in idle)
        check_parts(parts, list(req.lengths), dp, len(resp.dynamic_cp.slots))
        assert packd.dcp.GpuPlan.from_message(parts[idle[0][1]])[idle[0][0]].group is None
        return
    pytest.fail(f"no request left a GPU idle: {tried}")


@pytest.mark.parametrize("rank", [8, 9, 4294967295])
def test_rank_outside_the_pool_is_invalid_argument(channel, rank):
    resp = plan(channel, dcp_request(EXAMPLE, dp=4, cp=2, cp_token=0.25, cp_group=100))
    with pytest.raises(grpc.RpcError) as e:
        rank_bytes(channel, resp.plan_id, rank)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"dp_rank: {rank} is out of range" in e.value.details()
    assert "has 8 ranks" in e.value.details()


def test_unknown_plan_id_is_not_found(channel):
    resp = plan(channel, dcp_request(EXAMPLE, dp=4, cp=2))
    other = ("0" if resp.plan_id[0] != "0" else "1") + resp.plan_id[1:]
    with pytest.raises(grpc.RpcError) as e:
        rank_bytes(channel, other, 0)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert other in e.value.details() and "plan again" in e.value.details()


def test_fixed_cp_rank_plans_have_no_dynamic_cp(channel):
    resp = plan(channel, h.plan_request([100, 200, 3000, 50], dp=2, max_tokens=4096))
    rk = pb.RankPlan.FromString(rank_bytes(channel, resp.plan_id, 1))
    assert not rk.HasField("dynamic_cp") and rk.dp_rank == 1 and rk.mini_batches


def test_parts_over_the_message_limit_refuse_the_plan():
    """Groups of the whole pool put the whole plan into every GPU's part:
    16 parts of a plan that alone fits pass --max-message-bytes together,
    and the Plan is RESOURCE_EXHAUSTED naming the limit and the figure (a
    plan store would refuse to read them back)."""
    s = h.start("--drain-delay", "0", "--max-message-bytes", "4096")
    try:
        with s.channel() as ch:
            lengths = [1000 + 37 * i for i in range(60)]
            req = dcp_request(lengths, dp=16, cap=8192, min_size=16)
            assert len(req.SerializeToString()) < 4096
            with pytest.raises(grpc.RpcError) as e:
                plan(ch, req)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            msg = e.value.details()
            assert "the 16 GPUs' rank plans for 60 sequences are" in msg
            assert "over the limit max_message_bytes = 4096" in msg
            # The same sequences in groups of one GPU fit, parts and all.
            ok = plan(ch, dcp_request(lengths, dp=16, cap=8192))
            assert pb.RankPlan.FromString(rank_bytes(ch, ok.plan_id, 15)).dp_rank == 15
    finally:
        assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def clients(server):
    remote = packd.Client(server.addr, timeout=60)
    yield {"remote": remote, "local": packd.Client.local()}
    remote.close()


@pytest.mark.parametrize("mode", ["remote", "local"])
def test_client_rank_plan_equals_plan_gpu(clients, mode):
    client = clients[mode]
    dplan = client.plan(EXAMPLE * 5, dp=4, cp=2, max_tokens=8192, dynamic_cp=True, cp_token=0.25,
                        cp_group=100)
    views = [client.rank_plan(dplan.plan_id, g) for g in range(dplan.pool)]
    for g, view in enumerate(views):
        assert isinstance(view, packd.GpuPlan) and isinstance(dplan.gpu(g), packd.GpuPlan)
        assert view == dplan.gpu(g)
        assert (view.gpu, view.pool, view.plan_id) == (g, 8, dplan.plan_id)
        assert view.message.dp_rank == g
        assert not view[0].seqs.flags.writeable
    # Equality looks at the steps: two GPUs in different groups differ.
    assert any(views[0] != dplan.gpu(g) for g in range(1, 8))
    with pytest.raises(packd.InvalidArgument, match="dp_rank: 8"):
        client.rank_plan(dplan.plan_id, 8)
    with pytest.raises(packd.NotFound):
        client.rank_plan("0" * 32, 0)


def test_embedded_and_server_parts_are_the_same_bytes(clients):
    """The embedded mode cuts a GPU's part from the whole answer; the
    server packs it with the codec: the same bytes, but for the plan id
    (the server keys its ids)."""
    kw = dict(dp=2, cp=4, max_tokens=8192, dynamic_cp=True, cp_token=0.25)
    a = clients["local"].plan(EXAMPLE * 3, **kw)
    b = clients["remote"].plan(EXAMPLE * 3, **kw)
    for g in range(8):
        ma = clients["local"].rank_plan(a.plan_id, g).message
        mb = clients["remote"].rank_plan(b.plan_id, g).message
        assert ma.plan_id == a.plan_id and mb.plan_id == b.plan_id
        ma.plan_id = mb.plan_id = ""
        assert ma.SerializeToString() == mb.SerializeToString()


def packctl(*args):
    return subprocess.run([str(h.PACKCTL), *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def test_packctl_rank_plan(server, tmp_path):
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("".join(f"{n}\n" for n in EXAMPLE))
    out = packctl("plan", "--server", server.addr, "--dp", "4", "--cp", "2", "--max-tokens",
                  "8192", "--dynamic-cp", "--cp-token", "0.25", "--cp-group", "100", "--format",
                  "json", lengths)
    assert out.returncode == 0, out.stderr
    whole = json.loads(out.stdout)
    pid = whole["planId"]
    got = packctl("rank-plan", "--server", server.addr, "--plan-id", pid, "--rank", 5)
    assert got.returncode == 0, got.stderr
    resp = pb.PlanResponse(plan_id=pid)
    from google.protobuf import json_format

    json_format.ParseDict(whole, resp)
    want = json_format.MessageToDict(pb.RankPlan.FromString(slice_of(resp, 5)))
    assert json.loads(got.stdout) == want
    summary = packctl("rank-plan", "--server", server.addr, "--plan-id", pid, "--rank", 5,
                      "--format", "summary")
    assert summary.returncode == 0, summary.stderr
    lines = summary.stdout.splitlines()
    assert lines[0] == f"plan_id {pid}  GPU 5 of a pool of 8  slots 2 (dynamic CP)"
    rows = [line.split() for line in lines[2:]]
    # Slot 0: sequences 1 and 5 on GPUs 4-5, GPU 5 their CP rank 1 (16000
    # tokens, a shard of 8000); slot 1: GPU 5 alone with sequence 8.
    assert rows[0][:7] == ["0", "1", "2", "1", "4-5", "16000", "8000"] and rows[0][8:] == ["1", "5"]
    assert rows[1][2:5] == ["1", "0", "5-5"] and rows[1][8:] == ["8"]
    bad = packctl("rank-plan", "--server", server.addr, "--plan-id", pid, "--rank", 8)
    assert bad.returncode == 1 and "INVALID_ARGUMENT" in bad.stderr and "dp_rank: 8" in bad.stderr
