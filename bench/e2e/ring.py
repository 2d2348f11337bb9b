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
TILE x TILE tokens that never span two sequences, the pairs wholly above a
causal diagonal skipped, the pairs of a query tile merged by log-sum-exp
(``step_plan``, ``_step``). So a step costs a fixed number of operations
whatever the number of sequences (one kernel launch on a GPU), and a GPU's
attention work is about a^2/(2c) per sequence in c steps instead of one:
the c - 1 extra steps, the shorter shards and their tiles' padding are the
compute side of what dynamic CP's cost terms price. TILE is 16 tokens, 512
at the bench's 1/32 scale where a GPU's flash tiles are 128: a chunk
shorter than a tile pays more padding here than on a GPU, and the small
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


TILE = 16  # tokens a tile side (see the module's docstring)


@dataclass
class StepPlan:
    """One ring step's attention as tiles, the way a flash kernel walks a
    varlen batch: P (query tile, key tile) pairs of TILE x TILE, every
    sequence's blocks cut into tiles of their own (a tile never spans two
    sequences), the pairs wholly above a causal diagonal left out."""

    qtok: torch.Tensor  # [P * TILE] local query row of each pair row (padding: 0)
    ktok: torch.Tensor  # [P * TILE] peer key row of each pair column (padding: 0)
    allowed: torch.Tensor  # [P, TILE, TILE] the (query, key) entries that count
    tile: torch.Tensor  # [P] the query tile of each pair
    slots: torch.Tensor  # [tiles, M] the pairs of each query tile (P: none)
    rows: torch.Tensor  # [N] each local token's row among tiles * TILE (the last: not in this step)


def _tiles(start: int, n: int):
    return [(start + t, min(TILE, n - t)) for t in range(0, n, TILE)]


def step_plan(blocks, n_local: int) -> StepPlan:
    """``blocks``: (query start, key start, length of queries, length of
    keys, causal) in local rows; a causal block's queries and keys are the
    same positions."""
    qtok, ktok, allowed, tile, per_tile, rows = [], [], [], [], [], {}
    for q0, k0, nq, nk, causal in blocks:
        for qs, ql in _tiles(q0, nq):
            t = len(per_tile)
            per_tile.append([])
            for i in range(ql):
                rows[qs + i] = t * TILE + i
            for ks, kl in _tiles(k0, nk):
                if causal and ks - k0 > qs - q0 + ql - 1:
                    continue  # above the diagonal: no key is visible
                m = torch.zeros(TILE, TILE, dtype=torch.bool)
                m[:ql, :kl] = True
                if causal:
                    qi = torch.arange(qs - q0, qs - q0 + TILE)[:, None]
                    kj = torch.arange(ks - k0, ks - k0 + TILE)[None, :]
                    m &= kj <= qi
                per_tile[t].append(len(tile))
                tile.append(t)
                allowed.append(m)
                qtok += list(range(qs, qs + ql)) + [0] * (TILE - ql)
                ktok += list(range(ks, ks + kl)) + [0] * (TILE - kl)
    p = len(tile)
    width = max((len(x) for x in per_tile), default=1)
    slots = torch.full((max(len(per_tile), 1), width), p, dtype=torch.int64)
    for t, pairs in enumerate(per_tile):
        slots[t, :len(pairs)] = torch.tensor(pairs, dtype=torch.int64)
    none = max(len(per_tile), 1) * TILE
    return StepPlan(
        qtok=torch.tensor(qtok, dtype=torch.int64), ktok=torch.tensor(ktok, dtype=torch.int64),
        allowed=torch.stack(allowed) if allowed else torch.zeros(0, TILE, TILE, dtype=torch.bool),
        tile=torch.tensor(tile, dtype=torch.int64), slots=slots,
        rows=torch.tensor([rows.get(x, none) for x in range(n_local)], dtype=torch.int64))


def ring_plan(lengths, c: int, r: int) -> list:
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
        steps.append((p, step_plan(blocks, n_local)))
    return steps


def _step(qh, kh, vh, sp: StepPlan):
    """One step: the output [H, N, D] and log-sum-exp [H, N] of every local
    query over this step's keys (-inf and 0 for a query with none)."""
    h, _, d = qh.shape
    p = sp.tile.numel()
    tiles = sp.slots.shape[0]
    qg = qh.index_select(1, sp.qtok).view(h, p, TILE, d)
    kg = kh.index_select(1, sp.ktok).view(h, p, TILE, d)
    vg = vh.index_select(1, sp.ktok).view(h, p, TILE, d)
    s = torch.matmul(qg, kg.transpose(-1, -2)).masked_fill(~sp.allowed, torch.finfo(qh.dtype).min)
    lse = torch.logsumexp(s, dim=-1)  # [H, P, T]; rows of padding hold only the masked value
    o = torch.matmul(torch.exp(s - lse[..., None]), vg)
    # The pairs of a query tile, merged by their share of its denominator.
    pad = torch.cat([lse, lse.new_full((h, 1, TILE), float("-inf"))], dim=1)
    tile_lse = torch.logsumexp(pad[:, sp.slots], dim=2)  # [H, tiles, T]
    w = torch.exp(lse - tile_lse[:, sp.tile])[..., None]
    out = o.new_zeros(h, tiles, TILE, d).index_add(1, sp.tile, o * w)
    out = torch.cat([out.view(h, tiles * TILE, d), o.new_zeros(h, 1, d)], dim=1)
    tile_lse = torch.cat([tile_lse.reshape(h, tiles * TILE), lse.new_full((h, 1), float("-inf"))], dim=1)
    return out[:, sp.rows], tile_lse[:, sp.rows]


def ring_attention(q, kv, lengths, c: int, r: int, plan=None) -> torch.Tensor:
    """Causal attention of GPU r's local queries q [T/c, H, D] (zigzag
    order) against the group's keys and values, ring style. ``kv[p]`` is
    group rank p's (k, v), each in that rank's local zigzag order; kv[r] is
    this GPU's own. ``plan``: ``ring_plan(lengths, c, r)``, made once per
    shard."""
    plan = ring_plan(lengths, c, r) if plan is None else plan
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

    def __init__(self, cfg: Config, seed: int):
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
        return key, ids, tgt, pos, peers, ring_plan(lengths, c, r)

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
