"""One GPU's share of a context-parallel group's work, computed on its own:
the emulated shard that bench/e2e/dcp.py times.

A group of c GPUs runs the packed stream of its sequences (aligned lengths
a, each a multiple of 2c) with zigzag sharding: GPU r holds chunks r and
2c-1-r of every sequence (each a/(2c) tokens), in sequence order, so its
shard is sum(a)/c tokens (``zigzag_index``). Every per-token layer runs on
those tokens alone. Attention is what ring attention computes: c steps, in
step s the local queries attend to the keys and values of group rank
p = (r - s) mod c, and the steps' partial outputs are merged by their
log-sum-exp (``ring_attention``). Zigzag makes every step after the first
the same amount of work (``ring_plan``), per sequence:

- p == r (step 0): the local 2h tokens, causal among themselves (chunk r
  precedes chunk 2c-1-r in the sequence);
- p < r: both local chunks see the peer's chunk p entirely and its chunk
  2c-1-p not at all (2h x h, no mask);
- p > r: only the local chunk 2c-1-r sees anything, the peer's two chunks
  entirely (h x 2h, no mask).

A step is computed the way a flash kernel walks a varlen batch: all the
step's (query tile, key tile) pairs of all sequences at once, tiles of
tile x tile tokens that never span two sequences, the pairs wholly above a
causal diagonal skipped, the pairs of a query tile merged by log-sum-exp
(``step_plan``, ``_step``). So a step costs a fixed number of operations
whatever the number of sequences (one kernel launch on a GPU), and a GPU's
attention work is about a^2/(2c) per sequence in c steps instead of one:
the c - 1 extra steps, the shorter shards and their tiles' padding are the
compute side of what dynamic CP's cost terms price. The tile side is the
caller's (``tile``): bench/e2e/dcp.py makes it 128 real tokens, a flash
kernel's tile, divided by its length scale (4 tokens at 1/32), so a chunk
shorter than a tile pays about the padding it pays on a GPU. The small
batched products cost more per (query, key) pair than the model's FLOPs
say (the calibration measures it).

No communication is emulated: the peers' keys and values are tensors
already on the GPU (``ShardTimer`` makes them up; the test of this file
passes the real ones).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from tiny_model import Config, TinyDecoder


def check_lengths(lengths, c: int) -> None:
    if c < 1:
        raise ValueError(f"c: {c} (a group holds at least one GPU)")
    for i, a in enumerate(lengths):
        if a <= 0 or a % (2 * c if c > 1 else 1):
            raise ValueError(f"lengths[{i}]: {a} is not a positive multiple of 2c = {2 * c}")


def zigzag_index(lengths, c: int, r: int) -> torch.Tensor:
    """The stream positions GPU r of a group of c holds, in its local
    order: for every sequence, chunk r then chunk 2c-1-r (for c = 1 the
    whole stream)."""
    check_lengths(lengths, c)
    parts, start = [], 0
    for a in lengths:
        if c == 1:
            parts.append(torch.arange(start, start + a))
        else:
            h = a // (2 * c)
            parts.append(torch.arange(start + r * h, start + (r + 1) * h))
            parts.append(torch.arange(start + (2 * c - 1 - r) * h, start + (2 * c - r) * h))
        start += a
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)


def zigzag_positions(lengths, c: int, r: int) -> torch.Tensor:
    """Position ids (offset inside its sequence) of every local token."""
    parts, start = [], 0
    idx = zigzag_index(lengths, c, r)
    for a in lengths:
        parts.append(torch.full((a // c,), start, dtype=torch.int64))
        start += a
    return idx - torch.cat(parts) if parts else idx


TILE = 16  # tokens a tile side where the caller names none (see the module's docstring)


@dataclass
class StepPlan:
    """One ring step's attention as tiles, the way a flash kernel walks a
    varlen batch: P (query tile, key tile) pairs of ``size`` x ``size``,
    every sequence's blocks cut into tiles of their own (a tile never spans
    two sequences), the pairs wholly above a causal diagonal left out."""

    size: int  # tokens a tile side
    qtok: torch.Tensor  # [P * size] local query row of each pair row (padding: 0)
    ktok: torch.Tensor  # [P * size] peer key row of each pair column (padding: 0)
    allowed: torch.Tensor  # [P, size, size] the (query, key) entries that count
    tile: torch.Tensor  # [P] the query tile of each pair
    slots: torch.Tensor  # [tiles, M] the pairs of each query tile (P: none)
    rows: torch.Tensor  # [N] each local token's row among tiles * size (the last: not in this step)


def step_plan(blocks, n_local: int, tile: int = TILE) -> StepPlan:
    """``blocks``: (query start, key start, length of queries, length of
    keys, causal) in local rows; a causal block's queries and keys are the
    same positions. Built with array operations: a 4-token tile gives tens
    of thousands of pairs per step, too many for a Python loop per pair."""
    if tile < 1:
        raise ValueError(f"tile: {tile} (a tile holds at least one token)")
    span = np.arange(tile)
    qtok, ktok, allowed, tiles = [], [], [], []
    rows = np.full(n_local, -1, dtype=np.int64)
    n_tiles = 0
    for q0, k0, nq, nk, causal in blocks:
        qs = np.arange(0, nq, tile)  # the block's query tile starts
        ks = np.arange(0, nk, tile)
        ql = np.minimum(tile, nq - qs)
        kl = np.minimum(tile, nk - ks)
        qi, ki = (x.ravel() for x in np.meshgrid(np.arange(qs.size), np.arange(ks.size), indexing="ij"))
        if causal:  # a key tile wholly after the query tile's last query: nothing visible
            keep = ks[ki] <= qs[qi] + ql[qi] - 1
            qi, ki = qi[keep], ki[keep]
        qvalid = span[None, :] < ql[qi][:, None]  # [pairs, tile]
        kvalid = span[None, :] < kl[ki][:, None]
        m = qvalid[:, :, None] & kvalid[:, None, :]
        if causal:
            m &= (ks[ki][:, None, None] + span[None, None, :]) <= (qs[qi][:, None, None] + span[None, :, None])
        allowed.append(m)
        qtok.append(np.where(qvalid, q0 + qs[qi][:, None] + span[None, :], 0).ravel())
        ktok.append(np.where(kvalid, k0 + ks[ki][:, None] + span[None, :], 0).ravel())
        tiles.append(n_tiles + qi)
        local = np.arange(nq)
        rows[q0 + local] = (n_tiles + local // tile) * tile + local % tile
        n_tiles += qs.size
    tile_of = np.concatenate(tiles).astype(np.int64) if tiles else np.zeros(0, dtype=np.int64)
    p = tile_of.size
    count = np.bincount(tile_of, minlength=n_tiles)
    slots = np.full((max(n_tiles, 1), max(int(count.max(initial=0)), 1)), p, dtype=np.int64)
    first = np.cumsum(count) - count  # pairs come grouped by query tile, in order
    slots[tile_of, np.arange(p) - first[tile_of]] = np.arange(p)
    rows[rows < 0] = max(n_tiles, 1) * tile

    def cat(parts, dtype, shape):
        return torch.from_numpy(np.concatenate(parts).astype(dtype)) if parts else torch.zeros(shape, dtype=getattr(torch, dtype))

    return StepPlan(size=tile, qtok=cat(qtok, "int64", (0,)), ktok=cat(ktok, "int64", (0,)),
                    allowed=cat(allowed, "bool", (0, tile, tile)), tile=torch.from_numpy(tile_of),
                    slots=torch.from_numpy(slots), rows=torch.from_numpy(rows))


def ring_plan(lengths, c: int, r: int, tile: int = TILE) -> list:
    """The tiles of GPU r's c ring steps: step s attends to group rank
    p = (r - s) mod c. Per sequence (local rows [off, off + 2h), first
    chunk then second): p == r: the local block, causal; p < r: all local
    queries against the peer's first chunk; p > r: the second local chunk
    against both of the peer's."""
    check_lengths(lengths, c)
    n_local = sum(lengths) // c
    steps = []
    for s in range(c):
        p = (r - s) % c
        blocks, off = [], 0
        for a in lengths:
            n = a // c
            h = n // 2
            if p == r:
                blocks.append((off, off, n, n, True))
            elif p < r:
                blocks.append((off, off, n, h, False))
            else:
                blocks.append((off + h, off, n - h, n, False))
            off += n
        steps.append((p, step_plan(blocks, n_local, tile)))
    return steps


def _step(qh, kh, vh, sp: StepPlan):
    """One step: the output [H, N, D] and log-sum-exp [H, N] of every local
    query over this step's keys (-inf and 0 for a query with none)."""
    h, _, d = qh.shape
    size = sp.size
    p = sp.tile.numel()
    tiles = sp.slots.shape[0]
    qg = qh.index_select(1, sp.qtok).view(h, p, size, d)
    kg = kh.index_select(1, sp.ktok).view(h, p, size, d)
    vg = vh.index_select(1, sp.ktok).view(h, p, size, d)
    s = torch.matmul(qg, kg.transpose(-1, -2)).masked_fill(~sp.allowed, torch.finfo(qh.dtype).min)
    lse = torch.logsumexp(s, dim=-1)  # [H, P, T]; rows of padding hold only the masked value
    o = torch.matmul(torch.exp(s - lse[..., None]), vg)
    # The pairs of a query tile, merged by their share of its denominator.
    pad = torch.cat([lse, lse.new_full((h, 1, size), float("-inf"))], dim=1)
    tile_lse = torch.logsumexp(pad[:, sp.slots], dim=2)  # [H, tiles, T]
    w = torch.exp(lse - tile_lse[:, sp.tile])[..., None]
    out = o.new_zeros(h, tiles, size, d).index_add(1, sp.tile, o * w)
    out = torch.cat([out.view(h, tiles * size, d), o.new_zeros(h, 1, d)], dim=1)
    tile_lse = torch.cat([tile_lse.reshape(h, tiles * size), lse.new_full((h, 1), float("-inf"))], dim=1)
    return out[:, sp.rows], tile_lse[:, sp.rows]


def ring_attention(q, kv, lengths, c: int, r: int, plan=None, tile: int = TILE) -> torch.Tensor:
    """Causal attention of GPU r's local queries q [T/c, H, D] (zigzag
    order) against the group's keys and values, ring style. ``kv[p]`` is
    group rank p's (k, v), each in that rank's local zigzag order; kv[r] is
    this GPU's own. ``plan``: ``ring_plan(lengths, c, r, tile)``, made once
    per shard (``tile`` only serves to make it)."""
    plan = ring_plan(lengths, c, r, tile) if plan is None else plan
    qh = (q * (1.0 / math.sqrt(q.shape[-1]))).transpose(0, 1)  # [H, T/c, D]
    outs, lses = [], []
    for p, sp in plan:
        k, v = kv[p]
        o, lse = _step(qh, k.transpose(0, 1), v.transpose(0, 1), sp)
        outs.append(o)
        lses.append(lse)
    if len(outs) == 1:
        return outs[0].transpose(0, 1)
    lse = torch.stack(lses)  # [c, H, N]
    w = torch.exp(lse - torch.logsumexp(lse, dim=0))[..., None]
    return (torch.stack(outs) * w).sum(dim=0).transpose(0, 1)


class ShardTimer:
    """Times one GPU's forward + backward of its shard of a group's stream
    on the tiny model: ``key = (c, r, lengths)``. The peers' keys and
    values are random tensors made before the clock starts, one pair per
    layer and peer, that take gradients (ring attention's backward computes
    the peers' key and value gradients too and sends them back). The
    interface is bench/e2e/run.py's Timer (``inputs``, ``run``,
    ``reference``, ``work``), so run.measure times and normalises it."""

    reference = (1, 0, (64,))

    def __init__(self, cfg: Config, seed: int, tile: int = TILE):
        self.tile = tile
        self.cfg = cfg
        self.model = TinyDecoder(cfg)
        self.gen = torch.Generator().manual_seed(seed)
        self.dtype = getattr(torch, cfg.dtype)

    @staticmethod
    def work(key) -> int:
        return sum(key[2])

    def inputs(self, key):
        c, r, lengths = key
        t = sum(lengths) // c
        cfg = self.cfg
        ids = torch.randint(0, cfg.vocab, (t,), generator=self.gen)
        tgt = torch.randint(0, cfg.vocab, (t,), generator=self.gen)
        pos = zigzag_positions(lengths, c, r)
        peers = [[None if p == r else tuple(
            torch.randn(t, cfg.heads, cfg.head_dim, generator=self.gen, dtype=self.dtype).requires_grad_()
            for _ in range(2)) for p in range(c)] for _ in range(cfg.layers)]
        return key, ids, tgt, pos, peers, ring_plan(lengths, c, r, self.tile)

    def run(self, inp) -> float:
        (c, r, lengths), ids, tgt, pos, peers, plan = inp
        self.model.zero_grad(set_to_none=True)
        for layer in peers:
            for kv in layer:
                if kv is not None:
                    kv[0].grad = kv[1].grad = None
        layer = iter(peers)

        def attend(q, k, v):
            kv = list(next(layer))
            kv[r] = (k, v)
            return ring_attention(q, kv, lengths, c, r, plan)

        t0 = time.process_time()
        logits = self.model(ids, pos, attend)
        F.cross_entropy(logits, tgt, reduction="sum").backward()
        return time.process_time() - t0
