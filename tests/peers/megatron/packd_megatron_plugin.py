"""A pytest plugin that runs a test session with packd's schedulers in
Megatron-Core's registry, in place of Megatron's own: load it with
``-p packd_megatron_plugin`` (this folder on PYTHONPATH) to run Megatron-LM's
own tests against packd (tests/peers/megatron/run.sh)."""

import os
import sys
from pathlib import Path

_handle = None
_calls = []  # one entry per global batch packd's scheduler scheduled
_original = None


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

    # Count the schedules packd makes, so the summary shows that Megatron's
    # tests went through it.
    global _original
    cls = packd.megatron.DpBalancedScheduler
    _original = cls.get_groups_and_subsamples

    def counted(self, sample_id_seqlens):
        groups = _original(self, sample_id_seqlens)
        _calls.append(len(groups))
        return groups

    cls.get_groups_and_subsamples = counted


def pytest_report_header(config):
    return f"packd: {_handle!r}"


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(
        f"packd: {len(_calls)} global batches scheduled by packd.megatron "
        f"(micro-batches: {sorted(set(_calls))})"
    )


def pytest_unconfigure(config):
    if _original is not None:
        import packd.megatron

        packd.megatron.DpBalancedScheduler.get_groups_and_subsamples = _original
    if _handle is not None:
        _handle.undo()
