"""The example client/python/examples/verl_step.py runs end to end (embedded
and against the real server) and its own checks pass: outputs restored to
input order equal the unpacked reference, and the plan's loss scales give
the global token mean."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

from packd.testing import ServerProcess  # noqa: E402

EXAMPLE = REPO / "client" / "python" / "examples" / "verl_step.py"


def run(*args):
    res = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "restored to input order: OK" in res.stdout and "global token mean" in res.stdout
    assert res.stdout.count("OK") == 2, res.stdout
    return res.stdout


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--cp", "1", "--dp", "8", "--mini-batches", "1", "--seed", "3"],
        ["--cp", "4", "--tp", "2", "--max-tokens", "2048", "--seed", "1"],
        ["--cp", "4", "--cp-algo", "ulysses", "--dp", "2", "--mini-batches", "3", "--seed", "2"],
        ["--cp", "8", "--dp", "2", "--max-tokens", "512", "--max-prompt", "8", "--max-response", "40", "--seed", "4"],
    ],
)
def test_example_embedded(args):
    out = run(*args)
    assert out.startswith("embedded plan ")


def test_example_against_the_server():
    with ServerProcess() as srv:
        out = run("--server", srv.target, "--seed", "5")
    assert out.startswith("remote plan ")
