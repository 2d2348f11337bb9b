"""Drop-in replacements for verl's batch balancing and dynamic batching.

verl (research/algorithms.md section 1) calls, on the single controller,
``RayPPOTrainer._balance_batch`` (Karmarkar-Karp with equal counts on
``24576*L + L**2``) and, on every worker, ``rearrange_micro_batches``
(count = ceil(sum / max_token_len), then KK on the workload, with no check
that a micro-batch stays under the cap). The functions here take the same
inputs and return the same outputs, planned by packd:

- ``balance_batch(batch_or_attention_mask, world_size)`` returns the global
  reorder index (and reorders a DataProto in place like verl does). Rank r
  gets the r-th chunk of n/world_size sequences, heavy sequences in the
  middle of each chunk as verl lays them out.
- ``rearrange_micro_batches(batch, max_token_len, ...)`` returns
  ``(micro_batches, micro_bsz_idx)``; every micro-batch holds at most
  ``max_token_len`` tokens (a hard cap: a sequence that cannot fit alone
  raises packd.FailedPrecondition naming it).
- ``get_reverse_idx`` and ``restore_dynamic_batch`` put outputs back in
  input order.

Differences from verl are listed in docs/python.md ("verl").
"""

from __future__ import annotations

import numpy as np

from ._adapt import default_client, heavy_middle, lengths_of, take, workload

__all__ = ["balance_batch", "rearrange_micro_batches", "get_reverse_idx", "restore_dynamic_batch", "balance_metrics"]


def balance_metrics(lengths, partitions, prefix: str = "global_seqlen") -> dict:
    """The token figures verl logs for a balanced batch (min, max, diff of
    per-rank token sums, and their mean), computed on ``partitions``."""
    lengths = np.asarray(lengths)
    sums = np.array([lengths[np.asarray(p, dtype=np.int64)].sum() for p in partitions], dtype=np.int64)
    return {
        f"{prefix}/min": int(sums.min()),
        f"{prefix}/max": int(sums.max()),
        f"{prefix}/minmax_diff": int(sums.max() - sums.min()),
        f"{prefix}/balanced_min": int(sums.min()),
        f"{prefix}/balanced_max": int(sums.max()),
        f"{prefix}/mean": float(sums.mean()),
    }


def balance_batch(
    batch_or_attention_mask,
    world_size: int,
    *,
    metrics: dict | None = None,
    logging_prefix: str = "global_seqlen",
    equal_size: bool = True,
    keep_minibatch: bool = False,
    mini_batch_size: int | None = None,
    client=None,
    dp_balance: str = "auto",
    intra_order: str = "heavy_middle",
    **plan_kwargs,
) -> np.ndarray:
    """Reorders a batch so that DP ranks get balanced work (verl
    ``_balance_batch``).

    batch_or_attention_mask: a verl DataProto (``batch["attention_mask"]``;
    reordered in place with ``reorder`` like verl does), a TensorDict/dict
    with ``attention_mask``, an attention mask [B, S] or lengths [B].
    world_size: the actor's DP size. keep_minibatch: balance every
    ``mini_batch_size`` slice on its own (rank r's chunk then holds its part
    of every mini-batch, in mini-batch order). intra_order: "heavy_middle"
    (verl's order inside a rank) or "plan" (packd's run order).

    Returns the reorder index (int64 [B]): position p of the reordered batch
    is sequence ``idx[p]`` of the input. If ``metrics`` is a dict, verl's
    token figures are added to it."""
    lengths = lengths_of(batch_or_attention_mask)
    n = lengths.size
    mini = 1
    if keep_minibatch:
        if not mini_batch_size or n % int(mini_batch_size):
            raise ValueError(f"mini_batch_size: must divide the batch size {n} with keep_minibatch, got {mini_batch_size}")
        mini = n // int(mini_batch_size)
    client = client or default_client()
    plan = client.plan(lengths, dp=world_size, equal_count=equal_size, dp_balance=dp_balance,
                       mini_batches=mini, **plan_kwargs)
    w = workload(lengths)
    parts = []
    for rank in plan:
        if intra_order == "plan":
            parts.append(np.asarray(rank.seqs))
        elif intra_order == "heavy_middle":
            parts.append(np.concatenate([heavy_middle(np.asarray(m.seqs), w) for m in rank.mini_batches])
                         if rank.mini_batches else np.zeros(0, np.int64))
        else:
            raise ValueError(f"intra_order: expected 'heavy_middle' or 'plan', got {intra_order!r}")
    idx = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
    if metrics is not None:
        metrics.update(balance_metrics(lengths, parts, logging_prefix))
    if hasattr(batch_or_attention_mask, "reorder"):
        try:
            import torch

            batch_or_attention_mask.reorder(torch.from_numpy(idx))
        except ImportError:
            batch_or_attention_mask.reorder(idx)
    return idx


def _dp_max(count: int, dp_group) -> int:
    """verl's all-reduce MAX of the micro-batch count over the DP group,
    when torch.distributed is initialised; else the count itself."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return count
    if not dist.is_available() or not dist.is_initialized():
        return count
    t = torch.tensor([count], dtype=torch.int64)
    if dist.get_backend(dp_group) == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=dp_group)
    return int(t.item())


def rearrange_micro_batches(
    batch,
    max_token_len: int,
    dp_group=None,
    num_batches_divided_by: int | None = None,
    same_micro_num_in_dp: bool = True,
    min_num_micro_batch: int | None = None,
    use_dynamic_bsz_balance: bool = True,
    *,
    client=None,
    micro_algo: str = "auto",
    **plan_kwargs,
):
    """Splits one rank's batch into micro-batches of at most
    ``max_token_len`` tokens (verl ``rearrange_micro_batches``, same
    arguments and outputs).

    batch: a TensorDict/dict with ``attention_mask`` (micro-batches are
    ``batch[idx]``), an attention mask [B, S] or lengths [B] (micro-batches
    are the rows / lengths). Returns ``(micro_batches, micro_bsz_idx)``
    where ``micro_bsz_idx`` is a list of index lists. The count is at least
    ``min_num_micro_batch``, a multiple of ``num_batches_divided_by`` and,
    with ``same_micro_num_in_dp`` under torch.distributed, the largest over
    ``dp_group`` (re-planned, so the cap still holds). With
    ``use_dynamic_bsz_balance`` heavy micro-batches sit in the middle
    (verl's order), else packd's order (heaviest first)."""
    lengths = lengths_of(batch)
    client = client or default_client()
    order = "heavy_middle" if use_dynamic_bsz_balance else "cost_desc"
    kw = dict(dp=1, max_tokens=int(max_token_len), micro_algo=micro_algo, order=order,
              min_micro_batches=int(min_num_micro_batch or 0),
              microbatch_group=int(num_batches_divided_by or 0), **plan_kwargs)
    plan = client.plan(lengths, **kw)
    count = len(plan[0])
    if same_micro_num_in_dp:
        target = _dp_max(count, dp_group)
        if target > count:
            kw["min_micro_batches"] = target
            plan = client.plan(lengths, **kw)
    micro_bsz_idx = [m.seqs.tolist() for m in plan[0].micro_batches]
    micro_batches = [take(batch if _is_container(batch) else _rows(batch), np.asarray(i, dtype=np.int64))
                     for i in micro_bsz_idx]
    return micro_batches, micro_bsz_idx


def _is_container(batch) -> bool:
    return hasattr(batch, "batch") or (hasattr(batch, "keys") and "attention_mask" in batch)


def _rows(batch):
    if isinstance(batch, (list, tuple)):
        return np.asarray(batch)
    return batch


def get_reverse_idx(idx_map) -> list:
    """The inverse permutation of a flat index list: ``rev[idx_map[p]] = p``
    (verl ``get_reverse_idx``)."""
    idx = np.asarray(list(idx_map), dtype=np.int64)
    rev = np.empty_like(idx)
    rev[idx] = np.arange(idx.size, dtype=np.int64)
    return rev.tolist()


def restore_dynamic_batch(data, micro_bsz_idx):
    """Outputs concatenated in micro-batch order back to input order (verl
    ``restore_dynamic_batch``): ``data`` has one row per sequence on axis 0
    (array, tensor or list), or is the list of per-micro-batch outputs."""
    flat = [i for mb in micro_bsz_idx for i in mb]
    if isinstance(data, (list, tuple)) and len(data) == len(micro_bsz_idx) and len(data) != len(flat):
        from ._arrays import is_torch, to_numpy

        if data and is_torch(data[0]):
            import torch

            data = torch.cat(list(data), dim=0)
        else:
            data = np.concatenate([to_numpy(d, "data") for d in data], axis=0)
    rev = np.asarray(get_reverse_idx(flat), dtype=np.int64)
    return take(data, rev)
