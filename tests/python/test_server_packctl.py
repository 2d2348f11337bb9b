"""packctl against a real packd server, as a black box: `plan --server`
prints exactly what `plan --local` prints for the same request, `rank-plan`,
`health` exit codes, and `load` (table and JSON)."""

import json
import os
import signal
import subprocess
import time

import pytest

import server_harness as h

WORKLOAD = str(h.WORKLOADS / "azure_conv_2023.txt")


def packctl(*args, timeout=120):
    if not h.PACKCTL.exists():
        raise RuntimeError(f"{h.PACKCTL} is missing: build first")
    return subprocess.run([str(h.PACKCTL), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def server():
    s = h.start("--drain-delay", "0")
    yield s
    assert s.stop() == 0


PLAN_FLAGS = [
    ["--dp", "8", "--max-tokens", "16384", "--sample", "500"],
    ["--dp", "4", "--cp", "2", "--max-tokens", "32768", "--sample", "700", "--seed", "3"],
    ["--dp", "16", "--mode", "padded", "--max-tokens", "65536", "--sample", "1000", "--mini-batches", "2"],
    ["--dp", "2", "--mode", "fixed", "--micro-batch-size", "4", "--sample", "64"],
    ["--dp", "8", "--dp-balance", "kk_equal", "--micro-algo", "kk_count", "--max-tokens", "16384", "--sample", "256"],
]


@pytest.mark.parametrize("flags", PLAN_FLAGS, ids=[" ".join(f[:4]) for f in PLAN_FLAGS])
def test_plan_server_json_equals_local(server, flags):
    local = packctl("plan", "--local", "--format", "json", *flags, WORKLOAD)
    remote = packctl("plan", "--server", server.addr, "--format", "json", *flags, WORKLOAD)
    assert local.returncode == 0, local.stderr
    assert remote.returncode == 0, remote.stderr
    a, b = json.loads(local.stdout), json.loads(remote.stdout)
    # Planner time is measured, not planned: the only field allowed to differ.
    a["stats"].pop("planTimeUs", None)
    b["stats"].pop("planTimeUs", None)
    # The server keys its plan ids with its secret, the local planner does
    # not (test_plan_ids.py); both are 32 hex digits on every rank.
    for doc in (a, b):
        pid = doc.pop("planId")
        assert len(pid) == 32 and all(r.pop("planId") == pid for r in doc["ranks"])
    assert a == b


def test_plan_server_errors_exit_1(server):
    out = packctl("plan", "--server", server.addr, "--dp", "0", WORKLOAD)
    assert out.returncode == 1
    assert "INVALID_ARGUMENT" in out.stderr and "parallel.dp" in out.stderr
    out = packctl("plan", "--server", "127.0.0.1:1", "--timeout", "2", "--dp", "2", WORKLOAD)
    assert out.returncode == 1
    assert "UNAVAILABLE" in out.stderr


def packctl_env(env, *args):
    """packctl with only the given packd variables set (the rest of the
    environment kept)."""
    full = {k: v for k, v in os.environ.items() if k not in ("PACKD_TARGET", "PACKD_SERVER")}
    full.update(env)
    return subprocess.run([str(h.PACKCTL), *args], capture_output=True, text=True, timeout=120, env=full)


def test_server_from_environment(server):
    """PACKD_TARGET (the Python client's variable) reaches the server for
    every remote command, PACKD_SERVER (the older name) still does, the flag
    wins over both, and PACKD_TARGET wins over PACKD_SERVER."""
    dead = "127.0.0.1:1"
    for env in ({"PACKD_TARGET": server.addr}, {"PACKD_SERVER": server.addr},
                {"PACKD_TARGET": server.addr, "PACKD_SERVER": dead}):
        out = packctl_env(env, "health", "--timeout", "5")
        assert (out.returncode, out.stdout.strip()) == (0, "SERVING"), (env, out.stderr)
        out = packctl_env(env, "plan", "--dp", "2", "--sample", "64", "--format", "json", WORKLOAD)
        assert out.returncode == 0, (env, out.stderr)
        assert json.loads(out.stdout)["planId"]
    out = packctl_env({"PACKD_TARGET": dead}, "health", "--server", server.addr, "--timeout", "5")
    assert out.returncode == 0, out.stderr
    out = packctl_env({"PACKD_TARGET": dead, "PACKD_SERVER": server.addr}, "health", "--timeout", "2")
    assert out.returncode == 1 and "UNAVAILABLE" in out.stderr
    out = packctl_env({}, "plan", "--dp", "2", WORKLOAD)
    assert out.returncode == 2 and "PACKD_TARGET" in out.stderr


def test_rank_plan(server):
    out = packctl("plan", "--server", server.addr, "--format", "json", "--dp", "8", "--max-tokens", "16384",
                  "--sample", "400", WORKLOAD)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    for rank in (0, 5):
        got = packctl("rank-plan", "--server", server.addr, "--plan-id", plan["planId"], "--rank", str(rank))
        assert got.returncode == 0, got.stderr
        rk = json.loads(got.stdout)
        assert rk["planId"] == plan["planId"]
        want = dict(plan["ranks"][rank])
        want["planId"] = plan["planId"]
        assert rk == want
    summary = packctl("rank-plan", "--server", server.addr, "--plan-id", plan["planId"], "--rank", "5",
                      "--format", "summary")
    assert summary.returncode == 0 and "dp_rank 5" in summary.stdout
    miss = packctl("rank-plan", "--server", server.addr, "--plan-id", "deadbeef", "--rank", "0")
    assert miss.returncode == 1
    assert "NOT_FOUND" in miss.stderr and "deadbeef" in miss.stderr
    assert packctl("rank-plan", "--server", server.addr, "--rank", "0").returncode == 2


def test_health_exit_codes():
    s = h.start("--drain-delay", "3")
    try:
        out = packctl("health", "--server", s.addr)
        assert (out.returncode, out.stdout.strip()) == (0, "SERVING")
        out = packctl("health", "--server", s.addr, "--service", "packd.v1.Planner")
        assert out.returncode == 0
        out = packctl("health", "--server", s.addr, "--service", "nope")
        assert out.returncode == 1 and "NOT_FOUND" in out.stderr
        s.signal(signal.SIGTERM)

        def not_serving():
            out = packctl("health", "--server", s.addr)
            assert (out.returncode, out.stdout.strip()) == (1, "NOT_SERVING")

        h.eventually(not_serving, timeout=2.0)
        assert s.wait(timeout=20) == 0
        out = packctl("health", "--server", s.addr, "--timeout", "2")
        assert out.returncode == 1 and "UNAVAILABLE" in out.stderr
    finally:
        s.stop()
    assert packctl("health").returncode == 2


def test_load_table_and_json(server):
    out = packctl("load", "--server", server.addr, "--lengths", WORKLOAD, "--sample", "512", "--dp", "8",
                  "--max-tokens", "16384", "--concurrency", "2", "--duration", "1", "--warmup", "0.2",
                  "--format", "json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["requests"] > 0 and r["errors"]["total"] == 0
    assert r["concurrency"] == 2 and r["sequences"] == 512
    lat = r["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert r["requests_per_s"] > 0
    out = packctl("load", "--server", server.addr, "--lengths", WORKLOAD, "--sample", "128", "--dp", "4",
                  "--duration", "0.5", "--warmup", "0")
    assert out.returncode == 0, out.stderr
    for word in ("requests/s", "p50", "p90", "p99", "errors by status"):
        assert word in out.stdout


def test_load_reports_refusals_and_bad_flags(server):
    # A request the server refuses fails before the clock starts.
    out = packctl("load", "--server", server.addr, "--lengths", WORKLOAD, "--dp", "4", "--max-tokens", "10",
                  "--duration", "0.5")
    assert out.returncode == 1
    assert "FAILED_PRECONDITION" in out.stderr
    out = packctl("load", "--server", server.addr, "--lengths", WORKLOAD, "--dp", "4", "--bogus", "1")
    assert out.returncode == 2 and "--bogus" in out.stderr
    out = packctl("load", "--server", server.addr, "--lengths", WORKLOAD, "--duration", "1")
    assert out.returncode == 2 and "--dp" in out.stderr


def test_load_counts_errors_by_status():
    s = h.start("--drain-delay", "0", "--workers", "4", "--max-inflight", "1", "--debug-delay-ms", "20")
    try:
        out = packctl("load", "--server", s.addr, "--lengths", WORKLOAD, "--sample", "64", "--dp", "2",
                      "--concurrency", "6", "--duration", "1", "--warmup", "0", "--format", "json")
        r = json.loads(out.stdout)
        assert out.returncode == 1
        by = r["errors"]["by_status"]
        assert by.get("RESOURCE_EXHAUSTED", 0) > 0, r
        assert sum(by.values()) == r["errors"]["total"], r
    finally:
        assert s.stop() == 0


def test_health_wait_for_a_server_that_is_starting():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    waiter = subprocess.Popen(
        [str(h.PACKCTL), "health", "--server", f"127.0.0.1:{port}", "--wait", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.7)
    proc, log_path = h.launch("--drain-delay", "0", listen=f"127.0.0.1:{port}")
    try:
        out, err = waiter.communicate(timeout=30)
        assert waiter.returncode == 0, err
        assert out.strip() == "SERVING"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
