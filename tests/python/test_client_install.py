"""The package installs with pip into a virtual environment made with
--system-site-packages over Debian's grpcio/protobuf/numpy, with no package
index and no build isolation; the stubs are generated from proto/ at build
time and libpackd.so is shipped next to the package. The installed package
then plans (embedded and remote) and runs the example with nothing from the
source tree on its path."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

from packd.testing import ServerProcess  # noqa: E402

SYSTEM_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("install")
    src = root / "src"
    # A clean copy: nothing generated or built in the checkout is used.
    shutil.copytree(REPO / "client" / "python", src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "_proto", "__pycache__", "libpackd.so", "libpackd_gpu.so"))
    env_dir = root / "venv"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", str(env_dir)], check=True)
    py = env_dir / "bin" / "python"
    env = dict(os.environ, PACKD_PROTO_DIR=str(REPO / "proto"), PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    res = subprocess.run([str(py), "-m", "pip", "install", "--no-build-isolation", "--no-index", str(src)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not (src / "packd" / "_proto").exists(), "stubs go into the build, not the source"
    return py


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PACKD_") and k != "PYTHONPATH"}
    env.update(extra)
    return env


def run_in(py, code, **env):
    res = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd="/", env=clean_env(**env),
                         timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def test_installed_package_plans_without_the_source_tree(venv):
    out = run_in(venv, """
import packd, pathlib, sys
p = pathlib.Path(packd.__file__).resolve()
assert str(p).startswith(sys.prefix), p
from packd._proto import packd_pb2, packd_pb2_grpc
assert (p.parent / "_proto" / "packd_pb2.py").is_file()
assert (p.parent / "libpackd.so").is_file()
c = packd.Client.local()
plan = c.plan([5, 7, 9, 11, 300, 2], dp=2, max_tokens=400)
assert sorted(plan.order().tolist()) == list(range(6))
print("OK", plan.plan_id)
""")
    assert out.startswith("OK ")


def test_installed_package_talks_to_the_server(venv):
    with ServerProcess() as srv:
        out = run_in(venv, f"""
import packd
with packd.Client("{srv.target}") as c:
    assert c.health() == "SERVING"
    a = c.plan(list(range(1, 65)), dp=4, max_tokens=256)
    b = packd.Client.local().plan(list(range(1, 65)), dp=4, max_tokens=256)
    # The server keys its plan ids, the embedded planner does not: the
    # plans agree, the ids are both 32 hex digits.
    assert len(a.plan_id) == len(b.plan_id) == 32
    assert a.to_json().replace(a.plan_id, "").split("planTimeUs")[0] == b.to_json().replace(b.plan_id, "").split("planTimeUs")[0]
    try:
        c.plan([1, 2], dp=0)
    except packd.InvalidArgument as e:
        print("OK", e.message)
""")
    assert out.startswith("OK parallel.dp")


def test_installed_package_runs_the_example(venv, tmp_path):
    example = tmp_path / "verl_step.py"
    shutil.copy(REPO / "client" / "python" / "examples" / "verl_step.py", example)
    res = subprocess.run([str(venv), str(example), "--seed", "7"], capture_output=True, text=True,
                         cwd=str(tmp_path), env=clean_env(), timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "restored to input order: OK" in res.stdout


def working_tree_copy(dest: Path) -> Path:
    """The repository's files as a fresh clone of this working tree would
    have them (tracked and untracked, nothing ignored: no build output)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout")
def test_plain_pip_install_builds_the_native_planner(tmp_path):
    """`pip install ./client/python` in a fresh checkout, with no PACKD_*
    variable anywhere: the build drives the repository's CMake for the
    planner and GPU libraries, and the installed package plans in-process
    with no environment variable."""
    tree = working_tree_copy(tmp_path / "checkout")
    env_dir = tmp_path / "venv"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", str(env_dir)], check=True)
    py = env_dir / "bin" / "python"
    res = subprocess.run([str(py), "-m", "pip", "install", "--no-build-isolation", "--no-index", "./client/python"],
                         cwd=tree, env=clean_env(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1"),
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    out = run_in(py, """
import packd, pathlib, sys
p = pathlib.Path(packd.__file__).resolve().parent
assert str(p).startswith(sys.prefix), p
assert (p / "libpackd.so").is_file() and (p / "libpackd_gpu.so").is_file()
plan = packd.Client.local().plan([61, 69, 75, 85, 81, 82, 79, 77], dp=2, max_tokens=300)
assert sorted(plan.order().tolist()) == list(range(8))
print("OK", packd.Client.local().mode)
""")
    assert out.startswith("OK")
    # PACKD_LIB still overrides the copy inside the package.
    bad = run_in(py, """
import packd
try:
    packd.Client.local()
except FileNotFoundError as e:
    print("OK", e)
""", PACKD_LIB="/nonexistent/libpackd.so")
    assert "OK" in bad and "/nonexistent/libpackd.so" in bad
