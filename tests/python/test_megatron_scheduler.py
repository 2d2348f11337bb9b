"""packd.megatron without Megatron-Core installed: the output format of
Megatron-Core's packing schedulers (per micro-batch, per DP x CP rank, the
sample ids) and the rules packd adds, checked as properties on random
batches; the errors; the enum extension patch() relies on. The same
scheduler inside Megatron-Core's registry and its own tests is checked in
tests/peers/megatron/."""

import enum
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

import packd  # noqa: E402
from packd import megatron  # noqa: E402
from packd.megatron import DpBalancedScheduler, SchedulingError  # noqa: E402


@pytest.fixture(scope="module")
def client():
    return packd.Client.local()


def check_schedule(sched, pairs, groups):
    """Every rule of the output: shape, each id once, CP ranks of one DP
    rank share one list, no empty list, the cap per DP rank, equal counts
    that are a multiple of the VPP group. Returns the count per DP rank."""
    dp, cp = sched.dp_size, sched.cp_size
    seqlen = dict(pairs)
    seen = []
    for row in groups:
        assert len(row) == dp * cp
        for r in range(dp):
            lists = row[r * cp : (r + 1) * cp]
            assert all(lst == lists[0] for lst in lists)
            members = lists[0]
            assert members, "an empty micro-batch"
            assert members == sorted(members)
            assert all(type(s) is int for s in members)
            assert sum(seqlen[s] for s in members) <= sched.max_seqlen_per_dp_cp_rank * cp
            seen.extend(members)
    assert sorted(seen) == sorted(seqlen)
    assert len(groups) % sched.microbatch_multiple == 0
    return len(groups)


@st.composite
def requests(draw):
    """A feasible request: sizes and a cap, then lengths under the cap and
    enough samples for dp x VPP group micro-batches, with arbitrary unique
    ids."""
    dp = draw(st.integers(1, 8))
    cp = draw(st.sampled_from([1, 2, 4]))
    group = draw(st.sampled_from([None, 1, 2, 4]))
    per_rank = draw(st.integers(64, 4096))
    cap = per_rank * cp
    n = draw(st.one_of(st.integers(dp * (group or 1), max(9, dp * (group or 1))), st.integers(dp * (group or 1), 96)))
    lengths = draw(st.lists(st.integers(1, cap), min_size=n, max_size=n))
    ids = draw(st.permutations(range(n)))
    offset = draw(st.sampled_from([0, 1000]))
    return (per_rank, cp, dp, group), [(int(i) + offset, L) for i, L in zip(ids, lengths)]


def first_fit_decreasing(lengths, cap):
    """The number of bins first-fit decreasing uses: an upper bound on the
    least number of micro-batches the cap allows."""
    bins = []
    for L in sorted(lengths, reverse=True):
        for b, room in enumerate(bins):
            if L <= room:
                bins[b] -= L
                break
        else:
            bins.append(cap - L)
    return len(bins)


def least_bins(lengths, cap):
    """The least number of bins of size cap that hold lengths (exact, by
    dynamic programming over subsets; for a few items only)."""
    n = len(lengths)
    full = (1 << n) - 1
    size = [0] * (1 << n)
    for m in range(1, 1 << n):
        low = (m & -m).bit_length() - 1
        size[m] = size[m & (m - 1)] + lengths[low]
    best = [0] + [n + 1] * full
    for m in range(1, 1 << n):
        low = m & -m
        sub = m
        while sub:
            if sub & low and size[sub] <= cap:
                best[m] = min(best[m], best[m ^ sub] + 1)
            sub = (sub - 1) & m
    return best[full]


def count_for(bins, dp, group):
    """Micro-batches per DP rank for at least ``bins`` non-empty bins on dp
    ranks, rounded up to the VPP group."""
    k = -(-bins // dp)
    return -(-k // group) * group


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(requests())
def test_schedule_rules(client, req):
    """On random batches: where a schedule exists (first-fit decreasing
    shows one, or an exact search over a few samples does), one that obeys
    every rule, with no more micro-batches per rank than first-fit
    decreasing needs; where none exists (too few samples to give every rank
    the count the cap needs), SchedulingError."""
    args, pairs = req
    sched = DpBalancedScheduler(*args, client=client)
    lengths = [L for _, L in pairs]
    dp, group, cap, n = sched.dp_size, sched.microbatch_multiple, sched.max_seq_len_all_ranks, len(pairs)
    ffd = count_for(first_fit_decreasing(lengths, cap), dp, group)
    if dp * ffd <= n:
        feasible = True
    else:
        assume(n <= 9)
        feasible = dp * count_for(least_bins(lengths, cap), dp, group) <= n
    if not feasible:
        with pytest.raises(SchedulingError, match="micro-batches"):
            sched.get_groups_and_subsamples(pairs)
        return
    k = check_schedule(sched, pairs, sched.get_groups_and_subsamples(pairs))
    assert k <= ffd
    assert k * dp * cap >= sum(lengths)


@settings(max_examples=60, deadline=None)
@given(requests())
def test_schedule_is_deterministic(client, req):
    """Every DP rank calls the scheduler on the same input and must get the
    same answer: two schedulers (two ranks) agree."""
    args, pairs = req
    a, b = DpBalancedScheduler(*args, client=client), DpBalancedScheduler(*args, client=client)
    try:
        first = a.get_groups_and_subsamples(pairs)
    except SchedulingError:
        with pytest.raises(SchedulingError):
            b.get_groups_and_subsamples(pairs)
        return
    assert b.get_groups_and_subsamples(list(reversed(pairs))[::-1]) == first


def test_least_count_and_vpp_multiple(client):
    """16 samples of a third of the cap on 2 DP ranks fit 3 to a micro-batch:
    3 micro-batches per rank (16 / 6, rounded up), and 4 with a VPP group
    of 2 (each count rounded up to the group)."""
    pairs = [(i, 1000) for i in range(16)]
    assert check_schedule(s := DpBalancedScheduler(1000, 3, 2, None, client=client), pairs,
                          s.get_groups_and_subsamples(pairs)) == 3
    assert check_schedule(s := DpBalancedScheduler(1000, 3, 2, 2, client=client), pairs,
                          s.get_groups_and_subsamples(pairs)) == 4


def test_balances_heavy_samples(client):
    """Two long and many short samples on 2 DP ranks: each rank gets one
    long one in the same slot (Megatron's in-order packing puts them where
    they fall)."""
    pairs = [(0, 7000), (1, 7000)] + [(i, 500) for i in range(2, 30)]
    sched = DpBalancedScheduler(8192, 1, 2, None, client=client)
    groups = sched.get_groups_and_subsamples(pairs)
    check_schedule(sched, pairs, groups)
    where = {s: (i, j) for i, row in enumerate(groups) for j, lst in enumerate(row) for s in lst}
    assert where[0][1] != where[1][1]


@pytest.mark.parametrize(
    "given_as", ["list", "tuples", "numpy", "torch"],
)
def test_input_kinds(client, given_as):
    """Megatron passes a list of (id, seqlen) tuples; lists of lists, [n, 2]
    arrays and tensors give the same schedule."""
    pairs = [(i, L) for i, L in enumerate([300, 700, 100, 900, 50, 60, 400, 800])]
    conv = {
        "list": lambda p: [list(x) for x in p],
        "tuples": lambda p: p,
        "numpy": lambda p: np.array(p, dtype=np.int32),
        "torch": lambda p: torch.tensor(p, dtype=torch.int64),
    }[given_as]
    sched = DpBalancedScheduler(1000, 1, 2, None, client=client)
    assert sched.get_groups_and_subsamples(conv(pairs)) == sched.get_groups_and_subsamples(pairs)


def test_empty_input(client):
    assert DpBalancedScheduler(1000, 2, 4, 2, client=client).get_groups_and_subsamples([]) == []


def test_megatron_attributes():
    s = DpBalancedScheduler(4096, 2, 4, 2)
    assert (s.max_seqlen_per_dp_cp_rank, s.cp_size, s.dp_size, s.microbatch_group_size_per_vp_stage) == (4096, 2, 4, 2)
    assert s.max_seq_len_all_ranks == 8192
    assert DpBalancedScheduler(4096, 2, 4, None).microbatch_multiple == 1


@pytest.mark.parametrize(
    "args, message",
    [
        ((0, 1, 1, None), "max_seqlen_per_dp_cp_rank: must be >= 1, got 0"),
        ((4096.0, 1, 1, None), "max_seqlen_per_dp_cp_rank: expected an integer, got 4096.0"),
        ((4096, 0, 1, None), "cp_size: must be >= 1, got 0"),
        ((4096, True, 1, None), "cp_size: expected an integer, got True"),
        ((4096, 1, -2, None), "dp_size: must be >= 1, got -2"),
        ((4096, 1, 1, 0), "microbatch_group_size_per_vp_stage: must be >= 1, got 0"),
        ((4096, 1, 1, "2"), "microbatch_group_size_per_vp_stage: expected None or an integer, got '2'"),
        (((1 << 30), 4, 1, None), "above the planner's limit"),
    ],
)
def test_bad_arguments(args, message):
    with pytest.raises(packd.InvalidArgument) as err:
        DpBalancedScheduler(*args)
    assert message in err.value.message
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    "pairs, message",
    [
        ([(0, 10), (1, -3)], "sample_id_seqlens[1]: the seqlen must be a non-negative integer, got -3"),
        ([(0, 10), (1, 2.5)], "sample_id_seqlens[1]: the seqlen must be a non-negative integer, got 2.5"),
        ([(0, 10), ("a", 3)], "sample_id_seqlens[1]: the id must be a non-negative integer, got 'a'"),
        ([(0, 10), (5,)], "sample_id_seqlens[1]: expected an (id, seqlen) pair, got (5,)"),
        ([(4, 10), (5, 3), (4, 7)], "sample_id_seqlens[2]: id 4 repeats sample_id_seqlens[0]"),
        (np.zeros((3, 3), dtype=np.int64), "expected (id, seqlen) pairs of shape [n, 2], got shape (3, 3)"),
        (np.zeros((3, 2)), "expected integers, got dtype float64"),
    ],
)
def test_bad_samples(client, pairs, message):
    with pytest.raises(packd.InvalidArgument) as err:
        DpBalancedScheduler(1000, 1, 1, None, client=client).get_groups_and_subsamples(pairs)
    assert message in err.value.message


def test_sample_over_the_cap(client):
    """A sample longer than the cap: Megatron gives it a micro-batch of its
    own over the cap; packd refuses, naming it, with an error that is also
    the AssertionError Megatron raises where it cannot schedule."""
    sched = DpBalancedScheduler(1000, 2, 2, None, client=client)
    with pytest.raises(AssertionError) as err:
        sched.get_groups_and_subsamples([(7, 100), (8, 2001), (9, 300), (10, 5)])
    assert isinstance(err.value, SchedulingError) and isinstance(err.value, packd.FailedPrecondition)
    assert err.value.message == (
        "sample_id_seqlens[1]: sample 8 has seqlen 2001, above max_seqlen_per_dp_cp_rank 1000 x cp_size 2 = 2000"
    )


def test_too_few_samples(client):
    with pytest.raises(SchedulingError) as err:
        DpBalancedScheduler(1000, 1, 4, 2, client=client).get_groups_and_subsamples([(i, 10) for i in range(7)])
    assert err.value.message == (
        "sample_id_seqlens: 7 samples cannot fill dp_size 4 x microbatch_group_size_per_vp_stage 2 = 8 "
        "non-empty micro-batches"
    )


def test_cap_needs_more_micro_batches_than_samples(client):
    """4 samples of the full cap on 2 ranks with a VPP group of 2 fit (two
    per rank); 3 such samples on 2 ranks need 2 micro-batches on one rank
    and so on both, which 3 samples cannot fill: SchedulingError from the
    planner, passed on with the field named."""
    sched = DpBalancedScheduler(1000, 1, 2, None, client=client)
    check_schedule(sched, p := [(i, 1000) for i in range(4)], sched.get_groups_and_subsamples(p))
    with pytest.raises(SchedulingError) as err:
        sched.get_groups_and_subsamples([(i, 1000) for i in range(3)])
    assert err.value.message.startswith("sample_id_seqlens: ")
    assert "micro-batches" in err.value.message


def test_patch_without_megatron():
    """Where Megatron-Core is not installed patch() says so and changes
    nothing."""
    with pytest.raises(ImportError, match="packd.megatron: cannot import megatron.core.datasets.data_schedule"):
        megatron.patch()
    with pytest.raises(ValueError, match="replace: packd has no stand-in for Megatron's scheduler 'fifo'"):
        megatron.patch(replace=["fifo"])


def test_megatron_pipeline_needs_megatron():
    """run() and get_required_sample_keys() are Megatron's own: without
    Megatron-Core they raise ImportError saying so."""
    sched = DpBalancedScheduler(4096, 1, 1, None)
    for call in (lambda: sched.run(None, 1, None, None, None, None, "cpu", None), sched.get_required_sample_keys):
        with pytest.raises(ImportError, match="packd.megatron: cannot import megatron.core.datasets.data_schedule"):
            call()


def test_scheduler_table():
    """Every row: a config name, the Megatron scheduler it stands in for,
    and a class with Megatron's constructor and scheduling method."""
    for name, (stands_for, cls) in megatron.SCHEDULERS.items():
        assert name == name.lower() and name.startswith("packd_") and stands_for == stands_for.lower()
        assert callable(getattr(cls, "get_groups_and_subsamples"))
        assert callable(getattr(cls, "run"))


class Sched(enum.Enum):
    """An enum shaped like Megatron's PackingSchedulerEnum."""

    DP_BALANCED = "dp_balanced"


def test_enum_member_added_and_removed():
    m = megatron.add_enum_member(Sched, "PACKD_DP_BALANCED", "packd_dp_balanced")
    try:
        assert Sched["PACKD_DP_BALANCED"] is m and Sched("packd_dp_balanced") is m
        assert Sched.PACKD_DP_BALANCED is m and isinstance(m, Sched)
        assert [s.name for s in Sched] == ["DP_BALANCED", "PACKD_DP_BALANCED"]
        assert m.value == "packd_dp_balanced" and hash(m) == hash(m) and {m: 1}[Sched["PACKD_DP_BALANCED"]] == 1
        with pytest.raises(ValueError, match="a member or attribute named 'PACKD_DP_BALANCED' exists already"):
            megatron.add_enum_member(Sched, "PACKD_DP_BALANCED", "other")
        with pytest.raises(ValueError, match="the value 'dp_balanced' belongs to"):
            megatron.add_enum_member(Sched, "OTHER", "dp_balanced")
    finally:
        megatron.remove_enum_member(Sched, m)
    assert [s.name for s in Sched] == ["DP_BALANCED"]
    assert not hasattr(Sched, "PACKD_DP_BALANCED")
    with pytest.raises(KeyError):
        Sched["PACKD_DP_BALANCED"]


def test_remote_server_gives_the_same_schedule(client):
    """A scheduler with a server's client plans the same as the embedded
    planner (the plans are deterministic either way)."""
    from packd.testing import ServerProcess

    rng = np.random.default_rng(5)
    pairs = [(i, int(L)) for i, L in enumerate(rng.integers(1, 8192, size=200))]
    local = DpBalancedScheduler(4096, 2, 4, 2, client=client).get_groups_and_subsamples(pairs)
    with ServerProcess() as srv:
        with packd.Client(srv.target) as remote:
            assert DpBalancedScheduler(4096, 2, 4, 2, client=remote).get_groups_and_subsamples(pairs) == local
