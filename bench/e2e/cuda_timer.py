"""The CUDA side of bench/e2e/run.py (``--device cuda``): a bf16 decoder
on the GPU, its inputs packed from verl-shaped padded rows by packd.gpu's
CUDA backend, attention per sequence through torch's varlen kernel (or one
scaled_dot_product_attention call per sequence where torch has no varlen
kernel), and every micro-batch timed with CUDA events through
packd.timing.Recorder.

One timed micro-batch is what a trainer's step runs for it: pack ids,
labels and position ids of the padded rows into the packed stream
(packd.gpu.Layout), forward, next-token cross entropy, backward. The
micro-batch's key is the multiset of its slot lengths (see run.py); its
rows are padded to the longest slot, as a rollout batch is.

``check_packed_equals_padded`` runs first: on a small batch in fp32 (TF32
off) the packed micro-batch's loss and every gradient match the padded
rows' run through scaled_dot_product_attention with a padding mask, so the
timed path computes what the padded step computes.
"""

from __future__ import annotations


import torch
import torch.nn.functional as F

import packd
import packd.gpu
from packd.timing import Recorder
from tiny_model import TinyDecoder

IGNORE = -100

try:  # torch >= 2.9: one kernel over cu_seqlens, like flash-attn's varlen
    from torch.nn.attention.varlen import varlen_attn as _varlen_attn
except Exception:  # noqa: BLE001 - any import failure means "not available"
    _varlen_attn = None


_causal_kw = {"is_causal": True}
_varlen_note = "" if _varlen_attn is not None else "torch has no torch.nn.attention.varlen"


def attention_kind() -> str:
    if _varlen_attn is not None:
        return f"torch varlen_attn ({', '.join(f'{k}={v}' for k, v in _causal_kw.items())})"
    return f"scaled_dot_product_attention per sequence ({_varlen_note})"


def probe_varlen(device) -> None:
    """Keeps torch's varlen kernel only if it runs here and agrees with
    per-sequence SDPA on a small bf16 case (its signature changed between
    torch releases)."""
    global _varlen_attn, _varlen_note
    if _varlen_attn is None:
        return
    g = torch.Generator(device=device).manual_seed(5)
    cu = [0, 37, 37 + 64, 37 + 64 + 5]
    q, k, v = (torch.randn(cu[-1], 4, 64, generator=g, device=device, dtype=torch.bfloat16) for _ in range(3))
    global _causal_kw
    try:
        try:
            got = varlen_attend(cu, device)(q, k, v).float()
        except TypeError:  # later releases express causality as a window
            _causal_kw = {"window_size": (-1, 0)}
            got = varlen_attend(cu, device)(q, k, v).float()
        want = _sdpa_segments(q, k, v, cu).float()
        err = float((got - want).norm() / want.norm())
        if not err < 2e-2:
            raise ValueError(f"differs from SDPA by {err:.2e}")
    except Exception as e:  # noqa: BLE001 - any failure: use the SDPA path
        _varlen_attn = None
        _varlen_note = f"torch's varlen_attn failed its check: {type(e).__name__}: {str(e)[:160]}"


def _sdpa_segments(q, k, v, cu: list):
    if not hasattr(F, "scaled_dot_product_attention"):  # torch < 2.0 (the CPU-only check)
        from tiny_model import varlen_attention

        return varlen_attention(q, k, v, cu)
    parts = []
    for a, b in zip(cu[:-1], cu[1:]):
        if b == a:
            continue
        qs, ks, vs = (x[a:b].transpose(0, 1)[None] for x in (q, k, v))  # [1, H, L, D]
        parts.append(F.scaled_dot_product_attention(qs, ks, vs, is_causal=True)[0].transpose(0, 1))
    return torch.cat(parts, dim=0)


def varlen_attend(cu: list, device, force_sdpa: bool = False):
    """attend(q, k, v) over the packed stream's segments cu (host ints)."""
    if _varlen_attn is not None and not force_sdpa:
        cu_t = torch.tensor(cu, dtype=torch.int32, device=device)
        longest = max(b - a for a, b in zip(cu[:-1], cu[1:]))
        return lambda q, k, v: _varlen_attn(q, k, v, cu_t, cu_t, longest, longest, **_causal_kw)
    return lambda q, k, v: _sdpa_segments(q, k, v, cu)


def padded_sdpa_attend(mask: torch.Tensor):
    """attend() of padded rows [B, S] flattened to B*S tokens: causal plus
    the key-padding mask (a padded query attends to position 0 and is
    ignored by the loss)."""
    b, s = mask.shape
    keep = torch.ones(s, s, dtype=torch.bool, device=mask.device).tril_()[None] & mask.bool()[:, None, :]
    keep[:, :, 0] = True

    if not hasattr(F, "scaled_dot_product_attention"):  # torch < 2.0 (the CPU-only check)
        from tiny_model import padded_attention

        return padded_attention(mask)

    def attend(q, k, v):
        h, d = q.shape[1], q.shape[2]
        qb, kb, vb = (x.reshape(b, s, h, d).transpose(1, 2) for x in (q, k, v))
        o = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=keep[:, None])
        return o.transpose(1, 2).reshape(b * s, h, d)

    return attend


class CudaTimer:
    """Times micro-batches on the current CUDA device. ``run`` returns
    seconds from CUDA events (packd.timing.Recorder)."""

    stable = True  # event times need no CPU-speed normalisation

    def __init__(self, cfg, seed: int, device: str = "cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        self.device = torch.device(device)
        if self.device.type == "cuda":
            probe_varlen(self.device)
        self.model = TinyDecoder(cfg).to(self.device)
        self.vocab = cfg.vocab
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.recorder = Recorder(device=self.device)
        self.layout_device = self.device if self.device.type == "cuda" else None  # None: packd.gpu's host backend

    def inputs(self, key):
        """Padded rows [B, S] (right-padded with junk beyond each row's
        length) and the packd.gpu layout of the micro-batch."""
        lengths = list(key)
        b, s = len(lengths), max(lengths)
        cu = [0]
        for L in lengths:
            cu.append(cu[-1] + L)
        ids = torch.randint(0, self.vocab, (b, s), generator=self.gen, device=self.device)
        length = torch.tensor(lengths, dtype=torch.int32, device=self.device)
        layout = packd.gpu.Layout(list(range(b)), cu, b, s, device=self.layout_device)
        return ids, length, layout, cu

    def step(self, inp, attend=None):
        ids_rows, length, layout, cu = inp
        ids = layout.pack(ids_rows, None, length)
        tgt = layout.labels(ids_rows, None, length, ignore_index=IGNORE)
        pos = layout.position_ids(length, style="restart")
        logits = self.model(ids, pos, attend or varlen_attend(cu, self.device))
        loss = F.cross_entropy(logits.float(), tgt, ignore_index=IGNORE, reduction="sum")
        loss.backward()
        return loss

    def run(self, inp) -> float:
        self.model.zero_grad(set_to_none=True)
        with self.recorder.micro_batch(list(inp[3][1:])):  # any lengths: only the time is read
            self.step(inp)
        seconds = float(self.recorder.records[-1]["seconds"])
        self.recorder.clear()
        return seconds


def check_packed_equals_padded(cfg, device: str = "cuda", seed: int = 3) -> dict:
    """The packed micro-batch (packd.gpu pack + varlen attention) against
    the padded rows (SDPA with a padding mask) in fp32 with TF32 off: the
    relative error of the loss and the largest relative error of a
    gradient (both should be at fp32 rounding, far under 1e-4)."""
    from dataclasses import replace

    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        t = CudaTimer(replace(cfg, dtype="float32"), seed, device)
        torch.backends.cuda.matmul.allow_tf32 = False
        g = torch.Generator().manual_seed(seed)
        lengths = [int(x) for x in torch.randint(1, 200, (7,), generator=g)]
        inp = t.inputs(tuple(lengths))
        ids_rows, length, layout, cu = inp
        results = {}
        out = {}
        for name in ("varlen", "sdpa") if _varlen_attn is not None else ("sdpa",):
            t.model.zero_grad(set_to_none=True)
            try:
                loss = t.step(inp, varlen_attend(cu, t.device, force_sdpa=(name == "sdpa")))
            except Exception as e:  # noqa: BLE001 - flash kernels may refuse fp32
                out[f"{name} (fp32)"] = f"not run: {type(e).__name__}: {str(e)[:120]}"
                continue
            results[name] = (loss.detach().double(), {n: p.grad.detach().double().clone()
                                                      for n, p in t.model.named_parameters()})
        # The padded baseline: every row at its own columns, padding masked.
        b, s = ids_rows.shape
        mask = torch.arange(s, device=t.device)[None, :] < length.long()[:, None]
        tgt = torch.full_like(ids_rows, IGNORE)
        tgt[:, :-1] = ids_rows[:, 1:]
        tgt[~torch.roll(mask, -1, dims=1)] = IGNORE
        tgt[:, -1] = IGNORE
        t.model.zero_grad(set_to_none=True)
        pos = torch.arange(s, device=t.device).repeat(b)
        logits = t.model(ids_rows.reshape(-1), pos, padded_sdpa_attend(mask))
        ref = F.cross_entropy(logits.float(), tgt.reshape(-1), ignore_index=IGNORE, reduction="sum")
        ref.backward()
        ref = ref.detach()
        ref_grads = {n: p.grad.detach().double() for n, p in t.model.named_parameters()}
        for name, (loss, grads) in results.items():
            out[f"{name} loss rel err"] = float(abs(loss - ref.double()) / abs(ref.double()))
            out[f"{name} max grad rel err"] = max(
                float((grads[n] - ref_grads[n]).norm() / max(ref_grads[n].norm(), 1e-30)) for n in ref_grads)
        out["lengths"] = lengths
        return out
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


def device_name(device: str = "cuda") -> str:
    if not device.startswith("cuda"):
        return f"CPU, torch {torch.__version__}"
    p = torch.cuda.get_device_properties(torch.device(device))
    return f"{p.name} ({p.multi_processor_count} SMs, {p.total_memory / 2**30:.0f} GiB), torch {torch.__version__}"


__all__ = ["CudaTimer", "attention_kind", "check_packed_equals_padded", "device_name"]
