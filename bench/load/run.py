#!/usr/bin/python3
"""RPC load benchmark of packd: starts build/server/packd on loopback, drives
it with `packctl load` and prints one table.

Cases (the issue's targets in brackets):
  c1     n=4096, DP 64, packed, cap 32K, concurrency 1   [p50 <= 0.3 ms, p99 <= 1 ms]
  c16    same, concurrency 16 for 30 s                   [>= 5,000 plans/s, 0 errors, flat RSS]
  n65536 n=65,536 single-call latency (concurrency 1)
  n1M    n=1,000,000 single-call latency (concurrency 1)
  rpc1   n=1, DP 1, concurrency 1: the cost of the RPC alone (no planning to speak of)
  rpc16  the same at concurrency 16: the server's ceiling without the planner

Requests are samples of bench/workloads: azure_conv_2023.txt for n=4096;
wikipedia_doc_lengths.txt with documents over the 32K cap removed (1,304 of
1,000,000) for the larger cases, the filtered list repeated twice to have
1,000,000 sequences to sample from. Each case cycles through 16 distinct
samples (seeds 0..15).

For each case the server's own metrics split the time: planner, encode
(PlanResponse + cached rank plans) and the server's total per call; the
rest of the client latency is transport, gRPC and client decode.

Usage: /usr/bin/python3 bench/load/run.py [--build DIR] [--quick] [--only c1,c16,...]
       [--workers N] [--json FILE]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / "bench" / "workloads"


def rss_kb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    vals = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        vals[name] = float(value)
    return vals


def metric_delta(a, b, name):
    return b.get(name, 0.0) - a.get(name, 0.0)


def filtered_wikipedia(cap, tmpdir):
    """Wikipedia lengths <= cap, twice over (>= 1,000,000 lines)."""
    out = Path(tmpdir) / "wikipedia_le_cap.txt"
    kept = []
    for line in (WORK / "wikipedia_doc_lengths.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if sum(int(x) for x in line.split()) <= cap:
            kept.append(line)
    out.write_text("\n".join(kept + kept) + "\n")
    return out, 1_000_000 - len(kept)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--quick", action="store_true", help="short durations, for a smoke run")
    ap.add_argument("--only", default="rpc1,rpc16,c1,c16,n65536,n1M")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    build = Path(a.build)
    packd, packctl = build / "server" / "packd", build / "client" / "c" / "packctl"
    cap = 32768
    tmp = tempfile.mkdtemp(prefix="packd-bench-")
    wiki, dropped = filtered_wikipedia(cap, tmp)
    short = a.quick
    cases = {
        "c1": dict(lengths=WORK / "azure_conv_2023.txt", sample=4096, conc=1, dur=3 if short else 20),
        "c16": dict(lengths=WORK / "azure_conv_2023.txt", sample=4096, conc=16, dur=3 if short else 30),
        "n65536": dict(lengths=wiki, sample=65536, conc=1, dur=3 if short else 15, distinct=4),
        "n1M": dict(lengths=wiki, sample=1_000_000, conc=1, dur=5 if short else 30, distinct=2, warmup=0),
        "rpc1": dict(lengths=WORK / "azure_conv_2023.txt", sample=1, conc=1, dur=3 if short else 10, dp=1),
        "rpc16": dict(lengths=WORK / "azure_conv_2023.txt", sample=1, conc=16, dur=3 if short else 10, dp=1),
    }
    log_path = Path(tmp) / "packd.log"
    with open(log_path, "w") as log:
        srv = subprocess.Popen(
            [str(packd), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
             "--workers", str(a.workers), "--drain-delay", "0"],
            stdout=log, stderr=subprocess.STDOUT)
    m = None
    for _ in range(200):
        m = re.search(r"grpc_port=(\d+) metrics_port=(\d+)", log_path.read_text())
        if m or srv.poll() is not None:
            break
        time.sleep(0.05)
    if not m:
        srv.kill()
        sys.exit(f"packd did not start; log:\n{log_path.read_text()}")
    grpc_port, metrics_port = int(m.group(1)), int(m.group(2))
    server = f"127.0.0.1:{grpc_port}"
    results = []
    try:
        for name in a.only.split(","):
            c = cases[name]
            m0, rss0 = scrape(metrics_port), rss_kb(srv.pid)
            cmd = [str(packctl), "load", "--server", server, "--lengths", str(c["lengths"]),
                   "--sample", str(c["sample"]), "--dp", str(c.get("dp", 64)), "--mode", "packed", "--max-tokens", str(cap),
                   "--concurrency", str(c["conc"]), "--duration", str(c["dur"]),
                   "--warmup", str(c.get("warmup", 1)), "--distinct", str(c.get("distinct", 16)),
                   "--timeout", "120", "--format", "json"]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode not in (0, 1):
                sys.exit(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr}")
            r = json.loads(out.stdout)
            m1, rss1 = scrape(metrics_port), rss_kb(srv.pid)
            n_calls = metric_delta(m0, m1, "packd_plan_duration_seconds_count") or 1
            r.update(
                case=name,
                plan_ms=1e3 * metric_delta(m0, m1, "packd_plan_duration_seconds_sum") / n_calls,
                encode_ms=1e3 * metric_delta(m0, m1, "packd_encode_duration_seconds_sum") / n_calls,
                server_ms=1e3 * metric_delta(m0, m1, 'packd_request_duration_seconds_sum{method="Plan"}') / n_calls,
                rss_before_mb=rss0 / 1024, rss_after_mb=rss1 / 1024,
            )
            results.append(r)
    finally:
        srv.terminate()
        rc = srv.wait(timeout=60)
    hdr = (f"{'case':8} {'n':>8} {'conc':>4} {'secs':>5} {'calls':>7} {'plans/s':>8} {'p50 ms':>8} "
           f"{'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'err':>4} {'plan ms':>8} {'enc ms':>7} "
           f"{'srv ms':>7} {'RSS MB':>13}")
    print(hdr)
    for r in results:
        L = r["latency_ms"]
        print(f"{r['case']:8} {r['sequences']:>8} {r['concurrency']:>4} {r['duration_s']:>5.1f} "
              f"{r['requests']:>7} {r['requests_per_s']:>8.1f} {L['p50']:>8.3f} {L['p90']:>8.3f} "
              f"{L['p99']:>8.3f} {L['max']:>8.3f} {r['errors']['total']:>4} {r['plan_ms']:>8.3f} "
              f"{r['encode_ms']:>7.3f} {r['server_ms']:>7.3f} "
              f"{r['rss_before_mb']:>6.1f}->{r['rss_after_mb']:<6.1f}")
    print(f"server: {a.workers} workers, DP 64 (rpc*: DP 1), packed, max_tokens {cap}; exit status {rc}; "
          f"wikipedia documents over the cap dropped: {dropped}")
    print("plan ms / enc ms / srv ms: server-side means per call (planner; response + cache encode; "
          "accept to end of answer); p50..max: client round trip.")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
