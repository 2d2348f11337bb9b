"""Integration tests of the packd server binary on loopback: every RPC,
every error class, determinism, GetRankPlan hit/miss/expiry/eviction, the
in-flight bound, deadlines and message-size limits. Real process, real
protobuf bytes (Debian's grpcio and protobuf)."""

import random
import threading
import time

import grpc
import pytest

import server_harness as h

st = h.stubs()
pb = st.packd_pb2
health_pb = st.health_pb2


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


def planner(channel):
    return st.packd_pb2_grpc.PlannerStub(channel)


def all_seqs(resp):
    out = []
    for rk in resp.ranks:
        for mb in rk.mini_batches:
            for mi in mb.micro_batches:
                out.extend(mi.seqs)
    return out


def check_complete(resp, n, dp):
    """A complete plan: dp ranks, every sequence exactly once."""
    assert len(resp.ranks) == dp
    assert sorted(all_seqs(resp)) == list(range(n))
    assert resp.plan_id


def test_plan_rank_plan_and_health(channel):
    lengths = h.workload(n=4096)
    req = h.plan_request(lengths, dp=64, max_tokens=32768)
    resp = planner(channel).Plan(req, timeout=30)
    check_complete(resp, 4096, 64)
    assert resp.stats.sequences == 4096
    for rank in (0, 17, 63):
        rk = planner(channel).GetRankPlan(pb.GetRankPlanRequest(plan_id=resp.plan_id, dp_rank=rank))
        assert rk.dp_rank == rank
        assert rk.plan_id == resp.plan_id
        want = pb.RankPlan()
        want.CopyFrom(resp.ranks[rank])
        want.plan_id = resp.plan_id
        assert rk == want
    hs = st.health_pb2_grpc.HealthStub(channel)
    assert hs.Check(health_pb.HealthCheckRequest()).status == health_pb.HealthCheckResponse.SERVING
    got = hs.Check(health_pb.HealthCheckRequest(service="packd.v1.Planner"))
    assert got.status == health_pb.HealthCheckResponse.SERVING
    with pytest.raises(grpc.RpcError) as e:
        hs.Check(health_pb.HealthCheckRequest(service="no.such.Service"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert "no.such.Service" in e.value.details()


def test_same_request_same_plan_id_and_plan(channel):
    rnd = random.Random(5)
    for trial in range(5):
        lengths = [rnd.randint(1, 8000) for _ in range(rnd.randint(50, 3000))]
        dp = rnd.choice([1, 2, 8, 16])
        req = h.plan_request(lengths, dp=dp, max_tokens=16384, seed=trial)
        a = planner(channel).Plan(req)
        b = planner(channel).Plan(req)
        assert a.plan_id == b.plan_id
        assert list(a.ranks) == list(b.ranks)
        check_complete(a, len(lengths), dp)
        other = h.plan_request(lengths, dp=dp, max_tokens=16384, seed=trial + 1000)
        assert planner(channel).Plan(other).plan_id != a.plan_id


ERROR_CASES = [
    ("empty lengths", dict(lengths=[], dp=2), grpc.StatusCode.INVALID_ARGUMENT, "lengths"),
    ("dp 0", dict(lengths=[1, 2, 3], dp=0), grpc.StatusCode.INVALID_ARGUMENT, "parallel.dp"),
    (
        "sequence over the cap",
        dict(lengths=[100, 5000, 100], dp=1, max_tokens=4096),
        grpc.StatusCode.FAILED_PRECONDITION,
        "lengths[1]",
    ),
    (
        "n < dp with equal_count",
        dict(lengths=[100, 200], dp=4, equal_count=True),
        grpc.StatusCode.FAILED_PRECONDITION,
        "parallel.dp",
    ),
    ("bad mode", dict(lengths=[1, 2], dp=1, mode=7), grpc.StatusCode.INVALID_ARGUMENT, "batching.mode"),
    (
        "bad dp_balance",
        dict(lengths=[1, 2], dp=1, dp_balance=42),
        grpc.StatusCode.INVALID_ARGUMENT,
        "batching.dp_balance",
    ),
    (
        "bad micro_algo",
        dict(lengths=[1, 2], dp=1, micro_algo=99),
        grpc.StatusCode.INVALID_ARGUMENT,
        "batching.micro_algo",
    ),
]


@pytest.mark.parametrize("name,fields,code,names", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_error_classes(channel, name, fields, code, names):
    fields = dict(fields)
    req = h.plan_request(fields.pop("lengths"), dp=fields.pop("dp"), **fields)
    with pytest.raises(grpc.RpcError) as e:
        planner(channel).Plan(req, timeout=10)
    assert e.value.code() == code, e.value.details()
    assert names in e.value.details()


def test_bad_cp_algo_enum(channel):
    req = pb.PlanRequest(lengths=[1, 2, 3], parallel=pb.Parallel(dp=1, cp_algo=9))
    with pytest.raises(grpc.RpcError) as e:
        planner(channel).Plan(req)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "parallel.cp_algo" in e.value.details() and "9" in e.value.details()


@pytest.mark.parametrize(
    "payload",
    [b"\xff\xff\xff\xff", b"\x12\x05\x01", b"\x0a\xff\xff\xff\xff\x0f", bytes(range(256))],
    ids=["bad-tag", "truncated-lengths", "huge-string", "noise"],
)
def test_malformed_message(channel, payload):
    call = channel.unary_unary("/packd.v1.Planner/Plan")
    with pytest.raises(grpc.RpcError) as e:
        call(payload, timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    rank_call = channel.unary_unary("/packd.v1.Planner/GetRankPlan")
    with pytest.raises(grpc.RpcError) as e:
        rank_call(payload, timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_random_bytes_never_crash(server, channel):
    rnd = random.Random(11)
    call = channel.unary_unary("/packd.v1.Planner/Plan")
    good = h.plan_request([rnd.randint(1, 3000) for _ in range(200)], dp=4, max_tokens=8192)
    raw = good.SerializeToString()
    for _ in range(200):
        b = bytearray(raw)
        for _ in range(rnd.randint(1, 6)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        try:
            call(bytes(b), timeout=10)
        except grpc.RpcError as e:
            assert e.code() in (
                grpc.StatusCode.INVALID_ARGUMENT,
                grpc.StatusCode.FAILED_PRECONDITION,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
            ), (e.code(), e.details())
    assert server.proc.poll() is None


def test_unknown_methods_fail_at_once(channel):
    for path in ("/packd.v1.Planner/Nope", "/x.Y/Z", "/grpc.health.v1.Health/Watch"):
        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as e:
            channel.unary_unary(path)(b"", timeout=20)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert path in e.value.details()
        assert time.monotonic() - t0 < 5


def test_get_rank_plan_miss_and_bad_rank(channel):
    with pytest.raises(grpc.RpcError) as e:
        planner(channel).GetRankPlan(pb.GetRankPlanRequest(plan_id="feedfacefeedface", dp_rank=0))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert "feedfacefeedface" in e.value.details()
    resp = planner(channel).Plan(h.plan_request([10, 20, 30, 40], dp=2))
    with pytest.raises(grpc.RpcError) as e:
        planner(channel).GetRankPlan(pb.GetRankPlanRequest(plan_id=resp.plan_id, dp_rank=2))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "dp_rank" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        planner(channel).GetRankPlan(pb.GetRankPlanRequest(plan_id="", dp_rank=0))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_get_rank_plan_expiry_and_eviction():
    s = h.start("--drain-delay", "0", "--cache-ttl", "0.5", "--cache-bytes", "200K")
    try:
        with s.channel() as ch:
            stub = planner(ch)
            resp = stub.Plan(h.plan_request(h.workload(n=1000), dp=8, max_tokens=16384))
            assert stub.GetRankPlan(pb.GetRankPlanRequest(plan_id=resp.plan_id, dp_rank=3)).dp_rank == 3
            time.sleep(1.0)
            with pytest.raises(grpc.RpcError) as e:
                stub.GetRankPlan(pb.GetRankPlanRequest(plan_id=resp.plan_id, dp_rank=3))
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
            assert resp.plan_id in e.value.details()
            # The byte bound: a run of new plans pushes the oldest out.
            ids = [
                stub.Plan(h.plan_request(h.workload(n=3000), dp=8, max_tokens=16384, seed=i)).plan_id
                for i in range(12)
            ]
            with pytest.raises(grpc.RpcError) as e:
                stub.GetRankPlan(pb.GetRankPlanRequest(plan_id=ids[0], dp_rank=0))
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
            assert stub.GetRankPlan(pb.GetRankPlanRequest(plan_id=ids[-1], dp_rank=0)).plan_id == ids[-1]
        text = s.metrics()
        assert "packd_plan_cache_evictions_total 0" not in text
        assert "packd_plan_cache_expired_total 0" not in text
    finally:
        assert s.stop() == 0


def test_expired_deadline_does_no_work():
    # The server sleeps 2 s before each Plan; the client gives up after 1 s
    # (long enough for the call to reach the server, also under valgrind).
    s = h.start("--drain-delay", "0", "--debug-delay-ms", "2000")
    try:
        with s.channel() as ch:
            with pytest.raises(grpc.RpcError) as e:
                planner(ch).Plan(h.plan_request([100, 200, 300], dp=1), timeout=1.0)
            assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED

            def skipped():
                text = s.metrics()
                assert "packd_deadline_skipped_total 1" in text
                assert "packd_plan_sequences_count 0" in text

            h.eventually(skipped, timeout=15)
            # With time to spare the same call works.
            assert planner(ch).Plan(h.plan_request([100, 200, 300], dp=1), timeout=30).plan_id
    finally:
        assert s.stop() == 0


def test_oversized_message_is_refused():
    s = h.start("--drain-delay", "0", "--max-message-bytes", "4096")
    try:
        with s.channel() as ch:
            big = h.plan_request(list(range(1, 5001)), dp=2)
            assert big.ByteSize() > 4096
            with pytest.raises(grpc.RpcError) as e:
                planner(ch).Plan(big, timeout=10)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            # The server goes on serving small requests.
            assert planner(ch).Plan(h.plan_request([5, 6, 7], dp=1), timeout=10).plan_id
    finally:
        assert s.stop() == 0


def test_one_million_sequences_with_default_limits(channel):
    rnd = random.Random(3)
    lengths = [rnd.randint(1, 32768) for _ in range(1_000_000)]
    # Loss tokens and 64-bit GRPO group ids (8 samples a prompt) as a trainer
    # sends them: the request is far beyond gRPC's default 4 MiB.
    req = h.plan_request(
        lengths,
        dp=64,
        max_tokens=65536,
        loss_tokens=[n // 2 for n in lengths],
        groups=[(i // 8) * 0x9E3779B97F4A7C15 % (1 << 64) for i in range(len(lengths))],
    )
    assert req.ByteSize() > 4 * 1024 * 1024
    resp = planner(channel).Plan(req, timeout=300)
    assert resp.stats.sequences == 1_000_000
    assert len(resp.ranks) == 64
    assert sum(len(mi.seqs) for rk in resp.ranks for mb in rk.mini_batches for mi in mb.micro_batches) == 1_000_000


def test_inflight_bound_gives_resource_exhausted():
    s = h.start("--drain-delay", "0", "--workers", "4", "--max-inflight", "1", "--debug-delay-ms", "200")
    codes = []
    lock = threading.Lock()

    def one():
        with s.channel() as ch:
            try:
                planner(ch).Plan(h.plan_request([10, 20, 30], dp=1), timeout=20)
                code = grpc.StatusCode.OK
            except grpc.RpcError as e:
                code = e.code()
                if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    assert "--max-inflight" in e.details()
            with lock:
                codes.append(code)

    try:
        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert grpc.StatusCode.OK in codes
        assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes
        assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert "packd_rejected_inflight_total 0" not in s.metrics()
    finally:
        assert s.stop() == 0
