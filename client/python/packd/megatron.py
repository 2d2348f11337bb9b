"""Megatron-Core's sequence-packing schedulers, planned by packd.

Megatron-Core chooses how a global batch of variable-length sequences is
packed into micro-batches by a registry,
``megatron.core.datasets.data_schedule.scheduler_map``, keyed by the config
field ``sequence_packing_scheduler``. Every DP rank gathers the lengths of
the whole global batch and calls the scheduler with the same
``[(sample id, padded length), ...]``; the answer says, per micro-batch and
per DP x CP rank, which samples that rank packs. Every rank must compute the
same answer: packd's plans are deterministic (the same request gives the
same plan, embedded or from a server), so they are.

``BalancedCPScheduler`` is the dynamic-CP counterpart, after Megatron-Core's
scheduler of that name: the same constructor and output format, the dp x
cp GPUs cut into CP groups of varying size per micro-batch, planned by
packd's dynamic-CP planner with the per-GPU cap hard (docs/python.md,
"Megatron-Core and verl (dynamic CP)").

``DpBalancedScheduler`` here has the constructor, methods and output format
of Megatron-Core's ``DpBalancedScheduler`` and differs where packd is better
by design (the differences table in docs/python.md):

- the cap is hard: a DP rank's micro-batch holds at most
  ``max_seqlen_per_dp_cp_rank * cp_size`` tokens, the bound Megatron packs
  to, and a sample longer than that raises ``SchedulingError`` naming it
  (Megatron gives it a micro-batch of its own, over the cap);
- the micro-batch count per DP rank is the least the planner finds under the
  cap, rounded up to a multiple of ``microbatch_group_size_per_vp_stage``,
  and the same on every DP rank by construction (Megatron packs in order and
  then splits single samples off the last micro-batches until the count
  divides);
- samples are balanced over DP ranks and micro-batch slots by packd's cost
  model (attention grows with the square of the length), instead of taken
  in order.

The one line a Megatron-Core user adds::

    import packd.megatron; packd.megatron.patch()

registers the schedulers as ``sequence_packing_scheduler="packd_dp_balanced"``
and ``"packd_balanced_cp"`` (``patch(replace=True)`` also puts them in place
of Megatron's own ``dp_balanced`` and, where the installed version has it,
``default_dynamic_cp``); ``handle.undo()`` puts the registry back.

Plans go to the embedded planner, or to the server named by ``PACKD_TARGET``
when that is set, or to the ``client=`` given to the constructor.
"""

from __future__ import annotations

import logging
import math
import numbers

import numpy as np

from . import _patch
from ._adapt import default_client
from .errors import FailedPrecondition, InvalidArgument

__all__ = [
    "DpBalancedScheduler",
    "BalancedCPScheduler",
    "SchedulingError",
    "SCHEDULERS",
    "OPTIONS",
    "bind",
    "MegatronPatch",
    "patch",
]

_log = logging.getLogger("packd")

# The planner takes lengths as uint32 and lays micro-batches out with int32
# offsets, so a DP rank's micro-batch (and so the cap) stays below 2**31.
_INT32_MAX = (1 << 31) - 1


class SchedulingError(FailedPrecondition, AssertionError):
    """Valid arguments that no schedule meets: a sample longer than the cap,
    or too few samples to give every DP rank the required number of
    non-empty micro-batches. Also an ``AssertionError``, the type
    Megatron-Core raises where it cannot schedule ("Not enough samples to
    move"), so a caller's ``except AssertionError`` still catches it."""


def _int_arg(name: str, value, lowest: int, *, none_ok: bool = False):
    """``value`` as an int >= ``lowest``; InvalidArgument naming ``name``
    and the value otherwise (bools and non-integral numbers are refused)."""
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        kind = "None or an integer" if none_ok else "an integer"
        raise InvalidArgument(f"{name}: expected {kind}, got {value!r} (a {type(value).__name__})")
    if int(value) < lowest:
        raise InvalidArgument(f"{name}: must be >= {lowest}, got {int(value)}")
    return int(value)


def _pairs(sample_id_seqlens):
    """(ids, lengths) as int64 arrays from ``[(id, seqlen), ...]`` (a list
    of pairs, an [n, 2] array or tensor). InvalidArgument names the entry
    and the value that is not a pair of non-negative integers, and an id
    given twice."""
    if hasattr(sample_id_seqlens, "detach"):
        sample_id_seqlens = sample_id_seqlens.detach().cpu().numpy()
    if isinstance(sample_id_seqlens, np.ndarray):
        if sample_id_seqlens.ndim != 2 or sample_id_seqlens.shape[1] != 2:
            raise InvalidArgument(
                f"sample_id_seqlens: expected (id, seqlen) pairs of shape [n, 2], got shape {sample_id_seqlens.shape}"
            )
        if sample_id_seqlens.size and not np.issubdtype(sample_id_seqlens.dtype, np.integer):
            raise InvalidArgument(f"sample_id_seqlens: expected integers, got dtype {sample_id_seqlens.dtype}")
        sample_id_seqlens = sample_id_seqlens.tolist()
    n = len(sample_id_seqlens)
    ids = np.empty(n, dtype=np.int64)
    lengths = np.empty(n, dtype=np.int64)
    for k, pair in enumerate(sample_id_seqlens):
        try:
            sid, seqlen = pair
        except (TypeError, ValueError):
            raise InvalidArgument(f"sample_id_seqlens[{k}]: expected an (id, seqlen) pair, got {pair!r}") from None
        for what, v in (("id", sid), ("seqlen", seqlen)):
            if hasattr(v, "item") and getattr(v, "ndim", 0) == 0:
                v = v.item()
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
                raise InvalidArgument(
                    f"sample_id_seqlens[{k}]: the {what} must be a non-negative integer, got {v!r}"
                )
        ids[k], lengths[k] = int(sid), int(seqlen)
    if n:
        order = np.argsort(ids, kind="stable")
        dup = np.flatnonzero(ids[order][1:] == ids[order][:-1])
        if dup.size:
            first, second = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
            raise InvalidArgument(
                f"sample_id_seqlens[{second}]: id {int(ids[second])} repeats sample_id_seqlens[{first}]"
            )
    return ids, lengths


class DpBalancedScheduler:
    """Megatron-Core's fixed-CP packing scheduler, planned by packd.

    ``DpBalancedScheduler(max_seqlen_per_dp_cp_rank, cp_size, dp_size,
    microbatch_group_size_per_vp_stage, max_num_seqs=None)`` as
    Megatron-Core constructs it (``microbatch_group_size_per_vp_stage`` is
    None without VPP; ``max_num_seqs``, the most sequences one micro-batch
    of a DP rank packs, is passed by Megatron-LM versions that have it and
    None means no limit). The keywords ``client`` (a ``packd.Client``;
    default: the embedded planner, or the server of ``PACKD_TARGET``) and
    ``cost`` (a ``packd.Cost`` or ``packd.Calibration``; default: packd's)
    are packd's own.

    Attributes are Megatron's: ``max_seqlen_per_dp_cp_rank``, ``cp_size``,
    ``dp_size``, ``microbatch_group_size_per_vp_stage``, ``max_num_seqs``,
    ``is_dynamic_cp`` and ``max_seq_len_all_ranks`` (the token cap of one DP
    rank's micro-batch, ``max_seqlen_per_dp_cp_rank * cp_size``).
    """

    # Megatron-Core's packing pipeline reads this (fixed CP here).
    is_dynamic_cp = False
    # The Megatron-Core classes whose ``run`` and ``get_required_sample_keys``
    # this one uses, in order of preference: the first the installed version
    # defines (the scheduler it stands in for, where that exists).
    _megatron_classes = ("DpBalancedScheduler",)

    def __init__(
        self,
        max_seqlen_per_dp_cp_rank,
        cp_size,
        dp_size,
        microbatch_group_size_per_vp_stage=None,
        max_num_seqs=None,
        *,
        client=None,
        cost=None,
    ):
        self.max_seqlen_per_dp_cp_rank = _int_arg("max_seqlen_per_dp_cp_rank", max_seqlen_per_dp_cp_rank, 1)
        self.cp_size = _int_arg("cp_size", cp_size, 1)
        self.dp_size = _int_arg("dp_size", dp_size, 1)
        self.microbatch_group_size_per_vp_stage = _int_arg(
            "microbatch_group_size_per_vp_stage", microbatch_group_size_per_vp_stage, 1, none_ok=True
        )
        self.max_num_seqs = _int_arg("max_num_seqs", max_num_seqs, 1, none_ok=True)
        self.max_seq_len_all_ranks = self.max_seqlen_per_dp_cp_rank * self.cp_size
        if self.max_seq_len_all_ranks > _INT32_MAX:
            raise InvalidArgument(
                f"max_seqlen_per_dp_cp_rank: {self.max_seqlen_per_dp_cp_rank} x cp_size {self.cp_size} = "
                f"{self.max_seq_len_all_ranks} tokens per micro-batch, above the planner's limit {_INT32_MAX}"
            )
        self.client = client
        self.cost = cost

    @property
    def microbatch_multiple(self) -> int:
        """The micro-batch count of every DP rank is a multiple of this
        (the VPP group size, or 1 without VPP)."""
        return self.microbatch_group_size_per_vp_stage or 1

    def get_required_sample_keys(self):
        """The sample keys Megatron-Core's ``run`` needs (Megatron's list)."""
        return _megatron_class(self._megatron_classes).get_required_sample_keys(self)

    def get_groups_and_subsamples(self, sample_id_seqlens):
        """Schedules ``sample_id_seqlens`` (``[(id, seqlen), ...]``, ids
        unique) into micro-batches.

        Returns ``sample_id_groups``: ``sample_id_groups[i][j]`` is the list
        of sample ids that DP x CP rank ``j`` packs in micro-batch ``i``, the
        same list for the ``cp_size`` ranks ``j`` of one DP rank ``j //
        cp_size`` (ids ascending). Every id appears in exactly one
        micro-batch of one DP rank; every DP rank has the same number of
        micro-batches, a multiple of ``microbatch_group_size_per_vp_stage``;
        no list is empty; each list's lengths sum to at most
        ``max_seq_len_all_ranks`` and it holds at most ``max_num_seqs`` ids.
        An empty input gives ``[]``.

        Raises InvalidArgument (a ValueError) for malformed input, and
        SchedulingError (also an AssertionError) when no such schedule
        exists, naming the sample or the counts."""
        ids, lengths = _pairs(sample_id_seqlens)
        n = int(ids.size)
        if n == 0:
            return []
        cap = self.max_seq_len_all_ranks
        over = np.flatnonzero(lengths > cap)
        if over.size:
            k = int(over[0])
            raise SchedulingError(
                f"sample_id_seqlens[{k}]: sample {int(ids[k])} has seqlen {int(lengths[k])}, above "
                f"max_seqlen_per_dp_cp_rank {self.max_seqlen_per_dp_cp_rank} x cp_size {self.cp_size} = {cap}"
            )
        fewest = self.dp_size * self.microbatch_multiple
        if n < fewest:
            raise SchedulingError(
                f"sample_id_seqlens: {n} samples cannot fill dp_size {self.dp_size} x "
                f"microbatch_group_size_per_vp_stage {self.microbatch_multiple} = {fewest} non-empty micro-batches"
            )
        client = self.client or default_client()
        # The cap is Megatron's: the padded lengths of one DP rank's
        # micro-batch sum to at most cap. The planner is asked with cp=1 and
        # that cap, so that it aligns nothing (Megatron's lengths arrive
        # padded) and the bound is exactly Megatron's; under fixed CP every
        # cost is the CP-1 cost divided by cp_size, so the balance is the same.
        try:
            plan = client.plan(
                lengths,
                dp=self.dp_size,
                max_tokens=cap,
                max_seqs=self.max_num_seqs or 0,
                microbatch_group=self.microbatch_multiple,
                cost=self.cost,
            )
        except FailedPrecondition as exc:
            raise SchedulingError(
                f"sample_id_seqlens: {n} samples cannot fill the micro-batches that the cap "
                f"max_seqlen_per_dp_cp_rank {self.max_seqlen_per_dp_cp_rank} x cp_size {self.cp_size} = {cap}"
                f"{self._seqs_note()} needs on each of dp_size {self.dp_size} ranks (the planner: {exc.message})"
            ) from None
        ranks = [rank.micro_batches for rank in plan]
        count = len(ranks[0])
        groups = []
        for i in range(count):
            row = []
            for rank in ranks:
                members = sorted(int(s) for s in ids[np.asarray(rank[i].seqs, dtype=np.int64)])
                row.extend([members] * self.cp_size)
            groups.append(row)
        return groups

    def _seqs_note(self) -> str:
        return "" if self.max_num_seqs is None else f" and max_num_seqs {self.max_num_seqs}"

    def run(self, *args, **kwargs):
        """Megatron-Core's pipeline around the schedule (gather lengths,
        schedule, reroute, pack, broadcast), from the installed
        Megatron-Core, with this scheduler's ``get_groups_and_subsamples``."""
        return _megatron_class(self._megatron_classes).run(self, *args, **kwargs)

    def __repr__(self) -> str:
        return (
            f"packd.megatron.DpBalancedScheduler(max_seqlen_per_dp_cp_rank={self.max_seqlen_per_dp_cp_rank}, "
            f"cp_size={self.cp_size}, dp_size={self.dp_size}, "
            f"microbatch_group_size_per_vp_stage={self.microbatch_group_size_per_vp_stage})"
        )


def _cost_arg(name: str, value) -> float:
    """``value`` as a finite float >= 0; InvalidArgument naming ``name``
    and the value otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise InvalidArgument(f"{name}: expected a finite number >= 0, got {value!r}")
    return float(value)


# The per-micro-batch cost the dynamic-CP scheduler adds where its cost has
# none, as a fraction of one GPU's cost at the cap: small enough to change
# no step that differs by more than rounding, large enough for the planner
# to tell the counts apart. Under linear and quadratic terms alone, merging
# micro-batches whose samples fit one group of the whole pool never raises
# the step, so equal steps at different counts are common; every
# micro-batch has fixed work (launches, pipeline fill) that such a cost
# leaves unpriced, and Megatron-LM's own dynamic-CP tests expect the
# fewer micro-batches.
_MICRO_BATCH_TIE = 1e-9


def _with_micro_batch_cost(cost, cap: int):
    """``cost`` (None: packd's default) as a packd.Cost whose
    per_micro_batch term is at least ``_MICRO_BATCH_TIE`` of the cost of
    ``cap`` tokens on one GPU, so that of two plans with the same step the
    planner keeps the one with fewer micro-batches."""
    import dataclasses

    from .calibration import Cost

    base = Cost() if cost is None else Cost.coerce(cost)
    if base.per_micro_batch > 0:
        return base
    linear, quadratic = base.linear, base.quadratic
    if linear == 0 and quadratic == 0:
        # The planner's default cost (pk_planner.h).
        linear, quadratic = 1.0, 1.0 / 24576.0
    full = linear * cap + quadratic * float(cap) * float(cap)
    return dataclasses.replace(base, per_micro_batch=_MICRO_BATCH_TIE * full)


def _aligned(length: int, size: int) -> int:
    """A sequence's tokens in a zigzag group of ``size`` GPUs (TP 1): a
    multiple of 2 x size, as the planner aligns it; unaligned at size 1."""
    if size == 1:
        return length
    step = 2 * size
    return -(-length // step) * step


class BalancedCPScheduler(DpBalancedScheduler):
    """Megatron-Core's dynamic ("hybrid") context-parallel scheduler,
    planned by packd's dynamic-CP planner.

    Constructed as Megatron-Core constructs its packing schedulers,
    ``BalancedCPScheduler(max_seqlen_per_dp_cp_rank, cp_size, dp_size,
    microbatch_group_size_per_vp_stage, max_num_seqs=None, *,
    min_cp_size=1)`` (the signature of Megatron-LM's
    ``DefaultDynamicCPScheduler``), with packd's ``client`` and ``cost``
    keywords as for ``DpBalancedScheduler``, and ``cp_token``, ``cp_group``
    (the CP cost terms, packd's default 0). The dp x cp GPUs are one pool in
    Megatron's dp-cp order; every micro-batch cuts it into groups of
    consecutive GPUs (a power of two at a multiple of its size, or the whole
    pool: the groups Megatron-LM's ``parallel_state`` makes for dynamic CP),
    each training its samples as one stream split over its GPUs.
    ``max_seqlen_per_dp_cp_rank`` is the hard per-GPU cap; ``min_cp_size``
    is the smallest group; ``max_num_seqs`` (None: no limit) the most
    sequences one group packs.

    Besides ``DpBalancedScheduler``'s attributes it has those of Megatron's
    ``DefaultDynamicCPScheduler``: ``max_seq_len_per_rank`` (the per-GPU
    cap), ``total_hdp_gpus`` (dp x cp) and ``min_cp_size``; ``run`` is that
    class's (``DpBalancedScheduler``'s where the installed version has no
    ``DefaultDynamicCPScheduler``).
    """

    # Megatron-Core's packing pipeline (``run``) reads this to tell a
    # dynamic-CP scheduler from a fixed-CP one.
    is_dynamic_cp = True
    _megatron_classes = ("DefaultDynamicCPScheduler", "DpBalancedScheduler")

    def __init__(
        self,
        max_seqlen_per_dp_cp_rank,
        cp_size,
        dp_size,
        microbatch_group_size_per_vp_stage=None,
        max_num_seqs=None,
        *,
        min_cp_size=1,
        client=None,
        cost=None,
        cp_token: float = 0.0,
        cp_group: float = 0.0,
    ):
        super().__init__(
            max_seqlen_per_dp_cp_rank,
            cp_size,
            dp_size,
            microbatch_group_size_per_vp_stage,
            max_num_seqs,
            client=client,
            cost=cost,
        )
        self.pool = self.dp_size * self.cp_size
        self.total_hdp_gpus = self.pool
        self.max_seq_len_per_rank = self.max_seqlen_per_dp_cp_rank
        self.min_cp_size = _int_arg("min_cp_size", min_cp_size, 1)
        if self.min_cp_size > self.pool:
            raise InvalidArgument(
                f"min_cp_size: {self.min_cp_size} is more than the dp_size {self.dp_size} x cp_size "
                f"{self.cp_size} = {self.pool} GPUs"
            )
        self.cp_token = _cost_arg("cp_token", cp_token)
        self.cp_group = _cost_arg("cp_group", cp_group)
        self._plan_cost = _with_micro_batch_cost(cost, self.max_seqlen_per_dp_cp_rank)

    def get_groups_and_subsamples(self, sample_id_seqlens):
        """Schedules ``sample_id_seqlens`` (``[(id, seqlen), ...]``, ids
        unique) over the dp x cp GPUs with dynamic CP.

        Returns ``sample_id_groups``: ``sample_id_groups[i][j]`` is the list
        of sample ids GPU ``j`` (its rank in the dp-cp group) trains in
        micro-batch ``i`` (ids ascending). The GPUs with one list form that
        micro-batch's CP group: consecutive, starting at a multiple of their
        count. Every id appears in exactly one group of one micro-batch; no
        list is empty; a group of c GPUs holds at most ``c x
        max_seqlen_per_dp_cp_rank`` tokens once aligned to 2c, and at most
        ``max_num_seqs`` samples; the count is a multiple of
        ``microbatch_group_size_per_vp_stage``. An empty input gives ``[]``.

        Raises InvalidArgument (a ValueError) for malformed input, and
        SchedulingError (also an AssertionError) when no such schedule
        exists (a sample longer than the pool holds, or too few samples for
        the micro-batch multiple)."""
        ids, lengths = _pairs(sample_id_seqlens)
        n = int(ids.size)
        if n == 0:
            return []
        cap, pool = self.max_seqlen_per_dp_cp_rank, self.pool
        over = np.flatnonzero(np.array([_aligned(int(a), pool) for a in lengths]) > pool * cap)
        if over.size:
            k = int(over[0])
            raise SchedulingError(
                f"sample_id_seqlens[{k}]: sample {int(ids[k])} has seqlen {int(lengths[k])}, more than the "
                f"dp_size {self.dp_size} x cp_size {self.cp_size} GPUs hold at max_seqlen_per_dp_cp_rank {cap}"
            )
        if n < self.microbatch_multiple:
            raise SchedulingError(
                f"sample_id_seqlens: {n} samples cannot fill microbatch_group_size_per_vp_stage "
                f"{self.microbatch_multiple} non-empty micro-batches"
            )
        client = self.client or default_client()
        try:
            plan = client.plan(
                lengths,
                dynamic_cp={"min_size": self.min_cp_size} if self.min_cp_size > 1 else True,
                **self._plan_args(),
            )
        except FailedPrecondition as exc:
            raise SchedulingError(f"sample_id_seqlens: no dynamic-CP schedule (the planner: {exc.message})") from None
        # A slot is a list of (first GPU, size, sequence indices).
        slots = []
        for slot in plan.slots:
            groups = [(int(g.first_gpu), int(g.size), [int(s) for s in g.seqs]) for g in slot.groups]
            if sum(size for _, size, _ in groups) != pool:
                # Some GPU is idle, which Megatron's format cannot say: the
                # slot becomes one group of the whole pool when its samples
                # fit the cap there.
                seqs = [s for _, _, q in groups for s in q]
                if not self._fits_pool(seqs, lengths):
                    raise SchedulingError(
                        f"sample_id_seqlens: micro-batch {len(slots)} leaves a GPU idle and its samples do not fit "
                        f"max_seqlen_per_dp_cp_rank {cap}{self._seqs_note()} on all {pool} GPUs"
                    )
                groups = [(0, pool, seqs)]
            slots.append(groups)
        self._round_to_multiple(slots, lengths)
        out = []
        for groups in slots:
            row = [None] * pool
            for first, size, seqs in groups:
                members = sorted(int(ids[s]) for s in seqs)
                for g in range(first, first + size):
                    row[g] = list(members)
            out.append(row)
        return out

    def _plan_args(self) -> dict:
        """The planner keywords of this scheduler's requests."""
        return dict(
            dp=self.dp_size,
            cp=self.cp_size,
            max_tokens=self.max_seqlen_per_dp_cp_rank,
            max_seqs=self.max_num_seqs or 0,
            cost=self._plan_cost,
            cp_token=self.cp_token,
            cp_group=self.cp_group,
        )

    def _round_to_multiple(self, slots: list, lengths) -> None:
        """Makes the slot count a multiple of the VPP group, in place:
        upwards by adding slots where the samples allow it, else downwards
        by merging slots; SchedulingError when neither keeps the cap."""
        m = self.microbatch_multiple
        if len(slots) % m == 0:
            return
        grown = [list(groups) for groups in slots]
        if self._grow(grown, lengths):
            slots[:] = grown
        elif len(slots) > m and self._shrink(slots, lengths):
            pass
        else:
            raise SchedulingError(
                f"sample_id_seqlens: {sum(len(q) for g in slots for _, _, q in g)} samples cannot fill a "
                f"multiple of microbatch_group_size_per_vp_stage {m} micro-batches under "
                f"max_seqlen_per_dp_cp_rank {self.max_seqlen_per_dp_cp_rank}{self._seqs_note()}"
            )

    def _fits_pool(self, seqs, lengths) -> bool:
        """Whether ``seqs`` fit the cap (and ``max_num_seqs``) as one group
        of the whole pool."""
        pool = self.pool
        if self.max_num_seqs is not None and len(seqs) > self.max_num_seqs:
            return False
        return sum(_aligned(int(lengths[x]), pool) for x in seqs) <= pool * self.max_seqlen_per_dp_cp_rank

    def _grow(self, slots: list, lengths) -> bool:
        """Adds slots until the count divides. A new slot is one group of
        the whole pool holding the shortest sample of a group of several
        (its old group only gets lighter; the sample needs no more per GPU
        across the pool than in its group, as a length aligned to 2 x pool
        over pool is at most the same length aligned to 2c over c); failing
        that, a slot of several groups becomes two whole-pool slots when
        both fit the cap. False when neither is possible."""
        m, pool = self.microbatch_multiple, self.pool
        while len(slots) % m:
            best = None
            for j, groups in enumerate(slots):
                for k, (_, _, seqs) in enumerate(groups):
                    if len(seqs) > 1:
                        s = min(seqs, key=lambda x: int(lengths[x]))
                        if best is None or lengths[s] < lengths[best[2]]:
                            best = (j, k, s)
            if best is not None:
                j, k, s = best
                first, size, seqs = slots[j][k]
                slots[j][k] = (first, size, [x for x in seqs if x != s])
                slots.append([(0, pool, [s])])
                continue
            for j, groups in enumerate(slots):
                if len(groups) > 1:
                    seqs = sorted((s for _, _, q in groups for s in q), key=lambda x: -int(lengths[x]))
                    halves = (seqs[0::2], seqs[1::2])
                    if all(self._fits_pool(h, lengths) for h in halves):
                        slots[j] = [(0, pool, halves[0])]
                        slots.append([(0, pool, halves[1])])
                        break
            else:
                return False
        return True

    def _shrink(self, slots: list, lengths) -> bool:
        """Merges the two lightest slots into one whole-pool slot until the
        count divides; False (slots unchanged) when a merge breaks the cap."""
        m, pool = self.microbatch_multiple, self.pool
        work = [list(groups) for groups in slots]
        while len(work) % m:
            load = [sum(_aligned(int(lengths[x]), pool) for _, _, q in g for x in q) for g in work]
            a, b = sorted(range(len(work)), key=lambda j: load[j])[:2]
            seqs = [x for j in (a, b) for _, _, q in work[j] for x in q]
            if not self._fits_pool(seqs, lengths):
                return False
            work = [g for j, g in enumerate(work) if j not in (a, b)] + [[(0, pool, seqs)]]
        slots[:] = work
        return True

    def __repr__(self) -> str:
        return (
            f"packd.megatron.BalancedCPScheduler(max_seqlen_per_dp_cp_rank={self.max_seqlen_per_dp_cp_rank}, "
            f"cp_size={self.cp_size}, dp_size={self.dp_size}, "
            f"microbatch_group_size_per_vp_stage={self.microbatch_group_size_per_vp_stage})"
        )


# packd's schedulers for Megatron-Core's registry, one row each: the name a
# config gives as ``sequence_packing_scheduler``, Megatron's own scheduler it
# can stand in for (``patch(replace=...)``), and the class.
SCHEDULERS = {
    "packd_dp_balanced": ("dp_balanced", DpBalancedScheduler),
    "packd_balanced_cp": ("default_dynamic_cp", BalancedCPScheduler),
}

# The keywords ``patch()`` passes on to the schedulers it registers, and the
# class that takes each (and so its subclasses): every packd scheduler plans
# through a client with a cost; the CP terms matter to the dynamic-CP one.
OPTIONS = {
    "client": DpBalancedScheduler,
    "cost": DpBalancedScheduler,
    "cp_token": BalancedCPScheduler,
    "cp_group": BalancedCPScheduler,
}


def bind(cls, **options):
    """A subclass of the packd scheduler ``cls`` whose constructor takes
    ``options`` (keywords of ``OPTIONS`` that ``cls`` accepts) as defaults;
    keywords the caller passes still win. Megatron-Core constructs a
    registered scheduler with its own arguments only, so this is how a
    registered one gets packd's client, cost or CP terms. ``cls`` itself
    when ``options`` is empty. ValueError naming an option ``cls`` does not
    take; InvalidArgument (a ValueError) for a bad ``cp_token`` or
    ``cp_group``."""
    for key in options:
        if key not in OPTIONS:
            raise ValueError(f"{key}: not an option of packd's Megatron schedulers (they take {sorted(OPTIONS)})")
        if not issubclass(cls, OPTIONS[key]):
            raise ValueError(f"{key}: {cls.__name__} does not take it (only {OPTIONS[key].__name__} and its subclasses)")
        if key in ("cp_token", "cp_group"):
            options[key] = _cost_arg(key, options[key])
    if not options:
        return cls
    defaults = dict(options)

    def __init__(self, *args, **kwargs):
        cls.__init__(self, *args, **{**defaults, **kwargs})

    return type(
        cls.__name__,
        (cls,),
        {"__init__": __init__, "__module__": cls.__module__, "__qualname__": cls.__qualname__, "options": defaults},
    )

_DATA_SCHEDULE = "megatron.core.datasets.data_schedule"


def _data_schedule():
    """Megatron-Core's registry module; ImportError saying what is missing
    where Megatron-Core is not installed or is a version without the
    registry (0.16 and older have no ``scheduler_map``). Megatron-LM main
    keys the registry by ``PackingSchedulerEnum`` members, its dev branch
    by the config strings themselves; both are accepted."""
    import importlib

    try:
        mod = importlib.import_module(_DATA_SCHEDULE)
    except ImportError as exc:
        raise ImportError(f"packd.megatron: cannot import {_DATA_SCHEDULE} ({exc})") from exc
    missing = [a for a in ("scheduler_map", "DpBalancedScheduler") if not hasattr(mod, a)]
    if missing:
        raise ImportError(
            f"packd.megatron: {_DATA_SCHEDULE} has no {', '.join(missing)}; this Megatron-Core version has no "
            "sequence-packing scheduler registry (it is in Megatron-LM main after 0.16)"
        )
    return mod


def _megatron_class(names: tuple):
    """The first class of ``names`` the installed Megatron-Core's registry
    module defines (the scheduler whose pipeline a packd scheduler runs)."""
    mod = _data_schedule()
    for name in names:
        cls = getattr(mod, name, None)
        if cls is not None:
            return cls
    raise ImportError(f"packd.megatron: {_DATA_SCHEDULE} has none of {', '.join(names)}")


def add_enum_member(enum_cls, name: str, value):
    """Adds the member ``name`` = ``value`` to the Enum class ``enum_cls``
    (lookup by name and value, attribute access, iteration) and returns it.
    Megatron-Core turns the config string into its scheduler enum with
    ``PackingSchedulerEnum[s.upper()]``, so a new scheduler name needs a
    member. ValueError when the name or the value is taken."""
    if name in enum_cls._member_map_ or name in enum_cls.__dict__:
        raise ValueError(f"{enum_cls.__name__}: a member or attribute named {name!r} exists already")
    if value in enum_cls._value2member_map_:
        raise ValueError(f"{enum_cls.__name__}: the value {value!r} belongs to {enum_cls(value)!r} already")
    member = object.__new__(enum_cls)
    member._name_ = name
    member._value_ = value
    member.__objclass__ = enum_cls
    member.__init__(value)
    # Attribute first: EnumType refuses to set an attribute named like a member.
    type.__setattr__(enum_cls, name, member)
    enum_cls._member_map_[name] = member
    enum_cls._value2member_map_[value] = member
    enum_cls._member_names_.append(name)
    return member


def remove_enum_member(enum_cls, member) -> None:
    """Undoes ``add_enum_member``."""
    name = member._name_
    enum_cls._member_names_.remove(name)
    del enum_cls._value2member_map_[member._value_]
    del enum_cls._member_map_[name]
    type.__delattr__(enum_cls, name)


# The name the patch is known by among packd's patches (one per process).
_NAME = "Megatron-Core"


class MegatronPatch(_patch.PatchHandle):
    """What ``packd.megatron.patch()`` registered; ``undo()`` restores
    Megatron-Core's registry. Usable as a context manager (undone on
    exit)."""

    restored = "packing schedulers restored"

    def __init__(self, replace: tuple, options: dict = None):
        super().__init__(_NAME)
        self.replace = replace
        self.options = dict(options or {})  # the keywords the registered classes default to


def _replace_names(replace) -> tuple:
    """The Megatron scheduler names ``replace`` asks for: all that packd has
    a stand-in for (True), none (False), or the names given."""
    stand_ins = sorted(m for m, _ in SCHEDULERS.values())
    if replace is True:
        return tuple(stand_ins)
    if replace is False or replace is None:
        return ()
    names = (replace,) if isinstance(replace, str) else tuple(replace)
    for name in names:
        if name not in stand_ins:
            raise ValueError(f"replace: packd has no stand-in for Megatron's scheduler {name!r} (it has {stand_ins})")
    return tuple(sorted(set(names)))


def patch(replace=False, *, client=None, cost=None, cp_token=None, cp_group=None) -> MegatronPatch:
    """Registers packd's schedulers in Megatron-Core's ``scheduler_map``:
    every row of ``SCHEDULERS`` under its own name (a config then selects it
    with ``sequence_packing_scheduler="packd_dp_balanced"``), and, for the
    Megatron names in ``replace`` (True: all packd can stand in for, e.g.
    ``"dp_balanced"``), packd's class in place of Megatron's. With
    ``replace=True`` a Megatron scheduler this version lacks (the dynamic-CP
    ``"default_dynamic_cp"`` is not in every version) is skipped and logged
    (``handle.skipped``); named explicitly, its absence is an ImportError.

    Under dynamic CP, ``replace=True`` is the way in: Megatron-LM's config
    check requires ``sequence_packing_scheduler="default_dynamic_cp"`` with
    ``dynamic_context_parallel``, and its ``wrap_data_iterator`` passes
    ``min_cp_size`` (the smallest CP group it made) to that name only.

    ``client``, ``cost``, ``cp_token`` and ``cp_group`` (None: the class's
    default) become the registered classes' defaults (``bind``), since
    Megatron-Core constructs them with its own arguments only: a planning
    server or a calibrated cost for both schedulers, the CP cost terms for
    the dynamic-CP one (``patch(replace=True, cost=cal.cost,
    cp_token=cal.cost.cp_token, cp_group=cal.cost.cp_group)``).

    Applied once per process: a second call with the same ``replace`` and
    options returns the active handle; one with others raises ValueError
    (undo the first). ImportError where Megatron-Core is missing or has no
    scheduler registry."""
    names = _replace_names(replace)
    options = {
        k: v for k, v in (("client", client), ("cost", cost), ("cp_token", cp_token), ("cp_group", cp_group)) if v is not None
    }
    classes = {
        own: bind(cls, **{k: v for k, v in options.items() if issubclass(cls, OPTIONS[k])})
        for own, (_, cls) in SCHEDULERS.items()
    }
    mod = _data_schedule()
    registry = mod.scheduler_map
    enum_cls = getattr(mod, "PackingSchedulerEnum", None)
    with _patch._lock:
        _active = _patch._active.get(_NAME)
        if _active is not None:
            if _active.replace != names:
                raise ValueError(
                    f"replace: packd.megatron.patch() is active with replace={list(_active.replace)}; "
                    f"undo() it before patching with replace={list(names)}"
                )
            if _active.options.keys() != options.keys() or any(
                _active.options[k] is not v and _active.options[k] != v for k, v in options.items()
            ):
                raise ValueError(
                    f"{', '.join(sorted(set(options) | set(_active.options)))}: packd.megatron.patch() is active "
                    "with other options; undo() it before patching with these"
                )
            return _active
        handle = MegatronPatch(names, options)
        try:
            for own, (stands_for, _) in SCHEDULERS.items():
                cls = classes[own]
                if enum_cls is None:
                    # The registry is keyed by the config string.
                    key, theirs = own, (stands_for if stands_for in registry else None)
                else:
                    # The config string becomes an enum member by its
                    # upper-cased name, which then keys the registry.
                    key = enum_cls._member_map_.get(own.upper())
                    if key is None:
                        key = add_enum_member(enum_cls, own.upper(), own)
                        handle._undo.append(lambda m=key: remove_enum_member(enum_cls, m))
                    theirs = enum_cls._member_map_.get(stands_for.upper())
                _put(handle, registry, key, cls)
                if stands_for in names:
                    if theirs is not None:
                        _put(handle, registry, theirs, cls)
                    elif replace is True:
                        # Megatron-Core versions differ in which schedulers
                        # they have; replace=True stands in for those present.
                        handle.skipped.append(stands_for)
                        _log.info("packd: this Megatron-Core has no scheduler %r; not replaced", stands_for)
                    else:
                        raise ImportError(
                            f"packd.megatron.patch(): this Megatron-Core has no scheduler {stands_for!r} to replace"
                        )
        except BaseException:
            for restore in reversed(handle._undo):
                restore()
            raise
        handle.active = True
        _patch._active[_NAME] = handle
    _log.info("packd: Megatron-Core packing schedulers registered: %s", ", ".join(handle.replaced))
    return handle


def _put(handle: MegatronPatch, registry: dict, key, cls) -> None:
    """Sets ``registry[key] = cls`` and records how to restore it."""
    _patch._set(handle, registry, key, cls, f"scheduler_map[{getattr(key, 'name', key)}]")
