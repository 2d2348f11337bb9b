"""pytest setup of the packed == padded suite: the packd package from the
checkout, the libraries from $PACKD_BUILD_DIR (default: build/), this folder
importable (the spawned gloo workers import e2e_helpers by name), one torch
thread (the CI machine's cores are shared; timings are not measured here)."""

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for p in (str(REPO / "client" / "python"), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

torch = pytest.importorskip(
    "torch", reason="torch is not installed (scripts/bootstrap.sh installs python3-torch)"
)
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def client():
    import packd

    with packd.Client.local() as c:
        yield c
