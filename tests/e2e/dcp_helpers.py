"""One dynamic-CP training step over torch.distributed (gloo), for the
packed == padded suite.

The plan has Megatron-Core's format: per slot (packed micro-batch), per
rank, the sample ids that rank runs; ranks with equal lists form a group of
c GPUs that runs those samples as one packed stream with CP size c. Every
process:

1. starts with a DP share of the padded batch (rank k holds samples k, k+W,
   ...) and routes every sample to every GPU of its group with
   ``packd.gpu.route_items`` + ``packd.gpu.exchange`` over gloo;
2. per slot packs its shard of the group's stream (``packd.gpu.Layout`` with
   cp = c, slots aligned by ``packd.gpu.dcp_cu``), checks the padding mask
   against verl's semantics, runs the tiny model with attention written by
   hand (c = 1: causal per segment; c > 1: K and V all-gathered inside the
   group, put at their stream positions, fp64), adds ``-sum(log p) / all
   loss tokens`` and backpropagates;
3. gathers the group's output shards and unpacks them into its samples'
   rows; the group leaders then send their samples' outputs to rank 0,
   which holds them in sample order (``xitems_from_assignments`` +
   ``exchange``);
4. all-reduces gradients and loss over all ranks.
"""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.distributed as dist

import e2e_helpers
from e2e_helpers import IGNORE, _AllGather, grads, token_logp
from packd import gpu
from tiny_model import Config, TinyDecoder, masked_attention, segment_ids, varlen_attention


def group_attend(cu_pad, c: int, idx: int, group, layout: str):
    """attend() of GPU idx of a group of c: the group's K and V are gathered
    in rank order and placed at their stream positions (cp_index_map of
    each member); a query at stream position g of segment s sees the keys of
    s at positions <= g."""
    cu = np.asarray(cu_pad, dtype=np.int64)
    maps = [torch.from_numpy(gpu.cp_index_map(cu, cp=c, cp_rank=r, cp_algo=layout)) for r in range(c)]
    gidx = torch.cat(maps)
    seg = segment_ids(cu, int(cu[-1]))
    qi = maps[idx]
    allowed = (seg[qi][:, None] == seg[gidx][None, :]) & (gidx[None, :] <= qi[:, None])

    def attend(q, k, v):
        return masked_attention(q, _AllGather.apply(k, group), _AllGather.apply(v, group), allowed)

    return attend


def _groups(slots, world: int):
    """Every distinct group of more than one GPU, in first-seen order (all
    ranks create the process groups in the same order)."""
    seen = []
    for slot in slots:
        for k in range(world):
            members, _ = gpu.dcp_group(slot, k)
            if len(members) > 1 and tuple(members) not in seen:
                seen.append(tuple(members))
    return seen


def dcp_step(rank: int, world: int, job: dict) -> dict:
    slots, layout, tp = job["slots"], job["layout"], job["tp"]
    ids_all, mask_all, resp_all = (np.asarray(job[k], dtype=np.int64) for k in ("ids", "mask", "resp"))
    n, s = ids_all.shape
    n_loss_all = int(np.asarray(job["loss_tokens"]).sum())
    pgroups = {m: dist.new_group(list(m)) for m in _groups(slots, world)}
    model = TinyDecoder(Config(**job["cfg"]))
    vocab = model.cfg.vocab

    # 1. Route: DP shares -> every GPU of each sample's group.
    src = [list(range(k, n, world)) for k in range(world)]
    dst = [[int(i) for slot in slots for i in slot[k]] for k in range(world)]
    mine = np.asarray(src[rank], dtype=np.int64)
    share = torch.from_numpy(np.concatenate([ids_all[mine], mask_all[mine], resp_all[mine]], axis=1))
    local = torch.zeros((len(dst[rank]), 3 * s), dtype=torch.int64)
    tr = gpu.TorchTransport()
    gpu.exchange(gpu.route_items(np.ones(n, dtype=np.int64), src, dst), share, local, tr)
    ids, mask, resp = local[:, :s].contiguous(), local[:, s : 2 * s].contiguous(), local[:, 2 * s :].contiguous()
    want = torch.from_numpy(np.concatenate([ids_all, mask_all, resp_all], axis=1))[dst[rank]]
    assert torch.equal(local, want), "routing gave this GPU exactly its groups' samples"

    b = len(dst[rank])
    start, length = gpu.spans(mask)
    lab_src = torch.where(resp.bool(), ids, torch.full_like(ids, IGNORE))
    out = torch.zeros(b, s, vocab + 1, dtype=torch.float64)  # logits, then log p
    total = 0.0
    at = 0
    leader_rows = []
    sizes = []
    for slot in slots:
        members, idx = gpu.dcp_group(slot, rank)
        c = len(members)
        sizes.append(c)
        sample_ids = [int(i) for i in slot[rank]]
        rows = np.arange(at, at + len(sample_ids), dtype=np.int64)
        at += len(sample_ids)
        if idx == 0:
            leader_rows += list(rows)
        lens = [int(length[r]) for r in rows]
        _, cu_pad = gpu.dcp_cu(lens, c, tp=tp, cp_layout=layout)
        group = pgroups.get(tuple(members))
        with gpu.Layout(rows, cu_pad, b, s, cp=c, cp_algo=layout) as lay:
            x, lab, pos = lay.pack_many(
                [("copy", ids, 0), ("labels", lab_src, IGNORE), ("positions", "offset", length, np.int64)],
                start, length, cp_rank=idx)
            pad = lay.padding_mask(length, cp_rank=idx)
            assert torch.equal(pad, gpu.dcp_padding_mask(lens, c, idx, tp=tp, cp_layout=layout))
            if c == 1:
                attend = lambda q, k, v, cu=cu_pad: varlen_attention(q, k, v, cu)  # noqa: E731
            else:
                attend = group_attend(cu_pad, c, idx, group, layout)
            logits = model(x, pos, attend)
            lp = token_logp(logits, lab)
            assert torch.all(lp[pad] == 0), "padding rows carry no loss"
            loss = -lp.sum() / n_loss_all
            loss.backward()
            total += float(loss)
            y = torch.cat([logits.detach(), lp.detach()[:, None]], dim=1).contiguous()
            if c > 1:
                parts = [torch.empty_like(y) for _ in range(c)]
                dist.all_gather(parts, y, group=group)
                y = torch.cat(parts)
            lay.unpack(y, start, length, out)

    # 3. Restore: each group's leader sends its samples' outputs to rank 0.
    leaders = [None] * world
    dist.all_gather_object(leaders, [dst[rank][r] for r in leader_rows])
    items = gpu.xitems_from_assignments(np.ones(n, dtype=np.int64), leaders, [list(range(n))] + [[]] * (world - 1))
    send = out[np.asarray(leader_rows, dtype=np.int64)].reshape(len(leader_rows), s * (vocab + 1)).contiguous()
    back = torch.zeros((n if rank == 0 else 0, s * (vocab + 1)), dtype=torch.float64)
    gpu.exchange(items, send, back, tr)
    back = back.reshape(-1, s, vocab + 1)

    for p in model.parameters():
        dist.all_reduce(p.grad)
    loss_t = torch.tensor([total], dtype=torch.float64)
    dist.all_reduce(loss_t)
    return {"loss": float(loss_t), "grads": grads(model), "logits": back[..., :vocab], "logp": back[..., vocab],
            "sizes": sizes}


def worker(rank: int, world: int, init_file: str, out_dir: str, job: dict):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    try:
        res = dcp_step(rank, world, job)
        torch.save(res, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def spawn(world: int, job: dict, tmp_path) -> list:
    """``e2e_helpers.spawn`` with this module's worker."""
    return e2e_helpers.spawn(world, job, tmp_path, target=worker)
