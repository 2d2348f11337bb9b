"""How soon the server stops a large plan nobody waits for any more.

A 4 Mi-sequence Plan (azure_conv_2023 lengths, dp 8, cap 65536; the
server's limits raised to take it) is sent again and again; each time the
client lets its deadline pass, or cancels, at a different point of the
planning. The server logs, for every stopped plan, how long the planner
took from the cause (deadline, client gone) to its return ("stopped X ms
after it"); this script collects those figures per planner path:

    PACKD_BUILD_DIR=build /usr/bin/python3 bench/soak/stop_latency.py [--tries 8]

AUTO (the default) polls between its stages; the compatibility pair
LPT + FFD polls inside every long loop.
"""

from __future__ import annotations

import argparse
import re
import time

import grpc

import common as c

PATHS = {"AUTO": {}, "LPT+FFD": {"dp_balance": 4, "micro_algo": 2}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tries", type=int, default=8, help="stops per path and cause")
    ap.add_argument("--n", type=int, default=4 << 20)
    args = ap.parse_args()
    print(f"# {args.n} sequences, dp 8, cap 65536; {args.tries} stops per path and cause")
    print("| path | cause | stops | min ms | median ms | max ms |")
    print("|---|---|---|---|---|---|")
    for name, fields in PATHS.items():
        data = c.plan_bytes(args.n, 1, 8, 65536, **fields)
        srv = c.Server("--workers", "2", "--max-message-bytes", "512M", "--max-plan-bytes", "0",
                       "--max-sequences", str(max(args.n, 4 << 20)))
        try:
            ch = srv.channel()
            plan, _, _ = c.stubs(ch)
            # The full plan time, for the spread of stop points.
            t0 = c.now()
            plan(data, timeout=300)
            full = c.now() - t0
            for cause in ("deadline", "cancelled"):
                before = len(re.findall(r"stopped \(" + cause + r"\)", srv.log()))
                for i in range(args.tries):
                    at = 0.3 + full * (i + 0.5) / args.tries * 0.9
                    if cause == "deadline":
                        try:
                            plan(data, timeout=at)
                        except grpc.RpcError:
                            pass
                    else:
                        fut = plan.future(data, timeout=300)
                        time.sleep(at)
                        fut.cancel()
                    time.sleep(0.3)
                    # Wait for the worker to be free again.
                    while c.metric(srv.metrics(), "packd_running_large_plans") > 0:
                        time.sleep(0.05)
                found = re.findall(r"stopped \(" + cause + r"\): .*?stopped ([0-9.]+) ms after it",
                                   srv.log())[before:]
                ms = sorted(float(x) for x in found)
                if ms:
                    print(f"| {name} | {cause} | {len(ms)} | {ms[0]:.1f} | {c.pct(ms, 50):.1f} | "
                          f"{ms[-1]:.1f} |")
                else:
                    print(f"| {name} | {cause} | 0 | - | - | - |")
            print(f"<!-- {name}: full plan {full:.2f} s -->")
            ch.close()
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
