"""Dynamic context parallelism in the GPU agent (re-exported by packd.gpu).

A dynamic-CP plan gives, per packed micro-batch (slot), per GPU of the
DP x CP pool, the sample ids that GPU runs (Megatron-Core's
``sample_id_groups[slot][rank]``); GPUs with equal lists form a group of c
GPUs that runs those samples as one packed stream with CP size c. The
group's stream is an ordinary ``packd.gpu.Layout`` with ``cp=c``: its
``pack`` is this GPU's shard (``cp_rank`` = index in the group, c = 1 is the
whole stream), ``unpack`` restores the samples' rows, ``padding_mask`` is
verl's ``_dcp_padding_mask``. This module adds the group's slot alignment
and ``cu_seqlens`` (``dcp_cu``), the mask from lengths alone
(``dcp_padding_mask``), the group of a GPU (``dcp_group``), and the routing
of samples to every GPU of their group when the batch starts elsewhere
(``route_items`` + ``exchange`` over a transport: ``NcclTransport`` for CUDA
tensors, ``TorchTransport`` for CPU tensors over torch.distributed, e.g.
gloo).
"""

from __future__ import annotations

import ctypes

import numpy as np

from . import gpu as _gpu

# pk_gpu_xitem_t: int32 src_rank, dst_rank; int64 src_row, dst_row, rows.
XITEM_DTYPE = np.dtype(
    [("src_rank", "<i4"), ("dst_rank", "<i4"), ("src_row", "<i8"), ("dst_row", "<i8"), ("rows", "<i8")]
)

_LAYOUTS = {"zigzag": 0, "contiguous": 1, "ulysses": 1}


def _algo(cp_layout: str) -> int:
    if cp_layout not in _LAYOUTS:
        raise ValueError(f"cp_layout: expected 'zigzag' or 'contiguous', got {cp_layout!r}")
    return _LAYOUTS[cp_layout]


def _posint(value, name: str) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
    return int(value)


def dcp_align(group_size: int, *, tp: int = 1, cp_layout: str = "zigzag") -> int:
    """Slot alignment of a group: 2*c*tp for zigzag with c > 1, else c*tp."""
    out = ctypes.c_int32()
    _gpu._ok(_gpu._load().pk_gpu_dcp_align(_posint(group_size, "group_size"), _posint(tp, "tp"),
                                           _algo(cp_layout), ctypes.byref(out)))
    return int(out.value)


def dcp_cu(lengths, group_size: int, *, tp: int = 1, cp_layout: str = "zigzag", min_local_rows=None):
    """(cu_seqlens, cu_seqlens_padded), int32 [n+1], of a group's packed
    stream of the samples with these lengths (in the group's order):
    lengths rounded up to dcp_align; with min_local_rows, the last slot
    grows so that each GPU holds at least that many rows (verl)."""
    lens = _gpu._host_index(lengths, "lengths")
    if min_local_rows is None:
        mlr = 0
    else:
        mlr = _posint(min_local_rows, "min_local_rows")
    cu = np.empty(lens.size + 1, dtype=np.int32)
    cp = np.empty(lens.size + 1, dtype=np.int32)
    _gpu._ok(_gpu._load().pk_gpu_dcp_cu(lens.size, lens.ctypes.data, _posint(group_size, "group_size"),
                                        _posint(tp, "tp"), _algo(cp_layout), mlr, cu.ctypes.data,
                                        cp.ctypes.data))
    return cu, cp


def dcp_padding_mask(lengths, group_size: int, rank: int, *, tp: int = 1, cp_layout: str = "zigzag",
                     min_local_rows=None, cu_seqlens_padded=None):
    """verl's ``_dcp_padding_mask`` from lengths alone: bool [T/c] (a CPU
    torch tensor when torch is installed, else numpy), True on the slot
    padding of GPU ``rank`` (0..c-1) of the group. ``cu_seqlens_padded``
    overrides the slots (default: ``dcp_cu``). ``Layout.padding_mask``
    writes the same mask on the layout's device."""
    lens = _gpu._host_index(lengths, "lengths")
    if cu_seqlens_padded is None:
        _, cu_pad = dcp_cu(lens, group_size, tp=tp, cp_layout=cp_layout, min_local_rows=min_local_rows)
    else:
        cu_pad = _gpu._host_index(cu_seqlens_padded, "cu_seqlens_padded")
        if cu_pad.size != lens.size + 1:
            raise ValueError(f"cu_seqlens_padded: expected len(lengths)+1 = {lens.size + 1} entries, got {cu_pad.size}")
    c = _posint(group_size, "group_size")
    if not isinstance(rank, (int, np.integer)) or not 0 <= rank < c:
        raise ValueError(f"rank: expected 0..{c - 1}, got {rank!r}")
    out = np.empty(max(int(cu_pad[-1]) // c, 0) + 1, dtype=np.uint8)
    _gpu._ok(_gpu._load().pk_gpu_dcp_padding_mask(lens.size, lens.ctypes.data, cu_pad.ctypes.data, c,
                                                  _algo(cp_layout), int(rank), out.ctypes.data))
    mask = out[: int(cu_pad[-1]) // c].astype(np.bool_)
    try:
        import torch
    except ImportError:
        return mask
    return torch.from_numpy(mask)


def dcp_group(slot, rank: int):
    """(members, index) of ``rank`` in one slot of a dynamic-CP plan (per
    rank, the sample ids): the ranks whose lists equal rank's, which must be
    consecutive and start at a multiple of their count (the groups
    Megatron-Core creates), and rank's index among them."""
    lists = [tuple(int(x) for x in ids) for ids in slot]
    if not 0 <= rank < len(lists):
        raise ValueError(f"rank: expected 0..{len(lists) - 1}, got {rank!r}")
    mine = lists[rank]
    if not mine:
        raise ValueError(f"slot[{rank}]: an empty sample list (every rank needs work)")
    members = [k for k, ids in enumerate(lists) if ids == mine]
    c = len(members)
    if members != list(range(members[0], members[0] + c)) or members[0] % c:
        raise ValueError(f"slot: group {members} of rank {rank} is not {c} consecutive ranks aligned to {c}")
    return members, members.index(rank)


def _csr(assign, name: str):
    off = np.zeros(len(assign) + 1, dtype=np.int32)
    for k, ids in enumerate(assign):
        off[k + 1] = off[k] + len(ids)
    ids = np.ascontiguousarray(np.concatenate([np.asarray(a, dtype=np.int64) for a in assign])
                               if off[-1] else np.zeros(0, dtype=np.int64))
    return off, _gpu._host_index(ids, f"{name} ids")


def _rows(rows, nseq: int) -> np.ndarray:
    r = np.ascontiguousarray(np.asarray(rows, dtype=np.int64).reshape(-1))
    if r.size != nseq:
        raise ValueError(f"rows: expected {nseq} entries (one per sequence), got {r.size}")
    return r


def _assignments(rows, src, dst):
    """The arguments of the two exchange-item builders, checked: the
    sequence count, the rows per sequence, and src and dst as CSR arrays."""
    if len(src) != len(dst):
        raise ValueError(f"src and dst: {len(src)} and {len(dst)} ranks")
    nseq = sum(len(a) for a in src)
    return (nseq, _rows(rows, nseq), *_csr(src, "src"), *_csr(dst, "dst"))


def route_items(rows, src, dst) -> np.ndarray:
    """Exchange items (XITEM_DTYPE) that take every sequence from ``src``
    (per rank, the ids it holds, each id once in all) to every rank listing
    it in ``dst`` (a sequence may go to several ranks: each GPU of its
    group). ``rows[s]``: rows of sequence s in a buffer; each rank's buffer
    holds its sequences back to back in list order."""
    nseq, r, so, si, do, di = _assignments(rows, src, dst)
    items = np.zeros(int(do[-1]) + 1, dtype=XITEM_DTYPE)
    _gpu._ok(_gpu._load().pk_gpu_xitems_route(len(src), nseq, r.ctypes.data, so.ctypes.data, si.ctypes.data,
                                              do.ctypes.data, di.ctypes.data, items.ctypes.data))
    return items[: int(do[-1])]


def xitems_from_assignments(rows, src, dst) -> np.ndarray:
    """Exchange items from one assignment to another (each sequence exactly
    once on each side), e.g. from the group leaders back to the ranks that
    own the samples: item s moves sequence s."""
    nseq, r, so, si, do, di = _assignments(rows, src, dst)
    items = np.zeros(nseq + 1, dtype=XITEM_DTYPE)
    _gpu._ok(_gpu._load().pk_gpu_xitems_from_assignments(len(src), nseq, r.ctypes.data, so.ctypes.data,
                                                         si.ctypes.data, do.ctypes.data, di.ctypes.data,
                                                         items.ctypes.data))
    return items[:nseq]


# ---- Transport -----------------------------------------------------------------

_VP, _SZ, _I32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int32
_GROUP_FN = ctypes.CFUNCTYPE(ctypes.c_int, _VP)
_P2P_FN = ctypes.CFUNCTYPE(ctypes.c_int, _VP, _VP, _SZ, _I32)
_COPY_FN = ctypes.CFUNCTYPE(ctypes.c_int, _VP, _VP, _VP, _SZ)


class _Transport(ctypes.Structure):
    _fields_ = [
        ("impl", _VP),
        ("rank", _I32),
        ("size", _I32),
        ("group_start", _GROUP_FN),
        ("group_end", _GROUP_FN),
        ("send", _P2P_FN),
        ("recv", _P2P_FN),
        ("copy", _COPY_FN),
        ("all_gather", _COPY_FN),
    ]


class _XStats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in ("sends", "recvs", "copies", "bytes_sent", "bytes_recv", "bytes_copied")]


class TorchTransport:
    """A transport over torch.distributed for host memory (gloo): the grouped
    sends and receives the exchange posts between group_start and group_end
    run as isend/irecv (the k-th message of a pair gets tag k on both sides,
    so per-peer order holds) and are waited for at group_end. ``group``: a
    process group (None: the default one); ranks are ranks of that group."""

    def __init__(self, group=None):
        import torch.distributed as dist

        self._dist = dist
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self._ops = None
        self.error = None
        self._fns = (_GROUP_FN(self._start), _GROUP_FN(self._end), _P2P_FN(self._send), _P2P_FN(self._recv),
                     _COPY_FN(self._copy), _COPY_FN(self._gather))
        self.struct = _Transport(None, self.rank, self.size, *self._fns)

    def _global(self, peer: int) -> int:
        if self.group is None:
            return peer
        return self._dist.distributed_c10d._get_global_rank(self.group, peer)

    @staticmethod
    def _view(ptr, nbytes: int):
        import torch

        return torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(ptr), dtype=torch.uint8)

    def _guard(self, fn, *args) -> int:
        try:
            fn(*args)
            return 0
        except Exception as exc:  # a callback must not raise through C
            self.error = exc
            return -8

    def _start(self, impl):
        return self._guard(lambda: setattr(self, "_ops", []))

    def _end(self, impl):
        def run():
            ops, self._ops = self._ops or [], None
            tags: dict = {}
            reqs = []
            for kind, ptr, nbytes, peer in ops:
                tag = tags.get((kind, peer), 0)
                tags[(kind, peer)] = tag + 1
                t = self._view(ptr, nbytes)
                fn = self._dist.isend if kind == "send" else self._dist.irecv
                reqs.append(fn(t, self._global(peer), group=self.group, tag=tag))
            for r in reqs:
                r.wait()

        return self._guard(run)

    def _post(self, kind, ptr, nbytes, peer):
        if self._ops is None:
            raise RuntimeError(f"{kind} outside group_start/group_end")
        self._ops.append((kind, ptr, int(nbytes), int(peer)))

    def _send(self, impl, buf, nbytes, peer):
        return self._guard(self._post, "send", buf, nbytes, peer)

    def _recv(self, impl, buf, nbytes, peer):
        return self._guard(self._post, "recv", buf, nbytes, peer)

    def _copy(self, impl, dst, src, nbytes):
        return self._guard(ctypes.memmove, dst, src, nbytes)

    def _gather(self, impl, send, recv, nbytes):
        def run():
            parts = [self._view(recv + k * nbytes, nbytes) for k in range(self.size)] if nbytes else []
            if nbytes:
                self._dist.all_gather(parts, self._view(send, nbytes).clone(), group=self.group)

        return self._guard(run)


def nccl_unique_id() -> bytes:
    """ncclGetUniqueId: the bytes rank 0 makes and every rank passes to
    NcclTransport (send them with torch.distributed.broadcast_object_list
    or any channel of the trainer's own)."""
    buf = ctypes.create_string_buffer(128)
    _gpu._ok(_gpu._load().pk_gpu_nccl_unique_id(buf))
    return buf.raw


class NcclTransport:
    """The agent's NCCL transport for CUDA tensors: a communicator of
    ``nranks`` made from ``unique_id`` (``nccl_unique_id()`` on one rank),
    this process being ``rank`` on CUDA ``device``, running on ``stream``
    (a torch.cuda.Stream or a raw cudaStream_t; None: the current torch
    stream). Raises GpuUnavailable when the library has no NCCL."""

    def __init__(self, nranks: int, unique_id: bytes, rank: int, *, device: int = 0, stream=None):
        if not isinstance(unique_id, (bytes, bytearray)) or len(unique_id) != 128:
            raise ValueError("unique_id: expected the 128 bytes of nccl_unique_id()")
        lib = _gpu._load()
        self._lib = lib
        self.rank, self.size, self.device = int(rank), int(nranks), int(device)
        if stream is None:
            import torch

            stream = torch.cuda.current_stream(self.device)
        self.stream = stream
        raw = getattr(stream, "cuda_stream", stream)
        self._comm = ctypes.c_void_p()
        self._tp = ctypes.c_void_p()
        uid = ctypes.create_string_buffer(bytes(unique_id), 128)
        _gpu._ok(lib.pk_gpu_nccl_comm_init(self.size, uid, self.rank, self.device, ctypes.byref(self._comm)))
        rc = lib.pk_gpu_nccl_transport_create(self._comm, ctypes.c_void_p(raw or None), ctypes.byref(self._tp))
        if rc != 0:
            lib.pk_gpu_nccl_comm_destroy(self._comm)
            self._comm = ctypes.c_void_p()
            _gpu._ok(rc)
        self.error = None

    @property
    def pointer(self):
        return self._tp

    def close(self):
        if getattr(self, "_tp", None):
            self._lib.pk_gpu_nccl_transport_destroy(self._tp)
            self._tp = None
        if getattr(self, "_comm", None):
            self._lib.pk_gpu_nccl_comm_destroy(self._comm)
            self._comm = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def exchange(items, src, dst, transport) -> dict:
    """Runs this rank's part of an exchange (every rank calls it with the
    same items): src and dst are contiguous arrays or tensors whose first
    dimension is rows (the same row size): host memory with TorchTransport,
    CUDA tensors on the transport's device with NcclTransport (the moves are
    queued on its stream, no host synchronisation). Returns the counts
    posted."""
    it = np.ascontiguousarray(items, dtype=XITEM_DTYPE)
    s, d = _gpu._Arr(src, "src"), _gpu._Arr(dst, "dst", writable=True)
    if isinstance(transport, NcclTransport):
        if s.dev != transport.device or d.dev != transport.device:
            raise ValueError(f"src/dst: on devices {s.dev} and {d.dev}; NcclTransport needs CUDA tensors on "
                             f"device {transport.device}")
        tp_ptr = transport.pointer
    else:
        if s.dev is not None or d.dev is not None:
            raise ValueError("src/dst: TorchTransport moves host memory; use NcclTransport for CUDA tensors")
        tp_ptr = ctypes.byref(transport.struct)
    if not s.shape or not d.shape:
        raise ValueError("src/dst: expected at least one dimension (rows)")
    rb = int(np.prod(s.shape[1:], dtype=np.int64)) * s.itemsize
    if int(np.prod(d.shape[1:], dtype=np.int64)) * d.itemsize != rb:
        raise ValueError(f"dst: rows of {int(np.prod(d.shape[1:], dtype=np.int64)) * d.itemsize} bytes, src rows of {rb}")
    if it.size:
        if int((it["src_row"] + it["rows"])[it["src_rank"] == transport.rank].max(initial=0)) > s.shape[0]:
            raise ValueError(f"src: {s.shape[0]} rows, the items read more")
        if int((it["dst_row"] + it["rows"])[it["dst_rank"] == transport.rank].max(initial=0)) > d.shape[0]:
            raise ValueError(f"dst: {d.shape[0]} rows, the items write more")
    stats = _XStats()
    transport.error = None
    rc = _gpu._load().pk_gpu_exchange(tp_ptr, it.ctypes.data if it.size else None, it.size, max(rb, 1), s.ptr,
                                      d.ptr, ctypes.byref(stats))
    if transport.error is not None:
        raise transport.error
    _gpu._ok(rc)
    return {n: int(getattr(stats, n)) for n, _ in _XStats._fields_}
