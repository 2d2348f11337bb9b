"""packctl as a black box: `packctl plan --local` with every input form, every
flag, every output format, and its errors.

The JSON output is compared with google.protobuf.json_format.MessageToJson of
the very response bytes packctl saved (--save-response): the text must be
identical, not only the parsed value.
"""

from __future__ import annotations

import json
import random
import re
import xml.etree.ElementTree as ET

import pytest
from google.protobuf import json_format

from codec_helpers import WORKLOADS, pb2, run_packctl

CONV = WORKLOADS / "azure_conv_2023.txt"


def ok(res) -> str:
    assert res.returncode == 0, res.stderr.decode()
    return res.stdout.decode()


def saved_request(tmp_path, *args, stdin: bytes | None = None):
    """The PlanRequest packctl builds from args (--dry-run --save-request)."""
    out = tmp_path / "req.bin"
    ok(run_packctl("plan", "--dry-run", "--save-request", out, *args, stdin=stdin))
    req = pb2().PlanRequest()
    req.ParseFromString(out.read_bytes())
    return req


def plan_json(tmp_path, *args):
    """(JSON text, parsed PlanResponse of the saved bytes) of a local plan."""
    resp_path = tmp_path / "resp.bin"
    text = ok(run_packctl("plan", "--local", "--format", "json", "--save-response", resp_path,
                          *args))
    resp = pb2().PlanResponse()
    resp.ParseFromString(resp_path.read_bytes())
    return text, resp


def without_time(text: str) -> dict:
    """Parsed JSON output without the planning time (the only figure that
    differs between two runs of the same request)."""
    doc = json.loads(text)
    doc["stats"].pop("planTimeUs", None)
    return doc


@pytest.fixture
def lengths_file(tmp_path):
    path = tmp_path / "lengths.txt"
    path.write_text("# a comment line\n100\n\n900 50   # trailing comment\n50\n950\n  400\t7\n600\n")
    return path


# ---- JSON output ----------------------------------------------------------


CONFIGS = [
    ["--dp", 8, "--max-tokens", 16384],
    ["--dp", 4, "--max-tokens", 8192, "--cp", 2, "--mini-batches", 2, "--shuffle"],
    ["--dp", 4, "--max-tokens", 8192, "--cp", 2, "--cp-algo", "ulysses", "--tp", 2],
    ["--dp", 8, "--max-tokens", 16384, "--mode", "padded", "--round", 64],
    ["--dp", 8, "--max-tokens", 16384, "--dp-balance", "kk_equal", "--micro-algo", "kk_count",
     "--order", "heavy_middle", "--equal-count"],
    ["--dp", 2, "--mode", "fixed", "--micro-batch-size", 8],
    ["--dp", 4, "--max-tokens", 16384, "--pp", 2, "--vpp", 2, "--fixed-shape",
     "--pad-multiple", 16, "--total-multiple", 64, "--cost-quadratic", 0],
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: " ".join(map(str, c)))
def test_json_equals_json_format(tmp_path, config):
    text, resp = plan_json(tmp_path, CONV, "--sample", 256, "--seed", 5, *config)
    want = json_format.MessageToJson(resp)
    assert text == want + "\n"
    assert json.loads(text) == json.loads(want)
    # The mapping's names and types, checked directly.
    doc = json.loads(text)
    assert re.fullmatch(r"[0-9a-f]{32}", doc["planId"])
    mb = doc["ranks"][0]["miniBatches"][0]["microBatches"][0]
    assert {"seqs", "cuSeqlens", "cuSeqlensPadded", "maxSeqlen", "tokens", "paddedTokens",
            "cost", "lossScale"} <= set(mb)
    assert isinstance(mb["tokens"], str) and isinstance(mb["cuSeqlens"][1], int)
    assert isinstance(doc["stats"]["planTimeUs"], str)


def test_json_random_configurations(tmp_path):
    """Property: for random workloads and layouts, packctl's JSON is exactly
    MessageToJson of the same bytes."""
    rng = random.Random(11)
    for it in range(25):
        dp = rng.choice([1, 2, 3, 8])
        n = dp * rng.randrange(2, 40)
        path = tmp_path / f"l{it}.txt"
        path.write_text("".join(f"{rng.randrange(0, 3000)} {rng.randrange(0, 3000)}\n"
                                for _ in range(n)))
        args = [path, "--dp", dp, "--max-tokens", 8192, "--seed", rng.randrange(2**63)]
        args += rng.choice([[], ["--cp", 2], ["--mode", "padded", "--round", 8]])
        args += rng.choice([[], ["--cost-linear", rng.uniform(0.1, 3), "--cost-quadratic",
                                 rng.uniform(0, 1e-3)]])
        text, resp = plan_json(tmp_path, *args)
        assert text == json_format.MessageToJson(resp) + "\n"


def test_json_matches_saved_response_and_plan_rules(tmp_path):
    text, resp = plan_json(tmp_path, CONV, "--sample", 512, "--seed", 1, "--dp", 8,
                           "--max-tokens", 16384)
    doc = json.loads(text)
    seqs = sorted(s for r in doc["ranks"] for m in r["miniBatches"] for mb in m["microBatches"]
                  for s in mb["seqs"])
    assert seqs == list(range(512))
    counts = {len(m["microBatches"]) for r in doc["ranks"] for m in r["miniBatches"]}
    assert len(counts) == 1
    assert doc["stats"].get("capViolations", 0) == 0


# ---- summary and SVG -----------------------------------------------------


def test_summary_is_sane(tmp_path):
    _, resp = plan_json(tmp_path, CONV, "--sample", 512, "--seed", 1, "--dp", 8,
                        "--max-tokens", 16384)
    text = ok(run_packctl("plan", "--local", CONV, "--sample", 512, "--seed", 1, "--dp", 8,
                          "--max-tokens", 16384))
    assert text.startswith(f"plan {resp.plan_id}\n")
    assert "512 sequences, 8 DP ranks" in text
    rows = [line.split() for line in text.splitlines() if re.match(r"^\s+\d+\s+\d+\s+\d+", line)]
    assert [int(r[0]) for r in rows] == list(range(8))
    # Per-rank tokens add up to the plan's tokens; micro counts are equal.
    assert sum(int(r[3]) for r in rows) == resp.stats.tokens
    assert len({r[1] for r in rows}) == 1
    eff = re.search(r"lock-step efficiency\s+([0-9.]+) \(bound ([0-9.]+)\)", text)
    assert abs(float(eff.group(1)) - resp.stats.lockstep_efficiency) < 1e-5
    assert re.search(r"cap violations\s+0\n", text)
    assert re.search(rf"micro-batches per rank\s+{resp.stats.micro_batches_per_rank} "
                     rf"\(lower bound {resp.stats.micro_batches_lower_bound}\)", text)


def test_svg_is_sane(tmp_path):
    _, resp = plan_json(tmp_path, CONV, "--sample", 256, "--seed", 2, "--dp", 4,
                        "--max-tokens", 8192, "--mini-batches", 2, "--mode", "padded")
    out = tmp_path / "plan.svg"
    res = run_packctl("plan", "--local", CONV, "--sample", 256, "--seed", 2, "--dp", 4,
                      "--max-tokens", 8192, "--mini-batches", 2, "--mode", "padded",
                      "--format", "svg", "--out", out)
    assert res.returncode == 0 and res.stdout == b""
    root = ET.parse(out).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == ns + "svg"
    text = "".join(root.itertext())
    assert resp.plan_id in text and "padding" in text
    # One bar (a group with a tooltip) per micro-batch of every rank.
    bars = [g for g in root.iter(ns + "g") if g.find(ns + "title") is not None]
    micros = sum(len(m.micro_batches) for r in resp.ranks for m in r.mini_batches)
    assert len(bars) == micros
    # Padded mode has padding, drawn with the hatch pattern.
    assert any(rect.get("fill") == "url(#pad)" for rect in root.iter(ns + "rect"))
    # Bar heights are proportional to cost.
    heights = {}
    for g in bars:
        title = g.find(ns + "title").text
        cost = float(re.search(r"cost ([0-9.]+)", title).group(1))
        h = sum(float(r.get("height")) for r in g.findall(ns + "rect"))
        heights[cost] = h
    ratios = [h / c for c, h in heights.items() if c > 0]
    assert max(ratios) - min(ratios) < 1e-2 * max(ratios)


# ---- input forms -----------------------------------------------------------


def test_lengths_file_comments_and_pairs(tmp_path, lengths_file):
    req = saved_request(tmp_path, lengths_file)
    # "900 50" -> 950 with 50 loss tokens; "400\t7" -> 407 with 7; a TOTAL
    # line counts all its tokens as loss tokens.
    assert list(req.lengths) == [100, 950, 50, 950, 407, 600]
    assert list(req.loss_tokens) == [100, 50, 50, 950, 7, 600]


def test_totals_only_have_no_loss_tokens(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("3\n1\n4\n")
    req = saved_request(tmp_path, path)
    assert list(req.lengths) == [3, 1, 4] and list(req.loss_tokens) == []


def test_stdin_equals_file(tmp_path, lengths_file):
    a = ok(run_packctl("plan", "--local", "--dp", 2, "--format", "json", lengths_file))
    b = ok(run_packctl("plan", "--local", "--dp", 2, "--format", "json", "-",
                       stdin=lengths_file.read_bytes()))
    assert without_time(a) == without_time(b)


def test_manifest(tmp_path):
    pb = pb2()
    manifest = {
        "job": "m1",
        "lengths": [10, 20, "30", 40],
        "lossTokens": [1, 2, 3, 4],
        "groups": ["18446744073709551615", 0, 1, 1],
        "parallel": {"dp": 2, "cpAlgo": "CP_ALGO_ULYSSES", "cp": 2, "sequence_parallel": True},
        "batching": {"mode": "padded", "maxTokens": "4096", "dp_balance": 3, "shuffle": False},
        "cost": {"linear": 2.5, "quadratic": 0},
        "layout": {"padMultiple": 8},
        "seed": "12345678901234567890",
    }
    path = tmp_path / "m.json"
    path.write_text(json.dumps(manifest))
    req = saved_request(tmp_path, path)
    assert req.job == "m1"
    assert list(req.lengths) == [10, 20, 30, 40]
    assert list(req.loss_tokens) == [1, 2, 3, 4]
    assert list(req.groups) == [2**64 - 1, 0, 1, 1]
    assert req.parallel.dp == 2 and req.parallel.cp == 2
    assert req.parallel.cp_algo == pb.CP_ALGO_ULYSSES and req.parallel.sequence_parallel
    assert req.batching.mode == pb.MODE_PADDED and req.batching.max_tokens == 4096
    assert req.batching.dp_balance == pb.DP_BALANCE_KK_EQUAL
    assert req.cost.linear == 2.5 and req.layout.pad_multiple == 8
    assert req.seed == 12345678901234567890
    # Flags override the manifest; a manifest on stdin works too.
    req = saved_request(tmp_path, "-", "--dp", 4, "--mode", "packed", "--job", "cli",
                        stdin=path.read_bytes())
    assert req.parallel.dp == 4 and req.batching.mode == pb.MODE_PACKED and req.job == "cli"
    # The manifest that json_format prints from a request reads back equal.
    path.write_text(json_format.MessageToJson(req))
    assert saved_request(tmp_path, path) == req


@pytest.mark.parametrize("manifest,needle", [
    ('{"lengths": [1, 2], "bogus": 1}', "unknown field 'bogus'"),
    ('{"lengths": [1, -2]}', "lengths[1]"),
    ('{"lengths": [1, 2], "parallel": {"dpp": 1}}', "parallel.dpp"),
    ('{"lengths": [1, 2], "batching": {"mode": "wide"}}', "batching.mode"),
    ('{"lengths": [1, 2], "parallel": 3}', "parallel"),
    ('{"lengths": [1, 2]', "invalid JSON"),
    ('{"parallel": {"dp": 1}}', "lengths"),
])
def test_manifest_errors(tmp_path, manifest, needle):
    path = tmp_path / "bad.json"
    path.write_text(manifest)
    res = run_packctl("plan", "--local", path)
    assert res.returncode == 2
    assert needle in res.stderr.decode()


def test_request_file_round_trip(tmp_path, lengths_file):
    req = saved_request(tmp_path, lengths_file, "--dp", 3, "--seed", 4)
    path = tmp_path / "r.bin"
    path.write_bytes(req.SerializeToString())
    again = saved_request(tmp_path, "--request-file", path, "--max-tokens", 2048)
    assert list(again.lengths) == list(req.lengths) and again.parallel.dp == 3
    assert again.batching.max_tokens == 2048


def test_sample_deterministic(tmp_path):
    all_lines = [int(a) + int(b) for a, b in (ln.split() for ln in CONV.read_text().splitlines())]
    a = saved_request(tmp_path, CONV, "--sample", 300, "--seed", 7)
    b = saved_request(tmp_path, CONV, "--sample", 300, "--seed", 7)
    c = saved_request(tmp_path, CONV, "--sample", 300, "--seed", 8)
    assert a == b
    assert list(a.lengths) != list(c.lengths)
    assert len(a.lengths) == 300 == len(a.loss_tokens)
    # A sample is an in-order subsequence of the file (no repeats).
    it = iter(all_lines)
    assert all(any(x == y for y in it) for x in a.lengths)
    res = run_packctl("plan", "--local", CONV, "--sample", 10**6)
    assert res.returncode == 2 and b"--sample" in res.stderr


# ---- every flag reaches the request ------------------------------------


FLAGS = [
    ("--dp", "7", "parallel.dp", 7),
    ("--tp", "2", "parallel.tp", 2),
    ("--cp", "4", "parallel.cp", 4),
    ("--pp", "3", "parallel.pp", 3),
    ("--vpp", "2", "parallel.vpp", 2),
    ("--cp-algo", "ulysses", "parallel.cp_algo", 1),
    ("--sequence-parallel", None, "parallel.sequence_parallel", True),
    ("--num-heads", "32", "parallel.num_heads", 32),
    ("--microbatch-group", "4", "parallel.microbatch_group", 4),
    ("--mini-batches", "4", "batching.mini_batches", 4),
    ("--shuffle", None, "batching.shuffle", True),
    ("--dp-balance", "lpt_equal", "batching.dp_balance", 5),
    ("--equal-count", None, "batching.equal_count", True),
    ("--mode", "fixed", "batching.mode", 2),
    ("--max-tokens", "18446744073709551615", "batching.max_tokens", 2**64 - 1),
    ("--max-seqs", "9", "batching.max_seqs", 9),
    ("--micro-batch-size", "5", "batching.micro_batch_size", 5),
    ("--min-micro-batches", "6", "batching.min_micro_batches", 6),
    ("--round", "128", "batching.round", 128),
    ("--micro-algo", "mffd", "batching.micro_algo", 3),
    ("--order", "original", "batching.order", 2),
    ("--keep-groups", None, "batching.keep_groups", True),
    ("--groups-on-rank", None, "batching.groups_on_rank", True),
    ("--cost-linear", "0.75", "cost.linear", 0.75),
    ("--cost-quadratic", "1e-05", "cost.quadratic", 1e-05),
    ("--per-sequence", "250.5", "cost.per_sequence", 250.5),
    ("--per-micro-batch", "0.002", "cost.per_micro_batch", 0.002),
    ("--align", "16", "layout.align", 16),
    ("--pad-multiple", "8", "layout.pad_multiple", 8),
    ("--total-multiple", "256", "layout.total_multiple", 256),
    ("--fixed-shape", None, "layout.fixed_shape", True),
    ("--seed", "18446744073709551615", "seed", 2**64 - 1),
    ("--job", "rl-step-42", "job", "rl-step-42"),
]


def get_path(msg, path):
    for part in path.split("."):
        msg = getattr(msg, part)
    return msg


@pytest.mark.parametrize("flag,value,path,want", FLAGS, ids=[f[0] for f in FLAGS])
def test_every_flag_reaches_the_request(tmp_path, lengths_file, flag, value, path, want):
    args = [flag] if value is None else [flag, value]
    req = saved_request(tmp_path, lengths_file, *args)
    assert get_path(req, path) == want
    # Nothing else was set: clearing the field gives the empty request.
    base = saved_request(tmp_path, lengths_file)
    sub, _, name = path.rpartition(".")
    target = get_path(req, sub) if sub else req
    target.ClearField(name)
    if sub and not get_path(req, sub).ListFields():
        req.ClearField(sub)
    assert req == base


def test_bool_flags_take_values(tmp_path, lengths_file):
    req = saved_request(tmp_path, lengths_file, "--shuffle=yes", "--fixed-shape=1",
                        "--equal-count=false")
    assert req.batching.shuffle and req.layout.fixed_shape and not req.batching.equal_count
    path = tmp_path / "m.json"
    path.write_text('{"lengths": [1, 2], "batching": {"shuffle": true}}')
    assert not saved_request(tmp_path, path, "--shuffle=false").batching.shuffle


def test_enum_forms(tmp_path, lengths_file):
    for value in ("kk_equal", "KK-EQUAL", "DP_BALANCE_KK_EQUAL", "3"):
        assert saved_request(tmp_path, lengths_file, "--dp-balance", value).batching.dp_balance == 3


# ---- errors --------------------------------------------------------------


@pytest.mark.parametrize("args,needle", [
    (["--dp", "abc"], "--dp"),
    (["--dp", "-1"], "--dp"),
    (["--dp", "4294967296"], "--dp"),
    (["--max-tokens", "18446744073709551616"], "--max-tokens"),
    (["--mode", "wide"], "--mode"),
    (["--cp-algo", "ring"], "--cp-algo"),
    (["--dp-balance", "best"], "--dp-balance"),
    (["--micro-algo", "x"], "--micro-algo"),
    (["--order", "x"], "--order"),
    (["--cost-linear", "nan"], "--cost-linear"),
    (["--cost-quadratic", "1e999"], "--cost-quadratic"),
    (["--per-sequence", "inf"], "--per-sequence"),
    (["--per-micro-batch", "x"], "--per-micro-batch"),
    (["--shuffle=maybe"], "--shuffle"),
    (["--format", "xml"], "--format"),
    (["--sample", "0"], "--sample"),
    (["--sample", "x"], "--sample"),
    (["--timeout", "-3"], "--timeout"),
    (["--bogus"], "--bogus"),
    (["--dp"], "--dp"),
    (["extra-positional"], "extra-positional"),
    (["--server", "localhost:1"], "--local or --server"),
])
def test_usage_errors_exit_2(lengths_file, args, needle):
    res = run_packctl("plan", "--local", lengths_file, *args)
    assert res.returncode == 2, res
    assert needle in res.stderr.decode()
    assert res.stdout == b""


def test_input_errors_exit_2(tmp_path):
    bad = tmp_path / "bad.txt"
    for content, needle in (("10\n20 x\n", ":2:"), ("1 2 3\n", ":1:"), ("4294967296\n", ":1:"),
                            ("4294967295 1\n", ":1:"), ("# only comments\n\n", "no sequence"),
                            ("-5\n", ":1:")):
        bad.write_text(content)
        res = run_packctl("plan", "--local", "--dp", 1, bad)
        assert res.returncode == 2, content
        assert needle in res.stderr.decode() and str(bad) in res.stderr.decode()
    res = run_packctl("plan", "--local", "--dp", 1, tmp_path / "missing.txt")
    assert res.returncode == 2 and b"missing.txt" in res.stderr
    res = run_packctl("plan", "--local", "--dp", 1)
    assert res.returncode == 2 and b"INPUT" in res.stderr


def test_planner_errors_exit_1(lengths_file):
    # No --dp at all is a missing flag (exit 2); --dp 0 is the planner's refusal.
    res = run_packctl("plan", "--local", lengths_file)
    assert res.returncode == 2 and b"--dp N is required" in res.stderr
    res = run_packctl("plan", "--local", lengths_file, "--dp", 0)
    assert res.returncode == 1 and b"parallel.dp: 0 (must be >= 1)" in res.stderr
    res = run_packctl("plan", "--local", lengths_file, "--dp", 1, "--max-tokens", 500)
    assert res.returncode == 1 and b"lengths[1]" in res.stderr
    res = run_packctl("plan", "--local", lengths_file, "--dp", 1, "--mode", "wide")
    assert res.returncode == 2
    res = run_packctl("plan", "--local", lengths_file, "--dp", 4, "--cp", 2, "--cp-algo",
                      "ulysses", "--num-heads", 3)
    assert res.returncode == 1 and b"num_heads" in res.stderr
    assert res.stdout == b""
    res = run_packctl("plan", "--local", lengths_file, "--dp", 1, "--per-sequence", "-1")
    assert res.returncode == 1 and b"cost.per_sequence: -1" in res.stderr
    res = run_packctl("plan", "--local", lengths_file, "--dp", 1, "--per-micro-batch", "-0.5")
    assert res.returncode == 1 and b"cost.per_micro_batch: -0.5" in res.stderr


def test_groups_on_rank(tmp_path):
    """--group-size makes runs of N sequences one group; --groups-on-rank
    keeps each on one rank with equal micro-batch counts; bad combinations
    exit 1 naming the field."""
    req = saved_request(tmp_path, CONV, "--sample", 64, "--group-size", 8)
    assert list(req.groups) == [i // 8 for i in range(64)]
    _, resp = plan_json(tmp_path, CONV, "--sample", 512, "--seed", 3, "--group-size", 8,
                        "--dp", 4, "--max-tokens", 8192, "--groups-on-rank", "--equal-count",
                        "--mini-batches", 2)
    rank_of = {}
    for rank in resp.ranks:
        counts = [len(mini.micro_batches) for mini in rank.mini_batches]
        assert counts == [len(m.micro_batches) for m in resp.ranks[0].mini_batches]
        for mini in rank.mini_batches:
            for mb in mini.micro_batches:
                assert mb.tokens <= 8192
                for s in mb.seqs:
                    assert rank_of.setdefault(s // 8, rank.dp_rank) == rank.dp_rank
    assert len(rank_of) == 64 and resp.stats.sequences == 512
    # A manifest's groups, interleaved, stay together too.
    man = tmp_path / "m.json"
    man.write_text(json.dumps({"lengths": [100, 900, 50, 950, 400, 600, 30, 70],
                               "groups": ["7", "9", "7", "9", "11", "12", "11", "12"],
                               "parallel": {"dp": 2}, "batching": {"groupsOnRank": True}}))
    groups = [7, 9, 7, 9, 11, 12, 11, 12]
    for extra, sizes in (([], [1, 3]), (["--equal-count"], [2, 2])):
        _, resp = plan_json(tmp_path, man, *extra)
        ids = [{groups[s] for mini in rank.mini_batches for mb in mini.micro_batches
                for s in mb.seqs} for rank in resp.ranks]
        assert sorted(len(i) for i in ids) == sizes and set.union(*ids) == {7, 9, 11, 12}
    for args, needle in ((["--dp", 2], b"batching.groups_on_rank: set, but groups is empty"),
                         (["--dp", 9, "--group-size", 2],
                          b"groups holds 4 distinct ids, fewer than batching.mini_batches 1 x "
                          b"parallel.dp 9"),
                         (["--dp", 3, "--group-size", 2, "--equal-count"],
                          b"not a multiple of batching.mini_batches 1 x parallel.dp 3"),
                         (["--dp", 2, "--group-size", 2, "--dp-balance", "kk"],
                          b"batching.groups_on_rank: set with batching.dp_balance kk")):
        res = run_packctl("plan", "--local", CONV, "--sample", 8, "--groups-on-rank", *args)
        assert res.returncode == 1 and needle in res.stderr, res.stderr
        assert b"INVALID_ARGUMENT" in res.stderr or b"invalid" in res.stderr.lower()
    res = run_packctl("plan", "--local", CONV, "--dp", 1, "--group-size", 0)
    assert res.returncode == 2 and b"--group-size" in res.stderr


def test_help_and_version():
    res = run_packctl("--version")
    assert res.returncode == 0 and re.match(rb"packctl \d+\.\d+\.\d+\n", res.stdout)
    res = run_packctl("plan", "--help")
    assert res.returncode == 0
    for flag, *_ in FLAGS:
        assert flag.encode() in res.stdout
    res = run_packctl("frobnicate")
    assert res.returncode == 2 and b"frobnicate" in res.stderr
    assert run_packctl().returncode == 2
