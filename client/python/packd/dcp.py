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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _stubs

IDLE = (1 << 32) - 1  # DcpGpu.group of a GPU in no group.


def _frozen(values, dtype) -> np.ndarray:
    a = np.asarray(values, dtype=dtype)
    a.setflags(write=False)
    return a


@dataclass(frozen=True)
class GpuStep:
    """What one GPU does in one slot; ``group`` is None when it is idle."""

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

    def gpu(self, g: int) -> list:
        """GPU g's step in every slot, in slot order."""
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or not 0 <= g < self.pool:
            raise IndexError(f"gpu: {g!r} is not in [0, {self.pool})")
        out = []
        for j, slot in enumerate(self.slots):
            u = slot.gpus[g]
            if u.group == IDLE:
                empty = _frozen([], np.int32)
                out.append(GpuStep(j, None, 0, 0, g, _frozen([], np.int64), empty, empty, empty, 0))
                continue
            grp = slot.groups[u.group]
            out.append(GpuStep(
                slot=j, group=u.group, size=u.size, rank_in_group=u.rank_in_group,
                first_gpu=grp.first_gpu, seqs=_frozen(grp.seqs, np.int64),
                cu_seqlens=_frozen(grp.cu_seqlens, np.int32),
                cu_seqlens_padded=_frozen(grp.cu_seqlens_padded, np.int32),
                local_cu_seqlens_padded=_frozen(grp.local_cu_seqlens_padded, np.int32),
                shard_tokens=u.shard_tokens))
        return out

    def group_sizes(self) -> list:
        """Per slot, the sizes of its groups left to right."""
        return [[g.size for g in slot.groups] for slot in self.slots]

    def __repr__(self) -> str:
        return (f"DynamicCpPlan(pool={self.pool}, slots={len(self.slots)}, "
                f"step_cost={self._plan.step_cost:.6g}, bound={self._plan.step_cost_lower_bound:.6g})")
