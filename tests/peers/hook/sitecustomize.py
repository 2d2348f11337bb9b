"""Applies packd's patch() to a peer as soon as the peer's batching module
is imported, in every Python process that starts with this folder on
PYTHONPATH and PACKD_PEER_PATCH set: the pytest process and the workers a
peer's distributed test spawns (``mp.spawn`` starts fresh interpreters, so
a patch applied in the parent alone would not reach them).

PACKD_PEER_PATCH: a comma-separated list of "verl" and "roll". The patch
runs right after the last of the peer's watched modules has executed,
before any module that imports a function from them by name goes on, so
every caller sees packd's version. The pytest plugin beside this file
(packd_peer_plugin) imports them all at start-up, so in the test process
the patch is in place before any test module loads.
PACKD_PEER_PATCH_LOG: a file each process appends one line to per patch
applied ("<pid> <peer> <replaced count>"), so a run can prove that its
workers were patched.
"""

import importlib.abc
import importlib.machinery
import os
import sys

_WATCH = {
    "verl": ("verl.utils.seqlen_balancing",),
    "roll": ("roll.utils.dynamic_batching", "roll.utils.functionals", "roll.utils.sequence_packing"),
}


def _apply(peer: str) -> None:
    import packd.roll
    import packd.verl

    handle = {"verl": packd.verl, "roll": packd.roll}[peer].patch()
    log = os.environ.get("PACKD_PEER_PATCH_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {peer} {len(handle.replaced)}\n")


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds the watched modules with the ordinary path finder and runs a
    peer's patch once all of its watched modules have executed: patching
    from inside an import that is still running could meet a module of the
    peer half made (ROLL's modules import each other)."""

    def __init__(self, peers):
        self.waiting = {p: set(_WATCH[p]) for p in peers}

    def find_spec(self, name, path, target=None):
        peer = next((p for p, mods in self.waiting.items() if name in mods), None)
        if peer is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            mods = self.waiting.get(peer)
            if mods is None:
                return
            mods.discard(name)
            if not mods:
                del self.waiting[peer]
                _apply(peer)

        spec.loader.exec_module = exec_module
        return spec


_peers = [p.strip() for p in os.environ.get("PACKD_PEER_PATCH", "").split(",") if p.strip()]
_unknown = [p for p in _peers if p not in _WATCH]
if _unknown:
    raise SystemExit(f"PACKD_PEER_PATCH: unknown peer {_unknown[0]!r} (expected verl or roll)")
if _peers:
    sys.meta_path.insert(0, _PatchAfterImport(_peers))
