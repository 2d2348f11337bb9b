"""verl's PyPI release (requirements-verl.txt) calling packd: every engine
call through verl.workers.engine.utils.prepare_micro_batches (padded and
jagged batches, force_group_size) and the trainers' balancing
(RayPPOTrainer._balance_batch with keep_minibatch and PrefixGrouper, the v1
trainer's _balance_batch, the SFT trainer's balancing) run verl's own code
unchanged, with packd.verl.patch() applied."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import packd
import verl
from verl import DataProto
from verl.trainer import sft_trainer_ray
from verl.trainer.ppo import ray_trainer
from verl.trainer.ppo.v1 import trainer_base
from verl.utils import seqlen_balancing as sb
from verl.utils import tensordict_utils as tu
from verl.utils.transferqueue_utils import KVBatchMeta
from verl.workers.engine import utils as engine_utils

CAP = 300


def devices():
    """The devices a tensor test runs on: the host, and the GPU where there
    is one (a CPU-only machine runs the host case only)."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _batch(lengths, device, *, jagged, group=1, cap=CAP):
    """An engine batch as verl's workers build it: no-padding (nested
    input_ids, jagged layout, no attention_mask) or padded."""
    lengths = [int(n) for n in lengths]
    if jagged:
        ids = torch.nested.as_nested_tensor(
            [torch.arange(n, device=device) + 1000 * i for i, n in enumerate(lengths)], layout=torch.jagged
        )
        td = TensorDict({"input_ids": ids}, batch_size=[len(lengths)])
    else:
        width = max(lengths)
        mask = (torch.arange(width, device=device)[None, :] < torch.tensor(lengths, device=device)[:, None]).long()
        ids = torch.arange(len(lengths) * width, device=device).view(len(lengths), width)
        td = TensorDict({"input_ids": ids, "attention_mask": mask}, batch_size=[len(lengths)])
    tu.assign_non_tensor_data(td, "use_dynamic_bsz", True)
    tu.assign_non_tensor_data(td, "sp_size", 1)
    tu.assign_non_tensor_data(td, "force_group_size", group)
    tu.assign_non_tensor_data(td, "max_token_len_per_gpu", cap)
    return td


def _row_lengths(mb):
    ids = mb["input_ids"]
    if ids.is_nested:
        return ids.offsets().diff().tolist()
    return mb["attention_mask"].sum(-1).tolist()


def test_patch_reaches_every_module_that_imported_a_name(patched_verl):
    replaced = set(patched_verl.replaced)
    for name in ("calculate_workload", "ceildiv", "get_seqlen_balanced_partitions", "get_group_balanced_partitions",
                 "rearrange_micro_batches", "prepare_dynamic_batch", "restore_dynamic_batch", "log_seqlen_unbalance"):
        assert f"verl.utils.seqlen_balancing.{name}" in replaced
    assert patched_verl.skipped == []
    assert engine_utils.rearrange_micro_batches is packd.verl.rearrange_micro_batches
    assert engine_utils.restore_dynamic_batch is packd.verl.restore_dynamic_batch
    for mod in (ray_trainer, trainer_base, sft_trainer_ray):
        assert mod.get_seqlen_balanced_partitions is packd.verl.get_seqlen_balanced_partitions
        assert mod.calculate_workload is packd.verl.calculate_workload


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("jagged", [True, False], ids=["jagged", "padded"])
@pytest.mark.parametrize("group", [1, 2, 4])
def test_engine_prepare_micro_batches(patched_verl, device, jagged, group):
    """The engines' one entry point, on the device the batch came on: every
    sample once, forced groups whole, the cap held, the count the least
    that fits, and verl's restore puts outputs back in order."""
    rng = np.random.default_rng(100 * group + jagged)
    for _ in range(20):
        lengths = rng.integers(1, CAP // group + 1, size=group * int(rng.integers(3, 12)))
        td = _batch(lengths, device, jagged=jagged, group=group)
        micro, idx = engine_utils.prepare_micro_batches(td)
        assert sorted(i for part in idx for i in part) == list(range(lengths.size))
        where = {i: j for j, part in enumerate(idx) for i in part}
        for g in range(0, lengths.size, group):
            assert len({where[i] for i in range(g, g + group)}) == 1, "a forced group was split"
        sums = [int(lengths[part].sum()) for part in idx]
        assert max(sums) <= CAP
        assert len(idx) <= lengths.size // group
        for mb, part in zip(micro, idx):
            assert mb["input_ids"].device.type == device
            assert mb["input_ids"].is_nested == jagged
            if jagged:
                assert mb["input_ids"].layout == torch.jagged
            assert _row_lengths(mb) == lengths[part].tolist()
        # The engine's outputs, per micro-batch, back in input order.
        out = torch.cat([mb["input_ids"].values() if jagged else mb["input_ids"][:, 0] for mb in micro])
        if not jagged:
            back = engine_utils.restore_dynamic_batch(out, idx)
            assert torch.equal(back, td["input_ids"][:, 0])
        else:
            rows = [t for mb in micro for t in mb["input_ids"].unbind()]
            back = engine_utils.restore_dynamic_batch(torch.nested.as_nested_tensor(rows, layout=torch.jagged), idx)
            assert back.is_nested and back.device.type == device
            for a, b in zip(back.unbind(), td["input_ids"].unbind()):
                assert torch.equal(a, b)


def test_force_group_size_errors_are_verls_types(patched_verl):
    td = _batch([10, 20, 30], "cpu", jagged=True, group=2)
    with pytest.raises(AssertionError, match="not a multiple of 2") as info:
        engine_utils.prepare_micro_batches(td)
    assert isinstance(info.value, packd.FailedPrecondition) and isinstance(info.value, ValueError)
    with pytest.raises(AssertionError, match=r"lengths\[1\]"):
        engine_utils.prepare_micro_batches(_batch([10, 400], "cpu", jagged=True))
    with pytest.raises(ValueError, match="k_partitions=3"):
        sb.get_seqlen_balanced_partitions([1, 2], 3, False)


def test_forced_group_over_the_cap_gets_a_micro_batch_of_its_own(patched_verl):
    lengths = np.array([50, 60, 200, 150, 40, 45, 100, 110])  # group 1 holds 350 > 300
    micro, idx = engine_utils.prepare_micro_batches(_batch(lengths, "cpu", jagged=False, group=2))
    assert [2, 3] in idx
    assert all(int(lengths[p].sum()) <= CAP for p in idx if p != [2, 3])


def test_int64_workloads():
    lengths = torch.tensor([100_000, 3], dtype=torch.int32)
    w = packd.verl.calculate_workload(lengths)
    assert w.dtype == torch.int64 and w.tolist() == [24576 * 100_000 + 100_000**2, 24576 * 3 + 9]
    assert packd.verl.calculate_workload(np.array([100_000], dtype=np.int32)).tolist() == [w.tolist()[0]]
    assert packd.verl.ceildiv(7, 3) == sb.ceildiv(7, 3) == 3


class _WorkerGroup:
    def __init__(self, dp):
        self._dispatch_info = {"actor": list(range(dp))}


def _ppo_trainer(dp, *, mini=None, prefix=False):
    from omegaconf import OmegaConf

    t = object.__new__(ray_trainer.RayPPOTrainer)
    t.config = OmegaConf.create({"actor_rollout_ref": {"actor": {"ppo_mini_batch_size": mini or 0}}})
    t.use_prefix_grouper = prefix
    t.actor_rollout_wg = _WorkerGroup(dp)
    t._get_dp_size = lambda wg, role: dp
    return t


def _ppo_batch(rng, n, uid_size=None):
    lengths = rng.integers(1, 200, size=n)
    mask = (torch.arange(200)[None, :] < torch.from_numpy(lengths)[:, None]).long()
    data = DataProto.from_dict({"attention_mask": mask, "row": torch.arange(n)})
    if uid_size:
        data.non_tensor_batch["uid"] = np.array([f"p{i // uid_size}" for i in range(n)], dtype=object)
    return data, lengths


@pytest.mark.parametrize("keep_minibatch", [False, True])
def test_ray_trainer_balance_batch(patched_verl, keep_minibatch):
    """RayPPOTrainer._balance_batch, verl's code, with packd's functions:
    the batch is reordered so that the dispatcher's equal chunks are
    balanced (per mini-batch with keep_minibatch), and verl's metrics."""
    rng = np.random.default_rng(7)
    dp, mini = 4, 32
    for _ in range(5):
        data, lengths = _ppo_batch(rng, 128)
        metrics = {}
        _ppo_trainer(dp, mini=mini).__class__._balance_batch(
            _ppo_trainer(dp, mini=mini), data, metrics, keep_minibatch=keep_minibatch
        )
        order = data.batch["row"].numpy()
        assert sorted(order.tolist()) == list(range(128))
        chunks = np.split(order, dp)
        w = 24576 * lengths + lengths.astype(np.int64) ** 2
        loads = [w[c].sum() for c in chunks]
        assert max(loads) <= 1.05 * w.sum() / dp
        if keep_minibatch:
            # Every rank holds an equal share of every mini-batch, so each
            # mini-batch is balanced over the ranks on its own.
            for c in chunks:
                assert np.bincount(c // mini, minlength=128 // mini).tolist() == [mini // dp] * (128 // mini)
        assert metrics["global_seqlen/balanced_max"] >= metrics["global_seqlen/balanced_min"]


def test_ray_trainer_prefix_grouper_deals_whole_groups_equally(patched_verl):
    rng = np.random.default_rng(8)
    dp, n_per = 4, 4
    for _ in range(10):
        data, _ = _ppo_batch(rng, 16 * n_per, uid_size=n_per)
        trainer = _ppo_trainer(dp, prefix=True)
        ray_trainer.RayPPOTrainer._balance_batch(trainer, data, {})
        uids = data.non_tensor_batch["uid"]
        for chunk in np.split(np.arange(len(uids)), dp):
            groups = set(uids[chunk])
            assert len(groups) == 16 // dp, "every rank gets the same number of groups"
            assert all((uids == g).sum() == n_per and set(np.flatnonzero(uids == g)) <= set(chunk) for g in groups)
    data, _ = _ppo_batch(rng, 10 * n_per, uid_size=n_per)
    with pytest.raises(ValueError, match="num_uid_groups"):
        ray_trainer.RayPPOTrainer._balance_batch(_ppo_trainer(dp, prefix=True), data, {})


def test_v1_trainer_balance_batch(patched_verl):
    """trainer v1 balances a KVBatchMeta by its tags' seq_len."""
    from omegaconf import OmegaConf

    rng = np.random.default_rng(9)
    dp = 4
    cls = vars(trainer_base)[_v1_class_name()]
    # The class is abstract (its hooks are a subclass's): its methods run
    # on a plain object holding what they read.
    t = SimpleNamespace()
    t._get_required_batch_multiple = lambda dp_size: cls._get_required_batch_multiple(t, dp_size)
    t.actor_rollout_wg = _WorkerGroup(dp)
    t.use_critic = False
    t.global_steps = 1
    t.config = OmegaConf.create(
        {"trainer": {"critic_warmup": 0}, "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 8},
                                                                "rollout": {"n": 1}}}
    )
    t.tokenizer = type("Tok", (), {"eos_token_id": 2})()
    lengths = rng.integers(1, 4000, size=64)
    batch = KVBatchMeta(keys=[f"k{i}" for i in range(64)], tags=[{"seq_len": int(n)} for n in lengths],
                        partition_id="train")
    metrics = {}
    out = cls._balance_batch(t, batch, metrics)
    got = np.array([tag["seq_len"] for tag in out.tags])
    assert sorted(got.tolist()) == sorted(lengths.tolist())
    w = 24576 * got.astype(np.int64) + got.astype(np.int64) ** 2
    assert max(c.sum() for c in np.split(w, dp)) <= 1.05 * w.sum() / dp
    assert "global_seqlen/balanced_max" in metrics


def _v1_class_name():
    for name, obj in vars(trainer_base).items():
        if isinstance(obj, type) and "_balance_batch" in vars(obj):
            return name
    raise AssertionError("verl's v1 trainer has no _balance_batch")


def test_sft_trainer_balancing(patched_verl):
    """The SFT trainer's balancing, as its fit() loop runs it: float
    workloads of nested input_ids, partitions sorted by them, and
    tensordict_utils.index_select_tensor_dict."""
    rng = np.random.default_rng(10)
    lengths = rng.integers(1, 3000, size=32)
    data = _batch(lengths, "cpu", jagged=True)
    dp = 4
    seqlens = torch.Tensor([item.size()[0] for item in data["input_ids"]])
    seqlens = sft_trainer_ray.calculate_workload(seqlens)
    parts = sft_trainer_ray.get_seqlen_balanced_partitions(seqlens, k_partitions=dp, equal_size=True)
    for i, p in enumerate(parts):
        p.sort(key=lambda x: (seqlens[x], x))
        parts[i] = p[::2] + p[1::2][::-1]
    idx = torch.tensor([j for p in parts for j in p])
    out = tu.index_select_tensor_dict(data, idx)
    assert out["input_ids"].offsets().diff().tolist() == lengths[idx.numpy()].tolist()
    assert max(float(seqlens[p].sum()) for p in parts) <= 1.05 * float(seqlens.sum()) / dp
    assert all(len(p) == 8 for p in parts)


def test_release_version():
    assert verl.__version__ == "0.9.1"
