"""Dynamic context-parallel plans (PlanResponse.dynamic_cp) as Python views.

``Client.plan(lengths, dp=..., cp=..., max_tokens=..., dynamic_cp=True)``
returns a DynamicCpPlan: the dp x cp GPUs form one pool (Megatron-Core's
dp-cp order) and every slot cuts it into groups (docs/design.md, "Dynamic
context parallelism"). ``plan.gpu(g)`` is what GPU g runs, slot by slot:

    for step in plan.gpu(rank):            # one entry per slot
        step.size, step.rank_in_group      # its CP group size and CP rank
        step.seqs                          # the group's sequence indices
        step.cu_seqlens_padded             # the group's packed stream
        step.local_cu_seqlens_padded       # this GPU's shard (zigzag offsets)

A worker that holds only the plan id fetches the same view from the server:
``client.rank_plan(plan_id, g)`` (GetRankPlan, whose RankPlan then carries
the GPU's slice of the plan in ``dynamic_cp``) equals ``plan.gpu(g)``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from . import _stubs
from .errors import InvalidArgument

IDLE = (1 << 32) - 1  # DcpGpu.group of a GPU in no group.


def _frozen(values, dtype) -> np.ndarray:
    a = np.asarray(values, dtype=dtype)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class GpuStep:
    """What one GPU does in one slot; ``group`` is None when it is idle.
    Steps compare equal when every field does (arrays element by element)."""

    slot: int
    group: int | None
    size: int
    rank_in_group: int
    first_gpu: int
    seqs: np.ndarray
    cu_seqlens: np.ndarray
    cu_seqlens_padded: np.ndarray
    local_cu_seqlens_padded: np.ndarray
    shard_tokens: int

    def __eq__(self, other):
        if not isinstance(other, GpuStep):
            return NotImplemented
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
                if not np.array_equal(a, b):
                    return False
            elif a != b:
                return False
        return True

    __hash__ = None  # Holds arrays: not hashable.


def _step(j: int, g: int, u, grp) -> GpuStep:
    """GPU g's step in slot j from its DcpGpu u and its DcpGroup (None when idle)."""
    if u.group == IDLE:
        empty = _frozen([], np.int32)
        return GpuStep(j, None, 0, 0, g, _frozen([], np.int64), empty, empty, empty, 0)
    return GpuStep(
        slot=j, group=u.group, size=u.size, rank_in_group=u.rank_in_group,
        first_gpu=grp.first_gpu, seqs=_frozen(grp.seqs, np.int64),
        cu_seqlens=_frozen(grp.cu_seqlens, np.int32),
        cu_seqlens_padded=_frozen(grp.cu_seqlens_padded, np.int32),
        local_cu_seqlens_padded=_frozen(grp.local_cu_seqlens_padded, np.int32),
        shard_tokens=u.shard_tokens)


class GpuPlan(list):
    """One GPU's part of a dynamic-CP plan: its GpuStep in every slot, in
    slot order. ``DynamicCpPlan.gpu(g)`` and ``Client.rank_plan(plan_id,
    g)`` both return one, and for the same plan and GPU they are equal
    (list equality, step by step). ``gpu`` is the GPU's index in the pool,
    ``message`` the RankPlan it came from (None when sliced from a whole
    plan)."""

    def __init__(self, steps, *, gpu: int, pool: int, plan_id: str, message=None):
        super().__init__(steps)
        self.gpu = gpu
        self.pool = pool
        self.plan_id = plan_id
        self.message = message

    @classmethod
    def from_message(cls, message) -> "GpuPlan":
        """The view of a RankPlan whose dynamic_cp is set (GetRankPlan's
        answer for a dynamic-CP plan)."""
        if not message.HasField("dynamic_cp"):
            raise ValueError("not a dynamic-CP RankPlan (dynamic_cp is not set)")
        g = message.dp_rank
        steps = [_step(j, g, s.gpu, s.group if s.HasField("group") else None)
                 for j, s in enumerate(message.dynamic_cp.slots)]
        return cls(steps, gpu=g, pool=message.dynamic_cp.pool, plan_id=message.plan_id,
                   message=message)

    def __repr__(self) -> str:
        return f"GpuPlan(plan_id={self.plan_id!r}, gpu={self.gpu}, pool={self.pool}, slots={len(self)})"


def rank_plan_message(response, g: int):
    """GPU g's RankPlan of a dynamic-CP PlanResponse, as GetRankPlan
    answers it: dp_rank g, the plan id and, per slot, the whole plan's
    DcpGpu of g and the DcpGroup it is in (absent when idle). Raises
    InvalidArgument naming dp_rank when g is not a GPU of the pool."""
    plan = response.dynamic_cp
    if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or not 0 <= g < plan.pool:
        raise InvalidArgument(f"dp_rank: {g!r} is not a GPU of plan {response.plan_id} (pool {plan.pool})")
    g = int(g)
    out = _stubs.pb2().RankPlan(dp_rank=g, plan_id=response.plan_id)
    view = out.dynamic_cp
    view.SetInParent()
    view.pool = plan.pool
    for slot in plan.slots:
        s = view.slots.add()
        u = slot.gpus[g]
        s.gpu.SetInParent()
        s.gpu.CopyFrom(u)
        if u.group != IDLE:
            s.group.SetInParent()
            s.group.CopyFrom(slot.groups[u.group])
    return out


class DynamicCpPlan:
    """A PlanResponse with dynamic_cp set. ``slots`` are the DcpSlot
    messages; ``gpu(g)`` the per-GPU view; the plan's figures are
    attributes (``step_cost``, ``step_cost_lower_bound``, ``efficiency``,
    ``idle_gpu_slots``, ...)."""

    def __init__(self, response, lengths=None):
        if not response.HasField("dynamic_cp"):
            raise ValueError("not a dynamic-CP PlanResponse (dynamic_cp is not set)")
        self.response = response
        self.lengths = None if lengths is None else _frozen(np.asarray(lengths).copy(), np.int64)
        self._plan = response.dynamic_cp
        self.slots = list(self._plan.slots)

    @classmethod
    def from_bytes(cls, data: bytes, lengths=None) -> "DynamicCpPlan":
        return cls(_stubs.pb2().PlanResponse.FromString(data), lengths)

    @property
    def plan_id(self) -> str:
        return self.response.plan_id

    @property
    def pool(self) -> int:
        return self._plan.pool

    def __len__(self) -> int:
        return len(self.slots)

    def __getattr__(self, name):
        # The DynamicCpPlan figures (step_cost, slots_lower_bound, ...).
        if name.startswith("_") or name in ("response", "slots", "lengths"):
            raise AttributeError(name)
        return getattr(self._plan, name)

    def gpu(self, g: int) -> GpuPlan:
        """GPU g's step in every slot, in slot order (a GpuPlan, equal to
        ``Client.rank_plan(plan_id, g)``)."""
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or not 0 <= g < self.pool:
            raise IndexError(f"gpu: {g!r} is not in [0, {self.pool})")
        steps = []
        for j, slot in enumerate(self.slots):
            u = slot.gpus[g]
            steps.append(_step(j, int(g), u, None if u.group == IDLE else slot.groups[u.group]))
        return GpuPlan(steps, gpu=int(g), pool=self.pool, plan_id=self.plan_id)

    def group_sizes(self) -> list:
        """Per slot, the sizes of its groups left to right."""
        return [[g.size for g in slot.groups] for slot in self.slots]

    def __repr__(self) -> str:
        return (f"DynamicCpPlan(pool={self.pool}, slots={len(self.slots)}, "
                f"step_cost={self._plan.step_cost:.6g}, bound={self._plan.step_cost_lower_bound:.6g})")
