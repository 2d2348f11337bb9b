"""The codec's wire bytes against Python's official protobuf.

- PlanRequest, Python -> C: bytes serialized by Python are decoded by
  protobuf-c (packctl --request-file) and packed again byte for byte.
- PlanRequest, C -> Python: bytes packed by protobuf-c from packctl flags
  parse in Python and serialize back to the same bytes.
- PlanResponse, C -> Python: pk_plan_bytes (libpackd.so) output parses in
  Python and serializes back to the same bytes.
- Plan ids: canonical (field order, packing, unknown fields, empty
  sub-messages and the job label do not matter; every planning field does).
"""

from __future__ import annotations

import random

import pytest

from codec_helpers import field_bytes, pb2, plan_bytes, run_packctl, varint


def random_request(rng: random.Random, valid: bool = False):
    """A random PlanRequest. valid=True keeps it plannable (lengths under
    the cap, counts that can be met); otherwise any wire-legal value."""
    pb = pb2()
    r = pb.PlanRequest()
    if valid:
        dp = rng.randrange(1, 9)
        cap = rng.choice([2048, 4096, 8192])
        n = dp * rng.randrange(4, 40)
        r.lengths.extend(rng.randrange(1, cap // 2) for _ in range(n))
        if rng.random() < 0.5:
            r.loss_tokens.extend(rng.randrange(0, x + 1) for x in r.lengths)
        if rng.random() < 0.3:
            r.groups.extend(rng.randrange(0, n // 2 + 1) for _ in range(n))
        r.parallel.dp = dp
        if rng.random() < 0.5:
            r.parallel.cp = 2
        if rng.random() < 0.3:
            r.parallel.tp = 2
        r.batching.max_tokens = cap
        r.batching.mini_batches = rng.choice([0, 1, 2])
        r.batching.shuffle = rng.random() < 0.5
        r.batching.mode = rng.choice([0, 1])
        if rng.random() < 0.5:
            r.cost.linear = 1.0
            r.cost.quadratic = rng.choice([0.0, 1 / 8192])
        r.seed = rng.randrange(0, 2**64)
        if rng.random() < 0.5:
            r.job = "job-%d" % rng.randrange(1000)
        return r
    n = rng.randrange(0, 100)
    r.lengths.extend(rng.randrange(0, 2**32) for _ in range(n))
    if rng.random() < 0.5:
        r.loss_tokens.extend(rng.randrange(0, 2**32) for _ in range(n))
    if rng.random() < 0.5:
        r.groups.extend(rng.randrange(0, 2**64) for _ in range(n))
    if rng.random() < 0.5:
        r.job = rng.choice(["", "a", "job \u00e9\u4e2d \U0001f600", "x" * 300])
    for sub, fields in (
        ("parallel", ["dp", "tp", "cp", "pp", "vpp", "num_heads", "microbatch_group"]),
        ("batching", ["mini_batches", "max_seqs", "micro_batch_size", "min_micro_batches",
                      "round"]),
        ("layout", ["align", "pad_multiple", "total_multiple"]),
    ):
        if rng.random() < 0.25:
            continue
        msg = getattr(r, sub)
        msg.SetInParent()
        for f in fields:
            if rng.random() < 0.7:
                setattr(msg, f, rng.randrange(0, 2**32))
    if r.HasField("parallel"):
        r.parallel.cp_algo = rng.randrange(0, 2)
        r.parallel.sequence_parallel = rng.random() < 0.5
    if r.HasField("batching"):
        b = r.batching
        b.max_tokens = rng.randrange(0, 2**64)
        b.shuffle = rng.random() < 0.5
        b.equal_count = rng.random() < 0.5
        b.keep_groups = rng.random() < 0.5
        b.groups_on_rank = rng.random() < 0.5
        b.dp_balance = rng.randrange(0, 7)
        b.mode = rng.randrange(0, 3)
        b.micro_algo = rng.randrange(0, 6)
        b.order = rng.randrange(0, 3)
    if rng.random() < 0.75:
        r.cost.linear = rng.choice([0.0, 1.0, rng.uniform(0, 1e6), rng.uniform(-1, 1)])
        r.cost.quadratic = rng.choice([0.0, 1 / 24576, rng.uniform(0, 1e-3)])
        r.cost.per_sequence = rng.choice([0.0, rng.uniform(0, 1e4), rng.uniform(-1, 1)])
        r.cost.per_micro_batch = rng.choice([0.0, rng.uniform(0, 1e4)])
    if rng.random() < 0.5:
        r.layout.fixed_shape = True
    r.seed = rng.choice([0, rng.randrange(0, 2**64)])
    return r


def c_round_trip(tmp_path, data: bytes) -> bytes:
    """protobuf-c decode + pack of request bytes, through packctl."""
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    src.write_bytes(data)
    res = run_packctl("plan", "--dry-run", "--request-file", src, "--save-request", dst)
    assert res.returncode == 0, res.stderr.decode()
    return dst.read_bytes()


def test_request_python_to_c_bytes_equal(tmp_path):
    rng = random.Random(1)
    for _ in range(60):
        req = random_request(rng)
        data = req.SerializeToString()
        assert c_round_trip(tmp_path, data) == data


def test_request_c_to_python_bytes_equal(tmp_path):
    """Requests built by packctl from random flags parse in Python to the
    flags' values and serialize back to the identical bytes."""
    pb = pb2()
    rng = random.Random(2)
    lengths = tmp_path / "lengths.txt"
    for it in range(30):
        n = rng.randrange(1, 50)
        pairs = [(rng.randrange(0, 5000), rng.randrange(0, 5000)) for _ in range(n)]
        with_pairs = rng.random() < 0.5
        lengths.write_text("".join(f"{p} {q}\n" if with_pairs else f"{p + q}\n" for p, q in pairs))
        dp = rng.randrange(1, 2**32)
        mt = rng.randrange(0, 2**64)
        seed = rng.randrange(0, 2**64)
        lin = rng.uniform(0, 10)
        mode = rng.choice(["packed", "padded", "fixed"])
        out = tmp_path / f"req{it}.bin"
        res = run_packctl("plan", "--dry-run", lengths, "--dp", dp, "--max-tokens", mt,
                          "--seed", seed, "--cost-linear", repr(lin), "--mode", mode,
                          "--job", f"j{it}", "--save-request", out)
        assert res.returncode == 0, res.stderr.decode()
        data = out.read_bytes()
        req = pb.PlanRequest()
        req.ParseFromString(data)
        assert req.SerializeToString() == data
        assert list(req.lengths) == [p + q for p, q in pairs]
        assert list(req.loss_tokens) == ([q for _, q in pairs] if with_pairs else [])
        assert req.parallel.dp == dp
        assert req.batching.max_tokens == mt
        assert req.seed == seed
        assert req.cost.linear == lin
        assert req.batching.mode == pb.Mode.Value("MODE_" + mode.upper())
        assert req.job == f"j{it}"


def test_response_c_to_python_bytes_equal():
    pb = pb2()
    rng = random.Random(3)
    for _ in range(40):
        req = random_request(rng, valid=True)
        rc, data, err = plan_bytes(req.SerializeToString())
        assert rc == 0, err
        resp = pb.PlanResponse()
        resp.ParseFromString(data)
        assert resp.SerializeToString() == data
        # The response is a plan of this request: every index exactly once.
        seen = sorted(s for rank in resp.ranks for mb in rank.mini_batches
                      for mi in mb.micro_batches for s in mi.seqs)
        assert seen == list(range(len(req.lengths)))
        assert len(resp.ranks) == req.parallel.dp
        assert [r.dp_rank for r in resp.ranks] == list(range(req.parallel.dp))
        assert all(r.plan_id == resp.plan_id for r in resp.ranks)


def plan_id(data: bytes) -> str:
    pb = pb2()
    rc, out, err = plan_bytes(data)
    assert rc == 0, err
    resp = pb.PlanResponse()
    resp.ParseFromString(out)
    assert len(resp.plan_id) == 32 and all(c in "0123456789abcdef" for c in resp.plan_id)
    return resp.plan_id


def test_plan_id_stable_and_canonical():
    pb = pb2()
    req = pb.PlanRequest(lengths=[5, 300, 7, 1000], seed=9)
    req.parallel.dp = 2
    req.batching.max_tokens = 4096
    base = plan_id(req.SerializeToString())
    assert plan_id(req.SerializeToString()) == base

    # The job label is not part of the id.
    req.job = "another job"
    assert plan_id(req.SerializeToString()) == base

    # Fields out of order, lengths not packed, unknown fields (top level and
    # inside a sub-message), an empty cost, an explicit default value.
    parallel = field_bytes(1, 0, 2) + field_bytes(77, 2, b"zz")
    batching = field_bytes(6, 0, 4096) + field_bytes(1, 0, 0)
    manual = (
        field_bytes(9, 0, 9)
        + field_bytes(6, 2, batching)
        + field_bytes(200, 0, 123456)
        + b"".join(field_bytes(2, 0, x) for x in [5, 300, 7, 1000])
        + field_bytes(5, 2, parallel)
        + field_bytes(7, 2, b"")
        + field_bytes(1, 2, b"label")
    )
    assert plan_id(manual) == base

    # Every planning field changes the id.
    variants = []
    for mutate in (
        lambda r: r.lengths.append(1),
        lambda r: setattr(r, "seed", 10),
        lambda r: r.loss_tokens.extend([1, 1, 1, 1]),
        lambda r: r.groups.extend([1, 1, 2, 2]),
        lambda r: setattr(r.parallel, "dp", 4),
        lambda r: setattr(r.batching, "max_tokens", 4097),
        lambda r: setattr(r.batching, "mode", 1),
        lambda r: setattr(r.cost, "quadratic", 1e-4),
        lambda r: setattr(r.cost, "per_sequence", 3.0),
        lambda r: setattr(r.cost, "per_micro_batch", 0.5),
        lambda r: setattr(r.layout, "pad_multiple", 8),
    ):
        other = pb.PlanRequest()
        other.CopyFrom(req)
        mutate(other)
        variants.append(plan_id(other.SerializeToString()))
    assert base not in variants
    assert len(set(variants)) == len(variants)


def test_plan_bytes_errors():
    pb = pb2()
    # Malformed bytes: INVALID_ARGUMENT (PK_EDECODE) with a message.
    for junk in (b"\x48\xff", b"\x12\x05\x01", varint((2 << 3) | 7), b"\x00\x01"):
        rc, data, err = plan_bytes(junk)
        assert rc == -5 and data == b"" and "PlanRequest" in err
    # A field error names the field.
    rc, _, err = plan_bytes(pb.PlanRequest(lengths=[1, 2]).SerializeToString())
    assert rc == -1 and "dp" in err
    # A sequence that cannot fit alone: FAILED_PRECONDITION naming the index.
    req = pb.PlanRequest(lengths=[10, 5000, 10])
    req.parallel.dp = 1
    req.batching.max_tokens = 4096
    rc, _, err = plan_bytes(req.SerializeToString())
    assert rc == -2 and "lengths[1]" in err


@pytest.mark.parametrize("code,status", [(0, 0), (-1, 3), (-2, 9), (-3, 8), (-4, 13), (-5, 3),
                                         (-6, 5), (-77, 13)])
def test_status_mapping(code, status):
    from codec_helpers import lib

    assert lib().pk_status_from_error(code) == status
