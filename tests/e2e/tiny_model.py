"""A small decoder-only transformer in plain torch (1.13: no
scaled_dot_product_attention), shared by the packed == padded tests and by
bench/e2e/run.py.

The model only ever sees a flat token stream ``ids [T]`` with position ids
``pos [T]``; how tokens may attend to each other is the caller's
``attend(q, k, v) -> o`` (all ``[T, H, Dh]``). Every other operation is per
token, so the padded baseline (``[B, S]`` flattened to ``B*S`` tokens with a
per-row mask), the packed stream (varlen over ``cu_seqlens``) and the
context-parallel shards (K/V gathered or heads exchanged) run the very same
weights and differ only in ``attend``.

Attention functions here:

- ``varlen_attention(q, k, v, cu)``: causal attention inside each segment
  ``[cu[i], cu[i+1])`` of a packed stream, one segment at a time (what
  flash-attn's varlen kernel computes; the cost is the sum of squared
  segment lengths, never the square of the stream);
- ``masked_attention(q, k, v, allowed)``: dense attention under a boolean
  ``[Tq, Tk]`` mask; a query with no allowed key outputs 0;
- ``padded_attention(mask)``: the attend of a padded ``[B, S]`` batch, causal
  plus the key-padding mask.

RoPE uses the caller's position ids, so positions restarting at 0 for
every sequence (HF) or the offset in the padded slot (TE) are both the
caller's choice; on real tokens the two agree.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "Config",
    "TinyDecoder",
    "apply_rope",
    "masked_attention",
    "padded_attention",
    "segment_ids",
    "varlen_attention",
]


@dataclass(frozen=True)
class Config:
    vocab: int = 61
    hidden: int = 32
    heads: int = 4
    layers: int = 2
    mlp: int = 64
    rope_base: float = 10000.0
    dtype: str = "float64"  # "float32" for the bench
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def as_dict(self) -> dict:
        return asdict(self)


def apply_rope(x: torch.Tensor, pos: torch.Tensor, base: float) -> torch.Tensor:
    """Rotary embedding of x [T, H, Dh] at positions pos [T] (rotate-half
    form: the first and second halves of each head are the pairs)."""
    half = x.shape[-1] // 2
    inv = base ** (-torch.arange(half, dtype=x.dtype, device=x.device) / half)
    ang = pos.to(x.dtype)[:, None] * inv[None, :]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def _causal_mask(n: int, device=None) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool, device=device).tril_()


def varlen_attention(q, k, v, cu) -> torch.Tensor:
    """Causal attention inside every segment [cu[i], cu[i+1]) of the stream;
    tokens after cu[-1] (none in a well-formed layout) get 0. Zero-length
    segments are skipped."""
    t, h, d = q.shape
    cu = [int(c) for c in cu]
    scale = 1.0 / math.sqrt(d)
    parts = []
    if cu and cu[0] > 0:
        parts.append(q.new_zeros(cu[0], h, d))
    for a, b in zip(cu[:-1], cu[1:]):
        if b == a:
            continue
        qs, ks, vs = (x[a:b].transpose(0, 1) for x in (q, k, v))  # [H, L, D]
        s = torch.matmul(qs, ks.transpose(1, 2)) * scale
        s = s.masked_fill(~_causal_mask(b - a, q.device), float("-inf"))
        parts.append(torch.matmul(torch.softmax(s, dim=-1), vs).transpose(0, 1))
    end = cu[-1] if cu else 0
    if end < t:
        parts.append(q.new_zeros(t - end, h, d))
    if not parts:
        return q.new_zeros(t, h, d)
    return torch.cat(parts, dim=0)


def masked_attention(q, k, v, allowed: torch.Tensor) -> torch.Tensor:
    """Dense attention of q [Tq, H, D] over k, v [Tk, H, D] where
    allowed [Tq, Tk] is True. Disallowed scores get the dtype's lowest
    finite value (never -inf, so a fully masked row cannot make NaN) and
    their probabilities are zeroed: a row with no allowed key outputs 0 and
    every allowed row is the exact softmax over its allowed keys."""
    d = q.shape[-1]
    s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
    s = s.masked_fill(~allowed[None], torch.finfo(s.dtype).min)
    p = torch.softmax(s, dim=-1) * allowed[None].to(s.dtype)
    return torch.einsum("hqk,khd->qhd", p, v)


def padded_attention(mask: torch.Tensor):
    """attend() for a padded batch [B, S] flattened to B*S tokens: a query
    sees the valid keys of its own row at or before its column."""
    b, s = mask.shape
    keep = _causal_mask(s, mask.device)[None] & mask.bool()[:, None, :]  # [B, Sq, Sk]

    def attend(q, k, v):
        h, d = q.shape[1], q.shape[2]
        qb, kb, vb = (x.reshape(b, s, h, d) for x in (q, k, v))
        sc = torch.einsum("bqhd,bkhd->bhqk", qb, kb) / math.sqrt(d)
        sc = sc.masked_fill(~keep[:, None], torch.finfo(sc.dtype).min)
        p = torch.softmax(sc, dim=-1) * keep[:, None].to(sc.dtype)
        return torch.einsum("bhqk,bkhd->bqhd", p, vb).reshape(b * s, h, d)

    return attend


def segment_ids(cu, total: int) -> torch.Tensor:
    """Segment index of every stream position 0..total-1 (int64): position
    t belongs to the last i with cu[i] <= t, so zero-width segments own no
    position."""
    cu_t = torch.as_tensor([int(c) for c in cu], dtype=torch.int64)
    return torch.searchsorted(cu_t, torch.arange(total, dtype=torch.int64), right=True) - 1


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.norm1 = RMSNorm(cfg.hidden)
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden, bias=False)
        self.out = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        self.norm2 = RMSNorm(cfg.hidden)
        self.up = nn.Linear(cfg.hidden, 2 * cfg.mlp, bias=False)
        self.down = nn.Linear(cfg.mlp, cfg.hidden, bias=False)

    def forward(self, x, pos, attend):
        t = x.shape[0]
        c = self.cfg
        q, k, v = self.qkv(self.norm1(x)).view(t, 3, c.heads, c.head_dim).unbind(1)
        q, k = apply_rope(q, pos, c.rope_base), apply_rope(k, pos, c.rope_base)
        x = x + self.out(attend(q, k, v).reshape(t, c.hidden))
        gate, up = self.up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class TinyDecoder(nn.Module):
    """Embedding, ``layers`` pre-norm blocks (RoPE attention, SwiGLU MLP),
    final norm, untied LM head. Weights depend only on ``cfg`` (seeded), so
    every process that builds the same Config holds the same model."""

    def __init__(self, cfg: Config):
        super().__init__()
        if cfg.hidden % cfg.heads or cfg.head_dim % 2:
            raise ValueError(f"hidden {cfg.hidden} must split into {cfg.heads} heads of even size")
        self.cfg = cfg
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(cfg.seed)
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden)
        self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        torch.random.set_rng_state(gen_state)
        self.to(getattr(torch, cfg.dtype))

    def forward(self, ids: torch.Tensor, pos: torch.Tensor, attend) -> torch.Tensor:
        """ids, pos: [T] int64 -> logits [T, vocab]."""
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x, pos, attend)
        return self.head(self.norm(x))
