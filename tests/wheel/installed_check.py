"""Checks an installed packd wheel from the inside: run by scripts/check-wheel.sh
in a bare container (Python and numpy, no -dev packages, no network) after
`pip install packd-*.whl`, and once on the build machine for the reference.

    installed_check.py --reference            # prints the reference as JSON
    installed_check.py --expect REFERENCE.json # asserts; exit status 0 = passed

The installed run asserts that:
- packd, libpackd.so and libpackd_gpu.so come from the installed package, and
  the libraries libpackd.so links (libprotobuf-c, libxxhash) from the wheel's
  packd.libs/ folder, not from the system;
- the embedded planner's plan of a seeded 3,000-sequence batch (DP 4) holds
  every sequence exactly once, keeps every micro-batch under the cap, and is
  the very plan the build tree's library makes (plan id and every
  micro-batch's sequences equal the reference's);
- bad input raises packd.InvalidArgument naming the field and the value,
  and an unplaceable sequence raises packd.FailedPrecondition;
- the GPU agent's host backend packs a batch of two ranks under CP 2 as
  packd.layout (the numpy reference) does, on the planned micro-batch.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

import packd
from packd import gpu
from packd import layout as L

MAX_TOKENS = 16384
DP = 4


def lengths():
    """3,000 rollout-like lengths: prompt plus a log-normal response, capped."""
    rng = np.random.default_rng(20261127)
    prompt = rng.integers(16, 512, size=3000)
    response = np.minimum(rng.lognormal(mean=7.0, sigma=1.0, size=3000).astype(np.int64), 8192)
    return (prompt + response).tolist()


def plan_summary(plan):
    """The plan as plain data: its id and every micro-batch's sequences."""
    return {
        "plan_id": plan.plan_id,
        "micro_batches": [
            [[mb.seqs.tolist() for mb in mini.micro_batches] for mini in plan[r].mini_batches] for r in range(plan.dp)
        ],
    }


def reference():
    plan = packd.Client.local().plan(lengths(), dp=DP, max_tokens=MAX_TOKENS)
    return plan_summary(plan)


def loaded_paths():
    """Paths of the shared objects mapped into this process."""
    out = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5].startswith("/"):
                out.add(parts[5])
    return out


def check(expect):
    pkg = Path(packd.__file__).resolve().parent
    assert pkg.parent.name in ("site-packages", "dist-packages"), f"packd imported from {pkg}, not an install"
    client = packd.Client.local()
    n = len(lengths())
    lens = np.asarray(lengths())
    plan = client.plan(lens.tolist(), dp=DP, max_tokens=MAX_TOKENS)

    mapped = loaded_paths()
    packd_so = [p for p in mapped if Path(p).name == "libpackd.so"]
    assert packd_so and all(Path(p).resolve().parent == pkg for p in packd_so), (
        f"libpackd.so mapped from {packd_so}, not from {pkg} ({client!r})"
    )
    for dep in ("libprotobuf-c", "libxxhash"):
        hits = [p for p in mapped if Path(p).name.startswith(dep)]
        assert hits, f"{dep} is not loaded"
        assert all(Path(p).resolve().parent == pkg.parent / "packd.libs" for p in hits), (
            f"{dep} loaded from {hits}, not from the wheel's packd.libs/"
        )

    seen = []
    for r in range(plan.dp):
        for mini in plan[r].mini_batches:
            for mb in mini.micro_batches:
                seqs = mb.seqs.tolist()
                tokens = int(lens[seqs].sum())
                assert tokens <= MAX_TOKENS, f"rank {r}: a micro-batch of {tokens} tokens over the cap {MAX_TOKENS}"
                assert int(mb.cu_seqlens[-1]) == tokens, "cu_seqlens does not end at the micro-batch's tokens"
                seen += seqs
    assert sorted(seen) == list(range(n)), "a sequence is missing from the plan or placed twice"
    got = plan_summary(plan)
    assert got["plan_id"] == expect["plan_id"], f"plan id {got['plan_id']} != the build tree's {expect['plan_id']}"
    assert got["micro_batches"] == expect["micro_batches"], "the installed library planned differently"

    try:
        client.plan([100, -5, 30], dp=1, max_tokens=1000)
        raise AssertionError("a negative length was planned")
    except packd.InvalidArgument as exc:
        assert "lengths[1]" in str(exc) and "-5" in str(exc), f"the error does not name the field: {exc}"
    try:
        client.plan([100, 5000], dp=1, max_tokens=1000)
        raise AssertionError("a sequence over the cap was planned")
    except packd.FailedPrecondition as exc:
        assert "lengths[1]" in str(exc), f"the error does not name the sequence: {exc}"

    gpath = gpu.library_path().resolve()
    assert gpath.parent == pkg, f"libpackd_gpu.so loaded from {gpath}, not from {pkg}"
    flags = gpu.build_flags()
    assert flags["cuda"] is False and gpu.available() is False, f"the wheel's GPU library is the host backend: {flags}"
    # The first micro-batch of rank 0 as a padded batch (one row per
    # sequence, 3 slots of left padding), packed for two CP ranks (zigzag,
    # slots aligned to 2 x CP) by the host backend and by the numpy reference.
    mb = plan[0].mini_batches[0].micro_batches[0]
    rows = lens[mb.seqs]
    mask = np.zeros((rows.size, int(rows.max()) + 3), dtype=bool)
    for i, n_i in enumerate(rows):
        mask[i, 3 : 3 + n_i] = True
    x = np.arange(mask.size, dtype=np.int64).reshape(mask.shape)
    start, length = gpu.spans(mask)
    assert start.tolist() == [3] * rows.size and length.tolist() == rows.tolist()
    micro = L.make_micro(length, align=4)
    for rank in range(2):
        host = gpu.pack(x, start, length, micro.seqs, micro.cu_seqlens_padded, cp=2, cp_rank=rank, fill=-1)
        ref = L.pack(x, mask, micro, cp=2, cp_rank=rank, fill=-1)
        assert host.shape == ref.shape and (host == ref).all(), f"CP rank {rank}: host backend != packd.layout"
        assert int((host >= 0).sum()) > 0

    import google.protobuf

    print(
        f"installed_check: passed ({n} sequences, DP {DP}, plan {got['plan_id']}, "
        f"{sum(len(m) for r in got['micro_batches'] for m in r)} micro-batches; "
        f"Python {sys.version.split()[0]}, numpy {np.__version__}, protobuf {google.protobuf.__version__}; "
        f"packd at {pkg})"
    )


def main(argv):
    if argv[1:] == ["--reference"]:
        print(json.dumps(reference()))
        return 0
    if len(argv) == 3 and argv[1] == "--expect":
        # The installed package's own library, whatever the environment says.
        for var in ("PACKD_LIB", "PACKD_GPU_LIB", "PACKD_BUILD_DIR"):
            os.environ.pop(var, None)
        check(json.loads(Path(argv[2]).read_text()))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
