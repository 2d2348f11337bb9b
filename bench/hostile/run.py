#!/usr/bin/env python3
"""Figures of the hostile-client cases: a server's memory under gzip bombs
(with and without a token), the log volume of refused calls, and how many
plans made during a plan-store stall another replica cannot find.

The pass conditions live in tests/hostile (CI); this prints the numbers
behind them, for any build:

    PACKD_BUILD_DIR=build /usr/bin/python3 bench/hostile/run.py

Each case starts its own packd on loopback (and redis-server for the
stall). Memory is VmRSS / VmHWM of /proc/PID/status. A build without
--max-decoded-bytes (older packd) runs the bomb cases without it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "python"))
sys.path.insert(0, str(REPO / "tests" / "hostile"))

import grpc  # noqa: E402

import server_harness as h  # noqa: E402
from hostile import MiB, TOKEN, at_once, call, rss  # noqa: E402

PLAN = "/packd.v1.Planner/Plan"
BOMB = bytes(60 * MiB)


def supports(flag: str) -> bool:
    out = subprocess.run([str(h.PACKD), "--help"], capture_output=True, text=True).stdout
    return flag in out


def token_file() -> str:
    fd, path = tempfile.mkstemp(prefix="packd-bench-tokens-")
    os.write(fd, (TOKEN + "\n").encode())
    os.close(fd)
    return path


def bombs(token: bool, compress: bool = True):
    args = ["--auth-token-file", token_file(), "--workers", "6"]
    if token and supports("--max-decoded-bytes"):
        args += ["--max-decoded-bytes", "128M"]
    srv = h.start(*args)
    try:
        time.sleep(0.5)
        idle = rss(srv.proc.pid)
        t0 = time.monotonic()
        got = at_once(6, lambda i: call(srv, PLAN, BOMB, token=token, compress=compress))
        took = time.monotonic() - t0
        peak = rss(srv.proc.pid, "VmHWM")
        after = rss(srv.proc.pid)
        time.sleep(10)
        later = rss(srv.proc.pid)
        codes = {}
        for code, _ in got:
            codes[code.name] = codes.get(code.name, 0) + 1
        what = "bombs" if compress else "plain 60 MiB bodies"
        print(f"{what} {'with' if token else 'without'} token ({' '.join(args[2:])}): "
              f"idle {idle / MiB:.1f} MiB, peak {peak / MiB:.1f} MiB, "
              f"after {after / MiB:.1f} MiB, 10 s later {later / MiB:.1f} MiB, "
              f"{took:.2f} s, codes {codes}")
    finally:
        srv.stop()


def log_volume(seconds: float = 5.0):
    srv = h.start("--auth-token-file", token_file())
    try:
        size0 = os.path.getsize(srv.log_path)
        stop = time.monotonic() + seconds
        counts = [0] * 4

        def run(i):
            with srv.channel() as ch:
                fn = ch.unary_unary(PLAN)
                while time.monotonic() < stop:
                    try:
                        fn(b"", timeout=10)
                    except grpc.RpcError:
                        pass
                    counts[i] += 1

        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(0.2)
        grown = os.path.getsize(srv.log_path) - size0
        lines = srv.log().count("code=UNAUTHENTICATED")
        print(f"log volume: {sum(counts)} calls without a token in {seconds:.0f} s wrote "
              f"{grown} bytes of log, {lines} UNAUTHENTICATED lines")
    finally:
        srv.stop()


def stall():
    from test_plan_store import Redis, Replicas, lengths_for, rank_bytes

    redis = Redis()
    reps = Replicas()
    try:
        env = {"PACKD_PLAN_STORE_COMMAND_TIMEOUT_MS": "200"}
        a = reps.start(redis.url, env=env)
        b = reps.start(redis.url, env=env)
        plans = []
        with a.channel() as ch:
            stub = h.stubs().packd_pb2_grpc.PlannerStub(ch)
            os.kill(redis.proc.pid, signal.SIGSTOP)
            try:
                end = time.monotonic() + 2.0
                i = 0
                while time.monotonic() < end:
                    plans.append(stub.Plan(h.plan_request(lengths_for(i, n=256), dp=4), timeout=30))
                    i += 1
            finally:
                os.kill(redis.proc.pid, signal.SIGCONT)
        time.sleep(5)  # Both replicas see the store again; A replays what it missed.
        missing = unavailable = 0
        with b.channel() as ch:
            for p in plans:
                try:
                    rank_bytes(ch, p.plan_id, 1)
                except grpc.RpcError as e:
                    if e.code() == grpc.StatusCode.NOT_FOUND:
                        missing += 1
                    else:
                        unavailable += 1
        print(f"store stall: {len(plans)} plans made on A during a 2 s SIGSTOP of Redis; "
              f"5 s after SIGCONT replica B answers NOT_FOUND for {missing}, "
              f"UNAVAILABLE for {unavailable}")
    finally:
        reps.stop_all()
        redis.close()


def oversized():
    from test_plan_store import Redis, Replicas, lengths_for, rank_bytes

    redis = Redis()
    reps = Replicas()
    try:
        a = reps.start(redis.url)
        b = reps.start(redis.url)
        with a.channel() as ch:
            stub = h.stubs().packd_pb2_grpc.PlannerStub(ch)
            victim = stub.Plan(h.plan_request(lengths_for(7, n=256), dp=4), timeout=30)
        redis.cmd("HSET", f"packd:{victim.plan_id}", "0", b"\0" * (100 * MiB), timeout=30)
        with b.channel() as ch:
            t0 = time.monotonic()
            try:
                rank_bytes(ch, victim.plan_id, 2)
                code = "OK"
            except grpc.RpcError as e:
                code = e.code().name
            took = time.monotonic() - t0
        outages = [l for l in b.metrics().splitlines() if l.startswith("packd_plan_store_outages_total ")]
        print(f"oversized value: a 100 MiB value planted in a plan; GetRankPlan on another "
              f"replica answered {code} in {took * 1e3:.0f} ms; {outages[0]}")
    finally:
        reps.stop_all()
        redis.close()


def main():
    print(f"packd: {h.PACKD}")
    bombs(token=False)
    bombs(token=False, compress=False)
    bombs(token=True)
    log_volume()
    stall()
    oversized()


if __name__ == "__main__":
    main()
