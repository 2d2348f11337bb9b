"""Megatron-Core peer tests: packd from this checkout, Megatron-Core from the
pinned venv (tests/peers/requirements-megatron.txt) and, where
MEGATRON_LM_SRC names a Megatron-LM source tree (outside this repository),
Megatron-LM's code from there in front of the installed release (the
scheduler registry is in Megatron-LM main, not in a release yet)."""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
sys.path.insert(0, str(HERE))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

SRC = os.environ.get("MEGATRON_LM_SRC")
if SRC:
    sys.path.insert(0, str(Path(SRC).resolve()))
