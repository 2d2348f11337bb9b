"""packctl's messages for a newcomer, as a black box: every mistake names
the argument actually at fault and, where one is close, the flag or
manifest field that was meant; `--dry-run` shows the request it built
(as a summary, or as JSON identical to MessageToJson of the same bytes);
every subcommand's --help shows value placeholders, defaults and the
environment fallbacks.
"""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format

from codec_helpers import WORKLOADS, pb2, run_packctl

CODE = WORKLOADS / "azure_code_2023.txt"
DEAD = "127.0.0.1:1"  # Nothing listens there; usage errors come first.


def usage_error(res) -> str:
    """The stderr of a usage error (exit 2, nothing on stdout)."""
    assert res.returncode == 2, (res.returncode, res.stderr.decode())
    assert res.stdout == b""
    return res.stderr.decode()


@pytest.fixture
def lengths(tmp_path):
    path = tmp_path / "lengths.txt"
    path.write_text("100\n900\n50\n950\n400\n600\n")
    return path


def test_single_dash_names_the_argument_and_suggests_two_dashes(lengths):
    err = usage_error(run_packctl("plan", "--local", "-dp", 8, lengths))
    assert "'-dp'" in err and "did you mean '--dp'?" in err
    # The argument before it is not blamed.
    assert "--local" not in err.splitlines()[0]
    err = usage_error(run_packctl("plan", "--local", lengths, "-max-tokens=10", "--dp", 1))
    assert "'-max-tokens=10'" in err and "'--max-tokens'" in err


@pytest.mark.parametrize("cmd,args,typo,meant", [
    ("plan", ["--local", "--dp", "1"], "--max-tokns", "--max-tokens"),
    ("plan", ["--local", "--dp", "1"], "--dp-balnace", "--dp-balance"),
    ("plan", ["--local", "--dp", "1"], "--dpp", "--dp"),
    ("plan", ["--local", "--dp", "1"], "--sampel", "--sample"),
    ("plan", ["--local", "--dp", "1"], "--micro_algo", "--micro-algo"),
    ("load", ["--server", DEAD, "--dp", "1"], "--concurency", "--concurrency"),
    ("load", ["--server", DEAD, "--dp", "1"], "--max-tokns", "--max-tokens"),
    ("health", ["--server", DEAD], "--wiat", "--wait"),
    ("rank-plan", ["--server", DEAD, "--rank", "0"], "--plan-di", "--plan-id"),
    ("calibrate", [], "--foramt", "--format"),
])
def test_typo_suggests_the_nearest_flag(lengths, cmd, args, typo, meant):
    err = usage_error(run_packctl(cmd, *args, typo, "1", lengths))
    assert f"unknown option '{typo}'; did you mean '{meant}'?" in err
    assert f"Run 'packctl {cmd} --help'" in err


def test_nonsense_gets_no_suggestion_and_prefixes_are_named(lengths):
    err = usage_error(run_packctl("plan", "--local", "--dp", 1, "--frobnicate", lengths))
    assert "unknown option '--frobnicate'" in err and "did you mean" not in err
    # A prefix of one flag is that flag (getopt_long); of several, ambiguous.
    err = usage_error(run_packctl("plan", "--local", "--dp", 1, "--max", 9, lengths))
    assert "ambiguous option '--max'" in err
    assert "--max-tokens" in err and "--max-seqs" in err
    res = run_packctl("plan", "--local", "--dp", 1, "--max-tok", 5000, lengths)
    assert res.returncode == 0, res.stderr


def test_enum_typo_suggests_the_nearest_value(lengths):
    err = usage_error(run_packctl("plan", "--local", "--dp", 1, "--mode", "paded", lengths))
    assert "--mode: unknown value 'paded'; did you mean 'padded'?" in err
    err = usage_error(run_packctl("plan", "--local", "--dp", 1, "--mode", "wide", lengths))
    assert "--mode: unknown value 'wide' (expected one of: packed, padded, fixed)" in err
    man = lengths.parent / "m.json"
    man.write_text(json.dumps({"lengths": [1], "batching": {"microAlgo": "kk_cnt"}}))
    err = usage_error(run_packctl("plan", "--local", "--dp", 1, man))
    assert f"{man}: batching.microAlgo: unknown value 'kk_cnt'; did you mean 'kk_count'?" in err


def test_missing_value_names_the_flag(lengths):
    err = usage_error(run_packctl("plan", "--local", lengths, "--dp"))
    assert "--dp needs a value" in err
    err = usage_error(run_packctl("health", "--server", DEAD, "--wait"))
    assert "--wait needs a value" in err


@pytest.mark.parametrize("manifest,message", [
    ({"lengths": [1, 2], "batching": {"maxTokns": 5}},
     "unknown field 'batching.maxTokns'; did you mean 'batching.maxTokens'?"),
    ({"lengths": [1, 2], "batching": {"max_tokns": 5}},
     "unknown field 'batching.max_tokns'; did you mean 'batching.max_tokens'?"),
    ({"lengths": [1, 2], "paralel": {"dp": 1}},
     "unknown field 'paralel'; did you mean 'parallel'?"),
    ({"lengths": [1, 2], "lossTokes": [1, 1]},
     "unknown field 'lossTokes'; did you mean 'lossTokens'?"),
    ({"lengths": [1, 2], "parallel": {"zz": 1}}, "unknown field 'parallel.zz'"),
])
def test_manifest_typo_names_file_path_and_nearest_field(tmp_path, manifest, message):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(manifest))
    err = usage_error(run_packctl("plan", "--local", "--dp", 1, path))
    assert f"{path}: {message}" in err
    if "zz" in message:
        assert "did you mean" not in err


def test_missing_dp_says_the_flag_is_required(tmp_path, lengths):
    err = usage_error(run_packctl("plan", "--local", lengths))
    assert "--dp N is required" in err and str(lengths) in err
    assert "must be >= 1" not in err
    err = usage_error(run_packctl("plan", "--local", "-", stdin=b"5\n6\n"))
    assert "--dp N is required" in err and "stdin" in err
    # A manifest that sets parallel.dp needs no flag.
    man = tmp_path / "m.json"
    man.write_text(json.dumps({"lengths": [5, 6], "parallel": {"dp": 2}}))
    assert run_packctl("plan", "--local", man).returncode == 0
    # An explicit --dp 0 is a value the planner refuses (exit 1).
    res = run_packctl("plan", "--local", "--dp", 0, lengths)
    assert res.returncode == 1 and b"parallel.dp: 0 (must be >= 1)" in res.stderr
    err = usage_error(run_packctl("load", "--server", DEAD, lengths))
    assert "--dp N is required" in err


def test_padded_fit_error_names_the_round(tmp_path):
    path = tmp_path / "one.txt"
    path.write_text("4094\n")
    res = run_packctl("plan", "--local", "--dp", 1, "--mode", "padded", "--round", 4,
                      "--max-tokens", 4095, path)
    err = res.stderr.decode()
    assert res.returncode == 1, err
    assert "lengths[0]: 4094 tokens (a row of 4096 after rounding up to batching.round 4" in err
    assert "alignment to" not in err
    # Without a round, the message is about the alignment as before.
    res = run_packctl("plan", "--local", "--dp", 1, "--mode", "padded", "--max-tokens", 4093, path)
    assert res.returncode == 1 and b"after alignment to 1" in res.stderr


def test_dry_run_json_is_message_to_json_of_the_request(tmp_path):
    saved = tmp_path / "req.bin"
    args = ["plan", "--dry-run", "--format", "json", "--save-request", saved, "--sample", 40,
            "--seed", 18446744073709551615, "--dp", 4, "--cp", 2, "--mode", "padded",
            "--round", 64, "--max-tokens", 65536, "--per-sequence", "1e-05",
            "--cost-linear", "0.1", "--cost-quadratic", "3e-17", "--shuffle",
            "--micro-algo", "kk_count", "--group-size", 4, "--job", "r\u00e9sum\u00e9 \x7f \u2603",
            CODE]
    res = run_packctl(*args)
    assert res.returncode == 0, res.stderr
    req = pb2().PlanRequest()
    req.ParseFromString(saved.read_bytes())
    assert res.stdout.decode() == json_format.MessageToJson(req) + "\n"
    text = res.stdout.decode()
    assert '"seed": "18446744073709551615"' in text and '"mode": "MODE_PADDED"' in text
    assert '"perSequence": 1e-05' in text and '"maxTokens": "65536"' in text
    # Without --save-request too; and the empty request is "{}".
    res = run_packctl("plan", "--dry-run", "--format", "json", "-", stdin=b"7\n")
    assert res.returncode == 0 and json.loads(res.stdout) == {"lengths": [7]}


def test_dry_run_summary(tmp_path):
    res = run_packctl("plan", "--dry-run", "--dp", 8, "--max-tokens", 16384, "--sample", 100,
                      "--seed", 1, CODE)
    assert res.returncode == 0, res.stderr
    text = res.stdout.decode()
    assert "dry run" in text and "not planned" in text
    assert "100," in text and "dp 8" in text and "max_tokens 16384" in text
    # The plan id it shows is the id the plan gets.
    plan_id = text.split("plan id ")[1].split()[0]
    res = run_packctl("plan", "--local", "--format", "json", "--dp", 8, "--max-tokens", 16384,
                      "--sample", 100, "--seed", 1, CODE)
    assert json.loads(res.stdout)["planId"] == plan_id
    err = usage_error(run_packctl("plan", "--dry-run", "--format", "svg", "--dp", 1, CODE))
    assert "--dry-run" in err and "svg" in err


@pytest.mark.parametrize("cmd,needles", [
    ("plan", ["--dp N", "--max-tokens N", "--format F", "--server HOST:PORT", "PACKD_SERVER",
              "PACKD_TARGET", "default 30", "--shuffle[=BOOL]", "packed (default)"]),
    ("load", ["--dp N", "INPUT", "--lengths FILE", "--concurrency C", "default 10",
              "PACKD_SERVER"]),
    ("health", ["--wait SECONDS", "--timeout SECONDS", "default 5", "PACKD_SERVER"]),
    ("rank-plan", ["--plan-id ID", "--rank R", "default 30", "PACKD_SERVER"]),
    ("calibrate", ["--align A", "--format F", "TIMINGS"]),
])
def test_help_of_every_subcommand(cmd, needles):
    for flag in ("-h", "--help"):
        res = run_packctl(cmd, flag)
        assert res.returncode == 0, res.stderr
        text = res.stdout.decode()
        assert text.startswith(f"usage: packctl {cmd}")
        for needle in needles:
            assert needle in text, (cmd, needle)


def test_load_takes_input_positionally(lengths):
    # With INPUT given positionally, the run gets as far as the server (exit
    # 1: nothing listens), where a usage error would have exited 2.
    for spelled in ([lengths], ["--lengths", lengths]):
        res = run_packctl("load", "--server", DEAD, "--dp", 1, "--duration", "0.1",
                          "--timeout", "1", *spelled)
        assert res.returncode == 1, res.stderr
        assert b"first request failed" in res.stderr
    err = usage_error(run_packctl("load", "--server", DEAD, "--dp", 1, lengths, lengths))
    assert "one INPUT at most" in err
    err = usage_error(run_packctl("load", "--server", DEAD, "--dp", 1))
    assert "INPUT" in err
