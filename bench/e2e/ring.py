"""One GPU's share of a context-parallel group's work, computed on its own:
the emulated shard that bench/e2e/dcp.py times.

A group of c GPUs runs the packed stream of its sequences (aligned lengths
a, each a multiple of 2c) with zigzag sharding: GPU r holds chunks r and
2c-1-r of every sequence (each a/(2c) tokens), in sequence order, so its
shard is sum(a)/c tokens (``zigzag_index``). Every per-token layer runs on
those tokens alone. Attention is what ring attention computes: c steps, in
step s the local queries attend to the keys and values of group rank
p = (r - s) mod c, each sequence on its own, and the partial outputs are
merged by their log-sum-exp (``ring_attention``). Zigzag makes every step
after the first the same amount of work:

- p == r (step 0): the local 2h tokens of a sequence, causal among
  themselves (chunk r precedes chunk 2c-1-r in the sequence);
- p < r: both local chunks see the peer's chunk p entirely and its chunk
  2c-1-p not at all (2h x h, no mask);
- p > r: only the local chunk 2c-1-r sees anything, the peer's two chunks
  entirely (h x 2h, no mask).

A GPU's attention work is therefore about a^2/(2c) per sequence (the causal
half of a^2/c) in c kernel steps instead of one: the c - 1 extra steps and
the shorter shards are the compute side of what dynamic CP's cost terms
price. No communication is emulated: the peers' keys and values are
tensors already on the GPU (``ShardTimer`` makes them up; the test of this
file passes the real ones).
"""

from __future__ import annotations

import math
import time

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


_MASKS: dict = {}


def _above_diagonal(n: int) -> torch.Tensor:
    """The n x n mask of the keys after each query, made once per size (a
    kernel has it built in)."""
    m = _MASKS.get(n)
    if m is None:
        m = _MASKS[n] = torch.ones(n, n, dtype=torch.bool).triu_(1)
    return m


def _part(q, k, v, causal: bool):
    """Attention of q [H, Lq, D] (already scaled) over k, v [H, Lk, D]: the
    output [H, Lq, D] and the log-sum-exp of every query's scores
    [H, Lq]."""
    s = torch.matmul(q, k.transpose(1, 2))
    if causal:
        s = s.masked_fill(_above_diagonal(q.shape[1]), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.matmul(torch.exp(s - lse[..., None]), v), lse


def _merge(parts):
    """Outputs of one query block against disjoint key sets, merged into the
    attention over their union (each weighted by its share of the
    softmax's denominator)."""
    if len(parts) == 1:
        return parts[0][0]
    lse = torch.stack([p[1] for p in parts])  # [n, H, Lq]
    w = torch.exp(lse - torch.logsumexp(lse, dim=0))[..., None]
    return (torch.stack([p[0] for p in parts]) * w).sum(dim=0)


def _local_causal(q, k, v, h: int):
    """The first ring step on a sequence's local block [first h | rest]:
    what a flash kernel computes of a causal square, in 2 x 2 tiles (the
    tile above the diagonal skipped): first x first and rest x rest
    causal, rest x first whole. Returns the parts of the first h queries
    and of the rest."""
    if h == 0:
        return [], [_part(q, k, v, causal=True)]
    return ([_part(q[:, :h], k[:, :h], v[:, :h], causal=True)],
            [_part(q[:, h:], k[:, :h], v[:, :h], causal=False),
             _part(q[:, h:], k[:, h:], v[:, h:], causal=True)])


def ring_attention(q, kv, lengths, c: int, r: int) -> torch.Tensor:
    """Causal attention of GPU r's local queries q [T/c, H, D] (zigzag
    order) against the group's keys and values, ring style. ``kv[p]`` is
    group rank p's (k, v), each in that rank's local zigzag order; kv[r] is
    this GPU's own."""
    check_lengths(lengths, c)
    qh = (q * (1.0 / math.sqrt(q.shape[-1]))).transpose(0, 1)  # [H, T/c, D]
    kvh = [(k.transpose(0, 1), v.transpose(0, 1)) for k, v in kv]
    # Per sequence, the partial outputs of its first and second local chunk.
    first = [[] for _ in lengths]
    second = [[] for _ in lengths]
    for s in range(c):
        p = (r - s) % c
        k, v = kvh[p]
        off = 0
        for i, a in enumerate(lengths):
            n = a // c
            h = n // 2
            qs, ks, vs = qh[:, off:off + n], k[:, off:off + n], v[:, off:off + n]
            if p == r:  # both local chunks, causal among themselves
                f, g = _local_causal(qs, ks, vs, h)
                first[i] += f
                second[i] += g
            elif p < r:  # all local queries against the peer's first chunk
                o, lse = _part(qs, ks[:, :h], vs[:, :h], causal=False)
                first[i].append((o[:, :h], lse[:, :h]))
                second[i].append((o[:, h:], lse[:, h:]))
            else:  # the local second chunk against both of the peer's
                second[i].append(_part(qs[:, h:], ks, vs, causal=False))
            off += n
    out = []
    for f, g in zip(first, second):
        if f:
            out.append(_merge(f))
        out.append(_merge(g))
    return torch.cat(out, dim=1).transpose(0, 1) if out else q.new_zeros(q.shape)


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
        return key, ids, tgt, pos, peers

    def run(self, inp) -> float:
        (c, r, lengths), ids, tgt, pos, peers = inp
        self.model.zero_grad(set_to_none=True)
        for layer in peers:
            for kv in layer:
                if kv is not None:
                    kv[0].grad = kv[1].grad = None
        layer = iter(peers)

        def attend(q, k, v):
            kv = list(next(layer))
            kv[r] = (k, v)
            return ring_attention(q, kv, lengths, c, r)

        t0 = time.process_time()
        logits = self.model(ids, pos, attend)
        F.cross_entropy(logits, tgt, reduction="sum").backward()
        return time.process_time() - t0
