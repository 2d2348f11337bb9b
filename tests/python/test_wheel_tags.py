"""The wheel's tags (client/python/setup.py): with the native libraries the
wheel is py3-none-<platform> and not pure, since Python loads them with
ctypes and they fit every Python 3 of the platform; without them
(PACKD_NO_NATIVE=1) it is pure, py3-none-any. Built with Debian's setuptools
and wheel (the bdist_wheel of the wheel package), from libraries built
beforehand (PACKD_BUILD_DIR). scripts/build-wheel.sh then repairs the first
kind with auditwheel and scripts/check-wheel.sh installs it in a bare
container; the container's check itself must refuse a package that is not
installed, which the last test shows."""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("PACKD_BUILD_DIR", REPO / "build"))
SYSTEM_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
PLATFORM = sysconfig.get_platform().replace("-", "_").replace(".", "_")


def build_wheel(tmp_path, **env):
    src = tmp_path / "src"
    shutil.copytree(REPO / "client" / "python", src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "_proto", "__pycache__", "*.so"))
    out = tmp_path / "out"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PACKD_")}
    full_env.update(PACKD_PROTO_DIR=str(REPO / "proto"), PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", **env)
    res = subprocess.run([SYSTEM_PYTHON, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                          "-w", str(out), str(src)], env=full_env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    (wheel,) = out.glob("packd-*.whl")
    return wheel


def metadata(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = next(n for n in names if n.endswith(".dist-info/WHEEL"))
        return names, z.read(info).decode()


@pytest.mark.skipif(not (BUILD / "server" / "libpackd.so").is_file(), reason="needs a build with libpackd.so")
def test_native_wheel_is_any_python_of_the_platform(tmp_path):
    wheel = build_wheel(tmp_path, PACKD_BUILD_DIR=str(BUILD))
    assert wheel.name == f"packd-0.1.0-py3-none-{PLATFORM}.whl"
    names, info = metadata(wheel)
    assert "packd/libpackd.so" in names and "packd/_proto/packd_pb2.py" in names
    assert ("packd/libpackd_gpu.so" in names) == (BUILD / "gpu" / "libpackd_gpu.so").is_file()
    assert "Root-Is-Purelib: false" in info and f"Tag: py3-none-{PLATFORM}" in info


def test_wheel_without_native_libraries_is_pure(tmp_path):
    wheel = build_wheel(tmp_path, PACKD_NO_NATIVE="1")
    assert wheel.name == "packd-0.1.0-py3-none-any.whl"
    names, info = metadata(wheel)
    assert not [n for n in names if n.endswith(".so")]
    assert "Root-Is-Purelib: true" in info


def test_installed_check_refuses_the_source_tree(tmp_path):
    reference = tmp_path / "reference.json"
    reference.write_text('{"plan_id": "", "micro_batches": []}')
    env = dict(os.environ, PYTHONPATH=str(REPO / "client" / "python"), PACKD_BUILD_DIR=str(BUILD))
    res = subprocess.run([SYSTEM_PYTHON, str(REPO / "tests" / "wheel" / "installed_check.py"), "--expect",
                          str(reference)], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert "not an install" in res.stderr
