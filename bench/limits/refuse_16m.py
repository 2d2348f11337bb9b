"""Measures how fast and how small the server's refusal of an oversized Plan
request is: 16 Mi sequences (about 32 MiB on the wire), refused before
planning by --max-sequences (default) or, with --max-sequences 0, by the
--max-plan-bytes estimate. The server runs under /usr/bin/time -v; its wall
time and peak RSS cover start-up, the call and shutdown.

    PACKD_BUILD_DIR=build-h9 /usr/bin/python3 bench/limits/refuse_16m.py [server flags...]
"""

import os
import signal
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
from packd import _request  # noqa: E402

BUILD = Path(os.environ.get("PACKD_BUILD_DIR", REPO / "build"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    lengths = np.random.default_rng(7).integers(64, 4000, size=16 << 20, dtype=np.uint32)
    data = _request.build(lengths, dp=64, max_tokens=16384).SerializeToString()
    port = free_port()
    report = tempfile.NamedTemporaryFile(suffix=".time", delete=False).name
    cmd = ["/usr/bin/time", "-v", "-o", report, str(BUILD / "server" / "packd"),
           "--listen", f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{free_port()}",
           "--drain-delay", "0", *sys.argv[1:]]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    opts = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=opts) as ch:
        grpc.channel_ready_future(ch).result(timeout=20)
        plan = ch.unary_unary("/packd.v1.Planner/Plan")
        t0 = time.monotonic()
        try:
            plan(data, timeout=120)
            status, details = "OK", ""
        except grpc.RpcError as e:
            status, details = e.code().name, e.details()
        elapsed = time.monotonic() - t0
    # /usr/bin/time does not forward signals: stop its child, the server.
    with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
        child = int(f.read().split()[0])
    os.kill(child, signal.SIGTERM)
    proc.wait(timeout=30)
    fields = {}
    for line in open(report):
        k, _, v = line.strip().rpartition(": ")
        fields[k] = v
    os.unlink(report)
    print(f"request {len(data)} bytes; {status} in {elapsed:.3f} s: {details}")
    print(f"server peak RSS {int(fields['Maximum resident set size (kbytes)']) / 1024:.0f} MiB, "
          f"wall {fields['Elapsed (wall clock) time (h:mm:ss or m:ss)']}")


if __name__ == "__main__":
    main()
