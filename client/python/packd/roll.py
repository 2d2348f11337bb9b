"""ROLL's dynamic batching, batch balancing and sequence packing, planned by
packd.

ROLL describes a dynamically batched global batch with one boundary list
that every DP rank reads from the same ``meta_info``: the batch is sorted by
length and dealt to the ranks with a stride (slot q of every rank holds
sorted positions q*dp .. q*dp+dp-1), micro-batch j covers the slots
[start_j, end_j) on every rank and is padded to one width. packd keeps that
shape exactly, so ROLL's workers read the result unchanged, and cuts it
optimally (the planner's ``shared_cuts`` micro algorithm: the fewest
micro-batches under the cap, then the least padded cost) where ROLL cuts
greedily. The one line a ROLL user adds::

    import packd.roll; packd.roll.patch()

Differences from ROLL are listed in docs/python.md.
"""

from __future__ import annotations

import copy

import numpy as np

from . import _patch
from ._adapt import default_client, dp_max, lengths_of, trainer_plan
from .verl import balance_batch, get_seqlen_balanced_partitions

__all__ = [
    "plan_dynamic_batching",
    "dynamic_batching_shard",
    "make_mini_batch_iter_for_dynamic_batching",
    "make_micro_batch_iter_for_dynamic_batching",
    "batch_balance",
    "get_seqlen_balanced_partitions",
    "sequence_packing_partitions",
    "sequence_packing_pad_factor",
    "patch",
]


def plan_dynamic_batching(
    batch,
    dp_size: int,
    max_tokens_per_microbatch: int,
    sequence_length_round: int,
    pipeline_model_parallel_size: int = 1,
    virtual_pipeline_model_parallel_size: int | None = None,
    *,
    client=None,
    micro_algo: str = "shared_cuts",
    **plan_kwargs,
):
    """The plan behind ``dynamic_batching_shard`` without touching any data:
    returns ``(order, meta)`` where ``order`` (int64 [B]) reorders the batch
    into the ranks' shards, one after another, and ``meta`` holds ROLL's
    keys (``global_micro_batch_indices``, ``global_micro_batch_lengths``,
    ``micro_batch_indices``, ``micro_batch_lengths``, ``num_micro_batchs``)
    plus ``packd_plan_id``. ``batch``: anything with an attention mask, a
    mask [B, S] or lengths [B]."""
    lengths = lengths_of(batch)
    dp = int(dp_size)
    pp = int(pipeline_model_parallel_size or 1)
    group = pp if (pp > 1 and virtual_pipeline_model_parallel_size) else 0
    client = client or default_client()
    plan = trainer_plan(
        client,
        lengths,
        dp=dp,
        mode="padded",
        round=int(sequence_length_round or 1),
        max_tokens=int(max_tokens_per_microbatch),
        microbatch_group=group,
        equal_count=True,
        dp_balance="sorted_stride",
        micro_algo=micro_algo,
        order="original",
        **plan_kwargs,
    )
    rows = [np.asarray(r.num_seqs, dtype=np.int64) for r in plan]
    if any(r.size != rows[0].size or np.any(r != rows[0]) for r in rows):
        raise RuntimeError(
            f"packd.roll: micro_algo={micro_algo!r} gave ranks different micro-batch boundaries; "
            "ROLL's meta_info holds one list for all ranks"
        )
    ends = np.cumsum(rows[0])
    indices = [[int(a), int(b)] for a, b in zip(ends - rows[0], ends)]
    widths = [max(int(r.micro_batches[j].padded_width) for r in plan) for j in range(len(indices))]
    meta = {
        "global_micro_batch_indices": indices,
        "global_micro_batch_lengths": widths,
        "micro_batch_indices": copy.deepcopy(indices),
        "micro_batch_lengths": list(widths),
        "num_micro_batchs": len(indices),
        "packd_plan_id": plan.plan_id,
    }
    return np.asarray(plan.order(), dtype=np.int64).copy(), meta


def _reordered(data, order: np.ndarray):
    """A new DataProto holding data's rows in ``order``, with its own
    ``meta_info`` dict; ``data`` is left as it was."""
    import torch

    idx = torch.from_numpy(order)
    if hasattr(data, "select_idxs"):
        out = data.select_idxs(idx)
    else:
        out = data.slice() if hasattr(data, "slice") else copy.copy(data)
        out.reorder(idx)
    out.meta_info = dict(getattr(data, "meta_info", None) or {})
    return out


def dynamic_batching_shard(
    origin_batch,
    dp_size: int,
    max_tokens_per_microbatch: int,
    sequence_length_round: int,
    pipeline_model_parallel_size: int = 1,
    virtual_pipeline_model_parallel_size: int | None = None,
    log_prefix: str | None = None,
    *,
    client=None,
    **plan_kwargs,
):
    """ROLL's ``dynamic_batching_shard``: returns ``(batch, metrics)`` where
    ``batch`` is a new DataProto (``origin_batch`` untouched) holding the
    ranks' shards one after another, its ``meta_info`` carrying ROLL's
    micro-batch keys, and ``metrics`` ROLL's figures under
    ``dynamic_batching[/log_prefix]/``: valid_tokens, actual_tokens_origin
    (rows x mask width), actual_tokens (padded tokens after batching, all
    ranks), removed_padding_tokens and removed_padding_ratio."""
    order, meta = plan_dynamic_batching(
        origin_batch, dp_size, max_tokens_per_microbatch, sequence_length_round,
        pipeline_model_parallel_size, virtual_pipeline_model_parallel_size, client=client, **plan_kwargs,
    )
    mask = origin_batch.batch["attention_mask"]
    lengths = lengths_of(origin_batch)
    if lengths.size and not lengths.all():
        import logging

        logging.getLogger("packd").warning(
            "packd.roll: %d sequences have an all-zero attention_mask in the %s stage; check the rollout",
            int((lengths == 0).sum()), log_prefix,
        )
    batch = _reordered(origin_batch, order)
    batch.meta_info.update(meta)
    per_rank = sum((b - a) * w for (a, b), w in zip(meta["global_micro_batch_indices"], meta["global_micro_batch_lengths"]))
    origin = int(mask.shape[0]) * int(mask.shape[-1])
    actual = int(per_rank) * int(dp_size)
    prefix = f"dynamic_batching/{log_prefix}" if log_prefix else "dynamic_batching"
    metrics = {
        f"{prefix}/valid_tokens": int(lengths.sum()),
        f"{prefix}/actual_tokens_origin": origin,
        f"{prefix}/actual_tokens": actual,
        f"{prefix}/removed_padding_tokens": origin - actual,
        f"{prefix}/removed_padding_ratio": (origin - actual) / origin if origin else 0.0,
    }
    return batch, metrics


def make_mini_batch_iter_for_dynamic_batching(data, epochs: int, ga_steps: int = 1):
    """ROLL's mini-batch iterator: for every epoch, groups of ``ga_steps``
    consecutive micro-batches of ``data.meta_info`` (the last group may be
    shorter), each yielded as a slice of ``data``; like ROLL, it sets
    ``micro_batch_indices`` (relative to the slice) and
    ``micro_batch_lengths`` in ``data.meta_info`` and ``mini_batch_size`` and
    ``num_micro_batchs`` in the slice's."""
    if int(ga_steps) < 1:
        raise ValueError(f"ga_steps: must be >= 1, got {ga_steps}")
    indices = data.meta_info["global_micro_batch_indices"]
    widths = data.meta_info["global_micro_batch_lengths"]
    for _ in range(int(epochs)):
        for i in range(0, len(indices), int(ga_steps)):
            chunk = indices[i : i + int(ga_steps)]
            start, end = chunk[0][0], chunk[-1][-1]
            mini = data.slice(start, end)
            data.meta_info["micro_batch_indices"] = [[x - start for x in row] for row in chunk]
            data.meta_info["micro_batch_lengths"] = widths[i : i + int(ga_steps)]
            mini.meta_info["mini_batch_size"] = mini.batch.batch_size[0]
            mini.meta_info["num_micro_batchs"] = len(chunk)
            yield mini


def make_micro_batch_iter_for_dynamic_batching(mini_batch):
    """ROLL's micro-batch iterator: each micro-batch of
    ``mini_batch.meta_info`` as a slice whose sequence-shaped tensors (the
    ``input_ids`` width, one less, and ``position_ids``) are narrowed to the
    micro-batch's width (one less for the shifted ones)."""
    import torch

    for width, (start, end) in zip(mini_batch.meta_info["micro_batch_lengths"],
                                   mini_batch.meta_info["micro_batch_indices"]):
        micro = mini_batch.slice(start, end)
        shape = micro.batch["input_ids"].shape
        for key in mini_batch.batch.keys():
            t = micro.batch[key]
            if (len(t.shape) == len(shape) or key == "position_ids") and t.shape[-1] in (shape[-1], shape[-1] - 1):
                keep = width if t.shape[-1] == shape[-1] else width - 1
                micro.batch[key] = torch.narrow(t, dim=-1, start=0, length=keep)
        yield micro


def batch_balance(batch, dp_size, minibatch_size, logging_prefix="global_seqlen", keep_minibatch=False, *,
                  client=None):
    """ROLL's ``batch_balance``: reorders ``batch`` in place so that the
    ``dp_size`` equal chunks the dispatcher cuts carry balanced work
    (balanced per ``minibatch_size`` slice with ``keep_minibatch``), and
    returns the balance figures (``log_seqlen_unbalance``)."""
    metrics: dict = {}
    balance_batch(batch, int(dp_size), metrics=metrics, logging_prefix=logging_prefix,
                  keep_minibatch=keep_minibatch, mini_batch_size=minibatch_size, client=client)
    return metrics


def sequence_packing_pad_factor(cp_size: int, tp_size: int) -> int:
    """ROLL's per-sequence padding multiple for packed sequences:
    lcm(16, 2*CP*TP) with context parallelism, lcm(16, TP) without."""
    import math

    f = int(cp_size) * 2 * int(tp_size) if int(cp_size) > 1 else int(tp_size)
    return math.lcm(16, max(1, f))


def sequence_packing_partitions(lengths, max_packed_sequence_length: int, pad_factor: int = 16,
                                min_num_micro_batches: int = 1, vp_size: int = 1, dp_group=None,
                                device=None, *, client=None):
    """Index lists of one rank's micro-batches for sequence packing: every
    sequence padded to ``pad_factor``, the padded sum of each micro-batch at
    most ``max_packed_sequence_length`` (a hard cap), the count the least
    that fits, at least ``min_num_micro_batches``, the largest over
    ``dp_group`` when torch.distributed is initialised, and a multiple of
    ``vp_size``; heavy micro-batches in the middle."""
    lengths = lengths_of(lengths, "lengths")
    client = client or default_client()
    kw = dict(dp=1, max_tokens=int(max_packed_sequence_length), align=int(pad_factor),
              min_micro_batches=int(min_num_micro_batches or 1),
              microbatch_group=int(vp_size) if int(vp_size or 1) > 1 else 0, order="heavy_middle")
    plan = trainer_plan(client, lengths, **kw)
    count = len(plan[0])
    target = dp_max(count, dp_group, device) if dp_group is not None else count
    if target > count:
        kw["min_micro_batches"] = target
        plan = trainer_plan(client, lengths, **kw)
    return [m.seqs.tolist() for m in plan[0].micro_batches]


def _load_balance_packer(base):
    """ROLL's LoadBalancePacker with packd planning the micro-batches: the
    cap ``max_packed_sequence_length_{train,forward}`` holds for every
    micro-batch (ROLL sizes the count by ceil(sum / cap) and does not check
    it) and the count is the least that fits."""

    class LoadBalancePacker(base):
        def make_micro_batch_iter_for_sequence_packing(self, mini_batch, tp_size, cp_size, vp_size, is_train=False,
                                                       dp_group=None, micro_batch_size=None):
            cfg = self.config
            cap = cfg.max_packed_sequence_length_train if is_train else cfg.max_packed_sequence_length_forward
            if cap is None:
                raise ValueError("max_packed_sequence_length_%s: must be set for load_balance sequence packing"
                                 % ("train" if is_train else "forward"))
            least = cfg.min_num_micro_batches_train if is_train else cfg.min_num_micro_batches_forward
            mask = mini_batch.batch["attention_mask"]
            parts = sequence_packing_partitions(
                mask, cap, sequence_packing_pad_factor(cp_size, tp_size), least or 1, vp_size or 1, dp_group,
                mask.device,
            )
            mini_batch.meta_info["partition_indices_list"] = copy.deepcopy(parts)
            for j, part in enumerate(parts):
                micro = mini_batch.select_idxs(np.asarray(part, dtype=np.int64))
                micro.meta_info = copy.deepcopy(mini_batch.meta_info)
                micro.meta_info["micro_batch_idx"] = j
                micro.meta_info["is_padding_batch"] = False
                micro.meta_info["partition_indices"] = part
                micro.meta_info["num_micro_batchs"] = len(parts)
                micro.meta_info["mini_batch_size"] = mini_batch.batch.batch_size[0]
                yield micro

    LoadBalancePacker.__qualname__ = "LoadBalancePacker"
    LoadBalancePacker.__module__ = __name__
    return LoadBalancePacker


def patch():
    """Replaces ROLL's dynamic batching (``roll.utils.dynamic_batching``),
    batch balancing and partitioning (``roll.utils.functionals``) and the
    load-balance sequence packer (``roll.utils.sequence_packing``) with
    packd's, in those modules and in every loaded module that imported them
    by name (pipelines, workers, strategies). What this ROLL version does
    not define (a release before sequence packing, say) is skipped and
    named in one warning; only a ROLL with none of them fails. Logs once
    what it replaced (logger "packd"); calling it again returns the same
    handle. Returns a handle whose ``undo()`` restores ROLL's."""
    return _patch.apply("roll", {
        "roll.utils.dynamic_batching": {
            "dynamic_batching_shard": dynamic_batching_shard,
            "make_mini_batch_iter_for_dynamic_batching": make_mini_batch_iter_for_dynamic_batching,
            "make_micro_batch_iter_for_dynamic_batching": make_micro_batch_iter_for_dynamic_batching,
        },
        "roll.utils.functionals": {
            "batch_balance": batch_balance,
            "get_seqlen_balanced_partitions": get_seqlen_balanced_partitions,
        },
        "roll.utils.sequence_packing": {
            "LoadBalancePacker": _patch.Wrap(_load_balance_packer),
        },
    })
