"""Health/Check and small plans while two 4 Mi-sequence plans run.

Two client threads keep two large Plans in the server at all times (4 Mi
sequences from azure_conv_2023, dp 8, cap 65536; --max-message-bytes and
--max-plan-bytes raised so that they are planned, not refused). On the
default two workers one of them plans and the other waits for the large
lane (--large-workers 1). Meanwhile one thread sends Health/Check every
20 ms and one sends a small Plan (4096 sequences, dp 8, cap 16384) every
50 ms, each with a 1 s deadline, and the script reports their latency:

    PACKD_BUILD_DIR=build /usr/bin/python3 bench/soak/starvation.py [--seconds 60]
"""

from __future__ import annotations

import argparse
import threading
import time

import grpc

import common as c


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--n", type=int, default=4 << 20)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    big = c.plan_bytes(args.n, 3, 8, 65536)
    small = c.plan_bytes(4096, 4, 8, 16384)
    srv = c.Server("--workers", str(args.workers), "--max-message-bytes", "512M",
                   "--max-plan-bytes", "0", "--max-sequences", str(max(args.n, 4 << 20)),
                   "--log-level", "warn")
    stop = threading.Event()
    lat = {"Health": [], "small Plan": []}
    errors = {"Health": {}, "small Plan": {}}
    large_done = [0]

    def big_loop():
        ch = srv.channel()
        plan, _, _ = c.stubs(ch)
        while not stop.is_set():
            try:
                plan(big, timeout=600)
                large_done[0] += 1
            except grpc.RpcError:
                pass
        ch.close()

    def probe(kind, period):
        ch = srv.channel()
        plan, _, health = c.stubs(ch)
        call = (lambda: health(b"", timeout=1.0)) if kind == "Health" else (
            lambda: plan(small, timeout=1.0))
        while not stop.is_set():
            t = c.now()
            try:
                call()
                lat[kind].append(c.now() - t)
            except grpc.RpcError as e:
                errors[kind][e.code().name] = errors[kind].get(e.code().name, 0) + 1
            time.sleep(max(0.0, period - (c.now() - t)))
        ch.close()

    bigs = [threading.Thread(target=big_loop) for _ in range(2)]
    for t in bigs:
        t.start()
    # Measure only while both large plans are inside the server.
    while True:
        m = srv.metrics()
        if c.metric(m, "packd_running_large_plans") + c.metric(m, 'packd_queued_calls{lane="large"}') >= 2:
            break
        time.sleep(0.05)
    probes = [threading.Thread(target=probe, args=("Health", 0.02)),
              threading.Thread(target=probe, args=("small Plan", 0.05))]
    for t in probes:
        t.start()
    t0 = c.now()
    time.sleep(args.seconds)
    stop.set()
    for t in probes:
        t.join()
    srv.stop()
    for t in bigs:
        t.join()
    print(f"# {args.seconds:.0f} s with two {args.n}-sequence Plans in the server "
          f"({large_done[0]} finished meanwhile), workers {args.workers}; deadline 1 s")
    print("| call | calls | errors | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|")
    for kind, v in lat.items():
        ms = [x * 1e3 for x in v]
        err = ", ".join(f"{k} {n}" for k, n in errors[kind].items()) or "0"
        print(f"| {kind} | {len(ms)} | {err} | {c.pct(ms, 50):.1f} | {c.pct(ms, 99):.1f} | "
              f"{max(ms) if ms else float('nan'):.1f} |")
    _ = t0


if __name__ == "__main__":
    main()
