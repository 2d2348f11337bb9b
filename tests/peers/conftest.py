"""Shared set-up of the peer tests: they run in the venv tests/peers/env.sh
makes (torch 2.x, tensordict, the peers' PyPI releases), against packd's
client from this checkout and the libpackd.so of $PACKD_BUILD_DIR."""

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))


@pytest.fixture(scope="session")
def client():
    import packd

    return packd.Client.local()


@pytest.fixture
def patched_verl():
    """packd.verl.patch() applied to the installed verl for one test, undone
    after it (every loaded verl module that imported a name gets it back)."""
    import packd.verl

    handle = packd.verl.patch()
    yield handle
    handle.undo()

