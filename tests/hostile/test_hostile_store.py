"""The plan store under a hostile or failing Redis: stalled, killed and
restarted, holding a planted oversized value. A real redis-server on
loopback (the helpers of tests/python/test_plan_store.py), two packd
replicas sharing it.

Each case states its pass condition in its docstring; README.md lists them."""

from __future__ import annotations

import os
import shutil
import signal
import time

import grpc
import pytest

import server_harness as h
from hostile import MiB, metric
from test_plan_store import SLOW, Redis, Replicas, expected_rank, lengths_for, rank_bytes

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")

pb = h.stubs().packd_pb2


@pytest.fixture
def redis():
    r = Redis()
    yield r
    r.close()


@pytest.fixture
def replicas():
    r = Replicas()
    yield r
    r.stop_all()


def plan_on(srv, seed):
    with srv.channel() as ch:
        stub = h.stubs().packd_pb2_grpc.PlannerStub(ch)
        return stub.Plan(h.plan_request(lengths_for(seed, n=256), dp=4), timeout=30)


def not_found_on(srv, plans):
    """How many of the plans the replica srv answers NOT_FOUND for (rank 1)."""
    missing = 0
    with srv.channel() as ch:
        for p in plans:
            try:
                assert rank_bytes(ch, p.plan_id, 1) == expected_rank(p, 1)
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.NOT_FOUND, e.details()
                missing += 1
    return missing


def replayed(srv, other, where):
    """Waits until srv has written its replay queue and both replicas see
    the store up again."""
    def done():
        assert metric(srv, "packd_plan_store_replay_queued") == 0
        for s in (srv, other):
            assert metric(s, f'packd_plan_store_up{{store="{where}"}}') == 1

    h.eventually(done, timeout=15 * SLOW)


def test_plans_made_during_a_stall_reach_the_other_replicas(redis, replicas):
    """Redis stopped (SIGSTOP) for 2 s while replica A plans; then resumed.
    Pass: every Plan is answered OK; once A's replay queue is empty, replica
    B answers GetRankPlan for every plan A made, none NOT_FOUND, and A
    counts them in packd_plan_store_replay_total{result="written"}."""
    env = {"PACKD_PLAN_STORE_COMMAND_TIMEOUT_MS": "200"}
    a = replicas.start(redis.url, env=env)
    b = replicas.start(redis.url, env=env)
    plans = [plan_on(a, i) for i in range(5)]
    os.kill(redis.proc.pid, signal.SIGSTOP)
    try:
        t_end = time.monotonic() + 2.0
        i = 100
        while time.monotonic() < t_end:
            plans.append(plan_on(a, i))
            i += 1
    finally:
        os.kill(redis.proc.pid, signal.SIGCONT)
    made_in_stall = len(plans) - 5
    assert made_in_stall >= 5
    replayed(a, b, redis.where)
    assert not_found_on(b, plans) == 0
    assert metric(a, 'packd_plan_store_replay_total{result="written"}') >= 1
    assert metric(a, 'packd_plan_store_replay_total{result="dropped"}') == 0


def test_plans_made_while_the_store_is_dead_reach_it_when_it_is_back(redis, replicas):
    """Redis killed (SIGKILL) while replica A plans, restarted empty on the
    same port. Pass: every Plan is answered OK; the plans made while it was
    dead are all served by replica B once A's replay queue is empty."""
    a = replicas.start(redis.url)
    b = replicas.start(redis.url)
    redis.kill()
    during = [plan_on(a, 200 + i) for i in range(20)]
    redis.start()
    replayed(a, b, redis.where)
    assert not_found_on(b, during) == 0


def test_replay_queue_is_bounded_oldest_dropped(redis, replicas):
    """PACKD_PLAN_STORE_REPLAY_BYTES of 64 KiB and Redis stopped while 40
    plans are made. Pass: the queue never holds more than 64 KiB; the
    oldest plans are dropped (counted as dropped) and the newest are
    written when the store is back and served by replica B."""
    env = {"PACKD_PLAN_STORE_REPLAY_BYTES": str(64 << 10), "PACKD_PLAN_STORE_COMMAND_TIMEOUT_MS": "200"}
    a = replicas.start(redis.url, env=env)
    b = replicas.start(redis.url)
    os.kill(redis.proc.pid, signal.SIGSTOP)
    try:
        during = [plan_on(a, 300 + i) for i in range(40)]
        assert metric(a, "packd_plan_store_replay_queued_bytes") <= 64 << 10
    finally:
        os.kill(redis.proc.pid, signal.SIGCONT)
    replayed(a, b, redis.where)
    dropped = metric(a, 'packd_plan_store_replay_total{result="dropped"}')
    assert dropped >= 1
    assert not_found_on(b, during[-3:]) == 0
    # The oldest were dropped (a write that timed out may still have reached
    # the stopped store's socket and run when it resumed: not all of them).
    assert not_found_on(b, during[:10]) >= 1


def test_oversized_value_is_refused_unread_and_the_store_stays_up(redis, replicas):
    """A 100 MiB value planted under a plan's key (rank 0). Pass: replica B
    answers UNAVAILABLE naming the key and saying it was not read, within
    the command timeout; the store is not marked down
    (packd_plan_store_up stays 1, no outage) and the value counts as
    corrupt."""
    a = replicas.start(redis.url)
    b = replicas.start(redis.url)
    victim = plan_on(a, 7)
    key = f"packd:{victim.plan_id}"
    redis.cmd("HSET", key, "0", b"\0" * (100 * MiB), timeout=30)
    with b.channel() as ch:
        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as e:
            rank_bytes(ch, victim.plan_id, 2)
        took = time.monotonic() - t0
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert key in e.value.details() and "not read" in e.value.details(), e.value.details()
    assert took < 0.5 * SLOW
    assert metric(b, f'packd_plan_store_up{{store="{redis.where}"}}') == 1
    assert metric(b, "packd_plan_store_outages_total") == 0
    assert metric(b, "packd_plan_store_corrupt_total") == 1
    assert "is down" not in b.log()
