"""packd.gpu: the GPU agent (libpackd_gpu) through ctypes.

Applies a micro-batch layout to a worker's tensors: spans from an attention
mask, pack (with fill, optionally one CP rank's zigzag or Ulysses part),
position ids, next-token labels built per sequence before any split, and
unpack back to ``[B, S, ...]`` with 0 in every non-valid slot.

Arrays: numpy arrays run on the host backend; torch CPU tensors too; torch
CUDA tensors run on the CUDA backend, on the current stream, without host
synchronisation. Every array must be C-contiguous. All arrays of one call
live on one device. ``seqs`` and ``cu_seqlens_padded`` come from the plan and
are host data (a list, numpy array or CPU tensor).

The library is found, in order, at ``$PACKD_GPU_LIB``, next to this file,
``$PACKD_BUILD_DIR/gpu/libpackd_gpu.so`` and ``$PACKD_BUILD_DIR/libpackd_gpu.so``.

Errors: bad arguments raise ``GpuInvalidArgument`` (a ``ValueError``) or
``TypeError``, naming the argument and its value. Bad data that a CUDA kernel
finds (a span longer than its slot, a mask row with a hole) cannot be raised
by an asynchronous call: the kernel writes safe values and ``check()`` raises
it later (it synchronises). On the host backend the call raises at once.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import numpy as np

from ._arrays import integer_error

__all__ = [
    "GpuError",
    "TorchTransport",
    "dcp_align",
    "dcp_cu",
    "dcp_group",
    "dcp_padding_mask",
    "exchange",
    "nccl_unique_id",
    "route_items",
    "xitems_from_assignments",
    "GpuInvalidArgument",
    "GpuUnavailable",
    "NcclTransport",
    "IGNORE_INDEX",
    "Layout",
    "available",
    "build_flags",
    "check",
    "cp_index_map",
    "cu_from_lengths",
    "labels",
    "library_path",
    "pack",
    "pack_many",
    "position_ids",
    "spans",
    "unpack",
]

IGNORE_INDEX = -100

# Codes of gpu/include/pk_gpu.h.
_EINVAL, _EPRECOND, _ENOMEM, _EINTERNAL, _ENOTSUP, _EDEVICE, _ETIMEOUT = -1, -2, -3, -4, -7, -8, -9
_HOST, _CUDA = 0, 1
# "contiguous" (verl's name for dynamic CP) is the Ulysses shard: [r*T/cp, (r+1)*T/cp).
_ALGOS = {"zigzag": 0, "ulysses": 1, "contiguous": 1}
_COPY, _LABELS, _POS_OFFSET, _POS_RESTART, _VALID = 0, 1, 2, 3, 4
_MAX_OPS = 64


class GpuError(RuntimeError):
    """A libpackd_gpu call failed; ``code`` is the library's error code."""

    def __init__(self, message: str, code: int = _EINTERNAL):
        super().__init__(message)
        self.code = code
        self.message = message


class GpuInvalidArgument(GpuError, ValueError):
    """A bad argument or bad data (a span, a mask row)."""


class GpuUnavailable(GpuError):
    """The CUDA backend or NCCL is not built in, or there is no CUDA device."""


# ---- Library loading -------------------------------------------------------


class _LayoutDesc(ctypes.Structure):
    _fields_ = [
        ("batch", ctypes.c_int32),
        ("seqlen", ctypes.c_int32),
        ("nseqs", ctypes.c_int32),
        ("seqs", ctypes.c_void_p),
        ("cu_pad", ctypes.c_void_p),
        ("cp", ctypes.c_int32),
        ("cp_algo", ctypes.c_int32),
    ]


class _Op(ctypes.Structure):
    _fields_ = [
        ("field", ctypes.c_int32),
        ("elem_size", ctypes.c_int32),
        ("width", ctypes.c_int64),
        ("src", ctypes.c_void_p),
        ("dst", ctypes.c_void_p),
        ("fill_bits", ctypes.c_uint64),
        ("value_bits", ctypes.c_uint64),
    ]


_lib = None
_lib_path = None
_lib_lock = threading.Lock()


def _candidates() -> list[Path]:
    out = []
    env = os.environ.get("PACKD_GPU_LIB")
    if env:
        return [Path(env)]
    out.append(Path(__file__).resolve().parent / "libpackd_gpu.so")
    build = os.environ.get("PACKD_BUILD_DIR")
    if build:
        out += [Path(build) / "gpu" / "libpackd_gpu.so", Path(build) / "libpackd_gpu.so"]
    return out


def _load():
    global _lib, _lib_path
    with _lib_lock:
        if _lib is not None:
            return _lib
        tried = _candidates()
        path = next((p for p in tried if p.is_file()), None)
        if path is None:
            raise OSError(
                "libpackd_gpu.so not found; tried "
                + ", ".join(str(p) for p in tried)
                + " (set PACKD_GPU_LIB to the library or PACKD_BUILD_DIR to a build folder)"
            )
        lib = ctypes.CDLL(str(path))
        i32, i64, vp = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p
        sigs = {
            "pk_gpu_strerror": ([ctypes.c_int], ctypes.c_char_p),
            "pk_gpu_last_error": ([], ctypes.c_char_p),
            "pk_gpu_build_flags": ([], ctypes.c_int),
            "pk_gpu_version": ([], ctypes.c_char_p),
            "pk_gpu_backend_available": ([ctypes.c_int], ctypes.c_int),
            "pk_gpu_ctx_create": ([ctypes.c_int, ctypes.c_int, ctypes.POINTER(vp)], ctypes.c_int),
            "pk_gpu_ctx_destroy": ([vp], None),
            "pk_gpu_ctx_set_stream": ([vp, vp], ctypes.c_int),
            "pk_gpu_ctx_check": ([vp], ctypes.c_int),
            "pk_gpu_ctx_sync": ([vp], ctypes.c_int),
            "pk_gpu_layout_create": ([vp, ctypes.POINTER(_LayoutDesc), ctypes.POINTER(vp)], ctypes.c_int),
            "pk_gpu_layout_destroy": ([vp], None),
            "pk_gpu_layout_tokens": ([vp], i64),
            "pk_gpu_layout_local_tokens": ([vp], i64),
            "pk_gpu_spans": ([vp, vp, i32, i32, i32, vp, vp], ctypes.c_int),
            "pk_gpu_pack": ([vp, vp, vp, vp, i32, ctypes.POINTER(_Op), i32], ctypes.c_int),
            "pk_gpu_unpack": ([vp, vp, vp, vp, i32, ctypes.POINTER(_Op), i32], ctypes.c_int),
            "pk_gpu_cu_from_lengths": ([i32, vp, i32, vp, vp], ctypes.c_int),
            "pk_gpu_cp_index_map": ([i32, vp, i32, i32, i32, vp], ctypes.c_int),
            "pk_gpu_cp_real_cu": ([i32, vp, vp, i32, i32, i32, vp], ctypes.c_int),
            "pk_gpu_dcp_align": ([i32, i32, i32, vp], ctypes.c_int),
            "pk_gpu_dcp_cu": ([i32, vp, i32, i32, i32, i32, vp, vp], ctypes.c_int),
            "pk_gpu_dcp_padding_mask": ([i32, vp, vp, i32, i32, i32, vp], ctypes.c_int),
            "pk_gpu_xitems_route": ([i32, i32, vp, vp, vp, vp, vp, vp], ctypes.c_int),
            "pk_gpu_xitems_from_assignments": ([i32, i32, vp, vp, vp, vp, vp, vp], ctypes.c_int),
            "pk_gpu_exchange": ([vp, vp, i64, i64, vp, vp, vp], ctypes.c_int),
            "pk_gpu_nccl_unique_id": ([vp], ctypes.c_int),
            "pk_gpu_nccl_comm_init": ([i32, vp, i32, ctypes.c_int, ctypes.POINTER(vp)], ctypes.c_int),
            "pk_gpu_nccl_comm_destroy": ([vp], None),
            "pk_gpu_nccl_transport_create": ([vp, vp, ctypes.POINTER(vp)], ctypes.c_int),
            "pk_gpu_nccl_transport_destroy": ([vp], None),
        }
        for name, (args, res) in sigs.items():
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = res
        _lib, _lib_path = lib, path
        return lib


def library_path() -> Path:
    """The path of the loaded libpackd_gpu.so (loads it if needed)."""
    _load()
    return _lib_path


def build_flags() -> dict:
    """{"cuda": bool, "nccl": bool, "version": str} of the loaded library."""
    lib = _load()
    f = lib.pk_gpu_build_flags()
    return {"cuda": bool(f & 1), "nccl": bool(f & 2), "version": lib.pk_gpu_version().decode()}


def _raise(rc: int, lib=None):
    lib = lib or _load()
    msg = lib.pk_gpu_last_error().decode(errors="replace") or lib.pk_gpu_strerror(rc).decode()
    if rc == _EINVAL or rc == _EPRECOND:
        raise GpuInvalidArgument(msg, rc)
    if rc == _ENOMEM:
        raise MemoryError(msg)
    if rc == _ENOTSUP:
        raise GpuUnavailable(msg, rc)
    raise GpuError(msg, rc)


def _ok(rc: int):
    if rc != 0:
        _raise(rc)


def available() -> bool:
    """True when the CUDA backend is built in and a CUDA device is visible."""
    return _load().pk_gpu_backend_available(_CUDA) == 0


# ---- Contexts: one per thread and device --------------------------------

_tls = threading.local()


class _Ctx:
    def __init__(self, backend: int, device: int):
        lib = _load()
        p = ctypes.c_void_p()
        _ok(lib.pk_gpu_ctx_create(backend, device, ctypes.byref(p)))
        self.ptr = p
        self.backend = backend
        self._lib = lib

    def __del__(self):
        try:
            self._lib.pk_gpu_ctx_destroy(self.ptr)
        except Exception:
            pass


def _ctx(dev) -> _Ctx:
    """The calling thread's context for dev (None = host, else a CUDA index)."""
    cache = getattr(_tls, "ctxs", None)
    if cache is None:
        cache = _tls.ctxs = {}
    ctx = cache.get(dev)
    if ctx is None:
        ctx = cache[dev] = _Ctx(_HOST if dev is None else _CUDA, 0 if dev is None else dev)
    if dev is not None:
        import torch  # Only reached with CUDA tensors.

        stream = torch.cuda.current_stream(dev).cuda_stream
        _ok(ctx._lib.pk_gpu_ctx_set_stream(ctx.ptr, ctypes.c_void_p(stream)))
    return ctx


def check(device=None) -> None:
    """Raises the first bad datum a CUDA kernel saw since the last check on
    this thread's context for ``device`` (a torch device or index; waits for
    the current stream). The host backend raises at once, so for it this
    always returns."""
    dev = _device_index(device)
    if dev is None:
        return
    ctx = _ctx(dev)
    _ok(ctx._lib.pk_gpu_ctx_check(ctx.ptr))


def _device_index(device):
    if device is None:
        return None
    if isinstance(device, int):
        return device
    t = getattr(device, "type", None)
    if t == "cpu":
        return None
    if t == "cuda":
        import torch

        return device.index if device.index is not None else torch.cuda.current_device()
    raise TypeError(f"device: expected None, an int or a torch device, got {device!r}")


# ---- Arrays ----------------------------------------------------------------


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


class _Arr:
    """What the library needs to know about one numpy array or torch tensor."""

    __slots__ = ("obj", "torch", "dev", "ptr", "shape", "itemsize", "dtype")

    def __init__(self, x, name: str, *, writable: bool = False):
        if isinstance(x, np.ndarray):
            if not x.flags.c_contiguous:
                raise ValueError(f"{name}: must be C-contiguous (use np.ascontiguousarray)")
            if writable and not x.flags.writeable:
                raise ValueError(f"{name}: is read-only")
            self.torch, self.dev, self.ptr = False, None, x.ctypes.data
            self.itemsize, self.dtype = x.itemsize, x.dtype
        elif _is_torch(x):
            if not x.is_contiguous():
                raise ValueError(f"{name}: must be contiguous (use .contiguous())")
            if x.device.type not in ("cpu", "cuda"):
                raise TypeError(f"{name}: tensors on {x.device} are not supported (cpu or cuda)")
            self.torch = True
            self.dev = _device_index(x.device)
            self.ptr = x.data_ptr()
            self.itemsize, self.dtype = x.element_size(), x.dtype
        else:
            raise TypeError(f"{name}: expected a numpy array or torch tensor, got {type(x).__name__}")
        self.obj = x
        self.shape = tuple(x.shape)


def _host_index(x, name: str) -> np.ndarray:
    """Plan data (seqs, cu_seqlens_padded) as a contiguous int32 host array."""
    if _is_torch(x):
        if x.device.type != "cpu":
            raise TypeError(
                f"{name}: must be host data (list, numpy array or CPU tensor); a tensor on "
                f"{x.device} would need a device-to-host synchronisation"
            )
        x = x.detach().numpy()
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise ValueError(integer_error(name, x, a))
    if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
        i = int(np.flatnonzero((a < np.iinfo(np.int32).min) | (a > np.iinfo(np.int32).max))[0])
        raise ValueError(f"{name}[{i}]: {int(a[i])} is outside int32")
    return np.ascontiguousarray(a, dtype=np.int32)


def _spans_arg(x, name: str, batch: int, dev):
    """start/length: [B] int32 on the call's device (converted when needed)."""
    if x is None:
        return None, None
    if _is_torch(x):
        import torch

        if tuple(x.shape) != (batch,):
            raise ValueError(f"{name}: expected shape ({batch},), got {tuple(x.shape)}")
        if x.dtype != torch.int32:
            x = x.to(torch.int32)
        x = x.contiguous()
    else:
        a = np.asarray(x)
        if a.shape != (batch,):
            raise ValueError(f"{name}: expected shape ({batch},), got {a.shape}")
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise ValueError(integer_error(name, x, a))
        x = np.ascontiguousarray(a, dtype=np.int32)
    arr = _Arr(x, name)
    if arr.dev != dev:
        raise ValueError(f"{name}: on device {arr.dev}, but the tensors are on {dev}")
    return x, arr.ptr


def _elem_bits(value, like, itemsize: int, name: str) -> int:
    """The bit pattern of `value` as one element of like's dtype."""
    if _is_torch(like):
        import torch

        try:
            t = torch.tensor([value], dtype=like.dtype)
        except Exception as exc:
            raise ValueError(f"{name}: {value!r} is not a {like.dtype} value: {exc}") from None
        raw = t.view(torch.uint8).numpy().tobytes()
    else:
        try:
            raw = np.array([value], dtype=like.dtype).tobytes()
        except Exception as exc:
            raise ValueError(f"{name}: {value!r} is not a {like.dtype} value: {exc}") from None
    return int.from_bytes(raw[:itemsize], "little")


def _empty(shape, like, dtype=None):
    """A new array of shape on like's device (dtype defaults to like's)."""
    if _is_torch(like):
        import torch

        return torch.empty(shape, dtype=dtype or like.dtype, device=like.device)
    return np.empty(shape, dtype=dtype or like.dtype)


def _np_or_torch_dtype(like, np_dtype):
    if _is_torch(like):
        import torch

        return {np.int64: torch.int64, np.int32: torch.int32, np.bool_: torch.bool}[np_dtype]
    return np_dtype


# ---- Layout ------------------------------------------------------------------


class Layout:
    """One micro-batch layout on one device, uploaded once and reused.

    ``seqs``: rows of the padded batch in packed order; ``cu_seqlens_padded``:
    n+1 slot offsets (host data); ``batch``/``seqlen``: B and S of the padded
    tensors; ``device``: None for the host, or a CUDA index / torch device."""

    def __init__(self, seqs, cu_seqlens_padded, batch: int, seqlen: int, *, cp: int = 1,
                 cp_algo: str = "zigzag", device=None):
        if cp_algo not in _ALGOS:
            raise ValueError(f"cp_algo: expected 'zigzag', 'ulysses' or 'contiguous', got {cp_algo!r}")
        if not isinstance(cp, (int, np.integer)) or cp < 1:
            raise ValueError(f"cp: expected an int >= 1, got {cp!r}")
        self._seqs = _host_index(seqs, "seqs")
        self._cu = _host_index(cu_seqlens_padded, "cu_seqlens_padded")
        if self._cu.size != self._seqs.size + 1:
            raise ValueError(
                f"cu_seqlens_padded: expected len(seqs)+1 = {self._seqs.size + 1} entries, got {self._cu.size}"
            )
        self.batch, self.seqlen, self.cp, self.cp_algo = int(batch), int(seqlen), int(cp), cp_algo
        self.device = _device_index(device)
        self._ctx = _ctx(self.device)
        self._lib = self._ctx._lib
        d = _LayoutDesc(self.batch, self.seqlen, self._seqs.size, self._seqs.ctypes.data,
                        self._cu.ctypes.data, self.cp, _ALGOS[cp_algo])
        p = ctypes.c_void_p()
        _ok(self._lib.pk_gpu_layout_create(self._ctx.ptr, ctypes.byref(d), ctypes.byref(p)))
        self._ptr = p
        self.tokens = int(self._lib.pk_gpu_layout_tokens(p))
        self.local_tokens = int(self._lib.pk_gpu_layout_local_tokens(p))

    def close(self):
        if getattr(self, "_ptr", None):
            if self.device is not None:
                _ctx(self.device)  # Frees in order on the current stream.
            self._lib.pk_gpu_layout_destroy(self._ptr)
            self._ptr = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _run(self, unpack: bool, start, length, cp_rank: int, ops):
        ctx = _ctx(self.device)
        start_obj, start_ptr = _spans_arg(start, "start", self.batch, self.device)
        length_obj, length_ptr = _spans_arg(length, "length", self.batch, self.device)
        if length_ptr is None:
            raise ValueError("length: the valid length of every row is required")
        arr = (_Op * max(1, len(ops)))(*ops)
        fn = self._lib.pk_gpu_unpack if unpack else self._lib.pk_gpu_pack
        rc = fn(ctx.ptr, self._ptr, start_ptr, length_ptr, int(cp_rank), arr, len(ops))
        del start_obj, length_obj  # Kept alive until the call returned.
        _ok(rc)

    def _rank(self, cp_rank, allow_none: bool) -> int:
        if cp_rank is None:
            if not allow_none:
                raise ValueError("cp_rank: expected 0..cp-1, got None")
            return -1
        if not isinstance(cp_rank, (int, np.integer)) or not 0 <= cp_rank < self.cp:
            raise ValueError(f"cp_rank: expected 0..{self.cp - 1}, got {cp_rank!r}")
        return int(cp_rank)

    def _check_x(self, x, name: str) -> _Arr:
        a = _Arr(x, name)
        if len(a.shape) < 2 or a.shape[:2] != (self.batch, self.seqlen):
            raise ValueError(f"{name}: expected shape [B, S, ...] = [{self.batch}, {self.seqlen}, ...], got {list(a.shape)}")
        if a.itemsize not in (1, 2, 4, 8):
            raise TypeError(f"{name}: element size {a.itemsize} bytes is not supported (1, 2, 4, 8)")
        if a.dev != self.device:
            raise ValueError(f"{name}: on device {a.dev}, but the layout is on {self.device}")
        return a

    def _out(self, out, shape, like, name: str, dtype=None):
        if out is None:
            return _empty(shape, like, dtype)
        o = _Arr(out, name, writable=True)
        if o.shape != tuple(shape):
            raise ValueError(f"{name}: expected shape {list(shape)}, got {list(o.shape)}")
        want = dtype or _Arr(like, "x").dtype
        if o.dtype != want:
            raise TypeError(f"{name}: expected dtype {want}, got {o.dtype}")
        if o.dev != self.device:
            raise ValueError(f"{name}: on device {o.dev}, but the layout is on {self.device}")
        return out

    def pack(self, x, start, length, *, cp_rank: int = 0, fill=0, out=None):
        """x [B, S, ...] -> [T/cp, ...]: valid tokens of each slot, then fill."""
        a = self._check_x(x, "x")
        r = self._rank(cp_rank, False)
        width = int(np.prod(a.shape[2:], dtype=np.int64)) if len(a.shape) > 2 else 1
        out = self._out(out, (self.local_tokens,) + a.shape[2:], x, "out")
        op = _Op(_COPY, a.itemsize, max(width, 1), a.ptr, _Arr(out, "out").ptr,
                 _elem_bits(fill, x, a.itemsize, "fill"), 0)
        if width > 0:
            self._run(False, start, length, r, [op])
        return out

    def labels(self, ids, start, length, *, cp_rank: int = 0, ignore_index: int = IGNORE_INDEX, out=None):
        """Next-token labels of ids [B, S, ...] per sequence, [T/cp, ...]."""
        a = self._check_x(ids, "ids")
        r = self._rank(cp_rank, False)
        width = int(np.prod(a.shape[2:], dtype=np.int64)) if len(a.shape) > 2 else 1
        out = self._out(out, (self.local_tokens,) + a.shape[2:], ids, "out")
        op = _Op(_LABELS, a.itemsize, max(width, 1), a.ptr, _Arr(out, "out").ptr,
                 _elem_bits(ignore_index, ids, a.itemsize, "ignore_index"), 0)
        if width > 0:
            self._run(False, start, length, r, [op])
        return out

    def position_ids(self, length, *, cp_rank: int = 0, style: str = "offset", like=None, dtype=np.int64, out=None):
        """Position ids [T/cp] (int64 or int32): "offset" in the padded slot
        (TE/Megatron) or "restart" at 0 (HF, padding restarts too)."""
        if style not in ("offset", "restart"):
            raise ValueError(f"style: expected 'offset' or 'restart', got {style!r}")
        if dtype not in (np.int64, np.int32):
            raise TypeError(f"dtype: expected np.int64 or np.int32, got {dtype!r}")
        r = self._rank(cp_rank, False)
        like = length if like is None else like
        tdt = _np_or_torch_dtype(like, dtype)
        out = self._out(out, (self.local_tokens,), like, "out", tdt)
        o = _Arr(out, "out", writable=True)
        op = _Op(_POS_OFFSET if style == "offset" else _POS_RESTART, o.itemsize, 1, None, o.ptr, 0, 0)
        self._run(False, None, length, r, [op])
        return out

    def unpack(self, y, start, length, out, *, cp_rank=None):
        """Writes the rows seqs of out [B, S, ...]: valid tokens from y, 0
        elsewhere in those rows. cp_rank=None: y holds every rank's part
        gathered in rank order [T, ...]; else y is that rank's [T/cp, ...]."""
        r = self._rank(cp_rank, True)
        ya = _Arr(y, "y")
        oa = self._check_x(out, "out")
        if oa.itemsize != ya.itemsize or oa.dtype != ya.dtype:
            raise TypeError(f"out: dtype {oa.dtype} differs from y's {ya.dtype}")
        rows = self.tokens if r < 0 else self.local_tokens
        if len(ya.shape) < 1 or ya.shape[0] != rows or ya.shape[1:] != oa.shape[2:]:
            raise ValueError(
                f"y: expected shape {[rows] + list(oa.shape[2:])} for cp={self.cp}, cp_rank={cp_rank}, got {list(ya.shape)}"
            )
        if ya.dev != self.device:
            raise ValueError(f"y: on device {ya.dev}, but the layout is on {self.device}")
        width = int(np.prod(oa.shape[2:], dtype=np.int64)) if len(oa.shape) > 2 else 1
        if width > 0:
            op = _Op(_COPY, oa.itemsize, width, ya.ptr, oa.ptr, 0, 0)
            self._run(True, start, length, r, [op])
        return out

    def padding_mask(self, length, *, cp_rank: int = 0, like=None, out=None):
        """The padding mask of cp_rank's rows, bool [T/cp] on the layout's
        device: True on slot padding, False on real tokens (verl's
        ``_dcp_padding_mask`` of a dynamic-CP micro-batch when the layout is
        the group's stream, cp = the group size, cp_rank = the GPU's index in
        the group). One launch, no host synchronisation."""
        r = self._rank(cp_rank, False)
        like = length if like is None else like
        out = self._out(out, (self.local_tokens,), like, "out", _np_or_torch_dtype(like, np.bool_))
        o = _Arr(out, "out", writable=True)
        if self.local_tokens:
            op = _Op(_VALID, o.itemsize, 1, None, o.ptr, 1, 0)
            self._run(False, None, length, r, [op])
        return out

    def pack_many(self, specs, start, length, *, cp_rank: int = 0):
        """Several tensors of the micro-batch in one launch. Each spec is one of
        ("copy", x, fill), ("labels", ids, ignore_index),
        ("positions", style, like, dtype), ("valid", like, dtype);
        returns the outputs in order."""
        r = self._rank(cp_rank, False)
        if len(specs) > _MAX_OPS:
            raise ValueError(f"specs: at most {_MAX_OPS} tensors per call, got {len(specs)}")
        ops, outs = [], []
        for k, spec in enumerate(specs):
            kind = spec[0]
            if kind in ("copy", "labels"):
                x, fillv = spec[1], spec[2]
                a = self._check_x(x, f"specs[{k}]")
                width = int(np.prod(a.shape[2:], dtype=np.int64)) if len(a.shape) > 2 else 1
                if width < 1:
                    raise ValueError(f"specs[{k}]: rows of width 0 are not supported in pack_many")
                out = _empty((self.local_tokens,) + a.shape[2:], x)
                ops.append(_Op(_COPY if kind == "copy" else _LABELS, a.itemsize, width, a.ptr,
                               _Arr(out, "out").ptr, _elem_bits(fillv, x, a.itemsize, f"specs[{k}] fill"), 0))
            elif kind == "positions":
                style, like, dtype = spec[1], spec[2], spec[3]
                if style not in ("offset", "restart") or dtype not in (np.int64, np.int32):
                    raise ValueError(f"specs[{k}]: positions need style offset/restart and np.int64/np.int32")
                out = _empty((self.local_tokens,), like, _np_or_torch_dtype(like, dtype))
                o = _Arr(out, "out")
                ops.append(_Op(_POS_OFFSET if style == "offset" else _POS_RESTART, o.itemsize, 1, None, o.ptr, 0, 0))
            elif kind == "valid":
                like, dtype = spec[1], spec[2]
                out = _empty((self.local_tokens,), like, dtype)
                o = _Arr(out, "out")
                ops.append(_Op(_VALID, o.itemsize, 1, None, o.ptr, 0, _elem_bits(1, out, o.itemsize, "valid")))
            else:
                raise ValueError(f"specs[{k}][0]: expected copy, labels, positions or valid, got {kind!r}")
            outs.append(out)
        if ops:
            self._run(False, start, length, r, ops)
        return outs


# ---- Functions ----------------------------------------------------------------


def _batch_of(length) -> int:
    shape = tuple(length.shape) if hasattr(length, "shape") else (len(length),)
    if len(shape) != 1:
        raise ValueError(f"length: expected a 1-D [B] array, got shape {shape}")
    return int(shape[0])


def spans(mask):
    """(start, length) per row of a [B, S] attention mask (bool, int8/uint8,
    int16, int32 or int64; any non-zero element is valid): the first valid
    column (0 for an empty row) and the valid count, int32 [B] on the mask's
    device. A row whose valid columns are not one run gets length -1 and is
    reported (host: raises; CUDA: by check())."""
    m = _Arr(mask, "mask")
    if len(m.shape) != 2:
        raise ValueError(f"mask: expected shape [B, S], got {list(m.shape)}")
    kind = str(m.dtype)
    if "float" in kind or "complex" in kind or m.itemsize not in (1, 2, 4, 8):
        raise TypeError(f"mask: expected a bool or integer dtype, got {m.dtype}")
    b, s = m.shape
    like32 = np.int32
    if m.torch:
        import torch

        like32 = torch.int32
        start = torch.empty((b,), dtype=like32, device=mask.device)
        length = torch.empty((b,), dtype=like32, device=mask.device)
    else:
        start = np.empty((b,), dtype=like32)
        length = np.empty((b,), dtype=like32)
    ctx = _ctx(m.dev)
    _ok(ctx._lib.pk_gpu_spans(ctx.ptr, m.ptr, m.itemsize, b, s, _Arr(start, "start").ptr,
                              _Arr(length, "length").ptr))
    return start, length


def pack(x, start, length, seqs, cu_seqlens_padded, *, cp=1, cp_rank=0, cp_algo="zigzag", fill=0, out=None):
    """The packed stream [T/cp, *x.shape[2:]] of the micro-batch whose rows of
    x [B, S, ...] are seqs (in that order): each sequence's valid tokens
    [start, start+length) then ``fill`` in its slot; with cp > 1 only rank
    cp_rank's part (zigzag chunks r and 2*cp-1-r, or the Ulysses shard).
    start=None means every row starts at column 0."""
    a = _Arr(x, "x")
    if len(a.shape) < 2:
        raise ValueError(f"x: expected shape [B, S, ...], got {list(a.shape)}")
    with Layout(seqs, cu_seqlens_padded, a.shape[0], a.shape[1], cp=cp, cp_algo=cp_algo, device=a.dev) as lay:
        return lay.pack(x, start, length, cp_rank=cp_rank, fill=fill, out=out)


def unpack(y, start, length, seqs, cu_seqlens_padded, out, *, cp=1, cp_rank=None, cp_algo="zigzag"):
    """Writes the rows seqs of out [B, S, ...]: valid tokens from y, 0 in every
    other column of those rows; other rows are untouched. cp_rank=None: y is
    every CP rank's part gathered in rank order [T, ...]; otherwise y is that
    rank's part [T/cp, ...] and tokens held by other ranks get 0 too.
    Returns out."""
    o = _Arr(out, "out", writable=True)
    if len(o.shape) < 2:
        raise ValueError(f"out: expected shape [B, S, ...], got {list(o.shape)}")
    with Layout(seqs, cu_seqlens_padded, o.shape[0], o.shape[1], cp=cp, cp_algo=cp_algo, device=o.dev) as lay:
        return lay.unpack(y, start, length, out, cp_rank=cp_rank)


def position_ids(length, seqs, cu_seqlens_padded, *, cp=1, cp_rank=0, cp_algo="zigzag", style="offset", dtype=np.int64):
    """Position ids of the packed stream, [T/cp] on length's device:
    "offset" = offset in the padded slot (TransformerEngine/Megatron),
    "restart" = 0.. per sequence and again 0.. in its padding (HF)."""
    la = _Arr(length, "length") if (isinstance(length, np.ndarray) or _is_torch(length)) else None
    if la is None:
        length = np.asarray(length, dtype=np.int32)
        la = _Arr(length, "length")
    b = _batch_of(length)
    with Layout(seqs, cu_seqlens_padded, b, 2**31 - 1, cp=cp, cp_algo=cp_algo, device=la.dev) as lay:
        return lay.position_ids(length, cp_rank=cp_rank, style=style, dtype=dtype)


def labels(ids, start, length, seqs, cu_seqlens_padded, *, cp=1, cp_rank=0, cp_algo="zigzag", ignore_index=IGNORE_INDEX):
    """Next-token labels [T/cp, *ids.shape[2:]] built per sequence before the
    CP split: the token after each valid token of the same row, and
    ignore_index on every sequence's last token and in the padding."""
    a = _Arr(ids, "ids")
    if len(a.shape) < 2:
        raise ValueError(f"ids: expected shape [B, S, ...], got {list(a.shape)}")
    with Layout(seqs, cu_seqlens_padded, a.shape[0], a.shape[1], cp=cp, cp_algo=cp_algo, device=a.dev) as lay:
        return lay.labels(ids, start, length, cp_rank=cp_rank, ignore_index=ignore_index)


def pack_many(specs, start, length, seqs, cu_seqlens_padded, *, batch, seqlen, cp=1, cp_rank=0, cp_algo="zigzag", device=None):
    """Layout(...).pack_many(specs, ...) for one call; see Layout.pack_many."""
    with Layout(seqs, cu_seqlens_padded, batch, seqlen, cp=cp, cp_algo=cp_algo, device=device) as lay:
        return lay.pack_many(specs, start, length, cp_rank=cp_rank)


def cu_from_lengths(lengths, align: int = 1):
    """(cu_seqlens, cu_seqlens_padded), int32 [n+1] numpy arrays, for real
    lengths rounded up to align."""
    lens = _host_index(lengths, "lengths")
    cu = np.empty(lens.size + 1, dtype=np.int32)
    cp = np.empty(lens.size + 1, dtype=np.int32)
    _ok(_load().pk_gpu_cu_from_lengths(lens.size, lens.ctypes.data, int(align), cu.ctypes.data, cp.ctypes.data))
    return cu, cp


def cp_index_map(cu_seqlens_padded, *, cp, cp_rank, cp_algo="zigzag"):
    """Global packed index of every local token of cp_rank, int64 [T/cp]
    (TransformerEngine's thd_get_partitioned_indices for zigzag)."""
    cu = _host_index(cu_seqlens_padded, "cu_seqlens_padded")
    if cp_algo not in _ALGOS:
        raise ValueError(f"cp_algo: expected 'zigzag', 'ulysses' or 'contiguous', got {cp_algo!r}")
    n = max(cu.size - 1, 0)
    total = int(cu[-1]) if cu.size else 0
    out = np.empty(max(total // max(int(cp), 1), 0) + 1, dtype=np.int64)
    _ok(_load().pk_gpu_cp_index_map(n, cu.ctypes.data, int(cp), _ALGOS[cp_algo], int(cp_rank), out.ctypes.data))
    return out[: total // int(cp)]


# Dynamic context parallelism (per-group layouts, padding mask, routing).
from .gpu_dcp import (  # noqa: E402
    NcclTransport,
    TorchTransport,
    dcp_align,
    dcp_cu,
    dcp_group,
    dcp_padding_mask,
    exchange,
    nccl_unique_id,
    route_items,
    xitems_from_assignments,
)
