"""The shared plan store (--plan-store) against a real redis-server on
loopback: a plan made on one packd is served byte for byte by every other;
the store killed, stopped and restarted under load never yields a wrong
plan, never fails a Plan, and GetRankPlan answers UNAVAILABLE naming the
store (NOT_FOUND only where the store really lacks the key); damaged,
foreign and other-version values are refused; plans expire with the TTL; bad
URLs and password settings refuse to start; AUTH works and the password is
never logged; the Python client and packctl surface UNAVAILABLE.

Each test starts its own redis-server (Debian's redis-server package) on a
free port with persistence off (--save "" --appendonly no) and kills it at
the end. Values are written and read with a small RESP client on a raw
socket, so the tests need no Redis Python module; forged envelopes get their
XXH3-64 from libxxhash through ctypes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import grpc
import pytest

import server_harness as h

st = h.stubs()
pb = st.packd_pb2

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")

# Under valgrind (PACKD_VALGRIND=1) everything is about 20 times slower.
SLOW = 4.0 if os.environ.get("PACKD_VALGRIND") == "1" else 1.0

# Short back-off so that recovery is seen within a test's patience.
FAST = {
    "PACKD_PLAN_STORE_BACKOFF_MIN_MS": "50",
    "PACKD_PLAN_STORE_BACKOFF_MAX_MS": "400",
    "PACKD_PLAN_STORE_PROBE_INTERVAL_MS": "200",
}


class RedisError(Exception):
    pass


def _read_reply(f):
    line = f.readline()
    if not line:
        raise ConnectionError("redis closed the connection")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RedisError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read_reply(f) for _ in range(n)]
    raise RedisError(f"bad reply {line!r}")


class Redis:
    """A redis-server process on a free loopback port."""

    def __init__(self, *extra, port=None):
        self.dir = tempfile.mkdtemp(prefix="packd-redis-")
        self.port = port or _free_port()
        self.extra = extra
        self.password = None
        for i, a in enumerate(extra):
            if a == "--requirepass":
                self.password = extra[i + 1]
        self.proc = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def where(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self):
        log = open(os.path.join(self.dir, "redis.log"), "ab")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--daemonize", "no", *self.extra],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 10
        while True:
            try:
                if self.cmd("PING") == "PONG":
                    return
            except (OSError, RedisError):
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def cmd(self, *args, timeout: float = 5.0):
        """One command on a fresh connection; bytes or str arguments."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            f = s.makefile("rb")
            if self.password is not None:
                s.sendall(_encode(("AUTH", self.password)))
                _read_reply(f)
            s.sendall(_encode(args))
            return _read_reply(f)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()

    def close(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _encode(args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis():
    r = Redis()
    yield r
    r.close()


class Replicas:
    """packd servers sharing one store; stopped (exit 0 required) at the end.

    They share one --plan-id-secret-file too, as the replicas of one
    deployment must: plan ids are keyed, and a replica with another key
    would name the same plan differently (test_plan_ids.py)."""

    def __init__(self):
        self.servers = []
        fd, self.secret_file = tempfile.mkstemp(prefix="packd-plan-id-secret-")
        os.write(fd, os.urandom(32).hex().encode() + b"\n")
        os.close(fd)

    def start(self, redis_url, *args, env=None):
        s = h.start("--plan-store", redis_url, "--drain-delay", "0",
                    "--plan-id-secret-file", self.secret_file, *args, env={**FAST, **(env or {})})
        self.servers.append(s)
        return s

    def stop_all(self):
        try:
            for s in self.servers:
                assert s.stop() == 0, s.log()
        finally:
            os.unlink(self.secret_file)


@pytest.fixture
def replicas():
    r = Replicas()
    yield r
    r.stop_all()


def plan(server, lengths, dp, timeout=30, **kw):
    with server.channel() as ch:
        return st.packd_pb2_grpc.PlannerStub(ch).Plan(h.plan_request(lengths, dp=dp, **kw), timeout=timeout)


def rank_bytes(channel, plan_id, rank, timeout=10):
    """GetRankPlan's answer as raw bytes (no parsing in between)."""
    call = channel.unary_unary("/packd.v1.Planner/GetRankPlan",
                               request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=None)
    return call(pb.GetRankPlanRequest(plan_id=plan_id, dp_rank=rank), timeout=timeout)


def expected_rank(resp, rank) -> bytes:
    want = pb.RankPlan()
    want.CopyFrom(resp.ranks[rank])
    want.plan_id = resp.plan_id
    return want.SerializeToString()


def metric(server, series) -> float:
    for line in server.metrics().splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {series} in /metrics")


def until_ok(call, timeout=10.0):
    """call() until it stops raising UNAVAILABLE (the store coming back)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def lengths_for(seed, n=2048):
    rnd = random.Random(seed)
    return [rnd.randint(1, 12000) for _ in range(n)]


def test_plan_on_one_served_byte_equal_by_two_others(redis, replicas):
    a = replicas.start(redis.url)
    b = replicas.start(redis.url)
    c = replicas.start(redis.url)
    resp = plan(a, h.workload(n=4096), dp=32, max_tokens=32768)
    key = f"packd:{resp.plan_id}"
    assert redis.cmd("HLEN", key) == 32
    assert 0 < redis.cmd("PTTL", key) <= 300_000  # The default --cache-ttl.
    with a.channel() as ach:
        local = [rank_bytes(ach, resp.plan_id, r) for r in range(32)]
    assert local == [expected_rank(resp, r) for r in range(32)]
    for other in (b, c):
        got = [None] * 32
        with other.channel() as ch:
            # Every rank at once: the calls share one fetch of the plan.
            threads = [threading.Thread(target=lambda r=r: got.__setitem__(r, rank_bytes(ch, resp.plan_id, r)))
                       for r in range(32)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert got == local
            # The plan is now in this server's own cache.
            assert rank_bytes(ch, resp.plan_id, 5) == local[5]
            with pytest.raises(grpc.RpcError) as e:
                rank_bytes(ch, resp.plan_id, 32)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "has 32 ranks" in e.value.details()
        assert metric(other, 'packd_plan_store_reads_total{result="hit"}') >= 1
        assert metric(other, "packd_plan_cache_hits_total") >= 1
        assert metric(other, f'packd_plan_store_up{{store="{redis.where}"}}') == 1
    assert metric(a, 'packd_plan_store_writes_total{result="ok"}') == 1
    assert metric(a, "packd_plan_store_corrupt_total") == 0
    with b.channel() as ch:
        with pytest.raises(grpc.RpcError) as e:
            rank_bytes(ch, "0" * 32, 0)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert redis.where in e.value.details()


def test_dynamic_cp_gpu_parts_served_by_every_replica(redis, replicas):
    """A dynamic-CP plan's GPU parts go to the store like DP ranks: one
    field per GPU of the pool, served byte for byte by the other replicas
    (each part the GPU's slice of the whole plan); a GPU outside the pool
    is INVALID_ARGUMENT naming dp_rank, also when the store answers it."""
    a = replicas.start(redis.url)
    b = replicas.start(redis.url)
    c = replicas.start(redis.url)
    rnd = random.Random(11)
    req = pb.PlanRequest(lengths=[rnd.choice([rnd.randint(100, 4000), rnd.randint(8000, 60000)])
                                  for _ in range(300)])
    req.parallel.dp, req.parallel.cp = 4, 4
    req.parallel.dynamic_cp.SetInParent()
    req.batching.max_tokens = 8192
    req.cost.cp_token = 0.25
    with a.channel() as ch:
        resp = st.packd_pb2_grpc.PlannerStub(ch).Plan(req, timeout=30)
        local = [rank_bytes(ch, resp.plan_id, g) for g in range(16)]
    assert redis.cmd("HLEN", f"packd:{resp.plan_id}") == 16
    for g, part in enumerate(local):
        want = pb.RankPlan(dp_rank=g, plan_id=resp.plan_id)
        want.dynamic_cp.pool = 16
        for slot in resp.dynamic_cp.slots:
            s = want.dynamic_cp.slots.add()
            s.gpu.CopyFrom(slot.gpus[g])
            s.group.CopyFrom(slot.groups[slot.gpus[g].group])
        assert part == want.SerializeToString()
    with b.channel() as ch:
        assert [rank_bytes(ch, resp.plan_id, g) for g in range(16)] == local
    with c.channel() as ch:
        # Not in c's cache: the store's answer refuses the rank.
        with pytest.raises(grpc.RpcError) as e:
            rank_bytes(ch, resp.plan_id, 16)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "dp_rank: 16 is out of range" in e.value.details()
        assert "has 16 ranks" in e.value.details()
        assert rank_bytes(ch, resp.plan_id, 15) == local[15]
    assert metric(b, 'packd_plan_store_reads_total{result="hit"}') >= 1


def test_store_killed_and_restarted_under_load(redis, replicas):
    a = replicas.start(redis.url)
    b = replicas.start(redis.url)
    stats = {"plans": 0, "ok": 0, "unavailable": 0, "not_found": 0, "wrong": [], "plan_failed": [],
             "bad_message": [], "not_found_present": [], "ok_after_restart": 0, "slowest_plan": 0.0}
    phase = {"name": "up"}
    stop = threading.Event()

    def load(worker):
        rnd = random.Random(worker)
        with a.channel() as ach, b.channel() as bch:
            i = 0
            while not stop.is_set():
                i += 1
                lengths = lengths_for(worker * 100000 + i, n=rnd.randint(64, 1024))
                t0 = time.monotonic()
                try:
                    resp = st.packd_pb2_grpc.PlannerStub(ach).Plan(h.plan_request(lengths, dp=8), timeout=30)
                except grpc.RpcError as exc:
                    stats["plan_failed"].append(f"{exc.code()}: {exc.details()}")
                    continue
                stats["slowest_plan"] = max(stats["slowest_plan"], time.monotonic() - t0)
                stats["plans"] += 1
                for rank in rnd.sample(range(8), 3):
                    try:
                        got = rank_bytes(bch, resp.plan_id, rank)
                    except grpc.RpcError as exc:
                        if exc.code() == grpc.StatusCode.UNAVAILABLE:
                            stats["unavailable"] += 1
                            if redis.where not in exc.details():
                                stats["bad_message"].append(exc.details())
                        elif exc.code() == grpc.StatusCode.NOT_FOUND:
                            stats["not_found"] += 1
                            # Only when the store really lacks the plan.
                            try:
                                if redis.cmd("EXISTS", f"packd:{resp.plan_id}", timeout=1) != 0:
                                    stats["not_found_present"].append(resp.plan_id)
                            except (OSError, RedisError):
                                pass
                        else:
                            stats["bad_message"].append(f"{exc.code()}: {exc.details()}")
                        continue
                    if got != expected_rank(resp, rank):
                        stats["wrong"].append((resp.plan_id, rank))
                    else:
                        stats["ok"] += 1
                        if phase["name"] == "restarted":
                            stats["ok_after_restart"] += 1

    def wait_for(cond, timeout):
        deadline = time.monotonic() + timeout * SLOW
        while not cond() and time.monotonic() < deadline:
            time.sleep(0.05)

    workers = [threading.Thread(target=load, args=(w,)) for w in range(3)]
    for t in workers:
        t.start()
    wait_for(lambda: stats["ok"] >= 20, 10)
    ok_before = stats["ok"]
    redis.kill()  # SIGKILL: connections reset, nothing flushed.
    phase["name"] = "down"
    wait_for(lambda: stats["unavailable"] >= 20, 10)
    unavailable_while_down = stats["unavailable"]
    redis.start()  # Same port, empty.
    phase["name"] = "restarted"
    deadline = time.monotonic() + 10 * SLOW
    while stats["ok_after_restart"] < 10 and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    for t in workers:
        t.join(timeout=60)
    assert stats["wrong"] == [], stats
    assert stats["plan_failed"] == [], stats
    assert stats["bad_message"] == [], stats
    assert stats["not_found_present"] == [], stats
    assert ok_before > 0 and unavailable_while_down > 0, stats
    assert stats["ok_after_restart"] >= 10, stats
    # A Plan never waited long for the dead store.
    assert stats["slowest_plan"] < 5.0 * SLOW, stats
    for s in (a, b):
        log = s.log()
        assert log.count("is down:") == 1, log  # Logged once per outage.
        assert "is back after" in log
        assert metric(s, "packd_plan_store_outages_total") == 1
        assert metric(s, f'packd_plan_store_up{{store="{redis.where}"}}') == 1
    assert metric(a, 'packd_plan_store_writes_total{result="skipped"}') >= 1
    errors = sum(metric(a, f'packd_plan_store_errors_total{{op="{op}"}}') for op in ("write", "read", "probe"))
    assert errors >= 1


def test_stopped_store_times_out_fast(redis, replicas):
    env = {"PACKD_PLAN_STORE_COMMAND_TIMEOUT_MS": "300", "PACKD_PLAN_STORE_PROBE_INTERVAL_MS": "60000"}
    a = replicas.start(redis.url, env=env)
    b = replicas.start(redis.url, env=env)
    first = plan(a, lengths_for(1), dp=4)
    os.kill(redis.proc.pid, signal.SIGSTOP)  # Accepts connections, answers nothing.
    try:
        t0 = time.monotonic()
        second = plan(a, lengths_for(2), dp=4)
        assert time.monotonic() - t0 < 3.0 * SLOW
        assert len(second.ranks) == 4
        with b.channel() as ch:
            t0 = time.monotonic()
            with pytest.raises(grpc.RpcError) as e:
                rank_bytes(ch, first.plan_id, 0)
            assert time.monotonic() - t0 < 3.0 * SLOW
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert redis.where in e.value.details()
        assert first.plan_id in e.value.details()
        # Several reconnection attempts while it stays stopped: a connect
        # that the kernel accepts does not count as the store being back.
        time.sleep(1.5)
    finally:
        os.kill(redis.proc.pid, signal.SIGCONT)
    with b.channel() as ch:
        assert until_ok(lambda: rank_bytes(ch, first.plan_id, 1)) == expected_rank(first, 1)
    for s in (a, b):
        def back(s=s):
            assert s.log().count("is back after") == 1, s.log()

        h.eventually(back, timeout=5 * SLOW)
        assert s.log().count("is down:") == 1, s.log()


def _xxh3():
    name = ctypes.util.find_library("xxhash") or "libxxhash.so.0"
    lib = ctypes.CDLL(name)
    lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.XXH3_64bits.restype = ctypes.c_uint64
    return lambda b: lib.XXH3_64bits(b, len(b))


def envelope(plan_id: str, version: str, rank: int, nranks: int, payload: bytes) -> bytes:
    """The value layout of server/store_format.h, made independently here."""
    pid, ver = plan_id.encode(), version.encode()
    head = b"PKRP" + struct.pack("<BBHIIQ", 1, len(ver), len(pid), rank, nranks, len(payload))
    body = pid + ver + payload
    return head + struct.pack("<Q", _xxh3()(head + body)) + body


def test_damaged_and_foreign_values_are_refused(redis, replicas):
    a = replicas.start(redis.url)
    b = replicas.start(redis.url)
    victim = plan(a, lengths_for(10), dp=4)
    other = plan(a, lengths_for(11), dp=4)
    key = f"packd:{victim.plan_id}"
    good0 = redis.cmd("HGET", key, "0")

    def refused(rank=1, must=()):
        with b.channel() as ch:
            with pytest.raises(grpc.RpcError) as e:
                rank_bytes(ch, victim.plan_id, rank)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value.details()
        assert redis.where in e.value.details() and key in e.value.details(), e.value.details()
        for m in must:
            assert m in e.value.details(), e.value.details()

    # Garbage in one rank refuses the whole plan (all ranks), not just it.
    redis.cmd("HSET", key, "0", b"garbage written by hand")
    refused(1, ("field \"0\"", "damaged"))
    # One flipped bit in the payload.
    flipped = bytearray(good0)
    flipped[-1] ^= 0x01
    redis.cmd("HSET", key, "0", bytes(flipped))
    refused(0, ("checksum",))
    # Cut short.
    redis.cmd("HSET", key, "0", good0[:-3])
    refused(2)
    # A valid value of another plan copied in: foreign.
    redis.cmd("HSET", key, "0", redis.cmd("HGET", f"packd:{other.plan_id}", "0"))
    refused(3, ("names plan",))
    # A rank missing: a partial plan is never served.
    redis.cmd("HSET", key, "0", good0)
    good3 = redis.cmd("HGET", key, "3")
    redis.cmd("HDEL", key, "3")
    refused(0, ("ranks",))
    redis.cmd("HSET", key, "3", good3)
    # A well-formed value from another packd version: not ours to serve.
    payload = victim.ranks[2]
    want = pb.RankPlan()
    want.CopyFrom(payload)
    want.plan_id = victim.plan_id
    foreign = envelope(victim.plan_id, "9.9.9", 2, 4, want.SerializeToString())
    redis.cmd("HSET", key, "2", foreign)
    refused(0, ("packd 9.9.9",))
    # The same bytes under this version are accepted: the forging is right.
    this_version = subprocess.run([str(h.PACKD), "--version"], capture_output=True, text=True).stdout.split()[1]
    redis.cmd("HSET", key, "2", envelope(victim.plan_id, this_version, 2, 4, want.SerializeToString()))
    with b.channel() as ch:
        assert rank_bytes(ch, victim.plan_id, 2) == expected_rank(victim, 2)
    # The key replaced by a plain string (WRONGTYPE).
    other_key = f"packd:{other.plan_id}"
    redis.cmd("SET", other_key, "not a hash")
    with b.channel() as ch:
        with pytest.raises(grpc.RpcError) as e:
            rank_bytes(ch, other.plan_id, 0)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE and other_key in e.value.details()
    assert metric(b, "packd_plan_store_corrupt_total") >= 6
    assert metric(b, 'packd_plan_store_reads_total{result="corrupt"}') >= 6
    assert "is refused" in b.log()
    # Planning the same request again rewrites the plan.
    again = plan(a, lengths_for(11), dp=4)
    assert again.plan_id == other.plan_id
    with b.channel() as ch:
        assert rank_bytes(ch, other.plan_id, 0) == expected_rank(other, 0)


def test_plans_expire_with_the_ttl(redis, replicas):
    ttl = 1 if SLOW == 1 else 5
    a = replicas.start(redis.url, "--cache-ttl", str(ttl))
    b = replicas.start(redis.url, "--cache-ttl", str(ttl))
    resp = plan(a, lengths_for(20), dp=2)
    assert 0 < redis.cmd("PTTL", f"packd:{resp.plan_id}") <= ttl * 1000
    with b.channel() as ch:
        assert rank_bytes(ch, resp.plan_id, 0) == expected_rank(resp, 0)
        time.sleep(ttl + 0.3)
        # Gone from the store, and B's copy expired with it.
        assert redis.cmd("EXISTS", f"packd:{resp.plan_id}") == 0
        for rank in (0, 1):
            with pytest.raises(grpc.RpcError) as e:
                rank_bytes(ch, resp.plan_id, rank)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
            assert "has no such plan" in e.value.details()


@pytest.mark.parametrize(
    "args, must",
    [
        (("--plan-store", "rediss://127.0.0.1:6380"), "TLS"),
        (("--plan-store", "http://127.0.0.1:6379"), "not a redis:// URL"),
        (("--plan-store", "redis://127.0.0.1:99999"), "port"),
        (("--plan-store", "redis://127.0.0.1:6379/db1"), "database"),
        (("--plan-store", "redis://:hunter2@127.0.0.1:6379/x"), "database"),
        (("--plan-store", "redis://h:1", "--plan-store-prefix", "with space"), "--plan-store-prefix"),
        (("--plan-store-password-file", "/nonexistent"), "--plan-store is not"),
        (("--plan-store", "redis://h:1", "--plan-store-password-file", "/nonexistent/pw"), "/nonexistent/pw"),
        (("--plan-store", "redis://:pw@h:1", "--plan-store-password-file", "/tmp"), "one place"),
    ],
)
def test_bad_settings_refuse_to_start(args, must):
    out = subprocess.run([str(h.PACKD), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", *args],
                         capture_output=True, text=True, timeout=20)
    assert out.returncode == 2, out
    assert must in out.stderr, out.stderr
    assert "hunter2" not in out.stderr


def test_bad_tunable_refuses_to_start(redis):
    env = dict(os.environ, PACKD_PLAN_STORE_COMMAND_TIMEOUT_MS="0")
    out = subprocess.run([str(h.PACKD), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                          "--plan-store", redis.url], capture_output=True, text=True, timeout=20, env=env)
    assert out.returncode == 2 and "PACKD_PLAN_STORE_COMMAND_TIMEOUT_MS" in out.stderr, out


def test_password_file_and_auth(replicas, tmp_path):
    r = Redis("--requirepass", "s3cret-Pw")
    try:
        good = tmp_path / "pw"
        good.write_text("s3cret-Pw\n")
        bad = tmp_path / "bad"
        bad.write_text("wrong-Pw")
        a = replicas.start(r.url, "--plan-store-password-file", str(good))
        b = replicas.start(r.url, env={"PACKD_PLAN_STORE_PASSWORD_FILE": str(good)})
        # A wrong password fails start-up, naming the store and the way out;
        # no password at all for a store that wants one, too.
        for args in (("--plan-store-password-file", str(bad)), ()):
            proc, log_path = h.launch("--plan-store", r.url, *args)
            assert proc.wait(timeout=15) == 2
            text = open(log_path).read()
            os.unlink(log_path)
            assert "refused authentication" in text and r.where in text, text
            assert "--plan-store-optional" in text and "wrong-Pw" not in text, text
        # With --plan-store-optional it serves, and says why it cannot share.
        c = replicas.start(r.url, "--plan-store-password-file", str(bad), "--plan-store-optional")
        assert "refused authentication" in c.log()
        resp = plan(a, lengths_for(30), dp=2)
        with b.channel() as ch:
            assert rank_bytes(ch, resp.plan_id, 1) == expected_rank(resp, 1)
        with c.channel() as ch:
            with pytest.raises(grpc.RpcError) as e:
                rank_bytes(ch, resp.plan_id, 1)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "AUTH" in e.value.details(), e.value.details()
        for s in (a, b, c):
            assert "s3cret" not in s.log() and "wrong-Pw" not in s.log()
            assert "s3cret" not in s.metrics()
    finally:
        r.close()


def test_store_down_at_start_then_up(replicas):
    port = _free_port()
    url = f"redis://127.0.0.1:{port}"
    a = replicas.start(url)
    assert "is down" in a.log()
    resp = plan(a, lengths_for(40), dp=2)  # Planned and answered all the same.
    with a.channel() as ch:
        assert rank_bytes(ch, resp.plan_id, 0) == expected_rank(resp, 0)  # Local cache.
        with pytest.raises(grpc.RpcError) as e:
            rank_bytes(ch, "f" * 32, 0)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert f"redis://127.0.0.1:{port}/0" in e.value.details()
    assert metric(a, f'packd_plan_store_up{{store="redis://127.0.0.1:{port}/0"}}') == 0
    r = Redis(port=port)
    try:
        def up():
            assert metric(a, f'packd_plan_store_up{{store="{r.where}"}}') == 1

        h.eventually(up, timeout=10)
        assert "is back after" in a.log()
    finally:
        r.close()


def test_python_client_and_packctl_report_unavailable(redis, replicas):
    sys.path.insert(0, str(h.REPO / "client" / "python"))
    import packd

    a = replicas.start(redis.url)
    b = replicas.start(redis.url)
    resp = plan(a, lengths_for(50), dp=2)
    redis.kill()
    with packd.Client(b.addr, retries=1, backoff=0.01) as c:
        with pytest.raises(packd.Unavailable) as e:
            c.rank_plan(resp.plan_id, 1)
    assert redis.where in e.value.message and resp.plan_id in e.value.message
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    out = subprocess.run([str(h.PACKCTL), "rank-plan", "--server", b.addr, "--plan-id", resp.plan_id,
                          "--rank", "1"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1, out
    assert "UNAVAILABLE" in out.stderr and redis.where in out.stderr, out.stderr
    assert out.stdout == ""
