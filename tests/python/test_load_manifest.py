"""packd.load_manifest reads packctl's input files (docs/packctl.md,
"Input") into Client.plan's keywords: every manifest and lengths file here is
planned both ways, by packctl plan --local from the file and by
Client.local().plan(**load_manifest(file)), and the plans must be the same
(plan id and every field but the measured planTimeUs). Bad manifests raise
InvalidArgument naming the file and the field, where packctl exits 2."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import packd  # noqa: E402
from codec_helpers import WORKLOADS, run_packctl  # noqa: E402

MANIFESTS = {
    "docs-example": {
        "job": "grpo-step-7", "lengths": [812, 4096, 133, 2900], "lossTokens": [700, 3900, 100, 2500],
        "groups": [1, 1, 2, 2], "parallel": {"dp": 2, "cp": 2, "cpAlgo": "zigzag"},
        "batching": {"maxTokens": "8192", "miniBatches": 1, "keepGroups": True}, "seed": 7,
    },
    "proto-names-and-enums": {
        "lengths": [100, 900, 50, 950, 400, 600, 3000, 12, 0, 77],
        "parallel": {"dp": 2, "tp": 2, "sequence_parallel": True},
        "batching": {"max_tokens": 4096, "mode": "MODE_PADDED", "round": "16", "dp_balance": 3,
                     "micro_algo": "ffd", "order": "heavy-middle", "equal_count": "yes"},
        "layout": {"pad_multiple": 8, "total_multiple": None},
        "seed": "18446744073709551615",
    },
    "cost-and-groups-on-rank": {
        "lengths": [4000, 3000, 2000, 1000, 500, 500, 6000, 7000],
        "groups": ["10", "10", "20", "20", "30", "30", "40", "40"],
        "parallel": {"dp": 2},
        "batching": {"maxTokens": 8192, "groupsOnRank": "on", "maxSeqs": 3},
        "cost": {"linear": 4e-08, "quadratic": 1.5e-12, "perSequence": 2e-05, "perMicroBatch": 0.002},
        "job": None,
    },
}


def packctl_json(path: Path) -> dict:
    res = run_packctl("plan", "--local", str(path), "--format", "json")
    assert res.returncode == 0, res.stderr.decode()
    doc = json.loads(res.stdout)
    doc["stats"].pop("planTimeUs", None)
    return doc


def python_json(path: Path) -> dict:
    plan = packd.Client.local().plan(**packd.load_manifest(path))
    doc = json.loads(plan.to_json())
    doc["stats"].pop("planTimeUs", None)
    return doc


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_manifest_plans_as_packctl_plans_it(tmp_path, name):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(MANIFESTS[name], indent=1))
    a, b = packctl_json(path), python_json(path)
    assert a == b
    assert a["planId"]


def test_lengths_files_plan_as_packctl_plans_them(tmp_path):
    # A two-column trace (loss tokens), a one-column file, and a mixed one
    # with comments and blank lines (a TOTAL line counts all its tokens).
    conv = tmp_path / "conv.txt"
    conv.write_text("".join((WORKLOADS / "azure_conv_2023.txt").read_text().splitlines(True)[:300]))
    mixed = tmp_path / "mixed.txt"
    mixed.write_text("# a comment\n100\n\n200 50   # prompt and response\n  7\t3\n0\n")
    for path in (conv, mixed):
        kwargs = packd.load_manifest(path)
        assert "dp" not in kwargs
        res = run_packctl("plan", "--local", str(path), "--dp", "4", "--max-tokens", "16384", "--format", "json")
        assert res.returncode == 0, res.stderr.decode()
        a = json.loads(res.stdout)
        b = json.loads(packd.Client.local().plan(**kwargs, dp=4, max_tokens=16384).to_json())
        a["stats"].pop("planTimeUs", None)
        b["stats"].pop("planTimeUs", None)
        assert a == b, path
    assert packd.load_manifest(mixed) == {"lengths": [100, 250, 10, 0], "loss_tokens": [100, 50, 3, 0]}


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"lengths": [1, 2], "parallel": {"dp": 2, "dpp": 1}}', "unknown field 'parallel.dpp'"),
        ('{"lengths": [1, 2], "lenghts": [3]}', "unknown field 'lenghts'"),
        ('{"lengths": [1, 2], "lengths": [3]}', "duplicate key 'lengths'"),
        ('{"lengths": [1, -2]}', "manifest: lengths[1]: must be in [0, 4294967295], got -2"),
        ('{"lengths": [1, "2x"]}', "manifest: lengths[1]: expected an unsigned decimal integer, got '2x'"),
        ('{"lengths": [4294967296]}', "manifest: lengths[0]: must be in [0, 4294967295], got 4294967296"),
        ('{"lengths": [1], "batching": {"mode": "wide"}}', "manifest: batching.mode: unknown value 'wide'"),
        ('{"lengths": [1], "batching": {"shuffle": "maybe"}}', "manifest: batching.shuffle: expected a bool"),
        ('{"lengths": [1], "cost": {"linear": "NaN"}}', "manifest: cost.linear: expected a finite number, got 'NaN'"),
        ('{"lengths": [1], "parallel": [2]}', "manifest: parallel: expected an object"),
        ('{"lengths": [1], "job": 7}', "manifest: job: expected a string, got 7"),
        ('{"lossTokens": [1]}', 'the manifest has no "lengths"'),
        ('{"lengths": [1],}', "invalid JSON manifest"),
        ("100\n2x\n", ":2: expected an unsigned decimal integer, got '2x'"),
        ("1 2 3\n", ":1: expected TOTAL or PROMPT RESPONSE, got '1 2 3'"),
        ("# nothing\n\n", "no lengths"),
    ],
)
def test_bad_input_names_the_file_and_the_field(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(packd.InvalidArgument) as err:
        packd.load_manifest(path)
    assert str(path) in err.value.message
    assert message in err.value.message
    # packctl refuses the same file as a usage error.
    res = run_packctl("plan", "--local", str(path), "--dp", "1")
    assert res.returncode == 2, (text, res.stdout, res.stderr)


def test_a_missing_file_names_it(tmp_path):
    with pytest.raises(packd.InvalidArgument, match="nope.json: cannot read"):
        packd.load_manifest(tmp_path / "nope.json")
