"""pytest plugin for running a peer's own test files with packd patched in:
``pytest -p packd_peer_plugin`` with this folder on PYTHONPATH and
PACKD_PEER_PATCH naming the peers (see sitecustomize.py beside it, which
patches the processes those tests spawn). At start-up it imports each
peer's batching modules and applies packd's patch(), so the tests import
packd's functions; it fails the run at once when a peer cannot be patched,
and the report's header says what was replaced."""

import os

_handles = {}


def pytest_configure(config):
    import packd.roll
    import packd.verl

    for peer in [p.strip() for p in os.environ.get("PACKD_PEER_PATCH", "").split(",") if p.strip()]:
        _handles[peer] = {"verl": packd.verl, "roll": packd.roll}[peer].patch()


def pytest_report_header(config):
    return [
        f"packd patched {peer}: {len(h.replaced)} names replaced, skipped: {', '.join(h.skipped) or 'none'}"
        for peer, h in _handles.items()
    ]
