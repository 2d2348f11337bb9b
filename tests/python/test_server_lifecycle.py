"""Integration tests of the packd process lifecycle: start-up line and
configuration, health and /readyz through a SIGTERM drain (NOT_SERVING
first), SIGTERM while 8 clients are sending (every accepted call gets a
complete answer, exit code 0), a second signal, and port clashes that fail
loudly."""

import re
import signal
import subprocess
import threading
import time

import grpc
import pytest

import server_harness as h

st = h.stubs()
pb = st.packd_pb2
health_pb = st.health_pb2


def check(ch, service=""):
    return st.health_pb2_grpc.HealthStub(ch).Check(health_pb.HealthCheckRequest(service=service), timeout=5).status


def test_help_version_and_bad_flags():
    out = subprocess.run([str(h.PACKD), "--help"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0
    for flag, env in (
        ("--listen", "PACKD_LISTEN"),
        ("--metrics-listen", "PACKD_METRICS_LISTEN"),
        ("--workers", "PACKD_WORKERS"),
        ("--grace-period", "PACKD_GRACE_PERIOD"),
        ("--log-level", "PACKD_LOG_LEVEL"),
    ):
        assert re.search(rf"{flag}\s+{env}", out.stdout), flag
    out = subprocess.run([str(h.PACKD), "--version"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0 and out.stdout.startswith("packd ")
    out = subprocess.run([str(h.PACKD), "--workers", "zero"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 2
    assert "--workers" in out.stderr and "zero" in out.stderr
    out = subprocess.run(
        [str(h.PACKD)], capture_output=True, text=True, timeout=10, env={"PACKD_GRACE_PERIOD": "soon"}
    )
    assert out.returncode == 2
    assert "PACKD_GRACE_PERIOD" in out.stderr and "soon" in out.stderr


def test_startup_line_shows_effective_config_from_env_and_flags():
    s = h.start("--workers", "3", env={"PACKD_CACHE_TTL": "42", "PACKD_WORKERS": "7", "PACKD_LOG_LEVEL": "debug"})
    try:
        first = s.log().splitlines()[0]
        assert "workers=3" in first  # The flag wins over PACKD_WORKERS.
        assert "cache_ttl=42s" in first
        assert "log_level=debug" in first
        with s.channel() as ch:
            st.packd_pb2_grpc.PlannerStub(ch).Plan(h.plan_request([1, 2, 3], dp=1))

        def logged():
            assert re.search(r"debug packd: rpc Plan code=OK .* seqs=3 plan_id=[0-9a-f]+", s.log())

        h.eventually(logged)
    finally:
        assert s.stop() == 0


def test_health_through_shutdown_not_serving_first():
    s = h.start("--drain-delay", "1.5", "--grace-period", "5")
    ch = s.channel()
    try:
        assert check(ch) == health_pb.HealthCheckResponse.SERVING
        assert s.http_get("/readyz")[0] == 200
        assert s.http_get("/healthz")[0] == 200
        s.signal(signal.SIGTERM)

        def not_serving():
            assert check(ch) == health_pb.HealthCheckResponse.NOT_SERVING

        # Draining: still answering, but NOT_SERVING, and not ready.
        h.eventually(not_serving, timeout=1.0)
        assert check(ch, "packd.v1.Planner") == health_pb.HealthCheckResponse.NOT_SERVING
        assert s.http_get("/readyz")[0] == 503
        assert s.http_get("/healthz")[0] == 200
        assert "packd_serving 0" in s.metrics()
        resp = st.packd_pb2_grpc.PlannerStub(ch).Plan(h.plan_request([5, 6, 7, 8], dp=2), timeout=5)
        assert len(resp.ranks) == 2
        assert s.wait(timeout=15) == 0
    finally:
        ch.close()
        s.stop()
    log = s.log()
    i_not_serving = log.index("NOT_SERVING")
    i_close = log.index("closing the gRPC listener")
    i_exit = log.index("stopped")
    assert i_not_serving < i_close < i_exit
    # After exit nothing listens on the port any more.
    with grpc.insecure_channel(s.addr) as ch2:
        with pytest.raises(grpc.RpcError) as e:
            check(ch2)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE


def test_sigterm_while_eight_clients_send():
    s = h.start(
        "--drain-delay", "0.5", "--grace-period", "20", "--workers", "2", "--debug-delay-ms", "20",
        "--log-level", "debug",
    )
    lengths = h.workload(n=2000)
    req = h.plan_request(lengths, dp=16, max_tokens=16384)
    results = []  # (code, complete, sent_after_signal)
    lock = threading.Lock()
    stop = threading.Event()
    signalled = threading.Event()

    def client():
        ch = s.channel()
        stub = st.packd_pb2_grpc.PlannerStub(ch)
        while not stop.is_set():
            after = signalled.is_set()
            try:
                resp = stub.Plan(req, timeout=30)
                complete = len(resp.ranks) == 16 and sorted(
                    q for rk in resp.ranks for mb in rk.mini_batches for mi in mb.micro_batches for q in mi.seqs
                ) == list(range(len(lengths)))
                item = (grpc.StatusCode.OK, complete, after)
            except grpc.RpcError as e:
                item = (e.code(), False, after)
            with lock:
                results.append(item)
            if item[0] != grpc.StatusCode.OK and after:
                time.sleep(0.05)
        ch.close()

    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    inflight_at_signal = int(re.search(r"packd_inflight_calls (\d+)", s.metrics()).group(1))
    s.signal(signal.SIGTERM)
    signalled.set()
    rc = s.wait(timeout=30)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert rc == 0, s.log()
    assert inflight_at_signal > 0
    ok = [r for r in results if r[0] == grpc.StatusCode.OK]
    assert ok and all(r[1] for r in ok), "an OK answer was incomplete"
    assert any(r[2] for r in ok), "no call was served during the drain"
    # Every call the server accepted (one debug line each) was answered OK,
    # and each of those answers reached a client complete.
    log = s.log()
    accepted = re.findall(r"rpc Plan code=(\w+)", log)
    assert accepted and set(accepted) == {"OK"}, set(accepted)
    assert len(accepted) == len(ok)
    # Calls the server did not accept fail with a retryable status: refused
    # connections (UNAVAILABLE), or CANCELLED for a call whose bytes were
    # still in transit when the listener closed. Nothing is cut off half-way
    # with INTERNAL, DEADLINE_EXCEEDED or a partial plan.
    bad = {r[0] for r in results if r[0] != grpc.StatusCode.OK}
    assert bad <= {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}, bad
    assert "grace period" not in log


def test_second_signal_cancels_at_once():
    s = h.start("--drain-delay", "0", "--grace-period", "60", "--debug-delay-ms", "3000")
    codes = []

    def slow_call():
        with s.channel() as ch:
            try:
                st.packd_pb2_grpc.PlannerStub(ch).Plan(h.plan_request([1, 2], dp=1), timeout=30)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as e:
                codes.append(e.code())

    t = threading.Thread(target=slow_call)
    t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    s.signal(signal.SIGTERM)
    time.sleep(0.3)
    s.signal(signal.SIGINT)
    assert s.wait(timeout=20) == 0
    t.join()
    # The worker still sleeps out its debug delay, but exit does not wait
    # for the 60 s grace period.
    assert time.monotonic() - t0 < 10
    assert "second signal" in s.log()
    assert codes and codes[0] != grpc.StatusCode.OK


def test_two_servers_on_one_port_fail_loudly():
    first = h.start()
    try:
        proc, log_path = h.launch(listen=first.addr)
        assert proc.wait(timeout=20) == 1
        text = open(log_path).read()
        assert f"cannot listen for gRPC on {first.addr}" in text
        metrics_addr = f"127.0.0.1:{first.metrics_port}"
        proc, log_path = h.launch(metrics_listen=metrics_addr)
        assert proc.wait(timeout=20) == 1
        text = open(log_path).read()
        assert f"cannot listen for metrics on {metrics_addr}" in text
        assert "address already in use" in text
        # The first server is untouched.
        with first.channel() as ch:
            assert check(ch) == health_pb.HealthCheckResponse.SERVING
    finally:
        assert first.stop() == 0
