"""packd.verl called the way verl's own modules call
verl.utils.seqlen_balancing: the actors and critics (prepare_dynamic_batch,
restore_dynamic_batch on a DataProto), the engines (rearrange_micro_batches
on a no-padding batch with nested input_ids and no attention_mask), the
reward model (tensors that are not on the host), the trainer
(get_seqlen_balanced_partitions on workloads, log_seqlen_unbalance, the
PrefixGrouper's get_group_balanced_partitions), a two-process gloo
dp_group, and patch() against real modules that import the functions by
name."""

import logging
import os
import re
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
from packd import verl  # noqa: E402
from trainer_data import (  # noqa: E402
    DataProtoLike,
    TensorDictLike,
    forget_package,
    installed_fake_package,
    kk_partition,
    padded_batch,
)


@pytest.fixture(scope="module")
def client():
    return packd.Client.local()


def test_actor_prepare_and_restore_on_a_dataproto(client):
    rng = np.random.default_rng(1)
    lengths = rng.integers(20, 120, size=33)
    tensors = padded_batch(rng, lengths)
    uid = np.array([f"u{i // 4}" for i in range(33)], dtype=object)
    data = DataProtoLike.from_dict(tensors, {"uid": uid}, meta_info={"temperature": 1.0, "nested": {"a": [1]}})
    # dp_actor.compute_log_prob: prepare_dynamic_batch(data, max_token_len=...)
    micro, idx_list = verl.prepare_dynamic_batch(data, max_token_len=300, client=client)
    assert sorted(i for mb in idx_list for i in mb) == list(range(33))
    for mb, idx in zip(micro, idx_list):
        assert isinstance(mb, DataProtoLike)
        assert torch.equal(mb.batch["input_ids"], tensors["input_ids"][idx])
        assert list(mb.non_tensor_batch["uid"]) == list(uid[idx])
        assert mb.meta_info == data.meta_info and mb.meta_info["nested"] is not data.meta_info["nested"]
        assert int(mb.batch["attention_mask"].sum()) <= 300
    # ... the model's per-token outputs, concatenated over micro-batches ...
    out = torch.cat([mb.batch["input_ids"].float() * 2 for mb in micro])
    restored = verl.restore_dynamic_batch(out, idx_list)
    assert torch.equal(restored, tensors["input_ids"].float() * 2)


def test_plain_dict_batch(client):
    rng = np.random.default_rng(2)
    tensors = padded_batch(rng, rng.integers(1, 50, size=12))
    micro, idx_list = verl.prepare_dynamic_batch(tensors, 100, client=client)
    assert all(type(mb) is dict and set(mb) == {"input_ids", "attention_mask"} for mb in micro)
    for mb, idx in zip(micro, idx_list):
        assert torch.equal(mb["attention_mask"], tensors["attention_mask"][idx])


def test_engine_no_padding_batch_with_nested_input_ids(client):
    """The engine path: a TensorDict whose input_ids are nested (one row per
    sequence, no padding) and that has no attention_mask."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 90, size=21)
    ids = torch.nested.nested_tensor([torch.full((int(n),), i) for i, n in enumerate(lengths)])
    td = TensorDictLike({"input_ids": ids, "responses": torch.arange(21)}, [21])
    micro, idx_list = verl.rearrange_micro_batches(td, 200, None, None, True, None, True, client=client)
    assert sorted(i for mb in idx_list for i in mb) == list(range(21))
    for mb, idx in zip(micro, idx_list):
        rows = mb["input_ids"].unbind()
        assert [int(r[0]) for r in rows] == idx and [r.numel() for r in rows] == [int(lengths[i]) for i in idx]
        assert sum(r.numel() for r in rows) <= 200
        assert torch.equal(mb["responses"], torch.tensor(idx))
    # The engine restores nested model outputs with restore_dynamic_batch.
    flat = torch.nested.nested_tensor([r for mb in micro for r in mb["input_ids"].unbind()])
    back = verl.restore_dynamic_batch(flat, idx_list).unbind()
    assert [int(r[0]) for r in back] == list(range(21))


def test_reward_model_tensors_stay_on_their_device(client):
    """The reward model passes tensors that live on the accelerator. Only
    the lengths travel to the host; the rows are selected where they are
    (the meta device stands in for a GPU here) and restore keeps them there."""
    rng = np.random.default_rng(4)
    tensors = padded_batch(rng, rng.integers(10, 60, size=16))
    td = TensorDictLike({"attention_mask": tensors["attention_mask"],
                         "input_ids": torch.empty(16, tensors["input_ids"].shape[1], device="meta")}, [16])
    micro, idx_list = verl.rearrange_micro_batches(batch=td, max_token_len=128, client=client)
    assert all(mb["input_ids"].device.type == "meta" and mb["input_ids"].shape[0] == len(i)
               for mb, i in zip(micro, idx_list))
    out = torch.cat([mb["input_ids"][:, 0] for mb in micro])
    assert verl.restore_dynamic_batch(out, idx_list).device.type == "meta"
    with pytest.raises(ValueError, match="meta device"):
        verl.rearrange_micro_batches({"attention_mask": torch.ones(4, 8, device="meta")}, 128, client=client)


def test_missing_mask_names_the_keys(client):
    with pytest.raises(ValueError, match=r"attention_mask.*\['input_ids'\]"):
        verl.rearrange_micro_batches({"input_ids": torch.ones(3, 4)}, 100, client=client)


def test_trainer_partitions_on_workloads(client):
    """RayPPOTrainer._balance_batch: workloads (a tensor) into dp_size equal
    partitions, sorted, as balanced as Karmarkar-Karp or better."""
    rng = np.random.default_rng(5)
    for k in (2, 4, 8):
        lengths = torch.from_numpy(rng.integers(64, 16384, size=k * 16))
        w = verl.calculate_workload(lengths)
        parts = verl.get_seqlen_balanced_partitions(w, k_partitions=k, equal_size=True, client=client)
        assert len(parts) == k and all(p == sorted(p) and len(p) == 16 for p in parts)
        assert sorted(i for p in parts for i in p) == list(range(k * 16))
        sums = [int(w[p].sum()) for p in parts]
        ref = [int(w[p].sum()) for p in kk_partition(w.tolist(), k)]
        assert max(sums) <= max(ref) * (1 + 1e-5)


def test_partitions_of_huge_values_and_too_few_items(client):
    values = [6e9, 5e9, 4e9, 3e9, 2e9, 1e9]  # above the planner's uint32 lengths
    parts = verl.get_seqlen_balanced_partitions(values, 2, equal_size=True, client=client)
    assert sorted(sum(values[i] for i in p) for p in parts) == [1.0e10, 1.1e10]  # 21e9 is odd: no tie
    with pytest.raises(ValueError, match="k_partitions=4"):
        verl.get_seqlen_balanced_partitions([1, 2, 3], 4, False, client=client)
    with pytest.raises(ValueError, match=r"seqlen_list\[1\]"):
        verl.get_seqlen_balanced_partitions([1, float("nan"), 3], 2, False, client=client)
    # No partition is left empty, even with zero-valued items.
    parts = verl.get_seqlen_balanced_partitions([0, 0, 0, 9], 3, False, client=client)
    assert all(parts) and sorted(i for p in parts for i in p) == [0, 1, 2, 3]


def test_log_seqlen_unbalance_reports_the_spread_before_balancing():
    lengths = [10, 10, 1, 1]
    m = verl.log_seqlen_unbalance(lengths, [[0, 2], [1, 3]], "global_seqlen")
    assert m == {"global_seqlen/min": 2, "global_seqlen/max": 20, "global_seqlen/minmax_diff": 18,
                 "global_seqlen/balanced_min": 11, "global_seqlen/balanced_max": 11, "global_seqlen/mean": 11.0}


def grpo_batch(rng, groups, size):
    lengths = np.minimum(rng.lognormal(np.log(1200), 1.0, size=groups * size).astype(np.int64) + 64, 16384)
    uids = np.repeat([f"prompt-{g}" for g in range(groups)], size)
    return lengths, uids


@pytest.mark.parametrize("size", [4, 8, 16])
@pytest.mark.parametrize("k", [2, 4, 8])
def test_group_partitions_keep_uids_together_and_balance(client, k, size):
    rng = np.random.default_rng(k * 100 + size)
    lengths, uids = grpo_batch(rng, 4 * k, size)
    parts = verl.get_group_balanced_partitions(lengths.tolist(), list(uids), k, client=client)
    assert sorted(i for p in parts for i in p) == list(range(lengths.size))
    for p in parts:
        assert len(p) == lengths.size // k
        for u in set(uids[p]):
            assert set(np.flatnonzero(uids == u)) <= set(p), "a uid group split over ranks"
    w = verl.calculate_workload(lengths.astype(np.float64))
    gw = [float(w[uids == f"prompt-{g}"].sum()) for g in range(4 * k)]
    ref = max(sum(gw[g] for g in part) for part in kk_partition(gw, k))
    assert max(float(w[p].sum()) for p in parts) <= ref * (1 + 1e-9)


def test_group_partitions_group_equal_uids_anywhere(client):
    parts = verl.get_group_balanced_partitions([5, 7, 5, 7], ["a", "b", "a", "b"], 2, client=client)
    assert sorted(parts) == [[0, 2], [1, 3]]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=1, max_size=60), st.integers(300, 1200),
       st.sampled_from([None, 2, 3]), st.sampled_from([None, 1, 4]), st.booleans())
def test_rearrange_properties(lengths, cap, divided, min_mb, balance):
    assume(len(lengths) >= verl.roundup_divisible(min_mb or 1, divided or 1))  # verl asserts the same
    client = packd.Client.local()
    try:
        micro, idx = verl.rearrange_micro_batches(np.array(lengths), cap, num_batches_divided_by=divided,
                                                  min_num_micro_batch=min_mb, use_dynamic_bsz_balance=balance,
                                                  client=client)
    except packd.FailedPrecondition as e:
        # The cap and the count multiple cannot both hold: more micro-batches
        # needed than there are sequences (verl goes over the cap instead).
        need = int(re.search(r"x (\d+) micro-batches", e.message).group(1))
        assert need > len(lengths) and divided and need % divided == 0, e.message
        return
    flat = [i for mb in idx for i in mb]
    assert sorted(flat) == list(range(len(lengths))), "every index once"
    assert all(sum(lengths[i] for i in mb) <= cap for mb in idx), "the cap holds"
    if divided:
        assert len(idx) % divided == 0
    if min_mb:
        assert len(idx) >= min_mb
    assert np.array_equal(verl.restore_dynamic_batch(np.array(flat), idx), np.arange(len(lengths)))
    rev = verl.get_reverse_idx(flat)
    assert [flat[r] for r in rev] == list(range(len(lengths)))


def _dp_worker(rank, world, init, lengths_per_rank, queue):
    sys.path.insert(0, str(REPO / "client" / "python"))
    import torch.distributed as dist

    from packd import verl as v

    dist.init_process_group("gloo", init_method=init, world_size=world, rank=rank)
    try:
        _, idx = v.rearrange_micro_batches(np.array(lengths_per_rank[rank]), 300, dp_group=dist.group.WORLD,
                                           same_micro_num_in_dp=True)
        queue.put((rank, len(idx), [sum(lengths_per_rank[rank][i] for i in mb) for mb in idx]))
    finally:
        dist.destroy_process_group()


def test_dp_group_gives_every_rank_the_largest_count(tmp_path):
    import torch.multiprocessing as mp

    rng = np.random.default_rng(6)
    lengths = [rng.integers(50, 91, size=20).tolist(), rng.integers(50, 91, size=40).tolist()]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    init = f"file://{tmp_path / 'init'}"
    procs = [ctx.Process(target=_dp_worker, args=(r, 2, init, lengths, q)) for r in range(2)]
    for p in procs:
        p.start()
    got = dict((r, (c, sums)) for r, c, sums in (q.get(timeout=120) for _ in procs))
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert got[0][0] == got[1][0], "one count on every rank"
    assert got[0][0] >= -(-sum(lengths[1]) // 300)
    assert all(s <= 300 for _, sums in got.values() for s in sums)


FAKE_VERL = {
    "verl/__init__.py": "",
    "verl/utils/__init__.py": "",
    "verl/utils/seqlen_balancing.py": """
        def get_seqlen_balanced_partitions(seqlen_list, k_partitions, equal_size): return 'verl'
        def get_group_balanced_partitions(seqlen_list, uid_list, k_partitions): return 'verl'
        def log_seqlen_unbalance(seqlen_list, partitions, prefix): return 'verl'
        def rearrange_micro_batches(batch, max_token_len, dp_group=None, num_batches_divided_by=None,
                                    same_micro_num_in_dp=True, min_num_micro_batch=None,
                                    use_dynamic_bsz_balance=True): return 'verl'
        def prepare_dynamic_batch(data, max_token_len, **kw): return rearrange_micro_batches(data, max_token_len)
        def restore_dynamic_batch(data, batch_idx_list): return 'verl'
        def get_reverse_idx(idx_map): return 'verl'
        def calculate_workload(seqlen_list): return 24576 * seqlen_list + seqlen_list ** 2
    """,
    "verl/workers/__init__.py": "",
    "verl/workers/dp_actor.py": """
        from verl.utils.seqlen_balancing import prepare_dynamic_batch, restore_dynamic_batch as restore
        def run(data): return prepare_dynamic_batch(data, max_token_len=100)
    """,
}


@pytest.fixture
def fake_verl(tmp_path, monkeypatch):
    top = installed_fake_package(tmp_path, FAKE_VERL, monkeypatch)
    yield tmp_path
    forget_package(top)


def test_patch_replaces_imported_names_logs_once_and_undoes(fake_verl, caplog):
    import importlib

    sb = importlib.import_module("verl.utils.seqlen_balancing")
    actor = importlib.import_module("verl.workers.dp_actor")  # imported before the patch
    original = sb.rearrange_micro_batches
    with caplog.at_level(logging.INFO, logger="packd"):
        handle = verl.patch()
        again = verl.patch()
    assert again is handle, "idempotent"
    assert sum("replaced" in r.getMessage() for r in caplog.records) == 1, "logged once"
    assert sb.rearrange_micro_batches is verl.rearrange_micro_batches
    assert actor.prepare_dynamic_batch is verl.prepare_dynamic_batch
    assert actor.restore is verl.restore_dynamic_batch, "found by identity under another name"
    assert "verl.workers.dp_actor.restore" in handle.replaced
    assert sb.calculate_workload is verl.calculate_workload, "the helpers feeding the plan are packd's too"
    assert handle.skipped == [
        "verl.utils.seqlen_balancing.ceildiv",
        "verl.utils.seqlen_balancing.roundup_divisible",
        "verl.utils.dynamic_cp_scheduler.get_megatron_dynamic_cp_scheduler_cls",
    ]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "ceildiv" in warned[0] and "roundup_divisible" in warned[0], "skips named once"
    mask = torch.ones(5, 30, dtype=torch.int64)
    micro, idx = actor.run({"attention_mask": mask, "input_ids": mask})
    assert sorted(i for mb in idx for i in mb) == list(range(5)) and len(idx) == 2
    handle.undo()
    assert sb.rearrange_micro_batches is original and actor.run(mask) == "verl"
    assert verl.patch() is not handle, "a new patch after undo"
    verl.patch().undo()


def test_patch_takes_what_an_older_verl_has_and_fails_only_on_nothing(fake_verl, caplog):
    """A verl that defines only some of the functions (an older release)
    gets those replaced and the rest named in one warning; a verl with none
    of them, or none at all, fails naming what was looked for."""
    import importlib

    (fake_verl / "verl/utils/seqlen_balancing.py").write_text("def rearrange_micro_batches(): pass\n")
    with caplog.at_level(logging.INFO, logger="packd"):
        handle = verl.patch()
    try:
        sb = importlib.import_module("verl.utils.seqlen_balancing")
        assert handle.replaced == ["verl.utils.seqlen_balancing.rearrange_micro_batches"]
        assert sb.rearrange_micro_batches is verl.rearrange_micro_batches
        assert "verl.utils.seqlen_balancing.get_group_balanced_partitions" in handle.skipped
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warned) == 1 and "get_seqlen_balanced_partitions" in warned[0]
    finally:
        handle.undo()
    forget_package("verl")
    (fake_verl / "verl/utils/seqlen_balancing.py").write_text("def something_else(): pass\n")
    with pytest.raises(AttributeError, match="none of verl.utils.seqlen_balancing.calculate_workload"):
        verl.patch()
    forget_package("verl")
    (fake_verl / "verl/utils/seqlen_balancing.py").unlink()
    with pytest.raises(ImportError, match="cannot import verl.utils.seqlen_balancing"):
        verl.patch()


