"""Drop-in replacement for ROLL's dynamic batching.

ROLL's ``dynamic_batching_shard`` (research/algorithms.md 2.2) sorts the
batch by length, deals it to DP ranks with a stride, then cuts every
rank's shard into micro-batches with one boundary list shared by all
ranks, each micro-batch padded to its longest row rounded up to
``sequence_length_round`` and holding at most ``max_tokens_per_microbatch``
padded tokens (rows x width). With PP > 1 and VPP set, the count is rounded
up to a multiple of PP.

``dynamic_batching_shard`` here takes the same arguments and plans the
same kind of micro-batches (packd's PADDED mode: rows x width <= cap,
widths multiples of the round, the same count on every rank, a multiple of
PP when VPP is set), balanced by packd instead of sort-and-stride. It
returns the reorder index and the meta information ROLL stores:
``global_micro_batch_indices`` ([start, end) row ranges inside each rank's
shard), ``global_micro_batch_lengths`` (the padded width of every
micro-batch) and ``num_micro_batchs``. Difference: the boundaries are given
per rank (a list per rank), because packd balances each rank's
micro-batches on their own instead of sharing one boundary list.
Differences and switching are described in docs/python.md ("ROLL").
"""

from __future__ import annotations

import numpy as np

from ._adapt import default_client, lengths_of

__all__ = ["dynamic_batching_shard", "make_mini_batch_iter"]


def dynamic_batching_shard(
    batch,
    dp_size: int,
    max_tokens_per_microbatch: int,
    sequence_length_round: int = 4,
    pipeline_model_parallel_size: int = 1,
    virtual_pipeline_model_parallel_size: int | None = None,
    *,
    client=None,
    equal_count: bool = True,
    dp_balance: str = "auto",
    micro_algo: str = "auto",
    **plan_kwargs,
):
    """Plans ROLL-style dynamic batching for a global batch.

    batch: a ROLL/verl DataProto (``batch["attention_mask"]``; reordered in
    place with ``reorder`` and its ``meta_info`` updated, like ROLL), a
    dict with ``attention_mask``, an attention mask [B, S] or lengths [B].
    equal_count: every rank gets the same number of rows (ROLL's dispatcher
    cuts the batch into equal chunks).

    Returns ``(order, meta)``: the reorder index (int64 [B]; rank r's shard
    is the r-th run of ``meta["rank_sizes"][r]`` rows) and the meta dict
    (``global_micro_batch_indices``, ``global_micro_batch_lengths``,
    ``num_micro_batchs``, ``rank_sizes``, ``plan_id``)."""
    lengths = lengths_of(batch)
    client = client or default_client()
    pp = int(pipeline_model_parallel_size or 1)
    group = pp if (pp > 1 and virtual_pipeline_model_parallel_size) else 0
    plan = client.plan(
        lengths,
        dp=int(dp_size),
        mode="padded",
        round=int(sequence_length_round or 1),
        max_tokens=int(max_tokens_per_microbatch),
        microbatch_group=group,
        equal_count=equal_count,
        dp_balance=dp_balance,
        micro_algo=micro_algo,
        **plan_kwargs,
    )
    indices, widths = [], []
    for rank in plan:
        ends = np.cumsum(rank.num_seqs)
        starts = ends - rank.num_seqs
        indices.append([[int(a), int(b)] for a, b in zip(starts, ends)])
        widths.append([int(mb.padded_width) for mb in rank.micro_batches])
    counts = {len(x) for x in indices}
    meta = {
        "global_micro_batch_indices": indices,
        "global_micro_batch_lengths": widths,
        "num_micro_batchs": counts.pop() if len(counts) == 1 else max(len(x) for x in indices),
        "rank_sizes": plan.rank_sizes().tolist(),
        "plan_id": plan.plan_id,
    }
    order = np.asarray(plan.order(), dtype=np.int64).copy()
    if hasattr(batch, "reorder"):
        try:
            import torch

            batch.reorder(torch.from_numpy(order))
        except ImportError:
            batch.reorder(order)
        if isinstance(getattr(batch, "meta_info", None), dict):
            batch.meta_info.update(meta)
    return order, meta


def make_mini_batch_iter(meta: dict, rank: int, ga_steps: int):
    """ROLL's ``make_mini_batch_iter_for_dynamic_batching`` on the meta of
    one rank: yields lists of ``ga_steps`` consecutive ([start, end),
    width) micro-batches, one list per optimizer step."""
    mbs = list(zip(meta["global_micro_batch_indices"][rank], meta["global_micro_batch_lengths"][rank]))
    if ga_steps < 1 or len(mbs) % ga_steps:
        raise ValueError(f"ga_steps: {ga_steps} does not divide the {len(mbs)} micro-batches of rank {rank}")
    for i in range(0, len(mbs), ga_steps):
        yield mbs[i : i + ga_steps]
