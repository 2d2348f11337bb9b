"""Shared pieces of the packed == padded suite: a verl-style rollout batch,
the padded baseline step, one rank's packd step (plan -> packd.gpu pack ->
forward -> scaled loss -> backward -> unpack), the context-parallel
attention variants over torch.distributed (gloo), and the spawned worker.

The padded baseline is how verl trains: rows are a left-padded prompt and a
right-padded response, ``attention_mask`` marks the valid run of each row,
position ids come from the mask (``cumsum - 1``), labels are the next token
where that token is a response token, and the loss is the token mean over
all response tokens of the mini-batch.

The packd path is what a trainer on packd does: the controller plans once
(``packd.Client.local()``), dispatches each rank its rows (``plan.split``),
and every rank packs ids, next-token labels and positions of each
micro-batch with ``packd.gpu`` (host backend on CPU tensors), runs the model
on the packed stream, and adds ``token-sum loss / micro-batch loss tokens *
loss_scale``. ``loss_scale`` is the micro-batch's loss tokens over all loss
tokens of its mini-batch on all ranks, so these terms summed over
micro-batches and ranks are the mini-batch's token mean, and the summed
(all-reduced) gradients are the baseline's.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for p in (str(REPO / "client" / "python"), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

import packd  # noqa: E402
from packd import gpu  # noqa: E402

from tiny_model import (  # noqa: E402
    Config,
    TinyDecoder,
    masked_attention,
    padded_attention,
    segment_ids,
    varlen_attention,
)

IGNORE = gpu.IGNORE_INDEX


# ---- The rollout batch ---------------------------------------------------


@dataclass
class Batch:
    """verl's padded rollout batch (numpy, int64): ``ids``, ``mask``
    (attention_mask), ``resp`` (1 on response columns) of shape [n, S] with
    S = max_prompt + max_response; ``lengths`` = prompt + response and
    ``loss_tokens`` = the response tokens that are predicted (all of them
    when the prompt is not empty)."""

    ids: np.ndarray
    mask: np.ndarray
    resp: np.ndarray
    lengths: np.ndarray
    loss_tokens: np.ndarray

    def rows(self, idx):
        idx = np.asarray(idx, dtype=np.int64)
        return Batch(self.ids[idx], self.mask[idx], self.resp[idx], self.lengths[idx], self.loss_tokens[idx])

    def __len__(self):
        return int(self.ids.shape[0])


def make_batch(prompts, responses, vocab: int, seed: int = 0) -> Batch:
    """Prompt columns [0, P) hold the prompt left padded, response columns
    [P, P + R) the response right padded. A row with an empty prompt must
    have an empty response (nothing would predict its first token)."""
    p = np.asarray(prompts, dtype=np.int64)
    r = np.asarray(responses, dtype=np.int64)
    if np.any((p == 0) & (r > 0)):
        raise ValueError("a response needs a prompt token before it")
    rng = np.random.default_rng(seed)
    mp_, mr = int(p.max(initial=0)), int(r.max(initial=0))
    n, s = p.size, max(mp_ + mr, 1)
    ids = np.zeros((n, s), dtype=np.int64)
    mask = np.zeros((n, s), dtype=np.int64)
    resp = np.zeros((n, s), dtype=np.int64)
    for i in range(n):
        a, b = mp_ - p[i], mp_ + r[i]
        mask[i, a:b] = 1
        ids[i, a:b] = rng.integers(1, vocab, size=b - a)
        resp[i, mp_ : mp_ + r[i]] = 1
    return Batch(ids, mask, resp, p + r, r.copy())


def random_batch(n: int, max_prompt: int, max_response: int, vocab: int, seed: int = 0) -> Batch:
    rng = np.random.default_rng(seed)
    p = rng.integers(1, max_prompt + 1, size=n)
    r = rng.integers(1, max_response + 1, size=n)
    return make_batch(p, r, vocab, seed + 1)


# ---- The padded baseline ----------------------------------------------------


def padded_labels(ids: torch.Tensor, resp: torch.Tensor) -> torch.Tensor:
    """Next-token labels of a padded batch: column c predicts column c+1
    when that column is a response token, else IGNORE."""
    src = torch.where(resp.bool(), ids, torch.full_like(ids, IGNORE))
    lab = torch.full_like(ids, IGNORE)
    lab[:, :-1] = src[:, 1:]
    return lab


def token_logp(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log p(label) per token, 0 where the label is IGNORE."""
    lp = F.log_softmax(logits, dim=-1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return torch.where(labels != IGNORE, lp, torch.zeros_like(lp))


def padded_forward(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's forward of a padded batch: position ids from the mask."""
    b, s = ids.shape
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return model(ids.reshape(-1), pos.reshape(-1), padded_attention(mask)).view(b, s, -1)


def baseline_step(model, batch: Batch):
    """Token-mean loss over the response tokens of ``batch`` (one
    mini-batch), backward. Returns (loss, logits [n, S, V], logp [n, S]),
    both 0 outside the valid tokens."""
    ids, mask, resp = (torch.from_numpy(x) for x in (batch.ids, batch.mask, batch.resp))
    logits = padded_forward(model, ids, mask)
    lab = padded_labels(ids, resp)
    lp = token_logp(logits, lab)
    n_loss = int((lab != IGNORE).sum())
    assert n_loss == int(batch.loss_tokens.sum())
    loss = -lp.sum() / n_loss
    loss.backward()
    valid = mask.bool()
    return float(loss), logits.detach() * valid[..., None], lp.detach() * valid


def grads(model) -> dict:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def params(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


# ---- Context-parallel attention over torch.distributed ----------------------


class _AllGather(torch.autograd.Function):
    """all_gather along dim 0 with a gradient: backward sums the gathered
    gradient over the group and keeps this rank's rows (a reduce-scatter;
    gloo has none, so it is an all-reduce followed by the slice)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        ctx.rank = dist.get_rank(group)
        ctx.n = x.shape[0]
        x = x.contiguous()  # empty_like keeps strides: the buffers must be dense
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x, group=group)
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous().clone()
        dist.all_reduce(g, group=ctx.group)
        return g[ctx.rank * ctx.n : (ctx.rank + 1) * ctx.n], None


class _AllToAll(torch.autograd.Function):
    """all_to_all_single on dim 0 (equal chunks). Chunk j goes to rank j and
    chunk i of the output came from rank i: the exchange is its own inverse,
    so the backward is the same exchange of the gradient. torch 1.13's gloo
    implements all_to_all_single (alltoall_base) but not the list form
    all_to_all, hence the single-tensor form."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        x = x.contiguous()  # empty_like keeps strides: the buffers must be dense
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x, group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        # The incoming gradient is often a strided view (from the permute
        # after the exchange); a dense copy and a dense output buffer keep
        # the chunks where all_to_all_single expects them.
        g = g.contiguous()
        out = torch.empty_like(g)
        dist.all_to_all_single(out, g, group=ctx.group)
        return out, None


def zigzag_attend(cu_pad, cp: int, cp_rank: int, group):
    """attend() of one zigzag CP rank: K and V of all ranks are gathered
    (rank order) and put at their global stream positions with
    packd.gpu.cp_index_map; a local query at global position g of segment s
    sees the keys of s at global positions <= g. Slot padding sits after a
    sequence's real tokens, so real tokens never see it."""
    cu = np.asarray(cu_pad, dtype=np.int64)
    total = int(cu[-1])
    idx = [torch.from_numpy(gpu.cp_index_map(cu, cp=cp, cp_rank=c, cp_algo="zigzag")) for c in range(cp)]
    gidx = torch.cat(idx)
    seg = segment_ids(cu, total)
    qi = idx[cp_rank]
    allowed = (seg[qi][:, None] == seg[gidx][None, :]) & (gidx[None, :] <= qi[:, None])

    def attend(q, k, v):
        return masked_attention(q, _AllGather.apply(k, group), _AllGather.apply(v, group), allowed)

    return attend


def ulysses_attend(cu_pad, cp: int, group):
    """attend() of one Ulysses CP rank: the rank holds a contiguous shard of
    T/cp tokens with all heads; an all-to-all turns that into all T tokens
    with heads/cp heads, varlen attention runs on the whole stream, and the
    inverse all-to-all returns the shard."""
    cu = [int(c) for c in cu_pad]

    def to_heads(x):  # [T/cp, H, D] -> [T, H/cp, D]
        t, h, d = x.shape
        y = x.reshape(t, cp, h // cp, d).permute(1, 0, 2, 3).contiguous()
        return _AllToAll.apply(y, group).reshape(cp * t, h // cp, d)

    def to_shard(o, h):  # [T, H/cp, D] -> [T/cp, H, D]
        tt, hh, d = o.shape
        y = _AllToAll.apply(o.reshape(cp, tt // cp, hh, d).contiguous(), group)
        return y.permute(1, 0, 2, 3).reshape(tt // cp, h, d)

    def attend(q, k, v):
        h = q.shape[1]
        o = varlen_attention(to_heads(q), to_heads(k), to_heads(v), cu)
        return to_shard(o, h)

    return attend


def _gather_rows(x: torch.Tensor, group) -> torch.Tensor:
    x = x.contiguous()
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x, group=group)
    return torch.cat(parts, dim=0)


# ---- One rank's packd step --------------------------------------------------


def packd_rank_step(model, plan, rank: int, chunk: Batch, loss_tokens, *, cp: int = 1, cp_rank: int = 0,
                    cp_algo: str = "zigzag", group=None, padded: bool = False, after_mini=None):
    """Runs rank ``rank``'s micro-batches of ``plan`` on its rows ``chunk``
    (plan.split order) with gradient accumulation in ``model``.

    ``loss_tokens`` is the request's array (global sequence index).
    ``cp > 1``: this process is CP rank ``cp_rank`` of ``group`` and packs
    only its part. ``padded``: the plan is a PADDED plan and each
    micro-batch runs as a right-padded [rows, width] batch.
    ``after_mini(mini)`` is called after each mini-batch (optimizer step).

    Returns dict(loss = this process's summed scaled loss, logits [B, S, V]
    and logp [B, S] unpacked (every CP rank's part, gathered), micro =
    [(n_loss, loss_scale, nseqs, tokens)] per micro-batch)."""
    ids, mask, resp = (torch.from_numpy(np.ascontiguousarray(x)) for x in (chunk.ids, chunk.mask, chunk.resp))
    b, s = ids.shape
    start, length = gpu.spans(mask)
    lab_src = torch.where(resp.bool(), ids, torch.full_like(ids, IGNORE))
    vocab = model.cfg.vocab
    dtype = next(model.parameters()).dtype
    out_logits = torch.zeros(b, s, vocab, dtype=dtype)
    out_logp = torch.zeros(b, s, dtype=dtype)
    lt = np.asarray(loss_tokens, dtype=np.int64)
    total = 0.0
    micro = []
    row = 0
    for mini in plan[rank].mini_batches:
        for mb in mini.micro_batches:
            rows = np.arange(row, row + len(mb), dtype=np.int64)
            row += len(mb)
            n_loss = int(lt[mb.seqs].sum())
            micro.append((n_loss, mb.loss_scale, len(mb), mb.tokens))
            with gpu.Layout(rows, mb.cu_seqlens_padded, b, s, cp=cp, cp_algo=cp_algo) as lay:
                if lay.local_tokens == 0:
                    continue  # an empty micro-batch (or an all-empty local part): nothing to run
                x, lab, pos, valid = lay.pack_many(
                    [("copy", ids, 0), ("labels", lab_src, IGNORE), ("positions", "offset", length, np.int64),
                     ("valid", length, torch.bool)],
                    start, length, cp_rank=cp_rank)
                if padded:
                    w = mb.padded_width
                    assert lay.local_tokens == len(mb) * w, "PADDED slots are the micro-batch width"
                    attend = padded_attention(valid.view(len(mb), w))
                elif cp == 1:
                    attend = lambda q, k, v, cu=mb.cu_seqlens_padded: varlen_attention(q, k, v, cu)  # noqa: E731
                elif cp_algo == "zigzag":
                    attend = zigzag_attend(mb.cu_seqlens_padded, cp, cp_rank, group)
                else:
                    attend = ulysses_attend(mb.cu_seqlens_padded, cp, group)
                logits = model(x, pos, attend)
                lp = token_logp(logits, lab)
                if n_loss:
                    loss = (-lp.sum() / n_loss) * mb.loss_scale
                    loss.backward()
                    total += float(loss)
                y, ylp = logits.detach(), lp.detach()
                if cp > 1:
                    y, ylp = _gather_rows(y, group), _gather_rows(ylp, group)
                lay.unpack(y, start, length, out_logits)
                lay.unpack(ylp, start, length, out_logp)
        if after_mini is not None:
            after_mini(mini.mini)
    return {"loss": total, "logits": out_logits, "logp": out_logp, "micro": micro}


# ---- Comparison -------------------------------------------------------------


def assert_close(got, want, rel: float = 1e-9, what: str = ""):
    """max |got - want| <= rel * max |want| (a norm-relative check: every
    entry is within rel of the tensor's scale)."""
    got, want = torch.as_tensor(got), torch.as_tensor(want)
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    err = float((got - want).abs().max()) if want.numel() else 0.0
    scale = float(want.abs().max()) if want.numel() else 0.0
    assert err <= rel * max(scale, 1e-300), f"{what}: max error {err:.3e} vs scale {scale:.3e} (rel {rel})"


def assert_grads_close(got: dict, want: dict, rel: float = 1e-9):
    assert got.keys() == want.keys()
    for name in want:
        assert_close(got[name], want[name], rel, f"grad {name}")


def check_loss_scales(plan, loss_tokens):
    """loss_scale = micro-batch loss tokens / all loss tokens of its
    mini-batch over all ranks (0 for a mini-batch without loss tokens), so
    the scales of a mini-batch sum to 1."""
    lt = np.asarray(loss_tokens, dtype=np.int64)
    per_mini: dict = {}
    for mb in plan.micro_batches:
        per_mini.setdefault(mb.mini, []).append(mb)
    for mini, mbs in per_mini.items():
        denom = sum(int(lt[m.seqs].sum()) for m in mbs)
        for m in mbs:
            want = int(lt[m.seqs].sum()) / denom if denom else 0.0
            assert abs(m.loss_scale - want) <= 1e-12, (mini, m, want)
        if denom:
            assert abs(sum(m.loss_scale for m in mbs) - 1.0) <= 1e-12


def mini_rows(plan) -> dict:
    """Sequence indices of each mini-batch, over all ranks."""
    out: dict = {}
    for mb in plan.micro_batches:
        out.setdefault(mb.mini, []).extend(int(i) for i in mb.seqs)
    return {k: np.array(sorted(v), dtype=np.int64) for k, v in out.items()}


def restore(plan, per_rank):
    """Per-rank outputs (rows in plan.split order) back to input order."""
    return plan.restore([torch.as_tensor(x) for x in per_rank])


# ---- Processes ------------------------------------------------------------


def worker(rank: int, world: int, init_file: str, out_dir: str, job: dict):
    """One gloo process: DP rank ``rank // cp``, CP rank ``rank % cp``. Runs
    its packd step, all-reduces gradients and loss over every process (the
    data-parallel sum, and the sum of the CP ranks' partial losses), and
    writes what the test compares to out_dir/rank{rank}.pt."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    try:
        cp, algo = int(job.get("cp", 1)), job.get("cp_algo", "zigzag")
        dp_rank, cp_rank = divmod(rank, cp)
        groups = [dist.new_group(list(range(d * cp, (d + 1) * cp))) for d in range(world // cp)]
        group = groups[dp_rank]
        model = TinyDecoder(Config(**job["cfg"]))
        plan = packd.Plan.from_bytes(job["plan"], job["lengths"])
        res = packd_rank_step(model, plan, dp_rank, job["chunks"][dp_rank], job["loss_tokens"], cp=cp,
                              cp_rank=cp_rank, cp_algo=algo, group=group)
        for p in model.parameters():
            dist.all_reduce(p.grad)
        loss = torch.tensor([res["loss"]], dtype=torch.float64)
        dist.all_reduce(loss)
        torch.save({"loss": float(loss), "grads": grads(model), "logits": res["logits"], "logp": res["logp"],
                    "dp_rank": dp_rank, "cp_rank": cp_rank, "micro": res["micro"]},
                   os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def spawn(world: int, job: dict, tmp_path, target=None) -> list:
    """Runs ``target`` (default ``worker``; a module-level function with
    its signature that saves out_dir/rank{rank}.pt) in ``world`` spawned
    processes (file:// rendezvous in tmp_path) and returns their saved
    results by process rank."""
    import torch.multiprocessing as mp

    tmp_path = Path(tmp_path)
    init = tmp_path / "rendezvous"
    if init.exists():
        init.unlink()
    mp.spawn(target or worker, args=(world, str(init), str(tmp_path), job), nprocs=world, join=True)
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]
