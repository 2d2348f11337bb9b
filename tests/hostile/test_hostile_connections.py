"""Hostile connections and call metadata, on a real packd on loopback.

Each case states its pass condition in its docstring; README.md lists them."""

from __future__ import annotations

import socket
import threading
import time

import grpc

import server_harness as h
from hostile import MiB, call, health_ok, metric, rss, token_file

PLAN = "/packd.v1.Planner/Plan"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def real_plan(srv, token=False):
    body = h.plan_request(h.workload(n=256), dp=2, max_tokens=16384).SerializeToString()
    return call(srv, PLAN, body, token=token, timeout=10)[0]


def test_idle_and_slow_connections_do_not_starve_calls(tmp_path):
    """300 connections that send nothing and 20 that send the HTTP/2
    preface one byte every 50 ms. Pass: meanwhile 20 Health/Check calls and
    5 Plans each answer within a 2 s deadline (Plans with the token), and
    the server's resident size grows by less than 64 MiB."""
    srv = h.start("--auth-token-file", token_file(tmp_path))
    socks = []
    stop = threading.Event()
    try:
        before = rss(srv.proc.pid)
        for _ in range(300):
            socks.append(socket.create_connection(("127.0.0.1", srv.grpc_port)))
        slow = [socket.create_connection(("127.0.0.1", srv.grpc_port)) for _ in range(20)]
        socks += slow

        def drip():
            for i in range(len(PREFACE)):
                if stop.is_set():
                    return
                for s in slow:
                    try:
                        s.send(PREFACE[i:i + 1])
                    except OSError:
                        pass
                time.sleep(0.05)

        t = threading.Thread(target=drip)
        t.start()
        for _ in range(20):
            assert health_ok(srv, timeout=2.0)
        for _ in range(5):
            assert real_plan(srv, token=True) == grpc.StatusCode.OK
        assert rss(srv.proc.pid) - before < 64 * MiB
        stop.set()
        t.join()
    finally:
        stop.set()
        for s in socks:
            s.close()
        assert srv.stop() == 0


def test_huge_metadata_is_refused_and_the_server_serves_on(tmp_path):
    """Calls whose metadata holds 1 MiB (one value) or 2,000 entries.
    Pass: no such call is answered OK, and right after them a Plan with the
    token and a Health/Check are answered; the resident size grows by less
    than 64 MiB."""
    srv = h.start("--auth-token-file", token_file(tmp_path))
    try:
        before = rss(srv.proc.pid)
        body = h.plan_request([1, 2, 3], dp=1).SerializeToString()
        for md in ([("x-big", "a" * MiB)], [(f"x-k{i}", "v" * 64) for i in range(2000)]):
            for token in (False, True):
                code, _ = call(srv, PLAN, body, token=token, timeout=10, metadata=md)
                assert code != grpc.StatusCode.OK
        assert real_plan(srv, token=True) == grpc.StatusCode.OK
        assert health_ok(srv)
        assert rss(srv.proc.pid) - before < 64 * MiB
    finally:
        assert srv.stop() == 0


def test_one_millisecond_deadlines(tmp_path):
    """500 Plans of 256 sequences with a 1 ms deadline, from 4 threads.
    Pass: none is answered OK late (each is OK in time or
    DEADLINE_EXCEEDED); afterwards no call is left in flight, a normal Plan
    is answered OK, and the log holds at most a few DEADLINE_EXCEEDED lines
    (one per --log-refused-interval)."""
    srv = h.start("--workers", "2")
    try:
        body = h.plan_request(h.workload(n=256), dp=2, max_tokens=16384).SerializeToString()
        codes = []

        def run():
            with srv.channel() as ch:
                fn = ch.unary_unary(PLAN)
                for _ in range(125):
                    try:
                        fn(body, timeout=0.001)
                        codes.append(grpc.StatusCode.OK)
                    except grpc.RpcError as e:
                        codes.append(e.code())

        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.DEADLINE_EXCEEDED}, set(codes)

        def drained():
            assert metric(srv, "packd_inflight_calls") == 0

        h.eventually(drained, timeout=10)
        assert real_plan(srv) == grpc.StatusCode.OK
        lines = [l for l in srv.log().splitlines() if "code=DEADLINE_EXCEEDED" in l]
        assert len(lines) <= 3, lines
    finally:
        assert srv.stop() == 0
