"""Where the documents and the program disagreed, the program (or the
document) was fixed; each case is checked here against the real binaries
and the document's own text:

- Client.local().health(name) raises the same NotFound as the server for
  an unknown service (docs/python.md, docs/operators.md);
- plan.to_json() is byte for byte packctl plan --format json, final newline
  included (docs/python.md);
- balance_batch's documented signature is the function's (docs/python.md);
- rearrange_micro_batches takes the plain dicts its docstring names;
- python -m packd._gen OUT works from a checkout and says what is missing
  where there is no proto (docs/python.md);
- gpu/README.md's NCCL finder stops with a message when the wheel is
  missing, and finds the header where it is;
- packd --metrics-listen with a name exits 2 naming the flag, and a gRPC
  port in use is one line from packd, exit 1 (docs/operators.md)."""

import collections
import inspect
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
BUILD = Path(os.environ.get("PACKD_BUILD_DIR", REPO / "build"))
PACKD = BUILD / "server" / "packd"
PACKCTL = BUILD / "client" / "c" / "packctl"
PY = "/usr/bin/python3"

import packd  # noqa: E402
import packd.verl  # noqa: E402
from packd.testing import ServerProcess  # noqa: E402


@pytest.fixture(scope="module")
def server():
    with ServerProcess() as srv:
        yield srv


def test_unknown_health_service_is_not_found_in_both_modes(server):
    remote, local = packd.Client(server.target), packd.Client.local()
    messages = []
    for client in (remote, local):
        assert client.health() == "SERVING"
        assert client.health("packd.v1.Planner") == "SERVING"
        with pytest.raises(packd.NotFound) as err:
            client.health("foo")
        assert isinstance(err.value, LookupError)
        messages.append(err.value.message)
    assert messages[0] == messages[1] == 'service "foo" is unknown; known: "", "packd.v1.Planner"'
    remote.close()


def test_to_json_is_packctl_output_byte_for_byte(tmp_path):
    lengths = [100, 900, 50, 950, 400, 600, 3000, 12]
    (tmp_path / "in.txt").write_text("".join(f"{n}\n" for n in lengths))
    res = subprocess.run([str(PACKCTL), "plan", "--local", str(tmp_path / "in.txt"), "--dp", "2", "--max-tokens", "4096",
                          "--format", "json", "--save-response", str(tmp_path / "resp.bin")],
                         capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr
    plan = packd.Plan.from_bytes((tmp_path / "resp.bin").read_bytes())
    assert plan.to_json().encode() == res.stdout
    assert plan.to_json().endswith("}\n")
    assert packd.Plan.from_json(plan.to_json()).plan_id == plan.plan_id


def test_balance_batch_signature_is_the_documented_one():
    text = (REPO / "docs" / "python.md").read_text()
    m = re.search(r"`packd\.verl\.balance_batch\((.*?)\)`", text, re.S)
    assert m, "docs/python.md does not show balance_batch's signature"
    documented = " ".join(m.group(1).split())
    actual = str(inspect.signature(packd.verl.balance_batch))[1:].rsplit(")", 1)[0]
    actual = actual.replace("'", '"')
    actual = re.sub(r": [^=,]+?( =|,|$)", lambda g: g.group(1), actual)  # Drop annotations.
    actual = actual.replace(" = ", "=").replace("Optional[int]", "")
    assert documented == " ".join(actual.split())


def test_balance_batch_logs_under_logging_prefix():
    metrics = {}
    lengths = np.array([100, 4000, 50, 300, 2000, 900, 70, 3100])
    packd.verl.balance_batch(lengths, 2, metrics, logging_prefix="train/seqlen")
    assert metrics and all(k.startswith("train/seqlen/") for k in metrics)
    order = packd.verl.balance_batch(lengths, 2, equal_size=True)
    assert sorted(order.tolist()) == list(range(8))


@pytest.mark.parametrize("kind", [dict, collections.OrderedDict])
def test_rearrange_micro_batches_takes_plain_mappings(kind):
    mask = np.zeros((6, 8), dtype=np.int64)
    for row, n in enumerate([8, 3, 5, 1, 7, 2]):
        mask[row, :n] = 1
    batch = kind(attention_mask=mask, input_ids=mask * 7, uid=list("abcdef"), temperature=0.7, tag="rollout")
    micro, idx = packd.verl.rearrange_micro_batches(batch, 10)
    assert sorted(i for part in idx for i in part) == list(range(6))
    for m, rows in zip(micro, idx):
        assert type(m) is kind
        assert np.array_equal(m["attention_mask"], mask[rows])
        assert m["uid"] == [batch["uid"][i] for i in rows]
        assert m["temperature"] == 0.7 and m["tag"] == "rollout"
        assert int(m["attention_mask"].sum()) <= 10


def test_gen_from_a_checkout(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO / "client" / "python"))
    env.pop("PACKD_PROTO_DIR", None)
    res = subprocess.run([PY, "-m", "packd._gen", str(tmp_path / "out")], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    assert {p.name for p in (tmp_path / "out").iterdir()} >= {"__init__.py", "packd_pb2.py", "packd_pb2_grpc.py"}


def test_gen_from_an_installed_copy_names_what_is_missing(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(REPO / "client" / "python" / "packd", site / "packd", ignore=shutil.ignore_patterns("_proto"))
    env = dict(os.environ, PYTHONPATH=str(site))
    env.pop("PACKD_PROTO_DIR", None)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = subprocess.run([PY, "-m", "packd._gen", "out"], capture_output=True, text=True, env=env, cwd=elsewhere,
                         timeout=120)
    assert res.returncode == 2
    assert "no proto folder" in res.stderr and "PROTO_DIR" in res.stderr and "Traceback" not in res.stderr
    res = subprocess.run([PY, "-m", "packd._gen", "out", str(REPO / "proto")], capture_output=True, text=True,
                         env=env, cwd=elsewhere, timeout=120)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([PY, "-m", "packd._gen", "out2"], capture_output=True, text=True, env=env, cwd=REPO,
                         timeout=120)
    try:
        assert res.returncode == 0, res.stderr  # ./proto of the repository root
    finally:
        shutil.rmtree(REPO / "out2", ignore_errors=True)


def nccl_finder() -> str:
    """The lines of gpu/README.md's NCCL block up to the first comment, with
    cmake replaced by a function that prints its arguments."""
    text = (REPO / "gpu" / "README.md").read_text()
    block = re.search(r"```sh\n(NCCL_H=.*?)\n# or", text, re.S)
    assert block, "gpu/README.md has no NCCL_H=... block"
    return 'cmake() { echo "cmake $*"; }\n' + block.group(1)


def test_nccl_finder_stops_without_the_wheel(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(PY, bin_dir / "python3")
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    env.pop("PYTHONPATH", None)
    res = subprocess.run(["bash", "-c", nccl_finder()], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode != 0
    assert "nccl.h not found" in res.stderr and "nvidia-nccl" in res.stderr
    assert "cmake" not in res.stdout


def test_nccl_finder_finds_the_wheel(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(PY, bin_dir / "python3")
    include = tmp_path / "site" / "nvidia" / "nccl" / "include"
    include.mkdir(parents=True)
    (include / "nccl.h").write_text("/* stand-in */\n")
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHONPATH=str(tmp_path / "site"))
    res = subprocess.run(["bash", "-c", nccl_finder()], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert f"-DPK_GPU_NCCL_ROOT={tmp_path / 'site' / 'nvidia' / 'nccl'}" in res.stdout


@pytest.mark.parametrize("how", ["flag", "env"])
def test_metrics_listen_with_a_name_is_a_usage_error(how):
    args, env = [str(PACKD), "--listen", "127.0.0.1:0"], dict(os.environ)
    if how == "flag":
        args += ["--metrics-listen", "localhost:0"]
        origin = "--metrics-listen"
    else:
        env["PACKD_METRICS_LISTEN"] = "localhost:0"
        origin = "PACKD_METRICS_LISTEN"
    res = subprocess.run(args, capture_output=True, text=True, env=env, timeout=30)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f'packd: {origin}: "localhost:0": "localhost" is not a numeric IPv4 or [IPv6] address '
        "(names such as localhost are not resolved; use 127.0.0.1)"
    ]


def test_numeric_metrics_addresses_still_start(tmp_path):
    for addr in ("127.0.0.1:0", "[::1]:0"):
        with ServerProcess(["--metrics-listen", addr]):
            pass


def test_grpc_port_in_use_is_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        res = subprocess.run([str(PACKD), "--listen", f"127.0.0.1:{port}", "--metrics-listen", "127.0.0.1:0"],
                             capture_output=True, text=True, timeout=30)
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert f"error packd: cannot listen for gRPC on 127.0.0.1:{port}" in lines[0]
    assert "chttp2" not in res.stderr


def test_operators_md_states_the_exit_codes():
    text = " ".join((REPO / "docs" / "operators.md").read_text().split())
    assert "2 for a bad flag or variable" in text
    assert "--metrics-listen localhost:9464" in text
