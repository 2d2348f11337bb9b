"""Helpers of the hostile-client suite: a server's memory from /proc, raw
calls (bytes in, status out) with or without a token, and the counters of
/metrics."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import grpc

import server_harness as h

MiB = 1 << 20
TOKEN = "hostile-suite-token-0123456789"


def token_file(tmp_path: Path) -> str:
    p = tmp_path / "tokens"
    p.write_text(TOKEN + "\n")
    return str(p)


def rss(pid: int, key: str = "VmRSS") -> int:
    """Resident bytes (VmRSS), or the peak so far (VmHWM), of a process."""
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(key + r":\s+(\d+) kB", text).group(1)) * 1024


def call(srv, path: str, body: bytes, token: bool, timeout: float = 30.0, compress=False,
         metadata=()):
    """(code, details) of one unary call with raw request bytes."""
    md = list(metadata)
    if token:
        md.append(("authorization", "Bearer " + TOKEN))
    with srv.channel() as ch:
        fn = ch.unary_unary(path)
        try:
            fn(body, timeout=timeout, metadata=md,
               compression=grpc.Compression.Gzip if compress else None)
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            return e.code(), e.details() or ""


def at_once(n: int, fn):
    """Runs fn(i) on n threads started together; returns their results."""
    out = [None] * n
    barrier = threading.Barrier(n)

    def run(i):
        barrier.wait()
        out[i] = fn(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def metric(srv, series: str) -> float:
    """The value of one series of /metrics (0 when absent)."""
    for line in srv.metrics().splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def health_ok(srv, timeout: float = 2.0) -> bool:
    st = h.stubs()
    with srv.channel() as ch:
        stub = st.health_pb2_grpc.HealthStub(ch)
        resp = stub.Check(st.health_pb2.HealthCheckRequest(), timeout=timeout)
        return resp.status == st.health_pb2.HealthCheckResponse.SERVING
