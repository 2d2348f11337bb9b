"""verl's sequence balancing, planned by packd.

Every function verl's trainer, actors, critics, reward model and engines
import from ``verl.utils.seqlen_balancing`` is here under its verl name,
with verl's argument names, defaults and return types, and accepting what
verl passes: a DataProto, a TensorDict with a padded ``attention_mask`` or a
nested (jagged) ``input_ids``, tensors on any device, plain dicts. The one
line a verl user adds::

    import packd.verl; packd.verl.patch()

replaces them in verl (``patch`` below); ``handle.undo()`` puts verl's back.

Behaviour differs from verl only where packd is better by design (the
differences table in docs/python.md): a micro-batch never holds more than
``max_token_len`` tokens (verl sizes the count by ``ceil(sum / cap)`` and
does not check the cap); the count is never above verl's where a packing at
verl's count fits; balance is the planner's (lock-step aware) instead of
Karmarkar-Karp.
"""

from __future__ import annotations

import copy
from itertools import chain

import numpy as np

from . import _patch
from ._adapt import (
    default_client,
    device_of,
    dp_max,
    heavy_middle,
    host_values,
    lengths_of,
    select_rows,
    select_value,
    trainer_plan,
    workload,
)
from ._arrays import is_torch
from .errors import TrainerFailedPrecondition, TrainerInvalidArgument

__all__ = [
    "calculate_workload",
    "ceildiv",
    "roundup_divisible",
    "get_seqlen_balanced_partitions",
    "get_group_balanced_partitions",
    "log_seqlen_unbalance",
    "rearrange_micro_batches",
    "prepare_dynamic_batch",
    "restore_dynamic_batch",
    "get_reverse_idx",
    "balance_batch",
    "balance_metrics",
    "get_megatron_dynamic_cp_scheduler_cls",
    "patch",
]

# The planner takes uint32 lengths and lays a micro-batch out with int32
# cu_seqlens, so the numbers partitioned as lengths must sum below 2**31.
_INT32_MAX = (1 << 31) - 1


def calculate_workload(seqlen_list):
    """verl's FLOPs proxy ``24576 * L + L**2``, in the kind given (a tensor
    stays a tensor on its device; an array or list gives an array).
    Integer lengths are computed in int64 whatever their width (verl's
    int32 lengths overflow from L = 46341 on), floating ones in their own
    type."""
    if is_torch(seqlen_list):
        if not seqlen_list.is_floating_point():
            seqlen_list = seqlen_list.long()
        return 24576 * seqlen_list + seqlen_list**2
    a = np.asarray(seqlen_list)
    if a.dtype.kind in "iub":
        a = a.astype(np.int64)
        return 24576 * a + a * a
    return workload(a)


def ceildiv(a: int, b: int) -> int:
    """ceil(a / b) for integers (ZeroDivisionError for b = 0, like verl)."""
    return -(a // -b)


def roundup_divisible(a: int, b: int) -> int:
    """The least multiple of b that is >= a."""
    return ((a + b - 1) // b) * b


def _plan_values(values: np.ndarray, k: int, equal_size: bool, client):
    """Partitions of arbitrary non-negative numbers over k ranks, planned by
    packd with the cost of an item equal to its value (linear 1, quadratic
    0, no cap). Fractional values, or values summing past int32, are scaled
    to integers first: each partition's sum moves by at most half a unit per
    item, a relative n / 2**32 of the total at worst."""
    total = float(values.sum())
    if total > _INT32_MAX or np.any(np.mod(values, 1) != 0):
        scale = _INT32_MAX / total if total > 0 else 1.0
        units = np.floor(values * scale + 0.5).astype(np.int64)
    else:
        units = values.astype(np.int64)
    client = client or default_client()
    best, best_max = None, None
    # AUTO balances lock-step micro-batch slots; with one slot per rank and
    # no cap this is plain number partitioning, where Karmarkar-Karp
    # sometimes ends a few 1e-4 lower. Both are planned and the lower
    # largest sum is kept, so the result is never worse than verl's.
    for algo in ("auto", "kk_equal" if equal_size else "kk"):
        plan = trainer_plan(client, units, dp=k, equal_count=bool(equal_size), dp_balance=algo, linear=1.0,
                           quadratic=0.0)
        parts = [np.asarray(r.seqs, dtype=np.int64) for r in plan]
        top = max(float(values[p].sum()) for p in parts)
        if best is None or top < best_max:
            best, best_max = parts, top
    return best


def _fill_empty(parts: list, values: np.ndarray) -> list:
    """No partition left empty (verl's contract) when there are at least as
    many items as partitions: the lightest item of the partition with the
    most items moves to each empty one."""
    parts = [list(map(int, p)) for p in parts]
    for p in parts:
        if p:
            continue
        donor = max(parts, key=len)
        if len(donor) < 2:
            break
        j = min(donor, key=lambda i: (values[i], i))
        donor.remove(j)
        p.append(j)
    return parts


def get_seqlen_balanced_partitions(seqlen_list, k_partitions: int, equal_size: bool, *, client=None):
    """``k_partitions`` lists of indices into ``seqlen_list`` (numbers: verl
    passes workloads) whose sums are balanced; each list sorted, none
    empty, every index once; with ``equal_size`` every list has
    ``len / k`` items. TrainerFailedPrecondition (an AssertionError and a
    ValueError) where verl asserts: fewer items than partitions, a size not
    divisible with ``equal_size``."""
    values = host_values(seqlen_list, "seqlen_list")
    n, k = int(values.size), int(k_partitions)
    if k < 1:
        raise TrainerInvalidArgument(f"k_partitions: must be >= 1, got {k_partitions}")
    if n < k:
        raise TrainerFailedPrecondition(f"seqlen_list: {n} items cannot fill k_partitions={k} partitions")
    if equal_size and n % k:
        raise TrainerFailedPrecondition(f"seqlen_list: {n} items do not divide into k_partitions={k} equal partitions")
    parts = _fill_empty(_plan_values(values, k, equal_size, client), values)
    return [sorted(p) for p in parts]


def get_group_balanced_partitions(seqlen_list, uid_list, k_partitions: int, *, client=None):
    """k lists of sample indices (each sorted) that keep all samples of one
    uid in one list (verl's PrefixGrouper balancing), every list holding
    the same number of groups, balanced by the groups' workloads (the sum
    of verl's per-sample workload): verl's trainer cuts the reordered batch
    into equal chunks, which split no group only when the groups of a
    rollout (all of one size) are dealt equally. Samples share a group when
    their uids are equal, wherever they sit in the batch (verl groups runs
    of equal adjacent uids only; the trainer counts groups as distinct
    uids). TrainerFailedPrecondition (an AssertionError and a ValueError,
    what verl raises) when the groups cannot be dealt equally: fewer groups
    than partitions, or a count that ``k_partitions`` does not divide."""
    lengths = lengths_of(host_values(seqlen_list, "seqlen_list"), "seqlen_list")
    uids = list(uid_list.tolist() if hasattr(uid_list, "tolist") else uid_list)
    if len(uids) != lengths.size:
        raise TrainerInvalidArgument(f"uid_list: {len(uids)} uids for {lengths.size} sequences")
    k = int(k_partitions)
    if k < 1:
        raise TrainerInvalidArgument(f"k_partitions: must be >= 1, got {k_partitions}")
    ids: dict = {}
    gid = np.array([ids.setdefault(u, len(ids)) for u in uids], dtype=np.int64)
    groups = len(ids)
    if groups < k:
        raise TrainerFailedPrecondition(f"uid_list: {groups} uid groups cannot fill k_partitions={k} partitions")
    if groups % k:
        raise TrainerFailedPrecondition(
            f"uid_list: {groups} uid groups do not divide into k_partitions={k} equal counts of groups"
        )
    weights = np.bincount(gid, weights=workload(lengths), minlength=groups)
    order = np.argsort(gid, kind="stable")
    members = np.split(order, np.cumsum(np.bincount(gid, minlength=groups))[:-1])
    parts = _plan_values(weights, k, True, client)
    return [sorted(int(i) for g in p for i in members[int(g)]) for p in parts]


def log_seqlen_unbalance(seqlen_list, partitions, prefix):
    """verl's balance figures: ``{prefix}/min``, ``/max``, ``/minmax_diff``
    are the token sums of the batch cut into equal contiguous chunks as it
    came (before balancing), ``/balanced_min`` and ``/balanced_max`` those of
    ``partitions``, ``/mean`` the total over the number of partitions."""
    lengths = host_values(seqlen_list, "seqlen_list")
    k = len(partitions)
    if k == 0:
        raise ValueError("partitions: expected at least one partition")
    size = max(1, lengths.size // k)
    before = [lengths[o : o + size].sum() for o in range(0, lengths.size, size)] or [0.0]
    after = [lengths[np.asarray(list(p), dtype=np.int64)].sum() for p in partitions]
    as_int = np.all(np.mod(lengths, 1) == 0)
    num = (lambda v: int(v)) if as_int else (lambda v: float(v))
    return {
        f"{prefix}/min": num(min(before)),
        f"{prefix}/max": num(max(before)),
        f"{prefix}/minmax_diff": num(max(before) - min(before)),
        f"{prefix}/balanced_min": num(min(after)),
        f"{prefix}/balanced_max": num(max(after)),
        f"{prefix}/mean": float(lengths.sum()) / k,
    }


def balance_metrics(lengths, partitions, prefix: str = "global_seqlen") -> dict:
    """``log_seqlen_unbalance`` under packd's older name."""
    return log_seqlen_unbalance(lengths, partitions, prefix)


def balance_batch(
    batch,
    world_size: int | None = None,
    metrics: dict | None = None,
    logging_prefix: str = "global_seqlen",
    keep_minibatch: bool = False,
    *,
    dp_size: int | None = None,
    mini_batch_size: int | None = None,
    uid=None,
    equal_size: bool = True,
    client=None,
    dp_balance: str = "auto",
    intra_order: str = "heavy_middle",
    **plan_kwargs,
) -> np.ndarray:
    """The trainer's ``_balance_batch`` as a function: reorders ``batch`` so
    that the DP ranks (``world_size``, or ``dp_size`` as verl's trainer
    names it) get balanced work; the dispatcher then cuts it into equal
    chunks.

    batch: a DataProto (reordered in place with ``reorder``, like verl), a
    TensorDict or dict with ``attention_mask``, a mask [B, S] or lengths [B].
    keep_minibatch: balance every ``mini_batch_size`` slice on its own (the
    whole batch is one slice when it is not given). uid: one id per sample
    (default: the DataProto's ``non_tensor_batch["uid"]`` when
    ``use_prefix_grouper`` is asked for through ``uid=True``): every uid
    group stays on one rank, in input order (verl's PrefixGrouper path).
    intra_order: "heavy_middle" (verl's order inside a rank) or "plan".

    Returns the reorder index (int64 [B]). If ``metrics`` is a dict, verl's
    figures (``log_seqlen_unbalance``) are added to it."""
    k = int(dp_size or world_size or 0)
    if k < 1:
        raise ValueError(f"world_size: the DP size must be >= 1, got {world_size if dp_size is None else dp_size}")
    if intra_order not in ("heavy_middle", "plan"):
        raise ValueError(f"intra_order: expected 'heavy_middle' or 'plan', got {intra_order!r}")
    lengths = lengths_of(batch)
    n = int(lengths.size)
    client = client or default_client()
    if uid is True:
        uid = getattr(batch, "non_tensor_batch", {}).get("uid")
        if uid is None:
            raise ValueError("uid: True asks for the batch's non_tensor_batch['uid'], which it does not have")
    if uid is not None and uid is not False:
        parts = [np.asarray(p, dtype=np.int64) for p in get_group_balanced_partitions(lengths, uid, k, client=client)]
    else:
        mini = 1
        if keep_minibatch and mini_batch_size:
            if n % int(mini_batch_size):
                raise ValueError(f"mini_batch_size: {mini_batch_size} does not divide the batch size {n}")
            mini = n // int(mini_batch_size)
        plan = trainer_plan(client, lengths, dp=k, equal_count=equal_size, dp_balance=dp_balance,
                            mini_batches=mini, **plan_kwargs)
        w = workload(lengths)
        parts = []
        for rank in plan:
            if intra_order == "plan":
                parts.append(np.asarray(rank.seqs, dtype=np.int64))
            else:
                pieces = [heavy_middle(np.asarray(m.seqs, dtype=np.int64), w) for m in rank.mini_batches]
                parts.append(np.concatenate(pieces) if pieces else np.zeros(0, np.int64))
    idx = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
    if metrics is not None:
        metrics.update(log_seqlen_unbalance(lengths, parts, logging_prefix))
    if hasattr(batch, "reorder"):
        try:
            import torch

            batch.reorder(torch.from_numpy(idx))
        except ImportError:
            batch.reorder(idx)
    return idx


def _group_lengths(lengths: np.ndarray, size: int) -> np.ndarray:
    """Token sums of the runs of ``size`` consecutive samples that verl's
    ``force_group_size`` keeps in one micro-batch."""
    n = int(lengths.size)
    if size < 1:
        raise TrainerInvalidArgument(f"force_group_size: must be >= 1, got {size}")
    if n % size:
        raise TrainerFailedPrecondition(f"force_group_size: the batch size {n} is not a multiple of {size}")
    return lengths.reshape(-1, size).sum(axis=1) if n else lengths


def _verl_order(parts: list, weight: np.ndarray, heavy_middle_order: bool) -> list:
    """verl's order of micro-batches: by workload, heaviest first (ties by
    first index); with ``heavy_middle_order`` the light ones at both ends."""
    key = [(float(weight[np.asarray(p, dtype=np.int64)].sum()), p[0] if p else 0) for p in parts]
    ranked = [parts[i] for i in sorted(range(len(parts)), key=lambda i: key[i], reverse=True)]
    return ranked[::2][::-1] + ranked[1::2] if heavy_middle_order else ranked


def rearrange_micro_batches(
    batch,
    max_token_len,
    dp_group=None,
    num_batches_divided_by=None,
    same_micro_num_in_dp=True,
    min_num_micro_batch=None,
    use_dynamic_bsz_balance=True,
    force_group_size=1,
    *,
    client=None,
    micro_algo: str = "auto",
    **plan_kwargs,
):
    """One rank's batch cut into micro-batches of at most ``max_token_len``
    tokens (a hard cap: a sequence that cannot fit alone raises
    TrainerFailedPrecondition naming it).

    batch: a TensorDict, or a dict (any mapping) with an ``attention_mask``
    [B, S] or a nested ``input_ids`` (tensors on any device; numpy arrays
    and lists of B items work too, and entries that are not one item per
    row, such as scalars or strings, are copied into every micro-batch); a
    DataProto; a mask [B, S] or lengths [B].
    force_group_size: every run of that many consecutive samples (a reward
    model's answers to one prompt) stays in one micro-batch; the batch size
    must be a multiple of it, and the count is at most the number of runs.
    A run over the cap cannot be split: like verl, it is kept whole, in a
    micro-batch of its own (the only micro-batches over the cap); the other
    runs keep the cap.
    Returns ``(micro_batches, micro_bsz_idx)``: the micro-batches in the
    batch's own kind and on its device, and their index lists. The count is
    the least that fits, at least ``min_num_micro_batch``, a multiple of
    ``num_batches_divided_by``, and with ``same_micro_num_in_dp``, a
    ``dp_group`` and torch.distributed initialised the largest over the
    group (every rank re-plans at that count, so the cap still holds).
    ``use_dynamic_bsz_balance``: light micro-batches at both ends and heavy
    ones in the middle (verl's order), else heaviest first.
    TrainerFailedPrecondition (an AssertionError and a ValueError, as verl
    raises) where the batch does not divide into forced groups or the count
    asked for exceeds the groups."""
    lengths = lengths_of(batch)
    cap = int(max_token_len)
    size = int(force_group_size or 1)
    items = _group_lengths(lengths, size) if size != 1 else lengths
    # Forced groups over the cap (never single sequences: those fail in the
    # planner, naming the sequence) each take a micro-batch of their own.
    whole = np.flatnonzero(items > cap) if size != 1 else np.zeros(0, np.int64)
    rest = np.setdiff1d(np.arange(items.size), whole)
    client = client or default_client()
    step = int(num_batches_divided_by or 0)
    order = "heavy_middle" if use_dynamic_bsz_balance else "cost_desc"
    kw = dict(dp=1, max_tokens=cap, micro_algo=micro_algo, order=order,
              microbatch_group=step if whole.size == 0 else 0, **plan_kwargs)

    def planned(least):
        """The groups' micro-batches (group index lists), at least ``least``
        of them and a multiple of ``step``."""
        if least > items.size:
            unit = "forced groups" if size != 1 else "sequences"
            raise TrainerFailedPrecondition(
                f"min_num_micro_batch: {least} non-empty micro-batches asked for (the largest count over the DP "
                f"group, a multiple of num_batches_divided_by), but this rank has {items.size} {unit}"
            )
        if whole.size == 0:
            plan = trainer_plan(client, items, min_micro_batches=least, **kw)
            return [m.seqs.tolist() for m in plan[0].micro_batches]
        parts = [[int(g)] for g in whole]
        want = max(least - whole.size, 1 if rest.size else 0)
        while rest.size:
            plan = trainer_plan(client, items[rest], min_micro_batches=want, **kw)
            total = whole.size + len(plan[0])
            more = len(plan[0]) + (step - total % step if step > 1 and total % step else 0)
            if more == len(plan[0]) or more > rest.size:
                parts += [rest[m.seqs].tolist() for m in plan[0].micro_batches]
                break
            want = more
        group_work = workload(lengths).reshape(-1, size).sum(axis=1)
        return _verl_order(parts, group_work, use_dynamic_bsz_balance)

    parts = planned(int(min_num_micro_batch or 0))
    if same_micro_num_in_dp and dp_group is not None:
        target = dp_max(len(parts), dp_group, device_of(batch))
        if target > len(parts):
            parts = planned(target)
    if size != 1:
        parts = [[g * size + j for g in groups for j in range(size)] for groups in parts]
    inner = batch.batch if hasattr(batch, "batch") and hasattr(batch, "non_tensor_batch") else batch
    micro_batches = [select_rows(inner, np.asarray(i, dtype=np.int64), rows=lengths.size) for i in parts]
    return micro_batches, parts


def prepare_dynamic_batch(
    data,
    max_token_len,
    dp_group=None,
    num_batches_divided_by=None,
    same_micro_num_in_dp=True,
    min_num_micro_batch=None,
    use_dynamic_bsz_balance=True,
    **kwargs,
):
    """A DataProto cut into micro-DataProtos of at most ``max_token_len``
    tokens: ``(micro_batches, batch_idx_list)``. Each micro-batch carries
    its rows of the tensors and non-tensor fields and a copy of
    ``meta_info``. Given a TensorDict or dict instead, the micro-batches are
    of that kind (``rearrange_micro_batches``)."""
    micro, idx_list = rearrange_micro_batches(
        data,
        max_token_len=max_token_len,
        dp_group=dp_group,
        num_batches_divided_by=num_batches_divided_by,
        same_micro_num_in_dp=same_micro_num_in_dp,
        min_num_micro_batch=min_num_micro_batch,
        use_dynamic_bsz_balance=use_dynamic_bsz_balance,
        **kwargs,
    )
    if not (hasattr(data, "non_tensor_batch") and hasattr(data, "meta_info")):
        return micro, idx_list
    out = []
    for mb, idx in zip(micro, idx_list):
        rows = np.asarray(idx, dtype=np.int64)
        non_tensors = {key: select_value(value, rows) for key, value in data.non_tensor_batch.items()}
        tensors = {key: mb[key] for key in mb.keys()}
        out.append(type(data).from_dict(tensors, non_tensors, meta_info=copy.deepcopy(data.meta_info)))
    return out, idx_list


def get_reverse_idx(idx_map):
    """The inverse of an index map, as a list: ``rev[idx_map[i]] = i``.
    ValueError when idx_map is not a permutation of range(len)."""
    idx = np.fromiter((int(i) for i in idx_map), dtype=np.int64)
    n = idx.size
    if n and (idx.min() < 0 or idx.max() >= n or np.unique(idx).size != n):
        bad = np.flatnonzero((idx < 0) | (idx >= n))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"idx_map[{i}]: {int(idx[i])} is outside range({n}) (expected a permutation of range({n}))")
        seen = {}
        for i, v in enumerate(idx.tolist()):
            if v in seen:
                raise ValueError(f"idx_map[{i}]: {v} repeats idx_map[{seen[v]}] (expected a permutation of range({n}))")
            seen[v] = i
    rev = np.empty_like(idx)
    rev[idx] = np.arange(n, dtype=np.int64)
    return rev.tolist()


def _rows(data) -> int:
    if isinstance(data, (list, tuple)):
        return len(data)
    if getattr(data, "is_nested", False):
        return len(data.unbind())
    return int(data.shape[0])


def restore_dynamic_batch(data, batch_idx_list):
    """Outputs in micro-batch order (rows concatenated over the micro-batches
    of ``batch_idx_list``) back in input order. ``data``: a tensor (nested
    too) on any device, an array, a list of rows, or the list of
    per-micro-batch outputs."""
    flat = list(chain.from_iterable(batch_idx_list))
    if isinstance(data, (list, tuple)) and len(data) == len(batch_idx_list) and len(data) != len(flat):
        if data and is_torch(data[0]):
            import torch

            data = torch.cat(list(data), dim=0)
        else:
            data = np.concatenate([np.asarray(d) for d in data], axis=0)
    rows = _rows(data)
    if rows != len(flat):
        raise TrainerInvalidArgument(f"data: {rows} rows for {len(flat)} indices in batch_idx_list")
    return select_value(data, np.asarray(get_reverse_idx(flat), dtype=np.int64))


# The names verl's modules import from verl.utils.seqlen_balancing that
# packd replaces: the planning functions, and the helpers whose results feed
# them (calculate_workload in int64, ceildiv) so that one implementation
# computes every number verl compares. karmarkar_karp and greedy_partition,
# which only verl's own partitioning calls, stay verl's.
_VERL_TARGETS = (
    "calculate_workload",
    "ceildiv",
    "roundup_divisible",
    "get_seqlen_balanced_partitions",
    "get_group_balanced_partitions",
    "log_seqlen_unbalance",
    "rearrange_micro_batches",
    "prepare_dynamic_batch",
    "restore_dynamic_batch",
    "get_reverse_idx",
)


def get_megatron_dynamic_cp_scheduler_cls() -> type:
    """The scheduler class verl's ``DynamicCPScheduler.schedule`` builds
    (in verl, Megatron-Core's dynamic-CP scheduler): packd's
    ``packd.megatron.BalancedCPScheduler``, which has Megatron's
    constructor and output format, plans with packd's dynamic-CP planner
    and needs no Megatron-Core. Its schedules pass verl's checks by
    construction: every rank has work, a group's ranks are contiguous and
    start at a multiple of their count."""
    from .megatron import BalancedCPScheduler

    return BalancedCPScheduler


# verl's dynamic context parallelism asks this module for the scheduler
# class (Megatron-Core's in verl; verl releases before 0.9 have no module).
_VERL_DCP_MODULE = "verl.utils.dynamic_cp_scheduler"
_VERL_DCP_TARGETS = ("get_megatron_dynamic_cp_scheduler_cls",)


def patch():
    """Replaces verl's balancing and dynamic batching with packd's, in
    ``verl.utils.seqlen_balancing`` and in every loaded module that imported
    them by name (the trainers, engines, workers), and the dynamic-CP
    scheduler verl's ``DynamicCPScheduler`` builds with packd's
    (``verl.utils.dynamic_cp_scheduler``, where this verl has it). What this verl version
    does not define is skipped (a release before
    ``get_group_balanced_partitions``, say) and named in one warning; only
    a verl with none of them fails. Logs once what it replaced (logger
    "packd"); calling it again returns the same handle. Returns a handle
    whose ``undo()`` restores verl's functions."""
    g = globals()
    return _patch.apply(
        "verl",
        {
            "verl.utils.seqlen_balancing": {name: g[name] for name in _VERL_TARGETS},
            _VERL_DCP_MODULE: {name: g[name] for name in _VERL_DCP_TARGETS},
        },
    )
