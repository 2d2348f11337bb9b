"""The embedded planner: libpackd.so through ctypes.

``pk_plan_bytes`` (server/codec/codec.h) takes serialized PlanRequest bytes and
returns serialized PlanResponse bytes, running the same codec and planner
as the server. Because the Python side hands over exactly the bytes it
would send over gRPC and parses exactly the bytes it would receive, remote
and embedded modes give identical plans by construction.

Where the library is found, first match wins:
1. the ``library`` argument;
2. ``PACKD_LIB`` (a path to the file);
3. ``libpackd.so`` next to this package (copied there at install time when
   PACKD_BUILD_DIR or PACKD_LIB was set);
4. ``$PACKD_BUILD_DIR/server/libpackd.so``.
"""

from __future__ import annotations

import ctypes
import os
from collections import OrderedDict
from pathlib import Path

from . import _stubs
from .errors import InvalidArgument, NotFound, error_for

_ERR_LEN = 1024


def find_library(library=None) -> Path:
    """The path of libpackd.so by the rules above; FileNotFoundError naming
    every place looked at otherwise."""
    tried = []
    candidates = []
    if library:
        candidates.append(("library argument", Path(library)))
    if os.environ.get("PACKD_LIB"):
        candidates.append(("PACKD_LIB", Path(os.environ["PACKD_LIB"])))
    candidates.append(("next to the package", Path(__file__).resolve().parent / "libpackd.so"))
    if os.environ.get("PACKD_BUILD_DIR"):
        candidates.append(("PACKD_BUILD_DIR", Path(os.environ["PACKD_BUILD_DIR"]) / "server" / "libpackd.so"))
    for origin, path in candidates:
        if path.is_file():
            return path
        tried.append(f"{path} ({origin})")
        if origin in ("library argument", "PACKD_LIB"):
            break  # An explicit choice that does not exist is an error, not a hint.
    raise FileNotFoundError(
        "libpackd.so not found; looked at: " + "; ".join(tried)
        + ". Build it (cmake --build <dir>) and set PACKD_LIB or PACKD_BUILD_DIR."
    )


class Library:
    """A loaded libpackd.so with typed entry points."""

    def __init__(self, path):
        self.path = Path(path)
        self._lib = ctypes.CDLL(str(self.path))
        f = self._lib.pk_plan_bytes
        f.argtypes = [
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.POINTER(ctypes.c_uint8)),
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.c_char_p,
            ctypes.c_size_t,
        ]
        f.restype = ctypes.c_int
        self._plan_bytes = f
        self._free = self._lib.pk_codec_free_bytes
        self._free.argtypes = [ctypes.POINTER(ctypes.c_uint8)]
        self._free.restype = None
        self._status = self._lib.pk_status_from_error
        self._status.argtypes = [ctypes.c_int]
        self._status.restype = ctypes.c_int

    def plan_bytes(self, request: bytes) -> bytes:
        """Runs pk_plan_bytes. Raises the PlanError subclass of the status
        the server would send (pk_status_from_error) with the planner's
        message."""
        out = ctypes.POINTER(ctypes.c_uint8)()
        out_len = ctypes.c_size_t(0)
        err = ctypes.create_string_buffer(_ERR_LEN)
        rc = self._plan_bytes(request, len(request), ctypes.byref(out), ctypes.byref(out_len), err, _ERR_LEN)
        if rc != 0:
            message = err.value.decode("utf-8", "replace") or f"pk_plan_bytes failed with code {rc}"
            raise error_for(self._status(rc), message)
        try:
            return ctypes.string_at(out, out_len.value)
        finally:
            self._free(out)


class EmbeddedTransport:
    """Plans in-process; keeps the most recent plans so that rank_plan works
    as it does against a server (NOT_FOUND once a plan has left the cache)."""

    kind = "embedded"

    def __init__(self, library=None, cache_plans: int = 16):
        self.library = Library(find_library(library))
        self._cache: OrderedDict = OrderedDict()
        self._cache_plans = int(cache_plans)

    def plan(self, request, timeout):
        pb = _stubs.pb2()
        data = self.library.plan_bytes(request.SerializeToString())
        resp = pb.PlanResponse.FromString(data)
        if self._cache_plans > 0:
            self._cache[resp.plan_id] = resp
            self._cache.move_to_end(resp.plan_id)
            while len(self._cache) > self._cache_plans:
                self._cache.popitem(last=False)
        return resp

    def rank_plan(self, request, timeout):
        resp = self._cache.get(request.plan_id)
        if resp is None:
            raise NotFound(f"plan_id: \"{request.plan_id}\" is not in the embedded plan cache")
        if resp.HasField("dynamic_cp"):
            # The server keeps every GPU's slice of the plan that the same
            # encoder packed; here it is cut from the whole answer, which
            # tests/python/test_rank_plan_dynamic_cp.py checks gives the
            # same bytes.
            from .dcp import rank_plan_message

            return rank_plan_message(resp, request.dp_rank)
        for rp in resp.ranks:
            if rp.dp_rank == request.dp_rank:
                out = _stubs.pb2().RankPlan()
                out.CopyFrom(rp)
                if not out.plan_id:
                    out.plan_id = resp.plan_id
                return out
        raise InvalidArgument(f"dp_rank: {request.dp_rank} is not a rank of plan {request.plan_id} (dp {len(resp.ranks)})")

    # The services the server's Health/Check knows (server/handlers.c);
    # any other name is NOT_FOUND there, and so it is here, with the same
    # message, so that code written against one mode behaves the same in
    # the other.
    HEALTH_SERVICES = ("", "packd.v1.Planner")

    def health(self, service, timeout) -> str:
        if service not in self.HEALTH_SERVICES:
            raise NotFound(f"service \"{service[:200]}\" is unknown; known: \"\", \"packd.v1.Planner\"")
        return "SERVING"

    def close(self):
        self._cache.clear()


__all__ = ["EmbeddedTransport", "Library", "find_library"]
