"""Lazy access to the generated protobuf/gRPC modules (see packd._gen).

The first call makes sure the stubs exist and match the proto, then imports
them; later calls return the cached modules.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_mods: dict = {}


def _load() -> dict:
    with _lock:
        if not _mods:
            from . import _gen

            _gen.ensure()
            from ._proto import packd_pb2, packd_pb2_grpc

            _mods["pb2"] = packd_pb2
            _mods["grpc"] = packd_pb2_grpc
    return _mods


def pb2():
    """The packd_pb2 module (messages)."""
    return _load()["pb2"]


def pb2_grpc():
    """The packd_pb2_grpc module (PlannerStub)."""
    return _load()["grpc"]
