"""Shared pieces of the bench/soak scripts: a real packd on loopback with its
log in a file, requests built once as bytes (numpy + the packd package's
request builder), raw-bytes stubs, RSS and percentiles. Nothing here is
mocked: every figure comes from the real binary over real sockets."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
from packd import _request, _stubs  # noqa: E402

BUILD = Path(os.environ.get("PACKD_BUILD_DIR", REPO / "build"))
WORKLOAD = REPO / "bench" / "workloads" / "azure_conv_2023.txt"
BIG_MSG = 512 << 20
CHANNEL_OPTS = [
    ("grpc.max_send_message_length", BIG_MSG),
    ("grpc.max_receive_message_length", BIG_MSG),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def workload_lengths() -> np.ndarray:
    out = []
    for line in WORKLOAD.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(sum(int(x) for x in line.split()))
    return np.array(out, dtype=np.uint32)


def plan_bytes(n: int, seed: int, dp: int, cap: int, **fields) -> bytes:
    """A PlanRequest of n lengths sampled from azure_conv_2023 (clipped to
    the cap), packed."""
    base = workload_lengths()
    lengths = np.minimum(np.random.default_rng(seed).choice(base, size=n), cap)
    return _request.build(lengths, dp=dp, max_tokens=cap, **fields).SerializeToString()


def rank_bytes(plan_id: str, rank: int) -> bytes:
    return _stubs.pb2().GetRankPlanRequest(plan_id=plan_id, dp_rank=rank).SerializeToString()


def plan_id_of(response: bytes) -> str:
    return _stubs.pb2().PlanResponse.FromString(response).plan_id


class Server:
    def __init__(self, *flags: str):
        self.port, self.mport = free_port(), free_port()
        fd, self.log_path = tempfile.mkstemp(prefix="packd-soak-", suffix=".log")
        cmd = [str(BUILD / "server" / "packd"), "--listen", f"127.0.0.1:{self.port}",
               "--metrics-listen", f"127.0.0.1:{self.mport}", *flags]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PACKD_")}
        self.proc = subprocess.Popen(cmd, stdout=fd, stderr=subprocess.STDOUT, env=env)
        os.close(fd)
        self.addr = f"127.0.0.1:{self.port}"
        ch = grpc.insecure_channel(self.addr)
        grpc.channel_ready_future(ch).result(timeout=30)
        ch.close()

    def channel(self):
        return grpc.insecure_channel(self.addr, options=CHANNEL_OPTS)

    def log(self) -> str:
        return Path(self.log_path).read_text(errors="replace")

    def rss_mib(self) -> float:
        try:
            for line in open(f"/proc/{self.proc.pid}/status"):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
        except OSError:
            pass
        return float("nan")

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.mport}/metrics", timeout=5) as r:
            return r.read().decode()

    def stop(self, timeout=60.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(timeout=timeout)


def stubs(ch):
    """(plan, rank, health) callables on raw bytes."""
    return (ch.unary_unary("/packd.v1.Planner/Plan"),
            ch.unary_unary("/packd.v1.Planner/GetRankPlan"),
            ch.unary_unary("/grpc.health.v1.Health/Check"))


def pct(values, q) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100.0 * (len(v) - 1))))]


def metric(text: str, name: str) -> float:
    m = re.search(re.escape(name) + r" ([0-9.e+-]+)", text)
    return float(m.group(1)) if m else 0.0


def now() -> float:
    return time.monotonic()
