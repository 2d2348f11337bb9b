"""Hostile request bodies, on a real packd on loopback.

Each case states its pass condition in its docstring; README.md lists them."""

from __future__ import annotations

import time

import grpc

import server_harness as h
from hostile import MiB, at_once, call, health_ok, metric, rss, token_file

PLAN = "/packd.v1.Planner/Plan"
# 60 MiB of zeros: about 61 KB once gzip-compressed, a thousandfold.
BOMB = bytes(60 * MiB)


def settle(pid: int, seconds: float = 0.5) -> int:
    time.sleep(seconds)
    return rss(pid)


def test_gzip_bombs_without_token_are_never_inflated(tmp_path):
    """Six clients without a token each send a 60 MiB gzip bomb at once,
    then six send 60 MiB uncompressed. Pass: every call is UNAUTHENTICATED
    and the server's peak resident size stays within 32 MiB of its idle
    size (the bodies are never received, let alone inflated)."""
    srv = h.start("--auth-token-file", token_file(tmp_path), "--workers", "6")
    try:
        idle = settle(srv.proc.pid)
        got = at_once(6, lambda i: call(srv, PLAN, BOMB, token=False, compress=True))
        got += at_once(6, lambda i: call(srv, PLAN, BOMB, token=False, compress=False))
        assert all(code == grpc.StatusCode.UNAUTHENTICATED for code, _ in got), got
        peak = rss(srv.proc.pid, "VmHWM")
        assert peak - idle < 32 * MiB, (idle / MiB, peak / MiB)
        assert metric(srv, "packd_decoded_bytes_peak") == 0
    finally:
        assert srv.stop() == 0


def test_gzip_bombs_with_token_stay_within_the_budget(tmp_path):
    """Six authenticated clients each send a 60 MiB gzip bomb at once to a
    server with --max-decoded-bytes 128M. Pass: the peak resident size stays
    under the budget plus 64 MiB; at least one call is refused
    RESOURCE_EXHAUSTED naming --max-decoded-bytes (the others are
    INVALID_ARGUMENT: zeros are not a PlanRequest); the resident size is
    back within 10 % of its level before the burst within 10 s; a real Plan
    is answered after."""
    budget = 128 * MiB
    srv = h.start("--auth-token-file", token_file(tmp_path), "--workers", "6",
                  "--max-decoded-bytes", "128M")
    try:
        assert call(srv, PLAN, h.plan_request([100, 200, 300], dp=1).SerializeToString(),
                    token=True)[0] == grpc.StatusCode.OK
        before = settle(srv.proc.pid)
        got = at_once(6, lambda i: call(srv, PLAN, BOMB, token=True, compress=True))
        codes = [c for c, _ in got]
        assert set(codes) <= {grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT}, got
        refused = [d for c, d in got if c == grpc.StatusCode.RESOURCE_EXHAUSTED]
        assert refused and all("--max-decoded-bytes 134217728" in d for d in refused), got
        peak = rss(srv.proc.pid, "VmHWM")
        assert peak < budget + 64 * MiB, peak / MiB
        assert metric(srv, "packd_decoded_bytes_peak") <= budget
        assert metric(srv, "packd_decode_budget_refused_total") >= 1
        deadline = time.monotonic() + 10
        while rss(srv.proc.pid) > before * 1.10 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert rss(srv.proc.pid) <= before * 1.10, (before / MiB, rss(srv.proc.pid) / MiB)
        assert metric(srv, "packd_decoded_bytes") == 0
        assert call(srv, PLAN, h.plan_request([5, 6, 7], dp=1).SerializeToString(),
                    token=True)[0] == grpc.StatusCode.OK
    finally:
        assert srv.stop() == 0


def test_compressed_plan_request_is_planned(tmp_path):
    """A real PlanRequest sent gzip-compressed. Pass: OK, the same plan as
    sent uncompressed; a compressed body that inflates past
    --max-message-bytes is RESOURCE_EXHAUSTED naming the limit."""
    srv = h.start("--max-message-bytes", "1M")
    try:
        req = h.plan_request(list(range(1, 2001)), dp=4).SerializeToString()
        pb = h.stubs().packd_pb2
        with srv.channel() as ch:
            fn = ch.unary_unary(PLAN, response_deserializer=pb.PlanResponse.FromString)
            plain = fn(req, timeout=30)
            packed = fn(req, timeout=30, compression=grpc.Compression.Gzip)
        # The same plan (timings in its stats aside).
        assert plain.plan_id == packed.plan_id and list(plain.ranks) == list(packed.ranks)
        code, details = call(srv, PLAN, bytes(2 * MiB), token=False, compress=True)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "1048576" in details, details
    finally:
        assert srv.stop() == 0


def test_unknown_methods_need_a_token(tmp_path):
    """Pass: an unknown method without a token is UNAUTHENTICATED (a
    client without credentials learns nothing about the service); with the
    token it is UNIMPLEMENTED; Health/Check needs none."""
    srv = h.start("--auth-token-file", token_file(tmp_path))
    try:
        assert call(srv, "/packd.v1.Planner/Nope", b"", token=False)[0] == grpc.StatusCode.UNAUTHENTICATED
        assert call(srv, "/x.Y/Z", b"", token=False)[0] == grpc.StatusCode.UNAUTHENTICATED
        code, details = call(srv, "/packd.v1.Planner/Nope", b"", token=True)
        assert code == grpc.StatusCode.UNIMPLEMENTED and "Nope" in details
        assert health_ok(srv)
    finally:
        assert srv.stop() == 0


def test_refused_calls_are_logged_at_a_bounded_rate(tmp_path):
    """2,000 calls without a token in a row. Pass: every one is
    UNAUTHENTICATED and counted in /metrics, and the log holds at most one
    UNAUTHENTICATED line per --log-refused-interval (2 s here) plus one,
    the next line carrying the count of those left out."""
    srv = h.start("--auth-token-file", token_file(tmp_path), "--log-refused-interval", "2")
    try:
        t0 = time.monotonic()
        with srv.channel() as ch:
            fn = ch.unary_unary("/packd.v1.Planner/GetRankPlan")
            for _ in range(2000):
                try:
                    fn(b"", timeout=10)
                except grpc.RpcError as e:
                    assert e.code() == grpc.StatusCode.UNAUTHENTICATED
        time.sleep(2.1)
        call(srv, "/packd.v1.Planner/GetRankPlan", b"", token=False)
        # The server writes a call's log line once the call has completed,
        # which may be after the client has its answer: wait for it.
        deadline = time.monotonic() + 5
        while True:
            lines = [l for l in srv.log().splitlines() if "code=UNAUTHENTICATED" in l]
            if len(lines) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        elapsed = time.monotonic() - t0
        assert 2 <= len(lines) <= elapsed / 2 + 1, (len(lines), elapsed)
        assert "more UNAUTHENTICATED calls since the last such line" in lines[-1], lines[-1]
        total = metric(srv, 'packd_requests_total{method="GetRankPlan",code="UNAUTHENTICATED"}')
        assert total == 2001
    finally:
        assert srv.stop() == 0
