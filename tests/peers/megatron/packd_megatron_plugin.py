"""A pytest plugin that runs a test session with packd's schedulers in
Megatron-Core's registry, in place of Megatron's own: load it with
``-p packd_megatron_plugin`` (this folder on PYTHONPATH) to run Megatron-LM's
own tests against packd (tests/peers/megatron/run.sh).

Besides ``packd.megatron.patch(replace=True)`` (every config name now builds
one of packd's classes), the module attribute ``DefaultDynamicCPScheduler``
of Megatron's ``data_schedule`` is pointed at packd's dynamic-CP class for
the session, where the version has one: Megatron's own scheduler test
imports and builds that class by name, not through the registry. The
summary counts the global batches packd scheduled, so a run shows that
Megatron's tests went through it."""

import os
import sys
from pathlib import Path

_handle = None
_calls = []  # (class name, micro-batch count) per global batch packd scheduled
_restore = []  # callables undoing this plugin's changes


def pytest_configure(config):
    global _handle
    repo = Path(__file__).resolve().parents[3]
    sys.path.insert(0, str(repo / "client" / "python"))
    os.environ.setdefault("PACKD_BUILD_DIR", str(repo / "build"))
    import packd.megatron

    _handle = packd.megatron.patch(replace=True)
    from megatron.core.datasets import data_schedule as ds

    ours = {cls for _, cls in packd.megatron.SCHEDULERS.values()}
    for key, cls in ds.scheduler_map.items():
        assert cls in ours, key

    if hasattr(ds, "DefaultDynamicCPScheduler"):
        theirs = ds.DefaultDynamicCPScheduler
        ds.DefaultDynamicCPScheduler = packd.megatron.BalancedCPScheduler
        _restore.append(lambda: setattr(ds, "DefaultDynamicCPScheduler", theirs))

    for cls in ours:
        original = cls.__dict__.get("get_groups_and_subsamples")
        if original is None:
            continue

        def counted(self, sample_id_seqlens, _original=original):
            groups = _original(self, sample_id_seqlens)
            _calls.append((type(self).__name__, len(groups)))
            return groups

        cls.get_groups_and_subsamples = counted
        _restore.append(lambda c=cls, f=original: setattr(c, "get_groups_and_subsamples", f))


def pytest_report_header(config):
    return f"packd: {_handle!r}"


def pytest_terminal_summary(terminalreporter):
    by_class = {}
    for name, count in _calls:
        by_class.setdefault(name, []).append(count)
    parts = [f"{name} {len(v)} (micro-batches: {sorted(set(v))})" for name, v in sorted(by_class.items())]
    terminalreporter.write_line(
        f"packd: {len(_calls)} global batches scheduled by packd.megatron" + (f": {', '.join(parts)}" if parts else "")
    )


def pytest_unconfigure(config):
    for restore in reversed(_restore):
        restore()
    _restore.clear()
    if _handle is not None:
        _handle.undo()
