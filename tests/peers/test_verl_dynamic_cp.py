"""verl's dynamic context parallelism (``verl.utils.dynamic_cp_scheduler``,
verl 0.9 and later) with packd patched in: verl's own
``DynamicCPScheduler.schedule`` builds packd's scheduler through
``get_megatron_dynamic_cp_scheduler_cls`` and runs packd's plan, with verl's
checks (every rank has work, groups contiguous and aligned) passing on
random batches; its padding masks then count every real token once per
group."""

import pytest

dcp = pytest.importorskip("verl.utils.dynamic_cp_scheduler")

import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tensordict import TensorDict  # noqa: E402

import packd.megatron  # noqa: E402
import packd.verl  # noqa: E402


class Ranks:
    """The part of a DP x CP process group that ``schedule`` reads: its
    size and this process's rank in it (the schedule of every rank is
    computed here, in one process)."""

    def __init__(self, size, rank):
        self._size, self._rank = size, rank

    def size(self):
        return self._size

    def rank(self):
        return self._rank


def batch_of(lengths):
    ids = torch.nested.as_nested_tensor([torch.arange(n) for n in lengths], layout=torch.jagged)
    return TensorDict({"input_ids": ids, "sample": torch.arange(len(lengths))}, batch_size=[len(lengths)])


def test_patch_returns_packds_scheduler(patched_verl):
    assert "verl.utils.dynamic_cp_scheduler.get_megatron_dynamic_cp_scheduler_cls" in patched_verl.replaced
    assert dcp.get_megatron_dynamic_cp_scheduler_cls() is packd.megatron.BalancedCPScheduler
    patched_verl.undo()
    assert dcp.get_megatron_dynamic_cp_scheduler_cls is not packd.verl.get_megatron_dynamic_cp_scheduler_cls


@settings(max_examples=40, deadline=None)
@given(
    dp=st.sampled_from([1, 2, 4]),
    cp=st.sampled_from([1, 2]),
    cap=st.sampled_from([64, 256, 1024]),
    tp=st.sampled_from([1, 2]),
    layout=st.sampled_from(["zigzag", "contiguous"]),
    data=st.data(),
)
def test_schedule_runs_packds_plan(dp, cp, cap, tp, layout, data):
    """Every rank's micro-batches from verl's schedule: the same count on
    every rank, each sample in exactly one group's leader, the group's real
    tokens (the unmasked entries of its ranks' padding masks) equal its
    samples' lengths."""
    pool = dp * cp
    lengths = data.draw(st.lists(st.integers(1, cap * pool - 2 * pool), min_size=1, max_size=40))
    batch = batch_of(lengths)
    sched = dcp.DynamicCPScheduler(max_seqlen_per_dp_cp_rank=cap, dp_size=dp, cp_size=cp)
    with packd.verl.patch():
        per_rank = [sched.schedule(batch, Ranks(pool, r), tp_size=tp, cp_layout=layout) for r in range(pool)]
    counts = {len(mbs) for mbs in per_rank}
    assert len(counts) == 1
    led = []
    for i in range(counts.pop()):
        real = {}
        for r in range(pool):
            mb = per_rank[r][i]
            ids = tuple(mb[dcp.DCP_SAMPLE_IDS])
            assert mb["sample"].tolist() == list(ids)
            real[ids] = real.get(ids, 0) + mb[dcp.DCP_LOCAL_NUM_TOKENS]
            if mb[dcp.DCP_GROUP_LEADER]:
                led.extend(ids)
        for ids, tokens in real.items():
            assert tokens == sum(lengths[s] for s in ids)
    assert sorted(led) == list(range(len(lengths)))
