"""A pytest plugin that runs a test session with packd's schedulers in
Megatron-Core's registry, in place of Megatron's own: load it with
``-p packd_megatron_plugin`` (this folder on PYTHONPATH) to run Megatron-LM's
own tests against packd (tests/peers/megatron/run.sh)."""

import os
import sys
from pathlib import Path

_handle = None


def pytest_configure(config):
    global _handle
    repo = Path(__file__).resolve().parents[3]
    sys.path.insert(0, str(repo / "client" / "python"))
    os.environ.setdefault("PACKD_BUILD_DIR", str(repo / "build"))
    import packd.megatron

    _handle = packd.megatron.patch(replace=True)
    from megatron.core.datasets import data_schedule as ds

    # Every name Megatron's config can give now builds one of packd's classes.
    ours = {cls for _, cls in packd.megatron.SCHEDULERS.values()}
    for member in ds.PackingSchedulerEnum:
        assert ds.scheduler_map[member] in ours, member


def pytest_report_header(config):
    return f"packd: {_handle!r}"


def pytest_unconfigure(config):
    if _handle is not None:
        _handle.undo()
