"""Keyed plan ids of the real packd binary: knowing a batch is not enough to
name its plan.

A server's plan id is HMAC-SHA256 over the request's canonical bytes under a
key derived from its secret (SHA-256 of --plan-id-secret-file's contents, or
of random bytes drawn at start-up), cut to 128 bits in lowercase hex. These
tests recompute that id with Python's hmac and hashlib, and the old unkeyed
id (XXH3-128 of the same bytes, from libxxhash through ctypes) to show that
the server no longer hands it out; the embedded planner (Client.local()),
which has no server to be asked for plans by id, still uses the unkeyed one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import hmac
import os
import sys

import pytest

import server_harness as h

sys.path.insert(0, str(h.REPO / "client" / "python"))

import packd  # noqa: E402

pb = h.stubs().packd_pb2


def request(**kw):
    # Every sub-message non-empty and no job: then Python's serialization is
    # the canonical form the server MACs (fields in number order, packed
    # repeated scalars, defaults left out).
    req = h.plan_request([900, 40, 2500, 77, 1300, 610], dp=2, max_tokens=4096, seed=3, **kw)
    req.cost.quadratic = 1e-4
    req.layout.pad_multiple = 8
    return req


def unkeyed_id(data: bytes) -> str:
    """The old plan id: XXH3-128 of the canonical bytes, big-endian hex."""

    class H128(ctypes.Structure):
        _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]

    lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    lib.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.XXH3_128bits.restype = H128
    v = lib.XXH3_128bits(data, len(data))
    return f"{v.high64:016x}{v.low64:016x}"


def keyed_id(secret: bytes, data: bytes) -> str:
    key = hashlib.sha256(secret.rstrip(b" \t\r\n")).digest()
    return hmac.new(key, data, hashlib.sha256).hexdigest()[:32]


@pytest.fixture
def servers():
    started = []

    def start(*args):
        s = h.start("--drain-delay", "0", *args)
        started.append(s)
        return s

    yield start
    for s in started:
        assert s.stop() == 0, s.log()


def plan_id(srv, req) -> str:
    with srv.channel() as ch:
        resp = h.stubs().packd_pb2_grpc.PlannerStub(ch).Plan(req, timeout=30)
    assert len(resp.plan_id) == 32 and all(c in "0123456789abcdef" for c in resp.plan_id)
    assert all(r.plan_id == resp.plan_id for r in resp.ranks)
    return resp.plan_id


def secret_file(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_same_server_same_request_same_id(servers):
    srv = servers()
    assert "plan_id_key=random" in srv.log()
    req = request()
    first = plan_id(srv, req)
    assert plan_id(srv, req) == first
    # The job is a label, not an input of the plan: same id.
    req.job = "another job"
    assert plan_id(srv, req) == first
    other = request()
    other.seed = 4
    assert plan_id(srv, other) != first


def test_random_secrets_differ_and_the_id_is_not_the_unkeyed_hash(servers):
    a, b = servers(), servers()
    req = request()
    ida, idb = plan_id(a, req), plan_id(b, req)
    assert ida != idb
    old = unkeyed_id(req.SerializeToString())
    assert old not in (ida, idb)
    # The embedded planner still names plans by the unkeyed id, and plans.
    with packd.Client.local() as local:
        plan = local.plan_request(req)
        assert plan.plan_id == old
        assert local.rank_plan(plan.plan_id, 1).dp_rank == 1


def test_shared_secret_agrees_and_is_hmac_sha256(servers, tmp_path):
    secret = os.urandom(24).hex()
    path = secret_file(tmp_path, "secret", secret + "\n")
    a = servers("--plan-id-secret-file", path)
    b = servers("--plan-id-secret-file", path)
    assert "plan_id_key=file" in a.log()
    req = request()
    ida = plan_id(a, req)
    assert plan_id(b, req) == ida
    assert ida == keyed_id(secret.encode(), req.SerializeToString())
    # A server restarted with the same secret names the plan the same way.
    assert a.stop() == 0
    assert plan_id(servers("--plan-id-secret-file", path), req) == ida

    other = secret_file(tmp_path, "other", os.urandom(24).hex())
    c = servers("--plan-id-secret-file", other)
    assert plan_id(c, req) != ida


def test_secret_from_the_variable(tmp_path):
    secret = "a-shared-secret-of-the-replicas"
    path = secret_file(tmp_path, "secret", secret)
    srv = h.start("--drain-delay", "0", env={"PACKD_PLAN_ID_SECRET_FILE": path})
    try:
        req = request()
        assert plan_id(srv, req) == keyed_id(secret.encode(), req.SerializeToString())
    finally:
        assert srv.stop() == 0, srv.log()
