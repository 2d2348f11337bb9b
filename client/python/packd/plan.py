"""Plan objects: numpy views over a packd.v1.PlanResponse or RankPlan.

All micro-batches of a plan are laid out rank-major (rank 0's mini-batch 0's
micro-batches first, ...) in a few flat read-only arrays; every per-rank,
per-mini-batch and per-micro-batch array is a slice (a view) of those, so a
plan of a million sequences costs a few arrays, not millions of Python
lists. The flat sequence array in that order is exactly ``plan.order()``, the
permutation a dispatcher applies before cutting the batch into per-rank
chunks of ``plan.rank_sizes()`` sequences.
"""

from __future__ import annotations

import itertools

import numpy as np
from google.protobuf import json_format

from . import _stubs
from ._arrays import is_torch, to_numpy

__all__ = ["Plan", "RankPlan", "RankView", "MiniBatchView", "MicroBatch"]


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


class _Table:
    """Flat arrays of every micro-batch of some RankPlan messages."""

    def __init__(self, rank_msgs):
        seq_parts, cu_parts, cup_parts = [], [], []
        meta = []  # (rank, mini, index, nseqs, max_seqlen, padded_width, tokens, padded_tokens, cost, loss_scale)
        cells = []  # (rank, [(m0, m1), ...] per mini)
        m = 0
        for rp in rank_msgs:
            spans = []
            for b, mini in enumerate(rp.mini_batches):
                m0 = m
                for j, mb in enumerate(mini.micro_batches):
                    seq_parts.append(mb.seqs)
                    cu_parts.append(mb.cu_seqlens)
                    cup_parts.append(mb.cu_seqlens_padded)
                    meta.append(
                        (rp.dp_rank, b, j, len(mb.seqs), mb.max_seqlen, mb.padded_width, mb.tokens,
                         mb.padded_tokens, mb.cost, mb.loss_scale)
                    )
                    m += 1
                spans.append((m0, m))
            cells.append((rp.dp_rank, spans))
        nseqs = np.array([x[3] for x in meta], dtype=np.int64)
        n_total = int(nseqs.sum())
        self.seqs = _frozen(np.fromiter(itertools.chain.from_iterable(seq_parts), np.int64, n_total))
        ncu = sum(len(c) for c in cu_parts)
        self.cu = _frozen(np.fromiter(itertools.chain.from_iterable(cu_parts), np.int32, ncu))
        ncup = sum(len(c) for c in cup_parts)
        self.cup = _frozen(np.fromiter(itertools.chain.from_iterable(cup_parts), np.int32, ncup))
        self.cu_len = np.fromiter((len(c) for c in cu_parts), np.int64, len(cu_parts))
        self.cup_len = np.fromiter((len(c) for c in cup_parts), np.int64, len(cup_parts))
        self.cu_off = np.concatenate(([0], np.cumsum(self.cu_len)))
        self.cup_off = np.concatenate(([0], np.cumsum(self.cup_len)))
        self.seq_off = np.concatenate(([0], np.cumsum(nseqs))).astype(np.int64)
        cols = list(zip(*meta)) if meta else [()] * 10
        self.rank = _frozen(np.array(cols[0], dtype=np.int64))
        self.mini = _frozen(np.array(cols[1], dtype=np.int64))
        self.index = _frozen(np.array(cols[2], dtype=np.int64))
        self.nseqs = _frozen(nseqs)
        self.max_seqlen = _frozen(np.array(cols[4], dtype=np.int64))
        self.padded_width = _frozen(np.array(cols[5], dtype=np.int64))
        self.tokens = _frozen(np.array(cols[6], dtype=np.int64))
        self.padded_tokens = _frozen(np.array(cols[7], dtype=np.int64))
        self.cost = _frozen(np.array(cols[8], dtype=np.float64))
        self.loss_scale = _frozen(np.array(cols[9], dtype=np.float64))
        self.cells = cells
        self.size = m


class MicroBatch:
    """One micro-batch of one rank. Arrays are read-only views:
    ``seqs`` (int64, indices into the request's lengths, packed order),
    ``cu_seqlens`` and ``cu_seqlens_padded`` (int32, leading 0); scalars
    ``max_seqlen``, ``padded_width``, ``tokens``, ``padded_tokens``,
    ``cost``, ``loss_scale``; position ``rank``, ``mini``, ``index``.
    packd.layout accepts it wherever a micro-batch is expected."""

    __slots__ = ("rank", "mini", "index", "seqs", "cu_seqlens", "cu_seqlens_padded", "max_seqlen",
                 "padded_width", "tokens", "padded_tokens", "cost", "loss_scale")

    def __init__(self, t: _Table, k: int):
        self.rank, self.mini, self.index = int(t.rank[k]), int(t.mini[k]), int(t.index[k])
        self.seqs = t.seqs[t.seq_off[k] : t.seq_off[k + 1]]
        self.cu_seqlens = t.cu[t.cu_off[k] : t.cu_off[k + 1]]
        self.cu_seqlens_padded = t.cup[t.cup_off[k] : t.cup_off[k + 1]]
        self.max_seqlen = int(t.max_seqlen[k])
        self.padded_width = int(t.padded_width[k])
        self.tokens = int(t.tokens[k])
        self.padded_tokens = int(t.padded_tokens[k])
        self.cost = float(t.cost[k])
        self.loss_scale = float(t.loss_scale[k])

    def __len__(self) -> int:
        return int(self.seqs.size)

    def __repr__(self) -> str:
        return (f"MicroBatch(rank={self.rank}, mini={self.mini}, index={self.index}, seqs={self.seqs.size}, "
                f"tokens={self.tokens}, padded_tokens={self.padded_tokens}, max_seqlen={self.max_seqlen}, "
                f"loss_scale={self.loss_scale:.6g})")


class _Span:
    """A run of consecutive micro-batches [m0, m1) of a table: per-micro-batch
    arrays are views; ``seqs`` is the view of all their sequences."""

    def __init__(self, t: _Table, m0: int, m1: int):
        self._t, self._m0, self._m1 = t, m0, m1

    @property
    def seqs(self) -> np.ndarray:
        t = self._t
        return t.seqs[t.seq_off[self._m0] : t.seq_off[self._m1]]

    @property
    def cu_seqlens(self) -> list:
        return [m.cu_seqlens for m in self.micro_batches]

    @property
    def cu_seqlens_padded(self) -> list:
        return [m.cu_seqlens_padded for m in self.micro_batches]

    def _col(self, name):
        return getattr(self._t, name)[self._m0 : self._m1]

    max_seqlen = property(lambda self: self._col("max_seqlen"), doc="int64 per micro-batch")
    loss_scale = property(lambda self: self._col("loss_scale"), doc="float64 per micro-batch")
    tokens = property(lambda self: self._col("tokens"), doc="int64 real tokens per micro-batch")
    padded_tokens = property(lambda self: self._col("padded_tokens"), doc="int64 per micro-batch")
    cost = property(lambda self: self._col("cost"), doc="float64 per micro-batch")
    num_seqs = property(lambda self: self._col("nseqs"), doc="int64 sequences per micro-batch")

    @property
    def micro_batches(self) -> list:
        return [MicroBatch(self._t, k) for k in range(self._m0, self._m1)]

    def __len__(self) -> int:
        return self._m1 - self._m0

    def __iter__(self):
        return iter(self.micro_batches)

    def __getitem__(self, j):
        return self.micro_batches[j]


class MiniBatchView(_Span):
    """The micro-batches of one rank in one mini-batch."""

    def __init__(self, t, m0, m1, rank, mini):
        super().__init__(t, m0, m1)
        self.rank, self.mini = rank, mini

    def __repr__(self):
        return f"MiniBatchView(rank={self.rank}, mini={self.mini}, micro_batches={len(self)}, seqs={self.seqs.size})"


class RankView(_Span):
    """Everything one DP rank runs: ``mini_batches`` (MiniBatchView list),
    ``micro_batches`` (all of them), ``seqs`` (its sequences in run order)."""

    def __init__(self, t: _Table, cell_index: int):
        rank, spans = t.cells[cell_index]
        m0 = spans[0][0] if spans else 0
        m1 = spans[-1][1] if spans else 0
        super().__init__(t, m0, m1)
        self.dp_rank = rank
        self._spans = spans

    @property
    def mini_batches(self) -> list:
        return [MiniBatchView(self._t, a, b, self.dp_rank, i) for i, (a, b) in enumerate(self._spans)]

    def __repr__(self):
        return (f"RankView(dp_rank={self.dp_rank}, mini_batches={len(self._spans)}, "
                f"micro_batches={len(self)}, seqs={self.seqs.size})")


class Plan:
    """A PlanResponse with numpy views. ``plan[r]`` / ``plan.ranks[r]`` is rank
    r's RankView; stats figures are attributes (``plan.lockstep_efficiency``,
    ``plan.dp_imbalance``, ...) and ``plan.figures()``; ``to_json()`` is the
    protobuf JSON mapping, identical to ``packctl plan --format json``."""

    def __init__(self, response, lengths=None):
        self.response = response
        self.lengths = None if lengths is None else _frozen(np.asarray(lengths, dtype=np.int64).copy())
        self._t = _Table(response.ranks)
        self.ranks = [RankView(self._t, i) for i in range(len(response.ranks))]

    # Construction from serialized forms.
    @classmethod
    def from_bytes(cls, data: bytes, lengths=None) -> "Plan":
        return cls(_stubs.pb2().PlanResponse.FromString(data), lengths)

    @classmethod
    def from_json(cls, text: str, lengths=None) -> "Plan":
        msg = _stubs.pb2().PlanResponse()
        json_format.Parse(text, msg)
        return cls(msg, lengths)

    # Identity and shape.
    @property
    def plan_id(self) -> str:
        return self.response.plan_id

    @property
    def dp(self) -> int:
        return len(self.ranks)

    @property
    def stats(self):
        """The PlanStats message."""
        return self.response.stats

    @property
    def num_sequences(self) -> int:
        return int(self._t.seqs.size)

    @property
    def num_mini_batches(self) -> int:
        return max((len(r._spans) for r in self.ranks), default=0)

    def __len__(self) -> int:
        return self.dp

    def __getitem__(self, rank: int) -> RankView:
        return self.ranks[rank]

    def __iter__(self):
        return iter(self.ranks)

    def micro(self, rank: int, mini: int, index: int) -> MicroBatch:
        """Micro-batch ``index`` of rank ``rank`` in mini-batch ``mini``."""
        a, b = self.ranks[rank]._spans[mini]
        if not 0 <= index < b - a:
            raise IndexError(f"index: rank {rank} mini-batch {mini} has {b - a} micro-batches, got {index}")
        return MicroBatch(self._t, a + index)

    @property
    def micro_batches(self) -> list:
        """Every micro-batch, rank-major."""
        return [MicroBatch(self._t, k) for k in range(self._t.size)]

    # Dispatch.
    def order(self) -> np.ndarray:
        """The global permutation (int64, read-only): rank 0's sequences in run
        order, then rank 1's, ... Reorder the batch with it and cut it into
        ``rank_sizes()`` chunks."""
        return self._t.seqs

    def rank_sizes(self) -> np.ndarray:
        """Sequences per rank (int64 [dp])."""
        return np.array([r.seqs.size for r in self.ranks], dtype=np.int64)

    def split(self, data) -> list:
        """Per-rank chunks of ``data`` (indexed by sequence on axis 0, input
        order): ``[data[rank.seqs] for rank in plan]``."""
        if is_torch(data):
            import torch

            return [data.index_select(0, torch.from_numpy(r.seqs.copy())) for r in self.ranks]
        if isinstance(data, (list, tuple)):
            return [[data[i] for i in r.seqs] for r in self.ranks]
        a = np.asarray(data)
        return [a[r.seqs] for r in self.ranks]

    def restore(self, outputs):
        """Puts outputs given in ``order()`` order back in input order.

        ``outputs``: an array/tensor with one row per sequence on axis 0, a
        list of one item per sequence, or a list of chunks (per rank or per
        micro-batch, in plan order) that concatenate to one row per
        sequence."""
        order = self._t.seqs
        n = order.size
        if isinstance(outputs, (list, tuple)) and len(outputs) != n:
            if not outputs:
                raise ValueError(f"outputs: expected {n} rows, got an empty list")
            if is_torch(outputs[0]):
                import torch

                outputs = torch.cat(list(outputs), dim=0)
            else:
                outputs = np.concatenate([to_numpy(o, "outputs") for o in outputs], axis=0)
        if isinstance(outputs, (list, tuple)):
            out = [None] * n
            for pos, idx in enumerate(order):
                out[idx] = outputs[pos]
            return out
        rows = outputs.shape[0] if hasattr(outputs, "shape") else len(outputs)
        if rows != n:
            raise ValueError(f"outputs: expected {n} rows (one per sequence), got {rows}")
        inv = np.empty(n, dtype=np.int64)
        inv[order] = np.arange(n, dtype=np.int64)
        if is_torch(outputs):
            import torch

            return outputs.index_select(0, torch.from_numpy(inv).to(outputs.device))
        return np.asarray(outputs)[inv]

    # Figures.
    def figures(self) -> dict:
        """Every PlanStats field as a dict (names as in the proto)."""
        return {f.name: getattr(self.stats, f.name) for f in self.stats.DESCRIPTOR.fields}

    def __getattr__(self, name):
        # Stats figures as attributes: plan.lockstep_efficiency, ...
        if name.startswith("_") or name in ("response", "ranks", "lengths"):
            raise AttributeError(name)
        stats = self.response.stats
        if name in stats.DESCRIPTOR.fields_by_name:
            return getattr(stats, name)
        raise AttributeError(f"'Plan' object has no attribute {name!r}")

    # Serialization.
    def to_json(self) -> str:
        """The protobuf JSON mapping of the PlanResponse as
        google.protobuf.json_format.MessageToJson writes it, plus a final
        newline: byte for byte what ``packctl plan --format json`` prints."""
        return json_format.MessageToJson(self.response) + "\n"

    def to_dict(self) -> dict:
        return json_format.MessageToDict(self.response)

    def to_bytes(self) -> bytes:
        return self.response.SerializeToString()

    def __repr__(self) -> str:
        s = self.stats
        return (f"Plan(id={self.plan_id!r}, dp={self.dp}, sequences={self.num_sequences}, "
                f"micro_batches_per_rank={s.micro_batches_per_rank}, "
                f"lockstep_efficiency={s.lockstep_efficiency:.4f}, dp_imbalance={s.dp_imbalance:.4f})")


class RankPlan(RankView):
    """One rank's plan from ``Client.rank_plan`` (a RankPlan message)."""

    def __init__(self, message):
        self.message = message
        super().__init__(_Table([message]), 0)

    @property
    def plan_id(self) -> str:
        return self.message.plan_id

    def to_json(self) -> str:
        return json_format.MessageToJson(self.message)

    def __repr__(self):
        return f"RankPlan(plan_id={self.plan_id!r}, dp_rank={self.dp_rank}, micro_batches={len(self)})"
