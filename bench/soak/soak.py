"""Soak: the real server under a mixed load for a long time, then SIGTERM
under that load.

32 client threads (one gRPC channel each) send, without pause, a mix of
small Plans (4096 sequences sampled from azure_conv_2023, dp 8, cap 16384;
16 distinct requests), GetRankPlan for ranks of plans made earlier, and
Health/Check. One more thread sends a huge request every --huge-every
seconds, alternately one over --max-sequences (refused with
RESOURCE_EXHAUSTED before planning) and one just under it (accepted and
planned: a large Plan). At the end the server gets SIGTERM while the load
goes on; the script checks that it exits 0 and how long that took.

It reports, per kind of call, the calls, the errors by status, and p50 /
p99 / max latency (the client's round trip, with the Python client's own
overhead on the same CPUs); the server's RSS at start, middle and end; and
the shutdown. Calls that end after the SIGTERM are reported apart (they may
be refused with UNAVAILABLE by design).

    PACKD_BUILD_DIR=build /usr/bin/python3 bench/soak/soak.py             # 10 minutes
    PACKD_BUILD_DIR=build /usr/bin/python3 bench/soak/soak.py --quick     # 45 seconds
"""

from __future__ import annotations

import argparse
import random
import signal
import threading
import time

import grpc

import common as c

MAX_SEQ = 1 << 20  # --max-sequences of the soak's server.


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--quick", action="store_true", help="45 s instead of --seconds")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--huge-every", type=float, default=None,
                    help="seconds between huge requests (default: 20, or 5 with --quick)")
    ap.add_argument("--grace", type=float, default=5.0)
    args = ap.parse_args()
    seconds = 45.0 if args.quick else args.seconds
    huge_every = args.huge_every or (5.0 if args.quick else 20.0)

    smalls = [c.plan_bytes(4096, s, 8, 16384) for s in range(16)]
    accepted = c.plan_bytes(MAX_SEQ, 100, 8, 65536)
    refused = c.plan_bytes(MAX_SEQ + 1, 101, 8, 65536)
    srv = c.Server("--workers", "2", "--max-sequences", str(MAX_SEQ), "--max-message-bytes",
                   "256M", "--max-plan-bytes", "0", "--grace-period", str(args.grace),
                   "--drain-delay", "1", "--log-level", "warn")
    rss = {"start": srv.rss_mib()}
    rss_max = [rss["start"]]
    plan_ids: list[str] = []
    ids_lock = threading.Lock()
    stop = threading.Event()
    t_term = [None]
    # (kind, status, seconds, after_sigterm)
    records: list[tuple[str, str, float, bool]] = []
    rec_lock = threading.Lock()

    def record(kind, status, secs, t_end):
        after = t_term[0] is not None and t_end >= t_term[0]
        with rec_lock:
            records.append((kind, status, secs, after))

    def client(idx):
        rnd = random.Random(idx)
        ch = srv.channel()
        plan, rank, health = c.stubs(ch)
        while not stop.is_set():
            r = rnd.random()
            t = c.now()
            try:
                if r < 0.5:
                    kind = "Plan (small)"
                    out = plan(smalls[rnd.randrange(len(smalls))], timeout=30)
                    if rnd.random() < 0.1:
                        with ids_lock:
                            plan_ids.append(c.plan_id_of(out))
                            del plan_ids[:-64]
                elif r < 0.8:
                    kind = "GetRankPlan"
                    with ids_lock:
                        pid = plan_ids[rnd.randrange(len(plan_ids))] if plan_ids else None
                    if pid is None:
                        continue
                    rank(c.rank_bytes(pid, rnd.randrange(8)), timeout=30)
                else:
                    kind = "Health"
                    health(b"", timeout=30)
                record(kind, "OK", c.now() - t, c.now())
            except grpc.RpcError as e:
                record(kind, e.code().name, c.now() - t, c.now())
                if t_term[0] is not None and e.code() == grpc.StatusCode.UNAVAILABLE:
                    time.sleep(0.05)
        ch.close()

    def huge():
        ch = srv.channel()
        plan, _, _ = c.stubs(ch)
        i = 0
        while not stop.wait(huge_every):
            kind, data = (("huge (refused)", refused) if i % 2 == 0 else
                          ("huge (accepted)", accepted))
            i += 1
            t = c.now()
            try:
                plan(data, timeout=120)
                record(kind, "OK", c.now() - t, c.now())
            except grpc.RpcError as e:
                record(kind, e.code().name, c.now() - t, c.now())
        ch.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.concurrency)]
    threads.append(threading.Thread(target=huge))
    for t in threads:
        t.start()
    t0 = c.now()
    while c.now() - t0 < seconds:
        time.sleep(1.0)
        rss_max[0] = max(rss_max[0], srv.rss_mib())
        if "middle" not in rss and c.now() - t0 >= seconds / 2:
            rss["middle"] = srv.rss_mib()
    rss["end"] = srv.rss_mib()
    # SIGTERM under load.
    t_term[0] = c.now()
    srv.proc.send_signal(signal.SIGTERM)
    code = srv.proc.wait(timeout=120)
    exit_s = c.now() - t_term[0]
    stop.set()
    for t in threads:
        t.join()

    print(f"# {seconds:.0f} s, concurrency {args.concurrency}, huge request every {huge_every:g} s, "
          f"workers 2, max-sequences {MAX_SEQ}")
    print("| kind | calls | OK | errors by status | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|---|")
    kinds = ["Plan (small)", "GetRankPlan", "Health", "huge (refused)", "huge (accepted)"]
    for kind in kinds:
        rows = [r for r in records if r[0] == kind and not r[3]]
        ok = [r[2] * 1e3 for r in rows if r[1] == "OK"]
        errs: dict[str, int] = {}
        for r in rows:
            if r[1] != "OK":
                errs[r[1]] = errs.get(r[1], 0) + 1
        allms = [r[2] * 1e3 for r in rows]
        print(f"| {kind} | {len(rows)} | {len(ok)} | "
              f"{', '.join(f'{k} {v}' for k, v in sorted(errs.items())) or '-'} | "
              f"{c.pct(allms, 50):.1f} | {c.pct(allms, 99):.1f} | "
              f"{max(allms) if allms else float('nan'):.1f} |")
    after = [r for r in records if r[3]]
    aft: dict[str, int] = {}
    for r in after:
        aft[r[1]] = aft.get(r[1], 0) + 1
    print(f"\nRSS MiB: start {rss['start']:.0f}, middle {rss.get('middle', float('nan')):.0f}, "
          f"end {rss['end']:.0f}, max sampled {rss_max[0]:.0f}")
    print(f"SIGTERM under load: exit status {code} after {exit_s:.2f} s (drain-delay 1 s, "
          f"grace-period {args.grace:g} s); calls ending after it: "
          f"{', '.join(f'{k} {v}' for k, v in sorted(aft.items())) or 'none'}")
    bad = [l for l in srv.log().splitlines() if " error " in l]
    print(f"server error lines: {len(bad)}")
    for l in bad[:5]:
        print("  " + l)


if __name__ == "__main__":
    main()
