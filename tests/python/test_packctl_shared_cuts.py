"""`packctl plan --local ... --mode padded --dp-balance sorted_stride
--micro-algo shared_cuts`: ROLL's shape (sorted stride, one boundary list
shared by every rank) with the boundaries cut by dynamic programming
(server/planner/compat_roll_cuts.c), checked as a black box against
`--micro-algo next_fit` (ROLL's own greedy cuts) on the same request.
"""

from __future__ import annotations

import json
import random

import pytest
from google.protobuf import json_format

from codec_helpers import WORKLOADS, pb2, run_packctl

ROLL = ["--mode", "padded", "--dp-balance", "sorted_stride", "--order", "original"]


def plan(tmp_path, *args) -> dict:
    """The parsed JSON of a local plan, checked to be MessageToJson of the
    response bytes packctl saved."""
    resp_path = tmp_path / "resp.bin"
    res = run_packctl("plan", "--local", "--format", "json", "--save-response", resp_path, *args)
    assert res.returncode == 0, res.stderr.decode()
    resp = pb2().PlanResponse()
    resp.ParseFromString(resp_path.read_bytes())
    assert res.stdout.decode() == json_format.MessageToJson(resp) + "\n"
    return json.loads(res.stdout)


def shape(doc: dict, lengths: list[int]) -> list[tuple[list[list[int]], list[int]]]:
    """Per mini-batch: the shared boundaries ([start, end) rows of every
    rank, checked equal on all ranks) and the shared widths (the widest
    micro-batch j over the ranks). Also checks lock-step rows, the cap and
    ascending lengths along each rank."""
    out = []
    ranks = doc["ranks"]
    for mini in range(len(ranks[0]["miniBatches"])):
        bounds, widths = None, None
        for r in ranks:
            mbs = r["miniBatches"][mini]["microBatches"]
            b, end = [], 0
            for mb in mbs:
                b.append([end, end + len(mb["seqs"])])
                end += len(mb["seqs"])
            seqs = [s for mb in mbs for s in mb["seqs"]]
            assert [lengths[s] for s in seqs] == sorted(lengths[s] for s in seqs)
            w = [mb["paddedWidth"] for mb in mbs]
            if bounds is None:
                bounds, widths = b, w
            assert b == bounds
            widths = [max(x, y) for x, y in zip(widths, w)]
        out.append((bounds, widths))
    return out


def test_roll_worked_example(tmp_path):
    """ROLL's example: lengths [2,4,7,6,3,4], dp 2, max tokens 20, round 2:
    boundaries [[0,2],[2,3]] and widths [4,8], as ROLL's next-fit gives."""
    path = tmp_path / "roll.txt"
    path.write_text("2\n4\n7\n6\n3\n4\n")
    args = [path, "--dp", 2, "--max-tokens", 20, "--round", 2, *ROLL]
    doc = plan(tmp_path, *args, "--micro-algo", "shared_cuts")
    assert shape(doc, [2, 4, 7, 6, 3, 4]) == [([[0, 2], [2, 3]], [4, 8])]
    assert doc["stats"]["microBatchesPerRank"] == 2
    nf = plan(tmp_path, *args, "--micro-algo", "next_fit")
    assert shape(nf, [2, 4, 7, 6, 3, 4]) == shape(doc, [2, 4, 7, 6, 3, 4])
    # dp_balance auto means the sorted stride with shared_cuts.
    auto = plan(tmp_path, path, "--dp", 2, "--max-tokens", 20, "--round", 2, "--mode", "padded",
                "--order", "original", "--micro-algo", "shared-cuts")
    assert [r["miniBatches"] for r in auto["ranks"]] == [r["miniBatches"] for r in doc["ranks"]]


def read_lengths(path, n, cap, seed):
    rng = random.Random(seed)
    rows = [ln.split() for ln in path.read_text().splitlines() if ln.strip()]
    lengths = [sum(int(x) for x in r) for r in rows]
    lengths = [x for x in lengths if 0 < x <= cap]
    return [rng.choice(lengths) for _ in range(n)]


@pytest.mark.parametrize("extra", [[], ["--max-seqs", 6], ["--min-micro-batches", 11],
                                   ["--pp", 4, "--vpp", 2], ["--mini-batches", 2]],
                         ids=lambda e: " ".join(map(str, e)) or "plain")
def test_never_worse_than_next_fit(tmp_path, extra):
    """Property over random batches: the same count as next_fit (never
    more), never a higher step cost, the shape ROLL's workers read, and no
    cap violation."""
    rng = random.Random(17)
    for it in range(6):
        dp = rng.choice([1, 2, 4, 8])
        n = 2 * dp * rng.randrange(4, 32)  # mini-batches of whole slots
        if it % 2:
            lengths = read_lengths(WORKLOADS / "azure_conv_2023.txt", n, 8192, it)
        else:
            lengths = [rng.randrange(128, 8193) for _ in range(n)]
        path = tmp_path / "l.txt"
        path.write_text("".join(f"{x}\n" for x in lengths))
        args = [path, "--dp", dp, "--max-tokens", 8192, "--round", 128, *ROLL, *extra]
        nf = plan(tmp_path, *args, "--micro-algo", "next_fit")
        sc = plan(tmp_path, *args, "--micro-algo", "shared_cuts")
        assert sc["stats"].get("capViolations", 0) == 0
        assert sc["stats"]["microBatchesPerRank"] <= nf["stats"]["microBatchesPerRank"]
        if sc["stats"]["microBatchesPerRank"] == nf["stats"]["microBatchesPerRank"]:
            assert sc["stats"]["stepCost"] <= nf["stats"]["stepCost"] * (1 + 1e-12)
        for bounds, widths in shape(sc, lengths):
            assert all((b - a) * w <= 8192 for (a, b), w in zip(bounds, widths))
            assert bounds[0][0] == 0 and all(x[1] == y[0] for x, y in zip(bounds, bounds[1:]))


def test_errors(tmp_path):
    path = tmp_path / "l.txt"
    path.write_text("".join(f"{x}\n" for x in range(1, 9)))
    res = run_packctl("plan", "--local", path, "--dp", 2, "--micro-algo", "shared_cuts")
    assert res.returncode == 1 and b"batching.mode: packed" in res.stderr
    res = run_packctl("plan", "--local", path, "--dp", 2, "--mode", "padded", "--dp-balance",
                      "kk", "--micro-algo", "shared_cuts")
    assert res.returncode == 1 and b"batching.dp_balance: kk" in res.stderr
    res = run_packctl("plan", "--local", path, "--dp", 2, *ROLL, "--micro-algo", "shared_cuts",
                      "--min-micro-batches", 5)
    assert res.returncode == 1 and b"failed precondition" in res.stderr
