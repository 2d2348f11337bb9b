"""packd.megatron.BalancedCPScheduler without Megatron-Core installed: the
output format of Megatron-Core's dynamic-CP scheduler (per micro-batch, per
DP x CP rank, the sample ids; ranks with one list form a CP group) and the
rules packd keeps, checked as properties on random batches; the errors."""

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

import packd  # noqa: E402
from packd import megatron  # noqa: E402
from packd.errors import InvalidArgument  # noqa: E402
from packd.megatron import BalancedCPScheduler, SchedulingError  # noqa: E402


@pytest.fixture(scope="module")
def client():
    return packd.Client.local()


def aligned(length, size):
    """A sequence's tokens in a zigzag group of ``size`` GPUs: a multiple of
    2 x size (unaligned alone)."""
    return length if size == 1 else -(-length // (2 * size)) * (2 * size)


def groups_of(row):
    """A micro-batch's groups as (first rank, size, ids): the maximal runs of
    equal lists. Asserts that no list is empty and that no list appears in
    two runs (a group's ranks are one contiguous block)."""
    runs = []
    for j, ids in enumerate(row):
        assert ids, f"rank {j} has an empty list"
        if runs and runs[-1][2] == ids:
            runs[-1][1] += 1
        else:
            runs.append([j, 1, ids])
    lists = [tuple(r[2]) for r in runs]
    assert len(set(lists)) == len(lists), f"a group's ranks are not contiguous: {row}"
    return [tuple(r) for r in runs]


def check_schedule(sched, pairs, out):
    """Every rule: shape, each id once, a group's ranks one aligned block of
    a power-of-two size (or the whole pool), the per-GPU cap, no empty rank,
    the VPP multiple."""
    pool = sched.dp_size * sched.cp_size
    seqlen = dict(pairs)
    seen = []
    for row in out:
        assert len(row) == pool
        for first, size, ids in groups_of(row):
            assert size == pool or (size & (size - 1) == 0 and first % size == 0), (first, size, pool)
            assert ids == sorted(ids) and all(type(s) is int for s in ids)
            assert sum(aligned(seqlen[s], size) for s in ids) <= size * sched.max_seqlen_per_dp_cp_rank
            seen.extend(ids)
    assert sorted(seen) == sorted(seqlen)
    assert len(out) % sched.microbatch_multiple == 0
    return len(out)


@st.composite
def requests(draw):
    """A feasible request: pool, cap, VPP group, then lengths that fit the
    pool, with arbitrary unique ids. The sample count is a multiple of the
    VPP group: every sample alone in a whole-pool micro-batch is a schedule,
    and splitting a micro-batch adds one, so every count from the least up
    to n exists and one of them is a multiple of the group. (With n not a
    multiple, 64 per GPU on one GPU, group 2 and lengths 11, 54, 54 need 3
    micro-batches and cannot have 4: no schedule exists.)"""
    dp = draw(st.integers(1, 8))
    cp = draw(st.sampled_from([1, 2, 4]))
    group = draw(st.sampled_from([None, 1, 2, 4]))
    per_gpu = draw(st.integers(64, 4096))
    pool = dp * cp
    longest = per_gpu * pool - 2 * pool
    n = (group or 1) * draw(st.integers(1, 80 // (group or 1)))
    lengths = draw(
        st.lists(
            st.one_of(st.integers(1, per_gpu), st.integers(1, max(1, longest))), min_size=n, max_size=n
        )
    )
    ids = draw(st.permutations(range(n)))
    offset = draw(st.sampled_from([0, 1000]))
    return (per_gpu, cp, dp, group), [(int(i) + offset, L) for i, L in zip(ids, lengths)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_schedule_rules(client, req):
    """On random feasible batches the schedule obeys every rule of
    Megatron's format and packd's cap."""
    args, pairs = req
    sched = BalancedCPScheduler(*args, client=client)
    check_schedule(sched, pairs, sched.get_groups_and_subsamples(pairs))


@settings(max_examples=30, deadline=None)
@given(requests())
def test_schedule_is_deterministic(client, req):
    """Every rank computes the schedule itself, so the same input gives the
    same schedule."""
    args, pairs = req
    a = BalancedCPScheduler(*args, client=client).get_groups_and_subsamples(pairs)
    assert a == BalancedCPScheduler(*args, client=client).get_groups_and_subsamples(pairs)


@settings(max_examples=40, deadline=None)
@given(requests(), st.sampled_from([2, 4]))
def test_min_cp_size(client, req, least):
    """Megatron's ``min_cp_size``: no group smaller, every other rule kept."""
    (per_gpu, cp, dp, group), pairs = req
    if dp * cp < least:
        with pytest.raises(InvalidArgument, match=f"min_cp_size: {least} is more than"):
            BalancedCPScheduler(per_gpu, cp, dp, group, min_cp_size=least)
        return
    sched = BalancedCPScheduler(per_gpu, cp, dp, group, min_cp_size=least, client=client)
    out = sched.get_groups_and_subsamples(pairs)
    check_schedule(sched, pairs, out)
    assert all(size >= least for row in out for _, size, _ in groups_of(row))


def test_long_sample_spans_groups_and_short_ones_share_a_gpu(client):
    """The worked batch: the longest sample takes every GPU, short samples
    train alone on one GPU (groups of 1), so the group sizes vary."""
    lengths = [30000, 12000, 9000, 7000, 5000, 4000, 3000, 2500, 2000, 1500, 1200, 800]
    pairs = list(enumerate(lengths))
    sched = BalancedCPScheduler(8192, 2, 4, None, client=client)
    out = sched.get_groups_and_subsamples(pairs)
    check_schedule(sched, pairs, out)
    sizes = {size for row in out for _, size, _ in groups_of(row)}
    assert 8 in sizes and 1 in sizes
    assert out[0] == [[0]] * 8


@pytest.mark.parametrize("group", [2, 3, 4, 8])
def test_vpp_multiple_adds_micro_batches(client, group):
    """A VPP group larger than the planner's slot count: micro-batches are
    added (samples moved into micro-batches of their own) until the count
    divides, every rule kept."""
    pairs = list(enumerate([30000, 12000, 9000, 7000, 5000, 4000, 3000, 2500, 2000, 1500, 1200, 800]))
    sched = BalancedCPScheduler(8192, 2, 4, group, client=client)
    out = sched.get_groups_and_subsamples(pairs)
    assert len(out) >= group
    check_schedule(sched, pairs, out)


def test_vpp_multiple_splits_micro_batches_of_single_samples(client):
    """Every group holds one sample: the count is raised by splitting a
    micro-batch of several groups into two whole-pool ones."""
    pairs = [(0, 100), (1, 100), (2, 100), (3, 100)]
    sched = BalancedCPScheduler(100, 1, 4, 2, client=client)
    out = sched.get_groups_and_subsamples(pairs)
    assert len(out) == 2
    check_schedule(sched, pairs, out)


def test_vpp_multiple_needs_enough_samples(client):
    sched = BalancedCPScheduler(1024, 2, 2, 4, client=client)
    with pytest.raises(SchedulingError, match="3 samples cannot fill microbatch_group_size_per_vp_stage 4"):
        sched.get_groups_and_subsamples([(0, 10), (1, 10), (2, 10)])
    with pytest.raises(AssertionError):
        sched.get_groups_and_subsamples([(0, 10), (1, 10), (2, 10)])


def test_vpp_multiple_past_the_sample_count_is_refused(client):
    """The cap forces 3 micro-batches (54 + 11 > 64 on one GPU) and the VPP
    group asks for a multiple of 2, but 3 samples cannot fill 4: no schedule
    exists, and the scheduler says so instead of breaking the cap."""
    sched = BalancedCPScheduler(64, 1, 1, 2, client=client)
    with pytest.raises(SchedulingError, match="3 samples cannot fill a multiple of microbatch_group_size_per_vp_stage 2"):
        sched.get_groups_and_subsamples([(0, 11), (1, 54), (2, 54)])


def test_sample_longer_than_the_pool(client):
    sched = BalancedCPScheduler(1000, 2, 2, None, client=client)
    with pytest.raises(SchedulingError, match=r"sample_id_seqlens\[1\]: sample 7 has seqlen 4001, more than"):
        sched.get_groups_and_subsamples([(3, 10), (7, 4001)])


def test_empty_input(client):
    assert BalancedCPScheduler(1000, 2, 2, None, client=client).get_groups_and_subsamples([]) == []


@pytest.mark.parametrize(
    "args, message",
    [
        ((0, 2, 2, None), "max_seqlen_per_dp_cp_rank: must be >= 1, got 0"),
        ((100, 2, 2.5, None), "dp_size: expected an integer, got 2.5"),
        ((100, True, 2, None), "cp_size: expected an integer, got True"),
        ((100, 2, 2, 0), "microbatch_group_size_per_vp_stage: must be >= 1, got 0"),
    ],
)
def test_bad_arguments(args, message):
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
        BalancedCPScheduler(*args)


@pytest.mark.parametrize("name, value", [("cp_token", -1.0), ("cp_group", float("nan")), ("cp_token", "1")])
def test_bad_cp_costs(name, value):
    with pytest.raises(InvalidArgument, match=f"{name}: expected a finite number >= 0, got"):
        BalancedCPScheduler(100, 2, 2, None, **{name: value})


def test_cp_costs_reach_the_planner(client):
    """With CP free the short samples may spread over the pool; priced,
    they train on one GPU each, side by side in one micro-batch."""
    pairs = list(enumerate([3000, 2900, 2800, 2700, 200, 150, 100, 50]))
    free = BalancedCPScheduler(1024, 2, 2, None, client=client)
    priced = BalancedCPScheduler(1024, 2, 2, None, client=client, cp_token=1.0, cp_group=1e6)
    a, b = free.get_groups_and_subsamples(pairs), priced.get_groups_and_subsamples(pairs)
    check_schedule(free, pairs, a)
    check_schedule(priced, pairs, b)
    short = {4, 5, 6, 7}
    assert all(size == 1 for row in b for _, size, ids in groups_of(row) if set(ids) <= short)
    assert [[4], [5], [6], [7]] in b
    # Free CP merges them with others into whole-pool groups: no more
    # micro-batches than priced.
    assert len(a) <= len(b) and [[4], [5], [6], [7]] not in a


def test_equal_steps_keep_fewer_micro_batches(client):
    """Two samples that fill the pool's cap together: one micro-batch (one
    group of both) costs the same under linear and quadratic terms as two
    (a group each), and the scheduler keeps the one: the planner's default
    cost prices no micro-batch, so the scheduler adds a vanishing one."""
    sched = BalancedCPScheduler(4096, 2, 1, None, client=client)
    assert sched.get_groups_and_subsamples([(0, 6144), (1, 2048)]) == [[[0, 1], [0, 1]]]
    # A caller's own per-micro-batch cost is kept as given.
    priced = BalancedCPScheduler(4096, 2, 1, None, client=client, cost=packd.Cost(per_micro_batch=5.0))
    assert priced._plan_cost.per_micro_batch == 5.0
    assert priced.get_groups_and_subsamples([(0, 6144), (1, 2048)]) == [[[0, 1], [0, 1]]]


def test_bad_samples(client):
    sched = BalancedCPScheduler(100, 2, 2, None, client=client)
    with pytest.raises(InvalidArgument, match=r"sample_id_seqlens\[1\]: id 0 repeats sample_id_seqlens\[0\]"):
        sched.get_groups_and_subsamples([(0, 5), (0, 6)])
    with pytest.raises(InvalidArgument, match=r"sample_id_seqlens\[0\]: the seqlen must be a non-negative integer"):
        sched.get_groups_and_subsamples([(0, -5)])


def test_megatron_constructs_it_as_verl_does():
    """verl builds Megatron's dynamic-CP scheduler with keywords."""
    sched = BalancedCPScheduler(
        max_seqlen_per_dp_cp_rank=4, cp_size=2, dp_size=2, microbatch_group_size_per_vp_stage=None
    )
    assert (sched.max_seqlen_per_dp_cp_rank, sched.cp_size, sched.dp_size, sched.pool) == (4, 2, 2, 4)


def test_scheduler_table_row():
    assert megatron.SCHEDULERS["packd_balanced_cp"] == ("default_dynamic_cp", BalancedCPScheduler)


def test_remote_server_gives_the_same_schedule(client):
    """With a server's client (PACKD_TARGET's way) the schedule is the
    embedded planner's."""
    from packd.testing import ServerProcess

    rng = np.random.default_rng(7)
    pairs = [(i, int(L)) for i, L in enumerate(rng.integers(1, 30000, size=120))]
    local = BalancedCPScheduler(4096, 2, 4, 2, client=client).get_groups_and_subsamples(pairs)
    with ServerProcess() as srv:
        with packd.Client(srv.target) as remote:
            assert BalancedCPScheduler(4096, 2, 4, 2, client=remote).get_groups_and_subsamples(pairs) == local


def test_vpp_multiple_merges_micro_batches(client):
    """One GPU and three short samples each planned alone: no sample can be
    moved out and no micro-batch split, so the two lightest merge."""
    pairs = [(0, 1), (1, 1), (2, 1)]
    sched = BalancedCPScheduler(64, 1, 1, 2, client=client)
    out = sched.get_groups_and_subsamples(pairs)
    assert len(out) == 2
    check_schedule(sched, pairs, out)


def test_vpp_multiple_out_of_reach(client):
    """Three samples of a full GPU each on one GPU: neither two nor four
    micro-batches hold them."""
    sched = BalancedCPScheduler(64, 1, 1, 2, client=client)
    with pytest.raises(SchedulingError, match="3 samples cannot fill a multiple of microbatch_group_size_per_vp_stage 2"):
        sched.get_groups_and_subsamples([(0, 64), (1, 64), (2, 64)])
