"""packd.roll called the way ROLL's pipelines, workers and strategies call
roll.utils.dynamic_batching, roll.utils.functionals and
roll.utils.sequence_packing: a new DataProto and ROLL's metrics from
dynamic_batching_shard (the input untouched), one boundary list in
meta_info that every rank's shard obeys, ROLL's mini-batch and micro-batch
iterators, batch_balance in place, the load-balance sequence packer, and
patch() against real modules. Quality: never more micro-batches nor more
padded tokens than ROLL's own greedy cut of the same shape."""

import logging
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

import packd  # noqa: E402
from packd import roll  # noqa: E402
from trainer_data import DataProtoLike, forget_package, installed_fake_package  # noqa: E402


@pytest.fixture(scope="module")
def client():
    return packd.Client.local()


def proto_of(lengths, width=None, extra=True):
    lengths = np.asarray(lengths, dtype=np.int64)
    n = lengths.size
    width = width or int(lengths.max(initial=1))
    mask = (torch.arange(width) < torch.from_numpy(lengths)[:, None]).int()
    ids = torch.arange(n).unsqueeze(1).expand(n, width).contiguous()
    tensors = {"input_ids": ids, "attention_mask": mask}
    if extra:
        tensors["position_ids"] = torch.arange(width).expand(n, width).contiguous()
    non = {"tag": np.array([f"s{i}" for i in range(n)], dtype=object)}
    return DataProtoLike.from_dict(tensors, non, meta_info={"global_step": 3})


def roll_greedy(lengths, dp, cap, rnd):
    """ROLL's cut of the sorted stride, written from its description: slot
    widths are the widest row of the slot rounded up, a micro-batch grows
    while rows x running widest <= cap. Returns (count, padded tokens per
    rank)."""
    s = sorted(lengths)
    slots = len(s) // dp
    width = [-(-max(s[q * dp : q * dp + dp]) // rnd) * rnd for q in range(slots)]
    cuts, cur, w = [], 0, 0
    for q in range(slots):
        nw = max(w, width[q])
        if cur and (cur + 1) * nw > cap:
            cuts.append(cur * w)
            cur, w = 0, 0
            nw = width[q]
        cur, w = cur + 1, nw
    cuts.append(cur * w)
    return len(cuts), sum(cuts)


def check_shape(lengths, batch, dp, cap, rnd):
    """Every rank's shard (the r-th equal chunk of the returned batch) obeys
    the one boundary list: contiguous [start, end) rows, each micro-batch's
    rows at most its width, rows x width under the cap."""
    meta = batch.meta_info
    n = len(lengths)
    s = n // dp
    rows = batch.batch["input_ids"][:, 0].numpy()
    assert sorted(rows.tolist()) == list(range(n)), "every sequence once"
    ind, wid = meta["global_micro_batch_indices"], meta["global_micro_batch_lengths"]
    assert meta["num_micro_batchs"] == len(ind) == len(wid)
    assert ind[0][0] == 0 and ind[-1][1] == s and all(a[1] == b[0] for a, b in zip(ind, ind[1:]))
    for r in range(dp):
        shard = rows[r * s : (r + 1) * s]
        for (a, b), w in zip(ind, wid):
            assert w % rnd == 0 and (b - a) * w <= cap
            assert max(lengths[i] for i in shard[a:b]) <= w
    return sum((b - a) * w for (a, b), w in zip(ind, wid))


def test_rolls_worked_example(client):
    """ROLL's own unit example: lengths [2,4,7,6,3,4], dp 2, cap 20, round 2."""
    data = proto_of([2, 4, 7, 6, 3, 4], width=20)
    before = data.batch["input_ids"].clone()
    out, metrics = roll.dynamic_batching_shard(data, 2, 20, 2, 1, None, "train", client=client)
    assert out is not data and out.meta_info is not data.meta_info
    assert torch.equal(data.batch["input_ids"], before) and data.meta_info == {"global_step": 3}, "input untouched"
    assert out.meta_info["global_micro_batch_indices"] == [[0, 2], [2, 3]]
    assert out.meta_info["global_micro_batch_lengths"] == [4, 8]
    assert out.meta_info["micro_batch_indices"] == [[0, 2], [2, 3]] and out.meta_info["global_step"] == 3
    assert list(out.non_tensor_batch["tag"]) == [f"s{i}" for i in out.batch["input_ids"][:, 0].tolist()]
    assert metrics == {
        "dynamic_batching/train/valid_tokens": 26,
        "dynamic_batching/train/actual_tokens_origin": 120,
        "dynamic_batching/train/actual_tokens": 32,
        "dynamic_batching/train/removed_padding_tokens": 88,
        "dynamic_batching/train/removed_padding_ratio": 88 / 120,
    }
    # The worker's side: rank 0's shard, one micro-batch per step. The
    # slices share meta_info with the shard (ROLL's), so iterate lazily.
    shard = out.slice(0, 3)
    minis = roll.make_mini_batch_iter_for_dynamic_batching(shard, 1, 1)
    mini = next(minis)
    assert mini.meta_info["num_micro_batchs"] == 1 and mini.meta_info["micro_batch_indices"] == [[0, 2]]
    micro = next(roll.make_micro_batch_iter_for_dynamic_batching(mini))
    assert tuple(micro.batch["input_ids"].shape) == (2, 4)
    mini = next(minis)
    assert mini.meta_info["micro_batch_lengths"] == [8] and len(list(minis)) == 0


def test_mini_batch_iterator_tolerates_a_short_last_group(client):
    data = proto_of(np.random.default_rng(1).integers(100, 2000, size=64), width=2048)
    out, _ = roll.dynamic_batching_shard(data, 4, 4096, 64, client=client)
    shard = out.slice(0, 16)
    count = out.meta_info["num_micro_batchs"]
    ga = count - 1 if count > 2 else 2
    seen, steps = [], 0
    for mini in roll.make_mini_batch_iter_for_dynamic_batching(shard, 2, ga):
        steps += 1
        if steps > -(-count // ga):
            continue  # the second epoch repeats the first
        for micro in roll.make_micro_batch_iter_for_dynamic_batching(mini):
            ids = micro.batch["input_ids"]
            assert ids.shape[1] == micro.batch["position_ids"].shape[1] and ids.shape[1] % 64 == 0
            seen += ids[:, 0].tolist()
    assert steps == 2 * -(-count // ga)
    assert seen == out.batch["input_ids"][:16, 0].tolist()


@pytest.mark.parametrize("dp,cap,rnd", [(2, 4096, 64), (4, 8192, 128), (8, 16384, 128)])
def test_shape_cap_and_at_least_rolls_quality(client, dp, cap, rnd):
    rng = np.random.default_rng(dp)
    for _ in range(4):
        n = dp * int(rng.integers(4, 40))
        lengths = np.minimum(rng.lognormal(np.log(1200), 1.0, size=n).astype(np.int64) + 16, cap)
        out, metrics = roll.dynamic_batching_shard(proto_of(lengths), dp, cap, rnd, client=client)
        padded = check_shape(lengths, out, dp, cap, rnd)
        count, roll_padded = roll_greedy(lengths.tolist(), dp, cap, rnd)
        assert out.meta_info["num_micro_batchs"] <= count
        if out.meta_info["num_micro_batchs"] == count:
            assert padded <= roll_padded
        assert metrics["dynamic_batching/actual_tokens"] == padded * dp


def test_pp_with_vpp_rounds_the_count(client):
    rng = np.random.default_rng(42)
    lengths = rng.integers(128, 8192, size=256)
    out, _ = roll.dynamic_batching_shard(proto_of(lengths), 4, 8192, 128, pipeline_model_parallel_size=4,
                                         virtual_pipeline_model_parallel_size=2, client=client)
    assert out.meta_info["num_micro_batchs"] % 4 == 0
    check_shape(lengths, out, 4, 8192, 128)


def test_sequence_over_the_cap_is_refused(client):
    with pytest.raises(packd.FailedPrecondition, match="lengths"):
        roll.dynamic_batching_shard(proto_of([10, 5000, 20, 30]), 2, 4096, 16, client=client)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.lists(st.integers(1, 60), min_size=1, max_size=48), st.integers(60, 200),
       st.sampled_from([1, 2, 8]))
def test_shape_properties(dp, lengths, cap, rnd):
    assume(len(lengths) % dp == 0 and -(-max(lengths) // rnd) * rnd <= cap)
    out, _ = roll.dynamic_batching_shard(proto_of(lengths), dp, cap, rnd, client=packd.Client.local())
    padded = check_shape(lengths, out, dp, cap, rnd)
    count, roll_padded = roll_greedy(lengths, dp, cap, rnd)
    assert out.meta_info["num_micro_batchs"] <= count
    assert out.meta_info["num_micro_batchs"] < count or padded <= roll_padded


def test_batch_balance_in_place(client):
    rng = np.random.default_rng(7)
    lengths = rng.integers(10, 3000, size=64)
    data = proto_of(lengths)
    metrics = roll.batch_balance(data, dp_size=4, minibatch_size=len(data), client=client)
    rows = data.batch["input_ids"][:, 0].numpy()
    assert sorted(rows.tolist()) == list(range(64)) and list(data.non_tensor_batch["tag"]) == [f"s{i}" for i in rows]
    sums = [int(lengths[rows[r * 16 : (r + 1) * 16]].sum()) for r in range(4)]
    assert metrics["global_seqlen/balanced_max"] == max(sums) and metrics["global_seqlen/max"] >= max(sums)


def test_sequence_packing_partitions_keep_the_padded_cap(client):
    rng = np.random.default_rng(8)
    lengths = rng.integers(100, 2048, size=40)
    for cp, tp, vp in [(1, 1, 1), (2, 2, 1), (1, 4, 2)]:
        pad = roll.sequence_packing_pad_factor(cp, tp)
        assert pad == {(1, 1): 16, (2, 2): 16, (1, 4): 16}[(cp, tp)] and pad % 16 == 0
        parts = roll.sequence_packing_partitions(lengths, 4096, pad, 1, vp, client=client)
        assert sorted(i for p in parts for i in p) == list(range(40))
        assert all(sum(-(-int(lengths[i]) // pad) * pad for i in p) <= 4096 for p in parts)
        assert len(parts) % vp == 0
    assert roll.sequence_packing_pad_factor(4, 8) == 64


FAKE_ROLL = {
    "roll/__init__.py": "",
    "roll/utils/__init__.py": "",
    "roll/utils/dynamic_batching.py": """
        def dynamic_batching_shard(*a, **k): return 'roll'
        def make_mini_batch_iter_for_dynamic_batching(*a, **k): return 'roll'
        def make_micro_batch_iter_for_dynamic_batching(*a, **k): return 'roll'
    """,
    "roll/utils/functionals.py": """
        def batch_balance(*a, **k): return 'roll'
        def get_seqlen_balanced_partitions(*a, **k): return 'roll'
    """,
    "roll/utils/sequence_packing.py": """
        from dataclasses import dataclass
        @dataclass
        class SequencePackingConfig:
            algorithm: str = 'load_balance'
            max_packed_sequence_length_forward: int = None
            max_packed_sequence_length_train: int = None
            min_num_micro_batches_forward: int = 1
            min_num_micro_batches_train: int = 1
        class LoadBalancePacker:
            def __init__(self, config=None): self.config = config or SequencePackingConfig()
            def make_micro_batch_iter_for_sequence_packing(self, *a, **k): return 'roll'
        def get_sequence_packing_packer(config=None): return LoadBalancePacker(config)
    """,
    "roll/pipeline/__init__.py": "",
    "roll/pipeline/rlvr.py": """
        from roll.utils.dynamic_batching import dynamic_batching_shard
        from roll.utils.functionals import batch_balance
    """,
}


@pytest.fixture
def fake_roll(tmp_path, monkeypatch):
    top = installed_fake_package(tmp_path, FAKE_ROLL, monkeypatch)
    yield tmp_path
    forget_package(top)


def test_patch_replaces_rolls_functions_and_packer(fake_roll, caplog):
    import importlib

    pipeline = importlib.import_module("roll.pipeline.rlvr")
    packing = importlib.import_module("roll.utils.sequence_packing")
    with caplog.at_level(logging.INFO, logger="packd"):
        handle = roll.patch()
        assert roll.patch() is handle
    assert sum("replaced" in r.getMessage() for r in caplog.records) == 1
    assert pipeline.dynamic_batching_shard is roll.dynamic_batching_shard
    assert pipeline.batch_balance is roll.batch_balance
    packer = packing.get_sequence_packing_packer(packing.SequencePackingConfig(max_packed_sequence_length_train=512))
    assert isinstance(packer, packing.LoadBalancePacker) and type(packer).__module__ == "packd.roll"
    lengths = np.array([300, 200, 100, 250, 60, 10])
    mini = proto_of(lengths)
    micro = list(packer.make_micro_batch_iter_for_sequence_packing(mini, 1, 1, 1, is_train=True))
    parts = mini.meta_info["partition_indices_list"]
    assert [m.meta_info["partition_indices"] for m in micro] == parts
    assert all(m.meta_info["num_micro_batchs"] == len(parts) for m in micro)
    assert all(sum(-(-int(lengths[i]) // 16) * 16 for i in p) <= 512 for p in parts)
    handle.undo()
    assert pipeline.dynamic_batching_shard() == "roll"
    assert packing.get_sequence_packing_packer().make_micro_batch_iter_for_sequence_packing() == "roll"
