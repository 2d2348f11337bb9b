"""Helpers for the codec and packctl tests: Python protobuf stubs generated
at test time, libpackd.so through ctypes, and packctl as a subprocess.

The stubs come from ``protoc --python_out`` into a temporary folder and are
loaded under a private module name (``pk_codec_test_pb2``) so that they
cannot clash with the ``packd`` Python package; the proto file name inside
stays ``packd/v1/packd.proto``, which the descriptor pool accepts again when
the contents are identical.

Environment: PACKD_BUILD_DIR (default <repo>/build) holds
client/c/packctl and server/libpackd.so.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("PACKD_BUILD_DIR", REPO / "build"))
PACKCTL = BUILD / "client" / "c" / "packctl"
LIBPACKD = BUILD / "server" / "libpackd.so"
WORKLOADS = REPO / "bench" / "workloads"

_pb2 = None
_lib = None


def pb2():
    """The generated module of proto/packd/v1/packd.proto."""
    global _pb2
    if _pb2 is None:
        out = Path(tempfile.mkdtemp(prefix="pk_codec_pb2_"))
        subprocess.run(
            ["protoc", f"-I{REPO / 'proto'}", f"--python_out={out}", "packd/v1/packd.proto"],
            check=True,
        )
        path = out / "packd" / "v1" / "packd_pb2.py"
        spec = importlib.util.spec_from_file_location("pk_codec_test_pb2", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["pk_codec_test_pb2"] = module
        spec.loader.exec_module(module)
        _pb2 = module
    return _pb2


def packctl_path() -> str:
    assert PACKCTL.is_file(), f"packctl not built at {PACKCTL} (set PACKD_BUILD_DIR)"
    return str(PACKCTL)


def run_packctl(*args, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """Runs packctl with args; returns the completed process (bytes out)."""
    return subprocess.run(
        [packctl_path(), *[str(a) for a in args]], input=stdin, capture_output=True, timeout=120
    )


def lib():
    """libpackd.so with pk_plan_bytes and pk_codec_free_bytes declared."""
    global _lib
    if _lib is None:
        assert LIBPACKD.is_file(), f"libpackd.so not built at {LIBPACKD}"
        so = ctypes.CDLL(str(LIBPACKD))
        so.pk_plan_bytes.argtypes = [
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.POINTER(ctypes.c_uint8)),
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.c_char_p,
            ctypes.c_size_t,
        ]
        so.pk_plan_bytes.restype = ctypes.c_int
        so.pk_codec_free_bytes.argtypes = [ctypes.POINTER(ctypes.c_uint8)]
        so.pk_codec_free_bytes.restype = None
        so.pk_status_from_error.argtypes = [ctypes.c_int]
        so.pk_status_from_error.restype = ctypes.c_int
        _lib = so
    return _lib


def plan_bytes(request: bytes) -> tuple[int, bytes, str]:
    """pk_plan_bytes on request bytes: (code, response bytes, message)."""
    so = lib()
    out = ctypes.POINTER(ctypes.c_uint8)()
    out_len = ctypes.c_size_t(0)
    err = ctypes.create_string_buffer(1024)
    rc = so.pk_plan_bytes(request, len(request), ctypes.byref(out), ctypes.byref(out_len), err,
                          len(err))
    data = b""
    if rc == 0:
        data = ctypes.string_at(out, out_len.value)
        so.pk_codec_free_bytes(out)
    else:
        assert not out, "pk_plan_bytes returned a buffer with an error"
    return rc, data, err.value.decode()


def varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def field_bytes(number: int, wire: int, payload: bytes | int) -> bytes:
    """One encoded field: a varint value (wire 0) or length-delimited bytes
    (wire 2)."""
    key = varint((number << 3) | wire)
    if wire == 0:
        return key + varint(payload)
    return key + varint(len(payload)) + payload
