"""Oversized Plan requests are refused with RESOURCE_EXHAUSTED before any
planning (--max-sequences, --max-plan-bytes), quickly and without the plan's
memory: in the embedded library and through the real server."""

import os
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

import packd  # noqa: E402
from packd import _request  # noqa: E402
from packd.testing import ServerProcess  # noqa: E402

N = 16 << 20  # 16 Mi sequences: 64 MiB of uint32, about 32 MiB on the wire.


@pytest.fixture(scope="module")
def lengths():
    rng = np.random.default_rng(7)
    return rng.integers(64, 4000, size=N, dtype=np.uint32)


@pytest.fixture(scope="module")
def request_bytes(lengths):
    # Built once: the Python client needs about 3 s to build and serialize
    # 16 Mi lengths; the timings below are the planner's and the server's.
    return _request.build(lengths, dp=64, max_tokens=16384).SerializeToString()


def _peak_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_local_refuses_16m_sequences(lengths, request_bytes):
    client = packd.Client.local()
    with pytest.raises(packd.ResourceExhausted) as e:
        client.plan(lengths, dp=64, max_tokens=16384)
    assert "max_sequences = 4194304" in str(e.value)
    assert "16777216" in str(e.value)
    # pk_plan_bytes alone: decode and refuse.
    library = client._transport.library
    t0 = time.monotonic()
    with pytest.raises(packd.ResourceExhausted):
        library.plan_bytes(request_bytes)
    elapsed = time.monotonic() - t0
    assert elapsed < 3.0, elapsed


@pytest.mark.parametrize(
    "args,fragment",
    [((), "max_sequences = 4194304"), (("--max-sequences", "0"), "max_plan_bytes = 67108864")],
    ids=["max-sequences", "max-plan-bytes"],
)
def test_server_refuses_16m_sequences_early(request_bytes, args, fragment):
    options = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
    with ServerProcess(args=args) as srv:
        with grpc.insecure_channel(srv.target, options=options) as channel:
            plan = channel.unary_unary("/packd.v1.Planner/Plan")
            t0 = time.monotonic()
            with pytest.raises(grpc.RpcError) as e:
                plan(request_bytes, timeout=60)
            elapsed = time.monotonic() - t0
        peak = _peak_rss_bytes(srv.proc.pid)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert fragment in e.value.details()
    # Planning it in full took 14-16 s and about 1.9 GiB.
    assert elapsed < 3.0, elapsed
    assert peak < 1 << 30, peak
