"""packd.layout: the pure-numpy reference for packing, CP slicing and unpacking.

This module is the oracle the GPU agent is tested against. It is written from
the layout formulas stated below and in gpu/README.md ("Layouts"), not from
the C code, on purpose: two independent implementations checked against each
other.
Everything here is plain numpy and runs on the CPU; torch CPU tensors are
accepted and returned as torch tensors when torch is importable.

Vocabulary:

- A padded batch has B rows and S columns. Row b's valid tokens form one
  contiguous run ``[start_b, start_b + len_b)`` found from the attention mask
  (verl builds rows as left-padded prompt + right-padded response).
- A *micro-batch* lists sequences (``seqs``, indices into the plan's
  ``lengths``) with ``cu_seqlens`` (real lengths) and ``cu_seqlens_padded``
  (aligned slots). ``rows`` says which row of the padded batch holds each
  sequence; by default ``rows = seqs`` (the padded batch is the global batch).
- The *global packed stream* has ``T = cu_seqlens_padded[-1]`` positions:
  sequence k occupies ``[cu_pad[k], cu_pad[k+1])``, its real tokens first,
  then back padding.
- Zigzag context parallelism (CP ranks): sequence k is cut into ``2*CP``
  chunks of ``c_k = plen_k / (2*CP)``; rank r holds chunks r and
  ``2*CP-1-r`` in that order at local offset ``cu_pad[k] / CP``
  (TransformerEngine's ``thd_get_partitioned_indices`` order).
- Ulysses: the packed stream is padded at the end to a multiple of CP*TP and
  cut into CP contiguous equal shards.

Every per-token quantity (ids, positions, labels) is built on the global
packed stream first and then sliced with the same index map, so labels are
never built by rolling a CP-local or packed stream.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

from ._arrays import as_index_array, like, to_numpy

__all__ = [
    "Micro",
    "as_micro",
    "default_align",
    "make_micro",
    "valid_runs",
    "partition_index",
    "local_length",
    "local_cu_seqlens",
    "source_index",
    "pack",
    "position_ids",
    "labels",
    "unpack",
    "micro_rows",
    "IGNORE_INDEX",
]

#: Label value of positions that take no part in the loss (PyTorch's default).
IGNORE_INDEX = -100

_CP_ALGOS = ("zigzag", "ulysses")


class Micro(NamedTuple):
    """One micro-batch layout: what packd.layout needs from a plan.

    seqs: int64 [n] sequence indices in packed order.
    cu_seqlens: int64 [n+1] cumulative real lengths, leading 0.
    cu_seqlens_padded: int64 [n+1] cumulative aligned slot lengths, leading 0.
    max_seqlen: the largest aligned slot.
    """

    seqs: np.ndarray
    cu_seqlens: np.ndarray
    cu_seqlens_padded: np.ndarray
    max_seqlen: int


def _lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b)


def default_align(
    cp: int = 1,
    tp: int = 1,
    cp_algo: str = "zigzag",
    sequence_parallel: bool = False,
    pad_multiple: int = 1,
) -> int:
    """The alignment A of every packed slot (README.md, rule 4): 2*CP*TP for zigzag CP > 1, CP*TP for
    Ulysses CP > 1, TP when sequence parallel is on, else 1; combined with
    pad_multiple by lcm."""
    cp, tp, pad_multiple = int(cp or 1), int(tp or 1), int(pad_multiple or 1)
    algo = _cp_algo(cp_algo)
    if cp < 1 or tp < 1 or pad_multiple < 1:
        raise ValueError(f"cp={cp}, tp={tp}, pad_multiple={pad_multiple}: all must be >= 1")
    if cp > 1:
        a = 2 * cp * tp if algo == "zigzag" else cp * tp
    elif sequence_parallel:
        a = tp
    else:
        a = 1
    return _lcm(a, pad_multiple)


def make_micro(lengths, align: int = 1, seqs=None) -> Micro:
    """Builds a micro-batch layout from real lengths by the formulas alone:
    ``plen_k = ceil(len_k / A) * A``, ``cu = cumsum(len)``,
    ``cu_pad = cumsum(plen)``, each with a leading 0. seqs defaults to
    ``0..n-1``."""
    lens = as_index_array(lengths, "lengths")
    if align < 1:
        raise ValueError(f"align: must be >= 1, got {align}")
    if np.any(lens < 0):
        k = int(np.flatnonzero(lens < 0)[0])
        raise ValueError(f"lengths[{k}]: must be >= 0, got {int(lens[k])}")
    plen = -(-lens // align) * align
    cu = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
    cu_pad = np.concatenate(([0], np.cumsum(plen))).astype(np.int64)
    if seqs is None:
        seqs = np.arange(lens.size, dtype=np.int64)
    else:
        seqs = as_index_array(seqs, "seqs")
        if seqs.size != lens.size:
            raise ValueError(f"seqs: {seqs.size} entries for {lens.size} lengths")
    return Micro(seqs, cu, cu_pad, int(plen.max()) if plen.size else 0)


def as_micro(micro) -> Micro:
    """Accepts a Micro, a packd plan micro-batch view, a packd.v1.MicroBatch
    message or a mapping with ``seqs``, ``cu_seqlens``, ``cu_seqlens_padded``
    (protobuf JSON names ``cuSeqlens``/``cuSeqlensPadded`` too) and checks
    that it is a well-formed layout."""
    if isinstance(micro, Micro):
        m = micro
    else:

        def get(name, json_name):
            if isinstance(micro, dict):
                if name in micro:
                    return micro[name]
                return micro.get(json_name, [])
            return getattr(micro, name)

        seqs = as_index_array(_seq(get("seqs", "seqs")), "seqs")
        cu = as_index_array(_seq(get("cu_seqlens", "cuSeqlens")), "cu_seqlens")
        cu_pad = as_index_array(_seq(get("cu_seqlens_padded", "cuSeqlensPadded")), "cu_seqlens_padded")
        try:
            max_seqlen = int(get("max_seqlen", "maxSeqlen") or 0)
        except (AttributeError, KeyError):
            max_seqlen = 0
        m = Micro(seqs, cu, cu_pad, max_seqlen)
    _check_micro(m)
    return m


def _seq(x):
    return x if hasattr(x, "shape") else list(x)


def _check_micro(m: Micro) -> None:
    n = m.seqs.size
    for name, arr in (("cu_seqlens", m.cu_seqlens), ("cu_seqlens_padded", m.cu_seqlens_padded)):
        if arr.size != n + 1:
            raise ValueError(f"{name}: expected {n + 1} entries for {n} sequences, got {arr.size}")
        if arr[0] != 0:
            raise ValueError(f"{name}[0]: must be 0, got {int(arr[0])}")
        d = np.diff(arr)
        if np.any(d < 0):
            k = int(np.flatnonzero(d < 0)[0])
            raise ValueError(f"{name}: decreases at entry {k + 1} ({int(arr[k])} -> {int(arr[k + 1])})")
    real, slot = np.diff(m.cu_seqlens), np.diff(m.cu_seqlens_padded)
    if np.any(real > slot):
        k = int(np.flatnonzero(real > slot)[0])
        raise ValueError(
            f"sequence {k} (seqs[{k}]={int(m.seqs[k])}): real length {int(real[k])} "
            f"exceeds its padded slot {int(slot[k])}"
        )


def _cp_algo(cp_algo) -> str:
    s = str(cp_algo).lower()
    if s in ("0", "cp_algo_zigzag"):
        s = "zigzag"
    elif s in ("1", "cp_algo_ulysses"):
        s = "ulysses"
    if s not in _CP_ALGOS:
        raise ValueError(f"cp_algo: expected 'zigzag' or 'ulysses', got {cp_algo!r}")
    return s


def _check_cp(cp: int, cp_rank, tp: int) -> tuple[int, int | None, int]:
    cp, tp = int(cp), int(tp)
    if cp < 1:
        raise ValueError(f"cp: must be >= 1, got {cp}")
    if tp < 1:
        raise ValueError(f"tp: must be >= 1, got {tp}")
    if cp_rank is not None:
        cp_rank = int(cp_rank)
        if not 0 <= cp_rank < cp:
            raise ValueError(f"cp_rank: must be in [0, {cp}), got {cp_rank}")
    return cp, cp_rank, tp


def valid_runs(attention_mask) -> tuple[np.ndarray, np.ndarray]:
    """``(start, length)`` of every row's valid run, both int64 [B].

    Raises ValueError naming the row when a row's valid tokens are not one
    contiguous run (the packed layout assumes they are; gpu.md section 1).
    A row without valid tokens has start 0 and length 0."""
    m = to_numpy(attention_mask, "attention_mask")
    if m.ndim != 2:
        raise ValueError(f"attention_mask: expected shape [B, S], got {m.shape}")
    m = m != 0
    lengths = m.sum(axis=1).astype(np.int64)
    has = lengths > 0
    start = np.where(has, m.argmax(axis=1), 0).astype(np.int64)
    # The run is contiguous iff the last valid column is start + len - 1.
    last = np.where(has, m.shape[1] - 1 - m[:, ::-1].argmax(axis=1), -1)
    bad = has & (last != start + lengths - 1)
    if np.any(bad):
        b = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"attention_mask row {b}: valid tokens are not one contiguous run "
            f"(first at column {int(start[b])}, last at {int(last[b])}, {int(lengths[b])} valid)"
        )
    return start, lengths


def local_length(micro, cp: int = 1, cp_algo: str = "zigzag", tp: int = 1) -> int:
    """Tokens per CP rank: ``T / CP`` for zigzag, ``ceil(T / (CP*TP))*TP`` for
    Ulysses (the stream is padded at the end to a multiple of CP*TP)."""
    m = as_micro(micro)
    cp, _, tp = _check_cp(cp, None, tp)
    total = int(m.cu_seqlens_padded[-1])
    if _cp_algo(cp_algo) == "ulysses":
        q = cp * tp
        return (-(-total // q) * q) // cp
    if total % cp:
        raise ValueError(f"cu_seqlens_padded[-1]={total} is not a multiple of CP={cp}")
    return total // cp


def partition_index(micro, cp: int = 1, cp_rank: int = 0, cp_algo: str = "zigzag", tp: int = 1) -> np.ndarray:
    """Global packed-stream position of every local position of CP rank
    ``cp_rank``, int64 [local_length].

    Zigzag (gpu.md 4.2): local token j of sequence k at offset
    ``o = j - cu_pad[k]/CP`` comes from ``cu_pad[k] + o + c_k*r`` when
    ``o < c_k``, else from ``cu_pad[k] + o + c_k*(2*CP-2-r)``. Every padded
    length must be a multiple of 2*CP.

    Ulysses: positions ``[r*L, (r+1)*L)`` of the stream padded to a multiple
    of CP*TP; positions >= T are the tail padding."""
    m = as_micro(micro)
    cp, cp_rank, tp = _check_cp(cp, cp_rank, tp)
    algo = _cp_algo(cp_algo)
    cu_pad = m.cu_seqlens_padded
    if algo == "ulysses":
        n_local = local_length(m, cp, algo, tp)
        return np.arange(cp_rank * n_local, (cp_rank + 1) * n_local, dtype=np.int64)
    plen = np.diff(cu_pad)
    if cp == 1:
        return np.arange(int(cu_pad[-1]), dtype=np.int64)
    bad = plen % (2 * cp) != 0
    if np.any(bad):
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"sequence {k} (seqs[{k}]={int(m.seqs[k])}): padded length {int(plen[k])} "
            f"is not a multiple of 2*CP={2 * cp} (zigzag needs it)"
        )
    slot = plen // cp  # local slot length, 2 chunks
    chunk = plen // (2 * cp)
    seq = np.repeat(np.arange(plen.size), slot)
    j = np.arange(int(cu_pad[-1]) // cp, dtype=np.int64)
    o = j - cu_pad[:-1][seq] // cp
    c = chunk[seq]
    which = np.where(o < c, cp_rank, 2 * cp - 2 - cp_rank)
    return cu_pad[:-1][seq] + o + c * which


def _stream_length(m: Micro, cp: int, cp_algo: str, tp: int) -> int:
    """Length of the global stream including Ulysses tail padding."""
    return local_length(m, cp, cp_algo, tp) * cp


def _stream_seq(m: Micro, total: int) -> tuple[np.ndarray, np.ndarray]:
    """For every global position: the sequence k it belongs to (-1 in the
    tail padding) and its offset inside the slot (inside the tail for -1)."""
    cu_pad = m.cu_seqlens_padded
    t = int(cu_pad[-1])
    plen = np.diff(cu_pad)
    seq = np.full(total, -1, dtype=np.int64)
    seq[:t] = np.repeat(np.arange(plen.size), plen)
    pos = np.arange(total, dtype=np.int64)
    off = pos - t
    off[:t] = pos[:t] - cu_pad[:-1][seq[:t]]
    return seq, off


def _rows(m: Micro, rows, batch: int) -> np.ndarray:
    r = m.seqs if rows is None else as_index_array(rows, "rows")
    if r.size != m.seqs.size:
        raise ValueError(f"rows: {r.size} entries for {m.seqs.size} sequences")
    bad = (r < 0) | (r >= batch)
    if np.any(bad):
        k = int(np.flatnonzero(bad)[0])
        what = "seqs" if rows is None else "rows"
        raise ValueError(
            f"{what}[{k}]={int(r[k])} is not a row of the padded batch (B={batch}); "
            "pass rows= when the padded batch is not the global batch"
        )
    return r


def source_index(attention_mask, micro, rows=None) -> np.ndarray:
    """Flat source index ``b*S + s`` into the padded batch for every position
    of the global packed stream (int64 [T]), -1 for slot padding.

    Checks that every row's valid run has the real length the micro-batch
    says (``cu_seqlens``)."""
    m = as_micro(micro)
    start, length = valid_runs(attention_mask)
    batch, width = np.shape(to_numpy(attention_mask, "attention_mask"))
    r = _rows(m, rows, batch)
    real = np.diff(m.cu_seqlens)
    mismatch = length[r] != real
    if np.any(mismatch):
        k = int(np.flatnonzero(mismatch)[0])
        raise ValueError(
            f"sequence {k} (row {int(r[k])}): the attention mask has {int(length[r[k]])} valid "
            f"tokens but cu_seqlens says {int(real[k])}"
        )
    total = int(m.cu_seqlens_padded[-1])
    seq, off = _stream_seq(m, total)
    valid = off < real[seq] if total else np.zeros(0, bool)
    src = np.full(total, -1, dtype=np.int64)
    rs = r[seq[valid]]
    src[valid] = rs * width + start[rs] + off[valid]
    return src


def _local_positions(m: Micro, cp: int, cp_rank, cp_algo: str, tp: int) -> np.ndarray:
    """Global stream positions held locally (all of them when cp_rank is
    None; then CP ranks are concatenated in rank order for cp > 1)."""
    if cp_rank is None:
        if cp == 1:
            return np.arange(_stream_length(m, cp, cp_algo, tp), dtype=np.int64)
        return np.concatenate([partition_index(m, cp, r, cp_algo, tp) for r in range(cp)])
    return partition_index(m, cp, cp_rank, cp_algo, tp)


def pack(
    x,
    attention_mask,
    micro,
    *,
    rows=None,
    cp: int = 1,
    cp_rank: int | None = None,
    cp_algo: str = "zigzag",
    tp: int = 1,
    fill=0,
):
    """Packs a padded batch ``x`` [B, S, ...] into the micro-batch's stream.

    Returns ``[L, ...]`` with the dtype of x: for ``cp_rank=r`` the rank's
    local slice (``L = local_length``); for ``cp_rank=None`` with ``cp == 1``
    the whole stream; with ``cp > 1`` and ``cp_rank=None`` the concatenation
    of every rank's slice in rank order (what an all-gather yields). Slot and
    tail padding get ``fill``."""
    xa = to_numpy(x, "x")
    mask = to_numpy(attention_mask, "attention_mask")
    if xa.ndim < 2 or xa.shape[:2] != mask.shape:
        raise ValueError(f"x: expected shape [B, S, ...] = {mask.shape} + ..., got {xa.shape}")
    m = as_micro(micro)
    cp, cp_rank, tp = _check_cp(cp, cp_rank, tp)
    src = source_index(mask, m, rows)
    pos = _local_positions(m, cp, cp_rank, cp_algo, tp)
    flat = xa.reshape((-1,) + xa.shape[2:])
    total = src.size
    idx = np.full(pos.size, -1, dtype=np.int64)
    inside = pos < total
    idx[inside] = src[pos[inside]]
    out = np.empty((pos.size,) + xa.shape[2:], dtype=xa.dtype)
    ok = idx >= 0
    out[ok] = flat[idx[ok]]
    out[~ok] = fill
    return like(out, x)


def position_ids(
    micro,
    *,
    style: str = "te",
    cp: int = 1,
    cp_rank: int | None = None,
    cp_algo: str = "zigzag",
    tp: int = 1,
):
    """Position ids of the packed stream, int64, sliced like ``pack``.

    ``style="te"``: the offset inside the padded slot (0 .. plen-1, padding
    continues the count), what Megatron/TE THD RoPE uses.
    ``style="hf"``: restart at 0: a sequence's real tokens are 0 .. len-1 and
    its slot padding starts again at 0, so ``position_ids == 0`` marks exactly
    the real sequence starts plus the padding runs (HF's flash-attention
    bridge derives cu_seqlens from those zeros).
    In both styles the Ulysses tail padding counts 0, 1, 2, ..."""
    if style not in ("te", "hf"):
        raise ValueError(f"style: expected 'te' or 'hf', got {style!r}")
    m = as_micro(micro)
    cp, cp_rank, tp = _check_cp(cp, cp_rank, tp)
    total = _stream_length(m, cp, cp_algo, tp)
    seq, off = _stream_seq(m, total)
    pos = off.copy()
    if style == "hf":
        real = np.diff(m.cu_seqlens)
        inslot = seq >= 0
        ln = real[seq[inslot]]
        o = off[inslot]
        pos[inslot] = np.where(o < ln, o, o - ln)
    return pos[_local_positions(m, cp, cp_rank, cp_algo, tp)]


def labels(
    input_ids,
    attention_mask,
    micro,
    *,
    rows=None,
    loss_mask=None,
    ignore_index: int = IGNORE_INDEX,
    cp: int = 1,
    cp_rank: int | None = None,
    cp_algo: str = "zigzag",
    tp: int = 1,
):
    """Next-token labels, int64, sliced like ``pack``.

    Built per sequence on the global stream before any CP split: the label at
    real token t of a sequence is its token t+1; the last real token and every
    padding position get ``ignore_index``. With ``loss_mask`` ([B, S], e.g.
    the response mask) a label is kept only where the *target* token's column
    is set in loss_mask."""
    ids = to_numpy(input_ids, "input_ids")
    mask = to_numpy(attention_mask, "attention_mask")
    if ids.shape != mask.shape:
        raise ValueError(f"input_ids: expected shape {mask.shape}, got {ids.shape}")
    m = as_micro(micro)
    cp, cp_rank, tp = _check_cp(cp, cp_rank, tp)
    src = source_index(mask, m, rows)
    total = _stream_length(m, cp, cp_algo, tp)
    seq, off = _stream_seq(m, total)
    real = np.diff(m.cu_seqlens)
    glob = np.full(total, ignore_index, dtype=np.int64)
    t = src.size
    has_next = np.zeros(total, dtype=bool)
    has_next[:t] = (src >= 0) & (off[:t] + 1 < real[seq[:t]])
    tgt = src[has_next[:t]] + 1  # next column of the same row, still valid
    flat_ids = ids.reshape(-1)
    vals = flat_ids[tgt].astype(np.int64)
    if loss_mask is not None:
        lm = to_numpy(loss_mask, "loss_mask")
        if lm.shape != mask.shape:
            raise ValueError(f"loss_mask: expected shape {mask.shape}, got {lm.shape}")
        vals = np.where(lm.reshape(-1)[tgt] != 0, vals, ignore_index)
    glob[has_next] = vals
    out = glob[_local_positions(m, cp, cp_rank, cp_algo, tp)]
    return like(out, input_ids)


def local_cu_seqlens(micro, cp: int = 1, cp_rank: int = 0, cp_algo: str = "zigzag", tp: int = 1):
    """``(cu_real, cu_padded)`` of one CP rank, int64 [n+1].

    Zigzag (gpu.md 4.3): local slots are ``cu_pad / CP``; the valid tokens of
    sequence k on rank r are ``clamp(len - r*c, 0, c) + clamp(len -
    (2*CP-1-r)*c, 0, c)`` and always form a prefix of the local slot.
    Ulysses: sequences may straddle shards, so the per-rank view is the
    global cu clipped to the rank's window ``[r*L, (r+1)*L)`` shifted by r*L
    (padded), and the valid positions counted in the same window (real)."""
    m = as_micro(micro)
    cp, cp_rank, tp = _check_cp(cp, cp_rank, tp)
    algo = _cp_algo(cp_algo)
    real = np.diff(m.cu_seqlens)
    cu_pad = m.cu_seqlens_padded
    if cp == 1:
        return m.cu_seqlens.copy(), cu_pad.copy()
    if algo == "zigzag":
        partition_index(m, cp, cp_rank, algo, tp)  # Validates 2*CP divisibility.
        c = np.diff(cu_pad) // (2 * cp)
        v1 = np.clip(real - cp_rank * c, 0, c)
        v2 = np.clip(real - (2 * cp - 1 - cp_rank) * c, 0, c)
        cu_r = np.concatenate(([0], np.cumsum(v1 + v2))).astype(np.int64)
        return cu_r, cu_pad // cp
    n_local = local_length(m, cp, algo, tp)
    lo, hi = cp_rank * n_local, (cp_rank + 1) * n_local
    padded = np.clip(cu_pad, lo, hi) - lo
    valid_end = cu_pad[:-1] + real  # end of the real tokens of each slot
    per = np.clip(valid_end, lo, hi) - np.clip(cu_pad[:-1], lo, hi)
    cu_r = np.concatenate(([0], np.cumsum(per))).astype(np.int64)
    return cu_r, padded.astype(np.int64)


def unpack(
    packed,
    attention_mask,
    micro,
    *,
    rows=None,
    cp: int = 1,
    cp_rank: int | None = None,
    cp_algo: str = "zigzag",
    tp: int = 1,
    fill=0,
):
    """Inverse of ``pack``: scatters packed outputs back to ``[B, S, ...]``.

    ``packed`` is one CP rank's local slice ``[L, ...]`` (give ``cp_rank``;
    only the tokens that live on that rank are written), or, with
    ``cp_rank=None``, every rank's slice: a list/tuple of CP arrays or their
    concatenation in rank order ``[CP*L, ...]`` (an all-gather). Every slot
    that receives no valid token holds ``fill`` (0: flash-attn ``pad_input``
    semantics)."""
    mask = to_numpy(attention_mask, "attention_mask")
    m = as_micro(micro)
    cp, cp_rank, tp = _check_cp(cp, cp_rank, tp)
    if isinstance(packed, (list, tuple)):
        if cp_rank is not None:
            raise ValueError("packed: a list of CP slices needs cp_rank=None")
        if len(packed) != cp:
            raise ValueError(f"packed: expected {cp} CP slices, got {len(packed)}")
        parts = [to_numpy(p, f"packed[{i}]") for i, p in enumerate(packed)]
        template = packed[0]
        data = np.concatenate(parts, axis=0) if parts else np.zeros(0)
    else:
        data = to_numpy(packed, "packed")
        template = packed
    pos = _local_positions(m, cp, cp_rank, cp_algo, tp)
    if data.ndim < 1 or data.shape[0] != pos.size:
        raise ValueError(
            f"packed: expected {pos.size} rows for cp={cp}, cp_rank={cp_rank}, got shape {data.shape}"
        )
    src = source_index(mask, m, rows)
    batch, width = mask.shape
    out = np.full((batch * width,) + data.shape[1:], fill, dtype=data.dtype)
    inside = pos < src.size
    tgt = np.full(pos.size, -1, dtype=np.int64)
    tgt[inside] = src[pos[inside]]
    ok = tgt >= 0
    out[tgt[ok]] = data[ok]
    return like(out.reshape((batch, width) + data.shape[1:]), template)


def micro_rows(micros: Sequence, offset: int = 0) -> list[np.ndarray]:
    """Local row indices for micro-batches dispatched back to back: the
    micro-batch j gets rows ``offset + sum(n_<j) ...``. Useful when the padded
    batch on a worker is its dispatched chunk in plan order."""
    out = []
    for mb in micros:
        n = as_micro(mb).seqs.size
        out.append(np.arange(offset, offset + n, dtype=np.int64))
        offset += n
    return out
