"""The metrics port under stalled connections, on the real server with real
sockets: /metrics keeps answering fresh requests while hundreds of
connections sit open without a complete request (the oldest unanswered one
is closed to make room), connections that send no complete header are
closed by the header and idle timeouts, and one peer cannot hold more than
its share."""

from __future__ import annotations

import re
import socket
import time

import server_harness as h


def _metric(text: str, name: str) -> float:
    m = re.search(re.escape(name) + r" ([0-9.e+-]+)", text)
    return float(m.group(1)) if m else 0.0


def _get(port: int, path: str = "/metrics", timeout: float = 2.0) -> int:
    """Status of one fresh GET on its own connection; 0 when it failed."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        m = re.match(rb"HTTP/1.1 (\d+)", data)
        return int(m.group(1)) if m else 0
    except OSError:
        return 0


def _stall(port: int, n: int):
    """n connections: half send nothing, half send half a header."""
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if i % 2:
            s.sendall(b"GET /metr")
        socks.append(s)
    return socks


def _closed_by_server(s: socket.socket, within: float) -> bool:
    s.settimeout(within)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def test_metrics_answers_fresh_requests_beside_300_stalled_connections():
    srv = h.start()
    socks = []
    try:
        socks = _stall(srv.metrics_port, 300)
        ok = sum(_get(srv.metrics_port) == 200 for _ in range(30))
        assert ok >= 28, f"{ok} of 30 fresh /metrics requests answered"
        assert _get(srv.metrics_port, "/readyz") == 200
        assert _get(srv.metrics_port, "/healthz") == 200
        m = srv.metrics()
        # 300 stalled on a 256 (and 64 per peer) limit: the oldest went.
        assert _metric(m, "packd_http_evicted_total") >= 300 - 64
        assert _metric(m, "packd_http_connections") <= 64 + 1
    finally:
        for s in socks:
            s.close()
        assert srv.stop() == 0


def test_header_and_idle_timeouts_close_stalled_connections():
    srv = h.start("--http-header-timeout", "1.5", "--http-idle-timeout", "500ms")
    try:
        silent, half = _stall(srv.metrics_port, 2)
        t0 = time.monotonic()
        # Sends nothing: closed by the idle timeout.
        assert _closed_by_server(silent, 3.0)
        assert time.monotonic() - t0 < 1.5
        # Trickles a byte every 300 ms (never idle for 500 ms): closed by
        # the header timeout.
        slow = socket.create_connection(("127.0.0.1", srv.metrics_port), timeout=5)
        t1 = time.monotonic()
        closed = False
        for ch in b"GET /metrics HTTP/1.1\r\nHost: x\r\n":
            try:
                slow.sendall(bytes([ch]))
            except OSError:
                closed = True
                break
            if _closed_by_server(slow, 0.3):
                closed = True
                break
        assert closed
        assert 1.2 <= time.monotonic() - t1 < 3.0
        assert _metric(srv.metrics(), "packd_http_timed_out_total") >= 2
        for s in (silent, half, slow):
            s.close()
        # A normal request is unaffected.
        assert _get(srv.metrics_port) == 200
    finally:
        assert srv.stop() == 0


def test_per_peer_limit_evicts_the_peers_oldest_stalled_connection():
    srv = h.start(
        "--http-max-conns-per-peer", "4", "--http-idle-timeout", "30", "--http-header-timeout", "30"
    )
    socks = []
    try:
        socks = _stall(srv.metrics_port, 10)
        # The six oldest were closed to keep the peer at 4.
        closed = [i for i, s in enumerate(socks) if _closed_by_server(s, 0.5)]
        assert closed == list(range(6)), closed
        assert _get(srv.metrics_port) == 200
        m = srv.metrics()
        assert _metric(m, "packd_http_evicted_total") >= 7
    finally:
        for s in socks:
            s.close()
        assert srv.stop() == 0


def test_bad_http_limits_are_refused_naming_the_flag():
    for args, needle in (
        (("--http-max-conns", "1"), "--http-max-conns"),
        (("--http-max-conns-per-peer", "0"), "--http-max-conns-per-peer"),
        (("--http-header-timeout", "0"), "--http-header-timeout"),
        (("--http-idle-timeout", "-1"), "--http-idle-timeout"),
        (("--large-workers", "x"), "--large-workers"),
        (("--large-request-bytes", "0"), "--large-request-bytes"),
    ):
        proc, log_path = h.launch(*args)
        assert proc.wait(timeout=10) == 2
        text = open(log_path).read()
        assert needle in text, text
