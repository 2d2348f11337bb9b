"""The Python API surface: plan() keywords mirror the proto, enum spellings,
Plan views (read-only, shared memory), dispatch helpers and restore, and the
planner's layouts checked against packd.layout's formulas."""

import inspect
import os
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

import packd  # noqa: E402
from packd import _request, layout  # noqa: E402


@pytest.fixture(scope="module")
def client():
    return packd.Client.local()


def test_plan_keywords_are_the_proto_fields_with_proto_defaults():
    sig = inspect.signature(packd.Client.plan)
    fmap = _request.field_map()
    params = {k: p for k, p in sig.parameters.items() if k not in ("self", "lengths")}
    # cost= sets the Cost fields at once (a packd.Cost or Calibration).
    assert set(fmap) | {"loss_tokens", "groups", "cost"} == set(params), "one keyword per PlanRequest field"
    for name, (_, field) in fmap.items():
        p = params[name]
        assert p.kind == inspect.Parameter.KEYWORD_ONLY
        default = p.default
        if field.enum_type is not None:
            default = _request.enum_value(field, default)
        assert default == field.default_value, name


def test_enum_spellings(client):
    field = _request.field_map()["dp_balance"][1]
    for spelling in ("kk_equal", "KK_EQUAL", "DP_BALANCE_KK_EQUAL", 3):
        assert _request.enum_value(field, spelling) == 3
    assert _request.enum_name(field, 6) == "sorted_stride"
    req = _request.build([1, 2, 3], dp=1, cp_algo="ulysses", order="HEAVY_MIDDLE")
    assert req.parallel.cp_algo == 1 and req.batching.order == 1


def test_defaults_stay_unset():
    req = _request.build([4, 5], dp=2)
    assert not req.HasField("batching") and not req.HasField("cost") and not req.HasField("layout")
    assert req.parallel.dp == 2
    req = _request.build([4, 5], dp=2, quadratic=0.5)
    assert req.HasField("cost") and req.cost.quadratic == 0.5


def test_views_are_read_only_and_shared(client):
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 5000, size=500)
    plan = client.plan(lengths, dp=4, max_tokens=16384, mini_batches=2)
    order = plan.order()
    with pytest.raises(ValueError):
        order[0] = 1
    for rank in plan:
        for mini in rank.mini_batches:
            assert np.shares_memory(mini.seqs, order)
            for mb in mini:
                assert np.shares_memory(mb.seqs, order)
                assert mb.cu_seqlens.flags.writeable is False
        assert rank.loss_scale.shape == (len(rank),)
        assert rank.max_seqlen.dtype == np.int64 and len(rank.cu_seqlens) == len(rank)
    assert plan.micro(1, 1, 0).seqs.tolist() == plan[1].mini_batches[1].micro_batches[0].seqs.tolist()
    with pytest.raises(IndexError):
        plan.micro(0, 0, 10_000)


def test_split_and_restore_invert_each_other(client):
    rng = np.random.default_rng(1)
    n = 257
    lengths = rng.integers(1, 3000, size=n)
    plan = client.plan(lengths, dp=5, max_tokens=8192)
    data = rng.normal(size=(n, 3))
    parts = plan.split(data)
    assert [p.shape[0] for p in parts] == plan.rank_sizes().tolist()
    assert np.array_equal(plan.restore(parts), data)
    assert np.array_equal(plan.restore(np.concatenate(parts)), data)
    per_micro = [data[mb.seqs] for mb in plan.micro_batches]
    assert np.array_equal(plan.restore(per_micro), data)
    names = [f"s{i}" for i in range(n)]
    assert plan.restore([names[i] for i in plan.order()]) == names
    with pytest.raises(ValueError, match="expected 257 rows"):
        plan.restore(np.zeros((3, 2)))


@pytest.mark.parametrize(
    "kw",
    [
        dict(cp=2), dict(cp=4, tp=2), dict(cp=2, cp_algo="ulysses", tp=2), dict(tp=4, sequence_parallel=True),
        dict(cp=2, pad_multiple=16), dict(),
    ],
)
def test_planner_layout_matches_the_formulas(client, kw):
    """The planner's cu_seqlens_padded are the layout formulas with the
    alignment A of README.md's rule 4 (packd.layout.default_align): an
    independent check of the C layout code."""
    rng = np.random.default_rng(len(kw))
    lengths = np.concatenate([rng.integers(0, 4, size=20), rng.integers(1, 9000, size=200)])
    plan = client.plan(lengths, dp=4, max_tokens=24576, **kw)
    align = layout.default_align(kw.get("cp", 1), kw.get("tp", 1), kw.get("cp_algo", "zigzag"),
                                 kw.get("sequence_parallel", False), kw.get("pad_multiple", 1))
    assert plan.stats.alignment == align
    for mb in plan.micro_batches:
        ref = layout.make_micro(lengths[mb.seqs], align, mb.seqs)
        assert np.array_equal(ref.cu_seqlens, mb.cu_seqlens)
        assert np.array_equal(ref.cu_seqlens_padded, mb.cu_seqlens_padded)
        assert mb.max_seqlen >= ref.max_seqlen
        # Every micro-batch can be laid out for each CP rank.
        cp = kw.get("cp", 1)
        algo = kw.get("cp_algo", "zigzag")
        sizes = {layout.partition_index(mb, cp, r, algo, kw.get("tp", 1)).size for r in range(cp)}
        assert len(sizes) == 1 and sizes.pop() <= 24576


def test_groups_on_rank(client):
    """groups_on_rank through the keyword: every group on one rank, equal
    group counts with equal_count, and INVALID_ARGUMENT naming the field."""
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 1 << 62, size=96, dtype=np.uint64)
    assert len(set(ids.tolist())) == 96
    groups = np.repeat(ids, 8)  # 96 GRPO groups of 8, random 64-bit ids
    lengths = rng.integers(200, 12000, size=groups.size)
    req = _request.build(lengths, groups=groups, dp=8, groups_on_rank=True)
    assert req.batching.groups_on_rank
    for equal in (False, True):
        plan = client.plan(lengths, groups=groups, dp=8, max_tokens=16384, mini_batches=2,
                           groups_on_rank=True, equal_count=equal, seed=5)
        owner = {}
        for rank in plan:
            per_mini = [len(set(groups[m.seqs].tolist())) for m in rank.mini_batches]
            if equal:
                assert per_mini == [6, 6]
            for g in set(groups[rank.seqs].tolist()):
                assert owner.setdefault(g, rank.dp_rank) == rank.dp_rank
        assert len(owner) == 96
        assert len({len(rank) for rank in plan}) == 1  # equal micro-batch counts
        assert max(mb.padded_tokens for mb in plan.micro_batches) <= 16384
        assert plan.dp_imbalance < 1.05
    with pytest.raises(packd.InvalidArgument, match="batching.groups_on_rank: set, but groups is empty"):
        client.plan(lengths, dp=8, groups_on_rank=True)
    with pytest.raises(packd.InvalidArgument, match="groups holds 96 distinct ids, fewer than"):
        client.plan(lengths, groups=groups, dp=97, groups_on_rank=True)
    with pytest.raises(packd.InvalidArgument, match="groups: 767 entries for 768 lengths"):
        client.plan(lengths, groups=groups[1:], dp=8, groups_on_rank=True)


def test_library_lookup_order(monkeypatch, tmp_path):
    from packd import _embedded

    built = Path(os.environ["PACKD_BUILD_DIR"]) / "server" / "libpackd.so"
    monkeypatch.delenv("PACKD_LIB", raising=False)
    assert _embedded.find_library() in (built, Path(_embedded.__file__).resolve().parent / "libpackd.so")
    copy = tmp_path / "libpackd-copy.so"
    copy.write_bytes(built.read_bytes())
    monkeypatch.setenv("PACKD_LIB", str(copy))
    assert _embedded.find_library() == copy
    c = packd.Client.local()
    assert str(copy) in repr(c) and c.plan([3, 4], dp=1).num_sequences == 2
    # An explicit choice that does not exist is an error naming it.
    monkeypatch.setenv("PACKD_LIB", str(tmp_path / "missing.so"))
    with pytest.raises(FileNotFoundError, match="missing.so.*PACKD_LIB"):
        packd.Client.local()
    assert _embedded.find_library(built) == built
