#!/usr/bin/python3
"""Plan store benchmark: what --plan-store costs Plan, and how fast many ranks
fetch their plans through it.

Two parts, all on loopback with a real redis-server (persistence off):

  fetch   3 packd replicas share one store. One Plan (DP = --ranks, default
          1,000) goes to replica 0; then every rank calls GetRankPlan at the
          same moment over its own gRPC connection, rank r on replica r % 3,
          as the GPU agents of a job do. Replicas 1 and 2 do not hold the plan
          and read it from the store: the concurrent calls on one replica
          share one fetch (HGETALL of the plan's hash) and the plan then sits
          in that replica's own cache. Each round uses a new plan ("cold": the
          store is read), then fires every rank again on the same plan
          ("warm": every replica answers from its cache), for comparison. The
          client is asyncio gRPC in --procs processes; every answer is
          compared byte for byte with the Plan's rank.
  plan    Plan latency with and without the store, back to back (off, on,
          off, on) with `packctl load` at concurrency 1, for n = 4,096 (azure
          conversations, DP 64) and n = 65,536 (Wikipedia documents up to the
          cap, DP 64); cap 32,768, packed. The server's own histograms give
          the time Plan spent writing to the store.

Usage: /usr/bin/python3 bench/store/run.py [--build DIR] [--only fetch,plan]
       [--ranks N] [--rounds R] [--procs P] [--duration S] [--json FILE]
"""

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / "bench" / "workloads"
sys.path.insert(0, str(REPO / "tests" / "python"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(tmp):
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", tmp, "--daemonize", "no"],
        stdout=open(os.path.join(tmp, "redis.log"), "w"), stderr=subprocess.STDOUT)
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit("redis-server did not start")


def scrape(server):
    vals = {}
    for line in server.metrics().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            vals[name] = float(value)
    return vals


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


# --- fetch: the client processes --------------------------------------------

def client_main(build, addrs, ranks, conn):
    """One client process: a channel per rank; fires all its ranks on each
    (plan_id, start_at) it is sent and sends back (rank, t0, t1, code, bytes)."""
    os.environ["PACKD_BUILD_DIR"] = build
    sys.path.insert(0, str(REPO / "tests" / "python"))
    import grpc
    import server_harness as h

    pb = h.stubs().packd_pb2

    async def run():
        chans = {r: grpc.aio.insecure_channel(addrs[r % len(addrs)], options=h.CHANNEL_OPTIONS) for r in ranks}
        calls = {r: chans[r].unary_unary("/packd.v1.Planner/GetRankPlan",
                                         request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=None) for r in ranks}
        await asyncio.gather(*(c.channel_ready() for c in chans.values()))
        conn.send("ready")
        loop = asyncio.get_running_loop()
        while True:
            msg = await loop.run_in_executor(None, conn.recv)
            if msg is None:
                break
            plan_id, start_at = msg
            await asyncio.sleep(max(0.0, start_at - time.time()))

            async def one(r):
                t0 = time.time()
                try:
                    b = await calls[r](pb.GetRankPlanRequest(plan_id=plan_id, dp_rank=r), timeout=60)
                    return (r, t0, time.time(), "OK", b)
                except grpc.aio.AioRpcError as e:
                    return (r, t0, time.time(), e.code().name, e.details().encode())

            conn.send(await asyncio.gather(*(one(r) for r in ranks)))
        for c in chans.values():
            await c.close()

    asyncio.run(run())


def bench_fetch(args, tmp):
    import server_harness as h

    pb = h.stubs().packd_pb2
    redis, rport = start_redis(tmp)
    url = f"redis://127.0.0.1:{rport}"
    reps = [h.start("--plan-store", url, "--workers", str(args.workers), "--drain-delay", "0")
            for _ in range(3)]
    addrs = [r.addr for r in reps]
    ctx = mp.get_context("spawn")
    procs, pipes = [], []
    for p in range(args.procs):
        a, b = ctx.Pipe()
        pr = ctx.Process(target=client_main, args=(str(args.build), addrs, list(range(p, args.ranks, args.procs)), b))
        pr.start()
        procs.append(pr)
        pipes.append(a)
    for a in pipes:
        assert a.recv() == "ready"
    lengths = h.workload("azure_conv_2023.txt")
    rows = {"cold": [], "warm": []}
    # Server-side GetRankPlan time (accept to answer) per replica and kind.
    server = {k: [{"sum": 0.0, "count": 0.0} for _ in range(3)] for k in rows}
    wrong = errors = 0
    m0 = [scrape(r) for r in reps]
    rank_bytes = 0
    try:
        for rnd in range(args.rounds):
            sample = random.Random(rnd).sample(lengths, args.sequences)
            with reps[0].channel() as ch:
                resp = h.stubs().packd_pb2_grpc.PlannerStub(ch).Plan(
                    h.plan_request(sample, dp=args.ranks, max_tokens=32768), timeout=120)
            want = []
            for r in range(args.ranks):
                x = pb.RankPlan()
                x.CopyFrom(resp.ranks[r])
                x.plan_id = resp.plan_id
                want.append(x.SerializeToString())
            rank_bytes = sum(len(w) for w in want)
            for kind in ("cold", "warm"):
                k0 = [scrape(r) for r in reps]
                start_at = time.time() + 0.3
                for a in pipes:
                    a.send((resp.plan_id, start_at))
                res = [x for a in pipes for x in a.recv()]
                k1 = [scrape(r) for r in reps]
                for i in range(3):
                    for what in ("sum", "count"):
                        name = f'packd_request_duration_seconds_{what}{{method="GetRankPlan"}}'
                        server[kind][i][what] += k1[i].get(name, 0.0) - k0[i].get(name, 0.0)
                lat = [t1 - t0 for _, t0, t1, code, _ in res if code == "OK"]
                errors += sum(1 for *_, code, _ in res if code != "OK")
                wrong += sum(1 for r, _, _, code, b in res if code == "OK" and b != want[r])
                wall = max(t1 for _, _, t1, _, _ in res) - min(t0 for _, t0, _, _, _ in res)
                rows[kind].append(dict(lat=lat, wall=wall, calls=len(res)))
    finally:
        for a in pipes:
            a.send(None)
        for pr in procs:
            pr.join(timeout=30)
        m1 = [scrape(r) for r in reps]
        rcs = [r.stop() for r in reps]
        redis.send_signal(signal.SIGTERM)
        redis.wait()

    def delta(name, i):
        return m1[i].get(name, 0.0) - m0[i].get(name, 0.0)

    out = {"ranks": args.ranks, "sequences": args.sequences, "rounds": args.rounds, "procs": args.procs,
           "workers": args.workers, "plan_rank_bytes": rank_bytes, "wrong": wrong, "errors": errors,
           "exit_codes": rcs}
    for kind, rs in rows.items():
        lat = [x * 1e3 for r in rs for x in r["lat"]]
        out[kind] = dict(calls=sum(r["calls"] for r in rs), p50_ms=pct(lat, 0.5), p90_ms=pct(lat, 0.9),
                         p99_ms=pct(lat, 0.99), max_ms=max(lat) if lat else float("nan"),
                         wall_ms_median=1e3 * statistics.median(r["wall"] for r in rs),
                         calls_per_s=statistics.median(r["calls"] / r["wall"] for r in rs),
                         server_ms_mean=[1e3 * x["sum"] / x["count"] if x["count"] else 0.0
                                         for x in server[kind]])
    out["store_fetches"] = [delta('packd_plan_store_reads_total{result="hit"}', i) for i in range(3)]
    out["coalesced"] = [delta("packd_plan_store_coalesced_total", i) for i in range(3)]
    n_reads = sum(delta("packd_plan_store_read_duration_seconds_count", i) for i in (1, 2)) or 1
    out["store_read_ms_mean"] = 1e3 * sum(delta("packd_plan_store_read_duration_seconds_sum", i)
                                          for i in (1, 2)) / n_reads
    return out


# --- plan: overhead of the write --------------------------------------------

def filtered_wikipedia(cap, tmp):
    kept = []
    for line in (WORK / "wikipedia_doc_lengths.txt").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and sum(int(x) for x in line.split()) <= cap:
            kept.append(line)
    out = Path(tmp) / "wikipedia_le_cap.txt"
    out.write_text("\n".join(kept) + "\n")
    return out


def bench_plan(args, tmp):
    import server_harness as h

    redis, rport = start_redis(tmp)
    plain = h.start("--workers", str(args.workers), "--drain-delay", "0")
    stored = h.start("--workers", str(args.workers), "--drain-delay", "0",
                     "--plan-store", f"redis://127.0.0.1:{rport}")
    packctl = Path(args.build) / "client" / "c" / "packctl"
    cases = [("n4096", WORK / "azure_conv_2023.txt", 4096, 16),
             ("n65536", filtered_wikipedia(32768, tmp), 65536, 4)]
    rows = []
    try:
        for name, lengths, n, distinct in cases:
            for rep in range(2):
                for store, srv in (("off", plain), ("on", stored)):
                    m0 = scrape(srv)
                    cmd = [str(packctl), "load", "--server", srv.addr, "--lengths", str(lengths), "--sample", str(n),
                           "--dp", "64", "--mode", "packed", "--max-tokens", "32768", "--concurrency", "1",
                           "--duration", str(args.duration), "--warmup", "1", "--distinct", str(distinct),
                           "--timeout", "120", "--format", "json"]
                    res = subprocess.run(cmd, capture_output=True, text=True)
                    if res.returncode != 0:
                        sys.exit(f"{' '.join(cmd)} failed: {res.stderr}")
                    r = json.loads(res.stdout)
                    m1 = scrape(srv)
                    writes = m1.get("packd_plan_store_write_duration_seconds_count", 0) - \
                        m0.get("packd_plan_store_write_duration_seconds_count", 0)
                    wsum = m1.get("packd_plan_store_write_duration_seconds_sum", 0) - \
                        m0.get("packd_plan_store_write_duration_seconds_sum", 0)
                    pname = 'packd_request_duration_seconds_%s{method="Plan"}'
                    pn = m1.get(pname % "count", 0) - m0.get(pname % "count", 0)
                    psum = m1.get(pname % "sum", 0) - m0.get(pname % "sum", 0)
                    rows.append(dict(case=name, n=n, store=store, rep=rep, calls=r["requests"],
                                     server_ms_mean=1e3 * psum / pn if pn else 0.0,
                                     plans_per_s=r["requests_per_s"], p50_ms=r["latency_ms"]["p50"],
                                     p99_ms=r["latency_ms"]["p99"], errors=r["errors"]["total"],
                                     write_ms_mean=1e3 * wsum / writes if writes else 0.0))
        value_bytes = 0
        with socket.create_connection(("127.0.0.1", rport)) as s:
            s.sendall(b"INFO memory\r\n")
            time.sleep(0.2)
            info = s.recv(65536).decode(errors="replace")
        used = [ln for ln in info.splitlines() if ln.startswith("used_memory:")]
        value_bytes = int(used[0].split(":")[1]) if used else -1
    finally:
        rcs = [plain.stop(), stored.stop()]
        redis.send_signal(signal.SIGTERM)
        redis.wait()
    return {"rows": rows, "redis_used_memory_bytes": value_bytes, "exit_codes": rcs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--only", default="fetch,plan")
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--sequences", type=int, default=16384, help="sequences of each fetch-part plan")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--procs", type=int, default=4, help="client processes for the fetch part")
    ap.add_argument("--workers", type=int, default=2, help="--workers of each packd")
    ap.add_argument("--duration", type=float, default=10, help="seconds per packctl load run")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    args.build = Path(args.build).resolve()
    os.environ["PACKD_BUILD_DIR"] = str(args.build)
    if shutil.which("redis-server") is None:
        sys.exit("redis-server is missing (apt-get install redis-server)")
    tmp = tempfile.mkdtemp(prefix="packd-store-bench-")
    results = {}
    if "fetch" in args.only:
        f = results["fetch"] = bench_fetch(args, tmp)
        print(f"fetch: {f['ranks']} ranks on 3 replicas, plans of {f['sequences']} sequences "
              f"({f['plan_rank_bytes']} bytes of rank plans), {f['rounds']} rounds, {f['procs']} client processes, "
              f"--workers {f['workers']}")
        print(f"{'kind':5} {'calls':>6} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} "
              f"{'round ms':>9} {'calls/s':>8}  server ms mean (replica 0 / 1 / 2)")
        for kind in ("cold", "warm"):
            k = f[kind]
            print(f"{kind:5} {k['calls']:>6} {k['p50_ms']:>8.2f} {k['p90_ms']:>8.2f} {k['p99_ms']:>8.2f} "
                  f"{k['max_ms']:>8.2f} {k['wall_ms_median']:>9.1f} {k['calls_per_s']:>8.0f}  "
                  + " / ".join(f"{x:.3f}" for x in k["server_ms_mean"]))
        print(f"wrong {f['wrong']}, errors {f['errors']}; store fetches per replica {f['store_fetches']}, "
              f"coalesced calls {f['coalesced']}, store read (HGETALL+verify) mean {f['store_read_ms_mean']:.2f} ms; "
              f"exit codes {f['exit_codes']}")
    if "plan" in args.only:
        p = results["plan"] = bench_plan(args, tmp)
        print(f"\nplan: packctl load, concurrency 1, {args.duration:g} s per run, DP 64, cap 32768")
        print(f"{'case':7} {'store':5} {'rep':>3} {'calls':>6} {'plans/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
              f"{'srv ms':>8} {'write ms':>9} {'err':>4}")
        for r in p["rows"]:
            print(f"{r['case']:7} {r['store']:5} {r['rep']:>3} {r['calls']:>6} {r['plans_per_s']:>8.1f} "
                  f"{r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f} {r['server_ms_mean']:>8.3f} "
                  f"{r['write_ms_mean']:>9.3f} {r['errors']:>4}")
        print("srv ms: the server's mean time per Plan (accept to end of answer); write ms: the part of "
              "it spent writing to the store; p50/p99: client round trip.")
        print(f"redis used_memory after: {p['redis_used_memory_bytes']} bytes; exit codes {p['exit_codes']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
